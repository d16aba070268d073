// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A buffer's host copy: a table of pool chunks with holes, or one small
 * malloc'd block for a file under half a chunk. b->lock is held for writing
 * unless a function says otherwise.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "tiers/store_i.h"

uint64_t st_nchunks_for(struct tier_store *s, uint64_t size)
{
	return (size + s->chunk_size - 1) / s->chunk_size;
}

/* Bytes a dense host copy of @size bytes takes. */
uint64_t st_host_bytes_for(struct tier_store *s, uint64_t size)
{
	if (size < s->chunk_size)
		return (size + SMALL_ALIGN - 1) / SMALL_ALIGN * SMALL_ALIGN;
	return st_nchunks_for(s, size) * s->chunk_size;
}

void st_host_drop(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	st_io_quiesce(b);
	if (b->cap0) {
		free(b->chunks[0]);
	} else {
		for (uint64_t i = 0; i < b->nchunks; i++)
			host_chunk_put(s->pool, b->chunks[i]);
	}
	free(b->chunks);
	b->chunks = NULL;
	b->nchunks = 0;
	b->cap0 = 0;
	b->has_host = false;
	st_uncharge_all(b, TFS_TIER_HOST);
}

static int grow_table(struct tier_buf *b, uint64_t n)
{
	if (n <= b->nchunks)
		return 0;
	if (n > UINT32_MAX)
		return -EFBIG;
	void **c = realloc(b->chunks, n * sizeof(*c));

	if (!c)
		return -ENOMEM;
	memset(c + b->nchunks, 0, (n - b->nchunks) * sizeof(*c));
	b->chunks = c;
	b->nchunks = (uint32_t)n;
	return 0;
}

void *st_chunk_get(struct tier_store *s)
{
	void *c = host_chunk_get(s->pool);

	if (!c) {
		__atomic_add_fetch(&s->host_alloc_failures, 1,
				   __ATOMIC_RELAXED);
		tfs_err("cannot allocate a host chunk of %u bytes: out of memory",
			s->chunk_size);
	}
	return c;
}

/* Turn a small chunk 0 into a full pool chunk. */
int st_unsmall(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	int rc = st_reserve(b, TFS_TIER_HOST, s->chunk_size - b->cap0);

	if (rc)
		return rc;
	void *c = st_chunk_get(s);

	if (!c) {
		st_unreserve(b, TFS_TIER_HOST, s->chunk_size - b->cap0);
		return -ENOMEM;
	}
	memcpy(c, b->chunks[0], b->cap0);
	memset((char *)c + b->cap0, 0, s->chunk_size - b->cap0);
	st_io_quiesce(b);
	free(b->chunks[0]);
	b->chunks[0] = c;
	b->cap0 = 0;
	return 0;
}

/*
 * Make chunk @idx writable over [lo, hi) (offsets inside the chunk). Bytes
 * of a new chunk outside that range are zeroed, so that everything past the
 * file's end inside a chunk always reads as zero.
 */
static int host_chunk_prepare(struct tier_buf *b, uint64_t idx, size_t lo,
			      size_t hi, bool whole_file_small)
{
	struct tier_store *s = b->s;
	int rc;

	if (whole_file_small && idx == 0 && (b->nchunks == 0 || b->cap0 ||
					     !b->chunks[0])) {
		/* A small chunk always holds the whole file, including a
		 * tail that truncate grew without writing. */
		size_t want = hi > b->size ? hi : (size_t)b->size;

		if (b->nchunks == 0 && (rc = grow_table(b, 1)))
			return rc;
		if (b->cap0 >= want)
			return 0;
		size_t cap = b->cap0 ? b->cap0 : SMALL_ALIGN;

		while (cap < want)
			cap *= 2;
		cap = (cap + SMALL_ALIGN - 1) / SMALL_ALIGN * SMALL_ALIGN;
		if (cap >= s->chunk_size / 2) {
			if (b->cap0)
				return st_unsmall(b);
		} else {
			rc = st_reserve(b, TFS_TIER_HOST, cap - b->cap0);
			if (rc)
				return rc;
			st_io_quiesce(b); /* realloc may move the bytes */
			void *c = realloc(b->chunks[0], cap);

			if (!c) {
				st_unreserve(b, TFS_TIER_HOST, cap - b->cap0);
				return -ENOMEM;
			}
			memset((char *)c + b->cap0, 0, cap - b->cap0);
			b->chunks[0] = c;
			b->cap0 = (uint32_t)cap;
			return 0;
		}
	}
	if (b->cap0 && (rc = st_unsmall(b)))
		return rc;
	if ((rc = grow_table(b, idx + 1)))
		return rc;
	if (b->chunks[idx])
		return 0;
	rc = st_reserve(b, TFS_TIER_HOST, s->chunk_size);
	if (rc)
		return rc;
	void *c = st_chunk_get(s);

	if (!c) {
		st_unreserve(b, TFS_TIER_HOST, s->chunk_size);
		return -ENOMEM;
	}
	memset(c, 0, lo);
	memset((char *)c + hi, 0, s->chunk_size - hi);
	b->chunks[idx] = c;
	return 0;
}

