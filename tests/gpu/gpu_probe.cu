// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * gpu_probe: the probes of tests/gpu/run.sh that need a GPU program on the
 * other end of a map. Each maps a tierfs file with libtierfs and does one
 * thing a careless or hostile client might do.
 *
 *   gpu_probe window FILE NEEDLE   map FILE read-only, copy the whole 2 MiB
 *                                  block around the map to the host, and
 *                                  look for NEEDLE's bytes (a local file)
 *                                  in it: "window clean" or "window holds
 *                                  NEEDLE at +N"; then "tail zero" or "tail
 *                                  dirty at +N" for the bytes past FILE's
 *                                  end
 *   gpu_probe writeread FILE       map FILE read-only and write 0xee over
 *                                  its first 4096 bytes with a kernel;
 *                                  "kernel wrote" or "kernel refused: ..."
 *   gpu_probe forkclose FILE SEED  map FILE for writing (a lease that
 *                                  holds the buffer), fork a child that calls
 *                                  tfs_map_close() and exits; print
 *                                  "ready", wait for SIGTERM, then check on
 *                                  the GPU that the map still holds
 *                                  pattern SEED, close, print "closed"
 *   gpu_probe spin FILE            map FILE and run a kernel that reads it
 *                                  for ever; print "running" once it runs
 *                                  (the test kills the process with -9)
 *   gpu_probe oob FILE             map FILE for writing and write far past
 *                                  its block with a kernel: print the CUDA
 *                                  error the kernel died of ("oob: ...")
 *
 * Exit: 0 when the probe ran (whatever it found), 1 on an error.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fill_pattern.h"
#include "libtierfs.h"

#define BLOCK ((uintptr_t)2 << 20)

static void die(const char *what, const char *why)
{
	fprintf(stderr, "gpu_probe: %s: %s\n", what, why);
	exit(1);
}

static void ck(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		die(what, cudaGetErrorName(e));
}

static void map(const char *path, int flags, struct tfs_map *m)
{
	int rc = tfs_map_open(path, flags, m);

	if (rc)
		die("tfs_map_open", tfs_strerror(rc));
	if (m->handle_type != TFS_HANDLE_CUDA_IPC)
		die(path, "not a CUDA IPC map");
	ck(cudaSetDevice(m->device), "cudaSetDevice");
}

static void unmap(struct tfs_map *m)
{
	int rc = tfs_map_close(m);

	if (rc)
		die("tfs_map_close", tfs_strerror(rc));
}

static int cmd_window(const char *path, const char *needle_path)
{
	unsigned char needle[4096], *win;
	const unsigned char *hit, *t;
	struct tfs_map m;
	size_t nlen = 0, at;
	FILE *f;

	f = fopen(needle_path, "rb");
	if (!f)
		die(needle_path, "cannot open");
	nlen = fread(needle, 1, sizeof(needle), f);
	fclose(f);
	if (nlen < 64)
		die(needle_path, "too short to look for");
	map(path, TFS_MAP_READ, &m);
	win = (unsigned char *)malloc(BLOCK);
	if (!win)
		die("malloc", "out of memory");
	/* What a kernel of this process can reach: the driver maps the
	 * whole block around the allocation. */
	at = (uintptr_t)m.ptr & (BLOCK - 1);
	ck(cudaMemcpy(win, (char *)m.ptr - at, BLOCK, cudaMemcpyDeviceToHost),
	   "cudaMemcpy of the 2 MiB block");
	hit = (const unsigned char *)memmem(win, BLOCK, needle, nlen);
	if (hit)
		printf("window holds %s at +%zu\n", needle_path,
		       (size_t)(hit - win));
	else
		printf("window clean\n");
	for (t = win + at + m.length; t < win + BLOCK && !*t; t++)
		;
	if (t < win + BLOCK)
		printf("tail dirty at +%zu\n", (size_t)(t - win));
	else
		printf("tail zero\n");
	free(win);
	unmap(&m);
	return 0;
}

__global__ static void poke(unsigned char *p, size_t n)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = 0xee;
}

