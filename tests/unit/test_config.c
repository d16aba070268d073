// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * config/: every key with good and bad values, every size form, the config
 * file with its line numbers, precedence of -o over the file, and the
 * checks of cfg_validate().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "tap.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)

static char tmpdir[] = "/tmp/tfs-test-config.XXXXXX";
static char err[1024];

/* True when @s starts with @prefix; prints both when not. */
static bool starts(const char *s, const char *prefix)
{
	if (!strncmp(s, prefix, strlen(prefix)))
		return true;
	printf("#   expected '%s...', got '%s'\n", prefix, s);
	return false;
}

static bool has(const char *s, const char *needle)
{
	if (strstr(s, needle))
		return true;
	printf("#   expected '%s' in '%s'\n", needle, s);
	return false;
}

static char *tmp_path(const char *name)
{
	static char buf[8][512];
	static int next;
	char *p = buf[next++ % 8];

	snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
	return p;
}

static const char *write_file(const char *name, const char *text, size_t len)
{
	const char *path = tmp_path(name);
	FILE *f = fopen(path, "w");

	if (!f) {
		perror(path);
		exit(1);
	}
	fwrite(text, 1, len, f);
	fclose(f);
	return path;
}

static const char *conf(const char *text)
{
	return write_file("t.conf", text, strlen(text));
}

/* Load @text as a config file on top of the defaults. */
static int load(struct tfs_config *cfg, const char *text)
{
	cfg_defaults(cfg);
	err[0] = '\0';
	return cfg_load_file(cfg, conf(text), err, sizeof(err));
}

/* Sizes */

static void test_size_forms(void)
{
	static const struct {
		const char *s;
		uint64_t bytes;
	} good[] = {
		{ "0", 0 },
		{ "4096", 4096 },
		{ "64K", 64 * KiB },
		{ "64k", 64 * KiB },
		{ "64KB", 64 * KiB },
		{ "64kb", 64 * KiB },
		{ "64KiB", 64 * KiB },
		{ "64kib", 64 * KiB },
		{ "1M", MiB },
		{ "1m", MiB },
		{ "1MiB", MiB },
		{ "2G", 2 * GiB },
		{ "2g", 2 * GiB },
		{ "2GB", 2 * GiB },
		{ "1T", TiB },
		{ "1t", TiB },
		{ "1TiB", TiB },
		{ "1.5G", 3 * GiB / 2 },
		{ "0.5K", 512 },
		{ "0.25M", 256 * KiB },
		{ "1.0", 1 },
		{ "10B", 10 },
		{ "8 G", 8 * GiB },
		{ " 8G ", 8 * GiB },
		{ "16777215T", 16777215 * TiB },
		{ "18446744073709551615", UINT64_MAX },
	};
	static const char *const bad[] = {
		"", " ", "abc", "G", "-1", "-1G", "+1", "0x10", "0X10", "1e3",
		"5P", "5X", "1.5", "1.", ".5G", "1Ki", "1KBx", "1K B", "1 2",
		"18446744073709551616", "99999999999999999999",
		"17179869184G", "16777216T", "inf", "nan", "25%",
	};
	struct cfg_size sz;
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		memset(&sz, 0xff, sizeof(sz));
		if (cfg_parse_size(good[i].s, false, &sz)) {
			printf("#   '%s' was refused\n", good[i].s);
			CHECK(!"good size refused");
			continue;
		}
		CHECK(!sz.is_percent);
		if (sz.bytes != good[i].bytes)
			printf("#   '%s' -> %llu\n", good[i].s,
			       (unsigned long long)sz.bytes);
		CHECK(sz.bytes == good[i].bytes);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sz.bytes = 42;
		if (cfg_parse_size(bad[i], false, &sz) != -EINVAL) {
			printf("#   '%s' was accepted\n", bad[i]);
			CHECK(!"bad size accepted");
		}
		CHECK_EQ(sz.bytes, 42);
	}
	CHECK_EQ(cfg_parse_size(NULL, true, &sz), -EINVAL);
}

static void test_size_percent(void)
{
	static const char *const bad[] = { "0%", "0.0%", "101%", "100.5%",
					   "%",  "-5%",  "25%x", "25%%",
					   "25 %K" };
	struct cfg_size sz;
	size_t i;

	CHECK_EQ(cfg_parse_size("25%", true, &sz), 0);
	CHECK(sz.is_percent && sz.percent == 25.0);
	CHECK_EQ(cfg_parse_size("12.5%", true, &sz), 0);
	CHECK(sz.is_percent && sz.percent == 12.5);
	CHECK_EQ(cfg_parse_size("100%", true, &sz), 0);
	CHECK(sz.is_percent && sz.percent == 100.0);
	CHECK_EQ(cfg_parse_size("25 %", true, &sz), 0);
	CHECK_EQ(cfg_parse_size("25%", false, &sz), -EINVAL);
	/* A plain size is still a size where percentages are allowed. */
	CHECK_EQ(cfg_parse_size("8G", true, &sz), 0);
	CHECK(!sz.is_percent && sz.bytes == 8 * GiB);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (cfg_parse_size(bad[i], true, &sz) != -EINVAL) {
			printf("#   '%s' was accepted\n", bad[i]);
			CHECK(!"bad percentage accepted");
		}
	}
}

static void test_size_resolve(void)
{
	struct cfg_size sz = { .bytes = 4096 };

	CHECK_EQ(cfg_size_resolve(&sz, 1000), 4096);
	sz = (struct cfg_size){ .percent = 25, .is_percent = true };
	CHECK_EQ(cfg_size_resolve(&sz, 1000), 250);
	CHECK_EQ(cfg_size_resolve(&sz, 64 * GiB), 16 * GiB);
	sz.percent = 100;
	CHECK_EQ(cfg_size_resolve(&sz, UINT64_MAX) == UINT64_MAX, 1);
	CHECK_EQ(cfg_size_resolve(&sz, 12345), 12345);
	sz.percent = 12.5;
	CHECK_EQ(cfg_size_resolve(&sz, 800), 100);
	CHECK_EQ(cfg_size_resolve(&sz, 0), 0);
}

/* Keys */

static void test_defaults(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK(!strcmp(cfg.device.backend, "auto"));
	CHECK_EQ(cfg.device.gpu, 0);
	CHECK(!cfg.device.limit.is_percent && cfg.device.limit.bytes == 0);
	/* unset: the store picks from RAM, the cgroup and free disk */
	CHECK(!cfg.host.limit.is_percent && cfg.host.limit.bytes == 0);
	CHECK(cfg.host.pinned);
	CHECK(cfg.disk.path && !strcmp(cfg.disk.path, "/var/tmp"));
	CHECK(!cfg.disk.limit.is_percent && cfg.disk.limit.bytes == 0);
	CHECK(!cfg.policy.overcommit);
	CHECK_EQ(cfg.disk.compression, CFG_COMPRESS_LZ4);
	CHECK_EQ(cfg.disk.chunk_size, MiB);
	CHECK(!strcmp(cfg.policy.eviction, "lru"));
	CHECK_EQ(cfg.policy.unspill, CFG_UNSPILL_DEVICE);
	CHECK(cfg.policy.high_watermark == 0.95);
	CHECK(cfg.policy.target == 0.85);
	CHECK_EQ(cfg.fs.threads, 0);
	CHECK_EQ(cfg.fs.read_ahead_kb, 1024);
	CHECK_EQ(cfg.policy.prefetch_queue, 1024);
	CHECK(cfg.fs.metadata_limit.is_percent &&
	      cfg.fs.metadata_limit.percent == 10);
	CHECK(!cfg.fs.writeback_cache);
	CHECK(cfg.config_file == NULL);
	cfg_free(&cfg);
	CHECK(cfg.disk.path == NULL);
	cfg_free(&cfg); /* twice is harmless */
}

/* Set through cfg_set() and through cfg_set_option(); both must agree. */
static int set2(struct tfs_config *cfg, const char *section, const char *key,
		const char *value)
{
	char opt[64], err2[512];
	int rc1, rc2;

	snprintf(opt, sizeof(opt), "%s_%s", section, key);
	rc2 = cfg_set_option(cfg, opt, value, err2, sizeof(err2));
	rc1 = cfg_set(cfg, section, key, value, err, sizeof(err));
	if (rc1 != rc2)
		printf("#   %s=%s: cfg_set %d, cfg_set_option %d\n", opt, value,
		       rc1, rc2);
	CHECK_EQ(rc1, rc2);
	if (rc1) {
		/* "KEY: what" and "-o section_KEY: what" say the same. */
		char want[600];

		CHECK(starts(err, key));
		snprintf(want, sizeof(want), "-o %s: %s", opt,
			 err + strlen(key) + 2);
		CHECK(!strcmp(err2, want) || !printf("#   %s\n", err2));
	}
	return rc1;
}

