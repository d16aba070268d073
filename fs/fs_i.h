/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Private to fs/: the inode and dentry tables that give the buffer store a
 * namespace, and the handlers the low-level FUSE ops are built from.
 *
 * Locking. One mutex, tfs.ns_lock, protects every field of every inode,
 * dentry, directory and xattr list, and both hash tables. It is held for
 * table work only: never across a tier_buf_* call that may copy, spill or
 * wait for a buffer lock held by I/O, and never across fuse_reply_*.
 *
 * An inode's identity fields (ino, and buf for a regular file) never change
 * while it lives, so an op may use them unlocked as long as the inode is
 * pinned: by the kernel's lookup reference for the nodeid of the request, by
 * an open file, or by a lookup count the op took itself.
 */
#ifndef TFS_FS_I_H
#define TFS_FS_I_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/store.h"

#define TFS_NAME_MAX 255
#define TFS_XATTR_VALUE_MAX (64 * 1024)
/* Cap on the user xattrs one inode may hold, so a loop cannot eat RAM. */
#define TFS_XATTR_INODE_MAX (256 * 1024)
/* The largest FUSE read and write (max_pages is derived from max_write). */
#define TFS_IO_MAX (1024 * 1024)

struct tfs_xattr {
	struct tfs_xattr *next;
	uint32_t vlen;
	uid_t uid; /* who set it: charged to their metadata share */
	uint8_t nlen;
	char data[]; /* name, NUL, value */
};

struct tfs_dentry;

/*
 * A readdir slot. Cookies only grow, so an offset the kernel hands back
 * still finds its place by binary search after entries before it were
 * removed and the array compacted. A removed entry leaves d == NULL until
 * the next compaction.
 */
struct tfs_slot {
	uint64_t cookie;
	struct tfs_dentry *d;
};

struct tfs_dir {
	struct tfs_inode *parent; /* "..": the root points at itself */
	struct tfs_slot *slots;
	uint32_t n, cap; /* slots used (tombstones included), allocated */
	uint32_t live; /* entries, for ENOTEMPTY and st_size */
	uint64_t next_cookie;
};

struct tfs_dentry {
	struct tfs_dentry *hnext;
	struct tfs_inode *parent;
	struct tfs_inode *inode;
	uint64_t cookie;
	uint32_t hash;
	uid_t uid; /* who made the name: charged to their metadata share */
	uint8_t namelen;
	char name[]; /* NUL-terminated */
};

/* flags */
#define TFS_I_DIRTY 0x1u /* written since the buffer was last registered */
/* An O_TMPFILE file that linkat() may give a first name (no O_EXCL). */
#define TFS_I_LINKABLE 0x2u

/*
 * The chattr flags tierfs keeps, in i->fsflags: the FS_*_FL values of
 * <linux/fs.h> (which clashes with <sys/mount.h>, so fileattr.c checks that
 * they agree), the set tmpfs allows. FUSE never gives its inodes S_IMMUTABLE
 * or S_APPEND, so none of the kernel's checks for them run: the daemon
 * makes them, as notify_change(), may_delete(), may_open() and vfs_link()
 * would.
 */
#define TFS_FL_IMMUTABLE 0x00000010u
#define TFS_FL_APPEND 0x00000020u
#define TFS_FL_NODUMP 0x00000040u
#define TFS_FL_NOATIME 0x00000080u
#define TFS_FL_USER (TFS_FL_IMMUTABLE | TFS_FL_APPEND | TFS_FL_NODUMP | \
		     TFS_FL_NOATIME)
/* What a new inode takes from its directory, as on tmpfs and ext4. */
#define TFS_FL_INHERITED (TFS_FL_NODUMP | TFS_FL_NOATIME)

/*
 * The policy user.tierfs.pin, .write_policy and .tier set: a regular
 * file's own (the pin and write policy mirror the store's, as the journal
 * keeps them), or a directory's, which every file and directory made in
 * it starts with.
 */
struct tfs_ipol {
	uint32_t ttl; /* the soft pin's, seconds; 0: none */
	uint8_t pin; /* 0: none, 1: hard, 2 + N - 1: soft, priority N */
	uint8_t write; /* enum tier_write_policy; 0: the mount's */
	uint8_t place; /* a directory's preferred tier + 1; 0: none */
};

