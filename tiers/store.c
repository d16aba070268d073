// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The buffer store. See store.h for the model; this file is about how.
 *
 * Access rules. Fields marked [B] are read with b->lock held for reading and
 * changed with it held for writing. Fields marked [S] are read and changed
 * with s->lock held. The [S] mirrors of [B] state (present, pi.size) exist so
 * that stat and the eviction scan never wait for a busy buffer.
 *
 * Lock order: b->lock, then s->lock. Code that holds s->lock only try-locks
 * buffers (the eviction scan), so two threads that each hold one buffer and
 * look for room can never wait on each other.
 *
 * A buffer with explicit pins or export leases is unlinked from the policy's
 * lists, so the scan never even looks at it; a buffer with I/O in flight
 * holds its lock and fails the try-lock. Either way it does not move.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "config/log.h"
#include "policy/policy.h"
#include "tiers/device.h"
#include "tiers/disk.h"
#include "tiers/host.h"
#include "tiers/store.h"

/* Headroom reserved on disk per chunk before its compressed size is known. */
#define DISK_CHUNK_OVERHEAD 64
/* Device allocations that fail with ENOMEM below our limit (fragmentation,
 * another process) evict this many more buffers before giving up. */
#define DEV_ALLOC_RETRIES 8
/* Small files keep their bytes in one malloc'd chunk rounded to this. */
#define SMALL_ALIGN 64
/*
 * A read or a write brings a buffer up into a tier only if it takes at most
 * this share of the tier's limit. A larger one would push out much of the
 * tier, and be pushed out itself by the next access to anything else, to be
 * fetched whole again on its next read: two readers and two writers of
 * 256 MiB files under a 768 MiB host limit spilled four times what they
 * wrote. Such buffers are read and written chunk by chunk where they are.
 * Explicit moves and exports are not limited.
 */
#define PROMOTE_SHARE 4
/* Chunks handed to the disk tier's compression pool at once. */
#define SPILL_BATCH 8

struct lease {
	uint64_t owner;
	bool writable;
};

struct tier_store {
	/* Outermost store lock; see the access rules above. */
	pthread_mutex_t lock;
	struct pol pol; /* [S] */
	struct tier_usage use[TFS_TIER_COUNT]; /* [S] */
	uint64_t files, logical; /* [S] */
	uint64_t evict_failures, checksum_errors; /* [S] */
	uint64_t next_id; /* [S] */
	double high_wm, target; /* [S] */
	enum cfg_unspill unspill; /* [S] */

	/* Set at init, read-only after. */
	struct tier_dev *dev;
	struct tier_dev_info dev_info;
	struct tier_disk *disk;
	struct host_pool *pool;
	uint32_t chunk_size;
	uint64_t host_capacity, disk_capacity;
	char *disk_path;
	char backend[16];

	pthread_t spiller;
	pthread_cond_t spill_wake; /* with lock */
	pthread_cond_t io_idle; /* with lock: some io_refs reached 0 */
	void *zeroes; /* chunk_size of never-written memory, reads as zero */
	bool stop; /* [S] */
	bool spiller_started;
};

struct tier_buf {
	struct pol_item pi; /* [S] */
	struct tier_store *s;
	pthread_rwlock_t lock;
	uint64_t id;

	uint64_t size; /* [B]; pi.size is its [S] mirror */
	void **chunks; /* [B] host copy; NULL entries are holes */
	uint32_t nchunks; /* [B] entries in chunks[] */
	uint32_t cap0; /* [B] bytes in chunks[0] when it is small, else 0 */
	struct tier_dmem *dmem; /* [B] */
	struct tier_dobj *dobj; /* [B] */
	/* [B] One chunk of a buffer too large for host memory, being written
	 * in place on disk (read-modify-write). */
	void *wc;
	uint64_t charged[TFS_TIER_COUNT]; /* [S] */
	uint64_t generation; /* [S] */
	struct lease *leases; /* [S] */
	uint32_t nleases; /* [S] */
	uint32_t pins; /* [S] */
	uint32_t io_refs; /* [S] replies pointing into the buffer */
	uint32_t wc_idx; /* [B] the chunk in wc */
	/* Flags, packed: files are many and small. */
	bool has_host; /* [B] */
	bool dirty; /* [B] written since the last register */
	bool wc_dirty; /* [B] */
	bool wc_reserved; /* [B] disk room for one chunk is charged */
	uint8_t present; /* [S] bit t: a copy in tier t */
	bool dead; /* [S] destroy has begun */
	bool staging; /* [S] mirror of dirty: being written, not placed */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *tier_name(enum tfs_tier t)
{
	static const char *const names[] = { "device", "host", "disk" };

	return t < TFS_TIER_COUNT ? names[t] : "?";
}

int tier_parse(const char *name, size_t len, enum tfs_tier *out)
{
	while (len && (name[len - 1] == '\n' || name[len - 1] == '\0'))
		len--;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		const char *n = tier_name((enum tfs_tier)t);

		if (strlen(n) == len && !memcmp(n, name, len)) {
			*out = (enum tfs_tier)t;
			return 0;
		}
	}
	return -EINVAL;
}

/* ---- accounting and policy links (s->lock held) ---- */

static bool movable(const struct tier_buf *b)
{
	return !b->pins && !b->nleases && !b->dead;
}

/* Link @b into the lists of the tiers it has a copy in, if it may move. */
static void sync_links(struct tier_store *s, struct tier_buf *b)
{
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		if (movable(b) && (b->present & (1u << t)) &&
		    t != TFS_TIER_DISK)
			pol_insert(&s->pol, t, &b->pi);
		else
			pol_remove(&s->pol, t, &b->pi);
	}
}

static void charge(struct tier_store *s, struct tier_buf *b, int t,
		   int64_t delta)
{
	b->charged[t] += (uint64_t)delta;
	s->use[t].used += (uint64_t)delta;
}

static bool over_high(struct tier_store *s, int t)
{
	struct tier_usage *u = &s->use[t];

	return u->limit && (double)u->used > s->high_wm * (double)u->limit;
}

/* Copy the [B] state that stat and the scan need into [S] mirrors. Called
 * with b->lock held for writing, takes s->lock. */
static void publish(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint8_t present = 0;

	if (b->dmem)
		present |= 1u << TFS_TIER_DEVICE;
	if (b->has_host)
		present |= 1u << TFS_TIER_HOST;
	if (b->dobj)
		present |= 1u << TFS_TIER_DISK;
	pthread_mutex_lock(&s->lock);
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		if ((present ^ b->present) & (1u << t))
			s->use[t].buffers += (present & (1u << t)) ? 1 : -1;
	}
	b->present = present;
	b->staging = b->dirty;
	s->logical += b->size - b->pi.size;
	b->pi.size = b->size;
	sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
}

static void uncharge_all(struct tier_buf *b, int t)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	charge(s, b, t, -(int64_t)b->charged[t]);
	pthread_mutex_unlock(&s->lock);
}

static void count_move(struct tier_store *s, int from, int to, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	if (to > from) {
		s->use[from].spills++;
		s->use[from].spill_bytes += bytes;
	} else {
		s->use[to].unspills++;
		s->use[to].unspill_bytes += bytes;
	}
	pthread_mutex_unlock(&s->lock);
}

static int evict_copy(struct tier_buf *v, int t);

static void count_written(struct tier_store *s, int t, uint64_t bytes)
{
	pthread_mutex_lock(&s->lock);
	s->use[t].written_bytes += bytes;
	pthread_mutex_unlock(&s->lock);
}

