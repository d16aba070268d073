// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The tiers' limits: what the machine has (RAM, the memory cgroup the
 * daemon runs in, free space under the disk path, device memory), the
 * defaults taken from it, and the refusal of a limit above it unless
 * [policy] overcommit says so. Each limit is logged with where it came
 * from.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "config/log.h"
#include "tiers/store_i.h"

/* v1 reports "no limit" as the largest page-aligned long. */
#define CGROUP_NO_LIMIT (1ull << 62)

void st_fmt_size(char *buf, size_t len, uint64_t v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB",
					    "PiB", "EiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 6) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", v);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
}

static uint64_t ram_bytes(void)
{
	return (uint64_t)sysconf(_SC_PHYS_PAGES) *
	       (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Whether the comma-separated @list holds @word. */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; p && *p; p = strchr(p, ',')) {
		if (*p == ',')
			p++;
		if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == '\0' ||
					     p[n] == '\n' || p[n] == ' '))
			return true;
	}
	return false;
}

/*
 * Where this process's cgroup of the memory controller is mounted: for v1
 * a "cgroup" mount with the memory option, else the "cgroup2" one. Fills
 * @root (the hierarchy path the mount shows) and @point (where).
 */
static bool cgroup_mount(bool v1, char *root, size_t rlen, char *point,
			 size_t plen)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char r[PATH_MAX], p[PATH_MAX], type[64], opts[1024];
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", r, p) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", type, opts) != 2)
			continue;
		if (v1 ? strcmp(type, "cgroup") || !has_word(opts, "memory") :
			 strcmp(type, "cgroup2"))
			continue;
		snprintf(root, rlen, "%s", r);
		snprintf(point, plen, "%s", p);
		found = true;
	}
	fclose(f);
	return found;
}

/* The number in @path, 0 when it holds none ("max") or cannot be read. */
static uint64_t read_limit(const char *path)
{
	FILE *f = fopen(path, "re");
	unsigned long long v = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v >= CGROUP_NO_LIMIT ? 0 : (uint64_t)v;
}

/*
 * The memory limit of the cgroup this process runs in, the smallest of its
 * own and its ancestors' (v1 memory.limit_in_bytes, or v2 memory.max), or
 * 0 when none is set. @where gets the cgroup's path for messages.
 */
static uint64_t cgroup_memory_limit(char *where, size_t wlen)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096], v1[PATH_MAX] = "", v2[PATH_MAX] = "";
	char root[PATH_MAX], point[PATH_MAX], dir[2 * PATH_MAX + 8];
	const char *path, *file;
	uint64_t best = 0;
	bool is_v1;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		*c2 = '\0';
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		if (c1[1] == '\0')
			snprintf(v2, sizeof(v2), "%s", c2 + 1);
		else if (has_word(c1 + 1, "memory"))
			snprintf(v1, sizeof(v1), "%s", c2 + 1);
	}
	fclose(f);
	/* Where both exist the memory controller is v1's. */
	is_v1 = v1[0] && cgroup_mount(true, root, sizeof(root), point,
				      sizeof(point));
	if (!is_v1 && (!v2[0] || !cgroup_mount(false, root, sizeof(root),
					       point, sizeof(point))))
		return 0;
	path = is_v1 ? v1 : v2;
	file = is_v1 ? "memory.limit_in_bytes" : "memory.max";
	snprintf(where, wlen, "%s", path);
	/* In a cgroup namespace the mount shows the hierarchy from our
	 * group's ancestor on: drop that part of the path. */
	if (strcmp(root, "/") && !strncmp(path, root, strlen(root)))
		path += strlen(root);
	snprintf(dir, sizeof(dir), "%s%s", point, path);
	for (;;) {
		char fp[sizeof(dir) + 32];
		uint64_t v;
		char *slash;

		snprintf(fp, sizeof(fp), "%s/%s", dir, file);
		v = read_limit(fp);
		if (v && (!best || v < best))
			best = v;
		if (strlen(dir) <= strlen(point))
			break;
		slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
	return best;
}

void st_limits_probe(struct tier_store *s)
{
	s->host_capacity = ram_bytes();
	s->cgroup_mem = cgroup_memory_limit(s->cgroup_path,
					    sizeof(s->cgroup_path));
}

static bool set(const struct cfg_size *sz)
{
	return sz->is_percent || sz->bytes;
}

/* "... (policy_overcommit=yes allows it)" for a limit above @what. */
static int refuse(const struct tfs_config *cfg, const char *section,
		  uint64_t want, const char *what, char *err, size_t errlen)
{
	char where[PATH_MAX + 64], w[32];

	cfg_key_where(cfg, section, "limit", where, sizeof(where));
	st_fmt_size(w, sizeof(w), want);
	snprintf(err, errlen, "%s: %s is more than %s "
			      "(policy_overcommit=yes allows it)",
		 where, w, what);
	return -EINVAL;
}

