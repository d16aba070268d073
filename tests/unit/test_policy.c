// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * LRU policy: order, ties, removal, and the cost of one eviction decision
 * at 1k, 100k and 1M resident buffers (printed as a ratio to the 1k case;
 * an O(1) decision keeps it near 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "policy/policy.h"
#include "tap.h"

static struct pol p;

static void setup(void)
{
	pol_init(&p, pol_lookup("lru"));
}

static void test_lookup(void)
{
	CHECK(pol_lookup("lru") != NULL);
	CHECK(pol_lookup("fifo") == NULL);
}

static void test_order(void)
{
	struct pol_item it[4] = { 0 };

	setup();
	for (int i = 0; i < 4; i++) {
		it[i].last_access = (uint64_t)i + 1;
		pol_insert(&p, TFS_TIER_HOST, &it[i]);
	}
	CHECK(pol_victim(&p, TFS_TIER_HOST, NULL) == &it[0]);
	pol_touch(&p, &it[0], 10);
	CHECK(pol_victim(&p, TFS_TIER_HOST, NULL) == &it[1]);
	CHECK(pol_victim(&p, TFS_TIER_HOST, &it[1]) == &it[2]);
	CHECK(pol_victim(&p, TFS_TIER_HOST, &it[2]) == &it[3]);
	CHECK(pol_victim(&p, TFS_TIER_HOST, &it[3]) == &it[0]);
	CHECK(pol_victim(&p, TFS_TIER_HOST, &it[0]) == NULL);
	CHECK(pol_victim(&p, TFS_TIER_DEVICE, NULL) == NULL);
	CHECK_EQ(p.count[TFS_TIER_HOST], 4);
	/* Promotion's order is eviction's reversed. */
	CHECK(pol_hot(&p, TFS_TIER_HOST, NULL) == &it[0]);
	CHECK(pol_hot(&p, TFS_TIER_HOST, &it[0]) == &it[3]);
	CHECK(pol_hot(&p, TFS_TIER_HOST, &it[3]) == &it[2]);
	CHECK(pol_hot(&p, TFS_TIER_HOST, &it[2]) == &it[1]);
	CHECK(pol_hot(&p, TFS_TIER_HOST, &it[1]) == NULL);
	CHECK(pol_hot(&p, TFS_TIER_DEVICE, NULL) == NULL);
}

static void test_ties_larger_first(void)
{
	struct pol_item small = { .last_access = 5, .size = 10 };
	struct pol_item big = { .last_access = 5, .size = 1000 };

	setup();
	pol_insert(&p, TFS_TIER_DEVICE, &small);
	pol_insert(&p, TFS_TIER_DEVICE, &big);
	CHECK(pol_victim(&p, TFS_TIER_DEVICE, NULL) == &big);
	CHECK(pol_victim(&p, TFS_TIER_DEVICE, &big) == &small);
}

static void test_per_tier(void)
{
	struct pol_item a = { .last_access = 1 }, b = { .last_access = 2 };

	setup();
	pol_insert(&p, TFS_TIER_DEVICE, &a);
	pol_insert(&p, TFS_TIER_HOST, &a);
	pol_insert(&p, TFS_TIER_HOST, &b);
	pol_touch(&p, &a, 3);
	CHECK(pol_victim(&p, TFS_TIER_HOST, NULL) == &b);
	CHECK(pol_victim(&p, TFS_TIER_DEVICE, NULL) == &a);
	pol_remove(&p, TFS_TIER_HOST, &b);
	pol_remove(&p, TFS_TIER_HOST, &b); /* not linked: no-op */
	CHECK(pol_victim(&p, TFS_TIER_HOST, NULL) == &a);
	CHECK(!pol_linked(&b, TFS_TIER_HOST));
	CHECK_EQ(p.count[TFS_TIER_HOST], 1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ns per decision (pick the victim, remove it, reinsert it as hot). */
static double decision_ns(size_t n)
{
	struct pol_item *it = calloc(n, sizeof(*it));
	const int rounds = 200000;

	setup();
	for (size_t i = 0; i < n; i++) {
		it[i].last_access = i;
		pol_insert(&p, TFS_TIER_HOST, &it[i]);
	}
	double t0 = now_s();

	for (int r = 0; r < rounds; r++) {
		struct pol_item *v = pol_victim(&p, TFS_TIER_HOST, NULL);

		pol_remove(&p, TFS_TIER_HOST, v);
		v->last_access = n + (uint64_t)r;
		pol_insert(&p, TFS_TIER_HOST, v);
	}
	double ns = (now_s() - t0) * 1e9 / rounds;

	/* Every round rotated the coldest to the hot end, in order. */
	CHECK(pol_victim(&p, TFS_TIER_HOST, NULL) == &it[rounds % n]);
	CHECK_EQ(p.count[TFS_TIER_HOST], n);
	free(it);
	setup();
	return ns;
}

static void test_eviction_cost(void)
{
	double k1 = decision_ns(1000), k100 = decision_ns(100000),
	       m1 = decision_ns(1000000);

	printf("# eviction decision: 1k %.1f ns, 100k %.1f ns (%.2fx), "
	       "1M %.1f ns (%.2fx)\n", k1, k100, k100 / k1, m1, m1 / k1);
	/* Not a timing assertion (shared machines are noisy): the ratios
	 * go to the benchmark report. */
}

int main(void)
{
	TAP_RUN(test_lookup);
	TAP_RUN(test_order);
	TAP_RUN(test_ties_larger_first);
	TAP_RUN(test_per_tier);
	TAP_RUN(test_eviction_cost);
	return tap_done();
}
