// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * O_TMPFILE on libfuse 3.14. Linux 6.1 sends FUSE_TMPFILE for it, but
 * libfuse learnt the opcode only in 3.17: 3.14 answers ENOSYS, and the
 * kernel then gives every O_TMPFILE open on the mount EOPNOTSUPP for good.
 *
 * FUSE_TMPFILE is FUSE_CREATE under another opcode: the same fuse_create_in
 * and name in, the same entry and open reply out (fuse_create_open() in the
 * kernel serves both). So the session reads requests through this hook,
 * which renames FUSE_TMPFILE to FUSE_CREATE, and tfs_create() knows the
 * tmpfile by its name: the kernel names the unhashed dentry "/", which no
 * real create can carry. Nothing else in the request changes, nor in the
 * reply. With a libfuse that has the tmpfile op, this file goes.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/fs_i.h"

/* From <linux/fuse.h>, which clashes with libfuse's own headers. */
#define OP_CREATE 35u
#define OP_TMPFILE 51u
#define OPCODE_OFFSET 4 /* struct fuse_in_header { u32 len; u32 opcode; } */

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);
	uint32_t op;

	if (n < OPCODE_OFFSET + (ssize_t)sizeof(op))
		return n;
	memcpy(&op, (char *)buf + OPCODE_OFFSET, sizeof(op));
	if (op == OP_TMPFILE) {
		op = OP_CREATE;
		memcpy((char *)buf + OPCODE_OFFSET, &op, sizeof(op));
	}
	return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	return writev(fd, iov, count);
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
