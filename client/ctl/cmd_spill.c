// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl spill, prefetch, pin, unpin: move files between tiers, or keep
 * them where they are.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

/* progress bar thresholds for spill/prefetch/pin/unpin */
#define PROGRESS_MIN_FILES 16
#define PROGRESS_MIN_BYTES (256ull << 20)

enum op_kind { OP_SPILL, OP_PREFETCH, OP_PIN, OP_UNPIN };

struct target {
	char *path;
	uint64_t size;
	dev_t dev; /* its mount's, when it was found */
	int to; /* tier for spill and prefetch: its place in the chain */
};

struct target_list {
	struct target *t;
	size_t n, cap;
	uint64_t bytes;
};

static void target_add(struct target_list *l, char *path, uint64_t size,
		       dev_t dev, int to)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->t = ctl_xrealloc(l->t, l->cap * sizeof(*l->t));
	}
	l->t[l->n].path = path;
	l->t[l->n].size = size;
	l->t[l->n].dev = dev;
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
		target_add(w->l, path, st->st_size, st->st_dev, w->to);
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

	return ctl_walk_dir(dir, collect_entry, &w);
}

struct op_opts {
	enum op_kind kind;
	const char *to; /* --to of spill and prefetch, NULL when not given */
	bool recursive;
	bool wait; /* prefetch: until the files are there */
	bool quiet;
	int progress; /* -1 never, 0 auto, 1 always */
};

/*
 * Where in the chain @tiers of a mount (@has_device: with a device tier)
 * a spill or prefetch goes, or -1 for a --to it cannot go to. A spill
 * goes down to the last tier, or to the one --to names below the first; a
 * prefetch up to the fastest tier the mount has (the device, or the next
 * on a mount without one), or to the one --to names above the last.
 */
static int target_tier(const struct op_opts *o, const struct ctl_tiers *tiers,
		       bool has_device)
{
	int last = (int)tiers->n - 1, t;

	if (o->kind != OP_SPILL && o->kind != OP_PREFETCH)
		return 0;
	if (!o->to)
		return o->kind == OP_SPILL ? last : !has_device && last > 0;
	t = ctl_tiers_index(tiers, o->to, strlen(o->to));
	if (o->kind == OP_SPILL ? t < 1 : t < 0 || t >= last)
		return -1;
	return t;
}

/*
 * Expands the PATH arguments, with each mount's chain from @cache: 0, or
 * EXIT_FAIL when some could not be used, or EXIT_USAGE (message given)
 * for a --to that a PATH's mount cannot move to.
 */
static int collect_targets(struct target_list *l, char **paths, int n,
			   const struct op_opts *o, struct ctl_dev_cache *cache)
{
	int rc = 0;

	for (int i = 0; i < n; i++) {
		const struct ctl_tiers *tiers;
		bool has_device;
		struct stat st;
		int to;

		if (stat(paths[i], &st)) {
			ctl_error("'%s': %s", paths[i], strerror(errno));
			rc = EXIT_FAIL;
			continue;
		}
		if (!ctl_on_tierfs(cache, paths[i], st.st_dev, &has_device,
				   &tiers)) {
			rc = EXIT_FAIL;
			continue;
		}
		to = target_tier(o, tiers, has_device);
		if (to < 0)
			return ctl_bad_usage("cannot %s to '%s'", ctl_cmd_name,
					     o->to);
		if (S_ISREG(st.st_mode)) {
			target_add(l, ctl_xstrdup(paths[i]), st.st_size,
				   st.st_dev, to);
		} else if (S_ISDIR(st.st_mode) &&
			   (o->recursive || o->kind == OP_PREFETCH)) {
			if (!collect_dir(l, paths[i], st.st_dev, to))
				rc = EXIT_FAIL;
		} else if (S_ISDIR(st.st_mode)) {
			ctl_op_error("'%s': %s (use -R)", paths[i],
				     strerror(EISDIR));
			rc = EXIT_FAIL;
		} else {
			ctl_op_error("'%s': not a regular file", paths[i]);
			rc = EXIT_FAIL;
		}
	}
	return rc;
}

