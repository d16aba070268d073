// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The store over the CUDA backend, without a mount: what the GPU run can
 * still check where FUSE cannot mount (a gVisor sandbox may refuse), and
 * the figures it brings back. Linked with the store library as the unit
 * tests are (tests/gpu/meson.build), with the static cudart; with
 * tests/gpu/cuda_mock.c in its place by tests/gpu/mock_check.sh and the
 * bundle's dry run.
 *
 *   spill       buffers through every tier and back, the bytes checked
 *   reclaim     tier_store_reclaim() gives back what it says, files intact
 *   copy        spill (device -> pool, page-locked) and prefetch of one
 *               buffer against raw pinned cudaMemcpy: FAIL below 0.8x on a
 *               GPU; reads of device-only buffers into pageable memory
 *               (what a FUSE read of one does) by 1 and by 8 readers at
 *               once, next to 1 and 8 raw pinned copies (figures)
 *   readmap     read exports: the first one's cost (a device-to-device
 *               snapshot), readers of the same bytes sharing it
 *   ipc         a second process maps exports through CUDA IPC: reads the
 *               bytes of a read export, writes through a write export and
 *               the store commits them; what it still maps after its
 *               lease is kept, counted and bounded by the user's share,
 *               and freed once it exits
 *
 * Output is TAP, a check that cannot judge "ok N - name # SKIP why", and
 * "# figure: ..." lines. Exit 0, 1 when a check failed, 77 when the
 * backend does not start (no GPU), with the reason.
 *
 * Environment: TFS_GPU (0), TFS_SC_MIB (the size of the buffers: 1024, or
 * 16 on the fake runtime), TFS_SC_READERS (8), TFS_SC_CHECKS (which of the
 * above, space-separated; all by default).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/device.h"
#include "tiers/store.h"

/* Defined only by tests/gpu/cuda_mock.c. */
unsigned long tfs_mock_calls(void) __attribute__((weak));

#define MiB ((uint64_t)1 << 20)

static struct tier_store *s;
static uint64_t sz; /* bytes per buffer */
static int readers = 8;
static int failures, ntests;
static const char *skip_why;
static char spill_dir[] = "/tmp/tierfs-store-check.XXXXXX";
static bool fake;

#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, \
				__LINE__);                        \
			fprintf(stderr, __VA_ARGS__);             \
			fputc('\n', stderr);                      \
			failures++;                               \
		}                                                 \
	} while (0)

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint8_t pat(unsigned int seed, uint64_t i)
{
	return (uint8_t)((i * 131 + seed * 7) ^ (i >> 13) ^ seed);
}

static void fill(uint8_t *p, uint64_t n, unsigned int seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = pat(seed, i);
}

static bool holds(const uint8_t *p, uint64_t n, unsigned int seed)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != pat(seed, i))
			return false;
	return true;
}

static enum tfs_tier tier_of(struct tier_buf *b)
{
	struct tier_buf_stat st;

	tier_buf_stat(b, &st);
	return st.tier;
}

static struct tier_store_stats stats(void)
{
	struct tier_store_stats st;

	tier_store_stats(s, &st);
	return st;
}

/* A buffer of sz bytes of pattern @seed, placed (on the device if it fits). */
static struct tier_buf *mk_buf(unsigned int seed, uint64_t n)
{
	struct tier_buf *b;
	uint8_t *p = malloc(n);

	if (!p || tier_buf_new(s, &b)) {
		free(p);
		return NULL;
	}
	fill(p, n, seed);
	CHECK(tier_buf_write(b, p, n, 0) == (ssize_t)n, "write");
	tier_buf_register(b);
	free(p);
	return b;
}

/* Write pattern @seed over @b in place: a buffer on the device and not
 * growing is written there, every other copy dropped. */
static bool rewrite(struct tier_buf *b, unsigned int seed, uint64_t n)
{
	uint8_t *p = malloc(n);
	bool ok = p != NULL;

	if (ok) {
		fill(p, n, seed);
		ok = tier_buf_write(b, p, n, 0) == (ssize_t)n;
	}
	free(p);
	return ok && tier_of(b) == TFS_TIER_DEVICE;
}