static void test_device_keys(void)
{
	static const char *const backends[] = { "auto", "cuda", "sim", "none" };
	struct tfs_config cfg;
	size_t i;

	cfg_defaults(&cfg);
	for (i = 0; i < 4; i++) {
		CHECK_EQ(set2(&cfg, "device", "backend", backends[i]), 0);
		CHECK(!strcmp(cfg.device.backend, backends[i]));
	}
	CHECK_EQ(set2(&cfg, "device", "backend", "SIM"), 0);
	CHECK(!strcmp(cfg.device.backend, "sim"));
	CHECK_EQ(set2(&cfg, "device", "backend", "gpu"), -EINVAL);
	CHECK(has(err, "'gpu' is not one of auto, cuda, sim or none"));
	CHECK_EQ(set2(&cfg, "device", "backend", ""), -EINVAL);
	CHECK(!strcmp(cfg.device.backend, "sim"));

	CHECK_EQ(set2(&cfg, "device", "gpu", "3"), 0);
	CHECK_EQ(cfg.device.gpu, 3);
	CHECK_EQ(set2(&cfg, "device", "gpu", "0"), 0);
	CHECK_EQ(cfg.device.gpu, 0);
	CHECK_EQ(set2(&cfg, "device", "gpu", "2147483647"), 0);
	CHECK_EQ(cfg.device.gpu, 2147483647);
	CHECK_EQ(set2(&cfg, "device", "gpu", "-1"), -EINVAL);
	CHECK(has(err, "negative"));
	CHECK_EQ(set2(&cfg, "device", "gpu", "2147483648"), -EINVAL);
	CHECK(has(err, "out of range"));
	CHECK_EQ(set2(&cfg, "device", "gpu", "one"), -EINVAL);
	CHECK(has(err, "'one' is not a whole number"));
	CHECK_EQ(set2(&cfg, "device", "gpu", "1.5"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "gpu", ""), -EINVAL);
	CHECK_EQ(cfg.device.gpu, 2147483647);

	CHECK_EQ(set2(&cfg, "device", "limit", "4M"), 0);
	CHECK(!cfg.device.limit.is_percent && cfg.device.limit.bytes == 4 * MiB);
	CHECK_EQ(set2(&cfg, "device", "limit", "80%"), 0);
	CHECK(cfg.device.limit.is_percent && cfg.device.limit.percent == 80);
	CHECK_EQ(set2(&cfg, "device", "limit", "0"), -EINVAL);
	CHECK(has(err, "a limit of zero is not allowed"));
	CHECK_EQ(set2(&cfg, "device", "limit", "0G"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "limit", "0%"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "limit", "lots"), -EINVAL);
	CHECK(cfg.device.limit.is_percent && cfg.device.limit.percent == 80);
	cfg_free(&cfg);

	/* The reserve: 10% by default, zero allowed (nothing kept free). */
	cfg_defaults(&cfg);
	CHECK(cfg.device.reserve.is_percent &&
	      cfg.device.reserve.percent == 10);
	CHECK_EQ(cfg.device.poll_ms, 100);
	CHECK_EQ(set2(&cfg, "device", "reserve", "2G"), 0);
	CHECK(!cfg.device.reserve.is_percent &&
	      cfg.device.reserve.bytes == 2048 * MiB);
	CHECK_EQ(set2(&cfg, "device", "reserve", "0"), 0);
	CHECK(!cfg.device.reserve.is_percent && !cfg.device.reserve.bytes);
	CHECK_EQ(set2(&cfg, "device", "reserve", "25%"), 0);
	CHECK(cfg.device.reserve.is_percent &&
	      cfg.device.reserve.percent == 25);
	CHECK_EQ(set2(&cfg, "device", "reserve", "101%"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "reserve", "some"), -EINVAL);
	CHECK(cfg.device.reserve.is_percent &&
	      cfg.device.reserve.percent == 25);
	CHECK_EQ(set2(&cfg, "device", "poll_ms", "10"), 0);
	CHECK_EQ(cfg.device.poll_ms, 10);
	CHECK_EQ(set2(&cfg, "device", "poll_ms", "60000"), 0);
	CHECK_EQ(set2(&cfg, "device", "poll_ms", "9"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "poll_ms", "60001"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "poll_ms", "0.5"), -EINVAL);
	CHECK_EQ(cfg.device.poll_ms, 60000);
	cfg_free(&cfg);
}

/* [device] gpus: the list, its two spellings, and what it resolves to. */
static void test_device_gpus(void)
{
	struct tfs_config cfg;
	int ord[CFG_MAX_GPUS];
	unsigned int def;
	char list[128];
	int i, n;

	cfg_defaults(&cfg);
	CHECK(!cfg.device.gpus.all && !cfg.device.gpus.n);
	/* Unset: the one GPU gpu names. */
	CHECK_EQ(cfg_gpus_resolve(&cfg, 4, ord, &def, err, sizeof(err)), 1);
	CHECK_EQ(ord[0], 0);
	CHECK_EQ(def, 0);
	CHECK_EQ(set2(&cfg, "device", "gpu", "2"), 0);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 4, ord, &def, err, sizeof(err)), 1);
	CHECK_EQ(ord[0], 2);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 2, ord, &def, err, sizeof(err)),
		 -EINVAL);
	CHECK(has(err, "device_gpu: no GPU 2, the machine has 2"));
	cfg_free(&cfg);

	cfg_defaults(&cfg);
	CHECK_EQ(set2(&cfg, "device", "gpus", "0:1"), 0);
	CHECK(!cfg.device.gpus.all && cfg.device.gpus.n == 2);
	CHECK(cfg.device.gpus.ord[0] == 0 && cfg.device.gpus.ord[1] == 1);
	CHECK_EQ(set2(&cfg, "device", "gpus", "3,1, 2"), 0);
	CHECK_EQ(cfg.device.gpus.n, 3);
	CHECK(cfg.device.gpus.ord[0] == 3 && cfg.device.gpus.ord[1] == 1 &&
	      cfg.device.gpus.ord[2] == 2);
	/* The first listed is the default while gpu is unset. */
	CHECK_EQ(cfg_gpus_resolve(&cfg, 4, ord, &def, err, sizeof(err)), 3);
	CHECK(ord[0] == 3 && ord[1] == 1 && ord[2] == 2 && def == 0);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 3, ord, &def, err, sizeof(err)),
		 -EINVAL);
	CHECK(has(err, "device_gpus: no GPU 3, the machine has 3"));
	CHECK_EQ(set2(&cfg, "device", "gpu", "2"), 0);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 4, ord, &def, err, sizeof(err)), 3);
	CHECK_EQ(def, 2);
	CHECK_EQ(set2(&cfg, "device", "gpu", "0"), 0);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 4, ord, &def, err, sizeof(err)),
		 -EINVAL);
	CHECK(has(err, "device_gpu: GPU 0 is not among the gpus listed"));
	CHECK_EQ(set2(&cfg, "device", "gpus", "ALL"), 0);
	CHECK(cfg.device.gpus.all);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 3, ord, &def, err, sizeof(err)), 3);
	CHECK(ord[0] == 0 && ord[2] == 2 && def == 0);
	CHECK_EQ(cfg_gpus_resolve(&cfg, 0, ord, &def, err, sizeof(err)),
		 -EINVAL);
	CHECK(has(err, "the machine has no GPU"));
	/* All of a machine with more than one daemon serves: the first. */
	CHECK_EQ(cfg_gpus_resolve(&cfg, 40, ord, &def, err, sizeof(err)),
		 CFG_MAX_GPUS);
	CHECK_EQ(ord[CFG_MAX_GPUS - 1], CFG_MAX_GPUS - 1);

	/* Bad lists are refused whole and change nothing. */
	CHECK_EQ(set2(&cfg, "device", "gpus", "1:1"), -EINVAL);
	CHECK(has(err, "'1:1': GPU 1 is listed twice"));
	CHECK_EQ(set2(&cfg, "device", "gpus", "0:-1"), -EINVAL);
	CHECK(has(err, "'0:-1' is not 'all' or a list of GPU ordinals"));
	CHECK_EQ(set2(&cfg, "device", "gpus", "256"), -EINVAL);
	CHECK(has(err, "'256': GPU ordinal out of range, must be 0 to 255"));
	CHECK_EQ(set2(&cfg, "device", "gpus", "99999999999999999999"),
		 -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "gpus", ""), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "gpus", "0:"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "gpus", "0;1"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "gpus", "some"), -EINVAL);
	CHECK_EQ(set2(&cfg, "device", "gpus", "0x1"), -EINVAL);
	list[0] = '\0';
	for (i = 0; i <= CFG_MAX_GPUS; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list),
			 "%s%d", i ? ":" : "", i);
	CHECK_EQ(set2(&cfg, "device", "gpus", list), -EINVAL);
	CHECK(has(err, "more than 16 GPUs"));
	CHECK(cfg.device.gpus.all && !cfg.device.gpus.n);
	cfg_free(&cfg);

	/* In the file, with commas; validate checks gpu against the list. */
	CHECK_EQ(load(&cfg, "[device]\ngpus = 0, 1\ngpu = 2\n"), 0);
	cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err));
	CHECK_EQ(cfg.device.gpus.n, 2);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "t.conf:3: gpu: GPU 2 is not among the gpus listed"));
	CHECK_EQ(cfg_set_option(&cfg, "device_gpu", "1", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	n = cfg_gpus_resolve(&cfg, 2, ord, &def, err, sizeof(err));
	CHECK(n == 2 && def == 1);
	cfg_free(&cfg);
	CHECK_EQ(load(&cfg, "[device]\ngpus = 0 1\n"), -EINVAL);
	CHECK(has(err, "gpus"));
	cfg_free(&cfg);
}

static void test_host_keys(void)
{
	static const char *const yes[] = { "yes", "YES", "true", "True", "on",
					   "1" };
	static const char *const no[] = { "no", "No", "false", "FALSE", "off",
					  "0" };
	struct tfs_config cfg;
	size_t i;

	cfg_defaults(&cfg);
	CHECK_EQ(set2(&cfg, "host", "limit", "8G"), 0);
	CHECK(!cfg.host.limit.is_percent && cfg.host.limit.bytes == 8 * GiB);
	CHECK_EQ(set2(&cfg, "host", "limit", "50%"), 0);
	CHECK(cfg.host.limit.is_percent && cfg.host.limit.percent == 50);
	CHECK_EQ(set2(&cfg, "host", "limit", "0"), -EINVAL);
	CHECK(has(err, "a limit of zero is not allowed"));
	CHECK_EQ(set2(&cfg, "host", "limit", "150%"), -EINVAL);
	CHECK(has(err, "above 0 and at most 100"));
	CHECK_EQ(set2(&cfg, "host", "limit", "-8G"), -EINVAL);
	CHECK(has(err, "'-8G' is negative"));
	CHECK_EQ(set2(&cfg, "host", "limit", "0x100"), -EINVAL);
	CHECK(has(err, "hexadecimal"));
	CHECK_EQ(set2(&cfg, "host", "limit", "8Q"), -EINVAL);
	CHECK(has(err, "unknown suffix 'Q'"));
	CHECK_EQ(set2(&cfg, "host", "limit", "99999999999T"), -EINVAL);
	CHECK(has(err, "too large"));
	CHECK(cfg.host.limit.is_percent && cfg.host.limit.percent == 50);

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		cfg.host.pinned = false;
		CHECK_EQ(set2(&cfg, "host", "pinned", yes[i]), 0);
		CHECK(cfg.host.pinned);
		CHECK_EQ(set2(&cfg, "host", "pinned", no[i]), 0);
		CHECK(!cfg.host.pinned);
	}
	CHECK_EQ(set2(&cfg, "host", "pinned", "maybe"), -EINVAL);
	CHECK(has(err, "'maybe' is not a boolean"));
	CHECK_EQ(set2(&cfg, "host", "pinned", "2"), -EINVAL);
	CHECK_EQ(set2(&cfg, "host", "pinned", ""), -EINVAL);
	cfg_free(&cfg);
}

