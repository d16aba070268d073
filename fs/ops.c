// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Low-level FUSE operations: the namespace (lookup, create, rename, ...)
 * on the tables of inode.c, open, and the table of handlers (file data in
 * data.c). Helpers return 0 or -errno; only the handlers reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs/fs_i.h"

#define TFS_REPLY_BUF_SIZE (TFS_IO_MAX + 64 * 1024)

static pthread_key_t reply_key;
static pthread_once_t reply_once = PTHREAD_ONCE_INIT;

static void reply_buf_free(void *p)
{
	munmap(p, TFS_REPLY_BUF_SIZE);
}

static void reply_key_create(void)
{
	if (pthread_key_create(&reply_key, reply_buf_free))
		abort();
}

/*
 * One buffer per worker thread, faulted in once: a 1 MiB read then costs a
 * copy from the store and nothing else, where malloc would hand large
 * blocks back to the kernel and fault them in again on every read.
 */
void *tfs_reply_buf(void)
{
	void *p;

	pthread_once(&reply_once, reply_key_create);
	p = pthread_getspecific(reply_key);
	if (p)
		return p;
	p = mmap(NULL, TFS_REPLY_BUF_SIZE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (pthread_setspecific(reply_key, p)) {
		munmap(p, TFS_REPLY_BUF_SIZE);
		return NULL;
	}
	return p;
}

/* The kernel pins @ino for the whole request, so the pointer stays valid
 * after the lock is dropped. */
static struct tfs_inode *iget(fuse_ino_t ino)
{
	struct tfs_inode *i;

	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	tfs_ns_unlock();
	return i;
}

static int check_name(const char *name, size_t *len)
{
	*len = strlen(name);
	if (*len > TFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (*len == 0)
		return -ENOENT;
	return 0;
}

static void forget_one(struct tfs_inode *i)
{
	struct tfs_inode *reap = NULL;

	tfs_ns_lock();
	tfs_forget_locked(i, 1, &reap);
	tfs_ns_unlock();
	tfs_reap(reap);
}

/* Hand the lookup reference taken for @i to the kernel, or drop it when
 * the kernel is no longer listening (an interrupted request). */
static void reply_entry(fuse_req_t req, struct tfs_inode *i,
			const struct stat *st)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = i->ino;
	e.generation = i->generation;
	e.attr = *st;
	e.attr_timeout = tfs.attr_timeout;
	e.entry_timeout = tfs.entry_timeout;
	if (fuse_reply_entry(req, &e))
		forget_one(i);
}

/*
 * "." and ".." come only from the kernel's export code: "." of any inode
 * when a file handle names one it no longer caches (open_by_handle_at,
 * nfsd), ".." of a directory to reconnect it. An inode without a name is
 * gone for a handle, though it may live on for its last open file: that
 * file would keep the kernel's inode cached, which then never asks.
 */
static struct tfs_inode *lookup_dots_locked(struct tfs_inode *p,
					    const char *name, int *err)
{
	/* A removed directory's parent pointer may be stale. */
	if (!p->nlink) {
		*err = ENOENT;
		return NULL;
	}
	if (!strcmp(name, "."))
		return p;
	if (!S_ISDIR(p->mode)) {
		*err = ENOTDIR;
		return NULL;
	}
	return p->dir->parent;
}

static void tfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct tfs_inode *p, *i;
	struct tfs_dentry *d;
	struct stat st;
	size_t len;
	int rc;

	rc = check_name(name, &len);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	tfs_ns_lock();
	p = tfs_inode_get_locked(parent);
	if (p && name[0] == '.' &&
	    (len == 1 || (len == 2 && name[1] == '.'))) {
		int err = 0;

		i = lookup_dots_locked(p, name, &err);
		if (!i) {
			tfs_ns_unlock();
			fuse_reply_err(req, err);
			return;
		}
		goto found;
	}
	if (!p || !S_ISDIR(p->mode)) {
		tfs_ns_unlock();
		fuse_reply_err(req, p ? ENOTDIR : ENOENT);
		return;
	}
	d = tfs_dentry_find_locked(p, name, len);
	if (!d) {
		tfs_ns_unlock();
		/* Every change goes through this kernel: caching the miss is
		 * safe and spares a round trip per create. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = tfs.entry_timeout;
		fuse_reply_entry(req, &e);
		return;
	}
	i = d->inode;
found:
	i->nlookup++;
	tfs_stat_locked(i, &st);
	tfs_ns_unlock();
	tfs_stat_data(i, &st);
	reply_entry(req, i, &st);
}

static void tfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct tfs_inode *i, *reap = NULL;

	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (i)
		tfs_forget_locked(i, nlookup, &reap);
	tfs_ns_unlock();
	tfs_reap(reap);
	fuse_reply_none(req);
}

static void tfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	struct tfs_inode *i, *reap = NULL;
	size_t k;

	tfs_ns_lock();
	for (k = 0; k < count; k++) {
		i = tfs_inode_get_locked(forgets[k].ino);
		if (i)
			tfs_forget_locked(i, forgets[k].nlookup, &reap);
	}
	tfs_ns_unlock();
	tfs_reap(reap);
	fuse_reply_none(req);
}

static void tfs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct tfs_inode *i;
	struct stat st;

	/* A persistent mount answers this while its tree is restored, not
	 * to be cached: lost+found may still change the root. */
	if (ino == FUSE_ROOT_ID && tfs_ns_gate_root(&st, NULL)) {
		fuse_reply_attr(req, &st, 0);
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (!i) {
		tfs_ns_unlock();
		fuse_reply_err(req, ENOENT);
		return;
	}
	tfs_stat_locked(i, &st);
	tfs_ns_unlock();
	tfs_stat_data(i, &st);
	fuse_reply_attr(req, &st, tfs.attr_timeout);
}

static void set_time(struct timespec *dst, const struct timespec *src,
		     bool now, const struct timespec *ts_now)
{
	*dst = now ? *ts_now : *src;
}

/*
 * notify_change() for an immutable or append-only inode: the first takes
 * no change at all; the second only setting its times to now (touch).
 */
/*
 * Under the writeback cache the kernel owns mtime and ctime: it updates
 * them itself (on writes, and the ctime on every change it makes, an xattr
 * too), pushes them later with a setattr of exactly those two, and turns
 * a touch's "now" into its own clock's time. None of that is a user
 * setting the times, which on an append-only or immutable file would be
 * refused; refusing the kernel's fails the next close(2) with EIO. A
 * user's explicit mtime looks the same and passes too; only an explicit
 * atime still tells: the price of the option (doc/design.md).
 */
static bool kernel_times(int to_set)
{
	return tfs.writeback &&
	       !(to_set & ~(FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME));
}

static int check_setattr(const struct tfs_inode *i, int to_set)
{
	bool set_times = ((to_set & FUSE_SET_ATTR_ATIME) &&
			  !(to_set & FUSE_SET_ATTR_ATIME_NOW)) ||
			 ((to_set & FUSE_SET_ATTR_MTIME) &&
			  !(to_set & FUSE_SET_ATTR_MTIME_NOW) && !tfs.writeback);

	if (kernel_times(to_set))
		return 0;
	if (to_set && tfs_deny_immutable(i))
		return -EPERM;
	if ((set_times || (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE |
				     FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) &&
	    tfs_deny_sealed(i))
		return -EPERM;
	return 0;
}

static void tfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int to_set, struct fuse_file_info *fi)
{
	struct timespec now;
	struct tfs_inode *i = iget(ino);
	struct stat st;
	int rc;

	if (!i) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = check_setattr(i, to_set);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	/* The owner's truncate, chmod or chown ends other users' write
	 * exports, which would otherwise block it or outlive the change. */
	if (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE |
		      FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))
		tfs_break_leases(req, i, to_set & FUSE_SET_ATTR_SIZE ?
						 "truncate" :
						 "change the mode or owner of");
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (S_ISDIR(i->mode)) {
			fuse_reply_err(req, EISDIR);
			return;
		}
		if (!S_ISREG(i->mode)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		if (attr->st_size < 0) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		rc = tier_buf_truncate(i->buf, (uint64_t)attr->st_size);
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			return;
		}
		tfs_pt_sync(i, (uint64_t)attr->st_size, 0);
	}
	tfs_now(&now);
	tfs_ns_lock();
	if (to_set & FUSE_SET_ATTR_MODE) {
		i->mode = (i->mode & S_IFMT) | (attr->st_mode & 07777);
		/* posix_acl_chmod(), which the kernel leaves to us. */
		tfs_acl_chmod_locked(i);
	}
	if (to_set & FUSE_SET_ATTR_UID)
		i->uid = attr->st_uid;
	if (to_set & FUSE_SET_ATTR_GID)
		i->gid = attr->st_gid;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		i->mtime = now;
		i->flags |= TFS_I_DIRTY;
	}
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW))
		set_time(&i->atime, &attr->st_atim,
			 to_set & FUSE_SET_ATTR_ATIME_NOW, &now);
	if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))
		set_time(&i->mtime, &attr->st_mtim,
			 to_set & FUSE_SET_ATTR_MTIME_NOW, &now);
	if (to_set & FUSE_SET_ATTR_CTIME)
		i->ctime = attr->st_ctim;
	else
		i->ctime = now;
	tfs_pj_attr_locked(i);
	if (to_set & FUSE_SET_ATTR_SIZE)
		tfs_pj_dirty_locked(i);
	tfs_stat_locked(i, &st);
	tfs_ns_unlock();
	tfs_stat_data(i, &st);
	fuse_reply_attr(req, &st, tfs.attr_timeout);
}

