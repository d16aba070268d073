// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The store's metrics: reads by the tier that served them, moves between
 * tiers as latency histograms, and why spills did not happen. See
 * store_metrics_i.h; the keys are in tierfs(8), "user.tierfs.stats".
 */
#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "tiers/store_i.h"

#define ADD(field, v) __atomic_add_fetch(&(field), (v), __ATOMIC_RELAXED)
#define GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/*
 * A host copy of a small file takes tens of microseconds, a spill of a
 * large one to lz4 on disk seconds: 100 us to 10 s, about three steps a
 * decade.
 */
static const uint64_t bounds_ns[ST_HIST_BUCKETS] = {
	100000,	    250000,	500000,	    1000000,
	2500000,    5000000,	10000000,   25000000,
	50000000,   100000000,	250000000,  500000000,
	1000000000, 2500000000, 5000000000, 10000000000,
};

uint64_t st_metric_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void st_metric_read(struct tier_buf *b, int t, uint64_t bytes)
{
	struct st_metrics *m = &b->s->m;

	ADD(m->reads[t], 1);
	ADD(m->read_bytes[t], bytes);
	if (t == TFS_TIER_DEVICE && b->s->ngpus) {
		ADD(m->gpu_reads[b->dgi], 1);
		ADD(m->gpu_read_bytes[b->dgi], bytes);
	}
}

void st_metric_move(struct tier_buf *b, int from, int to, uint64_t t0)
{
	struct st_move_hist *h;
	uint64_t ns = st_metric_now() - t0;
	unsigned int i;

	if (from == to || from < 0 || to < 0 || from >= TFS_TIER_COUNT ||
	    to >= TFS_TIER_COUNT)
		return;
	h = &b->s->m.move[from][to];
	for (i = 0; i < ST_HIST_BUCKETS && ns > bounds_ns[i]; i++)
		;
	if (i < ST_HIST_BUCKETS)
		ADD(h->bucket[i], 1);
	ADD(h->sum_ns, ns);
	ADD(h->bytes, b->size);
	__atomic_add_fetch(&h->count, 1, __ATOMIC_RELEASE);
}

void st_metric_spill_error(struct tier_store *s, int rc, bool passed)
{
	struct st_metrics *m = &s->m;

	if (passed)
		ADD(m->drop[ST_DROP_DISK_FULL], 1);
	else if (rc == -ENOSPC)
		ADD(m->drop[ST_DROP_NO_ROOM], 1);
	else if (rc == -EIO)
		ADD(m->fail[ST_FAIL_EIO], 1);
	else if (rc == -ENOMEM)
		ADD(m->fail[ST_FAIL_ENOMEM], 1);
	else if (rc == -ENODEV)
		ADD(m->fail[ST_FAIL_ENODEV], 1);
	else
		ADD(m->fail[ST_FAIL_OTHER], 1);
}

size_t st_metric_format(struct tier_store *s, char *buf, size_t len,
			size_t n)
{
	static const char *const drops[ST_DROP_N] = { "no_room_below",
						      "disk_full" };
	static const char *const fails[ST_FAIL_N] = { "eio", "enomem",
						      "enodev", "other" };
	struct st_metrics *m = &s->m;
	uint64_t skipped;

#define EMIT(...) (n = tier_appendf(buf, len, n, __VA_ARGS__))
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		const char *nm = tier_name((enum tfs_tier)t);

		EMIT("%s.reads=%" PRIu64 "\n", nm, GET(m->reads[t]));
		EMIT("%s.read_bytes=%" PRIu64 "\n", nm, GET(m->read_bytes[t]));
	}
	for (unsigned int g = 0; g < s->ngpus; g++) {
		EMIT("device%d.reads=%" PRIu64 "\n", s->gpus[g].ordinal,
		     GET(m->gpu_reads[g]));
		EMIT("device%d.read_bytes=%" PRIu64 "\n", s->gpus[g].ordinal,
		     GET(m->gpu_read_bytes[g]));
	}
	pthread_mutex_lock(&s->lock);
	skipped = s->evict_nothing_movable;
	pthread_mutex_unlock(&s->lock);
	EMIT("spill_skipped.nothing_movable=%" PRIu64 "\n", skipped);
	for (int i = 0; i < ST_DROP_N; i++)
		EMIT("spill_dropped.%s=%" PRIu64 "\n", drops[i],
		     GET(m->drop[i]));
	for (int i = 0; i < ST_FAIL_N; i++)
		EMIT("spill_failed.%s=%" PRIu64 "\n", fails[i],
		     GET(m->fail[i]));
	/* The bounds once, then per direction cumulative counts as a
	 * Prometheus histogram has them (+Inf is the count). */
	EMIT("move_buckets=");
	for (int i = 0; i < ST_HIST_BUCKETS; i++)
		EMIT("%s%g", i ? "," : "", (double)bounds_ns[i] / 1e9);
	EMIT("\n");
	for (int f = 0; f < TFS_TIER_COUNT; f++) {
		for (int t = 0; t < TFS_TIER_COUNT; t++) {
			struct st_move_hist *h = &m->move[f][t];
			const char *fn = tier_name((enum tfs_tier)f);
			const char *tn = tier_name((enum tfs_tier)t);
			uint64_t cum[ST_HIST_BUCKETS], c = 0;

			if (f == t)
				continue;
			/* Buckets before the count, which st_metric_move()
			 * adds to last: no bucket above +Inf. */
			for (int i = 0; i < ST_HIST_BUCKETS; i++)
				cum[i] = c += GET(h->bucket[i]);
			c = GET(h->count) > c ? GET(h->count) : c;
			EMIT("move.%s.%s.count=%" PRIu64 "\n", fn, tn, c);
			EMIT("move.%s.%s.sum_ns=%" PRIu64 "\n", fn, tn,
			     GET(h->sum_ns));
			EMIT("move.%s.%s.bytes=%" PRIu64 "\n", fn, tn,
			     GET(h->bytes));
			EMIT("move.%s.%s.buckets=", fn, tn);
			for (int i = 0; i < ST_HIST_BUCKETS; i++)
				EMIT("%s%" PRIu64, i ? "," : "", cum[i]);
			EMIT("\n");
		}
	}
#undef EMIT
	return n;
}
