// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The namespace: inode numbers to inodes, (parent, name) to dentries, and
 * each directory's readdir order. Both tables are chained hashes that double
 * when their load passes one, so lookups stay O(1) in a directory of
 * millions of entries and no directory pays for a private table.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs_i.h"

struct tfs_fs tfs = {
	.ns_lock = PTHREAD_MUTEX_INITIALIZER,
};

#define HASH_MIN_BUCKETS 1024
/* Freed bytes worth a malloc_trim once the namespace is quiet. */
#define TRIM_MIN (4u << 20)

size_t tfs_meta_cost(size_t n)
{
	/* glibc: the request plus a size word, in 16-byte steps, 32 at
	 * least. */
	n = (n + sizeof(size_t) + 15) & ~(size_t)15;
	return n < 32 ? 32 : n;
}

/*
 * What each user holds of the metadata budget ([fs] metadata_user_share):
 * one entry per uid holding any, freed at zero. The lock is a leaf, taken
 * with or without ns_lock; root and the daemon's own user have no entry.
 * Users are few, so a list does.
 */
struct meta_user {
	struct meta_user *next;
	uid_t uid;
	uint64_t bytes;
};

static pthread_mutex_t meta_users_lock = PTHREAD_MUTEX_INITIALIZER;
static struct meta_user *meta_users; /* meta_users_lock */

static bool meta_exempt(uid_t uid)
{
	return !uid || uid == tfs.self_uid;
}

static struct meta_user **meta_user_find(uid_t uid)
{
	struct meta_user **pp;

	for (pp = &meta_users; *pp && (*pp)->uid != uid; pp = &(*pp)->next)
		;
	return pp;
}

/* Charge @bytes to @uid's share: 0, -EDQUOT past it, -ENOMEM. */
static int meta_user_charge(uid_t uid, size_t bytes)
{
	uint64_t share = atomic_load(&tfs.meta_user_limit);
	struct meta_user **pp, *u;
	int rc = 0;

	if (meta_exempt(uid) || !bytes)
		return 0;
	pthread_mutex_lock(&meta_users_lock);
	pp = meta_user_find(uid);
	u = *pp;
	if (share && (u ? u->bytes : 0) + bytes > share) {
		rc = -EDQUOT;
	} else if (!u && !(u = *pp = calloc(1, sizeof(*u)))) {
		rc = -ENOMEM;
	} else {
		u->uid = uid;
		u->bytes += bytes;
	}
	pthread_mutex_unlock(&meta_users_lock);
	return rc;
}

static void meta_user_uncharge(uid_t uid, size_t bytes)
{
	struct meta_user **pp, *u;

	if (meta_exempt(uid) || !bytes)
		return;
	pthread_mutex_lock(&meta_users_lock);
	pp = meta_user_find(uid);
	u = *pp;
	if (u) {
		u->bytes -= bytes < u->bytes ? bytes : u->bytes;
		if (!u->bytes) {
			*pp = u->next;
			free(u);
		}
	}
	pthread_mutex_unlock(&meta_users_lock);
}

int tfs_meta_charge(uid_t uid, size_t bytes)
{
	uint64_t limit = atomic_load(&tfs.meta_limit);
	uint64_t used = atomic_fetch_add(&tfs.meta_used, bytes) + bytes;
	int rc;

	atomic_fetch_add(&tfs.meta_ops, 1);
	if (limit && used > limit) {
		atomic_fetch_sub(&tfs.meta_used, bytes);
		return -ENOSPC;
	}
	rc = meta_user_charge(uid, bytes);
	if (rc)
		atomic_fetch_sub(&tfs.meta_used, bytes);
	return rc;
}

void tfs_meta_uncharge(uid_t uid, size_t bytes)
{
	meta_user_uncharge(uid, bytes);
	atomic_fetch_sub(&tfs.meta_used, bytes);
	atomic_fetch_add(&tfs.meta_freed, bytes);
	atomic_fetch_add(&tfs.meta_ops, 1);
}

void tfs_meta_set_limit(const struct cfg_size *limit,
			const struct cfg_size *user_share, uint64_t host_limit)
{
	uint64_t bytes = cfg_size_resolve(limit, host_limit);

	if (!bytes)
		bytes = 1;
	atomic_store(&tfs.meta_limit, bytes);
	atomic_store(&tfs.meta_user_limit,
		     user_share ? cfg_size_resolve(user_share, bytes) : 0);
}

