/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * tierfs configuration: one struct, filled in order from the built-in
 * defaults, the config file (inih) and the -o options. Only this module
 * validates; everything else reads a struct tfs_config it can trust.
 *
 * Every key `[section] key` of the file is also the mount option
 * `section_key=value`.
 */
#ifndef TFS_CONFIG_H
#define TFS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TFS_DEFAULT_CONFIG "/etc/tierfs.conf"

/* Room for every key of the table in config.c (a static assertion there
 * checks it). */
#define CFG_MAX_KEYS 40

/* GPUs one daemon serves at most ([device] gpus). */
#define CFG_MAX_GPUS 16

/*
 * [device] gpus: "all", or a list of ordinals ("0,1" in the file, "0:1" in
 * -o, where commas separate options). Neither (the default): the one GPU
 * named by [device] gpu.
 */
struct cfg_gpus {
	bool all;
	unsigned int n; /* ordinals listed, in order, each once */
	int ord[CFG_MAX_GPUS];
};

/* A size as written: bytes, or a percentage of the tier's capacity. */
struct cfg_size {
	uint64_t bytes; /* used when !is_percent; 0 means "backend default" */
	double percent; /* 0 < percent <= 100 when is_percent */
	bool is_percent;
};

enum cfg_compression {
	CFG_COMPRESS_LZ4 = 0,
	CFG_COMPRESS_NONE = 1,
};

/* Whether the mount outlives its daemon: see doc/design.md. */
enum cfg_persist {
	CFG_PERSIST_NO = 0, /* the disk tier is a cache (default) */
	CFG_PERSIST_YES = 1, /* saved at a clean stop; fsync is durable */
	CFG_PERSIST_CLOSE = 2, /* yes, and the last close syncs too */
};

/*
 * A limit, reserve or share written as a bare number below this many bytes
 * is refused as a forgotten suffix ("host_limit=50" meant 50G): nothing of
 * a GPU, a host or a disk is that small, and 50 bytes would take a mount
 * that then refuses every file.
 */
#define CFG_BARE_MIN 4096

/*
 * The least [fs] metadata_limit: the root directory and a few files. A
 * tier's limit must hold one chunk ([disk] chunk_size) at least:
 * cfg_validate() checks that, and the store the limits it resolves.
 */
#define CFG_METADATA_MIN (16u * 1024)

/* [disk] name: what persist names its directory by instead of the mount
 * point. */
#define CFG_NAME_MAX 64

/*
 * [tiers]: disk-kind tiers below the [disk] tier, in chain order, each an
 * instance with its own path and limit (see tier_chain in doc/design.md).
 * The chain is always the device tiers (one per GPU), host, the [disk]
 * tier, then these.
 */
#define CFG_MAX_TIERS 6
/* A tier's name with its NUL: 1 to 15 of [A-Za-z0-9_-]. */
#define CFG_TIER_NAME_MAX 16

enum cfg_tier_kind {
	CFG_TIER_DISK = 0, /* spill files in a private directory */
	CFG_TIER_SHARED = 1, /* the same, in a directory other mounts share */
};

struct cfg_tier {
	char name[CFG_TIER_NAME_MAX]; /* "nvme": the tier is "disk:nvme" */
	enum cfg_tier_kind kind;
	char *path; /* owned by the config */
	/* bytes 0: the [disk] default (half the filesystem, at most its free
	 * space less 5%); a percentage is of the filesystem */
	struct cfg_size limit;
	uint32_t origin; /* a line of config_file, or -o (private) */
};

struct cfg_tiers {
	unsigned int n;
	struct cfg_tier t[CFG_MAX_TIERS];
};

/* Where a read unspills a buffer to. */
/* [fs] passthrough: kernel FUSE passthrough of host-tier reads. */
enum cfg_passthrough {
	CFG_PASSTHROUGH_OFF = 0, /* every read through the daemon (default) */
	CFG_PASSTHROUGH_AUTO = 1, /* when the kernel accepts it */
	CFG_PASSTHROUGH_ON = 2, /* as auto; a refusal is a warning */
};

enum cfg_unspill {
	CFG_UNSPILL_DEVICE = 0, /* the top tier the buffer fits in (default) */
	CFG_UNSPILL_HOST = 1, /* no higher than host */
	CFG_UNSPILL_NONE = 2, /* serve reads from where the buffer is */
};

/* When a written file's bytes go down a tier. */
enum cfg_write {
	CFG_WRITE_BACK = 0, /* when it is evicted (default) */
	CFG_WRITE_THROUGH = 1, /* a disk copy soon after the last close */
};

