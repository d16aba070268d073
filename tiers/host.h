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

#include <stdbool.h>
#include <stddef.h>

struct host_pool;

/*
 * Called for each range the pool maps (pin) and before it unmaps one
 * (unpin, with the same pointer and length). With a pin hook the ranges are
 * slabs of many chunks, pinned once: a quarter of the limit at most, 64 MiB
 * at most; a slab goes back to the system only when all its chunks are
 * free.
 */
struct host_pool_hooks {
	int (*pin)(void *ctx, void *ptr, size_t len);
	void (*unpin)(void *ctx, void *ptr, size_t len);
	/*
	 * Optional: unpin and unmap a range, in place of unpin and munmap,
	 * possibly later on a thread of the device's (the pool may be giving
	 * it back in a writer's path). With populates set, pin faults the
	 * pages in itself (in parallel, on the device's NUMA node), so slabs
	 * are mapped without MAP_POPULATE.
	 */
	void (*release)(void *ctx, void *ptr, size_t len);
	bool populates;
	void *ctx;
};

/*
 * A pool of @chunk_size chunks that keeps up to @keep bytes of free chunks
 * (with slabs, more while a slab that is not wholly free holds them).
 * @hooks may be NULL; pinning is why freed chunks are worth keeping even
 * more: page-locking costs far more than a page fault.
 */
int host_pool_init(struct host_pool **out, size_t chunk_size, size_t keep,
		   const struct host_pool_hooks *hooks);
void host_pool_destroy(struct host_pool *p);
void host_pool_set_keep(struct host_pool *p, size_t keep);

/*
 * Give back half of the free chunks above @floor bytes, if no chunk was
 * taken since the last call: called periodically, it returns an idle
 * pool's memory to the system over a few periods while a busy one keeps
 * its chunks.
 */
void host_pool_trim(struct host_pool *p, size_t floor);

/* Bytes of free chunks the pool holds now. */
size_t host_pool_free_bytes(struct host_pool *p);

/* A chunk of chunk_size bytes with undefined content, or NULL. */
void *host_chunk_get(struct host_pool *p);
void host_chunk_put(struct host_pool *p, void *chunk);

/* host_chunk_put(), but the pool keeps the chunk only while its free
 * chunks, this one included, take at most @room bytes (with slabs: a
 * slab that came free goes past @room). */
void host_chunk_put_within(struct host_pool *p, void *chunk, size_t room);

/* Give free chunks back to the system until the pool holds at most
 * @room bytes of them (with slabs, whole free slabs only: it may keep
 * more). */
void host_pool_shrink(struct host_pool *p, size_t room);

#endif