void tfs_meta_idle(void)
{
	static uint64_t last_ops;
	uint64_t ops = atomic_load(&tfs.meta_ops);
	bool quiet = ops == last_ops;

	last_ops = ops;
	/*
	 * glibc keeps freed small blocks in its heap for reuse: after a
	 * million files were created and removed, 1.28 GB stayed resident
	 * until restart. malloc_trim walks every arena under its lock, so it
	 * runs only here, once deletions have stopped for a second.
	 */
	if (!quiet || atomic_load(&tfs.meta_freed) < TRIM_MIN)
		return;
	atomic_store(&tfs.meta_freed, 0);
	tfs_debug("idle: giving freed heap memory back");
	malloc_trim(0);
}

/* The budget an inode takes: itself, its share of the hash table (which
 * has up to two slots per entry), and what it owns besides its xattrs. */
static size_t inode_cost(uint32_t mode, const char *target)
{
	size_t c = tfs_meta_cost(sizeof(struct tfs_inode)) + 2 * sizeof(void *);

	if (S_ISDIR(mode))
		c += tfs_meta_cost(sizeof(struct tfs_dir));
	else if (S_ISREG(mode))
		c += tfs_meta_cost(tier_buf_footprint());
	else if (S_ISLNK(mode) && target)
		c += tfs_meta_cost(strlen(target) + 1);
	return c;
}

/* A dentry: itself, its hash slots and up to two readdir slots. */
static size_t dentry_cost(size_t len)
{
	return tfs_meta_cost(sizeof(struct tfs_dentry) + len + 1) +
	       2 * sizeof(void *) + 2 * sizeof(struct tfs_slot);
}

uint64_t tfs_meta_files_free(void)
{
	uint64_t limit = atomic_load(&tfs.meta_limit);
	uint64_t used = atomic_load(&tfs.meta_used);
	size_t one = inode_cost(S_IFREG, NULL) + dentry_cost(TFS_DF_NAME_LEN);

	if (!limit)
		return UINT64_MAX / 2;
	return used < limit ? (limit - used) / one : 0;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint32_t name_hash(uint64_t parent, const char *name, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ mix64(parent);
	size_t k;

	for (k = 0; k < len; k++) {
		h ^= (unsigned char)name[k];
		h *= 0x100000001b3ULL;
	}
	return (uint32_t)mix64(h);
}

static int hash_init(struct tfs_hash *h)
{
	h->b = calloc(HASH_MIN_BUCKETS, sizeof(*h->b));
	if (!h->b)
		return -ENOMEM;
	h->mask = HASH_MIN_BUCKETS - 1;
	h->count = 0;
	return 0;
}

static size_t inode_bucket(const struct tfs_hash *h, uint64_t ino)
{
	return mix64(ino) & h->mask;
}

/*
 * Doubling is O(n) but amortised O(1); a failed allocation just leaves the
 * table denser, which costs speed, not correctness.
 */
static void inode_hash_grow(struct tfs_hash *h)
{
	size_t nb = (h->mask + 1) * 2, k;
	void **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (k = 0; k <= h->mask; k++) {
		struct tfs_inode *i = h->b[k], *next;

		for (; i; i = next) {
			size_t at = mix64(i->ino) & (nb - 1);

			next = i->hnext;
			i->hnext = b[at];
			b[at] = i;
		}
	}
	free(h->b);
	h->b = b;
	h->mask = nb - 1;
}

static void dentry_hash_grow(struct tfs_hash *h)
{
	size_t nb = (h->mask + 1) * 2, k;
	void **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (k = 0; k <= h->mask; k++) {
		struct tfs_dentry *d = h->b[k], *next;

		for (; d; d = next) {
			size_t at = d->hash & (nb - 1);

			next = d->hnext;
			d->hnext = b[at];
			b[at] = d;
		}
	}
	free(h->b);
	h->b = b;
	h->mask = nb - 1;
}

/*
 * The start-up gate (doc/design.md, "Start-up answers before the tree is
 * back"). While a persistent mount's loader thread rebuilds the tree,
 * every thread but the loader waits here before it takes ns_lock, so no
 * operation sees a tree half built and no record reaches the journal
 * before the restore is done. Once open, the gate costs one atomic load.
 */
static struct {
	pthread_mutex_t lock; /* a leaf, never held with ns_lock */
	pthread_cond_t done;
	atomic_bool closed; /* written under lock */
	bool have_root; /* root, root_fl: what the root answers meanwhile */
	struct stat root;
	uint32_t root_fl;
} gate = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
};
static __thread bool gate_loader;

