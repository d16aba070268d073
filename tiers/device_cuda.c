// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cuda device backend: buffers are cudaMalloc'd in whole 2 MiB blocks,
 * copies are batched on a small pool of non-blocking streams (staged through
 * pinned buffers where the host side is pageable), and exports are CUDA IPC
 * handles. Host memory the store has page-locked through host_register (its
 * pool, host.pinned) is copied directly, without staging.
 *
 * The daemon links the static cudart, so on a machine without a driver every
 * call answers cudaErrorInsufficientDriver and init fails with -ENODEV and
 * that error's name, instead of the daemon failing to start.
 *
 * What the real runtime does that shapes this file:
 *   - cudaMalloc packs allocations under 2 MiB into shared 2 MiB blocks, and
 *     legacy IPC maps the whole block: an importer of a small buffer could
 *     read and write its neighbours. Every allocation is therefore rounded
 *     up to 2 MiB, the Programming Guide's advice for IPC, and the store
 *     charges the rounded size (tier_dmem.granted).
 *   - Errors such as an illegal address, a launch failure or an
 *     uncorrectable ECC error are sticky: they poison the context, every
 *     later call fails the same way, and only a new process recovers. The
 *     first one marks the device failed and is logged once; from then on
 *     every slot fails fast without calling CUDA (see device.h).
 *   - cudaFree synchronises the whole device, so it runs on a thread of our
 *     own rather than under the caller's buffer lock.
 *   - A context in exclusive-process compute mode keeps every other process
 *     off the GPU, so no client could map an export: init refuses it.
 *
 * Concurrency: the store calls every slot from several threads at once. A
 * batch of copies takes one slot (two pinned staging buffers, one stream,
 * three events) for its whole duration, so no two calls share a stream or a
 * staging buffer; the pool's mutex is held only to take or return a slot.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/device.h"

/*
 * 4 slots of 2 x 2 MiB: 16 MiB pinned in all. Four slots let four spills or
 * reads run at once; 2 MiB per chunk is past the knee of the pinned copy
 * bandwidth curve while the memcpy between staging and the caller's pageable
 * buffer stays short enough to hide behind the next DMA.
 */
#define CUDA_SLOTS 4
#define CUDA_CHUNK (2u << 20)

/* What every allocation is rounded to: the driver's block, which legacy
 * IPC shares whole. */
#define CUDA_GRANULE ((size_t)2 << 20)

/*
 * How long a copy's waiter polls before it sleeps. Not measured: there was
 * no GPU to measure on when this was written, so the reasoning is below and
 * the number wants checking with tests/gpu/run.sh.
 *
 * The runtime's default (cudaDeviceScheduleAuto with one context) spins in
 * cudaEventSynchronize for the whole copy. The daemon runs a FUSE thread per
 * request, the spiller and lz4 workers on machines with a few cores; four
 * slots spinning would take those cores from the threads that feed or drain
 * the copies. cudaDeviceScheduleBlockingSync fixes that but pays a wakeup (an
 * interrupt, then a futex) on every wait; batches wait once, but a staged
 * copy still waits once per 2 MiB chunk, some 40-80 us of DMA, and a wakeup
 * of 5-20 us would cost a good part of the 0.8x of raw cudaMemcpy.
 *
 * So neither, per wait: poll cudaEventQuery, yielding the CPU between polls,
 * for about the length of one staging chunk's DMA, then block in
 * cudaEventSynchronize, which sleeps because the slot's events are created
 * with cudaEventBlockingSync. The device flag stays as it is: it is process
 * wide, so every other wait would sleep too.
 */
#define CUDA_SPIN_NS (100 * 1000)

struct cuda_slot {
	void *stage[2]; /* pinned, CUDA_CHUNK bytes each */
	/* recorded after the copy that uses stage[i]; blocking-sync events */
	cudaEvent_t done[2];
	cudaEvent_t fin; /* recorded at the end of a batch */
	cudaStream_t stream; /* non-blocking: never syncs with stream 0 */
};

struct cuda_reg {
	uintptr_t base;
	size_t len;
};

/* An allocation waiting for the freer thread. */
struct cuda_gone {
	struct cuda_gone *next;
	void *ptr;
	size_t granted;
};

struct cuda_dev {
	struct tier_dev base;
	int gpu;
	struct tier_dev_info info;
	/* Set once by the first sticky error, never cleared; atomic. */
	bool failed;

	/*
	 * Lock order: pool_lock, reg_lock and free_lock are leaves; none is
	 * held with another or across a CUDA call (the freer drops free_lock
	 * around cudaFree).
	 */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	unsigned int pool_free; /* bit i: slots[i] is free; pool_lock */
	struct cuda_slot slots[CUDA_SLOTS]; /* set up at init, then fixed */

	/*
	 * Host ranges page-locked by host_register, sorted by base and never
	 * overlapping (cudaHostRegister refuses overlaps). Entries are added
	 * after cudaHostRegister succeeds and removed before
	 * cudaHostUnregister, so a range in the table is always page-locked.
	 */
	pthread_rwlock_t reg_lock;
	struct cuda_reg *reg; /* reg_lock */
	size_t nreg, reg_cap; /* reg_lock */
	unsigned long reg_failed; /* registers refused; atomic */
	bool unreg_warned; /* atomic */

