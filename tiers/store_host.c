// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A buffer's chunks: which pages of each hold bytes (the page maps, kept
 * whatever tier holds the buffer) and the host copy of those bytes (see
 * struct tier_chunk).
 *
 * Writes that fill chunks land in pool chunks (dense): memory faulted in
 * once and reused, the fast path for large files. Writes that do not land
 * packed, in a malloc'd block of the pages they touch that grows as they
 * go. When the file is placed (tier_buf_register(): close, fsync), every
 * chunk that is not full is packed to its exact size, the file's tail cut
 * at its end: the host copy then takes what the file holds, a page at most
 * per hole, plus what malloc itself takes per block. A fetch from a lower
 * tier builds that layout directly.
 *
 * b->lock is held for writing unless a function says otherwise.
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "tiers/store_i.h"

#define PG TIER_PAGE

static uint32_t ppc(const struct tier_store *s)
{
	return s->chunk_size / PG;
}

static uint32_t mapw(const struct tier_store *s)
{
	return (ppc(s) + 63) / 64;
}

static bool bit(const uint64_t *m, uint32_t p)
{
	return m[p / 64] >> (p % 64) & 1;
}

static void bit_set(uint64_t *m, uint32_t p, bool on)
{
	if (on)
		m[p / 64] |= 1ull << (p % 64);
	else
		m[p / 64] &= ~(1ull << (p % 64));
}

static uint32_t popcount_below(const uint64_t *m, uint32_t p)
{
	uint32_t r = 0, w;

	for (w = 0; w < p / 64; w++)
		r += (uint32_t)__builtin_popcountll(m[w]);
	if (p % 64)
		r += (uint32_t)__builtin_popcountll(m[w] &
						    ((1ull << (p % 64)) - 1));
	return r;
}

static bool ck_alloc(const struct tier_chunk *ck, uint32_t p)
{
	return ck->map ? bit(ck->map, p) : p < ck->npages;
}

/* The place of page @p among the allocated pages: its page in a packed
 * copy. */
static uint32_t ck_rank(const struct tier_chunk *ck, uint32_t p)
{
	if (ck->map)
		return popcount_below(ck->map, p);
	return p < ck->npages ? p : ck->npages;
}

/* @ck's allocated and unwritten pages as full bitmaps. */
static void ck_get(const struct tier_store *s, const struct tier_chunk *ck,
		   uint64_t *a, uint64_t *u)
{
	uint32_t w = mapw(s);

	memset(u, 0, w * sizeof(*u));
	if (ck->map) {
		memcpy(a, ck->map, w * sizeof(*a));
		if (ck->unw)
			memcpy(u, ck->map + w, w * sizeof(*u));
		return;
	}
	memset(a, 0, w * sizeof(*a));
	for (uint32_t p = 0; p < ck->npages; p++)
		bit_set(a, p, true);
}

static uint32_t count(const struct tier_store *s, const uint64_t *a)
{
	uint32_t n = 0;

	for (uint32_t w = 0; w < mapw(s); w++)
		n += (uint32_t)__builtin_popcountll(a[w]);
	return n;
}

/* The highest page set in @a; @a must have one. */
static uint32_t last_page(const struct tier_store *s, const uint64_t *a)
{
	for (uint32_t w = mapw(s); w--;)
		if (a[w])
			return w * 64 + 63 - (uint32_t)__builtin_clzll(a[w]);
	return 0;
}

static bool any(const struct tier_store *s, const uint64_t *m)
{
	for (uint32_t w = 0; w < mapw(s); w++)
		if (m[w])
			return true;
	return false;
}

/* Set @ck's maps to @a and @u: the prefix form when @a is [0, n) and @u
 * is empty. 0 or -ENOMEM (nothing changed). */
static int ck_set(const struct tier_store *s, struct tier_chunk *ck,
		  const uint64_t *a, const uint64_t *u)
{
	uint32_t w = mapw(s), n = count(s, a);
	bool unw = any(s, u);

	if (!unw && (!n || last_page(s, a) + 1 == n)) {
		free(ck->map);
		ck->map = NULL;
		ck->unw = false;
		ck->npages = (uint16_t)n;
		return 0;
	}
	if (!ck->map && !(ck->map = malloc(2 * w * sizeof(*ck->map))))
		return -ENOMEM;
	memcpy(ck->map, a, w * sizeof(*a));
	memcpy(ck->map + w, u, w * sizeof(*u));
	ck->unw = unw;
	ck->npages = (uint16_t)n;
	return 0;
}

/* Bytes of chunk @idx before the file's end (0 past it, chunk_size for a
 * chunk wholly inside). */
static uint32_t eof_in(const struct tier_buf *b, uint64_t idx)
{
	uint64_t start = idx * b->s->chunk_size;

	if (b->size <= start)
		return 0;
	return b->size - start < b->s->chunk_size ?
		       (uint32_t)(b->size - start) :
		       b->s->chunk_size;
}

/* The part [*lo, *hi) of chunk @idx that the byte range [off, end) covers,
 * as offsets inside the chunk; the range must reach into the chunk. */
static void chunk_span(const struct tier_store *s, uint64_t idx, uint64_t off,
		       uint64_t end, uint32_t *lo, uint32_t *hi)
{
	uint64_t base = idx * s->chunk_size;

	*lo = off > base ? (uint32_t)(off - base) : 0;
	*hi = end - base < s->chunk_size ? (uint32_t)(end - base) :
					   s->chunk_size;
}

/*
 * Bytes a packed copy of chunk @idx with pages @a (unwritten @u) needs:
 * to the end of the last page, cut at the file's end unless unwritten
 * pages keep their room.
 */
static uint32_t fit_len(const struct tier_buf *b, uint64_t idx,
			const uint64_t *a, const uint64_t *u)
{
	const struct tier_store *s = b->s;
	uint32_t n = count(s, a), last, end, tail = PG;

	if (!n)
		return 0;
	if (any(s, u))
		return n * PG;
	last = last_page(s, a);
	end = eof_in(b, idx);
	if (end > last * PG && end - last * PG < PG)
		tail = end - last * PG;
	return (n - 1) * PG + tail;
}

