// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The buffer store: bringing it up and down (limits, the device backend, the
 * host pool, the spiller), and a buffer's birth and death. See store.h for
 * the model and store_i.h for the structs and their locking.
 */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "config/log.h"
#include "tiers/store_i.h"

/* The pool maps under a writer's buffer lock: page-locked on the device's
 * own thread where it has one. */
static int pool_pin(void *ctx, void *ptr, size_t len)
{
	struct tier_dev *dev = ctx;

	if (dev->ops->host_register_async)
		return dev->ops->host_register_async(dev, ptr, len);
	return dev->ops->host_register(dev, ptr, len);
}

static void pool_release(void *ctx, void *ptr, size_t len)
{
	struct tier_dev *dev = ctx;

	dev->ops->host_release(dev, ptr, len);
}

static void pool_unpin(void *ctx, void *ptr, size_t len)
{
	struct tier_dev *dev = ctx;

	dev->ops->host_unregister(dev, ptr, len);
}

/* s->lock held. Limits from st_limits_compute(), and the policy. */
static void apply_limits(struct tier_store *s, const struct tfs_config *cfg,
			 const uint64_t lim[TFS_TIER_COUNT],
			 const uint64_t glim[CFG_MAX_GPUS])
{
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		s->use[t].limit = lim[t];
	for (unsigned int g = 0; g < s->ngpus; g++)
		s->gpus[g].limit = glim[g];
	st_watch_config(s, cfg);
	s->user_share[TFS_TIER_DEVICE] =
		cfg_size_resolve(&cfg->device.user_share, lim[TFS_TIER_DEVICE]);
	s->user_share[TFS_TIER_HOST] =
		cfg_size_resolve(&cfg->host.user_share, lim[TFS_TIER_HOST]);
	s->user_exports = cfg->device.user_exports;
	s->high_wm = cfg->policy.high_watermark;
	s->target = cfg->policy.target;
	s->unspill = cfg->policy.unspill;
	s->promote = cfg->policy.promote;
	s->write_through = cfg->policy.write == CFG_WRITE_THROUGH;
	if (!st_admit_config(s, cfg->policy.admission))
		tfs_warn("admission is off: no memory for its sketch");
	s->promote_rate = cfg_size_resolve(&cfg->policy.promote_rate, 0);
}

/* Whether @cfg's [tiers] is the chain @s was opened with: the same
 * names, paths and limits in the same order. */
static bool xt_same(const struct tier_store *s, const struct tfs_config *cfg)
{
	if (cfg->tiers.n != s->nx)
		return false;
	for (unsigned int i = 0; i < s->nx; i++) {
		const struct cfg_tier *ct = &cfg->tiers.t[i];
		const char *name = strchr(s->xt[i].name, ':') + 1;

		if (strcasecmp(ct->name, name) ||
		    strcmp(ct->path, s->xt[i].path) ||
		    ct->limit.is_percent != s->xt[i].limit.is_percent ||
		    ct->limit.bytes != s->xt[i].limit.bytes ||
		    ct->limit.percent != s->xt[i].limit.percent)
			return false;
	}
	return true;
}

/* Close the tiers of [tiers] (removing their spill directories). */
static void xt_close(struct tier_store *s)
{
	for (unsigned int i = 0; i < s->nx; i++) {
		tier_disk_destroy(s->xt[i].disk);
		free(s->xt[i].path);
	}
	s->nx = 0;
}

/*
 * Open the disk-kind tiers [tiers] lists below [disk], in chain order, each
 * a private spill directory under its path named after @tag as the [disk]
 * tier's is, and set their limits. Only the kind "disk" is served:
 * "shared" is refused here by name (its objects are written once, which
 * the disk code's writes in place do not keep).
 */
static int xt_open(struct tier_store *s, const struct tfs_config *cfg,
		   const char *tag, char *err, size_t errlen)
{
	int rc = 0;

	for (unsigned int i = 0; i < cfg->tiers.n; i++) {
		const struct cfg_tier *ct = &cfg->tiers.t[i];
		struct st_xtier *x = &s->xt[i];

		if (ct->kind != CFG_TIER_DISK) {
			char where[PATH_MAX + 64];

			cfg_key_where(cfg, "tiers", ct->name, where,
				      sizeof(where));
			snprintf(err, errlen,
				 "%s: kind '%s' is not served yet; this "
				 "tierfs serves tiers of kind disk below "
				 "[disk]",
				 where, cfg_tier_kind_name(ct->kind));
			rc = -EOPNOTSUPP;
			goto out;
		}
		x->path = strdup(ct->path);
		if (!x->path) {
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
			goto out;
		}
		rc = tier_disk_init(&x->disk, ct->path, tag, s->chunk_size,
				    cfg->disk.compression, err, errlen);
		if (rc) {
			free(x->path);
			goto out;
		}
		snprintf(x->name, sizeof(x->name), "%s:%s",
			 tier_name(TFS_TIER_DISK), ct->name);
		x->limit = ct->limit;
		s->nx++;
	}
	rc = st_xt_limits(s, cfg, err, errlen);
out:
	if (rc)
		xt_close(s);
	return rc;
}

