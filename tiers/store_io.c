// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The I/O API on a buffer: read (copied or as an iovec into the store's
 * memory), write, truncate, fallocate, copy, register and move.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "config/log.h"
#include "tiers/store_i.h"

/* Make the host copy the only, writable copy. -ENOSPC when it cannot fit:
 * the caller then writes in place on disk. */
static int make_writable_host(struct tier_buf *b)
{
	int rc = 0;

	if (!b->has_host) {
		if (b->dobj && !b->dmem &&
		    st_host_cost(b) >
			    st_tier_limit(b->s, TFS_TIER_HOST) / PROMOTE_SHARE)
			return -ENOSPC;
		if ((rc = st_wc_flush(b)))
			return rc;
		rc = st_host_fetch(b);
		if (rc)
			return rc;
	}
	st_dev_drop(b);
	st_disk_drop(b);
	return 0;
}

/* Move everything to disk so the buffer can be written there in place. */
static int make_writable_disk(struct tier_buf *b)
{
	int rc = 0;

	if (!b->dobj && (rc = st_disk_spill(b)))
		return rc;
	st_dev_drop(b);
	if (b->has_host)
		st_host_drop(b);
	return 0;
}

/* Takes s->lock. Does a lease on @b let a GPU program write it? */
static bool write_leased(struct tier_buf *b)
{
	bool w = false;

	pthread_mutex_lock(&b->s->lock);
	for (uint32_t i = 0; i < b->nleases && !w; i++)
		w = b->leases[i].writable;
	pthread_mutex_unlock(&b->s->lock);
	return w;
}

/*
 * b->lock held. Should a read of @b come from its host copy rather than
 * its device copy? A host copy next to a device copy is a clean copy of it,
 * as fast to read as anything and no copy across PCIe, unless a GPU program
 * holds a write lease: then the device copy may be newer until it commits.
 * A device that failed serves nothing.
 */
static bool read_host(struct tier_buf *b)
{
	if (!b->has_host)
		return false;
	if (!b->dmem || tier_dev_failed(st_bdev(b)))
		return true;
	return !write_leased(b);
}

/* Serve a read from the fastest clean copy; b->lock held. */
static int serve_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
{
	int rc;

	if (read_host(b)) {
		st_host_read(b, dst, len, off);
		st_metric_read(b, TFS_TIER_HOST, len);
		return 0;
	}
	if (b->dmem && !tier_dev_failed(st_bdev(b))) {
		rc = st_bdev(b)->ops->read(st_bdev(b), b->dmem, dst, len, off);
		if (!rc)
			st_metric_read(b, TFS_TIER_DEVICE, len);
		return rc;
	}
	if (b->dobj) {
		rc = st_disk_read(b, dst, len, off);
		if (!rc)
			st_metric_read(b, TFS_TIER_DISK, len);
		return rc;
	}
	if (b->dmem)
		return -EIO; /* its only copy was on a device that failed */
	/* No copy anywhere (holes only): the tier it says it is in. */
	memset(dst, 0, len);
	st_metric_read(b, TFS_TIER_HOST, len);
	return 0;
}

/*
 * Take b->lock for reading, first bringing the buffer up as the unspill
 * policy says (which needs it for writing), unless the read is no access.
 */
static void read_lock_unspilled(struct tier_buf *b, unsigned flags)
{
	pthread_rwlock_rdlock(&b->lock);
	if (!(flags & TIER_READ_NOACCESS) && st_unspill_target(b) >= 0) {
		pthread_rwlock_unlock(&b->lock);
		pthread_rwlock_wrlock(&b->lock);
		int t = st_unspill_target(b);

		/* A failed unspill is not an error: the read is served from
		 * where the buffer is. */
		if (t >= 0 && st_promote(b, t, b->s->defg) == -EIO)
			tfs_warn("buffer %" PRIu64 ": unspill failed",
				 b->id);
		st_publish(b);
		pthread_rwlock_unlock(&b->lock);
		pthread_rwlock_rdlock(&b->lock);
	}
}

ssize_t tier_buf_read(struct tier_buf *b, void *dst, size_t len, off_t off)
{
	return tier_buf_read_as(b, dst, len, off, 0);
}

