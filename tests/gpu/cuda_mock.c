// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A host-memory stand-in for the CUDA runtime calls tiers/device_cuda.c
 * makes, so that the backend's logic (chunking, double buffering, slot
 * pool, error paths) runs under ASan/UBSan on machines without a GPU.
 * Linked in place of cudart by tests/gpu/mock_check.sh; never shipped.
 *
 * Device memory is a POSIX shared-memory object per cudaMalloc, so CUDA
 * IPC works across processes: a daemon linked with the mock exports, and a
 * client with the mock preloaded opens the handle and gets host-visible
 * "device" memory.
 *
 * What it checks that a real GPU would only show as corruption:
 *   - streams are asynchronous: each has a worker thread that runs queued
 *     copies after a random delay, so staging reused before its copy
 *     finished gives wrong bytes;
 *   - device ranges must lie inside one cudaMalloc allocation, and the host
 *     side of an async copy inside one cudaHostAlloc buffer or one range
 *     page-locked by cudaHostRegister; a copy whose host side is no longer
 *     page-locked when it runs (unregistered or freed while in flight)
 *     aborts the process;
 *   - cudaHostRegister refuses a range overlapping one already page-locked,
 *     cudaHostUnregister anything but a registered start, like the runtime;
 *   - failing calls set the per-thread last error, like the runtime.
 *
 * Environment: TFS_MOCK_NODEV=1 makes cudaGetDeviceCount answer
 * cudaErrorInsufficientDriver; TFS_MOCK_CAPACITY (bytes, default 256 MiB);
 * TFS_MOCK_STATS=FILE appends one line at exit: "registers N unregisters N
 * registered-left N direct-copies N staged-copies N", for a daemon whose
 * output a test cannot see.
 * A test calls tfs_mock_fail_next_copy() to make the next cudaMemcpyAsync
 * fail, tfs_mock_fail_next_copy_async() to make it fail only when it runs
 * (the next wait on its stream reports it), tfs_mock_fail_next_register()
 * for cudaHostRegister, and reads tfs_mock_registered_copies() to see which
 * path a copy took.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define MAX_ALLOCS 4096

enum kind { DEV, PINNED, IMPORTED, REGISTERED };

struct range {
	char *p;
	size_t n;
	enum kind kind;
	char name[48]; /* DEV: the shm object */
};

static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static struct range allocs[MAX_ALLOCS]; /* mock_lock */
static size_t dev_used; /* mock_lock */
static bool fail_next_copy; /* mock_lock */
static bool fail_next_copy_async; /* mock_lock */
static bool fail_next_register; /* mock_lock */
static unsigned long registered_copies; /* mock_lock */
static unsigned long staged_copies; /* mock_lock */
static unsigned long registers, unregisters; /* mock_lock */
static unsigned long shm_seq; /* mock_lock */
static __thread cudaError_t last_error;

static cudaError_t fail(cudaError_t e)
{
	last_error = e;
	return e;
}

static size_t capacity(void)
{
	const char *c = getenv("TFS_MOCK_CAPACITY");

	return c ? strtoull(c, NULL, 0) : 256u << 20;
}

/* The allocation of @kind that holds all of [p, p+n), or NULL. mock_lock. */
static struct range *find_locked(const void *p, size_t n, enum kind kind)
{
	const char *c = p;
	int i;

	for (i = 0; i < MAX_ALLOCS; i++) {
		struct range *r = &allocs[i];

		if (r->p && r->kind == kind && c >= r->p && n <= r->n &&
		    (size_t)(c - r->p) <= r->n - n)
			return r;
	}
	return NULL;
}

/* Is [p, p+n) inside one allocation of the given kind? */
static bool inside(const void *p, size_t n, enum kind kind)
{
	bool ok;

	pthread_mutex_lock(&mock_lock);
	ok = find_locked(p, n, kind) != NULL;
	pthread_mutex_unlock(&mock_lock);
	return ok;
}

/* Page-locked host memory: a cudaHostAlloc buffer or a registered range. */
static bool inside_locked_host(const void *p, size_t n)
{
	return inside(p, n, PINNED) || inside(p, n, REGISTERED);
}

static struct range *track(void *p, size_t n, enum kind kind)
{
	int i;

	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_ALLOCS; i++) {
		if (!allocs[i].p) {
			allocs[i] = (struct range){ .p = p, .n = n,
						    .kind = kind };
			pthread_mutex_unlock(&mock_lock);
			return &allocs[i];
		}
	}
	pthread_mutex_unlock(&mock_lock);
	return NULL;
}

