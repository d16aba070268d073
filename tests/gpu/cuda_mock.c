// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A host-memory stand-in for the CUDA runtime calls that tiers/device_cuda.c
 * and client/libtierfs.c make, so that their logic (batching, double
 * buffering, the slot pool, error paths, IPC) runs under ASan/UBSan on
 * machines without a GPU. Linked in place of cudart by
 * tests/gpu/mock_check.sh, or preloaded into clients; never shipped.
 *
 * It is meant to be as strict as a GPU, so that what hardware would only
 * show as corruption, a hang or a dead context fails a test here:
 *   - device memory is POSIX shared memory, so CUDA IPC works across
 *     processes: a daemon linked with the mock exports, and a client with
 *     the mock preloaded opens the handle and gets host-visible memory;
 *   - the driver's granularity is 2 MiB: an allocation of 2 MiB or more
 *     takes whole 2 MiB blocks, and smaller ones are packed into shared
 *     2 MiB blocks. IPC maps the whole block, at a 2 MiB-aligned address,
 *     so an importer of a small allocation sees its neighbours (the CUDA
 *     Programming Guide's IPC section warns of exactly this);
 *   - opening a handle in the process that exported it fails with
 *     cudaErrorDeviceUninitialized ("invalid device context"); a second
 *     open in one process returns the same pointer and counts a reference;
 *   - cudaFree of memory that a live process still has open through IPC
 *     aborts: on a GPU it is undefined behaviour. A process that exited or
 *     unmapped the block does not count;
 *   - errors of work that ran on a stream are sticky and context-wide, as
 *     cudaErrorIllegalAddress and friends are: every later call of every
 *     thread on that device's context returns the error, and
 *     cudaGetLastError() does not clear it;
 *   - a process that forked after it created a context cannot use CUDA in
 *     the child (cudaErrorInitializationError);
 *   - several devices (TFS_MOCK_DEVICES), each with its own primary
 *     context, created by cudaSetDevice or by the first call that needs one
 *     on the thread's device (device 0 by default), as since CUDA 12, and
 *     its own UUID. Peer access is per context and direction, enabled once
 *     (a second time is cudaErrorPeerAccessAlreadyEnabled); a peer copy
 *     checks that each pointer is an allocation of the device it names
 *     and that its stream belongs to one of the two;
 *   - cudaFree synchronises the device: it waits for every stream of it;
 *   - streams are asynchronous: each has a worker thread that runs queued
 *     copies after a random delay, so staging reused before its copy
 *     finished gives wrong bytes;
 *   - device ranges of a copy must lie inside one allocation, and the host
 *     side inside one cudaHostAlloc buffer or one range page-locked by
 *     cudaHostRegister, for the copy's context: registered by it, or
 *     portable (cudaHostRegisterPortable); a copy whose host side is no
 *     longer page-locked when it runs aborts the process;
 *   - cudaHostRegister refuses a range overlapping one already page-locked,
 *     cudaHostUnregister anything but a registered start;
 *   - the driver's virtual memory management, through
 *     cudaGetDriverEntryPointByVersion (cuMemAddressReserve, cuMemCreate,
 *     cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
 *     cuMemAddressFree, cuMemGetAllocationGranularity: 2 MiB): a reserved
 *     range is address space only, cuMemCreate takes device memory (and
 *     fails past the capacity), a mapping is of whole granules and gives
 *     no access until cuMemSetAccess; a copy or memset that writes a
 *     granule not mapped read-write, or reads one not mapped, is an
 *     illegal address, sticky for the context, as the fault is on a GPU;
 *     memory is freed once released and unmapped everywhere, and address
 *     space only with nothing mapped in it. The host mapping follows the
 *     access (PROT_NONE, PROT_READ, read-write), so a CPU access the
 *     device could not make faults too.
 *
 * Environment:
 *   TFS_MOCK_NODEV=1          cudaGetDeviceCount answers
 *                             cudaErrorInsufficientDriver
 *   TFS_MOCK_DEVICES=N        N devices (default 1, at most 8)
 *   TFS_MOCK_CAPACITY=BYTES   per device (default 256 MiB)
 *   TFS_MOCK_COMPUTE_MODE=M   cudaDevAttrComputeMode of every device
 *   TFS_MOCK_MIG=1            device names say they are MIG instances
 *   TFS_MOCK_RUNTIME_VERSION=N  what cudaRuntimeGetVersion answers, and
 *                             nothing else: IPC handles are the driver's,
 *                             which every runtime version shares, and no
 *                             documentation has a runtime refuse another
 *                             version's handle (an earlier mock did so,
 *                             reproducing no known behaviour)
 *   TFS_MOCK_IPC_OPEN_ERROR=N  cudaIpcOpenMemHandle fails with error N: a
 *                             test hook standing for the failures a real
 *                             driver gives across PID namespaces, MIG
 *                             instances and containers
 *   TFS_MOCK_PCI_BUS_ID=ID    what cudaDeviceGetPCIBusId answers (default
 *                             0000:00:00.0; sysfs then has the NUMA node)
 *   TFS_MOCK_UUID_SALT=N      changes every device's UUID (a client that
 *                             sees other GPUs than the daemon)
 *   TFS_MOCK_PEER=0           no two devices can access each other
 *                             (cudaDeviceCanAccessPeer says 0, enabling
 *                             is refused); peer copies still work, staged
 *                             through the host as the driver does
 *   TFS_MOCK_BREAK_FILE=PATH  while PATH exists, the next call that needs a
 *                             context breaks it (an ECC error or Xid)
 *   TFS_MOCK_SHARED=FILE      processes naming the same FILE share their
 *                             devices' memory, as processes on one GPU
 *                             do: what the others allocated is not free
 *                             for this one (cudaMalloc fails past it,
 *                             cudaMemGetInfo counts it); a process that
 *                             died stops counting
 *   TFS_MOCK_NO_VMM=1         cuDeviceGetAttribute says the devices have no
 *                             virtual memory management
 *   TFS_MOCK_STATS=FILE       one line appended at exit: "registers N
 *                             unregisters N registered-left N direct-copies
 *                             N staged-copies N waits N calls N dev-left N
 *                             d2h N peer-direct N peer-staged N
 *                             cold-registers N contexts D:N,D:N" (d2h:
 *                             copies device to host; peer-direct: peer
 *                             copies with peer access enabled in the
 *                             stream's context; cold-registers:
 *                             cudaHostRegister calls that found pages not
 *                             faulted in, which the runtime then faults in
 *                             itself, one by one)
 *
 * A test linked with it calls tfs_mock_fail_next_copy() to make the next
 * cudaMemcpyAsync fail when queued (not sticky),
 * tfs_mock_fail_next_copy_async() to make it fail when it runs (sticky),
 * tfs_mock_fail_next_register(), tfs_mock_hold_streams() to stall every
 * stream, tfs_mock_hold_registers() to stall cudaHostRegister, and reads tfs_mock_registered_copies(), tfs_mock_waits(),
 * tfs_mock_calls(), tfs_mock_cold_registers(), tfs_mock_block_of() and
 * tfs_mock_ptr_device().
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define MOCK_BLOCK ((size_t)2 << 20)
#define MOCK_SUB_ALIGN 512
#define MOCK_META 4096 /* after each block's bytes: who imported it */
#define MOCK_IMPORTERS 64
#define MOCK_MAGIC 0x4d534654u
#define MAX_DEVS 8
#define MAX_RANGES 8192
#define MAX_BLOCKS 4096
#define MAX_IMPORTS 256
#define MAX_STREAMS 64
/* What maps a granule of reserved address space (VMM). */
#define VA_MAPPED 1
#define VA_R 2
#define VA_W 4

/* The page after a block's bytes, shared by every process that maps it. */
struct meta {
	uint32_t magic;
	int32_t pid[MOCK_IMPORTERS]; /* importers; 0 = free */
};

struct block {
	char *p; /* 2 MiB aligned; n + MOCK_META bytes mapped */
	size_t n; /* a multiple of MOCK_BLOCK */
	int dev;
	bool small; /* holds packed sub-allocations */
	size_t bump; /* small: next free offset */
	unsigned int live; /* small: sub-allocations not freed */
	char name[40];
};

enum kind { DEV, PINNED, REGISTERED };

struct range {
	char *p;
	size_t n;
	enum kind kind;
	struct block *blk; /* DEV */
	/* REGISTERED: the device whose context registered it, and whether
	 * for every context (cudaHostRegisterPortable) */
	int dev;
	bool portable;
};

/* An IPC handle: which block, and where in it the allocation starts. */
struct mock_handle {
	uint32_t magic;
	int32_t pid; /* exporter */
	int32_t dev;
	uint32_t off;
	char name[48];
};
_Static_assert(sizeof(struct mock_handle) == sizeof(cudaIpcMemHandle_t),
	       "handle size");

struct import {
	char name[48];
	char *base;
	size_t n, maplen;
	unsigned int refs;
	int slot; /* in the block's meta */
};

struct mock_ctx {
	int dev;
	bool created;
	cudaError_t sticky; /* atomic */
	unsigned int peers; /* bit d: peer access to device d enabled */
};

struct mock_dev {
	struct mock_ctx ctx;
	size_t used;
	struct block *small_cur;
	struct CUstream_st *streams[MAX_STREAMS];
};

