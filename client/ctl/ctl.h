/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Private to tierfsctl: what its command files share. tierfsctl.c holds
 * main, the table of commands and the usage; each cmd_*.c holds one
 * command or a family of them; the rest (finding mounts, reading the
 * user.tierfs.* attributes, walking directories, formatting, messages) is
 * declared here, so that every command does it the same way.
 *
 * Every function that can fail in a way the user must hear about prints
 * its own message (ctl_error() or ctl_op_error()) and returns false, NULL
 * or -1; those that return -errno print nothing. Allocation never fails:
 * the ctl_x*() helpers exit with EXIT_FAIL instead; and ctl_next_opt()
 * exits after --help or a bad option, as git's parse_options() does.
 */
#ifndef TFS_CTL_H
#define TFS_CTL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "tierfs.h"

/* Exit statuses: 0 all done, 1 something failed, 2 bad usage. */
#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* getopt_long values of the long options without a short one */
enum { OPT_JSON = 256, OPT_ASCII, OPT_UNICODE, OPT_TO, OPT_PROGRESS,
       OPT_NO_PROGRESS, OPT_WAIT, OPT_HELP };

/* The chain a daemon without a "tiers" stats key has: device, host, disk
 * (indexed by TFS_TIER_*). Everything else reads the mount's own chain
 * (struct ctl_tiers). */
extern const char *const ctl_tier_names[TFS_TIER_COUNT];

/* the subcommand, named in messages about an operation that failed; NULL
 * before main has found it */
extern const char *ctl_cmd_name;

/* ------------------------------------------------------------------ */
/* the commands: each parses argv[1..] (argv[0] is its name) and returns
 * the exit status */