/* Forget @p; returns what it was, with p NULL when it was not known. */
static struct range untrack(void *p, enum kind kind)
{
	struct range r = { 0 };
	int i;

	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_ALLOCS; i++) {
		if (allocs[i].p == p && allocs[i].kind == kind) {
			r = allocs[i];
			if (kind == DEV)
				dev_used -= r.n;
			allocs[i].p = NULL;
			break;
		}
	}
	pthread_mutex_unlock(&mock_lock);
	return r;
}

void tfs_mock_fail_next_copy(void);
void tfs_mock_fail_next_copy(void)
{
	pthread_mutex_lock(&mock_lock);
	fail_next_copy = true;
	pthread_mutex_unlock(&mock_lock);
}

void tfs_mock_fail_next_copy_async(void);
void tfs_mock_fail_next_copy_async(void)
{
	pthread_mutex_lock(&mock_lock);
	fail_next_copy_async = true;
	pthread_mutex_unlock(&mock_lock);
}

void tfs_mock_fail_next_register(void);
void tfs_mock_fail_next_register(void)
{
	pthread_mutex_lock(&mock_lock);
	fail_next_register = true;
	pthread_mutex_unlock(&mock_lock);
}

/* Async copies so far whose host side was registered memory. */
unsigned long tfs_mock_registered_copies(void);
unsigned long tfs_mock_registered_copies(void)
{
	unsigned long n;

	pthread_mutex_lock(&mock_lock);
	n = registered_copies;
	pthread_mutex_unlock(&mock_lock);
	return n;
}

/* --- streams and events ---------------------------------------------------- */

struct op {
	struct op *next;
	void *dst;
	const void *src; /* NULL: memset dst to val */
	size_t n;
	int val;
	const void *host; /* page-locked side of a copy, checked again late */
	bool fail; /* fails when it runs, the copy not done */
};

struct CUstream_st {
	pthread_t thr;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct op *head, *tail;
	uint64_t queued, done;
	bool stop;
	unsigned int seed;
	cudaError_t error; /* of a failed op, until a wait reports it */
};

struct CUevent_st {
	struct CUstream_st *s;
	uint64_t seq;
};

static void *stream_worker(void *arg)
{
	struct CUstream_st *s = arg;
	struct op *o;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		if (!s->head)
			break;
		o = s->head;
		pthread_mutex_unlock(&s->lock);
		/* Late enough that a host racing ahead gets caught:
		 * longer than the host's memcpy of a chunk. */
		if (o->dst)
			usleep(500 + (useconds_t)(rand_r(&s->seed) % 1000));
		if (o->host && !inside_locked_host(o->host, o->n)) {
			fprintf(stderr,
				"mock: copy of %zu bytes at %p ran after its host memory was unregistered or freed\n",
				o->n, o->host);
			abort();
		}
		if (o->fail)
			;
		else if (o->src)
			memcpy(o->dst, o->src, o->n);
		else if (o->dst)
			memset(o->dst, o->val, o->n);
		pthread_mutex_lock(&s->lock);
		if (o->fail)
			s->error = cudaErrorLaunchFailure;
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->done++;
		pthread_cond_broadcast(&s->cond);
		free(o);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Queue an op (dst NULL: a marker for an event); returns its sequence. */
static uint64_t enqueue_op(struct CUstream_st *s, void *dst, const void *src,
			   size_t n, int val, const void *host, bool fail)
{
	struct op *o = calloc(1, sizeof(*o));
	uint64_t seq;

	o->dst = dst;
	o->src = src;
	o->n = n;
	o->val = val;
	o->host = host;
	o->fail = fail;
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	seq = ++s->queued;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return seq;
}

static uint64_t enqueue(struct CUstream_st *s, void *dst, const void *src,
			size_t n, int val)
{
	return enqueue_op(s, dst, src, n, val, NULL, false);
}

/* A failed op's error, reported once, by the first wait that sees it. */
static cudaError_t take_error(struct CUstream_st *s)
{
	cudaError_t e = s->error;

	s->error = cudaSuccess;
	return e;
}

static cudaError_t wait_for(struct CUstream_st *s, uint64_t seq)
{
	cudaError_t e;

	pthread_mutex_lock(&s->lock);
	while (s->done < seq)
		pthread_cond_wait(&s->cond, &s->lock);
	e = take_error(s);
	pthread_mutex_unlock(&s->lock);
	return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned int flags)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (flags != cudaStreamNonBlocking)
		fprintf(stderr, "mock: stream flags %u\n", flags);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->seed = (unsigned int)(uintptr_t)s;
	pthread_create(&s->thr, NULL, stream_worker, s);
	*ps = s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	uint64_t q;

	pthread_mutex_lock(&s->lock);
	q = s->queued;
	pthread_mutex_unlock(&s->lock);
	return wait_for(s, q);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thr, NULL);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned int flags)
{
	*pe = calloc(1, sizeof(**pe));
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (!s)
		return fail(cudaErrorInvalidResourceHandle);
	e->s = s;
	e->seq = enqueue(s, NULL, NULL, 0, 0);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	return e->s ? wait_for(e->s, e->seq) : cudaSuccess;
}

