// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A buffer's device copy: allocating it, filling it from a lower copy,
 * dropping it. b->lock is held for writing.
 */
#include <errno.h>
#include <pthread.h>

#include "tiers/store_i.h"

void st_dev_drop(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	if (!b->dmem)
		return;
	st_io_quiesce(b);
	s->dev->ops->free(s->dev, b->dmem);
	b->dmem = NULL;
	st_uncharge_all(b, TFS_TIER_DEVICE);
}

int st_dev_alloc(struct tier_buf *b, size_t len)
{
	struct tier_store *s = b->s;
	int rc = st_reserve(b, TFS_TIER_DEVICE, len);

	if (rc)
		return rc;
	for (int i = 0;; i++) {
		rc = s->dev->ops->alloc(s->dev, len ? len : 1, &b->dmem);
		if (rc != -ENOMEM || i == DEV_ALLOC_RETRIES)
			break;
		/* The device is fuller than our accounting says: make the
		 * room by evicting one more buffer, then retry. */
		pthread_mutex_lock(&s->lock);
		uint64_t used = s->use[TFS_TIER_DEVICE].used;
		int e = st_shrink(s, TFS_TIER_DEVICE,
				  used > s->chunk_size ?
					  used - s->chunk_size : 0,
				  b, true);
		pthread_mutex_unlock(&s->lock);
		if (e)
			break;
	}
	if (rc) {
		b->dmem = NULL;
		st_unreserve(b, TFS_TIER_DEVICE, len);
		return rc == -ENOMEM ? -ENOSPC : rc;
	}
	pthread_mutex_lock(&s->lock);
	b->generation++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Build a device copy from the host or disk copy. */
int st_dev_fill(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	void *scratch = NULL;
	int rc;

	if (b->dmem)
		return 0;
	if (!s->dev)
		return -ENODEV;
	rc = st_dev_alloc(b, b->size);
	if (rc)
		return rc;
	if (!b->has_host && !(scratch = st_chunk_get(s))) {
		rc = -ENOMEM;
		goto out_drop;
	}
	for (uint64_t off = 0; off < b->size; off += s->chunk_size) {
		uint64_t idx = off / s->chunk_size;
		size_t len = b->size - off < s->chunk_size ? b->size - off :
							      s->chunk_size;

		if (b->has_host &&
		    (idx >= b->nchunks || !b->chunks[idx])) {
			rc = s->dev->ops->zero(s->dev, b->dmem, len, off);
		} else if (b->has_host) {
			rc = s->dev->ops->write(s->dev, b->dmem, b->chunks[idx],
						len, off);
		} else {
			rc = st_disk_read(b, scratch, len, off);
			if (!rc)
				rc = s->dev->ops->write(s->dev, b->dmem,
							scratch, len, off);
		}
		if (rc)
			goto out_drop;
	}
	host_chunk_put(s->pool, scratch);
	st_count_written(s, TFS_TIER_DEVICE, b->size);
	return 0;

out_drop:
	host_chunk_put(s->pool, scratch);
	st_dev_drop(b);
	return rc;
}
