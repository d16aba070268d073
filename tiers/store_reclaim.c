// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Giving device memory back to GPU programs: on request (TFS_IOC_RECLAIM,
 * an RMM failure callback) and under pressure, when other processes leave
 * less than [device] reserve of the device free.
 *
 * The reserve watcher is a thread that wakes every [device] poll_ms, asks
 * the backend how much of the device is free (cudaMemGetInfo) without any
 * store lock held, and works out what other processes use: total - free -
 * what the backend holds. While they use nothing the device tier keeps its
 * limit, so a device nobody else touches (the sim without its test hook) is
 * never held to the reserve; once they do, the tier may hold at most
 * total - others - reserve, and the watcher spills the coldest buffers
 * down to that at once. Each such spill is a yield, counted and logged.
 * Placements respect the same room (st_room()), so what was given back is
 * not taken again while the pressure lasts.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "config/log.h"
#include "tiers/store_i.h"

void st_watch_config(struct tier_store *s, const struct tfs_config *cfg)
{
	for (unsigned int g = 0; g < s->ngpus; g++)
		s->gpus[g].reserve = cfg_size_resolve(&cfg->device.reserve,
						      s->gpus[g].info.capacity);
	s->poll_ms = cfg->device.poll_ms ? cfg->device.poll_ms : 100;
	if (s->watcher_started)
		pthread_cond_signal(&s->watch_wake);
}

/* One poll's verdict, for the log line said after s->lock is dropped. */
struct yield_note {
	uint64_t moved, used, room, free, others, reserve;
	bool yielded, stuck;
};

/*
 * s->lock held. Take in what GPU @g's device said and spill down to the
 * room other processes leave, if its tier holds more.
 */
static void yield_to_others(struct tier_store *s, unsigned int g,
			    uint64_t free_b, uint64_t total, uint64_t held,
			    struct yield_note *note)
{
	struct st_gpu *gp = &s->gpus[g];
	uint64_t others, cap, before;

	memset(note, 0, sizeof(*note));
	others = total > free_b + held ? total - free_b - held : 0;
	gp->free = free_b;
	gp->others = others;
	if (!others)
		gp->room = UINT64_MAX;
	else if (total > others + gp->reserve)
		gp->room = total - others - gp->reserve;
	else
		gp->room = 0;
	/* Over the limit alone is the spiller's business, not a yield. */
	if (gp->used <= gp->room) {
		gp->yield_stuck = false;
		return;
	}
	cap = st_room(s, TFS_TIER_DEVICE, g);
	before = gp->used;
	st_shrink(s, TFS_TIER_DEVICE, g, cap, NULL, true);
	note->moved = before > gp->used ? before - gp->used : 0;
	note->used = gp->used;
	note->room = gp->room;
	note->free = free_b;
	note->others = others;
	note->reserve = gp->reserve;
	if (note->moved) {
		s->yields++;
		s->yield_bytes += note->moved;
		gp->yields++;
		gp->yield_bytes += note->moved;
		gp->yield_stuck = false;
		note->yielded = true;
	} else if (!gp->yield_stuck) {
		/* Everything left is leased, pinned or in use: say so once,
		 * not at every poll while it lasts. */
		gp->yield_stuck = true;
		note->stuck = true;
	}
}

/* "" with one GPU, " on gpu N" with several: what the log lines say. */
static const char *on_gpu(struct tier_store *s, unsigned int g, char *buf,
			  size_t len)
{
	buf[0] = '\0';
	if (s->ngpus > 1)
		snprintf(buf, len, " on gpu %d", s->gpus[g].ordinal);
	return buf;
}

/* s->lock held, dropped around the device's answer and the log lines.
 * One poll of GPU @g. */
