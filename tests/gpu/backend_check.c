// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Exercise the cuda device backend directly, with no mount: init, then
 * alloc / write / read / zero / batched copies / export on sizes around the
 * staging chunk, from several threads at once.
 *
 * Without a usable GPU, init must fail cleanly with a negative errno and one
 * line naming the CUDA error; the check prints it and exits 77 (skip).
 * Output is TAP: "1..0 # SKIP no usable GPU: ...", or a line per check, a
 * check that cannot judge here "ok N - name # SKIP why" (never a bare ok),
 * and "# figure: ..." lines with what was measured.
 *
 * Host memory comes two ways, as from the store: pageable (malloc, staged)
 * and page-locked through host_register (mmap'd like the pool, copied
 * directly); every thread does its round trips both ways.
 *
 * On a GPU and on tests/gpu/cuda_mock.c (a fake runtime as strict as a GPU,
 * see there) alike: a batch of direct copies waits once and copies of
 * page-locked memory go direct (the backend's own counts, and
 * cudaPointerGetAttributes saying the memory is page-locked); free returns
 * while the device is busy (a host function holds a stream; cudaFree
 * synchronises the device); every allocation is its own 2 MiB block (the
 * fake's blocks, or the driver's cuMemGetAddressRange); readers share a
 * snapshot; the pool is page-locked off the caller's thread. Only the fake
 * can show, and elsewhere these are SKIP: copies failing when queued give
 * -EIO and leave the device usable; a failed register leaves memory
 * staged; a copy failing when it runs poisons the context (the device is
 * marked failed, logged once, and every slot fails fast from then on
 * without calling CUDA); many copies queue at once (the fake holds its
 * streams); pages are faulted in before cudaHostRegister. Sparse
 * allocations (the driver's VMM calls) where the device has them: holes
 * read as zeroes, a write into one refused, populate charging granules,
 * an export densifying, free giving all back.
 *
 *   cc -std=gnu11 -D_GNU_SOURCE -DTFS_HAVE_CUDA=1 -I include -I . \
 *      -isystem /usr/local/cuda/include tests/gpu/backend_check.c \
 *      tiers/device_cuda.c tiers/device_cuda_copy.c tiers/device_cuda_vmm.c \
 *      config/log.c \
 *      /usr/local/cuda/lib64/libcudart_static.a -ldl -lpthread -lrt
 *
 * TFS_GPU=N picks the device (device.gpu); TFS_CHECK_ONLY=WORDS runs only
 * the checks whose names contain WORDS.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/device.h"
#include "tiers/device_cuda_i.h"

/* Defined only by tests/gpu/cuda_mock.c. */
void tfs_mock_fail_next_copy(void) __attribute__((weak));
void tfs_mock_fail_next_copy_async(void) __attribute__((weak));
void tfs_mock_fail_next_register(void) __attribute__((weak));
void tfs_mock_hold_streams(int held) __attribute__((weak));
unsigned long tfs_mock_registered_copies(void) __attribute__((weak));
unsigned long tfs_mock_waits(void) __attribute__((weak));
unsigned long tfs_mock_calls(void) __attribute__((weak));
void *tfs_mock_block_of(const void *p) __attribute__((weak));
int tfs_mock_ptr_device(const void *p) __attribute__((weak));
unsigned long tfs_mock_cold_registers(void) __attribute__((weak));
void tfs_mock_hold_registers(int held) __attribute__((weak));

/* The largest round trip, plus room for its offset. */
#define BIG ((37u << 20) + 64)
#define MiB (1u << 20)

static struct tier_dev *dev;
static struct tfs_config cfg0;
static int failures;
static int error_lines; /* atomic: tfs_err lines logged */
static const char *skip_why;
static int ntests;

/* The check running cannot judge here: it is reported SKIP with @why,
 * unless one of its checks failed. */
static void skip_check(const char *why)
{
	skip_why = why;
}

static void run_check(const char *name, void (*fn)(void))
{
	int before = __atomic_load_n(&failures, __ATOMIC_RELAXED);
	const char *only = getenv("TFS_CHECK_ONLY");
	struct timespec t0, t1;

	/* TFS_CHECK_ONLY=WORDS: the checks whose names have them. */
	if (only && *only && !strstr(name, only))
		return;
	skip_why = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fn();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ntests++;
	if (__atomic_load_n(&failures, __ATOMIC_RELAXED) != before)
		printf("not ok %d - %s\n", ntests, name);
	else if (skip_why)
		printf("ok %d - %s # SKIP %s\n", ntests, name, skip_why);
	else
		printf("ok %d - %s (%.2f s)\n", ntests, name,
		       (double)(t1.tv_sec - t0.tv_sec) +
			       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	fflush(stdout);
}

/* The backend's own counts of waits, direct and staged copies. */
static struct cuda_copy_counts counts(void)
{
	struct cuda_copy_counts c;

	cuda_copy_counts(&c);
	return c;
}

/* Does the runtime say [p, p + len) is page-locked host memory? */
static bool runtime_locked(const void *p, size_t len)
{
	struct cudaPointerAttributes a;
	const char *c = p;

	for (size_t at = 0; at < len; at += len > 1 ? len - 1 : 1) {
		if (cudaPointerGetAttributes(&a, c + at) != cudaSuccess) {
			(void)cudaGetLastError();
			return false;
		}
		if (a.type != cudaMemoryTypeHost)
			return false;
		if (len == 1)
			break;
	}
	return true;
}

#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, \
				__LINE__);                        \
			fprintf(stderr, __VA_ARGS__);             \
			fputc('\n', stderr);                      \
			__atomic_add_fetch(&failures, 1,          \
					   __ATOMIC_RELAXED);     \
		}                                                 \
	} while (0)

static void count_sink(enum tfs_log_level level, const char *fmt, va_list ap)
{
	if (level <= TFS_LOG_ERR)
		__atomic_add_fetch(&error_lines, 1, __ATOMIC_RELAXED);
	fputs("tierfs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

/* The backend's pointer: struct cuda_dmem puts it right after the
 * struct tier_dmem it starts with. For the fake's hooks only. */
static void *dptr(struct tier_dmem *m)
{
	return *(void **)(m + 1);
}

/* No period: a chunk landing in another chunk's place must show. */
static void fill(unsigned char *p, size_t len, unsigned int seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)(x >> 24);
	}
}

/* Copies the backend sent straight to or from page-locked memory. */
static unsigned long direct_copies(void)
{
	return counts().direct;
}

/* Page-aligned memory of its own mapping, like the pool's. */
static void *chunk_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED, "mmap %zu", len);
	return p == MAP_FAILED ? NULL : p;
}

static int chunk_register(void *p, size_t len)
{
	int rc = dev->ops->host_register(dev, p, len);

	CHECK(rc == 0, "host_register %zu: %d", len, rc);
	return rc;
}

/*
 * One round trip of @len bytes: write at @off, read back, zero a middle
 * part, read again. With @a and @b, they are the host side (registered
 * chunks, @len at most BIG); otherwise malloc'd.
 */
