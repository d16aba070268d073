/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Private to the store (tiers/store*.c): the structs behind store.h, the
 * rules for touching them, the tunables, and the functions the store's files
 * share. See store.h for the model.
 *
 * Access rules. Fields marked [B] are read with b->lock held for reading and
 * changed with it held for writing. Fields marked [S] are read and changed
 * with s->lock held. The [S] mirrors of [B] state (present, pi.size) exist so
 * that stat and the eviction scan never wait for a busy buffer.
 *
 * Lock order: b->lock, then s->lock. Code that holds s->lock only try-locks
 * buffers (the eviction scan), so two threads that each hold one buffer and
 * look for room can never wait on each other.
 *
 * A buffer with explicit pins or export leases is unlinked from the policy's
 * lists, so the scan never even looks at it; a buffer with I/O in flight
 * holds its lock and fails the try-lock. Either way it does not move.
 */
#ifndef TFS_TIERS_STORE_I_H
#define TFS_TIERS_STORE_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "policy/policy.h"
#include "tiers/device.h"
#include "tiers/disk.h"
#include "tiers/host.h"
#include "tiers/store.h"
#include "tiers/store_metrics_i.h"

/* Device allocations that fail with ENOMEM below our limit (fragmentation,
 * another process) evict this many more buffers before giving up. */
#define DEV_ALLOC_RETRIES 8
/* Most 64-bit words of a chunk's page bitmap: 64 MiB chunks of 4 KiB. */
#define MAP_WORDS_MAX (64u * 1024 * 1024 / TIER_PAGE / 64)
/*
 * A read or a write brings a buffer up into a tier only if it takes at most
 * this share of the tier's limit. A larger one would push out much of the
 * tier, and be pushed out itself by the next access to anything else, to be
 * fetched whole again on its next read: two readers and two writers of
 * 256 MiB files under a 768 MiB host limit spilled four times what they
 * wrote. Such buffers are read and written chunk by chunk where they are.
 * Explicit moves and exports are not limited.
 */
#define PROMOTE_SHARE 4
/*
 * What an idle host pool keeps of its free chunks: an eighth of the host
 * limit, and no more than this. The pool keeps what a busy mount frees for
 * its next writes (a page fault per 4 KiB on fresh memory is ten times
 * slower than reuse); once no chunk was taken for a second, the spiller
 * gives half of the rest back each second. An eighth of the limit alone
 * kept 753 MiB of a 6 GiB host tier after every file was deleted.
 */
#define POOL_IDLE_KEEP (16ull << 20)
/* Host memory freed (the tier's use fell) worth a malloc_trim(): packed
 * blocks go back to glibc's heaps, which keep them resident. */
#define HEAP_TRIM_MIN (4ull << 20)
/* Chunks handed to the disk tier's compression pool at once. */
#define SPILL_BATCH 8
/* Chunks copied to or from the device as one batch, waited for once. */
#define DEV_BATCH 64

/*
 * One open file's export of a buffer. A lease that holds (a write export,
 * or a read export of a backend without read snapshots) maps the device
 * copy itself, which then stays where it is until the lease ends; a
 * snapshot lease holds nothing of the buffer.
 */
struct lease {
	uint64_t owner;
	struct tier_dexp *exp; /* the backend's; unexported when it ends */
	uid_t uid; /* who exported: the share is charged to them */
	uint64_t snap; /* device bytes of a snapshot, charged to the tier */
	uint64_t share; /* bytes charged to uid's share */
	bool writable;
	bool holds;
	/*
	 * Broken by tier_buf_revoke(): ended (exp NULL, nothing charged,
	 * holds and writable false), kept only so that the holder's next
	 * commit or release hears -ESTALE once.
	 */
	bool revoked;
	uint8_t gi; /* the GPU (s->gpus index) it was exported from */
};

/*
 * What one user holds beyond eviction's reach ([device] and [host]
 * user_share, [device] user_exports): the device and host bytes of the
 * buffers they pinned (bytes[t], following the buffers' charges while
 * pinned) and of their leases (the device), and their live export
 * leases. The entry stays while any of it is nonzero.
 */
struct user_use {
	struct user_use *next;
	uid_t uid;
	uint64_t bytes[TFS_TIER_DISK]; /* indexed by TFS_TIER_DEVICE, _HOST */
	uint32_t exports;
	uint32_t pins; /* buffers it pinned */
};

/*
 * One chunk of a buffer. Its page maps say which of its TIER_PAGE pages are
 * allocated (written, or taken by fallocate) and which of those fallocate
 * took and nothing wrote yet (they read as zeroes and are holes to
 * SEEK_DATA, as on tmpfs); pages not allocated are holes that cost nothing
 * in any tier. The maps are kept whatever tier holds the buffer, so that
 * SEEK_DATA, a fetch and a spill know the layout without reading it.
 *
 * The host copy of the chunk, when there is one, is
 * - dense: a pool chunk, page p at p * TIER_PAGE, pages not allocated and
 *   pages not written kept zero; for a chunk being filled, or full;
 * - packed: a malloc'd block of the allocated pages in order, the k-th at
 *   k * TIER_PAGE, holding @hlen bytes (the rest reads as zero) in @hcap of
 *   room: a file's tail, a small file, a chunk with holes.
 * All fields are [B].
 */
struct tier_chunk {
	char *host; /* NULL: no host copy of it, or nothing allocated */
	/* NULL: the allocated pages are [0, npages), none unwritten. Else
	 * the bitmap of allocated pages, then (when unw) the bitmap of
	 * unwritten ones, map words each. */
	uint64_t *map;
	uint32_t hlen; /* packed: bytes of it stored */
	uint32_t hcap; /* packed: bytes allocated, charged as malloc sizes */
	uint16_t npages; /* allocated pages */
	bool dense;
	bool unw; /* map holds a bitmap of unwritten pages */
};

