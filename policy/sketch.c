// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The admission sketch: count-min with 4-bit counters, sixteen to a word,
 * and TinyLFU's reset. Four rows, each indexed by its own mix of the key;
 * an add raises only the rows at the key's minimum (conservative update),
 * which keeps collisions from inflating the estimate of others as much.
 * At 8 bytes per 16 counters and width the next power of two above the
 * items, a sketch for 64k files takes 128 KiB.
 */
#include <errno.h>
#include <stdlib.h>

#include "policy/policy.h"

#define NIBBLES 16u

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t slot(const struct pol_sketch *k, uint64_t key, int row)
{
	return (uint32_t)(mix(key + (uint64_t)row * 0x632be59bd9b4e019ull) &
			  (k->width - 1));
}

static unsigned int get(const struct pol_sketch *k, int row, uint32_t i)
{
	const uint64_t *w = k->rows + (size_t)row * (k->width / NIBBLES);

	return (unsigned int)(w[i / NIBBLES] >> (4 * (i % NIBBLES))) & 0xf;
}

int pol_sketch_init(struct pol_sketch *k, uint32_t items)
{
	uint32_t width = NIBBLES;

	while (width < items && width < (1u << 30))
		width <<= 1;
	k->rows = calloc((size_t)POL_SKETCH_DEPTH * (width / NIBBLES),
			 sizeof(uint64_t));
	if (!k->rows)
		return -ENOMEM;
	k->width = width;
	k->added = 0;
	k->sample = width * 10;
	return 0;
}

void pol_sketch_destroy(struct pol_sketch *k)
{
	free(k->rows);
	k->rows = NULL;
}

/* Halve every counter: the reset that makes old accesses count less. */
static void halve(struct pol_sketch *k)
{
	size_t words = (size_t)POL_SKETCH_DEPTH * (k->width / NIBBLES);

	for (size_t i = 0; i < words; i++)
		k->rows[i] = (k->rows[i] >> 1) & 0x7777777777777777ull;
	k->added /= 2;
}

void pol_sketch_add(struct pol_sketch *k, uint64_t key)
{
	unsigned int min = pol_sketch_estimate(k, key);

	if (min < 15) {
		for (int r = 0; r < POL_SKETCH_DEPTH; r++) {
			uint32_t i = slot(k, key, r);
			uint64_t *w = k->rows + (size_t)r * (k->width / NIBBLES);

			if (get(k, r, i) == min)
				w[i / NIBBLES] += 1ull << (4 * (i % NIBBLES));
		}
	}
	if (++k->added >= k->sample)
		halve(k);
}

unsigned int pol_sketch_estimate(const struct pol_sketch *k, uint64_t key)
{
	unsigned int min = 15;

	for (int r = 0; r < POL_SKETCH_DEPTH; r++) {
		unsigned int c = get(k, r, slot(k, key, r));

		if (c < min)
			min = c;
	}
	return min;
}
