// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The store without a mount: placement, spilling, unspilling, limits,
 * pins, ENOSPC, large files and concurrency, on the sim device.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "config/config.h"
#include "tiers/device.h"
#include "tiers/host.h"
#include "tiers/store.h"
#include "tap.h"

#define MiB (1024ull * 1024)

static char spill_dir[] = "/tmp/tierfs-unit.XXXXXX";

static struct tier_store *mk_store(const char *backend, uint64_t dev,
				   uint64_t host, uint64_t disk)
{
	struct tfs_config cfg;
	struct tier_store *s = NULL;
	char err[256];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "%s",
		 backend);
	cfg.device.limit = (struct cfg_size){ .bytes = dev };
	cfg.host.limit = (struct cfg_size){ .bytes = host };
	if (disk)
		cfg.disk.limit = (struct cfg_size){ .bytes = disk };
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	int rc = tier_store_init(&s, &cfg, "unit", err, sizeof(err));

	if (rc)
		printf("# store init: %s\n", err);
	cfg_free(&cfg);
	return s;
}

/* Byte @off of buffer number @n: differs per buffer, compressible-ish. */
static uint8_t pat(int n, uint64_t off)
{
	return (uint8_t)((off / 7) ^ (uint64_t)n * 31 ^ (off >> 13));
}

static void fill(void *p, size_t len, int n, uint64_t off)
{
	for (size_t i = 0; i < len; i++)
		((uint8_t *)p)[i] = pat(n, off + i);
}

static bool verify(struct tier_buf *b, int n, uint64_t size)
{
	size_t step = 256 * 1024;
	uint8_t *got = malloc(step), *want = malloc(step);
	bool ok = tier_buf_size(b) == size;

	for (uint64_t off = 0; ok && off < size; off += step) {
		size_t len = size - off < step ? size - off : step;

		ok = tier_buf_read(b, got, len, (off_t)off) == (ssize_t)len;
		fill(want, len, n, off);
		ok = ok && !memcmp(got, want, len);
	}
	free(got);
	free(want);
	return ok;
}

static struct tier_buf *mk_file(struct tier_store *s, int n, uint64_t size)
{
	struct tier_buf *b;
	size_t step = 128 * 1024;
	uint8_t *p = malloc(step);

	if (tier_buf_new(s, &b)) {
		free(p);
		return NULL;
	}
	for (uint64_t off = 0; off < size; off += step) {
		size_t len = size - off < step ? size - off : step;

		fill(p, len, n, off);
		if (tier_buf_write(b, p, len, (off_t)off) != (ssize_t)len) {
			printf("# write of file %d at %llu failed\n", n,
			       (unsigned long long)off);
			break;
		}
	}
	tier_buf_register(b);
	free(p);
	return b;
}

static enum tfs_tier tier_of(struct tier_buf *b)
{
	struct tier_buf_stat st;

	tier_buf_stat(b, &st);
	return st.tier;
}

static void check_limits(struct tier_store *s)
{
	struct tier_store_stats st;

	tier_store_stats(s, &st);
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		CHECK(st.tier[t].used <= st.tier[t].limit);
}

static void test_round_trip_and_sparse(void)
{
	struct tier_store *s = mk_store("none", 0, 64 * MiB, 0);
	struct tier_buf *b;
	char buf[16] = { 0 };
	struct tier_store_stats st;

	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_write(b, "hello", 5, 0), 5);
	CHECK_EQ(tier_buf_read(b, buf, sizeof(buf), 0), 5);
	CHECK(!memcmp(buf, "hello", 5));
	/* A write at 1 GiB costs one chunk, not the hole. */
	CHECK_EQ(tier_buf_write(b, "x", 1, 1024 * MiB), 1);
	CHECK_EQ(tier_buf_size(b), 1024 * MiB + 1);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_HOST].used <= 2 * MiB);
	CHECK_EQ(tier_buf_read(b, buf, 4, 512 * MiB), 4);
	CHECK(!memcmp(buf, "\0\0\0\0", 4));
	CHECK_EQ(tier_buf_read(b, buf, 4, 1024 * MiB), 1);
	CHECK_EQ(buf[0], 'x');
	/* Truncate down then up: the tail reads as zeroes. */
	CHECK_EQ(tier_buf_truncate(b, 3), 0);
	CHECK_EQ(tier_buf_truncate(b, 10), 0);
	memset(buf, 'z', sizeof(buf));
	CHECK_EQ(tier_buf_read(b, buf, sizeof(buf), 0), 10);
	CHECK(!memcmp(buf, "hel\0\0\0\0\0\0\0", 10));
	/* 64 GiB of logical size costs nothing. */
	CHECK_EQ(tier_buf_truncate(b, 64ull * 1024 * MiB), 0);
	CHECK_EQ(tier_buf_size(b), 64ull * 1024 * MiB);
	tier_buf_destroy(b);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_HOST].used, 0);
	CHECK_EQ(st.files, 0);
	tier_store_destroy(s);
}

/* A small file grown by truncate, then written at its start, must keep
 * zeroes (not heap) in its tail through every tier. */
static void test_small_grown_by_truncate(void)
{
	struct tier_store *s = mk_store("sim", 4 * MiB, 4 * MiB, 0);
	struct tier_buf *b;
	static uint8_t got[41794], want[41794];

	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_truncate(b, sizeof(want)), 0);
	memset(want, 0, sizeof(want));
	memset(want, 'w', 205);
	CHECK_EQ(tier_buf_write(b, want, 205, 0), 205);
	for (int t = TFS_TIER_DISK; t >= TFS_TIER_DEVICE; t--) {
		CHECK_EQ(tier_buf_move(b, (enum tfs_tier)t, 0), 0);
		memset(got, 0xee, sizeof(got));
		CHECK_EQ(tier_buf_read(b, got, sizeof(got), 0), sizeof(got));
		CHECK(!memcmp(got, want, sizeof(want)));
	}
	/* A tier of [tiers] (TFS_MOVE_CHAIN), which this store has none of. */
	CHECK_EQ(tier_buf_move(b, (enum tfs_tier)TFS_TIER_COUNT, 0), -ENXIO);
	CHECK_EQ(tier_buf_move(b, (enum tfs_tier)(TFS_TIER_MAX - 1), 0),
		 -ENXIO);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

/*
 * statvfs() of the spill directory, as the store's calls resolve to it
 * (statvfs64 with 64-bit offsets): while slow_statvfs is set, one call
 * says it started and waits up to 5 s for the test to let it go, saying
 * in statvfs_waited whether it had to wait that long.
 */
static atomic_int slow_statvfs, in_statvfs, statvfs_go, statvfs_waited;

int statvfs64(const char *path, struct statvfs64 *buf)
{
	static int (*real)(const char *, struct statvfs64 *);

	if (!real)
		real = (int (*)(const char *, struct statvfs64 *))dlsym(
			RTLD_NEXT, "statvfs64");
	if (atomic_exchange(&slow_statvfs, 0)) {
		atomic_store(&in_statvfs, 1);
		for (int i = 0; i < 500 && !atomic_load(&statvfs_go); i++)
			usleep(10000);
		atomic_store(&statvfs_waited, !atomic_load(&statvfs_go));
	}
	return real(path, buf);
}

static void *move_to_disk_main(void *arg)
{
	return (void *)(intptr_t)tier_buf_move(arg, TFS_TIER_DISK, 0);
}

/* The disk tier asks its filesystem for room without the store's lock:
 * on NFS or Lustre a statvfs() waits on the server, and every other
 * operation of the store would wait behind it. */
static void test_statvfs_unlocked(void)
{
	struct tier_store *s = mk_store("none", 0, 4 * MiB, 0);
	struct tier_store_stats st;
	struct tier_buf_stat bs;
	struct tier_buf *b;
	pthread_t th;
	void *ret;
	char data[4096];

	memset(data, 'v', sizeof(data));
	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_write(b, data, sizeof(data), 0), sizeof(data));
	CHECK_EQ(tier_buf_register(b), 0);
	atomic_store(&slow_statvfs, 1);
	CHECK_EQ(pthread_create(&th, NULL, move_to_disk_main, b), 0);
	while (!atomic_load(&in_statvfs))
		usleep(1000);
	/* Takes s->lock: had the mover taken it around statvfs(), this
	 * would wait the 5 s out. */
	tier_store_stats(s, &st);
	atomic_store(&statvfs_go, 1);
	pthread_join(th, &ret);
	CHECK_EQ((int)(intptr_t)ret, 0);
	CHECK_EQ(atomic_load(&statvfs_waited), 0);
	tier_buf_stat(b, &bs);
	CHECK_EQ(bs.tier, TFS_TIER_DISK);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

struct trunc_arg {
	struct tier_buf *b;
	volatile int done;
};

static void *trunc_main(void *arg)
{
	struct trunc_arg *a = arg;

	tier_buf_truncate(a->b, 0);
	a->done = 1;
	return NULL;
}

/* Zero-copy reads see the same bytes as copying ones, holes as zeroes, and
 * keep the memory they point at until read_done: a truncate waits. */
