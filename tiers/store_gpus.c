// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The device tiers, one per GPU a mount serves ([device] gpus): opening a
 * backend instance for each, finding a GPU by ordinal or UUID, and moving
 * a buffer's device copy from one GPU to another.
 *
 * Every GPU is a struct st_gpu with its own limit, reserve, counters and
 * backend instance; a buffer's device copy is on the GPU its dgi names.
 * They share the policy's device list: a scan for room on one GPU passes
 * over the buffers of the others (st_shrink()), which keeps one LRU order
 * per GPU without a list each.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "tiers/store_i.h"

/*
 * The GPUs to open: [device] gpu alone, or those of [device] gpus on a
 * machine with as many as the backend counts. Their ordinals in @ord, the
 * default's index in *@def; the count, or -EINVAL with the reason in @err.
 */
static int pick_gpus(const struct tier_dev_ops *ops,
		     const struct tfs_config *cfg, int ord[CFG_MAX_GPUS],
		     unsigned int *def, char *err, size_t errlen)
{
	int count;

	ord[0] = cfg->device.gpu;
	*def = 0;
	if (!cfg->device.gpus.all && !cfg->device.gpus.n)
		return 1;
	count = ops->count ? ops->count(cfg) : -EOPNOTSUPP;
	if (count < 0)
		return 1; /* opening device.gpu says what is wrong */
	return cfg_gpus_resolve(cfg, count, ord, def, err, errlen);
}

void st_gpus_close(struct tier_store *s)
{
	for (unsigned int g = 0; g < s->ngpus; g++)
		s->gpus[g].dev->ops->destroy(s->gpus[g].dev);
	s->ngpus = 0;
	s->defg = 0;
}

/* Open GPU @ordinal as s->gpus[s->ngpus]. 0 or -errno, why in @why. */
static int open_one(struct tier_store *s, const struct tier_dev_ops *ops,
		    const struct tfs_config *cfg, int ordinal, char *why,
		    size_t whylen)
{
	struct st_gpu *gp = &s->gpus[s->ngpus];
	struct tfs_config one = *cfg; /* shares cfg's strings: never freed */
	int rc;

	one.device.gpu = ordinal;
	rc = ops->init(&gp->dev, &one, why, whylen);
	if (rc) {
		gp->dev = NULL;
		return rc;
	}
	ops->info(gp->dev, &gp->info);
	gp->ordinal = ordinal;
	gp->room = UINT64_MAX;
	s->ngpus++;
	tfs_info("device: %s gpu %d '%s', %" PRIu64 " bytes", ops->name,
		 ordinal, gp->info.model, gp->info.capacity);
	return 0;
}

int st_gpus_open(struct tier_store *s, const struct tfs_config *cfg,
		 char *err, size_t errlen)
{
	const char *want = cfg->device.backend;
	const struct tier_dev_ops *ops;
	int ord[CFG_MAX_GPUS], n, rc = 0;
	unsigned int def;
	char why[256] = "";

	if (!strcmp(want, "none")) {
		snprintf(s->backend, sizeof(s->backend), "none");
		return 0;
	}
	ops = tier_dev_lookup(!strcmp(want, "auto") ? "cuda" : want);
	if (!ops) {
		/* auto could never have used a GPU: nothing to report. */
		if (!strcmp(want, "auto")) {
			tfs_info("device: no device tier: tierfs was built "
				 "without cuda");
			snprintf(s->backend, sizeof(s->backend), "none");
			return 0;
		}
		snprintf(err, errlen, "device backend '%s' is not built in",
			 want);
		return -ENODEV;
	}
	n = pick_gpus(ops, cfg, ord, &def, why, sizeof(why));
	if (n < 0)
		rc = n;
	for (int i = 0; !rc && i < n; i++)
		rc = open_one(s, ops, cfg, ord[i], why, sizeof(why));
	if (rc) {
		st_gpus_close(s);
		/*
		 * A machine without NVIDIA's driver is the ordinary case of
		 * auto, said in the user's words; the CUDA error behind it is
		 * for debugging. A GPU that is there but fails is worth more.
		 */
		if (!strcmp(want, "auto") && rc == -ENOENT) {
			tfs_notice("no NVIDIA driver: running without a device "
				   "tier");
			tfs_debug("device: %s", why);
			snprintf(s->backend, sizeof(s->backend), "none");
			return 0;
		}
		if (!strcmp(want, "auto")) {
			tfs_warn("device: no device tier: %s", why);
			snprintf(s->backend, sizeof(s->backend), "none");
			return 0;
		}
		/* What to do, in one line; the CUDA error is for -d. */
		if (rc == -ENOENT) {
			tfs_debug("device: %s", why);
			snprintf(err, errlen, "device_backend=%s: no NVIDIA "
					      "driver here; install it, or "
					      "mount with device_backend=auto "
					      "or none", want);
		} else
			snprintf(err, errlen, "%s", why);
		return rc;
	}
	s->defg = def;
	snprintf(s->backend, sizeof(s->backend), "%s", ops->name);
	return 0;
}

int st_gpu_index(struct tier_store *s, int ordinal)
{
	if (!s->ngpus)
		return -ENODEV;
	for (unsigned int g = 0; g < s->ngpus; g++)
		if (s->gpus[g].ordinal == ordinal)
			return (int)g;
	return -ENXIO;
}

