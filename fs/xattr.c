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
 * POSIX ACLs (system.posix_acl_access and _default) are stored too, when
 * the kernel takes them (FUSE_POSIX_ACL): it checks permissions against
 * them and hands the daemon the rest, which acl.c's rules do here. Setting
 * an access ACL sets the mode's permission bits from it, and one the mode
 * says all of is not kept; chmod rewrites the access ACL's classes; a new
 * inode takes its directory's default ACL (tfs_acl_inherit_locked()).
 * They count against the metadata budget as any stored name.
 *
 * Other namespaces hold nothing here. A get of security.* or another
 * system.* name answers ENODATA, as for a file without labels (the kernel
 * asks for security.capability on every write); sets fail with
 * EOPNOTSUPP, which cp and tar report once or ignore.
 *
 * An immutable or append-only inode keeps its stored names (EPERM, as
 * xattr_permission() says), but its tier and pin may still change: they
 * move bytes, they do not change one. Not on a read-only mount: EROFS
 * (the kernel refuses first; the daemon checks too, as for the ioctl).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/limits.h>
#include <unistd.h>
#include <sys/xattr.h>

#include "fs/acl.h"
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
	       has_prefix(name, TRUSTED_PREFIX) ||
	       (tfs.posix_acl && tfs_acl_name(name));
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

static const char *write_name(int w)
{
	return w == TIER_WRITE_THROUGH ? "write_through" : "write_back";
}

static struct tfs_pin_value pin_of(const struct tfs_ipol *pol)
{
	return (struct tfs_pin_value){
		.hard = pol->pin == 1,
		.prio = pol->pin > 1 ? (uint8_t)(pol->pin - 1) : 0,
		.ttl = pol->pin > 1 ? pol->ttl : 0,
	};
}

static void pol_set_pin(struct tfs_ipol *pol, const struct tfs_pin_value *v)
{
	pol->pin = v->prio ? (uint8_t)(v->prio + 1) : v->hard;
	pol->ttl = v->prio ? v->ttl : 0;
}

/*
 * A directory's policy, as its files will start with it: the pin ("0"
 * without one), the write policy (the mount's without one of its own),
 * the preferred tier (ENODATA without one: the file goes where a new
 * file goes).
 */
static ssize_t dir_policy_get(struct tfs_inode *i, const char *name,
			      char *buf, size_t cap)
{
	struct tfs_ipol pol;

	tfs_ns_lock();
	pol = i->pol;
	tfs_ns_unlock();
	if (!strcmp(name, TFS_XATTR_PIN)) {
		struct tfs_pin_value v = pin_of(&pol);

		return tfs_xattr_format_pin(&v, buf, cap);
	}
	if (!strcmp(name, TFS_XATTR_WRITE))
		return snprintf(buf, cap, "%s",
				write_name(pol.write ? pol.write :
					   tier_store_write_policy(tfs.store)));
	if (!strcmp(name, TFS_XATTR_TIER) && pol.place)
		return snprintf(buf, cap, "%s",
				tier_name((enum tfs_tier)(pol.place - 1)));
	return -ENODATA;
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
		n += tfs_prefetch_stats(buf + (n < cap ? n : cap),
					n < cap ? cap - n : 0);
		n += tfs_pt_stats(buf + (n < cap ? n : cap),
				  n < cap ? cap - n : 0);
		n += (size_t)snprintf(buf + (n < cap ? n : cap),
				      n < cap ? cap - n : 0,
				      "metadata.used=%" PRIu64 "\n"
				      "metadata.limit=%" PRIu64 "\n"
				      "metadata.user_share=%" PRIu64 "\n",
				      (uint64_t)atomic_load(&tfs.meta_used),
				      (uint64_t)atomic_load(&tfs.meta_limit),
				      (uint64_t)atomic_load(
					      &tfs.meta_user_limit));
		return n > cap ? -E2BIG : (ssize_t)n;
	}
	if (S_ISDIR(i->mode))
		return dir_policy_get(i, name, buf, cap);
	if (!S_ISREG(i->mode))
		return -ENODATA;
	tier_buf_stat(i->buf, &st);
	if (!strcmp(name, TFS_XATTR_TIER))
		n = (size_t)snprintf(buf, cap, "%s",
				     tier_store_tier_name(tfs.store, st.chain));
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
		n = (size_t)tfs_xattr_format_pin(
			&(struct tfs_pin_value){ .hard = st.pins > 0,
						 .prio = (uint8_t)st.soft,
						 .ttl = st.soft_ttl },
			buf, cap);
	else if (!strcmp(name, TFS_XATTR_WRITE))
		n = (size_t)snprintf(buf, cap, "%s",
				     write_name(tier_buf_write_policy(i->buf)));
	else if (!strcmp(name, TFS_XATTR_DEVICE) && st.gpu >= 0)
		n = (size_t)snprintf(buf, cap, "%d", st.gpu);
	else
		return -ENODATA;
	return (ssize_t)n;
}