/*
 * Wait until no reply points into @b's memory. Called with b->lock held for
 * writing, so no new reference can start, before freeing or moving a host
 * chunk or device memory.
 */
static void io_quiesce(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	while (b->io_refs)
		pthread_cond_wait(&s->io_idle, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

/*
 * Evict until tier @t uses at most @goal bytes. Called and returns with
 * s->lock held; drops it while a victim moves. Returns 0, or -ENOSPC when
 * nothing more can move.
 */
static int shrink(struct tier_store *s, int t, uint64_t goal,
		  struct tier_buf *self)
{
	struct pol_item *prev = NULL;
	/* First pass: leave buffers being written alone. Spilling one that
	 * is half written costs its writer a fetch back or a write on disk,
	 * while a placed buffer's lower copy is often clean already. */
	bool take_staging = false;

	while (s->use[t].used > goal) {
		struct pol_item *it = pol_victim(&s->pol, t, prev);

		if (!it && !take_staging) {
			take_staging = true;
			prev = NULL;
			continue;
		}
		if (!it) {
			s->evict_failures++;
			return -ENOSPC;
		}
		struct tier_buf *v = (struct tier_buf *)it;

		/* An empty buffer frees nothing; skip it rather than write an
		 * empty spill file. */
		if (v == self || !v->charged[t] || v->io_refs ||
		    (v->staging && !take_staging) ||
		    pthread_rwlock_trywrlock(&v->lock)) {
			prev = it;
			continue;
		}
		uint64_t before = s->use[t].used;

		pthread_mutex_unlock(&s->lock);
		int rc = evict_copy(v, t);
		pthread_mutex_lock(&s->lock);
		if (!rc && s->use[t].used >= before)
			rc = -EAGAIN;
		/* Unlocking under s->lock keeps @v alive: destroy marks it
		 * dead under s->lock before it waits for v->lock. */
		pthread_rwlock_unlock(&v->lock);
		if (rc < 0) {
			if (v->dead || !pol_linked(&v->pi, t))
				prev = NULL;
			else
				prev = it;
			continue;
		}
		prev = NULL;
	}
	return 0;
}

/*
 * The disk tier's limit is ours; the filesystem under it may be shared and
 * fill up first. Asking it before each chunk turns that into ENOSPC for the
 * write that needs the room instead of a failed spill later.
 */
static bool disk_has_room(struct tier_store *s, uint64_t bytes)
{
	struct statvfs sv;

	if (statvfs(s->disk_path, &sv))
		return true; /* let the write itself report the error */
	return (uint64_t)sv.f_bavail * sv.f_frsize >= bytes;
}

/* Charge @bytes to @b in tier @t, evicting others first if needed. */
static int reserve(struct tier_buf *b, int t, uint64_t bytes)
{
	struct tier_store *s = b->s;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	uint64_t limit = s->use[t].limit;

	if (bytes > limit) {
		rc = -ENOSPC;
	} else if (t == TFS_TIER_DISK && !disk_has_room(s, bytes)) {
		rc = -ENOSPC;
	} else if (s->use[t].used + bytes > limit) {
		if (t == TFS_TIER_DISK)
			rc = -ENOSPC;
		else
			rc = shrink(s, t, limit - bytes, b);
	}
	if (!rc) {
		charge(s, b, t, (int64_t)bytes);
		if (over_high(s, t))
			pthread_cond_signal(&s->spill_wake);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static void unreserve(struct tier_buf *b, int t, uint64_t bytes)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	charge(s, b, t, -(int64_t)bytes);
	pthread_mutex_unlock(&s->lock);
}

static uint64_t tier_limit(struct tier_store *s, int t)
{
	pthread_mutex_lock(&s->lock);
	uint64_t l = s->use[t].limit;
	pthread_mutex_unlock(&s->lock);
	return l;
}

/* ---- the host copy (b->lock held for writing unless said) ---- */

static uint64_t nchunks_for(struct tier_store *s, uint64_t size)
{
	return (size + s->chunk_size - 1) / s->chunk_size;
}

/* Bytes a dense host copy of @size bytes takes. */
static uint64_t host_bytes_for(struct tier_store *s, uint64_t size)
{
	if (size < s->chunk_size)
		return (size + SMALL_ALIGN - 1) / SMALL_ALIGN * SMALL_ALIGN;
	return nchunks_for(s, size) * s->chunk_size;
}

static void host_drop(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	io_quiesce(b);
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
	uncharge_all(b, TFS_TIER_HOST);
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

/* Turn a small chunk 0 into a full pool chunk. */
static int unsmall(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	int rc = reserve(b, TFS_TIER_HOST, s->chunk_size - b->cap0);

	if (rc)
		return rc;
	void *c = host_chunk_get(s->pool);

	if (!c) {
		unreserve(b, TFS_TIER_HOST, s->chunk_size - b->cap0);
		return -ENOMEM;
	}
	memcpy(c, b->chunks[0], b->cap0);
	memset((char *)c + b->cap0, 0, s->chunk_size - b->cap0);
	io_quiesce(b);
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
				return unsmall(b);
		} else {
			rc = reserve(b, TFS_TIER_HOST, cap - b->cap0);
			if (rc)
				return rc;
			io_quiesce(b); /* realloc may move the bytes */
			void *c = realloc(b->chunks[0], cap);

			if (!c) {
				unreserve(b, TFS_TIER_HOST, cap - b->cap0);
				return -ENOMEM;
			}
			memset((char *)c + b->cap0, 0, cap - b->cap0);
			b->chunks[0] = c;
			b->cap0 = (uint32_t)cap;
			return 0;
		}
	}
	if (b->cap0 && (rc = unsmall(b)))
		return rc;
	if ((rc = grow_table(b, idx + 1)))
		return rc;
	if (b->chunks[idx])
		return 0;
	rc = reserve(b, TFS_TIER_HOST, s->chunk_size);
	if (rc)
		return rc;
	void *c = host_chunk_get(s->pool);

	if (!c) {
		unreserve(b, TFS_TIER_HOST, s->chunk_size);
		return -ENOMEM;
	}
	memset(c, 0, lo);
	memset((char *)c + hi, 0, s->chunk_size - hi);
	b->chunks[idx] = c;
	return 0;
}

/* Copy [off, off+len) of the host copy out; b->lock held for reading. */
static void host_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
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
static int host_fetch(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t need = host_bytes_for(s, b->size);
	uint64_t n = nchunks_for(s, b->size);
	int rc;

	if (b->has_host)
		return 0;
	if (n > UINT32_MAX)
		return -ENOSPC;
	rc = reserve(b, TFS_TIER_HOST, need);
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
	for (uint64_t i = 0; i < n;) {
		void *dsts[SPILL_BATCH];
		size_t lens[SPILL_BATCH], k;

		/* From disk, a batch of chunks is decompressed in parallel
		 * on the disk tier's pool. */
		for (k = 0; k < SPILL_BATCH && i + k < n; k++) {
			uint64_t off = (i + k) * s->chunk_size;
			void *c = b->cap0 ? calloc(1, b->cap0) :
					    host_chunk_get(s->pool);

			if (!c) {
				rc = -ENOMEM;
				goto out_drop;
			}
			b->chunks[i + k] = c;
			dsts[k] = c;
			lens[k] = b->size - off < s->chunk_size ?
					  b->size - off : s->chunk_size;
			if (b->dmem)
				rc = s->dev->ops->read(s->dev, b->dmem, c,
						       lens[k], off);
			else if (!b->dobj)
				memset(c, 0, lens[k]);
			if (rc)
				goto out_drop;
			if (!b->cap0)
				memset((char *)c + lens[k], 0,
				       s->chunk_size - lens[k]);
		}
		if (!b->dmem && b->dobj) {
			rc = tier_dobj_read_chunks(s->disk, b->dobj, i, dsts,
						   lens, k);
			if (rc)
				goto out_drop;
		}
		i += k;
	}
	count_written(s, TFS_TIER_HOST, b->size);
	/* host_drop() uncharges what reserve() charged */
	pthread_mutex_lock(&s->lock);
	s->use[TFS_TIER_HOST].unspills += b->dmem ? 0 : 1;
	s->use[TFS_TIER_HOST].unspill_bytes += b->dmem ? 0 : b->size;
	pthread_mutex_unlock(&s->lock);
	return 0;

out_drop:
	host_drop(b);
	return rc;
}

/* ---- the disk copy ---- */

/* Read one chunk of the buffer's fastest copy into @dst (chunk_size). */
static int read_top_chunk(struct tier_buf *b, uint64_t idx, void *dst,
			  size_t *lenp)
{
	struct tier_store *s = b->s;
	uint64_t off = idx * s->chunk_size;
	size_t len = b->size - off < s->chunk_size ? b->size - off :
						      s->chunk_size;

	*lenp = len;
	if (b->dmem)
		return s->dev->ops->read(s->dev, b->dmem, dst, len, off);
	host_read(b, dst, len, off);
	return 0;
}

static bool is_hole(struct tier_buf *b, uint64_t idx)
{
	return !b->dmem && (idx >= b->nchunks || !b->chunks[idx]);
}

/* Write a full disk copy from the device or host copy. */
static int disk_spill(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t n = nchunks_for(s, b->size);
	void *scratch[SPILL_BATCH] = { NULL };
	int rc = 0;

	if (b->dobj)
		return 0;
	rc = tier_dobj_create(s->disk, b->id, &b->dobj);
	if (rc)
		return rc;
	/*
	 * A run of up to SPILL_BATCH chunks is compressed in parallel on the
	 * disk tier's pool: straight from the host copy, or from the device
	 * through as many staging chunks.
	 */
	for (uint64_t i = 0; i < n;) {
		const void *srcs[SPILL_BATCH];
		size_t lens[SPILL_BATCH], room = 0, k = 0;

		if (is_hole(b, i)) {
			i++;
			continue;
		}
		do {
			uint64_t off = (i + k) * s->chunk_size;

			lens[k] = b->size - off < s->chunk_size ?
					  b->size - off : s->chunk_size;
			if (b->dmem) {
				if (!scratch[k] &&
				    !(scratch[k] = host_chunk_get(s->pool))) {
					rc = -ENOMEM;
					goto out;
				}
				rc = read_top_chunk(b, i + k, scratch[k],
						    &lens[k]);
				if (rc)
					goto out;
				srcs[k] = scratch[k];
			} else {
				srcs[k] = b->chunks[i + k];
			}
			room += lens[k] + DISK_CHUNK_OVERHEAD;
			k++;
		} while (k < SPILL_BATCH && i + k < n && !is_hole(b, i + k));
		uint64_t before = tier_dobj_stored(b->dobj);

		rc = reserve(b, TFS_TIER_DISK, room);
		if (rc)
			goto out;
		rc = k == 1 ? tier_dobj_write_chunk(s->disk, b->dobj, i,
						    srcs[0], lens[0]) :
			      tier_dobj_write_chunks(s->disk, b->dobj, i, srcs,
						     lens, k);
		int64_t grew = (int64_t)(tier_dobj_stored(b->dobj) - before);

		unreserve(b, TFS_TIER_DISK, room);
		pthread_mutex_lock(&s->lock);
		charge(s, b, TFS_TIER_DISK, grew);
		for (size_t j = 0; !rc && j < k; j++)
			s->use[TFS_TIER_DISK].written_bytes += lens[j];
		pthread_mutex_unlock(&s->lock);
		if (rc)
			goto out;
		i += k;
	}
out:
	for (int k = 0; k < SPILL_BATCH; k++)
		host_chunk_put(s->pool, scratch[k]);
	if (rc) {
		tier_dobj_destroy(s->disk, b->dobj);
		b->dobj = NULL;
		uncharge_all(b, TFS_TIER_DISK);
	}
	return rc;
}

/* Drop the write cache without writing it. */
static void wc_free(struct tier_buf *b)
{
	if (b->wc_reserved)
		unreserve(b, TFS_TIER_DISK,
			  b->s->chunk_size + DISK_CHUNK_OVERHEAD);
	free(b->wc);
	b->wc = NULL;
	b->wc_dirty = false;
	b->wc_reserved = false;
}

static void disk_drop(struct tier_buf *b)
{
	if (!b->dobj)
		return;
	wc_free(b);
	tier_dobj_destroy(b->s->disk, b->dobj);
	b->dobj = NULL;
	uncharge_all(b, TFS_TIER_DISK);
}

static int wc_flush(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	uint64_t off = b->wc_idx * s->chunk_size;
	size_t len;
	int rc;

	if (!b->wc || !b->wc_dirty)
		return 0;
	len = b->size - off < s->chunk_size ? b->size - off : s->chunk_size;
	uint64_t before = tier_dobj_stored(b->dobj);

	/* wc_load() already charged the room this write may take. */
	rc = tier_dobj_write_chunk(s->disk, b->dobj, b->wc_idx, b->wc, len);
	pthread_mutex_lock(&s->lock);
	charge(s, b, TFS_TIER_DISK,
	       (int64_t)(tier_dobj_stored(b->dobj) - before));
	if (!rc)
		s->use[TFS_TIER_DISK].written_bytes += len;
	pthread_mutex_unlock(&s->lock);
	if (!rc)
		b->wc_dirty = false;
	return rc;
}

/* Load chunk @idx of the disk copy into the write cache. */
static int wc_load(struct tier_buf *b, uint64_t idx)
{
	struct tier_store *s = b->s;
	int rc;

	if (b->wc && b->wc_idx == idx)
		return 0;
	if ((rc = wc_flush(b)))
		return rc;
	/* Charge the room the chunk may take now, so that a full disk
	 * fails this write rather than a later flush. */
	if (!b->wc_reserved) {
		rc = reserve(b, TFS_TIER_DISK,
			     s->chunk_size + DISK_CHUNK_OVERHEAD);
		if (rc)
			return rc;
		b->wc_reserved = true;
	}
	if (!b->wc && !(b->wc = malloc(s->chunk_size))) {
		wc_free(b);
		return -ENOMEM;
	}
	rc = tier_dobj_read(s->disk, b->dobj, b->wc, s->chunk_size,
			    idx * s->chunk_size);
	if (rc) {
		wc_free(b);
		return rc;
	}
	b->wc_idx = (uint32_t)idx;
	return 0;
}

/* Read from the disk copy, seeing the write cache; b->lock held. */
static int disk_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
{
	struct tier_store *s = b->s;
	int rc = tier_dobj_read(s->disk, b->dobj, dst, len, off);

	if (rc || !b->wc)
		return rc;
	uint64_t lo = b->wc_idx * s->chunk_size, hi = lo + s->chunk_size;

	if (off < hi && off + len > lo) {
		uint64_t a = off > lo ? off : lo;
		uint64_t e = off + len < hi ? off + len : hi;

		memcpy((char *)dst + (a - off), (char *)b->wc + (a - lo),
		       e - a);
	}
	return 0;
}

/* ---- the device copy ---- */

static void dev_drop(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	if (!b->dmem)
		return;
	io_quiesce(b);
	s->dev->ops->free(s->dev, b->dmem);
	b->dmem = NULL;
	uncharge_all(b, TFS_TIER_DEVICE);
}

static int dev_alloc(struct tier_buf *b, size_t len)
{
	struct tier_store *s = b->s;
	int rc = reserve(b, TFS_TIER_DEVICE, len);

	if (rc)
		return rc;
	for (int i = 0;; i++) {
		rc = s->dev->ops->alloc(s->dev, len ? len : 1, &b->dmem);
		if (rc != -ENOMEM || i == DEV_ALLOC_RETRIES)
			break;
		/* The device is fuller than our accounting says: make the
		 * room by evicting one more buffer, then retry. */
		pthread_mutex_lock(&s->lock);
		uint64_t used = s->use[TFS_TIER_DEVICE].used;
		int e = shrink(s, TFS_TIER_DEVICE,
			       used > s->chunk_size ? used - s->chunk_size : 0,
			       b);
		pthread_mutex_unlock(&s->lock);
		if (e)
			break;
	}
	if (rc) {
		b->dmem = NULL;
		unreserve(b, TFS_TIER_DEVICE, len);
		return rc == -ENOMEM ? -ENOSPC : rc;
	}
	pthread_mutex_lock(&s->lock);
	b->generation++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Build a device copy from the host or disk copy. */
static int dev_fill(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	void *scratch = NULL;
	int rc;

	if (b->dmem)
		return 0;
	if (!s->dev)
		return -ENODEV;
	rc = dev_alloc(b, b->size);
	if (rc)
		return rc;
	if (!b->has_host && !(scratch = host_chunk_get(s->pool))) {
		rc = -ENOMEM;
		goto out_drop;
	}
	for (uint64_t off = 0; off < b->size; off += s->chunk_size) {
		uint64_t idx = off / s->chunk_size;
		size_t len = b->size - off < s->chunk_size ? b->size - off :
							      s->chunk_size;

		if (b->has_host &&
		    (idx >= b->nchunks || !b->chunks[idx])) {
			rc = s->dev->ops->zero(s->dev, b->dmem, len, off);
		} else if (b->has_host) {
			rc = s->dev->ops->write(s->dev, b->dmem, b->chunks[idx],
						len, off);
		} else {
			rc = disk_read(b, scratch, len, off);
			if (!rc)
				rc = s->dev->ops->write(s->dev, b->dmem,
							scratch, len, off);
		}
		if (rc)
			goto out_drop;
	}
	host_chunk_put(s->pool, scratch);
	count_written(s, TFS_TIER_DEVICE, b->size);
	return 0;

out_drop:
	host_chunk_put(s->pool, scratch);
	dev_drop(b);
	return rc;
}

/* ---- moving between tiers (b->lock held for writing) ---- */

static int top_tier(struct tier_buf *b)
{
	if (b->dmem)
		return TFS_TIER_DEVICE;
	if (b->has_host || !b->dobj)
		return TFS_TIER_HOST;
	return TFS_TIER_DISK;
}

/*
 * Evict @v's copy in tier @t: free it when a lower copy exists, else write
 * the next lower tier that takes it first. Called with v->lock held for
 * writing and s->lock not held.
 */
static int evict_copy(struct tier_buf *v, int t)
{
	struct tier_store *s = v->s;
	int rc = 0;

	if (t == TFS_TIER_DEVICE && v->dmem) {
		if (!v->has_host && !v->dobj) {
			rc = -ENOSPC;
			if (v->size <= tier_limit(s, TFS_TIER_HOST))
				rc = host_fetch(v);
			if (rc)
				rc = disk_spill(v);
		}
		if (!rc) {
			dev_drop(v);
			count_move(s, TFS_TIER_DEVICE, TFS_TIER_HOST, v->size);
		}
	} else if (t == TFS_TIER_HOST && v->has_host) {
		if (!v->dmem && !v->dobj)
			rc = disk_spill(v);
		if (!rc) {
			host_drop(v);
			count_move(s, TFS_TIER_HOST, TFS_TIER_DISK, v->size);
		}
	}
	publish(v);
	return rc;
}

/* The tier a read should bring @b up to, or -1 to leave it. */
static int unspill_target(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	int top = top_tier(b);

	pthread_mutex_lock(&s->lock);
	enum cfg_unspill u = s->unspill;
	uint64_t dlim = s->use[TFS_TIER_DEVICE].limit;
	uint64_t hlim = s->use[TFS_TIER_HOST].limit;
	bool movable_b = movable(b);
	pthread_mutex_unlock(&s->lock);

	if (u == CFG_UNSPILL_NONE || !movable_b)
		return -1;
	if (u == CFG_UNSPILL_DEVICE && s->dev &&
	    b->size <= dlim / PROMOTE_SHARE && top != TFS_TIER_DEVICE)
		return TFS_TIER_DEVICE;
	if (top == TFS_TIER_DISK &&
	    host_bytes_for(s, b->size) <= hlim / PROMOTE_SHARE)
		return TFS_TIER_HOST;
	return -1;
}

/* Bring @b up to tier @t, keeping lower copies as clean copies. */
static int promote(struct tier_buf *b, int t)
{
	struct tier_store *s = b->s;
	int rc = 0;

	if (b->wc && (rc = wc_flush(b)))
		return rc;
	if (top_tier(b) == TFS_TIER_DISK &&
	    host_bytes_for(s, b->size) <=
		    tier_limit(s, TFS_TIER_HOST) / PROMOTE_SHARE) {
		rc = host_fetch(b);
		if (rc && t == TFS_TIER_HOST)
			return rc;
	}
	if (t == TFS_TIER_DEVICE && !b->dmem) {
		rc = dev_fill(b);
		if (!rc)
			count_move(s, TFS_TIER_HOST, TFS_TIER_DEVICE, b->size);
	}
	return rc;
}

/* Make the host copy the only, writable copy. -ENOSPC when it cannot fit:
 * the caller then writes in place on disk. */
static int make_writable_host(struct tier_buf *b)
{
	int rc = 0;

	if (!b->has_host) {
		if (b->dobj && !b->dmem &&
		    host_bytes_for(b->s, b->size) >
			    tier_limit(b->s, TFS_TIER_HOST) / PROMOTE_SHARE)
			return -ENOSPC;
		if ((rc = wc_flush(b)))
			return rc;
		rc = host_fetch(b);
		if (rc)
			return rc;
	}
	dev_drop(b);
	disk_drop(b);
	return 0;
}

/* Move everything to disk so the buffer can be written there in place. */
static int make_writable_disk(struct tier_buf *b)
{
	int rc = 0;

	if (!b->dobj && (rc = disk_spill(b)))
		return rc;
	dev_drop(b);
	if (b->has_host)
		host_drop(b);
	return 0;
}

/* ---- the store ---- */

static void *spiller_main(void *arg)
{
	struct tier_store *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		bool work = false;

		for (int t = TFS_TIER_DEVICE; t < TFS_TIER_DISK; t++) {
			if (!over_high(s, t))
				continue;
			uint64_t goal = (uint64_t)(s->target *
						   (double)s->use[t].limit);

			/* When nothing more can move (all in use), wait for a
			 * wake-up rather than spin on the lock. */
			if (!shrink(s, t, goal, NULL))
				work = true;
		}
		if (work)
			continue;
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (pthread_cond_timedwait(&s->spill_wake, &s->lock, &ts) ==
		    ETIMEDOUT) {
			uint64_t floor = s->use[TFS_TIER_HOST].limit / 8;

			pthread_mutex_unlock(&s->lock);
			host_pool_trim(s->pool, floor);
			pthread_mutex_lock(&s->lock);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static int pool_pin(void *ctx, void *ptr, size_t len)
{
	struct tier_dev *dev = ctx;

	return dev->ops->host_register(dev, ptr, len);
}

static void pool_unpin(void *ctx, void *ptr, size_t len)
{
	struct tier_dev *dev = ctx;

	dev->ops->host_unregister(dev, ptr, len);
}

static uint64_t ram_bytes(void)
{
	return (uint64_t)sysconf(_SC_PHYS_PAGES) *
	       (uint64_t)sysconf(_SC_PAGESIZE);
}

static void apply_limits(struct tier_store *s, const struct tfs_config *cfg)
{
	uint64_t dev = 0;

	if (s->dev) {
		if (cfg->device.limit.is_percent)
			dev = cfg_size_resolve(&cfg->device.limit,
					       s->dev_info.capacity);
		else if (cfg->device.limit.bytes)
			dev = cfg->device.limit.bytes;
		else if (!strcmp(s->backend, "cuda"))
			dev = s->dev_info.free / 10 * 8;
		else
			dev = s->dev_info.capacity;
	}
	s->use[TFS_TIER_DEVICE].limit = dev;
	s->use[TFS_TIER_HOST].limit =
		cfg_size_resolve(&cfg->host.limit, s->host_capacity);
	s->use[TFS_TIER_DISK].limit =
		cfg_size_resolve(&cfg->disk.limit, s->disk_capacity);
	s->high_wm = cfg->policy.high_watermark;
	s->target = cfg->policy.target;
	s->unspill = cfg->policy.unspill;
}

static int open_device(struct tier_store *s, const struct tfs_config *cfg,
		       char *err, size_t errlen)
{
	const char *want = cfg->device.backend;
	const struct tier_dev_ops *ops;
	char why[256] = "";
	int rc;

	if (!strcmp(want, "none")) {
		snprintf(s->backend, sizeof(s->backend), "none");
		return 0;
	}
	ops = tier_dev_lookup(!strcmp(want, "auto") ? "cuda" : want);
	if (!ops) {
		if (!strcmp(want, "auto")) {
			tfs_notice("device: no device tier: tierfs was built "
				   "without cuda");
			snprintf(s->backend, sizeof(s->backend), "none");
			return 0;
		}
		snprintf(err, errlen, "device backend '%s' is not built in",
			 want);
		return -ENODEV;
	}
	rc = ops->init(&s->dev, cfg, why, sizeof(why));
	if (rc) {
		s->dev = NULL;
		if (!strcmp(want, "auto")) {
			tfs_notice("device: no device tier: %s", why);
			snprintf(s->backend, sizeof(s->backend), "none");
			return 0;
		}
		snprintf(err, errlen, "%s", why);
		return rc;
	}
	ops->info(s->dev, &s->dev_info);
	snprintf(s->backend, sizeof(s->backend), "%s", ops->name);
	tfs_info("device: %s '%s', %" PRIu64 " bytes", ops->name,
		 s->dev_info.model, s->dev_info.capacity);
	return 0;
}

int tier_store_init(struct tier_store **out, const struct tfs_config *cfg,
		    const char *tag, char *err, size_t errlen)
{
	struct tier_store *s = calloc(1, sizeof(*s));
	const struct pol_ops *pol = pol_lookup(cfg->policy.eviction);
	struct statvfs sv;
	pthread_mutexattr_t ma;
	int rc;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (!pol) {
		snprintf(err, errlen, "policy '%s' is unknown",
			 cfg->policy.eviction);
		rc = -EINVAL;
		goto out_free;
	}
	pthread_mutexattr_init(&ma);
#ifdef TFS_DEBUG_LOCKS
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
#endif
	pthread_mutex_init(&s->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&s->spill_wake, NULL);
	pthread_cond_init(&s->io_idle, NULL);
	pol_init(&s->pol, pol);
	s->chunk_size = cfg->disk.chunk_size;
	s->next_id = 1;
	/* Never written, so every page maps the kernel's zero page: holes
	 * are replied from here at no memory cost. */
	s->zeroes = mmap(NULL, s->chunk_size, PROT_READ,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->zeroes == MAP_FAILED) {
		s->zeroes = NULL;
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto out_lock;
	}
	s->disk_path = strdup(cfg->disk.path);
	if (!s->disk_path) {
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto out_lock;
	}

	if (statvfs(cfg->disk.path, &sv)) {
		rc = -errno;
		snprintf(err, errlen, "disk path '%s': %s", cfg->disk.path,
			 strerror(-rc));
		goto out_lock;
	}
	s->disk_capacity = (uint64_t)sv.f_blocks * sv.f_frsize;
	s->host_capacity = ram_bytes();

	rc = open_device(s, cfg, err, errlen);
	if (rc)
		goto out_lock;
	rc = tier_disk_init(&s->disk, cfg->disk.path, tag, s->chunk_size,
			    cfg->disk.compression, err, errlen);
	if (rc)
		goto out_dev;
	apply_limits(s, cfg);
	/*
	 * Keep freed chunks for reuse up to the host limit, memory tierfs may
	 * hold anyway: in these VMs memory given back to the system costs a
	 * host fault per page when it is touched again (about 350 MB/s, six
	 * times slower than reuse; rewriting a 1 GiB file ran at 0.31x tmpfs
	 * when only an eighth was kept). The spiller trims an idle pool back
	 * to an eighth of the limit.
	 */
	struct host_pool_hooks hooks = { .ctx = s->dev };

	if (cfg->host.pinned && s->dev && s->dev->ops->host_register) {
		hooks.pin = pool_pin;
		hooks.unpin = pool_unpin;
	}
	rc = host_pool_init(&s->pool, s->chunk_size,
			    s->use[TFS_TIER_HOST].limit, &hooks);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		goto out_disk;
	}
	rc = -pthread_create(&s->spiller, NULL, spiller_main, s);
	if (rc) {
		snprintf(err, errlen, "cannot start the spiller: %s",
			 strerror(-rc));
		goto out_pool;
	}
	s->spiller_started = true;
	*out = s;
	return 0;

out_pool:
	host_pool_destroy(s->pool);
out_disk:
	tier_disk_destroy(s->disk);
out_dev:
	if (s->dev)
		s->dev->ops->destroy(s->dev);
out_lock:
	if (s->zeroes)
		munmap(s->zeroes, s->chunk_size);
	free(s->disk_path);
	pthread_cond_destroy(&s->io_idle);
	pthread_cond_destroy(&s->spill_wake);
	pthread_mutex_destroy(&s->lock);
out_free:
	free(s);
	return rc;
}

void tier_store_destroy(struct tier_store *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->spill_wake);
	pthread_mutex_unlock(&s->lock);
	if (s->spiller_started)
		pthread_join(s->spiller, NULL);
	host_pool_destroy(s->pool);
	tier_disk_destroy(s->disk);
	if (s->dev)
		s->dev->ops->destroy(s->dev);
	pthread_cond_destroy(&s->io_idle);
	pthread_cond_destroy(&s->spill_wake);
	pthread_mutex_destroy(&s->lock);
	munmap(s->zeroes, s->chunk_size);
	free(s->disk_path);
	free(s);
}

int tier_store_reconfigure(struct tier_store *s, const struct tfs_config *cfg)
{
	const struct pol_ops *pol = pol_lookup(cfg->policy.eviction);
	int rc = 0;

	if (!pol)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	apply_limits(s, cfg);
	host_pool_set_keep(s->pool, s->use[TFS_TIER_HOST].limit);
	for (int t = TFS_TIER_DEVICE; t < TFS_TIER_DISK; t++) {
		int e = shrink(s, t, s->use[t].limit, NULL);

		if (e && !rc)
			rc = e;
	}
	pthread_cond_signal(&s->spill_wake);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		tfs_warn("reconfigure: a tier stays over its new limit: "
			 "its buffers are in use");
	return rc;
}

void tier_store_stats(struct tier_store *s, struct tier_store_stats *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->backend, sizeof(out->backend), "%s", s->backend);
	snprintf(out->device_model, sizeof(out->device_model), "%s",
		 s->dev ? s->dev_info.model : "");
	out->has_device = s->dev != NULL;
	pthread_mutex_lock(&s->lock);
	memcpy(out->tier, s->use, sizeof(out->tier));
	out->files = s->files;
	out->logical_bytes = s->logical;
	out->evict_failures = s->evict_failures;
	out->checksum_errors = s->checksum_errors;
	pthread_mutex_unlock(&s->lock);
}

size_t tier_store_format_stats(struct tier_store *s, char *buf, size_t len)
{
	struct tier_store_stats st;
	size_t n = 0;

	tier_store_stats(s, &st);
#define EMIT(...)                                                        \
	do {                                                             \
		int _w = snprintf(buf + (n < len ? n : len),             \
				  n < len ? len - n : 0, __VA_ARGS__);   \
		n += _w > 0 ? (size_t)_w : 0;                            \
	} while (0)
	EMIT("version=1\n");
	EMIT("backend=%s\n", st.backend);
	EMIT("device_model=%s\n", st.device_model);
	EMIT("files=%" PRIu64 "\n", st.files);
	EMIT("logical_bytes=%" PRIu64 "\n", st.logical_bytes);
	EMIT("evict_failures=%" PRIu64 "\n", st.evict_failures);
	EMIT("checksum_errors=%" PRIu64 "\n", st.checksum_errors);
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		const struct tier_usage *u = &st.tier[t];
		const char *nm = tier_name((enum tfs_tier)t);

		EMIT("%s.used=%" PRIu64 "\n", nm, u->used);
		EMIT("%s.limit=%" PRIu64 "\n", nm, u->limit);
		EMIT("%s.buffers=%" PRIu64 "\n", nm, u->buffers);
		EMIT("%s.spill_bytes=%" PRIu64 "\n", nm, u->spill_bytes);
		EMIT("%s.unspill_bytes=%" PRIu64 "\n", nm, u->unspill_bytes);
		EMIT("%s.spills=%" PRIu64 "\n", nm, u->spills);
		EMIT("%s.unspills=%" PRIu64 "\n", nm, u->unspills);
		EMIT("%s.written_bytes=%" PRIu64 "\n", nm, u->written_bytes);
	}
#undef EMIT
	return n;
}

void tier_store_capacity(struct tier_store *s, uint64_t *total,
			 uint64_t *avail)
{
	uint64_t tot = 0, free = 0;

	pthread_mutex_lock(&s->lock);
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		const struct tier_usage *u = &s->use[t];

		tot += u->limit;
		free += u->used < u->limit ? u->limit - u->used : 0;
	}
	pthread_mutex_unlock(&s->lock);
	*total = tot;
	*avail = free;
}