/*
 * One GPU's device tier: its backend instance, limit, reserve, LRU (the
 * device list of the policy, filtered by tier_buf.dgi) and counters.
 */
struct st_gpu {
	/* Set at init, read-only after. */
	struct tier_dev *dev;
	struct tier_dev_info info;
	int ordinal; /* the GPU's ordinal on the machine */

	uint64_t used, limit, buffers; /* [S] as in struct tier_usage */
	/*
	 * The device's memory as the reserve watcher last saw it
	 * (store_reclaim.c): what other processes leave the tier,
	 * total - others - reserve, or UINT64_MAX while nobody else uses
	 * the device; placements stay under it as under the limit. [S]
	 */
	uint64_t room;
	uint64_t reserve; /* [S] bytes, from [device] reserve */
	/* [S] Part of used: what the backend's exports hold besides the
	 * buffers' copies (export_held: snapshots, blocks of ended leases a
	 * process may still map), as last asked (st_exp_sync()). */
	uint64_t exp_held;
	uint64_t free, others; /* [S] last poll */
	uint64_t reclaims, reclaimed_bytes, yields, yield_bytes; /* [S] */
	uint64_t moves_in, moves_out; /* [S] buffers moved from GPU to GPU */
	bool yield_stuck; /* [S] pressure, and nothing could move: said once */
	bool warned; /* the watcher's own: meminfo failed, said once */
};

/*
 * A disk-kind tier of [tiers], below the [disk] tier: another instance of
 * the disk code (lz4 chunks and CRC32C in a private directory under its
 * path), with its own limit. Set at init, read-only after but for the
 * limit, which is use[]'s.
 */
struct st_xtier {
	struct tier_disk *disk;
	char *path; /* the configured path, for statvfs */
	char name[CFG_TIER_NAME_MAX + 8]; /* "disk:NAME", as users write it */
	struct cfg_size limit; /* as configured, to tell a reload's apart */
};

struct tier_store {
	/* Outermost store lock; see the access rules above. */
	pthread_mutex_t lock;
	struct pol pol; /* [S] */
	/* [S] Each tier of the chain by its index: the device (all GPUs),
	 * host, [disk], then the tiers of [tiers] (xt[i] at
	 * TFS_TIER_DISK + 1 + i). */
	struct tier_usage use[TFS_TIER_MAX];
	uint64_t files, logical; /* [S] */
	/* Scans that ended short of room with no move failed: everything in
	 * the tier was leased, pinned, in I/O, being written or the caller
	 * itself. Contention, not trouble. [S] */
	uint64_t evict_nothing_movable;
	/* Victims whose move down was tried and failed (the tier below could
	 * not take the copy), each also logged. [S] */
	uint64_t evict_move_errors;
	/* Failed moves other than for want of room are logged at most once
	 * a second, with how many were not. atomic */
	uint64_t move_log_ns, move_log_quiet;
	/*
	 * The disk tier is full: a move down failed for want of its room. A
	 * state, logged once when it starts and once when it ends (room was
	 * made: its use fell or its limit rose, or a spill went through),
	 * not a line and a retry per victim every second: while it lasts,
	 * scans pass over buffers whose move needs the disk, and the spiller
	 * tries again after a back-off that doubles from 1 s to 64 s. Before,
	 * a full disk made the spiller fail every victim each second, 60
	 * lines and errors a second with nothing writing. [S]
	 */
	bool disk_full;
	uint64_t disk_full_count; /* times it became full */
	uint64_t disk_full_refused; /* moves refused while it lasted */
	uint64_t disk_full_ns; /* when it became full (CLOCK_MONOTONIC) */
	uint64_t disk_full_used, disk_full_limit; /* the disk tier then */
	uint64_t disk_full_need; /* the size of the buffer it refused */
	uint64_t disk_full_retry_ns; /* when the spiller may try again */
	uint32_t disk_full_backoff_s;
	uint64_t host_alloc_failures; /* atomic, each also logged */
	uint64_t next_id; /* [S] */
	double high_wm, target; /* [S] */
	enum cfg_unspill unspill; /* [S] */
	/* [S] Promotion when room returns ([policy] promote): on, the bytes
	 * a second it may move up, and what it may move now (the spiller's
	 * alone: refilled by the time since promote_ns, negative after a
	 * buffer larger than what was left). */
	bool promote;
	uint64_t promote_rate;
	int64_t promote_credit;
	uint64_t promote_ns;
	/* [S] Bytes of the device (TFS_TIER_DEVICE) and of host memory
	 * (TFS_TIER_HOST) one user may hold, 0: any; live exports one user
	 * may hold, 0: any. */
	uint64_t user_share[TFS_TIER_DISK];
	uint32_t user_exports;
	struct user_use *users; /* [S] users holding any */
	/* [S] Write-through: the mount's policy, the buffers waiting for
	 * their disk copy (st_wt_run()), and what it did. */
	bool write_through;
	struct tier_buf **wtq;
	size_t nwtq, wtq_cap;
	uint32_t wt_active; /* taken off the queue, being written */
	uint64_t wt_copies, wt_bytes, wt_errors;
	/* [S] Admission: on when the sketch is allocated; reads it kept
	 * off the device. */
	struct pol_sketch sketch;
	uint64_t admit_rejects;
	/* [S] Buffers soft-pinned, and when st_soft_lapse() last looked. */
	uint32_t soft_pins;
	uint64_t soft_check_ns;
	uid_t self_uid; /* the daemon's euid, as exempt as root; set at init */

	/* Counters of reclaims asked (TFS_IOC_RECLAIM) and of yields to
	 * other processes' pressure, with the bytes each gave back, all GPUs
	 * together. [S] */
	uint64_t reclaims, reclaimed_bytes, yields, yield_bytes;
	unsigned int poll_ms; /* [S] */

