// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * One table, keys[], describes every setting: where it lives in struct
 * tfs_config, how its value is parsed and checked, its default and its help.
 * cfg_defaults(), cfg_set(), cfg_set_option(), cfg_is_option() and
 * cfg_print_help() all walk it, so a new key is one new row.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#include "config/config.h"
#include "config/config_int.h"
#include "config/log.h"

static const char *const backend_names[] = { "auto", "cuda", "sim", "none",
					     NULL };
static const char *const eviction_names[] = { "lru", NULL };
static const char *const compression_names[] = {
	[CFG_COMPRESS_LZ4] = "lz4",
	[CFG_COMPRESS_NONE] = "none",
	[CFG_COMPRESS_NONE + 1] = NULL,
};
static const char *const persist_names[] = {
	[CFG_PERSIST_NO] = "no",
	[CFG_PERSIST_YES] = "yes",
	[CFG_PERSIST_CLOSE] = "close",
	[CFG_PERSIST_CLOSE + 1] = NULL,
};
static const char *const passthrough_names[] = {
	[CFG_PASSTHROUGH_OFF] = "off",
	[CFG_PASSTHROUGH_AUTO] = "auto",
	[CFG_PASSTHROUGH_ON] = "on",
	[CFG_PASSTHROUGH_ON + 1] = NULL,
};

static const char *const unspill_names[] = {
	[CFG_UNSPILL_DEVICE] = "device",
	[CFG_UNSPILL_HOST] = "host",
	[CFG_UNSPILL_NONE] = "none",
	[CFG_UNSPILL_NONE + 1] = NULL,
};

static const char *const write_names[] = {
	[CFG_WRITE_BACK] = "write_back",
	[CFG_WRITE_THROUGH] = "write_through",
	[CFG_WRITE_THROUGH + 1] = NULL,
};

#define KiB 1024ull
#define MiB (1024ull * KiB)

