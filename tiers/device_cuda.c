// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cuda device backend: buffers are cudaMalloc'd, copies go through a
 * small pool of pinned staging buffers on non-blocking streams, and exports
 * are CUDA IPC handles. Host memory the store has page-locked through
 * host_register (its pool chunks, host.pinned) is copied directly, without
 * staging.
 *
 * The daemon links the static cudart, so on a machine without a driver every
 * call answers cudaErrorInsufficientDriver and init fails with -ENODEV and
 * that error's name, instead of the daemon failing to start.
 *
 * Concurrency: the store calls every slot from several threads at once. Each
 * copy takes one staging slot (two pinned buffers, one stream, two events)
 * from the pool for its whole duration, so no two calls ever share a stream
 * or a staging buffer; the pool's mutex is held only to take or return a
 * slot, never across a copy. Direct copies take a slot too, for its stream
 * and events, which caps copies in flight at CUDA_SLOTS either way.
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
 * interrupt, then a futex) on every wait, which the direct path does once per
 * 1 MiB chunk: some 20-40 us of DMA at 25-50 GB/s, so a wakeup of 5-20 us
 * would cost a good part of the 0.8x of raw cudaMemcpy that issue 7 asks.
 *
 * So neither, per wait: poll cudaEventQuery, yielding the CPU between polls,
 * for about the length of one staging chunk's DMA, then block in
 * cudaEventSynchronize, which sleeps because the slot's events are created
 * with cudaEventBlockingSync. The device flag stays as it is: it is process
 * wide, so every other wait (cudaStreamSynchronize on error paths, init)
 * would sleep too, and the event flag gives the sleep only where we want it.
 */
#define CUDA_SPIN_NS (100 * 1000)

/* Open-addressed table of page-locked host ranges, keyed by start address;
 * at most half full. */
#define CUDA_REG_MIN 64

struct cuda_slot {
	void *stage[2]; /* pinned, CUDA_CHUNK bytes each */
	/* recorded after the copy that uses stage[i]; blocking-sync events */
	cudaEvent_t done[2];
	cudaStream_t stream; /* non-blocking: never syncs with stream 0 */
};

struct cuda_reg {
	uintptr_t base;
	size_t len;
};

struct cuda_dev {
	struct tier_dev base;
	int gpu;
	struct tier_dev_info info;

	/*
	 * Lock order: pool_lock is a leaf; nothing else is taken while it is
	 * held and it is never held across a CUDA call.
	 */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	unsigned int pool_free; /* bit i: slots[i] is free; pool_lock */
	struct cuda_slot slots[CUDA_SLOTS]; /* set up at init, then fixed */

	/*
	 * Host ranges page-locked by host_register. A leaf like pool_lock and
	 * never held with it: read/write look up under the read side, then
	 * drop it before taking a slot. Entries are added after
	 * cudaHostRegister succeeds and removed before cudaHostUnregister, so
	 * a range in the table is always page-locked.
	 */
	pthread_rwlock_t reg_lock;
	struct cuda_reg *reg; /* reg_cap entries, base 0 = empty; reg_lock */
	size_t nreg, reg_cap; /* reg_lock */
	unsigned long reg_failed; /* registers refused; atomic */
	bool unreg_warned; /* atomic */
};

