// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Mount options (-o a=b,c=d) as config/ sees them: cfg_owns_option(),
 * cfg_is_option() and cfg_set_option() on each item of a comma-separated
 * list, as fs/main.c's option callback calls them.
 *
 * Contract checked, besides no crash or leak:
 *   - cfg_is_option() implies cfg_owns_option(), and -ENOENT comes exactly
 *     for names that are not options;
 *   - a refused value leaves the whole config exactly as it was ("bad input
 *     loses nothing") and says why, starting with "-o ";
 *   - an accepted one leaves a config the daemon can trust;
 *   - the file form "[section] key = value" of the same setting accepts and
 *     refuses the same values, with the same result (tierfs.conf(5): every
 *     key is also the mount option section_key);
 *   - cfg_suggest() offers a known name within its documented distance
 *     (at most a third of the letters, never all), and offers none only
 *     when no known name is that close, by an independent edit distance.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cfg_common.h"
#include "config/log.h"

static int memfd = -1;
static char path[64];

static void collect_options(void);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	memfd = memfd_create("tierfs-fuzz.conf", MFD_CLOEXEC);
	if (memfd < 0) {
		perror("memfd_create");
		exit(1);
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	tfs_log_max = 0;
	collect_options();
	return 0;
}

static bool same_size(const struct cfg_size *a, const struct cfg_size *b)
{
	return a->is_percent == b->is_percent &&
	       (a->is_percent ? a->percent == b->percent : a->bytes == b->bytes);
}

/* Every setting equal; where it came from may differ. */
static bool cfg_same(const struct tfs_config *a, const struct tfs_config *b)
{
	return !strcmp(a->device.backend, b->device.backend) &&
	       a->device.gpu == b->device.gpu &&
	       same_size(&a->device.limit, &b->device.limit) &&
	       same_size(&a->host.limit, &b->host.limit) &&
	       a->host.pinned == b->host.pinned &&
	       !strcmp(a->disk.path, b->disk.path) &&
	       same_size(&a->disk.limit, &b->disk.limit) &&
	       a->disk.compression == b->disk.compression &&
	       a->disk.chunk_size == b->disk.chunk_size &&
	       !strcmp(a->policy.eviction, b->policy.eviction) &&
	       a->policy.unspill == b->policy.unspill &&
	       a->policy.high_watermark == b->policy.high_watermark &&
	       a->policy.target == b->policy.target &&
	       a->fs.threads == b->fs.threads &&
	       a->fs.read_ahead_kb == b->fs.read_ahead_kb;
}

/* A value both forms must read alike: the file form trims whitespace and
 * cuts comments, a mount option takes the bytes as they are. */
static bool clean_value(const char *v)
{
	size_t n = strlen(v);

	if (!n || isspace((unsigned char)v[0]) ||
	    isspace((unsigned char)v[n - 1]))
		return false;
	for (; *v; v++)
		if (!isprint((unsigned char)*v) || *v == ';' || *v == '#')
			return false;
	return true;
}

/* Set @name=@value through a config file; returns cfg_load_file's rc. */
static int set_by_file(struct tfs_config *c, const char *name,
		       const char *value)
{
	const char *us = strchr(name, '_');
	char err[1024];
	int n;

	n = dprintf(memfd, "[%.*s]\n%s = %s\n", (int)(us - name), name, us + 1,
		    value);
	if (n < 0)
		abort();
	return cfg_load_file(c, path, err, sizeof(err));
}

static void differential(const char *name, const char *value)
{
	struct tfs_config a, b;
	char err[1024];
	int ra, rb;

	if (ftruncate(memfd, 0) || lseek(memfd, 0, SEEK_SET))
		abort();
	cfg_defaults(&a);
	cfg_defaults(&b);
	ra = cfg_set_option(&a, name, value, err, sizeof(err));
	rb = set_by_file(&b, name, value);
	FUZZ_CHECK(!ra == !rb, "-o %s=%s gives %d, the file form %d", name,
		   value, ra, rb);
	if (!ra)
		FUZZ_CHECK(cfg_same(&a, &b),
			   "-o %s=%s and the file form set different values",
			   name, value);
	cfg_free(&a);
	cfg_free(&b);
}

/* Names besides the config keys, as fs/main.c passes libfuse's. */
static const char *const extra[] = { "allow_other", "default_permissions",
				     "fsname", "max_read", "noatime",
				     "ro" };
#define NEXTRA (sizeof(extra) / sizeof(extra[0]))

/* Optimal string alignment distance, case-insensitive: the reference
 * cfg_suggest() is checked against, written without looking at its
 * table layout. */
static size_t osa(const char *a, size_t la, const char *b, size_t lb)
{
	size_t *d = calloc((la + 1) * (lb + 1), sizeof(*d)), r;

#define D(i, j) d[(i) * (lb + 1) + (j)]
	if (!d)
		abort();
	for (size_t i = 0; i <= la; i++)
		D(i, 0) = i;
	for (size_t j = 0; j <= lb; j++)
		D(0, j) = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			bool same = tolower((unsigned char)a[i - 1]) ==
				    tolower((unsigned char)b[j - 1]);
			size_t v = D(i - 1, j - 1) + !same;

			if (D(i - 1, j) + 1 < v)
				v = D(i - 1, j) + 1;
			if (D(i, j - 1) + 1 < v)
				v = D(i, j - 1) + 1;
			if (i > 1 && j > 1 &&
			    tolower((unsigned char)a[i - 1]) ==
				    tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) ==
				    tolower((unsigned char)b[j - 1]) &&
			    D(i - 2, j - 2) + 1 < v)
				v = D(i - 2, j - 2) + 1;
			D(i, j) = v;
		}
	}
	r = D(la, lb);
