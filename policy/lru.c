// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Least recently used, larger first on ties.
 *
 * One ring of item pointers per tier, coldest at position lo, hottest at
 * hi - 1. Positions are 32-bit counters that wrap; position p lives at
 * v[p & (cap - 1)], and an item knows its position (slot[t] = p + 1; 0:
 * not listed, so position UINT32_MAX is never used). Removal leaves a
 * hole (NULL) that the walks skip.
 *
 * A ring, not an intrusive list, because of what a decision touches:
 * walking a list from its cold end is a chain of dependent loads into
 * items scattered over the heap, one cache miss (and at millions of items
 * a TLB miss) each; the ring is read in order, so the items a few places
 * ahead are prefetched while this one is decided. And an item taken from
 * the cold end and put back at the hot one moves no other item: the ring
 * turns. Doubling the ring copies its pointers and leaves every item's
 * position as it is (p keeps its meaning under a larger mask). Only when
 * the ring is full and a quarter or more of it is holes (items touched or
 * removed from the middle) are the live entries packed, each item's new
 * position written: paid for by the removals that made the holes, each of
 * which touched its item already. bench/evict_cost measures it, see
 * bench/README.md.
 *
 * Soft pins: one ring per tier and level (pol_item.level); the walks go
 * through level 0's ring, then level 1's, and so on (hot walks the other
 * way), an empty level costing one look.
 */
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

/* How many places ahead a walk prefetches: enough to cover a miss to DRAM
 * at a few ns per decision. */
#define PREFETCH_AHEAD 16

static inline struct pol_item **at(const struct pol_list *l, uint32_t p)
{
	return &l->v[p & (l->cap - 1)];
}

/* Whether position @p is in [lo, hi), wrapping. */
static inline bool inside(const struct pol_list *l, uint32_t p)
{
	return p - l->lo < l->hi - l->lo;
}

static void prefetch_at(const struct pol_list *l, uint32_t p)
{
	if (inside(l, p) && *at(l, p))
		__builtin_prefetch(*at(l, p), 1);
}

/* Move the ring into an array of @ncap (a power of two, at least the
 * span): 0, or -ENOMEM with nothing changed. No item moves position. */
static int resize(struct pol_list *l, uint32_t ncap)
{
	struct pol_item **v = calloc(ncap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (uint32_t p = l->lo; p != l->hi; p++)
		v[p & (ncap - 1)] = *at(l, p);
	free(l->v);
	l->v = v;
	l->cap = ncap;
	return 0;
}

/* Pack the live entries of @l towards its cold end. */
static void compact(struct pol_list *l, int tier)
{
	uint32_t w = l->lo;

	for (uint32_t p = l->lo; p != l->hi; p++) {
		struct pol_item *it = *at(l, p);

		prefetch_at(l, p + PREFETCH_AHEAD);
		if (!it)
			continue;
		*at(l, p) = NULL;
		if (w == UINT32_MAX) /* never a position: see above */
			w++;
		*at(l, w) = it;
		it->slot[tier] = w + 1;
		w++;
	}
	l->hi = w;
	l->holes = 0;
	for (uint32_t p = l->lo; p != l->hi; p++)
		if (!*at(l, p))
			l->holes++;
	/* Mostly empty after a mass removal: give half of it back. */
	if (l->cap > 1024 && l->hi - l->lo < l->cap / 4)
		resize(l, l->cap / 2);
}

/* Room for one more at position hi: 0, or -ENOMEM with the list
 * unchanged. */
static int make_room(struct pol_list *l, int tier)
{
	if (l->hi - l->lo < l->cap)
		return 0;
	if (l->holes && l->holes >= l->cap / 4) {
		compact(l, tier);
		return 0;
	}
	if (l->cap < (1u << 31) && !resize(l, l->cap ? l->cap * 2 : 64))
		return 0;
	/* No memory to grow: any hole will do. */
	if (!l->holes)
		return -ENOMEM;
	compact(l, tier);
	return 0;
}

/* Append @it at hi (room made). */
static void push(struct pol_list *l, int tier, struct pol_item *it)
{
	*at(l, l->hi) = it;
	it->slot[tier] = l->hi + 1;
	l->hi++;
}

/*
 * Put @it at the hot end of @tier. Two items touched in the same nanosecond
 * are a tie: the larger one goes first, since it frees more for one
 * decision, so a larger newcomer steps one place colder. Only the neighbour
 * is looked at, which keeps this O(1).
 */
static int place_hot(struct pol *p, int tier, struct pol_item *it)
{
	struct pol_list *l = &p->list[tier][it->level];
	struct pol_item *nb;

	if (make_room(l, tier))
		return -ENOMEM;
	if (l->hi == UINT32_MAX) {
		/* Never a position: left as a hole. */
		*at(l, l->hi) = NULL;
		l->hi++;
		l->holes++;
		if (make_room(l, tier))
			return -ENOMEM;
	}
	nb = l->hi != l->lo ? *at(l, l->hi - 1) : NULL;
	if (nb && nb->last_access == it->last_access && it->size > nb->size) {
		/* nb's place to @it, nb one place hotter. */
		*at(l, l->hi - 1) = it;
		it->slot[tier] = l->hi;
		push(l, tier, nb);
	} else {
		push(l, tier, it);
	}
	return 0;
}

/*
 * Take @it out of @l; returns whether it was listed. The coldest (the
 * victim just decided) is known by its place, so its slot is not read:
 * that load would wait on a cache and TLB miss into a scattered item,
 * where the stores that follow it do not stall.
 */
static bool take_out(struct pol_list *l, int tier, struct pol_item *it)
{
	uint32_t p;

	if (l->lo != l->hi && *at(l, l->lo) == it)
		p = l->lo;
	else if (it->slot[tier])
		p = it->slot[tier] - 1;
	else
		return false;

	*at(l, p) = NULL;
	it->slot[tier] = 0;
	if (p + 1 == l->hi)
		l->hi--;
	else if (p == l->lo)
		l->lo++;
	else
		l->holes++;
	if (l->lo == l->hi)
		l->holes = 0;
	return true;
}

static void lru_insert(struct pol *p, int tier, struct pol_item *it)
{
	if (place_hot(p, tier, it)) {
		p->unlisted++;
		return;
	}
	p->count[tier]++;
}

static void lru_remove(struct pol *p, int tier, struct pol_item *it)
{
	if (take_out(&p->list[tier][it->level], tier, it))
		p->count[tier]--;
}

static void lru_touch(struct pol *p, struct pol_item *it, uint64_t now)
{
	it->last_access = now;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		if (!pol_linked(it, t))
			continue;
		take_out(&p->list[t][it->level], t, it);
		/* Cannot fail: taking it out left room, or a hole. */
		if (place_hot(p, t, it)) {
			p->count[t]--;
			p->unlisted++;
		}
	}
}