	/* The freer thread and its queue. */
	pthread_t freer;
	bool freer_started;
	pthread_mutex_t free_lock;
	pthread_cond_t free_wake; /* work queued, or stop */
	pthread_cond_t free_idle; /* the queue ran empty */
	struct cuda_gone *gone_head, **gone_tail; /* free_lock */
	bool freeing; /* free_lock: a cudaFree is running */
	bool free_stop; /* free_lock */
	/* Bytes cudaMalloc'd and not yet cudaFree'd (queued frees
	 * included): what meminfo reports as held. Raised before cudaMalloc
	 * and lowered after cudaFree, so that it never reads below what the
	 * device has given us. atomic */
	uint64_t held;
};

struct cuda_dmem {
	struct tier_dmem base;
	void *ptr; /* cudaMalloc'd, granted bytes; offset 0 of the handle */
	bool tail_zeroed; /* [len, granted) cleared for importers */
};

static struct cuda_dev *to_cdev(struct tier_dev *dev)
{
	return (struct cuda_dev *)dev;
}

static struct cuda_dmem *to_cmem(struct tier_dmem *m)
{
	return (struct cuda_dmem *)m;
}

/* "what (cudaErrorName, number)" for one error, into @buf. */
static const char *cuda_describe(cudaError_t e, char *buf, size_t len)
{
	snprintf(buf, len, "%s (%s, %d)", cudaGetErrorString(e),
		 cudaGetErrorName(e), (int)e);
	return buf;
}

/*
 * One errno per CUDA error that can reach us. Anything unexpected is an
 * I/O error of the device: the store keeps the other copies and reports it.
 */
static int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInsufficientDriver:
	case cudaErrorNoDevice:
	case cudaErrorDevicesUnavailable:
	case cudaErrorStubLibrary:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorInitializationError:
		return -ENODEV;
	case cudaErrorInvalidDevice:
		return -ENXIO;
	case cudaErrorInvalidValue:
		return -EINVAL;
	case cudaErrorNotSupported:
	case cudaErrorNotPermitted:
		return -EOPNOTSUPP;
	case cudaErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case cudaErrorHostMemoryNotRegistered:
		return -ENOENT;
	default:
		return -EIO;
	}
}

/*
 * The errors driver_types.h documents as leaving "the process in an
 * inconsistent state": every later call returns them, and only a new
 * process gets a working context.
 */
static bool cuda_sticky_code(cudaError_t e)
{
	switch (e) {
	case cudaErrorECCUncorrectable:
	case cudaErrorNvlinkUncorrectable:
	case cudaErrorContained:
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchTimeout:
	case cudaErrorAssert:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorLaunchFailure:
	case cudaErrorTensorMemoryLeak:
	case cudaErrorMpsClientTerminated:
	case cudaErrorExternalDevice:
	case cudaErrorContextIsDestroyed:
		return true;
	default:
		return false;
	}
}

static bool dev_failed(struct cuda_dev *d)
{
	return __atomic_load_n(&d->failed, __ATOMIC_ACQUIRE);
}

/* Mark the device failed; the first caller logs why. Returns -EIO. */
static int dev_fail(struct cuda_dev *d, cudaError_t e, const char *call)
{
	char why[256];

	if (!__atomic_exchange_n(&d->failed, true, __ATOMIC_ACQ_REL))
		tfs_err("cuda: gpu %d failed: %s: %s; the device tier is off until tierfs is restarted: files with a host or disk copy stay readable, files only on the gpu read as EIO",
			d->gpu, call, cuda_describe(e, why, sizeof(why)));
	return -EIO;
}

/*
 * Does @e mean the context is gone? The documented codes do; for an error
 * this file does not expect, a cheap call that needs the context tells:
 * on a poisoned context it fails too.
 */
static bool cuda_sticky(struct cuda_dev *d, cudaError_t e)
{
	cudaError_t probe;

	if (cuda_sticky_code(e))
		return true;
	if (cuda_errno(e) != -EIO || !d->slots[0].stream)
		return false;
	(void)cudaGetLastError();
	probe = cudaStreamQuery(d->slots[0].stream);
	(void)cudaGetLastError();
	return probe != cudaSuccess && probe != cudaErrorNotReady;
}

/*
 * Fail init: one line "cuda: CALL: what (name, number)" in @err, and the
 * matching errno. The runtime's last error is cleared so a later backend
 * (auto falls back to none) starts clean.
 */
static int init_fail(cudaError_t e, const char *call, char *err, size_t errlen)
{
	char why[256];

	(void)cudaGetLastError();
	snprintf(err, errlen, "cuda: %s: %s", call,
		 cuda_describe(e, why, sizeof(why)));
	return cuda_errno(e);
}

/*
 * A call of a copy failed: a sticky error fails the device (logged once),
 * anything else is logged and becomes -EIO (or -ENODEV when the device went
 * away under us).
 */
static int copy_fail(struct cuda_dev *d, cudaError_t e, const char *what,
		     size_t len, uint64_t off)
{
	char why[256];
	int rc = cuda_errno(e);

	(void)cudaGetLastError();
	if (cuda_sticky(d, e))
		return dev_fail(d, e, what);
	tfs_err("cuda: %s of %zu bytes at %llu: %s", what, len,
		(unsigned long long)off, cuda_describe(e, why, sizeof(why)));
	return rc == -ENODEV ? rc : -EIO;
}

static bool in_range(const struct cuda_dmem *m, size_t len, uint64_t off)
{
	return off <= m->base.len && len <= m->base.len - off;
}

static struct cuda_slot *slot_get(struct cuda_dev *d)
{
	struct cuda_slot *s;
	int i;

	pthread_mutex_lock(&d->pool_lock);
	while (!d->pool_free)
		pthread_cond_wait(&d->pool_cond, &d->pool_lock);
	i = __builtin_ctz(d->pool_free);
	d->pool_free &= ~(1u << i);
	s = &d->slots[i];
	pthread_mutex_unlock(&d->pool_lock);
	return s;
}