static void round_trip(size_t len, size_t off, unsigned int seed,
		       unsigned char *ha, unsigned char *hb)
{
	const struct tier_dev_ops *ops = dev->ops;
	struct tier_dmem *m;
	unsigned char *a, *b;
	size_t zo, zl;
	int rc;

	rc = ops->alloc(dev, off + len, &m);
	CHECK(rc == 0, "alloc %zu: %d", off + len, rc);
	if (rc)
		return;
	a = ha ? ha : malloc(len + 1);
	b = hb ? hb : malloc(len + 1);
	fill(a, len, seed);
	memset(b, 0xee, len);
	rc = ops->write(dev, m, a, len, off);
	CHECK(rc == 0, "write %zu at %zu: %d", len, off, rc);
	rc = ops->read(dev, m, b, len, off);
	CHECK(rc == 0, "read %zu at %zu: %d", len, off, rc);
	CHECK(memcmp(a, b, len) == 0, "bytes differ after round trip of %zu",
	      len);

	zo = len / 3;
	zl = len / 3;
	rc = ops->zero(dev, m, zl, off + zo);
	CHECK(rc == 0, "zero %zu at %zu: %d", zl, off + zo, rc);
	memset(a + zo, 0, zl);
	rc = ops->read(dev, m, b, len, off);
	CHECK(rc == 0 && memcmp(a, b, len) == 0, "bytes differ after zero");

	rc = ops->read(dev, m, b, 2, off + len);
	CHECK(rc == -EINVAL, "read past the end: %d", rc);

	ops->free(dev, m);
	if (!ha)
		free(a);
	if (!hb)
		free(b);
}

static void *worker(void *arg)
{
	unsigned int seed = (unsigned int)(uintptr_t)arg;
	static const size_t sizes[] = {
		1, 4095, (2u << 20) - 1, 2u << 20, (2u << 20) + 1,
		(4u << 20) + 12345, 37u << 20,
	};
	unsigned char *a = chunk_map(BIG), *b = chunk_map(BIG);
	size_t i;

	if (!a || !b || chunk_register(a, BIG) || chunk_register(b, BIG))
		return NULL;
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		round_trip(sizes[i], seed * 4096 + i, seed + (unsigned int)i,
			   NULL, NULL);
		round_trip(sizes[i], seed * 4096 + i, seed + (unsigned int)i,
			   a, b);
	}
	dev->ops->host_unregister(dev, a, BIG);
	dev->ops->host_unregister(dev, b, BIG);
	munmap(a, BIG);
	munmap(b, BIG);
	return NULL;
}

/* Copy @len bytes to the device and back; 0 or the first error. */
static int copy_pair(struct tier_dmem *m, void *a, void *b, size_t len,
		     unsigned int seed)
{
	int rc;

	fill(a, len, seed);
	memset(b, 0xee, len);
	rc = dev->ops->write(dev, m, a, len, 0);
	if (!rc)
		rc = dev->ops->read(dev, m, b, len, 0);
	if (!rc && memcmp(a, b, len))
		rc = -EILSEQ;
	return rc;
}

/*
 * Defect 1: the driver packs allocations under 2 MiB into shared blocks and
 * IPC exports the whole block, so every allocation must be a block of its
 * own, and say so in granted: what the store charges.
 */
static void check_granted(void)
{
	static const struct {
		size_t len, granted;
	} cases[] = {
		{ 0, 2 * MiB },	      { 1, 2 * MiB },
		{ 4096, 2 * MiB },    { 2 * MiB - 1, 2 * MiB },
		{ 2 * MiB, 2 * MiB }, { 2 * MiB + 4096, 4 * MiB },
		{ 9 * MiB, 10 * MiB },
	};
	struct tier_dmem *m[2] = { NULL, NULL };
	size_t i;
	int rc;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tier_dmem *g;

		rc = dev->ops->alloc(dev, cases[i].len, &g);
		CHECK(rc == 0, "alloc %zu: %d", cases[i].len, rc);
		if (rc)
			continue;
		CHECK(g->len == cases[i].len && g->granted == cases[i].granted,
		      "alloc %zu: len %zu granted %zu, want granted %zu",
		      cases[i].len, g->len, g->granted, cases[i].granted);
		dev->ops->free(dev, g);
	}
	for (i = 0; i < 2; i++) {
		rc = dev->ops->alloc(dev, 4096, &m[i]);
		CHECK(rc == 0, "alloc 4096: %d", rc);
	}
	if (m[0] && m[1] && tfs_mock_block_of) {
		CHECK(tfs_mock_block_of(dptr(m[0])) !=
			      tfs_mock_block_of(dptr(m[1])),
		      "two 4 KiB buffers share the 2 MiB block %p",
		      tfs_mock_block_of(dptr(m[0])));
	} else if (m[0] && m[1]) {
		/* The driver's own answer: what IPC maps is the allocation
		 * cuMemGetAddressRange names. */
		int (*range)(unsigned long long *, size_t *,
			     unsigned long long) = NULL;
		enum cudaDriverEntryPointQueryResult q;

		if (cudaGetDriverEntryPointByVersion(
			    "cuMemGetAddressRange", (void **)&range, 12000,
			    cudaEnableDefault, &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess || !range) {
			(void)cudaGetLastError();
			skip_check("no cuMemGetAddressRange to see the blocks");
		}
		for (i = 0; range && i < 2; i++) {
			unsigned long long base = 0;
			size_t size = 0;
			int r = range(&base, &size,
				      (unsigned long long)(uintptr_t)dptr(m[i]));

			CHECK(!r && base == (uintptr_t)dptr(m[i]) &&
				      size == 2 * MiB,
			      "a 4 KiB buffer's allocation is %zu bytes at %#llx (CUresult %d), want its own 2 MiB",
			      size, base, r);
		}
	}
	if (m[0] && tfs_mock_ptr_device)
		CHECK(tfs_mock_ptr_device(dptr(m[0])) == atoi(getenv("TFS_GPU") ?
							      getenv("TFS_GPU") :
							      "0"),
		      "allocated on device %d", tfs_mock_ptr_device(dptr(m[0])));
	for (i = 0; i < 2; i++)
		if (m[i])
			dev->ops->free(dev, m[i]);
}

/*
 * Defect 6: chunks copied one call at a time cost a slot, a copy and a wait
 * each. A batch of page-locked chunks, with holes, is one wait each way,
 * and the bytes are right; pageable segments in a batch are staged.
 */
static void check_batches(void)
{
	enum { N = 8 };
	const size_t chunk = MiB;
	struct tier_dev_seg seg[N];
	struct tier_dmem *m = NULL;
	unsigned char *a, *b, *pg;
	unsigned long w;
	int rc, i;

	a = chunk_map(N * chunk);
	b = chunk_map(N * chunk);
	pg = malloc(N * chunk);
	rc = dev->ops->alloc(dev, N * chunk - 100, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!a || !b || !pg || rc || chunk_register(a, N * chunk) ||
	    chunk_register(b, N * chunk))
		goto out;
	fill(a, N * chunk, 77);
	for (i = 0; i < N; i++) {
		seg[i].host = i % 3 == 1 ? NULL : a + i * chunk;
		seg[i].len = i == N - 1 ? chunk - 100 : chunk;
		seg[i].off = (uint64_t)i * chunk;
		if (!seg[i].host)
			memset(a + i * chunk, 0, chunk);
	}
	/* The backend's waits on a GPU; the runtime's own with the fake. */
	CHECK(runtime_locked(a, N * chunk),
	      "the runtime does not see the registered chunks page-locked");
	w = tfs_mock_waits ? tfs_mock_waits() : counts().waits;
	rc = tier_dev_writev(dev, m, seg, N);
	CHECK(rc == 0, "writev: %d", rc);
	w = (tfs_mock_waits ? tfs_mock_waits() : counts().waits) - w;
	CHECK(w == 1, "writev of %d page-locked chunks waited %lu times, want 1",
	      N, w);
	for (i = 0; i < N; i++)
		seg[i].host = b + i * chunk;
	memset(b, 0xee, N * chunk);
	w = tfs_mock_waits ? tfs_mock_waits() : counts().waits;
	rc = tier_dev_readv(dev, m, seg, N);
	CHECK(rc == 0, "readv: %d", rc);
	w = (tfs_mock_waits ? tfs_mock_waits() : counts().waits) - w;
	CHECK(w == 1, "readv of %d page-locked chunks waited %lu times, want 1",
	      N, w);
	CHECK(!memcmp(a, b, N * chunk - 100), "batched round trip differs");

	/* Pageable: staged through the slot's buffers, bytes intact. */
	for (i = 0; i < N; i++)
		seg[i].host = pg + i * chunk;
	memset(pg, 0xee, N * chunk);
	rc = tier_dev_readv(dev, m, seg, N);
	CHECK(rc == 0 && !memcmp(a, pg, N * chunk - 100),
	      "staged readv: %d", rc);
	fill(pg, N * chunk, 78);
	rc = tier_dev_writev(dev, m, seg, N);
	CHECK(rc == 0, "staged writev: %d", rc);
	rc = dev->ops->read(dev, m, b, N * chunk - 100, 0);
	CHECK(rc == 0 && !memcmp(pg, b, N * chunk - 100),
	      "staged writev differs: %d", rc);
	seg[0].off = N * chunk;
	rc = tier_dev_readv(dev, m, seg, 1);
	CHECK(rc == -EINVAL, "readv past the end: %d", rc);
	dev->ops->host_unregister(dev, a, N * chunk);
	dev->ops->host_unregister(dev, b, N * chunk);
out:
	if (m)
		dev->ops->free(dev, m);
	if (a)
		munmap(a, N * chunk);
	if (b)
		munmap(b, N * chunk);
	free(pg);
}

