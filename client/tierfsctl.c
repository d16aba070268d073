// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: watch and steer a tierfs mount from the shell.
 *
 * It talks to a mount only through what any process can use: stat, statfs,
 * /proc/self/mountinfo and the user.tierfs.* extended attributes. It links
 * neither FUSE nor the store, so it works against any daemon version that
 * speaks the xattr protocol, and it never opens a file on the mount: a
 * release on the last close may register (and so move) a buffer, which a
 * tool that only looks must not do.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "tierfs.h"

#ifndef TFS_VERSION
#define TFS_VERSION "0.1.0"
#endif

#define FUSE_SUPER_MAGIC 0x65735546
#define TIERFS_FSTYPE "fuse.tierfs"

/* Exit statuses: 0 all done, 1 something failed, 2 bad usage. */
#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* resolve_mount() result for a path that exists but is not on tierfs */
#define NOT_TIERFS 1

/* progress bar thresholds for spill/prefetch/pin/unpin */
#define PROGRESS_MIN_FILES 16
#define PROGRESS_MIN_BYTES (256ull << 20)

static const char *const tier_names[TFS_TIER_COUNT] = {
	[TFS_TIER_DEVICE] = "device",
	[TFS_TIER_HOST] = "host",
	[TFS_TIER_DISK] = "disk",
};

/* the subcommand, named in messages about an operation that failed */
static const char *cmd_name;

/* ------------------------------------------------------------------ */
/* messages */

/* "tierfsctl: what" for problems finding the things to work on */
__attribute__((format(printf, 1, 2))) static void error(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("tierfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* "tierfsctl: spill: what" for an operation on the mount that failed */
__attribute__((format(printf, 1, 2))) static void op_error(const char *fmt,
							   ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "tierfsctl: %s: ", cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		error("out of memory");
		exit(EXIT_FAIL);
	}
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		error("out of memory");
		exit(EXIT_FAIL);
	}
	return p;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(xmalloc(n), s, n);
}

__attribute__((format(printf, 1, 2))) static char *xasprintf(const char *fmt,
							      ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		error("out of memory");
		exit(EXIT_FAIL);
	}
	return s;
}

/* ------------------------------------------------------------------ */
/* numbers, sizes and times */

/* Strict: digits only, no sign, no overflow. */
static bool parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

static bool parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 86400)
		return false;
	*out = v;
	return true;
}

/* IEC units, one decimal: "512 B", "1.0 KiB", "16.0 MiB". */
static const char *fmt_bytes(char *buf, size_t len, double v)
{
	static const char *const unit[] = { "B",   "KiB", "MiB", "GiB",
					     "TiB", "PiB", "EiB" };
	unsigned int u = 0;

	if (v < 1024) {
		snprintf(buf, len, "%.0f B", v);
		return buf;
	}
	while (v >= 1024 && u < sizeof(unit) / sizeof(unit[0]) - 1) {
		v /= 1024;
		u++;
	}
	/* 1023.95 would print as "1024.0" */
	if (v >= 1023.95 && u < sizeof(unit) / sizeof(unit[0]) - 1) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

/* Local time to the second; "-" for a buffer never accessed. */
static const char *fmt_time_ns(char *buf, size_t len, uint64_t ns)
{
	time_t t = (time_t)(ns / 1000000000ull);
	struct tm tm;

	if (!ns || !localtime_r(&t, &tm) ||
	    !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "-");
	return buf;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = 1;
}

/* Sleeps @s seconds, less when SIGINT or SIGTERM arrives under --watch. */
static void sleep_s(double s)
{
	struct timespec ts = {
		.tv_sec = (time_t)s,
		.tv_nsec = (long)((s - (time_t)s) * 1e9),
	};

	while (nanosleep(&ts, &ts) && errno == EINTR && !interrupted)
		;
}

static int tier_index(const char *name, size_t len)
{
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		if (strlen(tier_names[t]) == len &&
		    !memcmp(tier_names[t], name, len))
			return t;
	return -1;
}

/* ------------------------------------------------------------------ */
/* JSON output */

static void json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	while (*p) {
		unsigned char c = *p;
		int n = 0;

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc(c, f);
			p++;
			continue;
		}
		if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\u%04x", c);
			p++;
			continue;
		}
		if (c < 0x80) {
			fputc(c, f);
			p++;
			continue;
		}
		/*
		 * File names are bytes, JSON is UTF-8: pass valid sequences
		 * through and replace each stray byte so the output always
		 * parses.
		 */
		if (c >= 0xc2 && c <= 0xdf)
			n = 1;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3;
		for (int i = 1; n && i <= n; i++)
			if ((p[i] & 0xc0) != 0x80)
				n = 0;
		if (n == 2 && ((c == 0xe0 && p[1] < 0xa0) ||
			       (c == 0xed && p[1] >= 0xa0)))
			n = 0;
		if (n == 3 && ((c == 0xf0 && p[1] < 0x90) ||
			       (c == 0xf4 && p[1] >= 0x90)))
			n = 0;
		if (!n) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		fwrite(p, 1, n + 1, f);
		p += n + 1;
	}
	fputc('"', f);
}

/* A stats value as a JSON number when it is one, else as a string. */
static void json_value(FILE *f, const char *v)
{
	uint64_t n;

	if (parse_u64(v, &n))
		fprintf(f, "%" PRIu64, n);
	else
		json_str(f, v);
}

/* ------------------------------------------------------------------ */
/* mounts */

struct mount_ent {
	char *point;
	char *root; /* the mounted subtree; "/" unless a bind mount */
	char *fstype;
	char *source;
	dev_t dev;
};

struct mount_tab {
	struct mount_ent *e;
	size_t n;
};

/* mountinfo escapes space, tab, newline and backslash as \ooo */
static void unescape_octal(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 |
				      (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = 0;
}

static void mount_tab_free(struct mount_tab *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->e[i].point);
		free(t->e[i].root);
		free(t->e[i].fstype);
		free(t->e[i].source);
	}
	free(t->e);
	t->e = NULL;
	t->n = 0;
}

/* Returns 0 or -errno. */
static int mount_tab_read(struct mount_tab *t)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;

	t->e = NULL;
	t->n = 0;
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *field[64];
		int nf = 0, dash = -1;
		unsigned int maj, min;
		char *save = NULL;
		struct mount_ent *e;

		for (char *tok = strtok_r(line, " \n", &save); tok && nf < 64;
		     tok = strtok_r(NULL, " \n", &save)) {
			if (dash < 0 && nf >= 6 && !strcmp(tok, "-"))
				dash = nf;
			field[nf++] = tok;
		}
		if (dash < 0 || nf < dash + 3 ||
		    sscanf(field[2], "%u:%u", &maj, &min) != 2)
			continue;
		t->e = xrealloc(t->e, (t->n + 1) * sizeof(*t->e));
		e = &t->e[t->n++];
		unescape_octal(field[3]);
		unescape_octal(field[4]);
		unescape_octal(field[dash + 2]);
		e->root = xstrdup(field[3]);
		e->point = xstrdup(field[4]);
		e->fstype = xstrdup(field[dash + 1]);
		e->source = xstrdup(field[dash + 2]);
		e->dev = makedev(maj, min);
	}
	free(line);
	fclose(f);
	return 0;
}

static bool path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return path[0] == '/';
	return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

static bool is_fuse_fstype(const char *fstype)
{
	return !strcmp(fstype, "fuse") || !strncmp(fstype, "fuse.", 5);
}

static bool answers_stats(const char *root)
{
	return getxattr(root, TFS_XATTR_STATS, NULL, 0) >= 0;
}

/*
 * Find the root of the tierfs mount holding @path. Returns 0 with a
 * malloc'd *root, NOT_TIERFS, or -errno when @path cannot be looked at.
 *
 * The mount is the mountinfo entry with the file's st_dev whose mount point
 * is the longest prefix of its real path (several entries share a device
 * when the mount is bound elsewhere). Its type is fuse.tierfs when the
 * daemon sets its subtype; a FUSE mount of another type still counts when
 * its root answers user.tierfs.stats, so a daemon started under another
 * name or through mount.fuse3 without a subtype is not turned away.
 */