static const struct cfg_key keys[] = {
	{ "device", "backend", CFG_CHOICE_STR, 0, FIELD(device, backend),
	  .choices = backend_names, .def = "auto",
	  .arg = "auto|cuda|sim|none",
	  .help = "device tier backend; auto: cuda when a GPU is usable" },
	{ "device", "gpu", CFG_INT, 0, FIELD(device, gpu), .max = INT_MAX,
	  .def = "0", .arg = "N",
	  .help = "CUDA device ordinal; with gpus, the default GPU" },
	{ "device", "gpus", CFG_GPUS, 0, FIELD(device, gpus),
	  .max = CFG_GPU_ORD_MAX, .def = NULL, .arg = "all|N:N...",
	  .help = "GPUs to use, a device tier each: all, or ordinals (0,1 in "
		  "the file, 0:1 in -o; default: the one gpu names)" },
	{ "device", "limit", CFG_SIZE,
	  CFG_F_PERCENT | CFG_F_NONZERO | CFG_F_AMOUNT,
	  FIELD(device, limit), .max = UINT64_MAX, .def = NULL,
	  .arg = "SIZE|N%",
	  .help = "device tier limit (default: 80% of free GPU memory, "
		  "sim: 1G)" },
	{ "device", "reserve", CFG_SIZE, CFG_F_PERCENT | CFG_F_AMOUNT,
	  FIELD(device, reserve),
	  .max = UINT64_MAX, .def = "10%", .arg = "SIZE|N%",
	  .help = "device memory kept free for other processes: tierfs "
		  "spills when they leave less free, % of the GPU's memory" },
	{ "device", "poll_ms", CFG_UINT, 0, FIELD(device, poll_ms), .min = 10,
	  .max = 60000, .def = "100", .arg = "MS",
	  .help = "how often free device memory is checked against the "
		  "reserve, in milliseconds" },
	{ "device", "user_share", CFG_SIZE, CFG_F_PERCENT | CFG_F_AMOUNT,
	  FIELD(device, user_share), .max = UINT64_MAX, .def = "50%",
	  .arg = "SIZE|N%",
	  .help = "device bytes one user's pins and exports may hold, % of "
		  "the device limit; 0: no share" },
	{ "device", "user_exports", CFG_UINT, 0, FIELD(device, user_exports),
	  .max = 1u << 20, .def = "1024", .arg = "N",
	  .help = "live exports (maps) one user may hold; 0: any number" },
	{ "host", "limit", CFG_SIZE,
	  CFG_F_PERCENT | CFG_F_NONZERO | CFG_F_AMOUNT,
	  FIELD(host, limit), .max = UINT64_MAX, .def = NULL,
	  .arg = "SIZE|N%",
	  .help = "host tier limit, % of RAM (default: 25% of RAM, at most "
		  "half the memory cgroup's limit)" },
	{ "host", "pinned", CFG_BOOL, 0, FIELD(host, pinned), .def = "yes",
	  .arg = "yes|no", .help = "page-lock host copies when CUDA is used" },
	{ "host", "user_share", CFG_SIZE, CFG_F_PERCENT,
	  FIELD(host, user_share), .max = UINT64_MAX, .def = "50%",
	  .arg = "SIZE|N%",
	  .help = "host bytes one user's pins may hold, % of the host limit; "
		  "0: no share" },
	{ "disk", "path", CFG_PATH, 0, FIELD(disk, path), .def = "/var/tmp",
	  .arg = "DIR", .help = "where the disk tier keeps its spill files" },
	{ "disk", "limit", CFG_SIZE,
	  CFG_F_PERCENT | CFG_F_NONZERO | CFG_F_AMOUNT,
	  FIELD(disk, limit), .max = UINT64_MAX, .def = NULL,
	  .arg = "SIZE|N%",
	  .help = "disk tier limit, % of the filesystem (default: 50% of it, "
		  "at most its free space less 5% of its size)" },
	{ "disk", "compression", CFG_CHOICE_ENUM, 0, FIELD(disk, compression),
	  .choices = compression_names, .def = "lz4", .arg = "lz4|none",
	  .help = "how spill chunks are compressed" },
	{ "disk", "chunk_size", CFG_SIZE32, CFG_F_POW2, FIELD(disk, chunk_size),
	  .min = 64 * KiB, .max = 64 * MiB, .def = "1M", .arg = "SIZE",
	  .help = "spill chunk size, a power of two from 64K to 64M" },
	{ "disk", "persist", CFG_CHOICE_ENUM, 0, FIELD(disk, persist),
	  .choices = persist_names, .def = "no", .arg = "no|yes|close",
	  .help = "keep the files across restarts and crashes: fsync is "
		  "durable; close: the last close of a file too" },
	{ "disk", "name", CFG_NAME, 0, FIELD(disk, name), .def = NULL,
	  .arg = "NAME",
	  .help = "with persist, name the spill directory tierfs-persist.NAME "
		  "(default: after the mount point)" },
	{ "policy", "eviction", CFG_CHOICE_STR, 0, FIELD(policy, eviction),
	  .choices = eviction_names, .def = "lru", .arg = "lru",
	  .help = "which buffers spill first" },
	{ "policy", "unspill", CFG_CHOICE_ENUM, 0, FIELD(policy, unspill),
	  .choices = unspill_names, .def = "device", .arg = "device|host|none",
	  .help = "how high a read brings a spilled buffer back" },
	{ "policy", "overcommit", CFG_BOOL, 0, FIELD(policy, overcommit),
	  .def = "no", .arg = "no|yes",
	  .help = "accept limits above what the machine has (RAM, the memory "
		  "cgroup, device memory, free disk)" },
	{ "policy", "high_watermark", CFG_FRACTION, 0,
	  FIELD(policy, high_watermark), .def = "0.95", .arg = "FRACTION",
	  .help = "background spilling starts above this share of a limit" },
	{ "policy", "target", CFG_FRACTION, 0, FIELD(policy, target),
	  .def = "0.85", .arg = "FRACTION",
	  .help = "background spilling stops at this share of a limit" },
	{ "policy", "promote", CFG_BOOL, 0, FIELD(policy, promote),
	  .def = "no", .arg = "yes|no",
	  .help = "bring the hottest buffers pushed out of a tier back up "
		  "when it has room again, never pushing anything out" },
	{ "policy", "promote_rate", CFG_SIZE, CFG_F_NONZERO,
	  FIELD(policy, promote_rate), .max = UINT64_MAX, .def = "256M",
	  .arg = "SIZE",
	  .help = "most bytes promote moves up per second" },
	{ "policy", "write", CFG_CHOICE_ENUM, 0, FIELD(policy, write),
	  .choices = write_names, .def = "write_back",
	  .arg = "write_back|write_through",
	  .help = "write_through: a clean disk copy soon after a written "
		  "file's last close, so that evicting it writes nothing" },
	{ "policy", "admission", CFG_BOOL, 0, FIELD(policy, admission),
	  .def = "no", .arg = "yes|no",
	  .help = "a read brings a file up to a full device tier only when "
		  "it is read more often than what it would push out" },
	{ "policy", "prefetch_queue", CFG_UINT, 0,
	  FIELD(policy, prefetch_queue), .min = 1, .max = 1 << 20,
	  .def = "1024", .arg = "N",
	  .help = "most files prefetches keep queued; a full queue answers "
		  "EAGAIN" },
	{ "fs", "threads", CFG_UINT, 0, FIELD(fs, threads), .max = 256,
	  .def = "0", .arg = "N",
	  .help = "most FUSE worker threads; 0: one per CPU, at least 2" },
	{ "fs", "read_ahead_kb", CFG_UINT, 0, FIELD(fs, read_ahead_kb),
	  .max = 65536, .def = "1024", .arg = "N",
	  .help = "kernel read-ahead of the mount in KiB; 0: leave it" },
	{ "fs", "metadata_limit", CFG_SIZE,
	  CFG_F_PERCENT | CFG_F_NONZERO | CFG_F_AMOUNT,
	  FIELD(fs, metadata_limit), .min = CFG_METADATA_MIN,
	  .max = UINT64_MAX, .def = "10%",
	  .arg = "SIZE|N%",
	  .help = "memory for inodes, names and xattrs, % of the host limit" },
	{ "fs", "metadata_user_share", CFG_SIZE, CFG_F_PERCENT,
	  FIELD(fs, metadata_user_share), .max = UINT64_MAX, .def = "50%",
	  .arg = "SIZE|N%",
	  .help = "what one user's inodes, names and xattrs may take, % of "
		  "metadata_limit; 0: no share" },
	{ "fs", "writeback_cache", CFG_BOOL, 0, FIELD(fs, writeback_cache),
	  .def = "no", .arg = "yes|no",
	  .help = "the kernel caches writes and writes them back later "
		  "(GPU commits then leave the mtime as it was)" },
	{ "fs", "passthrough", CFG_CHOICE_ENUM, 0, FIELD(fs, passthrough),
	  .choices = passthrough_names, .def = "off", .arg = "off|auto|on",
	  .help = "the kernel reads host-tier files opened read-only from a "
		  "replica, without asking the daemon; on: warn when refused" },
	{ "log", "file", CFG_PATH, 0, FIELD(log, file), .def = NULL,
	  .arg = "FILE",
	  .help = "append the daemon's messages to FILE (default: the journal "
		  "under systemd, else syslog, else " TFS_DEFAULT_LOG ")" },
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))
_Static_assert(NKEYS <= CFG_MAX_KEYS, "raise CFG_MAX_KEYS");
_Static_assert(sizeof(enum cfg_compression) == sizeof(int) &&
		       sizeof(enum cfg_unspill) == sizeof(int) &&
		       sizeof(enum cfg_write) == sizeof(int) &&
		       sizeof(enum cfg_persist) == sizeof(int) &&
		       sizeof(enum cfg_passthrough) == sizeof(int),
	       "CFG_CHOICE_ENUM stores an int");

