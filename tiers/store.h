/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The buffer store: every regular file's bytes are one struct tier_buf, whose
 * copies live in the device, host and disk tiers. The fastest tier holding a
 * copy is the buffer's tier; lower copies are clean copies of it, kept until
 * the buffer is modified or their tier needs the room.
 *
 * Writes land in the host copy; tier_buf_register() (last close, fsync)
 * places the buffer in its placement tier. Reads copy from the fastest copy,
 * unspilling as the policy says. When a tier is over its limit, least
 * recently used buffers move down: in the background above the high
 * watermark, synchronously when an allocation does not fit.
 *
 * Locks, in the order they are taken:
 *   buf->lock (rwlock)  ->  store->lock (mutex)
 * Code holding store->lock only ever try-locks a buffer. No lock is held
 * across a device copy, lz4 or disk I/O of another buffer.
 *
 * All functions return 0 or a byte count on success, -errno on failure.
 */
#ifndef TFS_TIERS_STORE_H
#define TFS_TIERS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "tierfs.h"
#include "config/config.h"

struct tier_store;
struct tier_buf;

/* Per-buffer state, as shown by xattrs, TFS_IOC_STAT and tierfsctl. */
struct tier_buf_stat {
	enum tfs_tier tier; /* a disk-kind tier of [tiers] reads as disk */
	int chain; /* its index in the chain (tier_store_tier_name()) */
	uint64_t size; /* logical */
	uint64_t stored_size; /* bytes it takes in its tier */
	uint64_t blocks; /* 512-byte blocks for st_blocks */
	uint64_t last_access_ns;
	uint32_t pins; /* the hard pin */
	uint32_t soft; /* the soft pin's level, 0: none */
	uint32_t soft_ttl; /* its time to live in seconds, 0: none */
	uint32_t leases;
	uint64_t generation;
	int gpu; /* ordinal of the GPU holding the device copy; -1: none */
};

struct tier_usage {
	uint64_t used; /* bytes held by copies in this tier */
	uint64_t limit;
	uint64_t buffers; /* buffers with a copy here */
	uint64_t spill_bytes; /* bytes moved out of this tier, down */
	uint64_t unspill_bytes; /* bytes moved into this tier, up */
	uint64_t spills; /* buffers moved out of this tier, down */
	uint64_t unspills; /* buffers moved into this tier, up */
	/* Bytes copied into this tier to make copies: spills from above,
	 * unspills from below, placements. A move that only drops a copy
	 * whose lower copy is clean counts in spill_bytes, not here. */
	uint64_t written_bytes;
	/* Writes refused with ENOSPC because this tier, the last that could
	 * take the bytes, had no room: write(2), fallocate, and the flush at
	 * close or fsync. */
	uint64_t enospc;
	/* Buffers and bytes promotion brought up into this tier when it had
	 * room again ([policy] promote): also counted in unspills. */
	uint64_t promotes, promote_bytes;
};

struct tier_store_stats {
	char backend[16]; /* "cuda", "sim", "none" */
	char device_model[64];
	bool has_device;
	/* "ok", "failed" (a sticky error: see tierfs(8)) or "none" */
	char device_state[8];
	/* Each tier of the chain by its index (tier_store_tier_name()):
	 * device, host, disk, then those of [tiers], ntiers in all. */
	struct tier_usage tier[TFS_TIER_MAX];
	unsigned int ntiers;
	uint64_t files; /* buffers alive */
	uint64_t logical_bytes; /* sum of sizes */
	/* Scans for room that ended short with every candidate in use
	 * (leased, pinned, in I/O, being written): contention. */
	uint64_t evict_nothing_movable;
	/* Moves down that were tried and failed: trouble, each logged. */
	uint64_t evict_move_errors;
	uint64_t checksum_errors; /* spill chunks that failed their checks */
	uint64_t spill_read_errors; /* reads of spill files that failed */
	uint64_t spill_write_errors; /* writes of spill files that failed */
	uint64_t spill_punch_errors; /* room a rewrite freed, not given back */
	uint64_t host_alloc_failures; /* host chunks the system refused */
	/* The disk tier is full now (a move down found no room), and how
	 * many times it became so. */
	bool disk_full;
	uint64_t disk_full_count;
	/* Bytes of free chunks the host pool keeps for the next writes. */
	uint64_t host_pool;
	/* The device's memory at the reserve watcher's last poll (0 before
	 * one, or without a device that can tell), the reserve, and the
	 * room other processes leave the device tier (at most its limit),
	 * summed over the GPUs. */
	uint64_t device_free, device_others, device_reserve, device_room;
	/* Device bytes exports hold besides the buffers' own copies, part
	 * of the device tier's use: read snapshots, and blocks a process
	 * may still map after its lease ended (freed when it exits). */
	uint64_t device_export_held;
	int gpu; /* the default GPU; -1 without a device tier */
	/* Each GPU's device tier, in the order [device] gpus lists them. */
	struct tier_gpu_stats {
		int gpu; /* ordinal */
		char model[64];
		uint64_t used, limit, buffers, reserve, free, others, room;
		uint64_t reclaims, reclaimed_bytes, yields, yield_bytes;
		uint64_t moves_in, moves_out; /* buffers from GPU to GPU */
	} gpus[CFG_MAX_GPUS];
	unsigned int ngpus;
	/* Reclaims asked and yields to other processes, with the bytes each
	 * gave back. */
	uint64_t reclaims, reclaimed_bytes, yields, yield_bytes;
	/* Write-through: buffers and bytes copied down to disk, copies
	 * waiting, copies that failed (each logged). Buffers soft-pinned. */
	uint64_t wt_copies, wt_bytes, wt_pending, wt_errors;
	uint64_t soft_pins;
	/* Reads admission kept off a full device tier. */
	uint64_t admit_rejects;
};

