// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * cfg_validate(): the checks that look at several keys, or at the machine
 * (the disk path against the mount point, the log file), after all keys are
 * set.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_int.h"
#include "config/log.h"

/* Validation */

/*
 * Make @path absolute and drop ".", ".." and repeated slashes without
 * touching the filesystem, for a mount point that realpath() cannot
 * resolve (a dead FUSE mount answers ENOTCONN).
 */
static char *lexical_path(const char *path)
{
	char *cwd = NULL, *buf, *out, *tok, *save;
	size_t n, len;

	if (path[0] != '/') {
		cwd = getcwd(NULL, 0);
		if (!cwd)
			return NULL;
	}
	if (asprintf(&buf, "%s/%s", cwd ? cwd : "", path) < 0) {
		free(cwd);
		return NULL;
	}
	free(cwd);
	len = strlen(buf) + 2;
	out = malloc(len);
	if (!out) {
		free(buf);
		return NULL;
	}
	n = 0;
	for (tok = strtok_r(buf, "/", &save); tok;
	     tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..")) {
			while (n > 0 && out[--n] != '/')
				;
			continue;
		}
		n += (size_t)snprintf(out + n, len - n, "/%s", tok);
	}
	if (!n)
		out[n++] = '/';
	out[n] = '\0';
	free(buf);
	return out;
}

/* True when @inner is @outer or below it; both absolute and canonical. */
static bool path_within(const char *inner, const char *outer)
{
	size_t n = strlen(outer);

	if (!strcmp(outer, "/"))
		return true;
	return !strncmp(inner, outer, n) && (inner[n] == '\0' || inner[n] == '/');
}

/*
 * @path (named @where in messages) must be a writable directory outside
 * @mountpoint (NULL: not checked). Its canonical path into *@real (NULL
 * without a mount point), for the caller to free.
 */
static int check_dir(const char *where, const char *path,
		     const char *mountpoint, char **real, char *err,
		     size_t errlen)
{
	char *mnt;
	struct stat st;
	int rc = 0, e;

	*real = NULL;
	if (stat(path, &st)) {
		e = errno;
		if (e == ENOENT)
			say(err, errlen, "%s: '%s' does not exist", where, path);
		else
			say(err, errlen, "%s: cannot use '%s': %s", where, path,
			    strerror(e));
		return -EINVAL;
	}
	if (!S_ISDIR(st.st_mode)) {
		say(err, errlen, "%s: '%s' is not a directory", where, path);
		return -EINVAL;
	}
	if (access(path, W_OK | X_OK)) {
		e = errno;
		say(err, errlen, "%s: '%s' is not writable: %s", where, path,
		    strerror(e));
		return -EINVAL;
	}
	if (!mountpoint)
		return 0;

	*real = realpath(path, NULL);
	if (!*real) {
		e = errno;
		say(err, errlen, "%s: cannot resolve '%s': %s", where, path,
		    strerror(e));
		return e == ENOMEM ? -ENOMEM : -EINVAL;
	}
	mnt = realpath(mountpoint, NULL);
	if (!mnt)
		mnt = lexical_path(mountpoint);
	if (!mnt) {
		say(err, errlen, "%s: out of memory", where);
		rc = -ENOMEM;
	} else if (path_within(*real, mnt)) {
		say(err, errlen, "%s: '%s' is inside the mount point '%s'",
		    where, path, mountpoint);
		rc = -EINVAL;
	}
	free(mnt);
	return rc;
}

/*
 * The [disk] path and every [tiers] path: each a writable directory outside
 * the mount point, no two the same directory (two tiers in one directory
 * would each count the other's files as the filesystem's use, and a
 * shared tier's neighbours would find a private one's files).
 */