struct freeing {
	struct tier_dmem *m;
	int done; /* atomic */
};

static void *do_free(void *arg)
{
	struct freeing *f = arg;

	dev->ops->free(dev, f->m);
	__atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

struct writing {
	struct tier_dmem *m;
	void *src;
	int rc;
};

static void *do_write(void *arg)
{
	struct writing *w = arg;

	w->rc = dev->ops->write(dev, w->m, w->src, MiB, 0);
	return NULL;
}

static uint64_t held_now(void)
{
	uint64_t f = 0, t = 0, h = 0;

	dev->ops->meminfo(dev, &f, &t, &h);
	return h;
}

/* Until held_now() is @want (bounded: the freer looks every 200 ms). */
static bool held_becomes(uint64_t want)
{
	for (int i = 0; i < 2000; i++) {
		dev->ops->drain(dev);
		if (held_now() == want)
			return true;
		usleep(5000);
	}
	return false;
}

/*
 * Defects 2 and 4 with issue 10's rule: a read export is a private
 * snapshot, a write export is detached from its buffer when its lease
 * ends, and what a handle mapped is freed only once the process that
 * exported says it closed it, or is gone (here: a child standing in for
 * the importer).
 */
static void check_export_lifetimes(void)
{
	unsigned char *a = malloc(3 * MiB), *b = malloc(3 * MiB);
	struct tfs_ioc_export ex;
	struct tier_dexp *x = NULL;
	struct tier_dmem *m = NULL;
	uint64_t base;
	void *before;
	pid_t child;
	int rc;

	if (!a || !b)
		goto out;
	fill(a, 3 * MiB, 77);
	rc = dev->ops->alloc(dev, 3 * MiB - 5, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (rc)
		goto out;
	rc = dev->ops->write(dev, m, a, 3 * MiB - 5, 0);
	CHECK(rc == 0, "write: %d", rc);
	dev->ops->drain(dev);
	base = held_now();
	CHECK(dev->ops->read_snapshots, "cuda read exports are not snapshots");

	child = fork();
	if (!child) {
		pause();
		_exit(0);
	}
	/* A read export holds a block of its own... */
	memset(&ex, 0, sizeof(ex));
	rc = dev->ops->export(dev, m, false, 0, 0, &ex, &x);
	CHECK(rc == 0 && x && !x->writable, "read export: %d", rc);
	CHECK(held_now() == base + 4 * MiB, "a snapshot holds %llu bytes",
	      (unsigned long long)(held_now() - base));
	/* ...which stays while its process lives after the lease ends. */
	if (!rc) {
		x->pid = child;
		x->unmapped = false;
		dev->ops->unexport(dev, x);
	}
	dev->ops->drain(dev);
	usleep(300 * 1000);
	CHECK(held_now() == base + 4 * MiB,
	      "a snapshot was freed while its process lives");

	/* A write export maps the buffer; at its end the buffer moves. */
	before = dptr(m);
	rc = dev->ops->export(dev, m, true, 0, 0, &ex, &x);
	CHECK(rc == 0 && x && x->writable, "write export: %d", rc);
	if (!rc) {
		x->pid = child;
		x->unmapped = false;
		dev->ops->unexport(dev, x);
	}
	CHECK(dptr(m) != before, "a write export was not detached");
	memset(b, 0, 3 * MiB);
	rc = dev->ops->read(dev, m, b, 3 * MiB - 5, 0);
	CHECK(rc == 0 && !memcmp(a, b, 3 * MiB - 5),
	      "the detached buffer lost its bytes: %d", rc);
	CHECK(held_now() == base + 8 * MiB, "held %llu over the buffer",
	      (unsigned long long)(held_now() - base));

	/* The process goes: both blocks go. */
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	CHECK(held_becomes(base), "parked blocks outlived their process: %llu",
	      (unsigned long long)(held_now() - base));

	/* Said unmapped (libtierfs): freed at once, nothing detached. */
	rc = dev->ops->export(dev, m, false, 0, 0, &ex, &x);
	if (!rc) {
		x->pid = getpid();
		x->unmapped = true;
		dev->ops->unexport(dev, x);
	}
	before = dptr(m);
	rc |= dev->ops->export(dev, m, true, 0, 0, &ex, &x);
	if (!rc) {
		x->pid = getpid();
		x->unmapped = true;
		dev->ops->unexport(dev, x);
	}
	dev->ops->drain(dev);
	CHECK(rc == 0 && held_now() == base && dptr(m) == before,
	      "an unmapped release: rc %d, held %llu over, moved %d", rc,
	      (unsigned long long)(held_now() - base), dptr(m) != before);
	dev->ops->free(dev, m);
out:
	free(a);
	free(b);
}

/* A host function that holds its stream until released. */
static int stream_released; /* atomic */

static void CUDART_CB hold_fn(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stream_released, __ATOMIC_ACQUIRE))
		usleep(1000);
}

/*
 * Defect 6: cudaFree waits for the whole device, and the store frees under
 * a buffer lock. With a stream of this process held busy (by a host
 * function, on a GPU as on the fake), free must still return at once.
 */
static void check_free_async(void)
{
	struct tier_dmem *idle = NULL;
	struct freeing f = { 0 };
	cudaStream_t busy = NULL;
	pthread_t tf;
	int rc, i;

	rc = dev->ops->alloc(dev, MiB, &idle);
	CHECK(rc == 0, "alloc: %d", rc);
	if (rc)
		return;
	if (cudaSetDevice(cfg0.device.gpu) ||
	    cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking) ||
	    cudaLaunchHostFunc(busy, hold_fn, NULL)) {
		CHECK(0, "a busy stream: %s", cudaGetErrorName(cudaGetLastError()));
		dev->ops->free(dev, idle);
		return;
	}
	__atomic_store_n(&stream_released, 0, __ATOMIC_RELEASE);
	f.m = idle;
	pthread_create(&tf, NULL, do_free, &f);
	for (i = 0; i < 5000 && !__atomic_load_n(&f.done, __ATOMIC_ACQUIRE);
	     i++)
		usleep(1000);
	CHECK(__atomic_load_n(&f.done, __ATOMIC_ACQUIRE),
	      "free waited while a stream was busy");
	__atomic_store_n(&stream_released, 1, __ATOMIC_RELEASE);
	pthread_join(tf, NULL);
	cudaStreamSynchronize(busy);
	cudaStreamDestroy(busy);
	dev->ops->drain(dev);
}

