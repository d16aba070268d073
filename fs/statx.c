// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE_STATX reply (see statx.h).
 */
#include <assert.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <linux/fs.h>

#include "fs/statx.h"

static_assert(sizeof(struct tfs_fuse_in_header) == 40, "fuse_in_header");
static_assert(sizeof(struct tfs_fuse_out_header) == 16, "fuse_out_header");
static_assert(sizeof(struct tfs_fuse_statx_in) == 24, "fuse_statx_in");
static_assert(sizeof(struct tfs_fuse_statx) == 256, "fuse_statx");
static_assert(sizeof(struct tfs_fuse_statx_out) == 288, "fuse_statx_out");

static struct tfs_fuse_sx_time sx_time(const struct timespec *ts)
{
	return (struct tfs_fuse_sx_time){ .tv_sec = ts->tv_sec,
					  .tv_nsec = (uint32_t)ts->tv_nsec };
}

void tfs_statx_fill(struct tfs_fuse_statx *sx, const struct stat *st,
		    const struct timespec *btime, uint32_t fsflags)
{
	memset(sx, 0, sizeof(*sx));
	sx->mask = STATX_BASIC_STATS | (btime ? STATX_BTIME : 0);
	sx->blksize = (uint32_t)st->st_blksize;
	sx->nlink = (uint32_t)st->st_nlink;
	sx->uid = st->st_uid;
	sx->gid = st->st_gid;
	sx->mode = (uint16_t)st->st_mode;
	sx->ino = st->st_ino;
	sx->size = (uint64_t)st->st_size;
	sx->blocks = (uint64_t)st->st_blocks;
	sx->atime = sx_time(&st->st_atim);
	sx->mtime = sx_time(&st->st_mtim);
	sx->ctime = sx_time(&st->st_ctim);
	if (btime)
		sx->btime = sx_time(btime);
	sx->rdev_major = major(st->st_rdev);
	sx->rdev_minor = minor(st->st_rdev);
	/*
	 * What tmpfs's shmem_getattr() reports. Linux up to 6.18 at least
	 * drops both words of a FUSE reply (fuse_do_statx() copies neither
	 * into the kstat): they are sent for the kernels that pass them on.
	 */
	if (fsflags & FS_IMMUTABLE_FL)
		sx->attributes |= STATX_ATTR_IMMUTABLE;
	if (fsflags & FS_APPEND_FL)
		sx->attributes |= STATX_ATTR_APPEND;
	if (fsflags & FS_NODUMP_FL)
		sx->attributes |= STATX_ATTR_NODUMP;
	sx->attributes_mask = TFS_STATX_ATTRS;
}