static void test_disk_keys(void)
{
	static const char *const bad_chunks[] = { "32K", "128M", "96K",
						  "1.5M", "0", "25%", "1G",
						  "65535", "x" };
	struct tfs_config cfg;
	char *cwd, want[4096];
	size_t i;

	cfg_defaults(&cfg);
	CHECK_EQ(set2(&cfg, "disk", "path", "/srv/spill"), 0);
	CHECK(!strcmp(cfg.disk.path, "/srv/spill"));
	cwd = getcwd(NULL, 0);
	snprintf(want, sizeof(want), "%s%srel/dir", cwd,
		 strcmp(cwd, "/") ? "/" : "");
	free(cwd);
	CHECK_EQ(set2(&cfg, "disk", "path", "rel/dir"), 0);
	CHECK(!strcmp(cfg.disk.path, want));
	CHECK_EQ(set2(&cfg, "disk", "path", ""), -EINVAL);
	CHECK(has(err, "empty path"));
	CHECK(!strcmp(cfg.disk.path, want));

	CHECK_EQ(set2(&cfg, "disk", "limit", "100G"), 0);
	CHECK(!cfg.disk.limit.is_percent && cfg.disk.limit.bytes == 100 * GiB);
	CHECK_EQ(set2(&cfg, "disk", "limit", "90%"), 0);
	CHECK(cfg.disk.limit.is_percent && cfg.disk.limit.percent == 90);
	CHECK_EQ(set2(&cfg, "disk", "limit", "0"), -EINVAL);
	CHECK(has(err, "a limit of zero is not allowed"));

	CHECK_EQ(set2(&cfg, "disk", "compression", "none"), 0);
	CHECK_EQ(cfg.disk.compression, CFG_COMPRESS_NONE);
	CHECK_EQ(set2(&cfg, "disk", "compression", "lz4"), 0);
	CHECK_EQ(cfg.disk.compression, CFG_COMPRESS_LZ4);
	CHECK_EQ(set2(&cfg, "disk", "compression", "zstd"), -EINVAL);
	CHECK(has(err, "'zstd' is not one of lz4 or none"));

	CHECK_EQ(set2(&cfg, "disk", "chunk_size", "64K"), 0);
	CHECK_EQ(cfg.disk.chunk_size, 64 * KiB);
	CHECK_EQ(set2(&cfg, "disk", "chunk_size", "64M"), 0);
	CHECK_EQ(cfg.disk.chunk_size, 64 * MiB);
	CHECK_EQ(set2(&cfg, "disk", "chunk_size", "262144"), 0);
	CHECK_EQ(cfg.disk.chunk_size, 256 * KiB);
	for (i = 0; i < sizeof(bad_chunks) / sizeof(bad_chunks[0]); i++) {
		if (set2(&cfg, "disk", "chunk_size", bad_chunks[i]) != -EINVAL) {
			printf("#   chunk_size '%s' accepted\n", bad_chunks[i]);
			CHECK(!"bad chunk size accepted");
		}
	}
	CHECK_EQ(set2(&cfg, "disk", "chunk_size", "32K"), -EINVAL);
	CHECK(has(err, "'32K' is out of range, must be 64K to 64M"));
	CHECK_EQ(set2(&cfg, "disk", "chunk_size", "96K"), -EINVAL);
	CHECK(has(err, "'96K' is not a power of two"));
	CHECK_EQ(set2(&cfg, "disk", "chunk_size", "25%"), -EINVAL);
	CHECK(has(err, "only allowed for limits"));
	CHECK_EQ(cfg.disk.chunk_size, 256 * KiB);

	CHECK_EQ(cfg.disk.persist, CFG_PERSIST_NO);
	CHECK_EQ(set2(&cfg, "disk", "persist", "yes"), 0);
	CHECK_EQ(cfg.disk.persist, CFG_PERSIST_YES);
	CHECK_EQ(set2(&cfg, "disk", "persist", "CLOSE"), 0);
	CHECK_EQ(cfg.disk.persist, CFG_PERSIST_CLOSE);
	CHECK_EQ(set2(&cfg, "disk", "persist", "always"), -EINVAL);
	CHECK(has(err, "'always' is not one of no, yes or close"));
	CHECK_EQ(cfg.disk.persist, CFG_PERSIST_CLOSE);

	CHECK(!cfg.disk.name[0]);
	CHECK_EQ(set2(&cfg, "disk", "name", "job-42.a_b"), 0);
	CHECK(!strcmp(cfg.disk.name, "job-42.a_b"));
	CHECK_EQ(set2(&cfg, "disk", "name", "a/b"), -EINVAL);
	CHECK(has(err, "'a/b' is not a name"));
	CHECK_EQ(set2(&cfg, "disk", "name", ".."), -EINVAL);
	CHECK_EQ(set2(&cfg, "disk", "name", ""), -EINVAL);
	memset(want, 'n', 65);
	want[65] = '\0';
	CHECK_EQ(set2(&cfg, "disk", "name", want), -EINVAL);
	want[64] = '\0';
	CHECK_EQ(set2(&cfg, "disk", "name", want), 0);
	CHECK(!strcmp(cfg.disk.name, want));
	cfg_free(&cfg);
}

/* A name without persist is a mistake worth a message. */
static void test_validate_name(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_name", "job", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(!strcmp(err, "-o disk_name: 'job' names a persistent spill "
			   "directory; set persist = yes or close too") ||
	      !printf("#   %s\n", err));
	CHECK_EQ(cfg_set_option(&cfg, "disk_persist", "yes", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	cfg_free(&cfg);
}

static void test_policy_keys(void)
{
	static const char *const bad[] = { "0",	  "0.0",  "1.01", "2",
					   "-0.5", "nan",  "inf",  "0x1p-1",
					   "1e-1", "",	   "95%",  "0.9.1",
					   ".",	   "abc" };
	struct tfs_config cfg;
	size_t i;

	cfg_defaults(&cfg);
	CHECK_EQ(set2(&cfg, "policy", "eviction", "lru"), 0);
	CHECK(!strcmp(cfg.policy.eviction, "lru"));
	CHECK_EQ(set2(&cfg, "policy", "eviction", "lfu"), -EINVAL);
	CHECK(has(err, "'lfu' is not supported, only lru is"));

	CHECK_EQ(set2(&cfg, "policy", "unspill", "host"), 0);
	CHECK_EQ(cfg.policy.unspill, CFG_UNSPILL_HOST);
	CHECK_EQ(set2(&cfg, "policy", "unspill", "none"), 0);
	CHECK_EQ(cfg.policy.unspill, CFG_UNSPILL_NONE);
	CHECK_EQ(set2(&cfg, "policy", "unspill", "device"), 0);
	CHECK_EQ(cfg.policy.unspill, CFG_UNSPILL_DEVICE);
	CHECK_EQ(set2(&cfg, "policy", "unspill", "disk"), -EINVAL);
	CHECK(has(err, "'disk' is not one of device, host or none"));

	CHECK_EQ(set2(&cfg, "policy", "high_watermark", "0.9"), 0);
	CHECK(cfg.policy.high_watermark == 0.9);
	CHECK_EQ(set2(&cfg, "policy", "high_watermark", "1"), 0);
	CHECK(cfg.policy.high_watermark == 1.0);
	CHECK_EQ(set2(&cfg, "policy", "target", "0.5"), 0);
	CHECK(cfg.policy.target == 0.5);
	CHECK_EQ(set2(&cfg, "policy", "target", ".75"), 0);
	CHECK(cfg.policy.target == 0.75);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (set2(&cfg, "policy", "target", bad[i]) != -EINVAL ||
		    set2(&cfg, "policy", "high_watermark", bad[i]) != -EINVAL) {
			printf("#   fraction '%s' accepted\n", bad[i]);
			CHECK(!"bad fraction accepted");
		}
	}
	CHECK_EQ(set2(&cfg, "policy", "target", "1.5"), -EINVAL);
	CHECK(has(err, "above 0 and at most 1"));
	CHECK(cfg.policy.target == 0.75);
	cfg_free(&cfg);
}

