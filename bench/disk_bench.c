// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * disk_bench: spill and unspill throughput of the disk tier (no mount)
 * next to the lz4 CLI on the same bytes, in the same run.
 *
 *	disk_bench [-d DIR] [-c CHUNK] [-b BATCH] [-r REPEATS] FILE...
 *
 * Each FILE is read into memory, spilled with tier_dobj_write_chunks() in
 * batches of BATCH chunks and read back whole with tier_dobj_read(); then
 * `lz4 -1` compresses it and `lz4 -d` decompresses it, files in DIR. One
 * line per FILE, medians of REPEATS runs:
 *
 *	FILE size=B stored=B spill=MB/s lz4_1=MB/s spill_ratio=X
 *	     unspill=MB/s lz4_d=MB/s unspill_ratio=X
 *	     crc32c_hw=MB/s crc32c_table=MB/s
 *
 * The two CRC32C figures are the SSE4.2 code and the table code over the
 * whole FILE (tests/unit/test_disk.c checks they agree; so does this).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tiers/disk.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static double time_cmd(const char *cmd)
{
	double t0 = now();
	int st = system(cmd);

	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
		return -1;
	return now() - t0;
}

/* MB/s of @fn over @data, the median of @reps runs; its result in @crc. */
static double crc_mbps(uint32_t (*fn)(uint32_t, const void *, size_t),
		       const unsigned char *data, size_t size, double *t,
		       int reps, uint32_t *crc)
{
	for (int r = 0; r < reps; r++) {
		double t0 = now();

		*crc = fn(0, data, size);
		t[r] = now() - t0;
	}
	return (double)size / 1e6 / median(t, reps);
}

static unsigned char *slurp(const char *path, size_t *size)
{
	unsigned char *buf;
	struct stat st;
	FILE *f = fopen(path, "re");

	if (!f || fstat(fileno(f), &st)) {
		fprintf(stderr, "disk_bench: cannot open '%s': %s\n", path,
			strerror(errno));
		if (f)
			fclose(f);
		return NULL;
	}
	*size = (size_t)st.st_size;
	buf = malloc(*size ? *size : 1);
	if (!buf || fread(buf, 1, *size, f) != *size) {
		fprintf(stderr, "disk_bench: cannot read '%s'\n", path);
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static int bench_file(struct tier_disk *d, const char *dir, const char *path,
		      size_t batch, int reps)
{
	uint32_t cs = tier_disk_chunk_size(d);
	size_t size, n;
	unsigned char *data = slurp(path, &size), *back;
	const void **srcs;
	size_t *lens;
	double *tw = calloc((size_t)reps, sizeof(double));
	double *tr = calloc((size_t)reps, sizeof(double));
	double *tc = calloc((size_t)reps, sizeof(double));
	double *td = calloc((size_t)reps, sizeof(double));
	uint64_t stored = 0;
	char cmd[1024];
	int rc = 0;

	if (!data)
		return 1;
	n = (size + cs - 1) / cs;
	back = malloc(size ? size : 1);
	srcs = malloc((n ? n : 1) * sizeof(*srcs));
	lens = malloc((n ? n : 1) * sizeof(*lens));
	for (size_t i = 0; i < n; i++) {
		srcs[i] = data + i * cs;
		lens[i] = i + 1 < n ? cs : size - i * cs;
	}
	/* Fault the read-back buffer in before timing. */
	memset(back, 0, size);
	for (int r = 0; r < reps && !rc; r++) {
		struct tier_dobj *o;
		double t0;

		rc = tier_dobj_create(d, (uint64_t)r, &o);
		if (rc)
			break;
		t0 = now();
		for (size_t i = 0; i < n && !rc; i += batch)
			rc = tier_dobj_write_chunks(d, o, i, srcs + i, lens + i,
						    n - i < batch ? n - i :
								    batch);
		tw[r] = now() - t0;
		stored = tier_dobj_stored(o);
		t0 = now();
		if (!rc)
			rc = tier_dobj_read(d, o, back, size, 0);
		tr[r] = now() - t0;
		if (!rc && memcmp(back, data, size)) {
			fprintf(stderr, "disk_bench: '%s' read back wrong\n",
				path);
			rc = -EIO;
		}
		tier_dobj_destroy(d, o);

		snprintf(cmd, sizeof(cmd), "lz4 -q -1 -f '%s' '%s/b.lz4'",
			 path, dir);
		tc[r] = time_cmd(cmd);
		snprintf(cmd, sizeof(cmd), "lz4 -q -d -f '%s/b.lz4' '%s/b.out'",
			 dir, dir);
		td[r] = time_cmd(cmd);
	}
	snprintf(cmd, sizeof(cmd), "%s/b.lz4", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/b.out", dir);
	unlink(cmd);
	if (rc) {
		fprintf(stderr, "disk_bench: '%s': %s\n", path, strerror(-rc));
	} else {
		double mb = (double)size / 1e6;
		double w = mb / median(tw, reps), r = mb / median(tr, reps);
		double c = median(tc, reps), dd = median(td, reps);
		uint32_t crc_hw, crc_sw;
		double hw = crc_mbps(tfs_crc32c_hw, data, size, tc, reps,
				     &crc_hw);
		double sw = crc_mbps(tfs_crc32c_sw, data, size, td, reps,
				     &crc_sw);

		c = c > 0 ? mb / c : 0;
		dd = dd > 0 ? mb / dd : 0;
		printf("%s size=%zu stored=%" PRIu64 " spill=%.0f lz4_1=%.0f "
		       "spill_ratio=%.2f unspill=%.0f lz4_d=%.0f "
		       "unspill_ratio=%.2f crc32c_hw=%.0f crc32c_table=%.0f\n",
		       path, size, stored, w, c, c > 0 ? w / c : 0, r, dd,
		       dd > 0 ? r / dd : 0, hw, sw);
		if (crc_hw != crc_sw) {
			fprintf(stderr, "disk_bench: '%s': crc32c %08x in "
					"hardware, %08x from the table\n",
				path, crc_hw, crc_sw);
			rc = -EIO;
		}
	}
	free(data);
	free(back);
	free(srcs);
	free(lens);
	free(tw);
	free(tr);
	free(tc);
	free(td);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *dir = "/var/tmp";
	uint32_t cs = 1u << 20;
	size_t batch = 8;
	int reps = 3, opt, rc = 0;
	struct tier_disk *d;
	char err[256];

	while ((opt = getopt(argc, argv, "d:c:b:r:")) != -1) {
		switch (opt) {
		case 'd':
			dir = optarg;
			break;
		case 'c':
			cs = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			batch = strtoul(optarg, NULL, 0);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		default:
			goto usage;
		}
	}
	if (optind >= argc || !batch || reps < 1)
		goto usage;
	if (tier_disk_init(&d, dir, "bench", cs, CFG_COMPRESS_LZ4, err,
			   sizeof(err))) {
		fprintf(stderr, "disk_bench: %s\n", err);
		return 1;
	}
	for (int i = optind; i < argc; i++)
		rc |= bench_file(d, dir, argv[i], batch, reps);
	tier_disk_destroy(d);
	return rc;
usage:
	fprintf(stderr, "usage: disk_bench [-d DIR] [-c CHUNK] [-b BATCH] "
			"[-r REPEATS] FILE...\n");
	return 2;
}
