/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Host tier memory: full chunks come from a pool that keeps freed chunks for
 * reuse. Fresh anonymous memory costs a page fault per 4 KiB on first touch
 * (about 350 MB/s on the VMs we measured), ten times slower than writing to
 * memory already faulted in, so a chunk freed by a spill is the cheapest
 * place for the next write to land.
 *
 * Thread-safe; the pool's lock is a leaf (taken under the store lock).
 */
#ifndef TFS_TIERS_HOST_H
#define TFS_TIERS_HOST_H

#include <stddef.h>

struct host_pool;

/* A pool of @chunk_size chunks that keeps up to @keep bytes of free chunks. */
int host_pool_init(struct host_pool **out, size_t chunk_size, size_t keep);
void host_pool_destroy(struct host_pool *p);
void host_pool_set_keep(struct host_pool *p, size_t keep);

/* A chunk of chunk_size bytes with undefined content, or NULL. */
void *host_chunk_get(struct host_pool *p);
void host_chunk_put(struct host_pool *p, void *chunk);

#endif