/*
 * More copies run at once than there were slots (4, once): with the fake's
 * streams held, twelve writers of page-locked memory must all have their
 * copies queued, none waiting for a slot.
 */
static void check_many_copies(void)
{
	enum { N = 12 };
	struct writing w[N];
	pthread_t t[N];
	unsigned long before;
	int i, n = 0, rc;

	if (!tfs_mock_hold_streams || !tfs_mock_registered_copies) {
		skip_check("needs the fake runtime to hold its streams");
		return;
	}
	memset(w, 0, sizeof(w));
	for (i = 0; i < N; i++) {
		w[i].src = chunk_map(MiB);
		rc = dev->ops->alloc(dev, MiB, &w[i].m);
		CHECK(rc == 0, "alloc: %d", rc);
		if (rc || !w[i].src || chunk_register(w[i].src, MiB))
			goto out;
		n = i + 1;
	}
	tfs_mock_hold_streams(1);
	before = tfs_mock_registered_copies();
	for (i = 0; i < N; i++)
		pthread_create(&t[i], NULL, do_write, &w[i]);
	for (i = 0; i < 5000 && tfs_mock_registered_copies() - before < N; i++)
		usleep(1000);
	CHECK(tfs_mock_registered_copies() - before == N,
	      "%lu of %d copies queued at once: the rest wait for a slot",
	      tfs_mock_registered_copies() - before, N);
	tfs_mock_hold_streams(0);
	for (i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].rc == 0, "write %d: %d", i, w[i].rc);
	}
out:
	for (i = 0; i < N; i++) {
		if (i < n)
			dev->ops->host_unregister(dev, w[i].src, MiB);
		if (w[i].m)
			dev->ops->free(dev, w[i].m);
		if (w[i].src)
			munmap(w[i].src, MiB);
	}
}

/*
 * Many ranges, registered and unregistered in an interleaved order: each
 * page must stay found exactly while it is registered, from its start and
 * from inside it.
 */
static void check_table(void)
{
	enum { N = 300, PG = 4096 };
	struct tier_dmem *m = NULL;
	unsigned char *p;
	unsigned long before;
	int rc, i, want, bad = 0;

	p = chunk_map((size_t)N * PG);
	rc = dev->ops->alloc(dev, PG, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!p || rc)
		goto out;
	for (i = 0; i < N; i++)
		if (chunk_register(p + (size_t)i * PG, PG))
			goto out;
	for (i = 0; i < N; i += 2)
		dev->ops->host_unregister(dev, p + (size_t)i * PG, PG);
	for (i = 0; i < N; i += 3)
		if (!(i & 1) && chunk_register(p + (size_t)i * PG, PG))
			goto out;
	for (i = 0; i < N; i++) {
		size_t in = (size_t)(i % 7) * 64;

		before = direct_copies();
		rc = dev->ops->write(dev, m, p + (size_t)i * PG + in, 64, 0);
		want = (i & 1) || i % 3 == 0;
		if (rc || (int)(direct_copies() - before) != want)
			bad++;
	}
	CHECK(!bad, "%d of %d pages took the wrong path", bad, N);
	/* Across two registered neighbours: not inside one range. */
	before = direct_copies();
	rc = dev->ops->write(dev, m, p + PG - 32, 64, 0);
	CHECK(rc == 0 && direct_copies() == before,
	      "a copy across two ranges went direct");
	for (i = 0; i < N; i++)
		dev->ops->host_unregister(dev, p + (size_t)i * PG, PG);
	before = direct_copies();
	rc = dev->ops->write(dev, m, p + PG, 64, 0);
	CHECK(rc == 0 && direct_copies() == before, "after the last unregister");
out:
	if (m)
		dev->ops->free(dev, m);
	if (p)
		munmap(p, (size_t)N * PG);
}

/*
 * Which path a copy takes: inside a registered range directly (from its
 * start or not: a slab holds many chunks), everything else (pageable,
 * past its end, after unregister) staged; failures on the direct path.
 */
static void check_paths(void)
{
	const size_t chunk = 1u << 20;
	struct tier_dmem *m = NULL;
	unsigned char *a, *b, *pg;
	unsigned long before;
	int rc;

	a = chunk_map(2 * chunk);
	b = chunk_map(chunk);
	pg = malloc(2 * chunk);
	rc = dev->ops->alloc(dev, 2 * chunk, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!a || !b || !pg || rc)
		goto out;
	/* a's first chunk and b registered; a's second chunk not. */
	if (chunk_register(a, chunk) || chunk_register(b, chunk))
		goto out;

	before = direct_copies();
	rc = copy_pair(m, a, b, chunk, 1);
	CHECK(rc == 0, "direct round trip: %d", rc);
	rc = copy_pair(m, a, b, chunk - 4097, 2);
	CHECK(rc == 0, "direct round trip, part of a chunk: %d", rc);
	rc = copy_pair(m, a + 4096, b + 8192, chunk - 8192, 3);
	CHECK(rc == 0, "middle of a registered range: %d", rc);
	CHECK(direct_copies() - before == 6,
	      "registered ranges: %lu direct copies, want 6",
	      direct_copies() - before);

	before = direct_copies();
	rc = copy_pair(m, pg, pg + chunk, chunk, 3);
	CHECK(rc == 0, "pageable round trip: %d", rc);
	rc = copy_pair(m, a, pg, 2 * chunk, 5);
	CHECK(rc == 0, "past the registered chunk: %d", rc);
	CHECK(direct_copies() == before,
	      "unregistered memory: %lu direct copies, want none",
	      direct_copies() - before);

	/* Twice is refused and changes nothing; unknown memory is ignored. */
	rc = dev->ops->host_register(dev, a, chunk);
	CHECK(rc == -EEXIST, "second register: %d", rc);
	dev->ops->host_unregister(dev, a + chunk, chunk);
	dev->ops->host_unregister(dev, pg, chunk);

	/* Unregistered while idle: staged from then on, bytes intact. */
	dev->ops->host_unregister(dev, b, chunk);
	before = direct_copies();
	rc = copy_pair(m, a, b, chunk, 6);
	CHECK(rc == 0, "after unregister: %d", rc);
	CHECK(direct_copies() - before == 1,
	      "after unregister: %lu direct copies, want 1 (a only)",
	      direct_copies() - before);
	CHECK(chunk_register(b, chunk) == 0, "register again");

	dev->ops->host_unregister(dev, a, chunk);
	dev->ops->host_unregister(dev, b, chunk);
out:
	if (m)
		dev->ops->free(dev, m);
	if (a)
		munmap(a, 2 * chunk);
	if (b)
		munmap(b, chunk);
	free(pg);
}

/*
 * What only the fake can inject: a register the runtime refuses leaves the
 * memory staged, and copies refused when queued, more than there are
 * slots, are each -EIO without failing the device (a slot leaked would
 * hang the next copy).
 */
