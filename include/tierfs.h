/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tierfs public ABI: tier ids, extended attribute names and the ioctls that
 * GPU programs use to get at a file's buffer.
 *
 * Every ioctl is a "restricted" FUSE ioctl: its argument size is encoded in
 * the command number, the kernel copies exactly that many bytes in and out,
 * and no pointers or file descriptors cross it. Each struct starts with
 * `version` (set it to TFS_ABI_VERSION) and `flags`, ends with reserved words
 * that must be zero, and has a size fixed by a static assertion below.
 * The header is valid C11 and C++11 (nvcc), so GPU programs include it as is.
 *
 * How the ABI grows: a new input takes reserved words or a new flag, and
 * zero there means exactly what the call meant before, so old callers,
 * which zero the whole struct, keep their behaviour and TFS_ABI_VERSION
 * stays 1. A daemon older than the field or flag refuses it with EINVAL;
 * a caller that must work with one retries with it zero (libtierfs does).
 * TFS_ABI_VERSION changes only for what cannot be said that way.
 */
#ifndef TIERFS_H
#define TIERFS_H

#include <assert.h>
#include <stdint.h>
#include <linux/ioctl.h>

#define TFS_ABI_VERSION 1

/*
 * Tiers, fastest first. A buffer's tier is the fastest one holding a copy.
 * Every mount's chain starts with these three (the device tier standing
 * for all of its GPUs); a chain's further disk-kind tiers ([tiers] in
 * tierfs.conf) follow from TFS_TIER_COUNT on, in the order the "tiers"
 * key of user.tierfs.stats lists them, up to TFS_TIER_MAX.
 */
enum tfs_tier {
	TFS_TIER_DEVICE = 0,
	TFS_TIER_HOST = 1,
	TFS_TIER_DISK = 2,
	TFS_TIER_COUNT = 3,
	TFS_TIER_MAX = 16,
};

/* Extended attributes answered on every regular file. */
#define TFS_XATTR_PREFIX "user.tierfs."
#define TFS_XATTR_TIER "user.tierfs.tier" /* rw: device[:N]|host|disk */
#define TFS_XATTR_SIZE "user.tierfs.size" /* ro: logical bytes */
#define TFS_XATTR_STORED "user.tierfs.stored_size" /* ro: bytes in tier */
#define TFS_XATTR_ATIME "user.tierfs.last_access" /* ro: ns since epoch */
#define TFS_XATTR_PINS "user.tierfs.pins" /* ro: pins + leases */
/* rw: 1 pins, 0 unpins, prio=N[,ttl=D] soft-pins */
#define TFS_XATTR_PIN "user.tierfs.pin"
/* rw: write_back|write_through, default on a directory */
#define TFS_XATTR_WRITE "user.tierfs.write_policy"
#define TFS_XATTR_DEVICE "user.tierfs.device" /* ro: its device copy's GPU */
/* Answered on the mount root: "key=value\n" lines, see tierfs(8). */
#define TFS_XATTR_STATS "user.tierfs.stats"
/* On a persistent mount's root, to root and the daemon's user: what the
 * last start's recovery dropped, "kind\tpath\twhy\n" lines. */
#define TFS_XATTR_RECOVERY "user.tierfs.recovery"

#define TFS_IOC_MAGIC 0xf7

/* handle_type of an export */
enum tfs_handle_type {
	TFS_HANDLE_NONE = 0,
	TFS_HANDLE_CUDA_IPC = 1, /* handle is a cudaIpcMemHandle_t */
	TFS_HANDLE_SHM = 2, /* handle is a NUL-terminated shm_open() name */
};

/* The caller will write; the fd must be open O_RDWR (EBADF otherwise). Any
 * export needs an fd open for reading. */
#define TFS_EXPORT_WRITE 0x1u