static void test_read_iov(void)
{
	struct tier_store *s = mk_store("none", 0, 64 * MiB, 0);
	struct tier_buf *b, *small;
	struct iovec iov[64];
	int niov = 0;
	uint8_t *got = malloc(3 * MiB), *want = malloc(3 * MiB);

	CHECK_EQ(tier_buf_new(s, &b), 0);
	fill(want, MiB, 5, 0);
	CHECK_EQ(tier_buf_write(b, want, MiB, 0), MiB);
	CHECK_EQ(tier_buf_write(b, want, 100, 2 * MiB + 50), 100);
	ssize_t n = tier_buf_read_iov(b, 3 * MiB, 100, iov, 64, &niov);

	CHECK_EQ(n, 2 * MiB + 50);
	CHECK(niov >= 3);
	size_t at = 0;

	for (int i = 0; i < niov; i++) {
		memcpy(got + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	CHECK_EQ(at, n);
	CHECK_EQ(tier_buf_read(b, want, 3 * MiB, 100), n);
	CHECK(!memcmp(got, want, (size_t)n));

	struct trunc_arg ta = { .b = b };
	pthread_t th;

	pthread_create(&th, NULL, trunc_main, &ta);
	usleep(100000);
	CHECK_EQ(ta.done, 0); /* waits for the reply to finish */
	CHECK(!memcmp(iov[0].iov_base, want, iov[0].iov_len));
	tier_buf_read_done(b);
	pthread_join(th, NULL);
	CHECK_EQ(ta.done, 1);
	CHECK_EQ(tier_buf_size(b), 0);
	CHECK_EQ(tier_buf_read_iov(b, 10, 0, iov, 64, &niov), 0);

	/* A small file grown by truncate: the tail past its block is zeroes. */
	CHECK_EQ(tier_buf_new(s, &small), 0);
	CHECK_EQ(tier_buf_write(small, "abc", 3, 0), 3);
	CHECK_EQ(tier_buf_truncate(small, 100), 0);
	n = tier_buf_read_iov(small, 200, 0, iov, 64, &niov);
	CHECK_EQ(n, 100);
	at = 0;
	for (int i = 0; i < niov; i++) {
		memcpy(got + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	CHECK_EQ(at, 100);
	CHECK(!memcmp(got, "abc", 3));
	CHECK(got[3] == 0 && got[99] == 0);
	tier_buf_read_done(small);
	/* Too few entries: the caller falls back to copying. */
	CHECK_EQ(tier_buf_write(small, want, 2 * MiB, 0), 2 * MiB);
	CHECK_EQ(tier_buf_read_iov(small, 2 * MiB, 0, iov, 1, &niov), -EAGAIN);
	/* On disk (pinned, so the read cannot bring it up): not
	 * addressable. */
	CHECK_EQ(tier_buf_move(small, TFS_TIER_DISK, 0), 0);
	tier_buf_pin(small);
	CHECK_EQ(tier_buf_read_iov(small, 10, 0, iov, 64, &niov), -EAGAIN);
	tier_buf_destroy(small);
	tier_buf_destroy(b);
	free(got);
	free(want);
	tier_store_destroy(s);
}

/* The pool keeps freed chunks for reuse and gives them back once idle. */
static void test_host_pool_trim(void)
{
	struct host_pool *p;
	void *c[8];

	CHECK_EQ(host_pool_init(&p, 64 * 1024, 64 * MiB, NULL), 0);
	for (int i = 0; i < 8; i++)
		c[i] = host_chunk_get(p);
	for (int i = 0; i < 8; i++)
		host_chunk_put(p, c[i]);
	CHECK_EQ(host_pool_free_bytes(p), 8 * 64 * 1024);
	host_pool_trim(p, 0); /* chunks were taken since: busy, keep */
	CHECK_EQ(host_pool_free_bytes(p), 8 * 64 * 1024);
	host_pool_trim(p, 0); /* idle: half goes */
	CHECK_EQ(host_pool_free_bytes(p), 4 * 64 * 1024);
	host_pool_trim(p, 3 * 64 * 1024); /* never below the floor */
	CHECK_EQ(host_pool_free_bytes(p), 3 * 64 * 1024);
	void *again = host_chunk_get(p); /* reuse, not a new mapping */

	CHECK(again == c[7] || again == c[6] || again == c[5] ||
	      again == c[4] || again == c[3] || again == c[2] ||
	      again == c[1] || again == c[0]);
	host_chunk_put(p, again);
	host_pool_destroy(p);
}

/* What the pool pins and unpins: at most 8 ranges at once. */
struct pins {
	void *ptr[8];
	size_t len[8];
	int calls, live, bad;
};

static int pin_count(void *ctx, void *ptr, size_t len)
{
	struct pins *pn = ctx;
	int i;

	for (i = 0; i < 8 && pn->ptr[i]; i++)
		;
	if (i == 8)
		return -ENOMEM;
	pn->ptr[i] = ptr;
	pn->len[i] = len;
	pn->calls++;
	pn->live++;
	return 0;
}

static void unpin_count(void *ctx, void *ptr, size_t len)
{
	struct pins *pn = ctx;

	for (int i = 0; i < 8; i++) {
		if (pn->ptr[i] == ptr) {
			pn->bad += pn->len[i] != len;
			pn->ptr[i] = NULL;
			pn->live--;
			return;
		}
	}
	pn->bad++;
}

/*
 * With pinning, chunks come from slabs pinned once each (a quarter of the
 * limit here), not from a pin per chunk in the write path; a slab is
 * unpinned whole, with the pointer it was pinned with, once all its chunks
 * are free and the pool is idle.
 */
static void test_host_pool_slabs(void)
{
	struct pins pn = { 0 };
	struct host_pool_hooks hooks = { .pin = pin_count,
					 .unpin = unpin_count, .ctx = &pn };
	const size_t chunk = 64 * 1024;
	struct host_pool *p;
	void *c[300];

	/* 16 MiB limit: 4 MiB slabs of 64 chunks. */
	CHECK_EQ(host_pool_init(&p, chunk, 16 * MiB, &hooks), 0);
	for (int i = 0; i < 100; i++) {
		c[i] = host_chunk_get(p);
		CHECK(c[i] != NULL);
		memset(c[i], i, chunk);
	}
	CHECK_EQ(pn.calls, 2);
	CHECK_EQ(pn.len[0], 4 * MiB);
	for (int i = 0; i < 100; i++)
		CHECK(((unsigned char *)c[i])[chunk - 1] == (unsigned char)i);
	/* Freed chunks are reused, from the fuller slab first. */
	host_chunk_put(p, c[3]);
	host_chunk_put(p, c[90]);
	void *again = host_chunk_get(p);

	CHECK(again == c[3]);
	CHECK_EQ(pn.calls, 2);
	host_chunk_put(p, again);
	for (int i = 0; i < 100; i++)
		if (i != 3 && i != 90)
			host_chunk_put(p, c[i]);
	CHECK_EQ(host_pool_free_bytes(p), 128 * chunk);
	host_pool_trim(p, 0); /* taken since the last trim: keep */
	CHECK_EQ(pn.live, 2);
	host_pool_trim(p, 0); /* idle: half of 128 chunks is one slab */
	CHECK_EQ(pn.live, 1);
	CHECK_EQ(host_pool_free_bytes(p), 64 * chunk);
	host_pool_trim(p, 64 * chunk); /* never below the floor */
	CHECK_EQ(pn.live, 1);
	host_pool_destroy(p);
	CHECK_EQ(pn.live, 0);
	CHECK_EQ(pn.bad, 0);

	/* Past the limit, a slab that comes free goes at once. */
	memset(&pn, 0, sizeof(pn));
	CHECK_EQ(host_pool_init(&p, chunk, 8 * MiB, &hooks), 0);
	for (int i = 0; i < 96; i++)
		c[i] = host_chunk_get(p);
	CHECK_EQ(pn.calls, 3); /* 2 MiB slabs of 32 chunks */
	host_pool_set_keep(p, 2 * MiB);
	for (int i = 0; i < 96; i++)
		host_chunk_put(p, c[i]);
	CHECK(pn.live <= 1);
	host_pool_destroy(p);
	CHECK_EQ(pn.live, 0);
	CHECK_EQ(pn.bad, 0);
}

/*
 * The device tier is charged what the device takes, the backend's rounded
 * size (a page for sim, 2 MiB for cuda), not the buffer's length: else a
 * tier of small files holds many times its limit.
 */
static void test_device_granted(void)
{
	struct tier_store *s = mk_store("sim", 4 * MiB, 16 * MiB, 0);
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	struct tier_store_stats st;
	struct tier_buf_stat bs;
	struct tier_buf *b[3];

	b[0] = mk_file(s, 1, pg + 1);
	b[1] = mk_file(s, 2, 10);
	b[2] = mk_file(s, 3, 3 * pg);
	for (int i = 0; i < 3; i++)
		CHECK(tier_of(b[i]) == TFS_TIER_DEVICE);
	tier_buf_stat(b[0], &bs);
	CHECK_EQ(bs.stored_size, 2 * pg);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, 6 * pg);
	CHECK(!strcmp(st.device_state, "ok"));
	CHECK(verify(b[0], 1, pg + 1) && verify(b[1], 2, 10));
	/* Dropped, the whole rounded size comes back. */
	CHECK_EQ(tier_buf_move(b[0], TFS_TIER_HOST, 0), 0);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, 4 * pg);
	for (int i = 0; i < 3; i++)
		tier_buf_destroy(b[i]);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, 0);
	tier_store_destroy(s);
}

static void test_spill_order(void)
{
	struct tier_store *s = mk_store("sim", 4 * MiB, 8 * MiB, 0);
	struct tier_buf *b[64];
	bool ok = true;

	CHECK(s != NULL);
	if (!s)
		return;
	for (int i = 0; i < 64; i++) {
		b[i] = mk_file(s, i, MiB);
		check_limits(s);
	}
	CHECK_EQ(tier_of(b[0]), TFS_TIER_DISK);
	CHECK_EQ(tier_of(b[63]), TFS_TIER_DEVICE);
	for (int i = 0; i < 64; i++)
		ok = ok && verify(b[i], i, MiB);
	CHECK(ok);
	check_limits(s);
	/* After reading them all in order, the last ones read are on top. */
	CHECK_EQ(tier_of(b[63]), TFS_TIER_DEVICE);
	CHECK_EQ(tier_of(b[0]), TFS_TIER_DISK);
	/* Reading an old file brings it up and pushes another down. */
	CHECK(verify(b[1], 1, MiB));
	CHECK_EQ(tier_of(b[1]), TFS_TIER_DEVICE);
	struct tier_store_stats st;

	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_DEVICE].spills > 0);
	CHECK(st.tier[TFS_TIER_DEVICE].unspills > 0);
	CHECK(st.tier[TFS_TIER_HOST].spills > 0);
	CHECK(st.tier[TFS_TIER_DISK].used < st.tier[TFS_TIER_DISK].buffers *
						   MiB);
	for (int i = 0; i < 64; i++)
		tier_buf_destroy(b[i]);
	tier_store_destroy(s);
}

/* Host memory charged from outside the store (passthrough replicas)
 * counts against the host limit: writes past it move others down. */
static void test_charge_outside(void)
{
	struct tier_store *s = mk_store("none", 0, 8 * MiB, 0);
	struct tier_store_stats st;
	struct tier_buf *b[4];
	int on_host = 0;
	bool ok = true;

	CHECK(s != NULL);
	if (!s)
		return;
	tier_store_charge_outside(s, 6 * MiB);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_HOST].used, 6 * MiB);
	for (int i = 0; i < 4; i++)
		b[i] = mk_file(s, i, MiB);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_HOST].used <= 8 * MiB);
	for (int i = 0; i < 4; i++) {
		on_host += tier_of(b[i]) == TFS_TIER_HOST;
		ok = ok && verify(b[i], i, MiB);
	}
	CHECK(ok);
	CHECK(on_host <= 2);
	tier_store_charge_outside(s, -6 * (int64_t)MiB);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_HOST].used <= 2 * MiB);
	for (int i = 0; i < 4; i++)
		tier_buf_destroy(b[i]);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_HOST].used, 0);
	tier_store_destroy(s);
}

static uint64_t spill_mtime(uint64_t id_hint)
{
	char path[512];
	struct stat sb;
	glob_t g;
	int rc;

	/* The spill directory's name ends in a random part. */
	snprintf(path, sizeof(path), "%s/tierfs.unit.*/%llu", spill_dir,
		 (unsigned long long)id_hint);
	if (glob(path, 0, NULL, &g))
		return 0;
	rc = g.gl_pathc == 1 ? stat(g.gl_pathv[0], &sb) : -1;
	globfree(&g);
	if (rc)
		return 0;
	return (uint64_t)sb.st_mtim.tv_sec * 1000000000ull +
	       (uint64_t)sb.st_mtim.tv_nsec;
}