static int check_tier_paths(const struct tfs_config *cfg,
			    const char *mountpoint, char *err, size_t errlen)
{
	const struct cfg_key *k = find_key("disk", "path");
	char where[PATH_MAX + 32], other[PATH_MAX + 32];
	char *real[CFG_MAX_TIERS + 1] = { NULL };
	unsigned int n = cfg->tiers.n + 1;
	int rc = 0;

	key_where(cfg, k, where, sizeof(where));
	if (!cfg->disk.path) {
		say(err, errlen, "%s: out of memory", where);
		return -ENOMEM;
	}
	for (unsigned int i = 0; !rc && i < n; i++) {
		const char *path = i ? cfg->tiers.t[i - 1].path : cfg->disk.path;

		if (i)
			tier_where(cfg, &cfg->tiers.t[i - 1], where,
				   sizeof(where));
		/* Without a mount point, paths are compared as given. */
		rc = check_dir(where, path, mountpoint, &real[i], err, errlen);
		for (unsigned int j = 0; !rc && j < i; j++) {
			const char *a = real[i] ? real[i] : path;
			const char *b = real[j] ? real[j] :
				j ? cfg->tiers.t[j - 1].path : cfg->disk.path;

			if (strcmp(a, b))
				continue;
			if (j)
				tier_where(cfg, &cfg->tiers.t[j - 1], other,
					   sizeof(other));
			else
				key_where(cfg, k, other, sizeof(other));
			say(err, errlen, "%s: '%s' is the directory of %s "
					 "too: every tier needs its own",
			    where, path, other);
			rc = -EINVAL;
		}
	}
	for (unsigned int i = 0; i < n; i++)
		free(real[i]);
	if (rc || !cfg->tiers.n || cfg->disk.persist == CFG_PERSIST_NO)
		return rc;
	tier_where(cfg, &cfg->tiers.t[0], where, sizeof(where));
	say(err, errlen, "%s: tiers below disk do not keep files across "
			 "restarts; they cannot be used with [disk] persist",
	    where);
	return -EINVAL;
}

static int check_log_file(const struct tfs_config *cfg, char *err,
			  size_t errlen)
{
	char where[PATH_MAX + 32], why[PATH_MAX + 256];
	int fd;

	if (!cfg->log.file)
		return 0;
	fd = tfs_log_file_open(cfg->log.file, why, sizeof(why));
	if (fd < 0) {
		key_where(cfg, find_key("log", "file"), where, sizeof(where));
		say(err, errlen, "%s: %s", where, why);
		return -EINVAL;
	}
	close(fd);
	return 0;
}

int cfg_gpus_resolve(const struct tfs_config *cfg, int count,
		     int ord[CFG_MAX_GPUS], unsigned int *def, char *err,
		     size_t errlen)
{
	const struct cfg_key *kl = find_key("device", "gpus");
	const struct cfg_key *kg = find_key("device", "gpu");
	const struct cfg_gpus *g = &cfg->device.gpus;
	bool gpu_set = cfg->origin[key_index(kg)] != ORIGIN_DEFAULT;
	char where[PATH_MAX + 32];
	unsigned int i, n = 0;

	*def = 0;
	if (!g->all && !g->n) {
		if (cfg->device.gpu >= count) {
			key_where(cfg, kg, where, sizeof(where));
			say(err, errlen, "%s: no GPU %d, the machine has %d",
			    where, cfg->device.gpu, count);
			return -EINVAL;
		}
		ord[0] = cfg->device.gpu;
		return 1;
	}
	key_where(cfg, kl, where, sizeof(where));
	if (g->all) {
		for (n = 0; n < CFG_MAX_GPUS && (int)n < count; n++)
			ord[n] = (int)n;
	} else {
		for (n = 0; n < g->n; n++) {
			if (g->ord[n] >= count) {
				say(err, errlen, "%s: no GPU %d, the machine "
						 "has %d", where, g->ord[n],
				    count);
				return -EINVAL;
			}
			ord[n] = g->ord[n];
		}
	}
	if (!n) {
		say(err, errlen, "%s: the machine has no GPU", where);
		return -EINVAL;
	}
	if (!gpu_set)
		return (int)n;
	for (i = 0; i < n; i++) {
		if (ord[i] == cfg->device.gpu) {
			*def = i;
			return (int)n;
		}
	}
	key_where(cfg, kg, where, sizeof(where));
	say(err, errlen, "%s: GPU %d is not among the gpus listed",
	    where, cfg->device.gpu);
	return -EINVAL;
}