static void watch_one(struct tier_store *s, unsigned int g)
{
	struct st_gpu *gp = &s->gpus[g];
	uint64_t free_b, total, held;
	struct yield_note note;
	char where[32];
	int rc;

	/* A CUDA call: never under the store lock. */
	pthread_mutex_unlock(&s->lock);
	rc = gp->dev->ops->meminfo(gp->dev, &free_b, &total, &held);
	if (rc && !gp->warned && !tier_dev_failed(gp->dev))
		tfs_warn("device: cannot read free device memory%s: %s; "
			 "not yielding to other processes until it can",
			 on_gpu(s, g, where, sizeof(where)), strerror(-rc));
	gp->warned = rc != 0;
	pthread_mutex_lock(&s->lock);
	/* Blocks of processes that exited since are given back. */
	st_exp_sync(s, g);
	if (rc) {
		/* Unknown pressure: keep to the limit alone. */
		gp->room = UINT64_MAX;
		return;
	}
	yield_to_others(s, g, free_b, total, held, &note);
	if (!note.yielded && !note.stuck)
		return;
	pthread_mutex_unlock(&s->lock);
	on_gpu(s, g, where, sizeof(where));
	if (note.yielded)
		tfs_notice("device: yielded %" PRIu64 " bytes%s to other "
			   "processes: they use %" PRIu64 ", %" PRIu64
			   " were free, reserve %" PRIu64 "; the device "
			   "tier now holds %" PRIu64 " of %" PRIu64,
			   note.moved, where, note.others, note.free,
			   note.reserve, note.used, note.room);
	else
		tfs_warn("device: cannot yield to other processes%s: "
			 "every buffer left on the device is leased, "
			 "pinned or in use (%" PRIu64 " bytes, room "
			 "%" PRIu64 ")", where, note.used, note.room);
	pthread_mutex_lock(&s->lock);
}

static void *watch_main(void *arg)
{
	struct tier_store *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += s->poll_ms / 1000;
		ts.tv_nsec += (long)(s->poll_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->watch_wake, &s->lock, &ts);
		/* One thread polls every GPU in turn: a poll is a quick
		 * question to the driver, and the GPUs' tiers are apart. */
		for (unsigned int g = 0; g < s->ngpus && !s->stop; g++)
			watch_one(s, g);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int st_watch_start(struct tier_store *s)
{
	int rc;

	if (!s->ngpus || !s->gpus[0].dev->ops->meminfo)
		return 0;
	rc = -pthread_create(&s->watcher, NULL, watch_main, s);
	if (!rc)
		s->watcher_started = true;
	return rc;
}

void st_watch_stop(struct tier_store *s)
{
	if (!s->watcher_started)
		return;
	pthread_mutex_lock(&s->lock);
	pthread_cond_signal(&s->watch_wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->watcher, NULL);
	s->watcher_started = false;
}

int tier_store_reclaim(struct tier_store *s, int gpu, uint64_t bytes,
		       uint64_t *freed)
{
	int g = gpu < 0 ? (s->ngpus ? (int)s->defg : -ENODEV) :
			  st_gpu_index(s, gpu);
	struct st_gpu *gp;
	uint64_t before, got;

	*freed = 0;
	if (g < 0)
		return g;
	gp = &s->gpus[g];
	pthread_mutex_lock(&s->lock);
	before = gp->used;
	/* Nothing more can move: the caller gets what was freed. */
	st_shrink(s, TFS_TIER_DEVICE, (unsigned int)g,
		  before > bytes ? before - bytes : 0, NULL, true);
	got = before > gp->used ? before - gp->used : 0;
	s->reclaims++;
	s->reclaimed_bytes += got;
	gp->reclaims++;
	gp->reclaimed_bytes += got;
	pthread_mutex_unlock(&s->lock);
	/* The caller allocates next: the memory must be the driver's by
	 * then, not queued for a free. */
	if (got && gp->dev->ops->drain)
		gp->dev->ops->drain(gp->dev);
	tfs_info("device: reclaim of %" PRIu64 " bytes on gpu %d gave back "
		 "%" PRIu64, bytes, gp->ordinal, got);
	*freed = got;
	return 0;
}