int st_limits_compute(struct tier_store *s, const struct tfs_config *cfg,
		      uint64_t lim[TFS_TIER_COUNT], uint64_t glim[CFG_MAX_GPUS],
		      char *err, size_t errlen)
{
	const bool oc = cfg->policy.overcommit;
	uint64_t ram = s->host_capacity, cg = s->cgroup_mem;
	/* Host memory: RAM, or less in a memory cgroup. */
	uint64_t mem = cg && cg < ram ? cg : ram;
	char a[32], b[32], c[32], what[PATH_MAX + 128];
	/* Where each limit came from, logged once all are known good. */
	char srcs[TFS_TIER_COUNT][PATH_MAX + 160], *src;
	struct statvfs sv;
	uint64_t free_b, fs;

	/* Host. */
	src = srcs[TFS_TIER_HOST];
	st_fmt_size(a, sizeof(a), ram);
	if (set(&cfg->host.limit)) {
		lim[TFS_TIER_HOST] = cfg_size_resolve(&cfg->host.limit, ram);
		if (!oc && lim[TFS_TIER_HOST] > ram) {
			snprintf(what, sizeof(what),
				 "the %s of RAM this machine has", a);
			return refuse(cfg, "host", lim[TFS_TIER_HOST], what,
				      err, errlen);
		}
		if (!oc && cg && lim[TFS_TIER_HOST] > cg) {
			st_fmt_size(b, sizeof(b), cg);
			snprintf(what, sizeof(what),
				 "the %s its memory cgroup '%s' allows", b,
				 s->cgroup_path);
			return refuse(cfg, "host", lim[TFS_TIER_HOST], what,
				      err, errlen);
		}
		cfg_key_where(cfg, "host", "limit", what, sizeof(what));
		snprintf(src, sizeof(srcs[0]), "from %s", what);
	} else {
		lim[TFS_TIER_HOST] = ram / 4;
		snprintf(src, sizeof(srcs[0]), "25%% of the %s of RAM", a);
		if (cg && cg / 2 < ram / 4) {
			/* Past its cgroup's limit the kernel kills the daemon
			 * before it can spill. */
			lim[TFS_TIER_HOST] = cg / 2;
			st_fmt_size(b, sizeof(b), cg);
			snprintf(src, sizeof(srcs[0]),
				 "half the %s its memory cgroup '%s' allows", b,
				 s->cgroup_path);
		}
	}

	/* Device: each GPU's tier, from its own size. */
	lim[TFS_TIER_DEVICE] = 0;
	src = srcs[TFS_TIER_DEVICE];
	for (unsigned int g = 0; g < s->ngpus; g++) {
		const struct tier_dev_info *di = &s->gpus[g].info;
		bool sim = !strcmp(s->backend, "sim");

		if (set(&cfg->device.limit)) {
			glim[g] = cfg_size_resolve(&cfg->device.limit,
						   di->capacity);
			/* The sim devices are host memory, all of them. */
			if (!oc && sim &&
			    lim[TFS_TIER_DEVICE] + glim[g] > mem) {
				st_fmt_size(b, sizeof(b), mem);
				snprintf(what, sizeof(what),
					 "the %s of host memory the sim "
					 "device%s can have%s",
					 b, s->ngpus > 1 ? "s" : "",
					 mem < ram ? " in its memory cgroup" :
						     "");
				return refuse(cfg, "device",
					      lim[TFS_TIER_DEVICE] + glim[g],
					      what, err, errlen);
			}
			if (!oc && !sim && glim[g] > di->capacity) {
				st_fmt_size(b, sizeof(b), di->capacity);
				snprintf(what, sizeof(what),
					 "the %s of memory device '%s' has", b,
					 di->model);
				return refuse(cfg, "device", glim[g], what,
					      err, errlen);
			}
			cfg_key_where(cfg, "device", "limit", what,
				      sizeof(what));
			snprintf(src, sizeof(srcs[0]), "from %s", what);
		} else if (!strcmp(s->backend, "cuda")) {
			glim[g] = di->free / 10 * 8;
			snprintf(src, sizeof(srcs[0]), "80%% of what is free");
		} else {
			glim[g] = di->capacity;
			snprintf(src, sizeof(srcs[0]), "the %s device's size",
				 s->backend);
		}
		lim[TFS_TIER_DEVICE] += glim[g];
	}

	/* Disk: its free space counts what our spill files take. */
	if (statvfs(s->disk_path, &sv)) {
		int e = errno;

		snprintf(err, errlen, "disk path '%s': %s", s->disk_path,
			 strerror(e));
		return -e;
	}
	fs = (uint64_t)sv.f_blocks * sv.f_frsize;
	pthread_mutex_lock(&s->lock);
	free_b = (uint64_t)sv.f_bavail * sv.f_frsize +
		 s->use[TFS_TIER_DISK].used;
	pthread_mutex_unlock(&s->lock);
	s->disk_capacity = fs;
	src = srcs[TFS_TIER_DISK];
	st_fmt_size(a, sizeof(a), free_b);
	if (set(&cfg->disk.limit)) {
		lim[TFS_TIER_DISK] = cfg_size_resolve(&cfg->disk.limit, fs);
		if (!oc && lim[TFS_TIER_DISK] > free_b) {
			snprintf(what, sizeof(what), "the %s free on '%s'", a,
				 s->disk_path);
			return refuse(cfg, "disk", lim[TFS_TIER_DISK], what,
				      err, errlen);
		}
		cfg_key_where(cfg, "disk", "limit", what, sizeof(what));
		snprintf(src, sizeof(srcs[0]), "from %s", what);
	} else {
		/* Keep 5% of the filesystem for everyone else on it. */
		uint64_t keep = fs / 20;
		uint64_t room = free_b > keep ? free_b - keep : 0;

		st_fmt_size(b, sizeof(b), fs);
		lim[TFS_TIER_DISK] = fs / 2;
		snprintf(src, sizeof(srcs[0]), "50%% of the %s filesystem of '%s'",
			 b, s->disk_path);
		if (room < fs / 2) {
			lim[TFS_TIER_DISK] = room;
			st_fmt_size(c, sizeof(c), keep);
			snprintf(src, sizeof(srcs[0]),
				 "the %s free on '%s' less %s (5%% of its "
				 "size) left to others",
				 a, s->disk_path, c);
		}
	}

	for (unsigned int g = 0; g < s->ngpus; g++) {
		const struct tier_dev_info *di = &s->gpus[g].info;
		char gpu[32] = "";

		if (s->ngpus > 1)
			snprintf(gpu, sizeof(gpu), " of gpu %d",
				 s->gpus[g].ordinal);
		st_fmt_size(c, sizeof(c), glim[g]);
		src = srcs[TFS_TIER_DEVICE];
		if (!set(&cfg->device.limit) && !strcmp(s->backend, "cuda")) {
			st_fmt_size(b, sizeof(b), di->free);
			snprintf(what, sizeof(what),
				 "80%% of the %s free on device '%s'", b,
				 di->model);
			src = what;
		}
		if (glim[g])
			tfs_notice("device%s: limit %s: %s", gpu, c, src);
		else
			tfs_warn("device%s: no room at all: %s", gpu, src);
	}
	for (int t = TFS_TIER_HOST; t < TFS_TIER_COUNT; t++) {
		st_fmt_size(c, sizeof(c), lim[t]);
		if (lim[t])
			tfs_notice("%s: limit %s: %s",
				   tier_name((enum tfs_tier)t), c, srcs[t]);
		else
			tfs_warn("%s: no room at all: %s",
				 tier_name((enum tfs_tier)t), srcs[t]);
	}
	return 0;
}