/*
 * Create a named inode of @mode in @parent and take one lookup reference on
 * it for the reply. A regular file's buffer is made before the lock is
 * taken: the store has its own lock and the namespace must not wait on it.
 */
static int make_node(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev, const char *target,
		     struct tfs_inode **out, struct stat *st)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct tier_buf *buf = NULL;
	struct tfs_inode *p, *i, *reap = NULL;
	struct tfs_xattr *acls = NULL;
	uint32_t m = mode;
	char *tcopy = NULL;
	gid_t gid = ctx->gid;
	size_t len;
	int rc;

	rc = check_name(name, &len);
	if (rc)
		return rc;
	if (S_ISREG(mode)) {
		rc = tier_buf_new(tfs.store, &buf);
		if (rc < 0)
			return rc;
	} else if (S_ISLNK(mode)) {
		tcopy = strdup(target);
		if (!tcopy)
			return -ENOMEM;
	}
	tfs_ns_lock();
	p = tfs_inode_get_locked(parent);
	if (!p || !p->nlink) {
		rc = -ENOENT;
		goto out_unlock;
	}
	if (!S_ISDIR(p->mode)) {
		rc = -ENOTDIR;
		goto out_unlock;
	}
	if (tfs_dentry_find_locked(p, name, len)) {
		rc = -EEXIST;
		goto out_unlock;
	}
	rc = tfs_deny_immutable(p);
	if (rc)
		goto out_unlock;
	if (p->mode & S_ISGID) {
		gid = p->gid;
		if (S_ISDIR(m))
			m |= S_ISGID;
	}
	rc = tfs_acl_inherit_locked(p, &m, ctx->umask, ctx->uid, &acls);
	if (rc)
		goto out_unlock;
	rc = tfs_inode_new_locked(m, ctx->uid, gid, rdev, buf, tcopy, &i);
	if (rc)
		goto out_unlock;
	buf = NULL;
	tcopy = NULL;
	tfs_inherit_flags_locked(i, p);
	tfs_acl_adopt_locked(i, acls);
	acls = NULL;
	rc = tfs_dentry_add_locked(p, name, len, i, ctx->uid);
	if (rc) {
		tfs_inode_check_locked(i, &reap);
		goto out_unlock;
	}
	if (S_ISDIR(mode)) {
		i->nlink = 2;
		i->dir->parent = p;
		p->nlink++;
	} else {
		i->nlink = 1;
	}
	i->nlookup++;
	tfs_touch_locked(p, true);
	tfs_stat_locked(i, st);
	*out = i;
