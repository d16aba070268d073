// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The host chunk pool. Without pin hooks every chunk is a mapping of its
 * own, kept on one free list. With them (host.pinned and a device that
 * page-locks), chunks are cut from slabs: one mapping, pinned once. Pinning
 * (cudaHostRegister) locks and maps every page for the device and costs far
 * more than copying a chunk; once per chunk it sat in the write path of
 * every new chunk. A slab goes back to the system only whole, once all its
 * chunks are free, so chunks are handed out from the fullest slab first,
 * letting the others drain.
 */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tiers/host.h"

/* The largest slab, and the share of the pool's limit one may take. */
#define SLAB_MAX ((size_t)64 << 20)
#define SLAB_SHARE 4

struct free_chunk {
	struct free_chunk *next;
};

struct slab {
	char *base; /* slab_chunks * chunk_size bytes, pinned whole */
	struct free_chunk *free;
	size_t nfree;
	bool pinned;
};

struct host_pool {
	pthread_mutex_t lock; /* protects the fields below */
	struct free_chunk *free; /* without slabs */
	size_t nfree; /* free chunks, in slabs or not */
	size_t keep; /* chunks */
	uint64_t gets; /* chunks handed out, ever */
	uint64_t gets_at_trim; /* gets at the last host_pool_trim() */
	size_t chunk_size;
	struct host_pool_hooks hooks;
	size_t slab_chunks; /* chunks per slab; 0: a mapping per chunk */
	struct slab *slabs; /* sorted by base */
	size_t nslabs, slabs_cap;
};

static size_t slab_bytes(const struct host_pool *p)
{
	return p->slab_chunks * p->chunk_size;
}

static void chunk_unmap(struct host_pool *p, void *c)
{
	if (p->hooks.release) {
		p->hooks.release(p->hooks.ctx, c, p->chunk_size);
		return;
	}
	if (p->hooks.unpin)
		p->hooks.unpin(p->hooks.ctx, c, p->chunk_size);
	munmap(c, p->chunk_size);
}

static void slab_unmap(struct host_pool *p, const struct slab *sl)
{
	if (sl->pinned && p->hooks.release) {
		p->hooks.release(p->hooks.ctx, sl->base, slab_bytes(p));
		return;
	}
	if (sl->pinned && p->hooks.unpin)
		p->hooks.unpin(p->hooks.ctx, sl->base, slab_bytes(p));
	munmap(sl->base, slab_bytes(p));
}

int host_pool_init(struct host_pool **out, size_t chunk_size, size_t keep,
		   const struct host_pool_hooks *hooks)
{
	struct host_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	if (hooks)
		p->hooks = *hooks;
	pthread_mutex_init(&p->lock, NULL);
	p->chunk_size = chunk_size;
	p->keep = keep / chunk_size;
	/* A slab of a quarter of the limit at most, so that a small pool
	 * does not pin many times what it may hold. */
	if (p->hooks.pin) {
		size_t bytes = keep / SLAB_SHARE < SLAB_MAX ?
				       keep / SLAB_SHARE :
				       SLAB_MAX;

		p->slab_chunks = bytes / chunk_size;
		if (p->slab_chunks < 2)
			p->slab_chunks = 0;
	}
	*out = p;
	return 0;
}

void host_pool_set_keep(struct host_pool *p, size_t keep)
{
	pthread_mutex_lock(&p->lock);
	p->keep = keep / p->chunk_size;
	pthread_mutex_unlock(&p->lock);
}

