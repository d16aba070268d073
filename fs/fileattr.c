// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * chattr and lsattr. The kernel answers FS_IOC_GETFLAGS/SETFLAGS and
 * FS_IOC_FSGETXATTR/FSSETXATTR itself (do_vfs_ioctl) and asks a FUSE daemon
 * through fileattr_get/set: it opens the inode for the purpose and sends
 * the command as an ioctl with a 4-byte flags word or a struct fsxattr,
 * after its own checks: the owner or CAP_FOWNER, and CAP_LINUX_IMMUTABLE to
 * change +i or +a (fileattr_set_prepare). Those checks are the gate: no
 * caller reaches the daemon with these commands any other way, since
 * do_vfs_ioctl() takes them for every filesystem with fileattr_set, 32-bit
 * callers included. The daemon does not check the caller's capabilities
 * again from /proc: overlayfs and nfsd call in with borrowed credentials
 * that /proc does not show, and would be refused what the kernel allowed.
 *
 * The flags kept are those tmpfs keeps: immutable, append-only, nodump and
 * noatime; others get EOPNOTSUPP, as on tmpfs. Like ext4, an immutable
 * inode refuses any other flag change until +i itself is cleared.
 *
 * +i and +a bind the writers that came before them, as on ext4: what the
 * kernel holds dirty of the file is written back first (ext4 flushes the
 * same way), then the flag is set, from when on the daemon refuses every
 * write-back that would change what the flag protects (data.c), and every
 * write export of the file is broken (its holder's next commit or release
 * gets ESTALE; what it wrote before is kept).
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <linux/fs.h>

#include "fs/fs_i.h"

static_assert(TFS_FL_IMMUTABLE == FS_IMMUTABLE_FL, "FS_IMMUTABLE_FL");
static_assert(TFS_FL_APPEND == FS_APPEND_FL, "FS_APPEND_FL");
static_assert(TFS_FL_NODUMP == FS_NODUMP_FL, "FS_NODUMP_FL");
static_assert(TFS_FL_NOATIME == FS_NOATIME_FL, "FS_NOATIME_FL");

bool tfs_fileattr_cmd(unsigned int cmd)
{
	switch (cmd) {
	case FS_IOC_GETFLAGS:
	case FS_IOC_SETFLAGS:
	case FS_IOC_FSGETXATTR:
	case FS_IOC_FSSETXATTR:
		return true;
	default:
		return false;
	}
}

static const struct {
	uint32_t fl, xfl;
} xflag_map[] = {
	{ TFS_FL_IMMUTABLE, FS_XFLAG_IMMUTABLE },
	{ TFS_FL_APPEND, FS_XFLAG_APPEND },
	{ TFS_FL_NODUMP, FS_XFLAG_NODUMP },
	{ TFS_FL_NOATIME, FS_XFLAG_NOATIME },
};

static uint32_t to_xflags(uint32_t fl)
{
	uint32_t x = 0;
	size_t k;

	for (k = 0; k < sizeof(xflag_map) / sizeof(xflag_map[0]); k++) {
		if (fl & xflag_map[k].fl)
			x |= xflag_map[k].xfl;
	}
	return x;
}

/* -EOPNOTSUPP for an xflag with no chattr flag here. */
static int from_xflags(uint32_t x, uint32_t *fl)
{
	size_t k;

	*fl = 0;
	for (k = 0; k < sizeof(xflag_map) / sizeof(xflag_map[0]); k++) {
		if (x & xflag_map[k].xfl) {
			*fl |= xflag_map[k].fl;
			x &= ~xflag_map[k].xfl;
		}
	}
	return x ? -EOPNOTSUPP : 0;
}

static int get_flags(fuse_ino_t ino, uint32_t *fl)
{
	struct tfs_inode *i;

	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (i)
		*fl = tfs_fsflags(i);
	tfs_ns_unlock();
	return i ? 0 : -ENOENT;
}

/*
 * Write back what the kernel holds dirty of @ino and drop its pages, while
 * the flags still let the write-backs in. The kernel sends them to other
 * workers and waits for their answers, so a single-threaded daemon cannot
 * (its dirty pages are then refused once the flag is set).
 */
