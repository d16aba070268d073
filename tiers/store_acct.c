// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Accounting: what each buffer and tier is charged (st_charge(),
 * st_reserve() and their inverses), the [S] mirrors of a buffer's copies
 * and the policy's lists they link it into, the counters of moves, the disk
 * tier's full state, and the references replies hold.
 *
 * This is the bottom of the store: the tier files (store_host.c,
 * store_dev.c, store_disk.c, store_persist.c) call it, eviction
 * (store_evict.c) calls them and it, and nothing here calls a file above.
 * Where a reservation needs room that is not free it asks eviction through
 * s->make_room, the one hook set at init, as an allocator asks the
 * shrinkers registered with it: the hook is how a call goes up, never a
 * function of a file above.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "config/log.h"
#include "tiers/store_i.h"

/* Link @b into the lists of the tiers it has a copy in, if it may move. */
void st_sync_links(struct tier_store *s, struct tier_buf *b)
{
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		/* The disk tier's list is never asked for a victim: it is
		 * where promotion looks for what to bring back up. */
		if (st_movable(b) && (b->present & (1u << t)))
			pol_insert(&s->pol, t, &b->pi);
		else
			pol_remove(&s->pol, t, &b->pi);
	}
}

void st_charge(struct tier_store *s, struct tier_buf *b, int t,
	       int64_t delta)
{
	b->charged[t] += (uint64_t)delta;
	/* The disk slot's charge is its disk-kind tier's (b->dk). */
	s->use[t == TFS_TIER_DISK ? TFS_TIER_DISK + b->dk : t].used +=
		(uint64_t)delta;
	st_share_follow(s, b, t, delta);
	if (t == TFS_TIER_DEVICE)
		s->gpus[b->dgi].used += (uint64_t)delta;
	else if (t == TFS_TIER_HOST && s->use[t].used > s->trim_mark)
		s->trim_mark = s->use[t].used;
}

void tier_store_charge_outside(struct tier_store *s, int64_t delta)
{
	struct tier_usage *u = &s->use[TFS_TIER_HOST];

	pthread_mutex_lock(&s->lock);
	u->used += (uint64_t)delta;
	if (delta > 0 && u->used > s->trim_mark)
		s->trim_mark = u->used;
	if (delta > 0 && st_over_high(s, TFS_TIER_HOST, 0))
		pthread_cond_signal(&s->spill_wake);
	pthread_mutex_unlock(&s->lock);
}

void st_inval(struct tier_buf *b, unsigned int what)
{
	struct tier_store *s = b->s;
	uint64_t cookie = atomic_load_explicit(&b->cookie,
					       memory_order_relaxed);

	if (what && cookie && s->inval_fn)
		s->inval_fn(s->inval_ctx, cookie, what);
}

/* The tier of the fastest copy in @present, or -1 when there is none. */
static int top_of(uint8_t present)
{
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		if (present & (1u << t))
			return t;
	return -1;
}

/*
 * What the kernel's caches of a buffer miss when its copies go from @old to
 * @now: st_blocks follows the fastest copy, and once none is left in memory
 * the pages the kernel cached are the only copy there, which spilling was
 * meant to free.
 */
static unsigned int moved_what(uint8_t old, uint8_t now)
{
	const uint8_t mem = (1u << TFS_TIER_DEVICE) | (1u << TFS_TIER_HOST);
	unsigned int what = 0;

	if (top_of(old) != top_of(now))
		what |= TIER_INVAL_ATTR;
	if ((old & mem) && !(now & mem) && now)
		what |= TIER_INVAL_GONE;
	return what;
}

/* Copy the [B] state that stat and the scan need into [S] mirrors. Called
 * with b->lock held for writing, takes s->lock. */
