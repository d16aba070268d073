/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the files of the cuda backend share: device_cuda.c (errors, init,
 * the freer thread, allocations, exports) and device_cuda_copy.c (the slot
 * pool, page-locked host ranges and batched copies). Nothing else includes
 * it. The design and its reasons are at the top of device_cuda.c.
 */
#ifndef TFS_TIERS_DEVICE_CUDA_I_H
#define TFS_TIERS_DEVICE_CUDA_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

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

struct cuda_slot {
	void *stage[2]; /* pinned, CUDA_CHUNK bytes each */
	/* recorded after the copy that uses stage[i]; blocking-sync events */
	cudaEvent_t done[2];
	cudaEvent_t fin; /* recorded at the end of a batch */
	cudaStream_t stream; /* non-blocking: never syncs with stream 0 */
};

/* A host range page-locked by host_register, for every GPU of the
 * process (cudaHostRegisterPortable); @owner registered it. */
struct cuda_reg {
	uintptr_t base;
	size_t len;
	const struct cuda_dev *owner;
};

/* An allocation waiting for the freer thread. */
struct cuda_gone {
	struct cuda_gone *next;
	void *ptr;
	size_t granted;
	/* Parked: the process that may still map it through IPC, and a
	 * pidfd of it (-1 where the kernel has none: kill() then tells). */
	pid_t pid;
	int pidfd;
};

struct cuda_dev {
	struct tier_dev base;
	int gpu;
	struct tier_dev_info info;
	/* Set once by the first sticky error, never cleared; atomic. */
	bool failed;

	/*
	 * Lock order: pool_lock, the range table's lock and free_lock are
	 * leaves; none is held with another or across a CUDA call (the freer
	 * drops free_lock around cudaFree).
	 */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	unsigned int pool_free; /* bit i: slots[i] is free; pool_lock */
	struct cuda_slot slots[CUDA_SLOTS]; /* set up at init, then fixed */

	/* Host ranges page-locked by host_register are in one table for the
	 * process (device_cuda_copy.c), since any GPU's copies may use them. */
	unsigned long reg_failed; /* registers refused; atomic */
	bool unreg_warned; /* atomic */

	/* The freer thread and its queue. */
	pthread_t freer;
	bool freer_started;
	pthread_mutex_t free_lock;
	pthread_cond_t free_wake; /* work queued, or stop */
	pthread_cond_t free_idle; /* the queue ran empty */
	struct cuda_gone *gone_head, **gone_tail; /* free_lock */
	/* Exported memory whose lease ended while the process that mapped
	 * it may still have it open: freed once that process is gone. */
	struct cuda_gone *parked; /* free_lock */
	uint64_t parked_bytes; /* free_lock */
	bool freeing; /* free_lock: a cudaFree is running */
	bool free_stop; /* free_lock */
	/* Bytes cudaMalloc'd and not yet cudaFree'd (queued frees
	 * included): what meminfo reports as held. Raised before cudaMalloc
	 * and lowered after cudaFree, so that it never reads below what the
	 * device has given us. atomic */
	uint64_t held;
	/* Bit g: peer access to GPU g is enabled in this context (GPUs 0 to
	 * 63; past them, copies to peers are staged by the runtime). atomic */
	uint64_t peer_on;
};

struct cuda_dmem {
	struct tier_dmem base;
	void *ptr; /* cudaMalloc'd, granted bytes; offset 0 of the handle */
	bool tail_zeroed; /* [len, granted) cleared for importers */
	/*
	 * A write export could not be detached (no room for a new block):
	 * ptr is still mapped by process @lent_pid (0: unknown), so freeing
	 * it waits for that process as a parked block does. Under the
	 * buffer's lock, as every use of ptr.
	 */
	bool lent;
	pid_t lent_pid;
};

/* One export: what its handle maps. */
struct cuda_dexp {
	struct tier_dexp base;
	struct cuda_dmem *m; /* a write export's allocation */
	void *ptr; /* read: a private snapshot; write: m->ptr at export */
	size_t granted;
};