static void test_fs_keys(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(set2(&cfg, "fs", "threads", "16"), 0);
	CHECK_EQ(cfg.fs.threads, 16);
	CHECK_EQ(set2(&cfg, "fs", "threads", "256"), 0);
	CHECK_EQ(cfg.fs.threads, 256);
	CHECK_EQ(set2(&cfg, "fs", "threads", "0"), 0);
	CHECK_EQ(cfg.fs.threads, 0);
	CHECK_EQ(set2(&cfg, "fs", "threads", "257"), -EINVAL);
	CHECK(has(err, "'257' is out of range, must be 0 to 256"));
	CHECK_EQ(set2(&cfg, "fs", "threads", "-1"), -EINVAL);
	CHECK_EQ(set2(&cfg, "fs", "threads", "4K"), -EINVAL);
	CHECK_EQ(set2(&cfg, "fs", "threads", "99999999999999999999999"),
		 -EINVAL);

	CHECK_EQ(set2(&cfg, "fs", "read_ahead_kb", "0"), 0);
	CHECK_EQ(cfg.fs.read_ahead_kb, 0);
	CHECK_EQ(set2(&cfg, "fs", "read_ahead_kb", "65536"), 0);
	CHECK_EQ(cfg.fs.read_ahead_kb, 65536);
	CHECK_EQ(set2(&cfg, "fs", "writeback_cache", "yes"), 0);
	CHECK(cfg.fs.writeback_cache);
	CHECK_EQ(set2(&cfg, "fs", "writeback_cache", "maybe"), -EINVAL);
	CHECK(cfg.fs.writeback_cache);
	CHECK_EQ(cfg.fs.passthrough, CFG_PASSTHROUGH_OFF);
	CHECK_EQ(set2(&cfg, "fs", "passthrough", "auto"), 0);
	CHECK_EQ(cfg.fs.passthrough, CFG_PASSTHROUGH_AUTO);
	CHECK_EQ(set2(&cfg, "fs", "passthrough", "on"), 0);
	CHECK_EQ(cfg.fs.passthrough, CFG_PASSTHROUGH_ON);
	CHECK_EQ(set2(&cfg, "fs", "passthrough", "yes"), -EINVAL);
	CHECK_EQ(cfg.fs.passthrough, CFG_PASSTHROUGH_ON);
	CHECK_EQ(set2(&cfg, "fs", "read_ahead_kb", "65537"), -EINVAL);
	CHECK_EQ(set2(&cfg, "fs", "read_ahead_kb", "1M"), -EINVAL);
	CHECK_EQ(cfg.fs.read_ahead_kb, 65536);

	CHECK_EQ(set2(&cfg, "policy", "prefetch_queue", "1"), 0);
	CHECK_EQ(cfg.policy.prefetch_queue, 1);
	CHECK_EQ(set2(&cfg, "policy", "prefetch_queue", "1048576"), 0);
	CHECK_EQ(cfg.policy.prefetch_queue, 1048576);
	CHECK_EQ(set2(&cfg, "policy", "prefetch_queue", "0"), -EINVAL);
	CHECK(has(err, "'0' is out of range, must be 1 to 1048576"));
	CHECK_EQ(set2(&cfg, "policy", "prefetch_queue", "1048577"), -EINVAL);
	CHECK_EQ(set2(&cfg, "policy", "prefetch_queue", "-1"), -EINVAL);
	CHECK_EQ(set2(&cfg, "policy", "prefetch_queue", ""), -EINVAL);
	CHECK_EQ(cfg.policy.prefetch_queue, 1048576);
	cfg_free(&cfg);
}

static void test_messages(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "host_limit", "lots", err, sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "-o host_limit: 'lots' is not a size"));
	CHECK_EQ(cfg_set(&cfg, "host", "limit", "lots", err, sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "limit: 'lots' is not a size"));
	/* Option names are matched without regard to case. */
	CHECK_EQ(cfg_set_option(&cfg, "HOST_LIMIT", "1G", err, sizeof(err)), 0);
	CHECK(cfg.host.limit.bytes == GiB);
	CHECK_EQ(cfg_set_option(&cfg, "host_limit", NULL, err, sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "-o host_limit: missing value"));
	/* A tiny buffer gets a truncated message, not an overflow. */
	CHECK_EQ(cfg_set_option(&cfg, "host_limit", "x", err, 8), -EINVAL);
	CHECK(!strcmp(err, "-o host"));
	CHECK_EQ(cfg_set_option(&cfg, "host_limit", "x", NULL, 0), -EINVAL);
	cfg_free(&cfg);
}

static void test_unknown(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set(&cfg, "gpu", "limit", "1G", err, sizeof(err)),
		 -ENOENT);
	CHECK(starts(err, "limit: unknown section '[gpu]'"));
	CHECK_EQ(cfg_set(&cfg, "host", "limt", "1G", err, sizeof(err)),
		 -ENOENT);
	CHECK(starts(err, "limt: unknown key in [host] (known: limit, pinned, "
			  "user_share)"));
	CHECK_EQ(cfg_set(&cfg, "", "limit", "1G", err, sizeof(err)), -ENOENT);
	CHECK(starts(err, "limit: key outside any section"));
	CHECK_EQ(cfg_set_option(&cfg, "host_limt", "1G", err, sizeof(err)),
		 -ENOENT);
	CHECK(starts(err, "-o host_limt: unknown key (known: host_limit, "
			  "host_pinned, host_user_share)"));
	CHECK_EQ(cfg_set_option(&cfg, "bogus", "1", err, sizeof(err)), -ENOENT);
	CHECK(starts(err, "-o bogus: unknown key"));
	CHECK_EQ(cfg_set_option(&cfg, "host", "1", err, sizeof(err)), -ENOENT);
	CHECK_EQ(cfg_set_option(&cfg, "host_", "1", err, sizeof(err)), -ENOENT);
	CHECK_EQ(cfg_set_option(&cfg, "", "1", err, sizeof(err)), -ENOENT);
	CHECK_EQ(cfg_set_option(&cfg, "hostlimit", "1", err, sizeof(err)),
		 -ENOENT);
	CHECK_EQ(cfg_set_option(&cfg, "host_limit_", "1", err, sizeof(err)),
		 -ENOENT);
	CHECK(!cfg.host.limit.is_percent && cfg.host.limit.bytes == 0);
	cfg_free(&cfg);
}

static void test_is_option(void)
{
	static const char *const yes[] = {
		"device_backend", "device_gpu",	    "device_limit",
		"host_limit",	  "host_pinned",    "disk_path",
		"disk_limit",	  "disk_compression", "disk_chunk_size",
		"policy_eviction", "policy_unspill", "policy_high_watermark",
		"policy_target",  "fs_threads",	    "fs_read_ahead_kb",
		"fs_metadata_limit", "log_file",	  "policy_overcommit",
		"fs_writeback_cache", "device_user_share",
		"device_user_exports", "host_user_share",
		"fs_metadata_user_share", "policy_prefetch_queue",
		"host_limit=8G",  "Host_Limit",
	};
	static const char *const no[] = {
		"config", "allow_other", "host",  "host_",   "limit",
		"",	  "fs_",	 "=8G",	  "hostlimit", "disk_path_",
		"fsname", "device_limitx",
	};
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!cfg_is_option(yes[i])) {
			printf("#   '%s' is not an option\n", yes[i]);
			CHECK(!"option missed");
		}
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (cfg_is_option(no[i])) {
			printf("#   '%s' is an option\n", no[i]);
			CHECK(!"not an option");
		}
}

static void test_owns_option(void)
{
	CHECK(cfg_owns_option("host_limit"));
	CHECK(cfg_owns_option("host_limt"));
	CHECK(cfg_owns_option("fs_thread"));
	CHECK(cfg_owns_option("policy_"));
	CHECK(cfg_owns_option("Device_foo=1"));
	CHECK(!cfg_owns_option("fsname"));
	CHECK(!cfg_owns_option("allow_other"));
	CHECK(!cfg_owns_option("config"));
	CHECK(!cfg_owns_option("default_permissions"));
	CHECK(!cfg_owns_option("max_read"));
	CHECK(!cfg_owns_option("hostlimit"));
	CHECK(!cfg_owns_option(""));
}

/* cfg_suggest() against the config options and a few FUSE names. */
static const char *suggest(const char *word)
{
	static const char *const fuse[] = { "allow_other", "fsname=",
					    "noatime", "ro", "--help" };
	static char buf[80];

	return cfg_suggest(word, fuse, sizeof(fuse) / sizeof(fuse[0]), buf,
			   sizeof(buf));
}

static bool suggests(const char *word, const char *want)
{
	const char *got = suggest(word);

	if (got && !strcmp(got, want))
		return true;
	printf("#   '%s': expected '%s', got '%s'\n", word, want,
	       got ? got : "(none)");
	return false;
}

static void test_suggest(void)
{
	char tiny[5];

	/* A dropped, added, wrong or swapped letter, any case. */
	CHECK(suggests("host_limt", "host_limit"));
	CHECK(suggests("hots_limit", "host_limit"));
	CHECK(suggests("host_limitt", "host_limit"));
	CHECK(suggests("HOST_LIMIT", "host_limit"));
	CHECK(suggests("disk_chunksize", "disk_chunk_size"));
	CHECK(suggests("policy_highwatermark", "policy_high_watermark"));
	CHECK(suggests("fs_thread", "fs_threads"));
	/* The extra names, with what follows '=' ignored on both sides. */
	CHECK(suggests("allow_others", "allow_other"));
	CHECK(suggests("fsnme=x", "fsname"));
	CHECK(suggests("noatim", "noatime"));
	CHECK(suggests("--hepl", "--help"));
	/* Nothing close: no guess. */
	CHECK(!suggest("foo"));
	CHECK(!suggest("x"));
	CHECK(!suggest("--bogus"));
	CHECK(!suggest("banana"));
	CHECK(!suggest(""));
	CHECK(!suggest("=x"));
	CHECK(!suggest("a_name_much_longer_than_any_option_that_tierfs_has_"
		       "or_will_ever_have"));
	CHECK(!cfg_suggest("host_limt", NULL, 0, NULL, 0));
	/* A small buffer gets a truncated name, not an overflow. */
	CHECK(cfg_suggest("host_limt", NULL, 0, tiny, sizeof(tiny)) == tiny);
	CHECK(!strcmp(tiny, "host"));
}