/*
 * setfattr's "No such device" says nothing of why: the log does, once. A
 * mount without a GPU gets its device tier from device_backend=sim.
 */
static void no_device_hint(void)
{
	static atomic_bool said;
	struct tier_store_stats st;

	if (atomic_exchange(&said, true))
		return;
	tier_store_stats(tfs.store, &st);
	if (!strcmp(st.device_state, "failed"))
		tfs_notice("a move to the device was refused (ENODEV): the "
			   "GPU failed (device.state=failed); a remount "
			   "brings it back");
	else
		tfs_notice("a move to the device was refused (ENODEV): this "
			   "mount has no device tier (backend %s); without a "
			   "GPU, device_backend=sim gives one in host memory",
			   st.backend);
}

/*
 * A directory's policy for the files and directories made in it from now
 * on: user.tierfs.pin, .write_policy (or "default": the mount's) and .tier
 * (a tier name, or "default": none). What is already in it keeps its own.
 */
static int dir_policy_set(struct tfs_inode *i, const char *name,
			  const char *value, size_t size)
{
	struct tfs_pin_value pv;
	enum tfs_tier tier;
	int rc, w, gpu;

	tfs_ns_lock();
	struct tfs_ipol pol = i->pol;

	tfs_ns_unlock();
	if (!strcmp(name, TFS_XATTR_PIN)) {
		rc = tfs_xattr_parse_pin_value(value, size, &pv);
		if (rc < 0)
			return rc;
		pol_set_pin(&pol, &pv);
	} else if (!strcmp(name, TFS_XATTR_WRITE)) {
		rc = tfs_xattr_parse_write(value, size, &w);
		if (rc < 0)
			return rc;
		pol.write = (uint8_t)w;
	} else if (!strcmp(name, TFS_XATTR_TIER)) {
		if (!tfs_xattr_parse_write(value, size, &w) && !w) {
			pol.place = 0;
		} else {
			rc = tfs_xattr_parse_tier(value, size, &tier, &gpu);
			/* A directory names a tier, not a GPU. */
			if (rc < 0 || gpu >= 0)
				return -EINVAL;
			pol.place = (uint8_t)(tier + 1);
		}
	} else {
		return -EPERM;
	}
	tfs_ns_lock();
	i->pol = pol;
	tfs_pj_attr_locked(i);
	tfs_ns_unlock();
	return 0;
}