/* Not ready is not an error: the runtime leaves the last error alone. */
cudaError_t cudaEventQuery(cudaEvent_t e)
{
	struct CUstream_st *s = e->s;
	cudaError_t r = cudaSuccess;

	if (!s)
		return cudaSuccess;
	pthread_mutex_lock(&s->lock);
	if (s->done < e->seq)
		r = cudaErrorNotReady;
	else
		r = take_error(s);
	pthread_mutex_unlock(&s->lock);
	return r == cudaSuccess || r == cudaErrorNotReady ? r : fail(r);
}

/* --- memory ---------------------------------------------------------------- */

static void *map_shm(const char *name, int oflags, size_t *n)
{
	struct stat st;
	void *p;
	int fd;

	fd = shm_open(name, oflags, 0600);
	if (fd < 0)
		return NULL;
	if (oflags & O_CREAT) {
		if (ftruncate(fd, (off_t)*n)) {
			close(fd);
			return NULL;
		}
	} else if (fstat(fd, &st) == 0) {
		*n = (size_t)st.st_size;
	}
	p = mmap(NULL, *n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	struct range *r;
	char name[48];
	void *m;

	*p = NULL;
	if (!n)
		return cudaSuccess;
	/* Refuse past the capacity before touching memory. */
	pthread_mutex_lock(&mock_lock);
	if (dev_used + n > capacity()) {
		pthread_mutex_unlock(&mock_lock);
		return fail(cudaErrorMemoryAllocation);
	}
	dev_used += n;
	snprintf(name, sizeof(name), "/tfsmock.%d.%lu", (int)getpid(),
		 ++shm_seq);
	pthread_mutex_unlock(&mock_lock);

	m = map_shm(name, O_RDWR | O_CREAT | O_EXCL, &n);
	r = m ? track(m, n, DEV) : NULL;
	if (!r) {
		if (m)
			munmap(m, n);
		shm_unlink(name);
		pthread_mutex_lock(&mock_lock);
		dev_used -= n;
		pthread_mutex_unlock(&mock_lock);
		return fail(cudaErrorMemoryAllocation);
	}
	snprintf(r->name, sizeof(r->name), "%s", name);
	/* Fresh device memory is garbage, not zeroes. */
	memset(m, 0xa5, n);
	*p = m;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	struct range r;

	if (!p)
		return cudaSuccess;
	r = untrack(p, DEV);
	if (!r.p)
		return fail(cudaErrorInvalidValue);
	munmap(r.p, r.n);
	shm_unlink(r.name);
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
	*p = malloc(n);
	if (!*p || !track(*p, n, PINNED)) {
		free(*p);
		*p = NULL;
		return fail(cudaErrorMemoryAllocation);
	}
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
	if (!untrack(p, PINNED).p)
		return fail(cudaErrorInvalidValue);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
			    enum cudaMemcpyKind kind, cudaStream_t s)
{
	bool ok, inject, inject_async;
	const void *host = NULL;

	pthread_mutex_lock(&mock_lock);
	inject = fail_next_copy;
	fail_next_copy = false;
	inject_async = !inject && fail_next_copy_async;
	if (inject_async)
		fail_next_copy_async = false;
	pthread_mutex_unlock(&mock_lock);
	if (inject)
		return fail(cudaErrorLaunchFailure);
	if (kind == cudaMemcpyDeviceToHost) {
		host = dst;
		ok = inside(src, n, DEV) && inside_locked_host(dst, n);
	} else if (kind == cudaMemcpyHostToDevice) {
		host = src;
		ok = inside(dst, n, DEV) && inside_locked_host(src, n);
	} else {
		ok = false;
	}
	if (!ok || !s) {
		fprintf(stderr, "mock: bad cudaMemcpyAsync %p <- %p, %zu, %d\n",
			dst, src, n, (int)kind);
		return fail(cudaErrorInvalidValue);
	}
	pthread_mutex_lock(&mock_lock);
	if (find_locked(host, n, REGISTERED))
		registered_copies++;
	else
		staged_copies++;
	pthread_mutex_unlock(&mock_lock);
	enqueue_op(s, dst, src, n, 0, host, inject_async);
	return cudaSuccess;
}

/* Does [p, p+n) share a byte with page-locked host memory? mock_lock. */
static bool overlaps_locked_host(const char *p, size_t n)
{
	int i;

	for (i = 0; i < MAX_ALLOCS; i++) {
		struct range *r = &allocs[i];

		if (r->p && (r->kind == PINNED || r->kind == REGISTERED) &&
		    p < r->p + r->n && r->p < p + n)
			return true;
	}
	return false;
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags)
{
	bool inject, taken;

	struct range *r = NULL;
	int i;

	if (!p || !n || flags != cudaHostRegisterDefault)
		return fail(cudaErrorInvalidValue);
	/* The runtime faults every page in to lock it: memory that is not
	 * mapped shows here, under ASan too. */
	for (size_t at = 0; at < n; at += 4096)
		(void)*(volatile char *)((char *)p + at);
	pthread_mutex_lock(&mock_lock);
	inject = fail_next_register;
	fail_next_register = false;
	taken = overlaps_locked_host(p, n);
	for (i = 0; !inject && !taken && i < MAX_ALLOCS && !r; i++) {
		if (!allocs[i].p) {
			r = &allocs[i];
			*r = (struct range){ .p = p, .n = n,
					     .kind = REGISTERED };
			registers++;
		}
	}
	pthread_mutex_unlock(&mock_lock);
	if (taken)
		return fail(cudaErrorHostMemoryAlreadyRegistered);
	if (!r)
		return fail(cudaErrorMemoryAllocation);
	return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
	if (!untrack(p, REGISTERED).p)
		return fail(cudaErrorHostMemoryNotRegistered);
	pthread_mutex_lock(&mock_lock);
	unregisters++;
	pthread_mutex_unlock(&mock_lock);
	return cudaSuccess;
}

__attribute__((destructor)) static void write_stats(void)
{
	const char *path = getenv("TFS_MOCK_STATS");
	unsigned long left = 0;
	FILE *f;
	int i;

	if (!path || !(f = fopen(path, "a")))
		return;
	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_ALLOCS; i++)
		left += allocs[i].p && allocs[i].kind == REGISTERED;
	fprintf(f,
		"registers %lu unregisters %lu registered-left %lu direct-copies %lu staged-copies %lu\n",
		registers, unregisters, left, registered_copies,
		staged_copies);
	pthread_mutex_unlock(&mock_lock);
	fclose(f);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	if (!inside(p, n, DEV) || !s) {
		fprintf(stderr, "mock: bad cudaMemsetAsync %p, %zu\n", p, n);
		return fail(cudaErrorInvalidValue);
	}
	enqueue(s, p, NULL, n, v);
	return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
	pthread_mutex_lock(&mock_lock);
	*total = capacity();
	*free_b = *total - dev_used;
	pthread_mutex_unlock(&mock_lock);
	return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
	const char *name = NULL;
	int i;

	_Static_assert(sizeof(*h) >= sizeof(allocs[0].name), "handle size");
	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_ALLOCS; i++) {
		/* Only an allocation's base has a handle of its own. */
		if (p && allocs[i].p == p && allocs[i].kind == DEV)
			name = allocs[i].name;
	}
	memset(h, 0, sizeof(*h));
	if (name)
		memcpy(h, name, strlen(name) + 1);
	pthread_mutex_unlock(&mock_lock);
	return name ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h,
				 unsigned int flags)
{
	char name[sizeof(h)];
	size_t n = 0;
	void *m;

	memcpy(name, &h, sizeof(name));
	name[sizeof(name) - 1] = '\0';
	*p = NULL;
	m = map_shm(name, O_RDWR, &n);
	if (!m)
		return fail(cudaErrorInvalidValue);
	if (!track(m, n, IMPORTED)) {
		munmap(m, n);
		return fail(cudaErrorMemoryAllocation);
	}
	*p = m;
	return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
	struct range r = untrack(p, IMPORTED);

	if (!r.p)
		return fail(cudaErrorInvalidValue);
	munmap(r.p, r.n);
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
	*d = 0;
	return cudaSuccess;
}

/* --- devices and errors ---------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 0;
	if (getenv("TFS_MOCK_NODEV"))
		return fail(cudaErrorInsufficientDriver);
	*n = 1;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
	return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int d)
{
	int i;

	if (d != 0)
		return fail(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "mock GPU");
	for (i = 0; i < 16; i++)
		prop->uuid.bytes[i] = (char)(i + 1);
	prop->totalGlobalMem = capacity();
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorHostMemoryAlreadyRegistered:
		return "cudaErrorHostMemoryAlreadyRegistered";
	case cudaErrorHostMemoryNotRegistered:
		return "cudaErrorHostMemoryNotRegistered";
	default: return "cudaErrorUnknown";
	}
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "mock error";
}
