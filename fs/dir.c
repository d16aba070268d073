// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * readdir and readdirplus. Offsets are the entries' cookies ("." is 1,
 * ".." is 2), so a listing resumes where it stopped however many entries
 * were removed or compacted away in between; directory handles hold no
 * state at all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_i.h"

#define COOKIE_DOT 1
#define COOKIE_DOTDOT 2

void tfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tfs_inode *i;
	bool dir;

	tfs_ns_lock();
	i = tfs_inode_get_locked(ino);
	dir = i && S_ISDIR(i->mode);
	tfs_ns_unlock();
	if (!dir) {
		fuse_reply_err(req, i ? ENOTDIR : ENOENT);
		return;
	}
	fi->fh = 0;
	fuse_reply_open(req, fi);
}

void tfs_releasedir(fuse_req_t req, fuse_ino_t ino,
		    struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static struct tfs_inode *get_dir_locked(fuse_ino_t ino, int *err)
{
	struct tfs_inode *i = tfs_inode_get_locked(ino);

	if (!i)
		*err = ENOENT;
	else if (!S_ISDIR(i->mode))
		*err = ENOTDIR;
	else
		return i;
	return NULL;
}

void tfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	char *buf = tfs_reply_buf();
	struct tfs_inode *d;
	struct stat st;
	size_t pos = 0, ent;
	uint32_t k;
	int err = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (size > TFS_IO_MAX)
		size = TFS_IO_MAX;
	memset(&st, 0, sizeof(st));
	tfs_ns_lock();
	d = get_dir_locked(ino, &err);
	if (!d) {
		tfs_ns_unlock();
		fuse_reply_err(req, err);
		return;
	}
	/* Formatting only copies into buf: cheap enough under the lock. */
	if (off < COOKIE_DOT) {
		st.st_ino = d->ino;
		st.st_mode = S_IFDIR;
		ent = fuse_add_direntry(req, buf + pos, size - pos, ".", &st,
					COOKIE_DOT);
		if (ent > size - pos)
			goto out;
		pos += ent;
	}
	if (off < COOKIE_DOTDOT) {
		st.st_ino = d->dir->parent->ino;
		st.st_mode = S_IFDIR;
		ent = fuse_add_direntry(req, buf + pos, size - pos, "..", &st,
					COOKIE_DOTDOT);
		if (ent > size - pos)
			goto out;
		pos += ent;
	}
	for (k = tfs_dir_seek_locked(d->dir, (uint64_t)off); k < d->dir->n;
	     k++) {
		struct tfs_dentry *de = d->dir->slots[k].d;

		if (!de)
			continue;
		st.st_ino = de->inode->ino;
		st.st_mode = de->inode->mode;
		ent = fuse_add_direntry(req, buf + pos, size - pos, de->name,
					&st, (off_t)de->cookie);
		if (ent > size - pos)
			break;
		pos += ent;
	}
out:
	tfs_atime_note_locked(d);
	tfs_ns_unlock();
	fuse_reply_buf(req, buf, pos);
}

struct plus_ent {
	struct tfs_inode *inode; /* NULL for "." and ".." */
	uint64_t cookie;
	struct stat st;
	char name[TFS_NAME_MAX + 1];
};

/*
 * readdirplus hands out lookup references and needs each file's size from
 * the store, which must not be asked under the namespace lock. So: pick the
 * entries that fit and pin them under the lock, fill in sizes after, format,
 * and give the references back if the reply does not get through.
 */
void tfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	char *buf = tfs_reply_buf();
	struct fuse_entry_param e;
	struct plus_ent *ents;
	struct tfs_inode *d, *reap = NULL;
	size_t n = 0, max, used = 0, pos = 0, k, need;
	uint32_t s;
	int err = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (size > TFS_IO_MAX)
		size = TFS_IO_MAX;
	/* No entry is smaller than the fixed part plus one padded byte. */
	max = size / fuse_add_direntry_plus(req, NULL, 0, ".", NULL, 0) + 1;
	ents = malloc(max * sizeof(*ents));
	if (!ents) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	tfs_ns_lock();
	d = get_dir_locked(ino, &err);
	if (!d) {
		tfs_ns_unlock();
		free(ents);
		fuse_reply_err(req, err);
		return;
	}
	if (off < COOKIE_DOT) {
		need = fuse_add_direntry_plus(req, NULL, 0, ".", NULL, 0);
		if (used + need <= size && n < max) {
			ents[n].inode = NULL;
			ents[n].cookie = COOKIE_DOT;
			tfs_stat_locked(d, &ents[n].st);
			strcpy(ents[n].name, ".");
			used += need;
			n++;
		}
	}
	if (off < COOKIE_DOTDOT) {
		need = fuse_add_direntry_plus(req, NULL, 0, "..", NULL, 0);
		if (used + need <= size && n < max) {
			ents[n].inode = NULL;
			ents[n].cookie = COOKIE_DOTDOT;
			tfs_stat_locked(d->dir->parent, &ents[n].st);
			strcpy(ents[n].name, "..");
			used += need;
			n++;
		}
	}
	for (s = tfs_dir_seek_locked(d->dir, (uint64_t)off);
	     s < d->dir->n && n < max && used < size; s++) {
		struct tfs_dentry *de = d->dir->slots[s].d;

		if (!de)
			continue;
		need = fuse_add_direntry_plus(req, NULL, 0, de->name, NULL,
					      0);
		if (used + need > size)
			break;
		ents[n].inode = de->inode;
		ents[n].cookie = de->cookie;
		de->inode->nlookup++;
		tfs_stat_locked(de->inode, &ents[n].st);
		memcpy(ents[n].name, de->name, de->namelen + 1);
		used += need;
		n++;
	}
	tfs_atime_note_locked(d);
	tfs_ns_unlock();

	for (k = 0; k < n; k++) {
		memset(&e, 0, sizeof(e));
		if (ents[k].inode) {
			tfs_stat_data(ents[k].inode, &ents[k].st);
			e.ino = ents[k].inode->ino;
			e.generation = ents[k].inode->generation;
			e.attr_timeout = tfs.attr_timeout;
			e.entry_timeout = tfs.entry_timeout;
		}
		/* e.ino 0 for "." and "..": the kernel takes no reference. */
		e.attr = ents[k].st;
		pos += fuse_add_direntry_plus(req, buf + pos, size - pos,
					      ents[k].name, &e,
					      (off_t)ents[k].cookie);
	}
	if (fuse_reply_buf(req, buf, pos)) {
		tfs_ns_lock();
		for (k = 0; k < n; k++) {
			if (ents[k].inode)
				tfs_forget_locked(ents[k].inode, 1, &reap);
		}
		tfs_ns_unlock();
		tfs_reap(reap);
	}
	free(ents);
}