/* Copy [off, off+len) of the host copy out; b->lock held for reading. */
void st_host_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
{
	struct tier_store *s = b->s;

	while (len) {
		uint64_t idx = off / s->chunk_size;
		size_t in = off % s->chunk_size;
		size_t n = s->chunk_size - in;
		const char *c = idx < b->nchunks ? b->chunks[idx] : NULL;

		if (n > len)
			n = len;
		if (c && b->cap0) {
			size_t have = in < b->cap0 ? b->cap0 - in : 0;

			if (have > n)
				have = n;
			memcpy(dst, c + in, have);
			memset((char *)dst + have, 0, n - have);
		} else if (c) {
			memcpy(dst, c + in, n);
		} else {
			memset(dst, 0, n);
		}
		dst = (char *)dst + n;
		off += n;
		len -= n;
	}
}

/* Build a dense host copy from the device or disk copy. */
int st_host_fetch(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t need = st_host_bytes_for(s, b->size);
	uint64_t n = st_nchunks_for(s, b->size);
	bool from_dev;
	int rc;

	if (b->has_host)
		return 0;
	if (n > UINT32_MAX)
		return -ENOSPC;
	if (st_dev_lost(b))
		return -EIO;
	rc = st_reserve(b, TFS_TIER_HOST, need);
	if (rc)
		return rc;
	b->has_host = true;
	b->cap0 = b->size < s->chunk_size ? (uint32_t)need : 0;
	if (!n)
		return 0;
	b->chunks = calloc(n, sizeof(*b->chunks));
	if (!b->chunks) {
		rc = -ENOMEM;
		goto out_drop;
	}
	b->nchunks = (uint32_t)n;
	/* From a device that failed, the lower copy is all there is. */
	from_dev = b->dmem && !tier_dev_failed(s->dev);
	for (uint64_t i = 0; i < n;) {
		/* From disk, a batch of chunks is decompressed in parallel on
		 * the disk tier's pool; from the device, a batch is copied
		 * with one wait. */
		size_t max = from_dev ? DEV_BATCH : SPILL_BATCH, k;
		struct tier_dev_seg seg[DEV_BATCH];
		void *dsts[DEV_BATCH];
		size_t lens[DEV_BATCH];

		for (k = 0; k < max && i + k < n; k++) {
			uint64_t off = (i + k) * s->chunk_size;
			void *c = b->cap0 ? calloc(1, b->cap0) :
					    st_chunk_get(s);

			if (!c) {
				rc = -ENOMEM;
				goto out_drop;
			}
			b->chunks[i + k] = c;
			dsts[k] = c;
			lens[k] = b->size - off < s->chunk_size ?
					  b->size - off : s->chunk_size;
			seg[k] = (struct tier_dev_seg){ c, lens[k], off };
			if (!from_dev && !b->dobj)
				memset(c, 0, lens[k]);
			if (!b->cap0)
				memset((char *)c + lens[k], 0,
				       s->chunk_size - lens[k]);
		}
		if (from_dev)
			rc = tier_dev_readv(s->dev, b->dmem, seg,
					    (unsigned int)k);
		else if (b->dobj)
			rc = tier_dobj_read_chunks(s->disk, b->dobj, i, dsts,
						   lens, k);
		if (rc)
			goto out_drop;
		i += k;
	}
	st_count_written(s, TFS_TIER_HOST, b->size);
	/* st_host_drop() uncharges what st_reserve() charged */
	pthread_mutex_lock(&s->lock);
	s->use[TFS_TIER_HOST].unspills += b->dmem ? 0 : 1;
	s->use[TFS_TIER_HOST].unspill_bytes += b->dmem ? 0 : b->size;
	pthread_mutex_unlock(&s->lock);
	return 0;

out_drop:
	st_host_drop(b);
	return rc;
}

/* Point @iov at the host copy's bytes of [off, off+len); b->lock held.
 * Returns the entries used, or -E2BIG when @max is too few. */
int st_host_iov(struct tier_buf *b, size_t len, uint64_t off,
		struct iovec *iov, int max)
{
	struct tier_store *s = b->s;
	int n = 0;

	while (len) {
		uint64_t idx = off / s->chunk_size;
		size_t in = off % s->chunk_size;
		size_t part = s->chunk_size - in;
		char *c = idx < b->nchunks ? b->chunks[idx] : NULL;

		if (part > len)
			part = len;
		if (c && b->cap0 && in + part > b->cap0) {
			/* The tail of a small chunk past its allocation. */
			size_t have = in < b->cap0 ? b->cap0 - in : 0;

			if (have) {
				if (n == max)
					return -E2BIG;
				iov[n++] = (struct iovec){ c + in, have };
			}
			in += have;
			part -= have;
			len -= have;
			off += have;
			c = NULL;
			if (!part)
				continue;
		}
		if (n == max)
			return -E2BIG;
		iov[n++] = (struct iovec){ c ? c + in : s->zeroes, part };
		off += part;
		len -= part;
	}
	return n;
}

ssize_t st_host_write(struct tier_buf *b, const char *src, size_t len,
		      uint64_t off)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len > b->size ? off + len : b->size;
	bool small = end < s->chunk_size / 2 && b->nchunks <= 1;
	size_t done = 0;

	while (done < len) {
		uint64_t idx = (off + done) / s->chunk_size;
		size_t in = (off + done) % s->chunk_size;
		size_t n = s->chunk_size - in;
		int rc;

		if (n > len - done)
			n = len - done;
		rc = host_chunk_prepare(b, idx, in, in + n, small);
		if (rc)
			return done ? (ssize_t)done : rc;
		memcpy((char *)b->chunks[idx] + in, src + done, n);
		done += n;
		if (off + done > b->size)
			b->size = off + done;
	}
	return (ssize_t)done;
}
