// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The device tier giving memory back, without a mount, on the sim device:
 * reclaim on request (tier_store_reclaim) and yielding to other processes
 * under [device] reserve, with TFS_SIM_CLAIM standing in for a process
 * that takes device memory; and the sim backend's ops for several GPUs
 * (UUIDs, copies between two devices).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "tiers/device.h"
#include "tiers/store.h"
#include "tap.h"

#define MiB (1024ull * 1024)

static char spill_dir[] = "/tmp/tierfs-unit-gpus.XXXXXX";
static char claim_path[256];

struct opts {
	uint64_t dev, host, reserve;
	unsigned int poll_ms;
	bool reserve_set;
	/* [device] gpus (ngpus of them, none: the default) and gpu */
	int gpus[4], gpu;
	unsigned int ngpus;
};

static struct tier_store *mk_store(const struct opts *o)
{
	struct tfs_config cfg;
	struct tier_store *s = NULL;
	char err[256];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "sim");
	cfg.device.limit = (struct cfg_size){ .bytes = o->dev };
	cfg.host.limit = (struct cfg_size){ .bytes = o->host };
	if (o->reserve_set)
		cfg.device.reserve = (struct cfg_size){ .bytes = o->reserve };
	if (o->poll_ms)
		cfg.device.poll_ms = o->poll_ms;
	cfg.device.gpus.n = o->ngpus;
	for (unsigned int i = 0; i < o->ngpus; i++)
		cfg.device.gpus.ord[i] = o->gpus[i];
	if (o->gpu) {
		char v[16];

		snprintf(v, sizeof(v), "%d", o->gpu);
		if (cfg_set(&cfg, "device", "gpu", v, err, sizeof(err)))
			printf("# device.gpu: %s\n", err);
	}
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	if (tier_store_init(&s, &cfg, "unit", err, sizeof(err)))
		printf("# store init: %s\n", err);
	cfg_free(&cfg);
	return s;
}

static uint8_t pat(int n, uint64_t off)
{
	return (uint8_t)((off / 5) ^ (uint64_t)n * 29 ^ (off >> 11));
}

static struct tier_buf *mk_file(struct tier_store *s, int n, uint64_t size)
{
	struct tier_buf *b;
	uint8_t *p = malloc(size);

	for (uint64_t i = 0; i < size; i++)
		p[i] = pat(n, i);
	if (tier_buf_new(s, &b)) {
		free(p);
		return NULL;
	}
	if (tier_buf_write(b, p, size, 0) != (ssize_t)size)
		printf("# write of file %d failed\n", n);
	tier_buf_register(b);
	free(p);
	return b;
}

static bool verify(struct tier_buf *b, int n, uint64_t size)
{
	uint8_t *got = malloc(size);
	bool ok = tier_buf_read(b, got, size, 0) == (ssize_t)size;

	for (uint64_t i = 0; ok && i < size; i++)
		ok = got[i] == pat(n, i);
	free(got);
	return ok;
}

static enum tfs_tier tier_of(struct tier_buf *b)
{
	struct tier_buf_stat st;

	tier_buf_stat(b, &st);
	return st.tier;
}

static uint64_t dev_used(struct tier_store *s)
{
	struct tier_store_stats st;

	tier_store_stats(s, &st);
	return st.tier[TFS_TIER_DEVICE].used;
}

static void set_claim(const char *text)
{
	FILE *f = fopen(claim_path, "w");

	if (!f) {
		printf("# cannot write %s\n", claim_path);
		return;
	}
	fputs(text, f);
	fclose(f);
}

/* Wait up to 10 s for the device tier to hold at most @goal bytes. */
static bool wait_used_at_most(struct tier_store *s, uint64_t goal)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 1000; i++) {
		if (dev_used(s) <= goal)
			return true;
		nanosleep(&ts, NULL);
	}
	return false;
}

