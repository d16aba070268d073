// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Extended attributes. Any user.* name is stored on the inode like on any
 * filesystem; user.tierfs.* names are virtual: they show and steer where a
 * file's buffer lives.
 *
 * The virtual names are answered but never listed. cp -a, rsync -X and
 * tar --xattrs copy every listed name, and would then "restore" a tier, a
 * pin or read-only counters onto the copy: at best an EPERM on every file,
 * at worst a pin nobody asked for. Tools that know them ask by name.
 *
 * trusted.* names are stored as user.* ones are: overlayfs keeps its
 * whiteouts' opaque marks and redirects there, and refuses an upper
 * directory on a FUSE filesystem that cannot hold them. Only CAP_SYS_ADMIN
 * gets or sets them, and the kernel checks that before it asks
 * (xattr_permission()); it does not filter listxattr for FUSE, so the
 * daemon lists trusted.* names to callers with fsuid 0 only, which is
 * what overlayfs calls in as. A daemon-side check of the capability
 * itself would see the caller's own credentials, not the mounter's that
 * overlayfs borrows.
 *
 * Other namespaces hold nothing here. A get of security.* or system.*
 * answers ENODATA, as for a file without labels or ACLs (the kernel asks
 * for security.capability on every write); sets fail with EOPNOTSUPP,
 * which cp and tar report once or ignore.
 *
 * An immutable or append-only inode keeps its stored names (EPERM, as
 * xattr_permission() says), but its tier and pin may still change: they
 * move bytes, they do not change one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/limits.h>
#include <unistd.h>
#include <sys/xattr.h>

#include "fs/args.h"
#include "fs/fs_i.h"

#define USER_PREFIX "user."
#define TRUSTED_PREFIX "trusted."