out_unlock:
	tfs_ns_unlock();
	if (!rc && S_ISREG(m))
		tfs_ipol_apply(i, ctx->uid);
	tfs_acl_drop(acls);
	tfs_reap(reap);
	if (buf)
		tier_buf_destroy(buf);
	free(tcopy);
	return rc;
}

/*
 * An O_TMPFILE file (see tmpfile.c): a regular file in no directory, with
 * no link, a lookup reference for the reply, alive while it is open, and
 * which linkat() may give a first name unless it was opened O_EXCL.
 */
static int make_tmpfile(fuse_req_t req, fuse_ino_t parent, mode_t mode,
			int flags, struct tfs_inode **out, struct stat *st)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct tfs_xattr *acls = NULL;
	uint32_t m = S_IFREG | (mode & 07777);
	struct tier_buf *buf;
	struct tfs_inode *p, *i;
	gid_t gid = ctx->gid;
	int rc;

	rc = tier_buf_new(tfs.store, &buf);
	if (rc < 0)
		return rc;
	tfs_ns_lock();
	p = tfs_inode_get_locked(parent);
	if (!p || !p->nlink)
		rc = -ENOENT;
	else if (!S_ISDIR(p->mode))
		rc = -ENOTDIR;
	else
		rc = tfs_deny_immutable(p);
	if (rc)
		goto out_unlock;
	if (p->mode & S_ISGID)
		gid = p->gid;
	rc = tfs_acl_inherit_locked(p, &m, ctx->umask, ctx->uid, &acls);
	if (rc)
		goto out_unlock;
	rc = tfs_inode_new_locked(m, ctx->uid, gid, 0, buf, NULL, &i);
	if (rc)
		goto out_unlock;
	buf = NULL;
	tfs_inherit_flags_locked(i, p);
	tfs_acl_adopt_locked(i, acls);
	acls = NULL;
	if (!(flags & O_EXCL))
		i->flags |= TFS_I_LINKABLE;
	i->nlookup++;
	tfs_stat_locked(i, st);
	*out = i;