/* "tiers" has no row in keys[]: its keys are the tiers' names (tiers.c). */
static const char *const sections[] = { "device", "host", "disk", "tiers",
					"policy", "fs", "log" };
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

static void *field(struct tfs_config *cfg, const struct cfg_key *k)
{
	return (char *)cfg + k->offset;
}

void
say(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static bool section_known(const char *section)
{
	size_t i;

	for (i = 0; i < NSECTIONS; i++)
		if (!strcasecmp(section, sections[i]))
			return true;
	return false;
}

const struct cfg_key *find_key(const char *section, const char *name)
{
	size_t i;

	for (i = 0; i < NKEYS; i++)
		if (!strcasecmp(keys[i].section, section) &&
		    !strcasecmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* "section_key", compared up to @len bytes of @option. */
static const struct cfg_key *find_option(const char *option, size_t len)
{
	size_t i, sl;

	for (i = 0; i < NKEYS; i++) {
		sl = strlen(keys[i].section);
		if (len == sl + 1 + strlen(keys[i].name) &&
		    !strncasecmp(option, keys[i].section, sl) &&
		    option[sl] == '_' &&
		    !strncasecmp(option + sl + 1, keys[i].name, len - sl - 1))
			return &keys[i];
	}
	return NULL;
}

/* Append the keys of @section as "a, b, c" to @buf. */
static void list_keys(char *buf, size_t len, const char *section,
		      bool as_options)
{
	size_t i, used = 0;
	int n;

	buf[0] = '\0';
	for (i = 0; i < NKEYS && used < len; i++) {
		if (strcasecmp(keys[i].section, section))
			continue;
		n = snprintf(buf + used, len - used, "%s%s%s%s",
			     used ? ", " : "", as_options ? keys[i].section : "",
			     as_options ? "_" : "", keys[i].name);
		if (n < 0)
			break;
		used += (size_t)n;
	}
}

static void list_choices(char *buf, size_t len, const char *const *choices)
{
	size_t i, used = 0;
	int n;

	buf[0] = '\0';
	for (i = 0; choices[i] && used < len; i++) {
		n = snprintf(buf + used, len - used, "%s%s",
			     !i ? "" : choices[i + 1] ? ", " : " or ",
			     choices[i]);
		if (n < 0)
			break;
		used += (size_t)n;
	}
}

/* @v as the shortest exact "64K", "1M", "4096". */
static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	unsigned int i = 0;

	while (i < 4 && v && !(v & 1023)) {
		v >>= 10;
		i++;
	}
	if (i)
		snprintf(buf, len, "%llu%c", (unsigned long long)v,
			 units[i - 1]);
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

/* @s without the blanks around it, in a static buffer (for messages). */
static const char *trimmed(const char *s)
{
	static __thread char buf[32];
	size_t n;

	while (isspace((unsigned char)*s))
		s++;
	n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	snprintf(buf, sizeof(buf), "%.*s", (int)n, s);
	return buf;
}

/* True when @s is digits alone (blanks around them aside): no suffix. */
static bool bare_number(const char *s)
{
	s = trimmed(s);
	return *s && strspn(s, "0123456789") == strlen(s);
}

static int parse_choice(const struct cfg_key *k, const char *s, int *out,
			char *why, size_t whylen)
{
	char list[128];
	int i;

	for (i = 0; k->choices[i]; i++) {
		if (!strcasecmp(s, k->choices[i])) {
			*out = i;
			return 0;
		}
	}
	list_choices(list, sizeof(list), k->choices);
	if (!k->choices[1])
		say(why, whylen, "'%s' is not supported, only %s is", s, list);
	else
		say(why, whylen, "'%s' is not one of %s", s, list);
	return -EINVAL;
}


/* Parse @value into the field of @k; on error @cfg is unchanged. */
static int key_set(struct tfs_config *cfg, const struct cfg_key *k,
		   const char *value, char *why, size_t whylen)
{
	void *f = field(cfg, k);
	struct cfg_size sz;
	uint64_t v;
	double d;
	bool b;
	char *path = NULL;
	int rc, idx;

	if (!value) {
		say(why, whylen, "missing value");
		return -EINVAL;
	}
	switch (k->type) {
	case CFG_CHOICE_STR:
	case CFG_CHOICE_ENUM:
		rc = parse_choice(k, value, &idx, why, whylen);
		if (rc)
			return rc;
		if (k->type == CFG_CHOICE_ENUM)
			*(int *)f = idx;
		else
			snprintf(f, k->size, "%s", k->choices[idx]);
		return 0;
	case CFG_BOOL:
		rc = parse_bool(value, &b, why, whylen);
		if (!rc)
			*(bool *)f = b;
		return rc;
	case CFG_INT:
	case CFG_UINT:
		rc = parse_uint(value, k->min, k->max, &v, why, whylen);
		if (rc)
			return rc;
		if (k->type == CFG_INT)
			*(int *)f = (int)v;
		else
			*(unsigned int *)f = (unsigned int)v;
		return 0;
	case CFG_SIZE:
	case CFG_SIZE32:
		rc = parse_size(value, k->flags & CFG_F_PERCENT, &sz, why,
				whylen);
		if (rc)
			return rc;
		if (!sz.is_percent && !sz.bytes && (k->flags & CFG_F_NONZERO)) {
			say(why, whylen, "'%s': a limit of zero is not allowed",
			    value);
			return -EINVAL;
		}
		if ((k->flags & CFG_F_AMOUNT) && !sz.is_percent && sz.bytes &&
		    sz.bytes < CFG_BARE_MIN && bare_number(value)) {
			say(why, whylen, "'%s' is %llu bytes: did you mean "
					 "'%sM' or '%sG'? (a size without K, M, "
					 "G or T is in bytes)",
			    value, (unsigned long long)sz.bytes, trimmed(value),
			    trimmed(value));
			return -EINVAL;
		}
		if (!sz.is_percent && sz.bytes < k->min && k->max == UINT64_MAX) {
			char lo[24];

			say(why, whylen, "'%s' is too small, at least %s", value,
			    human(k->min, lo, sizeof(lo)));
			return -EINVAL;
		}
		if (!sz.is_percent && (sz.bytes < k->min || sz.bytes > k->max)) {
			char lo[24], hi[24];

			say(why, whylen, "'%s' is out of range, must be %s to %s",
			    value, human(k->min, lo, sizeof(lo)),
			    human(k->max, hi, sizeof(hi)));
			return -EINVAL;
		}
		if ((k->flags & CFG_F_POW2) && (sz.bytes & (sz.bytes - 1))) {
			say(why, whylen, "'%s' is not a power of two", value);
			return -EINVAL;
		}
		if (k->type == CFG_SIZE32)
			*(uint32_t *)f = (uint32_t)sz.bytes;
		else
			*(struct cfg_size *)f = sz;
		return 0;
	case CFG_FRACTION:
		rc = parse_fraction(value, &d, why, whylen);
		if (!rc)
			*(double *)f = d;
		return rc;
	case CFG_PATH:
		rc = parse_path(value, &path, why, whylen);
		if (rc)
			return rc;
		free(*(char **)f);
		*(char **)f = path;
		return 0;
	case CFG_GPUS:
		return parse_gpus(value, f, why, whylen);
	case CFG_NAME:
		if (!*value || strlen(value) >= k->size || value[0] == '.' ||
		    strspn(value, "abcdefghijklmnopqrstuvwxyz"
				  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
			    strlen(value)) {
			say(why, whylen, "'%s' is not a name: 1 to %zu letters, "
			    "digits, '.', '_' or '-', not starting with '.'",
			    value, k->size - 1);
			return -EINVAL;
		}
		snprintf(f, k->size, "%s", value);
		return 0;
	}
	say(why, whylen, "internal error: bad key type");
	return -EINVAL;
}

size_t key_index(const struct cfg_key *k)
{
	return (size_t)(k - keys);
}

void cfg_defaults(struct tfs_config *cfg)
{
	char why[160];
	size_t i;

	memset(cfg, 0, sizeof(*cfg));
	for (i = 0; i < NKEYS; i++) {
		/* Only strdup() can fail here; cfg_validate() reports it. */
		if (keys[i].def)
			key_set(cfg, &keys[i], keys[i].def, why, sizeof(why));
	}
}

void cfg_free(struct tfs_config *cfg)
{
	size_t i;

	for (i = 0; i < NKEYS; i++) {
		if (keys[i].type == CFG_PATH) {
			free(*(char **)field(cfg, &keys[i]));
			*(char **)field(cfg, &keys[i]) = NULL;
		}
	}
	tiers_clear(cfg);
	free(cfg->config_file);
	cfg->config_file = NULL;
}

/* cfg_set() with the origin to remember and the message without prefix
 * beyond the key. */
static int set_at(struct tfs_config *cfg, const char *section,
		  const char *key, const char *value, uint32_t origin,
		  char *err, size_t errlen)
{
	const struct cfg_key *k;
	char why[1024], list[160];
	int rc;

	if (!section_known(section)) {
		if (!*section)
			say(err, errlen, "%s: key outside any section, put it "
					 "under [device], [host], [disk], "
					 "[tiers], [policy], [fs] or [log]",
			    key);
		else
			say(err, errlen, "%s: unknown section '[%s]'", key,
			    section);
		return -ENOENT;
	}
	if (!strcasecmp(section, "tiers")) {
		rc = tiers_set_at(cfg, key, value, origin, why, sizeof(why));
		if (rc)
			say(err, errlen, "%s: %s", key, why);
		return rc;
	}
	k = find_key(section, key);
	if (!k) {
		list_keys(list, sizeof(list), section, false);
		say(err, errlen, "%s: unknown key in [%s] (known: %s)", key,
		    section, list);
		return -ENOENT;
	}
	rc = key_set(cfg, k, value, why, sizeof(why));
	if (rc) {
		say(err, errlen, "%s: %s", k->name, why);
		return rc;
	}
	cfg->origin[key_index(k)] = origin;
	return 0;
}

int cfg_set(struct tfs_config *cfg, const char *section, const char *key,
	    const char *value, char *err, size_t errlen)
{
	return set_at(cfg, section, key, value, ORIGIN_SET, err, errlen);
}

int cfg_set_option(struct tfs_config *cfg, const char *option,
		   const char *value, char *err, size_t errlen)
{
	const struct cfg_key *k = find_option(option, strlen(option));
	char why[1024], list[200];
	size_t i, sl;
	int rc;

	if (!strcasecmp(option, "tiers"))
		return cfg_tiers_set_list(cfg, value, err, errlen);
	if (!strncasecmp(option, "tiers_", 6)) {
		rc = tiers_set_at(cfg, option + 6, value, ORIGIN_OPTION, why,
				  sizeof(why));
		if (rc)
			say(err, errlen, "-o %s: %s", option, why);
		return rc;
	}
	if (!k) {
		for (i = 0; i < NSECTIONS; i++) {
			sl = strlen(sections[i]);
			if (!strncasecmp(option, sections[i], sl) &&
			    option[sl] == '_')
				break;
		}
		if (i < NSECTIONS) {
			list_keys(list, sizeof(list), sections[i], true);
			say(err, errlen, "-o %s: unknown key (known: %s)",
			    option, list);
		} else {
			say(err, errlen, "-o %s: unknown key, options are "
					 "section_key as in tierfs.conf(5)",
			    option);
		}
		return -ENOENT;
	}
	rc = key_set(cfg, k, value, why, sizeof(why));
	if (rc) {
		say(err, errlen, "-o %s_%s: %s", k->section, k->name, why);
		return rc;
	}
	cfg->origin[key_index(k)] = ORIGIN_OPTION;
	return 0;
}

/* -o tiers=LIST, or -o tiers_NAME=SPEC for a NAME of 1 or more bytes. */
static bool tiers_option(const char *option, size_t len)
{
	return (len == 5 && !strncasecmp(option, "tiers", 5)) ||
	       (len > 6 && !strncasecmp(option, "tiers_", 6));
}

bool cfg_is_option(const char *option)
{
	size_t len = strcspn(option, "=");

	return find_option(option, len) != NULL || tiers_option(option, len);
}

bool cfg_owns_option(const char *option)
{
	size_t i, sl;

	if (cfg_is_option(option))
		return true;
	for (i = 0; i < NSECTIONS; i++) {
		sl = strlen(sections[i]);
		if (!strncasecmp(option, sections[i], sl) && option[sl] == '_')
			return true;
	}
	return false;
}

/* Longer names are never typos of a known option. */
#define SUGGEST_MAX 64

/*
 * Optimal string alignment distance, case-insensitive: insertions,
 * deletions, substitutions and swaps of neighbours each cost one. Both
 * strings are at most SUGGEST_MAX bytes.
 */
static size_t edit_distance(const char *a, size_t la, const char *b,
			    size_t lb)
{
	unsigned char d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];
	size_t i, j, best;

	for (i = 0; i <= la; i++)
		d[i][0] = (unsigned char)i;
	for (j = 0; j <= lb; j++)
		d[0][j] = (unsigned char)j;
	for (i = 1; i <= la; i++) {
		for (j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);

			best = (size_t)d[i - 1][j - 1] + (ca != cb);
			if ((size_t)d[i - 1][j] + 1 < best)
				best = (size_t)d[i - 1][j] + 1;
			if ((size_t)d[i][j - 1] + 1 < best)
				best = (size_t)d[i][j - 1] + 1;
			if (i > 1 && j > 1 &&
			    ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb &&
			    (size_t)d[i - 2][j - 2] + 1 < best)
				best = (size_t)d[i - 2][j - 2] + 1;
			d[i][j] = (unsigned char)best;
		}
	}
	return d[la][lb];
}

/* Keep @name in @buf when it is closer to @word than the best so far. */
static void suggest_one(const char *word, size_t wl, const char *name,
			size_t *best, char *buf, size_t len)
{
	size_t nl = strcspn(name, "="), d;

	if (nl > SUGGEST_MAX)
		return;
	d = edit_distance(word, wl, name, nl);
	if (d < *best) {
		*best = d;
		snprintf(buf, len, "%.*s", (int)nl, name);
	}
}

const char *cfg_suggest(const char *word, const char *const *extra,
			size_t nextra, char *buf, size_t len)
{
	char opt[SUGGEST_MAX + 1];
	size_t wl, i, best = SIZE_MAX, limit;

	if (!word || !buf || !len)
		return NULL;
	wl = strcspn(word, "=");
	if (!wl || wl > SUGGEST_MAX)
		return NULL;
	for (i = 0; i < NKEYS; i++) {
		snprintf(opt, sizeof(opt), "%s_%s", keys[i].section,
			 keys[i].name);
		suggest_one(word, wl, opt, &best, buf, len);
	}
	suggest_one(word, wl, "tiers", &best, buf, len);
	for (i = 0; i < nextra; i++)
		suggest_one(word, wl, extra[i], &best, buf, len);
	/* "foo" is not a typo of "ro", nor "x" of "d". */
	limit = wl / 3 ? wl / 3 : 1;
	if (best > limit || best >= wl)
		return NULL;
	return buf;
}

void cfg_print_help(FILE *out, int indent)
{
	size_t i;

	for (i = 0; i < NKEYS; i++) {
		if (!strcmp(keys[i].section, "policy") &&
		    !strcmp(keys[i].name, "eviction")) {
			/* [tiers] comes between [disk] and [policy], as in
			 * the file. */
			fprintf(out, "%*s-o tiers_NAME=KIND:PATH[:LIMIT]\n%*s"
				     "a disk-kind tier below disk, in the "
				     "order given, named disk:NAME; KIND disk "
				     "or shared\n",
				indent, "", indent + 4, "");
			fprintf(out, "%*s-o tiers=NAME=KIND:PATH[:LIMIT]+...\n"
				     "%*sall of them at once, replacing the "
				     "config file's\n",
				indent, "", indent + 4, "");
		}
		fprintf(out, "%*s-o %s_%s=%s\n%*s%s", indent, "",
			keys[i].section, keys[i].name, keys[i].arg, indent + 4,
			"", keys[i].help);
		if (keys[i].def && !strstr(keys[i].help, "default"))
			fprintf(out, " (default: %s)", keys[i].def);
		fputc('\n', out);
	}
}

/* The config file */

struct file_ctx {
	struct tfs_config *cfg;
	FILE *f;
	const char *path;
	char *line; /* getline()'s buffer */
	size_t cap;
	uint32_t lineno;
	char section[64]; /* as the reader last saw it, for long lines */
	char *err;
	size_t errlen;
	uint32_t err_line; /* first bad line, 0 while none */
	int rc;
	/* The line that set each key (key_index()), 0 while none has. */
	uint32_t seen[CFG_MAX_KEYS];
};

static __attribute__((format(printf, 2, 3))) void
file_error(struct file_ctx *ctx, const char *fmt, ...)
{
	char msg[1280];
	va_list ap;

	if (ctx->err_line)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	say(ctx->err, ctx->errlen, "%s:%u: %s", ctx->path, ctx->lineno, msg);
	ctx->err_line = ctx->lineno;
	ctx->rc = -EINVAL;
}

static void file_set(struct file_ctx *ctx, const char *section,
		     const char *name, const char *value)
{
	const struct cfg_key *k;
	char msg[1280];
	int rc;

	if (!*name) {
		file_error(ctx, "missing key before '='");
		return;
	}
	/*
	 * A key given twice is ambiguous: which one did the operator mean?
	 * Taking the last, as inih would, once hid a limit two screens up.
	 */
	k = section_known(section) ? find_key(section, name) : NULL;
	if (k && ctx->seen[key_index(k)]) {
		file_error(ctx, "%s: set again in [%s], first on line %u; "
				"keep one", k->name, k->section,
			   ctx->seen[key_index(k)]);
		return;
	}
	rc = set_at(ctx->cfg, section, name, value, ctx->lineno, msg,
		    sizeof(msg));
	if (rc) {
		file_error(ctx, "%s", msg);
		/* -ENOENT would read as "no such config file". */
		ctx->rc = rc == -ENOMEM ? rc : -EINVAL;
		return;
	}
	/* [tiers] has no rows: its names are the tiers' (tiers.c). */
	if (k)
		ctx->seen[key_index(k)] = ctx->lineno;
}

static int file_handler(void *user, const char *section, const char *name,
			const char *value)
{
	struct file_ctx *ctx = user;

	if (ctx->err_line)
		return 1;
	file_set(ctx, section, name, value);
	return !ctx->err_line;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* Where inih ends a value or section name: at an inline comment, a ';'
 * that follows whitespace. */
static char *comment_start(char *s)
{
	char *p;

	for (p = s; *p; p++)
		if (*p == ';' && p > s && isspace((unsigned char)p[-1]))
			return p;
	return p;
}

/*
 * inih's reader, one line at a time. It checks each line's syntax itself
 * so that every error gets a message that says what is wrong (inih only
 * returns a line number) and returns EOF after the first error. Lines go to
 * inih without leading whitespace: inih would take an indented line as the
 * continuation of the previous value, and operators indent keys under their
 * section. Lines longer than inih's buffer are parsed here.
 */
static char *file_reader(char *str, int num, void *stream)
{
	struct file_ctx *ctx = stream;
	ssize_t n;
	char *s, *end, *eq;

	if (ctx->err_line)
		return NULL;
	errno = 0;
	n = getline(&ctx->line, &ctx->cap, ctx->f);
	if (n < 0) {
		if (ferror(ctx->f)) {
			int e = errno ? errno : EIO;

			say(ctx->err, ctx->errlen, "%s: cannot read: %s",
			    ctx->path, strerror(e));
			ctx->err_line = ctx->lineno ? ctx->lineno : 1;
			ctx->rc = -e;
		}
		return NULL;
	}
	ctx->lineno++;
	if ((size_t)n != strlen(ctx->line)) {
		file_error(ctx, "line contains a NUL byte");
		return NULL;
	}
	s = ctx->line;
	if (ctx->lineno == 1 && !strncmp(s, "\xef\xbb\xbf", 3))
		s += 3;
	s = trim(s);

	if (!*s || *s == ';' || *s == '#') {
		str[0] = '\0';
		return str;
	}
	if (*s == '[') {
		end = comment_start(s + 1);
		*end = '\0';
		end = strchr(s + 1, ']');
		if (!end) {
			file_error(ctx, "'%s': missing ']' after the section "
					"name", s);
			return NULL;
		}
		*end = '\0';
		if (*trim(end + 1)) {
			file_error(ctx, "'[%s]': unexpected text after ']'",
				   s + 1);
			return NULL;
		}
		s = trim(s + 1);
		if (!section_known(s)) {
			file_error(ctx, "[%s]: unknown section (known: device, "
					"host, disk, tiers, policy, fs, log)",
				   s);
			return NULL;
		}
		snprintf(ctx->section, sizeof(ctx->section), "%s", s);
		snprintf(str, (size_t)num, "[%s]", s);
		return str;
	}

	end = comment_start(s);
	eq = strpbrk(s, "=:");
	if (!eq || eq > end) {
		*end = '\0';
		file_error(ctx, "'%s': expected 'key = value' or '[section]'",
			   trim(s));
		return NULL;
	}
	if (strlen(s) < (size_t)num - 1) {
		snprintf(str, (size_t)num, "%s", s);
		return str;
	}
	/* Too long for inih: set the key here and hand inih an empty line. */
	*end = '\0';
	*eq = '\0';
	file_set(ctx, ctx->section, trim(s), trim(eq + 1));
	if (ctx->err_line)
		return NULL;
	str[0] = '\0';
	return str;
}

int cfg_load_file(struct tfs_config *cfg, const char *path, char *err,
		  size_t errlen)
{
	struct file_ctx ctx = {
		.cfg = cfg,
		.path = path,
		.err = err,
		.errlen = errlen,
	};
	char *name;
	int rc;

	ctx.f = fopen(path, "re");
	if (!ctx.f) {
		rc = -errno;
		say(err, errlen, "%s: cannot open: %s", path, strerror(-rc));
		return rc;
	}
	name = strdup(path);
	if (!name) {
		fclose(ctx.f);
		say(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	free(cfg->config_file);
	cfg->config_file = name;

	rc = ini_parse_stream(file_reader, &ctx, file_handler, &ctx);
	free(ctx.line);
	fclose(ctx.f);
	if (ctx.err_line)
		return ctx.rc;
	if (rc < 0) {
		say(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	if (rc > 0) {
		/* The reader lets through only lines inih accepts. */
		say(err, errlen, "%s:%d: syntax error", path, rc);
		return -EINVAL;
	}
	return 0;
}

/* "FILE:LINE: key", "-o section_key" or "section_key" for @k's origin. */
void key_where(const struct tfs_config *cfg, const struct cfg_key *k,
	       char *buf, size_t len)
{
	uint32_t o = cfg->origin[key_index(k)];

	if (o == ORIGIN_OPTION)
		snprintf(buf, len, "-o %s_%s", k->section, k->name);
	else if (o == ORIGIN_DEFAULT || o == ORIGIN_SET || !cfg->config_file)
		snprintf(buf, len, "%s_%s", k->section, k->name);
	else
		snprintf(buf, len, "%s:%u: %s", cfg->config_file, o, k->name);
}

void cfg_key_where(const struct tfs_config *cfg, const char *section,
		   const char *key, char *buf, size_t len)
{
	const struct cfg_key *k = find_key(section, key);

	if (k) {
		key_where(cfg, k, buf, len);
		return;
	}
	/* A [tiers] entry: its own line, or its -o. */
	if (!strcmp(section, "tiers")) {
		for (unsigned int i = 0; i < cfg->tiers.n; i++) {
			if (!strcasecmp(cfg->tiers.t[i].name, key)) {
				tier_where(cfg, &cfg->tiers.t[i], buf, len);
				return;
			}
		}
	}
	snprintf(buf, len, "%s_%s", section, key);
}
