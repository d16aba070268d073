/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Eviction policies. A policy keeps, per tier, the items that hold a copy in
 * that tier and answers "which one goes next" in amortised O(1). Items
 * embed a struct pol_item; the policy's own index (an array per tier)
 * grows as items come and is freed by pol_destroy().
 *
 * Soft pins: an item of level 1..POL_LEVEL_MAX (pol_item.level) is offered
 * as a victim only after every item of a lower level, level 0 being the
 * unpinned ones; within a level, in the policy's own order.
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
	/* The soft pin's priority, 0: none; changed only through
	 * pol_set_level(). (In the padding after slot[]: no bigger.) */
	uint8_t level;
	uint64_t last_access; /* ns since the epoch */
	uint64_t size; /* bytes, for the tie-break */
};

/* Soft pin priorities, 1 (evicted first among soft pins) to this. */
#define POL_LEVEL_MAX 7
#define POL_LEVELS (POL_LEVEL_MAX + 1)

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
	 * The next eviction candidate on @tier after @prev (NULL: the first):
	 * every item of level 0 before any of level 1, and so on. Returns
	 * NULL when there are no more.
	 */
	struct pol_item *(*victim)(struct pol *p, int tier,
				   struct pol_item *prev);
	/* victim()'s first item of a level at least @level on @tier, or
	 * NULL: where a walk of the soft pins starts. */
	struct pol_item *(*first_at)(struct pol *p, int tier, int level);
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
	/* One order per tier and soft pin level; an item's slot[t] is its
	 * place in list[t][level]. */
	struct pol_list list[TFS_TIER_COUNT][POL_LEVELS];
	size_t count[TFS_TIER_COUNT]; /* items on the tier, all levels */
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

static inline struct pol_item *pol_first_at(struct pol *p, int tier,
					    int level)
{
	return p->ops->first_at(p, tier, level);
}

static inline struct pol_item *pol_hot(struct pol *p, int tier,
				       struct pol_item *prev)
{
	return p->ops->hot(p, tier, prev);
}

/*
 * Give @it the soft pin level @level (0: none, at most POL_LEVEL_MAX): it
 * moves to that level's order on every tier it is on, at the hot end as an
 * insert puts it.
 */
static inline void pol_set_level(struct pol *p, struct pol_item *it,
				 uint8_t level)
{
	bool on[TFS_TIER_COUNT];

	if (it->level == level)
		return;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		on[t] = pol_linked(it, t);
		pol_remove(p, t, it);
	}
	it->level = level;
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		if (on[t])
			pol_insert(p, t, it);
}

/*
 * Admission: a count-min sketch of how often keys were accessed, with
 * 4-bit counters that halve once the sketch has seen POL_SKETCH_SAMPLE
 * (its width times ten) accesses, so that old popularity fades (TinyLFU).
 * A fixed size, allocated once; not thread-safe, as the lists.
 */
struct pol_sketch {
	uint64_t *rows; /* depth rows of width 4-bit counters, packed */
	uint32_t width; /* counters per row, a power of two */
	uint32_t added; /* accesses since the last halving */
	uint32_t sample;
};

#define POL_SKETCH_DEPTH 4

/* A sketch for about @items keys: 0, or -ENOMEM. */
int pol_sketch_init(struct pol_sketch *k, uint32_t items);
void pol_sketch_destroy(struct pol_sketch *k);
/* Count one access of @key. */
void pol_sketch_add(struct pol_sketch *k, uint64_t key);
/* How often @key was accessed, estimated: never less than the truth
 * since the last halving, at most 15. */
unsigned int pol_sketch_estimate(const struct pol_sketch *k, uint64_t key);

/*
 * TinyLFU's rule: admit a newcomer estimated @cand times over the victims
 * it would push out, the most frequent of them estimated @victim times,
 * only when it is accessed more often.
 */
static inline bool pol_admit(unsigned int cand, unsigned int victim)
{
	return cand > victim;
}

#endif