/*
 * Return a slot. The caller has synchronised its stream: a slot goes back
 * with no copy in flight, or the next user would overwrite staging that a
 * DMA still reads.
 */
static void slot_put(struct cuda_dev *d, struct cuda_slot *s)
{
	unsigned int i = (unsigned int)(s - d->slots);

	pthread_mutex_lock(&d->pool_lock);
	d->pool_free |= 1u << i;
	pthread_cond_signal(&d->pool_cond);
	pthread_mutex_unlock(&d->pool_lock);
}

/*
 * The runtime's current device is per thread, and the store's threads are
 * not ours to set up, so every entry point selects the device first. After
 * the first call in a thread this only reads thread-local state.
 */
static cudaError_t cuda_enter(struct cuda_dev *d)
{
	return cudaSetDevice(d->gpu);
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Wait for @ev: poll for CUDA_SPIN_NS, then sleep (see CUDA_SPIN_NS). */
static cudaError_t event_wait(cudaEvent_t ev)
{
	uint64_t until = 0;
	cudaError_t e;

	for (;;) {
		e = cudaEventQuery(ev);
		if (e != cudaErrorNotReady)
			return e;
		/* Clocks cost a syscall-free vDSO read, queries a driver
		 * call: start the clock only once a wait is not instant. */
		if (!until)
			until = now_ns() + CUDA_SPIN_NS;
		else if (now_ns() >= until)
			break;
		sched_yield();
	}
	return cudaEventSynchronize(ev);
}

/* --- page-locked host ranges ---------------------------------------------- */

/* Index of the first entry whose base is above @p. reg_lock. */
static size_t reg_upper(const struct cuda_dev *d, uintptr_t p)
{
	size_t lo = 0, hi = d->nreg;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->reg[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Is all of [p, p + len) inside one range page-locked by host_register?
 * Anything else (a FUSE buffer, a small file's malloc'd chunk) is staged,
 * which is always correct. */
static bool host_registered(struct cuda_dev *d, const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;
	bool ok = false;

	pthread_rwlock_rdlock(&d->reg_lock);
	if (d->nreg && a) {
		size_t i = reg_upper(d, a);

		if (i) {
			const struct cuda_reg *r = &d->reg[i - 1];

			ok = a - r->base <= r->len && len <= r->len - (a - r->base);
		}
	}
	pthread_rwlock_unlock(&d->reg_lock);
	return ok;
}

/* Add [base, base + len). Write side of reg_lock. */
static int reg_insert(struct cuda_dev *d, uintptr_t base, size_t len)
{
	size_t i;

	if (d->nreg == d->reg_cap) {
		size_t cap = d->reg_cap ? d->reg_cap * 2 : 64;
		struct cuda_reg *r = realloc(d->reg, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		d->reg = r;
		d->reg_cap = cap;
	}
	i = reg_upper(d, base);
	memmove(&d->reg[i + 1], &d->reg[i], (d->nreg - i) * sizeof(*d->reg));
	d->reg[i] = (struct cuda_reg){ base, len };
	d->nreg++;
	return 0;
}

/* Forget the range starting at @base; its length, or 0 if there was none.
 * Write side of reg_lock. */
static size_t reg_remove(struct cuda_dev *d, uintptr_t base)
{
	size_t i = reg_upper(d, base), len;

	if (!i || d->reg[i - 1].base != base)
		return 0;
	len = d->reg[i - 1].len;
	memmove(&d->reg[i - 1], &d->reg[i], (d->nreg - i) * sizeof(*d->reg));
	d->nreg--;
	return len;
}

/* --- the freer thread ----------------------------------------------------- */

/*
 * cudaFree waits for everything queued on the device, so a thread holding
 * a buffer lock must not call it: the store frees a device copy under the
 * buffer's lock, and every other buffer's copies would stall it. The freer
 * takes the memory off the store's hands and frees it here.
 */
static void *freer_main(void *arg)
{
	struct cuda_dev *d = arg;
	struct cuda_gone *g;
	bool entered = false;
	cudaError_t e;
	char why[256];

	pthread_mutex_lock(&d->free_lock);
	for (;;) {
		while (!d->gone_head && !d->free_stop)
			pthread_cond_wait(&d->free_wake, &d->free_lock);
		g = d->gone_head;
		if (!g)
			break;
		d->gone_head = g->next;
		if (!d->gone_head)
			d->gone_tail = &d->gone_head;
		d->freeing = true;
		pthread_mutex_unlock(&d->free_lock);

		/* A failed context took its memory with it. */
		e = cudaSuccess;
		if (!dev_failed(d)) {
			if (!entered) {
				e = cuda_enter(d);
				entered = e == cudaSuccess;
			}
			if (e == cudaSuccess)
				e = cudaFree(g->ptr);
		}
		__atomic_sub_fetch(&d->held, g->granted, __ATOMIC_RELAXED);
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			if (cuda_sticky(d, e))
				dev_fail(d, e, "cudaFree");
			else
				tfs_err("cuda: cudaFree of %zu bytes: %s",
					g->granted,
					cuda_describe(e, why, sizeof(why)));
		}
		free(g);

		pthread_mutex_lock(&d->free_lock);
		d->freeing = false;
		if (!d->gone_head)
			pthread_cond_broadcast(&d->free_idle);
	}
	pthread_mutex_unlock(&d->free_lock);
	return NULL;
}

/* Are frees queued or running? */
static bool frees_pending(struct cuda_dev *d)
{
	bool busy;

	pthread_mutex_lock(&d->free_lock);
	busy = d->gone_head || d->freeing;
	pthread_mutex_unlock(&d->free_lock);
	return busy;
}

/* Wait until every free queued so far has run. */
static void frees_wait(struct cuda_dev *d)
{
	pthread_mutex_lock(&d->free_lock);
	while (d->gone_head || d->freeing)
		pthread_cond_wait(&d->free_idle, &d->free_lock);
	pthread_mutex_unlock(&d->free_lock);
}

/* --- init and destroy ----------------------------------------------------- */

static void slots_destroy(struct cuda_dev *d)
{
	int i, j;

	for (i = 0; i < CUDA_SLOTS; i++) {
		struct cuda_slot *s = &d->slots[i];

		if (s->stream && !dev_failed(d))
			cudaStreamSynchronize(s->stream);
		for (j = 0; j < 2; j++) {
			if (s->done[j])
				cudaEventDestroy(s->done[j]);
			if (s->stage[j])
				cudaFreeHost(s->stage[j]);
		}
		if (s->fin)
			cudaEventDestroy(s->fin);
		if (s->stream)
			cudaStreamDestroy(s->stream);
	}
	(void)cudaGetLastError();
}

static int slots_create(struct cuda_dev *d, char *err, size_t errlen)
{
	const unsigned int evflags =
		cudaEventDisableTiming | cudaEventBlockingSync;
	cudaError_t e;
	int i, j;

	for (i = 0; i < CUDA_SLOTS; i++) {
		struct cuda_slot *s = &d->slots[i];

		e = cudaStreamCreateWithFlags(&s->stream,
					      cudaStreamNonBlocking);
		if (e != cudaSuccess)
			return init_fail(e, "cudaStreamCreateWithFlags", err,
					 errlen);
		e = cudaEventCreateWithFlags(&s->fin, evflags);
		if (e != cudaSuccess)
			return init_fail(e, "cudaEventCreateWithFlags", err,
					 errlen);
		for (j = 0; j < 2; j++) {
			e = cudaHostAlloc(&s->stage[j], CUDA_CHUNK,
					  cudaHostAllocDefault);
			if (e != cudaSuccess)
				return init_fail(e, "cudaHostAlloc", err,
						 errlen);
			e = cudaEventCreateWithFlags(&s->done[j], evflags);
			if (e != cudaSuccess)
				return init_fail(e, "cudaEventCreateWithFlags",
						 err, errlen);
		}
	}
	d->pool_free = (1u << CUDA_SLOTS) - 1;
	return 0;
}

/* Is an MPS control daemon running? Under MPS, exclusive-process mode is
 * the usual setting and clients share the GPU through the MPS server. */
static bool mps_running(void)
{
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char path[512];

	snprintf(path, sizeof(path), "%s/control",
		 dir && *dir ? dir : "/tmp/nvidia-mps");
	return access(path, F_OK) == 0;
}

/*
 * Asked before the context exists: in exclusive-process mode the daemon's
 * context would be the only one allowed on the GPU, so no GPU program could
 * run there, let alone map a file; in prohibited mode nobody may.
 */
static int check_compute_mode(int gpu, char *err, size_t errlen)
{
	cudaError_t e;
	int mode = 0;

	e = cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, gpu);
	if (e != cudaSuccess)
		return init_fail(e, "cudaDeviceGetAttribute", err, errlen);
	if (mode == cudaComputeModeProhibited) {
		snprintf(err, errlen,
			 "cuda: gpu %d is in prohibited compute mode: no process may use it (nvidia-smi -i %d -c DEFAULT)",
			 gpu, gpu);
		return -EACCES;
	}
	if (mode == cudaComputeModeExclusiveProcess) {
		if (mps_running()) {
			tfs_notice("cuda: gpu %d is in exclusive-process compute mode under MPS: GPU programs must be MPS clients too to map files",
				   gpu);
			return 0;
		}
		snprintf(err, errlen,
			 "cuda: gpu %d is in exclusive-process compute mode: tierfs would hold its only context, and no GPU program could run there or map a file (nvidia-smi -i %d -c DEFAULT, or start MPS)",
			 gpu, gpu);
		return -EBUSY;
	}
	return 0;
}

/* Whether NVIDIA's driver library is there for cudart to load. */
static bool driver_installed(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

	if (h)
		dlclose(h);
	return h != NULL;
}

static int cuda_count(const struct tfs_config *cfg)
{
	int count = 0;

	(void)cfg;
	return cudaGetDeviceCount(&count) == cudaSuccess ? count : -ENODEV;
}

static int cuda_init(struct tier_dev **out, const struct tfs_config *cfg,
		     char *err, size_t errlen)
{
	struct cudaDeviceProp prop;
	struct cuda_dev *d;
	size_t free_b, total_b;
	cudaError_t e;
	int count = 0, rc;

	*out = NULL;
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		rc = init_fail(e, "cudaGetDeviceCount", err, errlen);
		/* cudart says "insufficient driver" both for a driver older
		 * than itself and for none at all; only the first is news. */
		if ((e == cudaErrorInsufficientDriver ||
		     e == cudaErrorStubLibrary) && !driver_installed())
			return -ENOENT;
		return rc;
	}
	if (count == 0) {
		snprintf(err, errlen, "cuda: no CUDA device found");
		return -ENODEV;
	}
	if (cfg->device.gpu < 0 || cfg->device.gpu >= count) {
		snprintf(err, errlen,
			 "cuda: device.gpu %d: no such GPU (%d visible)",
			 cfg->device.gpu, count);
		return -ENXIO;
	}
	rc = check_compute_mode(cfg->device.gpu, err, errlen);
	if (rc)
		return rc;

	d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "cuda: out of memory");
		return -ENOMEM;
	}
	d->base.ops = &tier_dev_cuda_ops;
	d->gpu = cfg->device.gpu;
	pthread_mutex_init(&d->pool_lock, NULL);
	pthread_cond_init(&d->pool_cond, NULL);
	pthread_rwlock_init(&d->reg_lock, NULL);
	pthread_mutex_init(&d->free_lock, NULL);
	pthread_cond_init(&d->free_wake, NULL);
	pthread_cond_init(&d->free_idle, NULL);
	d->gone_tail = &d->gone_head;

	e = cudaSetDevice(d->gpu);
	if (e != cudaSuccess) {
		rc = init_fail(e, "cudaSetDevice", err, errlen);
		goto out_free;
	}
	e = cudaGetDeviceProperties(&prop, d->gpu);
	if (e != cudaSuccess) {
		rc = init_fail(e, "cudaGetDeviceProperties", err, errlen);
		goto out_free;
	}
	/* The first call that needs a context: a broken driver shows here. */
	e = cudaMemGetInfo(&free_b, &total_b);
	if (e != cudaSuccess) {
		rc = init_fail(e, "cudaMemGetInfo", err, errlen);
		goto out_free;
	}
	rc = slots_create(d, err, errlen);
	if (rc)
		goto out_slots;
	rc = -pthread_create(&d->freer, NULL, freer_main, d);
	if (rc) {
		snprintf(err, errlen, "cuda: cannot start the freer thread: %s",
			 strerror(-rc));
		goto out_slots;
	}
	d->freer_started = true;

	d->info.name = "cuda";
	/* Model names are short; cut a long one rather than fail. */
	snprintf(d->info.model, sizeof(d->info.model), "%.*s",
		 (int)sizeof(d->info.model) - 1, prop.name);
	d->info.capacity = total_b;
	d->info.free = free_b;
	d->info.granule = CUDA_GRANULE;
	_Static_assert(sizeof(prop.uuid.bytes) == sizeof(d->info.uuid),
		       "uuid size");
	memcpy(d->info.uuid, prop.uuid.bytes, sizeof(d->info.uuid));

	tfs_info("cuda: gpu %d \"%s\": %zu MiB total, %zu MiB free", d->gpu,
		 d->info.model, total_b >> 20, free_b >> 20);
	/* A MIG instance's name says so ("... MIG 1g.10gb"). */
	if (strstr(d->info.model, "MIG "))
		tfs_notice("cuda: gpu %d is a MIG instance: only GPU programs on this same instance can map files",
			   d->gpu);
	*out = &d->base;
	return 0;

