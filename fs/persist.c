// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Persistent mounts in the namespace: what each operation records in the
 * journal (persist/), the sync points (fsync, fsyncdir, the last close
 * under persist = close), the thread that makes records durable once a
 * second and compacts them into snapshots, restoring the tree at start,
 * and saving everything at a clean stop. See doc/design.md.
 *
 * Recording. Every change of the namespace happens under ns_lock, and the
 * hooks below only collect what changed into this thread's transaction:
 * names set and deleted as they happen, inodes whose attributes changed.
 * tfs_ns_unlock() turns it into one record (the inodes' attributes read
 * then, as they ended up) before it lets go of the lock, so the journal's
 * order is the namespace's and an operation's record is whole or absent.
 *
 * Locks: ns_lock, then the journal's (a leaf). A sync holds a buffer's
 * lock, then takes the journal's, never ns_lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/limits.h>

#include "fs/fs_i.h"
#include "persist/persist.h"

/* What a file's last sync committed, for snapshots: read under the
 * journal's lock (pj_hold), replaced with its I_DATA record. */
struct tfs_pdata {
	uint64_t id, size;
	struct timespec mtime, ctime;
	uint32_t len;
	char map[];
};

struct txn {
	struct pj_rec rec; /* names set and deleted, in order */
	struct tfs_inode **touched; /* attributes to record at unlock */
	size_t ntouched, cap;
	bool failed; /* out of memory: the journal must not go on */
};

static struct {
	struct pj *j; /* NULL: not a persistent mount */
	enum cfg_persist mode;
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock; /* stop, the notes; a leaf */
	pthread_cond_t wake;
	bool stop;
	char *notes; /* what recovery said, "kind\tpath\twhy\n"... */
	size_t notes_len;
	const char *recovery; /* "fresh", "clean" or "crash" */
	uint64_t dropped, rolled_back, found, recovered_files;
	uint64_t start_ms; /* until the tree was whole, from the start */
	/* The restore on the loader thread (tfs_pj_load_start()). */
	struct pj_image *img; /* read before the mount, for the loader */
	struct stat root_st; /* the root as the image has it */
	uint32_t root_fl;
	uint64_t t0, answer_ms;
	pthread_t loader;
	bool loader_started;
} P = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.recovery = "none",
};

static __thread struct txn tx;
static __thread bool tx_registered;
static pthread_key_t tx_key;
static pthread_once_t tx_once = PTHREAD_ONCE_INIT;

/* A worker thread that exits (libfuse lets idle ones go) frees its
 * transaction's buffers. */
static void tx_free(void *p)
{
	struct txn *t = p;

	pj_rec_release(&t->rec);
	free(t->touched);
	t->touched = NULL;
	t->cap = t->ntouched = 0;
}

static void tx_key_init(void)
{
	if (pthread_key_create(&tx_key, tx_free))
		abort();
}

/* Before this thread's transaction first allocates. */
static void tx_register(void)
{
	if (tx_registered)
		return;
	pthread_once(&tx_once, tx_key_init);
	if (!pthread_setspecific(tx_key, &tx))
		tx_registered = true;
}

bool tfs_persistent(void)
{
	return P.j != NULL;
}

bool tfs_persist_close(void)
{
	return P.j && P.mode == CFG_PERSIST_CLOSE;
}

/* --- recording --- */

void tfs_pj_attr_locked(struct tfs_inode *i)
{
	if (!P.j)
		return;
	tx_register();
	for (size_t k = 0; k < tx.ntouched; k++)
		if (tx.touched[k] == i)
			return;
	if (tx.ntouched == tx.cap) {
		size_t cap = tx.cap ? tx.cap * 2 : 8;
		struct tfs_inode **t = realloc(tx.touched, cap * sizeof(*t));

		if (!t) {
			tx.failed = true;
			return;
		}
		tx.touched = t;
		tx.cap = cap;
	}
	tx.touched[tx.ntouched++] = i;
}

void tfs_pj_dirty_locked(struct tfs_inode *i)
{
	if (!P.j || !S_ISREG(i->mode))
		return;
	/* Once per sync: the sync clears it (with the buffer locked) after
	 * recording I_DATA, so a write that its sync did not see always
	 * finds it clear and says so. */
	if (!atomic_exchange(&i->unsynced, true)) {
		tx_register();
		pj_rec_dirty(&tx.rec, i->ino);
	}
}

void tfs_pj_dset_locked(const struct tfs_dentry *d)
{
	if (!P.j)
		return;
	tx_register();
	pj_rec_dset(&tx.rec, d->parent->ino, d->name, d->namelen,
		    d->inode->ino);
}