struct cuda_dmem {
	struct tier_dmem base;
	void *ptr; /* cudaMalloc'd; offset 0 of the IPC handle */
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
 * Fail init: one line "cuda: CALL: what (name, number)" in @err, and the
 * matching errno. The runtime's sticky last error is cleared so a later
 * backend (auto falls back to none) starts clean.
 */
static int init_fail(cudaError_t e, const char *call, char *err, size_t errlen)
{
	char why[256];

	(void)cudaGetLastError();
	snprintf(err, errlen, "cuda: %s: %s", call,
		 cuda_describe(e, why, sizeof(why)));
	return cuda_errno(e);
}

/* Log a failed copy and turn it into -EIO (or -ENODEV when the device went
 * away under us). */
static int copy_fail(cudaError_t e, const char *what, size_t len, uint64_t off)
{
	char why[256];
	int rc = cuda_errno(e);

	(void)cudaGetLastError();
	tfs_err("cuda: %s of %zu bytes at %llu: %s", what, len,
		(unsigned long long)off, cuda_describe(e, why, sizeof(why)));
	return rc == -ENODEV ? rc : -EIO;
}

/* Bytes of the chunk at @at of a @len-byte copy. */
static size_t chunk_len(size_t len, size_t at)
{
	return len - at < CUDA_CHUNK ? len - at : CUDA_CHUNK;
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

/* Pool chunks come from mmap, so their low 12 bits carry nothing. */
static size_t reg_hash(uintptr_t base, size_t cap)
{
	return (size_t)(((uint64_t)base >> 12) * 0x9e3779b97f4a7c15ull >>
			32) & (cap - 1);
}

/* The slot holding @base, or an empty one where it would go. reg_lock. */
static struct cuda_reg *reg_slot(struct cuda_reg *tab, size_t cap,
				 uintptr_t base)
{
	size_t i = reg_hash(base, cap);

	while (tab[i].base && tab[i].base != base)
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* Grow to twice the size when half full. Write side of reg_lock. */
static int reg_reserve(struct cuda_dev *d)
{
	size_t cap, i;
	struct cuda_reg *tab;

	if (d->reg_cap && (d->nreg + 1) * 2 <= d->reg_cap)
		return 0;
	cap = d->reg_cap ? d->reg_cap * 2 : CUDA_REG_MIN;
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (i = 0; i < d->reg_cap; i++)
		if (d->reg[i].base)
			*reg_slot(tab, cap, d->reg[i].base) = d->reg[i];
	free(d->reg);
	d->reg = tab;
	d->reg_cap = cap;
	return 0;
}

/*
 * Forget @base; its length, or 0 if it was not there. Linear probing: the
 * entries after the hole that hash at or before it move back into it, so
 * that lookups never stop early. Write side of reg_lock.
 */
static size_t reg_remove(struct cuda_dev *d, uintptr_t base)
{
	size_t mask = d->reg_cap - 1, i, j, len;

	if (!d->reg_cap)
		return 0;
	i = (size_t)(reg_slot(d->reg, d->reg_cap, base) - d->reg);
	if (!d->reg[i].base)
		return 0;
	len = d->reg[i].len;
	for (j = (i + 1) & mask; d->reg[j].base; j = (j + 1) & mask) {
		size_t h = reg_hash(d->reg[j].base, d->reg_cap);

		/* Stays if its home lies cyclically in (i, j]. */
		if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
			continue;
		d->reg[i] = d->reg[j];
		i = j;
	}
	d->reg[i].base = 0;
	d->nreg--;
	return len;
}

/*
 * Is [p, p + len) page-locked by host_register? Only a range that starts at
 * a registered start is found: the store copies whole pool chunks from their
 * first byte, and anything else (a FUSE buffer, a small file's malloc'd
 * chunk, the middle of a chunk) is staged, which is always correct.
 */
static bool host_registered(struct cuda_dev *d, const void *p, size_t len)
{
	uintptr_t base = (uintptr_t)p;
	bool ok = false;

	pthread_rwlock_rdlock(&d->reg_lock);
	if (d->nreg && base) {
		struct cuda_reg *r = reg_slot(d->reg, d->reg_cap, base);

		ok = r->base == base && len <= r->len;
	}
	pthread_rwlock_unlock(&d->reg_lock);
	return ok;
}

static void slots_destroy(struct cuda_dev *d)
{
	int i, j;

	for (i = 0; i < CUDA_SLOTS; i++) {
		struct cuda_slot *s = &d->slots[i];

		if (s->stream)
			cudaStreamSynchronize(s->stream);
		for (j = 0; j < 2; j++) {
			if (s->done[j])
				cudaEventDestroy(s->done[j]);
			if (s->stage[j])
				cudaFreeHost(s->stage[j]);
		}
		if (s->stream)
			cudaStreamDestroy(s->stream);
	}
	(void)cudaGetLastError();
}

static int slots_create(struct cuda_dev *d, char *err, size_t errlen)
{
	cudaError_t e;
	int i, j;

	for (i = 0; i < CUDA_SLOTS; i++) {
		struct cuda_slot *s = &d->slots[i];

		e = cudaStreamCreateWithFlags(&s->stream,
					      cudaStreamNonBlocking);
		if (e != cudaSuccess)
			return init_fail(e, "cudaStreamCreateWithFlags", err,
					 errlen);
		for (j = 0; j < 2; j++) {
			e = cudaHostAlloc(&s->stage[j], CUDA_CHUNK,
					  cudaHostAllocDefault);
			if (e != cudaSuccess)
				return init_fail(e, "cudaHostAlloc", err,
						 errlen);
			e = cudaEventCreateWithFlags(
				&s->done[j],
				cudaEventDisableTiming | cudaEventBlockingSync);
			if (e != cudaSuccess)
				return init_fail(e, "cudaEventCreateWithFlags",
						 err, errlen);
		}
	}
	d->pool_free = (1u << CUDA_SLOTS) - 1;
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

	d->info.name = "cuda";
	/* Model names are short; cut a long one rather than fail. */
	snprintf(d->info.model, sizeof(d->info.model), "%.*s",
		 (int)sizeof(d->info.model) - 1, prop.name);
	d->info.capacity = total_b;
	d->info.free = free_b;
	_Static_assert(sizeof(prop.uuid.bytes) == sizeof(d->info.uuid),
		       "uuid size");
	memcpy(d->info.uuid, prop.uuid.bytes, sizeof(d->info.uuid));

	tfs_info("cuda: gpu %d \"%s\": %zu MiB total, %zu MiB free", d->gpu,
		 d->info.model, total_b >> 20, free_b >> 20);
	*out = &d->base;
	return 0;

out_slots:
	slots_destroy(d);
out_free:
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
	cuda_enter(d);
	slots_destroy(d);
	/*
	 * The store unregisters every chunk before it destroys the device;
	 * anything left is its leak, but the page locks are ours to drop.
	 */
	if (d->nreg)
		tfs_warn("cuda: %zu host ranges still registered at exit",
			 d->nreg);
	for (i = 0; i < d->reg_cap; i++)
		if (d->reg[i].base)
			cudaHostUnregister((void *)d->reg[i].base);
	(void)cudaGetLastError();
	failed = __atomic_load_n(&d->reg_failed, __ATOMIC_RELAXED);
	if (failed > 1)
		tfs_info("cuda: %lu host chunks could not be page-locked and were staged",
			 failed);
	free(d->reg);
	pthread_rwlock_destroy(&d->reg_lock);
	pthread_cond_destroy(&d->pool_cond);
	pthread_mutex_destroy(&d->pool_lock);
	free(d);
}

/*
 * Page-lock a pool chunk. Every chunk would fail for the same reason (the
 * system refusing to lock more memory, a driver without support), so only
 * the first failure is logged; destroy counts the rest. The store carries
 * on with the chunk pageable, and copies of it are staged.
 */
static int cuda_host_register(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);
	cudaError_t e;
	char why[256];
	int rc;

	if (!ptr || !len)
		return -EINVAL;
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaHostRegister(ptr, len, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		rc = cuda_errno(e);
		if (__atomic_fetch_add(&d->reg_failed, 1, __ATOMIC_RELAXED) == 0)
			tfs_warn("cuda: cudaHostRegister of %zu bytes: %s; host copies stay pageable and are staged",
				 len, cuda_describe(e, why, sizeof(why)));
		return rc ? rc : -EIO;
	}
	pthread_rwlock_wrlock(&d->reg_lock);
	rc = reg_reserve(d);
	if (!rc) {
		struct cuda_reg *r = reg_slot(d->reg, d->reg_cap,
					      (uintptr_t)ptr);

		/* cudaHostRegister refuses a range twice, so @ptr is new. */
		r->base = (uintptr_t)ptr;
		r->len = len;
		d->nreg++;
	}
	pthread_rwlock_unlock(&d->reg_lock);
	if (rc) {
		cudaHostUnregister(ptr);
		(void)cudaGetLastError();
	}
	return rc;
}

/*
 * The store calls this for every chunk it unmaps, registered or not (a
 * failed register leaves it pageable); only ours go to the runtime, so a
 * never-registered chunk leaves no error behind. The caller guarantees no
 * copy of the chunk is in flight: it is unmapped next.
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
	if (!had)
		return;
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaHostUnregister(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (!__atomic_exchange_n(&d->unreg_warned, true, __ATOMIC_RELAXED))
			tfs_warn("cuda: cudaHostUnregister of %zu bytes: %s",
				 had, cuda_describe(e, why, sizeof(why)));
	}
}

static int cuda_alloc(struct tier_dev *dev, size_t len, struct tier_dmem **out)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m;
	cudaError_t e;
	char why[256];

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	e = cuda_enter(d);
	/*
	 * cudaMalloc(0) gives NULL, which cannot be exported; an empty
	 * buffer still gets a real (smallest) allocation.
	 */
	if (e == cudaSuccess)
		e = cudaMalloc(&m->ptr, len ? len : 1);
	if (e != cudaSuccess) {
		free(m);
		/*
		 * Out of memory is not sticky, but it stays the last error:
		 * clear it, or the next unrelated cudaGetLastError() would
		 * report it. The store evicts and retries on -ENOMEM.
		 */
		(void)cudaGetLastError();
		if (e == cudaErrorMemoryAllocation)
			return -ENOMEM;
		tfs_err("cuda: cudaMalloc of %zu bytes: %s", len,
			cuda_describe(e, why, sizeof(why)));
		return cuda_errno(e) == -ENODEV ? -ENODEV : -EIO;
	}
	m->base.len = len;
	*out = &m->base;
	return 0;
}

static void cuda_free(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct cuda_dmem *m = to_cmem(dm);
	cudaError_t e;
	char why[256];

	if (!m)
		return;
	cuda_enter(to_cdev(dev));
	e = cudaFree(m->ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		tfs_err("cuda: cudaFree of %zu bytes: %s", m->base.len,
			cuda_describe(e, why, sizeof(why)));
	}
	free(m);
}

/*
 * One copy between device memory and page-locked host memory, as a single
 * cudaMemcpyAsync: with no staging there is no host work to overlap, and one
 * DMA of the whole range is what raw cudaMemcpy does. A slot only for its
 * stream and event.
 */
static int copy_direct(struct cuda_dev *d, void *dst, const void *src,
		       size_t len, uint64_t off, enum cudaMemcpyKind kind)
{
	const char *what = kind == cudaMemcpyDeviceToHost ? "d2h" : "h2d";
	struct cuda_slot *s;
	cudaError_t e;
	char call[48];
	int rc = 0;

	s = slot_get(d);
	e = cudaMemcpyAsync(dst, src, len, kind, s->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(s->done[0], s->stream);
	if (e != cudaSuccess) {
		snprintf(call, sizeof(call), "cudaMemcpyAsync %s", what);
		rc = copy_fail(e, call, len, off);
		/* The copy may be queued even though the record failed. */
		cudaStreamSynchronize(s->stream);
		(void)cudaGetLastError();
	} else {
		e = event_wait(s->done[0]);
		if (e != cudaSuccess) {
			snprintf(call, sizeof(call), "%s copy", what);
			rc = copy_fail(e, call, len, off);
		}
	}
	slot_put(d, s);
	return rc;
}

/*
 * Device -> host, double-buffered: the DMA of chunk i+1 into one staging
 * buffer runs while the CPU copies chunk i out of the other into @dst,
 * which is pageable and so cannot be a DMA target itself.
 */
static int cuda_read(struct tier_dev *dev, struct tier_dmem *dm, void *dst,
		     size_t len, uint64_t off)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	const char *src = (const char *)m->ptr + off;
	char *out = dst;
	size_t nchunks, i;
	struct cuda_slot *s;
	cudaError_t e;
	int rc = 0;

	if (!in_range(m, len, off))
		return -EINVAL;
	if (!len)
		return 0;
	e = cuda_enter(d);
	if (e != cudaSuccess)
		return copy_fail(e, "cudaSetDevice", len, off);
	if (host_registered(d, dst, len))
		return copy_direct(d, dst, src, len, off,
				   cudaMemcpyDeviceToHost);

	nchunks = (len + CUDA_CHUNK - 1) / CUDA_CHUNK;
	s = slot_get(d);
	for (i = 0; i < nchunks + 1; i++) {
		/* Queue chunk i, then drain chunk i - 1. */
		if (i < nchunks) {
			size_t at = i * CUDA_CHUNK;
			size_t n = chunk_len(len, at);
			int b = i & 1;

			e = cudaMemcpyAsync(s->stage[b], src + at, n,
					    cudaMemcpyDeviceToHost, s->stream);
			if (e == cudaSuccess)
				e = cudaEventRecord(s->done[b], s->stream);
			if (e != cudaSuccess) {
				rc = copy_fail(e, "cudaMemcpyAsync d2h", n,
					       off + at);
				break;
			}
		}
		if (i > 0) {
			size_t at = (i - 1) * CUDA_CHUNK;
			size_t n = chunk_len(len, at);
			int b = (i - 1) & 1;

			e = event_wait(s->done[b]);
			if (e != cudaSuccess) {
				rc = copy_fail(e, "d2h copy", n, off + at);
				break;
			}
			memcpy(out + at, s->stage[b], n);
		}
	}
	/* On error a DMA may still target staging: drain before reuse. */
	if (rc) {
		cudaStreamSynchronize(s->stream);
		(void)cudaGetLastError();
	}
	slot_put(d, s);
	return rc;
}

/*
 * Host -> device, double-buffered the other way round: the CPU fills one
 * staging buffer with chunk i+1 while the DMA of chunk i reads the other.
 */
static int cuda_write(struct tier_dev *dev, struct tier_dmem *dm,
		      const void *src, size_t len, uint64_t off)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	char *dstp = (char *)m->ptr + off;
	const char *in = src;
	struct cuda_slot *s;
	cudaError_t e;
	size_t at;
	int rc = 0;
	int i;

