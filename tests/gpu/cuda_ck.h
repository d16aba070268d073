/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the CUDA measuring tools (tests/gpu/gpu_bw.cu, bench/gpu_peer.cu)
 * share: CK(call) exits 1 naming the call and its error, and a float
 * comparison for qsort, to take medians.
 */
#ifndef TFS_TESTS_GPU_CUDA_CK_H
#define TFS_TESTS_GPU_CUDA_CK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define CK(x)                                                            \
	do {                                                             \
		cudaError_t e_ = (x);                                    \
		if (e_ != cudaSuccess) {                                 \
			fprintf(stderr, "%s: %s: %s (%s)\n",             \
				program_invocation_short_name, #x,       \
				cudaGetErrorString(e_), cudaGetErrorName(e_)); \
			exit(1);                                         \
		}                                                        \
	} while (0)

static inline int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

#endif
