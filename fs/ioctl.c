// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The TFS_IOC_* commands of include/tierfs.h. FUSE only passes restricted
 * ioctls: the kernel copies _IOC_SIZE(cmd) bytes each way, so every command
 * is a fixed struct, checked field by field (tfs_ioc_check(), fs/args.c,
 * which the fuzzer tests/fuzz/fuzz_ioctl.c drives) before the store sees
 * it.
 *
 * Errors: an unknown command, a directory or a 32-bit compat caller get
 * ENOTTY (the ABI is only promised to 64-bit callers); a wrong version,
 * unknown flags, nonzero reserved words or a bad tier get EINVAL.
 *
 * An export gives no more than its descriptor does: any export needs a
 * file opened for reading (the mapping shows the bytes), one for writing a
 * file opened for reading and writing; otherwise EBADF, as read(2) or
 * write(2) would answer, since the descriptor, not the caller's
 * permissions, is what is wrong. A move changes where the file lives for
 * everyone, so it needs write permission on the file, as setting
 * user.tierfs.tier does (the kernel checks that one): EACCES otherwise.
 *
 * A commit, an alloc or a write export of an immutable or append-only file
 * gets EPERM: each rewrites bytes in place. A move or a pin does not change
 * a byte and is allowed, but not on a read-only mount (EROFS), where the
 * kernel refuses the setxattr that does the same.
 *
 * The owner's (or root's) move or write export ends other users' write
 * exports (tfs_break_leases()); their next commit or release gets ESTALE.
 *
 * An export goes to the caller's GPU, named by the UUID in the request
 * (export_gpu()), or the default one.
 *
 * TFS_IOC_RECLAIM is about the mount, not a file: it is answered on any
 * descriptor, a directory's (the mount root's) included, whatever it was
 * opened for. It changes no byte and shows none; it spills others' buffers
 * off the GPU as writing a file of that size would.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs/args.h"
#include "fs/fs_i.h"

static void mark_changed(struct tfs_inode *i)
{
	tfs_ns_lock();
	tfs_touch_locked(i, true);
	tfs_ns_unlock();
}

/*
 * Under the writeback cache the kernel keeps its own size of a file and
 * takes none from us, not even after an invalidation; a store into its
 * page cache past the end is the one thing that grows it. The allocation
 * zeroed the buffer, so storing the last byte as zero is exact. The file
 * was empty: no page of it can be locked by a read we would wait for.
 */
static void tell_size(fuse_ino_t ino, uint64_t size)
{
	static const char zero;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(1);
	int rc;

	if (!size)
		return;
	bv.buf[0].mem = (void *)&zero;
	rc = fuse_lowlevel_notify_store(tfs.se, ino, (off_t)size - 1, &bv, 0);
	if (rc && rc != -ENOENT)
		tfs_warn("cannot tell the kernel the size of inode %llu: %s",
			 (unsigned long long)ino, strerror(-rc));
}

/*
 * The GPU an export goes to: the caller's current one, named by the UUID
 * it sent. Zero (an older caller, or one with no CUDA context), a GPU this
 * mount does not serve, or bytes that are no UUID at all: the default GPU,
 * not an error, since where a buffer lives is a placement, which the
 * caller may not even know, and never a permission.
 */
static int export_gpu(const uint8_t uuid[16])
{
	static const uint8_t zero[16];
	int gpu = -ENXIO;

	if (memcmp(uuid, zero, sizeof(zero)))
		gpu = tier_store_gpu_by_uuid(tfs.store, uuid);
	return gpu >= 0 ? gpu : -1;
}

/*
 * The process of the thread @tid: FUSE names the calling thread, and the
 * export outlives it (a worker thread exports, ends, and its process keeps
 * mapping). Parked memory waits for this process, not the thread: a
 * pidfd of a thread that is not its group's leader cannot be had, and the
 * thread's exit said nothing about the mapping. 0 stays 0 (not visible
 * from the daemon's PID namespace); a thread gone already keeps its id,
 * which is the most that can be known.
 */
static pid_t thread_group(pid_t tid)
{
	char path[48], line[128];
	pid_t tgid = tid;
	FILE *f;

	if (tid <= 0)
		return tid;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return tid;
	while (fgets(line, sizeof(line), f)) {
		int v;

		if (sscanf(line, "Tgid: %d", &v) == 1) {
			tgid = v > 0 ? v : tid;
			break;
		}
	}
	fclose(f);
	return tgid;
}