/* TFS_MOCK_SHARED: what each process holds on each device. */
#define MOCK_SHARED_SLOTS 64
struct shared_use {
	int32_t pid; /* 0: free; claimed with a compare-and-swap */
	uint32_t pad;
	uint64_t used[MAX_DEVS]; /* atomic */
};

static struct shared_use *shared; /* MOCK_SHARED_SLOTS of them, or NULL */
static struct shared_use *shared_mine; /* mock_lock */

static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static struct range ranges[MAX_RANGES]; /* mock_lock */
static struct block blocks[MAX_BLOCKS]; /* mock_lock */
static struct import imports[MAX_IMPORTS]; /* mock_lock */
static struct mock_dev devs[MAX_DEVS]; /* mock_lock */
static int ndevs = 1, compute_mode, uuid_salt, ipc_open_error;
static const char *pci_bus_id = "0000:00:00.0";
static bool mig, nodev, no_peer, no_vmm;
static int runtime_version = CUDART_VERSION;
static size_t dev_capacity = (size_t)256 << 20;
static const char *break_file;
static pid_t ctx_pid; /* the process that created contexts; mock_lock */
static bool fail_next_copy; /* mock_lock */
static bool fail_next_copy_async; /* mock_lock */
static bool fail_next_register; /* mock_lock */
static bool streams_held; /* mock_lock */
static bool registers_held; /* mock_lock */
static unsigned long registered_copies, staged_copies; /* mock_lock */
static unsigned long registers, unregisters; /* mock_lock */
static unsigned long d2h_copies; /* mock_lock */
static unsigned long peer_direct, peer_staged; /* mock_lock */
static unsigned long cold_registers; /* mock_lock */
static unsigned long shm_seq; /* mock_lock */
static unsigned long waits, calls; /* atomic */
static __thread cudaError_t last_error;
static __thread struct mock_ctx *cur_ctx;
static __thread int rt_dev;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void setup(void)
{
	const char *v;

	nodev = getenv("TFS_MOCK_NODEV") != NULL;
	if ((v = getenv("TFS_MOCK_RUNTIME_VERSION")))
		runtime_version = atoi(v);
	if ((v = getenv("TFS_MOCK_DEVICES")))
		ndevs = atoi(v) < 1 ? 1 : atoi(v) > MAX_DEVS ? MAX_DEVS : atoi(v);
	if ((v = getenv("TFS_MOCK_CAPACITY")))
		dev_capacity = strtoull(v, NULL, 0);
	if ((v = getenv("TFS_MOCK_COMPUTE_MODE")))
		compute_mode = atoi(v);
	if ((v = getenv("TFS_MOCK_UUID_SALT")))
		uuid_salt = atoi(v);
	if ((v = getenv("TFS_MOCK_IPC_OPEN_ERROR")))
		ipc_open_error = atoi(v);
	if ((v = getenv("TFS_MOCK_PCI_BUS_ID")) && *v)
		pci_bus_id = v;
	mig = getenv("TFS_MOCK_MIG") != NULL;
	no_peer = (v = getenv("TFS_MOCK_PEER")) && !strcmp(v, "0");
	no_vmm = getenv("TFS_MOCK_NO_VMM") != NULL;
	break_file = getenv("TFS_MOCK_BREAK_FILE");
	for (int i = 0; i < MAX_DEVS; i++)
		devs[i].ctx.dev = i;
	if ((v = getenv("TFS_MOCK_SHARED")) && *v) {
		size_t len = MOCK_SHARED_SLOTS * sizeof(*shared);
		int fd = open(v, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		struct stat st;

		if (fd >= 0 && !fstat(fd, &st) &&
		    ((size_t)st.st_size >= len || !ftruncate(fd, (off_t)len))) {
			shared = mmap(NULL, len, PROT_READ | PROT_WRITE,
				      MAP_SHARED, fd, 0);
			if (shared == MAP_FAILED)
				shared = NULL;
		}
		if (fd >= 0)
			close(fd);
		if (!shared) {
			fprintf(stderr, "mock: cannot share devices through %s\n",
				v);
			abort();
		}
	}
}

static bool pid_alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno != ESRCH;
}

/* Bytes processes other than this one hold on @dev. mock_lock. */
static size_t others_used_locked(int dev)
{
	size_t n = 0;
	pid_t me = getpid();

	for (int i = 0; shared && i < MOCK_SHARED_SLOTS; i++) {
		pid_t pid = __atomic_load_n(&shared[i].pid, __ATOMIC_ACQUIRE);

		if (pid && pid != me && pid_alive(pid))
			n += __atomic_load_n(&shared[i].used[dev],
					     __ATOMIC_RELAXED);
	}
	return n;
}