static void check_refused(void)
{
	const size_t chunk = 1u << 20;
	struct tier_dmem *m = NULL;
	unsigned char *a, *b, *pg;
	unsigned long before;
	int rc, i;

	if (!tfs_mock_fail_next_register || !tfs_mock_fail_next_copy) {
		skip_check("needs the fake runtime's fault injection");
		return;
	}
	a = chunk_map(chunk);
	b = chunk_map(chunk);
	pg = malloc(chunk);
	rc = dev->ops->alloc(dev, 2 * chunk, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!a || !b || !pg || rc)
		goto out;
	if (chunk_register(a, chunk) || chunk_register(b, chunk))
		goto out;
	if (tfs_mock_fail_next_register) {
		unsigned char *c = chunk_map(chunk);

		tfs_mock_fail_next_register();
		rc = c ? dev->ops->host_register(dev, c, chunk) : -ENOMEM;
		CHECK(rc == -ENOMEM, "register failing: %d", rc);
		before = direct_copies();
		rc = c ? copy_pair(m, c, b, chunk, 7) : -ENOMEM;
		CHECK(rc == 0, "copy after a failed register: %d", rc);
		CHECK(direct_copies() - before == 1,
		      "failed register: %lu direct copies, want 1",
		      direct_copies() - before);
		if (c) {
			dev->ops->host_unregister(dev, c, chunk);
			munmap(c, chunk);
		}
	}

	/* Copies refused when queued, more than there are slots: each is
	 * -EIO, and a slot leaked would hang the next copy. */
	for (i = 0; tfs_mock_fail_next_copy && i < 12; i++) {
		tfs_mock_fail_next_copy();
		rc = i & 1 ? dev->ops->read(dev, m, i & 2 ? b : pg, chunk, 0) :
			     dev->ops->write(dev, m, i & 2 ? a : pg, chunk, 0);
		CHECK(rc == -EIO, "%s %s failing when queued: %d",
		      i & 2 ? "direct" : "staged", i & 1 ? "read" : "write",
		      rc);
	}
	CHECK(!tier_dev_failed(dev), "a refused copy failed the device");
	rc = copy_pair(m, a, b, chunk, 8);
	CHECK(rc == 0, "direct round trip after failures: %d", rc);

	dev->ops->host_unregister(dev, a, chunk);
	dev->ops->host_unregister(dev, b, chunk);
out:
	if (m)
		dev->ops->free(dev, m);
	if (a)
		munmap(a, chunk);
	if (b)
		munmap(b, chunk);
	free(pg);
}

/*
 * Defect 3, last because it poisons the context for good: a copy that
 * fails when it runs marks the device failed, logs one error line, and
 * every slot after fails fast without a single CUDA call.
 */
static void check_sticky(void)
{
	struct tier_dmem *m = NULL, *m2 = NULL;
	struct tfs_ioc_export ex;
	struct tier_dexp *x = NULL;
	unsigned char *buf = malloc(3 * MiB);
	unsigned long calls;
	int rc, errs;

	if (!tfs_mock_fail_next_copy_async) {
		skip_check("needs the fake runtime to break the context");
		goto out;
	}
	if (!buf)
		goto out;
	rc = dev->ops->alloc(dev, 3 * MiB, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (rc)
		goto out;
	CHECK(!tier_dev_failed(dev), "failed before any error");
	errs = __atomic_load_n(&error_lines, __ATOMIC_RELAXED);
	tfs_mock_fail_next_copy_async();
	rc = dev->ops->write(dev, m, buf, 3 * MiB, 0);
	CHECK(rc == -EIO, "write failing when run: %d", rc);
	CHECK(tier_dev_failed(dev), "a sticky error did not fail the device");

	calls = tfs_mock_calls();
	rc = dev->ops->read(dev, m, buf, MiB, 0);
	CHECK(rc == -EIO, "read after: %d", rc);
	rc = dev->ops->write(dev, m, buf, MiB, 0);
	CHECK(rc == -EIO, "write after: %d", rc);
	rc = dev->ops->zero(dev, m, MiB, 0);
	CHECK(rc == -EIO, "zero after: %d", rc);
	rc = dev->ops->alloc(dev, MiB, &m2);
	CHECK(rc == -ENODEV && !m2, "alloc after: %d", rc);
	memset(&ex, 0, sizeof(ex));
	rc = dev->ops->export(dev, m, false, 0, 0, &ex, &x);
	CHECK(rc == -ENODEV, "export after: %d", rc);
	rc = dev->ops->host_register(dev, buf, MiB);
	CHECK(rc == -ENODEV, "host_register after: %d", rc);
	dev->ops->free(dev, m);
	m = NULL;
	CHECK(tfs_mock_calls() == calls,
	      "%lu CUDA calls after the device failed",
	      tfs_mock_calls() - calls);
	CHECK(__atomic_load_n(&error_lines, __ATOMIC_RELAXED) - errs == 1,
	      "%d error lines for one failed device, want 1",
	      __atomic_load_n(&error_lines, __ATOMIC_RELAXED) - errs);
out:
	if (m)
		dev->ops->free(dev, m);
	free(buf);
}

/*
 * With two GPUs or more: a second instance on another GPU, its own UUID,
 * and copies between the two both ways, byte-identical, including an
 * offset and a length that are not whole blocks. Peer access is what the
 * hardware (or TFS_MOCK_PEER) says; the copy works either way.
 */
static void check_peer(void)
{
	const size_t len = 5 * MiB + 12345, off = 4097;
	struct tfs_config cfg = cfg0;
	uint8_t u0[16], u1[16], zero[16] = { 0 };
	struct tier_dmem *a = NULL, *b = NULL;
	unsigned char *x, *y;
	struct tier_dev *other;
	char err[256] = "";
	int n, rc;

	n = tier_dev_cuda_ops.count(&cfg);
	if (n < 2) {
		skip_check("one GPU: no copies between GPUs");
		return;
	}
	cfg.device.gpu = cfg0.device.gpu ? 0 : 1;
	rc = tier_dev_cuda_ops.init(&other, &cfg, err, sizeof(err));
	CHECK(rc == 0, "init gpu %d: %d (%s)", cfg.device.gpu, rc, err);
	if (rc)
		return;
	tier_dev_uuid(dev, u0);
	tier_dev_uuid(other, u1);
	CHECK(memcmp(u0, u1, 16) && memcmp(u0, zero, 16) &&
		      memcmp(u1, zero, 16),
	      "two GPUs with one UUID, or a zero one");
	printf("# gpu %d -> gpu %d: peer access %s\n", cfg0.device.gpu,
	       cfg.device.gpu,
	       tier_dev_can_peer(dev, other) ? "yes" : "no");
	CHECK(tier_dev_can_peer(dev, other) == tier_dev_can_peer(dev, other),
	      "can_peer changed its answer");
	x = malloc(len + off);
	y = malloc(len + off);
	CHECK(x && y, "malloc");
	rc = dev->ops->alloc(dev, len + off, &a);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!rc)
		rc = other->ops->alloc(other, len + off, &b);
	CHECK(rc == 0, "alloc on the other gpu: %d", rc);
	if (rc || !x || !y)
		goto out;
	fill(x, len + off, 77);
	rc = dev->ops->write(dev, a, x, len + off, 0);
	CHECK(rc == 0, "write: %d", rc);
	rc = other->ops->zero(other, b, len + off, 0);
	CHECK(rc == 0, "zero: %d", rc);
	rc = dev->ops->copy_peer(dev, a, other, b, len, off);
	CHECK(rc == 0, "copy_peer: %d", rc);
	rc = other->ops->read(other, b, y, len + off, 0);
	CHECK(rc == 0, "read: %d", rc);
	memset(x, 0, off);
	CHECK(!memcmp(x, y, len + off), "bytes differ after a peer copy");
	/* And back, the whole of it, onto different bytes. */
	fill(y, len + off, 78);
	rc = dev->ops->write(dev, a, y, len + off, 0);
	CHECK(rc == 0, "write: %d", rc);
	rc = other->ops->copy_peer(other, b, dev, a, len + off, 0);
	CHECK(rc == 0, "copy_peer back: %d", rc);
	rc = dev->ops->read(dev, a, y, len + off, 0);
	CHECK(rc == 0 && !memcmp(x, y, len + off),
	      "bytes differ after a peer copy back: %d", rc);
	rc = dev->ops->copy_peer(dev, a, other, b, 2, len + off - 1);
	CHECK(rc == -EINVAL, "copy_peer past the end: %d", rc);
	/*
	 * Host memory one instance page-locked is page-locked for the
	 * other's copies too (portable): the store registers its pool with
	 * its default GPU only, and every GPU copies from it.
	 */
	{
		unsigned char *h = chunk_map(4 * MiB);
		unsigned long direct;

		if (h && !chunk_register(h, 4 * MiB)) {
			fill(h, 4 * MiB, 79);
			direct = direct_copies();
			rc = other->ops->write(other, b, h, 4 * MiB, 0);
			CHECK(rc == 0, "write from another GPU's range: %d",
			      rc);
			memset(h, 0, 4 * MiB);
			rc = other->ops->read(other, b, h, 4 * MiB, 0);
			CHECK(rc == 0, "read into another GPU's range: %d", rc);
			memcpy(y, h, 4 * MiB);
			fill(h, 4 * MiB, 79);
			CHECK(!memcmp(y, h, 4 * MiB),
			      "bytes differ through another GPU's range");
			CHECK(direct_copies() >= direct + 2,
			      "another GPU's copies of a registered range were staged");
			dev->ops->host_unregister(dev, h, 4 * MiB);
		}
		if (h)
			munmap(h, 4 * MiB);
	}
	CHECK(!tier_dev_failed(dev) && !tier_dev_failed(other),
	      "a device failed");
out:
	if (a)
		dev->ops->free(dev, a);
	if (b)
		other->ops->free(other, b);
	free(x);
	free(y);
	other->ops->destroy(other);
}

