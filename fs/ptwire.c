// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The INIT and OPEN reply edits of FUSE passthrough (see passthrough.h).
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "fs/passthrough.h"

static_assert(sizeof(struct tfs_fuse_init_out) == 64, "fuse_init_out");
static_assert(offsetof(struct tfs_fuse_init_out, flags2) == 32,
	      "fuse_init_out.flags2");
static_assert(offsetof(struct tfs_fuse_init_out, max_stack_depth) == 36,
	      "fuse_init_out.max_stack_depth");
static_assert(sizeof(struct tfs_fuse_open_out) == 16, "fuse_open_out");
static_assert(sizeof(struct tfs_fuse_backing_map) == 16, "fuse_backing_map");

enum tfs_pt_init tfs_pt_patch_init(void *out, size_t len, uint32_t in_flags,
				   uint32_t in_flags2)
{
	struct tfs_fuse_init_out o;

	if (!(in_flags & TFS_FUSE_INIT_EXT) ||
	    !(in_flags2 & TFS_FUSE_PASSTHROUGH2))
		return TFS_PT_NO_KERNEL;
	/* The kernel reads a shorter reply as zeros past its end. */
	if (len < offsetof(struct tfs_fuse_init_out, max_stack_depth) +
			  sizeof(o.max_stack_depth))
		return TFS_PT_SHORT;
	memcpy(&o, out, len < sizeof(o) ? len : sizeof(o));
	if (o.flags & TFS_FUSE_WRITEBACK_CACHE)
		return TFS_PT_WRITEBACK;
	o.flags |= TFS_FUSE_INIT_EXT;
	o.flags2 |= TFS_FUSE_PASSTHROUGH2;
	o.max_stack_depth = TFS_PT_STACK_DEPTH;
	memcpy(out, &o, len < sizeof(o) ? len : sizeof(o));
	return TFS_PT_ASKED;
}

bool tfs_pt_patch_open(void *out, size_t len, uint64_t fh,
		       int32_t backing_id)
{
	struct tfs_fuse_open_out o;

	if (len != sizeof(o) || backing_id <= 0)
		return false;
	memcpy(&o, out, sizeof(o));
	if (o.fh != fh)
		return false;
	o.open_flags &= TFS_FOPEN_PASSTHROUGH_MASK;
	o.open_flags |= TFS_FOPEN_PASSTHROUGH;
	o.backing_id = backing_id;
	memcpy(out, &o, sizeof(o));
	return true;
}