static int cmd_writeread(const char *path)
{
	struct tfs_map m;
	size_t n;
	cudaError_t e;

	map(path, TFS_MAP_READ, &m);
	n = m.length < 4096 ? m.length : 4096;
	poke<<<(unsigned int)((n + 255) / 256), 256>>>((unsigned char *)m.ptr,
							 n);
	e = cudaDeviceSynchronize();
	if (e == cudaSuccess)
		printf("kernel wrote\n");
	else
		printf("kernel refused: %s\n", cudaGetErrorName(e));
	unmap(&m);
	return 0;
}

__global__ static void check(const unsigned char *p, uint64_t n,
			     unsigned int seed, unsigned long long *bad)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;

	for (; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		if (p[i] != tfs_fill_byte(i, seed))
			atomicAdd(bad, 1ull);
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	stop = 1;
}

static int cmd_forkclose(const char *path, unsigned int seed)
{
	unsigned long long *d_bad, bad = 0;
	struct tfs_map m;
	int status;
	pid_t pid;

	map(path, TFS_MAP_WRITE, &m);
	signal(SIGTERM, on_term);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork", "failed");
	if (pid == 0) {
		/* A multiprocessing or data-loader worker tidying up. */
		int rc = tfs_map_close(&m);

		_exit(rc ? 1 : 0);
	}
	waitpid(pid, &status, 0);
	printf("child exit %d\nready\n",
	       WIFEXITED(status) ? WEXITSTATUS(status) : 128);
	fflush(stdout);
	while (!stop)
		pause();
	ck(cudaMalloc(&d_bad, sizeof(bad)), "cudaMalloc");
	ck(cudaMemset(d_bad, 0, sizeof(bad)), "cudaMemset");
	check<<<256, 256>>>((const unsigned char *)m.ptr, m.length, seed,
			      d_bad);
	ck(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost),
	   "check kernel");
	cudaFree(d_bad);
	if (bad) {
		fprintf(stderr, "gpu_probe: %llu bytes differ\n", bad);
		return 1;
	}
	unmap(&m);
	printf("closed\n");
	return 0;
}

__global__ static void spin(const volatile unsigned char *p, size_t n,
			    unsigned long long *sink)
{
	unsigned long long acc = 0;

	for (;;)
		for (size_t i = threadIdx.x; i < n; i += blockDim.x)
			acc += p[i];
	*sink = acc;
}

static int cmd_spin(const char *path)
{
	unsigned long long *sink;
	struct tfs_map m;

	map(path, TFS_MAP_READ, &m);
	ck(cudaMalloc(&sink, sizeof(*sink)), "cudaMalloc");
	spin<<<1, 256>>>((const unsigned char *)m.ptr, m.length, sink);
	ck(cudaGetLastError(), "spin kernel");
	/* The kernel runs for ever: the test kills us with -9. */
	usleep(200 * 1000);
	printf("running\n");
	fflush(stdout);
	for (;;)
		pause();
}

__global__ static void scribble(unsigned char *p, size_t at)
{
	p[at + threadIdx.x] = 0xbd;
}

static int cmd_oob(const char *path)
{
	struct tfs_map m;
	cudaError_t e;

	map(path, TFS_MAP_WRITE, &m);
	/* 64 GiB past the map: no allocation of anyone's is there. */
	scribble<<<1, 32>>>((unsigned char *)m.ptr, (size_t)64 << 30);
	e = cudaDeviceSynchronize();
	printf("oob: %s\n", cudaGetErrorName(e));
	/* The context is dead: closing the handle fails, and only the
	 * process exit lets go of the mapping. */
	tfs_map_close(&m);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "window"))
		return cmd_window(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "writeread"))
		return cmd_writeread(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "forkclose"))
		return cmd_forkclose(argv[2],
				     (unsigned int)strtoul(argv[3], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "spin"))
		return cmd_spin(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "oob"))
		return cmd_oob(argv[2]);
	fprintf(stderr,
		"usage: gpu_probe window FILE NEEDLE | writeread FILE | forkclose FILE SEED | spin FILE | oob FILE\n");
	return 2;
}
