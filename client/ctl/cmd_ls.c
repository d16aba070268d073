// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl ls: files with their tier, sizes, last access and pins.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "client/ctl/ctl.h"

enum sort_key { SORT_NAME, SORT_TIER, SORT_SIZE, SORT_STORED, SORT_ATIME,
		SORT_PINS };

struct ls_ent {
	char *path; /* for system calls */
	size_t name_off; /* path + name_off is what the table shows */
	char type; /* 'f' regular, 'd' directory, 'l' symlink, 'o' other */
	int tier; /* its position in the mount's chain, -1 unknown */
	char tier_name[32]; /* as the daemon names it */
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

/* Fills the tier columns of a regular file; false (message given) when the
 * mount does not answer for it. */
static bool ls_fill(struct ls_ent *e, const struct ctl_tiers *tiers)
{
	e->tier = ctl_get_tier(e->path, tiers, e->tier_name,
			       sizeof(e->tier_name));
	if (e->tier < 0) {
		ctl_op_error("'%s': %s: %s", e->path, TFS_XATTR_TIER,
			     strerror(errno));
		return false;
	}
	e->have_size = ctl_get_xattr_u64(e->path, TFS_XATTR_SIZE, &e->size);
	e->have_stored =
		ctl_get_xattr_u64(e->path, TFS_XATTR_STORED, &e->stored);
	e->have_atime = ctl_get_xattr_u64(e->path, TFS_XATTR_ATIME, &e->atime);
	e->have_pins = ctl_get_xattr_u64(e->path, TFS_XATTR_PINS, &e->pins);
	return true;
}

static struct ls_ent *ls_add(struct ls_list *l, char *path, size_t name_off,
			     mode_t mode)
{
	struct ls_ent *e;

	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->e = ctl_xrealloc(l->e, l->cap * sizeof(*l->e));
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

/* Adds a row (taking @path) and, for a regular file, its tier columns
 * from its mount's chain @tiers; a file the mount does not answer for gets
 * no row. */
static bool ls_add_fill(struct ls_list *l, char *path, size_t name_off,
			mode_t mode, const struct ctl_tiers *tiers)
{
	if (ls_add(l, path, name_off, mode)->type != 'f' ||
	    ls_fill(&l->e[l->n - 1], tiers))
		return true;
	free(path);
	l->n--;
	return false;
}

struct ls_walk {
	struct ls_list *l;
	size_t name_off;
	dev_t dev;
	const struct ctl_tiers *tiers;
	bool recursive;
};

static bool ls_dir(struct ls_walk *w, const char *dir);

static bool ls_entry(void *ctx, char *path, const struct stat *st)
{
	struct ls_walk *w = ctx;
	bool ok = true;

	if (w->recursive && S_ISDIR(st->st_mode)) {
		if (st->st_dev == w->dev)
			ok = ls_dir(w, path);
		free(path);
		return ok;
	}
	return ls_add_fill(w->l, path, w->name_off, st->st_mode, w->tiers);
}

/*
 * Lists @dir one level (rows for subdirectories too) or, with @recursive,
 * every file below it (no rows for directories; their names are in the
 * paths). Does not cross into other mounts. Returns false when something
 * could not be listed.
 */
static bool ls_dir(struct ls_walk *w, const char *dir)
{
	return ctl_walk_dir(dir, ls_entry, w);
}

static int tier_rank(const struct ls_ent *e)
{
	if (e->type != 'f')
		return TFS_TIER_MAX + 1;
	return e->tier < 0 ? TFS_TIER_MAX : e->tier;
}

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

/*
 * As ls does: names and tiers ascending (the chain's order, fastest
 * first), numbers
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
		ctl_fmt_bytes(buf, len, v);
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

static const char *ls_tier(const struct ls_ent *e)
{
	switch (e->type) {
	case 'f':
		return e->tier < 0 ? "?" : e->tier_name;
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
		ctl_json_str(stdout, ls_name(e));
		printf(", \"type\": \"%s\"", type_name[(int)e->type]);
		if (e->type == 'f') {
			printf(", \"tier\": ");
			if (e->tier < 0)
				fputs("null", stdout);
			else
				ctl_json_str(stdout, e->tier_name);
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

int cmd_ls(int argc, char **argv)
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
	struct ctl_dev_cache cache = { .n = 0 };
	struct ls_list l = { 0 };
	bool json = false, human = false, recursive = false, ok = true;
	char **paths;
	int c, n;

	sort_by = SORT_NAME;
	sort_reverse = false;
	while ((c = ctl_next_opt(argc, argv, ":s:rRh", lo)) != -1) {
		switch (c) {
		case 's':
			if (!parse_sort(optarg, &sort_by))
				return ctl_bad_usage("unknown column '%s'",
						     optarg);
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
		}
	}
	paths = optind < argc ? argv + optind : dot;
	n = optind < argc ? argc - optind : 1;

	for (int i = 0; i < n; i++) {
		const char *p = paths[i];
		const struct ctl_tiers *tiers;
		struct stat st;

		if (stat(p, &st)) {
			ctl_error("'%s': %s", p, strerror(errno));
			ok = false;
			continue;
		}
		if (!ctl_on_tierfs(&cache, p, st.st_dev, NULL, &tiers)) {
			ok = false;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			/* one directory alone: names relative to it, as ls */
			struct ls_walk w = { &l, 0, st.st_dev, tiers,
					     recursive };

			if (n == 1) {
				char *j = ctl_join_path(p, "");

				w.name_off = strlen(j);
				free(j);
			}
			ok &= ls_dir(&w, p);
		} else if (!ls_add_fill(&l, ctl_xstrdup(p), 0, st.st_mode,
					tiers)) {
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