/* A buffer whose only copy is on the device, holding pattern @seed. */
static struct tier_buf *mk_dev_only(unsigned int seed, uint64_t n)
{
	struct tier_buf *b;

	if (tier_buf_new(s, &b))
		return NULL;
	if (tier_buf_alloc_device(b, n) || !rewrite(b, seed, n)) {
		tier_buf_destroy(b);
		return NULL;
	}
	return b;
}

static bool verify(struct tier_buf *b, uint64_t n, unsigned int seed)
{
	uint8_t *p = malloc(n);
	bool ok = p && tier_buf_read(b, p, n, 0) == (ssize_t)n &&
		  holds(p, n, seed);

	free(p);
	return ok;
}

/* --- the second process ------------------------------------------------ */

/*
 * It is forked before the store (and CUDA) start: a forked child cannot
 * use its parent's CUDA. It gets export handles through a pipe and does
 * what a GPU program would, with the runtime's copies in place of kernels.
 */
enum op { OP_READ, OP_WRITE, OP_KEEP, OP_DROP, OP_EXIT };

struct msg {
	int op;
	unsigned int seed;
	uint64_t len;
	uint8_t handle[64];
};

static int to_child[2], from_child[2];
static pid_t child = -1;

static int child_do(const struct msg *m, void **kept)
{
	cudaIpcMemHandle_t h;
	uint8_t *host = NULL;
	void *p = NULL;
	int rc = 0;

	if (m->op == OP_DROP) {
		if (*kept)
			rc = cudaIpcCloseMemHandle(*kept) ? -EIO : 0;
		*kept = NULL;
		return rc;
	}
	memcpy(&h, m->handle, sizeof(h));
	if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess))
		return -EIO;
	host = malloc(m->len ? m->len : 1);
	if (!host)
		rc = -ENOMEM;
	if (!rc && m->op == OP_READ) {
		rc = cudaMemcpy(host, p, m->len, cudaMemcpyDeviceToHost) ?
			     -EIO :
			     0;
		if (!rc && !holds(host, m->len, m->seed))
			rc = -EILSEQ;
		/* A kernel may write a read map (no read-only IPC): the
		 * file must not change. */
		if (!rc && cudaMemset(p, 0xee, m->len))
			rc = -EIO;
	} else if (!rc && m->op == OP_WRITE) {
		fill(host, m->len, m->seed);
		if (cudaMemcpy(p, host, m->len, cudaMemcpyHostToDevice) ||
		    cudaDeviceSynchronize())
			rc = -EIO;
	}
	free(host);
	if (m->op == OP_KEEP && !rc) {
		*kept = p;
		return 0;
	}
	if (cudaIpcCloseMemHandle(p) && !rc)
		rc = -EIO;
	return rc;
}

static void child_main(void)
{
	void *kept = NULL;
	struct msg m;

	close(to_child[1]);
	close(from_child[0]);
	while (read(to_child[0], &m, sizeof(m)) == sizeof(m) &&
	       m.op != OP_EXIT) {
		int rc = child_do(&m, &kept);

		if (write(from_child[1], &rc, sizeof(rc)) != sizeof(rc))
			break;
	}
	_exit(0);
}

static int child_call(int op, const struct tfs_ioc_export *ex,
		      unsigned int seed)
{
	struct msg m = { .op = op, .seed = seed, .len = ex ? ex->length : 0 };
	int rc = -EPIPE;

	if (ex)
		memcpy(m.handle, ex->handle, sizeof(m.handle));
	if (write(to_child[1], &m, sizeof(m)) != sizeof(m) ||
	    read(from_child[0], &rc, sizeof(rc)) != sizeof(rc))
		return -EPIPE;
	return rc;
}

static void child_start(void)
{
	if (pipe(to_child) || pipe(from_child))
		return;
	child = fork();
	if (child == 0)
		child_main();
	close(to_child[0]);
	close(from_child[1]);
}