/* ---- buffers ---- */

int tier_buf_new(struct tier_store *s, struct tier_buf **out)
{
	struct tier_buf *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->s = s;
	pthread_rwlock_init(&b->lock, NULL);
	b->has_host = true;
	pthread_mutex_lock(&s->lock);
	b->id = s->next_id++;
	b->generation = 1;
	b->pi.last_access = now_ns();
	b->present = 1u << TFS_TIER_HOST;
	s->use[TFS_TIER_HOST].buffers++;
	s->files++;
	sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	*out = b;
	return 0;
}

void tier_buf_destroy(struct tier_buf *b)
{
	if (!b)
		return;
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	b->dead = true;
	sync_links(s, b);
	pthread_mutex_unlock(&s->lock);

	/* Wait for an evictor that try-locked us before we were unlinked. */
	pthread_rwlock_wrlock(&b->lock);
	if (b->nleases && b->dmem)
		s->dev->ops->unexport(s->dev, b->dmem);
	dev_drop(b);
	if (b->has_host)
		host_drop(b);
	disk_drop(b);
	b->size = 0;
	publish(b);
	pthread_mutex_lock(&s->lock);
	s->files--;
	pthread_mutex_unlock(&s->lock);
	pthread_rwlock_unlock(&b->lock);
	pthread_rwlock_destroy(&b->lock);
	free(b->leases);
	free(b);
}