/* The coldest position of @l, the holes at its cold end gone for good. */
static uint32_t cold_end(struct pol_list *l)
{
	while (l->lo != l->hi && !*at(l, l->lo)) {
		l->lo++;
		l->holes--;
	}
	return l->lo;
}

/* Walk from the cold end towards the hot one, level by level up. */
static struct pol_item *lru_victim(struct pol *p, int tier,
				   struct pol_item *prev)
{
	int lv = prev ? prev->level : 0;
	struct pol_list *l = &p->list[tier][lv];
	uint32_t k = prev ? prev->slot[tier] : cold_end(l);

	for (;;) {
		for (; inside(l, k); k++) {
			prefetch_at(l, k + PREFETCH_AHEAD);
			if (*at(l, k))
				return *at(l, k);
		}
		if (++lv == POL_LEVELS)
			return NULL;
		l = &p->list[tier][lv];
		k = cold_end(l);
	}
}

/* The coldest item on @tier of level @level or above. */
static struct pol_item *lru_first_at(struct pol *p, int tier, int level)
{
	for (int lv = level; lv < POL_LEVELS; lv++) {
		struct pol_list *l = &p->list[tier][lv];
		uint32_t k = cold_end(l);

		if (k != l->hi)
			return *at(l, k);
	}
	return NULL;
}

/* Walk from the hot end towards the cold one, level by level down. */
static struct pol_item *lru_hot(struct pol *p, int tier, struct pol_item *prev)
{
	int lv = prev ? prev->level : POL_LEVEL_MAX;
	struct pol_list *l = &p->list[tier][lv];
	uint32_t k = prev ? prev->slot[tier] - 1 : l->hi;

	for (;;) {
		while (k != l->lo) {
			k--;
			prefetch_at(l, k - PREFETCH_AHEAD);
			if (*at(l, k))
				return *at(l, k);
		}
		if (lv-- == 0)
			return NULL;
		l = &p->list[tier][lv];
		k = l->hi;
	}
}

static const struct pol_ops lru_ops = {
	.name = "lru",
	.insert = lru_insert,
	.remove = lru_remove,
	.touch = lru_touch,
	.victim = lru_victim,
	.first_at = lru_first_at,
	.hot = lru_hot,
};

const struct pol_ops *pol_lookup(const char *name)
{
	if (!strcmp(name, lru_ops.name))
		return &lru_ops;
	return NULL;
}

void pol_init(struct pol *p, const struct pol_ops *ops)
{
	memset(p, 0, sizeof(*p));
	p->ops = ops;
}

void pol_destroy(struct pol *p)
{
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		for (int lv = 0; lv < POL_LEVELS; lv++)
			free(p->list[t][lv].v);
	memset(p->list, 0, sizeof(p->list));
}