static int resolve_mount(const char *path, char **root)
{
	struct mount_tab tab;
	struct mount_ent *best = NULL;
	struct statfs sfs;
	struct stat st;
	char *real;
	int rc;

	if (stat(path, &st) || statfs(path, &sfs))
		return -errno;
	if ((unsigned long)sfs.f_type != FUSE_SUPER_MAGIC)
		return NOT_TIERFS;
	real = realpath(path, NULL);
	if (!real)
		return -errno;
	rc = mount_tab_read(&tab);
	if (rc) {
		free(real);
		return rc;
	}
	for (size_t i = 0; i < tab.n; i++) {
		struct mount_ent *e = &tab.e[i];

		if (e->dev != st.st_dev || !path_under(real, e->point))
			continue;
		if (!best || strlen(e->point) >= strlen(best->point))
			best = e;
	}
	rc = NOT_TIERFS;
	if (best && (!strcmp(best->fstype, TIERFS_FSTYPE) ||
		     (is_fuse_fstype(best->fstype) &&
		      answers_stats(best->point)))) {
		*root = xstrdup(best->point);
		rc = 0;
	}
	mount_tab_free(&tab);
	free(real);
	return rc;
}

/* resolve_mount() with the message; false when it failed. */
static bool resolve_mount_msg(const char *path, char **root)
{
	int rc = resolve_mount(path, root);

	if (rc == NOT_TIERFS)
		error("'%s': not on a tierfs mount", path);
	else if (rc)
		error("'%s': %s", path, strerror(-rc));
	return !rc;
}

/*
 * Every fuse.tierfs mount, in mountinfo order, without duplicates of one
 * mount point (over-mounts hide the lower one). Returns the count, or -1
 * with a message.
 */
static int all_mounts(char ***out)
{
	struct mount_tab tab;
	char **v = NULL;
	int n = 0, rc;

	rc = mount_tab_read(&tab);
	if (rc) {
		error("/proc/self/mountinfo: %s", strerror(-rc));
		return -1;
	}
	for (size_t i = 0; i < tab.n; i++) {
		bool dup = false;

		if (strcmp(tab.e[i].fstype, TIERFS_FSTYPE))
			continue;
		for (int j = 0; j < n; j++)
			dup |= !strcmp(v[j], tab.e[i].point);
		if (dup)
			continue;
		v = xrealloc(v, (n + 1) * sizeof(*v));
		v[n++] = xstrdup(tab.e[i].point);
	}
	mount_tab_free(&tab);
	*out = v;
	return n;
}

static void free_strv(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* The mount named on the command line, or the only one there is. */
static char *pick_mount(const char *arg)
{
	char **v, *root = NULL;
	int n;

	if (arg)
		return resolve_mount_msg(arg, &root) ? root : NULL;
	n = all_mounts(&v);
	if (n < 0)
		return NULL;
	if (n == 0) {
		error("no tierfs mount found; name one");
	} else if (n > 1) {
		fflush(stdout);
		fprintf(stderr, "tierfsctl: %d tierfs mounts; name one of:\n",
			n);
		for (int i = 0; i < n; i++)
			fprintf(stderr, "  %s\n", v[i]);
	} else {
		root = v[0];
		v[0] = NULL;
	}
	free_strv(v, n);
	return root;
}

/* ------------------------------------------------------------------ */
/* the stats xattr */

struct kv {
	const char *key;
	const char *val;
};

struct stats {
	char *raw;
	struct kv *kv;
	size_t n;
	double at; /* CLOCK_MONOTONIC seconds when read */
};

static void stats_free(struct stats *s)
{
	free(s->raw);
	free(s->kv);
	memset(s, 0, sizeof(*s));
}

/*
 * Split "key=value\n" lines. Lines without '=' or with an empty key are
 * skipped, a repeated key keeps its last value, and nothing is assumed
 * about which keys are there: the format grows by adding keys.
 */
static void stats_parse(struct stats *s, char *raw)
{
	char *save = NULL;

	s->raw = raw;
	s->kv = NULL;
	s->n = 0;
	for (char *line = strtok_r(raw, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		size_t len = strlen(line);
		size_t i;

		if (len && line[len - 1] == '\r')
			line[len - 1] = 0;
		if (!eq || eq == line)
			continue;
		*eq = 0;
		for (i = 0; i < s->n; i++)
			if (!strcmp(s->kv[i].key, line))
				break;
		if (i == s->n) {
			s->kv = xrealloc(s->kv, (s->n + 1) * sizeof(*s->kv));
			s->n++;
		}
		s->kv[i].key = line;
		s->kv[i].val = eq + 1;
	}
}

/* Returns 0 or -errno. */
static int stats_read(const char *root, struct stats *s)
{
	ssize_t n = getxattr(root, TFS_XATTR_STATS, NULL, 0);
	char *buf;
	int err;

	for (int tries = 0; n >= 0 && tries < 8; tries++) {
		buf = xmalloc(n + 1);
		n = getxattr(root, TFS_XATTR_STATS, buf, n + 1);
		if (n >= 0) {
			buf[n] = 0;
			stats_parse(s, buf);
			s->at = now_s();
			return 0;
		}
		err = errno;
		free(buf);
		/* grew between the two calls */
		if (err != ERANGE)
			return -err;
		n = getxattr(root, TFS_XATTR_STATS, NULL, 0);
	}
	return n < 0 ? -errno : -ERANGE;
}

static bool stats_read_msg(const char *root, struct stats *s)
{
	int rc = stats_read(root, s);

	if (rc)
		error("'%s': cannot read %s: %s", root, TFS_XATTR_STATS,
		      strerror(-rc));
	return !rc;
}

static const char *stats_get(const struct stats *s, const char *key)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->kv[i].key, key))
			return s->kv[i].val;
	return NULL;
}

static bool stats_u64(const struct stats *s, const char *key, uint64_t *v)
{
	return parse_u64(stats_get(s, key), v);
}

static uint64_t stats_u64_or0(const struct stats *s, const char *key)
{
	uint64_t v = 0;

	stats_u64(s, key, &v);
	return v;
}

static uint64_t tier_u64(const struct stats *s, int t, const char *field)
{
	char key[64];

	snprintf(key, sizeof(key), "%s.%s", tier_names[t], field);
	return stats_u64_or0(s, key);
}

/* Per second from @a to @b; 0 when a counter went back (a restart). */
static double rate(const struct stats *a, const struct stats *b, int t,
		   const char *field)
{
	uint64_t x = tier_u64(a, t, field), y = tier_u64(b, t, field);
	double dt = b->at - a->at;

	if (y < x || dt <= 0)
		return 0;
	return (y - x) / dt;
}

/* ------------------------------------------------------------------ */
/* status */

struct status_opts {
	bool json;
	bool ascii;
	bool unicode;
	bool watch;
	double interval; /* 0: one sample, no rates */
	long count; /* --watch samples; 0: until interrupted */
};