void st_publish(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint8_t present;
	unsigned int what;

	present = st_copies(b);
	pthread_mutex_lock(&s->lock);
	for (int t = 0; t < TFS_TIER_DISK; t++) {
		if ((present ^ b->present) & (1u << t))
			s->use[t].buffers += (present & (1u << t)) ? 1 : -1;
	}
	/* Each disk-kind tier counts the buffers in it, as each GPU does. */
	if (b->present & (1u << TFS_TIER_DISK))
		s->use[TFS_TIER_DISK + b->pdk].buffers--;
	if (present & (1u << TFS_TIER_DISK)) {
		s->use[TFS_TIER_DISK + b->dk].buffers++;
		b->pdk = b->dk;
	}
	/* Each GPU counts the buffers on it; a move between GPUs keeps the
	 * device bit but changes the GPU. */
	if (b->present & (1u << TFS_TIER_DEVICE))
		s->gpus[b->pgi].buffers--;
	if (present & (1u << TFS_TIER_DEVICE)) {
		s->gpus[b->dgi].buffers++;
		b->pgi = b->dgi;
	}
	what = b->dead ? 0 : moved_what(b->present, present);
	b->present = present;
	b->staging = b->dirty;
	s->logical += b->size - b->pi.size;
	b->pi.size = b->size;
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	st_inval(b, what);
}

void st_uncharge_all(struct tier_buf *b, int t)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	st_charge(s, b, t, -(int64_t)b->charged[t]);
	pthread_mutex_unlock(&s->lock);
}

void st_count_move(struct tier_store *s, int from, int to, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	if (to > from) {
		s->use[from].spills++;
		s->use[from].spill_bytes += bytes;
	} else {
		s->use[to].unspills++;
		s->use[to].unspill_bytes += bytes;
	}
	pthread_mutex_unlock(&s->lock);
}

void st_count_written(struct tier_store *s, int t, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	s->use[t].written_bytes += bytes;
	pthread_mutex_unlock(&s->lock);
}

uint64_t st_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* s->lock held. Whether room was made on the disk tier since it filled:
 * its use fell or its limit rose. */
bool st_disk_room_made(struct tier_store *s)
{
	const struct tier_usage *d = &s->use[TFS_TIER_DISK];

	return d->used < s->disk_full_used || d->limit > s->disk_full_limit;
}

/* s->lock held; returns with it held, dropping it to log. */
void st_disk_full_leave(struct tier_store *s, const char *why)
{
	uint64_t secs, refused;

	if (!s->disk_full)
		return;
	s->disk_full = false;
	secs = (st_mono_ns() - s->disk_full_ns) / 1000000000ull;
	refused = s->disk_full_refused;
	pthread_mutex_unlock(&s->lock);
	tfs_notice("disk tier has room again (%s) after %" PRIu64 " s full, "
		   "%" PRIu64 " move%s refused: spilling resumes", why, secs,
		   refused, refused == 1 ? "" : "s");
	pthread_mutex_lock(&s->lock);
}

void st_disk_room(struct tier_store *s, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	if (s->disk_full && bytes >= s->disk_full_need)
		st_disk_full_leave(s, "a spill went through");
	pthread_mutex_unlock(&s->lock);
}

/*
 * The disk tier's limit is ours; the filesystem under it may be shared and
 * fill up first. Asking it before each chunk turns that into ENOSPC for the
 * write that needs the room instead of a failed spill later. Asked without
 * s->lock: on NFS or Lustre a statvfs() can take as long as the server
 * does, and every operation of the store would wait behind it.
 */
static bool disk_has_room(struct tier_store *s, unsigned int k,
			  uint64_t bytes)
{
	struct statvfs sv;

	if (statvfs(k ? s->xt[k - 1].path : s->disk_path, &sv))
		return true; /* let the write itself report the error */
	return (uint64_t)sv.f_bavail * sv.f_frsize >= bytes;
}

/*
 * Charge @bytes in tier @t, instance @g, to @b (@own) or to the tier
 * alone, evicting others first if needed. A disk-kind tier makes room only
 * when there is another below it to take what it pushes out.
 */