static void test_reclaim_frees_coldest_first(void)
{
	struct opts o = { .dev = 64 * MiB, .host = 256 * MiB };
	struct tier_store *s = mk_store(&o);
	struct tier_store_stats st;
	struct tier_buf *b[6];
	uint64_t freed = 0;

	for (int i = 0; i < 6; i++) {
		b[i] = mk_file(s, i, 8 * MiB);
		CHECK_EQ(tier_of(b[i]), TFS_TIER_DEVICE);
	}
	CHECK_EQ(tier_store_reclaim(s, -1, 20 * MiB, &freed), 0);
	CHECK(freed >= 20 * MiB);
	CHECK(freed < 32 * MiB);
	CHECK_EQ(tier_of(b[0]), TFS_TIER_HOST);
	CHECK_EQ(tier_of(b[2]), TFS_TIER_HOST);
	CHECK_EQ(tier_of(b[3]), TFS_TIER_DEVICE);
	CHECK_EQ(dev_used(s), 48 * MiB - freed);
	tier_store_stats(s, &st);
	CHECK_EQ(st.reclaims, 1);
	CHECK_EQ(st.reclaimed_bytes, freed);

	/* More than is held: what can move, and a pinned file stays. */
	tier_buf_pin(b[5]);
	CHECK_EQ(tier_store_reclaim(s, 0, 1024 * MiB, &freed), 0);
	CHECK_EQ(freed, 16 * MiB);
	CHECK_EQ(tier_of(b[5]), TFS_TIER_DEVICE);
	CHECK_EQ(tier_store_reclaim(s, 0, MiB, &freed), 0);
	CHECK_EQ(freed, 0);
	for (int i = 0; i < 6; i++) {
		CHECK(verify(b[i], i, 8 * MiB));
		tier_buf_destroy(b[i]);
	}
	tier_store_destroy(s);
}

static void test_reclaim_names_the_gpu(void)
{
	struct opts o = { .dev = 16 * MiB, .host = 64 * MiB };
	struct tier_store *s = mk_store(&o);
	uint8_t uuid[16] = { 0xff };
	uint64_t freed = 1;

	CHECK_EQ(tier_store_default_gpu(s), 0);
	CHECK_EQ(tier_store_reclaim(s, 1, MiB, &freed), -ENXIO);
	CHECK_EQ(freed, 0);
	CHECK_EQ(tier_store_gpu_by_uuid(s, uuid), -ENXIO);
	tier_store_destroy(s);

	struct tfs_config cfg;
	char err[256];

	cfg_defaults(&cfg);
	snprintf(cfg.device.backend, sizeof(cfg.device.backend), "none");
	free(cfg.disk.path);
	cfg.disk.path = strdup(spill_dir);
	CHECK_EQ(tier_store_init(&s, &cfg, "unit", err, sizeof(err)), 0);
	cfg_free(&cfg);
	CHECK_EQ(tier_store_reclaim(s, -1, MiB, &freed), -ENODEV);
	CHECK_EQ(tier_store_default_gpu(s), -ENODEV);
	tier_store_destroy(s);
}

/*
 * The sim backend's ops for several GPUs: each instance has the UUID of
 * its ordinal, and copies between two instances are byte-identical, inside
 * both allocations only.
 */