void tfs_pj_ddel_locked(const struct tfs_dentry *d)
{
	const struct tfs_dentry *now;

	if (!P.j)
		return;
	tx_register();
	/* A rename adds the new name before it removes the victim's entry
	 * of the same name: then the name stays, on the new inode. */
	now = tfs_dentry_find_locked(d->parent, d->name, d->namelen);
	if (now && now != d)
		tfs_pj_dset_locked(now);
	else
		pj_rec_ddel(&tx.rec, d->parent->ino, d->name, d->namelen);
}

/* Up to this many xattrs are described on the stack. */
#define XATTRS_SMALL 16

/* The journal's form of struct tfs_ipol. */
static uint32_t pol_iflags(const struct tfs_ipol *pol)
{
	uint32_t f = pol->pin == 1 ? PJ_IF_PIN : 0;

	if (pol->pin > 1)
		f |= (uint32_t)(pol->pin - 1) << PJ_IF_SOFT_SHIFT |
		     pol->ttl << PJ_IF_TTL_SHIFT;
	return f | (uint32_t)pol->write << PJ_IF_WRITE_SHIFT |
	       (uint32_t)pol->place << PJ_IF_PLACE_SHIFT;
}

static struct tfs_ipol pol_of_iflags(uint32_t f)
{
	struct tfs_ipol pol = { 0 };
	uint32_t soft = (f >> PJ_IF_SOFT_SHIFT) & 7;

	if (soft) {
		pol.pin = (uint8_t)(soft + 1);
		pol.ttl = f >> PJ_IF_TTL_SHIFT;
	} else {
		pol.pin = f & PJ_IF_PIN;
	}
	pol.write = (f >> PJ_IF_WRITE_SHIFT) & 3;
	if (pol.write > TIER_WRITE_THROUGH)
		pol.write = 0;
	pol.place = (f >> PJ_IF_PLACE_SHIFT) & 3;
	return pol;
}

/* Add @i's attributes to @r: I_ATTR, or I_FREE once it has no name. */
static void rec_inode(struct pj_rec *r, const struct tfs_inode *i)
{
	struct pj_xattr small[XATTRS_SMALL], *xs = small;
	struct pj_attr a = { 0 };
	uint32_t n = 0;

	if (!i->nlink && i != tfs.root) {
		pj_rec_free(r, i->ino);
		return;
	}
	for (const struct tfs_xattr *x = i->xattrs; x; x = x->next)
		n++;
	if (n > XATTRS_SMALL && !(xs = malloc(n * sizeof(*xs)))) {
		r->err = -ENOMEM;
		return;
	}
	n = 0;
	for (const struct tfs_xattr *x = i->xattrs; x; x = x->next)
		xs[n++] = (struct pj_xattr){ x->data, x->data + x->nlen + 1,
					     x->nlen, x->vlen };
	a.ino = i->ino;
	a.mode = i->mode;
	a.uid = i->uid;
	a.gid = i->gid;
	a.nlink = i->nlink;
	a.rdev = i->rdev;
	a.fsflags = tfs_fsflags(i);
	a.generation = i->generation;
	a.iflags = pol_iflags(&i->pol);
	a.atime = i->atime;
	a.mtime = i->mtime;
	a.ctime = i->ctime;
	if (S_ISLNK(i->mode)) {
		a.target = i->target;
		a.target_len = (uint32_t)strlen(i->target);
	}
	a.nxattrs = n;
	a.xattrs = xs;
	pj_rec_attr(r, &a);
	if (xs != small)
		free(xs);
}

void tfs_pj_txn_end_locked(void)
{
	if (!tx.rec.len && !tx.ntouched && !tx.failed)
		return;
	for (size_t k = 0; k < tx.ntouched; k++)
		rec_inode(&tx.rec, tx.touched[k]);
	if (tx.failed && !tx.rec.err)
		tx.rec.err = -ENOMEM;
	/* A record that cannot be kept poisons the journal (pj_append says
	 * so), until the next snapshot, which the thread then writes. */
	pj_append(P.j, &tx.rec);
	pj_rec_reset(&tx.rec);
	tx.ntouched = 0;
	tx.failed = false;
	if (tx.rec.cap > 64 * 1024) {
		pj_rec_release(&tx.rec);
		free(tx.touched);
		tx.touched = NULL;
		tx.cap = 0;
	}
}

/* --- sync points --- */

struct sync_ctx {
	struct tfs_inode *i;
	uint64_t ino;
	struct timespec mtime, ctime;
	bool defer;
	uint64_t seq;
};

/* With the buffer locked: record its committed version and wait for the
 * record to be durable. */