static void test_clean_respill_and_move(void)
{
	struct tier_store *s = mk_store("sim", 16 * MiB, 16 * MiB, 0);
	struct tier_buf *b = mk_file(s, 7, 3 * MiB);

	struct tier_store_stats st;

	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK_EQ(tier_of(b), TFS_TIER_DISK);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DISK].written_bytes, 3 * MiB);
	uint64_t m1 = spill_mtime(1);

	CHECK(m1 != 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DEVICE, 0), 0);
	CHECK_EQ(tier_of(b), TFS_TIER_DEVICE);
	usleep(20000);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK_EQ(spill_mtime(1), m1); /* nothing was written again */
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DISK].written_bytes, 3 * MiB);
	CHECK(st.tier[TFS_TIER_DEVICE].written_bytes >= 3 * MiB);
	CHECK(verify(b, 7, 3 * MiB));
	/* Pinned: never moves. */
	CHECK_EQ(tier_buf_move(b, TFS_TIER_HOST, 0), 0);
	CHECK_EQ(tier_buf_pin(b), 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), -EBUSY);
	CHECK_EQ(tier_of(b), TFS_TIER_HOST);
	CHECK_EQ(tier_buf_unpin(b), 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

/* A read that is no access (O_NOATIME) leaves a spilled buffer on disk;
 * the same read as an access brings it up. */
static void test_read_noaccess(void)
{
	struct tier_store *s = mk_store("sim", 16 * MiB, 16 * MiB, 0);
	struct tier_buf *b = mk_file(s, 9, 2 * MiB);
	static uint8_t got[2 * MiB], want[2 * MiB];
	struct iovec iov[64];
	int niov;

	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	tier_buf_opened_as(b, TIER_READ_NOACCESS);
	CHECK_EQ(tier_buf_read_as(b, got, sizeof(got), 0, TIER_READ_NOACCESS),
		 (ssize_t)sizeof(got));
	fill(want, sizeof(want), 9, 0);
	CHECK(!memcmp(got, want, sizeof(got)));
	CHECK_EQ(tier_buf_read_iov_as(b, MiB, 0, iov, 64, &niov,
				      TIER_READ_NOACCESS),
		 -EAGAIN);
	CHECK_EQ(tier_of(b), TFS_TIER_DISK);
	CHECK(verify(b, 9, 2 * MiB)); /* reads as an access */
	CHECK(tier_of(b) != TFS_TIER_DISK);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

static void test_pinned_survives_pressure(void)
{
	struct tier_store *s = mk_store("none", 0, 4 * MiB, 0);
	struct tier_buf *p = mk_file(s, 100, MiB), *b[16];

	tier_buf_pin(p);
	for (int i = 0; i < 16; i++)
		b[i] = mk_file(s, i, MiB);
	CHECK_EQ(tier_of(p), TFS_TIER_HOST);
	CHECK(verify(p, 100, MiB));
	for (int i = 0; i < 16; i++) {
		CHECK(verify(b[i], i, MiB));
		tier_buf_destroy(b[i]);
	}
	tier_buf_destroy(p);
	tier_store_destroy(s);
}

static void test_enospc_keeps_data(void)
{
	struct tier_store *s = mk_store("none", 0, 2 * MiB, 6 * MiB);
	struct tier_buf *b[32];
	uint8_t *rnd = malloc(MiB);
	int n = 0, rc = 0;
	FILE *f = fopen("/dev/urandom", "r");

	while (n < 32) {
		CHECK(fread(rnd, 1, MiB, f) == MiB);
		CHECK_EQ(tier_buf_new(s, &b[n]), 0);
		rc = (int)tier_buf_write(b[n], rnd, MiB, 0);
		if (rc != (int)MiB)
			break;
		tier_buf_register(b[n]);
		n++;
	}
	fclose(f);
	CHECK(n < 32);
	CHECK(rc == -ENOSPC || (rc >= 0 && rc < (int)MiB));
	printf("# %d files of random data fit, then %d\n", n, rc);
	check_limits(s);
	/* Every earlier file still reads back in full. */
	for (int i = 0; i < n; i++) {
		ssize_t r = tier_buf_read(b[i], rnd, MiB, 0);

		CHECK_EQ(r, MiB);
		tier_buf_destroy(b[i]);
	}
	tier_buf_destroy(b[n]);
	free(rnd);
	tier_store_destroy(s);
}

/*
 * A scan that meets only pinned buffers is contention; a move the tier
 * below refuses is trouble. Neither loses a byte.
 */
static void test_evict_counters(void)
{
	struct tier_store *s = mk_store("none", 0, 4 * MiB, 0);
	struct tier_store_stats st;
	struct tier_buf *p[4], *n, *b[4];
	uint8_t *rnd = malloc(MiB);
	FILE *f = fopen("/dev/urandom", "r");
	int i, rc = 0;

	for (i = 0; i < 4; i++) {
		p[i] = mk_file(s, i, MiB);
		tier_buf_pin(p[i]);
	}
	/* Host is full of pinned buffers: the write goes on disk. */
	n = mk_file(s, 9, 2 * MiB);
	CHECK_EQ(tier_of(n), TFS_TIER_DISK);
	CHECK(verify(n, 9, 2 * MiB));
	tier_store_stats(s, &st);
	CHECK(st.evict_nothing_movable >= 1);
	CHECK_EQ(st.evict_move_errors, 0);
	for (i = 0; i < 4; i++) {
		CHECK(verify(p[i], i, MiB));
		tier_buf_destroy(p[i]);
	}
	tier_buf_destroy(n);
	tier_store_destroy(s);

	/* A disk tier that holds one random chunk: spilling the second
	 * buffer out of a full host is refused. */
	s = mk_store("none", 0, 2 * MiB, MiB + 4096);
	for (i = 0; i < 4; i++) {
		CHECK(fread(rnd, 1, MiB, f) == MiB);
		CHECK_EQ(tier_buf_new(s, &b[i]), 0);
		rc = (int)tier_buf_write(b[i], rnd, MiB, 0);
		tier_buf_register(b[i]);
		if (rc != (int)MiB)
			break;
	}
	CHECK(i < 4);
	tier_store_stats(s, &st);
	printf("# %d buffers written, then %d; %llu move errors\n", i, rc,
	       (unsigned long long)st.evict_move_errors);
	CHECK(st.evict_move_errors >= 1);
	/* The tier refused it; the file system failed nothing. */
	CHECK_EQ(st.spill_write_errors, 0);
	for (int k = 0; k <= i && k < 4; k++)
		tier_buf_destroy(b[k]);
	fclose(f);
	free(rnd);
	tier_store_destroy(s);
}

/*
 * Growing a small file by truncate needs a host chunk; with host full of
 * what cannot move, the file grows on disk instead of failing (the soak's
 * writer met ENOSPC from truncate(2) with a 1 GiB disk tier nearly empty).
 */
static void test_truncate_grow_host_full(void)
{
	struct tier_store *s = mk_store("none", 0, 4 * MiB, 0);
	struct tier_buf *p[4], *b;
	uint8_t *got = malloc(3 * MiB);
	bool zero = true;
	int i;

	/* A small file on host, then host filled with pinned files. */
	b = mk_file(s, 7, 100);
	tier_buf_pin(b);
	for (i = 0; i < 4; i++) {
		p[i] = mk_file(s, i, i < 3 ? MiB : 256 * 1024);
		tier_buf_pin(p[i]);
	}
	CHECK_EQ(tier_of(b), TFS_TIER_HOST);
	CHECK_EQ(tier_of(p[3]), TFS_TIER_HOST);
	CHECK_EQ(tier_buf_truncate(b, 3 * MiB - 7), 0);
	CHECK_EQ(tier_buf_size(b), 3 * MiB - 7);
	CHECK_EQ(tier_buf_read(b, got, 3 * MiB, 0), (ssize_t)(3 * MiB - 7));
	for (uint64_t k = 0; k < 100; k++)
		zero &= got[k] == pat(7, k);
	for (uint64_t k = 100; k < 3 * MiB - 7; k++)
		zero &= !got[k];
	CHECK(zero);
	check_limits(s);
	for (i = 0; i < 4; i++) {
		CHECK(verify(p[i], i, i < 3 ? MiB : 256 * 1024));
		tier_buf_destroy(p[i]);
	}
	tier_buf_destroy(b);
	free(got);
	tier_store_destroy(s);
}

static void test_larger_than_host(void)
{
	struct tier_store *s = mk_store("none", 0, 4 * MiB, 0);
	struct tier_buf *b = mk_file(s, 9, 40 * MiB + 123);

	CHECK_EQ(tier_of(b), TFS_TIER_DISK);
	check_limits(s);
	CHECK(verify(b, 9, 40 * MiB + 123));
	/* Overwrite in the middle, across a chunk boundary, on disk. */
	uint8_t patch[3000];

	memset(patch, 0xab, sizeof(patch));
	CHECK_EQ(tier_buf_write(b, patch, sizeof(patch), 5 * MiB - 1000),
		 sizeof(patch));
	uint8_t got[3000];

	CHECK_EQ(tier_buf_read(b, got, sizeof(got), 5 * MiB - 1000),
		 sizeof(got));
	CHECK(!memcmp(got, patch, sizeof(got)));
	CHECK_EQ(tier_buf_truncate(b, 10 * MiB + 5), 0);
	CHECK_EQ(tier_buf_size(b), 10 * MiB + 5);
	CHECK_EQ(tier_buf_read(b, got, 100, 10 * MiB), 5);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

struct worker {
	struct tier_store *s;
	int id;
	bool ok;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	w->ok = true;
	for (int round = 0; round < 6; round++) {
		int n = w->id * 100 + round;
		struct tier_buf *b = mk_file(w->s, n, 2 * MiB + 17);

		w->ok = w->ok && verify(b, n, 2 * MiB + 17);
		if (round % 2)
			tier_buf_move(b, TFS_TIER_DISK, 0);
		w->ok = w->ok && verify(b, n, 2 * MiB + 17);
		tier_buf_destroy(b);
	}
	return NULL;
}

static void test_concurrent_under_spilling(void)
{
	struct tier_store *s = mk_store("sim", 3 * MiB, 5 * MiB, 0);
	struct tier_buf *bg[8];
	pthread_t th[4];
	struct worker w[4];

	for (int i = 0; i < 8; i++)
		bg[i] = mk_file(s, 1000 + i, MiB);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .s = s, .id = i };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].ok);
	}
	for (int i = 0; i < 8; i++) {
		CHECK(verify(bg[i], 1000 + i, MiB));
		tier_buf_destroy(bg[i]);
	}
	check_limits(s);
	tier_store_destroy(s);
}

static void test_export_sim(void)
{
	struct tier_store *s = mk_store("sim", 8 * MiB, 8 * MiB, 0);
	struct tier_buf *b = mk_file(s, 3, MiB);
	struct tfs_ioc_export ex = { 0 };

	tier_buf_move(b, TFS_TIER_DISK, 0);
	CHECK_EQ(tier_buf_export(b, 42, getuid(), getgid(), getpid(),
				 -1, true, &ex), 0);
	CHECK_EQ(ex.handle_type, TFS_HANDLE_SHM);
	CHECK_EQ(ex.length, MiB);
	CHECK_EQ(tier_of(b), TFS_TIER_DEVICE);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), -EBUSY);
	CHECK_EQ(tier_buf_commit(b, 7), -EPERM);
	CHECK_EQ(tier_buf_commit(b, 42), 0);
	CHECK_EQ(tier_buf_unexport(b, 7, true), -ENOENT);
	CHECK_EQ(tier_buf_unexport(b, 42, true), 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK(verify(b, 3, MiB));
	tier_buf_destroy(b);

	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_alloc_device(b, 4096), 0);
	CHECK_EQ(tier_buf_alloc_device(b, 4096), -EEXIST);
	CHECK_EQ(tier_of(b), TFS_TIER_DEVICE);
	CHECK_EQ(tier_buf_size(b), 4096);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

/* What the inval callback was told, per cookie (cookies 1..4 here). */
static unsigned int inval_seen[5];
static pthread_mutex_t inval_lock = PTHREAD_MUTEX_INITIALIZER;

static void record_inval(void *ctx, uint64_t cookie, unsigned int what)
{
	CHECK(ctx == inval_seen);
	pthread_mutex_lock(&inval_lock);
	if (cookie < 5)
		inval_seen[cookie] |= what;
	pthread_mutex_unlock(&inval_lock);
}

static unsigned int inval_take(uint64_t cookie)
{
	pthread_mutex_lock(&inval_lock);
	unsigned int what = inval_seen[cookie];

	inval_seen[cookie] = 0;
	pthread_mutex_unlock(&inval_lock);
	return what;
}

static void test_inval_callback(void)
{
	struct tier_store *s = mk_store("sim", 4 * MiB, 4 * MiB, 0);
	struct tier_buf *b, *c, *none;
	struct tfs_ioc_export ex = { 0 };

	tier_store_set_inval(s, record_inval, inval_seen);
	b = mk_file(s, 1, MiB);
	tier_buf_set_cookie(b, 1);
	CHECK_EQ(tier_of(b), TFS_TIER_DEVICE);
	CHECK_EQ(inval_take(1), 0); /* no cookie yet when it was placed */

	/* Down to host: st_blocks changes, the bytes stay in memory. */
	CHECK_EQ(tier_buf_move(b, TFS_TIER_HOST, 0), 0);
	CHECK_EQ(inval_take(1), TIER_INVAL_ATTR);
	/* Down to disk: out of memory, so the kernel's pages must go. */
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK_EQ(inval_take(1), TIER_INVAL_ATTR | TIER_INVAL_GONE);
	/* Back up: no page is stale, only st_blocks. */
	CHECK(verify(b, 1, MiB));
	CHECK(!(inval_take(1) & ~TIER_INVAL_ATTR));
	CHECK(tier_buf_opened(b));

	/* Writes and truncates pass through the kernel's cache: nothing but
	 * the new tier (the truncate brings it down to host). */
	char x = 'x';
	CHECK_EQ(tier_buf_write(b, &x, 1, 5), 1);
	CHECK_EQ(tier_buf_truncate(b, MiB - 7), 0);
	CHECK_EQ(inval_take(1) & ~TIER_INVAL_ATTR, 0);
	CHECK(tier_buf_opened(b));

	/* A write export: every open drops the pages while it is held, and
	 * a commit changes the bytes behind them. */
	CHECK_EQ(tier_buf_export(b, 9, getuid(), getgid(), getpid(),
				 -1, true, &ex), 0);
	inval_take(1);
	CHECK(!tier_buf_opened(b));
	CHECK(!tier_buf_opened(b));
	CHECK_EQ(tier_buf_commit(b, 9), 0);
	CHECK(inval_take(1) & TIER_INVAL_DATA);
	CHECK_EQ(tier_buf_unexport(b, 9, true), 0);
	CHECK(inval_take(1) & TIER_INVAL_DATA);
	CHECK(!tier_buf_opened(b));
	CHECK(tier_buf_opened(b));
	/* A read-only export changes nothing. */
	CHECK_EQ(tier_buf_export(b, 10, getuid(), getgid(), getpid(),
				 -1, false, &ex), 0);
	CHECK(tier_buf_opened(b));
	CHECK_EQ(tier_buf_unexport(b, 10, true), 0);
	CHECK_EQ(inval_take(1) & TIER_INVAL_DATA, 0);
	CHECK(tier_buf_opened(b));

	/* An open whose answer was lost leaves the mark for the next. */
	CHECK_EQ(tier_buf_commit(b, 9), -EPERM);
	tier_buf_cache_stale(b);
	CHECK(!tier_buf_opened(b));
	CHECK(tier_buf_opened(b));

	/* A device allocation sizes the file behind the kernel's back. */
	CHECK_EQ(tier_buf_new(s, &c), 0);
	tier_buf_set_cookie(c, 2);
	CHECK_EQ(tier_buf_alloc_device(c, 8192), 0);
	CHECK(inval_take(2) & TIER_INVAL_DATA);
	CHECK(!tier_buf_opened(c));

	/* The spiller's evictions are reported too, and a buffer without a
	 * cookie never is. */
	none = mk_file(s, 3, MiB);
	inval_take(1);
	struct tier_buf *more[6];

	for (int i = 0; i < 6; i++) {
		more[i] = mk_file(s, 4 + i, MiB);
		tier_buf_set_cookie(more[i], 3 + (i & 1));
	}
	CHECK_EQ(tier_of(b), TFS_TIER_DISK);
	CHECK(inval_take(1) & TIER_INVAL_GONE);
	CHECK_EQ(inval_take(0), 0);
	for (int i = 0; i < 6; i++)
		tier_buf_destroy(more[i]);
	tier_buf_destroy(none);
	tier_buf_destroy(c);
	/* Destroying reports nothing: the inode is gone. */
	inval_take(1);
	tier_buf_destroy(b);
	CHECK_EQ(inval_take(1), 0);
	tier_store_destroy(s);
}

/* Two users neither of whom the store exempts (root and its own euid). */
static uid_t user_a(void)
{
	return geteuid() + 1000;
}

static uid_t user_b(void)
{
	return geteuid() + 1001;
}

/* The bytes of a sim export's object, through its name. */
static bool shm_holds(const struct tfs_ioc_export *ex, int n, uint64_t size)
{
	int fd = shm_open((const char *)ex->handle, O_RDONLY, 0);
	uint8_t *p, *want = malloc(size);
	bool ok = false;

	if (fd < 0 || !want)
		goto out;
	p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED) {
		fill(want, size, n, 0);
		ok = !memcmp(p, want, size);
		munmap(p, size);
	}
out:
	if (fd >= 0)
		close(fd);
	free(want);
	return ok;
}

/* A read export is a snapshot that holds nothing of the buffer; a write
 * export holds it, alone; user shares count both and pins. */