static int term_columns(void)
{
	struct winsize ws;

	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

/* A @width-cell bar of @frac, in eighths of a cell when unicode. */
static void put_bar(FILE *f, double frac, int width, bool unicode)
{
	static const char *const part[] = { "",	  "\u258f", "\u258e",
					     "\u258d", "\u258c", "\u258b",
					     "\u258a", "\u2589" };
	long eighths;
	int i;

	if (frac < 0)
		frac = 0;
	if (frac > 1)
		frac = 1;
	eighths = (long)(frac * width * 8 + 0.5);
	if (!unicode) {
		long full = (long)(frac * width + 0.5);

		fputc('[', f);
		for (i = 0; i < width; i++)
			fputc(i < full ? '#' : '.', f);
		fputc(']', f);
		return;
	}
	fputc('[', f);
	for (i = 0; i < eighths / 8; i++)
		fputs("\u2588", f);
	if (eighths % 8 && i < width) {
		fputs(part[eighths % 8], f);
		i++;
	}
	for (; i < width; i++)
		fputs("\u2591", f);
	fputc(']', f);
}

static void status_text(FILE *f, const char *mount, const struct stats *s,
			const struct stats *prev, const struct status_opts *o,
			bool unicode)
{
	const char *backend = stats_get(s, "backend");
	const char *model = stats_get(s, "device_model");
	int bar = term_columns() - 56;
	char a[32], b[32], c[32];
	uint64_t v;

	/* 80 columns give a 24-cell bar; narrower terminals shrink it */
	if (bar > 24)
		bar = 24;
	if (bar < 8)
		bar = 8;

	fprintf(f, "tierfs on %s\n", mount);
	/* the sim backend must say what it is even if its model does not */
	fprintf(f, "backend  %s", backend ? backend : "?");
	if (model && *model)
		fprintf(f, ": %s", model);
	if (backend && !strcmp(backend, "sim") &&
	    (!model || !strstr(model, "simulated")))
		fputs(" (simulated device)", f);
	fputc('\n', f);
	fprintf(f, "files    %" PRIu64 ", %s logical\n",
		stats_u64_or0(s, "files"),
		fmt_bytes(a, sizeof(a), stats_u64_or0(s, "logical_bytes")));
	if (stats_u64(s, "version", &v) && v != 1)
		fprintf(f, "note     stats version %" PRIu64
			   ", this tierfsctl knows version 1\n",
			v);

	fprintf(f, "\n%-7s %10s  %10s  %-*s %5s %8s\n", "TIER", "USED",
		"LIMIT", bar + 2, "USAGE", "", "BUFFERS");
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		uint64_t used = tier_u64(s, t, "used");
		uint64_t limit = tier_u64(s, t, "limit");
		uint64_t bufs = tier_u64(s, t, "buffers");

		fprintf(f, "%-7s %10s  ", tier_names[t],
			fmt_bytes(a, sizeof(a), used));
		if (!limit && t == TFS_TIER_DEVICE) {
			fprintf(f, "%10s  %-*s %5s", "-", bar + 2,
				"(no device tier)", "");
		} else if (!limit) {
			fprintf(f, "%10s  %-*s %5s", "none", bar + 2, "", "");
		} else {
			double frac = (double)used / limit;

			fprintf(f, "%10s  ", fmt_bytes(b, sizeof(b), limit));
			put_bar(f, frac, bar, unicode);
			fprintf(f, " %4.0f%%", frac * 100);
		}
		fprintf(f, " %8" PRIu64 "\n", bufs);
	}

	fprintf(f, "\n%-7s %22s %22s", "TIER", "SPILLED OUT (BUFFERS)",
		"UNSPILLED IN (BUFFERS)");
	if (prev)
		fprintf(f, " %12s %12s", "SPILL/S", "UNSPILL/S");
	fputc('\n', f);
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		char sp[48], un[48];

		snprintf(sp, sizeof(sp), "%s (%" PRIu64 ")",
			 fmt_bytes(a, sizeof(a), tier_u64(s, t, "spill_bytes")),
			 tier_u64(s, t, "spills"));
		snprintf(un, sizeof(un), "%s (%" PRIu64 ")",
			 fmt_bytes(b, sizeof(b),
				   tier_u64(s, t, "unspill_bytes")),
			 tier_u64(s, t, "unspills"));
		fprintf(f, "%-7s %22s %22s", tier_names[t], sp, un);
		if (prev) {
			fmt_bytes(a, sizeof(a),
				  rate(prev, s, t, "spill_bytes"));
			fmt_bytes(c, sizeof(c),
				  rate(prev, s, t, "unspill_bytes"));
			strcat(a, "/s");
			strcat(c, "/s");
			fprintf(f, " %12s %12s", a, c);
		}
		fputc('\n', f);
	}
	fprintf(f, "\nerrors   %" PRIu64 " evict failures, %" PRIu64
		   " checksum errors\n",
		stats_u64_or0(s, "evict_failures"),
		stats_u64_or0(s, "checksum_errors"));
	if (prev)
		fprintf(f, "rates    over the last %.1f s\n", s->at - prev->at);
}

/*
 * One object: the top-level stats keys as they come, the per-tier keys
 * ("host.used") gathered under "tiers", rates there too when two samples
 * were taken. Keys this tierfsctl does not know pass through, so scripts
 * see what a newer daemon adds.
 */
static void status_json(FILE *f, const char *mount, const struct stats *s,
			const struct stats *prev)
{
	static const char *const rate_fields[] = { "spill_bytes",
						   "unspill_bytes", "spills",
						   "unspills" };

	fputs("{\"mount\": ", f);
	json_str(f, mount);
	for (size_t i = 0; i < s->n; i++) {
		const char *dot = strchr(s->kv[i].key, '.');

		if (dot && tier_index(s->kv[i].key, dot - s->kv[i].key) >= 0)
			continue;
		if (!strcmp(s->kv[i].key, "mount") ||
		    !strcmp(s->kv[i].key, "tiers") ||
		    !strcmp(s->kv[i].key, "interval_s"))
			continue;
		fputs(", ", f);
		json_str(f, s->kv[i].key);
		fputs(": ", f);
		json_value(f, s->kv[i].val);
	}
	fputs(", \"tiers\": {", f);
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		size_t tl = strlen(tier_names[t]);
		bool first = true;

		fprintf(f, "%s\"%s\": {", t ? ", " : "", tier_names[t]);
		for (size_t i = 0; i < s->n; i++) {
			const char *k = s->kv[i].key;

			if (strncmp(k, tier_names[t], tl) || k[tl] != '.')
				continue;
			fputs(first ? "" : ", ", f);
			first = false;
			json_str(f, k + tl + 1);
			fputs(": ", f);
			json_value(f, s->kv[i].val);
		}
		for (size_t r = 0; prev && r < 4; r++) {
			fprintf(f, "%s\"%s_per_s\": %.3f", first ? "" : ", ",
				rate_fields[r], rate(prev, s, t, rate_fields[r]));
			first = false;
		}
		fputc('}', f);
	}
	fputc('}', f);
	if (prev)
		fprintf(f, ", \"interval_s\": %.3f", s->at - prev->at);
	fputs("}\n", f);
}

static bool utf8_locale(void)
{
	const char *cs = nl_langinfo(CODESET);

	return cs && (!strcasecmp(cs, "UTF-8") || !strcasecmp(cs, "utf8"));
}