static int sync_record(void *arg, uint64_t id, uint64_t size,
		       const void *map, size_t len)
{
	struct sync_ctx *c = arg;
	struct pj_data d = { .ino = c->ino, .id = id, .size = size,
			     .mtime = c->mtime, .ctime = c->ctime,
			     .map = map, .map_len = (uint32_t)len };
	struct tfs_pdata *pd = malloc(sizeof(*pd) + len), *old = NULL;
	struct pj_rec r;

	if (!pd)
		return -ENOMEM;
	pd->id = id;
	pd->size = size;
	pd->mtime = c->mtime;
	pd->ctime = c->ctime;
	pd->len = (uint32_t)len;
	memcpy(pd->map, map, len);
	pj_rec_init(&r);
	pj_rec_data(&r, &d);
	c->seq = pj_append_swap(P.j, &r, (void **)&c->i->pdata, pd,
				(void **)&old);
	pj_rec_release(&r);
	free(old);
	atomic_store(&c->i->unsynced, false);
	return c->defer ? 0 : pj_commit(P.j, c->seq);
}

int tfs_pj_sync(struct tfs_inode *i, bool namespace_too)
{
	struct sync_ctx c = { .i = i, .ino = i->ino };
	int rc;

	if (!P.j)
		return 0;
	tfs_ns_lock();
	c.mtime = i->mtime;
	c.ctime = i->ctime;
	bool named = i->nlink > 0;
	tfs_ns_unlock();
	/* A file without a name is gone after a crash anyway. */
	if (!named || !S_ISREG(i->mode))
		return namespace_too ? pj_flush(P.j) : 0;
	rc = tier_buf_sync(i->buf, 0, sync_record, &c);
	if (rc == 1)
		rc = namespace_too ? pj_flush(P.j) : 0;
	if (rc < 0)
		tfs_warn("cannot sync inode %llu to the disk tier: %s",
			 (unsigned long long)c.ino, strerror(-rc));
	return rc;
}

int tfs_pj_flush(void)
{
	return P.j ? pj_flush(P.j) : 0;
}

/* --- snapshots --- */

static void rec_data(struct pj_rec *r, const struct tfs_inode *i)
{
	const struct tfs_pdata *pd = i->pdata;
	struct pj_data d;

	if (!pd)
		return;
	d = (struct pj_data){ .ino = i->ino, .id = pd->id, .size = pd->size,
			      .mtime = pd->mtime, .ctime = pd->ctime,
			      .map = pd->map, .map_len = pd->len };
	pj_rec_data(r, &d);
}

/*
 * Write a snapshot of everything. ns_lock and the journal's lock are held
 * while the state is copied into memory, not while it is written.
 */
static int snapshot(void)
{
	struct pj_meta m;
	struct pj_rec body;
	int rc;

	pj_rec_init(&body);
	pthread_mutex_lock(&tfs.ns_lock);
	pj_hold(P.j);
	m.next_ino = tfs.next_ino;
	m.next_id = tier_store_next_id(tfs.store);
	m.next_generation = tfs.next_generation;
	pj_rec_meta(&body, &m);
	for (size_t k = 0; k <= tfs.inodes.mask; k++) {
		for (struct tfs_inode *i = tfs.inodes.b[k]; i; i = i->hnext) {
			if (!i->nlink && i != tfs.root)
				continue;
			rec_inode(&body, i);
			if (!S_ISREG(i->mode))
				continue;
			rec_data(&body, i);
			if (atomic_load(&i->unsynced))
				pj_rec_dirty(&body, i->ino);
		}
	}
	/* Names directory by directory in readdir order, which restoring
	 * them keeps. */
	for (size_t k = 0; k <= tfs.inodes.mask; k++) {
		for (struct tfs_inode *i = tfs.inodes.b[k]; i; i = i->hnext) {
			if (!S_ISDIR(i->mode) || (!i->nlink && i != tfs.root))
				continue;
			for (uint32_t s = 0; s < i->dir->n; s++) {
				const struct tfs_dentry *d = i->dir->slots[s].d;

				if (d)
					pj_rec_dset(&body, i->ino, d->name,
						    d->namelen, d->inode->ino);
			}
		}
	}
	rc = body.err ? body.err : 0;
	if (rc) {
		/* pj_cut() releases the hold; a failed body must not
		 * replace anything. */
		pj_rec_release(&body);
		pj_rec_init(&body);
	}
	if (!rc)
		rc = pj_cut(P.j);
	else
		pj_cut_abort(P.j);
	pthread_mutex_unlock(&tfs.ns_lock);
	if (!rc)
		rc = pj_snapshot_write(P.j, &body);
	pj_rec_release(&body);
	if (rc)
		tfs_err("cannot write a snapshot of the namespace: %s",
			strerror(-rc));
	return rc;
}

/* Make the journal durable, then remove what it no longer names. */
static void flush_and_bury(void)
{
	void *graves = tier_store_graves_take(tfs.store);

	if (!pj_flush(P.j))
		tier_store_graves_bury(tfs.store, graves);
	else
		tier_store_graves_keep(tfs.store, graves);
}