#undef D
	free(d);
	return r;
}

/* Every config option, as cfg_print_help() lists them. */
static char *options[64];
static size_t noptions;

static void collect_options(void)
{
	char *text = NULL, *line, *save;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		abort();
	cfg_print_help(f, 0);
	fclose(f);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "-o ", 3) || noptions == 64)
			continue;
		options[noptions] = strndup(line + 3, strcspn(line + 3, "="));
		if (!options[noptions] || !cfg_is_option(options[noptions]))
			abort();
		noptions++;
	}
	free(text);
	if (!noptions)
		abort();
}

static void check_suggest(const char *word)
{
	size_t wl = strcspn(word, "="), limit = wl / 3 ? wl / 3 : 1;
	size_t best = SIZE_MAX;
	char buf[80];
	const char *got;

	got = cfg_suggest(word, extra, NEXTRA, buf, sizeof(buf));
	FUZZ_CHECK(!got || got == buf, "cfg_suggest returned another pointer");
	if (!wl || wl > 64) {
		FUZZ_CHECK(!got, "'%s': suggestion for a word of %zu bytes",
			   word, wl);
		return;
	}
	for (size_t i = 0; i < NEXTRA + noptions; i++) {
		const char *n = i < NEXTRA ? extra[i] : options[i - NEXTRA];
		size_t d = osa(word, wl, n, strlen(n));

		best = d < best ? d : best;
	}
	if (!got) {
		FUZZ_CHECK(best > limit || best >= wl,
			   "'%s': no suggestion, but one is %zu edits away",
			   word, best);
		return;
	}
	FUZZ_CHECK(strnlen(buf, sizeof(buf)) < sizeof(buf), "unterminated");
	bool known = cfg_is_option(buf);

	for (size_t i = 0; i < NEXTRA; i++)
		known |= !strcmp(buf, extra[i]);
	FUZZ_CHECK(known, "'%s': suggested unknown '%s'", word, buf);
	size_t d = osa(word, wl, buf, strlen(buf));

	FUZZ_CHECK(d == best && d <= limit && d < wl,
		   "'%s': suggested '%s', %zu edits away (best %zu, limit %zu)",
		   word, buf, d, best, limit);
}

static void one_item(struct tfs_config *cfg, char *item)
{
	struct tfs_config snap;
	char *eq = strchr(item, '='), *value = NULL, err[1024];
	bool owns, is;
	int rc;

	is = cfg_is_option(item);
	check_suggest(item);
	if (eq) {
		*eq = '\0';
		value = eq + 1;
	}
	owns = cfg_owns_option(item);
	FUZZ_CHECK(is == cfg_is_option(item), "'=' changes cfg_is_option");
	FUZZ_CHECK(!is || owns, "'%s' is an option but not owned", item);
	if (!owns || !value)
		return;

	memcpy(&snap, cfg, sizeof(snap));
	err[0] = '\0';
	rc = cfg_set_option(cfg, item, value, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOENT || rc == -ENOMEM,
		   "rc %d", rc);
	FUZZ_CHECK((rc == -ENOENT) == !is, "'%s': rc %d but is_option %d",
		   item, rc, is);
	if (rc) {
		FUZZ_CHECK(!memcmp(&snap, cfg, sizeof(snap)),
			   "-o %s=%s refused (%s) but changed the config", item,
			   value, err);
		cfg_check_msg(err, sizeof(err), "-o ");
	} else {
		cfg_check_valid(cfg);
	}
	if (is && clean_value(value))
		differential(item, value);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tfs_config cfg;
	char *buf, *item, *save;

	buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	cfg_defaults(&cfg);
	for (item = strtok_r(buf, ",", &save); item;
	     item = strtok_r(NULL, ",", &save))
		one_item(&cfg, item);
	cfg_free(&cfg);
	free(buf);
	return 0;
}