int tier_store_default_gpu(struct tier_store *s)
{
	return s->ngpus ? s->gpus[s->defg].ordinal : -ENODEV;
}

int tier_store_gpu_by_uuid(struct tier_store *s, const uint8_t uuid[16])
{
	if (!s->ngpus)
		return -ENODEV;
	for (unsigned int g = 0; g < s->ngpus; g++)
		if (!memcmp(s->gpus[g].info.uuid, uuid,
			    sizeof(s->gpus[g].info.uuid)))
			return s->gpus[g].ordinal;
	return -ENXIO;
}

/*
 * Copy the first @len bytes of @from (on @src) into @to (on @dst) through
 * host memory, SPILL_BATCH chunks a round, each side's copies batched to
 * wait once: for two devices that cannot reach each other (no peer
 * access), correct for any two.
 */
static int bounce(struct tier_store *s, struct tier_dev *src,
		  struct tier_dmem *from, struct tier_dev *dst,
		  struct tier_dmem *to, uint64_t off, uint64_t end)
{
	struct tier_dev_seg seg[SPILL_BATCH];
	void *scratch[SPILL_BATCH] = { NULL };
	int rc = 0;

	while (!rc && off < end) {
		unsigned int k = 0;

		for (; k < SPILL_BATCH && off < end; k++) {
			if (!scratch[k] && !(scratch[k] = st_chunk_get(s))) {
				rc = -ENOMEM;
				break;
			}
			seg[k].host = scratch[k];
			seg[k].off = off;
			seg[k].len = end - off < s->chunk_size ? end - off :
								 s->chunk_size;
			off += seg[k].len;
		}
		if (!rc)
			rc = tier_dev_readv(src, from, seg, k);
		if (!rc)
			rc = tier_dev_writev(dst, to, seg, k);
	}
	for (int k = 0; k < SPILL_BATCH; k++)
		st_chunk_put(s, scratch[k]);
	return rc;
}

/*
 * The old copy stays charged to its GPU until it is freed: for the copy's
 * length both GPUs hold the bytes, and a placement meanwhile must see
 * that. The buffer itself is charged on the new GPU only.
 */
int st_dev_migrate(struct tier_buf *b, unsigned int g)
{
	struct tier_store *s = b->s;
	struct tier_dmem *old = b->dmem;
	unsigned int og = b->dgi;
	struct tier_dev *odev;
	uint64_t ocharge;
	bool sparse;
	int rc;

	if (!old || og == g)
		return 0;
	if (!st_gpu_usable(s, g) || tier_dev_failed(s->gpus[og].dev))
		return -ENODEV;
	odev = s->gpus[og].dev;
	/* A reply may point into a sim allocation: it must be done before
	 * the copy it reads is freed. */
	st_io_quiesce(b);
	pthread_mutex_lock(&s->lock);
	ocharge = b->charged[TFS_TIER_DEVICE];
	/* A pinner's share follows the new copy's charge, not both. */
	st_share_follow(s, b, TFS_TIER_DEVICE, -(int64_t)ocharge);
	b->charged[TFS_TIER_DEVICE] = 0;
	b->dmem = NULL;
	b->dgi = (uint8_t)g;
	pthread_mutex_unlock(&s->lock);
	sparse = st_dev_wants_sparse(b, g);
	rc = sparse ? st_dev_alloc_sparse(b, g, b->size) :
		      st_dev_alloc(b, g, b->size);
	if (!rc) {
		uint64_t len = b->size < old->len ? b->size : old->len;
		uint64_t off = 0, ro = 0, rl = len;
		struct tier_dev *ndev = s->gpus[g].dev;

		/* Device to device where the backend can (cudaMemcpyPeer,
		 * over NVLink or PCIe), else through host memory; a sparse
		 * copy takes the runs of pages the file has. */
		while (!rc && off < len &&
		       (!sparse || st_pages_run(b, off, len, &ro, &rl))) {
			if (ro + rl > len)
				rl = len - ro;
			if (tier_dev_can_peer(odev, ndev))
				rc = odev->ops->copy_peer(odev, old, ndev,
							  b->dmem, rl, ro);
			else
				rc = bounce(s, odev, old, ndev, b->dmem, ro,
					    ro + rl);
			off = ro + rl;
		}
	}
	if (rc) {
		st_dev_drop(b);
		pthread_mutex_lock(&s->lock);
		b->dmem = old;
		b->dgi = (uint8_t)og;
		b->charged[TFS_TIER_DEVICE] = ocharge;
		st_share_follow(s, b, TFS_TIER_DEVICE, (int64_t)ocharge);
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	odev->ops->free(odev, old);
	pthread_mutex_lock(&s->lock);
	s->gpus[og].used -= ocharge;
	s->use[TFS_TIER_DEVICE].used -= ocharge;
	s->gpus[og].moves_out++;
	s->gpus[g].moves_in++;
	pthread_mutex_unlock(&s->lock);
	st_count_written(s, TFS_TIER_DEVICE, b->size);
	tfs_debug("buffer %" PRIu64 ": moved from gpu %d to gpu %d%s", b->id,
		  s->gpus[og].ordinal, s->gpus[g].ordinal,
		  tier_dev_can_peer(odev, s->gpus[g].dev) ? ", peer to peer" :
							    ", through host");
	return 0;
}
