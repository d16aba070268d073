// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The disk tier: spill files of independent, checksummed chunks.
 *
 * On-disk format. Chunk i of a spill file sits at i * (chunk_size + block),
 * block being the file system's (at least 4 KiB), so that a chunk takes
 * whole blocks of its own and is charged exactly those: a 32-byte
 * little-endian header, for a chunk with holes a page map (one bit per 4 KiB
 * page, rounded up to 8 bytes), then the stored bytes (nothing for a chunk
 * of zeroes, the lz4 block, or the raw bytes; with a map, only the pages it
 * sets, packed). Only these are written, so the rest of the slot stays a
 * hole. The header carries the chunk index, both lengths, the encoding, a
 * flag for the map, a CRC32C of the map and stored bytes and a CRC32C of
 * itself; a read checks all of them before decoding.
 *
 * In memory an object is a file descriptor, the stored total and one uint32
 * per chunk (its slot's used length and encoding), inline for buffers of up
 * to two chunks, so that a million small spilled buffers stay cheap.
 *
 * Persistent mounts: once an object holds a committed version (the one the
 * metadata journal names), chunk i no longer sits in slot i by rule. A slot
 * table says where each chunk of the current version is, and a write of a
 * chunk whose slot the committed version uses goes to a free slot instead,
 * so that the committed bytes stay intact until a newer version is
 * committed. Objects without a committed version, which is every object of
 * a non-persistent mount, have no table and keep slot = index.
 *
 * Scratch buffers are per thread, allocated on first use and freed at thread
 * exit: the FUSE workers and the pool threads each own one, and concurrent
 * reads of one object share nothing but the descriptor (pread only).
 */
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

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static __thread struct scratch *tls_scratch;

static void scratch_free(void *p)
{
	struct scratch *s = p;

	free(s->in);
	free(s->out);
	free(s->lz4_state);
	free(s);
}

static void scratch_key_init(void)
{
	if (pthread_key_create(&scratch_key, scratch_free))
		abort();
}

/* This thread's scratch with room for a stored chunk of @cs (and, when
 * @want_out, a decoded one); NULL when out of memory. */
static struct scratch *scratch_get(uint32_t cs, bool want_out)
{
	struct scratch *s = tls_scratch;
	size_t in_need = HDR + (size_t)LZ4_compressBound((int)cs);

	if (!s) {
		pthread_once(&scratch_once, scratch_key_init);
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		s->lz4_state = malloc((size_t)LZ4_sizeofState());
		if (!s->lz4_state || pthread_setspecific(scratch_key, s)) {
			free(s->lz4_state);
			free(s);
			return NULL;
		}
		tls_scratch = s;
	}
	if (s->in_cap < in_need) {
		char *p = malloc(in_need);

		if (!p)
			return NULL;
		free(s->in);
		s->in = p;
		s->in_cap = in_need;
	}
	if (want_out && s->out_cap < cs) {
		char *p = malloc(cs);

		if (!p)
			return NULL;
		free(s->out);
		s->out = p;
		s->out_cap = cs;
	}
	return s;
}

/* --- worker pool --- */

static void job_claim_locked(struct pool *p, struct pool_job *job,
			     size_t *item)
{
	*item = job->next++;
	if (job->next == job->n) {
		struct pool_job **pp = &p->queue;

		while (*pp != job)
			pp = &(*pp)->link;
		*pp = job->link;
	}
}

static void *pool_worker(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct pool_job *job = p->queue;
		size_t item;

		if (!job) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->work_cv, &p->lock);
			continue;
		}
		job_claim_locked(p, job, &item);
		pthread_mutex_unlock(&p->lock);
		job->fn(job, item);
		pthread_mutex_lock(&p->lock);
		/* After this the submitter may return and free @job. */
		if (++job->done == job->n)
			pthread_cond_broadcast(&p->done_cv);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void pool_start(struct pool *p)
{
	cpu_set_t set;
	unsigned int want = 0;

	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 1)
		want = (unsigned int)CPU_COUNT(&set) - 1;
	if (want > MAX_POOL_THREADS)
		want = MAX_POOL_THREADS;
	for (p->nthreads = 0; p->nthreads < want; p->nthreads++) {
		if (pthread_create(&p->threads[p->nthreads], NULL, pool_worker,
				   p)) {
			tfs_warn("cannot start disk tier worker %u of %u: "
				 "compressing with fewer threads",
				 p->nthreads + 1, want);
			break;
		}
	}
}

static void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->work_cv);
	pthread_mutex_destroy(&p->lock);
}

/* Run every item of @job, on the pool and on this thread; returns when all
 * have finished. */
