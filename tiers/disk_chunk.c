// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The chunk codec: one chunk encoded into the bytes of its slot (header,
 * page map, stored bytes: the format is described in disk.c), and the bytes
 * of a slot checked and decoded. No file I/O: the disk tier's file code
 * (disk.c) reads and writes the slots and calls this on memory, so the
 * codec is tested and fuzzed on buffers, and a tier whose files live on
 * another kind of storage encodes the same way.
 */
#include "tiers/disk_i.h"

bool all_zero(const void *buf, size_t len)
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

uint32_t hdr_crc(const struct chunk_hdr *h)
{
	return tfs_crc32c(0, h, offsetof(struct chunk_hdr, hdr_crc));
}

/* Bytes of the page map of a chunk with holes. */
static uint32_t codec_map_len(const struct chunk_codec *c)
{
	uint32_t bits = c->chunk_size / TIER_PAGE;

	return (bits + 63) / 64 * 8;
}

int chunk_encode(const struct chunk_codec *c, uint64_t idx, const void *src,
		 size_t len, const struct tier_chunk_desc *desc,
		 struct chunk_enc_out *out)
{
	struct chunk_hdr *h;
	struct scratch *s;
	const void *data = src;
	uint32_t stored = 0, mlen = 0, crc;
	int enc, cnt = 1;
	bool raw_only = desc && desc->raw;

	out->lz4_error = 0;
	s = scratch_get(c->chunk_size, false);
	if (!s)
		return -ENOMEM;
	h = (struct chunk_hdr *)s->in;
	if (desc && desc->map)
		mlen = codec_map_len(c);

	if (raw_only) {
		/* Room that fallocate took must stay taken. */
		enc = ENC_RAW;
	} else if (all_zero(src, len)) {
		/* Where the zeroes are does not matter then. */
		enc = ENC_ZERO;
		mlen = 0;
	} else if (c->compression == CFG_COMPRESS_LZ4) {
		/* Keep lz4 only when it saves more than 1/64: decoding a
		 * barely smaller block costs more than reading raw bytes
		 * straight into the caller's buffer. */
		int cap = (int)(len - 1 - len / 64), n = 0;

		if (cap > 0)
			n = LZ4_compress_fast_extState(s->lz4_state, src,
						       s->in + HDR, (int)len,
						       cap, c->accel);
		if (n < 0) {
			out->lz4_error = n;
			return -EIO;
		}
		enc = n ? ENC_LZ4 : ENC_RAW;
		if (n) {
			stored = (uint32_t)n;
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
	out->iov[0].iov_base = h;
	out->iov[0].iov_len = HDR;
	if (mlen) {
		out->iov[cnt].iov_base = (void *)desc->map;
		out->iov[cnt++].iov_len = mlen;
	}
	if (stored) {
		out->iov[cnt].iov_base = (void *)data;
		out->iov[cnt++].iov_len = stored;
	}
	out->cnt = cnt;
	out->total = HDR + mlen + stored;
	out->meta = out->total | (mlen ? META_MAP : 0) |
		    ((uint32_t)enc << META_ENC_SHIFT);
	return 0;
}

const char *chunk_check_hdr(const struct chunk_codec *c,
			    const struct chunk_hdr *h, uint64_t idx,
			    uint32_t meta)
{
	uint32_t enc = meta >> META_ENC_SHIFT;
	uint32_t mlen = (meta & META_MAP) ? codec_map_len(c) : 0;
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
	if (raw > c->chunk_size || (enc == ENC_RAW && raw != stored))
		return "bad length";
	return NULL;
}

bool chunk_direct(uint32_t meta, size_t lo, size_t n)
{
	return meta >> META_ENC_SHIFT == ENC_RAW && !(meta & META_MAP) &&
	       lo == 0 && n >= meta_total(meta) - HDR;
}

const char *chunk_check_direct(const struct chunk_codec *c,
			       const struct chunk_hdr *h, uint64_t idx,
			       uint32_t meta, char *out, size_t n)
{
	uint32_t stored = meta_total(meta) - HDR;
	const char *why = chunk_check_hdr(c, h, idx, meta);

	if (!why && tfs_crc32c(0, out, stored) != le32toh(h->data_crc))
		why = "checksum mismatch";
	if (!why)
		memset(out + stored, 0, n - stored);
	return why;
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

/* *@why for an lz4 failure @r, in @buf. */
static int lz4_failed(int r, char *buf, size_t len, const char **why)
{
	snprintf(buf, len, "lz4 decode failed (%d)", r);
	*why = buf;
	return -EIO;
}

int chunk_decode(const struct chunk_codec *c, uint64_t idx, uint32_t m,
		 const char *slot, char *out, size_t lo, size_t n,
		 char *whybuf, size_t whylen, const char **why)
{
	/* The header names the chunk, not the slot: a stale slot of another
	 * chunk fails the index check. */
	uint32_t enc = m >> META_ENC_SHIFT, total = meta_total(m);
	uint32_t mlen = (m & META_MAP) ? codec_map_len(c) : 0;
	uint32_t stored = total - HDR - mlen, raw;
	const struct chunk_hdr *h = (const struct chunk_hdr *)slot;
	const char *src = slot + HDR + mlen;
	struct scratch *s;

	*why = chunk_check_hdr(c, h, idx, m);
	if (!*why && tfs_crc32c(0, slot + HDR, mlen + stored) !=
			     le32toh(h->data_crc))
		*why = "checksum mismatch";
	if (*why)
		return -EIO;
	raw = le32toh(h->raw_len);
	if (enc == ENC_ZERO) {
		memset(out, 0, n);
		return 0;
	}
	if (mlen) {
		/* The whole payload, then the pages the range covers. The
		 * map is not aligned in the slot: copy it out. */
		uint64_t map[MAX_CHUNK_SIZE / TIER_PAGE / 64];

		memcpy(map, slot + HDR, mlen);
		if (enc == ENC_LZ4) {
			int r;

			s = scratch_get(c->chunk_size, true);
			if (!s)
				return -ENOMEM;
			r = LZ4_decompress_safe(src, s->out, (int)stored,
						(int)raw);
			if (r < 0 || (uint32_t)r != raw)
				return lz4_failed(r, whybuf, whylen, why);
			src = s->out;
		}
		if (map_rank(map, c->chunk_size / TIER_PAGE) * TIER_PAGE < raw) {
			*why = "map and length differ";
			return -EIO;
		}
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
			s = scratch_get(c->chunk_size, true);
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
		if (r < 0 || (size_t)r != end)
			return lz4_failed(r, whybuf, whylen, why);
		if (lo)
			memcpy(out, dst + lo, got);
	}
	memset(out + got, 0, n - got);
	return 0;
}
