// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A buffer's disk copy: spilling a whole buffer, and reading and writing one
 * too large for host memory in place through a one-chunk write cache.
 * b->lock is held for writing unless a function says otherwise.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/store_i.h"

/*
 * Where a spill reads from: the host copy when there is one, which is as
 * good and costs no copy across PCIe; the device copy otherwise.
 */
static bool spill_from_dev(struct tier_buf *b)
{
	return b->dmem && !b->has_host;
}

/* Write a full disk copy from the device or host copy. */
int st_disk_spill(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	void *scratch[SPILL_BATCH] = { NULL };
	int rc = 0;

	if (b->dobj)
		return 0;
	if (st_dev_lost(b))
		return -EIO;
	if (b->pobj) {
		/* Written around the committed version, which stays until
		 * the next commit. */
		b->dobj = b->pobj;
		rc = tier_dobj_truncate(st_bdisk(b), b->dobj, 0);
	} else {
		rc = tier_dobj_create(st_bdisk(b), b->id, &b->dobj);
	}
	if (rc)
		return rc;
	/*
	 * A run of up to SPILL_BATCH chunks is compressed in parallel on the
	 * disk tier's pool: straight from the host copy, or from the device
	 * through as many scratch chunks, copied as one batch. Only
	 * allocated pages are stored: holes are no bytes on disk either.
	 */
	for (uint64_t i = 0; i < b->nck;) {
		struct tier_dev_seg seg[SPILL_BATCH];
		const void *srcs[SPILL_BATCH];
		struct tier_chunk_desc descs[SPILL_BATCH];
		size_t lens[SPILL_BATCH], room = 0, k = 0, nseg = 0;
		bool dev = spill_from_dev(b);

		if (!st_chunk_used(b, i)) {
			i++;
			continue;
		}
		do {
			uint64_t off = (i + k) * s->chunk_size;
			const struct tier_chunk *ck = &b->ck[i + k];

			if ((dev || (ck->dense && ck->map)) && !scratch[k] &&
			    !(scratch[k] = st_chunk_get(s))) {
				rc = -ENOMEM;
				goto out;
			}
			if (dev) {
				size_t len = off >= b->size ? 0 :
					     b->size - off < s->chunk_size ?
							   b->size - off :
							   s->chunk_size;

				/* a chunk past the end: pages fallocate
				 * kept, zeroes the device copy lacks */
				memset((char *)scratch[k] + len, 0,
				       s->chunk_size - len);
				if (len)
					seg[nseg++] = (struct tier_dev_seg){
						scratch[k], len, off
					};
			}
			k++;
		} while (k < SPILL_BATCH && i + k < b->nck &&
			 st_chunk_used(b, i + k));
		if (nseg && (rc = tier_dev_readv(st_bdev(b), b->dmem, seg,
						 (unsigned int)nseg)))
			goto out;
		for (size_t j = 0; j < k; j++) {
			srcs[j] = st_chunk_payload(b, i + j, scratch[j], dev,
						   &lens[j], &descs[j]);
			room += tier_disk_chunk_bound(st_bdisk(b), lens[j],
						      descs[j].map != NULL);
		}
		uint64_t before = tier_dobj_stored(b->dobj);

		rc = st_reserve(b, TFS_TIER_DISK, room);
		if (rc)
			goto out;
		rc = tier_dobj_write_chunks_desc(st_bdisk(b), b->dobj, i, srcs,
						 lens, descs, k);
		int64_t grew = (int64_t)(tier_dobj_stored(b->dobj) - before);

		st_unreserve(b, TFS_TIER_DISK, room);
		pthread_mutex_lock(&s->lock);
		st_charge(s, b, TFS_TIER_DISK, grew);
		for (size_t j = 0; !rc && j < k; j++)
			s->use[TFS_TIER_DISK].written_bytes += lens[j];
		pthread_mutex_unlock(&s->lock);
		if (rc)
			goto out;
		i += k;
	}
out:
	for (int k = 0; k < SPILL_BATCH; k++)
		st_chunk_put(s, scratch[k]);
	if (rc)
		st_disk_drop(b);
	else
		st_disk_room(s, b->size);
	return rc;
}

void st_disk_recharge(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	struct tier_dobj *o = b->dobj ? b->dobj : b->pobj;
	uint64_t want = o ? tier_dobj_stored(o) : 0;

	want += b->wc_resv;
	pthread_mutex_lock(&s->lock);
	st_charge(s, b, TFS_TIER_DISK,
		  (int64_t)(want - b->charged[TFS_TIER_DISK]));
	pthread_mutex_unlock(&s->lock);
}