/* Whether chunk @idx with pages @a is best dense: all its pages
 * allocated and the file going past it. */
static bool full(const struct tier_buf *b, uint64_t idx, const uint64_t *a)
{
	return count(b->s, a) == ppc(b->s) && eof_in(b, idx) == b->s->chunk_size;
}

static uint64_t ck_cost(const struct tier_store *s, const struct tier_chunk *ck)
{
	if (!ck->host)
		return 0;
	return ck->dense ? s->chunk_size : st_malloc_cost(ck->hcap);
}

static uint64_t layout_cost(const struct tier_store *s, bool dense,
			    uint32_t cap)
{
	return dense ? s->chunk_size : st_malloc_cost(cap);
}

/* Free the host bytes of @ck; the caller gives back their charge. */
static void ck_release(struct tier_store *s, struct tier_chunk *ck)
{
	if (ck->dense)
		st_chunk_put(s, ck->host);
	else
		free(ck->host);
	ck->host = NULL;
	ck->dense = false;
	ck->hlen = ck->hcap = 0;
}

/* Free the host bytes of @ck, giving back what they were charged. */
static void ck_free_host(struct tier_buf *b, struct tier_chunk *ck)
{
	uint64_t cost = ck_cost(b->s, ck);

	if (!ck->host)
		return;
	ck_release(b->s, ck);
	if (cost)
		st_unreserve(b, TFS_TIER_HOST, cost);
}

void st_host_drop(struct tier_buf *b)
{
	st_io_quiesce(b);
	for (uint32_t i = 0; i < b->nck; i++)
		if (b->ck[i].host)
			ck_release(b->s, &b->ck[i]);
	b->has_host = false;
	st_uncharge_all(b, TFS_TIER_HOST);
}

/* Charge @b's host tier what its host copy takes now. */
static void recount(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t sum = 0;

	for (uint32_t i = 0; i < b->nck; i++)
		sum += ck_cost(s, &b->ck[i]);
	pthread_mutex_lock(&s->lock);
	st_charge(s, b, TFS_TIER_HOST,
		  (int64_t)sum - (int64_t)b->charged[TFS_TIER_HOST]);
	pthread_mutex_unlock(&s->lock);
}

void st_chunks_free(struct tier_buf *b)
{
	for (uint32_t i = 0; i < b->nck; i++)
		free(b->ck[i].map);
	free(b->ck);
	b->ck = NULL;
	b->nck = 0;
}

static int grow_table(struct tier_buf *b, uint64_t n)
{
	struct tier_chunk *c;

	if (n <= b->nck)
		return 0;
	if (n > UINT32_MAX)
		return -EFBIG;
	c = realloc(b->ck, n * sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c + b->nck, 0, (n - b->nck) * sizeof(*c));
	b->ck = c;
	b->nck = (uint32_t)n;
	return 0;
}

bool st_chunk_used(struct tier_buf *b, uint64_t idx)
{
	return idx < b->nck && b->ck[idx].npages;
}

/*
 * Where the bytes of page @p of @ck are in its host copy, and how many of
 * them are stored there (the rest reads as zero); NULL when none are.
 */
static const char *page_bytes(const struct tier_chunk *ck, uint32_t p,
			      uint32_t *have)
{
	uint32_t at;

	*have = 0;
	if (!ck->host || !ck_alloc(ck, p))
		return NULL;
	if (ck->dense) {
		*have = PG;
		return ck->host + (size_t)p * PG;
	}
	at = ck_rank(ck, p) * PG;
	if (at >= ck->hlen)
		return NULL;
	*have = ck->hlen - at < PG ? ck->hlen - at : PG;
	return ck->host + at;
}

/*
 * Give chunk @idx the pages @a (unwritten @u) in a new host block: dense,
 * or packed with @len bytes stored in @cap of room. The bytes of the
 * pages it had and keeps move along (unwritten ones read zero); the rest
 * is zero. The caller charged the difference in cost. 0 or -ENOMEM
 * (nothing changed).
 */
static int ck_relayout(struct tier_buf *b, uint64_t idx, const uint64_t *a,
		       const uint64_t *u, bool dense, uint32_t len,
		       uint32_t cap)
{
	struct tier_store *s = b->s;
	struct tier_chunk *ck = &b->ck[idx];
	uint32_t w = mapw(s), r = 0;
	uint64_t *nmap = NULL;
	char *n = NULL;

	/* Room for a map first, so that nothing fails after the copy; it
	 * goes in only then, the copy reads the old layout. */
	if (!ck->map && !(nmap = calloc(2 * w, sizeof(*nmap))))
		return -ENOMEM;
	if (dense) {
		n = st_chunk_get(s);
		if (n)
			memset(n, 0, s->chunk_size);
	} else if (cap) {
		n = malloc(cap);
	}
	if ((dense || cap) && !n) {
		free(nmap);
		return -ENOMEM;
	}
	for (uint32_t p = 0; p < ppc(s); p++) {
		uint32_t room, have;
		const char *from;
		char *to;

		if (!bit(a, p))
			continue;
		room = dense ? PG : (r * PG < len ? len - r * PG : 0);
		if (room > PG)
			room = PG;
		to = dense ? n + (size_t)p * PG : n + (size_t)r * PG;
		r++;
		if (!room)
			continue;
		from = bit(u, p) ? NULL : page_bytes(ck, p, &have);
		if (!from)
			have = 0;
		if (have > room)
			have = room;
		if (have)
			memcpy(to, from, have);
		if (!dense)
			memset(to + have, 0, room - have);
	}
	st_io_quiesce(b);
	ck_release(s, ck);
	ck->host = n;
	ck->dense = dense;
	ck->hlen = dense ? s->chunk_size : len;
	ck->hcap = dense ? s->chunk_size : cap;
	if (nmap)
		ck->map = nmap;
	/* Cannot fail: the map is there. */
	ck_set(s, ck, a, u);
	return 0;
}