static void test_export_leases(void)
{
	struct tier_store *s = mk_store("sim", 8 * MiB, 8 * MiB, 0);
	struct tier_buf *b = mk_file(s, 5, MiB), *c = mk_file(s, 6, MiB);
	struct tfs_ioc_export r = { 0 }, w = { 0 };
	struct tier_store_stats st;
	uint64_t used;

	tier_store_stats(s, &st);
	used = st.tier[TFS_TIER_DEVICE].used;
	CHECK_EQ(tier_buf_export(b, 1, getuid(), getgid(), getpid(),
				 -1, false, &r), 0);
	CHECK(shm_holds(&r, 5, MiB));
	/* The snapshot's room is the device tier's. */
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, used + MiB);
	/* The owner writes, truncates and moves as if it were not there. */
	uint8_t junk[4096];

	memset(junk, 0x5a, sizeof(junk));
	CHECK_EQ(tier_buf_write(b, junk, sizeof(junk), 0), sizeof(junk));
	CHECK_EQ(tier_buf_truncate(b, MiB / 2), 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK(shm_holds(&r, 5, MiB));
	CHECK_EQ(tier_buf_export(b, 2, getuid(), getgid(), getpid(),
				 -1, true, &w), 0);
	CHECK(strcmp((char *)w.handle, (char *)r.handle) != 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), -EBUSY);
	CHECK_EQ(tier_buf_truncate(b, 10), -EBUSY);
	/* One writer: another open file's write export waits. */
	CHECK_EQ(tier_buf_export(b, 3, getuid(), getgid(), getpid(),
				 -1, true, &r), -EBUSY);
	CHECK_EQ(tier_buf_unexport(b, 2, true), 0);
	CHECK_EQ(tier_buf_unexport(b, 1, true), 0);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_DEVICE].used <= used);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);

	/* Share: 1.25 MiB a user; b is 512 KiB now, c 1 MiB. */
	struct tfs_config cfg;
	char err[256];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "sim");
	cfg.device.limit = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.host.limit = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.device.user_share = (struct cfg_size){ .bytes = 5 * MiB / 4 };
	CHECK_EQ(tier_store_reconfigure(s, &cfg, err, sizeof(err)), 0);
	cfg_free(&cfg);
	CHECK_EQ(tier_buf_move_as(c, TFS_TIER_DEVICE, 0, user_a()), 0);
	CHECK_EQ(tier_buf_pin_as(c, user_a()), 0);
	CHECK_EQ(tier_buf_move_as(b, TFS_TIER_DEVICE, 0, user_a()), -EDQUOT);
	CHECK_EQ(tier_buf_export(b, 4, user_a(), 1000, getpid(),
				 -1, false, &r), -EDQUOT);
	CHECK_EQ(tier_buf_export(b, 4, user_b(), 1001, getpid(), -1, false,
				 &r), 0);
	CHECK_EQ(tier_buf_move_as(b, TFS_TIER_DEVICE, 0, 0), 0);
	CHECK_EQ(tier_buf_unpin(c), 0);
	CHECK_EQ(tier_buf_export(b, 5, user_a(), 1000, getpid(), -1, false,
				 &w), 0);
	tier_buf_destroy(b);
	tier_buf_destroy(c);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, 0);
	tier_store_destroy(s);
}

/*
 * [host] user_share bounds what one user's pins hold in host memory too,
 * growth included; [device] user_exports bounds the live leases. The
 * other user keeps their own share, and root none.
 */
static void test_user_shares(void)
{
	struct tier_store *s = mk_store("sim", 8 * MiB, 8 * MiB, 0);
	struct tfs_ioc_export ex = { 0 };
	struct tfs_config cfg;
	uint8_t junk[4096];
	char err[256];
	struct tier_buf *f[4];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "sim");
	cfg.device.limit = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.host.limit = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.device.user_share = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.host.user_share = (struct cfg_size){ .bytes = 3 * MiB / 2 };
	cfg.device.user_exports = 2;
	CHECK_EQ(tier_store_reconfigure(s, &cfg, err, sizeof(err)), 0);
	cfg_free(&cfg);
	for (int i = 0; i < 4; i++) {
		f[i] = mk_file(s, 20 + i, MiB);
		CHECK_EQ(tier_buf_move(f[i], TFS_TIER_HOST, 0), 0);
	}
	/* Moved to host and pinned there: charged to the host share. */
	CHECK_EQ(tier_buf_pin_as(f[0], user_a()), 0);
	CHECK_EQ(tier_buf_pin_as(f[1], user_a()), -EDQUOT);
	CHECK_EQ(tier_buf_pin_as(f[1], user_b()), 0);
	CHECK_EQ(tier_buf_pin(f[2]), 0);
	CHECK_EQ(tier_buf_unpin(f[2]), 0);
	/* A pinned buffer grows within its pinner's share. */
	memset(junk, 0x11, sizeof(junk));
	CHECK_EQ(tier_buf_write(f[0], junk, sizeof(junk), 100 * 1024), 4096);
	ssize_t w = 0;

	for (int i = 0; i < 200 && w >= 0; i++)
		w = tier_buf_write(f[0], junk, sizeof(junk),
				   (off_t)(MiB + (uint64_t)i * 4096));
	CHECK_EQ(w, -EDQUOT);
	CHECK(tier_buf_size(f[0]) < 3 * MiB / 2 + 4096);
	/* Unpinned, it may grow again, and the share is back. */
	CHECK_EQ(tier_buf_unpin(f[0]), 0);
	CHECK_EQ(tier_buf_write(f[0], junk, sizeof(junk), 2 * MiB), 4096);
	CHECK_EQ(tier_buf_move(f[2], TFS_TIER_DISK, 0), 0);
	CHECK_EQ(tier_buf_pin_as(f[3], user_a()), 0);
	/* A move to host counts what the user holds there already. */
	CHECK_EQ(tier_buf_move_as(f[2], TFS_TIER_HOST, 0, user_a()), -EDQUOT);
	CHECK_EQ(tier_buf_move_as(f[2], TFS_TIER_HOST, 0, user_b()), -EDQUOT);
	CHECK_EQ(tier_buf_move_as(f[2], TFS_TIER_HOST, 0, 0), 0);
	CHECK_EQ(tier_buf_unpin(f[1]), 0);
	CHECK_EQ(tier_buf_unpin(f[3]), 0);

	/* Two live leases a user: the third gets EDQUOT, the other user's
	 * do not count, and ending one makes room. */
	CHECK_EQ(tier_buf_export(f[0], 1, user_a(), getgid(), getpid(), -1,
				 false, &ex), 0);
	CHECK_EQ(tier_buf_export(f[1], 2, user_a(), getgid(), getpid(), -1,
				 false, &ex), 0);
	CHECK_EQ(tier_buf_export(f[2], 3, user_a(), getgid(), getpid(), -1,
				 false, &ex), -EDQUOT);
	CHECK_EQ(tier_buf_export(f[2], 4, user_b(), getgid(), getpid(), -1,
				 false, &ex), 0);
	/* Exporting again through one file replaces its lease. */
	CHECK_EQ(tier_buf_export(f[1], 2, user_a(), getgid(), getpid(), -1,
				 false, &ex), 0);
	CHECK_EQ(tier_buf_unexport(f[0], 1, true), 0);
	CHECK_EQ(tier_buf_export(f[2], 3, user_a(), getgid(), getpid(), -1,
				 false, &ex), 0);
	for (int i = 0; i < 4; i++)
		tier_buf_destroy(f[i]);
	tier_store_destroy(s);
}

/*
 * A buffer pinned by a user whose device share it fills: an export
 * populates every page of its device copy first, which it holds already,
 * so root's export and the pinner's own commit charge that user nothing
 * more (populating reserved the whole range again and failed the export
 * with EDQUOT).
 */
static void test_pinned_full_share(void)
{
	struct tier_store *s = mk_store("sim", 8 * MiB, 8 * MiB, 0);
	struct tfs_ioc_export ex = { 0 };
	struct tfs_config cfg;
	struct tier_buf *b;
	char err[256];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "sim");
	cfg.device.limit = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.host.limit = (struct cfg_size){ .bytes = 8 * MiB };
	cfg.device.user_share = (struct cfg_size){ .bytes = MiB };
	cfg.host.user_share = (struct cfg_size){ .bytes = 0 };
	CHECK_EQ(tier_store_reconfigure(s, &cfg, err, sizeof(err)), 0);
	cfg_free(&cfg);
	b = mk_file(s, 40, MiB);
	CHECK_EQ(tier_of(b), TFS_TIER_DEVICE);
	CHECK_EQ(tier_buf_pin_as(b, user_a()), 0);
	CHECK_EQ(tier_buf_export(b, 1, 0, getgid(), getpid(), -1, false, &ex),
		 0);
	CHECK_EQ(tier_buf_unexport(b, 1, true), 0);
	CHECK_EQ(tier_buf_export(b, 2, 0, getgid(), getpid(), -1, true, &ex),
		 0);
	CHECK_EQ(tier_buf_commit(b, 2), 0);
	CHECK_EQ(tier_buf_unexport(b, 2, true), 0);
	CHECK_EQ(tier_buf_unpin(b), 0);
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

/*
 * A write lease broken by tier_buf_revoke(): the holder's object is
 * detached with what it wrote, its next commit or release hears ESTALE
 * once, and the buffer is free to truncate. The breaker's own leases
 * stay.
 */
static void test_revoke(void)
{
	struct tier_store *s = mk_store("sim", 8 * MiB, 8 * MiB, 0);
	struct tier_buf *b = mk_file(s, 30, MiB), *c = mk_file(s, 31, MiB);
	struct tfs_ioc_export w = { 0 }, r = { 0 };
	struct tier_buf_stat st;
	uint8_t got[16];
	int fd;

	CHECK_EQ(tier_buf_export(b, 1, user_a(), getgid(), getpid(), -1, true,
				 &w), 0);
	/* What the holder writes before the break is the file's. */
	fd = shm_open((const char *)w.handle, O_RDWR, 0);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "broken", 6, 0), 6);
	CHECK_EQ(tier_buf_revoke(b, user_a()), 0);
	CHECK_EQ(tier_buf_truncate(b, 10), -EBUSY);
	CHECK_EQ(tier_buf_revoke(b, user_b()), 1);
	CHECK_EQ(tier_buf_revoke(b, user_b()), 0);
	tier_buf_stat(b, &st);
	CHECK_EQ(st.leases, 0);
	CHECK_EQ(tier_buf_truncate(b, 10), 0);
	CHECK_EQ(tier_buf_read(b, got, sizeof(got), 0), 10);
	CHECK(!memcmp(got, "broken", 6));
	/* Written after: reaches nothing. */
	CHECK_EQ(pwrite(fd, "later!", 6, 0), 6);
	close(fd);
	CHECK_EQ(tier_buf_read(b, got, sizeof(got), 0), 10);
	CHECK(!memcmp(got, "broken", 6));
	CHECK_EQ(tier_buf_commit(b, 1), -ESTALE);
	CHECK_EQ(tier_buf_commit(b, 1), -EPERM);
	CHECK_EQ(tier_buf_unexport(b, 1, true), -ENOENT);
	/* Release hears it too; snapshots are never broken. */
	CHECK_EQ(tier_buf_export(c, 2, user_a(), getgid(), getpid(), -1, true,
				 &w), 0);
	CHECK_EQ(tier_buf_export(c, 3, user_b(), getgid(), getpid(), -1, false,
				 &r), 0);
	CHECK_EQ(tier_buf_revoke(c, TIER_REVOKE_ALL), 1);
	CHECK_EQ(tier_buf_export(c, 4, user_b(), getgid(), getpid(), -1, true,
				 &w), 0);
	CHECK_EQ(tier_buf_unexport(c, 2, true), -ESTALE);
	CHECK_EQ(tier_buf_unexport(c, 3, true), 0);
	CHECK_EQ(tier_buf_unexport(c, 4, true), 0);
	tier_buf_destroy(b);
	tier_buf_destroy(c);
	tier_store_destroy(s);
}

static void test_reconfigure_shrinks(void)
{
	struct tier_store *s = mk_store("none", 0, 16 * MiB, 0);
	struct tier_buf *b[10];
	struct tfs_config cfg;
	struct tier_store_stats st;
	char err[256] = "";

	for (int i = 0; i < 10; i++)
		b[i] = mk_file(s, i, MiB);
	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "none");
	cfg.host.limit = (struct cfg_size){ .bytes = 4 * MiB };
	CHECK_EQ(tier_store_reconfigure(s, &cfg, err, sizeof(err)), 0);
	cfg_free(&cfg);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_HOST].used <= 4 * MiB);
	CHECK_EQ(tier_of(b[0]), TFS_TIER_DISK);
	for (int i = 0; i < 10; i++) {
		CHECK(verify(b[i], i, MiB));
		tier_buf_destroy(b[i]);
	}
	tier_store_destroy(s);
}

static void test_stats_format(void)
{
	struct tier_store *s = mk_store("sim", 4 * MiB, 8 * MiB, 0);
	char small[8], big[4096];
	size_t need = tier_store_format_stats(s, small, sizeof(small));

	CHECK(need > sizeof(small));
	CHECK_EQ(tier_store_format_stats(s, big, sizeof(big)), need);
	CHECK(strstr(big, "backend=sim\n") != NULL);
	CHECK(strstr(big, "device.limit=4194304\n") != NULL);
	CHECK(strstr(big, "host.limit=8388608\n") != NULL);
	tier_store_destroy(s);
}

