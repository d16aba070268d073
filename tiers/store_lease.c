// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What keeps a buffer where it is, and what users may hold of the device:
 * explicit pins, and the leases of GPU programs that map the buffer (export,
 * unexport, commit, and a device allocation made for export).
 *
 * An export gives no more than the descriptor it comes from, and dies with
 * its lease. A read export of a backend with read snapshots is a private
 * copy: its lease holds nothing of the buffer, so a reader never keeps the
 * owner from writing, truncating, moving or exporting it. A write export
 * maps the live device copy, which its lease holds in place until it ends;
 * one write lease at a time. When a lease ends (release, close, destroy) the
 * backend detaches what it gave out (device.h).
 *
 * The per-user shares ([device] and [host] user_share, [device]
 * user_exports) bound what one user holds beyond eviction's reach, which
 * no other user could get back by using the tiers: the device and host
 * bytes of the buffers they pinned (the pin's charge follows the buffer's
 * own while it lasts, so moving a buffer to host and pinning it there, or
 * growing a pinned one, is charged too), the device bytes of their leases,
 * and how many live leases they have. Past a share a pin, export, move or
 * the growth of a pinned buffer fails with EDQUOT; the others' shares are
 * untouched. Root and the daemon's own user are not counted. The shares'
 * accounting is store_share.c's, below eviction.
 *
 * A lease that holds the buffer can be broken (tier_buf_revoke()): the
 * file's owner truncating, rewriting, moving or re-permitting the file,
 * or chattr +i/+a. It ends as at release, and its holder's next commit or
 * release gets ESTALE, as a broken fcntl lease is gone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "tiers/store_i.h"

/* Count a live lease of @uid: -EDQUOT past [device] user_exports. */
static int exports_charge(struct tier_store *s, uid_t uid)
{
	struct user_use *u;

	if (st_user_exempt(s, uid))
		return 0;
	u = *st_user_find(s, uid);
	if (s->user_exports && u && u->exports >= s->user_exports)
		return -EDQUOT;
	u = st_user_get(s, uid);
	if (!u)
		return -ENOMEM;
	u->exports++;
	return 0;
}

static void exports_uncharge(struct tier_store *s, uid_t uid)
{
	struct user_use *u = st_user_exempt(s, uid) ? NULL : *st_user_find(s, uid);

	if (u && u->exports)
		u->exports--;
	if (u)
		st_user_trim(s, uid);
}

/* s->lock held. Charge (or give back) a snapshot's @delta bytes on GPU @g
 * and in the device tier. */
static void snap_charge(struct tier_store *s, unsigned int g, int64_t delta)
{
	s->gpus[g].used += (uint64_t)delta;
	s->use[TFS_TIER_DEVICE].used += (uint64_t)delta;
}

/*
 * A backend with export_held keeps what exports hold past their leases (a
 * block a process may still map after it closed its descriptor): that
 * memory is charged to the device tier here, and to its user's share in
 * st_share_check(), for as long as the backend holds it, so that processes
 * that close without unmapping cannot grow the daemon's GPU memory past
 * the device limit. The difference since the last call is charged, since
 * what a process let go by exiting is only seen when asked.
 */
void st_exp_sync(struct tier_store *s, unsigned int g)
{
	struct st_gpu *gp = &s->gpus[g];
	uint64_t now;

	if (!gp->dev->ops->export_held)
		return;
	now = gp->dev->ops->export_held(gp->dev, TIER_DEV_ALL_USERS);
	/* Modular: used - exp_held + now, which is never negative. */
	gp->used += now - gp->exp_held;
	s->use[TFS_TIER_DEVICE].used += now - gp->exp_held;
	gp->exp_held = now;
}

/*
 * Room on GPU @g (an s->gpus index) for @bytes no buffer owns (a
 * snapshot), evicting others (never @self) as an allocation would. 0 or
 * -ENOSPC.
 */
static int snap_reserve(struct tier_store *s, unsigned int g,
			struct tier_buf *self, uint64_t bytes)
{
	struct st_gpu *gp = &s->gpus[g];
	int rc = 0;

	if (bytes > gp->limit)
		return -ENOSPC;
	if (gp->used + bytes > gp->limit)
		rc = st_shrink(s, TFS_TIER_DEVICE, g, gp->limit - bytes, self,
			       true);
	if (!rc)
		snap_charge(s, g, (int64_t)bytes);
	return rc;
}

/* --- pins --- */

uint32_t st_hold_count(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	uint32_t n = b->nholds;
	pthread_mutex_unlock(&b->s->lock);
	return n;
}

