/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Device tier backends: GPU memory (cuda) or a host-memory stand-in with a
 * fixed capacity (sim). A backend is a table of functions; an instance's
 * first member points at it. The store serialises nothing for a backend:
 * every slot must be safe to call from several threads at once, on
 * different allocations.
 */
#ifndef TFS_TIERS_DEVICE_H
#define TFS_TIERS_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "tierfs.h"

struct tfs_config;

/* One device allocation. Backends embed it first in their own struct. */
struct tier_dmem {
	size_t len; /* bytes usable */
	/*
	 * Bytes the allocation takes on the device: what the store charges
	 * to the device tier. At least len for a dense one: cuda rounds every
	 * allocation to 2 MiB (a 2 MiB + 4 KiB buffer takes 4 MiB), sim to a
	 * page. A sparse one (alloc_sparse) takes the pages populated.
	 */
	size_t granted;
};

/*
 * One piece of a batched copy: @len bytes between host memory @host and
 * device offset @off. In a writev, a NULL @host zeroes the range.
 */
struct tier_dev_seg {
	void *host;
	size_t len;
	uint64_t off;
};

/*
 * One export of an allocation: what one lease hands one client. The
 * backend allocates it in export and frees it in unexport; the store keeps
 * it in the lease in between and never looks inside but at @writable.
 * Backends embed it first in their own struct.
 */
struct tier_dexp {
	bool writable;
	/*
	 * Set by the store for unexport, where a backend cannot revoke a
	 * mapping (cuda) and must not free what a live process still maps:
	 * @pid, the process that asked for the export (0 when unknown, e.g.
	 * in another PID namespace), and @unmapped, true when that process
	 * ended the lease saying it had closed its mapping first
	 * (TFS_RELEASE_UNMAPPED).
	 */
	pid_t pid;
	bool unmapped;
};

struct tier_dev_info {
	const char *name; /* "cuda", "sim" */
	char model[64]; /* "NVIDIA H200", "simulated device" */
	uint64_t capacity; /* total bytes */
	uint64_t free; /* bytes free at init */
	/* Allocations are rounded up to a multiple of this (cuda: 2 MiB,
	 * sim: a page): what the store reserves before it allocates. */
	uint64_t granule;
	/* alloc_sparse works on this instance (sim: always; cuda: where the
	 * driver and the GPU have virtual memory management). */
	bool sparse;
	/*
	 * The GPU's UUID, how a client names it whatever its
	 * CUDA_VISIBLE_DEVICES: the driver's on cuda, on sim a fixed one per
	 * ordinal (tier_dev_sim_uuid()). Never all zero: a zero UUID in a
	 * request means "the default GPU".
	 */
	uint8_t uuid[16];
};

struct tier_dev;