/* Charge @now - @was to @b's host copy: reserve when it grows (-ENOSPC),
 * give back when it shrinks. */
static int recharge(struct tier_buf *b, uint64_t was, uint64_t now)
{
	if (now > was)
		return st_reserve(b, TFS_TIER_HOST, now - was);
	if (was > now)
		st_unreserve(b, TFS_TIER_HOST, was - now);
	return 0;
}

/* Relayout chunk @idx for pages @a/@u, charging first. */
static int ck_move(struct tier_buf *b, uint64_t idx, const uint64_t *a,
		   const uint64_t *u, bool dense, uint32_t len, uint32_t cap)
{
	struct tier_store *s = b->s;
	uint64_t was = ck_cost(s, &b->ck[idx]);
	uint64_t now = layout_cost(s, dense, cap);
	int rc;

	if (!count(s, a)) {
		ck_free_host(b, &b->ck[idx]);
		return ck_set(s, &b->ck[idx], a, u);
	}
	if (now > was && (rc = st_reserve(b, TFS_TIER_HOST, now - was)))
		return rc;
	rc = ck_relayout(b, idx, a, u, dense, len, cap);
	if (rc) {
		if (now > was)
			st_unreserve(b, TFS_TIER_HOST, now - was);
		return rc;
	}
	if (was > now)
		st_unreserve(b, TFS_TIER_HOST, was - now);
	return 0;
}

/* Copy @n bytes from @src to chunk @idx's host copy at @lo, all of whose
 * pages are allocated. */
static void ck_copy_in(struct tier_buf *b, uint64_t idx, uint32_t lo,
		       const char *src, uint32_t n)
{
	struct tier_chunk *ck = &b->ck[idx];

	if (ck->dense || !ck->map) {
		memcpy(ck->host + lo, src, n);
		return;
	}
	while (n) {
		uint32_t p = lo / PG, in = lo % PG, part = PG - in;

		if (part > n)
			part = n;
		memcpy(ck->host + (size_t)ck_rank(ck, p) * PG + in, src, part);
		src += part;
		lo += part;
		n -= part;
	}
}

/*
 * Whether a write of [lo, hi) to empty chunk @idx should take a pool
 * chunk at once: it fills half the chunk, or it follows a full chunk, as
 * a sequential writer does.
 */
static bool want_dense(struct tier_buf *b, uint64_t idx, uint32_t lo,
		       uint32_t hi)
{
	struct tier_store *s = b->s;
	const struct tier_chunk *prev = idx ? &b->ck[idx - 1] : NULL;

	if (hi - lo >= s->chunk_size / 2)
		return true;
	return lo == 0 && prev && prev->dense && !prev->map &&
	       prev->npages == ppc(s);
}

/* Write [lo, hi) of chunk @idx from @src into the host copy. */
static int host_chunk_write(struct tier_buf *b, uint64_t idx, uint32_t lo,
			    uint32_t hi, const char *src)
{
	struct tier_store *s = b->s;
	struct tier_chunk *ck = &b->ck[idx];
	uint32_t pl = lo / PG, ph = (hi - 1) / PG, half = s->chunk_size / 2;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	int rc;

	/* Appending to or rewriting the first pages: grow in place. */
	if (!ck->dense && !ck->map && pl <= ck->npages &&
	    (hi > ck->hlen ? hi : ck->hlen) <= half &&
	    !(ck->npages == 0 && want_dense(b, idx, lo, hi))) {
		uint32_t need = hi > ck->hlen ? hi : ck->hlen;

		if (need > ck->hcap) {
			/* Twice the room while written piecemeal; the
			 * register packs it to size. */
			uint32_t cap = ck->hcap && 2 * ck->hcap > need ?
					       2 * ck->hcap :
					       need;
			char *n;

			if (cap > half)
				cap = need > half ? need : half;
			rc = recharge(b, ck_cost(s, ck), st_malloc_cost(cap));
			if (rc)
				return rc;
			st_io_quiesce(b); /* realloc may move the bytes */
			n = realloc(ck->host, cap);
			if (!n) {
				recharge(b, st_malloc_cost(cap),
					 st_malloc_cost(ck->hcap));
				return -ENOMEM;
			}
			ck->host = n;
			ck->hcap = cap;
		}
		if (lo > ck->hlen)
			memset(ck->host + ck->hlen, 0, lo - ck->hlen);
		memcpy(ck->host + lo, src, hi - lo);
		ck->hlen = need;
		if (ph + 1 > ck->npages)
			ck->npages = (uint16_t)(ph + 1);
		return 0;
	}
	ck_get(s, ck, a, u);
	for (uint32_t p = pl; p <= ph; p++) {
		bit_set(a, p, true);
		bit_set(u, p, false);
	}
	if (!ck->dense) {
		bool dense = want_dense(b, idx, lo, hi) ||
			     count(s, a) * PG > half;
		uint32_t len = 0;

		if (!dense) {
			/* The pages before the last, whole; the last up to
			 * what it holds now or this write's end. */
			uint32_t last = last_page(s, a), have = 0, tail;

			page_bytes(ck, last, &have);
			tail = last == ph ? hi - ph * PG : have;
			if (last == ph && have > tail)
				tail = have;
			len = (count(s, a) - 1) * PG + tail;
		}
		rc = ck_move(b, idx, a, u, dense, len, len);
		if (rc)
			return rc;
	} else if ((rc = ck_set(s, ck, a, u))) {
		return rc;
	}
	ck_copy_in(b, idx, lo, src, hi - lo);
	return 0;
}