out_unlock:
	tfs_ns_unlock();
	if (!rc)
		tfs_ipol_apply(i, ctx->uid);
	tfs_acl_drop(acls);
	if (buf)
		tier_buf_destroy(buf);
	return rc;
}

static void tfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	struct tfs_inode *i;
	struct stat st;
	int rc;

	switch (mode & S_IFMT) {
	case S_IFREG:
	case S_IFIFO:
	case S_IFSOCK:
	case S_IFCHR:
	case S_IFBLK:
		break;
	default:
		fuse_reply_err(req, EINVAL);
		return;
	}
	rc = make_node(req, parent, name, mode, rdev, NULL, &i, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		reply_entry(req, i, &st);
}

static void tfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	struct tfs_inode *i;
	struct stat st;
	int rc;

	rc = make_node(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL,
		       &i, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		reply_entry(req, i, &st);
}

static void tfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	struct tfs_inode *i;
	struct stat st;
	int rc;

	if (strlen(link) >= PATH_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	rc = make_node(req, parent, name, S_IFLNK | 0777, 0, link, &i, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		reply_entry(req, i, &st);
}

static void tfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct tfs_inode *i;
	char *copy = NULL;

	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	if (i && S_ISLNK(i->mode))
		copy = strdup(i->target);
	tfs_ns_unlock();
	if (!i || !S_ISLNK(i->mode))
		fuse_reply_err(req, i ? EINVAL : ENOENT);
	else if (!copy)
		fuse_reply_err(req, ENOMEM);
	else
		fuse_reply_readlink(req, copy);
	free(copy);
}

static void tfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	struct tfs_inode *i, *p;
	struct stat st;
	size_t len;
	int rc;

	rc = check_name(newname, &len);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	p = tfs_inode_get_locked(newparent);
	if (!i || !p || !p->nlink)
		rc = -ENOENT;
	else if (!S_ISDIR(p->mode))
		rc = -ENOTDIR;
	else if (S_ISDIR(i->mode))
		rc = -EPERM;
	else if (!i->nlink && !(i->flags & TFS_I_LINKABLE))
		rc = -ENOENT;
	else if (tfs_deny_sealed(i) || tfs_deny_immutable(p))
		rc = -EPERM;
	else if (i->nlink >= UINT32_MAX - 1)
		rc = -EMLINK;
	else if (tfs_dentry_find_locked(p, newname, len))
		rc = -EEXIST;
	else
		rc = tfs_dentry_add_locked(p, newname, len, i,
					   fuse_req_ctx(req)->uid);
	if (!rc) {
		/* A tmpfile's first name is its last: as the kernel's
		 * I_LINKABLE, the flag goes. */
		i->flags &= ~TFS_I_LINKABLE;
		i->nlink++;
		i->nlookup++;
		tfs_touch_locked(i, false);
		tfs_touch_locked(p, true);
		tfs_stat_locked(i, &st);
	}
	tfs_ns_unlock();
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	tfs_stat_data(i, &st);
	reply_entry(req, i, &st);
}

/* Drop one name of @i (its dentry is already gone). */
static void drop_link_locked(struct tfs_inode *parent, struct tfs_inode *i,
			     struct tfs_inode **reap)
{
	if (S_ISDIR(i->mode)) {
		i->nlink = 0;
		parent->nlink--;
	} else {
		i->nlink--;
	}
	tfs_touch_locked(i, false);
	tfs_inode_check_locked(i, reap);
}

static int remove_entry(fuse_ino_t parent, const char *name, bool dir)
{
	struct tfs_inode *p, *i, *reap = NULL;
	struct tfs_dentry *d;
	size_t len;
	int rc;

	rc = check_name(name, &len);
	if (rc)
		return rc;
	tfs_ns_lock();
	p = tfs_inode_get_locked(parent);
	if (!p) {
		rc = -ENOENT;
		goto out;
	}
	if (!S_ISDIR(p->mode)) {
		rc = -ENOTDIR;
		goto out;
	}
	d = tfs_dentry_find_locked(p, name, len);
	if (!d) {
		rc = -ENOENT;
		goto out;
	}
	i = d->inode;
	/* may_delete(): nothing leaves an append-only directory. */
	rc = tfs_deny_sealed(p);
	if (!rc)
		rc = tfs_deny_sealed(i);
	if (rc)
		goto out;
	if (dir && !S_ISDIR(i->mode)) {
		rc = -ENOTDIR;
		goto out;
	}
	if (!dir && S_ISDIR(i->mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (dir && i->dir->live) {
		rc = -ENOTEMPTY;
		goto out;
	}
	tfs_dentry_del_locked(d);
	tfs_touch_locked(p, true);
	drop_link_locked(p, i, &reap);
out:
	tfs_ns_unlock();
	tfs_reap(reap);
	return rc;
}

static void tfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -remove_entry(parent, name, false));
}

