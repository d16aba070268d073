/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The disk tier: one spill file per buffer in a private directory, holding
 * independent chunks. Chunk i lives in a fixed slot at i * (chunk_size +
 * block), block-aligned; only the bytes it needs are written, so the rest of
 * the slot is a hole and the file takes on disk about what its chunks
 * compress to. Each chunk has a header with its lengths, its encoding (lz4,
 * raw when lz4 does not shrink it, or zero) and a CRC32C of the stored
 * bytes. A chunk with holes stores a page map and only its pages.
 *
 * Thread safety: different objects may be used concurrently; calls on one
 * object must be serialised by the caller, except tier_dobj_read(), which
 * may run concurrently with other reads.
 */
#ifndef TFS_TIERS_DISK_H
#define TFS_TIERS_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

struct tier_disk;
struct tier_dobj;

/* The granularity of holes inside a chunk. */
#define TIER_PAGE 4096u

/*
 * How a chunk's payload maps onto the chunk. Without a map (or without a
 * desc) the payload is the chunk's first bytes and the rest reads as
 * zeroes. With @map (chunk_size / TIER_PAGE bits, bit p for page p, in
 * uint64 words), the payload holds only the pages set there, in order: the
 * k-th TIER_PAGE bytes of it go to the k-th page set, a payload shorter
 * than its pages leaves the rest zero, and pages not set are holes, stored
 * as nothing. @raw stores the payload as it is, never compressed and never
 * as a header alone: pages fallocate took must keep their room on disk.
 */
struct tier_chunk_desc {
	const uint64_t *map;
	bool raw;
};

/* What went wrong with the spill files since init; each is also logged. */
struct tier_disk_stats {
	uint64_t read_errors; /* the file system failed a read of a chunk */
	uint64_t write_errors; /* ... a write of a chunk (a full disk too) */
	uint64_t corrupt_chunks; /* a chunk failed its header or CRC check */
	uint64_t punch_errors; /* room a rewrite freed could not be given
				* back; costs room, never content */
};

/*
 * Create this daemon's spill directory: @path/tierfs.@tag.<random>, 0700,
 * holding a lock file the daemon keeps locked (flock) while it lives. When
 * other users may write to @path, it must be sticky (/var/tmp), and the
 * spill directory goes into the private @path/tierfs-<euid> (see
 * tier_private_dir_open()) instead; a @path owned by another user than
 * root or this one is refused. Before that, spill directories of daemons
 * that are gone are removed from where it goes: only private directories
 * whose lock file nobody holds, and only the files in them, every name
 * resolved from a directory descriptor without following symlinks.
 * Returns 0 or -errno with a message in @err.
 */
int tier_disk_init(struct tier_disk **out, const char *path, const char *tag,
		   uint32_t chunk_size, enum cfg_compression compression,
		   char *err, size_t errlen);

/* How the daemon before this one left a persistent directory. */
enum tier_disk_prev {
	TIER_PREV_UNKNOWN, /* new, or a tierfs that did not say */
	TIER_PREV_CLEAN, /* it saved everything and stopped */
	TIER_PREV_CRASHED, /* it died while it ran (kill -9, a crash) */
};

/*
 * A persistent mount's spill directory: like tier_disk_init() (the same
 * checks of @path, the same private parent, the same sweep of stale
 * non-persistent directories), but with the fixed name
 * tierfs-persist.<@name>, opened when it exists and made when it does not,
 * and refused unless it is private (tier_private_dir_open()). Its lock
 * file is held with flock for the daemon's life and holds its pid and
 * state (tier_disk_set_state()): a second daemon gets -EBUSY with that pid
 * in @err, after waiting, at most TIER_DISK_WAIT_S seconds, for one that
 * is going away (saving after an unmount). @name must pass
 * tier_disk_name_valid().
 */
#define TIER_DISK_WAIT_S 600
int tier_disk_init_persistent(struct tier_disk **out, const char *path,
			      const char *name, uint32_t chunk_size,
			      enum cfg_compression compression, char *err,
			      size_t errlen);

