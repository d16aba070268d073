/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Eviction policies. A policy keeps, per tier, the items that hold a copy in
 * that tier and answers "which one goes next" in amortised O(1). Items
 * embed a struct pol_item; the policy's own index (an array per tier)
 * grows as items come and is freed by pol_destroy().
 *
 * Not thread-safe: the store calls every function with its lock held.
 */
#ifndef TFS_POLICY_H
#define TFS_POLICY_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierfs.h"

/* Zero-initialise. On tier t's list exactly when slot[t] is set (its
 * place in the tier's array, 1-based), so the item needs no flag word:
 * files are many, each byte counts. */
struct pol_item {
	uint32_t slot[TFS_TIER_COUNT];
	uint64_t last_access; /* ns since the epoch */
	uint64_t size; /* bytes, for the tie-break */
};

/* One tier's order: a ring, positions lo..hi-1 (wrapping), coldest
 * first, with holes; cap a power of two. */
struct pol_list {
	struct pol_item **v;
	uint32_t lo, hi, cap;
	uint32_t holes; /* NULLs between lo and hi */
};

struct pol;

struct pol_ops {
	const char *name;
	/* Start tracking @it on @tier as the most recently used. */
	void (*insert)(struct pol *p, int tier, struct pol_item *it);
	/* Stop tracking @it on @tier, a no-op when it is not tracked. */
	void (*remove)(struct pol *p, int tier, struct pol_item *it);
	/* @it was accessed at @now: it becomes the most recent on every tier. */
	void (*touch)(struct pol *p, struct pol_item *it, uint64_t now);
	/*
	 * The next eviction candidate on @tier after @prev (NULL: the first).
	 * Returns NULL when there are no more.
	 */
	struct pol_item *(*victim)(struct pol *p, int tier,
				   struct pol_item *prev);
	/*
	 * victim()'s order reversed: the next item to bring back up from
	 * @tier after @prev (NULL: the first), the most wanted first.
	 * Returns NULL when there are no more.
	 */
	struct pol_item *(*hot)(struct pol *p, int tier,
				struct pol_item *prev);
};

struct pol {
	const struct pol_ops *ops;
	struct pol_list list[TFS_TIER_COUNT];
	size_t count[TFS_TIER_COUNT];
	/* Inserts that found no memory for the index: the item stayed off
	 * the list (never a victim) until the next insert of it. */
	uint64_t unlisted;
};

/* The policy named @name, or NULL. */
const struct pol_ops *pol_lookup(const char *name);

/* Initialise @p with @ops. */
void pol_init(struct pol *p, const struct pol_ops *ops);
/* Free @p's index; its items are no longer listed anywhere after. */
void pol_destroy(struct pol *p);

static inline bool pol_linked(const struct pol_item *it, int tier)
{
	return it->slot[tier] != 0;
}

static inline void pol_insert(struct pol *p, int tier, struct pol_item *it)
{
	if (!pol_linked(it, tier))
		p->ops->insert(p, tier, it);
}

/* Stop tracking @it on @tier, if it is tracked there (the op checks:
 * it may know without reading @it). */
static inline void pol_remove(struct pol *p, int tier, struct pol_item *it)
{
	p->ops->remove(p, tier, it);
}

static inline void pol_touch(struct pol *p, struct pol_item *it, uint64_t now)
{
	p->ops->touch(p, it, now);
}

static inline struct pol_item *pol_victim(struct pol *p, int tier,
					  struct pol_item *prev)
{
	return p->ops->victim(p, tier, prev);
}

static inline struct pol_item *pol_hot(struct pol *p, int tier,
				       struct pol_item *prev)
{
	return p->ops->hot(p, tier, prev);
}

#endif
