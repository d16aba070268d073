// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Host memory as the store takes it: chunks from the pool, kept within the
 * host limit, and what a malloc'd block of the host copy costs.
 */
#include <pthread.h>

#include "config/log.h"
#include "tiers/store_i.h"

uint64_t st_nchunks_for(struct tier_store *s, uint64_t size)
{
	return (size + s->chunk_size - 1) / s->chunk_size;
}

uint64_t st_malloc_cost(uint64_t n)
{
	/* glibc: an 8-byte header and 16-byte steps, 32 bytes at least;
	 * blocks of 128 KiB and more may be mapped, whole pages then. */
	if (!n)
		return 0;
	if (n < 128 * 1024)
		return n + 8 <= 32 ? 32 : (n + 8 + 15) / 16 * 16;
	return (n + 32 + 4095) / 4096 * 4096;
}

void *st_chunk_get(struct tier_store *s)
{
	void *c = host_chunk_get(s->pool);

	if (!c) {
		__atomic_add_fetch(&s->host_alloc_failures, 1,
				   __ATOMIC_RELAXED);
		tfs_err("cannot allocate a host chunk of %u bytes: out of memory",
			s->chunk_size);
	}
	return c;
}

void st_chunk_put(struct tier_store *s, void *c)
{
	uint64_t room;

	if (!c)
		return;
	/* The pool's chunks count within the host limit: keep one only
	 * while the tier's use and the pool fit in it. */
	pthread_mutex_lock(&s->lock);
	room = s->use[TFS_TIER_HOST].used < s->use[TFS_TIER_HOST].limit ?
		       s->use[TFS_TIER_HOST].limit -
			       s->use[TFS_TIER_HOST].used :
		       0;
	pthread_mutex_unlock(&s->lock);
	host_chunk_put_within(s->pool, c, room);
}
