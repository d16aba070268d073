// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Low-level FUSE operations on file data, passed straight to the buffer
 * store: read, write, flush, release, fsync, fallocate, lseek and
 * copy_file_range (ops.c holds the table). Only the handlers reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/fs_i.h"

/*
 * copy_file_range answers with a 32-bit count; callers loop on short copies,
 * so a bound well inside it costs nothing.
 */
#define TFS_COPY_MAX (1ULL << 30)
static void note_read(struct tfs_inode *i)
{
	tfs_ns_lock();
	tfs_atime_note_locked(i);
	tfs_ns_unlock();
}

/* Enough entries for TFS_IO_MAX in the smallest chunks, split twice. */
#define READ_IOV_MAX (TFS_IO_MAX / (64 * 1024) * 2 + 4)

/* A read copied into @buf: its @n bytes, or its error when negative. */
static void reply_copied(fuse_req_t req, struct tfs_file *f, const void *buf,
			 ssize_t n)
{
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	if (!f->noatime)
		note_read(f->inode);
	fuse_reply_buf(req, buf, (size_t)n);
}

void tfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	struct tfs_inode *i = f->inode;
	struct iovec iov[READ_IOV_MAX];
	unsigned flags = f->noatime ? TIER_READ_NOACCESS : 0;
	void *buf;
	ssize_t n;
	int niov;

	atomic_fetch_add_explicit(&tfs_read_requests, 1, memory_order_relaxed);
	if (size > TFS_IO_MAX)
		size = TFS_IO_MAX;
	if (f->pt == TFS_PT_DIRECT) {
		/* A writer's shared mapping may have written the replica. */
		buf = tfs_reply_buf();
		n = buf ? tfs_pt_read(f, buf, size, off) : -ENOMEM;
		if (n != -ENOENT) {
			reply_copied(req, f, buf, n);
			return;
		}
	}
	/*
	 * Reply straight from the host copy or sim device memory: one copy
	 * fewer per request. The store keeps those bytes in place until
	 * read_done; no lock is held across the reply.
	 */
	n = tier_buf_read_iov_as(i->buf, size, off, iov, READ_IOV_MAX, &niov,
				 flags);
	if (n > 0) {
		if (!f->noatime)
			note_read(i);
		fuse_reply_iov(req, iov, niov);
		tier_buf_read_done(i->buf);
		return;
	}
	if (n == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (n != -EAGAIN) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	buf = tfs_reply_buf();
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = tier_buf_read_as(i->buf, buf, size, off, flags);
	reply_copied(req, f, buf, n);
}

/* An append-only file takes a write through O_APPEND at its end only. */
static bool append_at_end(struct tfs_inode *i, int flags, off_t off)
{
	return (flags & O_APPEND) && (uint64_t)off == tier_buf_size(i->buf);
}

/*
 * Whether the kernel writing back @size bytes of its cache at @off may
 * change a file whose flags are @fl. An immutable file takes none; an
 * append-only one only what changes no byte it holds: a page goes back
 * whole, from its start, so an append (write(2) under the writeback
 * cache) brings the bytes before the old end along, unchanged, while a
 * shared mapping that rewrote them does not pass.
 */
static bool writeback_allowed(struct tfs_inode *i, uint32_t fl,
			      const char *data, size_t size, off_t off)
{
	uint64_t end = tier_buf_size(i->buf);
	size_t held;
	char *buf;

	if (fl & TFS_FL_IMMUTABLE)
		return false;
	if (!(fl & TFS_FL_APPEND) || (uint64_t)off >= end)
		return true;
	held = end - (uint64_t)off < size ? (size_t)(end - (uint64_t)off) :
					    size;
	buf = tfs_reply_buf();
	return buf && tier_buf_read_as(i->buf, buf, held, off,
				       TIER_READ_NOACCESS) == (ssize_t)held &&
	       !memcmp(buf, data, held);
}