int tier_store_init(struct tier_store **out, const struct tfs_config *cfg,
		    const char *tag, char *err, size_t errlen)
{
	struct tier_store *s = calloc(1, sizeof(*s));
	const struct pol_ops *pol = pol_lookup(cfg->policy.eviction);
	uint64_t lim[TFS_TIER_COUNT], glim[CFG_MAX_GPUS];
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
	s->self_uid = geteuid();
	s->make_room = st_shrink;
	s->soft_lapse = st_soft_lapse;
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&s->spill_wake, NULL);
	pthread_cond_init(&s->io_idle, NULL);
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->watch_wake, &ca);
	pthread_condattr_destroy(&ca);
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

	rc = st_gpus_open(s, cfg, err, errlen);
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
	rc = xt_open(s, cfg, tag, err, errlen);
	if (rc)
		goto out_disk;
	rc = st_limits_compute(s, cfg, lim, glim, err, errlen);
	if (rc)
		goto out_disk;
	apply_limits(s, cfg, lim, glim);
	/*
	 * Keep freed chunks for reuse up to the host limit, memory tierfs may
	 * hold anyway: in these VMs memory given back to the system costs a
	 * host fault per page when it is touched again (about 350 MB/s, six
	 * times slower than reuse; rewriting a 1 GiB file ran at 0.31x tmpfs
	 * when only an eighth was kept). The spiller trims an idle pool back
	 * to an eighth of the limit.
	 */
	struct tier_dev *pdev = s->ngpus ? s->gpus[s->defg].dev : NULL;
	struct host_pool_hooks hooks = { .ctx = pdev };

	/* The default GPU's instance registers the pool, for every GPU:
	 * the cuda backend page-locks it portable, and its range table is
	 * one for all its instances, so each GPU's copies go direct. */
	if (cfg->host.pinned && pdev && pdev->ops->host_register) {
		hooks.pin = pool_pin;
		hooks.unpin = pool_unpin;
		if (pdev->ops->host_register_async && pdev->ops->host_release) {
			hooks.release = pool_release;
			hooks.populates = pdev->ops->host_populates;
		}
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
	xt_close(s);
	tier_disk_destroy(s->disk);
out_dev:
	st_gpus_close(s);
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
	free(s->wtq);
	pol_sketch_destroy(&s->sketch);
	host_pool_destroy(s->pool);
	xt_close(s);
	tier_disk_destroy(s->disk);
	st_gpus_close(s);
	pol_destroy(&s->pol);
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

void tier_store_set_state(struct tier_store *s, const char *state,
			  const char *mnt)
{
	int rc;

	if (!s->persistent)
		return;
	rc = tier_disk_set_state(s->disk, state, mnt);
	if (rc)
		tfs_warn("persist: cannot note '%s' in the lock file of '%s': "
			 "%s", state, tier_disk_path(s->disk), strerror(-rc));
}

int tier_store_prev_stop(struct tier_store *s)
{
	if (!s->persistent)
		return 0;
	switch (tier_disk_prev(s->disk)) {
	case TIER_PREV_CLEAN:
		return 1;
	case TIER_PREV_CRASHED:
		return -1;
	default:
		return 0;
	}
}

int tier_store_reconfigure(struct tier_store *s, const struct tfs_config *cfg,
			   char *err, size_t errlen)
{
	const struct pol_ops *pol = pol_lookup(cfg->policy.eviction);
	uint64_t lim[TFS_TIER_COUNT], glim[CFG_MAX_GPUS];
	char used[32], limit[32];
	int rc;

	if (!pol) {
		snprintf(err, errlen, "policy '%s' is unknown",
			 cfg->policy.eviction);
		return -EINVAL;
	}
	rc = st_limits_compute(s, cfg, lim, glim, err, errlen);
	if (rc)
		return rc;
	if (!xt_same(s, cfg))
		tfs_warn("[tiers] changed: the tiers below disk are set at "
			 "mount; this reload keeps the %u the mount has, "
			 "with their limits",
			 s->nx);
	pthread_mutex_lock(&s->lock);
	apply_limits(s, cfg, lim, glim);
	host_pool_set_keep(s->pool, s->use[TFS_TIER_HOST].limit);
	/* Each GPU's tier, then the host's; the first one left over its
	 * limit is the one reported. */
	for (unsigned int i = 0; i <= s->ngpus; i++) {
		bool host = i == s->ngpus;
		int t = host ? TFS_TIER_HOST : TFS_TIER_DEVICE;
		uint64_t *u = host ? &s->use[t].used : &s->gpus[i].used;
		uint64_t l = host ? s->use[t].limit : s->gpus[i].limit;
		char name[32];

		if (!st_shrink(s, t, i, l, NULL, true) || rc)
			continue;
		/* The new limit holds from now on: nothing new is placed
		 * above it, and the spiller takes the rest down once it is
		 * released. */
		st_fmt_size(used, sizeof(used), *u);
		st_fmt_size(limit, sizeof(limit), l);
		if (host || s->ngpus == 1)
			snprintf(name, sizeof(name), "%s",
				 tier_name((enum tfs_tier)t));
		else
			snprintf(name, sizeof(name), "device of gpu %d",
				 s->gpus[i].ordinal);
		snprintf(err, errlen,
			 "%s stays over its new limit of %s until buffers "
			 "pinned, mapped or in use there are released (%s used)",
			 name, limit, used);
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
	st_wt_forget(s, b);
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