	/*
	 * The device tiers, one per GPU served, in the order [device] gpus
	 * lists them (set at init, ngpus 0 without a device tier; their [S]
	 * fields as struct st_gpu says). use[]'s
	 * device entry is their sum; placements go to gpus[defg] unless a
	 * caller names another.
	 */
	struct st_gpu gpus[CFG_MAX_GPUS];
	unsigned int ngpus, defg;

	/* Set at init, read-only after. The [disk] tier, and the disk-kind
	 * tiers below it ([tiers]), nx of them. */
	struct tier_disk *disk;
	struct st_xtier xt[CFG_MAX_TIERS];
	unsigned int nx;
	struct host_pool *pool;
	uint32_t chunk_size;
	uint64_t host_capacity, disk_capacity; /* RAM; the disk's size */
	/* The memory cgroup's limit (0: none) and its path, read at init. */
	uint64_t cgroup_mem;
	char cgroup_path[256];
	char *disk_path;
	char backend[16];

	/* Persistent mounts: the spill files of committed versions whose
	 * buffers are gone, kept until tier_store_graves_bury(). [S] */
	struct tier_dobj **graves;
	size_t ngraves, graves_cap;
	bool persistent; /* set at init */
	bool keep_files; /* [S] going down: destroy keeps committed files */
	/* Set before the first buffer, read-only after. */
	tier_inval_fn inval_fn;
	void *inval_ctx;

	/* Set at init, read-only after: eviction's st_shrink(), through which
	 * accounting (st_reserve(), st_make_room()) makes room without
	 * calling a file above it. */
	int (*make_room)(struct tier_store *s, int t, unsigned int g,
			 uint64_t goal, struct tier_buf *self, bool demand);
	/* Set at init, read-only after: the pins' st_soft_lapse(), which the
	 * spiller runs each round (s->lock held) without calling up into
	 * store_lease.c, which calls eviction. */
	void (*soft_lapse)(struct tier_store *s);
	pthread_t spiller;
	pthread_cond_t spill_wake; /* with lock */
	/* The host tier's use when the spiller last trimmed the heap, or
	 * its highest since (st_charge() raises it). [S] */
	uint64_t trim_mark;
	pthread_t watcher; /* the reserve watcher, when the device has meminfo */
	pthread_cond_t watch_wake; /* with lock, on CLOCK_MONOTONIC */
	bool watcher_started;
	pthread_cond_t io_idle; /* with lock: some io_refs reached 0 */
	void *zeroes; /* chunk_size of never-written memory, reads as zero */
	struct st_metrics m; /* atomic: see store_metrics_i.h */
	bool stop; /* [S] */
	bool spiller_started;
};

struct tier_buf {
	struct pol_item pi; /* [S] */
	struct tier_store *s;
	pthread_rwlock_t lock;
	uint64_t id;
	_Atomic uint64_t cookie; /* for inval_fn; 0: none */

	uint64_t size; /* [B]; pi.size is its [S] mirror */
	/* [B] Its chunks, nck of them: past them, and in chunks with no
	 * page allocated, the buffer is a hole. May reach past size: pages
	 * fallocate kept beyond the end. */
	struct tier_chunk *ck;
	uint32_t nck; /* [B] */
	struct tier_dmem *dmem; /* [B] */
	struct tier_dobj *dobj; /* [B] */
	/* [B] Persistent mounts: the object holding the committed version,
	 * the one the journal names. When there is a disk copy it is this
	 * object too (dobj == pobj); without one it holds only the committed
	 * chunks. NULL until the first sync. */
	struct tier_dobj *pobj;
	/* [B] One chunk of a buffer too large for host memory, being written
	 * in place on disk (read-modify-write). */
	void *wc;
	uint64_t charged[TFS_TIER_COUNT]; /* [S] */
	/* [B] Disk room charged for writing wc back, beyond what its chunk
	 * takes now; part of charged[TFS_TIER_DISK]. */
	uint64_t wc_resv;
	uint64_t generation; /* [S] */
	struct lease *leases; /* [S] */
	uint32_t nleases; /* [S] */
	uint32_t nholds; /* [S] leases that hold the device copy */
	uint32_t pins; /* [S] the hard pin: 0 or 1 */
	/* [S] Who pinned (0: root, counted nowhere): charged what @b is
	 * charged on the device and host while the pin lasts, hard or soft
	 * (pi.level, the soft pin's priority). */
	uid_t pin_uid;
	/* [S] The soft pin lapses after this many seconds without an
	 * access; 0: never. */
	uint32_t soft_ttl;
	uint32_t io_refs; /* [S] replies pointing into the buffer */
	uint32_t wc_idx; /* [B] the chunk in wc */
	/* Flags, packed: files are many and small. */
	bool has_host; /* [B] */
	bool dirty; /* [B] written since the last register */
	bool wc_dirty; /* [B] only ever with wc_resv charged */
	/* [B] The tier whose room a reservation for @b last failed to find,
	 * for the enospc counters. */
	uint8_t refused;
	uint8_t present; /* [S] bit t: a copy in tier t */
	bool dead; /* [S] destroy has begun */
	bool staging; /* [S] mirror of dirty: being written, not placed */
	/* [S] Eviction pushed @b out of a tier since it was last on the
	 * device or moved: promotion may bring it back up. */
	bool pushed;
	/* [B] Being promoted: a reservation for it takes free room only,
	 * pushing nothing out. */
	bool promoting;
	bool synced; /* [B] pobj holds exactly these bytes */
	uint8_t wpol; /* [S] enum tier_write_policy */
	bool wt_queued; /* [S] on s->wtq */
	bool sync_pending; /* [B] synced with TIER_SYNC_DEFER, to commit */
	/* [S] The bytes changed behind the kernel's page cache since an open
	 * last told it to drop its pages (tier_buf_opened()). */
	bool cache_stale;
	/*
	 * The GPU (index into s->gpus) dmem is on, and that charged[device]
	 * is charged to: changed only with b->lock held for writing and
	 * s->lock held, while @b has no device copy and no device charge,
	 * so it may be read under either lock. With the flags, in what was
	 * padding: a word between the pointers cost every file 16 bytes.
	 */
	uint8_t dgi;
	/* [S] The GPU whose buffers count @b, while present has the device
	 * bit (st_publish()). */
	uint8_t pgi;
	/*
	 * The disk-kind tier dobj is in, and that charged[disk] is charged
	 * to: 0 the [disk] tier, k the k-th of [tiers] (s->xt[k - 1]). A
	 * buffer has one disk-kind copy at most, as it has one device copy
	 * on one GPU: the disk slot is to the disk-kind tiers what the
	 * device slot is to the GPUs. Changed as dgi is (b->lock held for
	 * writing, s->lock held, no disk copy or charge), or by
	 * st_disk_move(), which swaps the copy and its charge at once under
	 * both locks.
	 */
	uint8_t dk;
	/* [S] The disk-kind tier whose buffers count @b, while present has
	 * the disk bit (st_publish()). */
	uint8_t pdk;
};