/* @v as "64K", "1.5M": short, for messages about sizes. */
static void size_words(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	double d = (double)v;
	int u = -1;

	while (d >= 1024 && u < 3) {
		d /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu bytes", (unsigned long long)v);
	else if (d == (double)(uint64_t)d)
		snprintf(buf, len, "%llu%c", (unsigned long long)d, units[u]);
	else
		snprintf(buf, len, "%.1f%c", d, units[u]);
}

/*
 * A tier holds whole chunks: a limit below one cannot take a file's first
 * chunk, and the mount would refuse every file past its first page.
 */
static int check_limits(const struct tfs_config *cfg, char *err,
			size_t errlen)
{
	static const char *const sect[] = { "device", "host", "disk" };
	const struct cfg_size *lim[] = { &cfg->device.limit, &cfg->host.limit,
					 &cfg->disk.limit };
	char where[PATH_MAX + 32], a[32], b[32];

	for (size_t i = 0; i < sizeof(sect) / sizeof(sect[0]); i++) {
		if (lim[i]->is_percent || !lim[i]->bytes ||
		    lim[i]->bytes >= cfg->disk.chunk_size)
			continue;
		key_where(cfg, find_key(sect[i], "limit"), where,
			  sizeof(where));
		size_words(lim[i]->bytes, a, sizeof(a));
		size_words(cfg->disk.chunk_size, b, sizeof(b));
		say(err, errlen, "%s: %s is less than one chunk (%s, "
				 "disk_chunk_size), the least a tier holds",
		    where, a, b);
		return -EINVAL;
	}
	return 0;
}

/* True when keys @a and @b got their values from the same place: both
 * from the config file, or both from -o. */
static bool same_source(const struct tfs_config *cfg, const struct cfg_key *a,
			const struct cfg_key *b)
{
	uint32_t oa = cfg->origin[key_index(a)], ob = cfg->origin[key_index(b)];

	if (oa == ORIGIN_DEFAULT || ob == ORIGIN_DEFAULT)
		return false;
	return (oa == ORIGIN_OPTION) == (ob == ORIGIN_OPTION);
}

/*
 * backend = none and a setting of the device tier it turns off, given
 * together: one of them is a mistake, and silently mounting without a GPU
 * is the worse guess. A -o device_backend=none over a config file that
 * sets the device up is a deliberate override, and passes.
 */
static int check_device_off(const struct tfs_config *cfg, char *err,
			    size_t errlen)
{
	static const char *const keys[] = { "limit", "gpus", "gpu",
					    "reserve", "user_share",
					    "poll_ms" };
	const struct cfg_key *kb = find_key("device", "backend");
	char where[PATH_MAX + 32], bwhere[PATH_MAX + 32];

	if (strcmp(cfg->device.backend, "none"))
		return 0;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const struct cfg_key *k = find_key("device", keys[i]);

		if (!same_source(cfg, k, kb))
			continue;
		key_where(cfg, k, where, sizeof(where));
		if (cfg->origin[key_index(kb)] == ORIGIN_OPTION)
			snprintf(bwhere, sizeof(bwhere), "-o device_backend=none");
		else if (cfg->origin[key_index(kb)] == ORIGIN_SET ||
			 !cfg->config_file)
			snprintf(bwhere, sizeof(bwhere), "device_backend=none");
		else
			snprintf(bwhere, sizeof(bwhere), "backend = none on line %u",
				 cfg->origin[key_index(kb)]);
		say(err, errlen, "%s: set for a device tier, but %s turns it "
				 "off: drop one of them", where, bwhere);
		return -EINVAL;
	}
	return 0;
}

int cfg_validate(const struct tfs_config *cfg, const char *mountpoint,
		 char *err, size_t errlen)
{
	const struct cfg_key *hw = find_key("policy", "high_watermark");
	const struct cfg_key *tg = find_key("policy", "target");
	char where[PATH_MAX + 32];
	int rc;

	rc = check_tier_paths(cfg, mountpoint, err, errlen);
	if (rc)
		return rc;
	rc = check_limits(cfg, err, errlen);
	if (rc)
		return rc;
	rc = check_device_off(cfg, err, errlen);
	if (rc)
		return rc;
	if (cfg->disk.name[0] && cfg->disk.persist == CFG_PERSIST_NO) {
		key_where(cfg, find_key("disk", "name"), where, sizeof(where));
		say(err, errlen, "%s: '%s' names a persistent spill directory; "
				 "set persist = yes or close too",
		    where, cfg->disk.name);
		return -EINVAL;
	}
	if (cfg->device.gpus.n) {
		int ord[CFG_MAX_GPUS];
		unsigned int def;

		/* The machine's count is for the backend to check. */
		rc = cfg_gpus_resolve(cfg, CFG_GPU_ORD_MAX + 1, ord, &def, err,
				      errlen);
		if (rc < 0)
			return rc;
	}
	if (cfg->policy.target >= cfg->policy.high_watermark) {
		/* Blame the one the operator set, the target when both. */
		if (cfg->origin[key_index(tg)] == ORIGIN_DEFAULT &&
		    cfg->origin[key_index(hw)] != ORIGIN_DEFAULT) {
			key_where(cfg, hw, where, sizeof(where));
			say(err, errlen, "%s: %g must be above the target (%g)",
			    where, cfg->policy.high_watermark,
			    cfg->policy.target);
		} else {
			key_where(cfg, tg, where, sizeof(where));
			say(err, errlen, "%s: %g must be below the high "
					 "watermark (%g)",
			    where, cfg->policy.target,
			    cfg->policy.high_watermark);
		}
		return -EINVAL;
	}
	return check_log_file(cfg, err, errlen);
}
