// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The TFS_IOC_* commands of include/tierfs.h. FUSE only passes restricted
 * ioctls: the kernel copies _IOC_SIZE(cmd) bytes each way, so every command
 * is a fixed struct, checked here field by field before the store sees it.
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
 * a byte and is allowed.
 */
#include <errno.h>
#include <string.h>

#include "fs/fs_i.h"

static bool all_zero(const void *p, size_t len)
{
	const unsigned char *c = p;
	size_t k;

	for (k = 0; k < len; k++) {
		if (c[k])
			return false;
	}
	return true;
}

static int check_head(uint32_t version, uint32_t flags, uint32_t allowed)
{
	if (version != TFS_ABI_VERSION || (flags & ~allowed))
		return -EINVAL;
	return 0;
}

static void mark_changed(struct tfs_inode *i)
{
	tfs_ns_lock();
	tfs_touch_locked(i, true);
	tfs_ns_unlock();
}

/*
 * The daemon changed the file's attributes (mtime, size, st_blocks) behind
 * the kernel's cache: drop them before the reply, so that a stat after the
 * ioctl returns sees the change. Attributes only: that locks no page, so
 * it cannot wait for a read stuck behind this request. The pages, when
 * the bytes changed, go through the store's notification queue
 * (inval.c), and the next open drops them in any case.
 */
static void invalidate_attr(fuse_ino_t ino)
{
	int rc = fuse_lowlevel_notify_inval_inode(tfs.se, ino, -1, 0);

	if (rc && rc != -ENOENT)
		tfs_warn("cannot invalidate the attributes of inode %llu: %s",
			 (unsigned long long)ino, strerror(-rc));
}

static int ioc_export(fuse_req_t req, struct tfs_file *f, const void *in,
		      struct tfs_ioc_export *out)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct tfs_ioc_export a;
	bool writable;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = check_head(a.version, a.flags, TFS_EXPORT_WRITE);
	if (rc)
		return rc;
	if (a.reserved0 || !all_zero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	writable = a.flags & TFS_EXPORT_WRITE;
	if (!f->readable || (writable && !f->writable))
		return -EBADF;
	/* A GPU writes anywhere in the buffer: not an append. */
	if (writable && tfs_deny_sealed(f->inode))
		return -EPERM;
	memset(out, 0, sizeof(*out));
	out->version = TFS_ABI_VERSION;
	out->flags = a.flags;
	rc = tier_buf_export(f->inode->buf, f->owner, ctx->uid, ctx->gid,
			     writable, out);
	if (rc < 0)
		return rc;
	tfs_ns_lock();
	f->exported = true;
	tfs_ns_unlock();
	return 0;
}

/* The generation is informational: a lease is per open file, and a commit
 * in between bumps it, so a mismatch must not keep the lease alive. */
static int ioc_release(struct tfs_file *f, const void *in)
{
	struct tfs_ioc_release a;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = check_head(a.version, a.flags, 0);
	if (rc)
		return rc;
	if (!all_zero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	return tier_buf_unexport(f->inode->buf, f->owner);
}

static int ioc_commit(struct tfs_file *f, const void *in)
{
	struct tfs_ioc_commit a;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = check_head(a.version, a.flags, 0);
	if (rc)
		return rc;
	if (!all_zero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	if (tfs_deny_sealed(f->inode))
		return -EPERM;
	rc = tier_buf_commit(f->inode->buf, f->owner);
	if (rc < 0)
		return rc;
	mark_changed(f->inode);
	return 0;
}

static int ioc_alloc(struct tfs_file *f, const void *in)
{
	struct tfs_ioc_alloc a;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = check_head(a.version, a.flags, 0);
	if (rc)
		return rc;
	if (!all_zero(a.reserved, sizeof(a.reserved)) || !a.size)
		return -EINVAL;
	if (!f->writable)
		return -EBADF;
	if (tfs_deny_sealed(f->inode))
		return -EPERM;
	rc = tier_buf_alloc_device(f->inode->buf, a.size);
	if (rc < 0)
		return rc;
	mark_changed(f->inode);
	return 0;
}

static int ioc_move(fuse_req_t req, struct tfs_file *f, const void *in)
{
	struct tfs_ioc_move a;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = check_head(a.version, a.flags, 0);
	if (rc)
		return rc;
	if (a.reserved0 || !all_zero(a.reserved, sizeof(a.reserved)) ||
	    a.tier >= TFS_TIER_COUNT)
		return -EINVAL;
	rc = tfs_may_write(req, f->inode);
	if (rc < 0)
		return rc;
	return tier_buf_move(f->inode->buf, (enum tfs_tier)a.tier, f->owner);
}

static int ioc_stat(struct tfs_file *f, const void *in,
		    struct tfs_ioc_stat *out)
{
	struct tier_buf_stat st;
	struct tfs_ioc_stat a;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = check_head(a.version, a.flags, 0);
	if (rc)
		return rc;
	if (a.reserved0 || !all_zero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
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
	return 0;
}

void tfs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	       struct fuse_file_info *fi, unsigned int flags,
	       const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	union {
		struct tfs_ioc_export exp;
		struct tfs_ioc_stat st;
	} out;
	size_t size = _IOC_SIZE(cmd), out_len = 0;
	bool inval = false;
	int rc;

	/* chattr and lsattr reach directories too. */
	if (tfs_fileattr_cmd(cmd)) {
		tfs_fileattr_ioctl(req, ino, cmd, in_buf, in_bufsz, out_bufsz);
		return;
	}
	switch (cmd) {
	case TFS_IOC_EXPORT:
	case TFS_IOC_RELEASE:
	case TFS_IOC_COMMIT:
	case TFS_IOC_ALLOC:
	case TFS_IOC_MOVE:
	case TFS_IOC_STAT:
		break;
	default:
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if ((flags & (FUSE_IOCTL_COMPAT | FUSE_IOCTL_DIR)) || !f) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (((_IOC_DIR(cmd) & _IOC_WRITE) && in_bufsz != size) ||
	    (!(_IOC_DIR(cmd) & _IOC_WRITE) && in_bufsz) ||
	    ((_IOC_DIR(cmd) & _IOC_READ) && out_bufsz != size) ||
	    (!(_IOC_DIR(cmd) & _IOC_READ) && out_bufsz)) {
		fuse_reply_err(req, EINVAL);
		return;
	}

	switch (cmd) {
	case TFS_IOC_EXPORT:
		rc = ioc_export(req, f, in_buf, &out.exp);
		out_len = sizeof(out.exp);
		break;
	case TFS_IOC_RELEASE:
		rc = ioc_release(f, in_buf);
		break;
	case TFS_IOC_COMMIT:
		rc = ioc_commit(f, in_buf);
		inval = true;
		break;
	case TFS_IOC_ALLOC:
		rc = ioc_alloc(f, in_buf);
		inval = true;
		break;
	case TFS_IOC_MOVE:
		rc = ioc_move(req, f, in_buf);
		inval = true;
		break;
	default:
		rc = ioc_stat(f, in_buf, &out.st);
		out_len = sizeof(out.st);
		break;
	}
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (inval)
		invalidate_attr(ino);
	fuse_reply_ioctl(req, 0, out_len ? &out : NULL, out_len);
}