static void pool_run(struct pool *p, struct pool_job *job)
{
	size_t item;

	job->next = 0;
	job->done = 0;
	if (!job->n)
		return;
	pthread_mutex_lock(&p->lock);
	job->link = p->queue;
	p->queue = job;
	if (p->nthreads && job->n > 1) {
		if (job->n - 1 >= p->nthreads)
			pthread_cond_broadcast(&p->work_cv);
		else
			for (size_t i = 0; i < job->n - 1; i++)
				pthread_cond_signal(&p->work_cv);
	}
	while (job->next < job->n) {
		job_claim_locked(p, job, &item);
		pthread_mutex_unlock(&p->lock);
		job->fn(job, item);
		pthread_mutex_lock(&p->lock);
		job->done++;
	}
	while (job->done < job->n)
		pthread_cond_wait(&p->done_cv, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

/* --- small helpers --- */

static uint32_t *meta_of(struct tier_dobj *o)
{
	return o->cap <= 2 ? o->meta.inl : o->meta.arr;
}

static uint32_t meta_get(const struct tier_dobj *o, uint64_t idx)
{
	if (idx >= o->cap)
		return 0;
	return o->cap <= 2 ? o->meta.inl[idx] : o->meta.arr[idx];
}

static uint32_t meta_total(uint32_t m)
{
	return m & META_LEN_MASK;
}

/* Bytes of the page map of a chunk with holes. */
static uint32_t map_len(const struct tier_disk *d)
{
	uint32_t bits = d->chunk_size / TIER_PAGE;

	return (bits + 63) / 64 * 8;
}

/* What a slot using @total bytes takes on disk: whole blocks. */
static uint64_t slot_cost(const struct tier_disk *d, uint32_t total)
{
	return ((uint64_t)total + d->blk - 1) / d->blk * d->blk;
}

static uint64_t meta_cost(const struct tier_disk *d, uint32_t m)
{
	return m ? slot_cost(d, meta_total(m)) : 0;
}


static bool bit_get(const uint64_t *bits, uint32_t nwords, uint64_t s)
{
	return s / 64 < nwords && (bits[s / 64] >> (s % 64) & 1);
}

static void bit_put(uint64_t *bits, uint64_t s, bool on)
{
	if (on)
		bits[s / 64] |= 1ull << (s % 64);
	else
		bits[s / 64] &= ~(1ull << (s % 64));
}

/* Room in both bitmaps for slot @s. */
static int cow_bits_grow(struct dobj_cow *c, uint64_t s)
{
	uint64_t need = s / 64 + 1, n = c->nwords ? c->nwords : 1;
	uint64_t *u, *p;

	if (need <= c->nwords)
		return 0;
	while (n < need)
		n *= 2;
	if (n > UINT32_MAX / 64)
		return -EFBIG;
	u = realloc(c->used, n * sizeof(*u));
	if (!u)
		return -ENOMEM;
	c->used = u;
	p = realloc(c->pin, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	c->pin = p;
	memset(u + c->nwords, 0, (n - c->nwords) * sizeof(*u));
	memset(p + c->nwords, 0, (n - c->nwords) * sizeof(*p));
	c->nwords = (uint32_t)n;
	return 0;
}

static int cow_slots_grow(struct dobj_cow *c, uint64_t n)
{
	uint32_t *a;

	if (n <= c->scap)
		return 0;
	a = realloc(c->slot, n * sizeof(*a));
	if (!a)
		return -ENOMEM;
	memset(a + c->scap, 0, (n - c->scap) * sizeof(*a));
	c->slot = a;
	c->scap = (uint32_t)n;
	return 0;
}

static void cow_free(struct dobj_cow *c)
{
	if (!c)
		return;
	free(c->slot);
	free(c->cmeta);
	free(c->cslot);
	free(c->used);
	free(c->pin);
	free(c);
}

static uint64_t slot_of(const struct tier_dobj *o, uint64_t idx)
{
	return o->cow ? o->cow->slot[idx] : idx;
}

/* A free slot for chunk @idx: its own index when free, which keeps the
 * layout of an unmodified file what it was, else the lowest free one.
 * Marks it used. */
static int cow_alloc(struct dobj_cow *c, uint64_t idx, uint32_t *out)
{
	uint64_t s;
	int rc;

	if (idx < UINT32_MAX && !bit_get(c->used, c->nwords, idx) &&
	    !bit_get(c->pin, c->nwords, idx)) {
		s = idx;
	} else {
		for (s = c->hint; s < UINT32_MAX; s++) {
			if (s / 64 < c->nwords &&
			    (c->used[s / 64] | c->pin[s / 64]) == ~0ull) {
				s |= 63;
				continue;
			}
			if (!bit_get(c->used, c->nwords, s) &&
			    !bit_get(c->pin, c->nwords, s))
				break;
		}
		if (s >= UINT32_MAX)
			return -EFBIG;
		c->hint = (uint32_t)s + 1;
	}
	rc = cow_bits_grow(c, s);
	if (rc)
		return rc;
	bit_put(c->used, s, true);
	*out = (uint32_t)s;
	return 0;
}

/* Room for chunks 0..@n-1. Only called with the object's writers
 * serialised, so no reader runs meanwhile. */
static int meta_grow(struct tier_dobj *o, uint64_t n)
{
	uint64_t cap = o->cap;
	uint32_t *arr;

	if (n <= o->cap)
		return 0;
	if (n > UINT32_MAX)
		return -EFBIG;
	while (cap < n)
		cap *= 2;
	if (cap > UINT32_MAX)
		cap = UINT32_MAX;
	if (o->cap <= 2) {
		arr = calloc(cap, sizeof(*arr));
		if (!arr)
			return -ENOMEM;
		memcpy(arr, o->meta.inl, sizeof(o->meta.inl));
	} else {
		arr = realloc(o->meta.arr, cap * sizeof(*arr));
		if (!arr)
			return -ENOMEM;
		memset(arr + o->cap, 0, (cap - o->cap) * sizeof(*arr));
	}
	o->meta.arr = arr;
	o->cap = (uint32_t)cap;
	return o->cow ? cow_slots_grow(o->cow, cap) : 0;
}

static off_t chunk_off(const struct tier_disk *d, uint64_t idx)
{
	/* Block-aligned slots: a chunk's bytes then take exactly the blocks
	 * it is charged for, shared with no other chunk. */
	uint64_t slot = (uint64_t)d->chunk_size + d->blk;

	if (idx > ((uint64_t)INT64_MAX - slot) / slot)
		return -1;
	return (off_t)(idx * slot);
}

static bool all_zero(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t acc = 0, w;

	/* Data that is not zero almost always says so in its first word. */
	while (len >= 8) {
		memcpy(&w, p, 8);
		if (w)
			return false;
		p += 8;
		len -= 8;
		if (len >= 64) {
			for (int i = 0; i < 8; i++) {
				memcpy(&w, p + 8 * i, 8);
				acc |= w;
			}
			if (acc)
				return false;
			p += 64;
			len -= 64;
		}
	}
	while (len--)
		acc |= *p++;
	return !acc;
}

static int obj_fd_get(struct tier_disk *d, struct tier_dobj *o)
{
	int fd = __atomic_load_n(&o->fd, __ATOMIC_ACQUIRE), other = -1;

	if (fd >= 0)
		return fd;
	fd = openat(d->dirfd, o->path + d->dirlen + 1,
		    O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int err = errno;

		tfs_err("cannot open spill file '%s': %s", o->path,
			strerror(err));
		return -err;
	}
	/* Keep it while the budget allows; a reader that lost the race to
	 * another uses the winner's. */
	if (__atomic_sub_fetch(&d->fd_budget, 1, __ATOMIC_RELAXED) >= 0) {
		if (__atomic_compare_exchange_n(&o->fd, &other, fd, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return fd;
		close(fd);
		fd = other;
	}
	__atomic_add_fetch(&d->fd_budget, 1, __ATOMIC_RELAXED);
	return fd;
}

static void obj_fd_put(struct tier_dobj *o, int fd)
{
	if (fd != __atomic_load_n(&o->fd, __ATOMIC_ACQUIRE))
		close(fd);
}

/* Step past @n bytes of a partly transferred iovec array. */
static void iov_advance(struct iovec **iovp, int *cntp, size_t n)
{
	struct iovec *iov = *iovp;
	int cnt = *cntp;

	while (cnt && n >= iov->iov_len) {
		n -= iov->iov_len;
		iov++;
		cnt--;
	}
	if (cnt) {
		iov->iov_base = (char *)iov->iov_base + n;
		iov->iov_len -= n;
	}
	*iovp = iov;
	*cntp = cnt;
}

static int pwritev_full(int fd, struct iovec *iov, int cnt, off_t off)
{
	while (cnt) {
		ssize_t n = pwritev(fd, iov, cnt, off);

		if (n < 0) {
			int err = errno;

			if (err == EINTR)
				continue;
			return -err;
		}
		if (n == 0)
			return -ENOSPC;
		off += n;
		iov_advance(&iov, &cnt, (size_t)n);
	}
	return 0;
}

/*
 * Returns 0, -ENODATA when the file ends early (a corrupted spill file, told
 * apart from the file system's own -EIO), or -errno.
 */
static int preadv_full(int fd, struct iovec *iov, int cnt, off_t off)
{
	while (cnt) {
		ssize_t n = preadv(fd, iov, cnt, off);

		if (n < 0) {
			int err = errno;

			if (err == EINTR)
				continue;
			return -err;
		}
		if (n == 0)
			return -ENODATA;
		off += n;
		iov_advance(&iov, &cnt, (size_t)n);
	}
	return 0;
}

static void count(uint64_t *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

static void punch(struct tier_disk *d, const struct tier_dobj *o, int fd,
		  off_t off, off_t len)
{
	int err;

	if (len <= 0 ||
	    !fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len))
		return;
	/* Best effort: the chunk's metadata already says the bytes are gone,
	 * so a failure costs room, never content. A file system without hole
	 * punching says so on every call; that is no news. */
	err = errno;
	if (err == EOPNOTSUPP)
		return;
	count(&d->stats.punch_errors);
	tfs_warn("cannot free room in spill file '%s': %s", o->path,
		 strerror(err));
}

static uint32_t hdr_crc(const struct chunk_hdr *h)
{
	return tfs_crc32c(0, h, offsetof(struct chunk_hdr, hdr_crc));
}

/* --- chunks --- */

/*
 * Encode and write chunk @idx into @slot, which held @old (a meta word; 0
 * for a free slot): @len bytes of payload at @src, laid out as @desc says
 * (NULL: the chunk's first bytes). Sets *@meta to the new meta word.
 * Leaves no trace of @old on failure.
 */
static int chunk_store(struct tier_disk *d, struct tier_dobj *o, int fd,
		       uint64_t idx, uint64_t slot, const void *src,
		       size_t len, const struct tier_chunk_desc *desc,
		       uint32_t old, uint32_t *meta)
{
	struct chunk_hdr *h;
	struct scratch *s;
	struct iovec iov[3];
	const void *data = src;
	uint32_t stored = 0, mlen = 0, crc;
	int enc, cnt = 1, rc;
	off_t off = chunk_off(d, slot);
	bool raw_only = desc && desc->raw;

	if (off < 0)
		return -EFBIG;
	s = scratch_get(d->chunk_size, false);
	if (!s)
		return -ENOMEM;
	h = (struct chunk_hdr *)s->in;
	if (desc && desc->map)
		mlen = map_len(d);

	if (raw_only) {
		/* Room that fallocate took must stay taken. */
		enc = ENC_RAW;
	} else if (all_zero(src, len)) {
		/* Where the zeroes are does not matter then. */
		enc = ENC_ZERO;
		mlen = 0;
	} else if (d->compression == CFG_COMPRESS_LZ4) {
		/* Keep lz4 only when it saves more than 1/64: decoding a
		 * barely smaller block costs more than reading raw bytes
		 * straight into the caller's buffer. */
		int cap = (int)(len - 1 - len / 64), c = 0;

		if (cap > 0)
			c = LZ4_compress_fast_extState(s->lz4_state, src,
						       s->in + HDR, (int)len,
						       cap, d->accel);
		if (c < 0) {
			tfs_err("cannot compress chunk %" PRIu64
				" of '%s': lz4 error %d",
				idx, o->path, c);
			return -EIO;
		}
		enc = c ? ENC_LZ4 : ENC_RAW;
		if (c) {
			stored = (uint32_t)c;
			data = s->in + HDR;
		}
	} else {
		enc = ENC_RAW;
	}
	if (enc == ENC_RAW)
		stored = (uint32_t)len;

	crc = mlen ? tfs_crc32c(0, desc->map, mlen) : 0;
	h->magic = htole32(CHUNK_MAGIC);
	h->version = CHUNK_VERSION;
	h->encoding = (uint8_t)enc;
	h->flags = htole16(mlen ? HDR_F_MAP : 0);
	h->raw_len = htole32((uint32_t)len);
	h->stored_len = htole32(stored);
	h->index = htole64(idx);
	h->data_crc = htole32(tfs_crc32c(crc, data, stored));
	h->hdr_crc = htole32(hdr_crc(h));

	/* The lz4 block sits right after the header in scratch; the map
	 * goes between them. */
	iov[0].iov_base = h;
	iov[0].iov_len = HDR;
	if (mlen) {
		iov[cnt].iov_base = (void *)desc->map;
		iov[cnt++].iov_len = mlen;
	}
	if (stored) {
		iov[cnt].iov_base = (void *)data;
		iov[cnt++].iov_len = stored;
	}
	rc = pwritev_full(fd, iov, cnt, off);
	if (rc < 0) {
		count(&d->stats.write_errors);
		tfs_err("cannot write chunk %" PRIu64 " of spill file '%s': %s",
			idx, o->path, strerror(-rc));
		punch(d, o, fd, off, (off_t)d->chunk_size + d->blk);
		return rc;
	}
	/* Give back the blocks the old content took past the new. */
	uint64_t now = slot_cost(d, HDR + mlen + stored);

	if (meta_cost(d, old) > now)
		punch(d, o, fd, off + (off_t)now,
		      (off_t)(meta_cost(d, old) - now));
	*meta = (HDR + mlen + stored) | (mlen ? META_MAP : 0) |
		((uint32_t)enc << META_ENC_SHIFT);
	return 0;
}

static int chunk_corrupt(struct tier_disk *d, const struct tier_dobj *o,
			 uint64_t idx, const char *why)
{
	count(&d->stats.corrupt_chunks);
	tfs_err("cannot read chunk %" PRIu64 " of spill file '%s': %s", idx,
		o->path, why);
	return -EIO;
}

/* A read of chunk @idx's slot failed with @rc from preadv_full(). */
static int read_failed(struct tier_disk *d, const struct tier_dobj *o,
		       uint64_t idx, int rc)
{
	if (rc == -ENODATA)
		return chunk_corrupt(d, o, idx, "file too short");
	count(&d->stats.read_errors);
	tfs_err("cannot read chunk %" PRIu64 " of spill file '%s': %s", idx,
		o->path, strerror(-rc));
	return rc;
}

static const char *hdr_check(const struct tier_disk *d,
			     const struct chunk_hdr *h, uint64_t idx,
			     uint32_t meta)
{
	uint32_t enc = meta >> META_ENC_SHIFT;
	uint32_t mlen = (meta & META_MAP) ? map_len(d) : 0;
	uint32_t stored = meta_total(meta) - HDR - mlen;
	uint32_t raw = le32toh(h->raw_len);

	if (le32toh(h->magic) != CHUNK_MAGIC)
		return "bad magic";
	if (le32toh(h->hdr_crc) != hdr_crc(h))
		return "header checksum mismatch";
	if (h->version != CHUNK_VERSION)
		return "unknown version";
	if (le64toh(h->index) != idx)
		return "chunk index mismatch";
	if (h->encoding != enc || le32toh(h->stored_len) != stored ||
	    !(le16toh(h->flags) & HDR_F_MAP) != !mlen)
		return "header does not match what was written";
	if (raw > d->chunk_size || (enc == ENC_RAW && raw != stored))
		return "bad length";
	return NULL;
}

/* The rank of page @p among the pages set in @map: its place in the
 * payload. */
static size_t map_rank(const uint64_t *map, size_t p)
{
	size_t r = 0, w;

	for (w = 0; w < p / 64; w++)
		r += (size_t)__builtin_popcountll(map[w]);
	if (p % 64)
		r += (size_t)__builtin_popcountll(map[w] &
						  ((1ull << (p % 64)) - 1));
	return r;
}

/*
 * Bytes [@lo, @lo + @n) of a chunk with holes whose page map is @map and
 * whose @raw bytes of payload are at @pay, into @out.
 */
static void scatter_pages(const uint64_t *map, const char *pay, size_t raw,
			  char *out, size_t lo, size_t n)
{
	size_t p = lo / TIER_PAGE, r = map_rank(map, p);

	while (n) {
		size_t in = lo % TIER_PAGE, part = TIER_PAGE - in;

		if (part > n)
			part = n;
		if (map[p / 64] & (1ull << (p % 64))) {
			size_t at = r * TIER_PAGE + in;
			size_t have = at < raw ? raw - at : 0;

			if (have > part)
				have = part;
			memcpy(out, pay + at, have);
			memset(out + have, 0, part - have);
			r++;
		} else {
			memset(out, 0, part);
		}
		out += part;
		lo += part;
		n -= part;
		p++;
	}
}

/*
 * Fill @out with @n bytes of chunk @idx from its byte @lo on. @m is the
 * chunk's meta word, nonzero.
 */
static int chunk_load(struct tier_disk *d, const struct tier_dobj *o, int fd,
		      uint64_t idx, uint32_t m, char *out, size_t lo, size_t n)
{
	/* The header names the chunk, not the slot: a stale slot of another
	 * chunk fails the index check. */
	uint32_t enc = m >> META_ENC_SHIFT, total = meta_total(m);
	uint32_t mlen = (m & META_MAP) ? map_len(d) : 0;
	uint32_t stored = total - HDR - mlen, raw;
	const struct chunk_hdr *h;
	const char *why, *src;
	struct scratch *s;
	struct iovec iov[2];
	struct chunk_hdr hb;
	off_t off = chunk_off(d, slot_of(o, idx));
	int rc;

	if (enc == ENC_RAW && !mlen && lo == 0 && n >= stored) {
		/* Straight into the caller's buffer: no copy. */
		iov[0].iov_base = &hb;
		iov[0].iov_len = HDR;
		iov[1].iov_base = out;
		iov[1].iov_len = stored;
		rc = preadv_full(fd, iov, 2, off);
		if (rc < 0)
			return read_failed(d, o, idx, rc);
		why = hdr_check(d, &hb, idx, m);
		if (!why && tfs_crc32c(0, out, stored) != le32toh(hb.data_crc))
			why = "checksum mismatch";
		if (why)
			return chunk_corrupt(d, o, idx, why);
		memset(out + stored, 0, n - stored);
		return 0;
	}

	s = scratch_get(d->chunk_size, mlen != 0);
	if (!s)
		return -ENOMEM;
	iov[0].iov_base = s->in;
	iov[0].iov_len = total;
	rc = preadv_full(fd, iov, 1, off);
	if (rc < 0)
		return read_failed(d, o, idx, rc);
	h = (const struct chunk_hdr *)s->in;
	src = s->in + HDR + mlen;
	why = hdr_check(d, h, idx, m);
	if (!why && tfs_crc32c(0, s->in + HDR, mlen + stored) !=
			    le32toh(h->data_crc))
		why = "checksum mismatch";
	if (why)
		return chunk_corrupt(d, o, idx, why);
	raw = le32toh(h->raw_len);
	if (enc == ENC_ZERO) {
		memset(out, 0, n);
		return 0;
	}
	if (mlen) {
		/* The whole payload, then the pages the range covers. The
		 * map is not aligned in the file: copy it out. */
		uint64_t map[MAX_CHUNK_SIZE / TIER_PAGE / 64];

		memcpy(map, s->in + HDR, mlen);
		if (enc == ENC_LZ4) {
			int r = LZ4_decompress_safe(src, s->out, (int)stored,
						    (int)raw);

			if (r < 0 || (uint32_t)r != raw) {
				char why_buf[64];

				snprintf(why_buf, sizeof(why_buf),
					 "lz4 decode failed (%d)", r);
				return chunk_corrupt(d, o, idx, why_buf);
			}
			src = s->out;
		}
		if (map_rank(map, d->chunk_size / TIER_PAGE) * TIER_PAGE < raw)
			return chunk_corrupt(d, o, idx, "map and length differ");
		scatter_pages(map, src, raw, out, lo, n);
		return 0;
	}
	if (lo >= raw) {
		memset(out, 0, n);
		return 0;
	}

	size_t end = lo + n < raw ? lo + n : raw, got = end - lo;

	if (enc == ENC_RAW) {
		memcpy(out, src + lo, got);
	} else {
		char *dst = out;
		int r;

		if (lo) {
			s = scratch_get(d->chunk_size, true);
			if (!s)
				return -ENOMEM;
			dst = s->out;
		}
		/* Decode no further than the read needs. */
		if (end == raw)
			r = LZ4_decompress_safe(src, dst, (int)stored,
						(int)raw);
		else
			r = LZ4_decompress_safe_partial(src, dst, (int)stored,
							(int)end, (int)end);
		if (r < 0 || (size_t)r != end) {
			char why_buf[64];

			snprintf(why_buf, sizeof(why_buf),
				 "lz4 decode failed (%d)", r);
			return chunk_corrupt(d, o, idx, why_buf);
		}
		if (lo)
			memcpy(out, dst + lo, got);
	}
	memset(out + got, 0, n - got);
	return 0;
}

/* The part of [@off, @off + @len) in chunk @idx, into @dst (which holds
 * @off). */
static int range_chunk(struct tier_disk *d, const struct tier_dobj *o,
		       int fd, char *dst, size_t len, uint64_t off,
		       uint64_t idx)
{
	uint64_t cs = d->chunk_size, start = idx * cs;
	uint64_t lo = off > start ? off - start : 0;
	uint64_t end = off + len - start < cs ? off + len - start : cs;
	char *out = dst + (start + lo - off);
	uint32_t m = meta_get(o, idx);

	if (!m) {
		memset(out, 0, end - lo);
		return 0;
	}
	return chunk_load(d, o, fd, idx, m, out, lo, end - lo);
}

/* --- jobs --- */

struct write_job {
	struct pool_job job;
	struct tier_disk *d;
	struct tier_dobj *o;
	int fd;
	uint64_t first;
	const void *const *srcs;
	const size_t *lens;
	const uint32_t *old; /* per item: what its slot held, 0 when free */
	const struct tier_chunk_desc *descs; /* or NULL */
	int err; /* first failure; atomic */
};

static void write_item(struct pool_job *job, size_t i)
{
	struct write_job *w = (struct write_job *)job;
	uint32_t *meta = meta_of(w->o), nm = 0;
	uint64_t idx = w->first + i;
	int rc, zero = 0;

	/* Items write different meta words and different slots. */
	rc = chunk_store(w->d, w->o, w->fd, idx, slot_of(w->o, idx),
			 w->srcs[i], w->lens[i], w->descs ? &w->descs[i] : NULL,
			 w->old[i], &nm);
	meta[idx] = rc < 0 ? 0 : nm;
	if (rc < 0)
		__atomic_compare_exchange_n(&w->err, &zero, rc, false,
					    __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

struct read_job {
	struct pool_job job;
	struct tier_disk *d;
	const struct tier_dobj *o;
	int fd;
	char *dst;
	size_t len;
	uint64_t off;
	uint64_t first;
	void *const *dsts; /* per chunk, for tier_dobj_read_chunks() */
	const size_t *lens;
	int err; /* first failure; atomic */
};

static void read_item(struct pool_job *job, size_t i)
{
	struct read_job *r = (struct read_job *)job;
	int rc, zero = 0;

	if (r->dsts)
		rc = range_chunk(r->d, r->o, r->fd, r->dsts[i], r->lens[i],
				 (r->first + i) * r->d->chunk_size,
				 r->first + i);
	else
		rc = range_chunk(r->d, r->o, r->fd, r->dst, r->len, r->off,
				 r->first + i);
	if (rc < 0)
		__atomic_compare_exchange_n(&r->err, &zero, rc, false,
					    __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

/* --- the spill directory --- */

/*
 * Every path here is resolved relative to a directory descriptor, one
 * component at a time, with O_NOFOLLOW: tierfs runs as root under a
 * world-writable /var/tmp, where a path walked twice may lead somewhere
 * else the second time (a directory swapped for a symlink while it was
 * being emptied once deleted a root-only directory's files).
 */

#define SPILL_PREFIX "tierfs."
/* Not SPILL_PREFIX: the stale-directory sweep must never match it. */
#define PERSIST_PREFIX "tierfs-persist."
#define LOCK_NAME "lock"

int tier_private_dir_open(int parent, const char *name,
			  enum tier_pdir_mode mode)
{
	bool made = false;
	struct stat st;
	int fd, rc;

	if (mode != TIER_PDIR_OPEN) {
		if (!mkdirat(parent, name, 0700))
			made = true;
		else if (errno != EEXIST || mode == TIER_PDIR_CREATE_EXCL)
			return -errno;
	}
	fd = openat(parent, name,
		    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		/* A symlink or a file in the directory's place. */
		return rc == -ELOOP || rc == -ENOTDIR ? -EPERM : rc;
	}
	if (fstat(fd, &st)) {
		rc = -errno;
		goto out_close;
	}
	/* mkdir() honours the umask; the mode is part of the contract. */
	if (made && (st.st_mode & 07777) != 0700) {
		if (fchmod(fd, 0700)) {
			rc = -errno;
			goto out_close;
		}
		st.st_mode = (st.st_mode & ~07777u) | 0700;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 07777) != 0700) {
		rc = -EPERM;
		goto out_close;
	}
	return fd;

out_close:
	close(fd);
	return rc;
}

static int rand_hex(char *out, size_t nbytes)
{
	unsigned char rnd[16];

	if (nbytes > sizeof(rnd) ||
	    getrandom(rnd, nbytes, 0) != (ssize_t)nbytes)
		return -EIO;
	for (size_t i = 0; i < nbytes; i++)
		snprintf(out + 2 * i, 3, "%02x", rnd[i]);
	return 0;
}

/*
 * Unlink every entry of the directory @dfd (@path, for messages). Spill
 * directories are flat: a subdirectory was not made by tierfs and is left
 * alone. Returns the number of entries left.
 */
static int empty_dir(int dfd, const char *path)
{
	struct dirent *e;
	int left = 0;
	DIR *dir;
	int fd;

	fd = dup(dfd);
	if (fd < 0)
		return 1;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return 1;
	}
	while ((e = readdir(dir))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!unlinkat(dfd, e->d_name, 0) || errno == ENOENT)
			continue;
		tfs_warn("cannot remove '%s/%s': %s", path, e->d_name,
			 strerror(errno));
		left++;
	}
	closedir(dir);
	return left;
}

/*
 * Remove @name under @base (@base_path, for messages) if it is the spill
 * directory of a daemon that is gone: private (see tier_private_dir_open())
 * and holding a lock file of ours that nobody holds a lock on. Anything else
 * (another user's directory, a symlink, a directory without a lock file,
 * which may be one a daemon is creating right now) is left as it is. The
 * lock is kept until the directory is gone, so no daemon starting meanwhile
 * takes it for its own.
 */
static void remove_stale(int base, const char *base_path, const char *name)
{
	char path[PATH_MAX + NAME_MAX + 2];
	struct stat st;
	int dfd, lfd;

	dfd = tier_private_dir_open(base, name, TIER_PDIR_OPEN);
	if (dfd < 0) {
		tfs_debug("spill: leaving '%s/%s': not a private directory",
			  base_path, name);
		return;
	}
	lfd = openat(dfd, LOCK_NAME, O_RDWR | O_NOFOLLOW | O_CLOEXEC |
				     O_NONBLOCK);
	if (lfd < 0)
		goto out_dir;
	if (fstat(lfd, &st) || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || flock(lfd, LOCK_EX | LOCK_NB))
		goto out_lock;
	snprintf(path, sizeof(path), "%s/%s", base_path, name);
	if (empty_dir(dfd, path) || unlinkat(base, name, AT_REMOVEDIR)) {
		tfs_warn("cannot remove stale spill directory '%s'", path);
		goto out_lock;
	}
	tfs_notice("spill: removed '%s' left by a daemon that is gone",
		   path);
out_lock:
	close(lfd);
out_dir:
	close(dfd);
}

/* Remove the stale spill directories under @base. */
static void remove_stale_all(int base, const char *base_path)
{
	struct dirent *e;
	DIR *dir;
	int fd;

	fd = dup(base);
	if (fd < 0)
		return;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return;
	}
	while ((e = readdir(dir)))
		if (!strncmp(e->d_name, SPILL_PREFIX, strlen(SPILL_PREFIX)))
			remove_stale(base, base_path, e->d_name);
	closedir(dir);
}

/*
 * In a directory others may write to (sticky, as refused otherwise), the
 * private tierfs-<euid> under it, like tmux's /tmp/tmux-<uid>. When another
 * user took that name first, a private tierfs-<euid>.<random> instead
 * (reusing one an earlier run made), so that planting the name cannot stop
 * tierfs from starting. Returns its descriptor with its name in @sub.
 */
static int open_shared_sub(int top, const char *path, char *sub,
			   size_t sublen)
{
	struct dirent *e;
	char prefix[32];
	DIR *dir;
	int fd, rc;

	snprintf(sub, sublen, "tierfs-%u", (unsigned int)geteuid());
	fd = tier_private_dir_open(top, sub, TIER_PDIR_CREATE);
	if (fd != -EPERM)
		return fd;
	tfs_warn("spill: '%s/%s' is not a private directory of uid %u: "
		 "using another", path, sub, (unsigned int)geteuid());
	snprintf(prefix, sizeof(prefix), "%s.", sub);
	fd = dup(top);
	dir = fd < 0 ? NULL : fdopendir(fd);
	if (!dir) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	rc = -ENOENT;
	while (rc < 0 && (e = readdir(dir))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) ||
		    strlen(e->d_name) >= sublen)
			continue;
		rc = tier_private_dir_open(top, e->d_name, TIER_PDIR_OPEN);
		if (rc >= 0)
			snprintf(sub, sublen, "%s", e->d_name);
	}
	closedir(dir);
	for (int tries = 0; rc < 0 && tries < 64; tries++) {
		char hex[17];

		rc = rand_hex(hex, 8);
		if (rc < 0)
			return rc;
		snprintf(sub, sublen, "%s%s", prefix, hex);
		rc = tier_private_dir_open(top, sub, TIER_PDIR_CREATE_EXCL);
		if (rc != -EEXIST && rc != -EPERM && rc < 0)
			return rc;
	}
	return rc;
}

/*
 * The directory spill directories go in: @path itself when only this user
 * (or root) may write to it, the private subdirectory of open_shared_sub()
 * when others may but it is sticky. Refused otherwise: anyone who can
 * rename entries of @path could move the spill directory away under us.
 * Group write counts as others: a POSIX ACL granting another user write
 * shows in the group bits too (they are its mask).
 */
static int open_base(const char *path, char *sub, size_t sublen, char *err,
		     size_t errlen)
{
	struct stat st;
	int top, rc;

	sub[0] = '\0';
	top = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (top < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open '%s': %s", path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(top, &st)) {
		rc = -errno;
		snprintf(err, errlen, "cannot stat '%s': %s", path,
			 strerror(-rc));
		goto out_close;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(err, errlen, "disk path '%s' belongs to uid %u, not "
			 "to root or this daemon's user", path,
			 (unsigned int)st.st_uid);
		rc = -EPERM;
		goto out_close;
	}
	if (!(st.st_mode & (S_IWGRP | S_IWOTH)))
		return top;
	if (!(st.st_mode & S_ISVTX)) {
		snprintf(err, errlen, "disk path '%s' is writable by other "
			 "users and not sticky", path);
		rc = -EPERM;
		goto out_close;
	}
	rc = open_shared_sub(top, path, sub, sublen);
	if (rc < 0)
		snprintf(err, errlen, "cannot create a private directory in "
			 "'%s': %s", path, strerror(-rc));
out_close:
	close(top);
	return rc;
}

/*
 * Create this daemon's spill directory tierfs.<tag>.<random> under
 * d->basefd, with a lock file held for the daemon's life. A daemon starting
 * at the same time may take the fresh directory for a stale one before the
 * lock is held: then the lock fails or the directory is gone, and another
 * name is tried.
 */
static int create_spill_dir(struct tier_disk *d, const char *tag,
			    char *name, size_t namelen)
{
	struct stat a, b;
	int rc = -EEXIST;

	for (int tries = 0; tries < 64; tries++) {
		char hex[17];

		rc = rand_hex(hex, 8);
		if (rc < 0)
			return rc;
		snprintf(name, namelen, SPILL_PREFIX "%s.%s", tag, hex);
		d->dirfd = tier_private_dir_open(d->basefd, name,
						 TIER_PDIR_CREATE_EXCL);
		if (d->dirfd == -EEXIST)
			continue;
		if (d->dirfd < 0)
			return d->dirfd;
		d->lockfd = openat(d->dirfd, LOCK_NAME,
				   O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
				   O_CLOEXEC, 0600);
		if (d->lockfd < 0) {
			rc = -errno;
			if (rc != -EEXIST && rc != -ENOENT)
				goto out_dir;
		} else if (!flock(d->lockfd, LOCK_EX | LOCK_NB) &&
			   !fstat(d->dirfd, &a) &&
			   !fstatat(d->basefd, name, &b,
				    AT_SYMLINK_NOFOLLOW) &&
			   a.st_ino == b.st_ino && a.st_dev == b.st_dev &&
			   !fstat(d->lockfd, &a) &&
			   !fstatat(d->dirfd, LOCK_NAME, &b,
				    AT_SYMLINK_NOFOLLOW) &&
			   a.st_ino == b.st_ino) {
			return 0;
		}
		if (d->lockfd >= 0)
			close(d->lockfd);
		close(d->dirfd);
	}
	return rc;

out_dir:
	close(d->dirfd);
	return rc;
}

bool tier_disk_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (!n || n > 64 || name[0] == '.')
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyz"
			    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/*
 * Open or create the persistent directory tierfs-persist.<@pname> under
 * d->basefd (@base_path, for messages) and take its lock, writing our pid
 * into it for whoever is refused next.
 */
static int open_persist_dir(struct tier_disk *d, const char *base_path,
			    const char *pname, char *name, size_t namelen,
			    char *err, size_t errlen)
{
	char buf[32];
	struct stat st;
	ssize_t n;
	int rc;

	snprintf(name, namelen, PERSIST_PREFIX "%s", pname);
	d->dirfd = tier_private_dir_open(d->basefd, name, TIER_PDIR_CREATE);
	if (d->dirfd == -EPERM) {
		snprintf(err, errlen, "spill directory '%s/%s' is not a "
			 "private directory of uid %u (a directory of that "
			 "user, mode 0700, not a symlink): refusing it",
			 base_path, name, (unsigned int)geteuid());
		return -EPERM;
	}
	if (d->dirfd < 0) {
		snprintf(err, errlen, "cannot open spill directory '%s/%s': "
			 "%s", base_path, name, strerror(-d->dirfd));
		return d->dirfd;
	}
	d->lockfd = openat(d->dirfd, LOCK_NAME,
			   O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (d->lockfd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open '%s/%s/" LOCK_NAME "': %s",
			 base_path, name, strerror(-rc));
		goto out_dir;
	}
	if (fstat(d->lockfd, &st) || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid()) {
		snprintf(err, errlen, "'%s/%s/" LOCK_NAME "' is not a regular "
			 "file of uid %u: refusing the directory", base_path,
			 name, (unsigned int)geteuid());
		rc = -EPERM;
		goto out_lock;
	}
	if (flock(d->lockfd, LOCK_EX | LOCK_NB)) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		n = pread(d->lockfd, buf, sizeof(buf) - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		if (rc == -EBUSY)
			snprintf(err, errlen, "spill directory '%s/%s' is in "
				 "use by another tierfs%s%s%s", base_path, name,
				 buf[0] ? " (pid " : "", buf, buf[0] ? ")" : "");
		else
			snprintf(err, errlen, "cannot lock '%s/%s/" LOCK_NAME
				 "': %s", base_path, name, strerror(-rc));
		goto out_lock;
	}
	n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(d->lockfd, 0) || pwrite(d->lockfd, buf, (size_t)n, 0) != n)
		tfs_warn("cannot write the pid into '%s/%s/" LOCK_NAME "': %s",
			 base_path, name, strerror(errno));
	return 0;

out_lock:
	close(d->lockfd);
out_dir:
	close(d->dirfd);
	return rc;
}

/* tier_disk_init() with @pname NULL, else tier_disk_init_persistent(). */
static int disk_init(struct tier_disk **out, const char *path,
		     const char *tag, const char *pname, uint32_t chunk_size,
		     enum cfg_compression compression, char *err,
		     size_t errlen)
{
	char sub[64], name[NAME_MAX + 1], base_path[PATH_MAX];
	struct tier_disk *d;
	struct rlimit rl;
	int len, rc;

	*out = NULL;
	if (!chunk_size || chunk_size > MAX_CHUNK_SIZE) {
		snprintf(err, errlen, "chunk size %" PRIu32 " out of range",
			 chunk_size);
		return -EINVAL;
	}
	if (pname ? !tier_disk_name_valid(pname) :
		    strlen(tag) > 64 || strchr(tag, '/')) {
		snprintf(err, errlen, "bad spill directory name '%s'",
			 pname ? pname : tag);
		return -EINVAL;
	}
	if (pname)
		tag = pname;
	/* The longest name below: "/" sub "/" "tierfs." tag "." 16 hex. */
	len = snprintf(NULL, 0, "%s/%s/" SPILL_PREFIX "%s.%016x", path,
		       "tierfs-4294967295.0123456789abcdef", tag, 0);
	if (len < 0 || len >= PATH_MAX - 24) {
		snprintf(err, errlen, "disk path '%s' too long", path);
		return -ENAMETOOLONG;
	}
	d = calloc(1, sizeof(*d) + (size_t)len + 1);
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	d->chunk_size = chunk_size;
	d->compression = compression;
	/* Measured on 1 MiB chunks of 64 MiB of text: acceleration 2 and 4
	 * gain 1-5% speed for 2-8% more bytes; stay with what lz4 -1 does
	 * and get speed from the worker pool instead. */
	d->accel = 1;

	d->basefd = open_base(path, sub, sizeof(sub), err, errlen);
	if (d->basefd < 0) {
		rc = d->basefd;
		goto out_free;
	}
	if (sub[0])
		snprintf(base_path, sizeof(base_path), "%s/%s", path, sub);
	else
		snprintf(base_path, sizeof(base_path), "%s", path);
	remove_stale_all(d->basefd, base_path);
	if (pname) {
		rc = open_persist_dir(d, base_path, pname, name, sizeof(name),
				      err, errlen);
		if (rc < 0)
			goto out_base;
		d->persistent = true;
	} else {
		rc = create_spill_dir(d, tag, name, sizeof(name));
		if (rc < 0) {
			snprintf(err, errlen, "cannot create a spill directory "
				 "in '%s': %s", base_path, strerror(-rc));
			goto out_base;
		}
	}
	d->dirlen = (size_t)snprintf(d->dir, (size_t)len + 1, "%s/%s",
				     base_path, name);
	d->blk = TIER_PAGE;
	{
		struct statvfs sv;

		if (!fstatvfs(d->dirfd, &sv) && sv.f_frsize > TIER_PAGE &&
		    sv.f_frsize <= chunk_size &&
		    !(sv.f_frsize & (sv.f_frsize - 1)))
			d->blk = (uint32_t)sv.f_frsize;
	}
	d->name = d->dir + d->dirlen - strlen(name);

	/* Objects keep their descriptor while half the limit is free; past
	 * that they open the file for each call instead of failing. */
	d->fd_budget = 512;
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		d->fd_budget = rl.rlim_cur == RLIM_INFINITY ||
					       rl.rlim_cur > (1u << 21) ?
				       1 << 20 :
				       (int)(rl.rlim_cur / 2);
	pool_start(&d->pool);
	*out = d;
	return 0;

out_base:
	close(d->basefd);
out_free:
	free(d);
	return rc;
}

int tier_disk_init(struct tier_disk **out, const char *path, const char *tag,
		   uint32_t chunk_size, enum cfg_compression compression,
		   char *err, size_t errlen)
{
	return disk_init(out, path, tag, NULL, chunk_size, compression, err,
			 errlen);
}

int tier_disk_init_persistent(struct tier_disk **out, const char *path,
			      const char *name, uint32_t chunk_size,
			      enum cfg_compression compression, char *err,
			      size_t errlen)
{
	return disk_init(out, path, NULL, name, chunk_size, compression, err,
			 errlen);
}

bool tier_disk_persistent(const struct tier_disk *d)
{
	return d->persistent;
}

int tier_disk_dirfd(const struct tier_disk *d)
{
	return d->dirfd;
}

int tier_disk_list(struct tier_disk *d, uint64_t **ids, size_t *n)
{
	size_t cap = 0;
	struct dirent *e;
	DIR *dir;
	int fd;

	*ids = NULL;
	*n = 0;
	fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	dir = fd < 0 ? NULL : fdopendir(fd);
	if (!dir) {
		int rc = -errno;

		if (fd >= 0)
			close(fd);
		return rc;
	}
	while ((e = readdir(dir))) {
		char *end;
		uint64_t id;

		/* Only the names tier_dobj_create() makes: no sign, no
		 * leading zero. */
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		errno = 0;
		id = strtoull(e->d_name, &end, 10);
		if (errno || *end)
			continue;
		if (*n == cap) {
			uint64_t *a;

			cap = cap ? cap * 2 : 1024;
			a = realloc(*ids, cap * sizeof(*a));
			if (!a) {
				closedir(dir);
				free(*ids);
				*ids = NULL;
				*n = 0;
				return -ENOMEM;
			}
			*ids = a;
		}
		(*ids)[(*n)++] = id;
	}
	closedir(dir);
	return 0;
}

void tier_disk_remove(struct tier_disk *d, uint64_t id)
{
	char name[24];

	snprintf(name, sizeof(name), "%" PRIu64, id);
	if (unlinkat(d->dirfd, name, 0) && errno != ENOENT)
		tfs_warn("cannot remove spill file '%s/%s': %s", d->dir, name,
			 strerror(errno));
}

void tier_disk_destroy(struct tier_disk *d)
{
	if (!d)
		return;
	pool_stop(&d->pool);
	if (d->persistent) {
		/* Kept for the next mount; closing drops the lock. */
	} else if (!empty_dir(d->dirfd, d->dir) &&
	    unlinkat(d->basefd, d->name, AT_REMOVEDIR))
		tfs_warn("cannot remove '%s': %s", d->dir, strerror(errno));
	close(d->dirfd);
	close(d->lockfd);
	close(d->basefd);
	free(d);
}

const char *tier_disk_path(const struct tier_disk *d)
{
	return d->dir;
}

uint32_t tier_disk_chunk_size(const struct tier_disk *d)
{
	return d->chunk_size;
}

void tier_disk_stats(const struct tier_disk *d, struct tier_disk_stats *out)
{
	out->read_errors =
		__atomic_load_n(&d->stats.read_errors, __ATOMIC_RELAXED);
	out->write_errors =
		__atomic_load_n(&d->stats.write_errors, __ATOMIC_RELAXED);
	out->corrupt_chunks =
		__atomic_load_n(&d->stats.corrupt_chunks, __ATOMIC_RELAXED);
	out->punch_errors =
		__atomic_load_n(&d->stats.punch_errors, __ATOMIC_RELAXED);
}

int tier_dobj_create(struct tier_disk *d, uint64_t id, struct tier_dobj **out)
{
	struct tier_dobj *o;
	int fd, rc;

	o = calloc(1, sizeof(*o) + d->dirlen + 22);
	if (!o)
		return -ENOMEM;
	snprintf(o->path, d->dirlen + 22, "%s/%" PRIu64, d->dir, id);
	o->cap = 2;
	fd = openat(d->dirfd, o->path + d->dirlen + 1,
		    O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		tfs_err("cannot create spill file '%s': %s", o->path,
			strerror(-rc));
		free(o);
		return rc;
	}
	if (__atomic_sub_fetch(&d->fd_budget, 1, __ATOMIC_RELAXED) >= 0) {
		o->fd = fd;
	} else {
		__atomic_add_fetch(&d->fd_budget, 1, __ATOMIC_RELAXED);
		close(fd);
		o->fd = -1;
	}
	*out = o;
	return 0;
}

void tier_dobj_close(struct tier_disk *d, struct tier_dobj *o)
{
	if (!o)
		return;
	if (o->fd >= 0) {
		close(o->fd);
		__atomic_add_fetch(&d->fd_budget, 1, __ATOMIC_RELAXED);
	}
	if (o->cap > 2)
		free(o->meta.arr);
	cow_free(o->cow);
	free(o);
}

void tier_dobj_destroy(struct tier_disk *d, struct tier_dobj *o)
{
	if (!o)
		return;
	if (unlinkat(d->dirfd, o->path + d->dirlen + 1, 0) && errno != ENOENT)
		tfs_warn("cannot remove spill file '%s': %s", o->path,
			 strerror(errno));
	tier_dobj_close(d, o);
}

/* Whether @m is a meta word a chunk of this disk tier can have. */
static bool meta_valid(const struct tier_disk *d, uint32_t m)
{
	uint32_t enc = m >> META_ENC_SHIFT, total = meta_total(m);
	uint32_t mlen = (m & META_MAP) ? map_len(d) : 0;

	if (total < HDR + mlen)
		return false;
	switch (enc) {
	case ENC_ZERO:
		return total == HDR && !mlen;
	case ENC_RAW:
		return total - HDR - mlen <= d->chunk_size;
	case ENC_LZ4:
		return total - HDR - mlen <=
		       (uint32_t)LZ4_compressBound((int)d->chunk_size);
	default:
		return false;
	}
}

int tier_dobj_adopt(struct tier_disk *d, uint64_t id, uint64_t size,
		    const void *map, size_t len, struct tier_dobj **out)
{
	uint64_t nchunks = (size + d->chunk_size - 1) / d->chunk_size;
	const char *p = map;
	struct tier_dobj *o;
	struct dobj_cow *c;
	uint32_t n, *meta;
	int64_t prev = -1;
	int rc = -EINVAL;

	if (len < 4)
		return -EINVAL;
	memcpy(&n, p, 4);
	n = le32toh(n);
	if (len != 4 + (size_t)n * DOBJ_MAP_ENTRY || nchunks > UINT32_MAX)
		return -EINVAL;
	o = calloc(1, sizeof(*o) + d->dirlen + 22);
	c = calloc(1, sizeof(*c));
	if (!o || !c) {
		free(o);
		free(c);
		return -ENOMEM;
	}
	snprintf(o->path, d->dirlen + 22, "%s/%" PRIu64, d->dir, id);
	o->fd = -1;
	o->cap = 2;
	o->cow = c;
	if (n) {
		uint32_t last;

		memcpy(&last, p + 4 + (size_t)(n - 1) * DOBJ_MAP_ENTRY, 4);
		last = le32toh(last);
		if ((uint64_t)last >= nchunks)
			goto out_free;
		rc = meta_grow(o, (uint64_t)last + 1);
		if (rc)
			goto out_free;
	}
	if ((rc = cow_slots_grow(c, o->cap)))
		goto out_free;
	rc = -EINVAL;
	meta = meta_of(o);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t e[3];

		memcpy(e, p + 4 + (size_t)k * DOBJ_MAP_ENTRY, sizeof(e));
		e[0] = le32toh(e[0]);
		e[1] = le32toh(e[1]);
		e[2] = le32toh(e[2]);
		if ((int64_t)e[0] <= prev || e[1] == UINT32_MAX ||
		    chunk_off(d, e[1]) < 0 || !meta_valid(d, e[2]))
			goto out_free;
		if (cow_bits_grow(c, e[1])) {
			rc = -ENOMEM;
			goto out_free;
		}
		if (bit_get(c->used, c->nwords, e[1]))
			goto out_free; /* two chunks in one slot */
		prev = e[0];
		meta[e[0]] = e[2];
		c->slot[e[0]] = e[1];
		bit_put(c->used, e[1], true);
		bit_put(c->pin, e[1], true);
		o->stored += meta_cost(d, e[2]);
	}
	c->cmeta = malloc(o->cap * sizeof(*c->cmeta));
	c->cslot = malloc(o->cap * sizeof(*c->cslot));
	if (!c->cmeta || !c->cslot) {
		rc = -ENOMEM;
		goto out_free;
	}
	memcpy(c->cmeta, meta, o->cap * sizeof(*meta));
	memcpy(c->cslot, c->slot, o->cap * sizeof(*c->slot));
	c->ccap = o->cap;
	*out = o;
	return 0;

out_free:
	tier_dobj_close(d, o);
	return rc;
}

int tier_dobj_write_chunk(struct tier_disk *d, struct tier_dobj *o,
			  uint64_t idx, const void *src, size_t len)
{
	const void *srcs[1] = { src };

	return tier_dobj_write_chunks(d, o, idx, srcs, &len, 1);
}

int tier_dobj_write_chunks(struct tier_disk *d, struct tier_dobj *o,
			   uint64_t first_idx, const void *const *srcs,
			   const size_t *lens, size_t n)
{
	return tier_dobj_write_chunks_desc(d, o, first_idx, srcs, lens, NULL,
					   n);
}

int tier_dobj_write_chunks_desc(struct tier_disk *d, struct tier_dobj *o,
				uint64_t first_idx, const void *const *srcs,
				const size_t *lens,
				const struct tier_chunk_desc *descs, size_t n)
{
	struct write_job w = {
		.job = { .fn = write_item, .n = n },
		.d = d,
		.o = o,
		.first = first_idx,
		.srcs = srcs,
		.lens = lens,
		.descs = descs,
	};
	uint32_t old_small[SMALL_BATCH], *old = old_small, *meta;
	struct dobj_cow *c = o->cow;
	int rc;

	if (!n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (lens[i] > d->chunk_size)
			return -EINVAL;
	if (first_idx > UINT64_MAX - n || chunk_off(d, first_idx + n - 1) < 0)
		return -EFBIG;
	rc = meta_grow(o, first_idx + n);
	if (rc < 0)
		return rc;
	/* Room for every slot the loop below may hand out, so that it
	 * cannot fail half way: a chunk's own index, or one of the first n
	 * free slots, which all lie below the slots taken plus n. */
	if (c) {
		uint64_t taken = 0;

		for (uint32_t k = 0; k < c->nwords; k++)
			taken += (uint64_t)__builtin_popcountll(c->used[k] |
								c->pin[k]);
		rc = cow_bits_grow(c, (first_idx > taken ? first_idx : taken) +
					      n - 1);
		if (rc)
			return rc;
	}
	if (n > SMALL_BATCH && !(old = malloc(n * sizeof(*old))))
		return -ENOMEM;
	w.fd = obj_fd_get(d, o);
	if (w.fd < 0) {
		rc = w.fd;
		goto out_free;
	}

	meta = meta_of(o);
	for (size_t i = 0; i < n; i++) {
		uint64_t idx = first_idx + i;
		uint32_t m = meta[idx];

		o->stored -= meta_cost(d, m);
		old[i] = m;
		if (!c || (m && !bit_get(c->pin, c->nwords, c->slot[idx])))
			continue;
		/* The committed version's slot stays as it is. */
		if (m) {
			c->extra += meta_cost(d, m);
			bit_put(c->used, c->slot[idx], false);
		}
		cow_alloc(c, idx, &c->slot[idx]);
		old[i] = 0;
	}
	w.old = old;
	if (n == 1)
		write_item(&w.job, 0);
	else
		pool_run(&d->pool, &w.job);
	for (size_t i = 0; i < n; i++) {
		uint64_t idx = first_idx + i;

		o->stored += meta_cost(d, meta[idx]);
		/* A failed chunk's slot was punched: free it. */
		if (c && !meta[idx] && bit_get(c->used, c->nwords,
					       c->slot[idx])) {
			bit_put(c->used, c->slot[idx], false);
			if (c->slot[idx] < c->hint)
				c->hint = c->slot[idx];
		}
	}
	obj_fd_put(o, w.fd);
	rc = w.err;
out_free:
	if (old != old_small)
		free(old);
	return rc;
}

int tier_dobj_read(struct tier_disk *d, struct tier_dobj *o, void *dst,
		   size_t len, uint64_t off)
{
	struct read_job r = {
		.job = { .fn = read_item },
		.d = d,
		.o = o,
		.dst = dst,
		.len = len,
		.off = off,
	};
	uint64_t last;

	if (!len)
		return 0;
	if (off > UINT64_MAX - len)
		return -EINVAL;
	r.first = off / d->chunk_size;
	last = (off + len - 1) / d->chunk_size;
	r.job.n = last - r.first + 1;
	r.fd = obj_fd_get(d, o);
	if (r.fd < 0)
		return r.fd;
	/* Below two chunks' worth, waking a worker costs more than it
	 * saves. */
	if (r.job.n == 1 || !d->pool.nthreads || len < 128 * 1024) {
		for (size_t i = 0; i < r.job.n && !r.err; i++)
			read_item(&r.job, i);
	} else {
		pool_run(&d->pool, &r.job);
	}
	obj_fd_put(o, r.fd);
	return r.err;
}

int tier_dobj_read_chunks(struct tier_disk *d, struct tier_dobj *o,
			  uint64_t first_idx, void *const *dsts,
			  const size_t *lens, size_t n)
{
	struct read_job r = {
		.job = { .fn = read_item, .n = n },
		.d = d,
		.o = o,
		.first = first_idx,
		.dsts = dsts,
		.lens = lens,
	};

	if (!n)
		return 0;
	r.fd = obj_fd_get(d, o);
	if (r.fd < 0)
		return r.fd;
	if (n == 1 || !d->pool.nthreads) {
		for (size_t i = 0; i < n && !r.err; i++)
			read_item(&r.job, i);
	} else {
		pool_run(&d->pool, &r.job);
	}
	obj_fd_put(o, r.fd);
	return r.err;
}

/* Free slot @sl: punch it out of the file and out of the used map. */
static void cow_release(struct tier_disk *d, struct tier_dobj *o, int *fd,
			uint64_t sl)
{
	struct dobj_cow *c = o->cow;

	bit_put(c->used, sl, false);
	if (sl < c->hint)
		c->hint = (uint32_t)sl;
	if (*fd == -1)
		*fd = obj_fd_get(d, o);
	if (*fd >= 0)
		punch(d, o, *fd, chunk_off(d, sl),
		      (off_t)d->chunk_size + d->blk);
}

/* Truncate an object with a committed version: the committed chunks stay
 * where they are, and the file keeps its length. */
static int cow_truncate(struct tier_disk *d, struct tier_dobj *o,
			uint64_t nchunks)
{
	struct dobj_cow *c = o->cow;
	uint32_t *meta = meta_of(o);
	int fd = -1;

	for (uint64_t i = nchunks; i < o->cap; i++) {
		uint32_t sl = c->slot[i];

		if (!meta[i])
			continue;
		o->stored -= meta_cost(d, meta[i]);
		if (bit_get(c->pin, c->nwords, sl)) {
			c->extra += meta_cost(d, meta[i]);
			bit_put(c->used, sl, false);
		} else {
			cow_release(d, o, &fd, sl);
		}
		meta[i] = 0;
	}
	if (fd >= 0)
		obj_fd_put(o, fd);
	return 0;
}

int tier_dobj_truncate(struct tier_disk *d, struct tier_dobj *o,
		       uint64_t nchunks)
{
	uint32_t *meta = meta_of(o);
	uint64_t keep_bytes = 0;
	bool any = false;
	int fd;

	if (o->cow)
		return cow_truncate(d, o, nchunks);

	for (uint64_t i = nchunks; i < o->cap; i++) {
		if (meta[i]) {
			o->stored -= meta_cost(d, meta[i]);
			meta[i] = 0;
			any = true;
		}
	}
	if (!any)
		return 0;
	if (chunk_off(d, nchunks) >= 0)
		keep_bytes = (uint64_t)chunk_off(d, nchunks);
	fd = obj_fd_get(d, o);
	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)keep_bytes)) {
		int err = errno;

		tfs_err("cannot truncate spill file '%s': %s", o->path,
			strerror(err));
		obj_fd_put(o, fd);
		return -err;
	}
	obj_fd_put(o, fd);
	if (o->cap > 2 && nchunks <= 2) {
		uint32_t *arr = o->meta.arr;

		memcpy(o->meta.inl, arr, sizeof(o->meta.inl));
		o->cap = 2;
		free(arr);
	}
	return 0;
}