static void test_help(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cfg_print_help(f, 4);
	fclose(f);
	CHECK(has(text, "    -o device_backend=auto|cuda|sim|none\n        "
			"device tier backend"));
	CHECK(has(text, "-o host_limit=SIZE|N%"));
	CHECK(has(text, "-o disk_chunk_size=SIZE"));
	CHECK(has(text, "-o fs_read_ahead_kb=N"));
	CHECK(has(text, "-o fs_writeback_cache=yes|no"));
	CHECK(has(text, "(default: 0.85)"));
	CHECK(has(text, "(default: /var/tmp)"));
	free(text);
}

/* The config file */

static void test_file_good(void)
{
	/* Indented keys, both comment styles, inline comments, ':' and
	 * CRLF line ends, a UTF-8 byte order mark, mixed case. */
	static const char text[] =
		"\xef\xbb\xbf; tierfs test config\n"
		"# another comment\n"
		"\n"
		"[device]\n"
		"backend = sim\n"
		"gpu=1\n"
		"limit = 4M ; small\n"
		"\n"
		"[ host ]   ; the RAM tier\n"
		"    limit = 8G\n"
		"    pinned = no\n"
		"[disk]\r\n"
		"\tpath = /srv/tierfs\r\n"
		"limit: 10%\n"
		"compression = none\n"
		"chunk_size = 256K\n"
		"[Policy]\n"
		"Eviction = LRU\n"
		"unspill = host\n"
		"high_watermark = 0.9\n"
		"target = 0.7\n"
		"[fs]\n"
		"threads = 8\n"
		"read_ahead_kb = 0";
	struct tfs_config cfg;

	CHECK_EQ(load(&cfg, text), 0);
	CHECK(!err[0] || !printf("#   %s\n", err));
	CHECK(!strcmp(cfg.device.backend, "sim"));
	CHECK_EQ(cfg.device.gpu, 1);
	CHECK(!cfg.device.limit.is_percent && cfg.device.limit.bytes == 4 * MiB);
	CHECK(!cfg.host.limit.is_percent && cfg.host.limit.bytes == 8 * GiB);
	CHECK(!cfg.host.pinned);
	CHECK(!strcmp(cfg.disk.path, "/srv/tierfs"));
	CHECK(cfg.disk.limit.is_percent && cfg.disk.limit.percent == 10);
	CHECK_EQ(cfg.disk.compression, CFG_COMPRESS_NONE);
	CHECK_EQ(cfg.disk.chunk_size, 256 * KiB);
	CHECK(!strcmp(cfg.policy.eviction, "lru"));
	CHECK_EQ(cfg.policy.unspill, CFG_UNSPILL_HOST);
	CHECK(cfg.policy.high_watermark == 0.9);
	CHECK(cfg.policy.target == 0.7);
	CHECK_EQ(cfg.fs.threads, 8);
	CHECK_EQ(cfg.fs.read_ahead_kb, 0);
	CHECK(cfg.config_file && !strcmp(cfg.config_file, tmp_path("t.conf")));
	cfg_free(&cfg);

	/* An empty file changes nothing. */
	CHECK_EQ(load(&cfg, ""), 0);
	CHECK(!cfg.host.limit.is_percent && cfg.host.limit.bytes == 0);
	cfg_free(&cfg);
}

static void test_file_long_lines(void)
{
	char text[4096], path[1024];
	struct tfs_config cfg;

	/* Longer than inih's 200-byte line buffer, before and after. */
	memset(path, 'p', sizeof(path));
	memcpy(path, "/srv/", 5);
	path[600] = '\0';
	snprintf(text, sizeof(text),
		 "; %0300d\n"
		 "[disk]\n"
		 "path = %s ; comment\n"
		 "limit = 1G\n"
		 "chunk_size = %0250d\n",
		 0, path, 7);
	CHECK_EQ(load(&cfg, text), -EINVAL);
	CHECK(!strcmp(cfg.disk.path, path));
	CHECK(!cfg.disk.limit.is_percent && cfg.disk.limit.bytes == GiB);
	CHECK(starts(err, tmp_path("t.conf")));
	CHECK(has(err, ".conf:5: chunk_size: '000"));
	CHECK(has(err, "out of range"));
	cfg_free(&cfg);
}

/* Each bad file fails at its line with its message. */
static void test_file_errors(void)
{
	static const struct {
		const char *text;
		int rc;
		const char *msg; /* after "FILE:" */
	} cases[] = {
		{ "[host]\nlimit = 8G\nlimt = 8G\n", -EINVAL,
		  "3: limt: unknown key in [host] (known: limit, pinned, "
		  "user_share)" },
		{ "[host]\nlimit = 8G\n[gpu]\nlimit = 1G\n", -EINVAL,
		  "3: [gpu]: unknown section (known: device, host, disk, "
		  "tiers, policy, fs, log)" },
		{ "; comment\n\n[host]\n\nlimit = lots\n", -EINVAL,
		  "5: limit: 'lots' is not a size" },
		{ "[host]\n  limit = 8G\n  pinned = perhaps\n", -EINVAL,
		  "3: pinned: 'perhaps' is not a boolean, use yes or no" },
		{ "[host]\nlimit 8G\n", -EINVAL,
		  "2: 'limit 8G': expected 'key = value' or '[section]'" },
		{ "[host]\nlimit ; = 8G\n", -EINVAL,
		  "2: 'limit': expected 'key = value' or '[section]'" },
		{ "[host\nlimit = 8G\n", -EINVAL,
		  "1: '[host': missing ']' after the section name" },
		{ "[host ; ]\nlimit = 8G\n", -EINVAL,
		  "1: '[host ': missing ']' after the section name" },
		{ "[host] x\n", -EINVAL,
		  "1: '[host]': unexpected text after ']'" },
		{ "limit = 8G\n", -EINVAL,
		  "1: limit: key outside any section" },
		{ "[host]\n= 8G\n", -EINVAL, "2: missing key before '='" },
		{ "[host]\nlimit =\n", -EINVAL, "2: limit: empty value" },
		{ "[host]\nlimit = 0\n", -EINVAL,
		  "2: limit: '0': a limit of zero is not allowed" },
		{ "[device]\nlimit = 0\n", -EINVAL,
		  "2: limit: '0': a limit of zero is not allowed" },
		{ "[disk]\nlimit = 0%\n", -EINVAL,
		  "2: limit: '0%': a percentage must be above 0" },
		{ "[disk]\r\nchunk_size = 32K\r\n", -EINVAL,
		  "2: chunk_size: '32K' is out of range, must be 64K to 64M" },
		{ "[disk]\nchunk_size = 3M\n", -EINVAL,
		  "2: chunk_size: '3M' is not a power of two" },
		{ "[host]\nlimit = 8G # a comment\n", -EINVAL,
		  "2: limit: '8G # a comment' is not a size: unexpected" },
		{ "[fs]\nthreads = 1000\n", -EINVAL,
		  "2: threads: '1000' is out of range, must be 0 to 256" },
		{ "[policy]\nhigh_watermark = 1.5\n", -EINVAL,
		  "2: high_watermark: '1.5' is out of range" },
		{ "[host]\nuser_share = 150%\n", -EINVAL,
		  "2: user_share: '150%': a percentage must be above 0 and at "
		  "most 100" },
		{ "[host]\nuser_share = half\n", -EINVAL,
		  "2: user_share: 'half' is not a size" },
		{ "[device]\nuser_exports = -1\n", -EINVAL,
		  "2: user_exports: '-1' is negative, must be 0 to 1048576" },
		{ "[device]\nuser_exports = 2000000\n", -EINVAL,
		  "2: user_exports: '2000000' is out of range, must be 0 to "
		  "1048576" },
		{ "[fs]\nmetadata_user_share = 0%\n", -EINVAL,
		  "2: metadata_user_share: '0%': a percentage must be above 0" },
		{ "[fs]\nmetadata_user_share = 1Q\n", -EINVAL,
		  "2: metadata_user_share: '1Q' is not a size" },
		{ "[device]\nbackend = opencl\n", -EINVAL,
		  "2: backend: 'opencl' is not one of auto, cuda, sim or none" },
		/* The first error wins. */
		{ "[host]\nlimit = 1G\npinned = x\nbogus = 1\n[nope]\n", -EINVAL,
		  "3: pinned: 'x'" },
		/* A key given twice names both lines, whatever the case or
		 * the spacing of its name and section. */
		{ "[host]\nlimit = 1G\n[disk]\nlimit = 2G\n[HOST]\n Limit=3G\n",
		  -EINVAL,
		  "6: limit: set again in [host], first on line 2; keep one" },
		/* A bare number of bytes too small for a limit. */
		{ "[host]\nlimit = 50\n", -EINVAL,
		  "2: limit: '50' is 50 bytes: did you mean '50M' or '50G'? "
		  "(a size without K, M, G or T is in bytes)" },
	};
	struct tfs_config cfg;
	char want[512];
	size_t i;
	int rc;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rc = load(&cfg, cases[i].text);
		snprintf(want, sizeof(want), "%s:%s", tmp_path("t.conf"),
			 cases[i].msg);
		if (rc != cases[i].rc)
			printf("#   case %zu: rc %d\n", i, rc);
		CHECK_EQ(rc, cases[i].rc);
		CHECK(starts(err, want));
		cfg_free(&cfg);
	}

	/* A NUL byte inside a line. */
	cfg_defaults(&cfg);
	CHECK_EQ(cfg_load_file(&cfg,
			       write_file("nul.conf", "[host]\nlim\0it = 1G\n",
					  19),
			       err, sizeof(err)),
		 -EINVAL);
	CHECK(has(err, "nul.conf:2: line contains a NUL byte"));
	cfg_free(&cfg);
}