struct tfs_inode {
	struct tfs_inode *hnext; /* ino hash chain, then the reap list */
	uint64_t ino;
	/*
	 * With ino, what a file handle names (name_to_handle_at, NFS): never
	 * the same twice for one ino, in this daemon or another, so that a
	 * handle of a file that is gone fails with ESTALE even if its number
	 * comes back. 0 for the root, as the kernel's root inode has.
	 */
	uint32_t generation;
	/* Who made it, charged its metadata (fixed: a chown moves no
	 * charge). In what was padding. */
	uid_t meta_uid;
	uint64_t nlookup; /* kernel references, see forget */
	uint32_t nopen; /* open files */
	uint32_t nlink;
	uint32_t mode;
	uint32_t uid, gid;
	uint32_t flags;
	/*
	 * TFS_FL_* (chattr). Written under ns_lock; read without it where the
	 * kernel already orders the two: it holds the inode lock across
	 * fileattr_set and across every write, truncate and open with
	 * O_TRUNC of the inode.
	 */
	_Atomic uint32_t fsflags;
	uint64_t rdev;
	struct timespec atime, mtime, ctime;
	/* When it was made (statx's stx_btime); zero when not known: a
	 * persistent mount does not keep it. */
	struct timespec btime;
	union {
		struct tier_buf *buf; /* S_IFREG, immutable */
		struct tfs_dir *dir; /* S_IFDIR */
		char *target; /* S_IFLNK */
	};
	struct tfs_xattr *xattrs;
	uint32_t xattr_bytes;
	/* Persistent mounts (fs/persist.c), regular files only. */
	struct tfs_ipol pol; /* ns_lock */
	/* Changed since its last sync: an I_DIRTY record was written. */
	_Atomic bool unsynced;
	/* The committed version the journal last named (for snapshots):
	 * swapped under the journal's lock. */
	struct tfs_pdata *pdata;
};

static inline uint32_t tfs_fsflags(const struct tfs_inode *i)
{
	return atomic_load_explicit(&i->fsflags, memory_order_relaxed);
}

/* -EPERM when @i is immutable: nothing of it may change. */
static inline int tfs_deny_immutable(const struct tfs_inode *i)
{
	return tfs_fsflags(i) & TFS_FL_IMMUTABLE ? -EPERM : 0;
}

/*
 * -EPERM when @i is immutable or append-only: what the kernel refuses to
 * both (a name removed or added, a truncate, chmod, chown, set times,
 * an xattr change). An append-only file may still grow by O_APPEND
 * writes; an append-only directory may still gain entries.
 */
static inline int tfs_deny_sealed(const struct tfs_inode *i)
{
	return tfs_fsflags(i) & (TFS_FL_IMMUTABLE | TFS_FL_APPEND) ? -EPERM :
								     0;
}

/* A new inode in @dir takes the flags it inherits. Caller holds ns_lock. */
static inline void tfs_inherit_flags_locked(struct tfs_inode *i,
					    const struct tfs_inode *dir)
{
	atomic_store_explicit(&i->fsflags, tfs_fsflags(dir) & TFS_FL_INHERITED,
			      memory_order_relaxed);
	if (S_ISREG(i->mode) || S_ISDIR(i->mode))
		i->pol = dir->pol;
}

/*
 * Unlocked, right after a regular file @i was made (tfs_inherit_flags_locked
 * gave it its directory's policy): apply the pin and write policy to its
 * buffer, the pin as @uid's. A pin the share refuses is not taken, and
 * the file is made all the same (logged).
 */
void tfs_ipol_apply(struct tfs_inode *i, uid_t uid);

/* Unlocked, after a written file was placed: move it to its directory's
 * preferred tier, if one was set. */
void tfs_ipol_place(struct tfs_inode *i);

/* One open regular file: fi->fh. */
/* How an open file reads (passthrough.c). */
enum tfs_pt_mode {
	TFS_PT_NONE, /* through the page cache and the daemon */
	TFS_PT_READ, /* the kernel reads the replica itself */
	TFS_PT_DIRECT, /* direct_io, beside passthrough opens */
};

struct pt_replica;

struct tfs_file {
	struct tfs_file *prev, *next; /* tfs.files, ns_lock */
	struct tfs_inode *inode;
	uint64_t owner; /* lease owner id for tier_buf_export, unique */
	bool readable; /* opened for reading: exports need it */
	bool writable; /* opened for writing: write exports need it too */
	bool exported; /* may hold an export lease */
	/* O_NOATIME: its opens and reads are no access (no atime, no
	 * unspill, no younger in the eviction order: TIER_READ_NOACCESS). */
	bool noatime;
	/* Passthrough (passthrough.c): set at open, before the reply. */
	enum tfs_pt_mode pt;
	bool pt_fill; /* this open fills the replica */
	int32_t pt_id; /* the kernel's backing id */
	struct pt_replica *pt_rep;
};

