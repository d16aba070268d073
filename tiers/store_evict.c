// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Moves between tiers: making room by evicting the coldest buffers (in the
 * caller when an allocation does not fit, through s->make_room; in the
 * spiller thread above the high watermark), bringing a buffer up as unspill
 * asks, and promotion when room returns. It calls the tier files and the
 * accounting below them (store_acct.c); neither calls it but through
 * s->make_room.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "config/log.h"
#include "tiers/store_i.h"

static int evict_copy(struct tier_buf *v, int t);

/* s->lock held. While the disk tier is full and nothing changed, moves
 * that need it are not even tried until the back-off ends. */
static bool disk_full_skip(struct tier_store *s)
{
	return s->disk_full && !st_disk_room_made(s) &&
	       st_mono_ns() < s->disk_full_retry_ns;
}

/* s->lock held. A victim whose move out of @t would write the disk tier:
 * one without another copy whose next tier is the disk, or has no room
 * for it either (from the device, when host has none). */
static bool needs_disk(struct tier_store *s, const struct tier_buf *v, int t)
{
	const struct tier_usage *n = &s->use[t + 1];

	/* The [S] mirror: the victim is not locked yet. */
	if (v->present & ~(1u << t))
		return false;
	return t + 1 == TFS_TIER_DISK || n->used + v->pi.size > n->limit;
}

/* s->lock held; returns with it held, dropping it to log. The disk tier
 * is full from now on, if it was not: say so once. */
static void disk_full_enter(struct tier_store *s, struct tier_buf *v, int t)
{
	const struct tier_usage *d = &s->use[TFS_TIER_DISK];
	char used[32], limit[32], need[32], free_b[32] = "";
	struct statvfs sv;

	if (s->disk_full) {
		s->disk_full_refused++;
		return;
	}
	s->disk_full = true;
	s->disk_full_count++;
	s->disk_full_refused = 1;
	s->disk_full_ns = st_mono_ns();
	s->disk_full_used = d->used;
	s->disk_full_limit = d->limit;
	s->disk_full_need = v->pi.size;
	s->disk_full_backoff_s = 1;
	s->disk_full_retry_ns = s->disk_full_ns + 1000000000ull;
	st_fmt_size(used, sizeof(used), d->used);
	st_fmt_size(limit, sizeof(limit), d->limit);
	st_fmt_size(need, sizeof(need), v->pi.size);
	uint64_t id = v->id;

	pthread_mutex_unlock(&s->lock);
	if (!statvfs(s->disk_path, &sv))
		st_fmt_size(free_b, sizeof(free_b),
			    (uint64_t)sv.f_bavail * sv.f_frsize);
	tfs_warn("disk tier full: cannot spill buffer %" PRIu64 " (%s) out "
		 "of %s (disk.used %s of %s%s%s%s%s%s); spilling pauses until "
		 "there is room, retried with a back-off", id, need,
		 tier_name((enum tfs_tier)t), used, limit,
		 free_b[0] ? ", " : "", free_b, free_b[0] ? " free in '" : "",
		 free_b[0] ? s->disk_path : "", free_b[0] ? "'" : "");
	pthread_mutex_lock(&s->lock);
}