out_slots:
	slots_destroy(d);
out_free:
	pthread_cond_destroy(&d->free_idle);
	pthread_cond_destroy(&d->free_wake);
	pthread_mutex_destroy(&d->free_lock);
	pthread_rwlock_destroy(&d->reg_lock);
	pthread_cond_destroy(&d->pool_cond);
	pthread_mutex_destroy(&d->pool_lock);
	free(d);
	return rc;
}

static void cuda_destroy(struct tier_dev *dev)
{
	struct cuda_dev *d = to_cdev(dev);
	unsigned long failed;
	size_t i;

	if (!d)
		return;
	/* Runs what is queued, then stops. */
	if (d->freer_started) {
		pthread_mutex_lock(&d->free_lock);
		d->free_stop = true;
		pthread_cond_signal(&d->free_wake);
		pthread_mutex_unlock(&d->free_lock);
		pthread_join(d->freer, NULL);
	}
	cuda_enter(d);
	slots_destroy(d);
	/*
	 * The store unregisters all it registered before it destroys the
	 * device; anything left is its leak, but the page locks are ours to
	 * drop.
	 */
	if (d->nreg)
		tfs_warn("cuda: %zu host ranges still registered at exit",
			 d->nreg);
	for (i = 0; i < d->nreg; i++)
		cudaHostUnregister((void *)d->reg[i].base);
	(void)cudaGetLastError();
	failed = __atomic_load_n(&d->reg_failed, __ATOMIC_RELAXED);
	if (failed > 1)
		tfs_info("cuda: %lu host ranges could not be page-locked and were staged",
			 failed);
	free(d->reg);
	pthread_cond_destroy(&d->free_idle);
	pthread_cond_destroy(&d->free_wake);
	pthread_mutex_destroy(&d->free_lock);
	pthread_rwlock_destroy(&d->reg_lock);
	pthread_cond_destroy(&d->pool_cond);
	pthread_mutex_destroy(&d->pool_lock);
	free(d);
}