ssize_t st_host_write(struct tier_buf *b, const char *src, size_t len,
		      uint64_t off)
{
	struct tier_store *s = b->s;
	size_t done = 0;
	int rc;

	if (len && (rc = grow_table(b, st_nchunks_for(s, off + len))))
		return rc;
	while (done < len) {
		uint64_t idx = (off + done) / s->chunk_size;
		uint32_t in = (uint32_t)((off + done) % s->chunk_size);
		size_t n = s->chunk_size - in;

		if (n > len - done)
			n = len - done;
		rc = host_chunk_write(b, idx, in, in + (uint32_t)n,
				      src + done);
		if (rc)
			return done ? (ssize_t)done : rc;
		done += n;
		if (off + done > b->size)
			b->size = off + done;
	}
	return (ssize_t)done;
}

/* Copy [off, off+len) of the host copy out; b->lock held for reading. */
void st_host_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
{
	struct tier_store *s = b->s;
	char *out = dst;

	while (len) {
		uint64_t idx = off / s->chunk_size;
		uint32_t in = (uint32_t)(off % s->chunk_size);
		const struct tier_chunk *ck = idx < b->nck ? &b->ck[idx] : NULL;
		size_t n = s->chunk_size - in;

		if (n > len)
			n = len;
		if (!ck || !ck->host) {
			memset(out, 0, n);
		} else if (ck->dense) {
			memcpy(out, ck->host + in, n);
		} else if (!ck->map) {
			uint32_t have = in < ck->hlen ? ck->hlen - in : 0;

			if (have > n)
				have = (uint32_t)n;
			memcpy(out, ck->host + in, have);
			memset(out + have, 0, n - have);
		} else {
			for (size_t k = 0; k < n;) {
				uint32_t o = in + (uint32_t)k, have;
				uint32_t part = PG - o % PG;
				const char *p = page_bytes(ck, o / PG, &have);

				if (part > n - k)
					part = (uint32_t)(n - k);
				have = have > o % PG ? have - o % PG : 0;
				if (have > part)
					have = part;
				if (have)
					memcpy(out + k, p + o % PG, have);
				memset(out + k + have, 0, part - have);
				k += part;
			}
		}
		out += n;
		off += n;
		len -= n;
	}
}

/* Point @iov at the host copy's bytes of [off, off+len); b->lock held.
 * Returns the entries used, or -E2BIG when @max is too few. */
int st_host_iov(struct tier_buf *b, size_t len, uint64_t off,
		struct iovec *iov, int max)
{
	struct tier_store *s = b->s;
	int n = 0;

	/* One entry per run of bytes from one place: stored bytes of a
	 * chunk, or zeroes. */
	while (len) {
		uint64_t idx = off / s->chunk_size;
		uint32_t in = (uint32_t)(off % s->chunk_size);
		const struct tier_chunk *ck = idx < b->nck ? &b->ck[idx] : NULL;
		uint32_t part = s->chunk_size - in, have = 0;
		const char *p = NULL;

		if (part > len)
			part = (uint32_t)len;
		if (ck && ck->host && ck->dense) {
			p = ck->host + in;
			have = part;
		} else if (ck && ck->host && !ck->map) {
			have = in < ck->hlen ? ck->hlen - in : 0;
			p = ck->host + in;
		} else if (ck && ck->host) {
			uint32_t hv;
			const char *pb = page_bytes(ck, in / PG, &hv);

			/* a page at a time: the next may sit elsewhere */
			if (part > PG - in % PG)
				part = PG - in % PG;
			have = hv > in % PG ? hv - in % PG : 0;
			p = pb ? pb + in % PG : NULL;
		}
		if (have > part)
			have = part;
		if (!have) {
			have = part;
			p = s->zeroes;
		}
		if (n && iov[n - 1].iov_base == s->zeroes && p == s->zeroes &&
		    iov[n - 1].iov_len + have <= s->chunk_size) {
			iov[n - 1].iov_len += have;
		} else if (n && p != s->zeroes &&
			   (const char *)iov[n - 1].iov_base +
					   iov[n - 1].iov_len ==
				   p) {
			iov[n - 1].iov_len += have;
		} else {
			if (n == max)
				return -E2BIG;
			iov[n++] = (struct iovec){ (void *)p, have };
		}
		off += have;
		len -= have;
	}
	return n;
}

uint64_t st_host_cost(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX], sum = 0;

	for (uint32_t i = 0; i < b->nck; i++) {
		if (!b->ck[i].npages)
			continue;
		ck_get(s, &b->ck[i], a, u);
		sum += full(b, i, a) ? s->chunk_size :
				       st_malloc_cost(fit_len(b, i, a, u));
	}
	return sum;
}

void st_host_fit(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];

	for (uint32_t i = 0; i < b->nck; i++) {
		struct tier_chunk *ck = &b->ck[i];
		uint32_t len;

		if (!ck->host)
			continue;
		ck_get(s, ck, a, u);
		if (full(b, i, a) && ck->dense)
			continue;
		len = fit_len(b, i, a, u);
		if (ck->dense || !count(s, a)) {
			ck_move(b, i, a, u, false, len, len);
		} else if (ck->hcap > len) {
			char *n;

			st_io_quiesce(b);
			n = realloc(ck->host, len);
			if (!n)
				continue;
			recharge(b, st_malloc_cost(ck->hcap),
				 st_malloc_cost(len));
			ck->host = n;
			ck->hcap = len;
			if (ck->hlen > len)
				ck->hlen = len;
		}
	}
}