static void child_stop(void)
{
	struct msg m = { .op = OP_EXIT };

	if (child <= 0)
		return;
	if (write(to_child[1], &m, sizeof(m)) != sizeof(m))
		kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	child = -1;
}

/* --- checks ---------------------------------------------------------------- */

static void skip_check(const char *why)
{
	skip_why = why;
}

static void run_check(const char *name, void (*fn)(void))
{
	const char *only = getenv("TFS_SC_CHECKS");
	int before = failures;
	double t0 = now_s();

	if (only && *only) {
		char key[64];

		snprintf(key, sizeof(key), " %s ", name);
		char list[512];

		snprintf(list, sizeof(list), " %s ", only);
		if (!strstr(list, key))
			return;
	}
	skip_why = NULL;
	fn();
	ntests++;
	if (failures != before)
		printf("not ok %d - %s\n", ntests, name);
	else if (skip_why)
		printf("ok %d - %s # SKIP %s\n", ntests, name, skip_why);
	else
		printf("ok %d - %s (%.2f s)\n", ntests, name, now_s() - t0);
	fflush(stdout);
}

static void check_spill(void)
{
	static const enum tfs_tier path[] = { TFS_TIER_HOST, TFS_TIER_DISK,
					      TFS_TIER_DEVICE, TFS_TIER_DISK,
					      TFS_TIER_HOST, TFS_TIER_DEVICE };
	uint64_t n = sz / 4 ? sz / 4 : MiB;
	struct tier_buf *b[4] = { 0 };
	int i, k;

	for (i = 0; i < 4; i++) {
		b[i] = mk_buf(10 + (unsigned int)i, n);
		CHECK(b[i], "buffer %d", i);
	}
	for (i = 0; i < 4 && b[i]; i++) {
		CHECK(tier_of(b[i]) == TFS_TIER_DEVICE,
		      "buffer %d not placed on the device", i);
		for (k = 0; k < 6; k++) {
			int rc = tier_buf_move(b[i], path[k], 0);

			CHECK(rc == 0 && tier_of(b[i]) == path[k],
			      "buffer %d to %s: %d", i, tier_name(path[k]), rc);
			CHECK(verify(b[i], n, 10 + (unsigned int)i),
			      "buffer %d differs on %s", i, tier_name(path[k]));
		}
	}
	for (i = 0; i < 4; i++)
		tier_buf_destroy(b[i]);
}

static void check_reclaim(void)
{
	struct tier_buf *b[4] = { 0 };
	uint64_t n = sz / 2 ? sz / 2 : MiB, freed = 0;
	int i, rc;

	for (i = 0; i < 4; i++) {
		b[i] = mk_buf(20 + (unsigned int)i, n);
		CHECK(b[i] && tier_of(b[i]) == TFS_TIER_DEVICE,
		      "buffer %d not on the device", i);
	}
	double t0 = now_s();

	rc = tier_store_reclaim(s, -1, 2 * n, &freed);
	double t = now_s() - t0;

	CHECK(rc == 0 && freed >= 2 * n, "reclaim of %llu: %d, freed %llu",
	      (unsigned long long)(2 * n), rc, (unsigned long long)freed);
	printf("# figure: reclaim of %llu MiB gave back %llu MiB in %.1f ms (%.2f GB/s)\n",
	       (unsigned long long)(2 * n / MiB),
	       (unsigned long long)(freed / MiB), t * 1e3,
	       (double)freed / t / 1e9);
	for (i = 0; i < 4; i++) {
		CHECK(b[i] && verify(b[i], n, 20 + (unsigned int)i),
		      "buffer %d after the reclaim", i);
		tier_buf_destroy(b[i]);
	}
}

/* --- copies against raw pinned cudaMemcpy --- */

struct raw {
	void *dev, *host;
	cudaStream_t st;
	uint64_t n;
	bool d2h;
	int rc;
};