static int status_run(const char *mount, const struct status_opts *o)
{
	bool tty = isatty(STDOUT_FILENO);
	bool unicode = o->unicode || (!o->ascii && tty && utf8_locale());
	struct stats prev = { 0 }, cur = { 0 };
	bool have_prev = false;
	long n = 0;

	if (!stats_read_msg(mount, &cur))
		return EXIT_FAIL;
	if (o->interval && !o->watch) {
		prev = cur;
		sleep_s(o->interval);
		if (!stats_read_msg(mount, &cur)) {
			stats_free(&prev);
			return EXIT_FAIL;
		}
		have_prev = true;
	}
	if (o->watch) {
		struct sigaction sa = { .sa_handler = on_signal };

		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	for (;;) {
		if (o->json) {
			status_json(stdout, mount, &cur,
				    have_prev ? &prev : NULL);
		} else {
			if (o->watch && tty)
				fputs("\033[H\033[2J", stdout);
			else if (n)
				fputc('\n', stdout);
			status_text(stdout, mount, &cur,
				    have_prev ? &prev : NULL, o, unicode);
		}
		fflush(stdout);
		n++;
		if (!o->watch || (o->count && n >= o->count))
			break;
		sleep_s(o->interval);
		if (interrupted)
			break;
		stats_free(&prev);
		prev = cur;
		have_prev = true;
		if (!stats_read_msg(mount, &cur)) {
			stats_free(&prev);
			return EXIT_FAIL;
		}
	}
	stats_free(&prev);
	stats_free(&cur);
	return 0;
}

/* ------------------------------------------------------------------ */
/* metrics */

struct metric {
	const char *name;
	const char *type;
	const char *help;
	const char *field; /* "T.field" for per-tier ones, else the key */
	bool per_tier;
};

static const struct metric metrics[] = {
	{ "tierfs_tier_used_bytes", "gauge",
	  "Bytes held by buffer copies in the tier.", "used", true },
	{ "tierfs_tier_limit_bytes", "gauge",
	  "Configured size of the tier in bytes (0: no limit, or no such tier).",
	  "limit", true },
	{ "tierfs_tier_buffers", "gauge", "Buffers with a copy in the tier.",
	  "buffers", true },
	{ "tierfs_files", "gauge", "Buffers (regular files) alive.", "files",
	  false },
	{ "tierfs_logical_bytes", "gauge", "Sum of the sizes of all files.",
	  "logical_bytes", false },
	{ "tierfs_tier_spill_bytes_total", "counter",
	  "Bytes moved out of the tier to a lower one.", "spill_bytes", true },
	{ "tierfs_tier_unspill_bytes_total", "counter",
	  "Bytes moved into the tier from a lower one.", "unspill_bytes",
	  true },
	{ "tierfs_tier_written_bytes_total", "counter",
	  "Bytes copied into the tier to make copies (spills, unspills, "
	  "placements).", "written_bytes", true },
	{ "tierfs_tier_spills_total", "counter",
	  "Buffers moved out of the tier to a lower one.", "spills", true },
	{ "tierfs_tier_unspills_total", "counter",
	  "Buffers moved into the tier from a lower one.", "unspills", true },
	{ "tierfs_evict_failures_total", "counter",
	  "Spills that found no buffer that could move.", "evict_failures",
	  false },
	{ "tierfs_checksum_errors_total", "counter",
	  "Spill chunks that failed their checksum.", "checksum_errors",
	  false },
};

/* Label values escape backslash, double quote and newline. */
static void prom_label(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/*
 * The exposition format wants all samples of a family together after its
 * HELP and TYPE lines, so with several mounts the loop runs over families
 * first and mounts second.
 */
static void metrics_write(FILE *f, char **mounts, struct stats *st, int n)
{
	fputs("# HELP tierfs_info Device tier backend of the mount (always 1).\n"
	      "# TYPE tierfs_info gauge\n",
	      f);
	for (int m = 0; m < n; m++) {
		const char *backend = stats_get(&st[m], "backend");
		const char *model = stats_get(&st[m], "device_model");

		fputs("tierfs_info{mount=", f);
		prom_label(f, mounts[m]);
		fputs(",backend=", f);
		prom_label(f, backend ? backend : "");
		fputs(",device_model=", f);
		prom_label(f, model ? model : "");
		fputs("} 1\n", f);
	}
	for (size_t i = 0; i < sizeof(metrics) / sizeof(metrics[0]); i++) {
		const struct metric *mt = &metrics[i];

		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", mt->name, mt->help,
			mt->name, mt->type);
		for (int m = 0; m < n; m++) {
			uint64_t v;

			if (!mt->per_tier) {
				if (!stats_u64(&st[m], mt->field, &v))
					continue;
				fprintf(f, "%s{mount=", mt->name);
				prom_label(f, mounts[m]);
				fprintf(f, "} %" PRIu64 "\n", v);
				continue;
			}
			for (int t = 0; t < TFS_TIER_COUNT; t++) {
				char key[64];

				snprintf(key, sizeof(key), "%s.%s",
					 tier_names[t], mt->field);
				if (!stats_u64(&st[m], key, &v))
					continue;
				fprintf(f, "%s{tier=\"%s\",mount=", mt->name,
					tier_names[t]);
				prom_label(f, mounts[m]);
				fprintf(f, "} %" PRIu64 "\n", v);
			}
		}
	}
}

/* ------------------------------------------------------------------ */
/* ls */

enum sort_key { SORT_NAME, SORT_TIER, SORT_SIZE, SORT_STORED, SORT_ATIME,
		SORT_PINS };

struct ls_ent {
	char *path; /* for system calls */
	size_t name_off; /* path + name_off is what the table shows */
	char type; /* 'f' regular, 'd' directory, 'l' symlink, 'o' other */
	int tier; /* -1 unknown */
	bool have_size, have_stored, have_atime, have_pins;
	uint64_t size, stored, atime, pins;
};

struct ls_list {
	struct ls_ent *e;
	size_t n, cap;
};

static enum sort_key sort_by;
static bool sort_reverse;

static const char *ls_name(const struct ls_ent *e)
{
	return e->path + e->name_off;
}

/* Reads one virtual xattr as a string; returns its length or -errno. */
static ssize_t get_xattr_str(const char *path, const char *name, char *buf,
			     size_t len)
{
	ssize_t n = getxattr(path, name, buf, len - 1);

	if (n < 0)
		return -errno;
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return n;
}

static bool get_xattr_u64(const char *path, const char *name, uint64_t *v)
{
	char buf[64];

	return get_xattr_str(path, name, buf, sizeof(buf)) >= 0 &&
	       parse_u64(buf, v);
}

/* -1 and errno set when the tier cannot be read */
static int get_tier(const char *path)
{
	char buf[32];
	ssize_t n = get_xattr_str(path, TFS_XATTR_TIER, buf, sizeof(buf));
	int t;

	if (n < 0) {
		errno = (int)-n;
		return -1;
	}
	t = tier_index(buf, n);
	if (t < 0)
		errno = EPROTO;
	return t;
}

/* Fills the tier columns of a regular file; false (message given) when the
 * mount does not answer for it. */
static bool ls_fill(struct ls_ent *e)
{
	e->tier = get_tier(e->path);
	if (e->tier < 0) {
		op_error("'%s': %s: %s", e->path, TFS_XATTR_TIER,
			 strerror(errno));
		return false;
	}
	e->have_size = get_xattr_u64(e->path, TFS_XATTR_SIZE, &e->size);
	e->have_stored =
		get_xattr_u64(e->path, TFS_XATTR_STORED, &e->stored);
	e->have_atime = get_xattr_u64(e->path, TFS_XATTR_ATIME, &e->atime);
	e->have_pins = get_xattr_u64(e->path, TFS_XATTR_PINS, &e->pins);
	return true;
}

static struct ls_ent *ls_add(struct ls_list *l, char *path, size_t name_off,
			     mode_t mode)
{
	struct ls_ent *e;

	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->e = xrealloc(l->e, l->cap * sizeof(*l->e));
	}
	e = &l->e[l->n++];
	memset(e, 0, sizeof(*e));
	e->path = path;
	e->name_off = name_off;
	e->tier = -1;
	e->type = S_ISREG(mode) ? 'f' :
		  S_ISDIR(mode) ? 'd' :
		  S_ISLNK(mode) ? 'l' :
				  'o';
	return e;
}

/* Adds a row (taking @path) and, for a regular file, its tier columns;
 * a file the mount does not answer for gets no row. */
static bool ls_add_fill(struct ls_list *l, char *path, size_t name_off,
			mode_t mode)
{
	if (ls_add(l, path, name_off, mode)->type != 'f' ||
	    ls_fill(&l->e[l->n - 1]))
		return true;
	free(path);
	l->n--;
	return false;
}

static char *join_path(const char *dir, const char *name)
{
	size_t n = strlen(dir);

	if (n && dir[n - 1] == '/')
		return xasprintf("%s%s", dir, name);
	return xasprintf("%s/%s", dir, name);
}

/*
 * Calls @fn for each entry of @dir but "." and "..", with its path (which
 * @fn owns) and its lstat. Returns false, after saying why, when @dir or
 * an entry could not be read; @fn's own result is and-ed in.
 */