static int virtual_set(fuse_req_t req, struct tfs_inode *i, const char *name,
		       const char *value, size_t size)
{
	uid_t uid = fuse_req_ctx(req)->uid;
	struct tfs_pin_value pv;
	enum tfs_tier tier;
	int rc, gpu, w;

	if (!S_ISREG(i->mode) && !S_ISDIR(i->mode))
		return -EPERM;
	if (tfs_readonly_now())
		return -EROFS;
	/* The values are parsed in fs/args.c, which the fuzzer
	 * tests/fuzz/fuzz_xattr.c drives. */
	if (S_ISDIR(i->mode))
		return dir_policy_set(i, name, value, size);
	if (!strcmp(name, TFS_XATTR_TIER)) {
		rc = tfs_xattr_parse_tier(value, size, &tier, &gpu);
		/* Or a tier of [tiers], by the name the mount gives it. */
		if (rc < 0 && (rc = tier_store_tier_parse(tfs.store, value,
							  size)) >= 0) {
			tier = (enum tfs_tier)rc;
			gpu = -1;
		}
		if (rc < 0)
			return rc;
		tfs_break_leases(req, i, "move");
		/* device:N: to that GPU's device tier, from another GPU if
		 * the copy is there; ENXIO for a GPU the mount does not
		 * serve. */
		if (gpu >= 0)
			rc = tier_buf_move_gpu(i->buf, gpu, 0, uid);
		else
			rc = tier_buf_move_as(i->buf, tier, 0, uid);
		if (rc == -ENODEV)
			no_device_hint();
		return rc;
	}
	if (!strcmp(name, TFS_XATTR_PIN)) {
		rc = tfs_xattr_parse_pin_value(value, size, &pv);
		if (rc < 0)
			return rc;
		if (pv.prio)
			rc = tier_buf_soft_pin_as(i->buf, uid, pv.prio, pv.ttl);
		else if (pv.hard)
			rc = tier_buf_pin_as(i->buf, uid);
		else
			rc = tier_buf_unpin(i->buf);
		if (!rc) {
			/* A persistent mount keeps the pin. */
			tfs_ns_lock();
			pol_set_pin(&i->pol, &pv);
			tfs_pj_attr_locked(i);
			tfs_ns_unlock();
		}
		return rc;
	}
	if (!strcmp(name, TFS_XATTR_WRITE)) {
		rc = tfs_xattr_parse_write(value, size, &w);
		if (rc < 0)
			return rc;
		tier_buf_set_write_policy(i->buf, (enum tier_write_policy)w);
		tfs_ns_lock();
		i->pol.write = (uint8_t)w;
		tfs_pj_attr_locked(i);
		tfs_ns_unlock();
		return 0;
	}
	/* The counters, the stats and names not (yet) defined. */
	return -EPERM;
}

void tfs_ipol_apply(struct tfs_inode *i, uid_t uid)
{
	tfs_ns_lock();
	struct tfs_ipol pol = i->pol;

	tfs_ns_unlock();
	if (pol.write)
		tier_buf_set_write_policy(i->buf,
					  (enum tier_write_policy)pol.write);
	if (!pol.pin)
		return;
	int rc = pol.pin == 1 ? tier_buf_pin_as(i->buf, uid) :
		 tier_buf_soft_pin_as(i->buf, uid, pol.pin - 1u, pol.ttl);

	if (rc) {
		tfs_ns_lock();
		i->pol.pin = 0;
		i->pol.ttl = 0;
		tfs_ns_unlock();
		tfs_info("inode %llu: its directory's pin not taken: %s",
			 (unsigned long long)i->ino, strerror(-rc));
	}
}

