/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The checks the ioctl and xattr interfaces make on what a caller hands
 * in, kept apart from FUSE so that unit tests and the fuzzers in tests/fuzz
 * call them directly. Nothing here touches a file or the store: each
 * function says whether a request is well formed and what it asks for.
 * fs/ioctl.c and fs/xattr.c act on the answer.
 */
#ifndef TFS_FS_ARGS_H
#define TFS_FS_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#include "tierfs.h"

/* A TFS_IOC_* request as the kernel hands it over. */
struct tfs_ioc_req {
	unsigned int cmd;
	bool compat; /* a 32-bit caller (FUSE_IOCTL_COMPAT) */
	bool dir; /* on a directory (FUSE_IOCTL_DIR) */
	bool has_file; /* through an open file (fi->fh set) */
	bool readable, writable; /* how that file was opened */
	const void *in; /* in_len bytes, not aligned */
	size_t in_len, out_len;
};

/*
 * Every TFS_IOC_* command, one line each: its name in TFS_IOC_<NAME>, the
 * member of union tfs_ioc_args holding its struct, and where it is taken
 * (TFS_IOC_FILE: an open regular file only; TFS_IOC_ANY: any descriptor
 * of the mount, a directory's too). The tables of checks (args.c,
 * check_<member>) and of handlers (ioctl.c, ioc_<member>) are built from
 * this list, so a command without either is a build error, and a number
 * given twice or left out fails test_args. A new ioctl: its struct,
 * number and size in include/tierfs.h, a line here, a check, a handler.
 */
#define TFS_IOC_LIST(X)                           \
	X(EXPORT, exp, TFS_IOC_FILE)               \
	X(RELEASE, rel, TFS_IOC_FILE)              \
	X(COMMIT, commit, TFS_IOC_FILE)            \
	X(ALLOC, alloc, TFS_IOC_FILE)              \
	X(MOVE, move, TFS_IOC_FILE)                \
	X(STAT, stat, TFS_IOC_FILE)                \
	X(RECLAIM, rec, TFS_IOC_ANY)               \
	X(PREFETCH, prefetch, TFS_IOC_FILE)

enum tfs_ioc_where {
	TFS_IOC_FILE,
	TFS_IOC_ANY,
};

/* Its argument once checked: the struct of req.cmd, copied out. */
union tfs_ioc_args {
	struct tfs_ioc_export exp;
	struct tfs_ioc_release rel;
	struct tfs_ioc_commit commit;
	struct tfs_ioc_alloc alloc;
	struct tfs_ioc_move move;
	struct tfs_ioc_stat stat;
	struct tfs_ioc_reclaim rec;
	struct tfs_ioc_prefetch prefetch;
};

/* The commands, in TFS_IOC_LIST's order: their numbers (TFS_IOC_*) and
 * names ("EXPORT"), for tests and the fuzzer. */
extern const unsigned int tfs_ioc_cmds[];
extern const char *const tfs_ioc_names[];
extern const unsigned int tfs_ioc_ncmds;

/*
 * Check @req, in this order:
 *   -ENOTTY  an unknown command; a 32-bit caller; a directory caller or
 *            no open file, but for TFS_IOC_RECLAIM (the ABI is promised to
 *            64-bit callers, and but for a reclaim, of a file only);
 *   -EINVAL  buffer sizes other than the command's; a version other than
 *            TFS_ABI_VERSION, flags the command does not define, nonzero
 *            reserved words, a tier >= TFS_TIER_COUNT (TFS_TIER_MAX with
 *            TFS_MOVE_CHAIN), an alloc of 0 bytes,
 *            a reclaim's gpu below -1 or its UUID set without
 *            TFS_RECLAIM_UUID, or its freed set; a prefetch's state or
 *            pending set, or a range past INT64_MAX;
 *   -EBADF   an export through a file not open for reading, a write export
 *            through one not open for reading and writing, an alloc
 *            through one not open for writing, a prefetch through one
 *            not open for reading (as read(2) and write(2)
 *            would answer: the descriptor is what is wrong).
 * Returns 0 with @out holding the argument. A move's write permission
 * depends on who asks and is the caller's to check.
 */
int tfs_ioc_check(const struct tfs_ioc_req *req, union tfs_ioc_args *out);

/* The highest GPU ordinal "device:N" takes, as [device] gpus does. */
#define TFS_XATTR_GPU_MAX 255

/*
 * A user.tierfs.tier value: a tier name in any case, as tier_name() gives
 * them (the store's stats list the same in their "tiers" key), or
 * "device:N" for the device tier of GPU N (0 to TFS_XATTR_GPU_MAX, decimal
 * digits only; "device" being tier_name(TFS_TIER_DEVICE));
 * newlines and NUL bytes at its end are ignored (setfattr -v and echo add
 * a newline, some callers the NUL). Returns 0 with *@out set and *@gpu the
 * ordinal, or -1 when none was named; or -EINVAL, leaving both alone.
 */
int tfs_xattr_parse_tier(const char *value, size_t size, enum tfs_tier *out,
			 int *gpu);

/* A user.tierfs.pin value: "1" pins, "0" unpins, one trailing newline
 * allowed. Returns 0 with *@pin set, or -EINVAL. */
int tfs_xattr_parse_pin(const char *value, size_t size, bool *pin);

/* The soft pin priorities and the longest time to live, as the store has
 * them (tiers/store.h). */
#define TFS_PIN_PRIO_MAX 7
#define TFS_PIN_TTL_MAX (7u * 24 * 3600)

/* A pin as user.tierfs.pin sets and shows it. */
struct tfs_pin_value {
	bool hard; /* "1" */
	uint8_t prio; /* soft: 1 to TFS_PIN_PRIO_MAX; 0 with hard or none */
	uint32_t ttl; /* soft: seconds idle before it lapses, 0: never */
};

/*
 * A user.tierfs.pin value: "1" (hard pin), "0" (none), or a soft pin:
 * "prio=N" (N 1 to 7), "ttl=D" (priority 1; D seconds, or with an s, m,
 * h or d suffix, 1 s to 7 d), or "prio=N,ttl=D" in either order; one
 * trailing newline allowed. Returns 0 with *@out set, or -EINVAL leaving
 * it alone.
 */
int tfs_xattr_parse_pin_value(const char *value, size_t size,
			      struct tfs_pin_value *out);

/* Format @v as the parser takes it ("0", "1", "prio=2", "prio=1,ttl=300s");
 * returns the length, as snprintf. */
int tfs_xattr_format_pin(const struct tfs_pin_value *v, char *buf,
			 size_t cap);

/* A user.tierfs.write_policy value: "write_back", "write_through", or
 * (for a directory) "default", the mount's; one trailing newline allowed.
 * Returns 0 with *@out 0 (default), 1 (write_back) or 2 (write_through),
 * or -EINVAL. */
int tfs_xattr_parse_write(const char *value, size_t size, int *out);

#endif