int tier_dobj_drop_chunk(struct tier_disk *d, struct tier_dobj *o,
			 uint64_t idx)
{
	uint32_t *meta = meta_of(o);
	struct dobj_cow *c = o->cow;
	int fd = -1;

	if (idx >= o->cap || !meta[idx])
		return 0;
	o->stored -= meta_cost(d, meta[idx]);
	if (c && bit_get(c->pin, c->nwords, c->slot[idx])) {
		/* The committed version's slot stays as it is. */
		c->extra += meta_cost(d, meta[idx]);
		bit_put(c->used, c->slot[idx], false);
	} else if (c) {
		cow_release(d, o, &fd, c->slot[idx]);
	} else {
		fd = obj_fd_get(d, o);
		if (fd >= 0)
			punch(d, o, fd, chunk_off(d, idx),
			      (off_t)meta_cost(d, meta[idx]));
	}
	if (fd >= 0)
		obj_fd_put(o, fd);
	meta[idx] = 0;
	return 0;
}

uint64_t tier_dobj_chunk_cost(const struct tier_disk *d,
			      const struct tier_dobj *o, uint64_t idx)
{
	return meta_cost(d, meta_get(o, idx));
}

uint64_t tier_disk_chunk_bound(const struct tier_disk *d, size_t len,
			       bool map)
{
	return slot_cost(d, HDR + (map ? map_len(d) : 0) + (uint32_t)len);
}

