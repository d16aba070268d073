// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl status: tier usage, buffer counts, spill totals and rates.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <langinfo.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

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

/* A stats value as a JSON number when it is one, else as a string. */
static void json_value(FILE *f, const char *v)
{
	uint64_t n;

	if (ctl_parse_u64(v, &n))
		fprintf(f, "%" PRIu64, n);
	else
		ctl_json_str(f, v);
}

static uint64_t stats_u64_or0(const struct ctl_stats *s, const char *key)
{
	uint64_t v = 0;

	ctl_stats_u64(s, key, &v);
	return v;
}

static uint64_t tier_u64(const struct ctl_stats *s, const char *tier,
			 const char *field)
{
	char key[64];

	snprintf(key, sizeof(key), "%s.%s", tier, field);
	return stats_u64_or0(s, key);
}

/* Per second from @a to @b; 0 when a counter went back (a restart). */
static double rate(const struct ctl_stats *a, const struct ctl_stats *b,
		   const char *t, const char *field)
{
	uint64_t x = tier_u64(a, t, field), y = tier_u64(b, t, field);
	double dt = b->at - a->at;

	if (y < x || dt <= 0)
		return 0;
	return (y - x) / dt;
}

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

/*
 * "persist  no", or for a persistent mount its journal, last snapshot and
 * how its last start went. A daemon without persistence says nothing.
 */