static bool cuda_failed(struct tier_dev *dev)
{
	return dev_failed(to_cdev(dev));
}

/*
 * Page-lock host memory. Every range would fail for the same reason (the
 * system refusing to lock more memory, a driver without support), so only
 * the first failure is logged; destroy counts the rest. The store carries
 * on with the memory pageable, and copies of it are staged.
 */
static int cuda_host_register(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);
	cudaError_t e;
	char why[256];
	int rc;

	if (!ptr || !len)
		return -EINVAL;
	if (dev_failed(d))
		return -ENODEV;
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaHostRegister(ptr, len, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e))
			return dev_fail(d, e, "cudaHostRegister");
		rc = cuda_errno(e);
		if (__atomic_fetch_add(&d->reg_failed, 1, __ATOMIC_RELAXED) == 0)
			tfs_warn("cuda: cudaHostRegister of %zu bytes: %s; host copies stay pageable and are staged",
				 len, cuda_describe(e, why, sizeof(why)));
		return rc ? rc : -EIO;
	}
	pthread_rwlock_wrlock(&d->reg_lock);
	rc = reg_insert(d, (uintptr_t)ptr, len);
	pthread_rwlock_unlock(&d->reg_lock);
	if (rc) {
		cudaHostUnregister(ptr);
		(void)cudaGetLastError();
	}
	return rc;
}