/* Publish what this process holds on @dev. mock_lock. */
static void share_used_locked(int dev)
{
	pid_t me = getpid();

	if (!shared)
		return;
	if (shared_mine && shared_mine->pid != me)
		shared_mine = NULL; /* a forked child: the slot is the parent's */
	for (int i = 0; !shared_mine && i < MOCK_SHARED_SLOTS; i++) {
		int32_t pid = __atomic_load_n(&shared[i].pid, __ATOMIC_ACQUIRE);

		if ((pid && pid_alive(pid)) ||
		    !__atomic_compare_exchange_n(&shared[i].pid, &pid, me,
						 false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			continue;
		for (int d = 0; d < MAX_DEVS; d++)
			__atomic_store_n(&shared[i].used[d], 0,
					 __ATOMIC_RELAXED);
		shared_mine = &shared[i];
	}
	if (shared_mine)
		__atomic_store_n(&shared_mine->used[dev], devs[dev].used,
				 __ATOMIC_RELAXED);
}

static cudaError_t fail(cudaError_t e)
{
	last_error = e;
	return e;
}

/* Every entry point counts, so a test can see that nothing was called. */
static void count(void)
{
	pthread_once(&setup_once, setup);
	__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
}

static cudaError_t sticky_of(struct mock_ctx *c)
{
	return __atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE);
}

static void ctx_break(struct mock_ctx *c, cudaError_t e)
{
	cudaError_t ok = cudaSuccess;

	__atomic_compare_exchange_n(&c->sticky, &ok, e, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Create @dev's primary context. mock_lock. */
static cudaError_t ctx_create_locked(int dev)
{
	if (compute_mode == cudaComputeModeProhibited)
		return cudaErrorDevicesUnavailable;
	if (!devs[dev].ctx.created) {
		devs[dev].ctx.created = true;
		ctx_pid = getpid();
	}
	return cudaSuccess;
}

/* A child of a process that used CUDA cannot use it. mock_lock. */
static bool forked_locked(void)
{
	return ctx_pid && ctx_pid != getpid();
}

/*
 * The calling thread's context, created on its device when it has none, as
 * the runtime does; NULL with *err set when the call must fail.
 */
static struct mock_ctx *ctx_enter(cudaError_t *err)
{
	struct mock_ctx *c;
	cudaError_t e = cudaSuccess;

	count();
	pthread_mutex_lock(&mock_lock);
	if (forked_locked())
		e = cudaErrorInitializationError;
	else if (nodev)
		e = cudaErrorInsufficientDriver;
	else if (!cur_ctx && !(e = ctx_create_locked(rt_dev)))
		cur_ctx = &devs[rt_dev].ctx;
	c = cur_ctx;
	pthread_mutex_unlock(&mock_lock);
	if (!e && break_file && access(break_file, F_OK) == 0)
		ctx_break(c, cudaErrorECCUncorrectable);
	if (!e)
		e = sticky_of(c);
	if (e) {
		*err = fail(e);
		return NULL;
	}
	return c;
}

#define ENTER(c)                                   \
	struct mock_ctx *c;                        \
	do {                                       \
		cudaError_t e_;                    \
		if (!(c = ctx_enter(&e_)))         \
			return e_;                 \
	} while (0)

/* --- bookkeeping ---------------------------------------------------------- */

/* The range of @kind that holds all of [p, p+n), or NULL. mock_lock. */
static struct range *find_locked(const void *p, size_t n, enum kind kind)
{
	const char *c = p;

	for (int i = 0; i < MAX_RANGES; i++) {
		struct range *r = &ranges[i];

		if (r->p && r->kind == kind && c >= r->p && n <= r->n &&
		    (size_t)(c - r->p) <= r->n - n)
			return r;
	}
	return NULL;
}

/* The range of @kind that starts at @p, or NULL. mock_lock. */
static struct range *find_start_locked(const void *p, enum kind kind)
{
	for (int i = 0; i < MAX_RANGES; i++)
		if (ranges[i].p && ranges[i].p == p && ranges[i].kind == kind)
			return &ranges[i];
	return NULL;
}

static bool inside(const void *p, size_t n, enum kind kind)
{
	bool ok;

	pthread_mutex_lock(&mock_lock);
	ok = find_locked(p, n, kind) != NULL;
	pthread_mutex_unlock(&mock_lock);
	return ok;
}

static int vmm_access(const void *p, size_t n, unsigned char need, int *dev);

/* Device memory of this process: its own, imported through IPC, or a
 * reserved range mapped readable (vmm_guard checks writes first). */
static bool inside_dev(const void *p, size_t n)
{
	const char *c = p;
	bool ok;

	if (vmm_access(p, n, VA_R, NULL) == 1)
		return true;

	pthread_mutex_lock(&mock_lock);
	ok = find_locked(p, n, DEV) != NULL;
	for (int i = 0; !ok && i < MAX_IMPORTS; i++) {
		struct import *im = &imports[i];

		ok = im->base && c >= im->base && n <= im->n &&
		     (size_t)(c - im->base) <= im->n - n;
	}
	pthread_mutex_unlock(&mock_lock);
	return ok;
}

/*
 * Page-locked host memory for device @dev's context: a cudaHostAlloc
 * buffer, or a range registered portable or by that context. To any other
 * context a registered range is pageable, which a copy meant to go direct
 * must not be given.
 */
static bool inside_locked_host(const void *p, size_t n, int dev)
{
	struct range *r;
	bool ok;

	if (inside(p, n, PINNED))
		return true;
	pthread_mutex_lock(&mock_lock);
	r = find_locked(p, n, REGISTERED);
	ok = r && (r->portable || r->dev == dev);
	pthread_mutex_unlock(&mock_lock);
	return ok;
}

static struct range *track_locked(void *p, size_t n, enum kind kind,
				  struct block *blk)
{
	for (int i = 0; i < MAX_RANGES; i++) {
		if (!ranges[i].p) {
			ranges[i] = (struct range){ .p = p, .n = n,
						    .kind = kind, .blk = blk };
			return &ranges[i];
		}
	}
	return NULL;
}

static struct range *track(void *p, size_t n, enum kind kind)
{
	struct range *r;

	pthread_mutex_lock(&mock_lock);
	r = track_locked(p, n, kind, NULL);
	pthread_mutex_unlock(&mock_lock);
	return r;
}

/* Forget the range starting at @p; a copy of it, p NULL when unknown. */
static struct range untrack(void *p, enum kind kind)
{
	struct range r = { 0 };

	pthread_mutex_lock(&mock_lock);
	for (int i = 0; i < MAX_RANGES; i++) {
		if (ranges[i].p == p && ranges[i].kind == kind) {
			r = ranges[i];
			ranges[i].p = NULL;
			break;
		}
	}
	pthread_mutex_unlock(&mock_lock);
	return r;
}

/* --- virtual memory management (the driver's cuMem* calls) ----------------- */

#define MAX_VAS 1024
#define MAX_PHYS 8192

/* Memory of cuMemCreate: a memfd, counted against its device. */
struct vphys {
	int fd; /* -1: slot free */
	size_t n;
	int dev;
	unsigned int maps; /* granules mapping it */
	bool released;
};

/* An address range of cuMemAddressReserve; per granule, what maps it. */
struct vrange {
	char *p; /* NULL: slot free */
	size_t n;
	int dev; /* of the memory last mapped, -1 before */
	unsigned char *acc; /* VA_* per granule */
	int *phys; /* per granule: vphys index, -1 */
};

static struct vphys vphys[MAX_PHYS]; /* mock_lock */
static struct vrange vranges[MAX_VAS]; /* mock_lock */
static bool vphys_init; /* mock_lock */
static unsigned int nvranges; /* written under mock_lock, read atomically */

static void vphys_setup_locked(void)
{
	if (vphys_init)
		return;
	for (int i = 0; i < MAX_PHYS; i++)
		vphys[i].fd = -1;
	vphys_init = true;
}

/* The reserved range holding [p, p + n), or NULL. mock_lock. */
static struct vrange *vrange_of_locked(const void *p, size_t n)
{
	const char *c = p;

	for (int i = 0; i < MAX_VAS; i++) {
		struct vrange *v = &vranges[i];

		if (v->p && c >= v->p && n <= v->n &&
		    (size_t)(c - v->p) <= v->n - n)
			return v;
	}
	return NULL;
}

/*
 * Can a copy access [p, p + n) with @need (VA_R, VA_R | VA_W)? -1: not in
 * reserved address space (ask the other tables), 0: in it, and some
 * granule lacks the access, 1: yes; *@dev the memory's device.
 */
static int vmm_access(const void *p, size_t n, unsigned char need, int *dev)
{
	struct vrange *v;
	int rc = 1;

	/* Most processes reserve no range: their copies pay nothing. */
	if (!__atomic_load_n(&nvranges, __ATOMIC_ACQUIRE))
		return -1;
	pthread_mutex_lock(&mock_lock);
	v = vrange_of_locked(p, n ? n : 1);
	if (!v) {
		rc = -1;
	} else {
		size_t lo = (size_t)((const char *)p - v->p) / MOCK_BLOCK;
		size_t hi = ((size_t)((const char *)p - v->p) + n +
			     MOCK_BLOCK - 1) / MOCK_BLOCK;

		for (size_t i = lo; i < hi; i++)
			if ((v->acc[i] & (need | VA_MAPPED)) !=
			    (need | VA_MAPPED))
				rc = 0;
		if (dev)
			*dev = v->dev;
	}
	pthread_mutex_unlock(&mock_lock);
	return rc;
}

/*
 * What a GPU does with an access its mappings do not allow: a fault that
 * poisons the context. Returns the sticky error, or cudaSuccess when
 * [p, p + n) allows @need or is no reserved range at all.
 */
static cudaError_t vmm_guard(struct mock_ctx *c, const void *p, size_t n,
			     bool write, const char *what)
{
	if (vmm_access(p, n, write ? VA_R | VA_W : VA_R, NULL))
		return cudaSuccess;
	fprintf(stderr,
		"mock: %s %s %zu bytes at %p, not mapped %s: an illegal address\n",
		what, write ? "writes" : "reads", n, p,
		write ? "read-write" : "readable");
	ctx_break(c, cudaErrorIllegalAddress);
	return fail(cudaErrorIllegalAddress);
}

static void vphys_free_locked(struct vphys *ph)
{
	devs[ph->dev].used -= ph->n;
	share_used_locked(ph->dev);
	close(ph->fd);
	ph->fd = -1;
}

static int mock_cuMemGetAllocationGranularity(size_t *g,
					      const CUmemAllocationProp *prop,
					      int flags)
{
	(void)prop;
	(void)flags;
	count();
	*g = MOCK_BLOCK;
	return 0;
}

static int mock_cuMemAddressReserve(CUdeviceptr *out, size_t n, size_t align,
				    CUdeviceptr addr, unsigned long long flags)
{
	struct vrange *v = NULL;
	char *p;

	(void)addr;
	(void)flags;
	count();
	if (!n || n % MOCK_BLOCK || (align && align % MOCK_BLOCK))
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	p = mmap(NULL, n + MOCK_BLOCK, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	{
		size_t lead = (MOCK_BLOCK - (uintptr_t)p % MOCK_BLOCK) %
			      MOCK_BLOCK;

		if (lead)
			munmap(p, lead);
		if (MOCK_BLOCK - lead)
			munmap(p + lead + n, MOCK_BLOCK - lead);
		p += lead;
	}
	pthread_mutex_lock(&mock_lock);
	for (int i = 0; i < MAX_VAS && !v; i++)
		if (!vranges[i].p)
			v = &vranges[i];
	if (v) {
		v->acc = calloc(n / MOCK_BLOCK, 1);
		v->phys = malloc(n / MOCK_BLOCK * sizeof(int));
		if (!v->acc || !v->phys) {
			free(v->acc);
			free(v->phys);
			v = NULL;
		}
	}
	if (v) {
		for (size_t i = 0; i < n / MOCK_BLOCK; i++)
			v->phys[i] = -1;
		v->p = p;
		v->n = n;
		v->dev = -1;
		__atomic_add_fetch(&nvranges, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mock_lock);
	if (!v) {
		munmap(p, n);
		return 2;
	}
	*out = (CUdeviceptr)(uintptr_t)p;
	return 0;
}

static int mock_cuMemAddressFree(CUdeviceptr ptr, size_t n)
{
	char *p = (char *)(uintptr_t)ptr;
	int rc = 1;

	count();
	pthread_mutex_lock(&mock_lock);
	for (int i = 0; i < MAX_VAS; i++) {
		struct vrange *v = &vranges[i];
		size_t k;

		if (v->p != p || v->n != n)
			continue;
		for (k = 0; k < n / MOCK_BLOCK && !v->acc[k]; k++)
			;
		if (k < n / MOCK_BLOCK) {
			fprintf(stderr,
				"mock: cuMemAddressFree of %p with granule %zu still mapped\n",
				p, k);
			break;
		}
		munmap(p, n);
		free(v->acc);
		free(v->phys);
		memset(v, 0, sizeof(*v));
		__atomic_sub_fetch(&nvranges, 1, __ATOMIC_RELEASE);
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&mock_lock);
	return rc;
}

static int mock_cuMemCreate(CUmemGenericAllocationHandle *h, size_t n,
			    const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	struct vphys *ph = NULL;
	int dev = prop->location.id, fd, rc = 0;

	(void)flags;
	count();
	if (!n || n % MOCK_BLOCK || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || dev < 0 ||
	    dev >= ndevs)
		return 1;
	pthread_mutex_lock(&mock_lock);
	vphys_setup_locked();
	if (devs[dev].used + others_used_locked(dev) + n > dev_capacity) {
		rc = 2;
		goto out;
	}
	for (int i = 0; i < MAX_PHYS && !ph; i++)
		if (vphys[i].fd < 0)
			ph = &vphys[i];
	fd = ph ? memfd_create("tfsmock-vmm", MFD_CLOEXEC) : -1;
	if (fd < 0 || ftruncate(fd, (off_t)n)) {
		if (fd >= 0)
			close(fd);
		rc = 2;
		goto out;
	}
	*ph = (struct vphys){ .fd = fd, .n = n, .dev = dev };
	devs[dev].used += n;
	share_used_locked(dev);
	*h = (CUmemGenericAllocationHandle)(ph - vphys) + 1;
out:
	pthread_mutex_unlock(&mock_lock);
	if (!rc && ph) {
		/* Fresh device memory is garbage, not zeroes. */
		char *q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED,
			       ph->fd, 0);

		if (q != MAP_FAILED) {
			memset(q, 0xa5, n);
			munmap(q, n);
		}
	}
	return rc;
}

static struct vphys *vphys_of_locked(CUmemGenericAllocationHandle h)
{
	if (!h || h > MAX_PHYS || vphys[h - 1].fd < 0 || vphys[h - 1].released)
		return NULL;
	return &vphys[h - 1];
}

static int mock_cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct vphys *ph;

	count();
	pthread_mutex_lock(&mock_lock);
	ph = vphys_of_locked(h);
	if (ph) {
		ph->released = true;
		if (!ph->maps)
			vphys_free_locked(ph);
	}
	pthread_mutex_unlock(&mock_lock);
	return ph ? 0 : 1;
}

static int mock_cuMemMap(CUdeviceptr ptr, size_t n, size_t off,
			 CUmemGenericAllocationHandle h,
			 unsigned long long flags)
{
	char *p = (char *)(uintptr_t)ptr;
	struct vphys *ph;
	struct vrange *v;
	size_t lo;
	int rc = 1;

	(void)flags;
	count();
	pthread_mutex_lock(&mock_lock);
	ph = vphys_of_locked(h);
	v = vrange_of_locked(p, n);
	if (!ph || !v || !n || n % MOCK_BLOCK || off % MOCK_BLOCK ||
	    (size_t)(p - v->p) % MOCK_BLOCK || off > ph->n || n > ph->n - off)
		goto out;
	lo = (size_t)(p - v->p) / MOCK_BLOCK;
	for (size_t i = lo; i < lo + n / MOCK_BLOCK; i++)
		if (v->acc[i])
			goto out; /* mapped already */
	if (mmap(p, n, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd,
		 (off_t)off) == MAP_FAILED) {
		rc = 2;
		goto out;
	}
	for (size_t i = lo; i < lo + n / MOCK_BLOCK; i++) {
		v->acc[i] = VA_MAPPED;
		v->phys[i] = (int)(ph - vphys);
		ph->maps++;
	}
	v->dev = ph->dev;
	rc = 0;
out:
	pthread_mutex_unlock(&mock_lock);
	return rc;
}

static int mock_cuMemUnmap(CUdeviceptr ptr, size_t n)
{
	char *p = (char *)(uintptr_t)ptr;
	struct vrange *v;
	size_t lo;
	int rc = 1;

	count();
	pthread_mutex_lock(&mock_lock);
	v = vrange_of_locked(p, n);
	if (!v || !n || n % MOCK_BLOCK || (size_t)(p - v->p) % MOCK_BLOCK)
		goto out;
	lo = (size_t)(p - v->p) / MOCK_BLOCK;
	for (size_t i = lo; i < lo + n / MOCK_BLOCK; i++)
		if (!v->acc[i])
			goto out;
	mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
				      MAP_NORESERVE, -1, 0);
	for (size_t i = lo; i < lo + n / MOCK_BLOCK; i++) {
		struct vphys *ph = &vphys[v->phys[i]];

		v->acc[i] = 0;
		v->phys[i] = -1;
		if (!--ph->maps && ph->released)
			vphys_free_locked(ph);
	}
	rc = 0;
out:
	pthread_mutex_unlock(&mock_lock);
	return rc;
}

static int mock_cuMemSetAccess(CUdeviceptr ptr, size_t n,
			       const CUmemAccessDesc *desc, size_t count_)
{
	char *p = (char *)(uintptr_t)ptr;
	unsigned char acc;
	struct vrange *v;
	size_t lo;
	int rc = 1;

	count();
	if (count_ != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return 1;
	acc = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? VA_R | VA_W :
	      desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ	? VA_R :
								  0;
	pthread_mutex_lock(&mock_lock);
	v = vrange_of_locked(p, n);
	if (!v || !n || n % MOCK_BLOCK || (size_t)(p - v->p) % MOCK_BLOCK ||
	    desc->location.id != v->dev)
		goto out;
	lo = (size_t)(p - v->p) / MOCK_BLOCK;
	for (size_t i = lo; i < lo + n / MOCK_BLOCK; i++)
		if (!v->acc[i])
			goto out; /* every granule must be mapped */
	if (mprotect(p, n, acc & VA_W ? PROT_READ | PROT_WRITE :
			   acc	      ? PROT_READ :
					PROT_NONE))
		goto out;
	for (size_t i = lo; i < lo + n / MOCK_BLOCK; i++)
		v->acc[i] = VA_MAPPED | acc;
	rc = 0;
out:
	pthread_mutex_unlock(&mock_lock);
	return rc;
}

static int mock_cuDeviceGetAttribute(int *v, int attr, int cudev)
{
	count();
	if (cudev < 0 || cudev >= ndevs)
		return 101;
	*v = attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ?
		     !no_vmm :
		     0;
	return 0;
}

/* For tests: bytes of cuMemCreate memory not yet freed, all devices. */
size_t tfs_mock_vmm_bytes(void);
size_t tfs_mock_vmm_bytes(void)
{
	size_t n = 0;

	pthread_mutex_lock(&mock_lock);
	vphys_setup_locked();
	for (int i = 0; i < MAX_PHYS; i++)
		if (vphys[i].fd >= 0)
			n += vphys[i].n;
	pthread_mutex_unlock(&mock_lock);
	return n;
}

/* --- test hooks ------------------------------------------------------------ */

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

/* While @held, no stream runs anything: copies queue up behind it. */
void tfs_mock_hold_streams(int held);
void tfs_mock_hold_streams(int held)
{
	pthread_mutex_lock(&mock_lock);
	streams_held = held;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&mock_lock);
}

/* While @held, cudaHostRegister waits (a slow page-locking of a large
 * range, made to last). */
void tfs_mock_hold_registers(int held);
void tfs_mock_hold_registers(int held)
{
	pthread_mutex_lock(&mock_lock);
	registers_held = held;
	pthread_cond_broadcast(&hold_cond);
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

/* Host waits so far: event and stream synchronisations, successful event
 * queries. */
unsigned long tfs_mock_waits(void);
unsigned long tfs_mock_waits(void)
{
	return __atomic_load_n(&waits, __ATOMIC_RELAXED);
}

/* cudaHostRegister calls that met pages not faulted in yet. */
unsigned long tfs_mock_cold_registers(void);
unsigned long tfs_mock_cold_registers(void)
{
	unsigned long n;

	pthread_mutex_lock(&mock_lock);
	n = cold_registers;
	pthread_mutex_unlock(&mock_lock);
	return n;
}

/* Runtime calls so far. */
unsigned long tfs_mock_calls(void);
unsigned long tfs_mock_calls(void)
{
	return __atomic_load_n(&calls, __ATOMIC_RELAXED);
}

/* The 2 MiB-aligned start of the block holding device pointer @p, or
 * NULL. */
void *tfs_mock_block_of(const void *p);
void *tfs_mock_block_of(const void *p)
{
	struct range *r;
	void *b;

	pthread_mutex_lock(&mock_lock);
	r = find_locked(p, 1, DEV);
	b = r ? r->blk->p : NULL;
	pthread_mutex_unlock(&mock_lock);
	return b;
}

/* The device that owns device pointer @p, or -1. */
int tfs_mock_ptr_device(const void *p);
int tfs_mock_ptr_device(const void *p)
{
	struct range *r;
	int d;

	pthread_mutex_lock(&mock_lock);
	r = find_locked(p, 1, DEV);
	d = r ? r->blk->dev : -1;
	pthread_mutex_unlock(&mock_lock);
	return d;
}

/* --- streams and events ---------------------------------------------------- */

struct op {
	struct op *next;
	void *dst;
	const void *src; /* NULL: memset dst to val */
	size_t n;
	int val;
	const void *host; /* page-locked side of a copy, checked again late */
	bool fail; /* breaks the context when it runs; not done */
	cudaHostFn_t fn; /* cudaLaunchHostFunc: called when reached */
	void *fn_data;
};

struct CUstream_st {
	struct mock_ctx *ctx;
	pthread_t thr;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct op *head, *tail;
	uint64_t queued, done;
	bool stop;
	unsigned int seed;
};

struct CUevent_st {
	struct CUstream_st *s;
	uint64_t seq;
};

static void wait_unheld(void)
{
	pthread_mutex_lock(&mock_lock);
	while (streams_held)
		pthread_cond_wait(&hold_cond, &mock_lock);
	pthread_mutex_unlock(&mock_lock);
}

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
		wait_unheld();
		/* Late enough that a host racing ahead gets caught:
		 * longer than the host's memcpy of a chunk. */
		if (o->dst)
			usleep(500 + (useconds_t)(rand_r(&s->seed) % 1000));
		if (o->host && !inside_locked_host(o->host, o->n, s->ctx->dev)) {
			fprintf(stderr,
				"mock: copy of %zu bytes at %p ran after its host memory was unregistered or freed\n",
				o->n, o->host);
			abort();
		}
		/* A broken context runs nothing more. */
		if (o->fail)
			ctx_break(s->ctx, cudaErrorIllegalAddress);
		else if (sticky_of(s->ctx))
			;
		else if (o->fn)
			o->fn(o->fn_data);
		else if (o->src)
			memcpy(o->dst, o->src, o->n);
		else if (o->dst)
			memset(o->dst, o->val, o->n);
		pthread_mutex_lock(&s->lock);
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
			   size_t n, int val, const void *host, bool fail_it)
{
	struct op *o = calloc(1, sizeof(*o));
	uint64_t seq;

	if (!o)
		abort();
	o->dst = dst;
	o->src = src;
	o->n = n;
	o->val = val;
	o->host = host;
	o->fail = fail_it;
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

/* The stream waits for fn(data) to return, as for a kernel; fn may block
 * (a test holds one stream busy so), and must not call CUDA. */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data)
{
	struct op *o;

	ENTER(c);
	if (!s || !fn)
		return fail(cudaErrorInvalidValue);
	o = calloc(1, sizeof(*o));
	if (!o)
		abort();
	o->fn = fn;
	o->fn_data = data;
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->queued++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return cudaSuccess;
}

static void wait_seq(struct CUstream_st *s, uint64_t seq)
{
	pthread_mutex_lock(&s->lock);
	while (s->done < seq)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

static cudaError_t wait_for(struct CUstream_st *s, uint64_t seq)
{
	cudaError_t e;

	wait_seq(s, seq);
	__atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED);
	e = sticky_of(s->ctx);
	return e ? fail(e) : cudaSuccess;
}

/* Wait for everything queued on @dev's streams: what cudaFree and
 * cudaDeviceSynchronize do. Streams are destroyed only when idle. */
static void device_drain(int dev)
{
	struct CUstream_st *ss[MAX_STREAMS];
	uint64_t q[MAX_STREAMS];
	int n = 0;

	pthread_mutex_lock(&mock_lock);
	for (int i = 0; i < MAX_STREAMS; i++) {
		struct CUstream_st *s = devs[dev].streams[i];

		if (!s)
			continue;
		pthread_mutex_lock(&s->lock);
		q[n] = s->queued;
		pthread_mutex_unlock(&s->lock);
		ss[n++] = s;
	}
	pthread_mutex_unlock(&mock_lock);
	for (int i = 0; i < n; i++)
		wait_seq(ss[i], q[i]);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned int flags)
{
	struct CUstream_st *s;
	int i;

	ENTER(c);
	s = calloc(1, sizeof(*s));
	if (!s)
		return fail(cudaErrorMemoryAllocation);
	if (flags != cudaStreamNonBlocking)
		fprintf(stderr, "mock: stream flags %u\n", flags);
	s->ctx = c;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->seed = (unsigned int)(uintptr_t)s;
	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_STREAMS && devs[c->dev].streams[i]; i++)
		;
	if (i < MAX_STREAMS)
		devs[c->dev].streams[i] = s;
	pthread_mutex_unlock(&mock_lock);
	if (i == MAX_STREAMS) {
		free(s);
		return fail(cudaErrorMemoryAllocation);
	}
	pthread_create(&s->thr, NULL, stream_worker, s);
	*ps = s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	uint64_t q;

	ENTER(c);
	/* The legacy default stream: nothing ever runs on it here. */
	if (!s) {
		__atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED);
		return sticky_of(c) ? fail(sticky_of(c)) : cudaSuccess;
	}
	pthread_mutex_lock(&s->lock);
	q = s->queued;
	pthread_mutex_unlock(&s->lock);
	return wait_for(s, q);
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	bool busy;

	ENTER(c);
	pthread_mutex_lock(&s->lock);
	busy = s->done < s->queued;
	pthread_mutex_unlock(&s->lock);
	return busy ? cudaErrorNotReady : cudaSuccess;
}