static void test_bad_backend(void)
{
	struct tfs_config cfg;
	struct tier_store *s = NULL;
	char err[256] = "";

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "cuda");
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	/* No GPU here: an explicit cuda backend must fail with a reason,
	 * auto must fall back to none. */
	int rc = tier_store_init(&s, &cfg, "unit", err, sizeof(err));

	if (rc == 0) {
		tier_store_destroy(s);
		tap_skip("test_bad_backend", "a CUDA device is usable here");
		cfg_free(&cfg);
		return;
	}
	CHECK(rc < 0);
	CHECK(err[0] != '\0');
	printf("# %s\n", err);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "auto");
	CHECK_EQ(tier_store_init(&s, &cfg, "unit", err, sizeof(err)), 0);
	struct tier_store_stats st;

	tier_store_stats(s, &st);
	CHECK(!strcmp(st.backend, "none"));
	tier_store_destroy(s);
	cfg_free(&cfg);
}

static void test_tier_names(void)
{
	static const struct {
		const char *s;
		int tier; /* -1: refused */
	} cases[] = {
		{ "device", TFS_TIER_DEVICE }, { "host", TFS_TIER_HOST },
		{ "disk", TFS_TIER_DISK },     { "DISK", TFS_TIER_DISK },
		{ "Host", TFS_TIER_HOST },     { "dEvIcE", TFS_TIER_DEVICE },
		{ "disk\n", TFS_TIER_DISK },   { "disks", -1 },
		{ "dis", -1 },		       { "", -1 },
		{ " disk", -1 },	       { "gpu", -1 },
	};
	enum tfs_tier t;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = tier_parse(cases[i].s, strlen(cases[i].s), &t);

		if (cases[i].tier < 0) {
			CHECK_EQ(rc, -EINVAL);
		} else {
			CHECK_EQ(rc, 0);
			CHECK_EQ(t, cases[i].tier);
		}
	}
}

/* A store (no device) whose chain has the [tiers] entries @specs
 * ("NAME=KIND:PATH[:LIMIT]", NULL-terminated) below a [disk] of @disk
 * bytes; NULL with the reason in @err and *@rc when init refuses. */
static struct tier_store *mk_xstore(uint64_t host, uint64_t disk,
				    const char *const *specs, int *rc,
				    char *err, size_t errlen)
{
	struct tfs_config cfg;
	struct tier_store *s = NULL;

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "none");
	cfg.host.limit = (struct cfg_size){ .bytes = host };
	cfg.disk.limit = (struct cfg_size){ .bytes = disk };
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	*rc = 0;
	for (; *specs && !*rc; specs++) {
		char name[32];
		const char *eq = strchr(*specs, '=');

		snprintf(name, sizeof(name), "%.*s", (int)(eq - *specs),
			 *specs);
		*rc = cfg_tier_set(&cfg, name, eq + 1, err, errlen);
	}
	if (!*rc)
		*rc = tier_store_init(&s, &cfg, "unit", err, errlen);
	cfg_free(&cfg);
	return s;
}

/* Incompressible bytes of file @n from @off (a multiple of 8): lz4 keeps
 * them at their size, so that limits in MiB mean MiB of files. */
static void rfill(uint8_t *p, size_t len, int n, uint64_t off)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t z = ((uint64_t)n << 40 | (off + i) / 8) +
			     0x9e3779b97f4a7c15ull;

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(p + i, &z, len - i < 8 ? len - i : 8);
	}
}

/* A file of @size bytes (a multiple of 8) of rfill(@n): 0 or -errno. */
static int rfile(struct tier_store *s, int n, uint64_t size,
		 struct tier_buf **out)
{
	uint8_t *p = malloc(size);
	ssize_t w;
	int rc;

	rfill(p, size, n, 0);
	rc = tier_buf_new(s, out);
	if (rc)
		goto out;
	w = tier_buf_write(*out, p, size, 0);
	rc = w == (ssize_t)size ? tier_buf_register(*out) :
				  w < 0 ? (int)w : -EIO;
	if (rc) {
		tier_buf_destroy(*out);
		*out = NULL;
	}
out:
	free(p);
	return rc;
}

static bool rverify(struct tier_buf *b, int n, uint64_t size)
{
	uint8_t *got = malloc(size), *want = malloc(size);
	bool ok = tier_buf_size(b) == size &&
		  tier_buf_read(b, got, size, 0) == (ssize_t)size;

	rfill(want, size, n, 0);
	ok = ok && !memcmp(got, want, size);
	free(got);
	free(want);
	return ok;
}

/* Files in the spill directories under @dir (tierfs.unit.*). */
static size_t spill_files_under(const char *dir)
{
	char pat_[PATH_MAX];
	glob_t g;
	size_t n = 0;

	snprintf(pat_, sizeof(pat_), "%s/tierfs*unit*/*", dir);
	if (!glob(pat_, 0, NULL, &g)) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			n += !strstr(g.gl_pathv[i], "lock");
		globfree(&g);
	}
	return n;
}

/*
 * A tier of [tiers] below [disk]: what does not fit the disk tier goes on
 * down into it (the coldest first), counted there, named disk:NAME; it
 * reads back whole, a read brings it up to host, an explicit move goes
 * into it and out of it, and the last tier full is ENOSPC with nothing
 * lost. A kind the store does not serve is refused by name.
 */
static void test_tiers_below_disk(void)
{
	char xdir[] = "/tmp/tierfs-unit-x.XXXXXX", spec[128], err[512];
	const char *specs[] = { spec, NULL };
	struct tier_store_stats st;
	struct tier_buf_stat bs;
	struct tier_buf *b[12];
	struct tier_store *s;
	char *txt;
	int rc, in_x = 0;

	CHECK(mkdtemp(xdir) != NULL);
	snprintf(spec, sizeof(spec), "nvme=disk:%s:64M", xdir);
	/* 2 MiB of host, 4 MiB of [disk]: some of 12 MiB goes below. */
	s = mk_xstore(2 * MiB, 4 * MiB, specs, &rc, err, sizeof(err));
	if (rc)
		printf("# %s\n", err);
	CHECK_EQ(rc, 0);
	if (!s)
		goto out_dir;
	tier_store_stats(s, &st);
	CHECK_EQ(st.ntiers, 4);
	CHECK(!strcmp(tier_store_tier_name(s, TFS_TIER_COUNT), "disk:nvme"));
	CHECK_EQ(st.tier[TFS_TIER_COUNT].limit, 64 * MiB);
	for (int i = 0; i < 12; i++)
		CHECK_EQ(rfile(s, i, 1 * MiB, &b[i]), 0);
	tier_store_stats(s, &st);
	for (int t = 0; t < (int)st.ntiers; t++)
		CHECK(st.tier[t].used <= st.tier[t].limit);
	CHECK(st.tier[TFS_TIER_COUNT].buffers > 0);
	CHECK(st.tier[TFS_TIER_COUNT].used > 0);
	CHECK(st.tier[TFS_TIER_COUNT].written_bytes > 0);
	CHECK(st.tier[TFS_TIER_DISK].spills > 0);
	CHECK(spill_files_under(xdir) > 0);
	for (int i = 0; i < 12; i++) {
		tier_buf_stat(b[i], &bs);
		if (bs.chain == TFS_TIER_COUNT) {
			/* Through the ioctl without TFS_STAT_CHAIN. */
			CHECK_EQ(bs.tier, TFS_TIER_DISK);
			in_x++;
		}
	}
	CHECK_EQ((uint64_t)in_x, st.tier[TFS_TIER_COUNT].buffers);
	/* The oldest went first: file 0 is down there. */
	tier_buf_stat(b[0], &bs);
	CHECK_EQ(bs.chain, TFS_TIER_COUNT);
	/* Every byte back; a read brings it up to host. */
	for (int i = 0; i < 12; i++)
		CHECK(rverify(b[i], i, 1 * MiB));
	tier_buf_stat(b[11], &bs);
	CHECK_EQ(bs.tier, TFS_TIER_HOST);
	/* Explicit moves: into the tier of [tiers], then to [disk]. */
	CHECK_EQ(tier_buf_move(b[11], (enum tfs_tier)TFS_TIER_COUNT, 0), 0);
	tier_buf_stat(b[11], &bs);
	CHECK_EQ(bs.chain, TFS_TIER_COUNT);
	CHECK(rverify(b[11], 11, 1 * MiB));
	CHECK_EQ(tier_buf_move(b[11], (enum tfs_tier)TFS_TIER_COUNT, 0), 0);
	CHECK_EQ(tier_buf_move(b[11], TFS_TIER_DISK, 0), 0);
	tier_buf_stat(b[11], &bs);
	CHECK_EQ(bs.chain, TFS_TIER_DISK);
	CHECK(rverify(b[11], 11, 1 * MiB));
	CHECK_EQ(tier_buf_move(b[11], (enum tfs_tier)(TFS_TIER_COUNT + 1), 0),
		 -ENXIO);
	CHECK_EQ(tier_store_tier_parse(s, "DISK:nvme\n", 10), TFS_TIER_COUNT);
	CHECK_EQ(tier_store_tier_parse(s, "disk:nvm", 8), -EINVAL);
	/* The chain and the new tier's keys in the stats. */
	txt = malloc(64 * 1024);
	tier_store_format_stats(s, txt, 64 * 1024);
	CHECK(strstr(txt, "\ntiers=device,host,disk,disk:nvme\n") != NULL);
	CHECK(strstr(txt, "\ndisk:nvme.used=") != NULL);
	CHECK(strstr(txt, "\ndisk:nvme.limit=67108864\n") != NULL);
	free(txt);
	for (int i = 0; i < 12; i++)
		tier_buf_destroy(b[i]);
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_COUNT].used, 0);
	CHECK_EQ(st.tier[TFS_TIER_COUNT].buffers, 0);
	CHECK_EQ(st.tier[TFS_TIER_DISK].buffers, 0);
	CHECK_EQ(spill_files_under(xdir), 0);
	tier_store_destroy(s);

	/* The last tier full: ENOSPC for the write that needs it, and
	 * what is stored stays readable. */
	snprintf(spec, sizeof(spec), "nvme=disk:%s:6M", xdir);
	s = mk_xstore(2 * MiB, 4 * MiB, specs, &rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (s) {
		int n = 0, last = 0;

		while (n < 12 && !(last = rfile(s, n, 1 * MiB, &b[n])))
			n++;
		CHECK_EQ(last, -ENOSPC);
		/* 2 MiB of host, 4 of [disk], 6 of nvme: about 11 fit. */
		CHECK(n >= 8);
		tier_store_stats(s, &st);
		CHECK(st.tier[TFS_TIER_COUNT].buffers > 0);
		for (int i = 0; i < n; i++) {
			CHECK(rverify(b[i], i, 1 * MiB));
			tier_buf_destroy(b[i]);
		}
		tier_store_destroy(s);
	}

	/* A kind not served: refused, by its name. */
	snprintf(spec, sizeof(spec), "far=shared:%s", xdir);
	s = mk_xstore(2 * MiB, 4 * MiB, specs, &rc, err, sizeof(err));
	CHECK(s == NULL);
	CHECK_EQ(rc, -EOPNOTSUPP);
	CHECK(strstr(err, "tiers_far: kind 'shared' is not served yet") != NULL);
out_dir:
	rmdir(xdir);
}

static struct tier_store *mk_pstore(uint64_t host, const char *name)
{
	struct tfs_config cfg;
	struct tier_store *s = NULL;
	char err[256];
	int rc;

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "none");
	cfg.host.limit = (struct cfg_size){ .bytes = host };
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	cfg.disk.persist = CFG_PERSIST_YES;
	snprintf(cfg.disk.name, sizeof(cfg.disk.name), "%s", name);
	rc = tier_store_init(&s, &cfg, "unit", err, sizeof(err));
	if (rc)
		printf("# store init: %s\n", err);
	cfg_free(&cfg);
	return s;
}

/* What the journal would record. */
struct recorded {
	uint64_t id, size;
	void *map;
	size_t len;
	int calls;
	int fail; /* make the record fail with this */
};

static int record(void *ctx, uint64_t id, uint64_t size, const void *map,
		  size_t len)
{
	struct recorded *r = ctx;

	r->calls++;
	if (r->fail)
		return r->fail;
	free(r->map);
	r->map = malloc(len);
	memcpy(r->map, map, len);
	r->len = len;
	r->id = id;
	r->size = size;
	return 0;
}

/* A buffer adopted from what was recorded, as a restart after a crash
 * would make it. */
static struct tier_buf *adopt_rec(struct tier_store *s,
				  const struct recorded *r)
{
	struct tier_adopt_note note;
	struct tier_buf *b = NULL;

	CHECK_EQ(tier_buf_adopt(s, r->id, r->size, r->map, r->len, 0, &note,
				&b), 0);
	CHECK_EQ(note.lost, 0);
	CHECK_EQ(note.mended, 0);
	return b;
}

static void overwrite(struct tier_buf *b, int n, uint64_t off, size_t len)
{
	uint8_t *p = malloc(len);

	fill(p, len, n, off);
	CHECK_EQ(tier_buf_write(b, p, len, (off_t)off), (ssize_t)len);
	free(p);
}

/* A file synced, then written: what was synced stays readable from its
 * spill file until the next sync; the next sync replaces it. */