/*
 * The store calls this for everything it unmaps, registered or not (a
 * failed register leaves memory pageable); only ours go to the runtime, so
 * never-registered memory leaves no error behind. The caller guarantees no
 * copy of it is in flight: it is unmapped next.
 */
static void cuda_host_unregister(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);
	cudaError_t e;
	char why[256];
	size_t had;

	pthread_rwlock_wrlock(&d->reg_lock);
	had = reg_remove(d, (uintptr_t)ptr);
	pthread_rwlock_unlock(&d->reg_lock);
	if (!had || dev_failed(d))
		return;
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaHostUnregister(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e))
			dev_fail(d, e, "cudaHostUnregister");
		else if (!__atomic_exchange_n(&d->unreg_warned, true,
					      __ATOMIC_RELAXED))
			tfs_warn("cuda: cudaHostUnregister of %zu bytes: %s",
				 had, cuda_describe(e, why, sizeof(why)));
	}
}

/* --- allocations ---------------------------------------------------------- */

static int cuda_alloc(struct tier_dev *dev, size_t len, struct tier_dmem **out)
{
	struct cuda_dev *d = to_cdev(dev);
	/* An empty buffer still gets a block: cudaMalloc(0) gives NULL,
	 * which cannot be exported. */
	size_t granted = len ? (len + CUDA_GRANULE - 1) & ~(CUDA_GRANULE - 1) :
			       CUDA_GRANULE;
	struct cuda_dmem *m;
	cudaError_t e;
	int rc;

	*out = NULL;
	if (granted < len)
		return -ENOMEM;
	if (dev_failed(d))
		return -ENODEV;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	__atomic_add_fetch(&d->held, granted, __ATOMIC_RELAXED);
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaMalloc(&m->ptr, granted);
	/* Memory the freer has not given back yet is ours to wait for. */
	if (e == cudaErrorMemoryAllocation && frees_pending(d)) {
		(void)cudaGetLastError();
		frees_wait(d);
		e = cudaMalloc(&m->ptr, granted);
	}
	if (e != cudaSuccess) {
		__atomic_sub_fetch(&d->held, granted, __ATOMIC_RELAXED);
		free(m);
		/*
		 * Out of memory is not sticky, but it stays the last error:
		 * clear it, or the next unrelated cudaGetLastError() would
		 * report it. The store evicts and retries on -ENOMEM.
		 */
		if (e == cudaErrorMemoryAllocation) {
			(void)cudaGetLastError();
			return -ENOMEM;
		}
		rc = copy_fail(d, e, "cudaMalloc", granted, 0);
		return dev_failed(d) ? -ENODEV : rc;
	}
	m->base.len = len;
	m->base.granted = granted;
	*out = &m->base;
	return 0;
}

static void cuda_free(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	struct cuda_gone *g;

	if (!m)
		return;
	if (dev_failed(d)) {
		free(m);
		return;
	}
	g = malloc(sizeof(*g));
	if (!g) {
		/* No room to queue it: free it here after all. */
		cuda_enter(d);
		if (cudaFree(m->ptr) != cudaSuccess)
			(void)cudaGetLastError();
		__atomic_sub_fetch(&d->held, m->base.granted,
				   __ATOMIC_RELAXED);
		free(m);
		return;
	}
	g->next = NULL;
	g->ptr = m->ptr;
	g->granted = m->base.granted;
	free(m);
	pthread_mutex_lock(&d->free_lock);
	*d->gone_tail = g;
	d->gone_tail = &g->next;
	pthread_cond_signal(&d->free_wake);
	pthread_mutex_unlock(&d->free_lock);
}

/* --- batched copies ------------------------------------------------------- */

/*
 * One batch of copies on one slot's stream. Direct pieces (host memory
 * page-locked by host_register) are queued as they come; staged pieces go
 * through the slot's two pinned buffers in turns, waiting only when a
 * buffer comes round again. The batch ends with one event and one wait.
 */
struct xfer {
	struct cuda_dev *d;
	struct cuda_slot *s;
	char *dev; /* the allocation's first byte */
	bool busy[2]; /* stage[i] has a queued copy not yet waited for */
	char *out[2]; /* d2h: where stage[i]'s bytes go once it is done */
	size_t out_len[2];
	int next; /* the staging buffer to use next */
	int rc;
};

/* Wait for staging buffer @b and, for a read, copy its bytes out. */
static int stage_drain(struct xfer *x, int b, uint64_t off)
{
	cudaError_t e;

	if (!x->busy[b])
		return 0;
	e = event_wait(x->s->done[b]);
	if (e != cudaSuccess)
		return copy_fail(x->d, e, "staged copy", CUDA_CHUNK, off);
	if (x->out[b])
		memcpy(x->out[b], x->s->stage[b], x->out_len[b]);
	x->busy[b] = false;
	x->out[b] = NULL;
	return 0;
}