uint64_t tier_dobj_stored(const struct tier_dobj *o)
{
	return o->stored + (o->cow ? o->cow->extra : 0);
}

bool tier_dobj_committed(const struct tier_dobj *o)
{
	return o->cow != NULL;
}

int tier_dobj_sync(struct tier_disk *d, struct tier_dobj *o)
{
	int fd = obj_fd_get(d, o), rc = 0;

	if (fd < 0)
		return fd;
	if (fdatasync(fd)) {
		rc = -errno;
		count(&d->stats.write_errors);
		tfs_err("cannot sync spill file '%s': %s", o->path,
			strerror(-rc));
	}
	obj_fd_put(o, fd);
	return rc;
}

size_t tier_dobj_map(const struct tier_dobj *o, void *buf, size_t len)
{
	uint32_t n = 0;
	size_t need;
	char *p = buf;

	for (uint64_t i = 0; i < o->cap; i++)
		n += meta_get(o, i) != 0;
	need = 4 + (size_t)n * DOBJ_MAP_ENTRY;
	if (need > len)
		return need;
	n = htole32(n);
	memcpy(p, &n, 4);
	p += 4;
	for (uint64_t i = 0; i < o->cap; i++) {
		uint32_t e[3] = { htole32((uint32_t)i),
				  htole32((uint32_t)slot_of(o, i)),
				  htole32(meta_get(o, i)) };

		if (!e[2])
			continue;
		memcpy(p, e, sizeof(e));
		p += sizeof(e);
	}
	return need;
}