struct tfs_config {
	struct {
		char backend[16]; /* auto|cuda|sim|none */
		int gpu; /* CUDA device ordinal; the default GPU of gpus */
		struct cfg_gpus gpus;
		struct cfg_size limit; /* default: 80% of free GPU memory; sim: 1G */
		/* Device memory kept free for other processes; default 10% of
		 * the device's memory. */
		struct cfg_size reserve;
		unsigned int poll_ms; /* free memory checked this often */
		/* Device bytes one user's pins and exports may hold; a
		 * percentage is of the device limit. 0: no share. */
		struct cfg_size user_share;
		/* Live export leases one user may hold; 0: any number. */
		unsigned int user_exports;
	} device;
	struct {
		/* default (bytes 0): 25% of RAM, at most half the memory
		 * cgroup's limit */
		struct cfg_size limit;
		bool pinned; /* page-lock host copies when CUDA is used */
		/* Host bytes one user's pins may hold; a percentage is of the
		 * host limit. 0: no share. */
		struct cfg_size user_share;
	} host;
	struct {
		char *path; /* default: /var/tmp */
		/* default (bytes 0): 50% of the filesystem's size, at most its
		 * free space at mount less 5% of its size */
		struct cfg_size limit;
		enum cfg_compression compression;
		uint32_t chunk_size; /* 64K..64M, power of two; default 1M */
		enum cfg_persist persist;
		/* "" (the default): derived from the mount point */
		char name[CFG_NAME_MAX + 1];
	} disk;
	struct {
		char eviction[16]; /* lru */
		enum cfg_unspill unspill;
		double high_watermark; /* fraction of a limit, default 0.95 */
		double target; /* fraction of a limit, default 0.85 */
		/* accept limits above what the machine has */
		bool overcommit;
		/* bring the hottest evicted buffers back up when a tier has
		 * room again, at most promote_rate bytes a second */
		bool promote;
		struct cfg_size promote_rate;
		enum cfg_write write; /* when written bytes go down */
		bool admission; /* the frequency filter on the device tier */
		/* most files TFS_IOC_PREFETCH keeps queued, not yet moving */
		unsigned int prefetch_queue;
	} policy;
	struct cfg_tiers tiers;
	struct {
		unsigned int threads; /* FUSE worker threads, default 0 = libfuse's */
		unsigned int read_ahead_kb; /* set on the bdi after mount; 0 = leave */
		bool writeback_cache; /* FUSE_CAP_WRITEBACK_CACHE */
		enum cfg_passthrough passthrough;
		/* Memory for inodes, names, symlink targets and xattrs; a
		 * percentage is of the host limit. Default 10%. */
		struct cfg_size metadata_limit;
		/* What one user's inodes, names and xattrs may take of it; a
		 * percentage is of metadata_limit. Default 50%; 0: no share. */
		struct cfg_size metadata_user_share;
	} fs;
	struct {
		char *file; /* or NULL: the journal, syslog or the default */
	} log;
	char *config_file; /* the file that was read, or NULL */
	/*
	 * Private to config/: where each key got its value (0: the default,
	 * a line of config_file, or -o), so that cfg_validate() can name it.
	 */
	uint32_t origin[CFG_MAX_KEYS];
};

/*
 * Fill @cfg with the documented defaults. Never fails: should strdup() of
 * the disk path fail, disk.path stays NULL and cfg_validate() says so.
 */
void cfg_defaults(struct tfs_config *cfg);

/* Free what cfg_* allocated in @cfg (not @cfg itself). */
void cfg_free(struct tfs_config *cfg);

/*
 * Set `[section] key` to @value. On error returns -EINVAL (or -ENOENT for an
 * unknown section or key, -ENOMEM when a path cannot be copied), leaves the
 * key as it was and writes "KEY: what is wrong" into @err. Section and key
 * names are matched without regard to case.
 */
int cfg_set(struct tfs_config *cfg, const char *section, const char *key,
	    const char *value, char *err, size_t errlen);

/*
 * Set the mount option form `section_key` (e.g. "host_limit"). Same returns
 * as cfg_set(); @err reads "-o KEY: what is wrong".
 */
int cfg_set_option(struct tfs_config *cfg, const char *option,
		   const char *value, char *err, size_t errlen);

/* True when @option (no '=value') is a config key, i.e. cfg_set_option()
 * would accept some value for it. */
bool cfg_is_option(const char *option);

/*
 * True when @option (no '=value') is for config/ rather than libfuse: a key,
 * or any name in a section's namespace ("host_lmit"), which
 * cfg_set_option() then refuses as an unknown key with the keys it knows.
 */
bool cfg_owns_option(const char *option);