/* store_reclaim.c: reclaim on request, yielding to other processes. */

/* s->lock held. Resolve [device] reserve and poll_ms of @cfg. */
void st_watch_config(struct tier_store *s, const struct tfs_config *cfg);
/* Start the reserve watcher when the device can say how much of its
 * memory is free (s->lock not held); 0 or -errno. */
int st_watch_start(struct tier_store *s);
/* Stop it; s->stop is set and s->lock not held. */
void st_watch_stop(struct tier_store *s);

/*
 * store_acct.c: accounting, the bottom of the store. The tier files call
 * it, eviction calls them and it, and it calls nothing above but through
 * s->make_room. "s->lock held" means called and returning with it held;
 * "takes s->lock" means called without it, so b->lock may be held (it
 * comes first).
 */

/* Any lock or none. Whether @b may move: no pins, no holding leases, no
 * destroy begun ([S] fields: s->lock held, or b->lock for a stable
 * answer). */
static inline bool st_movable(const struct tier_buf *b)
{
	return !b->pins && !b->nholds && !b->dead;
}
/* b->lock held. Whether @b has a copy in tier @t: the one place that maps
 * a tier's index to the buffer's field for its copy. */
static inline bool st_has_copy(const struct tier_buf *b, int t)
{
	switch (t) {
	case TFS_TIER_DEVICE:
		return b->dmem;
	case TFS_TIER_HOST:
		return b->has_host;
	case TFS_TIER_DISK:
		return b->dobj;
	}
	return false;
}
/* b->lock held. Bit t set for each tier t @b has a copy in. */
static inline uint8_t st_copies(const struct tier_buf *b)
{
	uint8_t present = 0;

	for (int t = 0; t < TFS_TIER_COUNT; t++)
		if (st_has_copy(b, t))
			present |= 1u << t;
	return present;
}
/* Any lock or none. The tiers of the chain: device, host, then the
 * disk-kind ones ([disk] and those of [tiers]). */
static inline int st_ntiers(const struct tier_store *s)
{
	return TFS_TIER_COUNT + (int)s->nx;
}
/* Any lock or none. The disk-kind tier @k (0: [disk]) and the chain index
 * of it. */
static inline struct tier_disk *st_disk_of(const struct tier_store *s,
					   unsigned int k)
{
	return k ? s->xt[k - 1].disk : s->disk;
}
/* b->lock held. The disk-kind tier of @b's disk copy (b->dk). */
static inline struct tier_disk *st_bdisk(const struct tier_buf *b)
{
	return st_disk_of(b->s, b->dk);
}
/* Which instance of slot @t (a TFS_TIER_* index) @b's copy or charge
 * there is in: its GPU, its disk-kind tier, or 0 for the host. */
static inline unsigned int st_inst(const struct tier_buf *b, int t)
{
	return t == TFS_TIER_DEVICE ? b->dgi : t == TFS_TIER_DISK ? b->dk : 0;
}
/* s->lock held. The bytes tier @t (the device: GPU @g's; the disk slot:
 * disk-kind tier @g's) uses, its limit, and whether it is above the high
 * watermark. */
static inline uint64_t *st_used_of(struct tier_store *s, int t,
				   unsigned int g)
{
	return t == TFS_TIER_DEVICE ? &s->gpus[g].used :
	       t == TFS_TIER_DISK   ? &s->use[TFS_TIER_DISK + g].used :
				      &s->use[t].used;
}
static inline uint64_t st_limit_of(struct tier_store *s, int t,
				   unsigned int g)
{
	return t == TFS_TIER_DEVICE ? s->gpus[g].limit :
	       t == TFS_TIER_DISK   ? s->use[TFS_TIER_DISK + g].limit :
				      s->use[t].limit;
}
static inline bool st_over_high(struct tier_store *s, int t, unsigned int g)
{
	uint64_t limit = st_limit_of(s, t, g);

	return limit &&
	       (double)*st_used_of(s, t, g) > s->high_wm * (double)limit;
}
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t st_mono_ns(void);
/* The policy's clock: CLOCK_REALTIME in nanoseconds. */
uint64_t st_now_ns(void);
/* s->lock held. Link @b into the lists of the tiers it has a copy in, if it
 * may move (no pins, leases or destroy), and out of the others. */
void st_sync_links(struct tier_store *s, struct tier_buf *b);
/* s->lock held. Add @delta bytes (negative to give back) to what @b and
 * tier @t are charged. */