uint64_t tier_buf_size(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	uint64_t sz = b->pi.size;
	pthread_mutex_unlock(&b->s->lock);
	return sz;
}

static void touch(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	pol_touch(&s->pol, &b->pi, now_ns());
	pthread_mutex_unlock(&s->lock);
}

/* Serve a read from the fastest copy; b->lock held. */
static int serve_read(struct tier_buf *b, void *dst, size_t len, uint64_t off)
{
	struct tier_store *s = b->s;

	if (b->dmem)
		return s->dev->ops->read(s->dev, b->dmem, dst, len, off);
	if (b->has_host) {
		host_read(b, dst, len, off);
		return 0;
	}
	if (b->dobj)
		return disk_read(b, dst, len, off);
	memset(dst, 0, len);
	return 0;
}

/*
 * Take b->lock for reading, first bringing the buffer up as the unspill
 * policy says (which needs it for writing).
 */
static void read_lock_unspilled(struct tier_buf *b)
{
	pthread_rwlock_rdlock(&b->lock);
	if (unspill_target(b) >= 0) {
		pthread_rwlock_unlock(&b->lock);
		pthread_rwlock_wrlock(&b->lock);
		int t = unspill_target(b);

		/* A failed unspill is not an error: the read is served from
		 * where the buffer is. */
		if (t >= 0 && promote(b, t) == -EIO)
			tfs_warn("buffer %" PRIu64 ": unspill failed",
				 b->id);
		publish(b);
		pthread_rwlock_unlock(&b->lock);
		pthread_rwlock_rdlock(&b->lock);
	}
}

