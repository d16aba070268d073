// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What keeps a buffer where it is: explicit pins, and the leases of GPU
 * programs that map its device copy (export, unexport, commit, and a device
 * allocation made for export).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "tiers/store_i.h"

bool st_leased_by_other(struct tier_buf *b, uint64_t owner)
{
	bool other = false;

	pthread_mutex_lock(&b->s->lock);
	for (uint32_t i = 0; i < b->nleases; i++)
		if (!owner || b->leases[i].owner != owner)
			other = true;
	pthread_mutex_unlock(&b->s->lock);
	return other;
}

uint32_t st_lease_count(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	uint32_t n = b->nleases;
	pthread_mutex_unlock(&b->s->lock);
	return n;
}

int tier_buf_pin(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	b->pins = 1;
	st_sync_links(b->s, b);
	pthread_mutex_unlock(&b->s->lock);
	return 0;
}

int tier_buf_unpin(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	b->pins = 0;
	st_sync_links(b->s, b);
	pthread_mutex_unlock(&b->s->lock);
	return 0;
}

/* @owner's lease on @b, or NULL; s->lock held. */
static struct lease *find_lease(struct tier_buf *b, uint64_t owner)
{
	for (uint32_t i = 0; i < b->nleases; i++)
		if (b->leases[i].owner == owner)
			return &b->leases[i];
	return NULL;
}

int tier_buf_export(struct tier_buf *b, uint64_t owner, uid_t uid, gid_t gid,
		    bool writable, struct tfs_ioc_export *out)
{
	struct tier_store *s = b->s;
	struct lease *l;
	int rc;

	if (!s->dev)
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	if (!b->dmem) {
		rc = st_wc_flush(b);
		if (!rc)
			rc = st_promote(b, TFS_TIER_DEVICE);
		if (rc)
			goto out;
	}
	st_io_quiesce(b); /* the sim backend moves the bytes into shm */
	rc = s->dev->ops->export(s->dev, b->dmem, uid, gid, out);
	if (rc)
		goto out;
	pthread_mutex_lock(&s->lock);
	l = find_lease(b, owner);
	if (l) {
		l->writable |= writable;
	} else {
		struct lease *n = realloc(b->leases,
					  (b->nleases + 1) * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&s->lock);
			if (!st_lease_count(b))
				s->dev->ops->unexport(s->dev, b->dmem);
			rc = -ENOMEM;
			goto out;
		}
		b->leases = n;
		b->leases[b->nleases++] = (struct lease){ owner, writable };
	}
	out->length = b->size;
	out->generation = b->generation;
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
out:
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_unexport(struct tier_buf *b, uint64_t owner)
{
	struct tier_store *s = b->s;
	int rc = -ENOENT;

	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	struct lease *l = find_lease(b, owner);

	/* A GPU program may have written through a write export without a
	 * commit: what the kernel cached is not to be trusted any more. */
	bool wrote = l && l->writable;

	if (l) {
		*l = b->leases[--b->nleases];
		rc = 0;
	}
	bool last = !rc && !b->nleases;
	if (wrote)
		b->cache_stale = true;
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	if (last && b->dmem)
		s->dev->ops->unexport(s->dev, b->dmem);
	if (wrote)
		st_inval(b, TIER_INVAL_DATA);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_commit(struct tier_buf *b, uint64_t owner)
{
	struct tier_store *s = b->s;
	int rc = -EPERM;

	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	struct lease *l = find_lease(b, owner);

	if (l && l->writable)
		rc = 0;
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

	if (!s->dev)
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	/* An empty file's committed (empty) version is no content. */
	if (b->size || b->dmem || (b->dobj && b->dobj != b->pobj) ||
	    b->nck) {
		rc = -EEXIST;
		goto out;
	}
	st_disk_drop(b);
	rc = st_dev_alloc(b, size);
	if (rc)
		goto out;
	rc = s->dev->ops->zero(s->dev, b->dmem, size, 0);
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