void st_charge(struct tier_store *s, struct tier_buf *b, int t,
	       int64_t delta);
/* b->lock held for writing; takes s->lock. Copy the [B] state that stat
 * and the eviction scan need into its [S] mirrors, and relink @b. */
void st_publish(struct tier_buf *b);
/* Takes s->lock. Give back everything @b is charged in tier @t. */
void st_uncharge_all(struct tier_buf *b, int t);
/* Takes s->lock. Count @bytes moved from tier @from to @to as a spill of
 * @from (down) or an unspill into @to (up). */
void st_count_move(struct tier_store *s, int from, int to, uint64_t bytes);
/* Takes s->lock. Count @bytes copied into tier @t. */
void st_count_written(struct tier_store *s, int t, uint64_t bytes);
/* b->lock held for writing; takes s->lock. Charge @bytes to @b in tier @t
 * (the device: on @b's GPU, b->dgi), evicting others first if needed. 0,
 * -ENOSPC, or -EDQUOT when @b is pinned and the bytes would take its
 * pinner past their share of @t. */
int st_reserve(struct tier_buf *b, int t, uint64_t bytes);
/* The same for disk-kind tier @k, charged to the tier alone (a copy being
 * made there, not yet @b's: st_disk_move()); given back with
 * st_unreserve_at(). */
int st_reserve_at(struct tier_buf *b, unsigned int k, uint64_t bytes);
void st_unreserve_at(struct tier_store *s, unsigned int k, uint64_t bytes);
/* b->lock held for writing; takes s->lock. Count a write to @b refused
 * with ENOSPC against the tier that had no room. */
void st_count_enospc(struct tier_buf *b);
/* Takes s->lock. Give back @bytes that st_reserve() charged. */
void st_unreserve(struct tier_buf *b, int t, uint64_t bytes);
/* Takes s->lock. Tier @t's limit in bytes; for the device, the default
 * GPU's, where placements go. */
uint64_t st_tier_limit(struct tier_store *s, int t);
/* Takes s->lock. Record an access to @b for the eviction policy. */
void st_touch(struct tier_buf *b);
/* Takes s->lock; b->lock may be held. A spill of @bytes to disk went
 * through: the disk tier is not full any more, if it was for a buffer no
 * larger (logged). */
void st_disk_room(struct tier_store *s, uint64_t bytes);
/* s->lock held. Whether room was made on the disk tier since it filled:
 * its use fell or its limit rose. */
bool st_disk_room_made(struct tier_store *s);
/* s->lock held; returns with it held, dropping it to log. The disk tier
 * has room again (@why), if it was full: say so once. */
void st_disk_full_leave(struct tier_store *s, const char *why);
/* s->lock held. Ask eviction (s->make_room, st_shrink()) to bring tier @t
 * down to @goal as st_shrink() says; -ENOSPC without the hook. */
int st_make_room(struct tier_store *s, int t, unsigned int g, uint64_t goal,
		 struct tier_buf *self, bool demand);
/* s->lock held. What tier @t may hold now: its limit, and for the device
 * (GPU @g, an s->gpus index) no more than other processes leave it (the
 * reserve). */
uint64_t st_room(struct tier_store *s, int t, unsigned int g);
/* b->lock held for writing; takes s->lock. Wait until no reply points into
 * @b's memory, before freeing or moving a host chunk or device memory. */
void st_io_quiesce(struct tier_buf *b);
/* b->lock held, s->lock not. Tell inval_fn that @what changed in @b, when
 * there is a callback and @b has a cookie. */
void st_inval(struct tier_buf *b, unsigned int what);

/* store_share.c: the per-user shares, accounting below eviction. */

/* Root and the daemon's own user, never counted. */
bool st_user_exempt(const struct tier_store *s, uid_t uid);
/* s->lock held. Where @uid's entry is or would go in s->users. */
struct user_use **st_user_find(struct tier_store *s, uid_t uid);
/* s->lock held. @uid's entry, made when it has none; NULL when out of
 * memory. */
struct user_use *st_user_get(struct tier_store *s, uid_t uid);
/* s->lock held. Free @uid's entry once it holds nothing. */
void st_user_trim(struct tier_store *s, uid_t uid);
/*
 * The per-user shares, s->lock held; @t is TFS_TIER_DEVICE or
 * TFS_TIER_HOST, and root and the daemon's own user (s->self_uid) are
 * never counted nor limited.
 *
 * st_share_check(): 0 when @uid may hold @bytes more of tier @t, else
 * -EDQUOT. st_share_charge(): charge them, -EDQUOT past the share unless
 * @force (what is held already and cannot be refused, such as memory a
 * process still maps), -ENOMEM. st_share_uncharge(): give them back.
 */
int st_share_check(struct tier_store *s, int t, uid_t uid, uint64_t bytes);
int st_share_charge(struct tier_store *s, int t, uid_t uid, uint64_t bytes,
		    bool force);
void st_share_uncharge(struct tier_store *s, int t, uid_t uid,
		       uint64_t bytes);
/* s->lock held. @b's charge in tier @t changed by @delta: its pinner's
 * share follows (st_charge() calls it). */
void st_share_follow(struct tier_store *s, struct tier_buf *b, int t,
		     int64_t delta);
/* s->lock held. -EDQUOT when @b is pinned and @bytes more in tier @t
 * would take its pinner past the share. */
int st_share_pinned(struct tier_store *s, struct tier_buf *b, int t,
		    uint64_t bytes);

/*
 * store_evict.c: moves between tiers, making room, moving up, the spiller.
 * Locks as for store_acct.c.
 */

/* s->lock held; dropped while a victim moves. Evict until tier @t uses at
 * most @goal bytes, never moving @self; for the device tier, GPU @g's
 * (s->gpus index) tier alone. Buffers being written move only on @demand
 * (someone needs the room now), after all others. 0, or -ENOSPC when
 * nothing more can move. */