static void tfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -remove_entry(parent, name, true));
}

/* True when @dir is @anc or lies below it. */
static bool in_subtree_locked(struct tfs_inode *dir, struct tfs_inode *anc)
{
	for (;;) {
		if (dir == anc)
			return true;
		if (dir == tfs.root || !dir->dir)
			return false;
		dir = dir->dir->parent;
	}
}

/* Re-home a directory that moved from @from to @to. */
static void reparent_locked(struct tfs_inode *i, struct tfs_inode *from,
			    struct tfs_inode *to)
{
	if (!S_ISDIR(i->mode) || from == to)
		return;
	i->dir->parent = to;
	from->nlink--;
	to->nlink++;
}

static int rename_exchange_locked(struct tfs_inode *op, struct tfs_dentry *sd,
				  struct tfs_inode *np, struct tfs_dentry *dd)
{
	struct tfs_inode *a = sd->inode, *b = dd->inode;

	if (tfs_deny_sealed(op) || tfs_deny_sealed(np) || tfs_deny_sealed(a) ||
	    tfs_deny_sealed(b))
		return -EPERM;
	if (S_ISDIR(a->mode) && in_subtree_locked(np, a))
		return -EINVAL;
	if (S_ISDIR(b->mode) && in_subtree_locked(op, b))
		return -EINVAL;
	sd->inode = b;
	dd->inode = a;
	tfs_pj_dset_locked(sd);
	tfs_pj_dset_locked(dd);
	reparent_locked(a, op, np);
	reparent_locked(b, np, op);
	tfs_touch_locked(a, false);
	tfs_touch_locked(b, false);
	tfs_touch_locked(op, true);
	tfs_touch_locked(np, true);
	return 0;
}

/*
 * RENAME_WHITEOUT leaves in the old name what overlayfs takes for a
 * deleted lower file: a character device 0:0 with mode 0, owned as mknod
 * would make it (shmem_whiteout() does the same).
 */
static int whiteout_new_locked(fuse_req_t req, const struct tfs_inode *dir,
			       struct tfs_inode **out)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int rc;

	rc = tfs_inode_new_locked(S_IFCHR, ctx->uid,
				  dir->mode & S_ISGID ? dir->gid : ctx->gid,
				  0 /* WHITEOUT_DEV */, NULL, NULL, out);
	if (!rc) {
		(*out)->nlink = 1;
		tfs_inherit_flags_locked(*out, dir);
	}
	return rc;
}

static int do_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		     fuse_ino_t newparent, const char *newname,
		     unsigned int flags)
{
	struct tfs_inode *op, *np, *src, *victim, *wh = NULL, *reap = NULL;
	struct tfs_dentry *sd, *dd;
	size_t len, nlen;
	int rc;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT))
		return -EINVAL;
	if ((flags & RENAME_EXCHANGE) &&
	    (flags & (RENAME_NOREPLACE | RENAME_WHITEOUT)))
		return -EINVAL;
	rc = check_name(name, &len);
	if (!rc)
		rc = check_name(newname, &nlen);
	if (rc)
		return rc;

	tfs_ns_lock();
	op = tfs_inode_get_locked(parent);
	np = tfs_inode_get_locked(newparent);
	if (!op || !np || !np->nlink) {
		rc = -ENOENT;
		goto out;
	}
	if (!S_ISDIR(op->mode) || !S_ISDIR(np->mode)) {
		rc = -ENOTDIR;
		goto out;
	}
	sd = tfs_dentry_find_locked(op, name, len);
	if (!sd) {
		rc = -ENOENT;
		goto out;
	}
	src = sd->inode;
	dd = tfs_dentry_find_locked(np, newname, nlen);
	if (flags & RENAME_EXCHANGE) {
		if (!dd)
			rc = -ENOENT;
		else if (dd != sd)
			rc = rename_exchange_locked(op, sd, np, dd);
		goto out;
	}
	if (dd && (flags & RENAME_NOREPLACE)) {
		rc = -EEXIST;
		goto out;
	}
	/* Two names of one inode: POSIX says do nothing. */
	if (dd && dd->inode == src)
		goto out;
	/* may_delete() of the source, and of the victim when there is one. */
	if (tfs_deny_sealed(op) || tfs_deny_sealed(src) ||
	    tfs_deny_immutable(np) ||
	    (dd && (tfs_deny_sealed(np) || tfs_deny_sealed(dd->inode)))) {
		rc = -EPERM;
		goto out;
	}
	if (S_ISDIR(src->mode) && in_subtree_locked(np, src)) {
		rc = -EINVAL;
		goto out;
	}
	victim = dd ? dd->inode : NULL;
	if (victim) {
		if (S_ISDIR(victim->mode)) {
			if (!S_ISDIR(src->mode))
				rc = -EISDIR;
			else if (victim->dir->live)
				rc = -ENOTEMPTY;
		} else if (S_ISDIR(src->mode)) {
			rc = -ENOTDIR;
		}
		if (rc)
			goto out;
	}
	/*
	 * Add the new name (and make the whiteout) before anything is torn
	 * down, so that running out of memory leaves the tree as it was.
	 * Until the victim's dentry goes the name is in the table twice;
	 * removal is by pointer, and nothing else can look in between.
	 */
	if (flags & RENAME_WHITEOUT) {
		rc = whiteout_new_locked(req, op, &wh);
		if (rc)
			goto out;
	}
	rc = tfs_dentry_add_locked(np, newname, nlen, src,
				   fuse_req_ctx(req)->uid);
	if (rc) {
		if (wh) {
			wh->nlink = 0;
			tfs_inode_check_locked(wh, &reap);
		}
		goto out;
	}
	if (victim) {
		tfs_dentry_del_locked(dd);
		drop_link_locked(np, victim, &reap);
	}
	/* The whiteout takes over the old name, and its readdir place. */
	if (wh) {
		sd->inode = wh;
		tfs_pj_dset_locked(sd);
	} else {
		tfs_dentry_del_locked(sd);
	}
	reparent_locked(src, op, np);
	tfs_touch_locked(src, false);
	tfs_touch_locked(op, true);
	tfs_touch_locked(np, true);
