// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Least recently used, larger first on ties. One intrusive list per tier,
 * most recent at head.next, so every operation is O(1).
 */
#include <string.h>

#include "policy/policy.h"

#define item_of(node, tier) \
	((struct pol_item *)((char *)(node) - \
			     offsetof(struct pol_item, link) - \
			     (size_t)(tier) * sizeof(struct pol_node)))

static void list_add_head(struct pol_node *head, struct pol_node *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

static void list_del(struct pol_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/*
 * Put @it at the hot end of @tier. Two items touched in the same nanosecond
 * are a tie: the larger one goes first, since it frees more for one
 * decision, so a larger newcomer steps one place colder. Only the neighbour
 * is looked at, which keeps this O(1).
 */
static void place_hot(struct pol *p, int tier, struct pol_item *it)
{
	struct pol_node *head = &p->head[tier];
	struct pol_node *first = head->next;

	if (first != head) {
		struct pol_item *nb = item_of(first, tier);

		if (nb->last_access == it->last_access && it->size > nb->size) {
			list_add_head(first, &it->link[tier]);
			return;
		}
	}
	list_add_head(head, &it->link[tier]);
}

static void lru_insert(struct pol *p, int tier, struct pol_item *it)
{
	place_hot(p, tier, it);
	p->count[tier]++;
}

static void lru_remove(struct pol *p, int tier, struct pol_item *it)
{
	list_del(&it->link[tier]);
	p->count[tier]--;
}

static void lru_touch(struct pol *p, struct pol_item *it, uint64_t now)
{
	it->last_access = now;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		if (!pol_linked(it, t))
			continue;
		list_del(&it->link[t]);
		place_hot(p, t, it);
	}
}

/* Walk from the cold end towards the hot one. */
static struct pol_item *lru_victim(struct pol *p, int tier,
				   struct pol_item *prev)
{
	struct pol_node *head = &p->head[tier];
	struct pol_node *n = prev ? prev->link[tier].prev : head->prev;

	return n == head ? NULL : item_of(n, tier);
}

/* Walk from the hot end towards the cold one. */
static struct pol_item *lru_hot(struct pol *p, int tier, struct pol_item *prev)
{
	struct pol_node *head = &p->head[tier];
	struct pol_node *n = prev ? prev->link[tier].next : head->next;

	return n == head ? NULL : item_of(n, tier);
}

static const struct pol_ops lru_ops = {
	.name = "lru",
	.insert = lru_insert,
	.remove = lru_remove,
	.touch = lru_touch,
	.victim = lru_victim,
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
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		p->head[t].prev = p->head[t].next = &p->head[t];
}
