// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Requests libfuse 3.14 does not know, taken off the device before it
 * sees them: the session reads through this hook (fuse_session_custom_io(),
 * which 3.14 has).
 *
 * O_TMPFILE. Linux 6.1 sends FUSE_TMPFILE for it, but libfuse learnt the
 * opcode only in 3.17: 3.14 answers ENOSYS, and the kernel then gives
 * every O_TMPFILE open on the mount EOPNOTSUPP for good. FUSE_TMPFILE is
 * FUSE_CREATE under another opcode: the same fuse_create_in and name in,
 * the same entry and open reply out (fuse_create_open() in the kernel
 * serves both). So the hook renames FUSE_TMPFILE to FUSE_CREATE, and
 * tfs_create() knows the tmpfile by its name: the kernel names the
 * unhashed dentry "/", which no real create can carry. Nothing else in the
 * request changes, nor in the reply.
 *
 * statx. Linux 6.6 sends FUSE_STATX when a statx() wants the birth time
 * (statx.h); libfuse 3.14 has no op for it, and its ENOSYS made the kernel
 * report no birth time on the mount, where tmpfs has one. The hook answers
 * it itself, on the descriptor it came from (a cloned one answers its own
 * requests), and reads the next request for libfuse.
 *
 * Passthrough (passthrough.c). libfuse 3.14 writes the INIT reply with
 * flags it knows and an OPEN reply with no backing id: the hook notes the
 * INIT request's flags, edits those two replies on their way out, and
 * probes the kernel once it has taken the INIT reply (the kernel sets the
 * connection up while it takes the write, so the probe after it sees it).
 *
 * With a libfuse that has the tmpfile and statx ops and passthrough, this
 * file goes.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/fs_i.h"
#include "fs/passthrough.h"
#include "fs/statx.h"

/* From <linux/fuse.h>, which clashes with libfuse's own headers. */
#define OP_CREATE 35u
#define OP_TMPFILE 51u

/* The reply to one FUSE_STATX: the inode as getattr has it, with its
 * birth time and its chattr flags as statx attributes. */
static void answer_statx(int fd, const struct tfs_fuse_in_header *in)
{
	struct {
		struct tfs_fuse_out_header h;
		struct tfs_fuse_statx_out x;
	} r;
	struct timespec btime;
	struct tfs_inode *i;
	struct stat st;
	uint32_t fl = 0;
	bool born = false;
	size_t len = sizeof(r);

	memset(&r, 0, sizeof(r));
	/* As tfs_getattr(): a persistent mount's root answers while the
	 * tree is restored, not to be cached. */
	if (in->nodeid == FUSE_ROOT_ID && tfs_ns_gate_root(&st, &fl)) {
		tfs_statx_fill(&r.x.stat, &st, NULL, fl);
		r.h.len = (uint32_t)len;
		r.h.unique = in->unique;
		if (write(fd, &r, len) < 0 && errno != ENOENT)
			tfs_warn("cannot answer a statx of the root: %s",
				 strerror(errno));
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(in->nodeid);
	if (i) {
		tfs_stat_locked(i, &st);
		btime = i->btime;
		born = btime.tv_sec || btime.tv_nsec;
		fl = tfs_fsflags(i);
	}
	tfs_ns_unlock();
	if (i) {
		tfs_stat_data(i, &st);
		tfs_statx_fill(&r.x.stat, &st, born ? &btime : NULL, fl);
		r.x.attr_valid = (uint64_t)tfs.attr_timeout;
	} else {
		r.h.error = -ENOENT;
		len = sizeof(r.h);
	}
	r.h.len = (uint32_t)len;
	r.h.unique = in->unique;
	tfs_debug("statx of inode %llu: %s, attributes %#llx of %#llx%s",
		  (unsigned long long)in->nodeid,
		  i ? "answered" : "no such inode",
		  (unsigned long long)r.x.stat.attributes,
		  (unsigned long long)r.x.stat.attributes_mask,
		  born ? ", with its birth time" : "");
	/* ENOENT: the request was interrupted and is gone; nothing waits. */
	if (write(fd, &r, len) < 0 && errno != ENOENT)
		tfs_warn("cannot answer a statx of inode %llu: %s",
			 (unsigned long long)in->nodeid, strerror(errno));
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	struct tfs_fuse_in_header h;
	ssize_t n;

	for (;;) {
		n = read(fd, buf, len);
		if (n < (ssize_t)sizeof(h))
			return n;
		memcpy(&h, buf, sizeof(h));
		if (h.opcode == TFS_FUSE_INIT) {
			tfs_pt_init_request((char *)buf + sizeof(h),
					    (size_t)n - sizeof(h), h.unique);
			return n;
		}
		if (h.opcode == OP_TMPFILE) {
			h.opcode = OP_CREATE;
			memcpy(buf, &h, sizeof(h));
			return n;
		}
		if (h.opcode != TFS_FUSE_STATX ||
		    n < (ssize_t)(sizeof(h) + sizeof(struct tfs_fuse_statx_in)))
			return n;
		answer_statx(fd, &h);
		if (fuse_session_exited(tfs.se))
			return 0;
	}
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct tfs_fuse_out_header h;
	bool init = false;
	ssize_t n;

	if (count >= 2 && iov[0].iov_len >= sizeof(h)) {
		memcpy(&h, iov[0].iov_base, sizeof(h));
		if (!h.error)
			init = tfs_pt_init_reply(h.unique, iov[1].iov_base,
						 iov[1].iov_len);
		tfs_pt_patch_reply(iov, count);
	}
	n = writev(fd, iov, count);
	if (init && n >= 0)
		tfs_pt_init_done();
	return n;
}

int tfs_tmpfile_attach(struct fuse_session *se)
{
	static const struct fuse_custom_io io = {
		.read = io_read,
		.writev = io_writev,
	};
	int fd = fuse_session_fd(se);

	return fd < 0 ? -EBADF : fuse_session_custom_io(se, &io, fd);
}