/* Frees the stream even on a broken context, so that ASan sees no leak;
 * the error is still returned, as the runtime does. */
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	cudaError_t e = cudaSuccess;
	struct mock_ctx *c = ctx_enter(&e);

	(void)c;
	pthread_mutex_lock(&mock_lock);
	for (int i = 0; i < MAX_STREAMS; i++)
		if (devs[s->ctx->dev].streams[i] == s)
			devs[s->ctx->dev].streams[i] = NULL;
	pthread_mutex_unlock(&mock_lock);
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thr, NULL);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return e;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned int flags)
{
	ENTER(c);
	*pe = calloc(1, sizeof(**pe));
	return *pe ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	cudaError_t err = cudaSuccess;

	(void)ctx_enter(&err);
	free(e);
	return err;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	ENTER(c);
	if (!s)
		return fail(cudaErrorInvalidResourceHandle);
	e->s = s;
	e->seq = enqueue_op(s, NULL, NULL, 0, 0, NULL, false);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	ENTER(c);
	if (!e->s) {
		__atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED);
		return cudaSuccess;
	}
	return wait_for(e->s, e->seq);
}

/* Not ready is not an error: the runtime leaves the last error alone. */
cudaError_t cudaEventQuery(cudaEvent_t e)
{
	struct CUstream_st *s = e->s;
	bool busy = false;

	ENTER(c);
	if (s) {
		pthread_mutex_lock(&s->lock);
		busy = s->done < e->seq;
		pthread_mutex_unlock(&s->lock);
	}
	if (busy)
		return cudaErrorNotReady;
	__atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED);
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e;

	ENTER(c);
	device_drain(c->dev);
	__atomic_add_fetch(&waits, 1, __ATOMIC_RELAXED);
	e = sticky_of(c);
	return e ? fail(e) : cudaSuccess;
}