/*
 * A shared tier's spill directory: like tier_disk_init() (the same checks
 * of @path and the same private parent, which every tierfs sharing @path
 * must reach as the same user), named tierfs-shared.<node>.<@tag>.<random>
 * and holding a MANIFEST that says its format (chunk size, block, node,
 * pid), so that another tierfs can read its spill files. Stale directories
 * are swept only when they are this node's: another node's lock is not
 * visible here on every filesystem. Objects of a shared tier are written
 * whole once and never rewritten in place, so another tierfs may hold a
 * hard link to one (tier_dobj_handoff(), tier_dobj_adopt_link()).
 */
int tier_disk_init_shared(struct tier_disk **out, const char *path,
			  const char *tag, uint32_t chunk_size,
			  enum cfg_compression compression, char *err,
			  size_t errlen);

bool tier_disk_shared(const struct tier_disk *d);

/*
 * Give @o, buffer @id's spill file of @size bytes in a shared tier, a
 * name another tierfs can adopt it by: a hard link h.<id>.<size>.<token>
 * beside it, where the token is 64 random bits (*@token 0: a new one,
 * returned; else the one given before, the link made again when gone).
 * Its full path into @buf. Only whoever is told the path can adopt the
 * file: ids are guessable, tokens are not. 0 or -errno.
 */
int tier_dobj_handoff(struct tier_disk *d, struct tier_dobj *o, uint64_t id,
		      uint64_t size, uint64_t *token, char *buf, size_t len);

/* Remove the hand-off name of tier_dobj_handoff(); adopters keep theirs. */
void tier_dobj_handoff_drop(struct tier_disk *d, uint64_t id, uint64_t size,
			    uint64_t token);

/*
 * Adopt the file a hand-off path (@path, @len bytes, a trailing newline or
 * NUL ignored) names as the spill file of buffer @id: a hard link to it in
 * @d's own directory, so no byte is copied; its chunk table comes from its
 * chunk headers (a damaged one reads as EIO later, never as wrong bytes),
 * its size, into *@size, from the name. The path must be one of a shared
 * directory beside @d's (the same parent, the same format in its
 * MANIFEST). -EINVAL for a path that is not a hand-off name, -EXDEV for
 * one outside @d's parent, -ENOENT when it is gone, -EPERM when what is
 * there is not tierfs's (owner, mode, symlinks), -EPROTO for another chunk
 * size or block, -ENOMEM.
 */
int tier_dobj_adopt_link(struct tier_disk *d, const char *path, size_t len,
			 uint64_t id, uint64_t *size, struct tier_dobj **out);

/* 1 to 64 of [A-Za-z0-9._-], not starting with a dot. */
bool tier_disk_name_valid(const char *name);

/*
 * A persistent directory's lock file says, after its holder's pid, what
 * the holder does, for the next daemon: "starting", "serving MOUNTPOINT"
 * (the mount point escaped as in mountinfo), "saving" (it was unmounted
 * and writes its files out) and "stopped" (saved, about to exit; synced
 * to disk). A daemon refused the lock waits for a holder that is saving,
 * or whose mount point is gone from its mountinfo (unmounted, not yet
 * saving), instead of failing at once. @mnt is for "serving", else NULL.
 * No-op for a directory that is not persistent. 0 or -errno.
 */
int tier_disk_set_state(struct tier_disk *d, const char *state,
			const char *mnt);

/* How the daemon before this one left the persistent directory. */
enum tier_disk_prev tier_disk_prev(const struct tier_disk *d);

/* Free @d. A non-persistent directory is removed with everything in it; a
 * persistent one stays as it is (only its lock is released). */
void tier_disk_destroy(struct tier_disk *d);

bool tier_disk_persistent(const struct tier_disk *d);

/* The spill directory's descriptor, for the journal's files beside the
 * spill files; owned by @d. */
int tier_disk_dirfd(const struct tier_disk *d);

/* The ids of the spill files in the directory (malloc'd into *@ids, which
 * the caller frees). 0 or -errno. */
int tier_disk_list(struct tier_disk *d, uint64_t **ids, size_t *n);

/* Unlink the spill file of @id, if there is one. */
void tier_disk_remove(struct tier_disk *d, uint64_t id);

/* The spill directory's path, for log lines and tests. */
const char *tier_disk_path(const struct tier_disk *d);

enum tier_pdir_mode {
	TIER_PDIR_OPEN, /* only an existing directory */
	TIER_PDIR_CREATE, /* an existing one, or create it */
	TIER_PDIR_CREATE_EXCL, /* create it; -EEXIST when the name is taken */
};

