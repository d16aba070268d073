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

static int ioc_export(fuse_req_t req, struct tfs_file *f,
		      const struct tfs_ioc_export *a, struct tfs_ioc_export *out)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	bool writable = a->flags & TFS_EXPORT_WRITE;
	int gpu = export_gpu(a->caller_uuid);
	pid_t pid = thread_group(ctx->pid);
	int rc;

	/* A GPU writes anywhere in the buffer: not an append. */
	if (writable && tfs_deny_sealed(f->inode))
		return -EPERM;
	if (writable)
		tfs_break_leases(req, f->inode, "export");
	memset(out, 0, sizeof(*out));
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
static int ioc_release(struct tfs_file *f, const struct tfs_ioc_release *a)
{
	return tier_buf_unexport(f->inode->buf, f->owner,
				 a->flags & TFS_RELEASE_UNMAPPED);
}

static int ioc_commit(struct tfs_file *f)
{
	int rc;

	if (tfs_deny_sealed(f->inode))
		return -EPERM;
	rc = tier_buf_commit(f->inode->buf, f->owner);
	if (rc < 0)
		return rc;
	mark_changed(f->inode);
	return 0;
}

static int ioc_alloc(struct tfs_file *f, const struct tfs_ioc_alloc *a)
{
	int rc;

	if (tfs_deny_sealed(f->inode))
		return -EPERM;
	rc = tier_buf_alloc_device(f->inode->buf, a->size);
	if (rc < 0)
		return rc;
	mark_changed(f->inode);
	return 0;
}

static int ioc_move(fuse_req_t req, struct tfs_file *f,
		    const struct tfs_ioc_move *a)
{
	int rc = tfs_may_write(req, f->inode);

	if (rc < 0)
		return rc;
	if (tfs_readonly_now())
		return -EROFS;
	tfs_break_leases(req, f->inode, "move");
	return tier_buf_move_as(f->inode->buf, (enum tfs_tier)a->tier, f->owner,
				fuse_req_ctx(req)->uid);
}

static void ioc_stat(struct tfs_file *f, struct tfs_ioc_stat *out)
{
	struct tier_buf_stat st;

	tier_buf_stat(f->inode->buf, &st);
	memset(out, 0, sizeof(*out));
	out->version = TFS_ABI_VERSION;
	out->tier = st.tier;
	out->pins = st.pins;
	out->leases = st.leases;
	out->size = st.size;
	out->stored_size = st.stored_size;
	out->last_access_ns = st.last_access_ns;
	out->generation = st.generation;
}

static int ioc_reclaim(const struct tfs_ioc_reclaim *a,
		       struct tfs_ioc_reclaim *out)
{
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
	memset(out, 0, sizeof(*out));
	out->version = TFS_ABI_VERSION;
	out->flags = a->flags;
	out->gpu = gpu;
	out->bytes = a->bytes;
	out->freed = freed;
	memcpy(out->uuid, a->uuid, sizeof(out->uuid));
	return 0;
}

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
	union {
		struct tfs_ioc_export exp;
		struct tfs_ioc_stat st;
		struct tfs_ioc_reclaim rec;
	} out;
	size_t out_len = 0;
	bool inval = false;
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
	switch (cmd) {
	case TFS_IOC_EXPORT:
		rc = ioc_export(req, f, &a.exp, &out.exp);
		out_len = sizeof(out.exp);
		break;
	case TFS_IOC_RELEASE:
		rc = ioc_release(f, &a.rel);
		break;
	case TFS_IOC_COMMIT:
		rc = ioc_commit(f);
		inval = true;
		break;
	case TFS_IOC_ALLOC:
		rc = ioc_alloc(f, &a.alloc);
		inval = true;
		break;
	case TFS_IOC_MOVE:
		rc = ioc_move(req, f, &a.move);
		inval = true;
		break;
	case TFS_IOC_RECLAIM:
		rc = ioc_reclaim(&a.rec, &out.rec);
		out_len = sizeof(out.rec);
		break;
	default:
		ioc_stat(f, &out.st);
		out_len = sizeof(out.st);
		break;
	}
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (inval)
		tfs_inval_attr(ino);
	if (cmd == TFS_IOC_ALLOC && tfs.writeback)
		tell_size(ino, tier_buf_size(f->inode->buf));
	fuse_reply_ioctl(req, 0, out_len ? &out : NULL, out_len);
}