struct tfs_hash {
	void **b;
	size_t mask; /* buckets - 1 */
	size_t count;
};

struct tfs_fs {
	struct tier_store *store;
	struct fuse_session *se;
	/* Never held while calling into the store. */
	pthread_mutex_t ns_lock;
	struct tfs_hash inodes; /* ns_lock */
	struct tfs_hash dentries; /* ns_lock */
	struct tfs_inode *root;
	/* Open files: an unmount ends the session without their releases. */
	struct tfs_file files; /* ns_lock */
	uint64_t next_ino; /* ns_lock */
	uint32_t next_generation; /* ns_lock; starts at random */
	atomic_uint_fast64_t next_owner;
	/*
	 * The metadata budget ([fs] metadata_limit): heap bytes of inodes,
	 * dentries, symlink targets, xattrs and the store's buffer records.
	 * Atomic: inodes are freed outside ns_lock. meta_freed counts bytes
	 * freed since the idle timer last gave memory back.
	 */
	atomic_uint_fast64_t meta_used;
	atomic_uint_fast64_t meta_limit; /* 0 until set: no limit */
	/* [fs] metadata_user_share in bytes, 0: none; what each user holds
	 * of the budget is in inode.c, under a lock of its own. */
	atomic_uint_fast64_t meta_user_limit;
	uid_t self_uid; /* the daemon's euid: as root, never counted */
	atomic_uint_fast64_t meta_freed;
	atomic_uint_fast64_t meta_ops; /* charges and frees, for idleness */
	double entry_timeout, attr_timeout;
	/* Asked for the kernel's writeback cache; set before the session
	 * starts, and cleared by init() when the kernel cannot. */
	bool writeback;
	/* The kernel takes POSIX ACLs (FUSE_POSIX_ACL) and leaves the umask
	 * to us (FUSE_DONT_MASK): set by init(), before the first request
	 * that creates anything. */
	bool posix_acl;
	/* More than one worker serves requests (not -s, threads > 1): a
	 * handler may wait for the kernel to have another request answered.
	 * Set before the session loop. */
	bool multithreaded;
};

extern struct tfs_fs tfs;

/* inode.c: everything *_locked needs tfs.ns_lock held. */
int tfs_ns_init(void);
void tfs_ns_destroy(void);
/* Takes ns_lock; while the start-up gate is closed, waits for it to open
 * first (but on the loader thread). */
void tfs_ns_lock(void);
/*
 * The start-up gate. Closed (before the loader starts) with what getattr
 * and statx of the root answer until it opens (its attributes, its
 * TFS_FL_* flags); the loader thread marks itself, and opens the gate
 * once the tree is whole and the journal on. tfs_ns_gate_root(): true
 * with the root's in @st and @fsflags (may be NULL) while it is closed.
 */
void tfs_ns_gate_close(const struct stat *root, uint32_t fsflags);
void tfs_ns_gate_loader(void);
void tfs_ns_gate_open(void);
bool tfs_ns_gate_root(struct stat *st, uint32_t *fsflags);
void tfs_ns_unlock(void);
struct tfs_inode *tfs_inode_get_locked(fuse_ino_t ino);
/*
 * A new inode with nlink 0 in *@out, owned by @uid, who is charged its
 * metadata. A regular file's @buf or a symlink's @target is owned by it
 * from then on (by the caller still on failure). Returns 0, -ENOSPC past
 * the metadata budget, -EDQUOT past @uid's share of it, or -ENOMEM.
 */
int tfs_inode_new_locked(uint32_t mode, uid_t uid, gid_t gid, dev_t rdev,
			 struct tier_buf *buf, char *target,
			 struct tfs_inode **out);
/* An inode of number @ino that a persistent mount brings back, charged
 * to the budget like a new one (to no user's share: what a restart
 * brings back is nobody's new use); the caller fills in the rest. Same
 * returns as tfs_inode_new_locked(). */
int tfs_inode_restore_locked(uint64_t ino, uint32_t mode, struct tier_buf *buf,
			     char *target, struct tfs_inode **out);