static void *raw_main(void *arg)
{
	struct raw *r = arg;

	r->rc = cudaMemcpyAsync(r->d2h ? r->host : r->dev,
				r->d2h ? r->dev : r->host, r->n,
				r->d2h ? cudaMemcpyDeviceToHost :
					 cudaMemcpyHostToDevice,
				r->st) ||
		cudaStreamSynchronize(r->st);
	return NULL;
}

/* GB/s of @k raw pinned copies of @n bytes at once, the best of 3; 0 when
 * the memory cannot be had. */
static double raw_gbps(int k, uint64_t n, bool d2h)
{
	struct raw r[16];
	pthread_t t[16];
	double best = 0;
	int i, rep, ok = 1;

	memset(r, 0, sizeof(r));
	for (i = 0; i < k && ok; i++) {
		r[i].n = n;
		r[i].d2h = d2h;
		ok = !cudaMalloc(&r[i].dev, n) &&
		     !cudaHostAlloc(&r[i].host, n, cudaHostAllocDefault) &&
		     !cudaStreamCreateWithFlags(&r[i].st,
						cudaStreamNonBlocking);
		if (ok)
			memset(r[i].host, 1, n);
	}
	for (rep = 0; ok && rep < 3; rep++) {
		double t0 = now_s(), took;

		for (i = 0; i < k; i++)
			pthread_create(&t[i], NULL, raw_main, &r[i]);
		for (i = 0; i < k; i++) {
			pthread_join(t[i], NULL);
			ok = ok && !r[i].rc;
		}
		took = now_s() - t0;
		if ((double)k * (double)n / took / 1e9 > best)
			best = (double)k * (double)n / took / 1e9;
	}
	for (i = 0; i < k; i++) {
		if (r[i].st)
			cudaStreamDestroy(r[i].st);
		if (r[i].dev)
			cudaFree(r[i].dev);
		if (r[i].host)
			cudaFreeHost(r[i].host);
	}
	(void)cudaGetLastError();
	return ok ? best : 0;
}

struct reader {
	struct tier_buf *b;
	uint8_t *dst;
	uint64_t n;
	int ok;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	r->ok = tier_buf_read(r->b, r->dst, r->n, 0) == (ssize_t)r->n;
	return NULL;
}

/* GB/s of @k readers at once of device-only buffers into pageable memory,
 * the best of 3, the bytes checked once. */
static double read_gbps(int k, uint64_t n)
{
	struct reader r[16];
	pthread_t t[16];
	double best = 0;
	int i, rep;

	memset(r, 0, sizeof(r));
	for (i = 0; i < k; i++) {
		r[i].n = n;
		r[i].dst = malloc(n);
		/* Only on the device: a host copy would serve the read. */
		r[i].b = r[i].dst ? mk_dev_only(40 + (unsigned int)i, n) : NULL;
		if (!r[i].b)
			goto out;
		memset(r[i].dst, 0, n);
		tier_buf_read(r[i].b, r[i].dst, 1, 0); /* fault in, warm up */
		memset(r[i].dst, 0, n);
	}
	for (rep = 0; rep < 3; rep++) {
		double t0 = now_s(), tt;
		bool ok = true;

		for (i = 0; i < k; i++)
			pthread_create(&t[i], NULL, reader_main, &r[i]);
		for (i = 0; i < k; i++) {
			pthread_join(t[i], NULL);
			ok = ok && r[i].ok;
		}
		tt = now_s() - t0;
		CHECK(ok, "%d readers failed", k);
		if ((double)k * (double)n / tt / 1e9 > best)
			best = (double)k * (double)n / tt / 1e9;
	}
	for (i = 0; i < k; i++)
		CHECK(holds(r[i].dst, n, 40 + (unsigned int)i),
		      "reader %d got other bytes", i);
out:
	for (i = 0; i < k; i++) {
		tier_buf_destroy(r[i].b);
		free(r[i].dst);
	}
	return best;
}