static void test_sync_keeps_committed(void)
{
	struct tier_store *s = mk_pstore(64 * MiB, "sync");
	struct recorded r = { 0 }, r2 = { 0 };
	struct tier_buf *b, *a;
	uint8_t buf[4096];

	if (!s)
		return;
	CHECK(tier_store_persistent(s));
	CHECK(tier_store_dirfd(s) >= 0);
	b = mk_file(s, 1, 3 * MiB + 5);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
	CHECK_EQ(r.calls, 1);
	CHECK_EQ(r.size, 3 * MiB + 5);
	CHECK_EQ(r.id, tier_buf_id(b));
	/* Nothing changed: nothing to write or record. */
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 1);
	CHECK_EQ(r.calls, 1);

	/* Written after the sync (on host), then spilled again: the synced
	 * bytes are still what the recorded table reads. */
	overwrite(b, 2, MiB, 4096);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	overwrite(b, 2, 0, 100);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	a = adopt_rec(s, &r);
	if (a) {
		CHECK(verify(a, 1, 3 * MiB + 5));
		tier_buf_destroy(a);
	}
	/* A failed record leaves the old version committed. */
	r2.fail = -EIO;
	CHECK_EQ(tier_buf_sync(b, 0, record, &r2), -EIO);
	a = adopt_rec(s, &r);
	if (a) {
		CHECK(verify(a, 1, 3 * MiB + 5));
		tier_buf_destroy(a);
	}
	r2.fail = 0;
	CHECK_EQ(tier_buf_sync(b, 0, record, &r2), 0);
	a = adopt_rec(s, &r2);
	if (a) {
		CHECK_EQ(tier_buf_read(a, buf, 100, 0), 100);
		fill(buf + 200, 100, 2, 0);
		CHECK(!memcmp(buf, buf + 200, 100));
		CHECK_EQ(tier_buf_read(a, buf, 50, 200), 50);
		fill(buf + 200, 50, 1, 200);
		CHECK(!memcmp(buf, buf + 200, 50));
		tier_buf_destroy(a);
	}
	tier_buf_destroy(b);
	free(r.map);
	free(r2.map);
	tier_store_destroy(s);
}

/* A file larger than host, written in place on disk: only the chunks it
 * changes go to new slots; the committed ones stay. */
static void test_sync_large_in_place(void)
{
	struct tier_store *s = mk_pstore(8 * MiB, "large");
	struct recorded r = { 0 }, r2 = { 0 };
	struct tier_buf *b, *a;
	struct tier_buf_stat st;

	if (!s)
		return;
	b = mk_file(s, 3, 24 * MiB);
	tier_buf_stat(b, &st);
	CHECK_EQ(st.tier, TFS_TIER_DISK);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
	overwrite(b, 4, 5 * MiB + 10, 3000);
	overwrite(b, 4, 20 * MiB, MiB);
	CHECK_EQ(tier_buf_truncate(b, 22 * MiB), 0);
	a = adopt_rec(s, &r);
	if (a) {
		CHECK(verify(a, 3, 24 * MiB));
		tier_buf_destroy(a);
	}
	CHECK_EQ(tier_buf_sync(b, 0, record, &r2), 0);
	CHECK_EQ(r2.size, 22 * MiB);
	a = adopt_rec(s, &r2);
	if (a) {
		uint8_t got[3000], want[3000];

		CHECK_EQ(tier_buf_read(a, got, 3000, 5 * MiB + 10), 3000);
		fill(want, 3000, 4, 5 * MiB + 10);
		CHECK(!memcmp(got, want, 3000));
		CHECK_EQ(tier_buf_read(a, got, 3000, 6 * MiB), 3000);
		fill(want, 3000, 3, 6 * MiB);
		CHECK(!memcmp(got, want, 3000));
		tier_buf_destroy(a);
	}
	/* The disk tier is charged each slot once: 22 chunks and a bit. */
	tier_buf_stat(b, &st);
	CHECK(st.stored_size < 23 * MiB);
	tier_buf_destroy(b);
	free(r.map);
	free(r2.map);
	tier_store_destroy(s);
}

static bool spill_file_exists(struct tier_store *s, uint64_t id)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%llu", tier_store_dir(s),
		 (unsigned long long)id);
	return !stat(path, &st);
}

/* A destroyed buffer's committed file waits among the graves; keeping
 * files at the end leaves them all. */
static void test_graves_and_keep(void)
{
	struct tier_store *s = mk_pstore(64 * MiB, "graves");
	struct recorded r = { 0 };
	struct tier_buf *b, *c;
	uint64_t id, idc, *ids;
	size_t n;
	void *g;

	if (!s)
		return;
	b = mk_file(s, 5, MiB);
	id = tier_buf_id(b);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
	tier_buf_destroy(b);
	CHECK(spill_file_exists(s, id));
	g = tier_store_graves_take(s);
	CHECK(g != NULL);
	CHECK(tier_store_graves_take(s) == NULL);
	CHECK(spill_file_exists(s, id));
	tier_store_graves_bury(s, g);
	CHECK(!spill_file_exists(s, id));

	/* Deferred syncs: recorded, committed later. */
	b = mk_file(s, 6, 2 * MiB);
	c = mk_file(s, 7, 100);
	id = tier_buf_id(b);
	idc = tier_buf_id(c);
	CHECK_EQ(tier_buf_sync(b, TIER_SYNC_DEFER, record, &r), 0);
	CHECK_EQ(tier_buf_sync_commit(b), 0);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 1);
	CHECK_EQ(tier_store_spill_ids(s, &ids, &n), 0);
	CHECK(n == 1 && ids[0] == id);
	free(ids);
	tier_store_keep_files(s);
	tier_buf_destroy(b);
	tier_buf_destroy(c); /* never synced: its file is no version */
	CHECK(tier_store_graves_take(s) == NULL);
	CHECK(spill_file_exists(s, id));
	CHECK(!spill_file_exists(s, idc));
	CHECK(tier_store_next_id(s) > idc);
	tier_store_destroy(s);

	/* The directory stays for the next mount; the ids go on from
	 * there. */
	s = mk_pstore(64 * MiB, "graves");
	if (!s)
		return;
	CHECK(spill_file_exists(s, id));
	b = adopt_rec(s, &r);
	if (b) {
		CHECK(verify(b, 6, 2 * MiB));
		CHECK(tier_store_next_id(s) > id);
		tier_store_keep_files(s);
		tier_buf_destroy(b);
	}
	tier_store_spill_remove(s, id);
	CHECK(!spill_file_exists(s, id));
	free(r.map);
	tier_store_destroy(s);
}

/* tier_store_init() with @cfg; 0 or -errno, the message in @err. */
static int try_init(struct tfs_config *cfg, char *err, size_t errlen)
{
	struct tier_store *s = NULL;
	int rc;

	free(cfg->disk.path);
	cfg->disk.path = strdup(spill_dir);
	err[0] = '\0';
	rc = tier_store_init(&s, cfg, "unit", err, errlen);
	if (!rc)
		tier_store_destroy(s);
	return rc;
}

/* Limits above what the machine has are refused with what it has, unless
 * policy.overcommit; the defaults stay within it. */
static void test_limits(void)
{
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) *
		       (uint64_t)sysconf(_SC_PAGESIZE);
	struct tier_store_stats st;
	struct tfs_config cfg;
	struct statvfs sv;
	struct tier_store *s;
	char err[512];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "none");
	cfg.host.limit = (struct cfg_size){ .bytes = ram + (1ull << 30) };
	CHECK_EQ(try_init(&cfg, err, sizeof(err)), -EINVAL);
	printf("# %s\n", err);
	CHECK(strstr(err, "host_limit: ") && strstr(err, "of RAM") &&
	      strstr(err, "policy_overcommit=yes"));
	cfg.policy.overcommit = true;
	CHECK_EQ(try_init(&cfg, err, sizeof(err)), 0);
	cfg.policy.overcommit = false;

	/* The sim device is host memory. */
	cfg.host.limit = (struct cfg_size){ .bytes = 8 * MiB };
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "sim");
	cfg.device.limit = (struct cfg_size){ .bytes = 4 * ram };
	CHECK_EQ(try_init(&cfg, err, sizeof(err)), -EINVAL);
	printf("# %s\n", err);
	CHECK(strstr(err, "device_limit: ") && strstr(err, "sim device"));
	cfg.device.limit = (struct cfg_size){ .bytes = 4 * MiB };

	/* Disk: no more than is free. */
	CHECK_EQ(statvfs(spill_dir, &sv), 0);
	cfg.disk.limit = (struct cfg_size){
		.bytes = (uint64_t)sv.f_bavail * sv.f_frsize * 2 + (1ull << 30)
	};
	CHECK_EQ(try_init(&cfg, err, sizeof(err)), -EINVAL);
	printf("# %s\n", err);
	CHECK(strstr(err, "disk_limit: ") && strstr(err, " free on '"));
	cfg.disk.limit = (struct cfg_size){ .is_percent = true,
					    .percent = 100 };
	if ((uint64_t)sv.f_bavail < (uint64_t)sv.f_blocks * 95 / 100)
		CHECK_EQ(try_init(&cfg, err, sizeof(err)), -EINVAL);

	/* Defaults: a quarter of RAM at most, half the filesystem at most
	 * and never more than is free. */
	cfg.disk.limit = (struct cfg_size){ 0 };
	cfg.host.limit = (struct cfg_size){ 0 };
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	CHECK_EQ(tier_store_init(&s, &cfg, "unit", err, sizeof(err)), 0);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_HOST].limit > 0 &&
	      st.tier[TFS_TIER_HOST].limit <= ram / 4);
	CHECK(st.tier[TFS_TIER_DISK].limit <=
	      (uint64_t)sv.f_blocks * sv.f_frsize / 2);
	CHECK(st.tier[TFS_TIER_DISK].limit <=
	      (uint64_t)sv.f_bavail * sv.f_frsize);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].limit, 4 * MiB);

	/* A reload asking too much changes nothing. */
	cfg.host.limit = (struct cfg_size){ .bytes = 2 * ram };
	CHECK_EQ(tier_store_reconfigure(s, &cfg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "host_limit: ") != NULL);
	tier_store_stats(s, &st);
	CHECK(st.tier[TFS_TIER_HOST].limit <= ram / 4);
	tier_store_destroy(s);
	cfg_free(&cfg);
}

#define PG 4096ull

static uint64_t stored(struct tier_buf *b)
{
	struct tier_buf_stat st;

	tier_buf_stat(b, &st);
	return st.stored_size;
}

static uint64_t used(struct tier_store *s, int t)
{
	struct tier_store_stats st;

	tier_store_stats(s, &st);
	return st.tier[t].used;
}

/* SEEK_DATA and SEEK_HOLE of @b at @off as @want_data / @want_hole say. */
static bool seeks(struct tier_buf *b, uint64_t off, int64_t want_data,
		  int64_t want_hole)
{
	int64_t d = tier_buf_seek(b, off, false), h = tier_buf_seek(b, off,
								  true);

	if (d == want_data && h == want_hole)
		return true;
	printf("# seek at %llu: data %lld (want %lld), hole %lld (want %lld)\n",
	       (unsigned long long)off, (long long)d, (long long)want_data,
	       (long long)h, (long long)want_hole);
	return false;
}

/*
 * Holes at page granularity in every tier: 50 KB written at 1.6 MB costs
 * its pages, not the chunk, and SEEK_DATA/SEEK_HOLE answer exactly
 * wherever the buffer is.
 */
