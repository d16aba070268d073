// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The buffer store: bringing it up and down (limits, the device backend, the
 * host pool, the spiller), and a buffer's birth and death. See store.h for
 * the model and store_i.h for the structs and their locking.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "config/log.h"
#include "tiers/store_i.h"

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

/* s->lock held. Limits from st_limits_compute(), and the policy. */
static void apply_limits(struct tier_store *s, const struct tfs_config *cfg,
			 const uint64_t lim[TFS_TIER_COUNT])
{
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		s->use[t].limit = lim[t];
	st_watch_config(s, cfg);
	s->user_share = cfg_size_resolve(&cfg->device.user_share,
					 lim[TFS_TIER_DEVICE]);
	s->high_wm = cfg->policy.high_watermark;
	s->target = cfg->policy.target;
	s->unspill = cfg->policy.unspill;
}

/*
 * The GPU to open: [device] gpu, or the one of [device] gpus on a machine
 * with as many as the backend counts. 0, or -EINVAL with the reason in @err.
 */
static int pick_gpu(const struct tier_dev_ops *ops,
		    const struct tfs_config *cfg, int *gpu, char *err,
		    size_t errlen)
{
	int ord[CFG_MAX_GPUS], count, n;
	unsigned int def;

	*gpu = cfg->device.gpu;
	if (!cfg->device.gpus.all && !cfg->device.gpus.n)
		return 0;
	count = ops->count ? ops->count(cfg) : -EOPNOTSUPP;
	if (count < 0)
		return 0; /* opening device.gpu says what is wrong */
	n = cfg_gpus_resolve(cfg, count, ord, &def, err, errlen);
	if (n < 0)
		return n;
	if (n > 1) {
		snprintf(err, errlen,
			 "device_gpus: %d GPUs: one mount serves one GPU so "
			 "far; list one, or mount once per GPU", n);
		return -EINVAL;
	}
	*gpu = ord[def];
	return 0;
}

static int open_device(struct tier_store *s, const struct tfs_config *cfg,
		       char *err, size_t errlen)
{
	struct tfs_config one;
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
	one = *cfg; /* shares cfg's strings: never freed */
	rc = pick_gpu(ops, cfg, &one.device.gpu, why, sizeof(why));
	if (!rc)
		rc = ops->init(&s->dev, &one, why, sizeof(why));
	if (rc) {
		s->dev = NULL;
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
		if (rc == -ENOENT)
			snprintf(err, errlen, "device_backend=%s: no NVIDIA "
					      "driver (%s)", want, why);
		else
			snprintf(err, errlen, "%s", why);
		return rc;
	}
	ops->info(s->dev, &s->dev_info);
	s->gpu = one.device.gpu;
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
	uint64_t lim[TFS_TIER_COUNT];
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
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->watch_wake, &ca);
	pthread_condattr_destroy(&ca);
	s->dev_room = UINT64_MAX;
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
	st_limits_probe(s);

	rc = open_device(s, cfg, err, errlen);
	if (rc)
		goto out_lock;
	if (cfg->disk.persist != CFG_PERSIST_NO) {
		char name[CFG_NAME_MAX + 2];

		/* Tied to the mount point unless named: never to chance. */
		snprintf(name, sizeof(name), "%s%s",
			 cfg->disk.name[0] ? "" : "m",
			 cfg->disk.name[0] ? cfg->disk.name : tag);
		rc = tier_disk_init_persistent(&s->disk, cfg->disk.path, name,
					       s->chunk_size,
					       cfg->disk.compression, err,
					       errlen);
		s->persistent = true;
	} else {
		rc = tier_disk_init(&s->disk, cfg->disk.path, tag,
				    s->chunk_size, cfg->disk.compression, err,
				    errlen);
	}
	if (rc)
		goto out_dev;
	rc = st_limits_compute(s, cfg, lim, err, errlen);
	if (rc)
		goto out_disk;
	apply_limits(s, cfg, lim);
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
	rc = -pthread_create(&s->spiller, NULL, st_spiller_main, s);
	if (rc) {
		snprintf(err, errlen, "cannot start the spiller: %s",
			 strerror(-rc));
		goto out_pool;
	}
	s->spiller_started = true;
	rc = st_watch_start(s);
	if (rc) {
		snprintf(err, errlen, "cannot start the reserve watcher: %s",
			 strerror(-rc));
		goto out_spiller;
	}
	*out = s;
	return 0;

