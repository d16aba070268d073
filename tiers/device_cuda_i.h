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
 * Copies run on slots: a non-blocking stream and an event each, many of
 * them, since a batch holds its slot for its whole length and every FUSE
 * thread, the spiller and the workers may copy at once (four slots made
 * the fifth copier wait for a whole batch of another). A batch that meets
 * pageable host memory also takes a staging pair (two pinned 2 MiB buffers
 * copied in turns); copies of page-locked memory, the pool's with
 * host.pinned, need none, so only CUDA_STAGES pairs are pinned: 16 MiB.
 * 2 MiB per chunk is past the knee of the pinned copy bandwidth curve while
 * the memcpy between staging and the caller's pageable buffer stays short
 * enough to hide behind the next DMA.
 */
#define CUDA_SLOTS 16
#define CUDA_STAGES 4
#define CUDA_CHUNK (2u << 20)

/* What every allocation is rounded to: the driver's block, which legacy
 * IPC shares whole. */
#define CUDA_GRANULE ((size_t)2 << 20)

struct cuda_slot {
	cudaEvent_t fin; /* recorded at the end of a batch */
	cudaStream_t stream; /* non-blocking: never syncs with stream 0 */
};

struct cuda_stage {
	void *buf[2]; /* pinned, CUDA_CHUNK bytes each */
	/* recorded after the copy that uses buf[i]; blocking-sync events */
	cudaEvent_t done[2];
};

/* A host range page-locked by host_register, for every GPU of the
 * process (cudaHostRegisterPortable); @owner registered it. */
struct cuda_reg {
	uintptr_t base;
	size_t len;
	const struct cuda_dev *owner;
};

/* Work for the pinner thread: page-lock a range, or release one. */
struct cuda_pin_job {
	struct cuda_pin_job *next;
	void *ptr;
	size_t len;
	bool release; /* unregister and munmap */
};

/*
 * One read export's block, a snapshot of a buffer's bytes, shared by every
 * read export of the same unchanged bytes (the buffer's snap_id names it
 * until the buffer is written) and freed when the last reference goes: a
 * lease, or a process that may still map it after its lease ended.
 * free_lock.
 */
struct cuda_snap {
	struct cuda_snap *next; /* d->snaps */
	uint64_t id;
	void *ptr;
	size_t granted;
	cudaIpcMemHandle_t handle;
	unsigned int refs;
	/* refs by user, for export_held(uid) */
	struct cuda_snap_user {
		uid_t uid;
		unsigned int refs;
	} *users;
	unsigned int nusers;
	/* the record that frees it, allocated with it */
	struct cuda_gone *gone;
};

/*
 * An allocation waiting for the freer thread, or a snapshot reference
 * (@snap, no @ptr) waiting for its process to go. Every one is allocated
 * before the memory it frees is handed out (with the allocation, the
 * snapshot or the export), so that a free never needs memory: it once
 * called cudaFree synchronously when malloc failed, under the caller's
 * buffer lock.
 */
struct cuda_gone {
	struct cuda_gone *next;
	void *ptr;
	size_t granted;
	/* A sparse allocation (ptr unused): unmapped and released instead
	 * of cudaFree'd (device_cuda_vmm.c). */
	struct cuda_vmm *vmm;
	struct cuda_snap *snap;
	uid_t uid; /* whose export it was (export_held) */
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

	/* The GPU's NUMA node (sysfs), -1 when unknown: pinned host memory
	 * for its copies is placed there. */
	int numa_node;

	/*
	 * Lock order: pool_lock, the range table's lock, free_lock and
	 * pin_lock are leaves; none is held with another or across a CUDA
	 * call (the freer drops free_lock around cudaFree, the pinner
	 * pin_lock around its work).
	 */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	unsigned int pool_free; /* bit i: slots[i] is free; pool_lock */
	unsigned int stage_free; /* bit i: stages[i] is free; pool_lock */
	struct cuda_slot slots[CUDA_SLOTS]; /* set up at init, then fixed */
	struct cuda_stage stages[CUDA_STAGES]; /* likewise */

	/* The pinner thread: host_register_async and host_release. */
	pthread_t pinner;
	bool pinner_started;
	pthread_mutex_t pin_lock;
	pthread_cond_t pin_wake; /* work queued, a job done, or stop */
	struct cuda_pin_job *pin_head, **pin_tail; /* pin_lock */
	void *pin_busy; /* pin_lock: the range the pinner works on now */
	bool pin_stop; /* pin_lock */

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
	struct cuda_snap *snaps; /* free_lock: every live snapshot */
	uint64_t snap_seq; /* free_lock */
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

	/* Sparse allocations (device_cuda_vmm.c; info.sparse says whether
	 * there are any): the zeroed granule every hole maps read-only, made
	 * at the first one and released at destroy (0: none yet). vmm_lock,
	 * a leaf held across the driver calls that make it. */
	pthread_mutex_t vmm_lock;
	unsigned long long zero;
};

struct cuda_dmem {
	struct tier_dmem base;
	/* cudaMalloc'd, granted bytes; offset 0 of the handle. For a sparse
	 * allocation (@vmm), its reserved address range instead, granted the
	 * granules populated; an export makes it a cudaMalloc'd one first. */
	void *ptr;
	struct cuda_vmm *vmm;
	struct cuda_gone *gone; /* frees ptr; allocated with it */
	bool tail_zeroed; /* [len, granted) cleared for importers */
	/*
	 * The snapshot of these bytes readers share (0: none); cleared by
	 * every write of the allocation, and never set while a write export
	 * maps it (wexp) or an earlier holder still may (lent). Under the
	 * buffer's lock; the snapshot itself is found by id in d->snaps.
	 */
	uint64_t snap_id;
	bool wexp;
	/*
	 * A write export could not be detached (no room for a new block):
	 * ptr is still mapped by process @lent_pid (0: unknown), so freeing
	 * it waits for that process as a parked block does. Under the
	 * buffer's lock, as every use of ptr.
	 */
	bool lent;
	pid_t lent_pid;
	uid_t lent_uid;
};