static inline struct cuda_dev *to_cdev(struct tier_dev *dev)
{
	return (struct cuda_dev *)dev;
}

static inline struct cuda_dmem *to_cmem(struct tier_dmem *m)
{
	return (struct cuda_dmem *)m;
}

static inline bool dev_failed(struct cuda_dev *d)
{
	return __atomic_load_n(&d->failed, __ATOMIC_ACQUIRE);
}

static inline bool in_range(const struct cuda_dmem *m, size_t len, uint64_t off)
{
	return off <= m->base.len && len <= m->base.len - off;
}

/*
 * The runtime's current device is per thread, and the store's threads are
 * not ours to set up, so every entry point selects the device first. After
 * the first call in a thread this only reads thread-local state.
 */
static inline cudaError_t cuda_enter(struct cuda_dev *d)
{
	return cudaSetDevice(d->gpu);
}

/* --- device_cuda.c -------------------------------------------------------- */

/* "what (cudaErrorName, number)" for @e, into @buf; returns @buf. */
const char *cuda_describe(cudaError_t e, char *buf, size_t len);
/* The -errno for @e (0 for cudaSuccess, -EIO for the unexpected). */
int cuda_errno(cudaError_t e);
/* Mark the device failed; the first caller logs why. Returns -EIO. */
int cuda_dev_fail(struct cuda_dev *d, cudaError_t e, const char *call);
/* Whether @e poisoned the context (may ask the runtime). */
bool cuda_sticky(struct cuda_dev *d, cudaError_t e);
/* Fail init with one line in @err; the matching -errno. */
int cuda_init_fail(cudaError_t e, const char *call, char *err, size_t errlen);
/* A failed call of a copy of @len bytes at @off: a sticky error fails the
 * device, anything else is logged once here. -EIO or -ENODEV. */
int cuda_copy_fail(struct cuda_dev *d, cudaError_t e, const char *what,
		   size_t len, uint64_t off);

/* --- device_cuda_copy.c --------------------------------------------------- */

/* Take a free slot, waiting for one; give it back with no copy in flight
 * on its stream. Takes pool_lock only inside. */
struct cuda_slot *cuda_slot_get(struct cuda_dev *d);
void cuda_slot_put(struct cuda_dev *d, struct cuda_slot *s);
/* Wait for @ev: poll briefly, then sleep. */
cudaError_t cuda_event_wait(cudaEvent_t ev);
/* Unregister the ranges @d registered and never unregistered (destroy);
 * how many there were. */
size_t cuda_regs_drop(struct cuda_dev *d);
/* Create the slots at init (0, or -errno with @err filled), destroy them
 * (what was created; safe on a failed device). */
int cuda_slots_create(struct cuda_dev *d, char *err, size_t errlen);
void cuda_slots_destroy(struct cuda_dev *d);

/* The ops of tier_dev_cuda_ops that device_cuda_copy.c implements. */
int cuda_host_register(struct tier_dev *dev, void *ptr, size_t len);
void cuda_host_unregister(struct tier_dev *dev, void *ptr, size_t len);
int cuda_readv(struct tier_dev *dev, struct tier_dmem *m,
	       const struct tier_dev_seg *seg, unsigned int n);
int cuda_writev(struct tier_dev *dev, struct tier_dmem *m,
		const struct tier_dev_seg *seg, unsigned int n);
int cuda_read(struct tier_dev *dev, struct tier_dmem *m, void *dst, size_t len,
	      uint64_t off);
int cuda_write(struct tier_dev *dev, struct tier_dmem *m, const void *src,
	       size_t len, uint64_t off);
int cuda_zero(struct tier_dev *dev, struct tier_dmem *m, size_t len,
	      uint64_t off);
bool cuda_can_peer(struct tier_dev *src, struct tier_dev *dst);
int cuda_copy_peer(struct tier_dev *src, struct tier_dmem *sm,
		   struct tier_dev *dst, struct tier_dmem *dm, size_t len,
		   uint64_t off);

#endif