/* Give @o a slot table saying what is true without one: chunk i in slot
 * i. */
static int cow_create(struct tier_dobj *o)
{
	struct dobj_cow *c = calloc(1, sizeof(*c));
	uint32_t *meta = meta_of(o);
	int rc;

	if (!c)
		return -ENOMEM;
	rc = cow_slots_grow(c, o->cap);
	if (!rc && o->cap)
		rc = cow_bits_grow(c, o->cap - 1);
	if (rc) {
		cow_free(c);
		return rc;
	}
	for (uint32_t i = 0; i < o->cap; i++) {
		c->slot[i] = i;
		if (meta[i])
			bit_put(c->used, i, true);
	}
	o->cow = c;
	return 0;
}

int tier_dobj_commit_prepare(struct tier_disk *d, struct tier_dobj *o)
{
	struct dobj_cow *c;
	uint32_t *cm, *cs;
	int rc;

	if (!o->cow && (rc = cow_create(o)))
		return rc;
	c = o->cow;
	if (c->ccap < o->cap) {
		cm = realloc(c->cmeta, o->cap * sizeof(*cm));
		if (!cm)
			return -ENOMEM;
		c->cmeta = cm;
		cs = realloc(c->cslot, o->cap * sizeof(*cs));
		if (!cs)
			return -ENOMEM;
		c->cslot = cs;
		/* The tail of cmeta past the old ccap is cleared by commit. */
		c->ccap = o->cap;
	}
	return 0;
}