/*
 * TFS_IOC_EXPORT: unspill the buffer to the device tier and take a lease for
 * this open file (exporting again replaces it), until TFS_IOC_RELEASE or
 * close. The buffer goes to the GPU whose UUID is `caller_uuid`, the
 * caller's current device, so that its kernels reach it without crossing
 * to another GPU; zero there (an older caller, or one with no CUDA
 * context), a UUID of no GPU this mount serves, or any other bytes get the
 * daemon's default GPU: never an error, since where the buffer lives is a
 * placement, not a permission. `uuid` in the reply says which GPU it is. A write export maps the live device copy, which stays in place
 * meanwhile; one per buffer at a time (EBUSY). A read export never lets its
 * holder change the file: it is a private snapshot (with cuda a device copy
 * in a block of its own, writable, since CUDA IPC has no read-only import) of
 * the bytes, holding nothing of the buffer. When the lease ends, the old
 * mapping shows nothing current any more. The file's owner (or root)
 * truncating, writing, moving, re-permitting or write-exporting the file
 * ends the write exports of other users, and chattr +i or +a every write
 * export: its next TFS_IOC_COMMIT or TFS_IOC_RELEASE fails with ESTALE
 * (a commit on a file made immutable with EPERM). EDQUOT past the
 * caller's [device] user_share or [device] user_exports.
 */
struct tfs_ioc_export {
	uint32_t version;
	uint32_t flags; /* in: TFS_EXPORT_* */
	uint32_t handle_type; /* out: enum tfs_handle_type */
	/* out: the daemon's CUDA runtime version (13000 for 13.0) with a
	 * CUDA handle, else 0; in: 0 */
	uint32_t cuda_runtime;
	uint64_t offset; /* out: where the bytes start inside the handle */
	uint64_t length; /* out: logical size of the buffer */
	uint64_t generation; /* out: bumped whenever the buffer is replaced */
	uint8_t handle[64]; /* out */
	/* out: the UUID of the GPU the buffer is on; with sim the ASCII
	 * "tierfs-sim-gpu" and the ordinal, 2 bytes big-endian */
	uint8_t uuid[16];
	/* in: the UUID of the caller's current GPU (cudaDeviceProp.uuid),
	 * or zero for the default GPU; out: as sent */
	uint8_t caller_uuid[16];
	/*
	 * out: the caller's process id as the daemon sees it (the thread
	 * group of the thread that asked), 0 when the daemon cannot see the
	 * caller or is older than the field; in: 0. A value other than the
	 * caller's getpid() means the two are in different PID namespaces,
	 * where CUDA IPC does not work.
	 */
	uint32_t caller_pid;
	uint32_t reserved0;
	uint64_t reserved[1];
};

/*
 * TFS_IOC_RELEASE: drop the lease this open file holds. With
 * TFS_RELEASE_UNMAPPED the caller says it has closed what it mapped
 * (cudaIpcCloseMemHandle, munmap), so the daemon may free that memory at
 * once. Without it, on CUDA the memory is kept until the process that
 * exported has exited: freeing memory that a process still has open
 * through CUDA IPC is undefined behaviour. libtierfs sets it.
 */
#define TFS_RELEASE_UNMAPPED 0x1u

struct tfs_ioc_release {
	uint32_t version;
	uint32_t flags;
	uint64_t generation; /* in: as returned by export, or 0 for any */
	uint64_t reserved[2];
};

/*
 * TFS_IOC_COMMIT: the GPU wrote the buffer. Lower-tier copies are dropped,
 * mtime is bumped and the kernel page cache for the file is invalidated.
 * Needs a write export on this open file.
 *
 * The caller must have waited for its writes to finish first: the daemon
 * cannot wait on a stream of another process (and a daemon thread blocked
 * on a client's GPU work would be the client's to hang). `waited` says how
 * it did (libtierfs and tierfs.device set it): the whole device, one stream,
 * or one event; 0 is an older caller that does not say. A daemon older than
 * the field refuses a nonzero one (EINVAL): retry with 0.
 */