void st_host_truncate(struct tier_buf *b, uint64_t size)
{
	struct tier_store *s = b->s;
	uint64_t keep = st_nchunks_for(s, size);
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	uint32_t in = (uint32_t)(size % s->chunk_size);

	st_io_quiesce(b);
	for (uint64_t i = keep; i < b->nck; i++) {
		ck_free_host(b, &b->ck[i]);
		free(b->ck[i].map);
		memset(&b->ck[i], 0, sizeof(b->ck[i]));
	}
	if (b->nck > keep)
		b->nck = (uint32_t)keep;
	if (!in || keep > b->nck || !keep)
		return;
	struct tier_chunk *ck = &b->ck[keep - 1];
	uint32_t pe = (in + PG - 1) / PG;

	if (!ck->npages)
		return;
	/* The page holding the new end keeps its bytes before it. */
	if (ck->host && ck->dense) {
		memset(ck->host + in, 0, s->chunk_size - in);
	} else if (ck->host) {
		uint32_t cut = ck_rank(ck, pe) * PG;

		if (in % PG && ck_alloc(ck, in / PG))
			cut = ck_rank(ck, in / PG) * PG + in % PG;
		if (ck->hlen > cut)
			ck->hlen = cut;
	}
	ck_get(s, ck, a, u);
	for (uint32_t p = pe; p < ppc(s); p++) {
		bit_set(a, p, false);
		bit_set(u, p, false);
	}
	/* Fewer bits never needs the map allocated anew. */
	ck_set(s, ck, a, u);
	if (!ck->npages)
		ck_free_host(b, ck);
}

int st_host_punch(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len, a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	int rc = 0;

	for (uint64_t i = off / s->chunk_size; i < b->nck &&
					       i * s->chunk_size < end; i++) {
		struct tier_chunk *ck = &b->ck[i];
		uint32_t lo, hi;

		if (!ck->npages)
			continue;
		chunk_span(s, i, off, end, &lo, &hi);
		ck_get(s, ck, a, u);
		for (uint32_t p = lo / PG; p * PG < hi; p++) {
			uint32_t ps = p * PG, pe = ps + PG;
			uint32_t zs = lo > ps ? lo : ps, ze = hi < pe ? hi : pe;

			if (!bit(a, p))
				continue;
			if (zs == ps && ze == pe) {
				/* wholly inside: the page goes */
				bit_set(a, p, false);
				bit_set(u, p, false);
			} else if (ck->host && !bit(u, p)) {
				/* partly: its bytes there read zero */
				uint32_t have;
				char *pb = (char *)page_bytes(ck, p, &have);

				if (pb && have > zs - ps) {
					uint32_t stop = ze - ps < have ?
								ze - ps :
								have;

					memset(pb + (zs - ps), 0,
					       stop - (zs - ps));
				}
			}
		}
		if (!ck->host) {
			rc = ck_set(s, ck, a, u);
		} else if (full(b, i, a) && ck->dense) {
			rc = ck_set(s, ck, a, u);
		} else {
			uint32_t fl = fit_len(b, i, a, u);

			/*
			 * The freed pages go now, not at the next close, and
			 * the chunk never takes more than it did: a punch
			 * must not need room (issue 31). A packed block
			 * holds what its pages stored in no more than its
			 * room (pages only move down), a file's tail grown
			 * in place included, whose room is short of whole
			 * pages; a dense chunk that packs no smaller stays.
			 */
			if (!ck->dense && fl > ck->hcap)
				fl = ck->hcap;
			if (ck->dense && st_malloc_cost(fl) >= s->chunk_size) {
				for (uint32_t p = 0; p < ppc(s); p++)
					if (!bit(a, p) && ck_alloc(ck, p))
						memset(ck->host + (size_t)p * PG,
						       0, PG);
				rc = ck_set(s, ck, a, u);
			} else {
				rc = ck_move(b, i, a, u, false, fl, fl);
			}
		}
		if (rc)
			break;
	}
	return rc;
}

/*
 * fallocate's pages of bytes [lo, hi) of a chunk in maps @a and @u, as
 * tmpfs takes them: a page not allocated becomes allocated and unwritten
 * (a hole to SEEK_DATA), one that fallocate took before becomes data
 * (zeroes), a written one stays. Sets *@grew when a page was added;
 * returns whether anything changed.
 */
static bool take_pages(uint64_t *a, uint64_t *u, uint32_t lo, uint32_t hi,
		       bool *grew)
{
	bool changed = false;

	*grew = false;
	for (uint32_t p = lo / PG; p * PG < hi; p++) {
		if (bit(a, p)) {
			changed |= bit(u, p);
			bit_set(u, p, false);
			continue;
		}
		bit_set(a, p, true);
		bit_set(u, p, true);
		*grew = changed = true;
	}
	return changed;
}

int st_host_allocate(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len, first = off / s->chunk_size;
	uint64_t last = (end - 1) / s->chunk_size, need = 0, was = 0;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	int rc;

	if (!len)
		return 0;
	if ((rc = grow_table(b, last + 1)))
		return rc;
	/* Everything first, so that a tier without room for all of it
	 * gets nothing. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t i = first; i <= last; i++) {
			struct tier_chunk *ck = &b->ck[i];
			uint32_t lo, hi;
			bool grew = false, dense;
			uint32_t n;

			chunk_span(s, i, off, end, &lo, &hi);
			ck_get(s, ck, a, u);
			if (!take_pages(a, u, lo, hi, &grew))
				continue;
			if (!grew) {
				/* taken again: data now, no new bytes */
				if (pass == 1 && (rc = ck_set(s, ck, a, u)))
					goto out;
				continue;
			}
			n = count(s, a);
			dense = ck->dense || n * PG > s->chunk_size / 2;
			if (pass == 0) {
				need += layout_cost(s, dense, n * PG);
				was += ck_cost(s, ck);
				continue;
			}
			rc = dense && ck->dense ?
				     ck_set(s, ck, a, u) :
				     ck_relayout(b, i, a, u, dense, n * PG,
						 n * PG);
			if (rc)
				goto out;
		}
		if (pass == 0 && need > was &&
		    (rc = st_reserve(b, TFS_TIER_HOST, need - was)))
			return rc;
	}
	if (was > need)
		st_unreserve(b, TFS_TIER_HOST, was - need);
	return 0;
out:
	/* Out of memory half way: the pages done stay (zeroes, charged),
	 * the rest of the charge goes back. */
	recount(b);
	return rc;
}