out:
	tfs_ns_unlock();
	tfs_reap(reap);
	return rc;
}

static void tfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	fuse_reply_err(req, -do_rename(req, parent, name, newparent, newname,
				       flags));
}

static struct tfs_file *file_new(struct tfs_inode *i, int flags)
{
	struct tfs_file *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->inode = i;
	f->owner = atomic_fetch_add(&tfs.next_owner, 1) + 1;
	/* O_ACCMODE itself (3) is Linux's ioctl-only open: neither. */
	f->readable = (flags & O_ACCMODE) == O_RDONLY ||
		      (flags & O_ACCMODE) == O_RDWR;
	f->writable = (flags & O_ACCMODE) == O_WRONLY ||
		      (flags & O_ACCMODE) == O_RDWR;
	f->noatime = flags & O_NOATIME;
	return f;
}

/*
 * Page cache: the kernel keeps what it cached of a file across opens
 * (keep_cache) unless this open must drop it:
 *   - the store changed the bytes behind it (a GPU commit, a device
 *     allocation, the end of a write export): tier_buf_opened() says so,
 *     and the queued notification (inval.c) may not have run yet;
 *   - a GPU program may be writing the file now (a write export);
 *   - a read would change the atime (tfs_atime_due_locked()): the kernel
 *     never updates it itself (S_NOATIME), so the first read must reach
 *     us. Under relatime that is the first read after a change, and once a
 *     day; under strictatime every open.
 * Every other change comes through this kernel, which keeps its cache
 * right by itself (writes, truncates, O_TRUNC, copy_file_range). A spill
 * leaves the bytes as they were; its notification only frees the memory.
 * The open also counts as an access for the eviction policy, since reads
 * the page cache answers never reach the store. direct_io would break
 * shared writable mmap on this libfuse.
 *
 * A descriptor that cannot write closes without a FLUSH round trip
 * (noflush): its flush would only place a buffer that a mapping dirtied,
 * which the release does as well, and close(2) of a reader is no place to
 * report a full disk. persist=close keeps the flush, since there close(2)
 * returns once the file is durable. The kernel ignores noflush under the
 * writeback cache, where the flush writes dirty pages back.
 */
static void set_open_flags(struct fuse_file_info *fi, struct tfs_file *f,
			   bool keep)
{
	fi->fh = (uintptr_t)f;
	fi->keep_cache = keep && f->pt == TFS_PT_NONE;
	/* Beside passthrough opens the page cache is not to be used (the
	 * kernel fails such an open): the others are passthrough ones with
	 * direct_io, reaching the daemon. All are edited on their way out
	 * (tfs_pt_reply()). */
	fi->direct_io = f->pt == TFS_PT_DIRECT;
	fi->noflush = !f->writable && !tfs_persist_close();
}