/* Queue @i for freeing when it has no name, no lookups and no opens. */
void tfs_inode_check_locked(struct tfs_inode *i, struct tfs_inode **reap);
/* Free what tfs_inode_check_locked() queued; call without the lock. */
void tfs_reap(struct tfs_inode *reap);
void tfs_forget_locked(struct tfs_inode *i, uint64_t n,
		       struct tfs_inode **reap);
struct tfs_dentry *tfs_dentry_find_locked(struct tfs_inode *parent,
					  const char *name, size_t len);
/* A name of @inode in @parent, made by (and charged to) @by: 0, -ENOSPC,
 * -EDQUOT past @by's metadata share, or -ENOMEM. */
int tfs_dentry_add_locked(struct tfs_inode *parent, const char *name,
			  size_t len, struct tfs_inode *inode, uid_t by);
void tfs_dentry_del_locked(struct tfs_dentry *d);
/* First slot with a cookie above @off. */
uint32_t tfs_dir_seek_locked(const struct tfs_dir *dir, uint64_t off);
/*
 * The metadata budget. tfs_meta_cost() is what one malloc(@n) takes from
 * the heap; tfs_meta_charge() charges @bytes to the budget and to @uid's
 * share of it ([fs] metadata_user_share), failing (charging nothing)
 * with -ENOSPC when the budget has no room and -EDQUOT when @uid's share
 * has none; root and the daemon's own user have no share. Uncharge with
 * the uid that was charged. Both may be called with or without ns_lock.
 */
size_t tfs_meta_cost(size_t n);
/* What one user xattr of a @nlen-byte name and @vlen-byte value takes. */
static inline size_t tfs_xattr_cost(size_t nlen, size_t vlen)
{
	return tfs_meta_cost(sizeof(struct tfs_xattr) + nlen + 1 + vlen);
}
int tfs_meta_charge(uid_t uid, size_t bytes);
void tfs_meta_uncharge(uid_t uid, size_t bytes);
/*
 * For df -i: how many more empty regular files, each with one name of up
 * to TFS_DF_NAME_LEN bytes, the metadata budget still holds. Larger names,
 * directories, symlinks and xattrs take more.
 */
#define TFS_DF_NAME_LEN 15
uint64_t tfs_meta_files_free(void);
/* Set the limit from [fs] metadata_limit and the host tier's limit, and
 * each user's share of it from [fs] metadata_user_share. */
void tfs_meta_set_limit(const struct cfg_size *limit,
			const struct cfg_size *user_share, uint64_t host_limit);
/*
 * Called about once a second from the SIGHUP thread: after a second
 * without namespace changes, once enough was freed, give the heap's free
 * pages back to the system (malloc_trim). Never on a request's path.
 */
void tfs_meta_idle(void);
/* Fill @st from the inode; a regular file's size and blocks come from
 * tfs_stat_data(), unlocked. */
void tfs_stat_locked(const struct tfs_inode *i, struct stat *st);
void tfs_stat_data(const struct tfs_inode *i, struct stat *st);
void tfs_now(struct timespec *ts);
void tfs_touch_locked(struct tfs_inode *i, bool mtime);
void tfs_file_link_locked(struct tfs_file *f);
/*
 * Whether the caller of @req may write to @i by its mode bits, as the
 * kernel's default_permissions would decide: root and the owner always may
 * (the owner could chmod anyway), others by the group bits when @i's group
 * is their primary or a supplementary group, else by the other bits.
 * Returns 0 or -EACCES. For requests the kernel does not check itself
 * (ioctls).
 */
int tfs_may_write(fuse_req_t req, struct tfs_inode *i);
/*
 * The caller of @req is about to change regular file @i as its owner (or
 * root): truncate it, write it, move it, change its mode or owner, or
 * export it for writing. Another user's write export would block that,
 * or see bytes change under its feet: such leases are broken
 * (tier_buf_revoke()), their holders hear ESTALE, and @what ("truncate",
 * "write", ...) goes to the log. Does nothing for a caller who is not the
 * owner or root, and for the caller's own leases.
 */
void tfs_break_leases(fuse_req_t req, struct tfs_inode *i, const char *what);
void tfs_file_unlink_locked(struct tfs_file *f);
/* Whether @gid is the primary or a supplementary group of the caller of
 * @req (unreadable groups: the primary only). Reads /proc: no ns_lock. */
bool tfs_req_in_group(fuse_req_t req, gid_t gid);

/*
 * passthrough.c: FUSE passthrough of host-tier reads through a replica
 * (doc/design.md, "Passthrough reads"; the wire in passthrough.h).
 */
