// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Exercise the cuda device backend directly, with no mount: init, then
 * alloc / write / read / zero / export on sizes around the staging chunk,
 * from several threads at once.
 *
 * Without a usable GPU, init must fail cleanly with a negative errno and one
 * line naming the CUDA error; the check prints it and exits 77 (skip).
 * Output is TAP: "1..0 # SKIP no usable GPU: ...", or one ok / not ok line.
 *
 * Host memory comes two ways, as from the store: pageable (malloc, staged)
 * and page-locked through host_register (mmap'd like pool chunks, copied
 * directly); every thread does its round trips both ways.
 *
 * Linked with tests/gpu/cuda_mock.c, it also makes copies fail, staged and
 * direct, when queued and when run: each must give -EIO and give its slot
 * back. The mock counts direct copies, so the check sees which path each
 * copy took.
 *
 *   cc -std=gnu11 -D_GNU_SOURCE -DTFS_HAVE_CUDA=1 -I include -I . \
 *      -isystem /usr/local/cuda/include tests/gpu/backend_check.c \
 *      tiers/device_cuda.c config/log.c \
 *      /usr/local/cuda/lib64/libcudart_static.a -ldl -lpthread -lrt
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "config/config.h"
#include "tiers/device.h"

/* Defined only by tests/gpu/cuda_mock.c. */
void tfs_mock_fail_next_copy(void) __attribute__((weak));
void tfs_mock_fail_next_copy_async(void) __attribute__((weak));
void tfs_mock_fail_next_register(void) __attribute__((weak));
unsigned long tfs_mock_registered_copies(void) __attribute__((weak));

/* The largest round trip, plus room for its offset. */
#define BIG ((37u << 20) + 64)

static struct tier_dev *dev;
static int failures;

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

static unsigned long direct_copies(void)
{
	return tfs_mock_registered_copies ? tfs_mock_registered_copies() : 0;
}

/* Page-aligned memory of its own mapping, like a pool chunk. */
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
 * Many ranges, registered and unregistered in an interleaved order, so that
 * the backend's table grows and removes entries between colliding ones:
 * each page must stay found exactly while it is registered.
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
		before = direct_copies();
		rc = dev->ops->write(dev, m, p + (size_t)i * PG, 64, 0);
		want = (i & 1) || i % 3 == 0;
		if (rc || (tfs_mock_registered_copies &&
			   (int)(direct_copies() - before) != want))
			bad++;
	}
	CHECK(!bad, "%d of %d pages took the wrong path", bad, N);
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
 * Which path a copy takes, with pool-sized chunks: registered chunks
 * directly, everything else (pageable, the middle of a chunk, past its
 * end, after unregister) staged; failures on the direct path.
 */