int st_shrink(struct tier_store *s, int t, unsigned int g, uint64_t goal,
	      struct tier_buf *self, bool demand);
/* b->lock held. The tier of @b's fastest copy. */
int st_top_tier(struct tier_buf *b);
/* b->lock held; takes s->lock. The tier a read should bring @b up to, or
 * -1 to leave it where it is. */
int st_unspill_target(struct tier_buf *b);
/* b->lock held for writing. Bring @b up to tier @t (the device: GPU @g, an
 * s->gpus index, unless it has a device copy already), keeping lower
 * copies as clean copies. */
int st_promote(struct tier_buf *b, int t, unsigned int g);
/* The spiller thread; @arg is the store. Runs until s->stop. */
void *st_spiller_main(void *arg);

/* store_pool.c: host memory as the store takes it. */

/* Chunks that hold @size bytes. */
uint64_t st_nchunks_for(struct tier_store *s, uint64_t size);
/* What a malloc'd block of @n bytes takes, as charged: glibc's chunk,
 * rounded up to a page from 128 KiB on (where glibc maps blocks). */
uint64_t st_malloc_cost(uint64_t n);
/* A host chunk from the pool, or NULL after counting and logging that the
 * system has no memory for one. Any lock may be held. */
void *st_chunk_get(struct tier_store *s);
/* Give back a chunk st_chunk_get() gave (NULL is fine): to the pool while
 * the host tier's use and the pool stay within its limit, else to the
 * system. Takes s->lock. */
void st_chunk_put(struct tier_store *s, void *c);

/* store_host.c: the chunks' page maps and the host copy; b->lock held for
 * writing unless said. */

/* b->lock held for reading. What the host copy of @b takes once packed
 * (st_host_fit()), the same as a fetch charges. */
uint64_t st_host_cost(struct tier_buf *b);
/* Free the host copy and give back its charge; waits for I/O references.
 * The page maps stay. */
void st_host_drop(struct tier_buf *b);
/* Free the page maps and the chunk table; the copies must be gone. */
void st_chunks_free(struct tier_buf *b);
/* b->lock held for reading. Copy [off, off+len) of the host copy to @dst;
 * holes read as zeroes. */
void st_host_read(struct tier_buf *b, void *dst, size_t len, uint64_t off);
/* Build a host copy from the device or disk copy, laid out as
 * st_host_fit() would; 0 when there is one already. */
int st_host_fetch(struct tier_buf *b);
/* Pack every chunk that is not full to its exact size (a file's tail cut
 * at its end), so that the host copy takes what it holds. Best effort:
 * a chunk that cannot be moved for lack of memory stays as it is. */
void st_host_fit(struct tier_buf *b);
/* Drop everything past @size (pages, bytes of the page holding it) from
 * the host copy and the page maps. */
void st_host_truncate(struct tier_buf *b, uint64_t size);
/* Punch [off, off + len) out of the host copy: pages wholly inside it are
 * freed, the bytes of the others zeroed. 0 or -ENOMEM. */
int st_host_punch(struct tier_buf *b, uint64_t off, uint64_t len);
/* Allocate the pages of [off, off + len) that are not, as unwritten
 * pages of the host copy, charging the host tier first for all of them:
 * -ENOSPC (nothing allocated) when it has no room, or -ENOMEM. */
int st_host_allocate(struct tier_buf *b, uint64_t off, uint64_t len);
/* Mark the pages of [off, off + len) written in the page maps alone (a
 * write to the device or disk copy). 0 or -ENOMEM. */
int st_pages_written(struct tier_buf *b, uint64_t off, uint64_t len);
/* Allocate the pages of [off, off + len) that are not, as unwritten pages,
 * in the page maps alone (fallocate of a copy on disk). 0 or -ENOMEM. */
int st_pages_allocated(struct tier_buf *b, uint64_t off, uint64_t len);
/* Every page of the buffer allocated and written (a GPU program wrote the
 * device copy, or nothing better is known). 0 or -ENOMEM. */
int st_pages_all(struct tier_buf *b);
/*
 * Persistent mounts: the page section of a buffer's image, which follows
 * the disk tier's chunk table in what the journal records (see
 * tier_buf_sync()): u32 PAGES_MAGIC, u32 pages per chunk, u32 count, then
 * per chunk whose pages are not what the table and the size alone say
 * (present in the table: its pages up to the file's end, written; absent:
 * none) {u32 index, u16 pages, u8 PAGES_F_*, u8 zero} and the bitmaps its
 * flags name, little-endian u64 words each. Pages fallocate kept past the
 * end, holes inside chunks and pages fallocate took and nothing wrote are
 * what it says.
 */
#define PAGES_MAGIC 0x50534654u /* "TFSP" */
#define PAGES_F_ALLOC 0x1u /* the bitmap of allocated pages follows */
#define PAGES_F_UNW 0x2u /* then the bitmap of unwritten ones */
/* b->lock held. The page section of @b's image against the chunk table
 * of @o; returns the bytes it needs, written only when @len is enough. */
size_t st_pages_image(struct tier_buf *b, const struct tier_dobj *o,
		      void *buf, size_t len);
/* What st_pages_adopt() has to say of a chunk @idx (UINT64_MAX: of the
 * whole file): @lost when bytes that were written are gone. */
typedef void (*st_adopt_say)(void *ctx, uint64_t idx, const char *why,
			     bool lost);
/*
 * The page maps of a buffer adopted from disk (b->dobj, b->size set), from
 * @sec, the @len bytes of its page section; @old: an image of an earlier
 * tierfs, which had none (chunks there are data up to the file's end,
 * pages a chunk holds past it are taken as fallocate's). A section that
 * is damaged is ignored, a page the table lacks is a hole, a chunk the
 * table has gets its pages; each said. 0, -EFBIG or -ENOMEM.
 */