static void write_back_now(fuse_ino_t ino)
{
	int rc;

	if (!tfs.multithreaded)
		return;
	rc = fuse_lowlevel_notify_inval_inode(tfs.se, ino, 0, 0);
	if (rc && rc != -ENOENT)
		tfs_warn("cannot write back the pages of inode %llu: %s",
			 (unsigned long long)ino, strerror(-rc));
}

static int set_flags(fuse_ino_t ino, uint32_t want)
{
	const uint32_t seal = TFS_FL_IMMUTABLE | TFS_FL_APPEND;
	struct tfs_inode *i;
	uint32_t old;
	bool sealing;
	int n, rc = 0;

	if (want & ~TFS_FL_USER)
		return -EOPNOTSUPP;
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (!i) {
		rc = -ENOENT;
		goto out;
	}
	old = tfs_fsflags(i);
	if ((old & want & TFS_FL_IMMUTABLE) && old != want) {
		rc = -EPERM;
		goto out;
	}
	/* The kernel holds the inode lock across fileattr_set: no other
	 * flag change comes in between. The kernel's open for this ioctl
	 * keeps @i. */
	sealing = S_ISREG(i->mode) && (want & seal & ~old);
	if (sealing) {
		tfs_ns_unlock();
		write_back_now(ino);
		tfs_ns_lock();
	}
	atomic_store_explicit(&i->fsflags, want, memory_order_relaxed);
	tfs_touch_locked(i, false);
out:
	tfs_ns_unlock();
	if (rc)
		return rc;
	/*
	 * The new ctime is ours alone: the kernel sends FS_IOC_SETFLAGS as
	 * an ioctl and keeps the attributes it cached (for a day) across it,
	 * so without this stat showed the old ctime until a remount.
	 */
	tfs_inval_attr(ino);
	if (!sealing)
		return 0;
	n = tier_buf_revoke(i->buf, TIER_REVOKE_ALL);
	if (n > 0)
		tfs_notice("inode %llu: ended %d write export%s: the file is "
			   "now %s", (unsigned long long)ino, n,
			   n == 1 ? "" : "s",
			   want & TFS_FL_IMMUTABLE ? "immutable" :
						     "append-only");
	return 0;
}

void tfs_fileattr_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd,
			const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct fsxattr fsx;
	uint32_t fl;
	int rc;

	/* The kernel sends an int for the flags, whatever _IOC_SIZE says. */
	switch (cmd) {
	case FS_IOC_GETFLAGS:
		if (in_bufsz || out_bufsz != sizeof(fl)) {
			rc = -EINVAL;
			break;
		}
		rc = get_flags(ino, &fl);
		if (!rc) {
			fuse_reply_ioctl(req, 0, &fl, sizeof(fl));
			return;
		}
		break;
	case FS_IOC_SETFLAGS:
		if (in_bufsz != sizeof(fl) || out_bufsz) {
			rc = -EINVAL;
			break;
		}
		memcpy(&fl, in_buf, sizeof(fl));
		rc = set_flags(ino, fl);
		break;
	case FS_IOC_FSGETXATTR:
		if (in_bufsz || out_bufsz != sizeof(fsx)) {
			rc = -EINVAL;
			break;
		}
		rc = get_flags(ino, &fl);
		if (!rc) {
			memset(&fsx, 0, sizeof(fsx));
			fsx.fsx_xflags = to_xflags(fl);
			fuse_reply_ioctl(req, 0, &fsx, sizeof(fsx));
			return;
		}
		break;
	default: /* FS_IOC_FSSETXATTR */
		if (in_bufsz != sizeof(fsx) || out_bufsz) {
			rc = -EINVAL;
			break;
		}
		memcpy(&fsx, in_buf, sizeof(fsx));
		/* No extent size hints or projects here, as on tmpfs. */
		if (fsx.fsx_extsize || fsx.fsx_projid || fsx.fsx_cowextsize) {
			rc = -EOPNOTSUPP;
			break;
		}
		rc = from_xflags(fsx.fsx_xflags, &fl);
		if (!rc)
			rc = set_flags(ino, fl);
		break;
	}
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_ioctl(req, 0, NULL, 0);
}