#define TFS_COMMIT_WAITED_DEVICE 1u /* cudaDeviceSynchronize */
#define TFS_COMMIT_WAITED_STREAM 2u /* cudaStreamSynchronize of one stream */
#define TFS_COMMIT_WAITED_EVENT 3u /* cudaEventSynchronize of one event */

struct tfs_ioc_commit {
	uint32_t version;
	uint32_t flags;
	uint32_t waited; /* in: TFS_COMMIT_WAITED_*, or 0 */
	uint32_t reserved0;
	uint64_t reserved[2];
};

/* TFS_IOC_ALLOC: give an empty file `size` bytes of zeroed device memory. */
struct tfs_ioc_alloc {
	uint32_t version;
	uint32_t flags;
	uint64_t size;
	uint64_t reserved[2];
};

/* TFS_IOC_MOVE: `tier` may be any tier of the chain, one of [tiers] too
 * (ENXIO for one the mount does not have); without it, only the three
 * every mount has. */
#define TFS_MOVE_CHAIN 0x1u

/* TFS_IOC_MOVE: move the buffer to `tier` (EBUSY while another file holds
 * it with a write export). Needs write permission on the file, whatever the
 * fd's mode (EACCES; the owner and root always may), as setting
 * user.tierfs.tier does; EDQUOT when a move to the device or host would
 * take the caller past its [device] or [host] user_share; EROFS on a
 * read-only mount. */
struct tfs_ioc_move {
	uint32_t version;
	uint32_t flags;
	uint32_t tier; /* enum tfs_tier, or with TFS_MOVE_CHAIN any tier */
	uint32_t reserved0;
	uint64_t reserved[2];
};

/* TFS_IOC_STAT: report a tier of [tiers] as its place in the chain, where
 * without it every disk-kind tier reads TFS_TIER_DISK. */
#define TFS_STAT_CHAIN 0x1u

/* TFS_IOC_STAT: where the buffer is and how much it takes there. */
struct tfs_ioc_stat {
	uint32_t version;
	uint32_t flags; /* in: TFS_STAT_* */
	uint32_t tier; /* out: enum tfs_tier, or as TFS_STAT_CHAIN says */
	uint32_t pins; /* out: explicit pins */
	uint32_t leases; /* out: exports and I/O in flight */
	uint32_t reserved0;
	uint64_t size; /* out */
	uint64_t stored_size; /* out */
	uint64_t last_access_ns; /* out */
	uint64_t generation; /* out */
	uint64_t reserved[4];
};

/* TFS_IOC_RECLAIM: pick the GPU by `uuid` instead of `gpu`. */
#define TFS_RECLAIM_UUID 0x1u

/*
 * TFS_IOC_RECLAIM: a GPU program needs device memory. The daemon spills the
 * least recently used buffers of one GPU to host (or disk) until it has
 * given back at least `bytes` bytes of that GPU's memory, or nothing more
 * can move (every buffer left is leased, pinned or in use), and returns
 * once the memory is released to the driver. Works on any descriptor of the
 * mount, a directory's included, whatever it was opened for: it moves no
 * byte of any file, only where buffers live, as writing a file would.
 * Returns 0 with `freed` below `bytes` when nothing more could move;
 * ENODEV without a device tier, ENXIO for a GPU the daemon does not use.
 */
struct tfs_ioc_reclaim {
	uint32_t version;
	uint32_t flags; /* in: TFS_RECLAIM_* */
	int32_t gpu; /* in: GPU ordinal as the daemon numbers them
			* ([device] gpu); -1: the daemon's default GPU */
	uint32_t reserved0;
	uint64_t bytes; /* in: free at least this many */
	uint64_t freed; /* out: bytes of device memory given back */
	uint8_t uuid[16]; /* in, with TFS_RECLAIM_UUID: the GPU's UUID */
	uint64_t reserved[4];
};

