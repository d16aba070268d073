// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A buffer's device copy: allocating it, filling it from a lower copy,
 * dropping it. b->lock is held for writing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "tiers/store_i.h"

uint64_t st_dev_granted_for(struct tier_store *s, uint64_t len)
{
	/* One backend for all GPUs: the default's granule is theirs. */
	uint64_t g = s->ngpus && s->gpus[s->defg].info.granule ?
			     s->gpus[s->defg].info.granule :
			     1;

	/* An empty buffer still gets an allocation, to export. */
	if (!len)
		len = 1;
	return (len + g - 1) / g * g;
}

void st_dev_drop(struct tier_buf *b)
{
	if (!b->dmem)
		return;
	st_io_quiesce(b);
	st_bdev(b)->ops->free(st_bdev(b), b->dmem);
	b->dmem = NULL;
	st_uncharge_all(b, TFS_TIER_DEVICE);
}

/*
 * The device tier is charged what the driver takes, not the buffer's
 * length: a 4 KiB buffer on a GPU is a 2 MiB block (see device_cuda.c), so
 * charging 4 KiB would let the tier hold 512 times its limit. The room is
 * reserved at the rounded size first, so that eviction makes it before the
 * allocation, and corrected should the backend take another size.
 */
int st_dev_alloc(struct tier_buf *b, unsigned int g, size_t len)
{
	struct tier_store *s = b->s;
	uint64_t want = st_dev_granted_for(s, len), got;
	struct tier_dev *dev;
	int rc;

	if (!st_gpu_usable(s, g))
		return -ENODEV;
	dev = s->gpus[g].dev;
	/* No device copy, so no device charge: the GPU may change. */
	pthread_mutex_lock(&s->lock);
	b->dgi = (uint8_t)g;
	pthread_mutex_unlock(&s->lock);
	rc = st_reserve(b, TFS_TIER_DEVICE, want);
	if (rc)
		return rc;
	for (int i = 0;; i++) {
		rc = dev->ops->alloc(dev, len ? len : 1, &b->dmem);
		if (rc != -ENOMEM || i == DEV_ALLOC_RETRIES)
			break;
		/* The device is fuller than our accounting says: make the
		 * room by evicting one more buffer, then retry. */
		pthread_mutex_lock(&s->lock);
		uint64_t used = s->gpus[g].used;
		int e = st_make_room(s, TFS_TIER_DEVICE, g,
				     used > want ? used - want : 0, b, true);
		pthread_mutex_unlock(&s->lock);
		if (e)
			break;
	}
	if (rc) {
		b->dmem = NULL;
		st_unreserve(b, TFS_TIER_DEVICE, want);
		return rc == -ENOMEM ? -ENOSPC : rc;
	}
	got = b->dmem->granted ? b->dmem->granted : want;
	if (got > want && (rc = st_reserve(b, TFS_TIER_DEVICE, got - want))) {
		dev->ops->free(dev, b->dmem);
		b->dmem = NULL;
		st_unreserve(b, TFS_TIER_DEVICE, want);
		return rc;
	}
	if (got < want)
		st_unreserve(b, TFS_TIER_DEVICE, want - got);
	pthread_mutex_lock(&s->lock);
	b->generation++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

bool st_dev_sparse(const struct tier_store *s, unsigned int g)
{
	const struct tier_dev_ops *ops = s->gpus[g].dev->ops;

	return ops->alloc_sparse && ops->populate && s->gpus[g].info.sparse;
}

bool st_dev_wants_sparse(struct tier_buf *b, unsigned int g)
{
	struct tier_store *s = b->s;
	uint64_t gr = s->gpus[g].info.granule, at = 0, ro, rl;

	if (!st_dev_sparse(s, g))
		return false;
	/*
	 * Page granules (sim) cost nothing to map. Larger ones (cuda's 2 MiB,
	 * each a cuMemCreate and a cuMemMap of tens of microseconds) only
	 * where a whole granule is a hole: the same charge otherwise.
	 */
	if (gr <= TIER_PAGE)
		return true;
	while (at < b->size && st_pages_run(b, at, b->size, &ro, &rl)) {
		if ((at + gr - 1) / gr * gr + gr <= ro)
			return true;
		at = ro + rl;
	}
	return (at + gr - 1) / gr * gr < b->size;
}

int st_dev_populate(struct tier_buf *b, uint64_t off, uint64_t len)
{
	struct tier_store *s = b->s;
	struct tier_dev *dev = st_bdev(b);
	uint64_t g = s->gpus[b->dgi].info.granule ?
			     s->gpus[b->dgi].info.granule :
			     1;
	uint64_t lo = off / g * g, hi = (off + len + g - 1) / g * g;
	uint64_t cap = (b->dmem->len + g - 1) / g * g, want, before, got;
	int rc;

	if (!dev->ops->populate || !len)
		return 0;
	if (hi > cap)
		hi = cap;
	if (lo >= hi)
		return 0;
	/*
	 * At most the whole range is new, and no more than the allocation
	 * still lacks: reserve that, keep what it took. Reserving a
	 * populated range again would count against a pinned buffer's
	 * pinner (st_share_pinned) for bytes it holds already.
	 */
	before = b->dmem->granted;
	want = hi - lo;
	if (want > (cap > before ? cap - before : 0))
		want = cap > before ? cap - before : 0;
	if (!want)
		return 0;
	rc = st_reserve(b, TFS_TIER_DEVICE, want);
	if (rc)
		return rc;
	rc = dev->ops->populate(dev, b->dmem, lo, hi - lo);
	got = b->dmem->granted - before;
	if (got <= want) {
		st_unreserve(b, TFS_TIER_DEVICE, want - got);
	} else {
		pthread_mutex_lock(&s->lock);
		st_charge(s, b, TFS_TIER_DEVICE, (int64_t)(got - want));
		pthread_mutex_unlock(&s->lock);
	}
	return rc == -ENOMEM ? -ENOSPC : rc;
}

int st_dev_densify(struct tier_buf *b)
{
	return b->dmem ? st_dev_populate(b, 0, b->dmem->len) : 0;
}

int st_dev_alloc_sparse(struct tier_buf *b, unsigned int g, uint64_t len)
{
	struct tier_store *s = b->s;
	struct tier_dev *dev = s->gpus[g].dev;
	uint64_t off = 0, ro, rl;
	int rc;

	pthread_mutex_lock(&s->lock);
	b->dgi = (uint8_t)g;
	pthread_mutex_unlock(&s->lock);
	rc = dev->ops->alloc_sparse(dev, len ? len : 1, &b->dmem);
	if (rc) {
		b->dmem = NULL;
		return rc == -ENOMEM ? -ENOSPC : rc;
	}
	while (st_pages_run(b, off, len, &ro, &rl)) {
		rc = st_dev_populate(b, ro, rl);
		if (rc) {
			st_dev_drop(b);
			return rc;
		}
		off = ro + rl;
	}
	pthread_mutex_lock(&s->lock);
	b->generation++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* How many segments split_runs() may make of @n chunk segments. */
static size_t runs_max(const struct tier_store *s, unsigned int n)
{
	return (size_t)n * (s->chunk_size / TIER_PAGE / 2 + 1);
}

/*
 * A sparse device copy takes the bytes of its populated pages only: the
 * segments of whole chunks in @seg become one per run of allocated pages,
 * in @out (runs_max() of them). Returns how many.
 */
static unsigned int split_runs(struct tier_buf *b,
			       const struct tier_dev_seg *seg, unsigned int n,
			       struct tier_dev_seg *out)
{
	unsigned int k = 0;

	for (unsigned int j = 0; j < n; j++) {
		uint64_t end = seg[j].off + seg[j].len, o = seg[j].off, ro, rl;

		/* no host bytes: a chunk without pages */
		if (!seg[j].host)
			continue;
		while (o < end && st_pages_run(b, o, end, &ro, &rl)) {
			uint64_t re = ro + rl < end ? ro + rl : end;

			out[k++] = (struct tier_dev_seg){
				(char *)seg[j].host + (ro - seg[j].off),
				re - ro, ro
			};
			o = re;
		}
	}
	return k;
}

/*
 * Copy chunks [first, first + n) of the host copy to the device as one
 * batch; holes are zeroed. The device copy is one flat allocation a GPU
 * program maps: a packed chunk is laid out flat in one of @scratch
 * (SPILL_BATCH, taken as needed), and the batch ends early when they run
 * out. Returns the chunks copied, or -errno.
 */
static int fill_from_host(struct tier_buf *b, uint64_t first, unsigned int n,
			  void **scratch, struct tier_dev_seg *runs)
{
	struct tier_store *s = b->s;
	struct tier_dev_seg seg[DEV_BATCH];
	unsigned int k, used = 0;
	int rc;

	for (k = 0; k < n; k++) {
		uint64_t idx = first + k, off = idx * s->chunk_size;
		const struct tier_chunk *ck = idx < b->nck ? &b->ck[idx] :
							     NULL;

		seg[k].off = off;
		seg[k].len = b->size - off < s->chunk_size ? b->size - off :
							      s->chunk_size;
		seg[k].host = NULL;
		if (!ck || !ck->host || ck->dense) {
			seg[k].host = ck ? ck->host : NULL;
			continue;
		}
		if (used == SPILL_BATCH)
			break;
		if (!scratch[used] && !(scratch[used] = st_chunk_get(s)))
			return -ENOMEM;
		st_host_read(b, scratch[used], seg[k].len, off);
		seg[k].host = scratch[used++];
	}
	if (runs)
		rc = tier_dev_writev(st_bdev(b), b->dmem, runs,
				     split_runs(b, seg, k, runs));
	else
		rc = tier_dev_writev(st_bdev(b), b->dmem, seg, k);
	return rc ? rc : (int)k;
}

/* The same from the disk copy, through @scratch chunks (SPILL_BATCH). */
static int fill_from_disk(struct tier_buf *b, uint64_t first, unsigned int n,
			  void **scratch, struct tier_dev_seg *runs)
{
	struct tier_store *s = b->s;
	struct tier_dev_seg seg[SPILL_BATCH];
	int rc;

	for (unsigned int k = 0; k < n; k++) {
		uint64_t off = (first + k) * s->chunk_size;

		seg[k].off = off;
		seg[k].len = b->size - off < s->chunk_size ? b->size - off :
							      s->chunk_size;
		seg[k].host = scratch[k];
		rc = st_disk_read(b, scratch[k], seg[k].len, off);
		if (rc)
			return rc;
	}
	if (runs)
		return tier_dev_writev(st_bdev(b), b->dmem, runs,
				       split_runs(b, seg, n, runs));
	return tier_dev_writev(st_bdev(b), b->dmem, seg, n);
}

/*
 * Build a device copy from the host or disk copy. The chunks go to the
 * backend in batches that each wait once, rather than a copy and a wait per
 * chunk: at 50 GB/s a 1 MiB chunk is some 20 us of DMA, which the fixed
 * cost of a wait would otherwise eat into. Where the backend has sparse
 * allocations the copy is one, its pages populated where the file has
 * some, and only their bytes copied: holes cost nothing there either.
 */
int st_dev_fill(struct tier_buf *b, unsigned int g)
{
	struct tier_store *s = b->s;
	void *scratch[SPILL_BATCH] = { NULL };
	uint64_t n = st_nchunks_for(s, b->size);
	unsigned int batch = b->has_host ? DEV_BATCH : SPILL_BATCH;
	struct tier_dev_seg *runs = NULL;
	int rc;

	if (b->dmem)
		return 0;
	if (!st_gpu_usable(s, g))
		return -ENODEV;
	if (st_dev_wants_sparse(b, g)) {
		runs = malloc(runs_max(s, batch) * sizeof(*runs));
		if (!runs)
			return -ENOMEM;
		rc = st_dev_alloc_sparse(b, g, b->size);
	} else {
		rc = st_dev_alloc(b, g, b->size);
	}
	if (rc) {
		free(runs);
		return rc;
	}
	for (unsigned int k = 0; !b->has_host && k < SPILL_BATCH && k < n;
	     k++) {
		if (!(scratch[k] = st_chunk_get(s))) {
			rc = -ENOMEM;
			goto out_drop;
		}
	}
	for (uint64_t i = 0; i < n;) {
		unsigned int k = n - i < batch ? (unsigned int)(n - i) : batch;

		if (b->has_host) {
			rc = fill_from_host(b, i, k, scratch, runs);
			if (rc < 0)
				goto out_drop;
			i += (unsigned int)rc;
			continue;
		}
		rc = fill_from_disk(b, i, k, scratch, runs);
		if (rc)
			goto out_drop;
		i += k;
	}
	for (int k = 0; k < SPILL_BATCH; k++)
		st_chunk_put(s, scratch[k]);
	free(runs);
	st_count_written(s, TFS_TIER_DEVICE, b->size);
	return 0;

out_drop:
	for (int k = 0; k < SPILL_BATCH; k++)
		st_chunk_put(s, scratch[k]);
	free(runs);
	st_dev_drop(b);
	return rc;
}