/* --- device memory --------------------------------------------------------- */

/* Map @fd's @len bytes at a 2 MiB-aligned address, as the driver maps
 * device memory. */
static char *map_aligned(int fd, size_t len)
{
	size_t span = len + MOCK_BLOCK, tail;
	char *r, *a;

	r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		 MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)r + MOCK_BLOCK - 1) & ~(uintptr_t)(MOCK_BLOCK - 1));
	if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
		 0) == MAP_FAILED) {
		munmap(r, span);
		return NULL;
	}
	if (a > r)
		munmap(r, (size_t)(a - r));
	tail = (size_t)((r + span) - (a + len));
	if (tail)
		munmap(a + len, tail);
	return a;
}

/* A new block of @n bytes on @dev, or NULL past the capacity. mock_lock. */
static struct block *block_new_locked(int dev, size_t n, bool small)
{
	struct block *b = NULL;
	struct meta *m;
	char name[40];
	char *p;
	int fd, i;

	if (devs[dev].used + others_used_locked(dev) + n > dev_capacity)
		return NULL;
	for (i = 0; i < MAX_BLOCKS && !b; i++)
		if (!blocks[i].p)
			b = &blocks[i];
	if (!b)
		return NULL;
	/*
	 * A name taken already is a dead process's that had our pid and was
	 * killed before it unlinked its blocks: on a shared machine pids
	 * come round again. Failing here would be an out of memory the
	 * device does not have (a spurious ENOSPC in the daemon); skip it.
	 */
	do {
		snprintf(name, sizeof(name), "/tfsmock.%d.%lu", (int)getpid(),
			 ++shm_seq);
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	} while (fd < 0 && errno == EEXIST);
	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)(n + MOCK_META)) ||
	    !(p = map_aligned(fd, n + MOCK_META))) {
		close(fd);
		shm_unlink(name);
		return NULL;
	}
	close(fd);
	m = (struct meta *)(p + n);
	m->magic = MOCK_MAGIC;
	/* Fresh device memory is garbage, not zeroes. */
	memset(p, 0xa5, n);
	*b = (struct block){ .p = p, .n = n, .dev = dev, .small = small };
	snprintf(b->name, sizeof(b->name), "%s", name);
	devs[dev].used += n;
	share_used_locked(dev);
	return b;
}

/* Does process @pid still map the shm object @name? */
static bool pid_maps(pid_t pid, const char *name)
{
	char path[64], line[512];
	size_t len = strlen(name);
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, name);

		found = at && (at[len] == '\n' || at[len] == ' ' ||
			       at[len] == '\0');
	}
	fclose(f);
	return found;
}

/*
 * Freeing memory that another process still maps through IPC is undefined
 * behaviour on a GPU; here it aborts. A process that exited or closed the
 * handle no longer maps the block and does not count. mock_lock.
 */
static void check_no_importer_locked(const struct block *b, const void *p,
				     size_t n)
{
	struct meta *m = (struct meta *)(b->p + b->n);

	for (int i = 0; i < MOCK_IMPORTERS; i++) {
		pid_t pid = __atomic_load_n(&m->pid[i], __ATOMIC_ACQUIRE);

		if (pid && pid_maps(pid, b->name)) {
			fprintf(stderr,
				"mock: cudaFree of %zu bytes at %p while process %d still has their block \"%s\" open through CUDA IPC\n",
				n, p, (int)pid, b->name);
			abort();
		}
	}
}

static void block_release_locked(struct block *b)
{
	devs[b->dev].used -= b->n;
	share_used_locked(b->dev);
	if (devs[b->dev].small_cur == b)
		devs[b->dev].small_cur = NULL;
	munmap(b->p, b->n + MOCK_META);
	shm_unlink(b->name);
	memset(b, 0, sizeof(*b));
}

