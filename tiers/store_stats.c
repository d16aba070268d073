// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What the store and a buffer report: usage per tier, the key=value stats
 * text, capacity for statfs, a buffer's stat, and tier names.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>

#include "tiers/store_i.h"

const char *tier_name(enum tfs_tier t)
{
	static const char *const names[] = { "device", "host", "disk" };

	return t < TFS_TIER_COUNT ? names[t] : "?";
}

const char *tier_store_tier_name(const struct tier_store *s, int t)
{
	if (t >= TFS_TIER_COUNT && t < st_ntiers(s))
		return s->xt[t - TFS_TIER_COUNT].name;
	return tier_name((enum tfs_tier)t);
}

int tier_store_tier_parse(const struct tier_store *s, const char *name,
			  size_t len)
{
	while (len && (name[len - 1] == '\n' || name[len - 1] == '\0'))
		len--;
	for (int t = TFS_TIER_COUNT; t < st_ntiers(s); t++) {
		const char *n = tier_store_tier_name(s, t);

		if (strlen(n) == len && !strncasecmp(n, name, len))
			return t;
	}
	return -EINVAL;
}

int tier_parse(const char *name, size_t len, enum tfs_tier *out)
{
	while (len && (name[len - 1] == '\n' || name[len - 1] == '\0'))
		len--;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		const char *n = tier_name((enum tfs_tier)t);

		/* "DISK" as well: a name, not a code to get exactly right. */
		if (strlen(n) == len && !strncasecmp(n, name, len)) {
			*out = (enum tfs_tier)t;
			return 0;
		}
	}
	return -EINVAL;
}

size_t tier_appendf(char *buf, size_t len, size_t n, const char *fmt, ...)
{
	va_list ap;
	int w;

	va_start(ap, fmt);
	w = vsnprintf(buf + (n < len ? n : len), n < len ? len - n : 0, fmt,
		      ap);
	va_end(ap);
	return n + (w > 0 ? (size_t)w : 0);
}

void tier_store_stats(struct tier_store *s, struct tier_store_stats *out)
{
	uint64_t room = 0;
	bool all_free = true;

	memset(out, 0, sizeof(*out));
	snprintf(out->backend, sizeof(out->backend), "%s", s->backend);
	snprintf(out->device_model, sizeof(out->device_model), "%s",
		 s->ngpus ? s->gpus[s->defg].info.model : "");
	out->has_device = s->ngpus != 0;
	snprintf(out->device_state, sizeof(out->device_state), "%s",
		 !s->ngpus			    ? "none" :
		 tier_dev_failed(s->gpus[s->defg].dev) ? "failed" :
							 "ok");
	out->gpu = s->ngpus ? s->gpus[s->defg].ordinal : -1;
	out->ngpus = s->ngpus;
	pthread_mutex_lock(&s->lock);
	memcpy(out->tier, s->use, sizeof(out->tier));
	out->ntiers = (unsigned int)st_ntiers(s);
	out->files = s->files;
	out->logical_bytes = s->logical;
	out->evict_nothing_movable = s->evict_nothing_movable;
	out->evict_move_errors = s->evict_move_errors;
	out->disk_full = s->disk_full;
	out->disk_full_count = s->disk_full_count;
	for (unsigned int g = 0; g < s->ngpus; g++) {
		const struct st_gpu *gp = &s->gpus[g];
		struct tier_gpu_stats *o = &out->gpus[g];

		o->gpu = gp->ordinal;
		snprintf(o->model, sizeof(o->model), "%s", gp->info.model);
		o->used = gp->used;
		o->limit = gp->limit;
		o->buffers = gp->buffers;
		o->reserve = gp->reserve;
		o->free = gp->free;
		o->others = gp->others;
		o->room = gp->room;
		o->reclaims = gp->reclaims;
		o->reclaimed_bytes = gp->reclaimed_bytes;
		o->yields = gp->yields;
		o->yield_bytes = gp->yield_bytes;
		o->moves_in = gp->moves_in;
		o->moves_out = gp->moves_out;
		out->device_free += o->free;
		out->device_others += o->others;
		out->device_reserve += o->reserve;
		out->device_export_held += gp->exp_held;
		all_free = all_free && gp->room == UINT64_MAX;
		room += gp->room < gp->limit ? gp->room : gp->limit;
	}
	/* UINT64_MAX while nobody else uses any of the GPUs. */
	out->device_room = all_free ? UINT64_MAX :
			   s->ngpus == 1 ? s->gpus[0].room :
					   room;
	out->reclaims = s->reclaims;
	out->reclaimed_bytes = s->reclaimed_bytes;
	out->yields = s->yields;
	out->yield_bytes = s->yield_bytes;
	out->wt_copies = s->wt_copies;
	out->wt_bytes = s->wt_bytes;
	/* Queued or being written: 0 once every copy is made. */
	out->wt_pending = s->nwtq + s->wt_active;
	out->wt_errors = s->wt_errors;
	out->soft_pins = s->soft_pins;
	out->admit_rejects = s->admit_rejects;
	pthread_mutex_unlock(&s->lock);
	out->host_alloc_failures =
		__atomic_load_n(&s->host_alloc_failures, __ATOMIC_RELAXED);
	out->host_pool = host_pool_free_bytes(s->pool);
	/* Every disk-kind tier's spill files together. */
	for (unsigned int k = 0; s->disk && k <= s->nx; k++) {
		struct tier_disk_stats ds;

		tier_disk_stats(st_disk_of(s, k), &ds);
		out->checksum_errors += ds.corrupt_chunks;
		out->spill_read_errors += ds.read_errors;
		out->spill_write_errors += ds.write_errors;
		out->spill_punch_errors += ds.punch_errors;
	}
}

