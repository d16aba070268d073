// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * gpu_bw: raw pinned cudaMemcpy bandwidth, the reference the spill and
 * prefetch throughputs of tests/gpu/run.sh are compared with.
 *
 *   gpu_bw MIB REPS      prints "h2d_gbps=X d2h_gbps=Y" (medians, GB/s)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_ck.h"

static float median_gbps(void *dst, const void *src, size_t len,
			 cudaMemcpyKind kind, int reps)
{
	cudaEvent_t t0, t1;
	float v[32], ms;
	int i;

	CK(cudaEventCreate(&t0));
	CK(cudaEventCreate(&t1));
	CK(cudaMemcpy(dst, src, len, kind)); /* warm up */
	for (i = 0; i < reps; i++) {
		CK(cudaEventRecord(t0, 0));
		CK(cudaMemcpy(dst, src, len, kind));
		CK(cudaEventRecord(t1, 0));
		CK(cudaEventSynchronize(t1));
		CK(cudaEventElapsedTime(&ms, t0, t1));
		v[i] = (float)len / (ms * 1e6f);
	}
	qsort(v, (size_t)reps, sizeof(v[0]), cmp_float);
	CK(cudaEventDestroy(t0));
	CK(cudaEventDestroy(t1));
	return v[reps / 2];
}

int main(int argc, char **argv)
{
	size_t len;
	void *h, *d;
	int reps;

	if (argc != 3) {
		fprintf(stderr, "usage: gpu_bw MIB REPS\n");
		return 2;
	}
	len = strtoull(argv[1], NULL, 0) << 20;
	reps = atoi(argv[2]);
	if (reps < 1 || reps > 32 || !len)
		return 2;
	CK(cudaHostAlloc(&h, len, cudaHostAllocDefault));
	CK(cudaMalloc(&d, len));
	memset(h, 0x5a, len);
	printf("h2d_gbps=%.2f ",
	       median_gbps(d, h, len, cudaMemcpyHostToDevice, reps));
	printf("d2h_gbps=%.2f\n",
	       median_gbps(h, d, len, cudaMemcpyDeviceToHost, reps));
	CK(cudaFree(d));
	CK(cudaFreeHost(h));
	return 0;
}