struct tier_dev_ops {
	const char *name;
	/*
	 * Open the backend for @cfg (device.gpu, host.pinned, ...). Returns 0,
	 * or -ENODEV / -ENXIO / ... with one line in @err naming the cause
	 * (for cuda: the CUDA error's name and number); -ENOENT when the
	 * machine has no driver for the device at all, which backend=auto
	 * takes as the ordinary case of a machine without a GPU.
	 */
	int (*init)(struct tier_dev **out, const struct tfs_config *cfg,
		    char *err, size_t errlen);
	void (*destroy)(struct tier_dev *dev);
	/*
	 * Optional: how many devices the machine has for @cfg (ordinals 0 to
	 * count - 1), for [device] gpus; -errno when it cannot tell, and
	 * init then says why. Without it only device.gpu is ever opened.
	 */
	int (*count)(const struct tfs_config *cfg);
	/*
	 * Allocate @len bytes; (*out)->granted says what the device took.
	 * -ENOMEM when the device is out of memory, -ENODEV once it failed.
	 */
	int (*alloc)(struct tier_dev *dev, size_t len, struct tier_dmem **out);
	/*
	 * Optional, both or neither: sparse allocations, so that the holes of
	 * a sparse file cost no device memory. alloc_sparse: @len bytes of
	 * which no page holds memory yet ((*out)->granted is 0); reading a
	 * page never populated gives zeroes. populate: make every page (every
	 * granule) of [@off, @off + @len) hold memory, zeroed; those that did
	 * already stay as they were; granted grows by what it took. -ENOMEM
	 * when the device has no room for the rest (what was populated before
	 * stays, and granted says it), -EINVAL past the allocation. On a
	 * dense allocation (alloc) populate does nothing. write, writev, zero
	 * and copy_peer into a page never populated are refused (-EINVAL);
	 * export needs every page populated. The store populates what a
	 * buffer's page maps hold before it copies there.
	 */
	int (*alloc_sparse)(struct tier_dev *dev, size_t len,
			    struct tier_dmem **out);
	int (*populate)(struct tier_dev *dev, struct tier_dmem *m,
			uint64_t off, size_t len);
	/*
	 * Give @m back. May return before the device memory is released:
	 * cuda hands it to a thread of its own, because cudaFree waits for
	 * the whole device and the caller may hold a buffer lock. @m must not
	 * be used after; no copy of it may be in flight.
	 */
	void (*free)(struct tier_dev *dev, struct tier_dmem *m);
	/* Copy device -> host. @off + @len <= m->len. Returns 0 or -errno. */
	int (*read)(struct tier_dev *dev, struct tier_dmem *m, void *dst,
		    size_t len, uint64_t off);
	/* Copy host -> device. */
	int (*write)(struct tier_dev *dev, struct tier_dmem *m, const void *src,
		     size_t len, uint64_t off);
	/* Zero a range. */
	int (*zero)(struct tier_dev *dev, struct tier_dmem *m, size_t len,
		    uint64_t off);
	/*
	 * Exports. The rule: an export gives no more than the descriptor it
	 * comes from, and dies with its lease.
	 *
	 * export: give a process of @uid (primary group @gid) access to @m's
	 * bytes, for reading only or, with @writable, for reading and
	 * writing. Fill handle_type, handle, offset and uuid of @out, and set
	 * *@exp to the backend's record of this export (writable set), which
	 * the store keeps in the lease and passes to unexport exactly once.
	 *
	 *  - A write export maps @m itself: the holder's writes are the
	 *    buffer's, and writes through the store show to the holder. The
	 *    store asks for at most one write export of an allocation at a
	 *    time, and keeps @m (does not free, move or resize it) until its
	 *    unexport.
	 *  - A read export must never let its holder change anything the
	 *    store holds. With read_snapshots set, it is a snapshot of @m's
	 *    bytes as they are now, holding m->granted bytes of device memory
	 *    apart from @m (the store charges them to the device tier first),
	 *    independent of @m from the moment export returns: the store may
	 *    then write, move or free @m, and the holder sees none of it. A
	 *    backend with export_held gives the readers of the same unchanged
	 *    bytes one snapshot (it sees every write of @m) and accounts for
	 *    it itself. Without read_snapshots, a read export may map @m, and
	 *    the store keeps @m for it as for a write export.
	 *
	 * The store holds @m's buffer lock for writing and no reply points
	 * into @m (host_ptr) across export and unexport. Returns 0, -ENOSPC
	 * when the device has no room for a snapshot, -EBUSY for a second
	 * write export of @m, or another -errno.
	 *
	 * unexport: end @exp. From its return on, the holder can neither see
	 * nor change the buffer's current bytes through anything the export
	 * gave it: a write export's mapping is detached from @m (its bytes
	 * stay what they were), a snapshot stays what it was. Where a mapping
	 * cannot be revoked (CUDA IPC), the backend keeps what it maps alive
	 * and apart from every buffer until the importer lets go, and says
	 * so in its own documentation. A write export's @m still exists.
	 */
	int (*export)(struct tier_dev *dev, struct tier_dmem *m, bool writable,
		      uid_t uid, gid_t gid, struct tfs_ioc_export *out,
		      struct tier_dexp **exp);
	void (*unexport)(struct tier_dev *dev, struct tier_dexp *exp);
	/* Read exports are private snapshots (see export). */
	bool read_snapshots;
	void (*info)(struct tier_dev *dev, struct tier_dev_info *out);
	/* Optional: where the daemon can address @m's bytes directly (sim),
	 * so reads are replied without a copy; NULL when it cannot (cuda). */
	void *(*host_ptr)(struct tier_dev *dev, struct tier_dmem *m);
	/*
	 * Optional. Page-lock host memory the store will copy to and from
	 * (host.pinned), so that copies of it need no staging: any range
	 * inside a registered one is copied directly. Called when the memory
	 * is mapped; unregister with the same @ptr before it is unmapped. A
	 * failed register is not an error: the memory stays pageable and
	 * copies of it are staged.
	 */
	int (*host_register)(struct tier_dev *dev, void *ptr, size_t len);
	void (*host_unregister)(struct tier_dev *dev, void *ptr, size_t len);
	/*
	 * Optional, for memory mapped under a caller's lock (the store's
	 * pool, in a writer's path): host_register_async returns at once and
	 * the range is page-locked later on a thread of the backend's (copies
	 * of it are staged until then; 0, or -errno when nothing was queued,
	 * the memory staying pageable). With host_populates the backend also
	 * places the pages (cuda: on the GPU's NUMA node) and faults them in
	 * itself, so the caller maps the range without populating it.
	 * host_release unregisters a range (registered either way, or never)
	 * and munmap()s it, later, on that thread; the range must not be
	 * used after the call, and is gone before destroy returns.
	 */
	int (*host_register_async)(struct tier_dev *dev, void *ptr, size_t len);
	void (*host_release)(struct tier_dev *dev, void *ptr, size_t len);
	bool host_populates;
	/*
	 * Optional: copy @n segments device -> host (readv) or host -> device
	 * (writev) as one batch that waits once, instead of a copy and a wait
	 * per read/write call. Each segment follows the rules of read/write
	 * (zero for a NULL host in writev). 0, or the first error, after
	 * which some segments may have been copied. Call them through
	 * tier_dev_readv() and tier_dev_writev().
	 */
	int (*readv)(struct tier_dev *dev, struct tier_dmem *m,
		     const struct tier_dev_seg *seg, unsigned int n);
	int (*writev)(struct tier_dev *dev, struct tier_dmem *m,
		      const struct tier_dev_seg *seg, unsigned int n);
	/*
	 * Optional: true once the device failed for good (cuda: a sticky
	 * error such as an illegal address or an uncorrectable ECC error
	 * poisoned the context, which only a new process recovers from).
	 * From then on every slot fails fast without touching the device:
	 * alloc and export -ENODEV, copies -EIO, free only forgets. The store
	 * places nothing there and serves what it can from host and disk.
	 */
	bool (*failed)(struct tier_dev *dev);
	/*
	 * Optional: the device's memory now. @free as the driver counts it
	 * (cudaMemGetInfo: what every process allocated taken off), @total,
	 * and @held, what this backend has allocated and not yet given back
	 * to the device (frees still queued included), so that what other
	 * processes use is total - free - held. Called often (the reserve
	 * watcher polls it) and without store locks. 0 or -errno.
	 */
	int (*meminfo)(struct tier_dev *dev, uint64_t *free, uint64_t *total,
		       uint64_t *held);
	/*
	 * Optional: return once the memory of every free() made so far is
	 * back with the device, where another process can allocate it (cuda
	 * frees on a thread of its own). A reclaim waits for this.
	 */
	void (*drain)(struct tier_dev *dev);
	/*
	 * Optional (cuda), where read exports' memory is the backend's to
	 * keep: the device bytes that exports hold besides the buffers' own
	 * copies. That is read snapshots (one per version of a buffer, shared
	 * by every reader of that version and freed when the last one goes)
	 * and the blocks of ended leases whose process may still map them
	 * (kept until it exits: see unexport). @uid: what that user's exports
	 * hold, a snapshot counted once for each user holding it;
	 * TIER_DEV_ALL_USERS: all of it, each block once. The store charges
	 * the total to the device tier and each user's part to the user's
	 * share; without the slot it charges a snapshot to both for as long
	 * as its lease lasts, and nothing after. Takes only the backend's
	 * leaf locks: may be called with store locks held.
	 */
	uint64_t (*export_held)(struct tier_dev *dev, uid_t uid);
	/*
	 * Optional, with export_held: the device bytes a read export of @m
	 * would add now: 0 when it would share a snapshot of the same bytes,
	 * m->granted otherwise. @m's buffer lock held, as for export.
	 */
	uint64_t (*export_cost)(struct tier_dev *dev, struct tier_dmem *m);
	/*
	 * Several GPUs: one instance of the backend per GPU, each opened by
	 * init with its own device.gpu. Both slots are optional, take two
	 * instances of this one backend and may be called from any thread.
	 *
	 * can_peer: whether copy_peer from @src to @dst goes device to device
	 * (cuda: cudaDeviceCanAccessPeer, and peer access enabled on the first
	 * true answer; sim: always). When false, or without the slot, a move
	 * between GPUs goes through host memory: readv from @src, writev to
	 * @dst.
	 *
	 * copy_peer: copy @len bytes at @off of @sm (an allocation of @src) to
	 * the same offset of @dm (of @dst), and return once they are there.
	 * @off + @len must lie inside both (-EINVAL). Nothing else may write
	 * either range meanwhile; the store holds both buffers' locks. 0,
	 * -EIO for a failed copy, -ENODEV when either device has failed.
	 */
	bool (*can_peer)(struct tier_dev *src, struct tier_dev *dst);
	int (*copy_peer)(struct tier_dev *src, struct tier_dmem *sm,
			 struct tier_dev *dst, struct tier_dmem *dm,
			 size_t len, uint64_t off);
};