/* Queue one piece of at most CUDA_CHUNK through staging. */
static int stage_one(struct xfer *x, void *host, size_t n, uint64_t off,
		     bool d2h)
{
	struct cuda_slot *s = x->s;
	int b = x->next, rc;
	cudaError_t e;

	x->next ^= 1;
	rc = stage_drain(x, b, off);
	if (rc)
		return rc;
	if (d2h) {
		e = cudaMemcpyAsync(s->stage[b], x->dev + off, n,
				    cudaMemcpyDeviceToHost, s->stream);
		x->out[b] = host;
		x->out_len[b] = n;
	} else {
		memcpy(s->stage[b], host, n);
		e = cudaMemcpyAsync(x->dev + off, s->stage[b], n,
				    cudaMemcpyHostToDevice, s->stream);
	}
	if (e == cudaSuccess)
		e = cudaEventRecord(s->done[b], s->stream);
	if (e != cudaSuccess) {
		x->out[b] = NULL;
		return copy_fail(x->d, e, d2h ? "cudaMemcpyAsync d2h" :
						"cudaMemcpyAsync h2d",
				 n, off);
	}
	x->busy[b] = true;
	return 0;
}

/* Queue one segment. */
static int xfer_seg(struct xfer *x, const struct tier_dev_seg *g, bool d2h)
{
	struct cuda_slot *s = x->s;
	cudaError_t e;
	size_t at;
	int rc;

	if (!g->len)
		return 0;
	if (!d2h && !g->host) {
		/* A slot's stream, not the legacy default stream, which
		 * would serialise with every other copy on the device. */
		e = cudaMemsetAsync(x->dev + g->off, 0, g->len, s->stream);
		return e == cudaSuccess ? 0 :
					  copy_fail(x->d, e, "cudaMemsetAsync",
						    g->len, g->off);
	}
	if (host_registered(x->d, g->host, g->len)) {
		/* One DMA of the whole range, as raw cudaMemcpy does. */
		e = d2h ? cudaMemcpyAsync(g->host, x->dev + g->off, g->len,
					  cudaMemcpyDeviceToHost, s->stream) :
			  cudaMemcpyAsync(x->dev + g->off, g->host, g->len,
					  cudaMemcpyHostToDevice, s->stream);
		return e == cudaSuccess ? 0 :
					  copy_fail(x->d, e,
						    d2h ? "cudaMemcpyAsync d2h" :
							  "cudaMemcpyAsync h2d",
						    g->len, g->off);
	}
	for (at = 0; at < g->len; at += CUDA_CHUNK) {
		size_t n = g->len - at < CUDA_CHUNK ? g->len - at : CUDA_CHUNK;

		rc = stage_one(x, (char *)g->host + at, n, g->off + at, d2h);
		if (rc)
			return rc;
	}
	return 0;
}

static int cuda_xfer(struct tier_dev *dev, struct tier_dmem *dm,
		     const struct tier_dev_seg *seg, unsigned int n, bool d2h)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	struct xfer x = { .d = d, .dev = m->ptr };
	uint64_t first = n ? seg[0].off : 0;
	size_t total = 0;
	cudaError_t e;
	unsigned int i;
	int rc = 0;

	for (i = 0; i < n; i++) {
		if (!in_range(m, seg[i].len, seg[i].off))
			return -EINVAL;
		total += seg[i].len;
	}
	if (dev_failed(d))
		return -EIO;
	e = cuda_enter(d);
	if (e != cudaSuccess)
		return copy_fail(d, e, "cudaSetDevice", 0, 0);
	x.s = slot_get(d);
	for (i = 0; i < n && !rc; i++)
		rc = xfer_seg(&x, &seg[i], d2h);
	if (!rc) {
		/* The stream runs in order: its last event covers it all. */
		e = cudaEventRecord(x.s->fin, x.s->stream);
		if (e == cudaSuccess)
			e = event_wait(x.s->fin);
		if (e != cudaSuccess)
			rc = copy_fail(d, e, d2h ? "d2h copy" : "h2d copy",
				       total, first);
	}
	if (!rc) {
		for (i = 0; i < 2; i++)
			if (x.out[i])
				memcpy(x.out[i], x.s->stage[i], x.out_len[i]);
	} else if (!dev_failed(d)) {
		/* A DMA may still target staging: drain before reuse. */
		cudaStreamSynchronize(x.s->stream);
		(void)cudaGetLastError();
	}
	slot_put(d, x.s);
	return rc;
}

static int cuda_readv(struct tier_dev *dev, struct tier_dmem *m,
		      const struct tier_dev_seg *seg, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		if (seg[i].len && !seg[i].host)
			return -EINVAL;
	return cuda_xfer(dev, m, seg, n, true);
}

static int cuda_writev(struct tier_dev *dev, struct tier_dmem *m,
		       const struct tier_dev_seg *seg, unsigned int n)
{
	return cuda_xfer(dev, m, seg, n, false);
}

static int cuda_read(struct tier_dev *dev, struct tier_dmem *m, void *dst,
		     size_t len, uint64_t off)
{
	struct tier_dev_seg g = { .host = dst, .len = len, .off = off };

	return len ? cuda_readv(dev, m, &g, 1) :
		     (in_range(to_cmem(m), 0, off) ? 0 : -EINVAL);
}

static int cuda_write(struct tier_dev *dev, struct tier_dmem *m,
		      const void *src, size_t len, uint64_t off)
{
	struct tier_dev_seg g = { .host = (void *)src, .len = len, .off = off };

	if (!len)
		return in_range(to_cmem(m), 0, off) ? 0 : -EINVAL;
	if (!src)
		return -EINVAL;
	return cuda_writev(dev, m, &g, 1);
}

static int cuda_zero(struct tier_dev *dev, struct tier_dmem *m, size_t len,
		     uint64_t off)
{
	struct tier_dev_seg g = { .host = NULL, .len = len, .off = off };

	return len ? cuda_writev(dev, m, &g, 1) :
		     (in_range(to_cmem(m), 0, off) ? 0 : -EINVAL);
}

