/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The metadata journal of a persistent mount, and its snapshots.
 *
 * A persistent spill directory holds snap.<G> (the whole namespace at some
 * point) and journal.<G>, journal.<G+1>... (the records after it). A record
 * is one transaction of items, each setting or deleting an entry of two
 * maps: inode number -> inode, and (parent, name) -> inode number. Replay is
 * the same loop for snapshots and journals; see doc/design.md.
 *
 * On disk, little-endian: a file header (magic, format version, chunk size,
 * generation, first sequence number, header CRC), then records
 * {u32 length, u32 CRC32C, u64 sequence, items}, the CRC over the sequence
 * and the items; an item is {u16 type, u16 zero, u32 length, payload}.
 *
 * This module knows nothing of FUSE or of the store: the chunk table of a
 * file's data (struct pj_data.map) is opaque bytes here.
 *
 * Locks: struct pj has one mutex, a leaf. Appends take it; so does the
 * group commit, which drops it across the write and fdatasync. Callers may
 * hold their own locks (the namespace's, a buffer's) across any call but
 * pj_commit(), which waits for I/O: hold none that a writer of records
 * needs across that one.
 */
#ifndef TFS_PERSIST_H
#define TFS_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Bumped whenever the layout of any file or item changes. Version 2: a
 * file's I_DATA map holds its page maps after the chunk table. A
 * directory of an older version this tierfs still reads
 * (PJ_FORMAT_OLDEST on) is loaded and rewritten in this one at start
 * (pj_image.upgrade); an earlier tierfs refuses what this one wrote. */
#define PJ_FORMAT_VERSION 2
#define PJ_FORMAT_OLDEST 1

enum pj_item_type {
	PJ_I_ATTR = 1, /* struct pj_attr: an inode's attributes, whole */
	PJ_I_DATA = 2, /* struct pj_data: a file's committed data */
	PJ_I_DIRTY = 3, /* the file changed after its last PJ_I_DATA */
	PJ_I_FREE = 4, /* the inode is gone */
	PJ_D_SET = 5, /* a name points at an inode */
	PJ_D_DEL = 6, /* a name is gone */
	PJ_META = 7, /* struct pj_meta: counters; snapshots only */
};

/* struct pj_attr.iflags */
#define PJ_IF_PIN 0x1u /* user.tierfs.pin */
/*
 * The rest of struct tfs_ipol (fs/fs_i.h), in bits an older tierfs
 * ignores: the soft pin's priority, the write policy, a directory's
 * preferred tier + 1, and the soft pin's time to live in seconds (at most
 * 7 days, under 2^20).
 */
#define PJ_IF_SOFT_SHIFT 1 /* 3 bits */
#define PJ_IF_WRITE_SHIFT 4 /* 2 bits */
#define PJ_IF_PLACE_SHIFT 6 /* 2 bits */
#define PJ_IF_TTL_SHIFT 12 /* 20 bits */

struct pj_xattr {
	const char *name;
	const void *value;
	uint32_t nlen, vlen;
};

struct pj_attr {
	uint64_t ino;
	uint32_t mode, uid, gid, nlink;
	uint64_t rdev;
	uint32_t fsflags; /* chattr flags (FS_*_FL) */
	uint32_t generation; /* of file handles */
	uint32_t iflags; /* PJ_IF_* */
	struct timespec atime, mtime, ctime;
	const char *target; /* a symlink's, else NULL */
	uint32_t target_len;
	uint32_t nxattrs;
	const struct pj_xattr *xattrs; /* user.* attributes */
};

struct pj_data {
	uint64_t ino;
	uint64_t id; /* the buffer, and its spill file's name */
	uint64_t size;
	struct timespec mtime, ctime;
	const void *map; /* the disk tier's chunk table of the version */
	uint32_t map_len;
};

struct pj_meta {
	uint64_t next_ino;
	uint64_t next_id;
	uint32_t next_generation;
};

/* A record being built: items in a growing buffer. Out of memory is
 * remembered in err and reported by whoever appends or writes it. */
struct pj_rec {
	char *buf;
	size_t len, cap;
	uint32_t items;
	int err;
};

void pj_rec_init(struct pj_rec *r);
void pj_rec_reset(struct pj_rec *r);
void pj_rec_release(struct pj_rec *r);
void pj_rec_attr(struct pj_rec *r, const struct pj_attr *a);
void pj_rec_data(struct pj_rec *r, const struct pj_data *d);
void pj_rec_dirty(struct pj_rec *r, uint64_t ino);
void pj_rec_free(struct pj_rec *r, uint64_t ino);
void pj_rec_dset(struct pj_rec *r, uint64_t parent, const char *name,
		 size_t len, uint64_t ino);