static void test_page_holes_and_seek(void)
{
	struct tier_store *s = mk_store("sim", 8 * MiB, 16 * MiB, 0);
	const uint64_t at = 1600000, n = 50000, size = at + n;
	const uint64_t first = at / PG * PG;
	static uint8_t data[50000], got[50000 + 8192];
	struct tier_buf *b;

	CHECK(s != NULL);
	if (!s)
		return;
	fill(data, sizeof(data), 3, at);
	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_write(b, data, n, (off_t)at), (ssize_t)n);
	/* 13 pages, as tmpfs takes: not the 1 MiB chunk, not the hole */
	CHECK(stored(b) >= n && stored(b) <= 14 * PG);
	CHECK_EQ(tier_buf_register(b), 0);
	for (int t = TFS_TIER_HOST; t >= TFS_TIER_DEVICE;
	     t = t == TFS_TIER_HOST ? TFS_TIER_DISK :
		 t == TFS_TIER_DISK ? TFS_TIER_DEVICE : -1) {
		CHECK_EQ(tier_buf_move(b, (enum tfs_tier)t, 0), 0);
		printf("# tier %d: stored %llu\n", t,
		       (unsigned long long)stored(b));
		/* on the device too: the sim copy is sparse */
		CHECK(stored(b) <= 14 * PG + 256);
		if (t == TFS_TIER_DEVICE)
			CHECK_EQ(used(s, TFS_TIER_DEVICE), stored(b));
		CHECK(seeks(b, 0, (int64_t)first, 0));
		CHECK(seeks(b, first + 1, (int64_t)first + 1, (int64_t)size));
		CHECK(seeks(b, size - 1, (int64_t)size - 1, (int64_t)size));
		CHECK(seeks(b, size, -ENXIO, -ENXIO));
		memset(got, 0xee, sizeof(got));
		CHECK_EQ(tier_buf_read(b, got, sizeof(got), (off_t)(at - 8192)),
			 (ssize_t)(n + 8192));
		CHECK(!memcmp(got + 8192, data, n));
		CHECK(got[0] == 0 && got[8191] == 0);
	}

	/* A second extent in the first page. */
	CHECK_EQ(tier_buf_write(b, "tierfs", 6, 100), 6);
	CHECK(seeks(b, 0, 0, (int64_t)PG));
	CHECK(seeks(b, PG, (int64_t)first, (int64_t)PG));

	/* fallocate: pages taken read as zeroes and stay holes to
	 * SEEK_DATA; KEEP_SIZE leaves the size. */
	uint64_t before = used(s, TFS_TIER_HOST);

	CHECK_EQ(tier_buf_fallocate(b, 0, 2 * PG, 2 * PG), 0);
	CHECK(seeks(b, PG, (int64_t)first, (int64_t)PG));
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_KEEP_SIZE, size, MiB), 0);
	CHECK_EQ(tier_buf_size(b), size);
	CHECK(used(s, TFS_TIER_HOST) >= before + MiB);
	CHECK(seeks(b, size, -ENXIO, -ENXIO));
	/* Without KEEP_SIZE the size grows. Pages taken a second time are
	 * data (zeroes), as tmpfs clears them then; new ones holes. */
	CHECK_EQ(tier_buf_fallocate(b, 0, size, 8192), 0);
	CHECK_EQ(tier_buf_size(b), size + 8192);
	CHECK(seeks(b, size, (int64_t)size, (int64_t)size + 8192));
	CHECK(seeks(b, size + 4000, (int64_t)size + 4000, (int64_t)size + 8192));
	CHECK_EQ(tier_buf_fallocate(b, 0, size + 2 * MiB, PG), 0);
	CHECK(seeks(b, size + 2 * MiB, -ENXIO, (int64_t)(size + 2 * MiB)));
	CHECK_EQ(tier_buf_truncate(b, size), 0);

	/* PUNCH_HOLE: whole pages go from every tier, partial ones read
	 * zero; without KEEP_SIZE it is refused. */
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE, first, PG),
		 -EOPNOTSUPP);
	/* fetched from disk: packed as a placed file is */
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_HOST, 0), 0);
	before = stored(b);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
					       TIER_FALLOC_KEEP_SIZE,
				    first, 3 * PG),
		 0);
	printf("# punch of 3 pages: stored %llu -> %llu\n",
	       (unsigned long long)before, (unsigned long long)stored(b));
	CHECK(stored(b) + 3 * PG <= before + 64 &&
	      stored(b) + 3 * PG + 64 >= before);
	CHECK(seeks(b, PG, (int64_t)first + 3 * PG, (int64_t)PG));
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
					       TIER_FALLOC_KEEP_SIZE,
				    at + 20000, 100),
		 0);
	memset(data, 0, first + 3 * PG - at);
	memset(data + 20000, 0, 100);
	for (int t = TFS_TIER_DISK; t >= TFS_TIER_DEVICE; t--) {
		CHECK_EQ(tier_buf_move(b, (enum tfs_tier)t, 0), 0);
		if (t == TFS_TIER_DISK)
			CHECK(stored(b) <= 12 * PG + 256);
		CHECK(seeks(b, PG, (int64_t)first + 3 * PG, (int64_t)PG));
		memset(got, 0xee, sizeof(got));
		CHECK_EQ(tier_buf_read(b, got, n, (off_t)at), (ssize_t)n);
		CHECK(!memcmp(got, data, n));
	}
	/* punched on disk, in place */
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	before = stored(b);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
					       TIER_FALLOC_KEEP_SIZE,
				    0, (size + PG - 1) / PG * PG),
		 0);
	CHECK(seeks(b, 0, -ENXIO, 0));
	CHECK(used(s, TFS_TIER_HOST) + used(s, TFS_TIER_DISK) +
		      used(s, TFS_TIER_DEVICE) <= 256);
	tier_buf_destroy(b);
	CHECK_EQ(used(s, TFS_TIER_HOST) + used(s, TFS_TIER_DISK) +
			 used(s, TFS_TIER_DEVICE),
		 0);
	tier_store_destroy(s);
}

/* fallocate past what the tiers hold: ENOSPC, nothing reserved. */
static void test_fallocate_enospc(void)
{
	struct tier_store *s = mk_store("none", 0, 8 * MiB, 16 * MiB);
	struct tier_buf *b = s ? mk_file(s, 5, 3 * MiB) : NULL;
	uint64_t h, d;

	CHECK(b != NULL);
	if (!b)
		goto out;
	h = used(s, TFS_TIER_HOST);
	d = used(s, TFS_TIER_DISK);
	CHECK_EQ(tier_buf_fallocate(b, 0, MiB, 64 * MiB), -ENOSPC);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_KEEP_SIZE, 0, 64 * MiB),
		 -ENOSPC);
	CHECK_EQ(tier_buf_size(b), 3 * MiB);
	CHECK_EQ(tier_of(b), TFS_TIER_HOST);
	CHECK_EQ(used(s, TFS_TIER_HOST), h);
	CHECK_EQ(used(s, TFS_TIER_DISK), d);
	CHECK(verify(b, 5, 3 * MiB));
	/* what fits is taken, and charged */
	CHECK_EQ(tier_buf_fallocate(b, 0, 3 * MiB, 2 * MiB), 0);
	CHECK_EQ(tier_buf_size(b), 5 * MiB);
	CHECK(used(s, TFS_TIER_HOST) + used(s, TFS_TIER_DISK) >= h + d + 2 * MiB);
	check_limits(s);
	tier_buf_destroy(b);
out:
	tier_store_destroy(s);
}

/*
 * A punch never needs room (issue 31): it answered ENOSPC when the host
 * copy it repacked came out larger than the one it replaced, a chunk of
 * pages fallocate took packing to 1 MiB and a page of malloc, a file's
 * tail grown in place rounding up to whole pages once the file went past
 * it.
 */
static void test_punch_needs_no_room(void)
{
	struct tier_store *s = mk_store("none", 0, 2 * MiB, 0);
	struct tier_buf *b = NULL;
	uint8_t got[300], zero[300] = { 0 };
	uint64_t before;

	CHECK(s != NULL);
	if (!s)
		return;
	/* The host tier full of the file's own chunks, nothing to evict. */
	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_KEEP_SIZE, 0, 2 * MiB), 0);
	CHECK_EQ(used(s, TFS_TIER_HOST), 2 * MiB);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
					       TIER_FALLOC_KEEP_SIZE,
				    100, 100),
		 0);
	CHECK(used(s, TFS_TIER_HOST) <= 2 * MiB);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
					       TIER_FALLOC_KEEP_SIZE,
				    MiB + 5000, 3 * PG),
		 0);
	/* two pages less, in a block malloc takes a page more for */
	CHECK(used(s, TFS_TIER_HOST) <= 2 * MiB - PG);
	tier_buf_destroy(b);

	/* A tail grown in place (5000 bytes of room), then the file grown
	 * past it: the punch keeps what the chunk holds in what it has. */
	b = mk_file(s, 9, MiB + 5000);
	CHECK(b != NULL);
	if (!b)
		goto out;
	CHECK_EQ(tier_buf_truncate(b, 3 * MiB), 0);
	before = used(s, TFS_TIER_HOST);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
					       TIER_FALLOC_KEEP_SIZE,
				    MiB + 100, 100),
		 0);
	printf("# punch in a tail grown in place: host %llu -> %llu\n",
	       (unsigned long long)before,
	       (unsigned long long)used(s, TFS_TIER_HOST));
	CHECK(used(s, TFS_TIER_HOST) <= before);
	CHECK_EQ(tier_buf_read(b, got, sizeof(got), MiB + 50), 300);
	{
		uint8_t want[300];

		fill(want, sizeof(want), 9, MiB + 50);
		memset(want + 50, 0, 100);
		CHECK(!memcmp(got, want, sizeof(want)));
	}
	CHECK_EQ(tier_buf_read(b, got, sizeof(got), MiB + 5000), 300);
	CHECK(!memcmp(got, zero, sizeof(got)));
	check_limits(s);
	tier_buf_destroy(b);
out:
	tier_store_destroy(s);
}

/* Whether [off, off + len) of @b is file @n's bytes there. */
static bool same_bytes(struct tier_buf *b, int n, uint64_t off, size_t len)
{
	uint8_t *got = malloc(len), *want = malloc(len);
	bool ok = tier_buf_read(b, got, len, (off_t)off) == (ssize_t)len;

	fill(want, len, n, off);
	ok = ok && !memcmp(got, want, len);
	free(got);
	free(want);
	return ok;
}

/* The disk tier's chunk table alone of an image: what a tierfs before
 * issue 31 recorded. */
static size_t table_len(const struct recorded *r)
{
	uint32_t n;

	memcpy(&n, r->map, 4);
	return 4 + (size_t)le32toh(n) * 12;
}

/*
 * Every shape a file can have comes back from its image as it was synced
 * (issue 31): pages fallocate kept past the end, an empty file with pages,
 * holes inside chunks, punched pages, a size past the last chunk; from
 * the host and from the disk tier. An image of an earlier tierfs (the
 * table alone) still adopts, pages past the end taken as fallocate's.
 */
static void test_adopt_shapes(void)
{
	struct tier_store *s = mk_pstore(64 * MiB, "shapes");
	struct tier_adopt_note note;
	struct tier_buf *b, *a;
	struct recorded r = { 0 };
	uint8_t got[4 * 4096], want[4 * 4096];

	if (!s)
		return;
	for (int t = TFS_TIER_HOST; t <= TFS_TIER_DISK; t++) {
		/* 300,000 bytes, then 1 MiB past them kept (two chunks) */
		b = mk_file(s, 11, 300000);
		CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_KEEP_SIZE, 300000,
					    MiB),
			 0);
		/* a punched page, a part of one */
		CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
						       TIER_FALLOC_KEEP_SIZE,
					    8 * PG, PG),
			 0);
		CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_PUNCH_HOLE |
						       TIER_FALLOC_KEEP_SIZE,
					    100, 50),
			 0);
		CHECK_EQ(tier_buf_move(b, (enum tfs_tier)t, 0), 0);
		CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
		a = adopt_rec(s, &r);
		if (a) {
			CHECK_EQ(tier_buf_size(a), 300000);
			CHECK(seeks(a, 0, 0, 8 * PG));
			CHECK(seeks(a, 8 * PG, 9 * PG, 8 * PG));
			CHECK(seeks(a, 299999, 299999, 300000));
			CHECK_EQ(tier_buf_read(a, got, sizeof(got), 6 * PG),
				 (ssize_t)sizeof(got));
			fill(want, sizeof(want), 11, 6 * PG);
			memset(want + 2 * PG, 0, PG);
			CHECK(!memcmp(got, want, sizeof(want)));
			/* the room fallocate took is on disk */
			CHECK(stored(a) >= MiB);
			/* and the pages past the end are still allocated
			 * there: truncated up over them, they are holes
			 * that read zero, as on tmpfs */
			CHECK_EQ(tier_buf_truncate(a, 600000), 0);
			CHECK(seeks(a, 299999, 299999, 303104));
			CHECK(seeks(a, 303104, -ENXIO, 303104));
			tier_buf_destroy(a);
		}
		/* The table alone, as an earlier tierfs recorded it. */
		CHECK_EQ(tier_buf_adopt(s, r.id, r.size, r.map, table_len(&r),
					0, &note, &a),
			 0);
		CHECK_EQ(note.lost + note.mended, 0);
		if (a) {
			CHECK(same_bytes(a, 11, 0, 100));
			CHECK(same_bytes(a, 11, 150, 8 * PG - 150));
			CHECK(stored(a) >= MiB);
			tier_buf_destroy(a);
		}
		tier_buf_destroy(b);
	}
	/* An empty file with 64 KiB kept, and a size past the last
	 * chunk. */
	CHECK_EQ(tier_buf_new(s, &b), 0);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_KEEP_SIZE, 0, 64 * 1024), 0);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
	a = adopt_rec(s, &r);
	if (a) {
		CHECK_EQ(tier_buf_size(a), 0);
		CHECK(stored(a) >= 64 * 1024);
		CHECK_EQ(tier_buf_truncate(a, 70000), 0);
		CHECK(seeks(a, 0, -ENXIO, 0));
		tier_buf_destroy(a);
	}
	tier_buf_destroy(b);
	b = mk_file(s, 12, 5000);
	CHECK_EQ(tier_buf_truncate(b, 10 * MiB + 3), 0);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
	a = adopt_rec(s, &r);
	if (a) {
		CHECK_EQ(tier_buf_size(a), 10 * MiB + 3);
		CHECK(same_bytes(a, 12, 0, 5000));
		CHECK(seeks(a, 0, 0, 2 * PG));
		CHECK(seeks(a, 2 * PG, -ENXIO, 2 * PG));
		tier_buf_destroy(a);
	}
	tier_buf_destroy(b);
	free(r.map);
	tier_store_destroy(s);
}