int tier_dobj_commit(struct tier_disk *d, struct tier_dobj *o)
{
	struct dobj_cow *c;
	uint32_t *meta = meta_of(o);
	int fd = -1, rc;

	rc = tier_dobj_commit_prepare(d, o);
	if (rc)
		return rc;
	c = o->cow;
	/* The old version's slots the new one does not use are free now. */
	for (uint32_t w = 0; w < c->nwords; w++) {
		uint64_t gone = c->pin[w] & ~c->used[w];

		while (gone) {
			int b = __builtin_ctzll(gone);

			gone &= gone - 1;
			if (fd == -1)
				fd = obj_fd_get(d, o);
			if (fd >= 0)
				punch(d, o, fd, chunk_off(d, (uint64_t)w * 64 +
							       (uint64_t)b),
				      (off_t)d->chunk_size + d->blk);
		}
		c->pin[w] = c->used[w];
	}
	if (fd >= 0)
		obj_fd_put(o, fd);
	memset(c->cmeta, 0, c->ccap * sizeof(*c->cmeta));
	memcpy(c->cmeta, meta, o->cap * sizeof(*meta));
	memcpy(c->cslot, c->slot, o->cap * sizeof(*c->slot));
	c->extra = 0;
	c->hint = 0;
	return 0;
}

void tier_dobj_revert(struct tier_disk *d, struct tier_dobj *o)
{
	struct dobj_cow *c = o->cow;
	uint32_t *meta;
	int fd = -1;

	if (!c)
		return;
	for (uint32_t w = 0; w < c->nwords; w++) {
		uint64_t gone = c->used[w] & ~c->pin[w];

		while (gone) {
			int b = __builtin_ctzll(gone);

			gone &= gone - 1;
			cow_release(d, o, &fd, (uint64_t)w * 64 + (uint64_t)b);
		}
		c->used[w] = c->pin[w];
	}
	if (fd >= 0)
		obj_fd_put(o, fd);
	/* The table only ever grew past ccap (truncate keeps it), so this
	 * cannot fail. */
	meta = meta_of(o);
	o->stored = 0;
	for (uint32_t i = 0; i < o->cap; i++) {
		meta[i] = i < c->ccap ? c->cmeta[i] : 0;
		c->slot[i] = i < c->ccap ? c->cslot[i] : 0;
		o->stored += meta_cost(d, meta[i]);
	}
	c->extra = 0;
	c->hint = 0;
}

const char *tier_dobj_path(const struct tier_dobj *o)
{
	return o->path;
}