/* Drop the write cache without writing it. */
void st_wc_free(struct tier_buf *b)
{
	if (b->wc_resv)
		st_unreserve(b, TFS_TIER_DISK, b->wc_resv);
	b->wc_resv = 0;
	free(b->wc);
	b->wc = NULL;
	b->wc_dirty = false;
}

void st_disk_drop(struct tier_buf *b)
{
	if (!b->dobj)
		return;
	st_wc_free(b);
	if (b->dobj == b->pobj) {
		/* Only what was written since the commit goes. */
		tier_dobj_revert(st_bdisk(b), b->dobj);
		b->dobj = NULL;
		b->sync_pending = false;
		st_disk_recharge(b);
		return;
	}
	tier_dobj_destroy(st_bdisk(b), b->dobj);
	b->dobj = NULL;
	pthread_mutex_lock(&b->s->lock);
	st_charge(b->s, b, TFS_TIER_DISK, -(int64_t)b->charged[TFS_TIER_DISK]);
	/* The next spill goes to the [disk] tier again. */
	b->dk = 0;
	pthread_mutex_unlock(&b->s->lock);
}

int st_wc_flush(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	size_t len;
	int rc;

	if (!b->wc || !b->wc_dirty)
		return 0;
	uint64_t before = tier_dobj_stored(b->dobj);

	/* st_wc_load() charged the most this write can add; now the real
	 * cost takes its place. */
	if (!st_chunk_used(b, b->wc_idx)) {
		rc = tier_dobj_drop_chunk(st_bdisk(b), b->dobj, b->wc_idx);
		len = 0;
	} else {
		struct tier_chunk_desc desc;
		void *tmp = NULL;
		const void *src;

		/* Packing its pages must leave the cache as it is. */
		if (b->ck[b->wc_idx].map) {
			tmp = st_chunk_get(s);
			if (!tmp)
				return -ENOMEM;
			memcpy(tmp, b->wc, s->chunk_size);
		}
		src = st_chunk_payload(b, b->wc_idx, tmp ? tmp : b->wc, true,
				       &len, &desc);
		rc = tier_dobj_write_chunks_desc(st_bdisk(b), b->dobj, b->wc_idx,
						 &src, &len, &desc, 1);
		st_chunk_put(s, tmp);
	}
	pthread_mutex_lock(&s->lock);
	st_charge(s, b, TFS_TIER_DISK,
		  (int64_t)(tier_dobj_stored(b->dobj) - before));
	/* A failed write keeps the charge for the next try. */
	if (!rc) {
		st_charge(s, b, TFS_TIER_DISK, -(int64_t)b->wc_resv);
		b->wc_resv = 0;
		s->use[TFS_TIER_DISK].written_bytes += len;
	}
	pthread_mutex_unlock(&s->lock);
	if (!rc)
		b->wc_dirty = false;
	return rc;
}

/*
 * Charge the most that writing the cached chunk back can add to the disk
 * copy, so that a full disk fails the write(2) that needs the room rather
 * than the flush at close that nobody sees fail.
 */
static int wc_reserve(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t most = tier_disk_chunk_bound(st_bdisk(b), s->chunk_size, false);
	uint64_t now = tier_dobj_chunk_cost(st_bdisk(b), b->dobj, b->wc_idx);
	int rc;

	if (b->wc_resv || most <= now)
		return 0;
	rc = st_reserve(b, TFS_TIER_DISK, most - now);
	if (!rc)
		b->wc_resv = most - now;
	return rc;
}

/* Load chunk @idx of the disk copy into the write cache. */
int st_wc_load(struct tier_buf *b, uint64_t idx)
{
	struct tier_store *s = b->s;
	int rc;

	if (b->wc && b->wc_idx == idx)
		return wc_reserve(b);
	if ((rc = st_wc_flush(b)))
		return rc;
	if (!b->wc && !(b->wc = malloc(s->chunk_size)))
		return -ENOMEM;
	b->wc_idx = (uint32_t)idx;
	rc = tier_dobj_read(st_bdisk(b), b->dobj, b->wc, s->chunk_size,
			    idx * s->chunk_size);
	if (!rc)
		rc = wc_reserve(b);
	if (rc)
		st_wc_free(b);
	return rc;
}