/*
 * Create the store for @cfg: open the device backend (auto falls back to
 * none with one log line; an explicit "cuda" that cannot start fails with
 * the CUDA error in @err), create the disk tier's private directory named
 * after @tag, set the limits (defaults from RAM, the memory cgroup, free
 * disk and device memory, each logged with where it came from; a limit
 * above what the machine has fails with the reason in @err unless
 * policy.overcommit), start the background spiller. Call after the daemon
 * forked.
 */
int tier_store_init(struct tier_store **out, const struct tfs_config *cfg,
		    const char *tag, char *err, size_t errlen);

/* Stop the spiller, free every buffer and the tiers. No buffer may be in
 * use. */
void tier_store_destroy(struct tier_store *s);

/*
 * Apply new limits and policy from @cfg (SIGHUP). Backend, disk path and
 * chunk size cannot change live and are ignored. Shrinking a limit spills
 * down to it before this returns. A limit above what the machine has is
 * refused as at init: -EINVAL with the reason in @err, nothing changed;
 * -ENOSPC, with the tier and its use in @err, when a tier stays over its
 * new limit (its buffers are pinned, mapped or in use): the new limits and
 * policy are applied all the same, and the spiller goes on down to them.
 */
int tier_store_reconfigure(struct tier_store *s, const struct tfs_config *cfg,
			   char *err, size_t errlen);

void tier_store_stats(struct tier_store *s, struct tier_store_stats *out);

/*
 * Write the stats as "key=value\n" lines (the user.tierfs.stats format,
 * documented in tierfs(8)) into @buf. Returns the length it needs, which may
 * exceed @len (then @buf holds a truncated copy), like snprintf.
 */
size_t tier_store_format_stats(struct tier_store *s, char *buf, size_t len);

/*
 * Append printf output to such a text: @n is its length so far, which may
 * already exceed @len; returns the new length, counting what did not fit.
 */