/* TFS_IOC_PREFETCH: return only once the buffer is there, or with the
 * error that kept it from getting there. */
#define TFS_PREFETCH_WAIT 0x1u

/* TFS_IOC_PREFETCH's `state` */
enum tfs_prefetch_state {
	TFS_PREFETCH_THERE = 1, /* in the tier or a faster one already */
	TFS_PREFETCH_QUEUED = 2, /* queued; the call did not wait */
	TFS_PREFETCH_DONE = 3, /* TFS_PREFETCH_WAIT: brought there */
};

/*
 * TFS_IOC_PREFETCH: bring the buffer up to `tier` (device or host; the
 * disk tier is always reached) in the background, as a read would bring
 * it up, and return at once: with TFS_PREFETCH_THERE when it is in that
 * tier or a faster one already (nothing is queued), else with
 * TFS_PREFETCH_QUEUED. With TFS_PREFETCH_WAIT the call returns once it is
 * there (TFS_PREFETCH_DONE) or with the errno of the move that failed
 * (ENOSPC, EDQUOT past the caller's user_share, EBUSY for a pinned
 * buffer, EIO); a prefetch of the same buffer already queued is joined,
 * not queued twice. Buffers move whole: `offset` and `length` (0: to the
 * end) say which bytes the caller will read and are checked, not used
 * yet. Making room evicts only buffers that may move: never a pinned or
 * leased one. Needs the file open for reading (EBADF), as a read does;
 * ENODEV for the device tier of a mount without one; EAGAIN when the
 * queue is full ("prefetch.pending" and "prefetch.max" of
 * user.tierfs.stats).
 */
struct tfs_ioc_prefetch {
	uint32_t version;
	uint32_t flags; /* in: TFS_PREFETCH_* */
	uint32_t tier; /* in: enum tfs_tier */
	uint32_t state; /* out: enum tfs_prefetch_state; in: 0 */
	uint64_t offset; /* in */
	uint64_t length; /* in: 0: to the end */
	uint32_t pending; /* out: prefetches queued, this one's included */
	uint32_t reserved0;
	uint64_t reserved[3];
};

#define TFS_IOC_EXPORT _IOWR(TFS_IOC_MAGIC, 1, struct tfs_ioc_export)
#define TFS_IOC_RELEASE _IOW(TFS_IOC_MAGIC, 2, struct tfs_ioc_release)
#define TFS_IOC_COMMIT _IOW(TFS_IOC_MAGIC, 3, struct tfs_ioc_commit)
#define TFS_IOC_ALLOC _IOW(TFS_IOC_MAGIC, 4, struct tfs_ioc_alloc)
#define TFS_IOC_MOVE _IOW(TFS_IOC_MAGIC, 5, struct tfs_ioc_move)
#define TFS_IOC_STAT _IOWR(TFS_IOC_MAGIC, 6, struct tfs_ioc_stat)
#define TFS_IOC_RECLAIM _IOWR(TFS_IOC_MAGIC, 7, struct tfs_ioc_reclaim)
#define TFS_IOC_PREFETCH _IOWR(TFS_IOC_MAGIC, 8, struct tfs_ioc_prefetch)

static_assert(sizeof(struct tfs_ioc_export) == 152, "export ABI");
static_assert(sizeof(struct tfs_ioc_release) == 32, "release ABI");
static_assert(sizeof(struct tfs_ioc_commit) == 32, "commit ABI");
static_assert(sizeof(struct tfs_ioc_alloc) == 32, "alloc ABI");
static_assert(sizeof(struct tfs_ioc_move) == 32, "move ABI");
static_assert(sizeof(struct tfs_ioc_stat) == 88, "stat ABI");
static_assert(sizeof(struct tfs_ioc_reclaim) == 80, "reclaim ABI");
static_assert(sizeof(struct tfs_ioc_prefetch) == 64, "prefetch ABI");

#endif /* TIERFS_H */