ssize_t tier_buf_read_as(struct tier_buf *b, void *dst, size_t len, off_t off,
			 unsigned flags)
{
	int rc;

	if (off < 0)
		return -EINVAL;
	read_lock_unspilled(b, flags);
	if ((uint64_t)off >= b->size) {
		pthread_rwlock_unlock(&b->lock);
		return 0;
	}
	if (len > b->size - (uint64_t)off)
		len = b->size - (uint64_t)off;
	rc = serve_read(b, dst, len, (uint64_t)off);
	pthread_rwlock_unlock(&b->lock);
	if (!(flags & TIER_READ_NOACCESS))
		st_touch(b);
	return rc ? rc : (ssize_t)len;
}

ssize_t tier_buf_read_iov(struct tier_buf *b, size_t len, off_t off,
			  struct iovec *iov, int max, int *niov)
{
	return tier_buf_read_iov_as(b, len, off, iov, max, niov, 0);
}

ssize_t tier_buf_read_iov_as(struct tier_buf *b, size_t len, off_t off,
			     struct iovec *iov, int max, int *niov,
			     unsigned flags)
{
	struct tier_store *s = b->s;
	int n = -EAGAIN;

	if (off < 0)
		return -EINVAL;
	read_lock_unspilled(b, flags);
	if ((uint64_t)off >= b->size) {
		pthread_rwlock_unlock(&b->lock);
		*niov = 0;
		return 0;
	}
	if (len > b->size - (uint64_t)off)
		len = b->size - (uint64_t)off;
	if (read_host(b)) {
		n = st_host_iov(b, len, (uint64_t)off, iov, max);
		if (n < 0)
			n = -EAGAIN;
		else
			st_metric_read(b, TFS_TIER_HOST, len);
	} else if (b->dmem && !tier_dev_failed(st_bdev(b))) {
		struct tier_dev *dev = st_bdev(b);
		char *p = dev->ops->host_ptr ?
				  dev->ops->host_ptr(dev, b->dmem) :
				  NULL;

		if (p && max >= 1) {
			iov[0] = (struct iovec){ p + off, len };
			n = 1;
			st_metric_read(b, TFS_TIER_DEVICE, len);
		}
	}
	if (n < 0) {
		pthread_rwlock_unlock(&b->lock);
		return n;
	}
	pthread_mutex_lock(&s->lock);
	b->io_refs++;
	pthread_mutex_unlock(&s->lock);
	pthread_rwlock_unlock(&b->lock);
	if (!(flags & TIER_READ_NOACCESS))
		st_touch(b);
	*niov = n;
	return (ssize_t)len;
}

bool tier_buf_opened(struct tier_buf *b)
{
	return tier_buf_opened_as(b, 0);
}

bool tier_buf_opened_as(struct tier_buf *b, unsigned flags)
{
	struct tier_store *s = b->s;
	bool keep;

	pthread_mutex_lock(&s->lock);
	keep = !b->cache_stale;
	for (uint32_t i = 0; i < b->nleases; i++)
		if (b->leases[i].writable)
			keep = false;
	b->cache_stale = false;
	if (!(flags & TIER_READ_NOACCESS)) {
		pol_touch(&s->pol, &b->pi, st_now_ns());
		st_admit_count(s, b);
	}
	pthread_mutex_unlock(&s->lock);
	return keep;
}

void tier_buf_cache_stale(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	b->cache_stale = true;
	pthread_mutex_unlock(&b->s->lock);
}

void tier_buf_read_done(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	if (!--b->io_refs)
		pthread_cond_broadcast(&s->io_idle);
	pthread_mutex_unlock(&s->lock);
}