int cmd_status(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_spill(int argc, char **argv);
int cmd_prefetch(int argc, char **argv);
int cmd_pin(int argc, char **argv);
int cmd_unpin(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_cleanup(int argc, char **argv);
int cmd_reclaim(int argc, char **argv);
int cmd_recover(int argc, char **argv);

/* ------------------------------------------------------------------ */
/* the command line (tierfsctl.c) */

/* Prints "tierfsctl: CMD: reason" and the command's synopsis (the whole
 * usage before a command is known) to stderr; returns EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int ctl_bad_usage(const char *fmt,
							 ...);

/*
 * getopt_long with messages of our own, for every command: returns the next
 * option, or -1 at the end of them. OPT_HELP (--help, in every command's
 * table) prints the whole usage and exits 0; an unknown option or one
 * without its value prints why and exits with EXIT_USAGE.
 */
int ctl_next_opt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts);

/* ------------------------------------------------------------------ */
/* messages, memory, numbers (util.c) */

/* "tierfsctl: what" on stderr, for problems finding the things to work on */
__attribute__((format(printf, 1, 2))) void ctl_error(const char *fmt, ...);

/* "tierfsctl: CMD: what" on stderr, for an operation on the mount that
 * failed */
__attribute__((format(printf, 1, 2))) void ctl_op_error(const char *fmt, ...);

/* malloc, realloc, strdup and asprintf that exit with EXIT_FAIL and a
 * message instead of returning NULL; a size of 0 still gets a pointer */
void *ctl_xmalloc(size_t n);
void *ctl_xrealloc(void *p, size_t n);
char *ctl_xstrdup(const char *s);
__attribute__((format(printf, 1, 2))) char *ctl_xasprintf(const char *fmt,
							   ...);

/* Strict: digits only, no sign, no overflow; false for NULL @s. */
bool ctl_parse_u64(const char *s, uint64_t *out);

/* CLOCK_MONOTONIC in seconds. */
double ctl_now_s(void);

/* ------------------------------------------------------------------ */
/* formatting (format.c) */

/* IEC units, one decimal: "512 B", "1.0 KiB", "16.0 MiB"; returns @buf. */
const char *ctl_fmt_bytes(char *buf, size_t len, double v);

/* @s as a JSON string; bytes that are not UTF-8 become U+FFFD, so the
 * output always parses. */
void ctl_json_str(FILE *f, const char *s);

/* ------------------------------------------------------------------ */
/* mounts (mount.c) */

/* Finds the root of the tierfs mount holding @path into a malloc'd *root;
 * false, with a message, when @path is not on one or cannot be looked at. */
bool ctl_resolve_mount_msg(const char *path, char **root);

/*
 * ctl_resolve_mount_msg(), then opens that root and checks that what it
 * opened is the mount's root still (its device, and for a whole mount its
 * root inode), not something a user put at that path meanwhile. Returns
 * the descriptor (O_DIRECTORY) with *root and *dev set, or -1 with a
 * message.
 */
int ctl_open_mount_root(const char *path, char **root, dev_t *dev);

/* Every fuse.tierfs mount point, malloc'd, in mountinfo order, without
 * duplicates of one mount point (over-mounts hide the lower one); returns
 * the count (free with ctl_free_strv()), or -1 with a message. */
int ctl_all_mounts(char ***out);

/* Frees the @n strings of @v and @v. */
void ctl_free_strv(char **v, int n);

/* The root of the mount @arg is on, or with @arg NULL of the tierfs mount
 * the current directory is on, else of the only tierfs mount there is;
 * malloc'd, or NULL with a message. */
char *ctl_pick_mount(const char *arg);

/* ------------------------------------------------------------------ */
/* the user.tierfs.* attributes (xattr.c) */

struct ctl_kv {
	const char *key;
	const char *val;
};

/* A mount's user.tierfs.stats, split into keys and values. */
struct ctl_stats {
	char *raw;
	struct ctl_kv *kv;
	size_t n;
	double at; /* CLOCK_MONOTONIC seconds when read */
};

/* Reads the stats of the mount at @root into @s; returns 0 or -errno. */
int ctl_stats_read(const char *root, struct ctl_stats *s);

/* The same from a descriptor of the mount's root. */
int ctl_stats_read_fd(int fd, struct ctl_stats *s);

/* ctl_stats_read() with the message; false when it failed. */
bool ctl_stats_read_msg(const char *root, struct ctl_stats *s);

/* Frees what @s holds and zeroes it. */
void ctl_stats_free(struct ctl_stats *s);

/* The value of @key (it points into @s), or NULL. */
const char *ctl_stats_get(const struct ctl_stats *s, const char *key);

/* The value of @key as a number; false when absent or not one. */
bool ctl_stats_u64(const struct ctl_stats *s, const char *key, uint64_t *v);

/* A mount's chain of tiers, fastest first: what the daemon's "tiers" key
 * lists, the names its TIER.* keys use. */
struct ctl_tiers {
	unsigned int n;
	char name[TFS_TIER_MAX][32];
};

/* The chain of @s; a daemon without the key has device, host, disk. */
void ctl_stats_tiers(const struct ctl_stats *s, struct ctl_tiers *out);

/* The position of the @len bytes at @name in @t, or -1. */
int ctl_tiers_index(const struct ctl_tiers *t, const char *name, size_t len);

/*
 * Remembers the devices already found to be tierfs, with each mount's
 * chain of tiers, so that `spill` of thousands of files named one by one
 * reads mountinfo and the stats once per mount and not once per file.
 */
struct ctl_dev_cache {
	struct {
		dev_t dev;
		bool has_device;
		struct ctl_tiers tiers;
	} e[8];
	int n;
};

/*
 * Checks @path (on device @dev) is on tierfs, with a message when not;
 * *has_device (when not NULL) says whether its mount has a device tier,
 * *tiers (when not NULL) points at its chain as the daemon lists it,
 * valid until the next call with @c.
 */
bool ctl_on_tierfs(struct ctl_dev_cache *c, const char *path, dev_t dev,
		   bool *has_device, const struct ctl_tiers **tiers);

/* The number in the attribute @name of @path; false when it cannot be
 * read or is not a number. */
bool ctl_get_xattr_u64(const char *path, const char *name, uint64_t *v);

/* The tier of @path as its position in its mount's chain @t, with its
 * name in @name (@len bytes); -1 with errno set when it cannot be read,
 * EPROTO for a name the chain does not list. */
int ctl_get_tier(const char *path, const struct ctl_tiers *t, char *name,
		 size_t len);

/* ------------------------------------------------------------------ */
/* paths and walks (walk.c) */

/* @dir and @name joined by one '/'; malloc'd. */
char *ctl_join_path(const char *dir, const char *name);

/*
 * Opens @rel beneath the directory @dirfd with @flags (O_RDONLY,
 * O_DIRECTORY...), never through a symlink (any component), never above
 * @dirfd ("..") and never onto another mount: openat2() with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV where the
 * kernel has it, else O_NOFOLLOW at every step with a device check. An
 * empty @rel opens @dirfd's own directory again. Returns the descriptor,
 * or -ELOOP (a symlink), -EXDEV (another mount, "..") or another -errno.
 */
int ctl_open_beneath(int dirfd, const char *rel, int flags);

/*
 * Calls @fn for each entry of @dir but "." and "..", with its path (which
 * @fn owns) and its lstat. Returns false, after saying why, when @dir or
 * an entry could not be read; @fn's own result is and-ed in.
 */
bool ctl_walk_dir(const char *dir,
		  bool (*fn)(void *ctx, char *path, const struct stat *st),
		  void *ctx);

#endif /* TFS_CTL_H */