size_t tier_store_format_stats(struct tier_store *s, char *buf, size_t len)
{
	struct tier_store_stats st;
	size_t n = 0;

	tier_store_stats(s, &st);
#define EMIT(...) (n = tier_appendf(buf, len, n, __VA_ARGS__))
	EMIT("version=1\n");
	EMIT("backend=%s\n", st.backend);
	EMIT("device_model=%s\n", st.device_model);
	EMIT("files=%" PRIu64 "\n", st.files);
	EMIT("logical_bytes=%" PRIu64 "\n", st.logical_bytes);
	EMIT("evict_nothing_movable=%" PRIu64 "\n", st.evict_nothing_movable);
	EMIT("evict_move_errors=%" PRIu64 "\n", st.evict_move_errors);
	EMIT("checksum_errors=%" PRIu64 "\n", st.checksum_errors);
	EMIT("spill_read_errors=%" PRIu64 "\n", st.spill_read_errors);
	EMIT("spill_write_errors=%" PRIu64 "\n", st.spill_write_errors);
	EMIT("spill_punch_errors=%" PRIu64 "\n", st.spill_punch_errors);
	EMIT("host_alloc_failures=%" PRIu64 "\n", st.host_alloc_failures);
	/* The chain, fastest first: the one list of tiers tierfsctl and
	 * Python read, and the names of the TIER.* keys below. */
	EMIT("tiers=");
	for (int t = 0; t < (int)st.ntiers; t++)
		EMIT("%s%s", t ? "," : "", tier_store_tier_name(s, t));
	EMIT("\n");
	for (int t = 0; t < (int)st.ntiers; t++) {
		const struct tier_usage *u = &st.tier[t];
		const char *nm = tier_store_tier_name(s, t);

		EMIT("%s.used=%" PRIu64 "\n", nm, u->used);
		EMIT("%s.limit=%" PRIu64 "\n", nm, u->limit);
		EMIT("%s.buffers=%" PRIu64 "\n", nm, u->buffers);
		EMIT("%s.spill_bytes=%" PRIu64 "\n", nm, u->spill_bytes);
		EMIT("%s.unspill_bytes=%" PRIu64 "\n", nm, u->unspill_bytes);
		EMIT("%s.spills=%" PRIu64 "\n", nm, u->spills);
		EMIT("%s.unspills=%" PRIu64 "\n", nm, u->unspills);
		EMIT("%s.written_bytes=%" PRIu64 "\n", nm, u->written_bytes);
		EMIT("%s.enospc=%" PRIu64 "\n", nm, u->enospc);
		EMIT("%s.promotes=%" PRIu64 "\n", nm, u->promotes);
		EMIT("%s.promote_bytes=%" PRIu64 "\n", nm, u->promote_bytes);
	}
	EMIT("host.pool=%" PRIu64 "\n", st.host_pool);
	EMIT("disk.full=%d\n", st.disk_full);
	EMIT("disk.full_count=%" PRIu64 "\n", st.disk_full_count);
	/* Giving memory back to GPU programs; "room" is what others leave
	 * the device tier, shown as the limit while nobody else uses it. */
	EMIT("device.reserve=%" PRIu64 "\n", st.device_reserve);
	EMIT("device.free=%" PRIu64 "\n", st.device_free);
	EMIT("device.others=%" PRIu64 "\n", st.device_others);
	EMIT("device.room=%" PRIu64 "\n",
	     st.device_room < st.tier[TFS_TIER_DEVICE].limit ?
		     st.device_room :
		     st.tier[TFS_TIER_DEVICE].limit);
	EMIT("device.yields=%" PRIu64 "\n", st.yields);
	EMIT("device.yield_bytes=%" PRIu64 "\n", st.yield_bytes);
	EMIT("device.reclaims=%" PRIu64 "\n", st.reclaims);
	EMIT("device.reclaimed_bytes=%" PRIu64 "\n", st.reclaimed_bytes);
	EMIT("device.state=%s\n", st.device_state);
	EMIT("device.export_held=%" PRIu64 "\n", st.device_export_held);
	/* Each GPU's device tier under its ordinal, "gpus" listing them
	 * (empty without a device tier); the device.* keys are their sum. */
	EMIT("gpus=");
	for (unsigned int i = 0; i < st.ngpus; i++)
		EMIT("%s%d", i ? "," : "", st.gpus[i].gpu);
	EMIT("\n");
	if (st.ngpus)
		EMIT("default_gpu=%d\n", st.gpu);
	for (unsigned int i = 0; i < st.ngpus; i++) {
		const struct tier_gpu_stats *u = &st.gpus[i];
		int g = u->gpu;

		EMIT("device%d.model=%s\n", g, u->model);
		EMIT("device%d.used=%" PRIu64 "\n", g, u->used);
		EMIT("device%d.limit=%" PRIu64 "\n", g, u->limit);
		EMIT("device%d.buffers=%" PRIu64 "\n", g, u->buffers);
		EMIT("device%d.reserve=%" PRIu64 "\n", g, u->reserve);
		EMIT("device%d.free=%" PRIu64 "\n", g, u->free);
		EMIT("device%d.others=%" PRIu64 "\n", g, u->others);
		EMIT("device%d.room=%" PRIu64 "\n", g,
		     u->room < u->limit ? u->room : u->limit);
		EMIT("device%d.yields=%" PRIu64 "\n", g, u->yields);
		EMIT("device%d.yield_bytes=%" PRIu64 "\n", g, u->yield_bytes);
		EMIT("device%d.reclaims=%" PRIu64 "\n", g, u->reclaims);
		EMIT("device%d.reclaimed_bytes=%" PRIu64 "\n", g,
		     u->reclaimed_bytes);
		EMIT("device%d.moves_in=%" PRIu64 "\n", g, u->moves_in);
		EMIT("device%d.moves_out=%" PRIu64 "\n", g, u->moves_out);
	}
	EMIT("write_through.copies=%" PRIu64 "\n", st.wt_copies);
	EMIT("write_through.bytes=%" PRIu64 "\n", st.wt_bytes);
	EMIT("write_through.pending=%" PRIu64 "\n", st.wt_pending);
	EMIT("write_through.errors=%" PRIu64 "\n", st.wt_errors);
	EMIT("soft_pins=%" PRIu64 "\n", st.soft_pins);
	EMIT("admission.rejects=%" PRIu64 "\n", st.admit_rejects);
#undef EMIT
	return st_metric_format(s, buf, len, n);
}