static void check_copy(void)
{
	struct tier_buf *b = mk_dev_only(30, sz);
	double d2h = 1e30, h2d = 1e30, raw_d, raw_h, r1, r8, p1, p8;
	int rep, rc;

	CHECK(b, "a buffer only on the device");
	if (!b)
		return;
	for (rep = 0; rep < 3; rep++) {
		double t0 = now_s();

		rc = tier_buf_move(b, TFS_TIER_HOST, 0);
		if (now_s() - t0 < d2h)
			d2h = now_s() - t0;
		CHECK(rc == 0 && tier_of(b) == TFS_TIER_HOST, "spill: %d", rc);
		t0 = now_s();
		rc = tier_buf_move(b, TFS_TIER_DEVICE, 0);
		if (now_s() - t0 < h2d)
			h2d = now_s() - t0;
		CHECK(rc == 0 && tier_of(b) == TFS_TIER_DEVICE,
		      "prefetch: %d", rc);
		/* Only on the device again, so that the next spill copies. */
		CHECK(rewrite(b, 30, sz), "rewrite in place");
	}
	CHECK(verify(b, sz, 30), "the bytes after the copies");
	tier_buf_destroy(b);
	raw_d = raw_gbps(1, sz, true);
	raw_h = raw_gbps(1, sz, false);
	d2h = (double)sz / d2h / 1e9;
	h2d = (double)sz / h2d / 1e9;
	printf("# figure: spill D2H %.2f GB/s, raw pinned cudaMemcpy %.2f GB/s: %.2fx\n",
	       d2h, raw_d, raw_d > 0 ? d2h / raw_d : 0);
	printf("# figure: prefetch H2D %.2f GB/s, raw pinned cudaMemcpy %.2f GB/s: %.2fx\n",
	       h2d, raw_h, raw_h > 0 ? h2d / raw_h : 0);
	r1 = read_gbps(1, sz);
	p1 = raw_gbps(1, sz, true);
	r8 = read_gbps(readers, sz / 2 ? sz / 2 : MiB);
	p8 = raw_gbps(readers, sz / 2 ? sz / 2 : MiB, true);
	printf("# figure: 1 reader of a device-only buffer into pageable memory %.2f GB/s, 1 raw pinned copy %.2f GB/s: %.2fx\n",
	       r1, p1, p1 > 0 ? r1 / p1 : 0);
	printf("# figure: %d readers at once %.2f GB/s, %d raw pinned copies at once %.2f GB/s: %.2fx\n",
	       readers, r8, readers, p8, p8 > 0 ? r8 / p8 : 0);
	if (fake) {
		skip_check("the fake runtime's copies are memcpy: nothing to compare with");
		return;
	}
	CHECK(raw_d > 0 && d2h >= 0.8 * raw_d,
	      "spill D2H at %.2fx of raw pinned cudaMemcpy, target 0.8x",
	      raw_d > 0 ? d2h / raw_d : 0);
	CHECK(raw_h > 0 && h2d >= 0.8 * raw_h,
	      "prefetch H2D at %.2fx of raw pinned cudaMemcpy, target 0.8x",
	      raw_h > 0 ? h2d / raw_h : 0);
}

