// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Persistent mounts in the store: syncing a buffer's bytes into a
 * committed version on the disk tier, adopting the committed versions a
 * restart finds, and the spill files of destroyed buffers that wait for the
 * journal to stop naming them. The journal itself is the caller's (fs/);
 * here it is a callback and the opaque chunk tables it records.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "tiers/store_i.h"

struct graves {
	size_t n;
	struct tier_dobj *o[];
};

bool tier_store_persistent(struct tier_store *s)
{
	return s->persistent;
}

int tier_store_dirfd(struct tier_store *s)
{
	return s->persistent ? tier_disk_dirfd(s->disk) : -1;
}

const char *tier_store_dir(struct tier_store *s)
{
	return tier_disk_path(s->disk);
}

uint64_t tier_buf_id(struct tier_buf *b)
{
	return b->id;
}

void tier_store_set_next_id(struct tier_store *s, uint64_t next)
{
	pthread_mutex_lock(&s->lock);
	if (next > s->next_id)
		s->next_id = next;
	pthread_mutex_unlock(&s->lock);
}

uint64_t tier_store_next_id(struct tier_store *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t next = s->next_id;
	pthread_mutex_unlock(&s->lock);
	return next;
}

int tier_store_spill_ids(struct tier_store *s, uint64_t **ids, size_t *n)
{
	return tier_disk_list(s->disk, ids, n);
}

void tier_store_spill_remove(struct tier_store *s, uint64_t id)
{
	tier_disk_remove(s->disk, id);
}

int tier_buf_adopt(struct tier_store *s, uint64_t id, uint64_t size,
		   const void *map, size_t len, struct tier_buf **out)
{
	struct tier_buf *b = calloc(1, sizeof(*b));
	struct tier_dobj *o;
	int rc;

	if (!b)
		return -ENOMEM;
	rc = tier_dobj_adopt(s->disk, id, size, map, len, &o);
	if (rc) {
		free(b);
		return rc;
	}
	b->s = s;
	pthread_rwlock_init(&b->lock, NULL);
	b->id = id;
	b->size = size;
	b->dobj = b->pobj = o;
	b->synced = true;
	rc = st_pages_from_disk(b);
	if (rc) {
		st_chunks_free(b);
		pthread_rwlock_destroy(&b->lock);
		tier_dobj_close(s->disk, o);
		free(b);
		return rc;
	}
	pthread_mutex_lock(&s->lock);
	if (id >= s->next_id)
		s->next_id = id + 1;
	b->generation = 1;
	b->pi.last_access = st_now_ns();
	b->pi.size = size;
	b->present = 1u << TFS_TIER_DISK;
	s->use[TFS_TIER_DISK].buffers++;
	s->files++;
	s->logical += size;
	st_charge(s, b, TFS_TIER_DISK, (int64_t)tier_dobj_stored(o));
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	*out = b;
	return 0;
}

/* b->lock held for writing. The disk copy becomes the committed version;
 * tier_dobj_commit_prepare() succeeded on it, so this cannot fail. */
static void commit_locked(struct tier_buf *b)
{
	int rc = tier_dobj_commit(b->s->disk, b->dobj);

	if (rc)
		tfs_err("buffer %" PRIu64 ": cannot commit its version: %s",
			b->id, strerror(-rc));
	b->pobj = b->dobj;
	b->synced = true;
	b->sync_pending = false;
	st_disk_recharge(b);
}

int tier_buf_sync(struct tier_buf *b, unsigned int flags, tier_sync_fn fn,
		  void *ctx)
{
	struct tier_store *s = b->s;
	void *map = NULL;
	size_t len;
	int rc;

	pthread_rwlock_wrlock(&b->lock);
	if (b->synced && b->pobj && !b->sync_pending) {
		pthread_rwlock_unlock(&b->lock);
		return 1;
	}
	rc = st_wc_flush(b);
	if (!rc && !b->dobj)
		rc = st_disk_spill(b);
	if (!rc && !(flags & TIER_SYNC_DEFER))
		rc = tier_dobj_sync(s->disk, b->dobj);
	if (!rc)
		rc = tier_dobj_commit_prepare(s->disk, b->dobj);
	if (rc)
		goto out;
	len = tier_dobj_map(b->dobj, NULL, 0);
	map = malloc(len);
	if (!map) {
		rc = -ENOMEM;
		goto out;
	}
	tier_dobj_map(b->dobj, map, len);
	rc = fn(ctx, b->id, b->size, map, len);
	free(map);
	if (rc)
		goto out;
	if (flags & TIER_SYNC_DEFER)
		b->sync_pending = true;
	else
		commit_locked(b);
out:
	st_publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_sync_commit(struct tier_buf *b)
{
	pthread_rwlock_wrlock(&b->lock);
	if (b->sync_pending && b->dobj)
		commit_locked(b);
	pthread_rwlock_unlock(&b->lock);
	return 0;
}

void st_pobj_release(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	struct tier_dobj *o = b->pobj;
	bool keep, queued = false;

	b->pobj = NULL;
	pthread_mutex_lock(&s->lock);
	keep = s->keep_files;
	if (!keep && s->ngraves == s->graves_cap) {
		size_t cap = s->graves_cap ? s->graves_cap * 2 : 64;
		struct tier_dobj **g = realloc(s->graves, cap * sizeof(*g));

		if (g) {
			s->graves = g;
			s->graves_cap = cap;
		}
	}
	if (!keep && s->ngraves < s->graves_cap) {
		s->graves[s->ngraves++] = o;
		queued = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (keep) {
		tier_dobj_close(s->disk, o);
	} else if (!queued) {
		/* Out of memory: removing it now risks only that a crash
		 * before the journal's next sync drops this file, which the
		 * user deleted anyway. */
		tfs_warn("out of memory: removing spill file '%s' before "
			 "the journal records why", tier_dobj_path(o));
		tier_dobj_destroy(s->disk, o);
	}
	st_uncharge_all(b, TFS_TIER_DISK);
}

void *tier_store_graves_take(struct tier_store *s)
{
	struct graves *g = NULL;

	pthread_mutex_lock(&s->lock);
	if (s->ngraves) {
		g = malloc(sizeof(*g) + s->ngraves * sizeof(g->o[0]));
		if (g) {
			g->n = s->ngraves;
			memcpy(g->o, s->graves, s->ngraves * sizeof(g->o[0]));
			s->ngraves = 0;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return g;
}

void tier_store_graves_bury(struct tier_store *s, void *graves)
{
	struct graves *g = graves;

	if (!g)
		return;
	for (size_t k = 0; k < g->n; k++)
		tier_dobj_destroy(s->disk, g->o[k]);
	free(g);
}

void tier_store_graves_keep(struct tier_store *s, void *graves)
{
	struct graves *g = graves;

	if (!g)
		return;
	for (size_t k = 0; k < g->n; k++)
		tier_dobj_close(s->disk, g->o[k]);
	free(g);
}

uint32_t tier_store_chunk_size(struct tier_store *s)
{
	return s->chunk_size;
}

void tier_store_keep_files(struct tier_store *s)
{
	pthread_mutex_lock(&s->lock);
	s->keep_files = true;
	pthread_mutex_unlock(&s->lock);
}