static bool walk_dir(const char *dir,
		     bool (*fn)(void *ctx, char *path, const struct stat *st),
		     void *ctx)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool ok = true;

	if (!d) {
		op_error("'%s': %s", dir, strerror(errno));
		return false;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		char *path;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		path = join_path(dir, de->d_name);
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			op_error("'%s': %s", path, strerror(errno));
			free(path);
			ok = false;
			continue;
		}
		ok &= fn(ctx, path, &st);
	}
	if (errno) {
		op_error("'%s': %s", dir, strerror(errno));
		ok = false;
	}
	closedir(d);
	return ok;
}

struct ls_walk {
	struct ls_list *l;
	size_t name_off;
	dev_t dev;
	bool recursive;
};

static bool ls_dir(struct ls_list *l, const char *dir, size_t name_off,
		   dev_t dev, bool recursive);

static bool ls_entry(void *ctx, char *path, const struct stat *st)
{
	struct ls_walk *w = ctx;
	bool ok = true;

	if (w->recursive && S_ISDIR(st->st_mode)) {
		if (st->st_dev == w->dev)
			ok = ls_dir(w->l, path, w->name_off, w->dev, true);
		free(path);
		return ok;
	}
	return ls_add_fill(w->l, path, w->name_off, st->st_mode);
}

/*
 * Lists @dir one level (rows for subdirectories too) or, with @recursive,
 * every file below it (no rows for directories; their names are in the
 * paths). Does not cross into other mounts. Returns false when something
 * could not be listed.
 */
static bool ls_dir(struct ls_list *l, const char *dir, size_t name_off,
		   dev_t dev, bool recursive)
{
	struct ls_walk w = { l, name_off, dev, recursive };

	return walk_dir(dir, ls_entry, &w);
}

static int tier_rank(const struct ls_ent *e)
{
	if (e->type != 'f')
		return TFS_TIER_COUNT + 1;
	return e->tier < 0 ? TFS_TIER_COUNT : e->tier;
}

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

/*
 * As ls does: names and tiers ascending (device first), numbers
 * descending (biggest, most recent, most pinned first); -r reverses.
 * Ties go by name so the order is stable.
 */
static int ls_cmp(const void *pa, const void *pb)
{
	const struct ls_ent *a = pa, *b = pb;
	int c = 0;

	switch (sort_by) {
	case SORT_NAME:
		break;
	case SORT_TIER:
		c = tier_rank(a) - tier_rank(b);
		break;
	case SORT_SIZE:
		c = -cmp_u64(a->size, b->size);
		break;
	case SORT_STORED:
		c = -cmp_u64(a->stored, b->stored);
		break;
	case SORT_ATIME:
		c = -cmp_u64(a->atime, b->atime);
		break;
	case SORT_PINS:
		c = -cmp_u64(a->pins, b->pins);
		break;
	}
	if (!c)
		c = strcmp(ls_name(a), ls_name(b));
	return sort_reverse ? -c : c;
}

static const char *ls_num(char *buf, size_t len, bool have, uint64_t v,
			  bool human)
{
	if (!have)
		snprintf(buf, len, "?");
	else if (human)
		fmt_bytes(buf, len, v);
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

static const char *ls_tier(const struct ls_ent *e)
{
	switch (e->type) {
	case 'f':
		return e->tier < 0 ? "?" : tier_names[e->tier];
	case 'd':
		return "dir";
	case 'l':
		return "link";
	default:
		return "-";
	}
}

/* A name with a newline in it must not break the table into two rows. */
static void put_name(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, f);
}

static void ls_print_text(const struct ls_list *l, bool human)
{
	int wsize = 4, wstored = 6, wpins = 4;
	char a[32], b[32], c[32], d[32];

	for (size_t i = 0; i < l->n; i++) {
		const struct ls_ent *e = &l->e[i];
		int n;

		if (e->type != 'f')
			continue;
		n = strlen(ls_num(a, sizeof(a), e->have_size, e->size, human));
		wsize = n > wsize ? n : wsize;
		n = strlen(ls_num(a, sizeof(a), e->have_stored, e->stored,
				  human));
		wstored = n > wstored ? n : wstored;
		n = strlen(ls_num(a, sizeof(a), e->have_pins, e->pins, false));
		wpins = n > wpins ? n : wpins;
	}
	printf("%-6s  %*s  %*s  %-19s  %*s  %s\n", "TIER", wsize, "SIZE",
	       wstored, "STORED", "LAST ACCESS", wpins, "PINS", "NAME");
	for (size_t i = 0; i < l->n; i++) {
		const struct ls_ent *e = &l->e[i];
		bool f = e->type == 'f';

		printf("%-6s  %*s  %*s  %-19s  %*s  ", ls_tier(e), wsize,
		       f ? ls_num(a, sizeof(a), e->have_size, e->size, human) :
			   "-",
		       wstored,
		       f ? ls_num(b, sizeof(b), e->have_stored, e->stored,
				  human) :
			   "-",
		       f && e->have_atime ?
			       fmt_time_ns(c, sizeof(c), e->atime) :
			       "-",
		       wpins,
		       f ? ls_num(d, sizeof(d), e->have_pins, e->pins, false) :
			   "-");
		put_name(stdout, ls_name(e));
		fputs(e->type == 'd' ? "/\n" : "\n", stdout);
	}
}

static void ls_print_json(const struct ls_list *l)
{
	static const char *const type_name[] = { ['f'] = "file",
						 ['d'] = "directory",
						 ['l'] = "symlink",
						 ['o'] = "other" };

	fputc('[', stdout);
	for (size_t i = 0; i < l->n; i++) {
		const struct ls_ent *e = &l->e[i];

		fputs(i ? ",\n {\"path\": " : "{\"path\": ", stdout);
		json_str(stdout, ls_name(e));
		printf(", \"type\": \"%s\"", type_name[(int)e->type]);
		if (e->type == 'f') {
			printf(", \"tier\": ");
			if (e->tier < 0)
				fputs("null", stdout);
			else
				printf("\"%s\"", tier_names[e->tier]);
			if (e->have_size)
				printf(", \"size\": %" PRIu64, e->size);
			if (e->have_stored)
				printf(", \"stored_size\": %" PRIu64,
				       e->stored);
			if (e->have_atime)
				printf(", \"last_access_ns\": %" PRIu64,
				       e->atime);
			if (e->have_pins)
				printf(", \"pins\": %" PRIu64, e->pins);
		}
		fputc('}', stdout);
	}
	fputs("]\n", stdout);
}

/* ------------------------------------------------------------------ */
/* spill, prefetch, pin, unpin */

enum op_kind { OP_SPILL, OP_PREFETCH, OP_PIN, OP_UNPIN };

struct target {
	char *path;
	uint64_t size;
	int to; /* tier for spill and prefetch */
};

struct target_list {
	struct target *t;
	size_t n, cap;
	uint64_t bytes;
};

static void target_add(struct target_list *l, char *path, uint64_t size,
		       int to)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->t = xrealloc(l->t, l->cap * sizeof(*l->t));
	}
	l->t[l->n].path = path;
	l->t[l->n].size = size;
	l->t[l->n].to = to;
	l->n++;
	l->bytes += size;
}

struct collect_walk {
	struct target_list *l;
	dev_t dev;
	int to;
};

static bool collect_dir(struct target_list *l, const char *dir, dev_t dev,
			int to);

static bool collect_entry(void *ctx, char *path, const struct stat *st)
{
	struct collect_walk *w = ctx;
	bool ok = true;

	if (S_ISDIR(st->st_mode) && st->st_dev == w->dev) {
		ok = collect_dir(w->l, path, w->dev, w->to);
	} else if (S_ISREG(st->st_mode)) {
		target_add(w->l, path, st->st_size, w->to);
		return true;
	}
	free(path);
	return ok;
}

/* Every regular file below @dir on the same mount. */
static bool collect_dir(struct target_list *l, const char *dir, dev_t dev,
			int to)
{
	struct collect_walk w = { l, dev, to };

	return walk_dir(dir, collect_entry, &w);
}

/*
 * Remembers the devices already found to be tierfs, so that `spill` of
 * thousands of files named one by one reads mountinfo once per mount and
 * not once per file.
 */