int st_pages_written(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len, a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	int rc;

	if (!len)
		return 0;
	if ((rc = grow_table(b, st_nchunks_for(s, end))))
		return rc;
	for (uint64_t i = off / s->chunk_size; i * s->chunk_size < end; i++) {
		struct tier_chunk *ck = &b->ck[i];
		uint32_t lo, hi, pl, ph;

		chunk_span(s, i, off, end, &lo, &hi);
		pl = lo / PG;
		ph = (hi - 1) / PG;

		if (!ck->map && pl <= ck->npages) {
			if (ph + 1 > ck->npages)
				ck->npages = (uint16_t)(ph + 1);
			continue;
		}
		ck_get(s, ck, a, u);
		for (uint32_t p = pl; p <= ph; p++) {
			bit_set(a, p, true);
			bit_set(u, p, false);
		}
		if ((rc = ck_set(s, ck, a, u)))
			return rc;
	}
	return 0;
}

int st_pages_allocated(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	uint64_t end = off + len, a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	int rc;

	if (!len)
		return 0;
	if ((rc = grow_table(b, st_nchunks_for(s, end))))
		return rc;
	for (uint64_t i = off / s->chunk_size; i * s->chunk_size < end; i++) {
		uint32_t lo, hi;
		bool grew;

		chunk_span(s, i, off, end, &lo, &hi);
		ck_get(s, &b->ck[i], a, u);
		if (!take_pages(a, u, lo, hi, &grew))
			continue;
		if ((rc = ck_set(s, &b->ck[i], a, u)))
			return rc;
	}
	return 0;
}

int st_pages_all(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t n = st_nchunks_for(s, b->size);
	int rc;

	if ((rc = grow_table(b, n)))
		return rc;
	for (uint64_t i = 0; i < b->nck; i++) {
		struct tier_chunk *ck = &b->ck[i];
		uint32_t end = eof_in(b, i);

		free(ck->map);
		ck->map = NULL;
		ck->unw = false;
		ck->npages = (uint16_t)((end + PG - 1) / PG);
	}
	return 0;
}

/* What the chunk table and the size alone say of chunk @idx's pages:
 * @present, its pages up to the file's end, written; else none. */
static void pages_default(const struct tier_buf *b, uint64_t idx, bool present,
			  uint64_t *a, uint64_t *u)
{
	const struct tier_store *s = b->s;
	uint32_t n = present ? (eof_in(b, idx) + PG - 1) / PG : 0;

	memset(a, 0, mapw(s) * sizeof(*a));
	memset(u, 0, mapw(s) * sizeof(*u));
	for (uint32_t p = 0; p < n; p++)
		bit_set(a, p, true);
}

static void put_words(char *p, const uint64_t *w, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		uint64_t v = htole64(w[k]);

		memcpy(p + 8 * k, &v, 8);
	}
}

static void get_words(uint64_t *w, const char *p, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		memcpy(&w[k], p + 8 * k, 8);
		w[k] = le64toh(w[k]);
	}
}

static void put32(char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static uint32_t get32(const char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

size_t st_pages_image(struct tier_buf *b, const struct tier_dobj *o,
		      void *buf, size_t len)
{
	struct tier_store *s = b->s;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	uint64_t da[MAP_WORDS_MAX], du[MAP_WORDS_MAX];
	uint32_t w = mapw(s), n = 0;
	size_t need = 12;
	char *p = buf;

	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			if (need > len)
				return need;
			put32(p, PAGES_MAGIC);
			put32(p + 4, ppc(s));
			put32(p + 8, n);
			p += 12;
		}
		for (uint32_t i = 0; i < b->nck; i++) {
			const struct tier_chunk *ck = &b->ck[i];
			uint8_t flags = 0;
			uint16_t np;

			ck_get(s, ck, a, u);
			pages_default(b, i, tier_dobj_chunk_cost(s->disk, o, i),
				      da, du);
			if (!memcmp(a, da, w * sizeof(*a)) &&
			    !memcmp(u, du, w * sizeof(*u)))
				continue;
			if (ck->map)
				flags = PAGES_F_ALLOC |
					(ck->unw ? PAGES_F_UNW : 0);
			if (pass == 0) {
				n++;
				need += 8 + (flags & PAGES_F_ALLOC ? 8 * w : 0) +
					(flags & PAGES_F_UNW ? 8 * w : 0);
				continue;
			}
			np = htole16(ck->npages);
			put32(p, i);
			memcpy(p + 4, &np, 2);
			p[6] = (char)flags;
			p[7] = 0;
			p += 8;
			if (flags & PAGES_F_ALLOC) {
				put_words(p, a, w);
				p += 8 * w;
			}
			if (flags & PAGES_F_UNW) {
				put_words(p, u, w);
				p += 8 * w;
			}
		}
	}
	return need;
}

/*
 * Walk the entries of page section @sec (@len bytes): check each, and
 * with @apply give chunk @idx its maps. The last index seen goes to
 * *@last (-1 when none). Returns whether the whole section checks out.
 */
