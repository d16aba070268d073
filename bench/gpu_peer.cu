// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * gpu_peer: raw cudaMemcpyPeer bandwidth between GPUs A and B, the
 * reference a tierfs move between two GPUs (user.tierfs.tier = device:N)
 * is printed next to by tests/gpu/run.sh (check "peer").
 *
 *   gpu_peer MIB REPS [A B]   prints "peer_ab_gbps=X peer_ba_gbps=Y
 *                             can_ab=0|1 can_ba=0|1" (medians, GB/s)
 *
 * Peer access is enabled where cudaDeviceCanAccessPeer allows, as the
 * cuda backend does; elsewhere the driver stages the copy through host
 * memory, and so does the number. Exit 77 with fewer than two GPUs.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda_ck.h"

static float median_gbps(void *dst, int d, const void *src, int s, size_t len,
			 int reps)
{
	cudaStream_t st;
	cudaEvent_t t0, t1;
	float v[32], ms;
	int i;

	CK(cudaSetDevice(s));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&t0));
	CK(cudaEventCreate(&t1));
	CK(cudaMemcpyPeerAsync(dst, d, src, s, len, st)); /* warm up */
	CK(cudaStreamSynchronize(st));
	for (i = 0; i < reps; i++) {
		CK(cudaEventRecord(t0, st));
		CK(cudaMemcpyPeerAsync(dst, d, src, s, len, st));
		CK(cudaEventRecord(t1, st));
		CK(cudaEventSynchronize(t1));
		CK(cudaEventElapsedTime(&ms, t0, t1));
		v[i] = (float)len / (ms * 1e6f);
	}
	qsort(v, (size_t)reps, sizeof(v[0]), cmp_float);
	CK(cudaEventDestroy(t0));
	CK(cudaEventDestroy(t1));
	CK(cudaStreamDestroy(st));
	return v[reps / 2];
}

static int enable(int dev, int peer)
{
	int can = 0;
	cudaError_t e;

	CK(cudaDeviceCanAccessPeer(&can, dev, peer));
	if (!can)
		return 0;
	CK(cudaSetDevice(dev));
	e = cudaDeviceEnablePeerAccess(peer, 0);
	if (e == cudaErrorPeerAccessAlreadyEnabled)
		(void)cudaGetLastError();
	else
		CK(e);
	return 1;
}

int main(int argc, char **argv)
{
	int n = 0, a = 0, b = 1, reps, can_ab, can_ba;
	float ab, ba;
	void *pa, *pb;
	size_t len;

	if (argc != 3 && argc != 5) {
		fprintf(stderr, "usage: gpu_peer MIB REPS [A B]\n");
		return 2;
	}
	len = strtoull(argv[1], NULL, 0) << 20;
	reps = atoi(argv[2]);
	if (argc == 5) {
		a = atoi(argv[3]);
		b = atoi(argv[4]);
	}
	if (reps < 1 || reps > 32 || !len || a == b)
		return 2;
	CK(cudaGetDeviceCount(&n));
	if (n < 2 || a < 0 || b < 0 || a >= n || b >= n) {
		printf("gpu_peer: %d GPUs: no copy between GPUs %d and %d\n",
		       n, a, b);
		return 77;
	}
	can_ab = enable(a, b);
	can_ba = enable(b, a);
	CK(cudaSetDevice(a));
	CK(cudaMalloc(&pa, len));
	CK(cudaMemset(pa, 0x5a, len));
	CK(cudaSetDevice(b));
	CK(cudaMalloc(&pb, len));
	CK(cudaMemset(pb, 0xa5, len));
	CK(cudaDeviceSynchronize());
	ab = median_gbps(pb, b, pa, a, len, reps);
	ba = median_gbps(pa, a, pb, b, len, reps);
	printf("peer_ab_gbps=%.2f peer_ba_gbps=%.2f can_ab=%d can_ba=%d\n", ab,
	       ba, can_ab, can_ba);
	CK(cudaFree(pb));
	CK(cudaSetDevice(a));
	CK(cudaFree(pa));
	return 0;
}