cudaError_t cudaMalloc(void **pp, size_t n)
{
	struct mock_dev *d;
	struct block *b;
	char *p;

	ENTER(c);
	*pp = NULL;
	if (!n)
		return cudaSuccess;
	d = &devs[c->dev];
	pthread_mutex_lock(&mock_lock);
	if (n < MOCK_BLOCK) {
		/* Packed with other small allocations, as the driver does. */
		size_t need = (n + MOCK_SUB_ALIGN - 1) & ~(size_t)(MOCK_SUB_ALIGN - 1);

		b = d->small_cur;
		if (!b || b->bump + need > b->n) {
			b = block_new_locked(c->dev, MOCK_BLOCK, true);
			d->small_cur = b;
		}
		if (b) {
			p = b->p + b->bump;
			b->bump += need;
			b->live++;
		}
	} else {
		size_t whole = (n + MOCK_BLOCK - 1) & ~(MOCK_BLOCK - 1);

		b = block_new_locked(c->dev, whole, false);
		if (b)
			p = b->p;
	}
	if (b && !track_locked(p, n, DEV, b)) {
		if (b->small)
			b->live--;
		if (!b->small || !b->live)
			block_release_locked(b);
		b = NULL;
	}
	pthread_mutex_unlock(&mock_lock);
	if (!b)
		return fail(cudaErrorMemoryAllocation);
	*pp = p;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	struct range *r;

	ENTER(c);
	if (!p)
		return cudaSuccess;
	/* cudaFree synchronises the device first. */
	device_drain(c->dev);
	pthread_mutex_lock(&mock_lock);
	r = find_start_locked(p, DEV);
	if (!r) {
		pthread_mutex_unlock(&mock_lock);
		return fail(cudaErrorInvalidValue);
	}
	check_no_importer_locked(r->blk, p, r->n);
	if (!r->blk->small || !--r->blk->live)
		block_release_locked(r->blk);
	r->p = NULL;
	pthread_mutex_unlock(&mock_lock);
	return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
	ENTER(c);
	pthread_mutex_lock(&mock_lock);
	size_t used = devs[c->dev].used + others_used_locked(c->dev);

	*total = dev_capacity;
	*free_b = used < dev_capacity ? dev_capacity - used : 0;
	pthread_mutex_unlock(&mock_lock);
	return cudaSuccess;
}

/* --- host memory ----------------------------------------------------------- */

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
	ENTER(c);
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
	cudaError_t e = cudaSuccess;

	(void)ctx_enter(&e);
	if (!untrack(p, PINNED).p)
		return fail(cudaErrorInvalidValue);
	free(p);
	return e;
}

/* Does [p, p+n) share a byte with page-locked host memory? mock_lock. */
static bool overlaps_locked_host(const char *p, size_t n)
{
	for (int i = 0; i < MAX_RANGES; i++) {
		struct range *r = &ranges[i];

		if (r->p && (r->kind == PINNED || r->kind == REGISTERED) &&
		    p < r->p + r->n && r->p < p + n)
			return true;
	}
	return false;
}

/* Are all pages of [p, p + n) faulted in? (mincore; unknown is yes) */
static bool resident(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
	size_t len = (uintptr_t)p + n - a, pages = (len + 4095) / 4096;
	unsigned char *vec = malloc(pages);
	bool all = true;

	if (!vec || mincore((void *)a, len, vec)) {
		free(vec);
		return true;
	}
	for (size_t i = 0; i < pages && all; i++)
		all = vec[i] & 1;
	free(vec);
	return all;
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags)
{
	struct range *r = NULL;
	bool inject, taken;

	ENTER(c);
	if (!p || !n || (flags & ~cudaHostRegisterPortable))
		return fail(cudaErrorInvalidValue);
	bool cold = !resident(p, n);

	/* The runtime faults every page in to lock it: memory that is not
	 * mapped shows here, under ASan too. */
	for (size_t at = 0; at < n; at += 4096)
		(void)*(volatile char *)((char *)p + at);
	pthread_mutex_lock(&mock_lock);
	while (registers_held)
		pthread_cond_wait(&hold_cond, &mock_lock);
	cold_registers += cold;
	inject = fail_next_register;
	fail_next_register = false;
	taken = overlaps_locked_host(p, n);
	if (!inject && !taken) {
		r = track_locked(p, n, REGISTERED, NULL);
		if (r) {
			r->dev = c->dev;
			r->portable = flags & cudaHostRegisterPortable;
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
	ENTER(c);
	if (!untrack(p, REGISTERED).p)
		return fail(cudaErrorHostMemoryNotRegistered);
	pthread_mutex_lock(&mock_lock);
	unregisters++;
	pthread_mutex_unlock(&mock_lock);
	return cudaSuccess;
}

/* --- copies ---------------------------------------------------------------- */

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
			    enum cudaMemcpyKind kind, cudaStream_t s)
{
	bool ok, inject, inject_async;
	const void *host = NULL;

	ENTER(c);
	pthread_mutex_lock(&mock_lock);
	inject = fail_next_copy;
	fail_next_copy = false;
	inject_async = !inject && fail_next_copy_async;
	if (inject_async)
		fail_next_copy_async = false;
	pthread_mutex_unlock(&mock_lock);
	if (inject)
		return fail(cudaErrorInvalidValue);
	if ((kind == cudaMemcpyDeviceToHost ||
	     kind == cudaMemcpyDeviceToDevice) &&
	    vmm_guard(c, src, n, false, "cudaMemcpyAsync"))
		return last_error;
	if ((kind == cudaMemcpyHostToDevice ||
	     kind == cudaMemcpyDeviceToDevice) &&
	    vmm_guard(c, dst, n, true, "cudaMemcpyAsync"))
		return last_error;
	if (kind == cudaMemcpyDeviceToHost) {
		host = dst;
		ok = s && inside_dev(src, n) &&
		     inside_locked_host(dst, n, s->ctx->dev);
	} else if (kind == cudaMemcpyHostToDevice) {
		host = src;
		ok = s && inside_dev(dst, n) &&
		     inside_locked_host(src, n, s->ctx->dev);
	} else if (kind == cudaMemcpyDeviceToDevice) {
		ok = inside_dev(dst, n) && inside_dev(src, n);
	} else {
		ok = false;
	}
	/* A copy may go to a stream of another device than the current
	 * one (a kernel may not), as the Programming Guide says. */
	if (!ok || !s) {
		fprintf(stderr, "mock: bad cudaMemcpyAsync %p <- %p, %zu, %d\n",
			dst, src, n, (int)kind);
		return fail(cudaErrorInvalidValue);
	}
	pthread_mutex_lock(&mock_lock);
	if (host && find_locked(host, n, REGISTERED))
		registered_copies++;
	else if (host)
		staged_copies++;
	if (kind == cudaMemcpyDeviceToHost)
		d2h_copies++;
	pthread_mutex_unlock(&mock_lock);
	enqueue_op(s, dst, src, n, 0, host, inject_async);
	return cudaSuccess;
}

/*
 * The synchronous copies, on the legacy default stream: they wait for the
 * device's work first (as the legacy stream does with blocking streams,
 * and our streams are the only work there is), then copy. Host memory may
 * be pageable; device memory must be this process's, its own or imported.
 */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
		       enum cudaMemcpyKind kind)
{
	bool ok;

	ENTER(c);
	if ((kind == cudaMemcpyDeviceToHost ||
	     kind == cudaMemcpyDeviceToDevice) &&
	    vmm_guard(c, src, n, false, "cudaMemcpy"))
		return last_error;
	if ((kind == cudaMemcpyHostToDevice ||
	     kind == cudaMemcpyDeviceToDevice) &&
	    vmm_guard(c, dst, n, true, "cudaMemcpy"))
		return last_error;
	if (kind == cudaMemcpyDeviceToHost)
		ok = inside_dev(src, n);
	else if (kind == cudaMemcpyHostToDevice)
		ok = inside_dev(dst, n);
	else if (kind == cudaMemcpyDeviceToDevice)
		ok = inside_dev(src, n) && inside_dev(dst, n);
	else
		ok = false;
	if (!ok) {
		fprintf(stderr, "mock: bad cudaMemcpy %p <- %p, %zu, %d\n", dst,
			src, n, (int)kind);
		return fail(cudaErrorInvalidValue);
	}
	device_drain(c->dev);
	memcpy(dst, src, n);
	if (kind == cudaMemcpyDeviceToHost) {
		pthread_mutex_lock(&mock_lock);
		d2h_copies++;
		pthread_mutex_unlock(&mock_lock);
	}
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
	ENTER(c);
	if (vmm_guard(c, p, n, true, "cudaMemset"))
		return last_error;
	if (!inside_dev(p, n)) {
		fprintf(stderr, "mock: bad cudaMemset %p, %zu\n", p, n);
		return fail(cudaErrorInvalidValue);
	}
	device_drain(c->dev);
	memset(p, v, n);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	ENTER(c);
	if (vmm_guard(c, p, n, true, "cudaMemsetAsync"))
		return last_error;
	if (!inside_dev(p, n) || !s) {
		fprintf(stderr, "mock: bad cudaMemsetAsync %p, %zu\n", p, n);
		return fail(cudaErrorInvalidValue);
	}
	enqueue_op(s, p, NULL, n, v, NULL, false);
	return cudaSuccess;
}

/* --- peers ----------------------------------------------------------------- */