/* The smallest file given a replica (bench/README.md, "Passthrough"). */
#define TFS_PT_MIN_SIZE 0
/* READ requests served, ever: what passthrough saves shows here. */
extern atomic_uint_fast64_t tfs_read_requests;
/* [fs] passthrough and the smallest file given a replica; before the
 * session starts. */
void tfs_pt_configure(enum cfg_passthrough mode, uint64_t min_size);
/* Negotiated at INIT and not refused since. */
bool tfs_pt_enabled(void);
/* The hook's calls (tmpfile.c): the INIT request's body as read; the INIT
 * reply's body, edited in place when passthrough is asked for (returns
 * true then); after that reply went to the kernel; any reply, where the
 * OPEN reply this thread is sending (tfs_pt_reply()) gets its backing id. */
void tfs_pt_init_request(const void *body, size_t len, uint64_t unique);
bool tfs_pt_init_reply(uint64_t unique, void *body, size_t len);
void tfs_pt_init_done(void);
void tfs_pt_patch_reply(struct iovec *iov, int count);
/* Around fuse_reply_open()/fuse_reply_create() of @f. */
void tfs_pt_reply(const struct tfs_file *f);
void tfs_pt_reply_done(void);
/*
 * An open of @i: tfs_pt_eligible() without ns_lock (it asks the store)
 * whether a replica may be made for a @readonly open; then, in the ns_lock
 * section that counts the open in i->nopen, tfs_pt_open_locked() decides
 * f->pt; after it, tfs_pt_open_finish() fills the replica or waits for
 * the open filling it, and may fall back to TFS_PT_NONE. tfs_pt_release()
 * at release, and where an open is undone, without ns_lock.
 */
bool tfs_pt_eligible(struct tfs_inode *i, bool readonly);
void tfs_pt_open_locked(struct tfs_inode *i, struct tfs_file *f,
			bool readonly, bool eligible);
void tfs_pt_open_finish(struct tfs_inode *i, struct tfs_file *f);
void tfs_pt_release(struct tfs_inode *i, struct tfs_file *f);
/*
 * After a change to the store's bytes of @i (or inode @ino) in [off, off +
 * len) and its size, before it is answered: copies them into @i's replica,
 * if it has one. No lock held.
 */
void tfs_pt_sync(struct tfs_inode *i, uint64_t off, uint64_t len);
void tfs_pt_sync_ino(uint64_t ino, uint64_t off, uint64_t len);
/*
 * A replica that a writable open joined holds the file's bytes (a shared
 * mapping of that open writes it, not the store) until it is copied back,
 * once no writer's file is left on it. tfs_pt_read(): a read through the
 * daemon of @f from that replica; -ENOENT when @f has none such.
 * tfs_pt_written(): whether @i has one (what reads the store's bytes
 * instead must not run). tfs_pt_forget(): @ino's inode is being freed;
 * its replica goes, uncopied. tfs_pt_stop(): after the session loop,
 * before the session goes: copies every such replica back, frees all.
 * No lock held for any.
 */
ssize_t tfs_pt_read(struct tfs_file *f, void *buf, size_t size, off_t off);
bool tfs_pt_written(struct tfs_inode *i);
void tfs_pt_forget(uint64_t ino);
void tfs_pt_stop(void);
/* The passthrough.* and read_requests stat lines; returns their length
 * as snprintf() does. */
size_t tfs_pt_stats(char *buf, size_t len);

/*
 * inval.c: passes the store's changes on to the kernel's caches from a
 * thread of its own (see the file for why).
 */
/* The store's tier_inval_fn: @ctx unused, @ino the buffer's cookie. */
void tfs_inval_queue(void *ctx, uint64_t ino, unsigned int what);
/* Start the thread once the session is mounted; @conn is the connection's
 * number in /sys/fs/fuse/connections (0: unknown). Returns 0 or -errno. */
int tfs_inval_start(unsigned int conn);
/* Stop it after the session loop ended, before the session is destroyed;
 * what is still queued is dropped. */
void tfs_inval_stop(void);
/*
 * Drop the kernel's cached attributes of @ino now, from a request handler,
 * before it replies: for a change the daemon makes that the kernel cannot
 * see (a tier move's st_blocks, a commit's mtime, a flag change's ctime),
 * so that a stat after the reply sees it. Attributes only: that locks no
 * page, so it cannot wait for a read stuck behind this request.
 */