	if (!in_range(m, len, off))
		return -EINVAL;
	if (!len)
		return 0;
	e = cuda_enter(d);
	if (e != cudaSuccess)
		return copy_fail(e, "cudaSetDevice", len, off);
	if (host_registered(d, src, len))
		return copy_direct(d, dstp, src, len, off,
				   cudaMemcpyHostToDevice);

	s = slot_get(d);
	for (at = 0, i = 0; at < len; at += CUDA_CHUNK, i ^= 1) {
		size_t n = chunk_len(len, at);

		/* Wait for the DMA that last read this staging buffer:
		 * chunk k - 2's. */
		if (at >= 2 * (size_t)CUDA_CHUNK) {
			e = event_wait(s->done[i]);
			if (e != cudaSuccess) {
				rc = copy_fail(e, "h2d copy", CUDA_CHUNK,
					       off + at - 2 * CUDA_CHUNK);
				break;
			}
		}
		memcpy(s->stage[i], in + at, n);
		e = cudaMemcpyAsync(dstp + at, s->stage[i], n,
				    cudaMemcpyHostToDevice, s->stream);
		if (e == cudaSuccess)
			e = cudaEventRecord(s->done[i], s->stream);
		if (e != cudaSuccess) {
			rc = copy_fail(e, "cudaMemcpyAsync h2d", n, off + at);
			break;
		}
	}
	/* The last chunk's event is the stream's last op: waiting for it is
	 * a stream sync that can sleep. */
	if (!rc) {
		e = event_wait(s->done[i ^ 1]);
		if (e != cudaSuccess)
			rc = copy_fail(e, "h2d copy", len, off);
	} else {
		cudaStreamSynchronize(s->stream);
		(void)cudaGetLastError();
	}
	slot_put(d, s);
	return rc;
}