/* Log a failed move of @v out of @t, at most once a second. */
static void log_move_error(struct tier_store *s, struct tier_buf *v, int t,
			   int rc)
{
	uint64_t now = st_now_ns();
	uint64_t last = __atomic_load_n(&s->move_log_ns, __ATOMIC_RELAXED);
	uint64_t quiet;

	if ((last && now - last < 1000000000ull) ||
	    !__atomic_compare_exchange_n(&s->move_log_ns, &last, now, false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		__atomic_add_fetch(&s->move_log_quiet, 1, __ATOMIC_RELAXED);
		return;
	}
	quiet = __atomic_exchange_n(&s->move_log_quiet, 0, __ATOMIC_RELAXED);
	if (quiet)
		tfs_warn("cannot move buffer %" PRIu64 " out of %s: %s (%" PRIu64
			 " more failed since the last such line)",
			 v->id, tier_name((enum tfs_tier)t), strerror(-rc),
			 quiet);
	else
		tfs_warn("cannot move buffer %" PRIu64 " out of %s: %s", v->id,
			 tier_name((enum tfs_tier)t), strerror(-rc));
}

/*
 * Evict until tier @t uses at most @goal bytes. Called and returns with
 * s->lock held; drops it while a victim moves. Returns 0, or -ENOSPC when
 * nothing more can move.
 */
int st_shrink(struct tier_store *s, int t, unsigned int g, uint64_t goal,
	      struct tier_buf *self, bool demand)
{
	uint64_t *used = st_used_of(s, t, g);
	struct pol_item *prev = NULL;
	/* First pass: leave buffers being written alone. Spilling one that
	 * is half written costs its writer a fetch back or a write on disk,
	 * while a placed buffer's lower copy is often clean already. */
	bool take_staging = false, move_failed = false;
	/* The full state is the [disk] tier's, which moves out of the disk
	 * slot (into a tier of [tiers]) never need. */
	bool skip_disk = t != TFS_TIER_DISK && disk_full_skip(s);

	while (*used > goal) {
		struct pol_item *it = pol_victim(&s->pol, t, prev);

		if (!it && !take_staging && demand) {
			take_staging = true;
			prev = NULL;
			continue;
		}
		if (!it) {
			/* A failed move is counted where it failed; this
			 * counts scans that only met buffers in use. */
			if (!move_failed)
				s->evict_nothing_movable++;
			return -ENOSPC;
		}
		struct tier_buf *v = (struct tier_buf *)it;

		/* An empty buffer frees nothing; skip it rather than write an
		 * empty spill file. */
		if (skip_disk && needs_disk(s, v, t)) {
			/* The full disk tier's refusal, counted once. */
			move_failed = true;
			st_metric_spill_error(s, -ENOSPC, true);
			prev = it;
			continue;
		}
		if (v == self || !v->charged[t] || v->io_refs ||
		    (t == TFS_TIER_DEVICE && v->dgi != g) ||
		    (t == TFS_TIER_DISK && v->dk != g) ||
		    (v->staging && !take_staging) ||
		    pthread_rwlock_trywrlock(&v->lock)) {
			prev = it;
			continue;
		}
		uint64_t before = *used;

		pthread_mutex_unlock(&s->lock);
		int rc = evict_copy(v, t);

		if (rc < 0 && rc != -ENOSPC)
			log_move_error(s, v, t, rc);
		pthread_mutex_lock(&s->lock);
		if (rc == -ENOSPC && t != TFS_TIER_DISK)
			disk_full_enter(s, v, t);
		if (!rc)
			v->pushed = true;
		if (rc < 0) {
			s->evict_move_errors++;
			st_metric_spill_error(s, rc, false);
			move_failed = true;
		} else if (*used >= before) {
			rc = -EAGAIN; /* moved, but another took the room */
		}
		/* Unlocking under s->lock keeps @v alive: destroy marks it
		 * dead under s->lock before it waits for v->lock. */
		pthread_rwlock_unlock(&v->lock);
		/* One refusal is the disk tier's answer for this scan: the
		 * rest passes over the victims that need the disk and takes
		 * those it can drop. */
		if (rc == -ENOSPC && s->disk_full && t != TFS_TIER_DISK)
			skip_disk = true;
		if (rc < 0) {
			if (v->dead || !pol_linked(&v->pi, t))
				prev = NULL;
			else
				prev = it;
			continue;
		}
		prev = NULL;
	}
	return 0;
}

int st_top_tier(struct tier_buf *b)
{
	uint8_t copies = st_copies(b);

	/* A buffer with no copy at all is an empty one, held by host. */
	return copies ? __builtin_ctz(copies) : TFS_TIER_HOST;
}

/*
 * What eviction does with a copy in each tier of the chain, by index: put
 * one there from another copy of the buffer, drop it, and whether the tier
 * takes a buffer at all. Moves go from tier t to the first of t + 1, t + 2,
 * ... that takes the buffer; a tier with no fill is never a target (the
 * device: a copy there needs a GPU chosen, which promotion and unspill
 * do). A new tier is a new row, and eviction needs no new branch.
 */
struct st_kind {
	/* b->lock held for writing; s->lock not. Whether eviction may put
	 * @b here; NULL: always. */
	bool (*takes)(struct tier_buf *b);
	/* Make a copy of @b here from another one: 0, -ENOSPC, -errno. */
	int (*fill)(struct tier_buf *b);
	/* Free the copy here and give back its charge. */
	void (*drop)(struct tier_buf *b);
};

/* A buffer larger than the host tier goes past it, straight to disk. */
static bool host_takes(struct tier_buf *b)
{
	return b->size <= st_tier_limit(b->s, TFS_TIER_HOST);
}

static const struct st_kind kinds[TFS_TIER_COUNT] = {
	[TFS_TIER_DEVICE] = { .drop = st_dev_drop },
	[TFS_TIER_HOST] = { .takes = host_takes, .fill = st_host_fetch,
			    .drop = st_host_drop },
	[TFS_TIER_DISK] = { .fill = st_disk_spill, .drop = st_disk_drop },
};

/*
 * Evict @v's copy in tier @t: free it when another copy exists, else write
 * the first lower tier that takes it first. Called with v->lock held for
 * writing and s->lock not held.
 */
static int evict_copy(struct tier_buf *v, int t)
{
	struct tier_store *s = v->s;
	uint64_t t0 = st_metric_now();
	int rc = 0;

	/* A copy on a failed device is no copy: let it go wherever there is
	 * another, so that nothing below is dropped in its favour. */
	if (v->dmem && tier_dev_failed(st_bdev(v)) &&
	    (v->has_host || v->dobj))
		st_dev_drop(v);
	if (t == TFS_TIER_DISK && v->dobj && !(st_copies(v) & ~(1u << t))) {
		/* The only copy, in disk-kind tier dk: into the next one
		 * down, as a whole; the last has none below it. */
		unsigned int from = v->dk;

		rc = from < s->nx ? st_disk_move(v, from + 1) : -ENOSPC;
		if (!rc)
			st_count_move(s, TFS_TIER_DISK + (int)from,
				      TFS_TIER_DISK + (int)from + 1, v->size);
	} else if (st_has_copy(v, t)) {
		if (!(st_copies(v) & ~(1u << t))) {
			rc = -ENOSPC;
			for (int n = t + 1; rc && n < TFS_TIER_COUNT; n++)
				if (kinds[n].fill &&
				    (!kinds[n].takes || kinds[n].takes(v)))
					rc = kinds[n].fill(v);
		}
		if (!rc) {
			kinds[t].drop(v);
			st_count_move(s, t, t + 1, v->size);
			st_metric_move(v, t, st_top_tier(v), t0);
		}
	}
	st_publish(v);
	return rc;
}

/* The tier a read should bring @b up to, or -1 to leave it. */
int st_unspill_target(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	int top = st_top_tier(b);

	pthread_mutex_lock(&s->lock);
	enum cfg_unspill u = s->unspill;
	uint64_t dlim = s->ngpus ? s->gpus[s->defg].limit : 0;
	uint64_t hlim = s->use[TFS_TIER_HOST].limit;
	bool movable_b = st_movable(b);
	/* Admission ([policy] admission) may keep it off a full device. */
	bool admit = !s->ngpus || top == TFS_TIER_DEVICE ||
		     st_admit(s, b, s->defg, st_dev_granted_for(s, b->size));
	pthread_mutex_unlock(&s->lock);

	if (u == CFG_UNSPILL_NONE || !movable_b)
		return -1;
	if (u == CFG_UNSPILL_DEVICE && st_dev_usable(s) && admit &&
	    b->size <= dlim / PROMOTE_SHARE && top != TFS_TIER_DEVICE)
		return TFS_TIER_DEVICE;
	if (top == TFS_TIER_DISK &&
	    st_host_cost(b) <= hlim / PROMOTE_SHARE)
		return TFS_TIER_HOST;
	return -1;
}

/* Bring @b up to tier @t, keeping lower copies as clean copies. */
int st_promote(struct tier_buf *b, int t, unsigned int g)
{
	struct tier_store *s = b->s;
	int from = st_top_tier(b), rc = 0;
	uint64_t t0 = st_metric_now();

	if (b->wc && (rc = st_wc_flush(b)))
		return rc;
	if (st_top_tier(b) == TFS_TIER_DISK &&
	    st_host_cost(b) <=
		    st_tier_limit(s, TFS_TIER_HOST) / PROMOTE_SHARE) {
		rc = st_host_fetch(b);
		if (rc && t == TFS_TIER_HOST)
			return rc;
	}
	if (t == TFS_TIER_DEVICE && !b->dmem) {
		rc = st_dev_fill(b, g);
		if (!rc)
			st_count_move(s, TFS_TIER_HOST, TFS_TIER_DEVICE,
				      b->size);
	}
	if (!rc)
		st_metric_move(b, from, st_top_tier(b), t0);
	return rc;
}

/*
 * s->lock held, dropped while memory goes back. Once a second with nothing
 * to spill: the idle pool's surplus, and the heap's free pages once the
 * host tier let go of enough since the last time. glibc keeps what the
 * packed blocks of freed or spilled files took: 126 MiB stayed resident
 * after 800 files of 1.3 MB were deleted. malloc_trim() walks every arena
 * under its lock, so never on a request's path.
 */
static void give_back(struct tier_store *s)
{
	uint64_t floor = s->use[TFS_TIER_HOST].limit / 8, used;
	bool trim;

	if (floor > POOL_IDLE_KEEP)
		floor = POOL_IDLE_KEEP;
	used = s->use[TFS_TIER_HOST].used;
	trim = s->trim_mark - used >= HEAP_TRIM_MIN;
	if (trim)
		s->trim_mark = used;
	pthread_mutex_unlock(&s->lock);
	host_pool_trim(s->pool, floor);
	if (trim)
		malloc_trim(0);
	pthread_mutex_lock(&s->lock);
}

/* Buffers looked at per tier and pass, so that s->lock is not held long. */
#define PROMOTE_SCAN 64

/*
 * s->lock held. Bring the most recently used buffers eviction pushed out of
 * tier @t (the device: GPU @g) back into it from the tier below, while @t
 * stays under its target and the rate allows: a reservation that would
 * need room made fails instead (b->promoting), so nothing is pushed out.
 * The lower copy stays, clean, as after a read's unspill.
 */
static void promote_into(struct tier_store *s, int t, unsigned int g)
{
	uint64_t goal = (uint64_t)(s->target * (double)st_limit_of(s, t, g));
	struct pol_item *prev = NULL;

	for (unsigned int n = 0; n < PROMOTE_SCAN && s->promote_credit > 0 &&
				 !s->stop && *st_used_of(s, t, g) < goal;
	     n++) {
		struct pol_item *it = pol_hot(&s->pol, t + 1, prev);
		struct tier_buf *b = (struct tier_buf *)it;

		if (!it)
			return;
		prev = it;
		if (!b->pushed || !st_movable(b) || b->io_refs || b->staging ||
		    (b->present & ((2u << t) - 1)) ||
		    pthread_rwlock_trywrlock(&b->lock))
			continue;
		/* A write cache to flush first is a writer's, not ours;
		 * what a read would not bring up, neither does this. */
		uint64_t cost = b->wc ? UINT64_MAX :
			t == TFS_TIER_HOST ? st_host_cost(b) :
					     st_dev_granted_for(s, b->size);

		if (!b->size || cost > goal - *st_used_of(s, t, g) ||
		    cost > st_limit_of(s, t, g) / PROMOTE_SHARE) {
			pthread_rwlock_unlock(&b->lock);
			continue;
		}
		b->promoting = true;
		pthread_mutex_unlock(&s->lock);
		int from = st_top_tier(b);
		uint64_t t0 = st_metric_now();
		int rc = t == TFS_TIER_HOST ? st_host_fetch(b) :
					      st_dev_fill(b, g);

		if (!rc)
			st_metric_move(b, from, t, t0);

		b->promoting = false;
		st_publish(b);
		pthread_mutex_lock(&s->lock);
		if (!rc) {
			s->use[t].promotes++;
			s->use[t].promote_bytes += b->size;
			s->promote_credit -= (int64_t)cost;
		}
		/* st_host_fetch() counts its unspill itself. */
		if (!rc && t == TFS_TIER_DEVICE) {
			s->use[t].unspills++;
			s->use[t].unspill_bytes += b->size;
			b->pushed = false;
		}
		/* Unlocking under s->lock keeps @b alive, as in st_shrink. */
		pthread_rwlock_unlock(&b->lock);
		if (b->dead || !pol_linked(&b->pi, t + 1))
			prev = NULL;
	}
}

/* s->lock held, the spiller idle: promotion's turn, host then device. */
static void promote(struct tier_store *s)
{
	uint64_t now = st_mono_ns(), dt = now - s->promote_ns;
	double add = (double)s->promote_rate * (double)dt / 1e9;

	s->promote_ns = now;
	if (!s->promote) {
		s->promote_credit = 0;
		return;
	}
	/* At most a second's worth saved up. */
	if (add > (double)s->promote_rate ||
	    (double)s->promote_credit + add > (double)s->promote_rate)
		s->promote_credit = (int64_t)s->promote_rate;
	else
		s->promote_credit += (int64_t)add;
	promote_into(s, TFS_TIER_HOST, 0);
	if (s->ngpus && st_gpu_usable(s, s->defg) &&
	    s->unspill == CFG_UNSPILL_DEVICE)
		promote_into(s, TFS_TIER_DEVICE, s->defg);
}

void *st_spiller_main(void *arg)
{
	struct tier_store *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		bool work = false, was_full;

		if (s->soft_lapse)
			s->soft_lapse(s);
		if (s->disk_full && st_disk_room_made(s))
			st_disk_full_leave(s, "room was made");
		/* A full disk tier: wait out the back-off. */
		if (disk_full_skip(s))
			goto wait;
		was_full = s->disk_full;
		/* Each GPU's device tier, then the host tier. */
		for (unsigned int i = 0; i <= s->ngpus; i++) {
			int t = i < s->ngpus ? TFS_TIER_DEVICE : TFS_TIER_HOST;

			/* A failed device keeps what it holds: nothing more
			 * can be read off it to move down. */
			if (!st_over_high(s, t, i) ||
			    (t == TFS_TIER_DEVICE && !st_gpu_usable(s, i)))
				continue;
			uint64_t goal = (uint64_t)(s->target *
						   (double)st_limit_of(s, t, i));

			/*
			 * Background spilling only makes headroom, so it
			 * leaves buffers being written alone: moving one to
			 * a disk without room for the rest of it failed its
			 * writer with ENOSPC while its own tier had room
			 * (the "at disk_limit" test, 1 run in 20). When
			 * nothing more can move, wait for a wake-up rather
			 * than spin on the lock.
			 */
			if (!st_shrink(s, t, i, goal, NULL, false))
				work = true;
		}
		/* Each disk-kind tier with another below it, [disk] first. */
		for (unsigned int k = 0; k < s->nx; k++) {
			if (!st_over_high(s, TFS_TIER_DISK, k))
				continue;
			uint64_t goal = (uint64_t)(
				s->target *
				(double)st_limit_of(s, TFS_TIER_DISK, k));

			if (!st_shrink(s, TFS_TIER_DISK, k, goal, NULL, false))
				work = true;
		}
		if (s->disk_full) {
			/* Still full after a try (or newly full): back off. */
			if (was_full && s->disk_full_backoff_s < 64)
				s->disk_full_backoff_s *= 2;
			s->disk_full_retry_ns = st_mono_ns() +
				s->disk_full_backoff_s * 1000000000ull;
			s->disk_full_used = s->use[TFS_TIER_DISK].used;
			s->disk_full_limit = s->use[TFS_TIER_DISK].limit;
			work = false;
		}
		if (work || st_wt_run(s))
			continue;
		promote(s);
wait:;
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (pthread_cond_timedwait(&s->spill_wake, &s->lock, &ts) ==
		    ETIMEDOUT)
			give_back(s);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}