void tfs_inval_attr(fuse_ino_t ino);

/* ops.c */
extern const struct fuse_lowlevel_ops tfs_ops;
/* A thread's pre-faulted reply buffer of at least TFS_IO_MAX bytes. */
void *tfs_reply_buf(void);
/* What init() asks the kernel for as max_readahead; 0 leaves it. */
void tfs_ops_set_read_ahead(unsigned int kb);

/*
 * atime.c. A per-mount flag option: noatime, atime, relatime, strictatime,
 * nodiratime, diratime, and ro, rw, [no]suid, [no]dev, [no]exec (which
 * only -o remount applies). Records it, in order, and returns 0 when @name
 * is none of them, 1 when it is and libfuse must not see it, 2 when
 * libfuse takes it too.
 */
int tfs_mount_flag_option(const char *name);
/*
 * After mounting at @mountpoint: act on the atime options, make the
 * kernel's flags of the mount match them, and follow later changes of
 * those flags (a remount) in a thread. Returns 0 or -errno.
 */
int tfs_atime_start(const char *mountpoint);
void tfs_atime_stop(void);
/* A read of @i (a file's data, a directory's entries): update its atime as
 * the mount's flags say. Caller holds ns_lock. */
void tfs_atime_note_locked(struct tfs_inode *i);
/* Whether a read of @i now would change its atime (see above); the
 * kernel's page cache must then not answer it alone. Caller holds
 * ns_lock. */
bool tfs_atime_due_locked(const struct tfs_inode *i);
/*
 * -o remount (mount.fuse3 runs "tierfs SOURCE MNT -o remount,..."): apply
 * the per-mount flag options given to the tierfs mount at @mountpoint,
 * whose daemon then follows them; ro and rw change the superblock too.
 * Prints why on failure; returns 0 or -errno.
 */
int tfs_remount(const char *mountpoint);
/*
 * Whether the superblock is read-only, as the daemon last saw it (-o ro,
 * or a remount), for the stats. The kernel itself refuses every write
 * with EROFS then, and refuses to go read-only while a file is open for
 * writing, which every TFS_IOC_* that rewrites bytes needs. No lock.
 */
bool tfs_readonly(void);
/*
 * The same, read from mountinfo now rather than as the watcher last saw
 * it, for the requests a read-only mount refuses that the kernel lets
 * through (a move by ioctl): a remount answers before the watcher wakes.
 * No lock; reads /proc.
 */
bool tfs_readonly_now(void);

/*
 * persist.c: persistent mounts ([disk] persist). Every function is a
 * no-op, or returns 0, on a mount that is not persistent.
 *
 * Recording, ns_lock held: the changes of an operation collect in the
 * calling thread and tfs_ns_unlock() writes them as one record.
 * tfs_pj_attr_locked(): @i's attributes (mode, owner, times, links,
 * flags, xattrs, pin) changed, or it lost its last name.
 * tfs_pj_dirty_locked(): a regular file's bytes changed.
 * tfs_pj_dset_locked() and tfs_pj_ddel_locked() are called by
 * tfs_dentry_add_locked() and tfs_dentry_del_locked().
 */
bool tfs_persistent(void);
/* persist = close: the last close is a sync point. */
bool tfs_persist_close(void);
void tfs_pj_attr_locked(struct tfs_inode *i);
void tfs_pj_dirty_locked(struct tfs_inode *i);
void tfs_pj_dset_locked(const struct tfs_dentry *d);
void tfs_pj_ddel_locked(const struct tfs_dentry *d);
/* tfs_ns_unlock() calls it: append this thread's record. */
void tfs_pj_txn_end_locked(void);
/*
 * A sync point for regular file @i, without ns_lock: its bytes go to the
 * disk tier, fdatasync'd, its committed version into the journal, durable
 * before this returns. With @namespace_too the journal is made durable
 * even when the bytes were synced already (fsync). 0 or -errno.
 */
int tfs_pj_sync(struct tfs_inode *i, bool namespace_too);
/* Make every record so far durable (fsyncdir). */
int tfs_pj_flush(void);
/*
 * At start, after the store: read the spill directory's snapshot and
 * journals. Returns 0 or -errno with why in @err (another version,
 * another chunk size, no snapshot that checks out, out of memory).
 */
