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
 * Linked with tests/gpu/cuda_mock.c, it also makes copies fail: each
 * failed read or write must give -EIO and give its staging slot back.
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

#include "config/config.h"
#include "tiers/device.h"

/* Defined only by tests/gpu/cuda_mock.c. */
void tfs_mock_fail_next_copy(void) __attribute__((weak));

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

/* One round trip of @len bytes: write at @off, read back, zero a middle
 * part, read again. */
static void round_trip(size_t len, size_t off, unsigned int seed)
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
	a = malloc(len + 1);
	b = malloc(len + 1);
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
	free(a);
	free(b);
}

static void *worker(void *arg)
{
	unsigned int seed = (unsigned int)(uintptr_t)arg;
	static const size_t sizes[] = {
		1, 4095, (2u << 20) - 1, 2u << 20, (2u << 20) + 1,
		(4u << 20) + 12345, 37u << 20,
	};
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		round_trip(sizes[i], seed * 4096 + i, seed + (unsigned int)i);
	return NULL;
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
			tfs_mock_fail_next_copy();
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