static void tfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	struct tfs_inode *i, *reap = NULL;
	struct tfs_file *f;
	struct stat st;
	int rc;

	if (!strcmp(name, "/"))
		rc = make_tmpfile(req, parent, mode, fi->flags, &i, &st);
	else
		rc = make_node(req, parent, name, S_IFREG | (mode & 07777), 0,
			       NULL, &i, &st);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	f = file_new(i, fi->flags);
	if (!f) {
		forget_one(i);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	tfs_ns_lock();
	i->nopen++;
	tfs_file_link_locked(f);
	tfs_ns_unlock();
	/* A new inode number: nothing cached can be stale. */
	set_open_flags(fi, f, true);
	memset(&e, 0, sizeof(e));
	e.ino = i->ino;
	e.generation = i->generation;
	e.attr = st;
	e.attr_timeout = tfs.attr_timeout;
	e.entry_timeout = tfs.entry_timeout;
	if (fuse_reply_create(req, &e, fi)) {
		tfs_ns_lock();
		i->nopen--;
		tfs_file_unlink_locked(f);
		tfs_forget_locked(i, 1, &reap);
		tfs_ns_unlock();
		tfs_reap(reap);
		free(f);
	}
}

/* may_open(): an immutable file opens read-only, an append-only one
 * read-only or for O_APPEND, and neither with O_TRUNC. */
static int check_open(const struct tfs_inode *i, int flags)
{
	bool writing = (flags & O_ACCMODE) != O_RDONLY;

	if ((writing || (flags & O_TRUNC)) && tfs_deny_immutable(i))
		return -EPERM;
	if (((writing && !(flags & O_APPEND)) || (flags & O_TRUNC)) &&
	    tfs_deny_sealed(i))
		return -EPERM;
	return 0;
}

static void tfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tfs_inode *i = iget(ino);
	struct tfs_file *f;
	bool keep, readonly, eligible;
	int rc;

	if (!i) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!S_ISREG(i->mode)) {
		fuse_reply_err(req, S_ISDIR(i->mode) ? EISDIR : ENXIO);
		return;
	}
	rc = check_open(i, fi->flags);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	f = file_new(i, fi->flags);
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY &&
	    tier_buf_size(i->buf) > 0) {
		tfs_break_leases(req, i, "truncate");
		rc = tier_buf_truncate(i->buf, 0);
		if (rc < 0) {
			free(f);
			fuse_reply_err(req, -rc);
			return;
		}
		tfs_ns_lock();
		tfs_touch_locked(i, true);
		i->flags |= TFS_I_DIRTY;
		tfs_ns_unlock();
		tfs_pt_sync(i, 0, 0);
	}
	readonly = (fi->flags & O_ACCMODE) == O_RDONLY;
	eligible = tfs_pt_eligible(i, readonly);
	keep = tier_buf_opened_as(i->buf,
				  f->noatime ? TIER_READ_NOACCESS : 0);
	tfs_ns_lock();
	if (f->readable && !f->noatime && tfs_atime_due_locked(i))
		keep = false;
	tfs_pt_open_locked(i, f, readonly, eligible);
	i->nopen++;
	tfs_file_link_locked(f);
	tfs_ns_unlock();
	tfs_pt_open_finish(i, f);
	/* Its reads never reach us: the open is the read that sets the
	 * atime (doc/design.md, "Passthrough reads"). */
	if (f->pt == TFS_PT_READ && !f->noatime) {
		tfs_ns_lock();
		tfs_atime_note_locked(i);
		tfs_ns_unlock();
	}
	set_open_flags(fi, f, keep);
	tfs_pt_reply(f);
	rc = fuse_reply_open(req, fi);
	tfs_pt_reply_done();
	if (rc) {
		struct tfs_inode *reap = NULL;

		if (!keep)
			tier_buf_cache_stale(i->buf);
		tfs_pt_release(i, f);

		tfs_ns_lock();
		i->nopen--;
		tfs_file_unlink_locked(f);
		tfs_inode_check_locked(i, &reap);
		tfs_ns_unlock();
		tfs_reap(reap);
		free(f);
	}
}

static void tfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			 struct fuse_file_info *fi)
{
	fuse_reply_err(req, -tfs_pj_flush());
}

/*
 * df on a tiered mount (tierfs(8), SPACE). Used (blocks - bfree) is the
 * tiers' use rounded up to a block, as tierfsctl status adds it up. Free
 * (bfree) is what every tier's limit leaves, summed: room for the mount as
 * a whole. Avail (bavail) is the largest file one writer can still make,
 * which one tier must hold (tier_store_space()): df's free space used to
 * be the sum, which a single fallocate of it, less 512 KiB, failed to get
 * when the disk limit bound it.
 */
static void tfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct tier_space sp;
	uint64_t files, ffree, ub;
	struct statvfs sv;

	tier_store_space(tfs.store, &sp);
	tfs_ns_lock();
	files = tfs.inodes.count;
	tfs_ns_unlock();
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	ub = (sp.used + 4095) / 4096;
	sv.f_bfree = sp.free / 4096;
	sv.f_bavail = sp.one_file / 4096;
	sv.f_blocks = ub + sv.f_bfree;
	/*
	 * Inodes cost RAM, not a table: the free ones are the files the
	 * metadata budget still holds (tfs_meta_files_free()), so that df -i
	 * runs out when creates start failing with ENOSPC.
	 */
	ffree = tfs_meta_files_free();
	sv.f_files = files + ffree;
	sv.f_ffree = ffree;
	sv.f_favail = ffree;
	sv.f_namemax = TFS_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* default_permissions makes the kernel check access(2) itself. */
