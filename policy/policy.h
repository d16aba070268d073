/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Eviction policies. A policy keeps, per tier, the items that hold a copy in
 * that tier and answers "which one goes next" in O(1). Items embed a
 * struct pol_item, so the policy never allocates.
 *
 * Not thread-safe: the store calls every function with its lock held.
 */
#ifndef TFS_POLICY_H
#define TFS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierfs.h"

struct pol_node {
	struct pol_node *prev, *next;
};

/* Zero-initialise. On tier t's list exactly when link[t].next is set, so
 * the item needs no flag word: files are many, each byte counts. */
struct pol_item {
	struct pol_node link[TFS_TIER_COUNT];
	uint64_t last_access; /* ns since the epoch */
	uint64_t size; /* bytes, for the tie-break */
};

struct pol;

struct pol_ops {
	const char *name;
	/* Start tracking @it on @tier as the most recently used. */
	void (*insert)(struct pol *p, int tier, struct pol_item *it);
	/* Stop tracking @it on @tier. */
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
	struct pol_node head[TFS_TIER_COUNT];
	size_t count[TFS_TIER_COUNT];
};

/* The policy named @name, or NULL. */
const struct pol_ops *pol_lookup(const char *name);

/* Initialise @p with @ops. */
void pol_init(struct pol *p, const struct pol_ops *ops);

static inline bool pol_linked(const struct pol_item *it, int tier)
{
	return it->link[tier].next != NULL;
}

static inline void pol_insert(struct pol *p, int tier, struct pol_item *it)
{
	if (!pol_linked(it, tier))
		p->ops->insert(p, tier, it);
}

static inline void pol_remove(struct pol *p, int tier, struct pol_item *it)
{
	if (pol_linked(it, tier))
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