ssize_t tier_buf_write(struct tier_buf *b, const void *src, size_t len,
		       off_t off)
{
	struct tier_store *s = b->s;
	bool in_place;
	ssize_t rc;

	if (off < 0)
		return -EINVAL;
	if (!len)
		return 0;
	if (st_nchunks_for(s, (uint64_t)off + len) > UINT32_MAX)
		return -EFBIG;
	pthread_rwlock_wrlock(&b->lock);
	b->refused = TFS_TIER_COUNT;
	if (b->dmem && tier_dev_failed(st_bdev(b))) {
		/* Writes go where the lower copies are; a buffer whose only
		 * copy was on the device is lost, bar a truncate to 0. */
		if (st_dev_lost(b)) {
			rc = -EIO;
			goto out;
		}
		st_dev_drop(b);
	}
	in_place = b->dmem && (st_hold_count(b) || (uint64_t)off + len <= b->size);
	/* A sparse device copy needs the pages first; with no room for them
	 * the write goes to host, unless a GPU program maps the copy (then
	 * every page is there already: exports densify). */
	if (in_place && !st_hold_count(b)) {
		rc = st_dev_populate(b, (uint64_t)off, len);
		if (rc == -ENOSPC)
			in_place = false;
		else if (rc)
			goto out;
	}
	if (in_place) {
		/* In place on the device: O(bytes written), and the only
		 * choice while a GPU program maps the buffer. */
		if ((uint64_t)off + len > b->dmem->len) {
			rc = -EBUSY;
			goto out;
		}
		rc = st_pages_written(b, (uint64_t)off, len);
		if (!rc)
			rc = st_bdev(b)->ops->write(st_bdev(b), b->dmem, src,
						    len, (uint64_t)off);
		if (!rc) {
			rc = (ssize_t)len;
			if (b->has_host)
				st_host_drop(b);
			st_disk_drop(b);
			if ((uint64_t)off + len > b->size)
				b->size = (uint64_t)off + len;
		}
		goto out;
	}
	rc = 0;
	if (!b->wc) {
		rc = make_writable_host(b);
		if (!rc) {
			rc = st_host_write(b, src, len, (uint64_t)off);
			if (rc == (ssize_t)len || (rc != -ENOSPC && rc <= 0))
				goto out_dirty;
			/* Host is full of what cannot move: continue on disk */
			size_t done = rc > 0 ? (size_t)rc : 0;

			rc = make_writable_disk(b);
			if (!rc) {
				rc = st_disk_write(b, (const char *)src + done,
						   len - done,
						   (uint64_t)off + done);
				if (rc >= 0)
					rc += (ssize_t)done;
			}
			if (rc < 0 && done)
				rc = (ssize_t)done;
			goto out_dirty;
		}
		if (rc != -ENOSPC)
			goto out;
	}
	rc = make_writable_disk(b);
	if (!rc)
		rc = st_disk_write(b, src, len, (uint64_t)off);
out_dirty:
	if (rc > 0)
		b->dirty = true;
out:
	if (rc > 0)
		b->synced = false;
	if (rc == -ENOSPC)
		st_count_enospc(b);
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	st_touch(b);
	return rc;
}

/* Resize @b on disk, in place: for a file host has no room for. */
static int truncate_on_disk(struct tier_buf *b, uint64_t size)
{
	struct tier_store *s = b->s;
	int rc = make_writable_disk(b);

	if (!rc && size < b->size && size % s->chunk_size) {
		rc = st_wc_load(b, size / s->chunk_size);
		if (!rc) {
			size_t in = size % s->chunk_size;

			memset((char *)b->wc + in, 0, s->chunk_size - in);
			b->wc_dirty = true;
		}
	}
	/* A cached chunk past the new end must not come back when the file
	 * grows again. */
	if (!rc && b->wc && b->wc_idx >= st_nchunks_for(s, size))
		st_wc_free(b);
	if (!rc && size < b->size) {
		rc = tier_dobj_truncate(st_bdisk(b), b->dobj,
					st_nchunks_for(s, size));
		st_disk_recharge(b);
		st_host_truncate(b, size);
	}
	if (!rc) {
		b->size = size;
		rc = st_wc_flush(b);
		b->dirty = true;
		b->synced = false;
	}
	return rc;
}