static void print_persist(FILE *f, const struct ctl_stats *s)
{
	const char *mode = ctl_stats_get(s, "persist");
	const char *how = ctl_stats_get(s, "recovery"), *jerr;
	uint64_t jb = stats_u64_or0(s, "journal_bytes");
	uint64_t sb = stats_u64_or0(s, "snapshot_bytes");
	uint64_t st = stats_u64_or0(s, "snapshot_time");
	uint64_t dropped = stats_u64_or0(s, "recovery_dropped");
	uint64_t rolled = stats_u64_or0(s, "recovery_rolled_back");
	char a[32], b[32], when[32] = "never";
	time_t t = (time_t)st;
	struct tm tm;

	if (!mode)
		return;
	if (!strcmp(mode, "no")) {
		fprintf(f, "persist  no: the files go with the mount\n");
		return;
	}
	if (st && localtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(f, "persist  %s: journal %s (%" PRIu64 " records), "
		   "snapshot %s at %s\n", mode,
		ctl_fmt_bytes(a, sizeof(a), jb),
		stats_u64_or0(s, "journal_records"),
		ctl_fmt_bytes(b, sizeof(b), sb), when);
	jerr = ctl_stats_get(s, "journal_error");
	if (jerr && strcmp(jerr, "0"))
		fprintf(f, "persist  the journal cannot be written: syncs fail "
			   "(see the log)\n");
	if (how && !strcmp(how, "crash"))
		fprintf(f, "recovery after a crash: %" PRIu64 " files back, %"
			   PRIu64 " dropped, %" PRIu64 " rolled back%s\n",
			stats_u64_or0(s, "recovered_files"), dropped, rolled,
			dropped || rolled ? " (tierfsctl recover --list)" :
					    "");
}

/* Key "device<g>.<field>" of the stats, 0 when missing. */
static uint64_t gpu_u64(const struct ctl_stats *s, int g, const char *field)
{
	char key[64];

	snprintf(key, sizeof(key), "device%d.%s", g, field);
	return stats_u64_or0(s, key);
}

/* Sum of the stats keys PREFIX.* (the reasons of one spill outcome). */
static uint64_t sum_prefix(const struct ctl_stats *s, const char *prefix)
{
	size_t pl = strlen(prefix);
	uint64_t sum = 0, v;

	for (size_t i = 0; i < s->n; i++)
		if (!strncmp(s->kv[i].key, prefix, pl) &&
		    ctl_stats_u64(s, s->kv[i].key, &v))
			sum += v;
	return sum;
}

/*
 * Which tier served the reads, what spills did not happen and why, the
 * moves per direction with their mean time, and the prefetch queue. Each
 * line only with a daemon that has the keys.
 */
static void status_metrics(FILE *f, const struct ctl_stats *s,
			   const struct ctl_tiers *tl)
{
	char a[32], key[96];
	uint64_t v, c, ns, by;
	bool any = false;

	for (unsigned int i = 0; i < tl->n; i++) {
		snprintf(key, sizeof(key), "%s.reads", tl->name[i]);
		if (!ctl_stats_u64(s, key, &v))
			continue;
		fprintf(f, "%s %s %" PRIu64 " (%s)", any ? "," : "reads   ",
			tl->name[i], v,
			ctl_fmt_bytes(a, sizeof(a),
				      tier_u64(s, tl->name[i], "read_bytes")));
		any = true;
	}
	if (any)
		fputc('\n', f);
	if (ctl_stats_get(s, "spill_skipped.nothing_movable"))
		fprintf(f, "spills   %" PRIu64 " skipped, %" PRIu64
			   " dropped (%" PRIu64 " no room, %" PRIu64
			   " disk full), %" PRIu64 " failed\n",
			stats_u64_or0(s, "spill_skipped.nothing_movable"),
			sum_prefix(s, "spill_dropped."),
			stats_u64_or0(s, "spill_dropped.no_room_below"),
			stats_u64_or0(s, "spill_dropped.disk_full"),
			sum_prefix(s, "spill_failed."));
	any = false;
	for (unsigned int i = 0; i < tl->n; i++) {
		for (unsigned int j = 0; j < tl->n; j++) {
			snprintf(key, sizeof(key), "move.%s.%s.count",
				 tl->name[i], tl->name[j]);
			if (i == j || !ctl_stats_u64(s, key, &c) || !c)
				continue;
			snprintf(key, sizeof(key), "move.%s.%s.sum_ns",
				 tl->name[i], tl->name[j]);
			ns = stats_u64_or0(s, key);
			snprintf(key, sizeof(key), "move.%s.%s.bytes",
				 tl->name[i], tl->name[j]);
			by = stats_u64_or0(s, key);
			/* One line each: the status stays within 80
			 * columns. */
			fprintf(f, "%s %s->%s %" PRIu64 " (%s), %.1f ms each\n",
				any ? "        " : "moves   ", tl->name[i],
				tl->name[j], c, ctl_fmt_bytes(a, sizeof(a), by),
				(double)ns / (double)c / 1e6);
			any = true;
		}
	}
	if (ctl_stats_get(s, "prefetch.queued"))
		fprintf(f, "prefetch %" PRIu64 " queued, %" PRIu64 " done, %" PRIu64
			   " failed, %" PRIu64 " pending (of %" PRIu64 ")\n",
			stats_u64_or0(s, "prefetch.queued"),
			stats_u64_or0(s, "prefetch.done"),
			stats_u64_or0(s, "prefetch.failed"),
			stats_u64_or0(s, "prefetch.pending"),
			stats_u64_or0(s, "prefetch.max"));
}

/* A line per GPU the device tier is on ("gpus=0,1"; none without one). */
static void status_gpus(FILE *f, const struct ctl_stats *s)
{
	const char *list = ctl_stats_get(s, "gpus");
	char a[32], b[32], c[32], key[64];

	for (const char *p = list; p && *p;) {
		size_t len = strcspn(p, ",");
		const char *model;
		int g;

		if (len == 0 || len > 3 || sscanf(p, "%d", &g) != 1)
			break;
		snprintf(key, sizeof(key), "device%d.model", g);
		model = ctl_stats_get(s, key);
		fprintf(f, "gpu %-3d %10s  %10s  room %s%s%s\n", g,
			ctl_fmt_bytes(a, sizeof(a), gpu_u64(s, g, "used")),
			ctl_fmt_bytes(b, sizeof(b), gpu_u64(s, g, "limit")),
			ctl_fmt_bytes(c, sizeof(c), gpu_u64(s, g, "room")),
			model && *model ? ", " : "", model ? model : "");
		p += len;
		if (*p == ',')
			p++;
	}
}

static void status_text(FILE *f, const char *mount,
			const struct ctl_stats *s, const struct ctl_stats *prev,
			const struct status_opts *o, bool unicode)
{
	const char *backend = ctl_stats_get(s, "backend");
	const char *model = ctl_stats_get(s, "device_model");
	const char *reload;
	int bar = term_columns() - 65, w = 7;
	char a[32], b[32], c[32];
	struct ctl_tiers tl;
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
		ctl_fmt_bytes(a, sizeof(a), stats_u64_or0(s, "logical_bytes")));
	if (ctl_stats_u64(s, "version", &v) && v != 1)
		fprintf(f, "note     stats version %" PRIu64
			   ", this tierfsctl knows version 1\n",
			v);

	/* ENOSPC: writes refused because this tier, the last that could
	 * take them, was full. */
	/* The daemon's chain, not a list of our own; its names may be
	 * longer than the three every chain has (disk:NAME). */
	ctl_stats_tiers(s, &tl);
	for (unsigned int i = 0; i < tl.n; i++)
		if ((int)strlen(tl.name[i]) > w)
			w = (int)strlen(tl.name[i]);
	/* What a longer name takes, the bar gives back: 80 columns hold. */
	bar -= w - 7;
	if (bar < 8)
		bar = 8;
	fprintf(f, "\n%-*s %10s  %10s  %-*s %5s %8s %8s\n", w, "TIER", "USED",
		"LIMIT", bar + 2, "USAGE", "", "BUFFERS", "ENOSPC");
	for (unsigned int i = 0; i < tl.n; i++) {
		const char *t = tl.name[i];
		uint64_t used = tier_u64(s, t, "used");
		uint64_t limit = tier_u64(s, t, "limit");
		uint64_t bufs = tier_u64(s, t, "buffers");

		fprintf(f, "%-*s %10s  ", w, t,
			ctl_fmt_bytes(a, sizeof(a), used));
		if (!limit && !strcmp(t, "device")) {
			fprintf(f, "%10s  %-*s %5s", "-", bar + 2,
				"(no device tier)", "");
		} else if (!limit) {
			fprintf(f, "%10s  %-*s %5s", "none", bar + 2, "", "");
		} else {
			double frac = (double)used / limit;

			fprintf(f, "%10s  ",
				ctl_fmt_bytes(b, sizeof(b), limit));
			put_bar(f, frac, bar, unicode);
			fprintf(f, " %4.0f%%", frac * 100);
		}
		fprintf(f, " %8" PRIu64 " %8" PRIu64 "\n", bufs,
			tier_u64(s, t, "enospc"));
	}

	status_gpus(f, s);

	fprintf(f, "\n%-*s %22s %22s", w, "TIER", "SPILLED OUT (BUFFERS)",
		"UNSPILLED IN (BUFFERS)");
	if (prev)
		fprintf(f, " %12s %12s", "SPILL/S", "UNSPILL/S");
	fputc('\n', f);
	for (unsigned int i = 0; i < tl.n; i++) {
		const char *t = tl.name[i];
		char sp[48], un[48];

		snprintf(sp, sizeof(sp), "%s (%" PRIu64 ")",
			 ctl_fmt_bytes(a, sizeof(a),
				       tier_u64(s, t, "spill_bytes")),
			 tier_u64(s, t, "spills"));
		snprintf(un, sizeof(un), "%s (%" PRIu64 ")",
			 ctl_fmt_bytes(b, sizeof(b),
				       tier_u64(s, t, "unspill_bytes")),
			 tier_u64(s, t, "unspills"));
		fprintf(f, "%-*s %22s %22s", w, t, sp, un);
		if (prev) {
			ctl_fmt_bytes(a, sizeof(a),
				      rate(prev, s, t, "spill_bytes"));
			ctl_fmt_bytes(c, sizeof(c),
				      rate(prev, s, t, "unspill_bytes"));
			strcat(a, "/s");
			strcat(c, "/s");
			fprintf(f, " %12s %12s", a, c);
		}
		fputc('\n', f);
	}
	fprintf(f, "\nevict    %" PRIu64 " scans found nothing movable, %" PRIu64
		   " moves failed\n",
		stats_u64_or0(s, "evict_nothing_movable"),
		stats_u64_or0(s, "evict_move_errors"));
	status_metrics(f, s, &tl);
	fprintf(f, "errors   %" PRIu64 " checksum, %" PRIu64 " spill read, %" PRIu64
		   " spill write, %" PRIu64 " host memory\n",
		stats_u64_or0(s, "checksum_errors"),
		stats_u64_or0(s, "spill_read_errors"),
		stats_u64_or0(s, "spill_write_errors"),
		stats_u64_or0(s, "host_alloc_failures"));
	/* Spilling pauses until room is made: said while it lasts. */
	if (stats_u64_or0(s, "disk.full"))
		fprintf(f, "disk     full: spilling waits for room (full %" PRIu64
			   " time%s since the mount)\n",
			stats_u64_or0(s, "disk.full_count"),
			stats_u64_or0(s, "disk.full_count") == 1 ? "" : "s");
	print_persist(f, s);
	/* The daemon kept its configuration; the operator should know. */
	reload = ctl_stats_get(s, "reload_error");
	if (reload && *reload)
		fprintf(f, "config   last reload failed: %s\n", reload);
	if (prev)
		fprintf(f, "rates    over the last %.1f s\n", s->at - prev->at);
}