/* --- export --------------------------------------------------------------- */

/*
 * An importer maps the whole allocation, and cudaMalloc'd memory holds
 * whatever was there before: the bytes past len could be another file's,
 * freed earlier. Cleared once, at the first export; the store never writes
 * past len.
 */
static int zero_tail(struct cuda_dev *d, struct cuda_dmem *m)
{
	size_t n = m->base.granted - m->base.len;
	struct cuda_slot *s;
	cudaError_t e;
	int rc = 0;

	if (m->tail_zeroed || !n)
		return 0;
	s = slot_get(d);
	e = cudaMemsetAsync((char *)m->ptr + m->base.len, 0, n, s->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(s->fin, s->stream);
	if (e == cudaSuccess)
		e = event_wait(s->fin);
	if (e != cudaSuccess) {
		rc = copy_fail(d, e, "cudaMemsetAsync", n, m->base.len);
		if (!dev_failed(d)) {
			cudaStreamSynchronize(s->stream);
			(void)cudaGetLastError();
		}
	}
	slot_put(d, s);
	if (!rc)
		m->tail_zeroed = true;
	return rc;
}

static int cuda_export(struct tier_dev *dev, struct tier_dmem *dm, uid_t uid,
		       gid_t gid, struct tfs_ioc_export *out)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	cudaIpcMemHandle_t h;
	cudaError_t e;
	char why[256];

	_Static_assert(sizeof(h) == sizeof(out->handle), "IPC handle size");
	if (dev_failed(d))
		return -ENODEV;
	/*
	 * @uid is not checked here: CUDA IPC has no owner. The handle goes
	 * only to whoever passed the file's permission checks. It names the
	 * allocation, not the lease: any process that holds it can open it
	 * for as long as the allocation lives, and an importer's mapping
	 * lasts until it closes it or exits, lease or no lease.
	 */
	e = cuda_enter(d);
	if (e == cudaSuccess) {
		int rc = zero_tail(d, m);

		if (rc)
			return dev_failed(d) ? -ENODEV : rc;
		e = cudaIpcGetMemHandle(&h, m->ptr);
	}
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e)) {
			dev_fail(d, e, "cudaIpcGetMemHandle");
			return -ENODEV;
		}
		tfs_err("cuda: cudaIpcGetMemHandle of %zu bytes: %s",
			m->base.len, cuda_describe(e, why, sizeof(why)));
		return cuda_errno(e) == -EOPNOTSUPP ? -EOPNOTSUPP : -EIO;
	}
	out->handle_type = TFS_HANDLE_CUDA_IPC;
	memcpy(out->handle, &h, sizeof(out->handle));
	/* Every buffer is its own 2 MiB-rounded cudaMalloc, whose handle
	 * maps its start and nothing of another buffer. */
	out->offset = 0;
	memcpy(out->uuid, d->info.uuid, sizeof(out->uuid));
	return 0;
}

/*
 * Nothing to undo: an IPC handle is a name for the allocation, not a
 * reference to it, and cannot be revoked. Importers' mappings end with
 * their cudaIpcCloseMemHandle (libtierfs does it before it releases the
 * lease) or their exit.
 */
static void cuda_unexport(struct tier_dev *dev, struct tier_dmem *m)
{
}

/*
 * What the reserve watcher polls: cudaMemGetInfo counts every process's
 * allocations, ours included, so held (what we cudaMalloc'd and have not
 * cudaFree'd yet) tells them apart. A failed device reports nothing.
 */
static int cuda_meminfo(struct tier_dev *dev, uint64_t *free_b,
			uint64_t *total, uint64_t *held)
{
	struct cuda_dev *d = to_cdev(dev);
	uint64_t before, after;
	size_t f = 0, t = 0;
	cudaError_t e;

	if (dev_failed(d))
		return -ENODEV;
	/*
	 * held never reads below what the device gave us (see its comment),
	 * and the larger of a read before and one after the driver's count
	 * covers an allocation or a free running meanwhile: other processes'
	 * use may be underestimated for one poll, never overestimated, so
	 * our own traffic never looks like pressure and makes us spill.
	 */
	before = __atomic_load_n(&d->held, __ATOMIC_RELAXED);
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&f, &t);
	after = __atomic_load_n(&d->held, __ATOMIC_RELAXED);
	*held = before > after ? before : after;
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e))
			return dev_fail(d, e, "cudaMemGetInfo");
		return cuda_errno(e) ? cuda_errno(e) : -EIO;
	}
	*free_b = f;
	*total = t;
	return 0;
}

static void cuda_drain(struct tier_dev *dev)
{
	frees_wait(to_cdev(dev));
}

/* free is what cudaMemGetInfo said at init, before the store allocated
 * anything: the default device limit is a share of it, and asking again
 * later would count the store's own buffers as used by others. */
static void cuda_info(struct tier_dev *dev, struct tier_dev_info *out)
{
	*out = to_cdev(dev)->info;
}

const struct tier_dev_ops tier_dev_cuda_ops = {
	.name = "cuda",
	.init = cuda_init,
	.count = cuda_count,
	.destroy = cuda_destroy,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.read = cuda_read,
	.write = cuda_write,
	.zero = cuda_zero,
	.export = cuda_export,
	.unexport = cuda_unexport,
	.info = cuda_info,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.readv = cuda_readv,
	.writev = cuda_writev,
	.failed = cuda_failed,
	.meminfo = cuda_meminfo,
	.drain = cuda_drain,
};