int st_pages_adopt(struct tier_buf *b, const void *sec, size_t len, bool old,
		   st_adopt_say say, void *ctx);
/* b->lock held for reading. Where the next data (@hole false) or hole at
 * or after @off is, as SEEK_DATA and SEEK_HOLE answer: -ENXIO when @off
 * is at or past the end, or there is no data after it. */
int64_t st_seek(struct tier_buf *b, uint64_t off, bool hole);
/*
 * b->lock held for reading. The payload of chunk @idx to write to disk,
 * as struct tier_chunk_desc describes: from @scratch when it holds the
 * chunk's dense bytes (the device copy), else from the host copy,
 * gathered into @scratch (chunk_size) when its pages need packing. Sets
 * *@len and *@desc; returns the bytes.
 */
const void *st_chunk_payload(struct tier_buf *b, uint64_t idx, void *scratch,
			     bool from_scratch, size_t *len,
			     struct tier_chunk_desc *desc);
/* Whether chunk @idx has a page allocated. */
bool st_chunk_used(struct tier_buf *b, uint64_t idx);
/* b->lock held for reading. The first run of allocated pages (written or
 * fallocate's) in [@from, @to): its offset and length in *@off, *@len,
 * whole pages; false when there is none. */
bool st_pages_run(struct tier_buf *b, uint64_t from, uint64_t to,
		  uint64_t *off, uint64_t *len);
/* b->lock held for reading. Point @iov at the host copy's bytes of
 * [off, off+len). Returns the entries used, or -E2BIG when @max is too
 * few. */
int st_host_iov(struct tier_buf *b, size_t len, uint64_t off,
		struct iovec *iov, int max);
/* Write into the host copy, growing the size. Bytes written, or -errno
 * when none were. */
ssize_t st_host_write(struct tier_buf *b, const char *src, size_t len,
		      uint64_t off);

/* store_disk.c: the disk copy; b->lock held for writing unless said. */

/* Write a full disk copy from the device or host copy; 0 when there is one
 * already. On failure nothing of it is left. */
int st_disk_spill(struct tier_buf *b);
/* Drop the write cache without writing it, giving back its disk room. */
void st_wc_free(struct tier_buf *b);
/* Drop the disk copy and the write cache. */
void st_disk_drop(struct tier_buf *b);
/* Takes s->lock. Charge the disk tier exactly what the disk copy, or the
 * committed version without one, takes (plus a write cache
 * reservation). */
void st_disk_recharge(struct tier_buf *b);
/* Write the cached chunk to the disk copy if it is dirty. */
int st_wc_flush(struct tier_buf *b);
/* Load chunk @idx of the disk copy into the write cache for writing,
 * flushing the one there, and charge the room writing it back may take.
 * 0, or -ENOSPC (the cache then holds nothing) or another -errno. */
int st_wc_load(struct tier_buf *b, uint64_t idx);
/* b->lock held for reading. Read from the disk copy, seeing the write
 * cache. */
int st_disk_read(struct tier_buf *b, void *dst, size_t len, uint64_t off);
/* Write into the disk copy in place, one chunk at a time. Bytes written,
 * or -errno when none were. */
ssize_t st_disk_write(struct tier_buf *b, const char *src, size_t len,
		      uint64_t off);
/* Move the disk copy into disk-kind tier @k (0: [disk]; a non-persistent
 * mount's), chunk by chunk through one scratch chunk, then drop it where
 * it was: 0 when it is there already or there is none; on failure it
 * stays where it was and nothing of the new one is left. */
int st_disk_move(struct tier_buf *b, unsigned int k);

/* store_persist.c */

/* b->lock held for writing, no disk copy. The buffer is going: its
 * committed version waits among the graves for the journal to stop naming
 * it, or stays for the next mount when the store keeps its files. */
void st_pobj_release(struct tier_buf *b);

/* store_dev.c: the device copy; b->lock held for writing unless said. */

/*
 * Any lock or none. Whether there is a device tier to place buffers on:
 * there is one, and it has not failed (a sticky CUDA error: see
 * device.h). A failed device keeps what it holds, but nothing new goes
 * there and reads are served from lower copies where there are any.
 */
static inline bool st_gpu_usable(const struct tier_store *s, unsigned int g)
{
	return g < s->ngpus && !tier_dev_failed(s->gpus[g].dev);
}
/* The same for the default GPU, where placements go. */
static inline bool st_dev_usable(const struct tier_store *s)
{
	return st_gpu_usable(s, s->defg);
}
/* b->lock held. The backend of @b's GPU (b->dgi); NULL without a device
 * tier. */
static inline struct tier_dev *st_bdev(const struct tier_buf *b)
{
	return b->s->ngpus ? b->s->gpus[b->dgi].dev : NULL;
}
/* Any lock or none. What a device copy of @len bytes takes, charged to
 * the device tier: the backend rounds allocations up to its granule. */
uint64_t st_dev_granted_for(struct tier_store *s, uint64_t len);
/* b->lock held. Whether @b's only copy is on a device that failed: its
 * bytes are gone. Inline, for the host and disk files ask it too and sit
 * below this one. */
static inline bool st_dev_lost(const struct tier_buf *b)
{
	return b->dmem && !b->has_host && !b->dobj &&
	       tier_dev_failed(st_bdev(b));
}
/* Free the device copy and give back its charge; waits for I/O
 * references. */
void st_dev_drop(struct tier_buf *b);
/* Charge and allocate @len bytes of device memory on GPU @g (an s->gpus
 * index; @b has no device copy), charged at what the device takes,
 * evicting further when the device is fuller than the accounting says.
 * 0, -ENOSPC, or -ENODEV when the device failed. */