struct dev_cache {
	struct {
		dev_t dev;
		bool has_device;
	} e[8];
	int n;
};

/* The mount has a device tier unless its stats say otherwise. */
static bool mount_has_device(const char *root)
{
	struct stats st;
	uint64_t limit;
	bool yes;

	if (stats_read(root, &st))
		return true;
	yes = !stats_u64(&st, "device.limit", &limit) || limit;
	stats_free(&st);
	return yes;
}

/* Checks @path (on device @dev) is on tierfs, with a message when not;
 * *has_device says whether its mount has a device tier. */
static bool on_tierfs(struct dev_cache *c, const char *path, dev_t dev,
		      bool *has_device)
{
	bool dummy, yes;
	char *root;

	if (!has_device)
		has_device = &dummy;
	for (int i = 0; i < c->n; i++) {
		if (c->e[i].dev == dev) {
			*has_device = c->e[i].has_device;
			return true;
		}
	}
	if (!resolve_mount_msg(path, &root))
		return false;
	yes = mount_has_device(root);
	free(root);
	if (c->n < 8) {
		c->e[c->n].dev = dev;
		c->e[c->n++].has_device = yes;
	}
	*has_device = yes;
	return true;
}

struct op_opts {
	enum op_kind kind;
	int to; /* target tier of spill and prefetch */
	bool to_given;
	bool recursive;
	bool quiet;
	int progress; /* -1 never, 0 auto, 1 always */
};

/*
 * Expands the PATH arguments; false when some could not be used. A plain
 * prefetch goes to the fastest tier the file's mount has: the device, or
 * the host on a mount without one.
 */
static bool collect_targets(struct target_list *l, char **paths, int n,
			    const struct op_opts *o)
{
	struct dev_cache cache = { .n = 0 };
	bool ok = true;

	for (int i = 0; i < n; i++) {
		bool has_device;
		struct stat st;
		int to = o->to;

		if (stat(paths[i], &st)) {
			error("'%s': %s", paths[i], strerror(errno));
			ok = false;
			continue;
		}
		if (!on_tierfs(&cache, paths[i], st.st_dev, &has_device)) {
			ok = false;
			continue;
		}
		if (o->kind == OP_PREFETCH && !o->to_given && !has_device)
			to = TFS_TIER_HOST;
		if (S_ISREG(st.st_mode)) {
			target_add(l, xstrdup(paths[i]), st.st_size, to);
		} else if (S_ISDIR(st.st_mode) && o->recursive) {
			ok &= collect_dir(l, paths[i], st.st_dev, to);
		} else if (S_ISDIR(st.st_mode)) {
			op_error("'%s': %s (use -R)", paths[i],
				 strerror(EISDIR));
			ok = false;
		} else {
			op_error("'%s': not a regular file", paths[i]);
			ok = false;
		}
	}
	return ok;
}

struct progress {
	bool on;
	const char *verb;
	size_t n_total;
	uint64_t b_total;
	double last;
	bool drawn;
};

static void progress_draw(struct progress *p, size_t n, uint64_t b,
			  bool force)
{
	char x[32], y[32];
	double now = now_s();
	double frac;
	int width = 30, fill;

	if (!p->on || (!force && now - p->last < 0.1))
		return;
	p->last = now;
	frac = p->b_total ? (double)b / p->b_total :
			    (p->n_total ? (double)n / p->n_total : 1);
	fill = (int)(frac * width + 0.5);
	fprintf(stderr, "\r%s [", p->verb);
	for (int i = 0; i < width; i++)
		fputc(i < fill ? '#' : ' ', stderr);
	fprintf(stderr, "] %zu/%zu files  %s/%s\033[K", n, p->n_total,
		fmt_bytes(x, sizeof(x), b), fmt_bytes(y, sizeof(y), p->b_total));
	fflush(stderr);
	p->drawn = true;
}

static void progress_clear(struct progress *p)
{
	if (p->on && p->drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		p->drawn = false;
	}
}

static int op_run(const struct op_opts *o, char **paths, int npaths)
{
	struct target_list l = { 0 };
	struct progress p = { 0 };
	size_t done = 0, moved = 0, already = 0, failed = 0;
	uint64_t bytes = 0, moved_bytes = 0;
	bool ok = collect_targets(&l, paths, npaths, o);
	int to = l.n ? l.t[0].to : o->to;
	char x[32];

	p.verb = cmd_name;
	p.n_total = l.n;
	p.b_total = l.bytes;
	p.on = o->progress > 0 ||
	       (!o->progress && !o->quiet && isatty(STDERR_FILENO) &&
		(l.n > PROGRESS_MIN_FILES || l.bytes > PROGRESS_MIN_BYTES));

	for (size_t i = 0; i < l.n; i++) {
		const char *path = l.t[i].path;
		const char *name, *val;
		int rc;

		progress_draw(&p, done, bytes, i == 0);
		if (o->kind == OP_SPILL || o->kind == OP_PREFETCH) {
			int cur = get_tier(path);

			/* spill never moves up, prefetch never down */
			if (cur >= 0 && (o->kind == OP_SPILL ?
						 cur >= l.t[i].to :
						 cur <= l.t[i].to)) {
				already++;
				goto next;
			}
			name = TFS_XATTR_TIER;
			val = tier_names[l.t[i].to];
			if (l.t[i].to != to)
				to = -1;
		} else {
			name = TFS_XATTR_PIN;
			val = o->kind == OP_PIN ? "1" : "0";
		}
		rc = setxattr(path, name, val, strlen(val), 0);
		if (rc) {
			int err = errno;

			progress_clear(&p);
			op_error("'%s': %s%s", path, strerror(err),
				 err == ENODEV ? " (the mount has no device tier)" :
						 "");
			failed++;
		} else {
			moved++;
			moved_bytes += l.t[i].size;
		}
next:
		done++;
		bytes += l.t[i].size;
	}
	progress_draw(&p, done, bytes, true);
	progress_clear(&p);

	if (!o->quiet && l.n) {
		switch (o->kind) {
		case OP_SPILL:
		case OP_PREFETCH:
			printf("%s: %zu file%s (%s) moved %s%s", cmd_name,
			       moved, moved == 1 ? "" : "s",
			       fmt_bytes(x, sizeof(x), moved_bytes),
			       to < 0 ? "" : "to ",
			       to >= 0 ? tier_names[to] :
			       o->kind == OP_SPILL ? "down" : "up");
			if (already)
				printf(", %zu already %s", already,
				       o->kind == OP_SPILL ? "there or lower" :
							     "there or higher");
			break;
		case OP_PIN:
		case OP_UNPIN:
			printf("%s: %zu file%s %s", cmd_name, moved,
			       moved == 1 ? "" : "s",
			       o->kind == OP_PIN ? "pinned" : "unpinned");
			break;
		}
		if (failed)
			printf(", %zu failed", failed);
		putchar('\n');
	}
	for (size_t i = 0; i < l.n; i++)
		free(l.t[i].path);
	free(l.t);
	return ok && !failed ? 0 : EXIT_FAIL;
}

/* ------------------------------------------------------------------ */
/* cleanup */

struct rm_count {
	uint64_t files, dirs;
};

/*
 * Removes @name in @dfd and everything below it, without following
 * symlinks or crossing into another mount. @path is for messages.
 */
static bool rm_tree(int dfd, const char *name, const char *path, dev_t dev,
		    struct rm_count *c)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					   O_CLOEXEC);
	struct dirent *de;
	bool ok = true;
	DIR *d;

	if (fd < 0) {
		op_error("'%s': %s", path, strerror(errno));
		return false;
	}
	d = fdopendir(fd);
	if (!d) {
		op_error("'%s': %s", path, strerror(errno));
		close(fd);
		return false;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		char *sub;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		sub = join_path(path, de->d_name);
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			op_error("'%s': %s", sub, strerror(errno));
			ok = false;
		} else if (S_ISDIR(st.st_mode) && st.st_dev != dev) {
			op_error("'%s': another mount, left alone", sub);
			ok = false;
		} else if (S_ISDIR(st.st_mode)) {
			ok &= rm_tree(fd, de->d_name, sub, dev, c);
		} else if (unlinkat(fd, de->d_name, 0)) {
			op_error("'%s': %s", sub, strerror(errno));
			ok = false;
		} else {
			c->files++;
		}
		free(sub);
	}
	if (errno) {
		op_error("'%s': %s", path, strerror(errno));
		ok = false;
	}
	closedir(d);
	if (!ok)
		return false;
	if (unlinkat(dfd, name, AT_REMOVEDIR)) {
		op_error("'%s': %s", path, strerror(errno));
		return false;
	}
	c->dirs++;
	return true;
}