void host_pool_destroy(struct host_pool *p)
{
	if (!p)
		return;
	while (p->free) {
		struct free_chunk *c = p->free;

		p->free = c->next;
		chunk_unmap(p, c);
	}
	for (size_t i = 0; i < p->nslabs; i++)
		slab_unmap(p, &p->slabs[i]);
	free(p->slabs);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Index of the slab holding @c (lock held); the chunk must be a slab's. */
static size_t slab_find(struct host_pool *p, const void *c)
{
	size_t lo = 0, hi = p->nslabs;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if ((const char *)c >= p->slabs[mid].base)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Remove slab @i from the array; its chunks leave the free count. */
static struct slab slab_take(struct host_pool *p, size_t i)
{
	struct slab sl = p->slabs[i];

	p->nfree -= sl.nfree;
	memmove(&p->slabs[i], &p->slabs[i + 1],
		(p->nslabs - i - 1) * sizeof(*p->slabs));
	p->nslabs--;
	return sl;
}

/* A chunk from the fullest slab with a free one, or NULL (lock held). */
static void *slab_pop(struct host_pool *p)
{
	struct slab *best = NULL;
	struct free_chunk *c;

	for (size_t i = 0; i < p->nslabs; i++) {
		struct slab *sl = &p->slabs[i];

		if (sl->nfree && (!best || sl->nfree < best->nfree))
			best = sl;
	}
	if (!best)
		return NULL;
	c = best->free;
	best->free = c->next;
	best->nfree--;
	p->nfree--;
	return c;
}

/*
 * Map and pin a new slab; hand out its first chunk, free the rest. A slab
 * the device would not pin stays pageable: copies of it are staged.
 */
static void *slab_new(struct host_pool *p)
{
	size_t len = slab_bytes(p), i, at;
	struct slab sl = { 0 };
	char *m;

	/* Populated in one call rather than a fault per page, unless the
	 * pin hook places and faults the pages itself. */
	m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS |
			 (p->hooks.populates ? 0 : MAP_POPULATE),
		 -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	sl.base = m;
	sl.pinned = p->hooks.pin(p->hooks.ctx, m, len) == 0;
	for (i = p->slab_chunks; i-- > 1;) {
		struct free_chunk *c =
			(struct free_chunk *)(m + i * p->chunk_size);

		c->next = sl.free;
		sl.free = c;
	}
	sl.nfree = p->slab_chunks - 1;

	pthread_mutex_lock(&p->lock);
	if (p->nslabs == p->slabs_cap) {
		size_t cap = p->slabs_cap ? p->slabs_cap * 2 : 16;
		struct slab *n = realloc(p->slabs, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&p->lock);
			slab_unmap(p, &sl);
			return NULL;
		}
		p->slabs = n;
		p->slabs_cap = cap;
	}
	for (at = 0; at < p->nslabs && p->slabs[at].base < m; at++)
		;
	memmove(&p->slabs[at + 1], &p->slabs[at],
		(p->nslabs - at) * sizeof(*p->slabs));
	p->slabs[at] = sl;
	p->nslabs++;
	p->nfree += sl.nfree;
	pthread_mutex_unlock(&p->lock);
	return m;
}

void *host_chunk_get(struct host_pool *p)
{
	struct free_chunk *c;

	pthread_mutex_lock(&p->lock);
	if (p->slab_chunks) {
		c = slab_pop(p);
	} else {
		c = p->free;
		if (c) {
			p->free = c->next;
			p->nfree--;
		}
	}
	p->gets++;
	pthread_mutex_unlock(&p->lock);
	if (c)
		return c;
	if (p->slab_chunks)
		return slab_new(p);
	/* Fault the chunk in with one call rather than a fault per page
	 * as the write lands: about 20% on sequential writes here. */
	void *m = mmap(NULL, p->chunk_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	if (p->hooks.pin && p->hooks.pin(p->hooks.ctx, m, p->chunk_size)) {
		/* Pageable it is; the unpin hook copes with never-pinned
		 * memory. */
	}
	return m;
}

void host_chunk_put(struct host_pool *p, void *chunk)
{
	host_chunk_put_within(p, chunk, SIZE_MAX);
}

void host_chunk_put_within(struct host_pool *p, void *chunk, size_t room)
{
	struct free_chunk *c = chunk;
	struct slab gone = { 0 };

	if (!chunk)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->slab_chunks) {
		size_t i = slab_find(p, c);
		struct slab *sl = &p->slabs[i];

		c->next = sl->free;
		sl->free = c;
		sl->nfree++;
		p->nfree++;
		/* Past what the pool keeps, or past @room, a slab that came
		 * free goes. */
		if ((p->nfree > p->keep || p->nfree * p->chunk_size > room) &&
		    sl->nfree == p->slab_chunks)
			gone = slab_take(p, i);
		c = NULL;
	} else if (p->nfree < p->keep &&
		   (p->nfree + 1) * p->chunk_size <= room) {
		c->next = p->free;
		p->free = c;
		p->nfree++;
		c = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	if (c)
		chunk_unmap(p, c);
	if (gone.base)
		slab_unmap(p, &gone);
}

/* Unmap what trim or shrink took off the pool under its lock: a list of
 * chunks, an array of whole slabs. */
static void unmap_taken(struct host_pool *p, struct free_chunk *drop,
			struct slab *slabs, size_t nslabs)
{
	while (drop) {
		struct free_chunk *c = drop;

		drop = c->next;
		chunk_unmap(p, c);
	}
	for (size_t i = 0; i < nslabs; i++)
		slab_unmap(p, &slabs[i]);
	free(slabs);
}

void host_pool_trim(struct host_pool *p, size_t floor)
{
	struct free_chunk *drop = NULL;
	size_t keep_min = floor / p->chunk_size;
	struct slab *slabs = NULL;
	size_t nslabs = 0;

	pthread_mutex_lock(&p->lock);
	bool idle = p->gets == p->gets_at_trim;

	p->gets_at_trim = p->gets;
	if (idle && p->nfree > keep_min) {
		size_t n = (p->nfree - keep_min + 1) / 2;

		if (p->slab_chunks) {
			/* Whole free slabs only, as long as the floor
			 * stays kept. */
			slabs = malloc(p->nslabs * sizeof(*slabs));
			for (size_t i = p->nslabs; slabs && i-- > 0 && n;) {
				if (p->slabs[i].nfree != p->slab_chunks ||
				    p->nfree - p->slab_chunks < keep_min)
					continue;
				slabs[nslabs++] = slab_take(p, i);
				n = n > p->slab_chunks ? n - p->slab_chunks :
							 0;
			}
		}
		while (!p->slab_chunks && n--) {
			struct free_chunk *c = p->free;

			p->free = c->next;
			p->nfree--;
			c->next = drop;
			drop = c;
		}
	}
	pthread_mutex_unlock(&p->lock);
	unmap_taken(p, drop, slabs, nslabs);
}

void host_pool_shrink(struct host_pool *p, size_t room)
{
	struct free_chunk *drop = NULL;
	struct slab *slabs = NULL;
	size_t nslabs = 0;

	pthread_mutex_lock(&p->lock);
	if (p->slab_chunks) {
		/* whole free slabs only */
		slabs = malloc(p->nslabs * sizeof(*slabs));
		for (size_t i = p->nslabs; slabs && i-- > 0 &&
					   p->nfree * p->chunk_size > room;)
			if (p->slabs[i].nfree == p->slab_chunks)
				slabs[nslabs++] = slab_take(p, i);
	}
	while (!p->slab_chunks && p->nfree &&
	       p->nfree * p->chunk_size > room) {
		struct free_chunk *c = p->free;

		p->free = c->next;
		p->nfree--;
		c->next = drop;
		drop = c;
	}
	pthread_mutex_unlock(&p->lock);
	unmap_taken(p, drop, slabs, nslabs);
}

size_t host_pool_free_bytes(struct host_pool *p)
{
	pthread_mutex_lock(&p->lock);
	size_t n = p->nfree;
	pthread_mutex_unlock(&p->lock);
	return n * p->chunk_size;
}
