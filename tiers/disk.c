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
#include "tiers/disk_i.h"

/* --- small helpers --- */

uint32_t *meta_of(struct tier_dobj *o)
{
	return o->cap <= 2 ? o->meta.inl : o->meta.arr;
}

uint32_t meta_get(const struct tier_dobj *o, uint64_t idx)
{
	if (idx >= o->cap)
		return 0;
	return o->cap <= 2 ? o->meta.inl[idx] : o->meta.arr[idx];
}

/* Bytes of the page map of a chunk with holes. */
uint32_t map_len(const struct tier_disk *d)
{
	uint32_t bits = d->chunk_size / TIER_PAGE;

	return (bits + 63) / 64 * 8;
}

/* What a slot using @total bytes takes on disk: whole blocks. */
uint64_t slot_cost(const struct tier_disk *d, uint32_t total)
{
	return ((uint64_t)total + d->blk - 1) / d->blk * d->blk;
}

uint64_t meta_cost(const struct tier_disk *d, uint32_t m)
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

uint64_t slot_of(const struct tier_dobj *o, uint64_t idx)
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
int meta_grow(struct tier_dobj *o, uint64_t n)
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

off_t chunk_off(const struct tier_disk *d, uint64_t idx)
{
	/* Block-aligned slots: a chunk's bytes then take exactly the blocks
	 * it is charged for, shared with no other chunk. */
	uint64_t slot = (uint64_t)d->chunk_size + d->blk;

	if (idx > ((uint64_t)INT64_MAX - slot) / slot)
		return -1;
	return (off_t)(idx * slot);
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

int pwritev_full(int fd, struct iovec *iov, int cnt, off_t off)
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
int preadv_full(int fd, struct iovec *iov, int cnt, off_t off)
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

void count(uint64_t *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

void punch(struct tier_disk *d, const struct tier_dobj *o, int fd,
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

/* --- chunks: the file side of the codec (disk_chunk.c) --- */

/*
 * Encode and write chunk @idx into @slot, which held @old (a meta word; 0
 * for a free slot): @len bytes of payload at @src, laid out as @desc says
 * (NULL: the chunk's first bytes). Sets *@meta to the new meta word.
 * Leaves no trace of @old on failure.
 */
int chunk_store(struct tier_disk *d, struct tier_dobj *o, int fd,
		uint64_t idx, uint64_t slot, const void *src, size_t len,
		const struct tier_chunk_desc *desc, uint32_t old,
		uint32_t *meta)
{
	struct chunk_codec c = codec_of(d);
	struct chunk_enc_out e;
	off_t off = chunk_off(d, slot);
	uint64_t now;
	int rc;

	if (off < 0)
		return -EFBIG;
	rc = chunk_encode(&c, idx, src, len, desc, &e);
	if (rc == -EIO)
		tfs_err("cannot compress chunk %" PRIu64 " of '%s': lz4 "
			"error %d", idx, o->path, e.lz4_error);
	if (rc)
		return rc;
	rc = pwritev_full(fd, e.iov, e.cnt, off);
	if (rc < 0) {
		count(&d->stats.write_errors);
		tfs_err("cannot write chunk %" PRIu64 " of spill file '%s': %s",
			idx, o->path, strerror(-rc));
		punch(d, o, fd, off, (off_t)d->chunk_size + d->blk);
		return rc;
	}
	/* Give back the blocks the old content took past the new. */
	now = slot_cost(d, e.total);
	if (meta_cost(d, old) > now)
		punch(d, o, fd, off + (off_t)now,
		      (off_t)(meta_cost(d, old) - now));
	*meta = e.meta;
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

/*
 * Fill @out with @n bytes of chunk @idx from its byte @lo on. @m is the
 * chunk's meta word, nonzero.
 */
static int chunk_load(struct tier_disk *d, const struct tier_dobj *o, int fd,
		      uint64_t idx, uint32_t m, char *out, size_t lo, size_t n)
{
	struct chunk_codec c = codec_of(d);
	off_t off = chunk_off(d, slot_of(o, idx));
	const char *why;
	struct scratch *s;
	struct iovec iov[2];
	struct chunk_hdr hb;
	char whybuf[64];
	int rc;

	if (chunk_direct(m, lo, n)) {
		/* Straight into the caller's buffer: no copy. */
		iov[0].iov_base = &hb;
		iov[0].iov_len = HDR;
		iov[1].iov_base = out;
		iov[1].iov_len = meta_total(m) - HDR;
		rc = preadv_full(fd, iov, 2, off);
		if (rc < 0)
			return read_failed(d, o, idx, rc);
		why = chunk_check_direct(&c, &hb, idx, m, out, n);
		return why ? chunk_corrupt(d, o, idx, why) : 0;
	}
	s = scratch_get(d->chunk_size, false);
	if (!s)
		return -ENOMEM;
	iov[0].iov_base = s->in;
	iov[0].iov_len = meta_total(m);
	rc = preadv_full(fd, iov, 1, off);
	if (rc < 0)
		return read_failed(d, o, idx, rc);
	rc = chunk_decode(&c, idx, m, s->in, out, lo, n, whybuf,
			  sizeof(whybuf), &why);
	return rc == -EIO ? chunk_corrupt(d, o, idx, why) : rc;
}

/* The part of [@off, @off + @len) in chunk @idx, into @dst (which holds
 * @off). */
int range_chunk(struct tier_disk *d, const struct tier_dobj *o, int fd,
		char *dst, size_t len, uint64_t off, uint64_t idx)
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

/* Put chunk @idx of meta word @m in slot @sl of the object being adopted,
 * as part of its committed version. */
static void adopt_put(struct tier_disk *d, struct tier_dobj *o, uint32_t idx,
		      uint32_t sl, uint32_t m)
{
	struct dobj_cow *c = o->cow;

	meta_of(o)[idx] = m;
	c->slot[idx] = sl;
	bit_put(c->used, sl, true);
	bit_put(c->pin, sl, true);
	o->stored += meta_cost(d, m);
}

/* Take chunk @idx out of the object being adopted again; its slot is
 * free from then on (the journal stops naming it before anything is
 * written: recovery writes a snapshot first). */
static void adopt_forget(struct tier_disk *d, struct tier_dobj *o,
			 uint32_t idx)
{
	struct dobj_cow *c = o->cow;
	uint32_t *meta = meta_of(o);

	o->stored -= meta_cost(d, meta[idx]);
	bit_put(c->used, c->slot[idx], false);
	bit_put(c->pin, c->slot[idx], false);
	meta[idx] = 0;
	c->slot[idx] = 0;
}

/* Read chunk @idx back; 0 when it checks out. */
static int adopt_check(struct tier_disk *d, struct tier_dobj *o, int fd,
		       char *buf, uint32_t idx)
{
	return range_chunk(d, o, fd, buf, d->chunk_size,
			   (uint64_t)idx * d->chunk_size, idx);
}

int tier_dobj_adopt(struct tier_disk *d, uint64_t id, const void *map,
		    size_t len, tier_dobj_lost_fn lost, void *ctx,
		    struct tier_dobj **out)
{
	const char *p = map;
	struct tier_dobj *o;
	struct dobj_cow *c;
	uint32_t n, (*later)[3] = NULL, nlater = 0, *meta;
	int64_t prev = -1;
	char *buf = NULL;
	int rc = -EINVAL, fd = -1;

	if (len < 4)
		return -EINVAL;
	memcpy(&n, p, 4);
	n = le32toh(n);
	if (len != 4 + (size_t)n * DOBJ_MAP_ENTRY)
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
	if ((rc = cow_slots_grow(c, o->cap)))
		goto out_free;
	for (uint32_t k = 0; k < n; k++) {
		const char *why = NULL;
		uint32_t e[3];

		memcpy(e, p + 4 + (size_t)k * DOBJ_MAP_ENTRY, sizeof(e));
		e[0] = le32toh(e[0]);
		e[1] = le32toh(e[1]);
		e[2] = le32toh(e[2]);
		/* Salvage takes entries in any order: reading the chunk
		 * back checks the index its header names. */
		if (e[0] == UINT32_MAX)
			why = "its index in the chunk table is out of range";
		else if (lost && meta_get(o, e[0]))
			why = "the chunk table has a second entry for it";
		else if (!lost && (int64_t)e[0] <= prev)
			why = "its entry in the chunk table is out of order";
		else if (e[1] == UINT32_MAX || chunk_off(d, e[1]) < 0)
			why = "its slot in the chunk table is out of range";
		else if (!meta_valid(d, e[2]))
			why = "its entry in the chunk table says no chunk "
			      "this disk tier can have";
		if (why) {
			rc = -EINVAL;
			if (!lost)
				goto out_free;
			lost(ctx, e[0] == UINT32_MAX ? UINT64_MAX : e[0], why);
			continue;
		}
		prev = e[0];
		rc = meta_grow(o, (uint64_t)e[0] + 1);
		if (!rc)
			rc = cow_bits_grow(c, e[1]);
		if (rc)
			goto out_free;
		if (bit_get(c->used, c->nwords, e[1])) {
			/* Two chunks in one slot: with salvage, the one
			 * whose header names it gets it, below. */
			rc = -EINVAL;
			if (!lost)
				goto out_free;
			if (!(nlater & (nlater - 1))) {
				uint32_t (*l)[3] = realloc(
					later, (nlater ? 2 * nlater : 1) *
						       sizeof(*later));

				if (!l) {
					rc = -ENOMEM;
					goto out_free;
				}
				later = l;
			}
			memcpy(later[nlater++], e, sizeof(e));
			continue;
		}
		adopt_put(d, o, e[0], e[1], e[2]);
	}
	meta = meta_of(o);
	if (lost) {
		/* Only what reads back is kept. */
		buf = malloc(d->chunk_size);
		if (!buf) {
			rc = -ENOMEM;
			goto out_free;
		}
		fd = obj_fd_get(d, o);
		if (fd < 0) {
			rc = -EIO;
			goto out_free;
		}
		for (uint32_t i = 0; i < o->cap; i++) {
			if (meta[i] && adopt_check(d, o, fd, buf, i)) {
				adopt_forget(d, o, i);
				lost(ctx, i, "its bytes do not check out");
			}
		}
		for (uint32_t k = 0; k < nlater; k++) {
			uint32_t *e = later[k];

			if (meta[e[0]] || bit_get(c->used, c->nwords, e[1])) {
				lost(ctx, e[0], "its slot in the chunk table "
					       "is another chunk's");
				continue;
			}
			adopt_put(d, o, e[0], e[1], e[2]);
			if (adopt_check(d, o, fd, buf, e[0])) {
				adopt_forget(d, o, e[0]);
				lost(ctx, e[0], "its bytes do not check out");
			}
		}
		obj_fd_put(o, fd);
		fd = -1;
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
	free(buf);
	free(later);
	*out = o;
	return 0;

out_free:
	if (fd >= 0)
		obj_fd_put(o, fd);
	free(buf);
	free(later);
	tier_dobj_close(d, o);
	return rc;
}

uint64_t tier_dobj_nchunks(const struct tier_dobj *o)
{
	for (uint64_t i = o->cap; i > 0; i--)
		if (meta_get(o, i - 1))
			return i;
	return 0;
}

uint32_t tier_dobj_chunk_pages(const struct tier_disk *d,
			       const struct tier_dobj *o, uint64_t idx)
{
	uint32_t m = meta_get(o, idx);

	if (!m)
		return 0;
	if ((m >> META_ENC_SHIFT) != ENC_RAW || (m & META_MAP))
		return UINT32_MAX;
	return (meta_total(m) - HDR + TIER_PAGE - 1) / TIER_PAGE;
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