static bool pages_walk(struct tier_buf *b, const char *sec, size_t len,
		       bool apply, int64_t *last)
{
	struct tier_store *s = b->s;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	uint32_t w = mapw(s), n;
	const char *p = sec, *end = sec + len;

	*last = -1;
	if (len < 12 || get32(p) != PAGES_MAGIC || get32(p + 4) != ppc(s))
		return false;
	n = get32(p + 8);
	p += 12;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t idx;
		uint16_t np;
		uint8_t flags;

		if (end - p < 8)
			return false;
		idx = get32(p);
		memcpy(&np, p + 4, 2);
		np = le16toh(np);
		flags = (uint8_t)p[6];
		p += 8;
		if ((int64_t)idx <= *last || idx == UINT32_MAX || p[-1] ||
		    (flags & ~(PAGES_F_ALLOC | PAGES_F_UNW)) ||
		    ((flags & PAGES_F_UNW) && !(flags & PAGES_F_ALLOC)) ||
		    !np || np > ppc(s))
			return false;
		memset(a, 0, w * sizeof(*a));
		memset(u, 0, w * sizeof(*u));
		if (flags & PAGES_F_ALLOC) {
			if ((size_t)(end - p) < 8 * w)
				return false;
			get_words(a, p, w);
			p += 8 * w;
		} else {
			for (uint32_t q = 0; q < np; q++)
				bit_set(a, q, true);
		}
		if (flags & PAGES_F_UNW) {
			if ((size_t)(end - p) < 8 * w)
				return false;
			get_words(u, p, w);
			p += 8 * w;
		}
		/* No page past the chunk, none unwritten that is not
		 * allocated, and as many as it says. */
		for (uint32_t q = ppc(s); q < w * 64; q++)
			if (bit(a, q))
				return false;
		for (uint32_t x = 0; x < w; x++)
			if (u[x] & ~a[x])
				return false;
		if (count(s, a) != np)
			return false;
		*last = idx;
		if (apply && ck_set(s, &b->ck[idx], a, u))
			return false;
	}
	return p == end;
}

int st_pages_adopt(struct tier_buf *b, const void *sec, size_t len, bool old,
		   st_adopt_say say, void *ctx)
{
	struct tier_store *s = b->s;
	struct tier_dobj *o = b->dobj;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	uint64_t n = st_nchunks_for(s, b->size), held = tier_dobj_nchunks(o);
	bool good = false;
	int64_t last = -1;
	int rc;

	if (!old) {
		good = pages_walk(b, sec, len, false, &last);
		if (!good)
			say(ctx, UINT64_MAX, "its page maps are damaged: "
			    "rebuilt from its chunk table", false);
	}
	if (held > n)
		n = held;
	if (good && (uint64_t)last + 1 > n)
		n = (uint64_t)last + 1;
	if ((rc = grow_table(b, n)))
		return rc;
	for (uint32_t i = 0; i < b->nck; i++) {
		pages_default(b, i, tier_dobj_chunk_cost(s->disk, o, i), a, u);
		if ((rc = ck_set(s, &b->ck[i], a, u)))
			return rc;
	}
	if (good && !pages_walk(b, sec, len, true, &last))
		return -ENOMEM; /* it checked out above: only ck_set fails */
	/* The two tables must agree on which chunks hold anything. */
	for (uint32_t i = 0; i < b->nck; i++) {
		struct tier_chunk *ck = &b->ck[i];
		bool present = tier_dobj_chunk_cost(s->disk, o, i);
		uint32_t np;

		if (ck->npages && !present) {
			ck_get(s, ck, a, u);
			bool written = false;

			for (uint32_t x = 0; x < mapw(s); x++)
				written |= (a[x] & ~u[x]) != 0;
			say(ctx, i, written ? "the chunk table lacks it: "
					      "its pages read as a hole" :
					      "the chunk table lacks the "
					      "pages fallocate took in it: "
					      "they are holes now",
			    written);
			pages_default(b, i, false, a, u);
		} else if (!ck->npages && present) {
			/* Past the end: what fallocate kept there. */
			np = tier_dobj_chunk_pages(s->disk, o, i);
			if (!old)
				say(ctx, i, "its page map is lost: its pages "
				    "come back as its chunk stores them",
				    false);
			pages_default(b, i, false, a, u);
			for (uint32_t p = 0; p < ppc(s) && p < np; p++) {
				bit_set(a, p, true);
				bit_set(u, p, np != UINT32_MAX);
			}
		} else {
			continue;
		}
		if ((rc = ck_set(s, ck, a, u)))
			return rc;
	}
	return 0;
}

int64_t st_seek(struct tier_buf *b, uint64_t off, bool hole)
{
	struct tier_store *s = b->s;
	uint64_t p = off / PG, pend = (b->size + PG - 1) / PG;

	if (off >= b->size)
		return -ENXIO;
	/* Page by page, a chunk without pages at once. */
	while (p < pend) {
		uint64_t idx = p * PG / s->chunk_size;
		uint32_t in = (uint32_t)(p % ppc(s));
		const struct tier_chunk *ck = idx < b->nck ? &b->ck[idx] : NULL;
		bool data;

		if (!ck || !ck->npages) {
			if (hole)
				break;
			p += ppc(s) - in;
			continue;
		}
		if (!ck->map) {
			/* data is [0, npages) */
			if (in < ck->npages && hole)
				p += ck->npages - in;
			else if (in < ck->npages || hole)
				break;
			else
				p += ppc(s) - in;
			continue;
		}
		data = ck_alloc(ck, in) &&
		       !(ck->unw && bit(ck->map + mapw(s), in));
		if (data != hole)
			break;
		p++;
	}
	if (p >= pend)
		return hole ? (int64_t)b->size : -ENXIO;
	return (int64_t)(p * PG > off ? p * PG : off);
}

bool st_pages_run(struct tier_buf *b, uint64_t from, uint64_t to,
		  uint64_t *off, uint64_t *len)
{
	struct tier_store *s = b->s;
	uint64_t p = from / PG, pend = (to + PG - 1) / PG, first;

	/* The first allocated page, a chunk without pages at once. */
	for (;;) {
		uint64_t idx = p * PG / s->chunk_size;
		uint32_t in = (uint32_t)(p % ppc(s));
		const struct tier_chunk *ck;

		if (p >= pend || idx >= b->nck)
			return false;
		ck = &b->ck[idx];
		if (!ck->npages) {
			p += ppc(s) - in;
			continue;
		}
		if (ck_alloc(ck, in))
			break;
		p++;
	}
	first = p;
	while (p < pend) {
		uint64_t idx = p * PG / s->chunk_size;

		if (idx >= b->nck ||
		    !ck_alloc(&b->ck[idx], (uint32_t)(p % ppc(s))))
			break;
		p++;
	}
	*off = first * PG;
	*len = (p - first) * PG;
	return true;
}