int tier_buf_truncate(struct tier_buf *b, uint64_t size)
{
	struct tier_store *s = b->s;
	int rc = 0;

	/* A file spans at most 2^32 chunks: 4 PiB with 1 MiB chunks. */
	if (st_nchunks_for(s, size) > UINT32_MAX)
		return -EFBIG;
	pthread_rwlock_wrlock(&b->lock);
	if (size == b->size)
		goto out;
	if (st_hold_count(b)) {
		rc = -EBUSY;
		goto out;
	}
	if (!b->has_host) {
		/* An empty buffer needs no fetch: an empty host copy is
		 * free, and every buffer must keep at least one copy. Nor
		 * does one cut to nothing whose bytes a failed device lost:
		 * that is how a lost file is overwritten. */
		if (b->size && !(size == 0 && st_dev_lost(b))) {
			rc = make_writable_host(b);
		} else {
			st_dev_drop(b);
			st_disk_drop(b);
			b->has_host = true;
		}
		if (rc == -ENOSPC) {
			/* Too big for host: resize on disk. */
			rc = truncate_on_disk(b, size);
			goto out;
		}
		if (rc)
			goto out;
	}
	st_dev_drop(b);
	st_disk_drop(b);
	/* Growing costs nothing: holes. */
	if (size < b->size)
		st_host_truncate(b, size);
	b->size = size;
	b->dirty = true;
	b->synced = false;
out:
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

/*
 * Allocate [off, off + len) of a buffer written in place on disk: the
 * chunks are rewritten with the new pages stored raw, so that their room
 * stays taken. The most they can take is charged first, so that a disk
 * without room for all of them gets nothing.
 */
static int disk_allocate(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len, first = off / s->chunk_size;
	uint64_t last = (end - 1) / s->chunk_size, most = 0;
	void *tmp;
	int rc;

	if ((rc = st_wc_flush(b)))
		return rc;
	st_wc_free(b);
	for (uint64_t i = first; i <= last; i++) {
		uint64_t bound = tier_disk_chunk_bound(st_bdisk(b), s->chunk_size,
						       false);
		uint64_t now = tier_dobj_chunk_cost(st_bdisk(b), b->dobj, i);

		most += bound > now ? bound - now : 0;
	}
	rc = st_reserve(b, TFS_TIER_DISK, most);
	if (rc)
		return rc;
	tmp = st_chunk_get(s);
	rc = tmp ? st_pages_allocated(b, off, len) : -ENOMEM;
	for (uint64_t i = first; !rc && i <= last; i++) {
		struct tier_chunk_desc desc;
		uint64_t before = tier_dobj_stored(b->dobj);
		const void *src;
		size_t n;

		rc = tier_dobj_read(st_bdisk(b), b->dobj, tmp, s->chunk_size,
				    i * s->chunk_size);
		if (rc)
			break;
		src = st_chunk_payload(b, i, tmp, true, &n, &desc);
		rc = tier_dobj_write_chunks_desc(st_bdisk(b), b->dobj, i, &src, &n,
						 &desc, 1);
		/* Within what was charged above. */
		pthread_mutex_lock(&s->lock);
		st_charge(s, b, TFS_TIER_DISK,
			  (int64_t)(tier_dobj_stored(b->dobj) - before));
		pthread_mutex_unlock(&s->lock);
	}
	st_chunk_put(s, tmp);
	st_unreserve(b, TFS_TIER_DISK, most);
	return rc;
}

/* Punch [off, off + len) out of a buffer written in place on disk. */
static int disk_punch(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len;
	int rc = st_host_punch(b, off, len); /* the page maps */

	for (uint64_t i = off / s->chunk_size;
	     !rc && i * s->chunk_size < end; i++) {
		uint64_t base = i * s->chunk_size;
		uint64_t lo = off > base ? off - base : 0;
		uint64_t hi = end - base < s->chunk_size ? end - base :
							   s->chunk_size;

		if (!tier_dobj_chunk_cost(st_bdisk(b), b->dobj, i) &&
		    !(b->wc && b->wc_idx == i))
			continue;
		if (!st_chunk_used(b, i)) {
			if (b->wc && b->wc_idx == i)
				st_wc_free(b);
			rc = tier_dobj_drop_chunk(st_bdisk(b), b->dobj, i);
			continue;
		}
		/* The bytes of pages it keeps read zero in the range. */
		rc = st_wc_load(b, i);
		if (!rc) {
			memset((char *)b->wc + lo, 0, hi - lo);
			b->wc_dirty = true;
			rc = st_wc_flush(b);
		}
	}
	st_disk_recharge(b);
	return rc;
}

/*
 * Whether the disk tier could take @len more bytes of @b, its own bytes
 * there given back: nothing pushes disk bytes further down, so a range
 * that does not pass this gets ENOSPC before the buffer is moved there
 * for nothing.
 */
static bool disk_may_take(struct tier_buf *b, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t lim, others;

	/* The disk-kind tier the disk copy is in. */
	pthread_mutex_lock(&s->lock);
	lim = st_limit_of(s, TFS_TIER_DISK, b->dk);
	others = *st_used_of(s, TFS_TIER_DISK, b->dk) -
		 b->charged[TFS_TIER_DISK];
	pthread_mutex_unlock(&s->lock);
	return others <= lim && len <= lim - others;
}

int tier_buf_fallocate(struct tier_buf *b, unsigned int mode, uint64_t off,
		       uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len;
	int rc;

	if (!len)
		return -EINVAL;
	if (end < off || st_nchunks_for(s, end) > UINT32_MAX)
		return -EFBIG;
	if ((mode & TIER_FALLOC_PUNCH_HOLE) && !(mode & TIER_FALLOC_KEEP_SIZE))
		return -EOPNOTSUPP;
	pthread_rwlock_wrlock(&b->lock);
	b->refused = TFS_TIER_COUNT;
	if (st_hold_count(b)) {
		/* A GPU program maps the device copy: it stays as it is. */
		rc = -EBUSY;
		goto out;
	}
	/* As a write does: the host copy when it fits, else in place on
	 * disk. */
	rc = b->wc ? -ENOSPC : make_writable_host(b);
	if (mode & TIER_FALLOC_PUNCH_HOLE) {
		if (!rc)
			rc = st_host_punch(b, off, len);
		else if (rc == -ENOSPC && !(rc = make_writable_disk(b)))
			rc = disk_punch(b, off, len);
	} else {
		if (!rc)
			rc = st_host_allocate(b, off, len);
		if (rc == -ENOSPC && disk_may_take(b, len) &&
		    !(rc = make_writable_disk(b)))
			rc = disk_allocate(b, off, len);
		if (!rc && !(mode & TIER_FALLOC_KEEP_SIZE) && end > b->size)
			b->size = end;
	}
	if (!rc) {
		b->dirty = true;
		b->synced = false;
	}
out:
	if (rc == -ENOSPC)
		st_count_enospc(b);
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	st_touch(b);
	return rc;
}

int64_t tier_buf_seek(struct tier_buf *b, uint64_t off, bool hole)
{
	int64_t r;

	pthread_rwlock_rdlock(&b->lock);
	r = st_seek(b, off, hole);
	pthread_rwlock_unlock(&b->lock);
	return r;
}

ssize_t tier_buf_copy(struct tier_buf *dst, uint64_t dst_off,
		      struct tier_buf *src, uint64_t src_off, size_t len)
{
	size_t chunk = dst->s->chunk_size, done = 0;
	void *tmp = st_chunk_get(dst->s);

	if (!tmp)
		return -ENOMEM;
	while (done < len) {
		size_t n = len - done < chunk ? len - done : chunk;
		ssize_t r = tier_buf_read(src, tmp, n, (off_t)(src_off + done));

		if (r <= 0) {
			if (r < 0 && !done) {
				done = 0;
				st_chunk_put(dst->s, tmp);
				return r;
			}
			break;
		}
		ssize_t w = tier_buf_write(dst, tmp, (size_t)r,
					   (off_t)(dst_off + done));
		if (w < 0) {
			st_chunk_put(dst->s, tmp);
			return done ? (ssize_t)done : w;
		}
		done += (size_t)w;
		if (w < r)
			break;
	}
	st_chunk_put(dst->s, tmp);
	return (ssize_t)done;
}

int tier_buf_register(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	int rc = 0;

	pthread_rwlock_wrlock(&b->lock);
	b->refused = TFS_TIER_COUNT;
	rc = st_wc_flush(b);
	if (!rc)
		st_wc_free(b);
	else if (rc == -ENOSPC)
		st_count_enospc(b);
	/* Placed: each chunk takes what it holds from now on. */
	if (b->dirty && b->has_host)
		st_host_fit(b);
	if (b->dirty && st_dev_usable(s) && b->size && !b->dmem &&
	    b->has_host &&
	    st_dev_granted_for(s, b->size) <=
		    st_tier_limit(s, TFS_TIER_DEVICE)) {
		/* Not fitting on the device is fine: the buffer stays on
		 * host, and a later read or prefetch may bring it up. */
		int e = st_dev_fill(b, s->defg);

		if (e && e != -ENOSPC && e != -EDQUOT)
			tfs_warn("buffer %" PRIu64 ": cannot place on "
				 "device: %s", b->id, strerror(-e));
	}
	/* Written (the fs registers only then, and at fsync): a write in
	 * place on the device leaves b->dirty alone, but drops the disk
	 * copy. */
	bool written = !b->dobj && b->size;

	if (!rc)
		b->dirty = false;
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	if (!rc && written)
		st_wt_queue(b);
	return rc;
}

int tier_buf_move(struct tier_buf *b, enum tfs_tier tier, uint64_t owner)
{
	return tier_buf_move_as(b, tier, owner, 0);
}

/*
 * The move of tier_buf_move_as(); for the device, to GPU @g (an s->gpus
 * index), or with @g < 0 to wherever the device copy is, else the default
 * GPU.
 */
static int move(struct tier_buf *b, enum tfs_tier tier, int g, uint64_t owner,
		uid_t uid)
{
	struct tier_store *s = b->s;
	int rc = 0;

	/* TFS_MOVE_CHAIN lets callers name a tier of [tiers]: ENXIO for
	 * one past this mount's chain. */
	if ((int)tier >= st_ntiers(s))
		return -ENXIO;
	if (tier == TFS_TIER_DEVICE &&
	    !st_gpu_usable(s, g < 0 ? s->defg : (unsigned int)g))
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	/* Where it was put it stays: promotion is for what eviction moved. */
	b->pushed = false;
	bool pinned = b->pins > 0;
	/* A move up holds nothing there (the buffer may be evicted
	 * again), but no user places more than their share on top of what
	 * they hold. */
	if (tier == TFS_TIER_DEVICE && !b->dmem)
		rc = st_share_check(s, TFS_TIER_DEVICE, uid, b->size);
	else if (tier == TFS_TIER_HOST && !b->has_host)
		rc = st_share_check(s, TFS_TIER_HOST, uid, st_host_cost(b));
	pthread_mutex_unlock(&s->lock);
	if (rc)
		goto out;
	/* A lease that holds the device copy keeps it on its GPU too. */
	bool other_gpu = g >= 0 && b->dmem && b->dgi != (unsigned int)g;

	if (pinned || st_held_by_other(b, owner) ||
	    ((tier != TFS_TIER_DEVICE || other_gpu) && st_hold_count(b))) {
		rc = -EBUSY;
		goto out;
	}
	int from = st_top_tier(b);
	uint64_t t0 = st_metric_now();

	if (tier == TFS_TIER_DEVICE) {
		if (other_gpu)
			rc = st_dev_migrate(b, (unsigned int)g);
		if (!rc)
			rc = st_promote(b, TFS_TIER_DEVICE,
					g < 0 ? s->defg : (unsigned int)g);
	} else if (tier == TFS_TIER_HOST) {
		if (!b->has_host) {
			if ((rc = st_wc_flush(b)))
				goto out;
			rc = st_host_fetch(b);
		}
		if (!rc)
			st_dev_drop(b);
	} else {
		rc = st_wc_flush(b);
		if (!rc && !b->dobj)
			rc = st_disk_spill(b);
		/* Into the disk-kind tier named: disk is [disk] itself. */
		if (!rc)
			rc = st_disk_move(b, tier - TFS_TIER_DISK);
		if (!rc) {
			st_dev_drop(b);
			if (b->has_host)
				st_host_drop(b);
		}
	}
	if (!rc && (int)tier > from)
		st_count_move(s, from, (int)tier, b->size);
	/* st_promote() times a move up to the device itself. */
	if (!rc && tier != TFS_TIER_DEVICE && (int)tier != from)
		st_metric_move(b, from, (int)tier, t0);
out:
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	if (!rc)
		st_touch(b);
	return rc;
}

int tier_buf_move_as(struct tier_buf *b, enum tfs_tier tier, uint64_t owner,
		     uid_t uid)
{
	return move(b, tier, -1, owner, uid);
}

int tier_buf_move_gpu(struct tier_buf *b, int gpu, uint64_t owner, uid_t uid)
{
	int g = st_gpu_index(b->s, gpu);

	return g < 0 ? g : move(b, TFS_TIER_DEVICE, g, owner, uid);
}