static void tfs_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, iget(ino) ? 0 : ENOENT);
}

static unsigned int read_ahead_bytes;

static void tfs_init(void *userdata, struct fuse_conn_info *conn)
{
	const unsigned int want = FUSE_CAP_ASYNC_READ |
				  FUSE_CAP_EXPORT_SUPPORT |
				  FUSE_CAP_IOCTL_DIR |
				  FUSE_CAP_PARALLEL_DIROPS |
				  FUSE_CAP_READDIRPLUS |
				  FUSE_CAP_READDIRPLUS_AUTO |
				  FUSE_CAP_ATOMIC_O_TRUNC;

	conn->want |= want & conn->capable;
	/*
	 * POSIX ACLs, as tmpfs has them. The kernel then checks permissions
	 * against system.posix_acl_* (asking the daemon for them, and caching
	 * them), and leaves to the daemon what posix_acl_create(),
	 * posix_acl_update_mode() and posix_acl_chmod() do for a kernel
	 * filesystem (xattr.c). The umask too: a default ACL replaces it, and
	 * without FUSE_DONT_MASK the kernel would have applied it already.
	 */
	if ((conn->capable & FUSE_CAP_POSIX_ACL) &&
	    (conn->capable & FUSE_CAP_DONT_MASK)) {
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
		tfs.posix_acl = true;
	}
	/*
	 * Directories take chattr and lsattr, and no other ioctl (see
	 * tfs_ioctl); the kernel, not tierfs, clears set-id
	 * bits on write (it sends the mode change as a setattr); the
	 * writeback cache only when asked (see below); no splice, since every
	 * byte is copied out of the store anyway. No auto_inval_data: it drops a
	 * file's pages whenever a refreshed mtime differs from the cached
	 * one, which after our own writes it always does; tierfs notifies
	 * the changes the kernel cannot see instead (inval.c).
	 */
	conn->want &= ~(FUSE_CAP_HANDLE_KILLPRIV |
			FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ |
			FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
			FUSE_CAP_AUTO_INVAL_DATA);
	/*
	 * With the writeback cache the kernel owns a file's size and times
	 * and ignores ours: what the daemon changes by itself (a GPU commit's
	 * mtime) no longer shows, which is why it is an option
	 * (doc/design.md). Buffers are still placed at flush, fsync and
	 * release, which the kernel sends after writing back.
	 */
	if (tfs.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	else
		tfs.writeback = false;
	conn->max_write = TFS_IO_MAX;
	/*
	 * The kernel sets the bdi's readahead to the smaller of what it had
	 * and this, after main() raised the bdi's value: keep them equal.
	 */
	if (read_ahead_bytes)
		conn->max_readahead = read_ahead_bytes;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
}

void tfs_ops_set_read_ahead(unsigned int kb)
{
	read_ahead_bytes = kb > UINT_MAX / 1024 ? UINT_MAX : kb * 1024;
}

const struct fuse_lowlevel_ops tfs_ops = {
	.init = tfs_init,
	.lookup = tfs_lookup,
	.forget = tfs_forget,
	.forget_multi = tfs_forget_multi,
	.getattr = tfs_getattr,
	.setattr = tfs_setattr,
	.readlink = tfs_readlink,
	.mknod = tfs_mknod,
	.mkdir = tfs_mkdir,
	.unlink = tfs_unlink,
	.rmdir = tfs_rmdir,
	.symlink = tfs_symlink,
	.rename = tfs_rename,
	.link = tfs_link,
	.open = tfs_open,
	.read = tfs_read,
	.write = tfs_write,
	.flush = tfs_flush,
	.release = tfs_release,
	.fsync = tfs_fsync,
	.opendir = tfs_opendir,
	.readdir = tfs_readdir,
	.readdirplus = tfs_readdirplus,
	.releasedir = tfs_releasedir,
	.fsyncdir = tfs_fsyncdir,
	.statfs = tfs_statfs,
	.setxattr = tfs_setxattr,
	.getxattr = tfs_getxattr,
	.listxattr = tfs_listxattr,
	.removexattr = tfs_removexattr,
	.access = tfs_access,
	.create = tfs_create,
	.ioctl = tfs_ioctl,
	.fallocate = tfs_fallocate,
	.lseek = tfs_lseek,
	.copy_file_range = tfs_copy_file_range,
};