static void check_paths(void)
{
	const size_t chunk = 1u << 20;
	struct tier_dmem *m = NULL;
	unsigned char *a, *b, *pg;
	unsigned long before;
	int rc, i;

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
	CHECK(!tfs_mock_registered_copies || direct_copies() - before == 4,
	      "registered chunks: %lu direct copies, want 4",
	      direct_copies() - before);

	before = direct_copies();
	rc = copy_pair(m, pg, pg + chunk, chunk, 3);
	CHECK(rc == 0, "pageable round trip: %d", rc);
	rc = copy_pair(m, a + 4096, pg, chunk - 4096, 4);
	CHECK(rc == 0, "middle of a chunk: %d", rc);
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
	CHECK(!tfs_mock_registered_copies || direct_copies() - before == 1,
	      "after unregister: %lu direct copies, want 1 (a only)",
	      direct_copies() - before);
	CHECK(chunk_register(b, chunk) == 0, "register again");

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

	/* Failures on the direct path, more than there are slots: a slot
	 * leaked hangs the next copy. */
	for (i = 0; tfs_mock_fail_next_copy && i < 12; i++) {
		if (i % 4 < 2)
			tfs_mock_fail_next_copy();
		else
			tfs_mock_fail_next_copy_async();
		rc = i & 1 ? dev->ops->read(dev, m, b, chunk, 0) :
			     dev->ops->write(dev, m, a, chunk, 0);
		CHECK(rc == -EIO, "direct %s failing %s: %d",
		      i & 1 ? "read" : "write", i % 4 < 2 ? "queued" : "run",
		      rc);
	}
	rc = copy_pair(m, a, b, chunk, 8);
	CHECK(rc == 0, "direct round trip after failures: %d", rc);

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

int main(void)
{
	struct tier_dev_info info;
	struct tfs_ioc_export ex;
	struct tfs_config cfg;
	struct tier_dmem *m;
	pthread_t t[8];
	char err[512] = "";
	size_t got;
	int rc, i;

	memset(&cfg, 0, sizeof(cfg));
	cfg.device.gpu = getenv("TFS_GPU") ? atoi(getenv("TFS_GPU")) : 0;

	rc = tier_dev_cuda_ops.init(&dev, &cfg, err, sizeof(err));
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
	printf("# cuda: %s, %llu MiB, %llu MiB free\n", info.model,
	       (unsigned long long)(info.capacity >> 20),
	       (unsigned long long)(info.free >> 20));

	if (tfs_mock_fail_next_copy) {
		unsigned char *buf = calloc(1, 9u << 20);

		rc = dev->ops->alloc(dev, 9u << 20, &m);
		CHECK(rc == 0, "alloc: %d", rc);
		/* More failures than slots: a leaked slot hangs the next. */
		for (i = 0; !rc && i < 10; i++) {
			if (i % 4 < 2)
				tfs_mock_fail_next_copy();
			else
				tfs_mock_fail_next_copy_async();
			rc = i & 1 ? dev->ops->read(dev, m, buf, 9u << 20, 0) :
				     dev->ops->write(dev, m, buf, 9u << 20, 0);
			CHECK(rc == -EIO, "copy %d with a failure: %d", i, rc);
			rc = 0;
		}
		if (!rc) {
			rc = dev->ops->write(dev, m, buf, 9u << 20, 0);
			CHECK(rc == 0, "write after the failures: %d", rc);
			dev->ops->free(dev, m);
		}
		free(buf);
	}

	check_paths();
	check_table();

	cfg.device.gpu = 999;
	{
		struct tier_dev *bad;
		char e2[256];

		rc = tier_dev_cuda_ops.init(&bad, &cfg, e2, sizeof(e2));
		CHECK(rc == -ENXIO, "init on gpu 999: %d (%s)", rc, e2);
	}

	for (i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	for (i = 0; i < 8; i++)
		pthread_join(t[i], NULL);

	rc = dev->ops->alloc(dev, 1u << 20, &m);
	CHECK(rc == 0, "alloc: %d", rc);
	if (!rc) {
		memset(&ex, 0, sizeof(ex));
		rc = dev->ops->export(dev, m, 0, 0, &ex);
		CHECK(rc == 0 && ex.handle_type == TFS_HANDLE_CUDA_IPC &&
			      ex.offset == 0 &&
			      !memcmp(ex.uuid, info.uuid, sizeof(ex.uuid)),
		      "export: %d type %u", rc, ex.handle_type);
		dev->ops->unexport(dev, m);
		dev->ops->free(dev, m);
	}

	/* Out of memory must be -ENOMEM and leave no sticky error behind. */
	got = 0;
	rc = dev->ops->alloc(dev, (size_t)info.capacity * 2, &m);
	CHECK(rc == -ENOMEM, "alloc of twice the capacity: %d", rc);
	rc = dev->ops->alloc(dev, 4096, &m);
	CHECK(rc == 0, "alloc after ENOMEM: %d", rc);
	if (!rc) {
		got = m->len;
		dev->ops->free(dev, m);
	}
	CHECK(got == 4096, "len %zu", got);

	dev->ops->destroy(dev);
	printf("1..1\n");
	if (failures) {
		printf("not ok 1 - cuda backend on %s: %d checks failed\n",
		       info.model, failures);
		return 1;
	}
	printf("ok 1 - cuda backend on %s\n", info.model);
	return 0;
}