/*
 * Open the directory @name under the directory descriptor @parent, made
 * (mode 0700) first as @mode says, and check that it is private: a real
 * directory reached without following a symlink, owned by this process's
 * effective uid, mode exactly 0700. Returns its descriptor (O_CLOEXEC),
 * -ENOENT when missing (TIER_PDIR_OPEN), -EEXIST (TIER_PDIR_CREATE_EXCL),
 * -EPERM when what is there is not private, or another -errno.
 */
int tier_private_dir_open(int parent, const char *name,
			  enum tier_pdir_mode mode);

/* The chunk size given to init. */
uint32_t tier_disk_chunk_size(const struct tier_disk *d);

/* The error counters; thread-safe. */
void tier_disk_stats(const struct tier_disk *d, struct tier_disk_stats *out);

/* Create the (empty) spill file for buffer @id, mode 0600. */
int tier_dobj_create(struct tier_disk *d, uint64_t id, struct tier_dobj **out);

/* Unlink the spill file and free @o. */
void tier_dobj_destroy(struct tier_disk *d, struct tier_dobj *o);

/* Free @o and keep its file (a persistent mount going down). */
void tier_dobj_close(struct tier_disk *d, struct tier_dobj *o);

/*
 * Committed versions (persistent mounts). An object may hold, besides its
 * current chunks, the chunks of one committed version: the bytes the
 * metadata journal names, which must survive until a newer version is
 * committed. No write, truncate or revert touches a slot the committed
 * version uses; writes go to free slots instead. tier_dobj_stored() counts
 * both versions' bytes, each slot once.
 *
 * tier_dobj_map() describes the current version: a u32 count, then per
 * chunk present its index, slot and meta word (u32 each, little-endian).
 * Returns the bytes it needs; writes them only when @len is enough.
 */
size_t tier_dobj_map(const struct tier_dobj *o, void *buf, size_t len);

/* fdatasync the spill file. 0 or -errno (logged, counted). */
int tier_dobj_sync(struct tier_disk *d, struct tier_dobj *o);

/*
 * The current version becomes the committed one; the slots of the one it
 * replaces that it does not use are punched out. Call only once the
 * journal record naming the new version (its tier_dobj_map()) is durable.
 * 0 or -ENOMEM (nothing changed).
 */
int tier_dobj_commit(struct tier_disk *d, struct tier_dobj *o);

/* Everything tier_dobj_commit() allocates, ahead: after it, and with no
 * write in between, the commit cannot fail. 0 or -ENOMEM. */
int tier_dobj_commit_prepare(struct tier_disk *d, struct tier_dobj *o);

/* Whether @o holds a committed version. */
bool tier_dobj_committed(const struct tier_dobj *o);

/* The current version becomes the committed one again: chunks written
 * since the commit are punched out. A no-op without a committed version. */
void tier_dobj_revert(struct tier_disk *d, struct tier_dobj *o);

/*
 * An object for the spill file of buffer @id holding a committed version
 * as @map (what tier_dobj_map() wrote) says, its current version the
 * same. Opens nothing: the file is opened on first use. The table says
 * nothing of the file's size: a file may have chunks past its end (pages
 * fallocate kept there) and none at all before it (holes).
 *
 * Without @lost, -EINVAL when an entry is not one this disk tier can have
 * (indices out of order, a slot used twice or out of range, a meta word no
 * chunk can have), -ENOMEM. With @lost (salvage), such entries are left
 * out, @lost is called for each with the chunk's index (UINT64_MAX when
 * not even that is known) and why, and every chunk that is kept is read
 * once and left out too, said the same way, when it does not check out
 * (its header, its checksum): the object then holds only chunks that read
 * back. An entry whose slot another one claimed gets that slot when the
 * other's chunk did not check out. Only -ENOMEM, or -EIO when the spill
 * file cannot be opened, fails a salvage.
 */
typedef void (*tier_dobj_lost_fn)(void *ctx, uint64_t idx, const char *why);
int tier_dobj_adopt(struct tier_disk *d, uint64_t id, const void *map,
		    size_t len, tier_dobj_lost_fn lost, void *ctx,
		    struct tier_dobj **out);

/* One past the highest chunk @o holds (0 when empty). */
uint64_t tier_dobj_nchunks(const struct tier_dobj *o);