static int cleanup_one(const char *dir, bool quiet)
{
	struct rm_count c = { 0 };
	char *root, *real;
	struct stat st;
	bool ok;

	if (lstat(dir, &st)) {
		error("'%s': %s", dir, strerror(errno));
		return EXIT_FAIL;
	}
	if (!S_ISDIR(st.st_mode)) {
		error("'%s': %s", dir, strerror(ENOTDIR));
		return EXIT_FAIL;
	}
	if (!resolve_mount_msg(dir, &root))
		return EXIT_FAIL;
	real = realpath(dir, NULL);
	if (!real || !strcmp(real, root)) {
		error("'%s': %s", dir,
		      real ? "refusing to remove the mount root" :
			     strerror(errno));
		free(real);
		free(root);
		return EXIT_FAIL;
	}
	ok = rm_tree(AT_FDCWD, dir, dir, st.st_dev, &c);
	if (!quiet)
		printf("cleanup: '%s': removed %" PRIu64 " file%s and %" PRIu64
		       " director%s\n",
		       dir, c.files, c.files == 1 ? "" : "s", c.dirs,
		       c.dirs == 1 ? "y" : "ies");
	free(real);
	free(root);
	return ok ? 0 : EXIT_FAIL;
}

/* ------------------------------------------------------------------ */
/* command line */

static const char usage_text[] =
	"usage: tierfsctl COMMAND [OPTION...] [ARG...]\n"
	"\n"
	"commands:\n"
	"  status [MOUNT]            tier usage, buffer counts, spill totals\n"
	"      --json                one JSON object\n"
	"      --ascii, --unicode    how to draw the bars (default: unicode on a\n"
	"                            UTF-8 terminal, else ASCII)\n"
	"      -i, --interval SEC    sample twice, SEC apart, and show rates\n"
	"      -w, --watch           redraw every interval (1 s unless -i)\n"
	"      -n, --count N         with --watch, stop after N samples\n"
	"  ls [-R] [-h] [-s COL] [-r] [--json] [PATH...]\n"
	"                            files with tier, size, stored size, last\n"
	"                            access and pins; COL: name, tier, size,\n"
	"                            stored, atime, pins\n"
	"  spill [--to host|disk] [-R] PATH...      move down (default: disk)\n"
	"  prefetch [--to device|host] [-R] PATH... move up (default: device)\n"
	"  pin [-R] PATH...          keep files where they are\n"
	"  unpin [-R] PATH...        let them move again\n"
	"      -q, --quiet           no summary line and no progress bar\n"
	"      --progress, --no-progress\n"
	"  metrics [-o FILE] [MOUNT...]\n"
	"                            Prometheus text format (all tierfs mounts\n"
	"                            when none is named)\n"
	"  cleanup [-q] DIR...       remove directory trees on a mount\n"
	"\n"
	"MOUNT defaults to the only tierfs mount. See tierfsctl(1).\n";

static void usage(FILE *f)
{
	fputs(usage_text, f);
}

static const struct {
	const char *cmd;
	const char *synopsis;
} synopses[] = {
	{ "status", "status [--json] [--ascii|--unicode] [-i SEC] [-w [-n N]] "
		    "[MOUNT]" },
	{ "ls", "ls [-R] [-h] [-s COLUMN] [-r] [--json] [PATH...]" },
	{ "spill", "spill [--to host|disk] [-R] [-q] PATH..." },
	{ "prefetch", "prefetch [--to device|host] [-R] [-q] PATH..." },
	{ "pin", "pin [-R] [-q] PATH..." },
	{ "unpin", "unpin [-R] [-q] PATH..." },
	{ "metrics", "metrics [-o FILE] [MOUNT...]" },
	{ "cleanup", "cleanup [-q] DIR..." },
};

/* The synopsis of the command at hand, or the whole usage. */
static void short_usage(FILE *f)
{
	for (size_t i = 0; cmd_name && i < sizeof(synopses) / sizeof(*synopses);
	     i++) {
		if (!strcmp(cmd_name, synopses[i].cmd)) {
			fprintf(f,
				"usage: tierfsctl %s\n"
				"Try 'tierfsctl --help' for more.\n",
				synopses[i].synopsis);
			return;
		}
	}
	usage(f);
}