out_spiller:
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->spill_wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->spiller, NULL);
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
	pthread_cond_destroy(&s->watch_wake);
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
	st_watch_stop(s);
	tier_store_graves_bury(s, tier_store_graves_take(s));
	free(s->graves);
	host_pool_destroy(s->pool);
	tier_disk_destroy(s->disk);
	if (s->dev)
		s->dev->ops->destroy(s->dev);
	pthread_cond_destroy(&s->io_idle);
	pthread_cond_destroy(&s->spill_wake);
	pthread_cond_destroy(&s->watch_wake);
	pthread_mutex_destroy(&s->lock);
	munmap(s->zeroes, s->chunk_size);
	while (s->users) {
		struct user_use *u = s->users;

		s->users = u->next;
		free(u);
	}
	free(s->disk_path);
	free(s);
}

int tier_store_reconfigure(struct tier_store *s, const struct tfs_config *cfg,
			   char *err, size_t errlen)
{
	const struct pol_ops *pol = pol_lookup(cfg->policy.eviction);
	uint64_t lim[TFS_TIER_COUNT];
	int rc;

	if (!pol) {
		snprintf(err, errlen, "policy '%s' is unknown",
			 cfg->policy.eviction);
		return -EINVAL;
	}
	rc = st_limits_compute(s, cfg, lim, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->lock);
	apply_limits(s, cfg, lim);
	host_pool_set_keep(s->pool, s->use[TFS_TIER_HOST].limit);
	for (int t = TFS_TIER_DEVICE; t < TFS_TIER_DISK; t++) {
		char used[32], limit[32];

		if (!st_shrink(s, t, s->use[t].limit, NULL, true) || rc)
			continue;
		/* The new limit holds from now on: nothing new is placed
		 * above it, and the spiller takes the rest down once it is
		 * released. */
		st_fmt_size(used, sizeof(used), s->use[t].used);
		st_fmt_size(limit, sizeof(limit), s->use[t].limit);
		snprintf(err, errlen,
			 "%s stays over its new limit of %s until buffers "
			 "pinned, mapped or in use there are released (%s used)",
			 tier_name((enum tfs_tier)t), limit, used);
		rc = -ENOSPC;
	}
	pthread_cond_signal(&s->spill_wake);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void tier_store_set_inval(struct tier_store *s, tier_inval_fn fn, void *ctx)
{
	s->inval_fn = fn;
	s->inval_ctx = ctx;
}

void tier_buf_set_cookie(struct tier_buf *b, uint64_t cookie)
{
	atomic_store_explicit(&b->cookie, cookie, memory_order_relaxed);
}

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
	b->pi.last_access = st_now_ns();
	b->present = 1u << TFS_TIER_HOST;
	s->use[TFS_TIER_HOST].buffers++;
	s->files++;
	st_sync_links(s, b);
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
	st_sync_links(s, b);
	pthread_mutex_unlock(&s->lock);

	/* Wait for an evictor that try-locked us before we were unlinked. */
	pthread_rwlock_wrlock(&b->lock);
	st_leases_end(b);
	st_pin_release(b);
	st_dev_drop(b);
	if (b->has_host)
		st_host_drop(b);
	st_disk_drop(b);
	if (b->pobj)
		st_pobj_release(b);
	st_chunks_free(b);
	b->size = 0;
	st_publish(b);
	pthread_mutex_lock(&s->lock);
	s->files--;
	pthread_mutex_unlock(&s->lock);
	pthread_rwlock_unlock(&b->lock);
	pthread_rwlock_destroy(&b->lock);
	free(b->leases);
	free(b);
}

size_t tier_buf_footprint(void)
{
	return sizeof(struct tier_buf);
}

uint64_t tier_buf_size(struct tier_buf *b)
{
	pthread_mutex_lock(&b->s->lock);
	uint64_t sz = b->pi.size;
	pthread_mutex_unlock(&b->s->lock);
	return sz;
}