/*
 * Readers of the same bytes share one snapshot, each user's share of it
 * counted once, until the bytes change; the last reference frees it; a
 * reference whose process may still map it is kept until that process is
 * gone, and so is a detached write export's block (export_held).
 */
static void check_snapshots(void)
{
	unsigned char *a = malloc(3 * MiB);
	struct tfs_ioc_export e1, e2, e3;
	struct tier_dexp *x1 = NULL, *x2 = NULL, *x3 = NULL;
	struct tier_dmem *m = NULL;
	const uint64_t g4 = 4 * MiB;
	pid_t child = -1;
	int rc, i;

	if (!a)
		goto out;
	fill(a, 3 * MiB, 91);
	rc = dev->ops->alloc(dev, 3 * MiB, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (rc)
		goto out;
	rc = dev->ops->write(dev, m, a, 3 * MiB, 0);
	CHECK(rc == 0, "write: %d", rc);
	CHECK(dev->ops->export_cost(dev, m) == g4, "a first reader costs %llu",
	      (unsigned long long)dev->ops->export_cost(dev, m));
	memset(&e1, 0, sizeof(e1));
	memset(&e2, 0, sizeof(e2));
	memset(&e3, 0, sizeof(e3));
	rc = dev->ops->export(dev, m, false, 1000, 1000, &e1, &x1);
	CHECK(rc == 0, "read export: %d", rc);
	CHECK(dev->ops->export_cost(dev, m) == 0, "a second reader costs %llu",
	      (unsigned long long)dev->ops->export_cost(dev, m));
	rc = dev->ops->export(dev, m, false, 1001, 1001, &e2, &x2);
	CHECK(rc == 0, "second read export: %d", rc);
	CHECK(!memcmp(e1.handle, e2.handle, sizeof(e1.handle)),
	      "two readers of the same bytes got two snapshots");
	CHECK(dev->ops->export_held(dev, TIER_DEV_ALL_USERS) == g4 &&
		      dev->ops->export_held(dev, 1000) == g4 &&
		      dev->ops->export_held(dev, 1001) == g4 &&
		      dev->ops->export_held(dev, 1002) == 0,
	      "export_held %llu, for 1000 %llu",
	      (unsigned long long)dev->ops->export_held(dev, TIER_DEV_ALL_USERS),
	      (unsigned long long)dev->ops->export_held(dev, 1000));
	/* New bytes: a snapshot of their own; the old one stays. */
	a[5] ^= 1;
	rc = dev->ops->write(dev, m, a, 3 * MiB, 0);
	CHECK(rc == 0, "write: %d", rc);
	rc = dev->ops->export(dev, m, false, 1000, 1000, &e3, &x3);
	CHECK(rc == 0, "third read export: %d", rc);
	CHECK(memcmp(e1.handle, e3.handle, sizeof(e1.handle)),
	      "a snapshot of old bytes was shared after a write");
	CHECK(dev->ops->export_held(dev, TIER_DEV_ALL_USERS) == 2 * g4 &&
		      dev->ops->export_held(dev, 1000) == 2 * g4 &&
		      dev->ops->export_held(dev, 1001) == g4,
	      "export_held %llu after a write",
	      (unsigned long long)dev->ops->export_held(dev, TIER_DEV_ALL_USERS));
	/* The last reference goes: freed. */
	if (x1) {
		x1->unmapped = true;
		dev->ops->unexport(dev, x1);
	}
	CHECK(dev->ops->export_held(dev, TIER_DEV_ALL_USERS) == 2 * g4,
	      "a snapshot went with one of its two readers");
	if (x2) {
		x2->unmapped = true;
		dev->ops->unexport(dev, x2);
	}
	CHECK(dev->ops->export_held(dev, TIER_DEV_ALL_USERS) == g4,
	      "a snapshot outlived its last reader: %llu",
	      (unsigned long long)dev->ops->export_held(dev, TIER_DEV_ALL_USERS));
	/* A process that may still map it keeps it, and the block of a
	 * detached write export, until it is gone. */
	child = fork();
	if (!child) {
		pause();
		_exit(0);
	}
	if (x3) {
		x3->pid = child;
		x3->unmapped = false;
		dev->ops->unexport(dev, x3);
	}
	rc = dev->ops->export(dev, m, true, 1001, 1001, &e1, &x1);
	CHECK(rc == 0, "write export: %d", rc);
	if (!rc) {
		x1->pid = child;
		x1->unmapped = false;
		dev->ops->unexport(dev, x1);
	}
	usleep(300 * 1000);
	CHECK(dev->ops->export_held(dev, TIER_DEV_ALL_USERS) == 2 * g4 &&
		      dev->ops->export_held(dev, 1001) == g4 &&
		      dev->ops->export_held(dev, 1000) == g4,
	      "kept for a live process: %llu, 1000 %llu, 1001 %llu",
	      (unsigned long long)dev->ops->export_held(dev, TIER_DEV_ALL_USERS),
	      (unsigned long long)dev->ops->export_held(dev, 1000),
	      (unsigned long long)dev->ops->export_held(dev, 1001));
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	for (i = 0; i < 400 && dev->ops->export_held(dev, TIER_DEV_ALL_USERS);
	     i++)
		usleep(5000);
	CHECK(dev->ops->export_held(dev, TIER_DEV_ALL_USERS) == 0,
	      "kept after its process went: %llu",
	      (unsigned long long)dev->ops->export_held(dev, TIER_DEV_ALL_USERS));
	{
		unsigned char *b = malloc(3 * MiB);

		rc = b ? dev->ops->read(dev, m, b, 3 * MiB, 0) : -ENOMEM;
		CHECK(rc == 0 && !memcmp(a, b, 3 * MiB),
		      "the buffer lost its bytes: %d", rc);
		free(b);
	}
out:
	if (m)
		dev->ops->free(dev, m);
	dev->ops->drain(dev);
	free(a);
}

/* Whether [p, p + len) is mapped (mincore says ENOMEM where not). */
static bool mapped(void *p, size_t len)
{
	unsigned char v[1];

	return !mincore(p, 4096, v) ||
	       !mincore((char *)p + len - 4096, 4096, v);
}

/*
 * The pool's slabs are page-locked and given back on the backend's own
 * thread: register_async returns at once, copies go direct once the
 * pinner has run, and release unregisters and unmaps.
 */
static void check_async_pin(void)
{
	const size_t len = 8 * MiB;
	struct cuda_dev *d = (struct cuda_dev *)dev;
	struct tier_dmem *m = NULL;
	unsigned long before;
	unsigned char *p;
	int rc;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	if (p == MAP_FAILED)
		return;
	rc = dev->ops->alloc(dev, MiB, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	CHECK(d->pinner_started, "no pinner thread");
	/* However long cudaHostRegister takes, the caller does not wait
	 * (the fake can make it last; a GPU cannot be made to). */
	if (tfs_mock_hold_registers)
		tfs_mock_hold_registers(1);
	rc = dev->ops->host_register_async(dev, p, len);
	CHECK(rc == 0, "host_register_async: %d", rc);
	if (tfs_mock_hold_registers) {
		CHECK(!runtime_locked(p, len),
		      "page-locked while cudaHostRegister was held");
		tfs_mock_hold_registers(0);
	}
	/* Written into while the pinner works: nothing is lost. */
	fill(p, MiB, 5);
	cuda_pins_wait(d);
	CHECK(runtime_locked(p, len), "not page-locked after the pinner ran");
	before = direct_copies();
	rc = m ? copy_pair(m, p, p + MiB, MiB, 6) : -ENOMEM;
	CHECK(rc == 0 && direct_copies() - before == 2,
	      "copies after an async register: %d, %lu direct", rc,
	      direct_copies() - before);
	dev->ops->host_release(dev, p, len);
	cuda_pins_wait(d);
	CHECK(!mapped(p, len), "host_release left the range mapped");
	if (m)
		dev->ops->free(dev, m);
}

/* The policy of the mapping at @p in /proc/self/numa_maps, or "". */
static void numa_policy(const void *p, char *out, size_t len)
{
	char line[512], want[32];
	FILE *f = fopen("/proc/self/numa_maps", "r");

	out[0] = '\0';
	snprintf(want, sizeof(want), "%lx ", (unsigned long)(uintptr_t)p);
	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, want, strlen(want)))
			continue;
		sscanf(line + strlen(want), "%31s", out);
		(void)len;
		break;
	}
	if (f)
		fclose(f);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 +
	       (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/*
 * Pinned host memory goes to the GPU's NUMA node (sysfs numa_node, or
 * TFS_CUDA_NUMA_NODE), set before its first touch. And the figure: a
 * range placed and faulted in on several threads, then registered, next
 * to cudaHostAlloc of the same size touched by one thread.
 */
static void check_numa(void)
{
	struct cuda_dev *d = (struct cuda_dev *)dev;
	size_t len = (size_t)(getenv("TFS_BC_POOL_MIB") ?
				      atoi(getenv("TFS_BC_POOL_MIB")) : 256) *
		     MiB;
	struct timespec t0;
	char pol[40], want[40];
	double reg_ms, alloc_ms;
	void *h = NULL;
	char *p;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	if (p == MAP_FAILED)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(dev->ops->host_register(dev, p, len) == 0, "host_register");
	reg_ms = ms_since(&t0);
	numa_policy(p, pol, sizeof(pol));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (cudaHostAlloc(&h, len, cudaHostAllocDefault) == cudaSuccess) {
		memset(h, 0, len);
		alloc_ms = ms_since(&t0);
		cudaFreeHost(h);
	} else {
		(void)cudaGetLastError();
		alloc_ms = -1;
	}
	printf("# figure: pool start-up of %zu MiB on node %d: placed, faulted in in parallel and registered in %.1f ms; cudaHostAlloc and one thread's touch %.1f ms\n",
	       len / MiB, d->numa_node, reg_ms, alloc_ms);
	dev->ops->host_unregister(dev, p, len);
	munmap(p, len);
	if (d->numa_node < 0) {
		skip_check("the GPU's NUMA node is unknown (sysfs says -1)");
		return;
	}
	snprintf(want, sizeof(want), "prefer:%d", d->numa_node);
	CHECK(!strcmp(pol, want), "registered memory has policy \"%s\", want %s",
	      pol, want);
}

/* cudaHostRegister faults in each page itself, one thread; the backend
 * does it first, in parallel. Only the fake counts it. */
static void check_pretouch(void)
{
	const size_t len = 64 * MiB;
	unsigned long cold;
	char *p;

	if (!tfs_mock_cold_registers) {
		skip_check("needs the fake runtime to see untouched pages");
		return;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	if (p == MAP_FAILED)
		return;
	cold = tfs_mock_cold_registers();
	CHECK(dev->ops->host_register(dev, p, len) == 0, "host_register");
	CHECK(tfs_mock_cold_registers() == cold,
	      "cudaHostRegister found pages not yet faulted in");
	dev->ops->host_unregister(dev, p, len);
	munmap(p, len);
}

static void check_bad_gpu(void)
{
	struct tfs_config cfg = cfg0;
	struct tier_dev *bad;
	char e2[256];
	int rc;

	cfg.device.gpu = 999;
	rc = tier_dev_cuda_ops.init(&bad, &cfg, e2, sizeof(e2));
	CHECK(rc == -ENXIO, "init on gpu 999: %d (%s)", rc, e2);
}

static void check_threads(void)
{
	pthread_t t[8];
	int i;

	for (i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	for (i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
}

static struct tier_dev_info info;

static void check_export(void)
{
	struct tfs_ioc_export ex;
	struct tier_dmem *m;
	int rc;

	rc = dev->ops->alloc(dev, 1u << 20, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!rc) {
		struct tier_dexp *x = NULL;

		memset(&ex, 0, sizeof(ex));
		rc = dev->ops->export(dev, m, true, 0, 0, &ex, &x);
		CHECK(rc == 0 && ex.handle_type == TFS_HANDLE_CUDA_IPC &&
			      ex.offset == 0 &&
			      !memcmp(ex.uuid, info.uuid, sizeof(ex.uuid)),
		      "export: %d type %u", rc, ex.handle_type);
		if (!rc)
			dev->ops->unexport(dev, x);
		dev->ops->free(dev, m);
	}
}

/*
 * Sparse allocations (driver VMM): address space for the whole length,
 * memory for the granules populated only; holes read as zeroes (the zero
 * granule, read-only), a write into one is refused before it reaches the
 * device, an export moves the buffer into one cudaMalloc'd block first,
 * and free gives every granule back.
 */
static void check_sparse(void)
{
	const size_t G = CUDA_GRANULE, len = 4 * G + 4096;
	unsigned char *src = malloc(G), *buf = malloc(len);
	struct tier_dmem *m = NULL;
	struct tier_dexp *x = NULL;
	struct tfs_ioc_export ex;
	uint64_t held0, held1;
	size_t i, bad = 0;
	int rc;

	if (!info.sparse) {
		skip_check("no sparse allocations: the driver or the GPU lacks virtual memory management");
		goto out;
	}
	CHECK(src && buf, "malloc");
	if (!src || !buf)
		goto out;
	fill(src, G, 7);
	held0 = held_now();
	rc = dev->ops->alloc_sparse(dev, len, &m);
	CHECK(rc == 0 && m && m->granted == 0 && m->len == len,
	      "alloc_sparse: %d, granted %zu", rc, m ? m->granted : 0);
	if (rc)
		goto out;
	/* The GPU's zero granule, made by its first sparse allocation. */
	held1 = held_now();
	CHECK(held1 == held0 || held1 == held0 + G, "held %llu, before %llu",
	      (unsigned long long)held1, (unsigned long long)held0);
	rc = dev->ops->write(dev, m, src, 4096, G + 100);
	CHECK(rc == -EINVAL, "a write into a hole: %d, want -EINVAL", rc);
	rc = dev->ops->zero(dev, m, 4096, 3 * G);
	CHECK(rc == -EINVAL, "zeroing a hole: %d, want -EINVAL", rc);
	rc = dev->ops->populate(dev, m, G + 100, 4096);
	CHECK(rc == 0 && m->granted == G, "populate one granule: %d, granted %zu",
	      rc, m->granted);
	rc = dev->ops->write(dev, m, src, 4096, G + 100);
	CHECK(rc == 0, "a write into the populated granule: %d", rc);
	memset(buf, 0x5a, len);
	rc = dev->ops->read(dev, m, buf, len, 0);
	CHECK(rc == 0, "read of the whole, holes included: %d", rc);
	for (i = 0; i < len; i++)
		bad += buf[i] != (i >= G + 100 && i < G + 100 + 4096 ?
					  src[i - G - 100] :
					  0);
	CHECK(!bad, "%zu bytes not as written or zero", bad);
	rc = dev->ops->populate(dev, m, 3 * G, len - 3 * G);
	CHECK(rc == 0 && m->granted == 3 * G,
	      "populate the last two granules: %d, granted %zu", rc,
	      m->granted);
	rc = dev->ops->populate(dev, m, 5 * G, 1);
	CHECK(rc == -EINVAL, "populate past the last granule: %d", rc);
	rc = dev->ops->write(dev, m, src, G, 3 * G);
	CHECK(rc == 0, "write into granule 3: %d", rc);
	CHECK(held_now() == held1 + 3 * G, "held %llu, want %llu",
	      (unsigned long long)held_now(),
	      (unsigned long long)(held1 + 3 * G));
	memset(&ex, 0, sizeof(ex));
	rc = dev->ops->export(dev, m, false, 0, 0, &ex, &x);
	CHECK(rc == -EINVAL, "an export with holes left: %d", rc);
	rc = dev->ops->populate(dev, m, 0, len);
	CHECK(rc == 0 && m->granted == 5 * G, "populate all: %d, granted %zu",
	      rc, m->granted);
	rc = dev->ops->export(dev, m, true, 0, 0, &ex, &x);
	CHECK(rc == 0 && ex.handle_type == TFS_HANDLE_CUDA_IPC,
	      "export once every granule is populated: %d", rc);
	if (!rc)
		dev->ops->unexport(dev, x);
	CHECK(m->granted == 5 * G, "granted after the export: %zu", m->granted);
	memset(buf, 0x5a, len);
	rc = dev->ops->read(dev, m, buf, len, 0);
	bad = 0;
	for (i = 0; i < len; i++) {
		unsigned char w = 0;

		if (i >= G + 100 && i < G + 100 + 4096)
			w = src[i - G - 100];
		if (i >= 3 * G && i < 4 * G)
			w = src[i - 3 * G];
		bad += buf[i] != w;
	}
	CHECK(rc == 0 && !bad, "after the export: read %d, %zu bytes wrong",
	      rc, bad);
	rc = dev->ops->write(dev, m, src, 4096, 0);
	CHECK(rc == 0, "a write anywhere once dense: %d", rc);
	dev->ops->free(dev, m);
	m = NULL;
	CHECK(held_becomes(held1), "held after free: %llu, want %llu",
	      (unsigned long long)held_now(), (unsigned long long)held1);
	CHECK(!tier_dev_failed(dev), "the device failed");
out:
	if (m)
		dev->ops->free(dev, m);
	free(src);
	free(buf);
}

/* Out of memory must be -ENOMEM and leave no sticky error behind. */
static void check_enomem(void)
{
	struct tier_dmem *m;
	size_t got = 0;
	int rc;

	rc = dev->ops->alloc(dev, (size_t)info.capacity * 2, &m);
	CHECK(rc == -ENOMEM, "alloc of twice the capacity: %d", rc);
	rc = dev->ops->alloc(dev, 4096, &m);
	CHECK(rc == 0, "alloc after ENOMEM: %d", rc);
	if (!rc) {
		got = m->len;
		dev->ops->free(dev, m);
	}
	CHECK(got == 4096, "len %zu", got);
	CHECK(!tier_dev_failed(dev), "the device failed");
}

int main(void)
{
	char err[512] = "";
	int rc;

	tfs_log_set_sink(count_sink);
	memset(&cfg0, 0, sizeof(cfg0));
	cfg0.device.gpu = getenv("TFS_GPU") ? atoi(getenv("TFS_GPU")) : 0;

	rc = tier_dev_cuda_ops.init(&dev, &cfg0, err, sizeof(err));
	if (rc) {
		if (rc >= 0 || !err[0] || strncmp(err, "cuda: ", 6) != 0) {
			fprintf(stderr, "FAIL init: rc %d, err \"%s\"\n", rc,
				err);
			return 1;
		}
		printf("1..0 # SKIP no usable GPU: %s (init returned %d: %s)\n",
		       err, rc, strerror(-rc));
		return 77;
	}
	dev->ops->info(dev, &info);
	printf("# cuda: %s, %llu MiB, %llu MiB free, %s\n", info.model,
	       (unsigned long long)(info.capacity >> 20),
	       (unsigned long long)(info.free >> 20),
	       tfs_mock_calls ? "the fake runtime" : "a real runtime");

	run_check("every allocation is its own 2 MiB block", check_granted);
	run_check("a batch of page-locked copies waits once", check_batches);
	run_check("free returns while the device is busy", check_free_async);
	run_check("many copies run at once", check_many_copies);
	run_check("export lifetimes: snapshots, detached write exports",
		  check_export_lifetimes);
	run_check("readers share a snapshot; kept while a process maps it",
		  check_snapshots);
	run_check("copies of page-locked memory go direct, the rest staged",
		  check_paths);
	run_check("refused copies and registers", check_refused);
	run_check("the table of page-locked ranges", check_table);
	run_check("the pool is page-locked on the backend's thread",
		  check_async_pin);
	run_check("pinned memory on the GPU's NUMA node", check_numa);
	run_check("pages faulted in before cudaHostRegister", check_pretouch);
	run_check("copies between GPUs", check_peer);
	run_check("init of a GPU that is not there", check_bad_gpu);
	run_check("round trips from 8 threads, staged and page-locked",
		  check_threads);
	run_check("a write export's handle", check_export);
	run_check("out of memory", check_enomem);
	run_check("sparse allocations: holes read as zeroes, writes need populate",
		  check_sparse);
	run_check("a sticky error fails the device once", check_sticky);

	dev->ops->destroy(dev);
	printf("1..%d\n", ntests);
	printf("# cuda backend on %s: %d checks failed\n", info.model,
	       failures);
	return failures ? 1 : 0;
}