void tfs_ns_gate_close(const struct stat *root, uint32_t fsflags)
{
	pthread_mutex_lock(&gate.lock);
	gate.root = *root;
	gate.root_fl = fsflags;
	gate.have_root = true;
	atomic_store_explicit(&gate.closed, true, memory_order_release);
	pthread_mutex_unlock(&gate.lock);
}

void tfs_ns_gate_loader(void)
{
	gate_loader = true;
}

void tfs_ns_gate_open(void)
{
	pthread_mutex_lock(&gate.lock);
	atomic_store_explicit(&gate.closed, false, memory_order_release);
	gate.have_root = false;
	pthread_cond_broadcast(&gate.done);
	pthread_mutex_unlock(&gate.lock);
}

bool tfs_ns_gate_root(struct stat *st, uint32_t *fsflags)
{
	bool early = false;

	if (!atomic_load_explicit(&gate.closed, memory_order_acquire))
		return false;
	pthread_mutex_lock(&gate.lock);
	if (gate.have_root) {
		*st = gate.root;
		if (fsflags)
			*fsflags = gate.root_fl;
		early = true;
	}
	pthread_mutex_unlock(&gate.lock);
	return early;
}

void tfs_ns_lock(void)
{
	if (atomic_load_explicit(&gate.closed, memory_order_acquire) &&
	    !gate_loader) {
		pthread_mutex_lock(&gate.lock);
		while (atomic_load_explicit(&gate.closed, memory_order_relaxed))
			pthread_cond_wait(&gate.done, &gate.lock);
		pthread_mutex_unlock(&gate.lock);
	}
	pthread_mutex_lock(&tfs.ns_lock);
}

void tfs_ns_unlock(void)
{
	if (tfs_persistent())
		tfs_pj_txn_end_locked();
	pthread_mutex_unlock(&tfs.ns_lock);
}

void tfs_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

void tfs_touch_locked(struct tfs_inode *i, bool mtime)
{
	struct timespec now;

	tfs_now(&now);
	i->ctime = now;
	if (mtime)
		i->mtime = now;
	/* A regular file's mtime moves with its bytes, which its next sync
	 * records; anything else that changed is attributes. */
	if (S_ISREG(i->mode) && mtime)
		tfs_pj_dirty_locked(i);
	else
		tfs_pj_attr_locked(i);
}

void tfs_file_link_locked(struct tfs_file *f)
{
	f->next = tfs.files.next;
	f->prev = &tfs.files;
	f->next->prev = f;
	tfs.files.next = f;
}

/* Whether @gid is the caller's primary group or one of its supplementary
 * groups. A caller whose groups cannot be read (it exited) gets only its
 * primary group: that can refuse, never grant, more. */
static bool in_group(fuse_req_t req, gid_t primary, gid_t gid)
{
	gid_t small[64], *list = small;
	bool found = false;
	int n;

	if (gid == primary)
		return true;
	n = fuse_req_getgroups(req, 64, small);
	if (n > 64) {
		list = calloc((size_t)n, sizeof(*list));
		if (!list)
			return false;
		n = fuse_req_getgroups(req, n, list);
	}
	for (int k = 0; k < n && !found; k++)
		found = list[k] == gid;
	if (list != small)
		free(list);
	return found;
}

bool tfs_req_in_group(fuse_req_t req, gid_t gid)
{
	return in_group(req, fuse_req_ctx(req)->gid, gid);
}

int tfs_may_write(fuse_req_t req, struct tfs_inode *i)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	uint32_t mode, uid, gid;

	tfs_ns_lock();
	mode = i->mode;
	uid = i->uid;
	gid = i->gid;
	tfs_ns_unlock();
	if (ctx->uid == 0 || ctx->uid == uid)
		return 0;
	if (in_group(req, ctx->gid, gid))
		return mode & S_IWGRP ? 0 : -EACCES;
	return mode & S_IWOTH ? 0 : -EACCES;
}