static void test_file_open_errors(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_load_file(&cfg, tmp_path("missing.conf"), err,
			       sizeof(err)),
		 -ENOENT);
	CHECK(has(err, "missing.conf: cannot open: No such file or directory"));
	CHECK_EQ(cfg_load_file(&cfg, tmpdir, err, sizeof(err)), -EISDIR);
	CHECK(has(err, ": cannot read: Is a directory"));
	cfg_free(&cfg);
}

static void test_precedence(void)
{
	struct tfs_config cfg;

	/* Defaults, then the file, then -o; keys the file leaves alone keep
	 * their defaults. */
	CHECK_EQ(load(&cfg, "[host]\nlimit = 1G\n[disk]\nlimit = 5G\n"), 0);
	CHECK_EQ(cfg_set_option(&cfg, "host_limit", "2G", err, sizeof(err)), 0);
	CHECK(cfg.host.limit.bytes == 2 * GiB);
	CHECK(cfg.disk.limit.bytes == 5 * GiB);
	CHECK(cfg.policy.target == 0.85);
	CHECK(!strcmp(cfg.disk.path, "/var/tmp"));
	/* A key the file gives twice is an error (which one was meant?),
	 * not the later one silently. */
	cfg_free(&cfg);
	CHECK_EQ(load(&cfg, "[host]\nlimit = 1G\n[host]\nlimit = 3G\n"),
		 -EINVAL);
	CHECK(has(err, "t.conf:4: limit: set again in [host], first on line "
		       "2; keep one"));
	cfg_free(&cfg);
	CHECK_EQ(load(&cfg, "[host]\nlimit = 3G\n"), 0);
	CHECK(cfg.host.limit.bytes == 3 * GiB);
	/* -o options given twice: the later wins, as on a mount line. */
	CHECK_EQ(cfg_set_option(&cfg, "fs_threads", "2", err, sizeof(err)), 0);
	CHECK_EQ(cfg_set_option(&cfg, "fs_threads", "3", err, sizeof(err)), 0);
	CHECK_EQ(cfg.fs.threads, 3);
	/* Loading a second file layers it on the first. */
	CHECK_EQ(cfg_load_file(&cfg, write_file("u.conf", "[fs]\nthreads=4\n",
						15),
			       err, sizeof(err)),
		 0);
	CHECK(cfg.host.limit.bytes == 3 * GiB);
	CHECK_EQ(cfg.fs.threads, 4);
	CHECK_EQ(cfg_load_file(&cfg, write_file("u.conf", "[fs]\nthreads=5\n",
						15),
			       err, sizeof(err)),
		 0);
	CHECK_EQ(cfg.fs.threads, 5);
	CHECK(!strcmp(cfg.config_file, tmp_path("u.conf")));
	cfg_free(&cfg);
}

/*
 * config/tierfs.conf with every ';' key uncommented must load and give the
 * defaults, so the example cannot drift from the table. Found in the
 * source tree the test was built from; skipped when it is not at hand.
 */
static char example[4096];

/* config/tierfs.conf ships with tierfs: a missing one fails the test. */
static void find_example(void)
{
	snprintf(example, sizeof(example), "%s/config/tierfs.conf",
		 TFS_SOURCE_ROOT);
}

static bool size_eq(const struct cfg_size *a, const struct cfg_size *b)
{
	return a->bytes == b->bytes && a->percent == b->percent &&
	       a->is_percent == b->is_percent;
}

static void test_example_file(void)
{
	struct tfs_config def, cfg;
	char line[512], *text = NULL;
	size_t len = 0, keys = 0;
	FILE *in = fopen(example, "r"), *out = open_memstream(&text, &len);

	CHECK(in && out);
	if (!in || !out)
		return;
	while (fgets(line, sizeof(line), in)) {
		if (line[0] == ';' && strchr(line, '=')) {
			fputs(line + 1, out);
			keys++;
		} else {
			fputs(line, out);
		}
	}
	fclose(in);
	fclose(out);
	/* every key but the three limits, the log file and the disk name
	 * (and the [tiers] examples, which are not defaults) */
	CHECK_EQ(keys, 28);
	CHECK_EQ(load(&cfg, text), 0);
	CHECK(!err[0] || !printf("#   %s\n", err));
	cfg_defaults(&def);
	CHECK(!strcmp(def.device.backend, cfg.device.backend));
	CHECK_EQ(def.device.gpu, cfg.device.gpu);
	CHECK(size_eq(&def.device.limit, &cfg.device.limit));
	CHECK(size_eq(&def.device.reserve, &cfg.device.reserve));
	CHECK(size_eq(&def.device.user_share, &cfg.device.user_share));
	CHECK_EQ(def.device.user_exports, cfg.device.user_exports);
	CHECK(size_eq(&def.host.user_share, &cfg.host.user_share));
	CHECK_EQ(def.device.poll_ms, cfg.device.poll_ms);
	CHECK(size_eq(&def.host.limit, &cfg.host.limit));
	CHECK_EQ(def.host.pinned, cfg.host.pinned);
	CHECK(!strcmp(def.disk.path, cfg.disk.path));
	CHECK_EQ(def.disk.persist, cfg.disk.persist);
	CHECK(size_eq(&def.disk.limit, &cfg.disk.limit));
	CHECK_EQ(def.disk.compression, cfg.disk.compression);
	CHECK_EQ(def.disk.chunk_size, cfg.disk.chunk_size);
	CHECK(!strcmp(def.policy.eviction, cfg.policy.eviction));
	CHECK_EQ(def.policy.unspill, cfg.policy.unspill);
	CHECK(def.policy.high_watermark == cfg.policy.high_watermark);
	CHECK(def.policy.target == cfg.policy.target);
	CHECK_EQ(def.policy.overcommit, cfg.policy.overcommit);
	CHECK_EQ(def.policy.promote, cfg.policy.promote);
	CHECK(size_eq(&def.policy.promote_rate, &cfg.policy.promote_rate));
	CHECK_EQ(def.policy.write, cfg.policy.write);
	CHECK_EQ(cfg.policy.write, CFG_WRITE_BACK);
	CHECK_EQ(def.policy.admission, cfg.policy.admission);
	CHECK(!cfg.policy.admission);
	CHECK_EQ(def.policy.prefetch_queue, cfg.policy.prefetch_queue);
	CHECK_EQ(cfg.tiers.n, 0);
	CHECK_EQ(def.fs.threads, cfg.fs.threads);
	CHECK_EQ(def.fs.read_ahead_kb, cfg.fs.read_ahead_kb);
	CHECK(size_eq(&def.fs.metadata_limit, &cfg.fs.metadata_limit));
	CHECK(size_eq(&def.fs.metadata_user_share,
		      &cfg.fs.metadata_user_share));
	CHECK_EQ(def.fs.writeback_cache, cfg.fs.writeback_cache);
	CHECK_EQ(def.fs.passthrough, cfg.fs.passthrough);
	cfg_free(&def);
	cfg_free(&cfg);
	free(text);
}


/* [tiers]: the chain's disk-kind tiers below [disk] */