size_t tier_appendf(char *buf, size_t len, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Give device memory back to a GPU program (TFS_IOC_RECLAIM): spill the
 * coldest device buffers of GPU @gpu (-1: the default) until at least
 * @bytes of what the tier holds is given back or nothing more can move,
 * then wait until the device has the memory back. *@freed: bytes given
 * back, which may be less than @bytes (0 is returned then too). -ENODEV
 * without a device tier, -ENXIO for a GPU the store does not use.
 */
int tier_store_reclaim(struct tier_store *s, int gpu, uint64_t bytes,
		       uint64_t *freed);

/* The ordinal of the default GPU ([device] gpu); -ENODEV without a device
 * tier. */
int tier_store_default_gpu(struct tier_store *s);

/* The ordinal of the store's GPU whose UUID is @uuid; -ENXIO when none,
 * -ENODEV without a device tier. */
int tier_store_gpu_by_uuid(struct tier_store *s, const uint8_t uuid[16]);

/* What statfs reports, in bytes. */
struct tier_space {
	/* What the tiers use, summed as user.tierfs.stats shows them. */
	uint64_t used;
	/*
	 * What the tiers' limits leave, summed: the room of the whole
	 * mount, for many files and every tier. The disk tier's part is
	 * also no more than its filesystem has free.
	 */
	uint64_t free;
	/*
	 * The largest file one writer can still make: a file lives whole in
	 * one tier, and a new one grows in host memory, then moves to disk
	 * if host has no room for it. So the larger of what the host limit
	 * leaves and what the disk tier leaves, the disk's in whole chunks
	 * of data with what each slot adds; at most @free.
	 */
	uint64_t one_file;
};

void tier_store_space(struct tier_store *s, struct tier_space *out);

/*
 * What changed behind the back of whoever caches a buffer's bytes and
 * attributes (the kernel, for tierfs), as bits of tier_inval_fn's @what.
 */
/* Its tier changed, and with it st_blocks. */
#define TIER_INVAL_ATTR 0x1u
/* Its bytes or size changed other than through tier_buf_write(),
 * tier_buf_truncate(), tier_buf_fallocate() or tier_buf_copy(): a GPU
 * program wrote it (commit, the end of a write export), or it was sized on
 * the device (tier_buf_alloc_device()). */
#define TIER_INVAL_DATA 0x2u
/* No copy is left in device or host memory: it went to disk, and a cached
 * copy of its bytes is all that still takes memory. */
#define TIER_INVAL_GONE 0x4u

/*
 * Called with the buffer's lock held and never the store's, from whichever
 * thread changed the buffer: a request, the spiller. It must not call into
 * the store, block, or do the invalidation itself (the kernel's waits on
 * locked pages, whose reads may be waiting on this buffer): queue @cookie
 * and @what, and return.
 */
typedef void (*tier_inval_fn)(void *ctx, uint64_t cookie, unsigned int what);

/*
 * Call @fn (NULL: nobody) for every change above of a buffer with a cookie.
 * Set it before the first tier_buf_new(); it is read without a lock.
 */
void tier_store_set_inval(struct tier_store *s, tier_inval_fn fn, void *ctx);

/* A new empty buffer in the host tier. */
int tier_buf_new(struct tier_store *s, struct tier_buf **out);

/* What tier_inval_fn is called with for @b (tierfs: the inode number); 0,
 * the default, means it is not called for @b. No lock; any time. */
void tier_buf_set_cookie(struct tier_buf *b, uint64_t cookie);

/*
 * An open of @b. It counts as an access for the eviction policy: reads the
 * kernel serves from its page cache never reach the store, and without it a
 * file read only from there would look cold and be spilled. Returns true
 * when the pages cached for @b may be kept, false when they must be
 * dropped: its bytes changed behind them (TIER_INVAL_DATA) since the last
 * open that returned false, or a GPU program may be writing it now (a write
 * export is held).
 */
bool tier_buf_opened(struct tier_buf *b);

/*
 * Flag of a read or an open that is no access (a descriptor opened with
 * O_NOATIME): the buffer is not brought up as policy unspill says and
 * keeps its place in the eviction order. A reader that reads a file once
 * (a backup, a store that deletes what it has read) then pushes nothing
 * else out of the faster tiers, and costs no compression of what that
 * would have spilled.
 */
#define TIER_READ_NOACCESS 1u

/* tier_buf_opened() with TIER_READ_* @flags. */
bool tier_buf_opened_as(struct tier_buf *b, unsigned flags);

/* The false of tier_buf_opened() never reached the kernel (the open was
 * interrupted): the next open must drop the pages again. */
void tier_buf_cache_stale(struct tier_buf *b);

/* Free the buffer and every copy. Leases must be gone. */
void tier_buf_destroy(struct tier_buf *b);

uint64_t tier_buf_size(struct tier_buf *b);

/* Bytes the store's own record of one buffer takes, without its data: what
 * a file costs the namespace's metadata budget besides its inode. */
size_t tier_buf_footprint(void);

/* Read up to @len bytes at @off into @dst; short at end of file. */
ssize_t tier_buf_read(struct tier_buf *b, void *dst, size_t len, off_t off);

/* tier_buf_read() with TIER_READ_* @flags. */
ssize_t tier_buf_read_as(struct tier_buf *b, void *dst, size_t len, off_t off,
			 unsigned flags);

/*
 * Zero-copy read: point @iov (at most @max entries) at the bytes of
 * [off, off+len) where the daemon can address them, the host copy or a sim
 * device allocation (holes point at zeroes). Returns the byte count (short
 * at end of file) with *niov set; when it is above 0, an I/O reference
 * keeps those bytes from being freed or moved until tier_buf_read_done(). Or
 * -EAGAIN when the fastest copy is not addressable (disk, CUDA) or @max is
 * too small: then use tier_buf_read(). Writes may change the bytes
 * meanwhile, as with any concurrent read and write.
 */
ssize_t tier_buf_read_iov(struct tier_buf *b, size_t len, off_t off,
			  struct iovec *iov, int max, int *niov);

/* tier_buf_read_iov() with TIER_READ_* @flags. */
ssize_t tier_buf_read_iov_as(struct tier_buf *b, size_t len, off_t off,
			     struct iovec *iov, int max, int *niov,
			     unsigned flags);

/* Drop the I/O reference of a successful tier_buf_read_iov(). */
void tier_buf_read_done(struct tier_buf *b);

/* Write @len bytes at @off, growing the buffer. -ENOSPC when no tier has
 * room; nothing already stored is lost then. */
ssize_t tier_buf_write(struct tier_buf *b, const void *src, size_t len,
		       off_t off);

/* Set the size; growth reads as zeroes and costs no memory. */
int tier_buf_truncate(struct tier_buf *b, uint64_t size);

/* tier_buf_fallocate() modes, as FALLOC_FL_KEEP_SIZE and _PUNCH_HOLE. */
#define TIER_FALLOC_KEEP_SIZE 0x1u
#define TIER_FALLOC_PUNCH_HOLE 0x2u

/*
 * fallocate(2) as tmpfs has it. Without PUNCH_HOLE: allocate the pages of
 * [off, off+len) that are not, charging the tier the bytes would be
 * written to (host, or disk for a buffer larger than host) as a write
 * does; they read as zeroes and stay holes to SEEK_DATA until written. The
 * size grows to off+len unless KEEP_SIZE. -ENOSPC when the tiers have no
 * room for all of it: then nothing is allocated. PUNCH_HOLE (with
 * KEEP_SIZE only, else -EOPNOTSUPP): pages wholly inside the range are
 * freed in every tier, the bytes of the others zeroed. -EBUSY while a GPU
 * program maps the buffer.
 */
int tier_buf_fallocate(struct tier_buf *b, unsigned int mode, uint64_t off,
		       uint64_t len);

/*
 * SEEK_DATA (@hole false) and SEEK_HOLE: the first data or hole at or
 * after @off, exactly at page granularity as tmpfs answers (pages never
 * written, and pages fallocate took that nothing wrote, are holes; the
 * end of the file is one). -ENXIO when @off is at or past the end, or
 * (SEEK_DATA) there is no data after it.
 */
int64_t tier_buf_seek(struct tier_buf *b, uint64_t off, bool hole);

/* Copy a range between buffers (or within one). Returns bytes copied. */
ssize_t tier_buf_copy(struct tier_buf *dst, uint64_t dst_off,
		      struct tier_buf *src, uint64_t src_off, size_t len);

/* Last close or fsync: place the buffer in its placement tier. */
int tier_buf_register(struct tier_buf *b);

/*
 * Move the buffer to @tier now (spill or prefetch). -EBUSY when a lease
 * that holds it (a write export) belongs to someone other than @owner (0:
 * anyone counts), -ENOSPC when the tier has no room, -ENODEV when there is
 * no device tier, -ENXIO for a tier past TFS_TIER_DISK (one of [tiers],
 * which no mount serves yet). tier_buf_move_as() does it for @uid: a move
 * to the device or host fails with -EDQUOT when the buffer would take @uid
 * past that tier's user_share (uid 0 never does); tier_buf_move() is for
 * root.
 */
int tier_buf_move(struct tier_buf *b, enum tfs_tier tier, uint64_t owner);
int tier_buf_move_as(struct tier_buf *b, enum tfs_tier tier, uint64_t owner,
		     uid_t uid);

/*
 * Move the buffer to the device tier of GPU @gpu (its ordinal) for @uid, as
 * tier_buf_move_as() does: a device copy on another GPU of the store is
 * copied there, byte for byte, and freed where it was. tier_buf_move_as()
 * leaves a device copy on whichever GPU holds it, and places one on the
 * default GPU. -ENXIO for a GPU the store does not serve, -EBUSY when a
 * lease holds the device copy on its GPU.
 */
int tier_buf_move_gpu(struct tier_buf *b, int gpu, uint64_t owner, uid_t uid);

/*
 * The explicit pin: a pinned buffer never moves. A flag, not a count, as
 * user.tierfs.pin shows it: pinning twice and unpinning once unpins.
 * tier_buf_pin_as() charges what the buffer holds on the device and in
 * host memory to @uid's [device] and [host] user_share (-EDQUOT past
 * either) until it is unpinned, by anyone, and the charge follows the
 * buffer meanwhile: a write that would take the pinner past a share
 * fails with -EDQUOT. tier_buf_pin() is for root, who is not counted.
 */
int tier_buf_pin(struct tier_buf *b);
int tier_buf_pin_as(struct tier_buf *b, uid_t uid);
int tier_buf_unpin(struct tier_buf *b);

/*
 * The soft pin: @b moves only once every buffer without one has moved
 * (those of a lower @level first, 1 to TIER_SOFT_PIN_MAX), and its pin
 * lapses once it has gone @ttl seconds (at most TIER_SOFT_TTL_MAX; 0:
 * never) without a read, write or open, noticed within a second; setting
 * it counts as an access. Charged
 * to @uid's shares as the hard pin is; either kind replaces the other,
 * and tier_buf_unpin() ends both. -EINVAL for a level or ttl out of range.
 */
#define TIER_SOFT_PIN_MAX 7
#define TIER_SOFT_TTL_MAX (7u * 24 * 3600)
int tier_buf_soft_pin_as(struct tier_buf *b, uid_t uid, unsigned int level,
			 uint32_t ttl);

void tier_buf_stat(struct tier_buf *b, struct tier_buf_stat *st);

/*
 * Host memory that is no copy of the store's but holds a file's bytes
 * beside it (fs/passthrough.c's replicas): @delta bytes more, or fewer,
 * in host.used, so that the host limit counts it and the spiller makes
 * room for it as for a reservation. Never fails: the memory is taken
 * already; what does not fit moves other buffers down.
 */
void tier_store_charge_outside(struct tier_store *s, int64_t delta);

/*
 * The write policy of a buffer: the mount's ([policy] write), or its own.
 * Write-through makes a clean disk copy in the background soon after the
 * last close of a written buffer (tier_buf_register()), so that evicting
 * it later writes nothing; write-back writes it down only when it is
 * evicted.
 */
enum tier_write_policy {
	TIER_WRITE_DEFAULT = 0, /* the mount's */
	TIER_WRITE_BACK = 1,
	TIER_WRITE_THROUGH = 2,
};
void tier_buf_set_write_policy(struct tier_buf *b, enum tier_write_policy p);
/* The effective one: never TIER_WRITE_DEFAULT. */
enum tier_write_policy tier_buf_write_policy(struct tier_buf *b);
/* The mount's: TIER_WRITE_BACK or TIER_WRITE_THROUGH. */
enum tier_write_policy tier_store_write_policy(struct tier_store *s);

/*
 * Device export for GPU programs, for a process of @uid/@gid. @owner
 * identifies the open file holding the lease (one lease per owner and
 * buffer; exporting again replaces it). Export unspills to the device and
 * fills @out.
 *
 * A read export (!@writable) never lets its holder change the buffer: with
 * a backend that has read snapshots (sim) it is a private copy of the bytes
 * as they are now, which holds device room of its own but nothing of the
 * buffer, so the buffer is written, truncated, moved and exported by others
 * as if it were not there. A write export maps the live device copy, which
 * then stays in place, and drops the lower copies (they would be stale);
 * one write lease at a time (-EBUSY).
 *
 * @gpu is the GPU to export on, an ordinal the store serves (the caller's,
 * from tier_store_gpu_by_uuid()): a device copy on another GPU of the store
 * is moved there first (-EBUSY while a lease holds it where it is), and a
 * buffer without one is placed there. -1: the device copy stays on
 * whichever GPU holds it, and a buffer without one goes to the default
 * GPU. -ENXIO for a GPU the store does not serve.
 *
 * Errors: -ENODEV without a device tier, -ENOSPC when the buffer (or its
 * snapshot) cannot fit there, -EDQUOT past @uid's [device] user_share or
 * past its [device] user_exports live leases (@uid 0 is not counted).
 */
int tier_buf_export(struct tier_buf *b, uint64_t owner, uid_t uid, gid_t gid,
		    pid_t pid, int gpu, bool writable,
		    struct tfs_ioc_export *out);

/*
 * Drop @owner's lease; -ENOENT when it holds none, -ESTALE when
 * tier_buf_revoke() broke it (it is gone then too). From then on its holder
 * can neither see nor change the buffer's current bytes through it.
 * @unmapped: the process that exported (@pid of tier_buf_export) says it
 * closed its mapping, so what it mapped may be freed at once; otherwise a
 * backend that cannot revoke mappings (cuda) keeps it until that process
 * is gone (tier_dexp).
 */
int tier_buf_unexport(struct tier_buf *b, uint64_t owner, bool unmapped);

/* The device copy was written through a write export of @owner: drop the
 * other copies and bump the generation. -EPERM without such an export,
 * -ESTALE (once) when tier_buf_revoke() broke it. */
int tier_buf_commit(struct tier_buf *b, uint64_t owner);

/* Whether a lease holds @b (a write export); cheap, for a caller about to
 * decide whether to break it. */
bool tier_buf_held(struct tier_buf *b);

/* tier_buf_revoke()'s @keep: break every lease, of whoever. */
#define TIER_REVOKE_ALL ((uid_t)-1)

/*
 * Break the leases that hold @b (write exports) of every exporter but
 * @keep, as a broken fcntl lease: each ends at once as at release (its
 * holder's mapping is detached, what it wrote so far kept), and the
 * holder's next tier_buf_commit() or tier_buf_unexport() of it returns
 * -ESTALE. For the file's owner truncating, rewriting, moving or
 * re-permitting it, and for chattr +i and +a. Returns how many were
 * broken.
 */
int tier_buf_revoke(struct tier_buf *b, uid_t keep);

/* Size an empty buffer to @size bytes of zeroed device memory. -EEXIST
 * when it is not empty. */
int tier_buf_alloc_device(struct tier_buf *b, uint64_t size);

/*
 * Persistent mounts ([disk] persist). The store keeps, per buffer, the
 * version last committed to the disk tier; the caller's metadata journal
 * names it by its image, opaque there: the disk tier's chunk table
 * (tier_dobj_map()) and the page maps that the table and the size alone
 * do not say (st_pages_image()). See doc/design.md.
 */

/*
 * What the daemon does, for a daemon that finds the persistent directory
 * locked (tier_disk_set_state()): "serving" with the mount point once
 * mounted, "saving" once unmounted, "stopped" once everything is saved.
 * No-op unless persistent; a failure is logged.
 */
void tier_store_set_state(struct tier_store *s, const char *state,
			  const char *mnt);

/* Persistent: 1 when the daemon before this one stopped cleanly, -1 when
 * it died running, 0 when it did not say (a new directory, an older
 * tierfs). */
int tier_store_prev_stop(struct tier_store *s);

/* Whether the store was made persistent; then the spill directory's
 * descriptor and path (owned by the store) for the journal's files. */
bool tier_store_persistent(struct tier_store *s);
int tier_store_dirfd(struct tier_store *s);
const char *tier_store_dir(struct tier_store *s);

/* The chunk size the store and its disk tier work in. */
uint32_t tier_store_chunk_size(struct tier_store *s);

/* The buffer's id, which names its spill file; stable for its life. */
uint64_t tier_buf_id(struct tier_buf *b);

/* Ids from tier_buf_new() start above @next (one past the highest id a
 * journal knows), so a restart never reuses one. */
void tier_store_set_next_id(struct tier_store *s, uint64_t next);
uint64_t tier_store_next_id(struct tier_store *s);

/*
 * What tier_buf_adopt() could not keep of a recorded version, or had to
 * mend, for the caller's notes: chunk by chunk, in @text, cut short with
 * "..." past its room (the log has every line).
 */
struct tier_adopt_note {
	uint32_t lost; /* chunks whose written bytes are gone: holes now */
	uint32_t mended; /* disagreements mended with every byte kept */
	size_t len;
	char text[512];
	/* private: the chunks said lost, so that each counts once */
	uint64_t said[32];
	uint32_t nsaid;
};

/* tier_buf_adopt(): keep what reads back rather than refuse. */
#define TIER_ADOPT_SALVAGE 0x1u

/*
 * A buffer for a committed version found at start: @size bytes that the
 * image @map (what tier_buf_sync() handed its callback, or an earlier
 * tierfs's chunk table alone) describes, in the spill file of @id. The
 * buffer is on the disk tier and nothing is read or even opened until it
 * is used. The size never limits the table: a file may hold pages past its
 * end (fallocate's KEEP_SIZE) and no chunk before it (holes).
 *
 * Where the image disagrees with itself without losing a byte (a page
 * map lost, pages fallocate took that the chunk table lacks), the buffer
 * is kept and @note says what was mended. Without TIER_ADOPT_SALVAGE,
 * -EINVAL when written bytes would be lost (an entry of the chunk table no
 * chunk can have, a slot used twice, pages the table lacks); with it,
 * every chunk that reads back is kept, the others are holes, and @note
 * says which and why (-EIO when the spill file cannot be read at all).
 * -ENOMEM, -EFBIG.
 */
int tier_buf_adopt(struct tier_store *s, uint64_t id, uint64_t size,
		   const void *map, size_t len, unsigned int flags,
		   struct tier_adopt_note *note, struct tier_buf **out);

/*
 * The image of @b's disk copy, as tier_buf_sync() records it: right after
 * tier_buf_adopt(), its committed version, as it was kept. malloc'd into
 * *@map; 0, -ENOENT without a disk copy, -ENOMEM. Takes b->lock.
 */
int tier_buf_image(struct tier_buf *b, void **map, size_t *len);

/* The ids of the spill files on disk, malloc'd into *@ids; and removing
 * the file of an id no buffer has (one a crash left). */
int tier_store_spill_ids(struct tier_store *s, uint64_t **ids, size_t *n);
void tier_store_spill_remove(struct tier_store *s, uint64_t id);

/*
 * Called with b->lock held for writing, from tier_buf_sync(): record
 * that buffer @id now has @size bytes as the image @map describes, and return only
 * once that record is durable (or, for TIER_SYNC_DEFER, appended). 0 or
 * -errno, which fails the sync.
 */
typedef int (*tier_sync_fn)(void *ctx, uint64_t id, uint64_t size,
			    const void *map, size_t len);

/* No fdatasync of the spill file and no commit: the caller makes the
 * file system durable (syncfs) and calls tier_buf_sync_commit(). */
#define TIER_SYNC_DEFER 0x1u

/*
 * Make the buffer's bytes durable on the disk tier: write the disk copy
 * (around the committed version), fdatasync it, hand its table to @fn,
 * then commit it, freeing what the old version alone used. Nothing is
 * done when the bytes are those committed already (returns 1 then, 0
 * after a sync). -ENOSPC when the disk tier has no room; the committed
 * version is untouched by any failure.
 */
int tier_buf_sync(struct tier_buf *b, unsigned int flags, tier_sync_fn fn,
		  void *ctx);

/* Commit what a TIER_SYNC_DEFER sync recorded, once it is durable. No
 * write may come between the two. */
int tier_buf_sync_commit(struct tier_buf *b);

/*
 * Spill files of committed versions whose buffers were destroyed wait
 * here, since the journal may still name them: take them (before making
 * the journal durable past their removal), then bury them (unlink). A
 * graves list is opaque; NULL when empty.
 */
void *tier_store_graves_take(struct tier_store *s);
void tier_store_graves_bury(struct tier_store *s, void *graves);
/* Free a graves list keeping the files (the journal could not be made
 * durable: a later start removes them as files nothing names). */
void tier_store_graves_keep(struct tier_store *s, void *graves);

/* From now on destroying a buffer keeps its committed version's file:
 * the mount is going down and the next one adopts them. */
void tier_store_keep_files(struct tier_store *s);

/* Parse "device", "host", "disk" in any case ("DISK"); -EINVAL otherwise. */
int tier_parse(const char *name, size_t len, enum tfs_tier *out);
const char *tier_name(enum tfs_tier t);
/* The name of tier @t of @s's chain (an index below its stats' ntiers):
 * tier_name()'s for the three every chain has, "disk:NAME" for one of
 * [tiers]; "?" past the chain. */
const char *tier_store_tier_name(const struct tier_store *s, int t);
/* The chain index of the tier of [tiers] named @name (@len bytes, a
 * trailing newline or NUL allowed; in any case), or -EINVAL. */
int tier_store_tier_parse(const struct tier_store *s, const char *name,
			  size_t len);

#endif