void tfs_break_leases(fuse_req_t req, struct tfs_inode *i, const char *what)
{
	uid_t uid = fuse_req_ctx(req)->uid, owner;
	int n;

	/* Nearly always no lease: ask before anything else. */
	if (!S_ISREG(i->mode) || !tier_buf_held(i->buf))
		return;
	tfs_ns_lock();
	owner = i->uid;
	tfs_ns_unlock();
	if (uid && uid != owner)
		return;
	n = tier_buf_revoke(i->buf, uid);
	if (n > 0)
		tfs_notice("inode %llu: ended %d write export%s of other "
			   "users: its %s asked to %s it",
			   (unsigned long long)i->ino, n, n == 1 ? "" : "s",
			   uid ? "owner" : "root", what);
}

void tfs_file_unlink_locked(struct tfs_file *f)
{
	f->prev->next = f->next;
	f->next->prev = f->prev;
	f->prev = f->next = f;
}

struct tfs_inode *tfs_inode_get_locked(fuse_ino_t ino)
{
	struct tfs_inode *i = tfs.inodes.b[inode_bucket(&tfs.inodes, ino)];

	while (i && i->ino != ino)
		i = i->hnext;
	return i;
}

/* An inode of @ino in the table, charged to the metadata budget (and to
 * @by's share), with what its kind needs; @buf or @target is owned by it
 * on success. */
static int inode_make_locked(uint64_t ino, uint32_t mode,
			     struct tier_buf *buf, char *target, uid_t by,
			     struct tfs_inode **out)
{
	size_t cost = inode_cost(mode, target);
	struct tfs_inode *i;
	size_t at;
	int rc;

	rc = tfs_meta_charge(by, cost);
	if (rc)
		return rc;
	i = calloc(1, sizeof(*i));
	if (!i)
		goto out_uncharge;
	if (S_ISDIR(mode)) {
		i->dir = calloc(1, sizeof(*i->dir));
		if (!i->dir) {
			free(i);
			goto out_uncharge;
		}
		/* 1 and 2 are "." and ".." in readdir. */
		i->dir->next_cookie = 3;
	} else if (S_ISREG(mode)) {
		i->buf = buf;
	} else if (S_ISLNK(mode)) {
		i->target = target;
	}
	i->ino = ino;
	i->meta_uid = by;
	/* Lock-free: the store reports its changes to the kernel by it. */
	if (S_ISREG(mode) && buf)
		tier_buf_set_cookie(buf, i->ino);
	i->mode = mode;
	at = inode_bucket(&tfs.inodes, i->ino);
	i->hnext = tfs.inodes.b[at];
	tfs.inodes.b[at] = i;
	if (++tfs.inodes.count > tfs.inodes.mask + 1)
		inode_hash_grow(&tfs.inodes);
	*out = i;
	return 0;

out_uncharge:
	tfs_meta_uncharge(by, cost);
	return -ENOMEM;
}

int tfs_inode_restore_locked(uint64_t ino, uint32_t mode, struct tier_buf *buf,
			     char *target, struct tfs_inode **out)
{
	return inode_make_locked(ino, mode, buf, target, 0, out);
}

int tfs_inode_new_locked(uint32_t mode, uid_t uid, gid_t gid, dev_t rdev,
			 struct tier_buf *buf, char *target,
			 struct tfs_inode **out)
{
	struct tfs_inode *i;
	int rc;

	rc = inode_make_locked(tfs.next_ino, mode, buf, target, uid, &i);
	if (rc)
		return rc;
	tfs.next_ino++;
	if (i->ino != FUSE_ROOT_ID)
		i->generation = tfs.next_generation++;
	i->uid = uid;
	i->gid = gid;
	i->rdev = rdev;
	tfs_now(&i->atime);
	i->mtime = i->ctime = i->btime = i->atime;
	tfs_pj_attr_locked(i);
	*out = i;
	return 0;
}

static void inode_unhash_locked(struct tfs_inode *i)
{
	struct tfs_inode **pp = (struct tfs_inode **)&tfs.inodes.b[
		inode_bucket(&tfs.inodes, i->ino)];

	while (*pp && *pp != i)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = i->hnext;
		tfs.inodes.count--;
	}
}

void tfs_inode_check_locked(struct tfs_inode *i, struct tfs_inode **reap)
{
	if (i->nlink || i->nlookup || i->nopen || i == tfs.root)
		return;
	inode_unhash_locked(i);
	i->hnext = *reap;
	*reap = i;
}