void pj_rec_ddel(struct pj_rec *r, uint64_t parent, const char *name,
		 size_t len);
void pj_rec_meta(struct pj_rec *r, const struct pj_meta *m);

/* --- the image: what a snapshot and the journals after it say --- */

struct pj_inode {
	struct pj_inode *hnext;
	struct pj_attr a; /* a.target and a.xattrs point into this inode */
	struct pj_data d; /* d.map points into this inode */
	bool has_attr, has_data, dirty;
	/* Set by pj_image_resolve(). */
	bool keep;
	bool found; /* kept in lost+found, not at its names */
	uint8_t fate; /* private */
	uint64_t parent; /* a kept directory's parent */
	void *user; /* the caller's: set by its adopt callback */
	/* Set by the adopt callback beside keeping the file (returning
	 * NULL), each a sentence read before the next call: @mended, what
	 * had to be mended with every byte kept (the file stays where it
	 * is, noted "repaired"); @salvaged, what of its bytes is lost (the
	 * file goes to lost+found instead of its names). */
	const char *mended, *salvaged;
	/* Private: the items' bytes the pointers above point into, the
	 * name a kept directory was reached by, one that names a file no
	 * kept name reaches, and why a salvaged file was. */
	char *attr_raw, *data_raw;
	struct pj_xattr *xv;
	const struct pj_dentry *via, *named;
	char *lost_why;
};

struct pj_dentry {
	struct pj_dentry *hnext;
	uint64_t parent, ino;
	uint64_t order; /* when it was set, for readdir order */
	uint16_t len;
	char name[]; /* NUL-terminated */
};

/* One line of what recovery dropped or rolled back. */
struct pj_note {
	struct pj_note *next;
	char text[]; /* "kind\tpath\twhy", path escaped (see pj_escape) */
};

struct pj_image {
	struct pj_meta meta;
	uint64_t generation; /* of the snapshot read */
	uint64_t seq; /* the last record applied */
	int64_t snapshot_time; /* when it was written, seconds */
	uint64_t snapshot_bytes, journal_bytes;
	uint64_t records; /* applied */
	bool fresh; /* nothing was there: a new directory */
	bool clean; /* the last stop was clean: no journal records after
		     * the snapshot */
	bool need_snapshot; /* write one before appending: something was
			     * dropped, or a journal tail cut */
	bool upgrade; /* a file of an older format version was read: write
		       * a snapshot before appending, in this version */
	/* Maps, then after pj_image_resolve() the kept inodes (every
	 * directory before what it holds) and names (parents first). */
	struct pj_inode **ihash;
	size_t imask, icount;
	struct pj_dentry **dhash;
	size_t dmask, dcount;
	uint64_t next_order;
	struct pj_inode **inodes;
	size_t ninodes;
	struct pj_dentry **dentries;
	size_t ndentries;
	struct pj_note *notes, **notes_tail;
	uint64_t dropped, rolled_back, found;
	uint64_t lost_found; /* the inode of lost+found when it was used */
	int error; /* private: -ENOMEM while loading */
};

/*
 * Read the spill directory @dirfd (@dirpath, for messages) into an image.
 * A directory with neither snapshots nor journals is fresh. A file of
 * another format version or chunk size than @chunk_size, or journals
 * without a snapshot, are refused with -EINVAL (or -EPROTO for a version)
 * and a message in @err. Damage is not an error: replay keeps what checks
 * out (a snapshot's bad record is skipped, a journal stops at its first
 * bad record), notes it, sets need_snapshot, and cuts the bad journal
 * there so that nothing is ever appended after it.
 */
int pj_image_load(int dirfd, const char *dirpath, uint32_t chunk_size,
		  struct pj_image **out, char *err, size_t errlen);

/* Feed one more record's items (for tests and the loader). Returns 0 or
 * -EINVAL for a malformed item, after which the image holds the items
 * before it. */
int pj_image_apply(struct pj_image *img, const void *items, size_t len);

/*
 * Decide what comes back. @adopt is called for every regular file with
 * committed data that is reached by a name or reached by none; it returns
 * NULL to keep it (and may set ino->user, ->mended and ->salvaged) or why
 * not ("spill file missing"), which drops the file. Files without
 * committed data are dropped ("never synced"), those changed since are
 * noted as rolled back, names of missing inodes and what the root cannot
 * reach are dropped. A regular file whose bytes are kept but that no kept
 * name reaches (its names or its directory lost, or salvaged) goes to
 * PJ_LOST_FOUND at the root (0700, @uid, @gid, made when none is; an entry
 * of that name that is not such a directory makes it "lost+found.1" and
 * on) as "#<ino>", each noted "lost+found" with where it went. The rest
 * is put in inodes[] and dentries[] in an order that creates parents
 * first, with nlink and parent recomputed from the names. A root missing
 * from the image is made (0755, @uid, @gid). Returns 0 or -ENOMEM.
 */