static void test_sim_peer_ops(void)
{
	const struct tier_dev_ops *ops = &tier_dev_sim_ops;
	uint8_t u0[16], u1[16], want[16], zero[16] = { 0 };
	struct tier_dmem *a = NULL, *b = NULL;
	struct tier_dev *d0 = NULL, *d1 = NULL;
	struct tfs_ioc_export ex = { 0 };
	struct tier_dexp *x = NULL;
	const size_t len = 3 * MiB + 5;
	struct tfs_config cfg;
	uint8_t *p, *q;
	char err[256];

	cfg_defaults(&cfg);
	cfg.device.limit = (struct cfg_size){ .bytes = 16 * MiB };
	CHECK_EQ(ops->init(&d0, &cfg, err, sizeof(err)), 0);
	cfg.device.gpu = 1;
	CHECK_EQ(ops->init(&d1, &cfg, err, sizeof(err)), 0);
	cfg_free(&cfg);
	if (!d0 || !d1)
		return;
	tier_dev_uuid(d0, u0);
	tier_dev_uuid(d1, u1);
	CHECK(memcmp(u0, u1, 16) != 0);
	CHECK(memcmp(u0, zero, 16) != 0);
	tier_dev_sim_uuid(1, want);
	CHECK(memcmp(u1, want, 16) == 0);
	CHECK(memcmp(want, "tierfs-sim-gpu\0\1", 16) == 0);
	CHECK(tier_dev_can_peer(d0, d1));

	p = malloc(len);
	q = malloc(len);
	for (size_t i = 0; i < len; i++)
		p[i] = pat(7, i);
	CHECK_EQ(ops->alloc(d0, len, &a), 0);
	CHECK_EQ(ops->alloc(d1, len, &b), 0);
	CHECK_EQ(ops->write(d0, a, p, len, 0), 0);
	CHECK_EQ(ops->zero(d1, b, len, 0), 0);
	CHECK_EQ(ops->copy_peer(d0, a, d1, b, len - 100, 100), 0);
	CHECK_EQ(ops->read(d1, b, q, len, 0), 0);
	memset(p, 0, 100);
	CHECK(memcmp(p, q, len) == 0);
	CHECK_EQ(ops->copy_peer(d0, a, d1, b, 2, len - 1), -EINVAL);
	CHECK_EQ(ops->copy_peer(d0, a, d1, b, 1, (uint64_t)-1), -EINVAL);

	/* An export says which GPU it is on. */
	CHECK_EQ(ops->export(d1, b, false, getuid(), getgid(), &ex, &x), 0);
	CHECK(memcmp(ex.uuid, u1, 16) == 0);
	if (x)
		ops->unexport(d1, x);
	ops->free(d0, a);
	ops->free(d1, b);
	free(p);
	free(q);
	ops->destroy(d0);
	ops->destroy(d1);
}

static void test_yield_to_a_claim(void)
{
	struct opts o = { .dev = 64 * MiB, .host = 256 * MiB,
			  .reserve = 8 * MiB, .reserve_set = true,
			  .poll_ms = 10 };
	struct tier_store_stats st;
	struct tier_store *s;
	struct tier_buf *b[6];

	set_claim("");
	s = mk_store(&o);
	for (int i = 0; i < 5; i++)
		b[i] = mk_file(s, i, 10 * MiB);
	CHECK_EQ(dev_used(s), 50 * MiB);
	/* 64M - 30M claimed - 8M reserve: 26M left to the device tier. */
	set_claim("30M\n");
	CHECK(wait_used_at_most(s, 26 * MiB));
	tier_store_stats(s, &st);
	CHECK(st.yields >= 1);
	CHECK(st.yield_bytes >= 24 * MiB);
	CHECK_EQ(st.device_others, 30 * MiB);
	CHECK_EQ(st.device_room, 26 * MiB);
	CHECK_EQ(st.device_reserve, 8 * MiB);
	/* A placement under the pressure keeps to the room. */
	b[5] = mk_file(s, 5, 10 * MiB);
	CHECK(dev_used(s) <= 26 * MiB);
	CHECK_EQ(tier_of(b[5]), TFS_TIER_DEVICE);
	/* The claim is gone: the room is the limit again. */
	set_claim("0");
	for (int i = 0; i < 1000; i++) {
		tier_store_stats(s, &st);
		if (st.device_room == UINT64_MAX)
			break;
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	CHECK_EQ(st.device_room, UINT64_MAX);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(tier_buf_move(b[i], TFS_TIER_DEVICE, 0), 0);
	CHECK(dev_used(s) > 26 * MiB);
	for (int i = 0; i < 6; i++) {
		CHECK(verify(b[i], i, 10 * MiB));
		tier_buf_destroy(b[i]);
	}
	tier_store_destroy(s);
}

static void test_no_yield_without_others(void)
{
	/* The default reserve, 10% of 64M: not kept free for nobody. */
	struct opts o = { .dev = 64 * MiB, .host = 256 * MiB, .poll_ms = 10 };
	struct tier_store_stats st;
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	struct tier_store *s;
	struct tier_buf *b[6];

	set_claim("");
	s = mk_store(&o);
	for (int i = 0; i < 6; i++)
		b[i] = mk_file(s, i, 9 * MiB);
	nanosleep(&ts, NULL);
	tier_store_stats(s, &st);
	CHECK_EQ(st.device_reserve, 64 * MiB / 10);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, 54 * MiB);
	CHECK_EQ(st.yields, 0);
	CHECK_EQ(st.device_others, 0);
	for (int i = 0; i < 6; i++)
		tier_buf_destroy(b[i]);
	tier_store_destroy(s);
}