/* One export: what its handle maps. */
struct cuda_dexp {
	struct tier_dexp base;
	struct cuda_dmem *m; /* a write export's allocation */
	struct cuda_snap *snap; /* a read export's snapshot */
	void *ptr; /* write: m->ptr at export */
	size_t granted;
	uid_t uid;
	/* What parks the block or the reference at unexport: allocated at
	 * export, where failing is still allowed. */
	struct cuda_gone *spare;
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

/* A record for cuda_free_later(), or NULL when out of memory. */
struct cuda_gone *cuda_gone_new(void);
/* Free what @g names (g->ptr or g->vmm, g->granted bytes) on the freer
 * thread; see free_later() in device_cuda.c. Never fails. */
void cuda_free_later(struct cuda_dev *d, struct cuda_gone *g);

/* --- device_cuda_vmm.c ---------------------------------------------------- */

/* Whether GPU d->gpu can have sparse allocations: the driver's VMM calls
 * found (once for the process) and the GPU supporting them in granules
 * that divide CUDA_GRANULE. */
bool cuda_vmm_init(struct cuda_dev *d);
/* Release the zero granule (destroy, after the freer has stopped). */
void cuda_vmm_destroy(struct cuda_dev *d);
/* The slots of tier_dev_cuda_ops (device.h). */
int cuda_alloc_sparse(struct tier_dev *dev, size_t len, struct tier_dmem **out);
int cuda_populate(struct tier_dev *dev, struct tier_dmem *m, uint64_t off,
		  size_t len);
/* Whether every granule of [off, off + len) of @m has memory of its own
 * (always, for a dense allocation): a copy may write there. */
bool cuda_vmm_writable(const struct cuda_dmem *m, size_t len, uint64_t off);
/* Unmap and release @v's granules and address range, and free @v (the
 * freer thread; on a failed device only the latter). */
void cuda_vmm_release(struct cuda_dev *d, struct cuda_vmm *v);
/*
 * Before an export: move sparse @m, every granule populated (else
 * -EINVAL), into one cudaMalloc'd block with a device to device copy, its
 * range released on the freer thread. 0 (and at once for a dense one),
 * -ENOSPC when the device has no room for the copy, -EIO / -ENODEV. The
 * caller holds the buffer's lock for writing.
 */
int cuda_vmm_densify(struct cuda_dev *d, struct cuda_dmem *m);

/* --- device_cuda_copy.c --------------------------------------------------- */

/* Take a free slot, waiting for one; give it back with no copy in flight
 * on its stream. Takes pool_lock only inside. Likewise a staging pair. */
struct cuda_slot *cuda_slot_get(struct cuda_dev *d);
void cuda_slot_put(struct cuda_dev *d, struct cuda_slot *s);
struct cuda_stage *cuda_stage_get(struct cuda_dev *d);
void cuda_stage_put(struct cuda_dev *d, struct cuda_stage *g);
/* Wait for @ev: poll briefly, then sleep. */
cudaError_t cuda_event_wait(cudaEvent_t ev);
/* Unregister the ranges @d registered and never unregistered (destroy);
 * how many there were. */
size_t cuda_regs_drop(struct cuda_dev *d);
/* Create the slots at init (0, or -errno with @err filled), destroy them
 * (what was created; safe on a failed device). */
int cuda_slots_create(struct cuda_dev *d, char *err, size_t errlen);
void cuda_slots_destroy(struct cuda_dev *d);
/* Start the pinner at init (0 or -errno); stop it at destroy, after it
 * ran what is queued. */
int cuda_pinner_start(struct cuda_dev *d);
void cuda_pinner_stop(struct cuda_dev *d);
/* Wait until the pinner has run every job queued so far (tests). */
void cuda_pins_wait(struct cuda_dev *d);
/* The NUMA node of GPU @gpu from sysfs, -1 when unknown; $TFS_CUDA_NUMA_NODE
 * overrides it (machines whose sysfs does not say, and tests). */
int cuda_numa_node(int gpu);
/*
 * Place [p, p + len) on @node (-1: leave it) and fault it in, in parallel
 * for a large range, before it is page-locked: cudaHostRegister otherwise
 * faults in every page on one thread, wherever that thread runs.
 */
void cuda_host_place(void *p, size_t len, int node);

/*
 * What the copies did, counted for tests/gpu/backend_check.c on a GPU,
 * where the fake runtime's counters are not there: host waits (event and
 * stream synchronisations), segments copied directly from or to
 * page-locked memory, and chunks staged.
 */
struct cuda_copy_counts {
	unsigned long waits, direct, staged;
};
void cuda_copy_counts(struct cuda_copy_counts *out);

/* The ops of tier_dev_cuda_ops that device_cuda_copy.c implements. */
int cuda_host_register(struct tier_dev *dev, void *ptr, size_t len);
void cuda_host_unregister(struct tier_dev *dev, void *ptr, size_t len);
int cuda_host_register_async(struct tier_dev *dev, void *ptr, size_t len);
void cuda_host_release(struct tier_dev *dev, void *ptr, size_t len);
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
