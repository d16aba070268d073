// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Private to the disk tier's files (disk.c, disk_chunk.c, disk_dir.c,
 * disk_pool.c): the on-disk layout, the structs and what they share.
 */
#ifndef TFS_DISK_I_H
#define TFS_DISK_I_H

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <lz4.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "config/log.h"
#include "tiers/disk.h"

#define CHUNK_MAGIC 0x43534654u /* "TFSC" */
#define CHUNK_VERSION 1
#define MAX_CHUNK_SIZE (64u << 20)
#define MAX_POOL_THREADS 15
/* Chunks written at once without an allocation for their bookkeeping. */
#define SMALL_BATCH 16

enum chunk_enc {
	ENC_NONE = 0, /* in meta only: chunk absent */
	ENC_ZERO = 1,
	ENC_RAW = 2,
	ENC_LZ4 = 3,
};

struct chunk_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t encoding;
	uint16_t flags; /* HDR_F_* */
	uint32_t raw_len;
	uint32_t stored_len;
	uint64_t index;
	uint32_t data_crc;
	uint32_t hdr_crc; /* of the 28 bytes before it */
};

#define HDR ((uint32_t)sizeof(struct chunk_hdr))
_Static_assert(sizeof(struct chunk_hdr) == 32, "chunk header is 32 bytes");

/*
 * The header is followed by a page map: the payload holds only the pages
 * set in it (a chunk with holes), and the data CRC covers the map too.
 */
#define HDR_F_MAP 0x1u

/* One chunk in tier_dobj_map(): index, slot, meta word. */
#define DOBJ_MAP_ENTRY 12

/* meta word: slot bytes used (header, map, stored) in the low 29 bits, a
 * page map in bit 29, the encoding in the top two; 0 is an absent chunk. */
#define META_LEN_MASK ((1u << 29) - 1)
#define META_MAP (1u << 29)
#define META_ENC_SHIFT 30

/* The bytes of its slot a chunk of meta word @m uses. */
static inline uint32_t meta_total(uint32_t m)
{
	return m & META_LEN_MASK;
}

/*
 * A job is n independent items run by the pool threads and its submitter.
 * Lock order: pool.lock is a leaf; nothing else is taken under it.
 */
struct pool_job {
	void (*fn)(struct pool_job *job, size_t item);
	size_t n;
	size_t next; /* next item to claim; pool.lock */
	size_t done; /* items finished; pool.lock */
	struct pool_job *link; /* in pool.queue while next < n; pool.lock */
};

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t work_cv; /* a job was queued, or stop was set */
	pthread_cond_t done_cv; /* some job finished an item */
	struct pool_job *queue; /* pool.lock */
	bool stop; /* pool.lock */
	unsigned int nthreads;
	pthread_t threads[MAX_POOL_THREADS];
};

struct tier_disk {
	int basefd; /* where the spill directory is: disk_path, or private */
	int dirfd; /* the spill directory */
	int lockfd; /* its lock file, held while the daemon lives */
	bool persistent; /* kept at destroy; see tier_disk_init_persistent() */
	/* Persistent: how the daemon before this one left the directory,
	 * read from the lock file before it was taken. */
	enum tier_disk_prev prev;
	bool shared; /* see tier_disk_init_shared() */
	size_t baselen; /* dir[0, baselen) is the path of basefd */
	const char *name; /* the spill directory's name in basefd, in dir */
	uint32_t chunk_size;
	/* Slots start on this boundary and a chunk costs whole units of it:
	 * the file system's block, at least a page. */
	uint32_t blk;
	enum cfg_compression compression;
	int accel;
	int fd_budget; /* descriptors objects may still keep open; atomic */
	struct tier_disk_stats stats; /* atomic */
	struct pool pool;
	size_t dirlen;
	char dir[];
};

/*
 * Where the chunks of an object with a committed version are. Bit s of
 * used: slot s holds a chunk of the current version; of pin: of the
 * committed one. A slot in neither is free (and a hole in the file).
 */
struct dobj_cow {
	uint32_t *slot; /* [scap] the current version's chunk i is in slot[i] */
	uint32_t scap;
	uint32_t *cmeta, *cslot; /* [ccap] the committed version's */
	uint32_t ccap;
	uint64_t *used, *pin; /* [nwords] */
	uint32_t nwords;
	uint32_t hint; /* no free slot below this */
	uint64_t extra; /* bytes of pinned slots the current version left */
};

struct tier_dobj {
	/* -1: opened for each call; kept once the descriptor budget allows
	 * (objects adopted at start open nothing until first used). Set
	 * with a compare-and-swap: concurrent readers may race to open. */
	int fd;
	uint32_t cap; /* meta entries */
	uint64_t stored; /* the blocks the chunks take, in bytes */
	union {
		uint32_t inl[2];
		uint32_t *arr;
	} meta;
	struct dobj_cow *cow; /* NULL until a version is committed */
	char path[];
};

struct scratch {
	size_t in_cap;
	char *in; /* a header and a stored chunk */
	size_t out_cap;
	char *out; /* one decoded chunk, for reads of part of it */
	void *lz4_state;
};