static void test_tiers_chain(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg.tiers.n, 0);
	CHECK(!cfg.policy.promote);
	CHECK_EQ(cfg.policy.promote_rate.bytes, 256 * MiB);
	cfg_free(&cfg); /* load() starts from the defaults again */
	CHECK_EQ(load(&cfg, "[tiers]\n"
			    "nvme = disk:/mnt/nvme:200G\n"
			    "shared = shared:/mnt/lustre/tierfs\n"
			    "half = disk:/srv/half:50%\n"),
		 0);
	CHECK(!err[0] || !printf("#   %s\n", err));
	CHECK_EQ(cfg.tiers.n, 3);
	CHECK(!strcmp(cfg.tiers.t[0].name, "nvme"));
	CHECK_EQ(cfg.tiers.t[0].kind, CFG_TIER_DISK);
	CHECK(!strcmp(cfg.tiers.t[0].path, "/mnt/nvme"));
	CHECK_EQ(cfg.tiers.t[0].limit.bytes, 200 * GiB);
	CHECK(!strcmp(cfg.tiers.t[1].name, "shared"));
	CHECK_EQ(cfg.tiers.t[1].kind, CFG_TIER_SHARED);
	CHECK(!strcmp(cfg.tiers.t[1].path, "/mnt/lustre/tierfs"));
	CHECK(!cfg.tiers.t[1].limit.bytes && !cfg.tiers.t[1].limit.is_percent);
	CHECK(cfg.tiers.t[2].limit.is_percent);
	CHECK(cfg.tiers.t[2].limit.percent == 50);
	/* -o of a known name replaces it where it is; a new one goes last. */
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", "shared:/mnt/gpfs:1T",
				err, sizeof(err)),
		 0);
	CHECK_EQ(cfg.tiers.n, 3);
	CHECK(!strcmp(cfg.tiers.t[1].path, "/mnt/gpfs"));
	CHECK_EQ(cfg.tiers.t[1].limit.bytes, TiB);
	CHECK_EQ(cfg_set(&cfg, "tiers", "more", "disk:/srv/more", err,
			 sizeof(err)),
		 0);
	CHECK_EQ(cfg.tiers.n, 4);
	CHECK(!strcmp(cfg.tiers.t[3].name, "more"));
	/* -o tiers= replaces the whole list, in its order. */
	CHECK_EQ(cfg_set_option(&cfg, "tiers",
				"b=shared:/srv/b+a=disk:/srv/a:1G", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg.tiers.n, 2);
	CHECK(!strcmp(cfg.tiers.t[0].name, "b"));
	CHECK(!strcmp(cfg.tiers.t[1].name, "a"));
	CHECK_EQ(cfg.tiers.t[1].limit.bytes, GiB);
	CHECK_EQ(cfg_set_option(&cfg, "tiers", "", err, sizeof(err)), 0);
	CHECK_EQ(cfg.tiers.n, 0);
	CHECK(cfg_is_option("tiers"));
	CHECK(cfg_is_option("tiers_nvme"));
	CHECK(!cfg_is_option("tiers_"));
	CHECK(cfg_owns_option("tiers_"));
	CHECK_EQ(cfg_set_option(&cfg, "policy_promote", "no", err,
				sizeof(err)),
		 0);
	CHECK(!cfg.policy.promote);
	CHECK_EQ(cfg_set_option(&cfg, "policy_promote_rate", "0", err,
				sizeof(err)),
		 -EINVAL);
	CHECK_EQ(cfg_set_option(&cfg, "policy_write", "write_through", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg.policy.write, CFG_WRITE_THROUGH);
	CHECK_EQ(cfg_set_option(&cfg, "policy_write", "through", err,
				sizeof(err)),
		 -EINVAL);
	CHECK(strstr(err, "write_back") != NULL);
	CHECK_EQ(cfg.policy.write, CFG_WRITE_THROUGH);
	CHECK_EQ(cfg_set_option(&cfg, "policy_admission", "yes", err,
				sizeof(err)),
		 0);
	CHECK(cfg.policy.admission);
	cfg_free(&cfg);
}

static void test_tiers_errors(void)
{
	static const struct {
		const char *name, *spec, *want;
	} cases[] = {
		{ "nvme", "nfs:/mnt/x", "nvme: unknown kind 'nfs' (known: disk, "
					"shared)" },
		{ "ram", "host:/mnt/x", "ram: kind 'host' cannot come after a "
					"disk-kind tier" },
		{ "gpu", "device:/mnt/x", "gpu: kind 'device' cannot come after "
					  "a disk-kind tier" },
		{ "nvme", "/mnt/nvme", "nvme: '/mnt/nvme': expected "
				       "KIND:PATH[:LIMIT]" },
		{ "nvme", "disk:", "nvme: empty path" },
		{ "nvme", "disk:/mnt/x:lots", "nvme: 'lots' is not a size" },
		{ "nvme", "disk:/mnt/x:0", "nvme: '0': a limit of zero" },
		{ "nvme", "disk:/mnt/a+b", "nvme: '/mnt/a+b': a tier's path "
					   "cannot hold '+'" },
		{ "disk", "disk:/mnt/x", "disk: 'disk' names a tier every chain "
					 "has" },
		{ "Host", "disk:/mnt/x", "Host: 'Host' names a tier" },
		{ "device", "shared:/mnt/x", "device: 'device' names a tier "
					     "every chain has" },
		{ "nvme", "disk:/mnt/x:-1G", "nvme: '-1G' is negative" },
		{ "nvme", "disk:/mnt/x:", "nvme: empty value, expected a size" },
		{ "a b", "disk:/mnt/x", "a b: 'a b' is not a tier name" },
		{ "a:b", "disk:/mnt/x", "a:b: 'a:b' is not a tier name" },
		{ "sixteen_letters_", "disk:/mnt/x", "sixteen_letters_: "
						     "'sixteen_letters_' is "
						     "not a tier name" },
	};
	struct tfs_config cfg;
	char want[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cfg_defaults(&cfg);
		CHECK_EQ(cfg_set(&cfg, "tiers", cases[i].name, cases[i].spec,
				 err, sizeof(err)),
			 -EINVAL);
		CHECK(starts(err, cases[i].want));
		CHECK_EQ(cfg.tiers.n, 0);
		/* The same from -o, and nothing changes. */
		snprintf(want, sizeof(want), "tiers_%s", cases[i].name);
		CHECK_EQ(cfg_set_option(&cfg, want, cases[i].spec, err,
					sizeof(err)),
			 -EINVAL);
		snprintf(want, sizeof(want), "-o tiers_%s", cases[i].want);
		CHECK(starts(err, want));
		CHECK_EQ(cfg.tiers.n, 0);
		cfg_free(&cfg);
	}

	cfg_defaults(&cfg);
	for (int i = 0; i < CFG_MAX_TIERS; i++) {
		char name[8];

		snprintf(name, sizeof(name), "t%d", i);
		CHECK_EQ(cfg_set(&cfg, "tiers", name, "disk:/mnt/x", err,
				 sizeof(err)),
			 0);
	}
	CHECK_EQ(cfg_set(&cfg, "tiers", "one_more", "disk:/mnt/x", err,
			 sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "one_more: at most 6 tiers below [disk]"));
	/* A bad entry leaves a known one as it was. */
	CHECK_EQ(cfg_set(&cfg, "tiers", "t0", "nfs:/y", err, sizeof(err)),
		 -EINVAL);
	CHECK(!strcmp(cfg.tiers.t[0].path, "/mnt/x"));
	/* A bad -o list changes nothing. */
	CHECK_EQ(cfg_set_option(&cfg, "tiers", "a=disk:/a+a=disk:/b", err,
				sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "-o tiers: 'a' is listed twice"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers", "a=disk:/a+b", err,
				sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "-o tiers: 'b': expected NAME=KIND:PATH[:LIMIT]"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers", "a=nfs:/a", err, sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "-o tiers: a: unknown kind 'nfs'"));
	CHECK_EQ(cfg.tiers.n, CFG_MAX_TIERS);
	cfg_free(&cfg);

	/* From the file: the line, then the name. */
	CHECK_EQ(load(&cfg, "[tiers]\nnvme = disk:/mnt/n\nram = host:/x\n"),
		 -EINVAL);
	snprintf(want, sizeof(want), "%s:3: ram: kind 'host' cannot come "
				     "after a disk-kind tier",
		 tmp_path("t.conf"));
	CHECK(starts(err, want));
	cfg_free(&cfg);
}

static void test_validate_tiers(void)
{
	struct tfs_config cfg;
	char spec[1024], want[1024];

	mkdir(tmp_path("t1"), 0755);
	mkdir(tmp_path("t2"), 0755);
	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	snprintf(spec, sizeof(spec), "disk:%s:1G", tmp_path("t1"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers_nvme", spec, err, sizeof(err)),
		 0);
	snprintf(spec, sizeof(spec), "shared:%s", tmp_path("t2"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", spec, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	mkdir(tmp_path("mnt"), 0755);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("mnt"), err, sizeof(err)), 0);

	/* Two tiers in one directory, the same through another spelling. */
	snprintf(spec, sizeof(spec), "shared:%s/./t1", tmpdir);
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", spec, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("mnt"), err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "-o tiers_shared: '%s/./t1' is the "
				     "directory of -o tiers_nvme too",
		 tmpdir);
	CHECK(starts(err, want));
	/* ... or the [disk] tier's. */
	snprintf(spec, sizeof(spec), "shared:%s", tmpdir);
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", spec, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "is the directory of -o disk_path too"));

	/* A path that is not there, or inside the mount. */
	snprintf(spec, sizeof(spec), "shared:%s", tmp_path("nope"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", spec, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "-o tiers_shared: '%s' does not exist",
		 tmp_path("nope"));
	CHECK(starts(err, want));
	mkdir(tmp_path("mnt/in"), 0755);
	snprintf(spec, sizeof(spec), "shared:%s", tmp_path("mnt/in"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", spec, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("mnt"), err, sizeof(err)), -EINVAL);
	CHECK(has(err, "is inside the mount point"));

	/* Tiers below disk are caches: not with persist. */
	snprintf(spec, sizeof(spec), "shared:%s", tmp_path("t2"));
	CHECK_EQ(cfg_set_option(&cfg, "tiers_shared", spec, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_persist", "yes", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o tiers_nvme: tiers below disk do not keep files"));
	cfg_free(&cfg);
	rmdir(tmp_path("mnt/in"));
	rmdir(tmp_path("t1"));
	rmdir(tmp_path("t2"));
}

/* cfg_validate() */

/*
 * Sizes so small they are surely a slip: a bare number of bytes under
 * 4096 for a limit, reserve or share names the suffix it lacks; a limit
 * below one chunk is refused once every key is known; metadata needs room
 * for the root.
 */
static void test_validate_small_sizes(void)
{
	static const char *const bare[] = { "host_limit", "device_limit",
					    "disk_limit", "device_reserve",
					    "device_user_share",
					    "fs_metadata_limit" };
	struct tfs_config cfg;
	char want[256];

	cfg_defaults(&cfg);
	for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++) {
		CHECK_EQ(cfg_set_option(&cfg, bare[i], " 50 ", err,
					sizeof(err)),
			 -EINVAL);
		snprintf(want, sizeof(want), "-o %s: ' 50 ' is 50 bytes: did "
			 "you mean '50M' or '50G'?", bare[i]);
		CHECK(starts(err, want));
	}
	/* With a suffix, or 4096 and more, a number of bytes is meant. */
	CHECK_EQ(cfg_set_option(&cfg, "device_reserve", "0", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "device_reserve", "4096", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "device_user_share", "50K", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "fs_metadata_limit", "8K", err,
				sizeof(err)),
		 -EINVAL);
	CHECK(starts(err, "-o fs_metadata_limit: '8K' is too small, at least "
			  "16K"));
	CHECK_EQ(cfg_set_option(&cfg, "fs_metadata_limit", "16K", err,
				sizeof(err)),
		 0);
	/* A limit below one chunk, named with where it came from. */
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "host_limit", "512K", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o host_limit: 512K is less than one chunk (1M, "
			  "disk_chunk_size), the least a tier holds"));
	CHECK_EQ(cfg_set_option(&cfg, "disk_chunk_size", "64K", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_limit", "4100", err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o disk_limit: 4.0K is less than one chunk (64K"));
	cfg_free(&cfg);
	CHECK_EQ(load(&cfg, "[disk]\nchunk_size = 4M\n[device]\nlimit = 2M\n"),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "t.conf:4: limit: 2M is less than one chunk (4M"));
	cfg_free(&cfg);
}

/*
 * backend = none with another [device] setting from the same place is a
 * contradiction; -o device_backend=none over a file's device settings is
 * an override.
 */
static void test_validate_device_off(void)
{
	struct tfs_config cfg;

	CHECK_EQ(load(&cfg, "[device]\nbackend = none\nlimit = 1G\n"), 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "t.conf:3: limit: set for a device tier, but backend "
		       "= none on line 2 turns it off: drop one of them"));
	cfg_free(&cfg);

	CHECK_EQ(load(&cfg, "[device]\nlimit = 1G\ngpus = 0,1\n"), 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "device_backend", "none", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	CHECK_EQ(cfg_set_option(&cfg, "device_user_share", "1G", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "-o device_user_share: set for a device tier, but -o "
		       "device_backend=none turns it off"));
	cfg_free(&cfg);

	/* The defaults of [device] with none are no contradiction. */
	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_set_option(&cfg, "device_backend", "none", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	cfg_free(&cfg);
}

static void test_validate_ok(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	mkdir(tmp_path("mnt"), 0755);
	mkdir(tmp_path("mnt2"), 0755);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("mnt"), err, sizeof(err)), 0);
	/* A sibling whose name starts with the mount point's is fine. */
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmp_path("mnt2"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("mnt"), err, sizeof(err)), 0);
	/* So is a mount point below the disk path. */
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("mnt"), err, sizeof(err)), 0);
	cfg_free(&cfg);
}

static void test_validate_path(void)
{
	struct tfs_config cfg;
	char want[1024];

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmp_path("nope"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "-o disk_path: '%s' does not exist",
		 tmp_path("nope"));
	CHECK(!strcmp(err, want) || !printf("#   %s\n", err));

	write_file("plain", "x", 1);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmp_path("plain"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "plain' is not a directory"));
	CHECK(starts(err, "-o disk_path: "));

	/* Named by file and line when the file set it. */
	snprintf(want, sizeof(want), "[disk]\n\npath = %s\n", tmp_path("nope"));
	CHECK_EQ(cfg_load_file(&cfg, conf(want), err, sizeof(err)), 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: path: '%s' does not exist",
		 tmp_path("t.conf"), tmp_path("nope"));
	CHECK(!strcmp(err, want) || !printf("#   %s\n", err));
	cfg_free(&cfg);

	/* Out of memory in cfg_defaults() shows up here. */
	cfg_defaults(&cfg);
	free(cfg.disk.path);
	cfg.disk.path = NULL;
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -ENOMEM);
	CHECK(has(err, "out of memory"));
	cfg_free(&cfg);
}

