// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * evict_cost: the cost of one eviction decision of the LRU policy (pick the
 * coldest, unlink it, link it back as the hottest) with N buffers resident,
 * no mount. Two layouts:
 *
 *	seq	items in one array, linked in address order: the policy's own
 *		cost, the memory system kept out of the way
 *	shuf	items linked in a random order: each decision lands on a
 *		cache line nobody touched lately, as in a long-running store
 *
 *	evict_cost [-r ROUNDS] N...
 *
 * One line per N and layout, the median of 5 runs, in wall-clock time
 * and in the thread's CPU time (which a loaded machine inflates less):
 *	n=N layout=L ns=X cpu_ns=Y
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "policy/policy.h"

static double now_on(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static double now(void)
{
	return now_on(CLOCK_MONOTONIC);
}

static double decision_ns(size_t n, int shuffled, long rounds, double *cpu)
{
	struct pol_item *it = calloc(n, sizeof(*it));
	size_t *order = malloc(n * sizeof(*order));
	uint64_t seed = 88172645463325252ULL, clock = 0;
	struct pol p;
	double t0, c0, ns;

	if (!it || !order) {
		fprintf(stderr, "evict_cost: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	if (shuffled)
		for (size_t i = n - 1; i > 0; i--) {
			size_t k = (size_t)(rnd(&seed) % (i + 1)), t = order[i];

			order[i] = order[k];
			order[k] = t;
		}
	pol_init(&p, pol_lookup("lru"));
	for (size_t i = 0; i < n; i++) {
		struct pol_item *x = &it[order[i]];

		x->last_access = ++clock;
		x->size = 4096;
		pol_insert(&p, TFS_TIER_HOST, x);
	}
	t0 = now();
	c0 = now_on(CLOCK_THREAD_CPUTIME_ID);
	for (long r = 0; r < rounds; r++) {
		struct pol_item *v = pol_victim(&p, TFS_TIER_HOST, NULL);

		pol_remove(&p, TFS_TIER_HOST, v);
		v->last_access = ++clock;
		pol_insert(&p, TFS_TIER_HOST, v);
	}
	ns = (now() - t0) * 1e9 / (double)rounds;
	*cpu = (now_on(CLOCK_THREAD_CPUTIME_ID) - c0) * 1e9 / (double)rounds;
	pol_destroy(&p);
	free(order);
	free(it);
	return ns;
}

int main(int argc, char **argv)
{
	long rounds = 1000000;
	int opt;

	while ((opt = getopt(argc, argv, "r:")) != -1) {
		if (opt != 'r')
			goto usage;
		rounds = strtol(optarg, NULL, 0);
	}
	if (optind >= argc || rounds < 1)
		goto usage;
	for (int a = optind; a < argc; a++) {
		size_t n = strtoul(argv[a], NULL, 0);

		if (!n)
			goto usage;
		for (int shuf = 0; shuf < 2; shuf++) {
			double v[5], c[5];

			for (int k = 0; k < 5; k++)
				v[k] = decision_ns(n, shuf, rounds, &c[k]);
			qsort(v, 5, sizeof(v[0]), cmp_double);
			qsort(c, 5, sizeof(c[0]), cmp_double);
			printf("n=%zu layout=%s ns=%.2f cpu_ns=%.2f\n", n,
			       shuf ? "shuf" : "seq", v[2], c[2]);
		}
	}
	return 0;
usage:
	fprintf(stderr, "usage: evict_cost [-r ROUNDS] N...\n");
	return 2;
}