int st_dev_alloc(struct tier_buf *b, unsigned int g, size_t len);
/* Build a device copy on GPU @g from the host or disk copy; 0 when there
 * is one already (on whichever GPU), -ENODEV without a usable device. */
int st_dev_fill(struct tier_buf *b, unsigned int g);
/* A sparse device copy of @len bytes on GPU @g (which must have sparse
 * allocations), its pages populated where b's page maps have pages
 * (written or fallocate's), each charged as it is populated. */
int st_dev_alloc_sparse(struct tier_buf *b, unsigned int g, uint64_t len);
/* Whether GPU @g's backend has sparse allocations (device.h). */
bool st_dev_sparse(const struct tier_store *s, unsigned int g);
/* b->lock held for reading. Whether b's copy on GPU @g should be sparse:
 * the backend has sparse allocations and, where its granule is larger
 * than a page, b's page maps have a hole of at least one whole granule. */
bool st_dev_wants_sparse(struct tier_buf *b, unsigned int g);
/* Populate the granules of [off, off + len) of b's device copy, charging
 * the device tier what they take (eviction making the room first); a
 * dense copy needs nothing. 0, -ENOSPC or -errno. */
int st_dev_populate(struct tier_buf *b, uint64_t off, uint64_t len);
/* Every granule of b's device copy populated: before a GPU program maps
 * it whole (an export). Same returns. */
int st_dev_densify(struct tier_buf *b);

/* store_gpus.c: the device tiers, one per GPU. */

/* Open the device backend for each GPU @cfg asks for (s->gpus, ngpus,
 * defg, backend); 0 without a device tier where auto allows it, or -errno
 * with the reason in @err. */
int st_gpus_open(struct tier_store *s, const struct tfs_config *cfg,
		 char *err, size_t errlen);
/* Close them. */
void st_gpus_close(struct tier_store *s);
/* The s->gpus index of the GPU of ordinal @ordinal, -ENXIO when the store
 * does not serve it, -ENODEV without a device tier. */
int st_gpu_index(struct tier_store *s, int ordinal);
/* b->lock held for writing. Move @b's device copy to GPU @g (an s->gpus
 * index), byte for byte; 0 when it is there already or has none. */
int st_dev_migrate(struct tier_buf *b, unsigned int g);

/* store_limits.c */

/* At init: what the machine has (RAM, the memory cgroup). */
void st_limits_probe(struct tier_store *s);
/* Takes s->lock. The limits @cfg asks for on this machine (each GPU's in
 * @glim, their sum as the device's), each logged with where it came from; -EINVAL with the reason in @err for one above
 * what the machine has (unless policy.overcommit). Changes nothing else. */
int st_limits_compute(struct tier_store *s, const struct tfs_config *cfg,
		      uint64_t lim[TFS_TIER_COUNT], uint64_t glim[CFG_MAX_GPUS],
		      char *err, size_t errlen);
/* At init: the limits of the tiers of [tiers] (s->xt, opened), each
 * logged with where it came from; -EINVAL with the reason in @err for one
 * above what its filesystem has free (unless policy.overcommit). */
int st_xt_limits(struct tier_store *s, const struct tfs_config *cfg,
		 char *err, size_t errlen);
/* @v bytes as "512 B" or "1.5 MiB", into @buf. */
void st_fmt_size(char *buf, size_t len, uint64_t v);

/* store_lease.c; each takes s->lock unless said. */

/* Leases on @b that hold its device copy (see struct lease). */
uint32_t st_hold_count(struct tier_buf *b);
/* Whether a lease holding @b belongs to another owner than @owner (to
 * anyone when @owner is 0). */
bool st_held_by_other(struct tier_buf *b, uint64_t owner);
/* s->lock held. Charge GPU @g's tier what its backend's exports hold now
 * (export_held), in place of what they held when last asked. */
void st_exp_sync(struct tier_store *s, unsigned int g);
/* b->lock held for writing. End every lease on @b (destroy). */
void st_leases_end(struct tier_buf *b);
/* Takes s->lock. Give back what @b's pin holds of its pinner's share. */
void st_pin_release(struct tier_buf *b);
/* store_policy.c. Takes s->lock: queue @b for its write-through copy when
 * its policy says so. */
void st_wt_queue(struct tier_buf *b);
/* s->lock held. Admission ([policy] admission): count an open of @b in
 * the sketch; whether a read may bring @b up to GPU @g's device tier,
 * which needs @need bytes there, counting a refusal. */
void st_admit_count(struct tier_store *s, struct tier_buf *b);
bool st_admit(struct tier_store *s, struct tier_buf *b, unsigned int g,
	      uint64_t need);
/* s->lock held. Start or stop admission; false when the sketch cannot be
 * had (then admission stays off). */
bool st_admit_config(struct tier_store *s, bool on);
/* s->lock held: take @b off the queue (destroy). */
void st_wt_forget(struct tier_store *s, struct tier_buf *b);
/* s->lock held, dropped while a copy is written: make the copies queued
 * whose buffers are not busy. Returns whether it did any. */
bool st_wt_run(struct tier_store *s);
/* Whether @b's pin is charged to a user's share: a hard or a soft pin of
 * someone counted. [S] */
static inline bool st_pin_charged(const struct tier_buf *b)
{
	return (b->pins || b->pi.level) && b->pin_uid;
}
/* s->lock held, from the spiller: at most once a second, unpin the soft
 * pins idle past their time to live. */
void st_soft_lapse(struct tier_store *s);
/* Takes s->lock. Unpin @b when its soft pin has been idle past its time to
 * live; returns whether it did. */
bool st_soft_check(struct tier_buf *b);

#endif /* TFS_TIERS_STORE_I_H */