static void test_validate_inside_mount(void)
{
	struct tfs_config cfg;
	char weird[1024];

	mkdir(tmp_path("m"), 0755);
	mkdir(tmp_path("m/spill"), 0755);
	mkdir(tmp_path("m/spill/deeper"), 0755);
	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmp_path("m/spill"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("m"), err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o disk_path: "));
	CHECK(has(err, "is inside the mount point"));
	/* The mount point itself. */
	CHECK_EQ(cfg_validate(&cfg, tmp_path("m/spill"), err, sizeof(err)),
		 -EINVAL);
	/* Through a symlink, and with a mount point spelled oddly. */
	CHECK_EQ(symlink(tmp_path("m/spill/deeper"), tmp_path("link")), 0);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmp_path("link"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, tmp_path("m"), err, sizeof(err)), -EINVAL);
	snprintf(weird, sizeof(weird), "%s//./m/", tmpdir);
	CHECK_EQ(cfg_validate(&cfg, weird, err, sizeof(err)), -EINVAL);
	/* A mount point realpath() cannot resolve is compared as written. */
	snprintf(weird, sizeof(weird), "%s/gone/../m", tmpdir);
	CHECK_EQ(cfg_validate(&cfg, weird, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "is inside the mount point"));
	snprintf(weird, sizeof(weird), "%s/gone/../elsewhere", tmpdir);
	CHECK_EQ(cfg_validate(&cfg, weird, err, sizeof(err)), 0);
	/* A relative mount point. */
	CHECK_EQ(chdir(tmpdir), 0);
	CHECK_EQ(cfg_validate(&cfg, "m", err, sizeof(err)), -EINVAL);
	CHECK_EQ(cfg_validate(&cfg, "./gone/../m/", err, sizeof(err)), -EINVAL);
	CHECK_EQ(cfg_validate(&cfg, "gone/../../elsewhere", err, sizeof(err)),
		 0);
	CHECK_EQ(chdir("/"), 0);
	cfg_free(&cfg);
}

/*
 * root passes access(W_OK) on any mode, so as root a read-only bind mount
 * makes the directory unwritable; where that is not allowed, the test is
 * skipped.
 */
static bool ro_mounted;

static bool make_unwritable(const char *dir)
{
	mkdir(dir, 0755);
	if (chmod(dir, 0555))
		perror("chmod");
	if (access(dir, W_OK) == 0 && mount(dir, dir, NULL, MS_BIND, NULL) == 0) {
		ro_mounted = true;
		if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY,
			  NULL))
			perror("remount read-only");
	}
	return access(dir, W_OK) != 0;
}

static void undo_unwritable(const char *dir)
{
	if (ro_mounted && umount(dir))
		perror("umount");
	ro_mounted = false;
	chmod(dir, 0755);
}

static void test_validate_not_writable(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	CHECK_EQ(cfg_set_option(&cfg, "disk_path", tmp_path("ro"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o disk_path: "));
	CHECK(has(err, "' is not writable: "));
	cfg_free(&cfg);
}

static void test_validate_watermarks(void)
{
	struct tfs_config cfg;

	cfg_defaults(&cfg);
	cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err));
	CHECK_EQ(cfg_set_option(&cfg, "policy_target", "0.95", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o policy_target: 0.95 must be below the high "
			  "watermark (0.95)"));
	cfg_free(&cfg);

	/* The key that was set is the one named. */
	CHECK_EQ(load(&cfg, "[policy]\nhigh_watermark = 0.8\n"), 0);
	cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err));
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "t.conf:2: high_watermark: 0.8 must be above the "
		       "target (0.85)"));
	CHECK_EQ(cfg_set_option(&cfg, "policy_target", "0.5", err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	cfg_free(&cfg);
}

static void test_validate_log_file(void)
{
	struct tfs_config cfg;
	struct stat st;

	cfg_defaults(&cfg);
	CHECK(!cfg.log.file);
	cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err));
	/* No file: nothing to check. */
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	/* A missing file is created, to be appended to. */
	CHECK_EQ(cfg_set_option(&cfg, "log_file", tmp_path("d.log"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), 0);
	CHECK(!stat(tmp_path("d.log"), &st) && S_ISREG(st.st_mode));
	CHECK_EQ(cfg_set_option(&cfg, "log_file", tmp_path("no/such.log"), err,
				sizeof(err)),
		 0);
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(starts(err, "-o log_file: cannot open '"));
	CHECK(has(err, "no/such.log': No such file or directory"));
	CHECK_EQ(cfg_set_option(&cfg, "log_file", "", err, sizeof(err)),
		 -EINVAL);
	cfg_free(&cfg);

	/* From the file, named with its line. */
	CHECK_EQ(load(&cfg, "[log]\nfile = /nonexistent/dir/t.log\n"), 0);
	cfg_set_option(&cfg, "disk_path", tmpdir, err, sizeof(err));
	CHECK_EQ(cfg_validate(&cfg, NULL, err, sizeof(err)), -EINVAL);
	CHECK(has(err, "t.conf:2: file: cannot open '/nonexistent/dir/t.log'"));
	cfg_free(&cfg);
}

static void cleanup(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

int main(void)
{
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	TAP_RUN(test_size_forms);
	TAP_RUN(test_tiers_chain);
	TAP_RUN(test_tiers_errors);
	TAP_RUN(test_validate_tiers);
	TAP_RUN(test_size_percent);
	TAP_RUN(test_size_resolve);
	TAP_RUN(test_defaults);
	TAP_RUN(test_device_keys);
	TAP_RUN(test_device_gpus);
	TAP_RUN(test_host_keys);
	TAP_RUN(test_disk_keys);
	TAP_RUN(test_policy_keys);
	TAP_RUN(test_fs_keys);
	TAP_RUN(test_messages);
	TAP_RUN(test_unknown);
	TAP_RUN(test_is_option);
	TAP_RUN(test_owns_option);
	TAP_RUN(test_suggest);
	TAP_RUN(test_help);
	TAP_RUN(test_file_good);
	TAP_RUN(test_file_long_lines);
	TAP_RUN(test_file_errors);
	TAP_RUN(test_file_open_errors);
	TAP_RUN(test_precedence);
	find_example();
	TAP_RUN(test_example_file);
	TAP_RUN(test_validate_ok);
	TAP_RUN(test_validate_small_sizes);
	TAP_RUN(test_validate_device_off);
	TAP_RUN(test_validate_path);
	TAP_RUN(test_validate_inside_mount);
	if (make_unwritable(tmp_path("ro")))
		TAP_RUN(test_validate_not_writable);
	else
		tap_skip("test_validate_not_writable",
			 "root may write to any mode here and a read-only bind "
			 "mount is not allowed");
	undo_unwritable(tmp_path("ro"));
	TAP_RUN(test_validate_watermarks);
	TAP_RUN(test_validate_name);
	TAP_RUN(test_validate_log_file);
	cleanup();
	return tap_done();
}