static int reserve(struct tier_buf *b, int t, unsigned int g, uint64_t bytes,
		   bool own)
{
	struct tier_store *s = b->s;
	uint64_t limit, room = 0;
	bool fs_room = t != TFS_TIER_DISK || disk_has_room(s, g, bytes);
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	limit = st_room(s, t, g);
	uint64_t *used = st_used_of(s, t, g);

	if (bytes > limit || !fs_room) {
		rc = -ENOSPC;
	} else if (own && (rc = st_share_pinned(s, b, t, bytes))) {
		/* A pinned buffer grows within its pinner's share. */
	} else if (*used + bytes > limit) {
		if ((t == TFS_TIER_DISK && g + 1 > s->nx) || b->promoting)
			rc = -ENOSPC;
		else
			rc = st_make_room(s, t, g, limit - bytes, b, true);
	}
	if (!rc) {
		if (own)
			st_charge(s, b, t, (int64_t)bytes);
		else
			*used += bytes;
		if (st_over_high(s, t, g))
			pthread_cond_signal(&s->spill_wake);
		room = *used < limit ? limit - *used : 0;
	}
	pthread_mutex_unlock(&s->lock);
	if (rc)
		b->refused = (uint8_t)t;
	/*
	 * The pool's free chunks count within the host limit: what the
	 * reservation took from the room goes from the pool, so that the
	 * host tier's memory (used and pool) never passes the limit.
	 */
	else if (t == TFS_TIER_HOST && host_pool_free_bytes(s->pool) > room)
		host_pool_shrink(s->pool, room);
	return rc;
}

int st_reserve(struct tier_buf *b, int t, uint64_t bytes)
{
	return reserve(b, t, st_inst(b, t), bytes, true);
}

int st_reserve_at(struct tier_buf *b, unsigned int k, uint64_t bytes)
{
	return reserve(b, TFS_TIER_DISK, k, bytes, false);
}

void st_unreserve_at(struct tier_store *s, unsigned int k, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	*st_used_of(s, TFS_TIER_DISK, k) -= bytes;
	pthread_mutex_unlock(&s->lock);
}

void st_count_enospc(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	s->use[b->refused < TFS_TIER_COUNT ? b->refused : TFS_TIER_DISK]
		.enospc++;
	pthread_mutex_unlock(&s->lock);
}

void st_unreserve(struct tier_buf *b, int t, uint64_t bytes)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	st_charge(s, b, t, -(int64_t)bytes);
	pthread_mutex_unlock(&s->lock);
}

uint64_t st_tier_limit(struct tier_store *s, int t)
{
	pthread_mutex_lock(&s->lock);
	uint64_t l = t == TFS_TIER_DEVICE && !s->ngpus ? 0 :
						       st_limit_of(s, t, s->defg);
	pthread_mutex_unlock(&s->lock);
	return l;
}

uint64_t st_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void st_touch(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	pol_touch(&s->pol, &b->pi, st_now_ns());
	pthread_mutex_unlock(&s->lock);
}

int st_make_room(struct tier_store *s, int t, unsigned int g, uint64_t goal,
		 struct tier_buf *self, bool demand)
{
	return s->make_room ? s->make_room(s, t, g, goal, self, demand) :
			      -ENOSPC;
}

/*
 * Wait until no reply points into @b's memory. Called with b->lock held for
 * writing, so no new reference can start, before freeing or moving a host
 * chunk or device memory.
 */
void st_io_quiesce(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	while (b->io_refs)
		pthread_cond_wait(&s->io_idle, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

uint64_t st_room(struct tier_store *s, int t, unsigned int g)
{
	if (t != TFS_TIER_DEVICE)
		return st_limit_of(s, t, g);
	if (g >= s->ngpus)
		return 0;
	return s->gpus[g].room < s->gpus[g].limit ? s->gpus[g].room :
						    s->gpus[g].limit;
}