int tfs_pj_start(enum cfg_persist mode, char *err, size_t errlen);
/*
 * Once mounted: close the start-up gate and start the loader thread,
 * which adopts the files, rebuilds the tree, starts the journal thread
 * and opens the gate; a restore that fails there logs why and ends the
 * daemon (exit status 1), its directory as it was. Returns 0 (also when
 * not persistent) or -errno when the thread cannot start.
 */
int tfs_pj_load_start(void);
/* After the unmount: save every file and write a snapshot. */
void tfs_pj_stop(void);
/* After tfs_ns_destroy(): close the journal. */
void tfs_pj_destroy(void);
/* The persist lines of user.tierfs.stats; the length needed, like
 * snprintf. */
size_t tfs_pj_stats(char *buf, size_t len);
/* What the last start's recovery dropped (user.tierfs.recovery): its
 * length, -E2BIG when @len is short, -ENODATA when not persistent. */
ssize_t tfs_pj_notes(char *buf, size_t len);

/* dir.c */
void tfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void tfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi);
void tfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi);
void tfs_releasedir(fuse_req_t req, fuse_ino_t ino,
		    struct fuse_file_info *fi);

/* xattr.c */
/*
 * A new inode of *@mode in @dir, with POSIX ACLs on: its mode and ACLs as
 * the kernel's posix_acl_create() gives them. With a default ACL on @dir,
 * *@mode is cut to it (the umask left out) and *@acls gets the xattrs the
 * new inode takes (its access ACL when the mode cannot say it all, and a
 * directory's default ACL), charged to the metadata budget; without one,
 * *@mode loses the bits of @umask. Then tfs_acl_adopt_locked() hands
 * *@acls to the inode, or tfs_acl_drop() frees them. They are charged to
 * @by, who creates the inode. ns_lock held. Returns 0, -ENOSPC past the
 * budget, -EDQUOT past @by's share of it, or -ENOMEM.
 */
int tfs_acl_inherit_locked(const struct tfs_inode *dir, uint32_t *mode,
			   mode_t umask, uid_t by, struct tfs_xattr **acls);
void tfs_acl_adopt_locked(struct tfs_inode *i, struct tfs_xattr *acls);
void tfs_acl_drop(struct tfs_xattr *acls);
/* chmod of @i to its new mode: its access ACL follows. ns_lock held. */
void tfs_acl_chmod_locked(struct tfs_inode *i);
void tfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		  const char *value, size_t size, int flags);
void tfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		  size_t size);
void tfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void tfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/*
 * fileattr.c: FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IOC_FSGETXATTR and
 * FS_IOC_FSSETXATTR, which the kernel sends for chattr and lsattr on a
 * file or directory it opened for the purpose (@flags may carry
 * FUSE_IOCTL_DIR). tfs_fileattr_cmd() says whether @cmd is one of them;
 * tfs_fileattr_ioctl() replies.
 */
bool tfs_fileattr_cmd(unsigned int cmd);
void tfs_fileattr_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd,
			const void *in_buf, size_t in_bufsz, size_t out_bufsz);

/* ioctl.c */
/*
 * fs/prefetch.c, TFS_IOC_PREFETCH's queue. tfs_prefetch(): queue @b to be
 * brought up to @tier for @uid, filling @out's state and pending; with
 * @req, its reply is the prefetch's (sent once it is there, or failed).
 * Returns 1 when @b is there already (nothing queued: the caller replies
 * with @out), 0 when queued (the caller replies, unless it gave @req),
 * -ENODEV, -EAGAIN (the queue is full), -ENOMEM, -ESHUTDOWN.
 * tfs_prefetch_forget(): before @b is destroyed, take it out of the queue
 * and wait for a move of it in flight. tfs_prefetch_start() and
 * tfs_prefetch_set_max() take the queue's bound, [policy] prefetch_queue.
 */
int tfs_prefetch_start(unsigned int max);
void tfs_prefetch_set_max(unsigned int max);
void tfs_prefetch_stop(void);
int tfs_prefetch(fuse_req_t req, struct tier_buf *b, enum tfs_tier tier,
		 uid_t uid, struct tfs_ioc_prefetch *out);
void tfs_prefetch_forget(struct tier_buf *b);
size_t tfs_prefetch_stats(char *buf, size_t len);

void tfs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	       struct fuse_file_info *fi, unsigned int flags,
	       const void *in_buf, size_t in_bufsz, size_t out_bufsz);

