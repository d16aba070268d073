/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Private to the store: the counters users read to see which tier served
 * them and what moving between tiers costs (store_metrics.c). Kept apart
 * from store_i.h so that the hooks in the eviction and I/O paths are one
 * line each.
 *
 * Every field is atomic (relaxed): the hooks run with b->lock, s->lock or
 * neither held, and a counter read a moment late is still right.
 */
#ifndef TFS_TIERS_STORE_METRICS_I_H
#define TFS_TIERS_STORE_METRICS_I_H

#include <stdint.h>

#include "tierfs.h"
#include "config/config.h"

/* Upper bounds of a move's latency histogram, in ns; +Inf follows. */
#define ST_HIST_BUCKETS 16

/* Why a victim of a scan for room did not move down. */
enum st_drop {
	ST_DROP_NO_ROOM, /* the tier below had no room (ENOSPC) */
	ST_DROP_DISK_FULL, /* passed over: the disk tier is full */
	ST_DROP_N,
};

enum st_fail {
	ST_FAIL_EIO,
	ST_FAIL_ENOMEM,
	ST_FAIL_ENODEV, /* the device failed */
	ST_FAIL_OTHER,
	ST_FAIL_N,
};

/* Moves of whole buffers from one tier to another. */
struct st_move_hist {
	uint64_t count, sum_ns, bytes;
	uint64_t bucket[ST_HIST_BUCKETS]; /* not cumulative */
};

struct st_metrics {
	/* Reads (tier_buf_read*) and bytes they returned, by the tier of
	 * the copy that served them; the device's also per GPU (s->gpus
	 * index). */
	uint64_t reads[TFS_TIER_COUNT], read_bytes[TFS_TIER_COUNT];
	uint64_t gpu_reads[CFG_MAX_GPUS], gpu_read_bytes[CFG_MAX_GPUS];
	/* [from][to]: from > to is an unspill, from < to a spill. */
	struct st_move_hist move[TFS_TIER_COUNT][TFS_TIER_COUNT];
	uint64_t drop[ST_DROP_N], fail[ST_FAIL_N];
};

struct tier_store;
struct tier_buf;

/* CLOCK_MONOTONIC in ns, the start of a timed move. */
uint64_t st_metric_now(void);
/* A read of @bytes served from tier @t of @b (the device: b->dgi). */
void st_metric_read(struct tier_buf *b, int t, uint64_t bytes);
/* @b moved from tier @from to @to, taking since @t0 (st_metric_now()). */
void st_metric_move(struct tier_buf *b, int from, int to, uint64_t t0);
/* A victim that did not move down, with the -errno of its move (or
 * -ENOSPC for one passed over while the disk tier is full, @passed). */
void st_metric_spill_error(struct tier_store *s, int rc, bool passed);
/* Append the stats keys of the metrics to @buf (tier_appendf()). */
size_t st_metric_format(struct tier_store *s, char *buf, size_t len,
			size_t n);

#endif