static void check_readmap(void)
{
	struct tier_buf *b = mk_buf(50, sz);
	struct tfs_ioc_export ex;
	struct tier_store_stats st0, st;
	double t0, first, second;
	uint64_t granted;
	int i, rc;

	CHECK(b && tier_of(b) == TFS_TIER_DEVICE, "not on the device");
	if (!b)
		return;
	st0 = stats();
	granted = (sz + (2 * MiB - 1)) & ~(2 * MiB - 1);
	memset(&ex, 0, sizeof(ex));
	t0 = now_s();
	rc = tier_buf_export(b, 1, 0, 0, getpid(), -1, false, &ex);
	first = now_s() - t0;
	CHECK(rc == 0, "read export: %d", rc);
	t0 = now_s();
	for (i = 2; i <= 4; i++) {
		rc = tier_buf_export(b, (uint64_t)i, 0, 0, getpid(), -1, false,
				     &ex);
		CHECK(rc == 0, "read export %d: %d", i, rc);
	}
	second = (now_s() - t0) / 3;
	st = stats();
	CHECK(st.device_export_held == granted,
	      "4 readers hold %llu bytes of snapshots, want one of %llu",
	      (unsigned long long)st.device_export_held,
	      (unsigned long long)granted);
	CHECK(st.tier[TFS_TIER_DEVICE].used ==
		      st0.tier[TFS_TIER_DEVICE].used + granted,
	      "device.used grew by %llu for 4 readers",
	      (unsigned long long)(st.tier[TFS_TIER_DEVICE].used -
				   st0.tier[TFS_TIER_DEVICE].used));
	printf("# figure: read map of %llu MiB: the first %.2f ms (a snapshot, %.1f GB/s device to device), each next reader of the same bytes %.3f ms\n",
	       (unsigned long long)(sz / MiB), first * 1e3,
	       (double)sz / first / 1e9, second * 1e3);
	for (i = 1; i <= 4; i++)
		tier_buf_unexport(b, (uint64_t)i, true);
	CHECK(stats().device_export_held == 0, "snapshots outlived 4 readers");
	tier_buf_destroy(b);
}

static void check_ipc(void)
{
	uint64_t n = sz / 4 ? sz / 4 : MiB;
	struct tier_buf *b = mk_buf(60, n), *b2;
	struct tfs_ioc_export ex;
	int rc, i;

	if (child <= 0) {
		CHECK(0, "no second process");
		tier_buf_destroy(b);
		return;
	}
	CHECK(b, "buffer");
	if (!b)
		return;
	/* Read: the other process sees the bytes, and its writes to the
	 * map reach nothing of the file. */
	memset(&ex, 0, sizeof(ex));
	rc = tier_buf_export(b, 1, 0, 0, child, -1, false, &ex);
	CHECK(rc == 0 && ex.handle_type == TFS_HANDLE_CUDA_IPC,
	      "read export: %d", rc);
	rc = rc ? rc : child_call(OP_READ, &ex, 60);
	CHECK(rc == 0, "the other process read the map: %d", rc);
	tier_buf_unexport(b, 1, true);
	CHECK(verify(b, n, 60), "a write through a read map reached the file");
	/* Write: its bytes become the file's at the commit. */
	rc = tier_buf_export(b, 2, 0, 0, child, -1, true, &ex);
	CHECK(rc == 0, "write export: %d", rc);
	rc = rc ? rc : child_call(OP_WRITE, &ex, 61);
	CHECK(rc == 0, "the other process wrote the map: %d", rc);
	CHECK(tier_buf_commit(b, 2) == 0, "commit");
	tier_buf_unexport(b, 2, true);
	CHECK(verify(b, n, 61), "the committed bytes");
	tier_buf_move(b, TFS_TIER_DISK, 0);
	CHECK(verify(b, n, 61), "the committed bytes after a spill");

	/* Mapped after the lease: kept and counted, for the user too. */
	rc = tier_buf_export(b, 3, 1000, 1000, child, -1, false, &ex);
	CHECK(rc == 0, "read export as uid 1000: %d", rc);
	rc = rc ? rc : child_call(OP_KEEP, &ex, 61);
	CHECK(rc == 0, "the other process keeps the map: %d", rc);
	tier_buf_unexport(b, 3, false);
	CHECK(stats().device_export_held >= n,
	      "a map kept after its lease is not counted: %llu",
	      (unsigned long long)stats().device_export_held);
	b2 = mk_buf(62, n);
	rc = b2 ? tier_buf_export(b2, 4, 1000, 1000, child, -1, false, &ex) :
		  -ENOMEM;
	CHECK(rc == -EDQUOT, "past the user's share with what it keeps: %d",
	      rc);
	rc = b2 ? tier_buf_export(b2, 4, 1001, 1001, child, -1, false, &ex) :
		  -ENOMEM;
	CHECK(rc == 0, "another user's export: %d", rc);
	if (!rc)
		tier_buf_unexport(b2, 4, true);
	/* It lets go and exits: freed, and the share is the user's again. */
	CHECK(child_call(OP_DROP, NULL, 0) == 0, "unmap");
	child_stop();
	for (i = 0; i < 400 && stats().device_export_held; i++)
		usleep(5000);
	CHECK(stats().device_export_held == 0,
	      "kept after the process exited: %llu",
	      (unsigned long long)stats().device_export_held);
	rc = b2 ? tier_buf_export(b2, 5, 1000, 1000, getpid(), -1, false,
				  &ex) :
		  -ENOMEM;
	CHECK(rc == 0, "the user's export once the process went: %d", rc);
	if (!rc)
		tier_buf_unexport(b2, 5, true);
	tier_buf_destroy(b2);
	tier_buf_destroy(b);
}