ssize_t tier_buf_read(struct tier_buf *b, void *dst, size_t len, off_t off)
{
	int rc;

	if (off < 0)
		return -EINVAL;
	read_lock_unspilled(b);
	if ((uint64_t)off >= b->size) {
		pthread_rwlock_unlock(&b->lock);
		return 0;
	}
	if (len > b->size - (uint64_t)off)
		len = b->size - (uint64_t)off;
	rc = serve_read(b, dst, len, (uint64_t)off);
	if (rc == -EIO) {
		pthread_mutex_lock(&b->s->lock);
		b->s->checksum_errors++;
		pthread_mutex_unlock(&b->s->lock);
	}
	pthread_rwlock_unlock(&b->lock);
	touch(b);
	return rc ? rc : (ssize_t)len;
}

/* Point @iov at the host copy's bytes of [off, off+len); b->lock held.
 * Returns the entries used, or -E2BIG when @max is too few. */
static int host_iov(struct tier_buf *b, size_t len, uint64_t off,
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

ssize_t tier_buf_read_iov(struct tier_buf *b, size_t len, off_t off,
			  struct iovec *iov, int max, int *niov)
{
	struct tier_store *s = b->s;
	int n = -EAGAIN;

	if (off < 0)
		return -EINVAL;
	read_lock_unspilled(b);
	if ((uint64_t)off >= b->size) {
		pthread_rwlock_unlock(&b->lock);
		*niov = 0;
		return 0;
	}
	if (len > b->size - (uint64_t)off)
		len = b->size - (uint64_t)off;
	if (b->dmem) {
		char *p = s->dev->ops->host_ptr ?
				  s->dev->ops->host_ptr(s->dev, b->dmem) :
				  NULL;

		if (p && max >= 1) {
			iov[0] = (struct iovec){ p + off, len };
			n = 1;
		}
	} else if (b->has_host) {
		n = host_iov(b, len, (uint64_t)off, iov, max);
		if (n < 0)
			n = -EAGAIN;
	}
	if (n < 0) {
		pthread_rwlock_unlock(&b->lock);
		return n;
	}
	pthread_mutex_lock(&s->lock);
	b->io_refs++;
	pthread_mutex_unlock(&s->lock);
	pthread_rwlock_unlock(&b->lock);
	touch(b);
	*niov = n;
	return (ssize_t)len;
}

void tier_buf_read_done(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	if (!--b->io_refs)
		pthread_cond_broadcast(&s->io_idle);
	pthread_mutex_unlock(&s->lock);
}

/* Write into the disk copy in place, one chunk at a time. */
static ssize_t write_disk(struct tier_buf *b, const char *src, size_t len,
			  uint64_t off)
{
	struct tier_store *s = b->s;
	size_t done = 0;

	while (done < len) {
		uint64_t idx = (off + done) / s->chunk_size;
		size_t in = (off + done) % s->chunk_size;
		size_t n = s->chunk_size - in;
		int rc;

		if (n > len - done)
			n = len - done;
		rc = wc_load(b, idx);
		if (rc)
			return done ? (ssize_t)done : rc;
		memcpy((char *)b->wc + in, src + done, n);
		b->wc_dirty = true;
		if (off + done + n > b->size)
			b->size = off + done + n;
		/* A finished chunk goes to disk now, so that a full disk
		 * fails this write rather than the close. */
		if (in + n == s->chunk_size && (rc = wc_flush(b)))
			return done ? (ssize_t)done : rc;
		done += n;
	}
	return (ssize_t)done;
}

static ssize_t write_host(struct tier_buf *b, const char *src, size_t len,
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

static bool leased_by_other(struct tier_buf *b, uint64_t owner)
{
	bool other = false;

	pthread_mutex_lock(&b->s->lock);
	for (uint32_t i = 0; i < b->nleases; i++)
		if (!owner || b->leases[i].owner != owner)
			other = true;
	pthread_mutex_unlock(&b->s->lock);
	return other;
}

static uint32_t lease_count(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	uint32_t n = b->nleases;
	pthread_mutex_unlock(&b->s->lock);
	return n;
}

ssize_t tier_buf_write(struct tier_buf *b, const void *src, size_t len,
		       off_t off)
{
	struct tier_store *s = b->s;
	ssize_t rc;

	if (off < 0)
		return -EINVAL;
	if (!len)
		return 0;
	if (nchunks_for(s, (uint64_t)off + len) > UINT32_MAX)
		return -EFBIG;
	pthread_rwlock_wrlock(&b->lock);
	if (b->dmem && (lease_count(b) || (uint64_t)off + len <= b->size)) {
		/* In place on the device: O(bytes written), and the only
		 * choice while a GPU program maps the buffer. */
		if ((uint64_t)off + len > b->dmem->len) {
			rc = -EBUSY;
			goto out;
		}
		rc = s->dev->ops->write(s->dev, b->dmem, src, len,
					(uint64_t)off);
		if (!rc) {
			rc = (ssize_t)len;
			if (b->has_host)
				host_drop(b);
			disk_drop(b);
			if ((uint64_t)off + len > b->size)
				b->size = (uint64_t)off + len;
		}
		goto out;
	}
	rc = 0;
	if (!b->wc) {
		rc = make_writable_host(b);
		if (!rc) {
			rc = write_host(b, src, len, (uint64_t)off);
			if (rc == (ssize_t)len || (rc != -ENOSPC && rc <= 0))
				goto out_dirty;
			/* Host is full of what cannot move: continue on disk */
			size_t done = rc > 0 ? (size_t)rc : 0;

			rc = make_writable_disk(b);
			if (!rc) {
				rc = write_disk(b, (const char *)src + done,
						len - done,
						(uint64_t)off + done);
				if (rc >= 0)
					rc += (ssize_t)done;
			}
			if (rc < 0 && done)
				rc = (ssize_t)done;
			goto out_dirty;
		}
		if (rc != -ENOSPC)
			goto out;
	}
	rc = make_writable_disk(b);
	if (!rc)
		rc = write_disk(b, src, len, (uint64_t)off);
out_dirty:
	if (rc > 0)
		b->dirty = true;
out:
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	touch(b);
	return rc;
}

int tier_buf_truncate(struct tier_buf *b, uint64_t size)
{
	struct tier_store *s = b->s;
	int rc = 0;

	/* A file spans at most 2^32 chunks: 4 PiB with 1 MiB chunks. */
	if (nchunks_for(s, size) > UINT32_MAX)
		return -EFBIG;
	pthread_rwlock_wrlock(&b->lock);
	if (size == b->size)
		goto out;
	if (lease_count(b)) {
		rc = -EBUSY;
		goto out;
	}
	if (!b->has_host) {
		/* An empty buffer needs no fetch: an empty host copy is
		 * free, and every buffer must keep at least one copy. */
		if (b->size) {
			rc = make_writable_host(b);
		} else {
			dev_drop(b);
			disk_drop(b);
			b->has_host = true;
		}
		if (rc == -ENOSPC) {
			/* Too big for host: trim on disk. */
			rc = make_writable_disk(b);
			if (!rc && size < b->size && size % s->chunk_size) {
				rc = wc_load(b, size / s->chunk_size);
				if (!rc) {
					size_t in = size % s->chunk_size;

					memset((char *)b->wc + in, 0,
					       s->chunk_size - in);
					b->wc_dirty = true;
				}
			}
			/* A cached chunk past the new end must not come
			 * back when the file grows again. */
			if (!rc && b->wc &&
			    b->wc_idx >= nchunks_for(s, size))
				wc_free(b);
			if (!rc && size < b->size)
				rc = tier_dobj_truncate(s->disk, b->dobj,
						nchunks_for(s, size));
			if (!rc) {
				b->size = size;
				rc = wc_flush(b);
				b->dirty = true;
			}
			goto out;
		}
		if (rc)
			goto out;
	}
	dev_drop(b);
	disk_drop(b);
	/* A small chunk always holds the whole file. */
	if (b->cap0 && size > b->cap0 && (rc = unsmall(b)))
		goto out;
	if (size < b->size) {
		uint64_t keep = nchunks_for(s, size);
		size_t in = size % s->chunk_size;

		if (b->cap0) {
			if (size < b->cap0)
				memset((char *)b->chunks[0] + size, 0,
				       b->cap0 - size);
		} else {
			io_quiesce(b);
			for (uint64_t i = keep; i < b->nchunks; i++) {
				if (!b->chunks[i])
					continue;
				host_chunk_put(s->pool, b->chunks[i]);
				b->chunks[i] = NULL;
				unreserve(b, TFS_TIER_HOST, s->chunk_size);
			}
			if (b->nchunks > keep)
				b->nchunks = (uint32_t)keep;
			if (in && keep && keep <= b->nchunks &&
			    b->chunks[keep - 1])
				memset((char *)b->chunks[keep - 1] + in, 0,
				       s->chunk_size - in);
		}
	}
	b->size = size;
	b->dirty = true;
out:
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_fallocate(struct tier_buf *b, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;

	if (end < off)
		return -EFBIG;
	if (end <= tier_buf_size(b))
		return 0;
	return tier_buf_truncate(b, end);
}

ssize_t tier_buf_copy(struct tier_buf *dst, uint64_t dst_off,
		      struct tier_buf *src, uint64_t src_off, size_t len)
{
	size_t chunk = dst->s->chunk_size, done = 0;
	void *tmp = host_chunk_get(dst->s->pool);

	if (!tmp)
		return -ENOMEM;
	while (done < len) {
		size_t n = len - done < chunk ? len - done : chunk;
		ssize_t r = tier_buf_read(src, tmp, n, (off_t)(src_off + done));

		if (r <= 0) {
			if (r < 0 && !done) {
				done = 0;
				host_chunk_put(dst->s->pool, tmp);
				return r;
			}
			break;
		}
		ssize_t w = tier_buf_write(dst, tmp, (size_t)r,
					   (off_t)(dst_off + done));
		if (w < 0) {
			host_chunk_put(dst->s->pool, tmp);
			return done ? (ssize_t)done : w;
		}
		done += (size_t)w;
		if (w < r)
			break;
	}
	host_chunk_put(dst->s->pool, tmp);
	return (ssize_t)done;
}

int tier_buf_register(struct tier_buf *b)
{
	struct tier_store *s = b->s;
	int rc = 0;

	pthread_rwlock_wrlock(&b->lock);
	rc = wc_flush(b);
	if (!rc)
		wc_free(b);
	if (b->dirty && s->dev && b->size && !b->dmem && b->has_host &&
	    b->size <= tier_limit(s, TFS_TIER_DEVICE)) {
		/* Not fitting on the device is fine: the buffer stays on
		 * host, and a later read or prefetch may bring it up. */
		int e = dev_fill(b);

		if (e && e != -ENOSPC)
			tfs_warn("buffer %" PRIu64 ": cannot place on "
				 "device: %s", b->id, strerror(-e));
	}
	if (!rc)
		b->dirty = false;
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_move(struct tier_buf *b, enum tfs_tier tier, uint64_t owner)
{
	struct tier_store *s = b->s;
	int rc = 0;

	if (tier >= TFS_TIER_COUNT)
		return -EINVAL;
	if (tier == TFS_TIER_DEVICE && !s->dev)
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	bool pinned = b->pins > 0;
	pthread_mutex_unlock(&s->lock);
	if (pinned || leased_by_other(b, owner) ||
	    (tier != TFS_TIER_DEVICE && lease_count(b))) {
		rc = -EBUSY;
		goto out;
	}
	int from = top_tier(b);

	if (tier == TFS_TIER_DEVICE) {
		rc = promote(b, TFS_TIER_DEVICE);
	} else if (tier == TFS_TIER_HOST) {
		if (!b->has_host) {
			if ((rc = wc_flush(b)))
				goto out;
			rc = host_fetch(b);
		}
		if (!rc)
			dev_drop(b);
	} else {
		rc = wc_flush(b);
		if (!rc && !b->dobj)
			rc = disk_spill(b);
		if (!rc) {
			dev_drop(b);
			if (b->has_host)
				host_drop(b);
		}
	}
	if (!rc && (int)tier > from)
		count_move(s, from, (int)tier, b->size);
out:
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	if (!rc)
		touch(b);
	return rc;
}

int tier_buf_pin(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	b->pins = 1;
	sync_links(b->s, b);
	pthread_mutex_unlock(&b->s->lock);
	return 0;
}

int tier_buf_unpin(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	b->pins = 0;
	sync_links(b->s, b);
	pthread_mutex_unlock(&b->s->lock);
	return 0;
}

void tier_buf_stat(struct tier_buf *b, struct tier_buf_stat *st)
{
	struct tier_store *s = b->s;

	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&s->lock);
	st->tier = TFS_TIER_HOST;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		if (b->present & (1u << t)) {
			st->tier = (enum tfs_tier)t;
			break;
		}
	}
	st->size = b->pi.size;
	st->stored_size = b->charged[st->tier];
	st->last_access_ns = b->pi.last_access;
	st->pins = b->pins;
	st->leases = b->nleases;
	st->generation = b->generation;
	pthread_mutex_unlock(&s->lock);
	st->blocks = (st->stored_size + 511) / 512;
}

/* @owner's lease on @b, or NULL; s->lock held. */
static struct lease *find_lease(struct tier_buf *b, uint64_t owner)
{
	for (uint32_t i = 0; i < b->nleases; i++)
		if (b->leases[i].owner == owner)
			return &b->leases[i];
	return NULL;
}

int tier_buf_export(struct tier_buf *b, uint64_t owner, uid_t uid, gid_t gid,
		    bool writable, struct tfs_ioc_export *out)
{
	struct tier_store *s = b->s;
	struct lease *l;
	int rc;

	if (!s->dev)
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	if (!b->dmem) {
		rc = wc_flush(b);
		if (!rc)
			rc = promote(b, TFS_TIER_DEVICE);
		if (rc)
			goto out;
	}
	io_quiesce(b); /* the sim backend moves the bytes into shm */
	rc = s->dev->ops->export(s->dev, b->dmem, uid, gid, out);
	if (rc)
		goto out;
	pthread_mutex_lock(&s->lock);
	l = find_lease(b, owner);
	if (l) {
		l->writable |= writable;
	} else {
		struct lease *n = realloc(b->leases,
					  (b->nleases + 1) * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&s->lock);
			if (!lease_count(b))
				s->dev->ops->unexport(s->dev, b->dmem);
			rc = -ENOMEM;
			goto out;
		}
		b->leases = n;
		b->leases[b->nleases++] = (struct lease){ owner, writable };
	}
	out->length = b->size;
	out->generation = b->generation;
	sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
out:
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_unexport(struct tier_buf *b, uint64_t owner)
{
	struct tier_store *s = b->s;
	int rc = -ENOENT;

	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	struct lease *l = find_lease(b, owner);

	if (l) {
		*l = b->leases[--b->nleases];
		rc = 0;
	}
	bool last = !rc && !b->nleases;
	sync_links(s, b);
	pthread_mutex_unlock(&s->lock);
	if (last && b->dmem)
		s->dev->ops->unexport(s->dev, b->dmem);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}

int tier_buf_commit(struct tier_buf *b, uint64_t owner)
{
	struct tier_store *s = b->s;
	int rc = -EPERM;

	pthread_rwlock_wrlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	struct lease *l = find_lease(b, owner);

	if (l && l->writable)
		rc = 0;
	if (!rc)
		b->generation++;
	pthread_mutex_unlock(&s->lock);
	if (!rc && b->dmem) {
		if (b->has_host)
			host_drop(b);
		disk_drop(b);
		b->dirty = false;
	}
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	if (!rc)
		touch(b);
	return rc;
}

int tier_buf_alloc_device(struct tier_buf *b, uint64_t size)
{
	struct tier_store *s = b->s;
	int rc;

	if (!s->dev)
		return -ENODEV;
	pthread_rwlock_wrlock(&b->lock);
	if (b->size || b->dmem || b->dobj || b->nchunks) {
		rc = -EEXIST;
		goto out;
	}
	rc = dev_alloc(b, size);
	if (rc)
		goto out;
	rc = s->dev->ops->zero(s->dev, b->dmem, size, 0);
	if (rc) {
		dev_drop(b);
		goto out;
	}
	host_drop(b);
	b->size = size;
	b->dirty = false;
out:
	publish(b);
	pthread_rwlock_unlock(&b->lock);
	return rc;
}