static bool has_prefix(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* The namespaces stored on the inode (user.tierfs.* aside). */
static bool is_stored_ns(const char *name)
{
	return has_prefix(name, USER_PREFIX) ||
	       has_prefix(name, TRUSTED_PREFIX);
}

static bool is_quiet_ns(const char *name)
{
	return has_prefix(name, "security.") || has_prefix(name, "system.");
}

static struct tfs_xattr **xattr_find_locked(struct tfs_inode *i,
					    const char *name, size_t nlen)
{
	struct tfs_xattr **pp;

	for (pp = &i->xattrs; *pp; pp = &(*pp)->next) {
		if ((*pp)->nlen == nlen && !memcmp((*pp)->data, name, nlen))
			return pp;
	}
	return NULL;
}

/* Format a virtual attribute of @i into @buf; returns its length or -errno. */
static ssize_t virtual_get(struct tfs_inode *i, const char *name, char *buf,
			   size_t cap)
{
	struct tier_buf_stat st;
	size_t n;

	if (i == tfs.root && !strcmp(name, TFS_XATTR_STATS)) {
		n = tier_store_format_stats(tfs.store, buf, cap);
		n += tfs_daemon_stats(buf + (n < cap ? n : cap),
				      n < cap ? cap - n : 0);
		n += (size_t)snprintf(buf + (n < cap ? n : cap),
				      n < cap ? cap - n : 0,
				      "metadata.used=%" PRIu64 "\n"
				      "metadata.limit=%" PRIu64 "\n",
				      (uint64_t)atomic_load(&tfs.meta_used),
				      (uint64_t)atomic_load(&tfs.meta_limit));
		return n > cap ? -E2BIG : (ssize_t)n;
	}
	if (!S_ISREG(i->mode))
		return -ENODATA;
	tier_buf_stat(i->buf, &st);
	if (!strcmp(name, TFS_XATTR_TIER))
		n = (size_t)snprintf(buf, cap, "%s", tier_name(st.tier));
	else if (!strcmp(name, TFS_XATTR_SIZE))
		n = (size_t)snprintf(buf, cap, "%" PRIu64, st.size);
	else if (!strcmp(name, TFS_XATTR_STORED))
		n = (size_t)snprintf(buf, cap, "%" PRIu64, st.stored_size);
	else if (!strcmp(name, TFS_XATTR_ATIME))
		n = (size_t)snprintf(buf, cap, "%" PRIu64, st.last_access_ns);
	else if (!strcmp(name, TFS_XATTR_PINS))
		n = (size_t)snprintf(buf, cap, "%" PRIu64,
				     (uint64_t)st.pins + st.leases);
	else if (!strcmp(name, TFS_XATTR_PIN))
		n = (size_t)snprintf(buf, cap, "%d", st.pins > 0);
	else if (!strcmp(name, TFS_XATTR_DEVICE) && st.gpu >= 0)
		n = (size_t)snprintf(buf, cap, "%d", st.gpu);
	else
		return -ENODATA;
	return (ssize_t)n;
}

static int virtual_set(struct tfs_inode *i, const char *name,
		       const char *value, size_t size, uid_t uid)
{
	enum tfs_tier tier;
	bool pin;
	int rc, gpu;

	if (!S_ISREG(i->mode))
		return -EPERM;
	/* The values are parsed in fs/args.c, which the fuzzer
	 * tests/fuzz/fuzz_xattr.c drives. */
	if (!strcmp(name, TFS_XATTR_TIER)) {
		rc = tfs_xattr_parse_tier(value, size, &tier, &gpu);
		if (rc < 0)
			return rc;
		/* device:N: to that GPU's device tier, from another GPU if
		 * the copy is there; ENXIO for a GPU the mount does not
		 * serve. */
		if (gpu >= 0)
			return tier_buf_move_gpu(i->buf, gpu, 0, uid);
		return tier_buf_move_as(i->buf, tier, 0, uid);
	}
	if (!strcmp(name, TFS_XATTR_PIN)) {
		rc = tfs_xattr_parse_pin(value, size, &pin);
		if (rc < 0)
			return rc;
		rc = pin ? tier_buf_pin_as(i->buf, uid) :
			   tier_buf_unpin(i->buf);
		if (!rc) {
			/* A persistent mount keeps the pin. */
			tfs_ns_lock();
			i->pinned = pin;
			tfs_pj_attr_locked(i);
			tfs_ns_unlock();
		}
		return rc;
	}
	/* The counters, the stats and names not (yet) defined. */
	return -EPERM;
}

void tfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		  size_t size)
{
	char *buf = tfs_reply_buf();
	struct tfs_xattr **pp;
	struct tfs_inode *i;
	ssize_t len;

	if (!is_stored_ns(name)) {
		fuse_reply_err(req, is_quiet_ns(name) ? ENODATA : EOPNOTSUPP);
		return;
	}
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (!i) {
		len = -ENOENT;
	} else if (has_prefix(name, TFS_XATTR_PREFIX)) {
		len = 0; /* answered below, unlocked */
	} else {
		pp = xattr_find_locked(i, name, strlen(name));
		if (pp) {
			len = (*pp)->vlen;
			memcpy(buf, (*pp)->data + (*pp)->nlen + 1, (size_t)len);
		} else {
			len = -ENODATA;
		}
	}
	tfs_ns_unlock();
	if (i == tfs.root && !strcmp(name, TFS_XATTR_RECOVERY)) {
		const struct fuse_ctx *ctx = fuse_req_ctx(req);

		/* It names files in directories others may not read. */
		if (ctx->uid && ctx->uid != geteuid())
			len = -EACCES;
		else
			len = tfs_pj_notes(buf, TFS_IO_MAX);
	} else if (i && has_prefix(name, TFS_XATTR_PREFIX)) {
		len = virtual_get(i, name, buf, TFS_IO_MAX);
	}
	/*
	 * The stats change under their reader: getfattr asks the size, then
	 * reads with a buffer of exactly that, and a counter that gained a
	 * digit in between (the reserve watcher's first poll sets every
	 * deviceN.free) failed it with ERANGE. The size it is told leaves
	 * room for that; the read returns the true length.
	 */
	if (len >= 0 && !size && i == tfs.root &&
	    !strcmp(name, TFS_XATTR_STATS))
		len = len + 1024 < TFS_IO_MAX ? len + 1024 : TFS_IO_MAX;
	if (len < 0)
		fuse_reply_err(req, (int)-len);
	else if (!size)
		fuse_reply_xattr(req, (size_t)len);
	else if ((size_t)len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)len);
}

/* Trade an xattr of cost @oldc (0: none) for one of @newc in the metadata
 * budget: a replacement only needs room for what it adds. */
static int meta_replace(size_t oldc, size_t newc)
{
	if (newc > oldc)
		return tfs_meta_charge(newc - oldc);
	if (oldc > newc)
		tfs_meta_uncharge(oldc - newc);
	return 0;
}