static void inode_free(struct tfs_inode *i)
{
	struct tfs_xattr *x, *next;

	tfs_meta_uncharge(i->meta_uid,
			  inode_cost(i->mode,
				     S_ISLNK(i->mode) ? i->target : NULL));
	if (S_ISREG(i->mode)) {
		if (i->buf) {
			tfs_pt_forget(i->ino);
			tfs_prefetch_forget(i->buf);
			tier_buf_destroy(i->buf);
		}
	} else if (S_ISDIR(i->mode)) {
		if (i->dir) {
			free(i->dir->slots);
			free(i->dir);
		}
	} else if (S_ISLNK(i->mode)) {
		free(i->target);
	}
	for (x = i->xattrs; x; x = next) {
		next = x->next;
		tfs_meta_uncharge(x->uid, tfs_xattr_cost(x->nlen, x->vlen));
		free(x);
	}
	free(i->pdata);
	free(i);
}

void tfs_reap(struct tfs_inode *reap)
{
	struct tfs_inode *next;

	for (; reap; reap = next) {
		next = reap->hnext;
		inode_free(reap);
	}
}

void tfs_forget_locked(struct tfs_inode *i, uint64_t n,
		       struct tfs_inode **reap)
{
	if (n > i->nlookup) {
		tfs_warn("forget of %llu lookups on inode %llu holding %llu",
			 (unsigned long long)n, (unsigned long long)i->ino,
			 (unsigned long long)i->nlookup);
		n = i->nlookup;
	}
	i->nlookup -= n;
	tfs_inode_check_locked(i, reap);
}

struct tfs_dentry *tfs_dentry_find_locked(struct tfs_inode *parent,
					  const char *name, size_t len)
{
	uint32_t h = name_hash(parent->ino, name, len);
	struct tfs_dentry *d = tfs.dentries.b[h & tfs.dentries.mask];

	for (; d; d = d->hnext) {
		if (d->hash == h && d->parent == parent &&
		    d->namelen == len && !memcmp(d->name, name, len))
			return d;
	}
	return NULL;
}