static void quiet_sink(enum tfs_log_level level, const char *fmt, va_list ap)
{
	if (level > TFS_LOG_NOTICE)
		return;
	fputs("# tierfs: ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
}

int main(void)
{
	struct tfs_config cfg;
	char err[512] = "", v[32];
	uint64_t mib;
	int rc;

	fake = tfs_mock_calls != NULL;
	mib = getenv("TFS_SC_MIB") ? strtoull(getenv("TFS_SC_MIB"), NULL, 0) :
	      fake		   ? 16 :
				     1024;
	sz = mib * MiB;
	if (getenv("TFS_SC_READERS"))
		readers = atoi(getenv("TFS_SC_READERS"));
	if (readers < 1 || readers > 16)
		readers = 8;
	tfs_log_set_sink(quiet_sink);
	/* Before CUDA: the child may use it then. */
	child_start();
	if (!mkdtemp(spill_dir)) {
		printf("1..0 # SKIP no spill directory: %s\n", strerror(errno));
		child_stop();
		return 77;
	}
	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "cuda");
	cfg.device.gpu = getenv("TFS_GPU") ? atoi(getenv("TFS_GPU")) : 0;
	/* Sized from the buffers, not from what the machine shows: its RAM
	 * may start small and grow as it is used. */
	cfg.device.limit = (struct cfg_size){ .bytes = 12 * sz + 64 * MiB };
	cfg.host.limit = (struct cfg_size){ .bytes = 12 * sz + 64 * MiB };
	cfg.device.reserve = (struct cfg_size){ .bytes = 0 };
	cfg.policy.overcommit = true;
	/* One of the ipc check's buffers (sz / 4) fits a user's share,
	 * two do not. */
	{
		uint64_t q = sz / 4 ? sz / 4 : MiB;

		q = (q + 2 * MiB - 1) & ~(2 * MiB - 1);
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(q + q / 2));
	}
	if (cfg_set(&cfg, "device", "user_share", v, err, sizeof(err)))
		printf("# user_share: %s\n", err);
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	rc = tier_store_init(&s, &cfg, "store_check", err, sizeof(err));
	cfg_free(&cfg);
	if (rc) {
		printf("1..0 # SKIP the store does not start on the cuda backend: %s\n",
		       err);
		child_stop();
		rmdir(spill_dir);
		return 77;
	}
	printf("# store on %s (%s), buffers of %llu MiB, %d readers\n",
	       stats().device_model, fake ? "the fake runtime" : "a GPU",
	       (unsigned long long)mib, readers);
	if (stats().tier[TFS_TIER_DEVICE].limit < 12 * sz) {
		printf("1..0 # SKIP the device tier is %llu MiB, too small for %llu MiB buffers\n",
		       (unsigned long long)(stats().tier[TFS_TIER_DEVICE].limit / MiB),
		       (unsigned long long)mib);
		tier_store_destroy(s);
		child_stop();
		return 77;
	}
	run_check("spill", check_spill);
	run_check("reclaim", check_reclaim);
	run_check("copy", check_copy);
	run_check("readmap", check_readmap);
	run_check("ipc", check_ipc);
	tier_store_destroy(s);
	child_stop();
	rmdir(spill_dir);
	printf("1..%d\n", ntests);
	return failures ? 1 : 0;
}