struct tier_dev {
	const struct tier_dev_ops *ops;
};

/* export_held()'s @uid for every user's exports. */
#define TIER_DEV_ALL_USERS ((uid_t)-1)

/* Batched copies, one read/write/zero per segment where the backend has
 * no batch of its own. */
static inline int tier_dev_readv(struct tier_dev *dev, struct tier_dmem *m,
				 const struct tier_dev_seg *seg, unsigned int n)
{
	int rc = 0;

	if (dev->ops->readv)
		return dev->ops->readv(dev, m, seg, n);
	for (unsigned int i = 0; !rc && i < n; i++)
		rc = dev->ops->read(dev, m, seg[i].host, seg[i].len,
				    seg[i].off);
	return rc;
}

static inline int tier_dev_writev(struct tier_dev *dev, struct tier_dmem *m,
				  const struct tier_dev_seg *seg,
				  unsigned int n)
{
	int rc = 0;

	if (dev->ops->writev)
		return dev->ops->writev(dev, m, seg, n);
	for (unsigned int i = 0; !rc && i < n; i++)
		rc = seg[i].host ? dev->ops->write(dev, m, seg[i].host,
						   seg[i].len, seg[i].off) :
				   dev->ops->zero(dev, m, seg[i].len,
						  seg[i].off);
	return rc;
}