static int gpu_of(struct tier_buf *b)
{
	struct tier_buf_stat st;

	tier_buf_stat(b, &st);
	return st.gpu;
}

/* The stats of GPU @gpu, by ordinal. */
static struct tier_gpu_stats gpu_stats(struct tier_store *s, int gpu)
{
	struct tier_store_stats st;
	struct tier_gpu_stats none = { .gpu = -1 };

	tier_store_stats(s, &st);
	for (unsigned int i = 0; i < st.ngpus; i++)
		if (st.gpus[i].gpu == gpu)
			return st.gpus[i];
	return none;
}

/*
 * Two sim GPUs in one store: placements on the default one, moves between
 * them byte for byte, each GPU's limit spilling only its own buffers, and
 * a reclaim of one GPU leaving the other alone.
 */
static void test_two_gpus(void)
{
	struct opts o = { .dev = 32 * MiB, .host = 256 * MiB,
			  .gpus = { 0, 1 }, .ngpus = 2 };
	struct tier_store *s = mk_store(&o);
	struct tier_store_stats st;
	struct tier_gpu_stats g0, g1;
	struct tier_buf *b[8];
	uint8_t u0[16], u1[16];
	uint64_t freed = 0;

	CHECK(s != NULL);
	if (!s)
		return;
	tier_store_stats(s, &st);
	CHECK_EQ(st.ngpus, 2);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].limit, 64 * MiB);
	CHECK_EQ(tier_store_default_gpu(s), 0);
	for (int i = 0; i < 4; i++) {
		b[i] = mk_file(s, i, 6 * MiB);
		CHECK_EQ(gpu_of(b[i]), 0);
	}
	/* A GPU the store does not serve: ENXIO, and the file stays. */
	CHECK_EQ(tier_buf_move_gpu(b[0], 2, 0, 0), -ENXIO);
	CHECK_EQ(gpu_of(b[0]), 0);
	/* Two of them to GPU 1, one back and forth. */
	CHECK_EQ(tier_buf_move_gpu(b[2], 1, 0, 0), 0);
	CHECK_EQ(tier_buf_move_gpu(b[3], 1, 0, 0), 0);
	CHECK_EQ(tier_buf_move_gpu(b[1], 1, 0, 0), 0);
	CHECK_EQ(tier_buf_move_gpu(b[1], 0, 0, 0), 0);
	CHECK_EQ(tier_buf_move_gpu(b[1], 5, 0, 0), -ENXIO);
	CHECK_EQ(gpu_of(b[1]), 0);
	CHECK_EQ(gpu_of(b[2]), 1);
	CHECK_EQ(tier_of(b[3]), TFS_TIER_DEVICE);
	g0 = gpu_stats(s, 0);
	g1 = gpu_stats(s, 1);
	CHECK_EQ(g0.used, 12 * MiB);
	CHECK_EQ(g1.used, 12 * MiB);
	CHECK_EQ(g0.buffers, 2);
	CHECK_EQ(g1.buffers, 2);
	CHECK_EQ(g1.moves_in, 3);
	CHECK_EQ(g0.moves_out, 3);
	CHECK_EQ(dev_used(s), 24 * MiB);
	for (int i = 0; i < 4; i++)
		CHECK(verify(b[i], i, 6 * MiB));
	CHECK(verify(b[0], 0, 6 * MiB));
	CHECK(verify(b[1], 1, 6 * MiB));

	/* Filling GPU 0 past its 32 MiB spills GPU 0's coldest, not GPU 1's
	 * buffers, which are colder still (read before b[0] and b[1]). */
	for (int i = 4; i < 8; i++)
		b[i] = mk_file(s, i, 6 * MiB);
	CHECK_EQ(gpu_of(b[2]), 1);
	CHECK_EQ(gpu_of(b[3]), 1);
	CHECK_EQ(tier_of(b[0]), TFS_TIER_HOST);
	CHECK(gpu_stats(s, 0).used <= 32 * MiB);
	CHECK_EQ(gpu_stats(s, 1).used, 12 * MiB);

	/* A reclaim of GPU 1 takes only GPU 1's. */
	g0 = gpu_stats(s, 0);
	CHECK_EQ(tier_store_reclaim(s, 1, 6 * MiB, &freed), 0);
	CHECK_EQ(freed, 6 * MiB);
	CHECK_EQ(gpu_stats(s, 0).used, g0.used);
	CHECK_EQ(gpu_stats(s, 1).used, 6 * MiB);
	CHECK_EQ(gpu_stats(s, 1).reclaims, 1);
	CHECK_EQ(tier_of(b[2]), TFS_TIER_HOST);

	/* Each GPU by its UUID. */
	tier_store_stats(s, &st);
	CHECK_EQ(st.gpus[1].gpu, 1);
	memcpy(u0, "tierfs-sim-gpu\0\0", 16);
	memcpy(u1, "tierfs-sim-gpu\0\1", 16);
	CHECK_EQ(tier_store_gpu_by_uuid(s, u0), 0);
	CHECK_EQ(tier_store_gpu_by_uuid(s, u1), 1);
	for (int i = 0; i < 8; i++) {
		CHECK(verify(b[i], i, 6 * MiB));
		tier_buf_destroy(b[i]);
	}
	tier_store_stats(s, &st);
	CHECK_EQ(st.tier[TFS_TIER_DEVICE].used, 0);
	CHECK_EQ(gpu_stats(s, 0).buffers + gpu_stats(s, 1).buffers, 0);
	tier_store_destroy(s);
}