/* Gather the allocated pages of @ck from the dense chunk @src into @dst,
 * @len bytes in all. @dst may be @src. */
static void gather(const struct tier_store *s, const struct tier_chunk *ck,
		   const char *src, char *dst, uint32_t len)
{
	uint32_t r = 0;

	for (uint32_t p = 0; p < ppc(s) && r * PG < len; p++) {
		uint32_t n;

		if (!ck_alloc(ck, p))
			continue;
		n = len - r * PG < PG ? len - r * PG : PG;
		memmove(dst + (size_t)r * PG, src + (size_t)p * PG, n);
		r++;
	}
}

const void *st_chunk_payload(struct tier_buf *b, uint64_t idx, void *scratch,
			     bool from_scratch, size_t *len,
			     struct tier_chunk_desc *desc)
{
	struct tier_store *s = b->s;
	const struct tier_chunk *ck = &b->ck[idx];
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX];
	const char *src = from_scratch ? scratch : ck->host;

	ck_get(s, ck, a, u);
	desc->map = ck->map;
	desc->raw = ck->unw;
	if (!from_scratch && !ck->dense) {
		*len = ck->hlen;
		return ck->host;
	}
	*len = fit_len(b, idx, a, u);
	if (!ck->map)
		return src;
	gather(s, ck, src, scratch, (uint32_t)*len);
	return scratch;
}

int st_host_fetch(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t a[MAP_WORDS_MAX], u[MAP_WORDS_MAX], need = 0;
	void *scratch[SPILL_BATCH] = { NULL };
	bool from_dev;
	int rc = 0;

	if (b->has_host)
		return 0;
	if (st_dev_lost(b))
		return -EIO;
	for (uint32_t i = 0; i < b->nck; i++) {
		if (!b->ck[i].npages)
			continue;
		ck_get(s, &b->ck[i], a, u);
		need += full(b, i, a) ? s->chunk_size :
					st_malloc_cost(fit_len(b, i, a, u));
	}
	rc = st_reserve(b, TFS_TIER_HOST, need);
	if (rc)
		return rc;
	b->has_host = true;
	/* From a device that failed, the lower copy is all there is. */
	from_dev = b->dmem && !tier_dev_failed(st_bdev(b));
	for (uint32_t i = 0; i < b->nck;) {
		size_t max = from_dev ? DEV_BATCH : SPILL_BATCH, used = 0;
		struct tier_dev_seg seg[DEV_BATCH];
		void *dsts[DEV_BATCH];
		size_t lens[DEV_BATCH], k = 0, nseg = 0;
		uint32_t idxs[DEV_BATCH];

		/* A run of chunks read at once: from disk, decompressed in
		 * parallel on the disk tier's pool; from the device, copied
		 * with one wait. Full chunks are read into their pool chunk,
		 * the others into scratch (SPILL_BATCH of them) and packed.
		 * A chunk without pages ends the run. */
		for (; k < max && i < b->nck; i++) {
			struct tier_chunk *ck = &b->ck[i];

			if (!ck->npages) {
				if (k) {
					i++;
					break;
				}
				continue;
			}
			ck_get(s, ck, a, u);
			if (full(b, i, a)) {
				ck->host = st_chunk_get(s);
				ck->dense = true;
				ck->hlen = ck->hcap = s->chunk_size;
				dsts[k] = ck->host;
			} else if (used == SPILL_BATCH) {
				break;
			} else {
				uint32_t len = fit_len(b, i, a, u);

				ck->hcap = ck->hlen = len;
				ck->host = malloc(len);
				if (!scratch[used])
					scratch[used] = st_chunk_get(s);
				dsts[k] = scratch[used++];
			}
			if (!ck->host || !dsts[k]) {
				rc = -ENOMEM;
				goto out_drop;
			}
			lens[k] = eof_in(b, i);
			idxs[k++] = i;
		}
		if (!k)
			break;
		/* (a chunk past the end holds only pages fallocate kept
		 * there, zeroes: the device copy ends before it) */
		for (size_t j = 0; j < k && from_dev; j++)
			if (lens[j])
				seg[nseg++] = (struct tier_dev_seg){
					dsts[j], lens[j],
					(uint64_t)idxs[j] * s->chunk_size
				};
		if (nseg)
			rc = tier_dev_readv(st_bdev(b), b->dmem, seg,
					    (unsigned int)nseg);
		else if (!from_dev && b->dobj)
			rc = tier_dobj_read_chunks(st_bdisk(b), b->dobj, idxs[0],
						   dsts, lens, k);
		if (rc)
			goto out_drop;
		for (size_t j = 0; j < k; j++) {
			struct tier_chunk *ck = &b->ck[idxs[j]];

			if (!from_dev && !b->dobj)
				memset(dsts[j], 0, lens[j]);
			memset((char *)dsts[j] + lens[j], 0,
			       s->chunk_size - lens[j]);
			if (!ck->dense)
				gather(s, ck, dsts[j], ck->host, ck->hlen);
		}
	}
	for (int k = 0; k < SPILL_BATCH; k++)
		st_chunk_put(s, scratch[k]);
	st_count_written(s, TFS_TIER_HOST, b->size);
	/* st_host_drop() uncharges what st_reserve() charged */
	pthread_mutex_lock(&s->lock);
	s->use[TFS_TIER_HOST].unspills += b->dmem ? 0 : 1;
	s->use[TFS_TIER_HOST].unspill_bytes += b->dmem ? 0 : b->size;
	pthread_mutex_unlock(&s->lock);
	return 0;

out_drop:
	for (int k = 0; k < SPILL_BATCH; k++)
		st_chunk_put(s, scratch[k]);
	for (uint32_t i = 0; i < b->nck; i++)
		ck_release(s, &b->ck[i]);
	b->has_host = false;
	st_uncharge_all(b, TFS_TIER_HOST);
	return rc;
}