/*
 * Shared across the files; each function's contract is the comment at its
 * definition.
 */

/* disk_pool.c: per-thread scratch, the worker pool */
struct scratch *scratch_get(uint32_t cs, bool want_out);
void pool_start(struct pool *p);
void pool_stop(struct pool *p);
void pool_run(struct pool *p, struct pool_job *job);

/*
 * disk_chunk.c: the chunk codec, on memory only (no descriptor reaches
 * it). What it needs of the disk tier: the chunk size, the compression and
 * lz4's acceleration.
 */
struct chunk_codec {
	uint32_t chunk_size;
	enum cfg_compression compression;
	int accel;
};

static inline struct chunk_codec codec_of(const struct tier_disk *d)
{
	return (struct chunk_codec){ d->chunk_size, d->compression, d->accel };
}

/* A chunk encoded for its slot: the bytes to write, in order, and what
 * they make its meta word. */
struct chunk_enc_out {
	struct iovec iov[3]; /* header, page map, stored bytes */
	int cnt;
	uint32_t total; /* bytes of the slot used */
	uint32_t meta;
	int lz4_error; /* lz4's code when encoding returned -EIO */
};

/*
 * Encode chunk @idx: @len bytes of payload at @src (<= chunk size), laid out
 * as @desc says (NULL: the chunk's first bytes). The header and any lz4
 * block are in this thread's scratch, valid until its next use; the map is
 * @desc's. 0, -ENOMEM, or -EIO when lz4 failed (out->lz4_error).
 */
int chunk_encode(const struct chunk_codec *c, uint64_t idx, const void *src,
		 size_t len, const struct tier_chunk_desc *desc,
		 struct chunk_enc_out *out);
/* NULL when header @h fits chunk @idx as meta word @meta says, else what
 * is wrong with it. */
const char *chunk_check_hdr(const struct chunk_codec *c,
			    const struct chunk_hdr *h, uint64_t idx,
			    uint32_t meta);
/* Whether bytes [@lo, @lo + @n) of a chunk of meta word @meta (not 0) can
 * be read straight into the caller's buffer: a raw chunk without a map,
 * read from its start and whole. Then the header is read apart and
 * chunk_check_direct() checks it and the data, zeroing the rest of @n. */
bool chunk_direct(uint32_t meta, size_t lo, size_t n);
const char *chunk_check_direct(const struct chunk_codec *c,
			       const struct chunk_hdr *h, uint64_t idx,
			       uint32_t meta, char *out, size_t n);
/*
 * Check the meta_total(@m) bytes of chunk @idx's slot at @slot and decode
 * its bytes [@lo, @lo + @n) into @out; holes read as zeroes. 0, -ENOMEM,
 * or -EIO with *@why saying what is wrong (in @whybuf when it needs
 * formatting).
 */
int chunk_decode(const struct chunk_codec *c, uint64_t idx, uint32_t m,
		 const char *slot, char *out, size_t lo, size_t n,
		 char *whybuf, size_t whylen, const char **why);
bool all_zero(const void *buf, size_t len);
uint32_t hdr_crc(const struct chunk_hdr *h);

/* disk.c: one chunk stored into its slot, one loaded (the file side of
 * the codec) */
int chunk_store(struct tier_disk *d, struct tier_dobj *o, int fd,
		uint64_t idx, uint64_t slot, const void *src, size_t len,
		const struct tier_chunk_desc *desc, uint32_t old,
		uint32_t *meta);
int range_chunk(struct tier_disk *d, const struct tier_dobj *o, int fd,
		char *dst, size_t len, uint64_t off, uint64_t idx);

/* disk_shared.c: what a shared tier's directory adds */

/* The most bytes of a node's name in a shared directory's name. */
#define SHARED_NODE_MAX 64
/* This node's name as it goes into a shared directory's name: the host
 * name, [A-Za-z0-9.-] only. */
void tier_shared_node(char *buf, size_t len);
/* Write d's MANIFEST (the format another tierfs needs to read its files).
 * 0 or -errno. */
int tier_shared_manifest(struct tier_disk *d);

/* disk.c: small helpers */
off_t chunk_off(const struct tier_disk *d, uint64_t idx);
void count(uint64_t *counter);
uint32_t map_len(const struct tier_disk *d);
uint64_t meta_cost(const struct tier_disk *d, uint32_t m);
uint32_t meta_get(const struct tier_dobj *o, uint64_t idx);
uint32_t *meta_of(struct tier_dobj *o);
int meta_grow(struct tier_dobj *o, uint64_t n);
int preadv_full(int fd, struct iovec *iov, int cnt, off_t off);
void punch(struct tier_disk *d, const struct tier_dobj *o, int fd, off_t off,
	   off_t len);
int pwritev_full(int fd, struct iovec *iov, int cnt, off_t off);
uint64_t slot_cost(const struct tier_disk *d, uint32_t total);
uint64_t slot_of(const struct tier_dobj *o, uint64_t idx);

#endif