/*
 * Set @name to @val on the regular file at @path, found on device @dev:
 * through a descriptor of what is there now, checked to be a regular
 * file on that mount still, so that a file swapped for a symlink since
 * it was listed takes root's setxattr nowhere else. 0 or -errno.
 */
static int set_on_mount(const char *path, dev_t dev, const char *name,
			const char *val)
{
	char proc[64];
	struct stat st;
	int fd, rc = 0;

	fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st))
		rc = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_dev != dev)
		rc = -EXDEV;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (!rc && setxattr(proc, name, val, strlen(val), 0))
		rc = -errno;
	close(fd);
	return rc;
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
	double now = ctl_now_s();
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
		ctl_fmt_bytes(x, sizeof(x), b),
		ctl_fmt_bytes(y, sizeof(y), p->b_total));
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

/* The name of @t's tier in its mount's chain; "" when the mount is gone. */
static const char *target_name(struct ctl_dev_cache *c, const struct target *t)
{
	const struct ctl_tiers *tiers;

	if (!ctl_on_tierfs(c, t->path, t->dev, NULL, &tiers))
		return "";
	return tiers->name[t->to];
}

/*
 * A descriptor for reading the regular file at @path on device @dev, as
 * set_on_mount() checks it: reopened from an O_PATH one that did not
 * follow a symlink. -errno.
 */
static int open_on_mount(const char *path, dev_t dev)
{
	char proc[64];
	struct stat st;
	int fd, rfd;

	fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st))
		rfd = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_dev != dev)
		rfd = -EXDEV;
	else {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		rfd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (rfd < 0)
			rfd = -errno;
	}
	close(fd);
	return rfd;
}

/* TFS_IOC_PREFETCH of @fd to @tier; 0 with *@state, or -errno. */
static int prefetch_ioctl(int fd, int tier, bool wait, uint32_t *state)
{
	struct tfs_ioc_prefetch a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.version = TFS_ABI_VERSION;
	a.flags = wait ? TFS_PREFETCH_WAIT : 0;
	a.tier = (uint32_t)tier;
	do
		rc = ioctl(fd, TFS_IOC_PREFETCH, &a);
	while (rc && errno == EINTR);
	if (rc)
		return -errno;
	*state = a.state;
	return 0;
}

/* Descriptors of files queued, oldest first, so that --wait (or a full
 * queue) can wait for them in turn. */
#define PF_WINDOW 64

struct pf_run {
	const struct op_opts *o;
	struct target_list *l;
	struct progress *p;
	struct ctl_dev_cache *cache; /* the mounts' chains */
	int fd[PF_WINDOW];
	size_t idx[PF_WINDOW]; /* into l->t */
	size_t head, n;
	size_t done, moved, queued, already, failed;
	uint64_t bytes, moved_bytes;
};

static void pf_error(struct pf_run *r, const char *path, int err)
{
	progress_clear(r->p);
	ctl_op_error("'%s': %s%s", path,
		     err == EXDEV ? "not a file on the mount any more" :
				    strerror(err),
		     err == ENODEV ? " (the mount has no device tier)" : "");
	r->failed++;
}

/* Wait for the oldest file queued: it is there, or why not. */
static void pf_wait_oldest(struct pf_run *r)
{
	size_t i = r->idx[r->head];
	int fd = r->fd[r->head];
	uint32_t state;
	int rc = prefetch_ioctl(fd, r->l->t[i].to, true, &state);

	close(fd);
	r->head = (r->head + 1) % PF_WINDOW;
	r->n--;
	if (rc) {
		pf_error(r, r->l->t[i].path, -rc);
	} else {
		r->moved++;
		r->moved_bytes += r->l->t[i].size;
	}
	if (r->o->wait) {
		r->done++;
		r->bytes += r->l->t[i].size;
		progress_draw(r->p, r->done, r->bytes, false);
	}
}

/*
 * One file: queued (kept for waiting), there already, or failed. A full
 * queue is waited out: on the oldest of ours, else (others' prefetches
 * fill it) by trying again shortly, for up to a minute.
 */