static int user_set(struct tfs_inode *i, const char *name, const char *value,
		    size_t size, int flags)
{
	size_t nlen = strlen(name);
	struct tfs_xattr *x, **pp;
	int rc = 0;

	if (nlen > XATTR_NAME_MAX)
		return -ERANGE;
	if (size > TFS_XATTR_VALUE_MAX)
		return -E2BIG;
	x = malloc(sizeof(*x) + nlen + 1 + size);
	if (!x)
		return -ENOMEM;
	x->nlen = (uint8_t)nlen;
	x->vlen = (uint32_t)size;
	memcpy(x->data, name, nlen + 1);
	memcpy(x->data + nlen + 1, value, size);

	tfs_ns_lock();
	pp = xattr_find_locked(i, name, nlen);
	if (tfs_deny_sealed(i))
		rc = -EPERM;
	else if (pp && (flags & XATTR_CREATE))
		rc = -EEXIST;
	else if (!pp && (flags & XATTR_REPLACE))
		rc = -ENODATA;
	else if (i->xattr_bytes - (pp ? (*pp)->nlen + (*pp)->vlen : 0) +
			 nlen + size > TFS_XATTR_INODE_MAX)
		rc = -ENOSPC;
	else
		rc = meta_replace(pp ? tfs_xattr_cost((*pp)->nlen,
						      (*pp)->vlen) : 0,
				  tfs_xattr_cost(nlen, size));
	if (!rc) {
		i->xattr_bytes += (uint32_t)(nlen + size);
		if (pp) {
			struct tfs_xattr *old = *pp;

			i->xattr_bytes -= old->nlen + old->vlen;
			x->next = old->next;
			*pp = x;
			free(old);
		} else {
			x->next = i->xattrs;
			i->xattrs = x;
		}
		x = NULL;
		tfs_touch_locked(i, false);
	}
	tfs_ns_unlock();
	free(x);
	return rc;
}

void tfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		  const char *value, size_t size, int flags)
{
	struct tfs_inode *i;
	int rc;

	if (!is_stored_ns(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	tfs_ns_unlock();
	if (!i)
		rc = -ENOENT;
	else if (has_prefix(name, TFS_XATTR_PREFIX))
		rc = virtual_set(i, name, value, size, fuse_req_ctx(req)->uid);
	else
		rc = user_set(i, name, value, size, flags);
	fuse_reply_err(req, rc < 0 ? -rc : 0);
}

/* Whether listxattr shows @x to the caller (see the top of the file). */
static bool listed(const struct tfs_xattr *x, bool trusted)
{
	return trusted || strncmp(x->data, TRUSTED_PREFIX,
				  sizeof(TRUSTED_PREFIX) - 1);
}

void tfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	bool trusted = fuse_req_ctx(req)->uid == 0;
	char *buf = tfs_reply_buf();
	struct tfs_xattr *x;
	struct tfs_inode *i;
	size_t len = 0;
	int err = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (!i) {
		err = ENOENT;
	} else {
		for (x = i->xattrs; x; x = x->next) {
			if (listed(x, trusted))
				len += x->nlen + 1u;
		}
		if (size && len > size) {
			err = ERANGE;
		} else if (size) {
			len = 0;
			for (x = i->xattrs; x; x = x->next) {
				if (!listed(x, trusted))
					continue;
				memcpy(buf + len, x->data, x->nlen + 1u);
				len += x->nlen + 1u;
			}
		}
	}
	tfs_ns_unlock();
	if (err)
		fuse_reply_err(req, err);
	else if (!size)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, buf, len);
}

void tfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct tfs_xattr **pp, *x = NULL;
	struct tfs_inode *i;
	int err = 0;

	if (!is_stored_ns(name)) {
		fuse_reply_err(req, is_quiet_ns(name) ? ENODATA : EOPNOTSUPP);
		return;
	}
	if (has_prefix(name, TFS_XATTR_PREFIX)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (!i) {
		err = ENOENT;
	} else if (tfs_deny_sealed(i)) {
		err = EPERM;
	} else {
		pp = xattr_find_locked(i, name, strlen(name));
		if (!pp) {
			err = ENODATA;
		} else {
			x = *pp;
			*pp = x->next;
			i->xattr_bytes -= x->nlen + x->vlen;
			tfs_meta_uncharge(tfs_xattr_cost(x->nlen, x->vlen));
			tfs_touch_locked(i, false);
		}
	}
	tfs_ns_unlock();
	free(x);
	fuse_reply_err(req, err);
}
