// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * One chunk of a spill file: encoding it into its slot and decoding it,
 * checked (the format is described in disk.c).
 */
#include "tiers/disk_i.h"

/* --- chunks --- */

/*
 * Encode and write chunk @idx into @slot, which held @old (a meta word; 0
 * for a free slot): @len bytes of payload at @src, laid out as @desc says
 * (NULL: the chunk's first bytes). Sets *@meta to the new meta word.
 * Leaves no trace of @old on failure.
 */
int chunk_store(struct tier_disk *d, struct tier_dobj *o, int fd,
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
int range_chunk(struct tier_disk *d, const struct tier_dobj *o,
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
