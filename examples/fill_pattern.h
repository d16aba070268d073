/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The byte pattern gpu_fill writes and the tests check (export_client
 * "pattern", tests/gpu/gpu_check): byte i of a buffer filled with @seed.
 * It has no period, so a chunk copied to the wrong offset cannot match by
 * chance. Usable from C and from CUDA device code.
 */
#ifndef TFS_FILL_PATTERN_H
#define TFS_FILL_PATTERN_H

#include <stdint.h>

#ifdef __CUDACC__
#define TFS_HOST_DEVICE __host__ __device__
#else
#define TFS_HOST_DEVICE
#endif

static inline TFS_HOST_DEVICE unsigned char tfs_fill_byte(uint64_t i,
							   unsigned int seed)
{
	/* splitmix64's finaliser over the 8-byte word holding byte i */
	uint64_t x = (i >> 3) + (uint64_t)seed * 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (unsigned char)(x >> (8 * (i & 7)));
}

#endif