void tfs_ipol_place(struct tfs_inode *i)
{
	tfs_ns_lock();
	uint8_t place = i->pol.place;

	tfs_ns_unlock();
	if (!place)
		return;
	/* Where the tier has no room the file stays where it was placed. */
	int rc = tier_buf_move_as(i->buf, (enum tfs_tier)(place - 1), 0, 0);

	if (rc && rc != -ENOSPC && rc != -ENODEV && rc != -EBUSY)
		tfs_info("inode %llu: not moved to its directory's tier: %s",
			 (unsigned long long)i->ino, strerror(-rc));
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

/* Trade an xattr of cost @oldc (0: none) set by @olduid for one of @newc
 * set by @uid in the metadata budget: a replacement only needs room for
 * what it adds, unless it moves to another user's share. */
static int meta_replace(uid_t olduid, size_t oldc, uid_t uid, size_t newc)
{
	int rc;

	if (olduid != uid) {
		rc = tfs_meta_charge(uid, newc);
		if (!rc)
			tfs_meta_uncharge(olduid, oldc);
		return rc;
	}
	if (newc > oldc)
		return tfs_meta_charge(uid, newc - oldc);
	if (oldc > newc)
		tfs_meta_uncharge(uid, oldc - newc);
	return 0;
}

/* A new xattr, set by @uid: its metadata is charged to them. */
static struct tfs_xattr *xattr_new(const char *name, size_t nlen,
				   const void *value, size_t size, uid_t uid)
{
	struct tfs_xattr *x = malloc(sizeof(*x) + nlen + 1 + size);

	if (!x)
		return NULL;
	x->next = NULL;
	x->nlen = (uint8_t)nlen;
	x->vlen = (uint32_t)size;
	x->uid = uid;
	memcpy(x->data, name, nlen);
	x->data[nlen] = '\0';
	memcpy(x->data + nlen + 1, value, size);
	return x;
}

/*
 * Put @x on @i, in place of the value of that name if there is one, as
 * @flags (XATTR_CREATE, XATTR_REPLACE) allow, charging what it adds.
 * ns_lock held. On success @x is @i's and the value it replaced is freed.
 */
static int xattr_put_locked(struct tfs_inode *i, struct tfs_xattr *x,
			    int flags)
{
	struct tfs_xattr **pp = xattr_find_locked(i, x->data, x->nlen);
	int rc;

	if (pp && (flags & XATTR_CREATE))
		return -EEXIST;
	if (!pp && (flags & XATTR_REPLACE))
		return -ENODATA;
	if (i->xattr_bytes - (pp ? (*pp)->nlen + (*pp)->vlen : 0) + x->nlen +
		    x->vlen > TFS_XATTR_INODE_MAX)
		return -ENOSPC;
	rc = meta_replace(pp ? (*pp)->uid : x->uid,
			  pp ? tfs_xattr_cost((*pp)->nlen, (*pp)->vlen) : 0,
			  x->uid, tfs_xattr_cost(x->nlen, x->vlen));
	if (rc)
		return rc;
	i->xattr_bytes += x->nlen + x->vlen;
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
	return 0;
}

/* Take @name off @i, uncharged; the caller frees what it returns (NULL:
 * there was none). ns_lock held. */
static struct tfs_xattr *xattr_take_locked(struct tfs_inode *i,
					   const char *name)
{
	struct tfs_xattr **pp = xattr_find_locked(i, name, strlen(name)), *x;

	if (!pp)
		return NULL;
	x = *pp;
	*pp = x->next;
	i->xattr_bytes -= x->nlen + x->vlen;
	tfs_meta_uncharge(x->uid, tfs_xattr_cost(x->nlen, x->vlen));
	return x;
}

static int user_set(struct tfs_inode *i, const char *name, const char *value,
		    size_t size, int flags, uid_t uid)
{
	size_t nlen = strlen(name);
	struct tfs_xattr *x;
	int rc;

	if (nlen > XATTR_NAME_MAX)
		return -ERANGE;
	if (size > TFS_XATTR_VALUE_MAX)
		return -E2BIG;
	x = xattr_new(name, nlen, value, size, uid);
	if (!x)
		return -ENOMEM;
	tfs_ns_lock();
	rc = tfs_deny_sealed(i);
	if (!rc)
		rc = xattr_put_locked(i, x, flags);
	if (!rc) {
		x = NULL;
		tfs_touch_locked(i, false);
	}
	tfs_ns_unlock();
	free(x);
	return rc;
}

/*
 * system.posix_acl_access or _default. The kernel parsed, checked and
 * encoded the value afresh and checked that the caller owns the inode
 * (vfs_set_acl()); it leaves the mode to the daemon ("userspace is
 * responsible for updating access permissions", fuse_set_acl()) and
 * drops its cached attributes after, so stat shows the new mode.
 */
static int acl_set(fuse_req_t req, struct tfs_inode *i, const char *name,
		   const char *value, size_t size, int flags)
{
	bool access = !strcmp(name, TFS_ACL_ACCESS), keep = true, kill_sgid;
	struct tfs_xattr *x = NULL, *old = NULL;
	uint32_t mode, gid;
	int rc;

	if (size > TFS_XATTR_VALUE_MAX)
		return -E2BIG;
	if (tfs_acl_check(value, size))
		return -EINVAL;
	/* As set_posix_acl() says for a default ACL on a file. */
	if (!access && !S_ISDIR(i->mode))
		return -EACCES;
	x = xattr_new(name, strlen(name), value, size, fuse_req_ctx(req)->uid);
	if (!x)
		return -ENOMEM;
	tfs_ns_lock();
	gid = i->gid;
	tfs_ns_unlock();
	/* posix_acl_update_mode(): a caller outside the group, without
	 * CAP_FSETID (root stands for it here), loses the setgid bit. */
	kill_sgid = fuse_req_ctx(req)->uid != 0 && !tfs_req_in_group(req, gid);
	tfs_ns_lock();
	rc = tfs_deny_sealed(i);
	if (rc)
		goto out_unlock;
	mode = i->mode;
	if (access)
		keep = tfs_acl_update_mode(value, size, &mode);
	if (keep)
		rc = xattr_put_locked(i, x, flags);
	else
		old = xattr_take_locked(i, name);
	if (rc)
		goto out_unlock;
	if (keep)
		x = NULL;
	if (access) {
		if (kill_sgid)
			mode &= ~(uint32_t)S_ISGID;
		i->mode = mode;
	}
	tfs_touch_locked(i, false);
out_unlock:
	tfs_ns_unlock();
	free(x);
	free(old);
	return rc;
}

int tfs_acl_inherit_locked(const struct tfs_inode *dir, uint32_t *mode,
			   mode_t umask, uid_t by, struct tfs_xattr **acls)
{
	struct tfs_xattr **pp, *acc = NULL, *dflt = NULL;
	size_t cost = 0;
	int rc;

	*acls = NULL;
	if (!tfs.posix_acl || S_ISLNK(*mode))
		return 0;
	pp = xattr_find_locked((struct tfs_inode *)dir, TFS_ACL_DEFAULT,
			       strlen(TFS_ACL_DEFAULT));
	if (!pp) {
		*mode &= ~(uint32_t)(umask & 0777);
		return 0;
	}
	const char *v = (*pp)->data + (*pp)->nlen + 1;
	size_t len = (*pp)->vlen;

	acc = xattr_new(TFS_ACL_ACCESS, strlen(TFS_ACL_ACCESS), v, len, by);
	if (S_ISDIR(*mode))
		dflt = xattr_new(TFS_ACL_DEFAULT, strlen(TFS_ACL_DEFAULT), v,
				 len, by);
	if (!acc || (S_ISDIR(*mode) && !dflt)) {
		rc = -ENOMEM;
		goto out_free;
	}
	if (!tfs_acl_create(acc->data + acc->nlen + 1, len, mode)) {
		free(acc);
		acc = NULL;
	}
	if (acc)
		cost += tfs_xattr_cost(acc->nlen, acc->vlen);
	if (dflt)
		cost += tfs_xattr_cost(dflt->nlen, dflt->vlen);
	rc = tfs_meta_charge(by, cost);
	if (rc)
		goto out_free;
	if (acc) {
		acc->next = dflt;
		*acls = acc;
	} else {
		*acls = dflt;
	}
	return 0;
out_free:
	free(acc);
	free(dflt);
	return rc;
}

void tfs_acl_adopt_locked(struct tfs_inode *i, struct tfs_xattr *acls)
{
	while (acls) {
		struct tfs_xattr *x = acls;

		acls = x->next;
		x->next = i->xattrs;
		i->xattrs = x;
		i->xattr_bytes += x->nlen + x->vlen;
	}
}

void tfs_acl_drop(struct tfs_xattr *acls)
{
	while (acls) {
		struct tfs_xattr *x = acls;

		acls = x->next;
		tfs_meta_uncharge(x->uid, tfs_xattr_cost(x->nlen, x->vlen));
		free(x);
	}
}

void tfs_acl_chmod_locked(struct tfs_inode *i)
{
	struct tfs_xattr **pp;

	if (!tfs.posix_acl)
		return;
	pp = xattr_find_locked(i, TFS_ACL_ACCESS, strlen(TFS_ACL_ACCESS));
	if (pp)
		tfs_acl_chmod((*pp)->data + (*pp)->nlen + 1, (*pp)->vlen,
			      i->mode);
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
		rc = virtual_set(req, i, name, value, size);
	else if (tfs_acl_name(name))
		rc = acl_set(req, i, name, value, size, flags);
	else
		rc = user_set(i, name, value, size, flags,
			      fuse_req_ctx(req)->uid);
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
	struct tfs_xattr *x = NULL;
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
		x = xattr_take_locked(i, name);
		if (!x)
			err = ENODATA;
		else
			tfs_touch_locked(i, false);
	}
	tfs_ns_unlock();
	free(x);
	fuse_reply_err(req, err);
}
