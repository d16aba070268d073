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

uint64_t st_room(struct tier_store *s, int t)
{
	uint64_t limit = s->use[t].limit;

	if (t == TFS_TIER_DEVICE && s->dev_room < limit)
		return s->dev_room;
	return limit;
}

void st_watch_config(struct tier_store *s, const struct tfs_config *cfg)
{
	s->dev_reserve = s->dev ? cfg_size_resolve(&cfg->device.reserve,
						   s->dev_info.capacity) :
				  0;
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
 * s->lock held. Take in what the device said and spill down to the room
 * other processes leave, if the tier holds more.
 */
static void yield_to_others(struct tier_store *s, uint64_t free_b,
			    uint64_t total, uint64_t held,
			    struct yield_note *note)
{
	struct tier_usage *u = &s->use[TFS_TIER_DEVICE];
	uint64_t others, cap, before;

	memset(note, 0, sizeof(*note));
	others = total > free_b + held ? total - free_b - held : 0;
	s->dev_free = free_b;
	s->dev_others = others;
	if (!others)
		s->dev_room = UINT64_MAX;
	else if (total > others + s->dev_reserve)
		s->dev_room = total - others - s->dev_reserve;
	else
		s->dev_room = 0;
	/* Over the limit alone is the spiller's business, not a yield. */
	if (u->used <= s->dev_room) {
		s->yield_stuck = false;
		return;
	}
	cap = st_room(s, TFS_TIER_DEVICE);
	before = u->used;
	st_shrink(s, TFS_TIER_DEVICE, cap, NULL, true);
	note->moved = before > u->used ? before - u->used : 0;
	note->used = u->used;
	note->room = s->dev_room;
	note->free = free_b;
	note->others = others;
	note->reserve = s->dev_reserve;
	if (note->moved) {
		s->yields++;
		s->yield_bytes += note->moved;
		s->yield_stuck = false;
		note->yielded = true;
	} else if (!s->yield_stuck) {
		/* Everything left is leased, pinned or in use: say so once,
		 * not at every poll while it lasts. */
		s->yield_stuck = true;
		note->stuck = true;
	}
}

static void *watch_main(void *arg)
{
	struct tier_store *s = arg;
	bool warned = false;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		uint64_t free_b, total, held;
		struct yield_note note;
		struct timespec ts;
		int rc;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += s->poll_ms / 1000;
		ts.tv_nsec += (long)(s->poll_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->watch_wake, &s->lock, &ts);
		if (s->stop)
			break;
		/* A CUDA call: never under the store lock. */
		pthread_mutex_unlock(&s->lock);
		rc = s->dev->ops->meminfo(s->dev, &free_b, &total, &held);
		if (rc && !warned && !tier_dev_failed(s->dev))
			tfs_warn("device: cannot read free device memory: %s; "
				 "not yielding to other processes until it "
				 "can", strerror(-rc));
		warned = rc != 0;
		pthread_mutex_lock(&s->lock);
		if (rc) {
			/* Unknown pressure: keep to the limit alone. */
			s->dev_room = UINT64_MAX;
			continue;
		}
		yield_to_others(s, free_b, total, held, &note);
		if (!note.yielded && !note.stuck)
			continue;
		pthread_mutex_unlock(&s->lock);
		if (note.yielded)
			tfs_notice("device: yielded %" PRIu64 " bytes to other "
				   "processes: they use %" PRIu64 ", %" PRIu64
				   " were free, reserve %" PRIu64 "; the device "
				   "tier now holds %" PRIu64 " of %" PRIu64,
				   note.moved, note.others, note.free,
				   note.reserve, note.used, note.room);
		else
			tfs_warn("device: cannot yield to other processes: "
				 "every buffer left on the device is leased, "
				 "pinned or in use (%" PRIu64 " bytes, room "
				 "%" PRIu64 ")", note.used, note.room);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int st_watch_start(struct tier_store *s)
{
	int rc;

	if (!s->dev || !s->dev->ops->meminfo)
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

int tier_store_default_gpu(struct tier_store *s)
{
	return s->dev ? s->gpu : -ENODEV;
}

int tier_store_check_gpu(struct tier_store *s, int gpu)
{
	if (!s->dev)
		return -ENODEV;
	return gpu == s->gpu ? 0 : -ENXIO;
}

int tier_store_gpu_by_uuid(struct tier_store *s, const uint8_t uuid[16])
{
	if (!s->dev)
		return -ENODEV;
	if (memcmp(s->dev_info.uuid, uuid, sizeof(s->dev_info.uuid)))
		return -ENXIO;
	return s->gpu;
}

int tier_store_reclaim(struct tier_store *s, int gpu, uint64_t bytes,
		       uint64_t *freed)
{
	struct tier_usage *u = &s->use[TFS_TIER_DEVICE];
	uint64_t before, got;

	*freed = 0;
	if (!s->dev)
		return -ENODEV;
	if (gpu >= 0 && gpu != s->gpu)
		return -ENXIO;
	pthread_mutex_lock(&s->lock);
	before = u->used;
	/* Nothing more can move: the caller gets what was freed. */
	st_shrink(s, TFS_TIER_DEVICE, before > bytes ? before - bytes : 0,
		  NULL, true);
	got = before > u->used ? before - u->used : 0;
	s->reclaims++;
	s->reclaimed_bytes += got;
	pthread_mutex_unlock(&s->lock);
	/* The caller allocates next: the memory must be the driver's by
	 * then, not queued for a free. */
	if (got && s->dev->ops->drain)
		s->dev->ops->drain(s->dev);
	tfs_info("device: reclaim of %" PRIu64 " bytes on gpu %d gave back "
		 "%" PRIu64, bytes, s->gpu, got);
	*freed = got;
	return 0;
}