/*
 * The known option closest to @word (an option name, without '=value' or
 * leading dashes removed), for a "did you mean" hint: a config option
 * (section_key) or one of the @nextra names of @extra, compared without
 * regard to case by edit distance (a swap of two neighbours counts as one
 * edit). Copies it into @buf and returns @buf, or returns NULL when no name
 * is close enough to be a likely typo of @word: at most a third of its
 * letters wrong, and never all of them.
 */
const char *cfg_suggest(const char *word, const char *const *extra,
			size_t nextra, char *buf, size_t len);

/*
 * Print each config key for --help: "-o section_key=VALUE" indented by
 * @indent spaces, then on the next line, 4 spaces further in, what it does
 * and its default.
 */
void cfg_print_help(FILE *out, int indent);

/*
 * Read an inih file. Returns 0, -errno when it cannot be opened or read
 * ("FILE: why" in @err), or -EINVAL with "FILE:LINE: KEY: what is wrong" in
 * @err for the first bad line. Keys the file does not name keep their value;
 * on error, keys before the bad line may have been set. Sets config_file.
 */
int cfg_load_file(struct tfs_config *cfg, const char *path, char *err,
		  size_t errlen);

/*
 * Check what cannot be checked key by key: the disk path exists, is a
 * writable directory and is not inside @mountpoint (may be NULL); the
 * watermarks are ordered; a disk name comes with persist; the log file can
 * be opened for appending (it is created when missing); a gpu that is set
 * is among the gpus listed. Returns 0 or -EINVAL with a message in @err
 * that names where the value came from ("FILE:LINE: KEY: ...",
 * "-o KEY: ..."), or -ENOMEM when cfg_defaults() could not allocate.
 *
 * Both paths are resolved with realpath(), so call it before mounting (or
 * with @mountpoint NULL): once mounted, resolving would enter the mount.
 */
int cfg_validate(const struct tfs_config *cfg, const char *mountpoint,
		 char *err, size_t errlen);

/*
 * The GPUs that [device] gpus and gpu select on a machine with @count
 * devices (ordinals 0 to @count - 1): their ordinals in @ord, in the order
 * listed ("all": every one, at most CFG_MAX_GPUS), and in *@def the index
 * in @ord of the default GPU, the one gpu names (with a list that leaves
 * gpu unset, the first listed). Without gpus, the one GPU gpu names.
 * Returns how many, or -EINVAL with a message in @err naming where the
 * value came from when an ordinal is not below @count, or gpu is set and
 * not among those listed.
 */
int cfg_gpus_resolve(const struct tfs_config *cfg, int count,
		     int ord[CFG_MAX_GPUS], unsigned int *def, char *err,
		     size_t errlen);

/*
 * Parse a size: "4096", "64K", "1.5G", "25%" (when @allow_percent).
 * Suffixes K/M/G/T are powers of 1024, case-insensitive, optional "iB"/"B".
 * Returns 0 or -EINVAL.
 */
int cfg_parse_size(const char *s, bool allow_percent, struct cfg_size *out);

/*
 * Where `[section] key` got its value, to start a message with:
 * "FILE:LINE: key", "-o section_key", or "section_key" for a default.
 */
void cfg_key_where(const struct tfs_config *cfg, const char *section,
		   const char *key, char *buf, size_t len);

/*
 * Set the [tiers] entry @name to @spec, "KIND:PATH[:LIMIT]" (KIND disk or
 * shared, PATH absolute or taken from the current directory, LIMIT a size
 * or a percentage of the filesystem): a new name goes at the end of the
 * chain, a known one is replaced where it is. -EINVAL with "what is wrong"
 * in @err (a bad name, an unknown kind, a memory kind, which cannot come
 * after a disk-kind tier, a bad path or limit, too many tiers), -ENOMEM.
 * What cfg_set(cfg, "tiers", name, spec) and -o tiers_NAME=SPEC do.
 */
int cfg_tier_set(struct tfs_config *cfg, const char *name, const char *spec,
		 char *err, size_t errlen);

/*
 * -o tiers=LIST: the whole list, "NAME=SPEC+NAME=SPEC...", replacing what
 * the file listed (an empty LIST: none). Same returns; a name listed twice
 * is -EINVAL.
 */
int cfg_tiers_set_list(struct tfs_config *cfg, const char *list, char *err,
		       size_t errlen);

/* "disk", "shared". */
const char *cfg_tier_kind_name(enum cfg_tier_kind kind);

/* The size in bytes: @sz's bytes, or its percentage of @capacity. */
uint64_t cfg_size_resolve(const struct cfg_size *sz, uint64_t capacity);

#endif