/* Flip one byte of @path at @off. */
static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t c = 0;

	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, &c, 1, off), 1);
	c ^= 0x40;
	CHECK_EQ(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

/*
 * An image that disagrees with itself without losing a byte is mended;
 * one that would lose bytes is refused, and salvaged on request: every
 * chunk that reads back is kept, the others are holes, each said.
 */
static void test_adopt_salvage(void)
{
	struct tier_store *s = mk_pstore(64 * MiB, "salvage");
	struct tier_adopt_note note;
	struct recorded r = { 0 };
	struct tier_buf *b, *a = NULL;
	uint8_t got[4096], want[4096];
	char path[512];
	uint32_t e[3];
	char *m;

	if (!s)
		return;
	b = mk_file(s, 13, 4 * MiB);
	CHECK_EQ(tier_buf_fallocate(b, TIER_FALLOC_KEEP_SIZE, 4 * MiB, MiB),
		 0);
	CHECK_EQ(tier_buf_move(b, TFS_TIER_DISK, 0), 0);
	CHECK_EQ(tier_buf_sync(b, 0, record, &r), 0);
	m = malloc(r.len);
	memcpy(m, r.map, r.len);

	/* The page section damaged: every byte kept, the allocation past
	 * the end rebuilt from the table. */
	m[table_len(&r)] ^= 1;
	CHECK_EQ(tier_buf_adopt(s, r.id, r.size, m, r.len, 0, &note, &a), 0);
	printf("# mended: %s\n", note.text);
	CHECK_EQ(note.lost, 0);
	CHECK(note.mended >= 1);
	CHECK(strstr(note.text, "page maps are damaged") != NULL);
	if (a) {
		CHECK(verify(a, 13, 4 * MiB));
		CHECK(stored(a) >= 5 * MiB);
		tier_buf_destroy(a);
	}
	memcpy(m, r.map, r.len);
	/* A page map for a chunk the table lacks, none for one it has. */
	m[table_len(&r) + 13] ^= 1;
	CHECK_EQ(tier_buf_adopt(s, r.id, r.size, m, r.len, 0, &note, &a), 0);
	printf("# mended: %s\n", note.text);
	CHECK_EQ(note.lost, 0);
	CHECK(strstr(note.text, "chunk 4: its page map is lost") != NULL);
	CHECK(strstr(note.text, "chunk 260: the chunk table lacks the pages "
			       "fallocate took") != NULL);
	if (a) {
		CHECK(verify(a, 13, 4 * MiB));
		tier_buf_destroy(a);
	}
	memcpy(m, r.map, r.len);

	/* Chunk 2's entry says no chunk there can be: refused, then
	 * salvaged with chunk 2 a hole. */
	memcpy(e, m + 4 + 2 * 12, sizeof(e));
	CHECK_EQ(le32toh(e[0]), 2);
	e[2] = htole32(1); /* no encoding */
	memcpy(m + 4 + 2 * 12, e, sizeof(e));
	CHECK_EQ(tier_buf_adopt(s, r.id, r.size, m, r.len, 0, &note, &a),
		 -EINVAL);
	CHECK_EQ(tier_buf_adopt(s, r.id, r.size, m, r.len, TIER_ADOPT_SALVAGE,
				&note, &a),
		 0);
	printf("# salvaged: %s\n", note.text);
	CHECK_EQ(note.lost, 1);
	CHECK(strstr(note.text, "chunk 2: its entry in the chunk table") !=
	      NULL);
	if (a) {
		CHECK_EQ(tier_buf_size(a), 4 * MiB);
		CHECK(same_bytes(a, 13, 0, 2 * MiB));
		CHECK_EQ(tier_buf_read(a, got, sizeof(got), 2 * MiB + 100),
			 (ssize_t)sizeof(got));
		memset(want, 0, sizeof(want));
		CHECK(!memcmp(got, want, sizeof(want)));
		CHECK_EQ(tier_buf_read(a, got, sizeof(got), 3 * MiB),
			 (ssize_t)sizeof(got));
		fill(want, sizeof(want), 13, 3 * MiB);
		CHECK(!memcmp(got, want, sizeof(want)));
		tier_buf_destroy(a);
	}
	memcpy(m, r.map, r.len);

	/* Chunk 1's bytes damaged on disk: the table checks out, so a
	 * plain adopt keeps it (a read of it is EIO); a salvage reads
	 * every chunk and leaves that one out. And two chunks in one
	 * slot: the one whose header names it keeps it. */
	snprintf(path, sizeof(path), "%s/%llu", tier_store_dir(s),
		 (unsigned long long)r.id);
	flip_byte(path, (off_t)(MiB + 4096) + 200);
	memcpy(e, m + 4 + 3 * 12, sizeof(e));
	CHECK_EQ(le32toh(e[0]), 3);
	e[1] = htole32(0); /* chunk 3 says it is in chunk 0's slot */
	memcpy(m + 4 + 3 * 12, e, sizeof(e));
	CHECK_EQ(tier_buf_adopt(s, r.id, r.size, m, r.len, 0, &note, &a),
		 -EINVAL);
	CHECK_EQ(tier_buf_adopt(s, r.id, r.size, m, r.len, TIER_ADOPT_SALVAGE,
				&note, &a),
		 0);
	printf("# salvaged: %s\n", note.text);
	CHECK_EQ(note.lost, 2);
	CHECK(strstr(note.text, "chunk 1: its bytes do not check out") !=
	      NULL);
	CHECK(strstr(note.text, "chunk 3: its slot in the chunk table is "
			       "another chunk's") != NULL);
	if (a) {
		CHECK(same_bytes(a, 13, 0, MiB));
		CHECK_EQ(tier_buf_read(a, got, sizeof(got), 2 * MiB),
			 (ssize_t)sizeof(got));
		fill(want, sizeof(want), 13, 2 * MiB);
		CHECK(!memcmp(got, want, sizeof(want)));
		CHECK_EQ(tier_buf_read(a, got, sizeof(got), MiB),
			 (ssize_t)sizeof(got));
		memset(want, 0, sizeof(want));
		CHECK(!memcmp(got, want, sizeof(want)));
		tier_buf_destroy(a);
	}
	free(m);
	tier_store_keep_files(s);
	tier_buf_destroy(b);
	free(r.map);
	tier_store_destroy(s);
}

/*
 * The host copy costs what it holds: files of every size from 0 to 3 MiB
 * (log-uniform, as real trees are) take at most 5 % over their bytes once
 * placed, and as much after a spill and a fetch back. An empty file costs
 * nothing.
 */
static void test_host_overhead(void)
{
	struct tier_store *s = mk_store("none", 0, 512 * MiB, 0);
	static struct tier_buf *bufs[1500];
	uint64_t logical = 0, seed = 7;
	size_t nb = sizeof(bufs) / sizeof(bufs[0]);
	uint8_t *p = malloc(3 * MiB);

	CHECK(s != NULL && p != NULL);
	if (!s || !p)
		goto out;
	for (size_t i = 0; i < nb; i++) {
		uint64_t size;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		size = (seed >> 40) % 22;
		size = size ? (1ull << size) + (seed >> 8) % (1ull << size) :
			      (seed >> 8) % 2;
		if (size > 3 * MiB)
			size = 3 * MiB;
		fill(p, size, (int)i, 0);
		CHECK_EQ(tier_buf_new(s, &bufs[i]), 0);
		/* written in pieces, as cp does */
		for (uint64_t off = 0; off < size; off += 128 * 1024) {
			size_t n = size - off < 128 * 1024 ? size - off :
							     128 * 1024;

			tier_buf_write(bufs[i], p + off, n, (off_t)off);
		}
		CHECK_EQ(tier_buf_register(bufs[i]), 0);
		if (!size)
			CHECK(stored(bufs[i]) <= 512);
		logical += size;
	}
	uint64_t h = used(s, TFS_TIER_HOST);

	printf("# %zu files, %llu bytes: host %llu (%.4f)\n", nb,
	       (unsigned long long)logical, (unsigned long long)h,
	       (double)h / (double)logical);
	CHECK(h <= logical * 105 / 100);
	for (size_t i = 0; i < nb; i += 3)
		CHECK_EQ(tier_buf_move(bufs[i], TFS_TIER_DISK, 0), 0);
	for (size_t i = 0; i < nb; i += 3)
		CHECK_EQ(tier_buf_move(bufs[i], TFS_TIER_HOST, 0), 0);
	CHECK_EQ(used(s, TFS_TIER_HOST), h);
	for (size_t i = 0; i < nb; i += 97)
		CHECK(verify(bufs[i], (int)i, tier_buf_size(bufs[i])));
	for (size_t i = 0; i < nb; i++)
		tier_buf_destroy(bufs[i]);
	CHECK_EQ(used(s, TFS_TIER_HOST), 0);
out:
	free(p);
	tier_store_destroy(s);
}

/*
 * The sim backend's sparse allocations: nothing counted until populated,
 * populate idempotent and counted against the capacity, copies into
 * pages not populated refused, holes read as zeroes.
 */
static void test_sim_sparse(void)
{
	struct tfs_config cfg;
	struct tier_dev *dev = NULL;
	struct tier_dmem *m = NULL;
	struct tier_dev_info info;
	char err[128], buf[3 * PG];
	uint64_t free0;

	cfg_defaults(&cfg);
	cfg.device.limit = (struct cfg_size){ .bytes = 16 * PG };
	CHECK_EQ(tier_dev_sim_ops.init(&dev, &cfg, err, sizeof(err)), 0);
	cfg_free(&cfg);
	if (!dev)
		return;
	dev->ops->info(dev, &info);
	free0 = info.free;
	CHECK_EQ(dev->ops->alloc_sparse(dev, 64 * PG, &m), 0);
	if (!m)
		goto out;
	CHECK_EQ(m->granted, 0);
	CHECK_EQ(m->len, 64 * PG);
	dev->ops->info(dev, &info);
	CHECK_EQ(info.free, free0);
	CHECK_EQ(dev->ops->write(dev, m, "x", 1, 5 * PG), -EINVAL);
	CHECK_EQ(dev->ops->populate(dev, m, 5 * PG, 2 * PG), 0);
	CHECK_EQ(dev->ops->populate(dev, m, 5 * PG + 100, 100), 0);
	CHECK_EQ(m->granted, 2 * PG);
	CHECK_EQ(dev->ops->write(dev, m, "x", 1, 6 * PG + 7), 0);
	CHECK_EQ(dev->ops->write(dev, m, "x", 1, 7 * PG), -EINVAL);
	memset(buf, 0xee, sizeof(buf));
	CHECK_EQ(dev->ops->read(dev, m, buf, sizeof(buf), 4 * PG), 0);
	CHECK(buf[0] == 0 && buf[2 * PG + 7] == 'x' && buf[3 * PG - 1] == 0);
	/* more than the device has left: nothing populated */
	CHECK_EQ(dev->ops->populate(dev, m, 0, 64 * PG), -ENOMEM);
	CHECK_EQ(m->granted, 2 * PG);
	CHECK_EQ(dev->ops->populate(dev, m, 60 * PG, 8 * PG), -EINVAL);
	dev->ops->info(dev, &info);
	CHECK_EQ(info.free, free0 - 2 * PG);
	dev->ops->free(dev, m);
	dev->ops->info(dev, &info);
	CHECK_EQ(info.free, free0);
out:
	dev->ops->destroy(dev);
}

int main(void)
{
	if (!mkdtemp(spill_dir)) {
		perror("mkdtemp");
		return 1;
	}
	TAP_RUN(test_round_trip_and_sparse);
	TAP_RUN(test_small_grown_by_truncate);
	TAP_RUN(test_read_iov);
	TAP_RUN(test_host_pool_trim);
	TAP_RUN(test_host_pool_slabs);
	TAP_RUN(test_device_granted);
	TAP_RUN(test_spill_order);
	TAP_RUN(test_charge_outside);
	TAP_RUN(test_clean_respill_and_move);
	TAP_RUN(test_read_noaccess);
	TAP_RUN(test_pinned_survives_pressure);
	TAP_RUN(test_enospc_keeps_data);
	TAP_RUN(test_evict_counters);
	TAP_RUN(test_truncate_grow_host_full);
	TAP_RUN(test_larger_than_host);
	TAP_RUN(test_concurrent_under_spilling);
	TAP_RUN(test_export_sim);
	TAP_RUN(test_inval_callback);
	TAP_RUN(test_export_leases);
	TAP_RUN(test_user_shares);
	TAP_RUN(test_pinned_full_share);
	TAP_RUN(test_revoke);
	TAP_RUN(test_reconfigure_shrinks);
	TAP_RUN(test_stats_format);
	TAP_RUN(test_bad_backend);
	TAP_RUN(test_tier_names);
	TAP_RUN(test_tiers_below_disk);
	TAP_RUN(test_sync_keeps_committed);
	TAP_RUN(test_sync_large_in_place);
	TAP_RUN(test_graves_and_keep);
	TAP_RUN(test_page_holes_and_seek);
	TAP_RUN(test_sim_sparse);
	TAP_RUN(test_fallocate_enospc);
	TAP_RUN(test_punch_needs_no_room);
	TAP_RUN(test_adopt_shapes);
	TAP_RUN(test_adopt_salvage);
	TAP_RUN(test_host_overhead);
	TAP_RUN(test_statvfs_unlocked);
	{
		char cmd[128];

		/* the persistent directories stay by design */
		snprintf(cmd, sizeof(cmd), "rm -rf %s/tierfs-persist.*",
			 spill_dir);
		if (system(cmd))
			printf("# cannot remove %s\n", cmd);
	}
	TAP_RUN(test_limits);
	rmdir(spill_dir);
	return tap_done();
}