static int cuda_zero(struct tier_dev *dev, struct tier_dmem *dm, size_t len,
		     uint64_t off)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	struct cuda_slot *s;
	cudaError_t e;
	int rc = 0;

	if (!in_range(m, len, off))
		return -EINVAL;
	if (!len)
		return 0;
	e = cuda_enter(d);
	if (e != cudaSuccess)
		return copy_fail(e, "cudaSetDevice", len, off);
	/* A slot only for its stream: the legacy default stream would
	 * serialise with every other copy on the device. */
	s = slot_get(d);
	e = cudaMemsetAsync((char *)m->ptr + off, 0, len, s->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(s->done[0], s->stream);
	if (e != cudaSuccess) {
		rc = copy_fail(e, "cudaMemsetAsync", len, off);
		cudaStreamSynchronize(s->stream);
		(void)cudaGetLastError();
	} else {
		e = event_wait(s->done[0]);
		if (e != cudaSuccess)
			rc = copy_fail(e, "cudaMemsetAsync", len, off);
	}
	slot_put(d, s);
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
	/*
	 * @uid is not checked here: CUDA IPC has no owner. The handle is only
	 * given to whoever passed the file's permission checks, and a handle
	 * is useless without the exporting process alive and the lease held.
	 */
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaIpcGetMemHandle(&h, m->ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		tfs_err("cuda: cudaIpcGetMemHandle of %zu bytes: %s",
			m->base.len, cuda_describe(e, why, sizeof(why)));
		return cuda_errno(e) == -EOPNOTSUPP ? -EOPNOTSUPP : -EIO;
	}
	out->handle_type = TFS_HANDLE_CUDA_IPC;
	memcpy(out->handle, &h, sizeof(out->handle));
	/* Every buffer is its own cudaMalloc, whose handle maps its start. */
	out->offset = 0;
	memcpy(out->uuid, d->info.uuid, sizeof(out->uuid));
	return 0;
}

/*
 * Nothing to undo: an IPC handle is a name for the allocation, not a
 * reference to it. Importers' mappings end with their cudaIpcCloseMemHandle
 * (libtierfs does it before releasing the lease); the memory itself lives
 * until the store frees it, which it does only after the last lease.
 */
static void cuda_unexport(struct tier_dev *dev, struct tier_dmem *m)
{
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
};