static void pf_one(struct pf_run *r, size_t i)
{
	const struct target *t = &r->l->t[i];
	uint32_t state = 0;
	int fd, rc, tries = 0;

	fd = open_on_mount(t->path, t->dev);
	if (fd < 0) {
		pf_error(r, t->path, -fd);
		goto out_count;
	}
	for (;;) {
		rc = prefetch_ioctl(fd, t->to, false, &state);
		if (rc != -EAGAIN)
			break;
		if (r->n) {
			pf_wait_oldest(r);
		} else if (++tries <= 6000) {
			struct timespec ts = { 0, 10 * 1000 * 1000 };

			nanosleep(&ts, NULL);
		} else {
			break;
		}
	}
	/* A daemon older than the ioctl: the move, done now. */
	if (rc == -ENOTTY) {
		close(fd);
		fd = -1;
		rc = set_on_mount(t->path, t->dev, TFS_XATTR_TIER,
				  target_name(r->cache, t));
		state = TFS_PREFETCH_DONE;
	}
	if (rc) {
		pf_error(r, t->path, -rc);
	} else if (state == TFS_PREFETCH_THERE) {
		r->already++;
	} else if (state == TFS_PREFETCH_DONE) {
		r->moved++;
		r->moved_bytes += t->size;
	} else if (!r->o->wait) {
		r->queued++;
		r->moved_bytes += t->size;
	} else {
		if (r->n == PF_WINDOW)
			pf_wait_oldest(r);
		r->fd[(r->head + r->n) % PF_WINDOW] = fd;
		r->idx[(r->head + r->n) % PF_WINDOW] = i;
		r->n++;
		return;
	}
	if (fd >= 0)
		close(fd);
out_count:
	r->done++;
	r->bytes += t->size;
	progress_draw(r->p, r->done, r->bytes, false);
}

/* prefetch: queue every file, then with --wait wait for each in turn. */
static void pf_run(struct pf_run *r)
{
	for (size_t i = 0; i < r->l->n; i++)
		pf_one(r, i);
	while (r->n)
		pf_wait_oldest(r);
}

