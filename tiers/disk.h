/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The disk tier: one spill file per buffer in a private directory, holding
 * independent chunks. Chunk i lives in a fixed slot at i * (chunk_size +
 * header); only the bytes it needs are written, so the rest of the slot is a
 * hole and the file takes on disk about what its chunks compress to. Each
 * chunk has a header with its lengths, its encoding (lz4, raw when lz4 does
 * not shrink it, or zero) and a CRC32C of the stored bytes.
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

/* Remove the directory and everything in it; free @d. */
void tier_disk_destroy(struct tier_disk *d);

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
 * Read the first @lens[i] bytes of chunks @first_idx + i into @dsts[i], for
 * i < @n, decompressing in parallel on the worker pool. Same errors as
 * tier_dobj_read().
 */
int tier_dobj_read_chunks(struct tier_disk *d, struct tier_dobj *o,
			  uint64_t first_idx, void *const *dsts,
			  const size_t *lens, size_t n);

/* Forget chunks at and beyond @nchunks (punches them out of the file). */
int tier_dobj_truncate(struct tier_disk *d, struct tier_dobj *o,
		       uint64_t nchunks);

/* Bytes the object's chunks take: headers plus stored data. */
uint64_t tier_dobj_stored(const struct tier_dobj *o);

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
