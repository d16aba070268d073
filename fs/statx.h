/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * FUSE_STATX, which libfuse 3.14 does not know: the request and reply
 * layouts of the kernel's include/uapi/linux/fuse.h (Debian 12's
 * <linux/fuse.h> is 7.38 and predates them), and the reply tierfs gives.
 * FUSE-free, so that tests/unit/test_args.c checks the bytes.
 *
 * Linux 6.6 (protocol 7.39) sends FUSE_STATX for a statx() that asks for
 * more than the basic stats (the birth time) when its cached attributes
 * are stale, whatever minor the daemon answered INIT with; an ENOSYS
 * makes it stop asking on that mount. Its reply carries the attributes of
 * a getattr plus btime, attributes and attributes_mask.
 */
#ifndef TFS_FS_STATX_H
#define TFS_FS_STATX_H

#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define TFS_FUSE_STATX 52u /* 7.39 */

/* The header of every request (7.36 named padding's first half
 * total_extlen). */
struct tfs_fuse_in_header {
	uint32_t len;
	uint32_t opcode;
	uint64_t unique;
	uint64_t nodeid;
	uint32_t uid;
	uint32_t gid;
	uint32_t pid;
	uint16_t total_extlen;
	uint16_t padding;
};

struct tfs_fuse_out_header {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};

/* 7.39: struct fuse_statx_in. */
struct tfs_fuse_statx_in {
	uint32_t getattr_flags;
	uint32_t reserved;
	uint64_t fh;
	uint32_t sx_flags;
	uint32_t sx_mask;
};

/* 7.39: struct fuse_sx_time. */
struct tfs_fuse_sx_time {
	int64_t tv_sec;
	uint32_t tv_nsec;
	int32_t reserved;
};

/* 7.39: struct fuse_statx, struct statx's fields in its order. */
struct tfs_fuse_statx {
	uint32_t mask;
	uint32_t blksize;
	uint64_t attributes;
	uint32_t nlink;
	uint32_t uid;
	uint32_t gid;
	uint16_t mode;
	uint16_t spare0[1];
	uint64_t ino;
	uint64_t size;
	uint64_t blocks;
	uint64_t attributes_mask;
	struct tfs_fuse_sx_time atime;
	struct tfs_fuse_sx_time btime;
	struct tfs_fuse_sx_time ctime;
	struct tfs_fuse_sx_time mtime;
	uint32_t rdev_major;
	uint32_t rdev_minor;
	uint32_t dev_major;
	uint32_t dev_minor;
	uint64_t spare2[14];
};

/* 7.39: struct fuse_statx_out. */
struct tfs_fuse_statx_out {
	uint64_t attr_valid; /* seconds the kernel may cache it */
	uint32_t attr_valid_nsec;
	uint32_t flags;
	uint64_t spare[2];
	struct tfs_fuse_statx stat;
};

/* The statx attributes tierfs keeps, from chattr flags, as tmpfs has
 * them: immutable, append-only, nodump. */
#define TFS_STATX_ATTRS (STATX_ATTR_IMMUTABLE | STATX_ATTR_APPEND | \
			 STATX_ATTR_NODUMP)

/*
 * Fill @sx from @st (what getattr would answer), the birth time @btime
 * (NULL when unknown: not in the mask) and the chattr flags @fsflags
 * (FS_*_FL).
 */
void tfs_statx_fill(struct tfs_fuse_statx *sx, const struct stat *st,
		    const struct timespec *btime, uint32_t fsflags);

#endif
