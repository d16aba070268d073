/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * FUSE passthrough on libfuse 3.14, which knows nothing of it: the wire
 * layouts of the kernel's include/uapi/linux/fuse.h that Debian 12's
 * <linux/fuse.h> (7.38) predates, and the edits tierfs makes to the INIT
 * and OPEN replies libfuse wrote (fs/tmpfile.c's hook calls them).
 * FUSE-free, so that tests/unit/test_args.c checks the bytes.
 *
 * Linux 6.9 (protocol 7.40) added passthrough: a daemon that answers INIT
 * with FUSE_PASSTHROUGH and a max_stack_depth may register a file of its
 * own with the FUSE_DEV_IOC_BACKING_OPEN ioctl on /dev/fuse (it needs
 * CAP_SYS_ADMIN), and answer an OPEN with FOPEN_PASSTHROUGH and the id it
 * got: reads, writes and mmap of that open file then go to the backing
 * file inside the kernel, and never reach the daemon. The kernel ignores
 * the flag under the writeback cache (7.23, FUSE_WRITEBACK_CACHE in the
 * same reply), and fails an open whose reply has FOPEN_PASSTHROUGH with
 * any flag outside FOPEN_PASSTHROUGH_MASK (keep_cache above all) with EIO.
 * Every open of one inode must name the same backing file while any of
 * them is open, and an inode open through its page cache (no passthrough,
 * no direct_io) takes no passthrough open, nor the other way round.
 */
#ifndef TFS_FS_PASSTHROUGH_H
#define TFS_FS_PASSTHROUGH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

#define TFS_FUSE_OPEN 14u
#define TFS_FUSE_INIT 26u
#define TFS_FUSE_CREATE 35u

/* fuse_init_in/out flags. */
#define TFS_FUSE_WRITEBACK_CACHE (1u << 16) /* 7.23, Linux 3.15 */
#define TFS_FUSE_INIT_EXT (1u << 30) /* 7.36, Linux 5.17: flags2 is read */
/* FUSE_PASSTHROUGH is 1ULL << 37: bit 5 of flags2 (7.40, Linux 6.9). */
#define TFS_FUSE_PASSTHROUGH2 (1u << 5)
/* What tierfs asks for: a backing file on a filesystem that stacks on
 * nothing (a memfd), so that an overlayfs may still stack on the mount.
 * The kernel takes 1 to FILESYSTEM_MAX_STACK_DEPTH (2). */
#define TFS_PT_STACK_DEPTH 1u

/* fuse_open_out.open_flags. */
#define TFS_FOPEN_DIRECT_IO (1u << 0)
#define TFS_FOPEN_KEEP_CACHE (1u << 1)
#define TFS_FOPEN_NOFLUSH (1u << 5) /* 7.35, Linux 5.16 */
#define TFS_FOPEN_PARALLEL_DIRECT_WRITES (1u << 6) /* 7.36, Linux 6.2 */
#define TFS_FOPEN_PASSTHROUGH (1u << 7) /* 7.40, Linux 6.9 */
/* The flags the kernel (fs/fuse/iomode.c) allows beside passthrough. */
#define TFS_FOPEN_PASSTHROUGH_MASK                                         \
	(TFS_FOPEN_PASSTHROUGH | TFS_FOPEN_DIRECT_IO |                      \
	 TFS_FOPEN_PARALLEL_DIRECT_WRITES | TFS_FOPEN_NOFLUSH)

/* struct fuse_init_in up to flags2 (7.36); the kernel sends more. */
struct tfs_fuse_init_in {
	uint32_t major;
	uint32_t minor;
	uint32_t max_readahead;
	uint32_t flags;
	uint32_t flags2; /* 7.36 */
};

/* struct fuse_init_out as 7.40 has it (64 bytes since 7.23's 24 grew). */
struct tfs_fuse_init_out {
	uint32_t major;
	uint32_t minor;
	uint32_t max_readahead;
	uint32_t flags;
	uint16_t max_background;
	uint16_t congestion_threshold;
	uint32_t max_write;
	uint32_t time_gran; /* 7.23 */
	uint16_t max_pages; /* 7.28 */
	uint16_t map_alignment; /* 7.31 */
	uint32_t flags2; /* 7.36 */
	uint32_t max_stack_depth; /* 7.40, in what was unused[0] */
	uint32_t unused[6];
};

/* struct fuse_open_out; 7.40 named its padding backing_id. */
struct tfs_fuse_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id; /* 7.40 */
};

/* 7.40: struct fuse_backing_map, FUSE_DEV_IOC_BACKING_OPEN's argument. */
struct tfs_fuse_backing_map {
	int32_t fd;
	uint32_t flags; /* none defined: 0 */
	uint64_t padding;
};

#define TFS_FUSE_DEV_IOC_MAGIC 229
/* 7.40: both return -1 with errno; OPEN returns the id, from 1. */
#define TFS_FUSE_DEV_IOC_BACKING_OPEN \
	_IOW(TFS_FUSE_DEV_IOC_MAGIC, 1, struct tfs_fuse_backing_map)
#define TFS_FUSE_DEV_IOC_BACKING_CLOSE \
	_IOW(TFS_FUSE_DEV_IOC_MAGIC, 2, uint32_t)

/* What tfs_pt_patch_init() did. */
enum tfs_pt_init {
	TFS_PT_ASKED, /* the reply asks for passthrough */
	TFS_PT_NO_KERNEL, /* the kernel did not offer it (before 6.9) */
	TFS_PT_WRITEBACK, /* the reply asks for the writeback cache */
	TFS_PT_SHORT, /* the reply is too short to carry it */
};

/*
 * Ask for passthrough in the INIT reply @out of @len bytes (the body, after
 * the out header), for a kernel whose request had @in_flags and
 * @in_flags2 (0 when it had no FUSE_INIT_EXT): sets FUSE_INIT_EXT,
 * flags2's FUSE_PASSTHROUGH and max_stack_depth, and nothing else. Leaves
 * @out as it was unless it returns TFS_PT_ASKED.
 */
enum tfs_pt_init tfs_pt_patch_init(void *out, size_t len, uint32_t in_flags,
				   uint32_t in_flags2);

/*
 * Turn the OPEN reply @out (struct tfs_fuse_open_out, @len bytes) into a
 * passthrough open of @backing_id when its fh is @fh: passthrough in place
 * of keep_cache, the other flags the kernel allows beside it kept (with
 * direct_io, reads and writes reach the daemon and mmap maps the backing
 * file). Returns
 * true when it did, false (@out untouched) for another reply.
 */
bool tfs_pt_patch_open(void *out, size_t len, uint64_t fh,
		       int32_t backing_id);

#endif