/*
 * One object: the top-level stats keys as they come, the per-tier keys
 * ("host.used") gathered under "tiers", rates there too when two samples
 * were taken. Keys this tierfsctl does not know pass through, so scripts
 * see what a newer daemon adds.
 */
/* Whether @key, with its first '.' at @dot, is a TIER.* key of @tl. */
static bool tier_of_key(const struct ctl_tiers *tl, const char *key,
			const char *dot)
{
	size_t len = (size_t)(dot - key);

	for (unsigned int i = 0; i < tl->n; i++)
		if (strlen(tl->name[i]) == len &&
		    !memcmp(tl->name[i], key, len))
			return true;
	return false;
}

static void status_json(FILE *f, const char *mount,
			const struct ctl_stats *s, const struct ctl_stats *prev)
{
	static const char *const rate_fields[] = { "spill_bytes",
						   "unspill_bytes", "spills",
						   "unspills" };

	struct ctl_tiers tl;

	ctl_stats_tiers(s, &tl);
	fputs("{\"mount\": ", f);
	ctl_json_str(f, mount);
	for (size_t i = 0; i < s->n; i++) {
		const char *dot = strchr(s->kv[i].key, '.');

		if (dot && tier_of_key(&tl, s->kv[i].key, dot))
			continue;
		if (!strcmp(s->kv[i].key, "mount") ||
		    !strcmp(s->kv[i].key, "tiers") ||
		    !strcmp(s->kv[i].key, "interval_s"))
			continue;
		fputs(", ", f);
		ctl_json_str(f, s->kv[i].key);
		fputs(": ", f);
		json_value(f, s->kv[i].val);
	}
	fputs(", \"tiers\": {", f);
	for (unsigned int ti = 0; ti < tl.n; ti++) {
		const char *t = tl.name[ti];
		size_t len = strlen(t);
		bool first = true;

		fprintf(f, "%s\"%s\": {", ti ? ", " : "", t);
		for (size_t i = 0; i < s->n; i++) {
			const char *k = s->kv[i].key;

			if (strncmp(k, t, len) || k[len] != '.')
				continue;
			fputs(first ? "" : ", ", f);
			first = false;
			ctl_json_str(f, k + len + 1);
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
	struct ctl_stats prev = { 0 }, cur = { 0 };
	bool have_prev = false;
	long n = 0;

	if (!ctl_stats_read_msg(mount, &cur))
		return EXIT_FAIL;
	if (o->interval && !o->watch) {
		prev = cur;
		sleep_s(o->interval);
		if (!ctl_stats_read_msg(mount, &cur)) {
			ctl_stats_free(&prev);
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
		ctl_stats_free(&prev);
		prev = cur;
		have_prev = true;
		if (!ctl_stats_read_msg(mount, &cur)) {
			ctl_stats_free(&prev);
			return EXIT_FAIL;
		}
	}
	ctl_stats_free(&prev);
	ctl_stats_free(&cur);
	return 0;
}

int cmd_status(int argc, char **argv)
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

	while ((c = ctl_next_opt(argc, argv, ":i:wn:", lo)) != -1) {
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
				return ctl_bad_usage("bad interval '%s'",
						     optarg);
			break;
		case 'w':
			o.watch = true;
			break;
		case 'n':
			if (!ctl_parse_u64(optarg, &count) || !count ||
			    count > LONG_MAX)
				return ctl_bad_usage("bad count '%s'", optarg);
			o.count = (long)count;
			break;
		}
	}
	if (argc - optind > 1)
		return ctl_bad_usage("one MOUNT at most");
	if (o.count && !o.watch)
		return ctl_bad_usage("--count needs --watch");
	if (o.watch && !o.interval)
		o.interval = 1;
	mount = ctl_pick_mount(optind < argc ? argv[optind] : NULL);
	if (!mount)
		return EXIT_FAIL;
	rc = status_run(mount, &o);
	free(mount);
	return rc;
}