/* Is [p, p+n) inside an allocation of this process on @dev? */
static bool inside_dev_of(const void *p, size_t n, int dev)
{
	struct range *r;
	bool ok;
	int vdev = -1;

	if (vmm_access(p, n, VA_R, &vdev) == 1)
		return vdev == dev;

	pthread_mutex_lock(&mock_lock);
	r = find_locked(p, n, DEV);
	ok = r && r->blk && r->blk->dev == dev;
	pthread_mutex_unlock(&mock_lock);
	return ok;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
	count();
	*can = 0;
	if (nodev)
		return fail(cudaErrorInsufficientDriver);
	if (dev < 0 || dev >= ndevs || peer < 0 || peer >= ndevs)
		return fail(cudaErrorInvalidDevice);
	*can = dev != peer && !no_peer;
	return cudaSuccess;
}

/* In the current context, towards @peer; flags must be 0. */
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
	cudaError_t e = cudaSuccess;

	ENTER(c);
	if (flags)
		return fail(cudaErrorInvalidValue);
	if (peer < 0 || peer >= ndevs || peer == c->dev)
		return fail(cudaErrorInvalidDevice);
	if (no_peer)
		return fail(cudaErrorPeerAccessUnsupported);
	pthread_mutex_lock(&mock_lock);
	if (c->peers & (1u << peer))
		e = cudaErrorPeerAccessAlreadyEnabled;
	c->peers |= 1u << peer;
	pthread_mutex_unlock(&mock_lock);
	return e ? fail(e) : cudaSuccess;
}

/* Checks for both peer copies; the stream's context for a direct one. */
static cudaError_t peer_check(void *dst, int ddev, const void *src, int sdev,
			      size_t n, struct CUstream_st *s)
{
	bool direct;

	if (ddev < 0 || ddev >= ndevs || sdev < 0 || sdev >= ndevs)
		return fail(cudaErrorInvalidDevice);
	if (vmm_guard(s ? s->ctx : &devs[sdev].ctx, src, n, false,
		      "cudaMemcpyPeer") ||
	    vmm_guard(s ? s->ctx : &devs[sdev].ctx, dst, n, true,
		      "cudaMemcpyPeer"))
		return last_error;
	if (!inside_dev_of(dst, n, ddev) || !inside_dev_of(src, n, sdev) ||
	    (s && s->ctx->dev != sdev && s->ctx->dev != ddev)) {
		fprintf(stderr,
			"mock: bad cudaMemcpyPeer %p (device %d) <- %p (device %d), %zu\n",
			dst, ddev, src, sdev, n);
		return fail(cudaErrorInvalidValue);
	}
	pthread_mutex_lock(&mock_lock);
	direct = sdev == ddev ||
		 (devs[sdev].ctx.peers & (1u << ddev)) ||
		 (devs[ddev].ctx.peers & (1u << sdev));
	if (direct)
		peer_direct++;
	else
		peer_staged++;
	pthread_mutex_unlock(&mock_lock);
	return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int ddev, const void *src,
				int sdev, size_t n, cudaStream_t s)
{
	cudaError_t e;

	ENTER(c);
	if (!s) {
		fprintf(stderr, "mock: cudaMemcpyPeerAsync on stream 0\n");
		return fail(cudaErrorInvalidValue);
	}
	e = peer_check(dst, ddev, src, sdev, n, s);
	if (e)
		return e;
	enqueue_op(s, dst, src, n, 0, NULL, false);
	return cudaSuccess;
}

/* Synchronous: waits for both devices' work, as the legacy stream does. */
cudaError_t cudaMemcpyPeer(void *dst, int ddev, const void *src, int sdev,
			   size_t n)
{
	cudaError_t e;

	ENTER(c);
	e = peer_check(dst, ddev, src, sdev, n, NULL);
	if (e)
		return e;
	device_drain(sdev);
	device_drain(ddev);
	memcpy(dst, src, n);
	return cudaSuccess;
}

/* --- IPC ------------------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
	struct mock_handle mh = { .magic = MOCK_MAGIC };
	struct range *r;

	ENTER(c);
	memset(h, 0, sizeof(*h));
	pthread_mutex_lock(&mock_lock);
	/* Only an allocation's base has a handle of its own. */
	r = p ? find_start_locked(p, DEV) : NULL;
	if (r) {
		mh.pid = (int32_t)getpid();
		mh.dev = r->blk->dev;
		mh.off = (uint32_t)((char *)p - r->blk->p);
		snprintf(mh.name, sizeof(mh.name), "%s", r->blk->name);
	}
	pthread_mutex_unlock(&mock_lock);
	if (!mh.pid)
		return fail(cudaErrorInvalidValue);
	memcpy(h, &mh, sizeof(mh));
	return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **pp, cudaIpcMemHandle_t h,
				 unsigned int flags)
{
	struct mock_handle mh;
	struct import *im = NULL;
	struct meta *m;
	struct stat st;
	char *base;
	int fd, i, slot = -1;

	ENTER(c);
	*pp = NULL;
	memcpy(&mh, &h, sizeof(mh));
	mh.name[sizeof(mh.name) - 1] = '\0';
	if (mh.magic != MOCK_MAGIC)
		return fail(cudaErrorInvalidValue);
	/* The runtime refuses a handle of the calling process. */
	if (mh.pid == (int32_t)getpid())
		return fail(cudaErrorDeviceUninitialized);
	if (ipc_open_error)
		return fail((cudaError_t)ipc_open_error);
	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_IMPORTS; i++) {
		if (imports[i].base && !strcmp(imports[i].name, mh.name)) {
			/* Opened before: one more reference, same pointer. */
			imports[i].refs++;
			*pp = imports[i].base + mh.off;
			pthread_mutex_unlock(&mock_lock);
			return cudaSuccess;
		}
	}
	for (i = 0; i < MAX_IMPORTS && !im; i++)
		if (!imports[i].base)
			im = &imports[i];
	pthread_mutex_unlock(&mock_lock);
	if (!im)
		return fail(cudaErrorMemoryAllocation);
	fd = shm_open(mh.name, O_RDWR, 0);
	if (fd < 0)
		return fail(cudaErrorInvalidValue);
	if (fstat(fd, &st) || (size_t)st.st_size <= MOCK_META ||
	    !(base = map_aligned(fd, (size_t)st.st_size))) {
		close(fd);
		return fail(cudaErrorMapBufferObjectFailed);
	}
	close(fd);
	m = (struct meta *)(base + st.st_size - MOCK_META);
	for (i = 0; i < MOCK_IMPORTERS && slot < 0; i++) {
		int32_t zero = 0;

		if (__atomic_compare_exchange_n(&m->pid[i], &zero,
						(int32_t)getpid(), false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			slot = i;
	}
	if (m->magic != MOCK_MAGIC || slot < 0) {
		munmap(base, (size_t)st.st_size);
		return fail(cudaErrorMapBufferObjectFailed);
	}
	pthread_mutex_lock(&mock_lock);
	*im = (struct import){ .base = base,
			       .n = (size_t)st.st_size - MOCK_META,
			       .maplen = (size_t)st.st_size, .refs = 1,
			       .slot = slot };
	snprintf(im->name, sizeof(im->name), "%s", mh.name);
	pthread_mutex_unlock(&mock_lock);
	*pp = base + mh.off;
	return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
	struct import gone = { 0 };
	const char *c_ = p;
	int i;

	ENTER(c);
	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_IMPORTS; i++) {
		struct import *im = &imports[i];

		if (im->base && c_ >= im->base && c_ < im->base + im->n) {
			if (!--im->refs) {
				gone = *im;
				memset(im, 0, sizeof(*im));
			}
			break;
		}
	}
	pthread_mutex_unlock(&mock_lock);
	if (i == MAX_IMPORTS)
		return fail(cudaErrorInvalidValue);
	if (gone.base) {
		struct meta *m = (struct meta *)(gone.base + gone.n);

		__atomic_store_n(&m->pid[gone.slot], 0, __ATOMIC_RELEASE);
		munmap(gone.base, gone.maplen);
	}
	return cudaSuccess;
}

/* --- devices, contexts and errors ------------------------------------------ */

cudaError_t cudaGetDeviceCount(int *n)
{
	count();
	*n = 0;
	if (nodev)
		return fail(cudaErrorInsufficientDriver);
	*n = ndevs;
	return cudaSuccess;
}

/* Since CUDA 12 this creates the device's primary context. */
cudaError_t cudaSetDevice(int d)
{
	cudaError_t e = cudaSuccess;

	count();
	if (nodev)
		return fail(cudaErrorInsufficientDriver);
	if (d < 0 || d >= ndevs)
		return fail(cudaErrorInvalidDevice);
	pthread_mutex_lock(&mock_lock);
	if (forked_locked())
		e = cudaErrorInitializationError;
	else
		e = ctx_create_locked(d);
	if (!e) {
		rt_dev = d;
		cur_ctx = &devs[d].ctx;
	}
	pthread_mutex_unlock(&mock_lock);
	return e ? fail(e) : cudaSuccess;
}

/* The device of the current context, else the thread's default; creates
 * nothing. */
cudaError_t cudaGetDevice(int *d)
{
	count();
	*d = cur_ctx ? cur_ctx->dev : rt_dev;
	return cudaSuccess;
}

