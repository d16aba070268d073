// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Persistent mounts in the store: syncing a buffer's bytes into a
 * committed version on the disk tier, adopting the committed versions a
 * restart finds, and the spill files of destroyed buffers that wait for the
 * journal to stop naming them. The journal itself is the caller's (fs/);
 * here it is a callback and the opaque chunk tables it records.
 */
#include <endian.h>
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

/* Add "chunk N: why" (or the file's "why") to @n. */
static void note_say(void *ctx, uint64_t idx, const char *why, bool lost)
{
	struct tier_adopt_note *n = ctx;
	size_t room = sizeof(n->text) - n->len;
	int w;

	if (idx != UINT64_MAX && lost) {
		for (uint32_t k = 0; k < n->nsaid; k++)
			if (n->said[k] == idx)
				return;
		if (n->nsaid < sizeof(n->said) / sizeof(n->said[0]))
			n->said[n->nsaid++] = idx;
	}
	if (lost)
		n->lost++;
	else
		n->mended++;
	if (room <= 4)
		return;
	if (idx == UINT64_MAX)
		w = snprintf(n->text + n->len, room, "%s%s", n->len ? "; " : "",
			     why);
	else
		w = snprintf(n->text + n->len, room, "%schunk %" PRIu64 ": %s",
			     n->len ? "; " : "", idx, why);
	if (w < 0)
		return;
	if ((size_t)w >= room) {
		/* Cut: say so. */
		memcpy(n->text + sizeof(n->text) - 4, "...", 4);
		n->len = sizeof(n->text);
		return;
	}
	n->len += (size_t)w;
}

static void note_lost(void *ctx, uint64_t idx, const char *why)
{
	note_say(ctx, idx, why, true);
}

int tier_buf_adopt(struct tier_store *s, uint64_t id, uint64_t size,
		   const void *map, size_t len, unsigned int flags,
		   struct tier_adopt_note *note, struct tier_buf **out)
{
	bool salvage = flags & TIER_ADOPT_SALVAGE, old;
	struct tier_buf *b;
	struct tier_dobj *o;
	size_t tlen = 0;
	uint32_t n = 0;
	int rc;

	memset(note, 0, sizeof(*note));
	/* The chunk table, then the page section; an earlier tierfs wrote
	 * the table alone. */
	if (len >= 4) {
		memcpy(&n, map, 4);
		n = le32toh(n);
		tlen = 4 + (uint64_t)n * 12 <= len ? 4 + (size_t)n * 12 : 0;
	}
	if (!tlen) {
		if (!salvage)
			return -EINVAL;
		note_say(note, UINT64_MAX, "its chunk table is cut short",
			 true);
		/* The whole entries there are. */
		tlen = len >= 4 ? 4 + (len - 4) / 12 * 12 : 0;
	}
	old = tlen == len;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	if (tlen >= 4 && tlen == 4 + (size_t)n * 12) {
		rc = tier_dobj_adopt(s->disk, id, map, tlen,
				     salvage ? note_lost : NULL, note, &o);
	} else {
		/* A table cut short: its whole entries, counted anew. */
		char *t = malloc(tlen >= 4 ? tlen : 4);
		uint32_t k = htole32((uint32_t)((tlen >= 4 ? tlen - 4 : 0) /
						12));

		rc = -ENOMEM;
		if (t) {
			memcpy(t, &k, 4);
			if (tlen > 4)
				memcpy(t + 4, (const char *)map + 4, tlen - 4);
			rc = tier_dobj_adopt(s->disk, id, t, tlen >= 4 ? tlen : 4,
					     note_lost, note, &o);
			free(t);
		}
	}
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
	rc = st_pages_adopt(b, (const char *)map + tlen, len - tlen, old,
			    note_say, note);
	if (!rc && note->lost && !salvage)
		rc = -EINVAL;
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

/* b->lock held. The image of @o, @b's disk copy or committed version:
 * its chunk table, then the page section. */
static int image_build(struct tier_buf *b, const struct tier_dobj *o,
		       void **map, size_t *len)
{
	size_t tl = tier_dobj_map(o, NULL, 0);
	size_t pl = st_pages_image(b, o, NULL, 0);
	char *m = malloc(tl + pl);

	if (!m)
		return -ENOMEM;
	tier_dobj_map(o, m, tl);
	st_pages_image(b, o, m + tl, pl);
	*map = m;
	*len = tl + pl;
	return 0;
}

int tier_buf_image(struct tier_buf *b, void **map, size_t *len)
{
	int rc = -ENOENT;

	pthread_rwlock_rdlock(&b->lock);
	if (b->dobj)
		rc = image_build(b, b->dobj, map, len);
	pthread_rwlock_unlock(&b->lock);
	return rc;
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
	rc = image_build(b, b->dobj, &map, &len);
	if (rc)
		goto out;
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