/*
 * One command's call: what the kernel sent (checked), where the reply's
 * struct goes (its _IOC_SIZE when the command reads back) and whether the
 * kernel's cached attributes must be dropped before the reply.
 */
struct ioc_call {
	fuse_req_t req;
	fuse_ino_t ino;
	struct tfs_file *f; /* NULL for a TFS_IOC_ANY command on a directory */
	const union tfs_ioc_args *a;
	union tfs_ioc_args out;
	bool inval;
	bool tell_size; /* after the invalidation, tell the kernel the size */
};

static int ioc_exp(struct ioc_call *c)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(c->req);
	const struct tfs_ioc_export *a = &c->a->exp;
	struct tfs_ioc_export *out = &c->out.exp;
	struct tfs_file *f = c->f;
	bool writable = a->flags & TFS_EXPORT_WRITE;
	int gpu = export_gpu(a->caller_uuid);
	pid_t pid = thread_group(ctx->pid);
	int rc;

	/* A GPU writes anywhere in the buffer: not an append. */
	if (writable && tfs_deny_sealed(f->inode))
		return -EPERM;
	if (writable)
		tfs_break_leases(c->req, f->inode, "export");
	/* Its bytes are in a passthrough replica until that is copied
	 * back (a writer's shared mapping): the store's may be older. */
	if (tfs_pt_written(f->inode))
		return -EBUSY;
	out->version = TFS_ABI_VERSION;
	out->flags = a->flags;
	memcpy(out->caller_uuid, a->caller_uuid, sizeof(out->caller_uuid));
	/* The client compares it with its getpid(): another PID namespace
	 * is then a cause it can name when IPC fails. */
	out->caller_pid = pid > 0 ? (uint32_t)pid : 0;
	rc = tier_buf_export(f->inode->buf, f->owner, ctx->uid, ctx->gid, pid,
			     gpu, writable, out);
	if (rc < 0)
		return rc;
	tfs_ns_lock();
	f->exported = true;
	tfs_ns_unlock();
	return 0;
}

/* The generation is informational: a lease is per open file, and a commit
 * in between bumps it, so a mismatch must not keep the lease alive. */
static int ioc_rel(struct ioc_call *c)
{
	return tier_buf_unexport(c->f->inode->buf, c->f->owner,
				 c->a->rel.flags & TFS_RELEASE_UNMAPPED);
}

static int ioc_commit(struct ioc_call *c)
{
	int rc;

	if (tfs_deny_sealed(c->f->inode))
		return -EPERM;
	rc = tier_buf_commit(c->f->inode->buf, c->f->owner);
	if (rc < 0)
		return rc;
	tfs_pt_sync(c->f->inode, 0, UINT64_MAX);
	mark_changed(c->f->inode);
	c->inval = true;
	return 0;
}

static int ioc_alloc(struct ioc_call *c)
{
	int rc;

	if (tfs_deny_sealed(c->f->inode))
		return -EPERM;
	/* Copying the store's bytes into the replica after it would put
	 * them over what a writer's mapping wrote there. */
	if (tfs_pt_written(c->f->inode))
		return -EBUSY;
	rc = tier_buf_alloc_device(c->f->inode->buf, c->a->alloc.size);
	if (rc < 0)
		return rc;
	tfs_pt_sync(c->f->inode, 0, UINT64_MAX);
	mark_changed(c->f->inode);
	c->inval = true;
	c->tell_size = tfs.writeback;
	return 0;
}

static int ioc_move(struct ioc_call *c)
{
	int rc = tfs_may_write(c->req, c->f->inode);

	if (rc < 0)
		return rc;
	if (tfs_readonly_now())
		return -EROFS;
	tfs_break_leases(c->req, c->f->inode, "move");
	c->inval = true;
	return tier_buf_move_as(c->f->inode->buf,
				(enum tfs_tier)c->a->move.tier, c->f->owner,
				fuse_req_ctx(c->req)->uid);
}