/* Read from the disk copy, seeing the write cache; b->lock held. */
int st_disk_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
{
	struct tier_store *s = b->s;
	int rc = tier_dobj_read(st_bdisk(b), b->dobj, dst, len, off);

	if (rc || !b->wc)
		return rc;
	uint64_t lo = b->wc_idx * s->chunk_size, hi = lo + s->chunk_size;

	if (off < hi && off + len > lo) {
		uint64_t a = off > lo ? off : lo;
		uint64_t e = off + len < hi ? off + len : hi;

		memcpy((char *)dst + (a - off), (char *)b->wc + (a - lo),
		       e - a);
	}
	return 0;
}

/* Write into the disk copy in place, one chunk at a time. */
ssize_t st_disk_write(struct tier_buf *b, const char *src, size_t len,
		      uint64_t off)
{
	struct tier_store *s = b->s;
	size_t done = 0;

	while (done < len) {
		uint64_t idx = (off + done) / s->chunk_size;
		size_t in = (off + done) % s->chunk_size;
		size_t n = s->chunk_size - in;
		int rc;

		if (n > len - done)
			n = len - done;
		rc = st_wc_load(b, idx);
		if (rc)
			return done ? (ssize_t)done : rc;
		rc = st_pages_written(b, off + done, n);
		if (rc)
			return done ? (ssize_t)done : rc;
		memcpy((char *)b->wc + in, src + done, n);
		b->wc_dirty = true;
		if (off + done + n > b->size)
			b->size = off + done + n;
		/* A finished chunk goes to disk now, so that a full disk
		 * fails this write rather than the close. */
		if (in + n == s->chunk_size && (rc = st_wc_flush(b)))
			return done ? (ssize_t)done : rc;
		done += n;
	}
	return (ssize_t)done;
}

/*
 * The copy goes chunk by chunk: each read whole (holes as zeroes) into a
 * scratch chunk, packed again by its page maps and written to the new
 * object, the room for it reserved first in the tier it goes to (which
 * may push that tier's coldest down in turn). Only once every chunk is
 * there do the objects and the charges change places.
 */
int st_disk_move(struct tier_buf *b, unsigned int k)
{
	struct tier_store *s = b->s;
	struct tier_disk *to = st_disk_of(s, k);
	struct tier_dobj *o = NULL;
	uint64_t charged = 0;
	void *scratch = NULL;
	int rc;

	if (!b->dobj || b->dk == k)
		return 0;
	/* Persistent mounts have no tiers below [disk] (cfg_validate()). */
	if (b->dobj == b->pobj || k > s->nx)
		return -EINVAL;
	if ((rc = st_wc_flush(b)))
		return rc;
	st_wc_free(b);
	scratch = st_chunk_get(s);
	if (!scratch)
		return -ENOMEM;
	rc = tier_dobj_create(to, b->id, &o);
	if (rc)
		goto out_scratch;
	for (uint64_t i = 0; i < b->nck; i++) {
		struct tier_chunk_desc desc;
		const void *src;
		uint64_t room, before;
		size_t len;

		if (!st_chunk_used(b, i))
			continue;
		rc = tier_dobj_read(st_bdisk(b), b->dobj, scratch,
				    s->chunk_size, i * s->chunk_size);
		if (rc)
			goto out_new;
		src = st_chunk_payload(b, i, scratch, true, &len, &desc);
		room = tier_disk_chunk_bound(to, len, desc.map != NULL);
		rc = st_reserve_at(b, k, room);
		if (rc)
			goto out_new;
		before = tier_dobj_stored(o);
		rc = tier_dobj_write_chunks_desc(to, o, i, &src, &len, &desc,
						 1);
		uint64_t grew = tier_dobj_stored(o) - before;

		pthread_mutex_lock(&s->lock);
		*st_used_of(s, TFS_TIER_DISK, k) += grew - room;
		if (!rc)
			s->use[TFS_TIER_DISK + k].written_bytes += len;
		pthread_mutex_unlock(&s->lock);
		charged += grew;
		if (rc)
			goto out_new;
	}
	tier_dobj_destroy(st_bdisk(b), b->dobj);
	pthread_mutex_lock(&s->lock);
	st_charge(s, b, TFS_TIER_DISK, -(int64_t)b->charged[TFS_TIER_DISK]);
	/* Tier @k holds @charged already: now as @b's. */
	b->dk = (uint8_t)k;
	b->charged[TFS_TIER_DISK] = charged;
	b->dobj = o;
	pthread_mutex_unlock(&s->lock);
	goto out_scratch;
out_new:
	tier_dobj_destroy(to, o);
	st_unreserve_at(s, k, charged);
out_scratch:
	st_chunk_put(s, scratch);
	return rc;
}