/* Pages of payload chunk @idx stores when that is known from its table
 * entry alone (stored raw, without a page map); 0 when absent, else
 * UINT32_MAX when unknown. */
uint32_t tier_dobj_chunk_pages(const struct tier_disk *d,
			       const struct tier_dobj *o, uint64_t idx);

/*
 * Store chunk @idx: @len bytes (<= chunk size; a shorter chunk reads back
 * zero-padded). A chunk of all zeroes is stored as a header alone. Returns
 * 0 or -errno (-ENOSPC when the disk is full: the previous content of the
 * chunk is then undefined, the caller must not rely on it).
 */
int tier_dobj_write_chunk(struct tier_disk *d, struct tier_dobj *o,
			  uint64_t idx, const void *src, size_t len);

/*
 * Store chunks @first_idx .. @first_idx + @n - 1 from @srcs[i] of @lens[i]
 * bytes each, as tier_dobj_write_chunk() would, compressing them in
 * parallel on the disk tier's worker pool (one thread per extra core; the
 * caller works too). Returns 0 or the first -errno; on failure the content
 * of every chunk in the range is undefined.
 */
int tier_dobj_write_chunks(struct tier_disk *d, struct tier_dobj *o,
			   uint64_t first_idx, const void *const *srcs,
			   const size_t *lens, size_t n);

/* tier_dobj_write_chunks() with a layout per chunk (@descs may be NULL;
 * see struct tier_chunk_desc). */
int tier_dobj_write_chunks_desc(struct tier_disk *d, struct tier_dobj *o,
				uint64_t first_idx, const void *const *srcs,
				const size_t *lens,
				const struct tier_chunk_desc *descs, size_t n);

/*
 * Read @len bytes at @off, decompressing only the chunks the range touches.
 * Chunks never written read as zeroes. Returns 0, or -EIO after logging the
 * spill file's name and the chunk when a checksum or decode fails or the
 * file system fails the read (other -errno it gives pass through).
 * A range of several chunks is decoded in parallel on the worker pool.
 */
int tier_dobj_read(struct tier_disk *d, struct tier_dobj *o, void *dst,
		   size_t len, uint64_t off);

/*
 * Read the first @lens[i] bytes of chunks @first_idx + i into @dsts[i],
 * for i < @n, decompressing in parallel on the worker pool (holes of a
 * chunk stored with a page map read as zeroes). Same errors as
 * tier_dobj_read().
 */
int tier_dobj_read_chunks(struct tier_disk *d, struct tier_dobj *o,
			  uint64_t first_idx, void *const *dsts,
			  const size_t *lens, size_t n);

/* Forget chunks at and beyond @nchunks (punches them out of the file, but
 * for those of a committed version). */
int tier_dobj_truncate(struct tier_disk *d, struct tier_dobj *o,
		       uint64_t nchunks);

/* Forget chunk @idx, which then reads as zeroes, and punch it out. */
int tier_dobj_drop_chunk(struct tier_disk *d, struct tier_dobj *o,
			 uint64_t idx);

/* Bytes of disk the object's chunks take: their blocks (header, map and
 * stored bytes, rounded up to the block each slot starts on). */
uint64_t tier_dobj_stored(const struct tier_dobj *o);

/* What chunk @idx of @o takes now, in the same unit; 0 when absent. */
uint64_t tier_dobj_chunk_cost(const struct tier_disk *d,
			      const struct tier_dobj *o, uint64_t idx);

/* The most a chunk of @len bytes of payload can take (stored raw), with a
 * page map when @map: charge this before writing it. */
uint64_t tier_disk_chunk_bound(const struct tier_disk *d, size_t len,
			       bool map);

/* Path of the spill file, for log lines and tests. */
const char *tier_dobj_path(const struct tier_dobj *o);

/* CRC32C (Castagnoli) of @len bytes, continuing from @crc (start with 0). */
uint32_t tfs_crc32c(uint32_t crc, const void *buf, size_t len);

/* The two implementations behind tfs_crc32c(), for tests and benchmarks:
 * the portable table one, and SSE4.2 (the table one where the CPU lacks it,
 * as tfs_crc32c_hw_supported() tells). */
uint32_t tfs_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t tfs_crc32c_hw(uint32_t crc, const void *buf, size_t len);
bool tfs_crc32c_hw_supported(void);

#endif
