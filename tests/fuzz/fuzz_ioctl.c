// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The ioctl argument checks (fs/args.c: tfs_ioc_check) on any command
 * number, any kernel flags, any buffer sizes and any argument bytes.
 *
 * Contract checked: the answer is exactly what include/tierfs.h and
 * fs/args.h promise, as a reference written here from those documents
 * (with the struct layouts as byte offsets) computes it: ENOTTY, EINVAL
 * or EBADF in the documented order, or 0 with the argument copied out
 * unchanged.
 */
#include <errno.h>
#include <stddef.h>

#include "fs/args.h"
#include "fuzz.h"

/* A reserved range of a struct, [lo, hi) in bytes. */
struct range {
	unsigned int lo, hi;
};

static const struct cmd {
	unsigned int cmd;
	unsigned int size;
	bool in, out; /* the kernel copies the struct in, out */
	uint32_t flags; /* flags the command defines */
	struct range reserved[3];
} cmds[] = {
	/* cuda_runtime, and caller_pid (out only) to reserved[];
	 * caller_uuid (120-136) is any bytes */
	{ TFS_IOC_EXPORT, 152, true, true, TFS_EXPORT_WRITE,
	  { { 12, 16 }, { 136, 152 } } },
	{ TFS_IOC_RELEASE, 32, true, false, TFS_RELEASE_UNMAPPED,
	  { { 16, 32 }, { 0, 0 } } },
	/* waited (8-12) is 0 to TFS_COMMIT_WAITED_EVENT */
	{ TFS_IOC_COMMIT, 32, true, false, 0, { { 12, 32 }, { 0, 0 } } },
	{ TFS_IOC_ALLOC, 32, true, false, 0, { { 16, 32 }, { 0, 0 } } },
	{ TFS_IOC_MOVE, 32, true, false, TFS_MOVE_CHAIN,
	  { { 12, 32 }, { 0, 0 } } },
	{ TFS_IOC_STAT, 88, true, true, TFS_STAT_CHAIN,
	  { { 20, 24 }, { 56, 88 } } },
	/* reserved0, freed (out only) and reserved[] */
	{ TFS_IOC_RECLAIM, 80, true, true, TFS_RECLAIM_UUID,
	  { { 12, 16 }, { 24, 32 }, { 48, 80 } } },
	/* state (out only); pending (out only), reserved0, reserved[] */
	{ TFS_IOC_PREFETCH, 64, true, true, TFS_PREFETCH_WAIT,
	  { { 12, 16 }, { 32, 64 }, { 0, 0 } } },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* The offsets above are the header's; say so once. */
	if (offsetof(struct tfs_ioc_export, cuda_runtime) != 12 ||
	    offsetof(struct tfs_ioc_export, caller_uuid) != 120 ||
	    offsetof(struct tfs_ioc_export, caller_pid) != 136 ||
	    offsetof(struct tfs_ioc_release, reserved) != 16 ||
	    offsetof(struct tfs_ioc_commit, waited) != 8 ||
	    offsetof(struct tfs_ioc_commit, reserved0) != 12 ||
	    offsetof(struct tfs_ioc_alloc, reserved) != 16 ||
	    offsetof(struct tfs_ioc_move, reserved0) != 12 ||
	    offsetof(struct tfs_ioc_stat, reserved0) != 20 ||
	    offsetof(struct tfs_ioc_stat, reserved) != 56 ||
	    sizeof(struct tfs_ioc_stat) != 88 ||
	    offsetof(struct tfs_ioc_reclaim, gpu) != 8 ||
	    offsetof(struct tfs_ioc_reclaim, reserved0) != 12 ||
	    offsetof(struct tfs_ioc_reclaim, freed) != 24 ||
	    offsetof(struct tfs_ioc_reclaim, uuid) != 32 ||
	    offsetof(struct tfs_ioc_reclaim, reserved) != 48 ||
	    offsetof(struct tfs_ioc_prefetch, state) != 12 ||
	    offsetof(struct tfs_ioc_prefetch, offset) != 16 ||
	    offsetof(struct tfs_ioc_prefetch, length) != 24 ||
	    offsetof(struct tfs_ioc_prefetch, pending) != 32 ||
	    sizeof(struct tfs_ioc_prefetch) != 64)
		abort();
	return 0;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static int reference(const struct tfs_ioc_req *r, const struct cmd *c,
		     const uint8_t *in)
{
	if (!c || r->compat)
		return -ENOTTY;
	/* A reclaim is about the mount and takes any descriptor. */
	if (c->cmd != TFS_IOC_RECLAIM && (r->dir || !r->has_file))
		return -ENOTTY;
	if (r->in_len != (c->in ? c->size : 0) ||
	    r->out_len != (c->out ? c->size : 0))
		return -EINVAL;
	if (rd32(in) != TFS_ABI_VERSION || (rd32(in + 4) & ~c->flags))
		return -EINVAL;
	for (int k = 0; k < 3; k++)
		for (unsigned int b = c->reserved[k].lo; b < c->reserved[k].hi;
		     b++)
			if (in[b])
				return -EINVAL;
	if (c->cmd == TFS_IOC_MOVE &&
	    rd32(in + 8) >= ((rd32(in + 4) & TFS_MOVE_CHAIN) ? TFS_TIER_MAX :
							       TFS_TIER_COUNT))
		return -EINVAL;
	if (c->cmd == TFS_IOC_COMMIT && rd32(in + 8) > TFS_COMMIT_WAITED_EVENT)
		return -EINVAL;
	if (c->cmd == TFS_IOC_ALLOC && !rd32(in + 8) && !rd32(in + 12))
		return -EINVAL;
	/* Without TFS_RECLAIM_UUID the UUID is reserved too, and the GPU
	 * an ordinal or -1. */
	if (c->cmd == TFS_IOC_RECLAIM && !(rd32(in + 4) & TFS_RECLAIM_UUID)) {
		if ((int32_t)rd32(in + 8) < -1)
			return -EINVAL;
		for (unsigned int b = 32; b < 48; b++)
			if (in[b])
				return -EINVAL;
	}
	if (c->cmd == TFS_IOC_PREFETCH) {
		uint64_t off = rd32(in + 16) | (uint64_t)rd32(in + 20) << 32;
		uint64_t len = rd32(in + 24) | (uint64_t)rd32(in + 28) << 32;

		if (rd32(in + 8) >= TFS_TIER_COUNT || off > INT64_MAX ||
		    len > INT64_MAX - off)
			return -EINVAL;
		if (!r->readable)
			return -EBADF;
	}
	if (c->cmd == TFS_IOC_EXPORT &&
	    (!r->readable || ((rd32(in + 4) & TFS_EXPORT_WRITE) && !r->writable)))
		return -EBADF;
	if (c->cmd == TFS_IOC_ALLOC && !r->writable)
		return -EBADF;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint8_t pick = fuzz_u8(&in), bits = fuzz_u8(&in);
	uint8_t inmode = fuzz_u8(&in), outmode = fuzz_u8(&in);
	const struct cmd *c = NULL;
	struct tfs_ioc_req r = { 0 };
	union tfs_ioc_args out;
	uint8_t buf[256] = { 0 };
	int rc, want;

	/* Mostly a real command, sometimes any number at all (a real
	 * command's number with another size or direction included). */
	if (pick % 16 < NCMDS) {
		c = &cmds[pick % 16];
		r.cmd = c->cmd;
	} else {
		r.cmd = fuzz_u32(&in);
		for (size_t k = 0; k < NCMDS; k++)
			if (cmds[k].cmd == r.cmd)
				c = &cmds[k];
	}
	r.compat = bits & 1;
	r.dir = bits & 2;
	r.has_file = !(bits & 4);
	r.readable = !(bits & 8);
	r.writable = !(bits & 16);
	/* Mostly the sizes the kernel would pass, sometimes others. */
	r.in_len = inmode < 224 ? (c && c->in ? c->size : 0) : inmode - 224;
	r.out_len = outmode < 224 ? (c && c->out ? c->size : 0) :
				    (outmode - 224) * 8;
	fuzz_bytes(&in, buf, sizeof(buf));
	/* Mostly the right version, and reserved words as the fuzzer
	 * leaves them. */
	if (!(bits & 32)) {
		buf[0] = TFS_ABI_VERSION;
		buf[1] = buf[2] = buf[3] = 0;
	}
	r.in = buf;

	memset(&out, 0xa5, sizeof(out));
	rc = tfs_ioc_check(&r, &out);
	want = reference(&r, c, buf);
	FUZZ_CHECK(rc == want, "cmd %#x compat %d dir %d file %d r %d w %d "
		   "in %zu out %zu: got %d, the contract says %d",
		   r.cmd, r.compat, r.dir, r.has_file, r.readable, r.writable,
		   r.in_len, r.out_len, rc, want);
	if (!rc)
		FUZZ_CHECK(!memcmp(&out, buf, c->size),
			   "the checked argument differs from what came in");
	return 0;
}