static int ioc_stat(struct ioc_call *c)
{
	struct tfs_ioc_stat *out = &c->out.stat;
	struct tier_buf_stat st;

	tier_buf_stat(c->f->inode->buf, &st);
	out->version = TFS_ABI_VERSION;
	out->flags = c->a->stat.flags;
	/* A tier of [tiers] reads as disk unless asked for its place. */
	out->tier = (c->a->stat.flags & TFS_STAT_CHAIN) ? (uint32_t)st.chain :
							  st.tier;
	out->pins = st.pins;
	out->leases = st.leases;
	out->size = st.size;
	out->stored_size = st.stored_size;
	out->last_access_ns = st.last_access_ns;
	out->generation = st.generation;
	return 0;
}

static int ioc_rec(struct ioc_call *c)
{
	const struct tfs_ioc_reclaim *a = &c->a->rec;
	struct tfs_ioc_reclaim *out = &c->out.rec;
	uint64_t freed = 0;
	int gpu, rc;

	if (a->flags & TFS_RECLAIM_UUID)
		gpu = tier_store_gpu_by_uuid(tfs.store, a->uuid);
	else
		gpu = a->gpu < 0 ? tier_store_default_gpu(tfs.store) : a->gpu;
	if (gpu < 0)
		return gpu;
	rc = tier_store_reclaim(tfs.store, gpu, a->bytes, &freed);
	if (rc < 0)
		return rc;
	out->version = TFS_ABI_VERSION;
	out->flags = a->flags;
	out->gpu = gpu;
	out->bytes = a->bytes;
	out->freed = freed;
	memcpy(out->uuid, a->uuid, sizeof(out->uuid));
	return 0;
}

/*
 * Queued or found there, answered now; with TFS_PREFETCH_WAIT and queued,
 * answered by the prefetch thread (1: the request is its to answer).
 */
static int ioc_prefetch(struct ioc_call *c)
{
	const struct tfs_ioc_prefetch *a = &c->a->prefetch;
	struct tfs_ioc_prefetch *out = &c->out.prefetch;
	bool wait = a->flags & TFS_PREFETCH_WAIT;
	int rc;

	*out = *a;
	rc = tfs_prefetch(wait ? c->req : NULL, c->f->inode->buf,
			  (enum tfs_tier)a->tier, fuse_req_ctx(c->req)->uid,
			  out);
	if (rc < 0)
		return rc;
	return rc == 0 && wait ? 1 : 0;
}

/* The handler of each command of TFS_IOC_LIST (fs/args.h): one missing is
 * a build error. */
static const struct {
	unsigned int cmd;
	int (*run)(struct ioc_call *c);
} handlers[] = {
#define ROW(N, m, w) { TFS_IOC_##N, ioc_##m },
	TFS_IOC_LIST(ROW)
#undef ROW
};

void tfs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	       struct fuse_file_info *fi, unsigned int flags,
	       const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	struct tfs_ioc_req r = {
		.cmd = cmd,
		.compat = flags & FUSE_IOCTL_COMPAT,
		.dir = flags & FUSE_IOCTL_DIR,
		.has_file = f != NULL,
		.readable = f && f->readable,
		.writable = f && f->writable,
		.in = in_buf,
		.in_len = in_bufsz,
		.out_len = out_bufsz,
	};
	union tfs_ioc_args a;
	struct ioc_call c = { .req = req, .ino = ino, .f = f, .a = &a };
	size_t i, out_len;
	int rc;

	/* chattr and lsattr reach directories too. */
	if (tfs_fileattr_cmd(cmd)) {
		tfs_fileattr_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz);
		return;
	}
	rc = tfs_ioc_check(&r, &a);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	/* tfs_ioc_check() knows the command: so does this table. */
	for (i = 0; handlers[i].cmd != cmd; i++)
		;
	memset(&c.out, 0, sizeof(c.out));
	rc = handlers[i].run(&c);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (rc > 0) /* the handler answers it later */
		return;
	if (c.inval)
		tfs_inval_attr(ino);
	if (c.tell_size)
		tell_size(ino, tier_buf_size(f->inode->buf));
	out_len = (_IOC_DIR(cmd) & _IOC_READ) ? _IOC_SIZE(cmd) : 0;
	fuse_reply_ioctl(req, 0, out_len ? &c.out : NULL, out_len);
}