int st_xt_limits(struct tier_store *s, const struct tfs_config *cfg,
		 char *err, size_t errlen)
{
	for (unsigned int i = 0; i < s->nx; i++) {
		const struct cfg_tier *ct = &cfg->tiers.t[i];
		struct st_xtier *x = &s->xt[i];
		char a[32], b[32], c[32], src[PATH_MAX + 160];
		char where[PATH_MAX + 64];
		uint64_t fs, free_b, lim;
		struct statvfs sv;

		cfg_key_where(cfg, "tiers", ct->name, where, sizeof(where));
		if (statvfs(x->path, &sv)) {
			int e = errno;

			snprintf(err, errlen, "%s: path '%s': %s", where,
				 x->path, strerror(e));
			return -e;
		}
		fs = (uint64_t)sv.f_blocks * sv.f_frsize;
		free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
		st_fmt_size(a, sizeof(a), free_b);
		st_fmt_size(b, sizeof(b), fs);
		if (set(&ct->limit)) {
			lim = cfg_size_resolve(&ct->limit, fs);
			if (!cfg->policy.overcommit && lim > free_b) {
				st_fmt_size(c, sizeof(c), lim);
				snprintf(err, errlen,
					 "%s: limit %s is more than the %s "
					 "free on '%s' (policy_overcommit=yes "
					 "allows it)",
					 where, c, a, x->path);
				return -EINVAL;
			}
			snprintf(src, sizeof(src), "from %s", where);
		} else {
			/* As the [disk] tier's default: half the
			 * filesystem, 5% of it left to others. */
			uint64_t keep = fs / 20;
			uint64_t room = free_b > keep ? free_b - keep : 0;

			lim = fs / 2;
			snprintf(src, sizeof(src),
				 "50%% of the %s filesystem of '%s'", b,
				 x->path);
			if (room < lim) {
				lim = room;
				st_fmt_size(c, sizeof(c), keep);
				snprintf(src, sizeof(src),
					 "the %s free on '%s' less %s (5%% of "
					 "its size) left to others",
					 a, x->path, c);
			}
		}
		pthread_mutex_lock(&s->lock);
		s->use[TFS_TIER_DISK + 1 + i].limit = lim;
		pthread_mutex_unlock(&s->lock);
		st_fmt_size(c, sizeof(c), lim);
		if (lim)
			tfs_notice("%s: limit %s: %s", x->name, c, src);
		else
			tfs_warn("%s: no room at all: %s", x->name, src);
	}
	return 0;
}
