// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * gpu_hog: another GPU program on the GPU tierfs uses, for the reclaim and
 * reserve checks of tests/gpu/run.sh.
 *
 *   gpu_hog reclaim MOUNT PAD_MIB WANT_MIB
 *       take all but PAD_MIB of the free memory of the current GPU, then
 *       tfs_cuda_malloc() WANT_MIB more, which must reclaim from tierfs:
 *       prints "reclaim_ms=X want_mib=N" (the time of tfs_cuda_malloc)
 *   gpu_hog loop PAD_MIB WANT_MIB STEP_MIB
 *       take all but PAD_MIB, then WANT_MIB more in STEP_MIB cudaMallocs,
 *       each retried every 10 ms while it fails (no reclaim: tierfs must
 *       yield by itself), for at most 60 s: prints "loop_ms=X held_mib=N",
 *       then "ready", and holds the memory until SIGTERM
 *   gpu_hog reclaim-only MOUNT MIB
 *       time tfs_reclaim(MIB) on the current GPU alone: "reclaim_ms=X
 *       freed_mib=N"
 *
 * Exit: 0 done, 1 an error (message on stderr), 2 bad usage.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "libtierfs.h"

#define MIB (1ull << 20)

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die_cuda(cudaError_t e, const char *what)
{
	fprintf(stderr, "gpu_hog: %s: %s (%s)\n", what, cudaGetErrorString(e),
		cudaGetErrorName(e));
	exit(1);
}

/* Take all but @pad bytes of what is free now, in one allocation. */
static void *pad_out(size_t pad)
{
	size_t free_b, total;
	void *p = NULL;
	cudaError_t e;

	e = cudaMemGetInfo(&free_b, &total);
	if (e != cudaSuccess)
		die_cuda(e, "cudaMemGetInfo");
	if (free_b <= pad)
		return NULL;
	/* The free figure moves under us (tierfs allocates too): step
	 * down until it fits. */
	for (size_t n = free_b - pad; n > 64 * MIB; n -= 64 * MIB) {
		e = cudaMalloc(&p, n);
		if (e == cudaSuccess)
			return p;
		(void)cudaGetLastError();
	}
	return NULL;
}

static int cmd_reclaim(const char *mount, size_t pad, size_t want)
{
	void *fill = pad_out(pad), *p;
	double t0, t1;
	int rc;

	t0 = now_ms();
	rc = tfs_cuda_malloc(&p, want, mount);
	t1 = now_ms();
	if (rc) {
		fprintf(stderr, "gpu_hog: tfs_cuda_malloc: %s\n",
			tfs_strerror(rc));
		return 1;
	}
	printf("reclaim_ms=%.2f want_mib=%zu\n", t1 - t0, want / MIB);
	cudaFree(p);
	if (fill)
		cudaFree(fill);
	return 0;
}

static int cmd_loop(size_t pad, size_t want, size_t step)
{
	void *fill = pad_out(pad), *bufs[4096];
	size_t held = 0, n = 0;
	double t0 = now_ms(), t1;
	cudaError_t e;

	signal(SIGTERM, on_term);
	while (held < want && n < 4096 && now_ms() - t0 < 60e3) {
		e = cudaMalloc(&bufs[n], step);
		if (e == cudaSuccess) {
			held += step;
			n++;
			continue;
		}
		if (e != cudaErrorMemoryAllocation)
			die_cuda(e, "cudaMalloc");
		(void)cudaGetLastError();
		usleep(10000);
	}
	t1 = now_ms();
	printf("loop_ms=%.1f held_mib=%zu\nready\n", t1 - t0, held / MIB);
	fflush(stdout);
	while (!stop)
		pause();
	while (n)
		cudaFree(bufs[--n]);
	if (fill)
		cudaFree(fill);
	return held >= want ? 0 : 1;
}

static int cmd_reclaim_only(const char *mount, size_t bytes)
{
	uint64_t freed = 0;
	double t0, t1;
	int rc;

	t0 = now_ms();
	rc = tfs_reclaim(mount, TFS_GPU_CURRENT, bytes, &freed);
	t1 = now_ms();
	if (rc) {
		fprintf(stderr, "gpu_hog: tfs_reclaim: %s\n", tfs_strerror(rc));
		return 1;
	}
	printf("reclaim_ms=%.2f freed_mib=%llu\n", t1 - t0,
	       (unsigned long long)(freed / MIB));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "reclaim"))
		return cmd_reclaim(argv[2], strtoull(argv[3], NULL, 0) * MIB,
				   strtoull(argv[4], NULL, 0) * MIB);
	if (argc == 5 && !strcmp(argv[1], "loop"))
		return cmd_loop(strtoull(argv[2], NULL, 0) * MIB,
				strtoull(argv[3], NULL, 0) * MIB,
				strtoull(argv[4], NULL, 0) * MIB);
	if (argc == 4 && !strcmp(argv[1], "reclaim-only"))
		return cmd_reclaim_only(argv[2],
					strtoull(argv[3], NULL, 0) * MIB);
	fprintf(stderr, "usage: gpu_hog reclaim MOUNT PAD_MIB WANT_MIB | "
			"loop PAD_MIB WANT_MIB STEP_MIB | reclaim-only MOUNT MIB\n");
	return 2;
}