/*
 * Exports land on the GPU asked for: a copy on another GPU moves there
 * first, and a write lease keeps it where it is. A snapshot's room is
 * charged to the GPU it is on, and given back there.
 */
static void test_export_on_a_gpu(void)
{
	struct opts o = { .dev = 32 * MiB, .host = 256 * MiB,
			  .gpus = { 0, 1, 2 }, .ngpus = 3, .gpu = 2 };
	struct tier_store *s = mk_store(&o);
	struct tfs_ioc_export out;
	struct tier_buf *b;

	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_EQ(tier_store_default_gpu(s), 2);
	b = mk_file(s, 1, 3 * MiB);
	CHECK_EQ(gpu_of(b), 2);
	CHECK_EQ(tier_buf_export(b, 7, 0, 0, 0, 1, false, &out), 0);
	CHECK_EQ(gpu_of(b), 1);
	/* the buffer and its snapshot */
	CHECK_EQ(gpu_stats(s, 1).used, 6 * MiB);
	CHECK_EQ(gpu_stats(s, 2).used, 0);
	CHECK_EQ(tier_buf_export(b, 8, 0, 0, 0, 0, true, &out), 0);
	CHECK_EQ(gpu_of(b), 0);
	CHECK_EQ(gpu_stats(s, 1).used, 3 * MiB);
	CHECK_EQ(tier_buf_export(b, 9, 0, 0, 0, 2, false, &out), -EBUSY);
	CHECK_EQ(tier_buf_move_gpu(b, 2, 0, 0), -EBUSY);
	CHECK_EQ(gpu_of(b), 0);
	CHECK_EQ(tier_buf_unexport(b, 7, true), 0);
	CHECK_EQ(gpu_stats(s, 1).used, 0);
	CHECK_EQ(tier_buf_unexport(b, 8, true), 0);
	CHECK_EQ(tier_buf_move_gpu(b, 2, 0, 0), 0);
	CHECK(verify(b, 1, 3 * MiB));
	tier_buf_destroy(b);
	tier_store_destroy(s);
}