static void uuid_of(int d, unsigned char *out)
{
	for (int i = 0; i < 16; i++)
		out[i] = (unsigned char)(i + 1 + 16 * d + uuid_salt);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int d)
{
	count();
	if (nodev)
		return fail(cudaErrorInsufficientDriver);
	if (d < 0 || d >= ndevs)
		return fail(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "mock GPU%s",
		 mig ? " MIG 1g.10gb" : "");
	uuid_of(d, (unsigned char *)prop->uuid.bytes);
	prop->totalGlobalMem = dev_capacity;
	return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d)
{
	count();
	if (nodev)
		return fail(cudaErrorInsufficientDriver);
	if (d < 0 || d >= ndevs)
		return fail(cudaErrorInvalidDevice);
	*v = 0;
	if (attr == cudaDevAttrComputeMode)
		*v = compute_mode;
	return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d)
{
	count();
	if (nodev)
		return fail(cudaErrorInsufficientDriver);
	if (d < 0 || d >= ndevs || len < 1)
		return fail(cudaErrorInvalidValue);
	snprintf(buf, (size_t)len, "%s", pci_bus_id);
	return cudaSuccess;
}

/*
 * Host memory page-locked for the current context (a cudaHostAlloc
 * buffer, a range registered portable or by it) is cudaMemoryTypeHost,
 * device memory of this process (its own or imported) cudaMemoryTypeDevice,
 * anything else unregistered, with no error (since CUDA 11).
 */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
				     const void *p)
{
	ENTER(c);
	memset(a, 0, sizeof(*a));
	a->device = c->dev;
	if (inside_locked_host(p, 1, c->dev)) {
		a->type = cudaMemoryTypeHost;
		a->hostPointer = (void *)p;
		a->devicePointer = (void *)p;
	} else if (inside_dev(p, 1)) {
		a->type = cudaMemoryTypeDevice;
		a->devicePointer = (void *)p;
	} else {
		a->type = cudaMemoryTypeUnregistered;
	}
	return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
	count();
	pthread_once(&setup_once, setup);
	*v = runtime_version;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	count();
	*v = nodev ? 0 : CUDART_VERSION;
	return cudaSuccess;
}

/*
 * The driver's context calls, for cudaGetDriverEntryPointByVersion. They
 * return CUresult (0 is CUDA_SUCCESS); a CUdevice is the ordinal. Each
 * thread has a context stack whose top is the current context; the
 * runtime's own current device (rt_dev) is not touched by push and pop.
 */
#define CTX_STACK 8
static __thread struct mock_ctx *ctx_stack[CTX_STACK];
static __thread int ctx_depth;

static int mock_cuDeviceGet(int *cudev, int ordinal)
{
	count();
	if (ordinal < 0 || ordinal >= ndevs)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*cudev = ordinal;
	return 0;
}

static int mock_cuDevicePrimaryCtxRetain(void **pctx, int cudev)
{
	cudaError_t e;

	count();
	if (cudev < 0 || cudev >= ndevs)
		return 101;
	pthread_mutex_lock(&mock_lock);
	e = forked_locked() ? cudaErrorInitializationError :
			      ctx_create_locked(cudev);
	pthread_mutex_unlock(&mock_lock);
	if (e)
		return 3; /* CUDA_ERROR_NOT_INITIALIZED */
	*pctx = &devs[cudev].ctx;
	return 0;
}

static int mock_cuDevicePrimaryCtxRelease(int cudev)
{
	count();
	return cudev < 0 || cudev >= ndevs ? 101 : 0;
}

static int mock_cuCtxGetCurrent(void **pctx)
{
	count();
	*pctx = cur_ctx;
	return 0;
}

static int mock_cuCtxSetCurrent(void *ctx)
{
	count();
	cur_ctx = ctx;
	return 0;
}

static int mock_cuCtxPushCurrent(void *ctx)
{
	count();
	if (!ctx || ctx_depth == CTX_STACK)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	ctx_stack[ctx_depth++] = cur_ctx;
	cur_ctx = ctx;
	return 0;
}

static int mock_cuCtxPopCurrent(void **pctx)
{
	count();
	if (!ctx_depth)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	if (pctx)
		*pctx = cur_ctx;
	cur_ctx = ctx_stack[--ctx_depth];
	return 0;
}

cudaError_t cudaGetDriverEntryPointByVersion(
	const char *sym, void **fp, unsigned int version,
	unsigned long long flags,
	enum cudaDriverEntryPointQueryResult *status)
{
	static const struct {
		const char *name;
		void *fn;
	} syms[] = {
		{ "cuDeviceGet", (void *)mock_cuDeviceGet },
		{ "cuDevicePrimaryCtxRetain",
		  (void *)mock_cuDevicePrimaryCtxRetain },
		{ "cuDevicePrimaryCtxRelease",
		  (void *)mock_cuDevicePrimaryCtxRelease },
		{ "cuCtxGetCurrent", (void *)mock_cuCtxGetCurrent },
		{ "cuCtxSetCurrent", (void *)mock_cuCtxSetCurrent },
		{ "cuCtxPushCurrent", (void *)mock_cuCtxPushCurrent },
		{ "cuCtxPopCurrent", (void *)mock_cuCtxPopCurrent },
		{ "cuDeviceGetAttribute", (void *)mock_cuDeviceGetAttribute },
		{ "cuMemGetAllocationGranularity",
		  (void *)mock_cuMemGetAllocationGranularity },
		{ "cuMemAddressReserve", (void *)mock_cuMemAddressReserve },
		{ "cuMemAddressFree", (void *)mock_cuMemAddressFree },
		{ "cuMemCreate", (void *)mock_cuMemCreate },
		{ "cuMemRelease", (void *)mock_cuMemRelease },
		{ "cuMemMap", (void *)mock_cuMemMap },
		{ "cuMemUnmap", (void *)mock_cuMemUnmap },
		{ "cuMemSetAccess", (void *)mock_cuMemSetAccess },
	};

	count();
	*fp = NULL;
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (!strcmp(sym, syms[i].name))
			*fp = syms[i].fn;
	if (status)
		*status = *fp ? cudaDriverEntryPointSuccess :
				cudaDriverEntryPointSymbolNotFound;
	return cudaSuccess;
}

/* A sticky error stays: the runtime reports it again and again. */
cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	count();
	last_error = cudaSuccess;
	if (cur_ctx && sticky_of(cur_ctx))
		return sticky_of(cur_ctx);
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	count();
	if (cur_ctx && sticky_of(cur_ctx))
		return sticky_of(cur_ctx);
	return last_error;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInitializationError:
		return "cudaErrorInitializationError";
	case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
	case cudaErrorDeviceUninitialized:
		return "cudaErrorDeviceUninitialized";
	case cudaErrorMapBufferObjectFailed:
		return "cudaErrorMapBufferObjectFailed";
	case cudaErrorECCUncorrectable: return "cudaErrorECCUncorrectable";
	case cudaErrorInvalidResourceHandle:
		return "cudaErrorInvalidResourceHandle";
	case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
	case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
	case cudaErrorHostMemoryAlreadyRegistered:
		return "cudaErrorHostMemoryAlreadyRegistered";
	case cudaErrorHostMemoryNotRegistered:
		return "cudaErrorHostMemoryNotRegistered";
	case cudaErrorPeerAccessUnsupported:
		return "cudaErrorPeerAccessUnsupported";
	case cudaErrorPeerAccessAlreadyEnabled:
		return "cudaErrorPeerAccessAlreadyEnabled";
	default: return "cudaErrorUnknown";
	}
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "mock error";
}

/*
 * At exit, as the driver does when a process ends, what is still allocated
 * goes; the count of it is reported so a test sees leaks.
 */
__attribute__((destructor)) static void mock_exit(void)
{
	const char *path = getenv("TFS_MOCK_STATS");
	unsigned long left = 0, dev_left = 0;
	FILE *f;
	int i;

	pthread_mutex_lock(&mock_lock);
	for (i = 0; i < MAX_RANGES; i++) {
		left += ranges[i].p && ranges[i].kind == REGISTERED;
		dev_left += ranges[i].p && ranges[i].kind == DEV;
	}
	/* cuMemCreate's memory not freed counts as allocations left. */
	for (i = 0; vphys_init && i < MAX_PHYS; i++)
		dev_left += vphys[i].fd >= 0;
	if (path && (f = fopen(path, "a"))) {
		fprintf(f,
			"registers %lu unregisters %lu registered-left %lu direct-copies %lu staged-copies %lu waits %lu calls %lu dev-left %lu d2h %lu peer-direct %lu peer-staged %lu cold-registers %lu contexts",
			registers, unregisters, left, registered_copies,
			staged_copies, waits, calls, dev_left, d2h_copies,
			peer_direct, peer_staged, cold_registers);
		for (i = 0; i < ndevs; i++)
			fprintf(f, "%c%d:%d", i ? ',' : ' ', i,
				devs[i].ctx.created ? 1 : 0);
		fprintf(f, "\n");
		fclose(f);
	}
	/* Only the process that made them; a forked child copied the
	 * table but owns none of it. */
	if (ctx_pid == getpid())
		for (i = 0; i < MAX_BLOCKS; i++)
			if (blocks[i].p)
				shm_unlink(blocks[i].name);
	if (shared_mine && shared_mine->pid == getpid()) {
		for (i = 0; i < MAX_DEVS; i++)
			__atomic_store_n(&shared_mine->used[i], 0,
					 __ATOMIC_RELAXED);
		__atomic_store_n(&shared_mine->pid, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mock_lock);
}