static inline bool tier_dev_failed(struct tier_dev *dev)
{
	return dev && dev->ops->failed && dev->ops->failed(dev);
}

/* @dev's GPU UUID (16 bytes, never all zero; see tier_dev_info). */
static inline void tier_dev_uuid(struct tier_dev *dev, uint8_t out[16])
{
	struct tier_dev_info info;

	dev->ops->info(dev, &info);
	memcpy(out, info.uuid, sizeof(info.uuid));
}

/* Whether a copy from @src to @dst can go device to device. */
static inline bool tier_dev_can_peer(struct tier_dev *src,
				     struct tier_dev *dst)
{
	return src->ops == dst->ops && src->ops->can_peer &&
	       src->ops->copy_peer && src->ops->can_peer(src, dst);
}

/*
 * The UUID the sim backend gives its GPU @ordinal: "tierfs-sim-gpu" in
 * ASCII and the ordinal in the last two bytes, big-endian, so that tests
 * and clients can compute it.
 */
void tier_dev_sim_uuid(int ordinal, uint8_t out[16]);

/* The backend called @name ("cuda", "sim"), or NULL if not built in. */
const struct tier_dev_ops *tier_dev_lookup(const char *name);

extern const struct tier_dev_ops tier_dev_sim_ops;
#ifdef TFS_HAVE_CUDA
extern const struct tier_dev_ops tier_dev_cuda_ops;
#endif

#endif