bool st_held_by_other(struct tier_buf *b, uint64_t owner)
{
	bool other = false;

	pthread_mutex_lock(&b->s->lock);
	for (uint32_t i = 0; i < b->nleases; i++)
		if (b->leases[i].holds &&
		    (!owner || b->leases[i].owner != owner))
			other = true;
	pthread_mutex_unlock(&b->s->lock);
	return other;
}

int tier_buf_pin(struct tier_buf *b)
{
	return tier_buf_pin_as(b, 0);
}

/* s->lock held. @b has no soft pin from now on. */
static void soft_clear_locked(struct tier_store *s, struct tier_buf *b)
{
	if (!b->pi.level)
		return;
	s->soft_pins--;
	b->soft_ttl = 0;
	pol_set_level(&s->pol, &b->pi, 0);
}

/*
 * Pin @b for @uid: hard (@level 0), or soft at @level with @ttl seconds
 * idle to live (0: until unpinned). Either replaces the other; the share
 * is charged once, when the first pin of either kind comes.
 */
static int pin_as(struct tier_buf *b, uid_t uid, unsigned int level,
		  uint32_t ttl)
{
	struct tier_store *s = b->s;
	struct user_use *u;
	int rc = 0;

	/* Shared: the copies must not change while their charge is read. */
	pthread_rwlock_rdlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	if (!b->pins && !b->pi.level && !st_user_exempt(s, uid)) {
		/* Wherever the buffer is: a pin on host holds host memory
		 * as one on the device holds device memory. */
		rc = st_share_check(s, TFS_TIER_DEVICE, uid,
				    b->charged[TFS_TIER_DEVICE]);
		if (!rc)
			rc = st_share_check(s, TFS_TIER_HOST, uid,
					    b->charged[TFS_TIER_HOST]);
		u = rc ? NULL : st_user_get(s, uid);
		if (!rc && !u)
			rc = -ENOMEM;
		if (!rc) {
			u->bytes[TFS_TIER_DEVICE] += b->charged[TFS_TIER_DEVICE];
			u->bytes[TFS_TIER_HOST] += b->charged[TFS_TIER_HOST];
			u->pins++;
			b->pin_uid = uid;
		}
	}
	if (!rc && !level) {
		soft_clear_locked(s, b);
		b->pins = 1;
	} else if (!rc) {
		if (!b->pi.level)
			s->soft_pins++;
		b->pins = 0;
		b->soft_ttl = ttl;
		pol_set_level(&s->pol, &b->pi, (uint8_t)level);
		/* The idle time runs from the pin: setting it is an access. */
		pol_touch(&s->pol, &b->pi, st_now_ns());
	}
	if (!rc)
		st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_pin_as(struct tier_buf *b, uid_t uid)
{
	return pin_as(b, uid, 0, 0);
}

int tier_buf_soft_pin_as(struct tier_buf *b, uid_t uid, unsigned int level,
			 uint32_t ttl)
{
	if (!level || level > TIER_SOFT_PIN_MAX || ttl > TIER_SOFT_TTL_MAX)
		return -EINVAL;
	return pin_as(b, uid, level, ttl);
}

/* s->lock held. Whether @b's soft pin has been idle past its time to live
 * at @now (ns, the policy's clock). */
static bool soft_expired(const struct tier_buf *b, uint64_t now)
{
	return b->pi.level && b->soft_ttl &&
	       now > b->pi.last_access &&
	       now - b->pi.last_access >= b->soft_ttl * 1000000000ull;
}

static void soft_lapse_locked(struct tier_store *s, struct tier_buf *b);

bool st_soft_check(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	bool lapsed = false;

	pthread_mutex_lock(&s->lock);
	if (soft_expired(b, st_now_ns())) {
		soft_lapse_locked(s, b);
		lapsed = true;
	}
	pthread_mutex_unlock(&s->lock);
	return lapsed;
}

void st_soft_lapse(struct tier_store *s)
{
	uint64_t now = st_now_ns();

	if (!s->soft_pins || now - s->soft_check_ns < 1000000000ull)
		return;
	s->soft_check_ns = now;
	/* A soft-pinned buffer is on the list of every tier it has a copy
	 * in; one that has none yet is found when stat asks. A lapse moves
	 * it to level 0, so each walk starts over after one. */
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		struct pol_item *it = pol_first_at(&s->pol, t, 1);

		while (it) {
			struct tier_buf *b = (struct tier_buf *)it;

			if (!soft_expired(b, now)) {
				it = pol_victim(&s->pol, t, it);
				continue;
			}
			soft_lapse_locked(s, b);
			it = pol_first_at(&s->pol, t, 1);
		}
	}
}

