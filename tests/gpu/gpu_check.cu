// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * gpu_check: the reading half of the two-process export test. Maps a file
 * with libtierfs (which must hand out a CUDA IPC handle), checks on the GPU
 * that byte i is the gpu_fill pattern for SEED, and optionally keeps the
 * map (and so the lease) for HOLD seconds.
 *
 *   gpu_check FILE SEED [HOLD]
 *
 * With TFS_GPU_CHECK_SHM=1 in the environment, a sim (shared-memory)
 * export is checked on the CPU instead: the dry run of tests/gpu/run.sh.
 *
 * With TFS_GPU_CHECK_ON=N, GPU N is made current before the map (so the
 * export asks for GPU N) and the kernel runs there, reading the buffer
 * across GPUs through the IPC mapping's peer access when it is on another
 * GPU (where cudaDeviceCanAccessPeer allows; else on the buffer's GPU).
 * It prints "... on GPU K, buffer on GPU M".
 *
 * Exit: 0 all bytes match, 1 a mismatch or an error (message on stderr).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fill_pattern.h"
#include "libtierfs.h"

__global__ static void check(const unsigned char *p, uint64_t n,
			     unsigned int seed, unsigned long long *bad,
			     unsigned long long *first)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

	for (; i < n; i += stride) {
		if (p[i] != tfs_fill_byte(i, seed)) {
			atomicAdd(bad, 1ull);
			atomicMin(first, (unsigned long long)i);
		}
	}
}

static int cuda_ok(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 1;
	fprintf(stderr, "gpu_check: %s: %s (%s)\n", what,
		cudaGetErrorString(e), cudaGetErrorName(e));
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long long *d_res, res[2] = { 0, ~0ull };
	struct tfs_map m;
	unsigned int seed;
	int rc, ok, run_on;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: gpu_check FILE SEED [HOLD]\n");
		return 2;
	}
	seed = (unsigned int)strtoul(argv[2], NULL, 0);
	if (getenv("TFS_GPU_CHECK_ON") &&
	    !cuda_ok(cudaSetDevice(atoi(getenv("TFS_GPU_CHECK_ON"))),
		     "cudaSetDevice"))
		return 1;
	rc = tfs_map_open(argv[1], TFS_MAP_READ, &m);
	if (rc) {
		fprintf(stderr, "gpu_check: tfs_map_open \"%s\": %s\n",
			argv[1], tfs_strerror(rc));
		return 1;
	}
	if (m.handle_type == TFS_HANDLE_SHM && getenv("TFS_GPU_CHECK_SHM")) {
		const unsigned char *p = (const unsigned char *)m.ptr;
		uint64_t i;

		for (i = 0; i < m.length; i++) {
			if (p[i] != tfs_fill_byte(i, seed)) {
				res[0]++;
				if (res[1] > i)
					res[1] = i;
			}
		}
		ok = !res[0];
		if (ok)
			printf("gpu_check: %zu bytes match in shm\n",
			       m.length);
		else
			fprintf(stderr, "gpu_check: %llu of %zu bytes differ, "
				"first at %llu\n", res[0], m.length, res[1]);
		if (ok && argc == 4) {
			printf("holding\n");
			fflush(stdout);
			sleep((unsigned int)atoi(argv[3]));
		}
		rc = tfs_map_close(&m);
		return ok && !rc ? 0 : 1;
	}
	if (m.handle_type != TFS_HANDLE_CUDA_IPC) {
		fprintf(stderr, "gpu_check: handle type %d, not CUDA IPC\n",
			m.handle_type);
		tfs_map_close(&m);
		return 1;
	}
	run_on = m.device;
	if (getenv("TFS_GPU_CHECK_ON")) {
		int want = atoi(getenv("TFS_GPU_CHECK_ON")), can = 0;

		if (want == m.device ||
		    (cudaDeviceCanAccessPeer(&can, want, m.device) ==
			     cudaSuccess && can))
			run_on = want;
		else
			printf("gpu_check: GPU %d cannot reach GPU %d\n", want,
			       m.device);
	}
	ok = cuda_ok(cudaSetDevice(run_on), "cudaSetDevice") &&
	     cuda_ok(cudaMalloc(&d_res, sizeof(res)), "cudaMalloc") &&
	     cuda_ok(cudaMemcpy(d_res, res, sizeof(res),
				cudaMemcpyHostToDevice), "cudaMemcpy h2d");
	if (ok && m.length) {
		check<<<512, 256>>>((const unsigned char *)m.ptr, m.length,
				    seed, d_res, d_res + 1);
		ok = cuda_ok(cudaGetLastError(), "check kernel");
	}
	ok = ok && cuda_ok(cudaMemcpy(res, d_res, sizeof(res),
				      cudaMemcpyDeviceToHost),
			   "cudaMemcpy d2h");
	if (ok && res[0]) {
		fprintf(stderr, "gpu_check: %llu of %zu bytes differ, first at "
			"%llu\n", res[0], m.length, res[1]);
		ok = 0;
	}
	if (ok) {
		printf("gpu_check: %zu bytes match on GPU %d, buffer on GPU %d\n",
		       m.length, run_on, m.device);
		if (argc == 4) {
			printf("holding\n");
			fflush(stdout);
			sleep((unsigned int)atoi(argv[3]));
		}
	}
	cudaFree(d_res);
	rc = tfs_map_close(&m);
	if (rc) {
		fprintf(stderr, "gpu_check: tfs_map_close: %s\n",
			tfs_strerror(rc));
		ok = 0;
	}
	return ok ? 0 : 1;
}