static int op_run(const struct op_opts *o, char **paths, int npaths)
{
	struct ctl_dev_cache cache = { .n = 0 };
	struct target_list l = { 0 };
	struct progress p = { 0 };
	size_t done = 0, moved = 0, already = 0, failed = 0;
	uint64_t bytes = 0, moved_bytes = 0;
	int status = collect_targets(&l, paths, npaths, o, &cache);
	/* the tier all of them go to, named in the summary; "" when not one */
	char to[32] = "", x[32];

	if (status == EXIT_USAGE)
		goto out;
	if (l.n && (o->kind == OP_SPILL || o->kind == OP_PREFETCH))
		snprintf(to, sizeof(to), "%s", target_name(&cache, &l.t[0]));

	p.verb = ctl_cmd_name;
	p.n_total = l.n;
	p.b_total = l.bytes;
	p.on = o->progress > 0 ||
	       (!o->progress && !o->quiet && isatty(STDERR_FILENO) &&
		(l.n > PROGRESS_MIN_FILES || l.bytes > PROGRESS_MIN_BYTES));

	if (o->kind == OP_PREFETCH) {
		struct pf_run r = { .o = o, .l = &l, .p = &p, .cache = &cache };

		for (size_t i = 0; i < l.n; i++)
			if (strcmp(to, target_name(&cache, &l.t[i])))
				to[0] = 0;
		progress_draw(&p, 0, 0, true);
		pf_run(&r);
		moved = r.moved + r.queued;
		moved_bytes = r.moved_bytes;
		already = r.already;
		failed = r.failed;
		done = r.done;
		bytes = r.bytes;
		goto summary;
	}
	for (size_t i = 0; i < l.n; i++) {
		const char *path = l.t[i].path;
		const char *name, *val;
		int rc;

		progress_draw(&p, done, bytes, i == 0);
		if (o->kind == OP_SPILL || o->kind == OP_PREFETCH) {
			const struct ctl_tiers *tiers;
			char now[32];
			int cur;

			/* its mount's chain: cached, found again past 8 */
			if (!ctl_on_tierfs(&cache, path, l.t[i].dev, NULL,
					   &tiers)) {
				failed++;
				goto next;
			}
			cur = ctl_get_tier(path, tiers, now, sizeof(now));

			/* spill never moves up, prefetch never down */
			if (cur >= 0 && (o->kind == OP_SPILL ?
						 cur >= l.t[i].to :
						 cur <= l.t[i].to)) {
				already++;
				goto next;
			}
			name = TFS_XATTR_TIER;
			val = tiers->name[l.t[i].to];
			if (strcmp(to, val))
				to[0] = 0;
		} else {
			name = TFS_XATTR_PIN;
			val = o->kind == OP_PIN ? "1" : "0";
		}
		rc = set_on_mount(path, l.t[i].dev, name, val);
		if (rc) {
			int err = -rc;

			progress_clear(&p);
			ctl_op_error("'%s': %s%s", path,
				     err == EXDEV ? "not a file on the mount "
						    "any more" :
						    strerror(err),
				     err == ENODEV ?
					     " (the mount has no device tier)" :
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
summary:
	progress_draw(&p, done, bytes, true);
	progress_clear(&p);

	if (!o->quiet && l.n) {
		bool queued = o->kind == OP_PREFETCH && !o->wait;

		switch (o->kind) {
		case OP_SPILL:
		case OP_PREFETCH:
			printf("%s: %zu file%s (%s) %s%s", ctl_cmd_name,
			       moved, moved == 1 ? "" : "s",
			       ctl_fmt_bytes(x, sizeof(x), moved_bytes),
			       queued ? "queued " : "moved ",
			       queued && *to ? "for " :
			       *to	      ? "to " :
						"");
			fputs(*to		     ? to :
			      o->kind == OP_SPILL ? "down" :
						    "up",
			      stdout);
			if (already)
				printf(", %zu already %s", already,
				       o->kind == OP_SPILL ? "there or lower" :
							     "there or higher");
			break;
		case OP_PIN:
		case OP_UNPIN:
			printf("%s: %zu file%s %s", ctl_cmd_name, moved,
			       moved == 1 ? "" : "s",
			       o->kind == OP_PIN ? "pinned" : "unpinned");
			break;
		}
		if (failed)
			printf(", %zu failed", failed);
		putchar('\n');
	}
out:
	for (size_t i = 0; i < l.n; i++)
		free(l.t[i].path);
	free(l.t);
	return status ? status : failed ? EXIT_FAIL : 0;
}

static int cmd_op(enum op_kind kind, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "recursive", no_argument, NULL, 'R' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "to", required_argument, NULL, OPT_TO },
		{ "tier", required_argument, NULL, OPT_TO },
		{ "wait", no_argument, NULL, OPT_WAIT },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	struct op_opts o = {
		.kind = kind,
	};
	int c;

	while ((c = ctl_next_opt(argc, argv, ":Rq", lo)) != -1) {
		switch (c) {
		case 'R':
			o.recursive = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		case OPT_TO:
			if (kind != OP_SPILL && kind != OP_PREFETCH)
				return ctl_bad_usage(
					"--to is for spill and prefetch");
			/* checked against each PATH's chain */
			o.to = optarg;
			break;
		case OPT_WAIT:
			if (kind != OP_PREFETCH)
				return ctl_bad_usage("--wait is for prefetch");
			o.wait = true;
			break;
		case OPT_PROGRESS:
			o.progress = 1;
			break;
		case OPT_NO_PROGRESS:
			o.progress = -1;
			break;
		}
	}
	if (optind == argc)
		return ctl_bad_usage("no PATH given");
	return op_run(&o, argv + optind, argc - optind);
}

int cmd_spill(int argc, char **argv)
{
	return cmd_op(OP_SPILL, argc, argv);
}

int cmd_prefetch(int argc, char **argv)
{
	return cmd_op(OP_PREFETCH, argc, argv);
}

int cmd_pin(int argc, char **argv)
{
	return cmd_op(OP_PIN, argc, argv);
}

int cmd_unpin(int argc, char **argv)
{
	return cmd_op(OP_UNPIN, argc, argv);
}