/*
 * tmpfile.c: make @se, mounted, take the requests libfuse 3.14 does not
 * know: O_TMPFILE opens (FUSE_TMPFILE) as creates of the name "/", and
 * FUSE_STATX, which it answers itself. Call before the session loop.
 * Returns 0 or -errno.
 */
int tfs_tmpfile_attach(struct fuse_session *se);

/* daemon.c */
/* Send libfuse's messages where tierfs's go (config/log.h). */
void tfs_log_setup(void);
/* Fork; the parent waits for tfs_daemon_ready() and never returns. */
int tfs_daemonize(void);
void tfs_daemon_ready(int status, const char *msg);
void tfs_set_read_ahead(const char *mountpoint, unsigned int kb);

/* What /proc/self/mountinfo says of one mount. */
struct tfs_mountinfo {
	int id;
	unsigned int major, minor;
	char mnt_opts[256]; /* per-mount options: "rw,nosuid,relatime" */
	char sb_opts[256]; /* the superblock's: "ro,user_id=0,..." */
	char fstype[64]; /* "fuse.tierfs" */
};

/*
 * Find the mount on top at @path (absolute, canonical), or with @id > 0 the
 * mount with that id, without touching the filesystem. Returns 0, -ENOENT
 * when there is none, or -errno when mountinfo cannot be read.
 */
int tfs_mountinfo_find(const char *path, int id, struct tfs_mountinfo *out);

/*
 * systemd's notify protocol: send the "KEY=VALUE" lines of @fmt to
 * $NOTIFY_SOCKET (READY=1 once mounted, STOPPING=1, EXTEND_TIMEOUT_USEC
 * while saving). Nothing without the variable.
 */
void tfs_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A persistent mount saves its files after the unmount: @done of @total.
 * About once a second it tells systemd that the stop is still moving
 * (EXTEND_TIMEOUT_USEC), and the next daemon how far it got (the lock
 * file's state).
 */
void tfs_save_progress(size_t done, size_t total);

/* record.c: the mount's record under /run/tierfs. */
struct tfs_record {
	long pid;
	int mount_id;
	unsigned int major, minor;
	char invocation[64]; /* $INVOCATION_ID of its systemd run, or "" */
	char mount[4 * 4096]; /* the mount point, newlines escaped */
};

/* Once mounted at @mnt (canonical): note which mount this daemon made.
 * 0 or -errno (-EPERM when not root: no record then). */
int tfs_record_write(const char *mnt);
/* The record of the daemon that last mounted at @mnt: 0 or -ENOENT. */
int tfs_record_read(const char *mnt, struct tfs_record *r);
/* Whether @r is the record of the mount @mi (not of an earlier one). */
bool tfs_record_names(const struct tfs_record *r,
		      const struct tfs_mountinfo *mi);
/* At exit: remove the record of @mnt if it is this daemon's. */
void tfs_record_drop(const char *mnt);
/*
 * tierfs --unmount-dead MNT, the unit's ExecStopPost: unmount MNT only if
 * it is a tierfs mount made by a daemon of this systemd run (the record's
 * $INVOCATION_ID is ours) that is dead; otherwise leave it, and say why
 * on stderr. Nothing mounted there is not an error and says nothing.
 * Returns the exit status: 0, or 1 when it left a mount.
 */
int tfs_unmount_dead(const char *mnt);

/*
 * The daemon's own user.tierfs.stats lines ("pid=N\n"...), appended after
 * the store's. Returns the length needed, like snprintf.
 */
size_t tfs_daemon_stats(char *buf, size_t len);

/* Record how a SIGHUP reload ended: @err is NULL when it worked. */
void tfs_reload_done(const char *err);
typedef void (*tfs_reload_fn)(void);
/* Run @reload on each SIGHUP and @idle about once a second, in one
 * thread of their own. */
int tfs_sighup_start(tfs_reload_fn reload, tfs_reload_fn idle);
void tfs_sighup_stop(void);

/* data.c: the file data handlers of tfs_ops. */
void tfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	      struct fuse_file_info *fi);
void tfs_write(fuse_req_t req, fuse_ino_t ino, const char *data,
	       size_t size, off_t off, struct fuse_file_info *fi);
void tfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void tfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void tfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
	       struct fuse_file_info *fi);
void tfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off,
		   off_t len, struct fuse_file_info *fi);
void tfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	       struct fuse_file_info *fi);
void tfs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			 struct fuse_file_info *fi_in, fuse_ino_t ino_out,
			 off_t off_out, struct fuse_file_info *fi_out,
			 size_t len, int flags);

#endif