/* What disk-kind tier @k's filesystem still lets it write, for statfs. */
static uint64_t disk_fs_avail(struct tier_store *s, unsigned int k)
{
	struct statvfs sv;

	if (!s->disk || fstatvfs(tier_disk_dirfd(st_disk_of(s, k)), &sv))
		return UINT64_MAX;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

void tier_store_space(struct tier_store *s, struct tier_space *out)
{
	uint64_t left[TFS_TIER_MAX] = { 0 }, fs, slot, disk, dlim;
	const int n = st_ntiers(s);

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	for (int t = 0; t < n; t++) {
		/* A tier may be over its own limit for a moment (a reload
		 * that lowered it, a buffer in use): nothing is left then. */
		left[t] = s->use[t].limit > s->use[t].used ?
				  s->use[t].limit - s->use[t].used :
				  0;
		out->used += s->use[t].used;
	}
	dlim = s->use[TFS_TIER_DISK].limit;
	pthread_mutex_unlock(&s->lock);
	for (int t = TFS_TIER_DISK; t < n; t++) {
		fs = disk_fs_avail(s, (unsigned int)(t - TFS_TIER_DISK));
		if (left[t] > fs)
			left[t] = fs;
	}
	for (int t = 0; t < n; t++)
		out->free += left[t];
	/*
	 * On disk a chunk takes its slot: the stored bytes and a header,
	 * rounded up to whole blocks, and an allocation charges that for
	 * every chunk it touches, the last one too. So only whole chunks.
	 */
	disk = 0;
	if (s->disk) {
		/* A file too large for host goes to [disk], which makes room
		 * for it by pushing others into the tiers below: what they
		 * leave counts, up to the [disk] limit. */
		uint64_t room = left[TFS_TIER_DISK];

		for (int t = TFS_TIER_DISK + 1; t < n; t++)
			room += left[t];
		if (room > dlim && n > TFS_TIER_COUNT)
			room = dlim;
		slot = tier_disk_chunk_bound(s->disk, s->chunk_size, false);
		disk = room / slot * s->chunk_size;
	}
	out->one_file = left[TFS_TIER_HOST] > disk ? left[TFS_TIER_HOST] :
						       disk;
	if (out->one_file > out->free)
		out->one_file = out->free;
}

void tier_buf_stat(struct tier_buf *b, struct tier_buf_stat *st)
{
	struct tier_store *s = b->s;

	memset(st, 0, sizeof(*st));
	st_soft_check(b);
	pthread_mutex_lock(&s->lock);
	st->tier = TFS_TIER_HOST;
	for (int t = 0; t < TFS_TIER_COUNT; t++) {
		if (b->present & (1u << t)) {
			st->tier = (enum tfs_tier)t;
			break;
		}
	}
	st->chain = st->tier == TFS_TIER_DISK ? TFS_TIER_DISK + b->pdk :
						(int)st->tier;
	st->size = b->pi.size;
	st->stored_size = b->charged[st->tier];
	st->last_access_ns = b->pi.last_access;
	st->pins = b->pins;
	st->soft = b->pi.level;
	st->soft_ttl = b->soft_ttl;
	st->leases = 0;
	for (uint32_t i = 0; i < b->nleases; i++)
		st->leases += !b->leases[i].revoked;
	st->generation = b->generation;
	st->gpu = b->present & (1u << TFS_TIER_DEVICE) ?
			  s->gpus[b->pgi].ordinal :
			  -1;
	pthread_mutex_unlock(&s->lock);
	st->blocks = (st->stored_size + 511) / 512;
}
