// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The client tests/gpu/mock_export.bats drives against a daemon linked with
 * tests/gpu/cuda_mock.c, with the mock preloaded into this process too, so
 * that "device" memory mapped through CUDA IPC is readable from the CPU.
 *
 *   mock_client window PATH NEEDLE   map PATH read-only and look for the
 *                                    bytes of the local file NEEDLE in the
 *                                    whole 2 MiB block around the mapping:
 *                                    "window clean" or "window holds NEEDLE
 *                                    at +OFFSET"; then "tail zero" when
 *                                    the block past the file's end holds
 *                                    only zeroes, else "tail dirty at +N"
 *   mock_client writeread PATH       map PATH read-only and write 0xee over
 *                                    all of it, as a kernel could (legacy
 *                                    IPC has no read-only import); close
 *   mock_client keep PATH MODE GO    map PATH (MODE read or write), then
 *                                    close the file's descriptor without
 *                                    unmapping, which ends the lease;
 *                                    print "closed", wait until the file
 *                                    GO exists, write 0xcd over the map
 *                                    (MODE write), print "wrote", wait for
 *                                    SIGTERM and exit still mapping it
 *   mock_client forkclose PATH       map PATH for writing, fork; the child calls
 *                                    tfs_map_close() and exits; print
 *                                    "child exit N" and "ready", wait for
 *                                    SIGTERM, check the map still reads,
 *                                    close, print "closed"
 *   mock_client malloc MOUNT BYTES   tfs_cuda_malloc() BYTES on device 0,
 *                                    reclaiming from the tierfs mount
 *                                    MOUNT when the device is full (run
 *                                    with TFS_MOCK_SHARED, so that the
 *                                    daemon's memory is not free here):
 *                                    "allocated BYTES", or the error
 *   mock_client reclaim MOUNT BYTES  tfs_reclaim() on the current device
 *                                    (TFS_GPU_CURRENT): "freed N"
 *   mock_client mapon PATH DEV       with device DEV current (cudaSetDevice;
 *                                    "none": no context at all), map PATH
 *                                    read-only and print "device N", the
 *                                    ordinal the export landed on, then
 *                                    check that the bytes are PATH's
 *   mock_client threadkeep PATH GO   a second thread maps PATH read-only,
 *                                    closes the descriptor without
 *                                    unmapping and exits; then print
 *                                    "closed", wait until GO exists, check
 *                                    the map still holds the bytes it had,
 *                                    print "same", wait for SIGTERM
 *   mock_client keepmany PATH...     map each PATH read-only and close its
 *                                    descriptor without unmapping: "kept
 *                                    PATH" or "refused PATH: why"; then
 *                                    "ready", wait for SIGTERM
 *   mock_client hold PATH            map PATH read-only, print "holding",
 *                                    wait for SIGTERM, check the map still
 *                                    holds what it held at first ("same",
 *                                    else exit 1), close it
 *   mock_client writehold PATH C     map PATH for writing, write byte C
 *                                    (a number) over all of it without a
 *                                    commit, print "ready", wait for
 *                                    SIGTERM, close ("commit" as C's
 *                                    suffix, e.g. 7commit: commit first)
 *   mock_client commitstream PATH    map PATH for writing; keep a second
 *                                    stream busy; write 0x5a over the map
 *                                    on a first stream and commit with
 *                                    that stream only: "committed" when it
 *                                    returned while the other was still
 *                                    busy, then close
 *
 * Exit status: 0 when the command ran, 1 on a failure (reason on stderr).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "libtierfs.h"

#define BLOCK ((uintptr_t)2 << 20)

static void die(const char *what, int rc)
{
	fprintf(stderr, "mock_client: %s: %s\n", what, tfs_strerror(rc));
	exit(1);
}

static size_t read_file(const char *path, unsigned char *buf, size_t max)
{
	size_t got = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		die(path, -errno);
	while (got < max && (n = read(fd, buf + got, max - got)) > 0)
		got += (size_t)n;
	close(fd);
	return got;
}

static int cmd_window(const char *path, const char *needle_path)
{
	unsigned char needle[4096];
	const unsigned char *win, *hit;
	size_t nlen = read_file(needle_path, needle, sizeof(needle));
	struct tfs_map m;
	int rc;

	if (nlen < 64) {
		fprintf(stderr, "mock_client: %s: too short to look for\n",
			needle_path);
		return 1;
	}
	rc = tfs_map_open(path, TFS_MAP_READ, &m);
	if (rc)
		die("tfs_map_open", rc);
	if (m.handle_type != TFS_HANDLE_CUDA_IPC)
		die("not a CUDA IPC map", -ENOTSUP);
	/* What a kernel of the importer could reach: the driver maps the
	 * whole 2 MiB block, at a 2 MiB-aligned address. */
	win = (const unsigned char *)((uintptr_t)m.ptr & ~(BLOCK - 1));
	hit = memmem(win, BLOCK, needle, nlen);
	if (hit)
		printf("window holds %s at +%zu\n", needle_path,
		       (size_t)(hit - win));
	else
		printf("window clean\n");
	/* Past the file's end, up to the block's: nothing left by an
	 * earlier allocation (the mock fills fresh memory with 0xa5). */
	{
		const unsigned char *t = (const unsigned char *)m.ptr + m.length;
		const unsigned char *end = win + BLOCK;

		while (t < end && !*t)
			t++;
		if (t < end)
			printf("tail dirty at +%zu\n", (size_t)(t - win));
		else
			printf("tail zero\n");
	}
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	stop = 1;
}

static int cmd_forkclose(const char *path)
{
	struct tfs_map m;
	volatile unsigned char first;
	int rc, status;
	pid_t pid;

	rc = tfs_map_open(path, TFS_MAP_WRITE, &m);
	if (rc)
		die("tfs_map_open", rc);
	signal(SIGTERM, on_term);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork", -errno);
	if (pid == 0) {
		/* What a Python multiprocessing or DataLoader worker does
		 * when it tidies up what it inherited. */
		rc = tfs_map_close(&m);
		if (rc)
			fprintf(stderr, "mock_client: child: tfs_map_close: %s\n",
				tfs_strerror(rc));
		_exit(rc ? 1 : 0);
	}
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid", -errno);
	printf("child exit %d\nready\n",
	       WIFEXITED(status) ? WEXITSTATUS(status) : 128);
	fflush(stdout);
	while (!stop)
		pause();
	if (m.length)
		first = *(volatile unsigned char *)m.ptr;
	(void)first;
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	printf("closed\n");
	return 0;
}

static int cmd_writeread(const char *path)
{
	struct tfs_map m;
	size_t n;
	int rc;

	rc = tfs_map_open(path, TFS_MAP_READ, &m);
	if (rc)
		die("tfs_map_open", rc);
	n = m.length;
	memset(m.ptr, 0xee, n);
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	printf("wrote %zu\n", n);
	return 0;
}

static int cmd_keep(const char *path, const char *mode, const char *go)
{
	bool write = !strcmp(mode, "write");
	struct tfs_map m;
	int rc, i;

	rc = tfs_map_open(path, write ? TFS_MAP_WRITE : TFS_MAP_READ, &m);
	if (rc)
		die("tfs_map_open", rc);
	signal(SIGTERM, on_term);
	/* What a careless client does: the lease ends, the mapping not. */
	close(m.fd);
	printf("closed\n");
	fflush(stdout);
	for (i = 0; i < 2000 && access(go, F_OK); i++)
		usleep(10000);
	if (write)
		memset(m.ptr, 0xcd, m.length);
	printf("wrote\n");
	fflush(stdout);
	while (!stop)
		pause();
	/* Exit without cudaIpcCloseMemHandle: the exit unmaps. */
	return 0;
}

static int cmd_malloc(const char *mount, const char *bytes)
{
	size_t n = strtoull(bytes, NULL, 0);
	void *p;
	int rc;

	rc = tfs_cuda_malloc(&p, n, mount);
	if (rc)
		die("tfs_cuda_malloc", rc);
	printf("allocated %zu\n", n);
	if (cudaFree(p) != cudaSuccess)
		die("cudaFree", -EIO);
	return 0;
}

static int cmd_reclaim(const char *mount, const char *bytes)
{
	uint64_t freed = 0;
	int rc;

	rc = tfs_reclaim(mount, TFS_GPU_CURRENT, strtoull(bytes, NULL, 0),
			 &freed);
	if (rc)
		die("tfs_reclaim", rc);
	printf("freed %llu\n", (unsigned long long)freed);
	return 0;
}

static int cmd_mapon(const char *path, const char *dev)
{
	unsigned char *want;
	struct tfs_map m;
	size_t n;
	int rc;

	if (strcmp(dev, "none") && cudaSetDevice(atoi(dev)) != cudaSuccess)
		die("cudaSetDevice", -ENODEV);
	rc = tfs_map_open(path, TFS_MAP_READ, &m);
	if (rc)
		die("tfs_map_open", rc);
	printf("device %d\n", m.device);
	want = malloc(m.length + 1);
	if (!want)
		die("malloc", -ENOMEM);
	n = read_file(path, want, m.length + 1);
	if (n != m.length || memcmp(want, m.ptr, n))
		die("the map does not hold the file's bytes", -EIO);
	free(want);
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

/* A second thread of this process exports, and ends: the process maps. */
struct tkeep {
	const char *path;
	struct tfs_map m;
	int rc;
};

static void *threadkeep_main(void *arg)
{
	struct tkeep *t = arg;

	t->rc = tfs_map_open(t->path, TFS_MAP_READ, &t->m);
	if (!t->rc)
		close(t->m.fd); /* the lease ends with the thread's request */
	return NULL;
}

static int cmd_threadkeep(const char *path, const char *go)
{
	struct tkeep t = { .path = path };
	unsigned char *was;
	pthread_t th;
	int i;

	signal(SIGTERM, on_term);
	if (pthread_create(&th, NULL, threadkeep_main, &t))
		die("pthread_create", -EAGAIN);
	pthread_join(th, NULL);
	if (t.rc)
		die("tfs_map_open", t.rc);
	was = malloc(t.m.length + 1);
	if (!was)
		die("malloc", -ENOMEM);
	memcpy(was, t.m.ptr, t.m.length);
	printf("closed\n");
	fflush(stdout);
	for (i = 0; i < 3000 && access(go, F_OK); i++)
		usleep(10000);
	if (memcmp(was, t.m.ptr, t.m.length))
		die("the map changed after its thread ended", -EIO);
	printf("same\n");
	fflush(stdout);
	while (!stop)
		pause();
	free(was);
	return 0;
}

static int cmd_keepmany(int n, char **paths)
{
	signal(SIGTERM, on_term);
	for (int i = 0; i < n; i++) {
		struct tfs_map m;
		int rc = tfs_map_open(paths[i], TFS_MAP_READ, &m);

		if (rc) {
			printf("refused %s: %s\n", paths[i], tfs_strerror(rc));
		} else {
			close(m.fd);
			printf("kept %s\n", paths[i]);
		}
		fflush(stdout);
	}
	printf("ready\n");
	fflush(stdout);
	while (!stop)
		pause();
	return 0;
}

static int cmd_hold(const char *path)
{
	unsigned char *was;
	struct tfs_map m;
	int rc;

	rc = tfs_map_open(path, TFS_MAP_READ, &m);
	if (rc)
		die("tfs_map_open", rc);
	signal(SIGTERM, on_term);
	was = malloc(m.length + 1);
	if (!was)
		die("malloc", -ENOMEM);
	memcpy(was, m.ptr, m.length);
	printf("holding\n");
	fflush(stdout);
	while (!stop)
		pause();
	if (memcmp(was, m.ptr, m.length))
		die("a read map changed under its holder", -EIO);
	printf("same\n");
	free(was);
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

static int cmd_writehold(const char *path, const char *c)
{
	struct tfs_map m;
	int rc;

	rc = tfs_map_open(path, TFS_MAP_WRITE, &m);
	if (rc)
		die("tfs_map_open", rc);
	signal(SIGTERM, on_term);
	memset(m.ptr, atoi(c), m.length);
	if (strstr(c, "commit")) {
		rc = tfs_map_commit(&m);
		if (rc)
			die("tfs_map_commit", rc);
	}
	printf("ready\n");
	fflush(stdout);
	while (!stop)
		pause();
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

static volatile int released; /* the busy stream's host function waits */

static void CUDART_CB busy_fn(void *arg)
{
	while (!__atomic_load_n(&released, __ATOMIC_ACQUIRE))
		usleep(1000);
}

static void on_alarm(int sig)
{
	static const char msg[] =
		"mock_client: commit waited for another stream\n";

	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

static int cmd_commitstream(const char *path)
{
	cudaStream_t a, b;
	struct tfs_map m;
	unsigned char *got;
	int rc;

	rc = tfs_map_open(path, TFS_MAP_WRITE, &m);
	if (rc)
		die("tfs_map_open", rc);
	if (cudaSetDevice(m.device) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) ||
	    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) ||
	    cudaLaunchHostFunc(b, busy_fn, NULL) ||
	    cudaMemsetAsync(m.ptr, 0x5a, m.length, a))
		die("cuda setup", -EIO);
	/* A device-wide wait would wait for b, which waits for us. */
	signal(SIGALRM, on_alarm);
	alarm(20);
	rc = tfs_map_commit_stream(&m, a);
	alarm(0);
	if (rc)
		die("tfs_map_commit_stream", rc);
	printf("committed\n");
	fflush(stdout);
	__atomic_store_n(&released, 1, __ATOMIC_RELEASE);
	if (cudaStreamSynchronize(b))
		die("cudaStreamSynchronize", -EIO);
	got = malloc(m.length + 1);
	if (!got)
		die("malloc", -ENOMEM);
	memcpy(got, m.ptr, m.length);
	for (size_t i = 0; i < m.length; i++)
		if (got[i] != 0x5a)
			die("the stream's write was not done at commit", -EIO);
	free(got);
	cudaStreamDestroy(a);
	cudaStreamDestroy(b);
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "mapon"))
		return cmd_mapon(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "malloc"))
		return cmd_malloc(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "reclaim"))
		return cmd_reclaim(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "window"))
		return cmd_window(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "forkclose"))
		return cmd_forkclose(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "writeread"))
		return cmd_writeread(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "keep"))
		return cmd_keep(argv[2], argv[3], argv[4]);
	if (argc == 4 && !strcmp(argv[1], "threadkeep"))
		return cmd_threadkeep(argv[2], argv[3]);
	if (argc >= 3 && !strcmp(argv[1], "keepmany"))
		return cmd_keepmany(argc - 2, argv + 2);
	if (argc == 3 && !strcmp(argv[1], "hold"))
		return cmd_hold(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "writehold"))
		return cmd_writehold(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "commitstream"))
		return cmd_commitstream(argv[2]);
	fprintf(stderr, "usage: mock_client mapon PATH DEV|none | window PATH NEEDLE | forkclose PATH | writeread PATH | keep PATH read|write GO | threadkeep PATH GO | keepmany PATH... | hold PATH | writehold PATH BYTE[commit] | commitstream PATH | malloc MOUNT BYTES | reclaim MOUNT BYTES\n");
	return 2;
}