/* exit status 2 with the reason and the usage on stderr */
__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt,
							    ...)
{
	va_list ap;

	fflush(stdout);
	fputs("tierfsctl: ", stderr);
	if (cmd_name)
		fprintf(stderr, "%s: ", cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	short_usage(stderr);
	return EXIT_USAGE;
}

/* getopt_long with messages of our own; returns the option, or -2 after a
 * usage error was printed. */
static int next_opt(int argc, char **argv, const char *shortopts,
		    const struct option *longopts)
{
	int c;

	opterr = 0;
	c = getopt_long(argc, argv, shortopts, longopts, NULL);
	if (c == '?') {
		if (optopt)
			bad_usage("unknown option '-%c'", optopt);
		else
			bad_usage("unknown option '%s'", argv[optind - 1]);
		return -2;
	}
	if (c == ':') {
		if (optopt)
			bad_usage("option '-%c' needs a value", optopt);
		else
			bad_usage("option '%s' needs a value",
				  argv[optind - 1]);
		return -2;
	}
	return c;
}

enum { OPT_JSON = 256, OPT_ASCII, OPT_UNICODE, OPT_TO, OPT_PROGRESS,
       OPT_NO_PROGRESS, OPT_HELP };

static int cmd_status(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "ascii", no_argument, NULL, OPT_ASCII },
		{ "unicode", no_argument, NULL, OPT_UNICODE },
		{ "interval", required_argument, NULL, 'i' },
		{ "watch", no_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	struct status_opts o = { 0 };
	uint64_t count;
	char *mount;
	int c, rc;

	while ((c = next_opt(argc, argv, ":i:wn:", lo)) != -1) {
		switch (c) {
		case OPT_JSON:
			o.json = true;
			break;
		case OPT_ASCII:
			o.ascii = true;
			o.unicode = false;
			break;
		case OPT_UNICODE:
			o.unicode = true;
			o.ascii = false;
			break;
		case 'i':
			if (!parse_seconds(optarg, &o.interval))
				return bad_usage("bad interval '%s'", optarg);
			break;
		case 'w':
			o.watch = true;
			break;
		case 'n':
			if (!parse_u64(optarg, &count) || !count ||
			    count > LONG_MAX)
				return bad_usage("bad count '%s'", optarg);
			o.count = (long)count;
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (argc - optind > 1)
		return bad_usage("one MOUNT at most");
	if (o.count && !o.watch)
		return bad_usage("--count needs --watch");
	if (o.watch && !o.interval)
		o.interval = 1;
	mount = pick_mount(optind < argc ? argv[optind] : NULL);
	if (!mount)
		return EXIT_FAIL;
	rc = status_run(mount, &o);
	free(mount);
	return rc;
}

static int cmd_metrics(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	const char *out = NULL;
	struct stats *st;
	char **mounts;
	int c, n, m = 0, rc = 0;

	while ((c = next_opt(argc, argv, ":o:", lo)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		n = argc - optind;
		mounts = xmalloc(n * sizeof(*mounts));
		for (int i = 0; i < n; i++)
			if (!resolve_mount_msg(argv[optind + i], &mounts[m]))
				rc = EXIT_FAIL;
			else
				m++;
		n = m;
	} else {
		n = all_mounts(&mounts);
		if (n < 0)
			return EXIT_FAIL;
		if (!n) {
			error("no tierfs mount found");
			free(mounts);
			return EXIT_FAIL;
		}
	}
	st = xmalloc(n * sizeof(*st));
	for (int i = m = 0; i < n; i++) {
		if (!stats_read_msg(mounts[i], &st[m])) {
			free(mounts[i]);
			rc = EXIT_FAIL;
			continue;
		}
		mounts[m++] = mounts[i];
	}
	n = m;

	if (!out) {
		metrics_write(stdout, mounts, st, n);
		if (fflush(stdout) || ferror(stdout))
			rc = EXIT_FAIL;
	} else {
		/*
		 * The textfile collector may read at any moment: write a
		 * temporary file next to the target and rename it over, so it
		 * never sees half a file. The name does not end in .prom, so
		 * the collector skips it.
		 */
		char *tmp = xasprintf("%s.%ld.tmp", out, (long)getpid());
		FILE *f = fopen(tmp, "we");

		if (!f) {
			error("'%s': %s", tmp, strerror(errno));
			rc = EXIT_FAIL;
		} else {
			metrics_write(f, mounts, st, n);
			if (fflush(f) || ferror(f) || fsync(fileno(f))) {
				error("'%s': %s", tmp, strerror(errno));
				rc = EXIT_FAIL;
			}
			if (fclose(f) && !rc) {
				error("'%s': %s", tmp, strerror(errno));
				rc = EXIT_FAIL;
			}
			if (!rc && rename(tmp, out)) {
				error("'%s': %s", out, strerror(errno));
				rc = EXIT_FAIL;
			}
			if (rc)
				unlink(tmp);
		}
		free(tmp);
	}
	for (int i = 0; i < n; i++)
		stats_free(&st[i]);
	free(st);
	free_strv(mounts, n);
	return rc;
}

static bool parse_sort(const char *s, enum sort_key *k)
{
	static const char *const names[] = {
		[SORT_NAME] = "name",	  [SORT_TIER] = "tier",
		[SORT_SIZE] = "size",	  [SORT_STORED] = "stored",
		[SORT_ATIME] = "atime", [SORT_PINS] = "pins",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(s, names[i])) {
			*k = (enum sort_key)i;
			return true;
		}
	}
	/* the long spellings people type after reading the headers */
	if (!strcmp(s, "stored_size")) {
		*k = SORT_STORED;
		return true;
	}
	if (!strcmp(s, "last_access") || !strcmp(s, "time")) {
		*k = SORT_ATIME;
		return true;
	}
	return false;
}

static int cmd_ls(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "sort", required_argument, NULL, 's' },
		{ "reverse", no_argument, NULL, 'r' },
		{ "recursive", no_argument, NULL, 'R' },
		{ "human-readable", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	static char *dot[] = { "." };
	struct dev_cache cache = { .n = 0 };
	struct ls_list l = { 0 };
	bool json = false, human = false, recursive = false, ok = true;
	char **paths;
	int c, n;

	sort_by = SORT_NAME;
	sort_reverse = false;
	while ((c = next_opt(argc, argv, ":s:rRh", lo)) != -1) {
		switch (c) {
		case 's':
			if (!parse_sort(optarg, &sort_by))
				return bad_usage("unknown column '%s'", optarg);
			break;
		case 'r':
			sort_reverse = true;
			break;
		case 'R':
			recursive = true;
			break;
		case 'h':
			human = true;
			break;
		case OPT_JSON:
			json = true;
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	paths = optind < argc ? argv + optind : dot;
	n = optind < argc ? argc - optind : 1;

	for (int i = 0; i < n; i++) {
		const char *p = paths[i];
		struct stat st;

		if (stat(p, &st)) {
			error("'%s': %s", p, strerror(errno));
			ok = false;
			continue;
		}
		if (!on_tierfs(&cache, p, st.st_dev, NULL)) {
			ok = false;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			/* one directory alone: names relative to it, as ls */
			size_t off = 0;

			if (n == 1) {
				char *j = join_path(p, "");

				off = strlen(j);
				free(j);
			}
			ok &= ls_dir(&l, p, off, st.st_dev, recursive);
		} else if (!ls_add_fill(&l, xstrdup(p), 0, st.st_mode)) {
			ok = false;
		}
	}
	if (l.n)
		qsort(l.e, l.n, sizeof(*l.e), ls_cmp);
	if (json)
		ls_print_json(&l);
	else if (l.n)
		ls_print_text(&l, human);
	for (size_t i = 0; i < l.n; i++)
		free(l.e[i].path);
	free(l.e);
	return ok ? 0 : EXIT_FAIL;
}

static int cmd_op(enum op_kind kind, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "recursive", no_argument, NULL, 'R' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "to", required_argument, NULL, OPT_TO },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	struct op_opts o = {
		.kind = kind,
		.to = kind == OP_SPILL ? TFS_TIER_DISK : TFS_TIER_DEVICE,
	};
	int c;

	while ((c = next_opt(argc, argv, ":Rq", lo)) != -1) {
		switch (c) {
		case 'R':
			o.recursive = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		case OPT_TO:
			o.to_given = true;
			if (kind != OP_SPILL && kind != OP_PREFETCH)
				return bad_usage("--to is for spill and prefetch");
			o.to = tier_index(optarg, strlen(optarg));
			if ((kind == OP_SPILL && o.to != TFS_TIER_HOST &&
			     o.to != TFS_TIER_DISK) ||
			    (kind == OP_PREFETCH && o.to != TFS_TIER_DEVICE &&
			     o.to != TFS_TIER_HOST))
				return bad_usage("cannot %s to '%s'", cmd_name,
						 optarg);
			break;
		case OPT_PROGRESS:
			o.progress = 1;
			break;
		case OPT_NO_PROGRESS:
			o.progress = -1;
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (optind == argc)
		return bad_usage("no PATH given");
	return op_run(&o, argv + optind, argc - optind);
}

static int cmd_cleanup(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	bool quiet = false;
	int c, rc = 0;

	while ((c = next_opt(argc, argv, ":q", lo)) != -1) {
		switch (c) {
		case 'q':
			quiet = true;
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (optind == argc)
		return bad_usage("no DIR given");
	for (int i = optind; i < argc; i++)
		if (cleanup_one(argv[i], quiet))
			rc = EXIT_FAIL;
	return rc;
}

int main(int argc, char **argv)
{
	const char *cmd;

	setlocale(LC_ALL, "");
	/* numbers in JSON and the exposition format need a '.' */
	setlocale(LC_NUMERIC, "C");

	if (argc < 2)
		return bad_usage("no command given");
	cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") ||
	    !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		printf("tierfsctl (tierfs) %s\n", TFS_VERSION);
		return 0;
	}
	if (cmd[0] == '-')
		return bad_usage("unknown option '%s'", cmd);

	cmd_name = cmd;
	/* each subcommand parses argv[1..]: its name stands in for argv[0] */
	argc--;
	argv++;
	optind = 1;
	if (!strcmp(cmd, "status"))
		return cmd_status(argc, argv);
	if (!strcmp(cmd, "ls"))
		return cmd_ls(argc, argv);
	if (!strcmp(cmd, "spill"))
		return cmd_op(OP_SPILL, argc, argv);
	if (!strcmp(cmd, "prefetch"))
		return cmd_op(OP_PREFETCH, argc, argv);
	if (!strcmp(cmd, "pin"))
		return cmd_op(OP_PIN, argc, argv);
	if (!strcmp(cmd, "unpin"))
		return cmd_op(OP_UNPIN, argc, argv);
	if (!strcmp(cmd, "metrics"))
		return cmd_metrics(argc, argv);
	if (!strcmp(cmd, "cleanup"))
		return cmd_cleanup(argc, argv);
	cmd_name = NULL;
	return bad_usage("unknown command '%s'", cmd);
}