/*
 * Each GPU yields on its own: with 40M of each sim GPU claimed by "others"
 * (TFS_SIM_CLAIM applies to every sim device), GPU 0's and GPU 1's tiers
 * each go down to 64M - 40M - 8M, counted per GPU and in the sum.
 */
static void test_yield_per_gpu(void)
{
	struct opts o = { .dev = 64 * MiB, .host = 256 * MiB,
			  .reserve = 8 * MiB, .reserve_set = true,
			  .poll_ms = 10, .gpus = { 0, 1 }, .ngpus = 2 };
	struct tier_store_stats st;
	struct tier_store *s;
	struct tier_buf *b[6];
	bool ok = false;

	set_claim("");
	s = mk_store(&o);
	for (int i = 0; i < 6; i++) {
		b[i] = mk_file(s, i, 8 * MiB);
		if (i % 2)
			CHECK_EQ(tier_buf_move_gpu(b[i], 1, 0, 0), 0);
	}
	CHECK_EQ(gpu_stats(s, 0).used, 24 * MiB);
	CHECK_EQ(gpu_stats(s, 1).used, 24 * MiB);
	set_claim("40M\n");
	for (int i = 0; i < 1000 && !ok; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		ok = gpu_stats(s, 0).used <= 16 * MiB &&
		     gpu_stats(s, 1).used <= 16 * MiB;
		if (!ok)
			nanosleep(&ts, NULL);
	}
	/* 16M of room each: each gives one of its three 8M files back. */
	CHECK(ok);
	CHECK_EQ(gpu_stats(s, 0).yields, 1);
	CHECK_EQ(gpu_stats(s, 1).yields, 1);
	CHECK_EQ(gpu_stats(s, 1).yield_bytes, 8 * MiB);
	CHECK_EQ(gpu_stats(s, 1).others, 40 * MiB);
	CHECK_EQ(gpu_stats(s, 1).room, 16 * MiB);
	tier_store_stats(s, &st);
	CHECK_EQ(st.yields, 2);
	CHECK_EQ(st.device_room, 32 * MiB);
	set_claim("");
	for (int i = 0; i < 6; i++) {
		CHECK(verify(b[i], i, 8 * MiB));
		tier_buf_destroy(b[i]);
	}
	tier_store_destroy(s);
}

int main(void)
{
	if (!mkdtemp(spill_dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(claim_path, sizeof(claim_path), "%s.claim", spill_dir);
	setenv("TFS_SIM_CLAIM", claim_path, 1);
	TAP_RUN(test_reclaim_frees_coldest_first);
	TAP_RUN(test_reclaim_names_the_gpu);
	TAP_RUN(test_sim_peer_ops);
	TAP_RUN(test_yield_to_a_claim);
	TAP_RUN(test_no_yield_without_others);
	TAP_RUN(test_two_gpus);
	TAP_RUN(test_export_on_a_gpu);
	TAP_RUN(test_yield_per_gpu);
	unlink(claim_path);
	rmdir(spill_dir);
	return tap_done();
}