/* s->lock held. Give back what @b's pin holds of its pinner's share. */
static void pin_release_locked(struct tier_store *s, struct tier_buf *b)
{
	struct user_use *u = b->pin_uid ? *st_user_find(s, b->pin_uid) : NULL;

	if (u) {
		st_share_follow(s, b, TFS_TIER_DEVICE,
				-(int64_t)b->charged[TFS_TIER_DEVICE]);
		st_share_follow(s, b, TFS_TIER_HOST,
				-(int64_t)b->charged[TFS_TIER_HOST]);
		if (u->pins)
			u->pins--;
		st_user_trim(s, b->pin_uid);
	}
	b->pin_uid = 0;
}

/* s->lock held. The soft pin of @b ran out: it is unpinned, its charge
 * given back. */
static void soft_lapse_locked(struct tier_store *s, struct tier_buf *b)
{
	pin_release_locked(s, b);
	soft_clear_locked(s, b);
	st_sync_links(s, b);
}

void st_pin_release(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	pin_release_locked(s, b);
	soft_clear_locked(s, b);
	pthread_mutex_unlock(&s->lock);
}

int tier_buf_unpin(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	pin_release_locked(s, b);
	soft_clear_locked(s, b);
	b->pins = 0;
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* --- leases --- */

/* @owner's lease on @b, or NULL; s->lock held. */
static struct lease *find_lease(struct tier_buf *b, uint64_t owner)
{
	for (uint32_t i = 0; i < b->nleases; i++)
		if (b->leases[i].owner == owner)
			return &b->leases[i];
	return NULL;
}

/* Take @owner's lease off @b into @out; s->lock held. */
static bool take_lease(struct tier_buf *b, uint64_t owner, struct lease *out)
{
	struct lease *l = find_lease(b, owner);

	if (!l)
		return false;
	*out = *l;
	*l = b->leases[--b->nleases];
	return true;
}

/*
 * End lease @l, already taken off @b: the backend detaches what it gave
 * out, and what the lease was charged is given back. A revoked lease
 * ended already: nothing is left of it. b->lock held for writing; takes
 * s->lock.
 */
static void lease_end(struct tier_buf *b, const struct lease *l,
		      bool unmapped)
{
	struct tier_store *s = b->s;

	if (l->revoked)
		return;
	/* The sim backend moves a write export's bytes back into its own
	 * memory: no reply may point at them meanwhile. */
	if (l->holds)
		st_io_quiesce(b);
	l->exp->unmapped = unmapped;
	s->gpus[l->gi].dev->ops->unexport(s->gpus[l->gi].dev, l->exp);
	/*
	 * The holder's writes never committed may be in the device copy:
	 * the lower copies, kept while the lease lasted in case the device
	 * failed, are stale now (a commit or a write through the mount
	 * dropped them already otherwise). See design.md, "Exports".
	 */
	if (l->writable && !b->dead && b->dmem &&
	    !tier_dev_failed(st_bdev(b))) {
		if (b->has_host)
			st_host_drop(b);
		st_disk_drop(b);
		b->synced = false;
		/* Where it wrote is not known: all of it is data, as after a
		 * commit (the maps described the lower copies until now). */
		st_pages_all(b);
	}
	pthread_mutex_lock(&s->lock);
	snap_charge(s, l->gi, -(int64_t)l->snap);
	st_share_uncharge(s, TFS_TIER_DEVICE, l->uid, l->share);
	exports_uncharge(s, l->uid);
	st_exp_sync(s, l->gi);
	if (l->holds)
		b->nholds--;
	/* A GPU program may have written through a write export without a
	 * commit: what the kernel cached is not to be trusted any more. */
	if (l->writable)
		b->cache_stale = true;
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	if (l->writable)
		st_inval(b, TIER_INVAL_DATA);
}

void st_leases_end(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	struct lease l;

	for (;;) {
		pthread_mutex_lock(&s->lock);
		bool any = b->nleases && take_lease(b, b->leases[0].owner, &l);

		pthread_mutex_unlock(&s->lock);
		if (!any)
			break;
		lease_end(b, &l, false);
	}
}

int tier_buf_export(struct tier_buf *b, uint64_t owner, uid_t uid, gid_t gid,
		    pid_t pid, int gpu, bool writable,
		    struct tfs_ioc_export *out)
{
	struct tier_store *s = b->s;
	struct lease l = { .owner = owner, .uid = uid, .writable = writable };
	uint64_t cost, resv = 0;
	struct tier_dev *dev;
	struct lease old;
	bool had, bk;
	int rc, g;

	g = gpu < 0 ? (s->ngpus ? -1 : -ENODEV) : st_gpu_index(s, gpu);
	if (g < -1)
		return g;
	pthread_rwlock_wrlock(&b->lock);
	/* Exporting again replaces this file's lease: a fresh snapshot, or
	 * the other kind. */
	pthread_mutex_lock(&s->lock);
	had = take_lease(b, owner, &old);
	pthread_mutex_unlock(&s->lock);
	/* The holder may still map the old one: it is not "unmapped". */
	if (had)
		lease_end(b, &old, false);
	pthread_mutex_lock(&s->lock);
	rc = st_share_check(s, TFS_TIER_DEVICE, uid, b->size);
	/* One writer at a time: two writers of one mapping could not each
	 * lose it when their own lease ends. */
	for (uint32_t i = 0; writable && i < b->nleases; i++)
		if (b->leases[i].writable)
			rc = -EBUSY;
	pthread_mutex_unlock(&s->lock);
	if (rc)
		goto out;
	/* On another GPU than the one asked for: moved there first, unless
	 * a lease holds it where it is. */
	if (b->dmem && g >= 0 && b->dgi != g) {
		rc = st_hold_count(b) ? -EBUSY : st_dev_migrate(b, g);
		if (rc)
			goto out;
	}
	if (!b->dmem) {
		rc = st_wc_flush(b);
		if (!rc)
			rc = st_promote(b, TFS_TIER_DEVICE,
					g < 0 ? s->defg : (unsigned int)g);
		if (rc)
			goto out;
	}
	/* A GPU program maps the copy whole: every page must be memory. */
	rc = st_dev_densify(b);
	if (rc)
		goto out;
	l.gi = b->dgi;
	dev = s->gpus[l.gi].dev;
	l.holds = writable || !dev->ops->read_snapshots;
	/* The backend accounts for its snapshots (shared between readers,
	 * kept past a lease while a process may map them): export_held. */
	bk = !l.holds && dev->ops->export_held;
	cost = b->dmem->granted;
	if (bk && dev->ops->export_cost)
		cost = dev->ops->export_cost(dev, b->dmem);
	l.share = !st_user_exempt(s, uid) && !bk ? b->dmem->granted : 0;
	pthread_mutex_lock(&s->lock);
	rc = exports_charge(s, uid);
	if (!rc) {
		rc = st_share_charge(s, TFS_TIER_DEVICE, uid, l.share, false);
		if (rc)
			exports_uncharge(s, uid);
	}
	if (!rc && bk) {
		rc = st_share_check(s, TFS_TIER_DEVICE, uid, b->dmem->granted);
		if (rc) {
			st_share_uncharge(s, TFS_TIER_DEVICE, uid, l.share);
			exports_uncharge(s, uid);
		}
	}
	if (!rc && !l.holds && cost) {
		rc = snap_reserve(s, l.gi, b, cost);
		if (rc) {
			st_share_uncharge(s, TFS_TIER_DEVICE, uid, l.share);
			exports_uncharge(s, uid);
		} else if (bk) {
			resv = cost; /* until export_held says what it took */
		} else {
			l.snap = cost;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (rc)
		goto out;
	if (l.holds)
		st_io_quiesce(b); /* the sim backend moves the bytes */
	rc = dev->ops->export(dev, b->dmem, writable, uid, gid, out, &l.exp);
	if (!rc)
		l.exp->pid = pid;
	/*
	 * A write export keeps the lower copies until a commit (or a write
	 * through the mount) changes the bytes, or the lease ends: an Xid or
	 * an ECC error meanwhile leaves the file readable from them. Reads
	 * come from the device copy while the lease lasts (read_host()); the
	 * page maps go on describing the lower copies until they are
	 * dropped, and all of it is data from then on (st_pages_all()).
	 */
	pthread_mutex_lock(&s->lock);
	snap_charge(s, l.gi, -(int64_t)resv);
	st_exp_sync(s, l.gi);
	if (!rc) {
		struct lease *n = realloc(b->leases,
					  (b->nleases + 1) * sizeof(*n));

		if (n) {
			b->leases = n;
			b->leases[b->nleases++] = l;
			b->nholds += l.holds;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc) {
		snap_charge(s, l.gi, -(int64_t)l.snap);
		st_share_uncharge(s, TFS_TIER_DEVICE, uid, l.share);
		exports_uncharge(s, uid);
	}
	out->length = b->size;
	out->generation = b->generation;
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	if (rc && l.exp) {
		/* The handle never reached the caller. */
		l.exp->unmapped = true;
		dev->ops->unexport(dev, l.exp);
	}
out:
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_unexport(struct tier_buf *b, uint64_t owner, bool unmapped)
{
	struct tier_store *s = b->s;
	struct lease l;
	bool had;

	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	had = take_lease(b, owner, &l);
	pthread_mutex_unlock(&s->lock);
	if (had)
		lease_end(b, &l, unmapped);
	pthread_rwlock_unlock(&b->lock);
	if (had && l.revoked)
		return -ESTALE;
	return had ? 0 : -ENOENT;
}

/* s->lock held. The first lease on @b that tier_buf_revoke(@keep) ends. */
static struct lease *revocable(struct tier_buf *b, uid_t keep)
{
	for (uint32_t i = 0; i < b->nleases; i++) {
		struct lease *l = &b->leases[i];

		if (l->holds && !l->revoked &&
		    (keep == TIER_REVOKE_ALL || l->uid != keep))
			return l;
	}
	return NULL;
}

bool tier_buf_held(struct tier_buf *b)
{
	return st_hold_count(b) > 0;
}

int tier_buf_revoke(struct tier_buf *b, uid_t keep)
{
	struct tier_store *s = b->s;
	struct lease *at, l;
	int n = 0;

	/* Nearly always nothing: ask before taking the buffer lock. */
	pthread_mutex_lock(&s->lock);
	at = revocable(b, keep);
	pthread_mutex_unlock(&s->lock);
	if (!at)
		return 0;
	pthread_rwlock_wrlock(&b->lock);
	for (;;) {
		pthread_mutex_lock(&s->lock);
		at = revocable(b, keep);
		if (at)
			take_lease(b, at->owner, &l);
		pthread_mutex_unlock(&s->lock);
		if (!at)
			break;
		/* As at release, but the holder did not say it unmapped. */
		lease_end(b, &l, false);
		/* Its place stays, holding nothing, for the holder's next
		 * commit or release to hear ESTALE. The array had room for
		 * it a moment ago. */
		pthread_mutex_lock(&s->lock);
		b->leases[b->nleases++] = (struct lease){
			.owner = l.owner, .uid = l.uid, .revoked = true,
		};
		pthread_mutex_unlock(&s->lock);
		n++;
	}
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	return n;
}

int tier_buf_commit(struct tier_buf *b, uint64_t owner)
{
	struct tier_store *s = b->s;
	int rc = -EPERM;

	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	struct lease *l = find_lease(b, owner);
	struct lease gone;

	if (l && l->writable)
		rc = 0;
	/* A broken lease: said once, then the file holds none. */
	if (l && l->revoked) {
		take_lease(b, owner, &gone);
		rc = -ESTALE;
	}
	if (!rc) {
		b->generation++;
		b->cache_stale = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (!rc && b->dmem) {
		if (b->has_host)
			st_host_drop(b);
		st_disk_drop(b);
		b->dirty = false;
		/* Where the GPU wrote is not known: all of it is data. */
		st_pages_all(b);
	}
	if (!rc)
		b->synced = false;
	st_publish(b);
	if (!rc)
		st_inval(b, TIER_INVAL_DATA);
	pthread_rwlock_unlock(&b->lock);
	if (!rc)
		st_touch(b);
	return rc;
}

int tier_buf_alloc_device(struct tier_buf *b, uint64_t size)
{
	struct tier_store *s = b->s;
	int rc;

	if (!s->ngpus)
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	/* An empty file's committed (empty) version is no content. */
	if (b->size || b->dmem || (b->dobj && b->dobj != b->pobj) ||
	    b->nck) {
		rc = -EEXIST;
		goto out;
	}
	st_disk_drop(b);
	rc = st_dev_alloc(b, s->defg, size);
	if (rc)
		goto out;
	rc = st_bdev(b)->ops->zero(st_bdev(b), b->dmem, size, 0);
	if (rc) {
		st_dev_drop(b);
		goto out;
	}
	st_host_drop(b);
	b->size = size;
	st_pages_all(b);
	b->dirty = false;
	b->synced = false;
	pthread_mutex_lock(&s->lock);
	b->cache_stale = true;
	pthread_mutex_unlock(&s->lock);
out:
	st_publish(b);
	if (!rc)
		st_inval(b, TIER_INVAL_DATA);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}