uint32_t tfs_dir_seek_locked(const struct tfs_dir *dir, uint64_t off)
{
	uint32_t lo = 0, hi = dir->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (dir->slots[mid].cookie <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int tfs_dentry_add_locked(struct tfs_inode *parent, const char *name,
			  size_t len, struct tfs_inode *inode, uid_t by)
{
	struct tfs_dir *dir = parent->dir;
	struct tfs_dentry *d;
	size_t at;
	int rc;

	rc = tfs_meta_charge(by, dentry_cost(len));
	if (rc)
		return rc;
	if (dir->n == dir->cap) {
		uint32_t ncap = dir->cap ? dir->cap * 2 : 8;
		struct tfs_slot *s;

		rc = -ENOSPC;
		if (ncap < dir->cap)
			goto out_uncharge;
		rc = -ENOMEM;
		s = realloc(dir->slots, ncap * sizeof(*s));
		if (!s)
			goto out_uncharge;
		dir->slots = s;
		dir->cap = ncap;
	}
	rc = -ENOMEM;
	d = malloc(sizeof(*d) + len + 1);
	if (!d)
		goto out_uncharge;
	d->parent = parent;
	d->inode = inode;
	d->uid = by;
	d->namelen = (uint8_t)len;
	memcpy(d->name, name, len);
	d->name[len] = '\0';
	d->hash = name_hash(parent->ino, name, len);
	d->cookie = dir->next_cookie++;
	dir->slots[dir->n].cookie = d->cookie;
	dir->slots[dir->n].d = d;
	dir->n++;
	dir->live++;

	at = d->hash & tfs.dentries.mask;
	d->hnext = tfs.dentries.b[at];
	tfs.dentries.b[at] = d;
	if (++tfs.dentries.count > tfs.dentries.mask + 1)
		dentry_hash_grow(&tfs.dentries);
	tfs_pj_dset_locked(d);
	return 0;

out_uncharge:
	tfs_meta_uncharge(by, dentry_cost(len));
	return rc;
}

/*
 * Compact only once tombstones outnumber live entries: that keeps removal
 * amortised O(1) while an "rm -rf" walks a huge directory from the front.
 */
static void dir_compact(struct tfs_dir *dir)
{
	uint32_t k, w = 0;

	for (k = 0; k < dir->n; k++) {
		if (dir->slots[k].d)
			dir->slots[w++] = dir->slots[k];
	}
	dir->n = w;
	if (dir->cap > 64 && w < dir->cap / 4) {
		uint32_t ncap = dir->cap / 2;
		struct tfs_slot *s = realloc(dir->slots, ncap * sizeof(*s));

		if (s) {
			dir->slots = s;
			dir->cap = ncap;
		}
	}
}

void tfs_dentry_del_locked(struct tfs_dentry *d)
{
	struct tfs_dir *dir = d->parent->dir;
	struct tfs_dentry **pp = (struct tfs_dentry **)&tfs.dentries.b[
		d->hash & tfs.dentries.mask];
	uint32_t at;

	while (*pp && *pp != d)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = d->hnext;
		tfs.dentries.count--;
	}
	at = tfs_dir_seek_locked(dir, d->cookie - 1);
	if (at < dir->n && dir->slots[at].d == d)
		dir->slots[at].d = NULL;
	dir->live--;
	if (dir->n - dir->live > 32 && dir->n - dir->live > dir->live)
		dir_compact(dir);
	tfs_meta_uncharge(d->uid, dentry_cost(d->namelen));
	tfs_pj_ddel_locked(d);
	free(d);
}

void tfs_stat_locked(const struct tfs_inode *i, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = i->ino;
	st->st_mode = i->mode;
	st->st_nlink = i->nlink;
	st->st_uid = i->uid;
	st->st_gid = i->gid;
	st->st_rdev = i->rdev;
	st->st_blksize = 4096;
	st->st_atim = i->atime;
	st->st_mtim = i->mtime;
	st->st_ctim = i->ctime;
	if (S_ISDIR(i->mode)) {
		/* Like tmpfs: a size that grows with the entries. */
		st->st_size = (off_t)(i->dir->live + 2) * 32;
	} else if (S_ISLNK(i->mode)) {
		st->st_size = (off_t)strlen(i->target);
	}
}

void tfs_stat_data(const struct tfs_inode *i, struct stat *st)
{
	struct tier_buf_stat bs;

	if (!S_ISREG(i->mode))
		return;
	tier_buf_stat(i->buf, &bs);
	st->st_size = (off_t)bs.size;
	st->st_blocks = (blkcnt_t)bs.blocks;
}

int tfs_ns_init(void)
{
	struct tfs_inode *root;
	int rc;

	tfs.files.prev = tfs.files.next = &tfs.files;
	tfs.self_uid = geteuid();
	rc = hash_init(&tfs.inodes);
	if (rc)
		return rc;
	rc = hash_init(&tfs.dentries);
	if (rc)
		goto out_inodes;
	tfs.next_ino = FUSE_ROOT_ID;
	/*
	 * Inode numbers start again at 2 in every daemon: the generations
	 * must not, or a handle kept from an earlier mount would open the
	 * file that now has its number.
	 */
	if (getrandom(&tfs.next_generation, sizeof(tfs.next_generation),
		      GRND_NONBLOCK) != sizeof(tfs.next_generation))
		tfs.next_generation = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	rc = tfs_inode_new_locked(S_IFDIR | 0755, getuid(), getgid(), 0,
				  NULL, NULL, &root);
	if (rc)
		goto out_dentries;
	root->nlink = 2;
	root->dir->parent = root;
	tfs.root = root;
	return 0;

out_dentries:
	free(tfs.dentries.b);
out_inodes:
	free(tfs.inodes.b);
	return rc;
}

/* At unmount the kernel sends no more forgets: free whatever is left. */
void tfs_ns_destroy(void)
{
	size_t k;

	if (!tfs.inodes.b)
		return;
	/* Leases go before their buffers, which refuse to die leased. */
	while (tfs.files.next != &tfs.files) {
		struct tfs_file *f = tfs.files.next;

		if (f->exported)
			tier_buf_unexport(f->inode->buf, f->owner, false);
		tfs_file_unlink_locked(f);
		free(f);
	}
	for (k = 0; k <= tfs.dentries.mask; k++) {
		struct tfs_dentry *d = tfs.dentries.b[k], *next;

		for (; d; d = next) {
			next = d->hnext;
			free(d);
		}
	}
	for (k = 0; k <= tfs.inodes.mask; k++) {
		struct tfs_inode *i = tfs.inodes.b[k], *next;

		for (; i; i = next) {
			next = i->hnext;
			inode_free(i);
		}
	}
	free(tfs.dentries.b);
	free(tfs.inodes.b);
	tfs.dentries.b = NULL;
	tfs.inodes.b = NULL;
	tfs.root = NULL;
}
