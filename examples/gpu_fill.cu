// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * gpu_fill: map a tierfs file's buffer with libtierfs, fill it on the GPU
 * with a kernel, commit and exit. Readers of the file (cat, cmp) then see
 * the kernel's bytes.
 *
 *   gpu_fill FILE SEED [SIZE]
 *
 * Byte i becomes tfs_fill_byte(i, SEED) (fill_pattern.h), the pattern
 * tests/integration/export_client writes with "pattern". With SIZE, the
 * file is first given SIZE bytes of device memory (tfs_alloc); it must be
 * empty then. On the sim backend the buffer is host memory and the fill runs
 * on the CPU.
 *
 * Build (meson does this when nvcc is found):
 *   nvcc -cudart shared gpu_fill.cu $(pkg-config --cflags --libs tierfs)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "fill_pattern.h"
#include "libtierfs.h"

__global__ static void fill(unsigned char *p, uint64_t n, unsigned int seed)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

	for (; i < n; i += stride)
		p[i] = tfs_fill_byte(i, seed);
}

int main(int argc, char **argv)
{
	struct tfs_map m;
	const char *where;
	unsigned int seed;
	size_t len;
	cudaError_t e;
	int rc;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: gpu_fill FILE SEED [SIZE]\n");
		return 2;
	}
	seed = (unsigned int)strtoul(argv[2], NULL, 0);
	if (argc == 4) {
		rc = tfs_alloc(argv[1], strtoull(argv[3], NULL, 0));
		if (rc) {
			fprintf(stderr, "gpu_fill: tfs_alloc \"%s\": %s\n",
				argv[1], tfs_strerror(rc));
			return 1;
		}
	}

	rc = tfs_map_open(argv[1], TFS_MAP_WRITE, &m);
	if (rc) {
		fprintf(stderr, "gpu_fill: tfs_map_open \"%s\": %s\n", argv[1],
			tfs_strerror(rc));
		return 1;
	}
	if (m.handle_type == TFS_HANDLE_CUDA_IPC) {
		/* The pointer belongs to m.device, not necessarily ours. */
		e = cudaSetDevice(m.device);
		if (e == cudaSuccess && m.length) {
			fill<<<256, 256>>>((unsigned char *)m.ptr, m.length,
					   seed);
			e = cudaGetLastError();
		}
		if (e != cudaSuccess) {
			fprintf(stderr, "gpu_fill: kernel: %s (%s)\n",
				cudaGetErrorString(e), cudaGetErrorName(e));
			tfs_map_close(&m);
			return 1;
		}
	} else {
		unsigned char *p = (unsigned char *)m.ptr;

		for (uint64_t i = 0; i < m.length; i++)
			p[i] = tfs_fill_byte(i, seed);
	}
	/* The kernel ran on the legacy default stream of m.device's primary
	 * context: the commit waits for that stream, not the whole device. */
	rc = tfs_map_commit_stream(&m, NULL);
	if (rc) {
		fprintf(stderr, "gpu_fill: tfs_map_commit \"%s\": %s\n",
			argv[1], tfs_strerror(rc));
		tfs_map_close(&m);
		return 1;
	}
	len = m.length;
	where = m.handle_type == TFS_HANDLE_CUDA_IPC ? "the GPU" :
						      "the host (sim)";
	rc = tfs_map_close(&m);
	if (rc) {
		fprintf(stderr, "gpu_fill: tfs_map_close \"%s\": %s\n",
			argv[1], tfs_strerror(rc));
		return 1;
	}
	printf("gpu_fill: %zu bytes of \"%s\" filled on %s\n", len, argv[1],
	       where);
	return 0;
}