void tfs_write(fuse_req_t req, fuse_ino_t ino, const char *data,
		      size_t size, off_t off, struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	struct tfs_inode *i = f->inode;
	uint32_t fl = tfs_fsflags(i);
	ssize_t n;

	/*
	 * fi->flags are the file's flags at the time of this write, so an
	 * O_APPEND cleared by fcntl() shows. A write-back of the kernel's
	 * cache (a shared mapping's pages, or write(2) under the writeback
	 * cache) carries no such flags: it is refused when it would change
	 * what the flags protect (writeback_allowed()), since a writer that
	 * came before chattr must not keep changing the file after it. The
	 * kernel then keeps the refused page, clean, with the writer's bytes:
	 * dropping the cached pages makes every reader see the file's.
	 * chattr wrote back what was dirty before it (fileattr.c).
	 */
	if (fl & (TFS_FL_IMMUTABLE | TFS_FL_APPEND)) {
		bool ok = fi->writepage ?
				  writeback_allowed(i, fl, data, size, off) :
				  !(fl & TFS_FL_IMMUTABLE) &&
					  append_at_end(i, fi->flags, off);

		if (!ok) {
			if (fi->writepage)
				tfs_inval_queue(NULL, ino, TIER_INVAL_DATA);
			fuse_reply_err(req, EPERM);
			return;
		}
	}
	/* A write-back carries no caller (uid 0): only writes break. */
	if (!fi->writepage)
		tfs_break_leases(req, i, "write");
	n = tier_buf_write(i->buf, data, size, off);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	tfs_pt_sync(i, (uint64_t)off, (uint64_t)n);
	tfs_ns_lock();
	tfs_touch_locked(i, true);
	i->flags |= TFS_I_DIRTY;
	tfs_ns_unlock();
	fuse_reply_write(req, (size_t)n);
}

/* Clear the dirty flag and place the buffer; on failure mark it dirty again
 * so that the next close retries. */
static int register_if_dirty(struct tfs_inode *i)
{
	bool dirty;
	int rc;

	tfs_ns_lock();
	dirty = i->flags & TFS_I_DIRTY;
	i->flags &= ~TFS_I_DIRTY;
	tfs_ns_unlock();
	if (!dirty)
		return 0;
	rc = tier_buf_register(i->buf);
	if (rc < 0) {
		tfs_ns_lock();
		i->flags |= TFS_I_DIRTY;
		tfs_ns_unlock();
		tfs_warn("cannot place inode %llu in its tier: %s",
			 (unsigned long long)i->ino, strerror(-rc));
	} else {
		tfs_ipol_place(i);
	}
	return rc;
}

/*
 * close(2) waits for flush but not for release, which the kernel sends in
 * the background. Registering at the flush of the only open file makes
 * "write, close, look at the tier" deterministic; release catches writes
 * that came later (a dup'd fd, a mapping).
 */
void tfs_flush(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	struct tfs_inode *i = f->inode;
	bool only;

	tfs_ns_lock();
	only = i->nopen == 1 && i->nlink;
	tfs_ns_unlock();
	/* A large file written in place on disk may still hold its last
	 * chunk in memory: a full disk must fail close(2), not vanish. */
	int rc = only ? register_if_dirty(i) : 0;

	/* persist = close: close(2) returns once the file is durable. */
	if (!rc && only && tfs_persist_close())
		rc = tfs_pj_sync(i, false);
	fuse_reply_err(req, rc < 0 ? -rc : 0);
}

void tfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	struct tfs_inode *i = f->inode, *reap = NULL;
	bool last;
	int rc;

	if (f->exported) {
		/* A close is no word that the mapping is gone. */
		rc = tier_buf_unexport(i->buf, f->owner, false);
		/* ESTALE: the owner broke it, which was logged then. */
		if (rc < 0 && rc != -ENOENT && rc != -ESTALE)
			tfs_warn("cannot drop the export of inode %llu: %s",
				 (unsigned long long)i->ino, strerror(-rc));
	}
	tfs_pt_release(i, f);
	tfs_ns_lock();
	tfs_file_unlink_locked(f);
	/* An unlinked file's buffer is about to go: no point placing it. */
	last = --i->nopen == 0 && i->nlink;
	tfs_inode_check_locked(i, &reap);
	tfs_ns_unlock();
	if (last && !reap) {
		register_if_dirty(i);
		/* Writes after the flush (a dup'd descriptor, a mapping). */
		if (tfs_persist_close())
			tfs_pj_sync(i, false);
	}
	tfs_reap(reap);
	free(f);
	fuse_reply_err(req, 0);
}

void tfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		      struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	int rc = register_if_dirty(f->inode);

	/* On a persistent mount, what it means on a disk filesystem: the
	 * bytes on the disk tier and in the journal, both synced. */
	if (!rc)
		rc = tfs_pj_sync(f->inode, true);
	fuse_reply_err(req, -rc);
}

void tfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t off, off_t len, struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	int rc;

	/* vfs_fallocate(): an append-only file may only be extended. */
	if (tfs_deny_immutable(f->inode) ||
	    ((mode & ~FALLOC_FL_KEEP_SIZE) && tfs_deny_sealed(f->inode))) {
		fuse_reply_err(req, EPERM);
		return;
	}
	/* What tmpfs has: allocate, keep the size, punch a hole. */
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (off < 0 || len <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	tfs_break_leases(req, f->inode, "allocate or punch");
	rc = tier_buf_fallocate(f->inode->buf,
				((mode & FALLOC_FL_KEEP_SIZE) ?
					 TIER_FALLOC_KEEP_SIZE : 0) |
				((mode & FALLOC_FL_PUNCH_HOLE) ?
					 TIER_FALLOC_PUNCH_HOLE : 0),
				(uint64_t)off, (uint64_t)len);
	if (!rc)
		tfs_pt_sync(f->inode, (uint64_t)off, (uint64_t)len);
	if (!rc) {
		tfs_ns_lock();
		/* As tmpfs: a punched hole changes the data, an allocation
		 * only the inode. */
		tfs_touch_locked(f->inode, mode & FALLOC_FL_PUNCH_HOLE);
		f->inode->flags |= TFS_I_DIRTY;
		tfs_ns_unlock();
	}
	fuse_reply_err(req, rc < 0 ? -rc : 0);
}

/*
 * SEEK_DATA and SEEK_HOLE; the kernel answers the other whences. It passes
 * a negative offset on as it came, and every Linux filesystem that seeks
 * data says ENXIO for one (tmpfs, ext4 and xfs through
 * mapping_seek_hole_data() or iomap), as for an offset at or past the end.
 */
void tfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		      struct fuse_file_info *fi)
{
	struct tfs_file *f = (struct tfs_file *)(uintptr_t)fi->fh;
	int64_t r;

	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	if (!S_ISREG(f->inode->mode)) {
		fuse_reply_err(req, ESPIPE);
		return;
	}
	r = tier_buf_seek(f->inode->buf, (uint64_t)off, whence == SEEK_HOLE);
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_lseek(req, (off_t)r);
}

void tfs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
				off_t off_in, struct fuse_file_info *fi_in,
				fuse_ino_t ino_out, off_t off_out,
				struct fuse_file_info *fi_out, size_t len,
				int flags)
{
	struct tfs_file *src = (struct tfs_file *)(uintptr_t)fi_in->fh;
	struct tfs_file *dst = (struct tfs_file *)(uintptr_t)fi_out->fh;
	ssize_t n;

	if (flags) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off_in < 0 || off_out < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (tfs_deny_sealed(dst->inode)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (len > TFS_COPY_MAX)
		len = TFS_COPY_MAX;
	/* Its bytes are in a passthrough replica, not the store: the
	 * kernel copies through read and write instead. */
	if (tfs_pt_written(src->inode)) {
		fuse_reply_err(req, EXDEV);
		return;
	}
	tfs_break_leases(req, dst->inode, "write");
	n = tier_buf_copy(dst->inode->buf, (uint64_t)off_out,
			  src->inode->buf, (uint64_t)off_in, len);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	if (n > 0) {
		tfs_pt_sync(dst->inode, (uint64_t)off_out, (uint64_t)n);
		tfs_ns_lock();
		tfs_touch_locked(dst->inode, true);
		dst->inode->flags |= TFS_I_DIRTY;
		tfs_ns_unlock();
	}
	fuse_reply_write(req, (size_t)n);
}