#define PJ_LOST_FOUND "lost+found"
int pj_image_resolve(struct pj_image *img,
		     const char *(*adopt)(void *ctx, struct pj_inode *ino),
		     void *ctx, uint32_t uid, uint32_t gid);

/* The image's inode @ino, or NULL. */
struct pj_inode *pj_image_inode(const struct pj_image *img, uint64_t ino);

/* Add a note line; "kind", @path as given (escape first), "why". */
void pj_image_note(struct pj_image *img, const char *kind, const char *path,
		   const char *why);

void pj_image_free(struct pj_image *img);

/*
 * Escape @len bytes of @name for a note line into @out (@outlen bytes,
 * always NUL-terminated): backslash, tab, newline and other control bytes
 * become \ooo octal, as in /proc/self/mountinfo.
 */
void pj_escape(const char *name, size_t len, char *out, size_t outlen);

/* --- the journal --- */

struct pj;

struct pj_stats {
	uint64_t generation;
	uint64_t journal_bytes; /* in the journal files since the snapshot */
	uint64_t journal_records;
	uint64_t pending_bytes; /* appended, not yet written */
	uint64_t snapshot_bytes;
	int64_t snapshot_time; /* seconds; 0 when none was written yet */
	uint64_t seq, durable_seq;
	uint64_t commits; /* fdatasyncs of the journal */
	int error; /* the sticky write error, 0 when none */
};

/*
 * Start appending where @img's load ended (@img may be freed after). The
 * directory's descriptor is duplicated. Returns 0 or -errno.
 */
int pj_start(int dirfd, const char *dirpath, uint32_t chunk_size,
	     const struct pj_image *img, struct pj **out, char *err,
	     size_t errlen);

/* Close without writing anything more (pending records are lost: call
 * pj_commit() first). */
void pj_stop(struct pj *j);

/*
 * Append @r's items as one record; returns its sequence number, or 0 when
 * @r is empty. A record that cannot be kept (out of memory) makes every
 * later pj_commit() fail with -EIO until a snapshot is written: the
 * journal no longer says what the namespace holds.
 */
uint64_t pj_append(struct pj *j, const struct pj_rec *r);

/*
 * pj_append() and, under the same lock, *@slot = @val with the previous
 * value in *@old: for state that must change exactly where the record
 * lands in the journal (a file's committed chunk table, which snapshots
 * read under pj_hold()).
 */
uint64_t pj_append_swap(struct pj *j, const struct pj_rec *r, void **slot,
			void *val, void **old);

/* Swap a slot as above without a record, and read one (under the lock). */
void *pj_swap(struct pj *j, void **slot, void *val);

/*
 * Make every record up to @seq durable: the first caller writes and
 * fdatasyncs what is pending, callers arriving meanwhile wait and share
 * the next one. Returns 0 or -errno (the sticky error: -EIO or what the
 * write or fdatasync said).
 */
int pj_commit(struct pj *j, uint64_t seq);

/* The last sequence number appended. */
uint64_t pj_seq(struct pj *j);

/* Make everything appended so far durable. */
int pj_flush(struct pj *j);

/* Whether the journal has grown enough to be worth a snapshot. */
bool pj_want_snapshot(struct pj *j);

/*
 * A snapshot. pj_hold() waits for any write in flight and then keeps
 * every append out; the caller, its namespace locked, builds the whole
 * state into @body (pj_rec_* calls; a PJ_META item first) and reads the
 * slots of pj_append_swap() directly. pj_cut() then writes what was
 * pending to the current journal, syncs it, starts the next generation's
 * journal and lets appends in again: from here on records belong after
 * the snapshot. pj_snapshot_write(), without any lock, writes @body as
 * snap.<G> through a temporary file and rename, and removes the files of
 * older generations. Each returns 0 or -errno with a logged message; after
 * a failed pj_cut() appends go on into the old journal.
 */
void pj_hold(struct pj *j);
int pj_cut(struct pj *j);
/* Let appends in again without a cut: the snapshot was given up. */
void pj_cut_abort(struct pj *j);
int pj_snapshot_write(struct pj *j, const struct pj_rec *body);

void pj_stats(struct pj *j, struct pj_stats *out);

#endif