static void *persist_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&P.lock);
	while (!P.stop) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&P.wake, &P.lock, &ts);
		if (P.stop)
			break;
		pthread_mutex_unlock(&P.lock);
		flush_and_bury();
		if (pj_want_snapshot(P.j))
			snapshot();
		pthread_mutex_lock(&P.lock);
	}
	pthread_mutex_unlock(&P.lock);
	return NULL;
}

/* --- start --- */

struct restore {
	uint64_t *ids; /* the spill files on disk, sorted */
	size_t nids;
	uint8_t *used; /* per ids[] entry: adopted */
	uint64_t files, bytes;
	char mended[768], salvaged[768]; /* the last file's, for resolve */
};

/* What adopt() keeps of a file until the tree is built: its buffer, and
 * the table of what it kept, which snapshots record from then on. */
struct adopted {
	struct tier_buf *b;
	struct tfs_pdata *pd;
};

static void adopted_free(struct adopted *ad)
{
	if (!ad)
		return;
	if (ad->b)
		tier_buf_destroy(ad->b);
	free(ad->pd);
	free(ad);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Adopt the committed version the image names. A table that disagrees
 * with itself is mended where no byte is lost; one that would lose bytes
 * is salvaged, keeping every chunk that reads back: the file then goes to
 * lost+found (pj_image_resolve()), with what was lost said.
 */
static const char *adopt(void *arg, struct pj_inode *pi)
{
	struct restore *r = arg;
	struct tier_adopt_note note;
	struct adopted *ad;
	struct tfs_pdata *pd;
	struct tier_buf *b;
	bool salvaged = false;
	uint64_t *at;
	uint32_t kept;
	void *map;
	size_t len;
	int rc;

	at = r->nids ? bsearch(&pi->d.id, r->ids, r->nids, sizeof(*r->ids),
			       cmp_u64) : NULL;
	if (!at)
		return "its spill file is missing";
	if (r->used[at - r->ids])
		return "its spill file is another file's";
	rc = tier_buf_adopt(tfs.store, pi->d.id, pi->d.size, pi->d.map,
			    pi->d.map_len, 0, &note, &b);
	if (rc == -EINVAL) {
		salvaged = true;
		rc = tier_buf_adopt(tfs.store, pi->d.id, pi->d.size, pi->d.map,
				    pi->d.map_len, TIER_ADOPT_SALVAGE, &note,
				    &b);
	}
	if (rc == -EIO)
		return "its spill file cannot be read";
	if (rc == -EFBIG)
		return "its chunk table reaches past what a file can hold";
	if (rc)
		return "out of memory";
	ad = calloc(1, sizeof(*ad));
	rc = ad ? tier_buf_image(b, &map, &len) : -ENOMEM;
	pd = rc ? NULL : malloc(sizeof(*pd) + len);
	if (!pd) {
		if (!rc)
			free(map);
		free(ad);
		tier_buf_destroy(b);
		return "out of memory";
	}
	memcpy(&kept, map, 4);
	pd->id = pi->d.id;
	pd->size = pi->d.size;
	pd->mtime = pi->d.mtime;
	pd->ctime = pi->d.ctime;
	pd->len = (uint32_t)len;
	memcpy(pd->map, map, len);
	free(map);
	ad->b = b;
	ad->pd = pd;
	if (salvaged && !kept && note.lost) {
		adopted_free(ad);
		return "none of its chunks reads back: its chunk table is "
		       "damaged";
	}
	r->used[at - r->ids] = 1;
	pi->user = ad;
	r->files++;
	r->bytes += pi->d.size;
	if (salvaged) {
		snprintf(r->salvaged, sizeof(r->salvaged), "%u of its chunks "
			 "are lost, holes now (%s)", note.lost, note.text);
		pi->salvaged = r->salvaged;
	} else if (note.mended) {
		snprintf(r->mended, sizeof(r->mended), "its table disagreed "
			 "with itself; every byte is kept (%s)", note.text);
		pi->mended = r->mended;
	}
	return NULL;
}

static int xattrs_restore(struct tfs_inode *i, const struct pj_attr *a)
{
	for (uint32_t k = a->nxattrs; k-- > 0;) {
		const struct pj_xattr *x = &a->xattrs[k];
		struct tfs_xattr *t;
		int rc = tfs_meta_charge(0, tfs_xattr_cost(x->nlen, x->vlen));

		if (rc)
			return rc;
		t = malloc(sizeof(*t) + x->nlen + 1 + x->vlen);
		if (!t) {
			tfs_meta_uncharge(0, tfs_xattr_cost(x->nlen, x->vlen));
			return -ENOMEM;
		}
		t->nlen = (uint8_t)x->nlen;
		t->vlen = x->vlen;
		t->uid = 0; /* brought back: nobody's new use */
		memcpy(t->data, x->name, x->nlen);
		t->data[x->nlen] = '\0';
		memcpy(t->data + x->nlen + 1, x->value, x->vlen);
		t->next = i->xattrs;
		i->xattrs = t;
		i->xattr_bytes += x->nlen + x->vlen;
	}
	return 0;
}

/* Give @i what the image says of @pi, and what adopt() kept of it
 * (@ad, NULL but for a regular file). ns_lock held. */
static int inode_restore(struct tfs_inode *i, struct pj_inode *pi,
			 struct adopted *ad)
{
	const struct pj_attr *a = &pi->a;

	i->mode = a->mode;
	i->uid = a->uid;
	i->gid = a->gid;
	i->nlink = a->nlink;
	i->rdev = a->rdev;
	i->generation = a->generation;
	atomic_store_explicit(&i->fsflags, a->fsflags & TFS_FL_USER,
			      memory_order_relaxed);
	i->atime = a->atime;
	i->mtime = a->mtime;
	i->ctime = a->ctime;
	/* A sync's times are newer than the attributes recorded before. */
	if (pi->has_data &&
	    (pi->d.mtime.tv_sec > i->mtime.tv_sec ||
	     (pi->d.mtime.tv_sec == i->mtime.tv_sec &&
	      pi->d.mtime.tv_nsec > i->mtime.tv_nsec))) {
		i->mtime = pi->d.mtime;
		i->ctime = pi->d.ctime;
	}
	if (S_ISREG(a->mode) && ad) {
		/* What was kept is what the next snapshot records. */
		i->pdata = ad->pd;
		ad->pd = NULL;
		i->pol = pol_of_iflags(a->iflags);
		i->pol.place = 0;
	} else if (S_ISDIR(a->mode)) {
		i->pol = pol_of_iflags(a->iflags);
	}
	return xattrs_restore(i, a);
}

/*
 * Keep what recovery said for user.tierfs.recovery. An xattr value cannot
 * pass XATTR_SIZE_MAX, and a damaged snapshot can drop many thousands of
 * files: past that the first notes are kept (the journals' and snapshots'
 * come first) and one line counts the rest, which the log holds.
 */
static void notes_keep(const struct pj_image *img)
{
	const size_t room = XATTR_SIZE_MAX - 128;
	size_t len = 0, more = 0;
	char *p;

	for (const struct pj_note *n = img->notes; n; n = n->next) {
		if (!more && len + strlen(n->text) + 1 <= room)
			len += strlen(n->text) + 1;
		else
			more++;
	}
	if (!len && !more)
		return;
	p = malloc(len + 128);
	if (!p)
		return;
	P.notes = p;
	for (const struct pj_note *n = img->notes; n && len; n = n->next) {
		size_t l = strlen(n->text) + 1;

		if (l > len)
			break;
		p += sprintf(p, "%s\n", n->text);
		len -= l;
	}
	if (more)
		p += sprintf(p, "more\t-\t%zu more not shown here: the "
			     "daemon's log has every one\n", more);
	P.notes_len = (size_t)(p - P.notes);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Build the tree from @img; ns_lock held, the journal not on yet. */
static int tree_restore(struct pj_image *img, uint64_t *max_ino)
{
	int rc = 0;

	*max_ino = FUSE_ROOT_ID;
	for (size_t k = 0; k < img->ninodes && !rc; k++) {
		struct pj_inode *pi = img->inodes[k];
		struct adopted *ad = pi->user;
		struct tfs_inode *i;

		if (pi->a.ino == FUSE_ROOT_ID) {
			i = tfs.root;
		} else {
			char *target = NULL;

			if (S_ISLNK(pi->a.mode)) {
				target = strndup(pi->a.target ?
							 pi->a.target : "",
						 pi->a.target_len);
				if (!target) {
					rc = -ENOMEM;
					break;
				}
			}
			rc = tfs_inode_restore_locked(pi->a.ino, pi->a.mode,
						      ad ? ad->b : NULL, target,
						      &i);
			if (rc) {
				free(target);
				break;
			}
			/* the inode owns the buffer now */
			if (ad)
				ad->b = NULL;
		}
		if (!rc)
			rc = inode_restore(i, pi, ad);
		adopted_free(ad);
		pi->user = NULL;
		if (pi->a.ino > *max_ino)
			*max_ino = pi->a.ino;
	}
	for (size_t k = 0; k < img->ndentries && !rc; k++) {
		const struct pj_dentry *d = img->dentries[k];
		struct tfs_inode *p = tfs_inode_get_locked(d->parent);
		struct tfs_inode *c = tfs_inode_get_locked(d->ino);

		rc = tfs_dentry_add_locked(p, d->name, d->len, c, 0);
		if (!rc && S_ISDIR(c->mode))
			c->dir->parent = p;
	}
	return rc;
}

/*
 * What getattr of the root answers while the loader runs: the root's
 * record as replay left it, or the root pj_image_resolve() makes when the
 * record is lost. The kernel checks permissions on it, so it must be the
 * mode and owner the tree comes back with.
 */
static void root_stat(const struct pj_image *img, struct stat *st,
		      uint32_t *fsflags)
{
	const struct pj_inode *pi = pj_image_inode(img, FUSE_ROOT_ID);

	tfs_ns_lock();
	tfs_stat_locked(tfs.root, st);
	tfs_ns_unlock();
	*fsflags = 0;
	if (!pi || !pi->has_attr || !S_ISDIR(pi->a.mode)) {
		st->st_mode = S_IFDIR | 0755;
		st->st_uid = getuid();
		st->st_gid = getgid();
		return;
	}
	st->st_mode = pi->a.mode;
	st->st_uid = pi->a.uid;
	st->st_gid = pi->a.gid;
	st->st_nlink = pi->a.nlink;
	st->st_atim = pi->a.atime;
	st->st_mtim = pi->a.mtime;
	st->st_ctim = pi->a.ctime;
	*fsflags = pi->a.fsflags & TFS_FL_USER;
}

int tfs_pj_start(enum cfg_persist mode, char *err, size_t errlen)
{
	struct tier_store *s = tfs.store;
	int rc;

	if (!tier_store_persistent(s))
		return 0;
	P.mode = mode;
	P.t0 = now_ms();
	/* Everything that refuses a directory is here, before the mount:
	 * another version or chunk size, no snapshot that checks out. */
	rc = pj_image_load(tier_store_dirfd(s), tier_store_dir(s),
			   tier_store_chunk_size(s), &P.img, err, errlen);
	if (rc)
		return rc;
	root_stat(P.img, &P.root_st, &P.root_fl);
	return 0;
}

/*
 * The rest of the start, on the loader thread while the mount answers:
 * adopt the files, build the tree, apply the pins, start the journal.
 * Consumes @img. Returns 0 or -errno with why in @err.
 */
static int restore(struct pj_image *img, char *err, size_t errlen)
{
	struct tier_store *s = tfs.store;
	struct restore r = { 0 };
	uint64_t max_ino;
	int dirfd = tier_store_dirfd(s), rc;
	const char *dir = tier_store_dir(s);

	rc = tier_store_spill_ids(s, &r.ids, &r.nids);
	if (rc) {
		snprintf(err, errlen, "cannot read '%s': %s", dir,
			 strerror(-rc));
		goto out_img;
	}
	if (r.nids)
		qsort(r.ids, r.nids, sizeof(*r.ids), cmp_u64);
	r.used = calloc(r.nids ? r.nids : 1, 1);
	if (!r.used) {
		rc = -ENOMEM;
		goto out_nomem;
	}
	rc = pj_image_resolve(img, adopt, &r, getuid(), getgid());
	if (rc)
		goto out_nomem;
	tfs_ns_lock();
	rc = tree_restore(img, &max_ino);
	if (!rc) {
		if (img->meta.next_ino > max_ino)
			max_ino = img->meta.next_ino - 1;
		tfs.next_ino = max_ino + 1;
		if (img->meta.next_generation)
			tfs.next_generation = img->meta.next_generation;
	}
	tfs_ns_unlock();
	if (rc)
		goto out_nomem;
	tier_store_set_next_id(s, img->meta.next_id);
	/* Pins after the tree: a pinned buffer stays where it is, here on
	 * disk, until unpinned. */
	for (size_t k = 0; k < img->ninodes; k++) {
		struct tfs_inode *i = tfs_inode_get_locked(img->inodes[k]->a.ino);

		if (!i || !S_ISREG(i->mode))
			continue;
		if (i->pol.pin == 1)
			tier_buf_pin(i->buf);
		else if (i->pol.pin)
			tier_buf_soft_pin_as(i->buf, 0, i->pol.pin - 1u,
					     i->pol.ttl);
		if (i->pol.write)
			tier_buf_set_write_policy(
				i->buf, (enum tier_write_policy)i->pol.write);
	}
	/* What no kept file names was being written when the daemon died,
	 * or belonged to a file recovery dropped. */
	for (size_t k = 0; k < r.nids; k++)
		if (!r.used[k])
			tier_store_spill_remove(s, r.ids[k]);
	/* Buffers adopted for inodes that were then not kept. */
	for (size_t k = 0; k <= img->imask; k++)
		for (struct pj_inode *pi = img->ihash[k]; pi; pi = pi->hnext)
			adopted_free(pi->user);

	rc = pj_start(dirfd, dir, tier_store_chunk_size(s), img, &P.j, err,
		      errlen);
	if (rc)
		goto out_img;
	/* No record after the snapshot is no proof of a clean stop: a daemon
	 * that changed nothing and was killed leaves none either. The lock
	 * file says "stopped" only after a save. */
	bool clean = img->clean && tier_store_prev_stop(s) >= 0;

	P.recovery = img->fresh ? "fresh" : clean ? "clean" : "crash";
	P.dropped = img->dropped;
	P.rolled_back = img->rolled_back;
	P.found = img->found;
	P.recovered_files = r.files;
	notes_keep(img);
	/* A new directory gets its first snapshot; a recovery that dropped
	 * anything, a new one at once, so that nothing is ever appended
	 * after a bad record or replayed onto what was dropped. */
	if (img->need_snapshot || img->upgrade || pj_want_snapshot(P.j)) {
		rc = snapshot();
		if (rc) {
			snprintf(err, errlen, "cannot write a snapshot in '%s': "
				 "%s", dir, strerror(-rc));
			goto out_stop;
		}
	}
	rc = -pthread_create(&P.thread, NULL, persist_main, NULL);
	if (rc) {
		snprintf(err, errlen, "cannot start the journal thread: %s",
			 strerror(-rc));
		goto out_stop;
	}
	P.thread_started = true;
	P.start_ms = now_ms() - P.t0;
	if (img->fresh)
		tfs_notice("persist: new spill directory '%s'", dir);
	else
		tfs_notice("persist: %" PRIu64 " files (%" PRIu64 " bytes) "
			   "back from '%s' in %" PRIu64 " ms (answering "
			   "after %" PRIu64 " ms) after a %s stop%s", r.files,
			   r.bytes, dir, P.start_ms, P.answer_ms,
			   clean ? "clean" : "crash or unclean",
			   img->notes ? "; what recovery dropped: "
					"tierfsctl recover --list" : "");
	free(r.ids);
	free(r.used);
	pj_image_free(img);
	return 0;

out_stop:
	pj_stop(P.j);
	P.j = NULL;
	goto out_img;
out_nomem:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory restoring '%s'", dir);
	else if (rc == -ENOSPC)
		snprintf(err, errlen, "the files in '%s' need more metadata "
			 "than fs_metadata_limit allows", dir);
out_img:
	/* Nothing of the directory may go because this start failed. */
	tier_store_keep_files(s);
	if (img)
		for (size_t k = 0; k <= img->imask; k++)
			for (struct pj_inode *pi = img->ihash[k]; pi;
			     pi = pi->hnext)
				adopted_free(pi->user);
	free(r.ids);
	free(r.used);
	pj_image_free(img);
	return rc;
}

/*
 * A test's hold on the loader (TFS_TEST_RESTORE_HOLD=PATH): it waits
 * until PATH exists, so that a test can act while the tree is not back.
 * Nothing else reads it.
 */
static void test_hold(void)
{
	const char *path = getenv("TFS_TEST_RESTORE_HOLD");

	while (path && *path && access(path, F_OK))
		usleep(10000);
}

static void *loader_main(void *arg)
{
	char err[512] = "";
	int rc;

	(void)arg;
	tfs_ns_gate_loader();
	test_hold();
	rc = restore(P.img, err, sizeof(err));
	P.img = NULL;
	if (rc) {
		/*
		 * The mount answered already, and waits at the gate. Stop as
		 * a failed start does, with the same message and the
		 * directory kept, rather than open the gate on a tree half
		 * built.
		 */
		tfs_err("cannot start the persistent mount: %s",
			err[0] ? err : strerror(-rc));
		tier_store_keep_files(tfs.store);
		if (tfs.se)
			fuse_session_unmount(tfs.se);
		_exit(1);
	}
	tfs_ns_gate_open();
	return NULL;
}

int tfs_pj_load_start(void)
{
	int rc;

	if (!P.img)
		return 0;
	P.answer_ms = now_ms() - P.t0;
	tfs_ns_gate_close(&P.root_st, P.root_fl);
	rc = -pthread_create(&P.loader, NULL, loader_main, NULL);
	if (rc) {
		tfs_ns_gate_open();
		return rc;
	}
	P.loader_started = true;
	return 0;
}

/* --- stop --- */

struct saving {
	struct tfs_inode **list;
	size_t n;
};

static int save_all(struct saving *sv)
{
	size_t cap = 0;
	int rc, bad = 0;

	tfs_ns_lock();
	for (size_t k = 0; k <= tfs.inodes.mask; k++) {
		for (struct tfs_inode *i = tfs.inodes.b[k]; i; i = i->hnext) {
			if (!S_ISREG(i->mode) || !i->nlink)
				continue;
			if (sv->n == cap) {
				size_t nc = cap ? cap * 2 : 1024;
				struct tfs_inode **l =
					realloc(sv->list, nc * sizeof(*l));

				if (!l) {
					tfs_ns_unlock();
					return -ENOMEM;
				}
				sv->list = l;
				cap = nc;
			}
			sv->list[sv->n++] = i;
		}
	}
	tfs_ns_unlock();
	/* Nothing else runs now: the mount is gone and the threads that
	 * could change the namespace have stopped. */
	for (size_t k = 0; k < sv->n; k++) {
		struct tfs_inode *i = sv->list[k];
		struct sync_ctx c = { .i = i, .ino = i->ino, .mtime = i->mtime,
				      .ctime = i->ctime, .defer = true };

		tfs_save_progress(k, sv->n);

		rc = tier_buf_sync(i->buf, TIER_SYNC_DEFER, sync_record, &c);
		if (rc < 0) {
			tfs_err("cannot save inode %llu: %s; it comes back "
				"as at its last sync",
				(unsigned long long)i->ino, strerror(-rc));
			bad++;
		}
	}
	return bad;
}

void tfs_pj_stop(void)
{
	struct saving sv = { 0 };
	int rc, bad;

	if (P.loader_started) {
		pthread_join(P.loader, NULL);
		P.loader_started = false;
	}
	if (P.img) {
		/* The mount failed before the loader started: nothing was
		 * restored, and nothing of the directory may go. */
		pj_image_free(P.img);
		P.img = NULL;
		tier_store_keep_files(tfs.store);
		return;
	}
	if (!P.j)
		return;
	if (P.thread_started) {
		pthread_mutex_lock(&P.lock);
		P.stop = true;
		pthread_cond_signal(&P.wake);
		pthread_mutex_unlock(&P.lock);
		pthread_join(P.thread, NULL);
		P.thread_started = false;
	}
	bad = save_all(&sv);
	tfs_save_progress(sv.n, sv.n);
	/* One syncfs for every spill file written, then the records that
	 * name them, then the old versions may go. */
	if (syncfs(tier_store_dirfd(tfs.store))) {
		tfs_err("cannot sync '%s': %s", tier_store_dir(tfs.store),
			strerror(errno));
		bad = -EIO;
	}
	rc = bad < 0 ? -EIO : pj_flush(P.j);
	if (!rc) {
		for (size_t k = 0; k < sv.n; k++)
			tier_buf_sync_commit(sv.list[k]->buf);
		flush_and_bury();
		rc = snapshot();
	}
	free(sv.list);
	if (rc || bad) {
		tfs_err("persist: the stop was not clean; the next mount "
			"recovers from the journal");
	} else {
		tfs_notice("persist: saved in '%s'", tier_store_dir(tfs.store));
		tier_store_set_state(tfs.store, "stopped", NULL);
	}
	/* Whatever happened, the files stay for the next mount. */
	tier_store_keep_files(tfs.store);
}

void tfs_pj_destroy(void)
{
	if (!P.j)
		return;
	pj_stop(P.j);
	P.j = NULL;
	free(P.notes);
	P.notes = NULL;
	pj_rec_release(&tx.rec);
	free(tx.touched);
	tx.touched = NULL;
}

/* --- what it shows --- */

size_t tfs_pj_stats(char *buf, size_t len)
{
	static const char *const modes[] = { "no", "yes", "close" };
	struct pj_stats st;
	size_t n = 0;

#define EMIT(...) (n = tier_appendf(buf, len, n, __VA_ARGS__))
	EMIT("persist=%s\n", P.j ? modes[P.mode] : "no");
	if (!P.j)
		return n;
	pj_stats(P.j, &st);
	EMIT("persist_dir=%s\n", tier_store_dir(tfs.store));
	EMIT("journal_bytes=%" PRIu64 "\n", st.journal_bytes +
						    st.pending_bytes);
	EMIT("journal_records=%" PRIu64 "\n", st.journal_records);
	EMIT("journal_commits=%" PRIu64 "\n", st.commits);
	EMIT("journal_error=%d\n", st.error);
	EMIT("snapshot_bytes=%" PRIu64 "\n", st.snapshot_bytes);
	EMIT("snapshot_time=%" PRId64 "\n", st.snapshot_time);
	EMIT("recovery=%s\n", P.recovery);
	EMIT("recovery_ms=%" PRIu64 "\n", P.start_ms);
	EMIT("recovered_files=%" PRIu64 "\n", P.recovered_files);
	EMIT("recovery_dropped=%" PRIu64 "\n", P.dropped);
	EMIT("recovery_rolled_back=%" PRIu64 "\n", P.rolled_back);
	EMIT("recovery_lost_found=%" PRIu64 "\n", P.found);
#undef EMIT
	return n;
}

ssize_t tfs_pj_notes(char *buf, size_t len)
{
	if (!P.j)
		return -ENODATA;
	if (P.notes_len > len)
		return -E2BIG;
	if (P.notes_len)
		memcpy(buf, P.notes, P.notes_len);
	return (ssize_t)P.notes_len;
}
