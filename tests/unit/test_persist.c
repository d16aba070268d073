// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Unit tests of the metadata journal (persist/): records written, made
 * durable, cut into snapshots and read back; damaged tails, damaged
 * snapshots and other versions; and what pj_image_resolve() keeps.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/log.h"
#include "persist/pj_i.h"
#include "tap.h"

#define CS (1u << 20)

static char dir[64];
static int dirfd_;

static void fresh_dir(void)
{
	char cmd[256];

	if (dirfd_ > 0)
		close(dirfd_);
	snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
	CHECK_EQ(system(cmd), 0);
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(dirfd_ >= 0);
}

static struct pj_image *load(int *rc, char *err, size_t errlen)
{
	struct pj_image *img = NULL;

	err[0] = '\0';
	*rc = pj_image_load(dirfd_, dir, CS, &img, err, errlen);
	return img;
}

static struct pj_attr attr(uint64_t ino, uint32_t mode)
{
	struct pj_attr a = { .ino = ino, .mode = mode, .uid = 7, .gid = 8,
			     .nlink = 1 };

	a.mtime.tv_sec = 1000 + (time_t)ino;
	a.mtime.tv_nsec = 5;
	return a;
}

/* A fresh directory: load, start, cut and write the first snapshot with
 * a root, as the daemon does on its first mount. */
static struct pj *start_fresh(void)
{
	struct pj_image *img;
	struct pj *j = NULL;
	struct pj_rec body;
	struct pj_meta m = { 2, 1, 1 };
	struct pj_attr root = attr(1, 040755);
	char err[256];
	int rc;

	fresh_dir();
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	CHECK(img && img->fresh && img->need_snapshot);
	CHECK_EQ(pj_start(dirfd_, dir, CS, img, &j, err, sizeof(err)), 0);
	pj_image_free(img);
	pj_rec_init(&body);
	pj_hold(j);
	pj_rec_meta(&body, &m);
	pj_rec_attr(&body, &root);
	CHECK_EQ(pj_cut(j), 0);
	CHECK_EQ(pj_snapshot_write(j, &body), 0);
	pj_rec_release(&body);
	return j;
}

static uint64_t add_file(struct pj *j, uint64_t parent, const char *name,
			 uint64_t ino, bool data)
{
	struct pj_attr a = attr(ino, 0100644);
	struct pj_rec r;
	uint64_t seq;

	pj_rec_init(&r);
	pj_rec_attr(&r, &a);
	pj_rec_dset(&r, parent, name, strlen(name), ino);
	if (data) {
		struct pj_data d = { .ino = ino, .id = ino * 10,
				     .size = ino * 100, .map = "map!",
				     .map_len = 4 };

		pj_rec_data(&r, &d);
	}
	seq = pj_append(j, &r);
	pj_rec_release(&r);
	return seq;
}

static const char *keep_all(void *ctx, struct pj_inode *i)
{
	(void)ctx;
	(void)i;
	return NULL;
}

static bool has_note(const struct pj_image *img, const char *kind,
		     const char *needle)
{
	for (struct pj_note *n = img->notes; n; n = n->next)
		if (!strncmp(n->text, kind, strlen(kind)) &&
		    strstr(n->text, needle))
			return true;
	return false;
}

static void test_round_trip(void)
{
	struct pj *j = start_fresh();
	struct pj_xattr xs[2] = { { "user.a", "1", 6, 1 },
				  { "user.bb", "", 7, 0 } };
	struct pj_attr a = attr(3, 0120777);
	struct pj_image *img;
	struct pj_inode *i;
	struct pj_rec r;
	char err[256];
	int rc;

	add_file(j, 1, "f", 2, true);
	a.target = "target/path";
	a.target_len = 11;
	a.nxattrs = 2;
	a.xattrs = xs;
	a.fsflags = 0x10;
	a.generation = 77;
	a.iflags = PJ_IF_PIN;
	a.rdev = 0x1234;
	pj_rec_init(&r);
	pj_rec_attr(&r, &a);
	pj_rec_dset(&r, 1, "ln", 2, 3);
	pj_rec_dirty(&r, 2);
	CHECK(pj_append(j, &r) > 0);
	CHECK_EQ(pj_flush(j), 0);
	pj_stop(j);
	pj_rec_release(&r);

	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK(!img->fresh && !img->clean);
	CHECK_EQ(img->records, 2);
	CHECK_EQ(img->meta.next_ino, 2);
	i = pj_image_inode(img, 2);
	CHECK(i && i->has_attr && i->has_data && i->dirty);
	if (i) {
		CHECK_EQ(i->d.id, 20);
		CHECK_EQ(i->d.size, 200);
		CHECK(i->d.map_len == 4 && !memcmp(i->d.map, "map!", 4));
		CHECK_EQ(i->a.mtime.tv_sec, 1002);
		CHECK_EQ(i->a.mtime.tv_nsec, 5);
	}
	i = pj_image_inode(img, 3);
	CHECK(i && i->a.target_len == 11 &&
	      !memcmp(i->a.target, "target/path", 11));
	if (i) {
		CHECK_EQ(i->a.nxattrs, 2);
		CHECK(!strncmp(i->a.xattrs[0].name, "user.a", 6));
		CHECK(i->a.xattrs[0].vlen == 1 &&
		      !memcmp(i->a.xattrs[0].value, "1", 1));
		CHECK_EQ(i->a.xattrs[1].vlen, 0);
		CHECK_EQ(i->a.fsflags, 0x10);
		CHECK_EQ(i->a.generation, 77);
		CHECK_EQ(i->a.iflags, PJ_IF_PIN);
		CHECK_EQ(i->a.rdev, 0x1234);
		CHECK_EQ(i->a.uid, 7);
	}
	CHECK_EQ(pj_image_resolve(img, keep_all, NULL, 0, 0), 0);
	CHECK_EQ(img->ninodes, 3);
	CHECK_EQ(img->ndentries, 2);
	CHECK(has_note(img, "rolled back", "/f"));
	pj_image_free(img);
}

/* Names deleted, inodes freed, a rename over a name: the last state
 * wins. */
static void test_deletes(void)
{
	struct pj *j = start_fresh();
	struct pj_image *img;
	struct pj_rec r;
	char err[256];
	int rc;

	add_file(j, 1, "a", 2, true);
	add_file(j, 1, "b", 3, true);
	pj_rec_init(&r);
	pj_rec_ddel(&r, 1, "a", 1);
	pj_rec_dset(&r, 1, "b", 1, 2); /* rename a over b */
	pj_rec_free(&r, 3);
	pj_append(j, &r);
	CHECK_EQ(pj_flush(j), 0);
	pj_stop(j);
	pj_rec_release(&r);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK(!pj_image_inode(img, 3));
	CHECK_EQ(img->dcount, 1);
	CHECK_EQ(pj_image_resolve(img, keep_all, NULL, 0, 0), 0);
	CHECK_EQ(img->ndentries, 1);
	CHECK(img->ndentries == 1 && img->dentries[0]->ino == 2 &&
	      !strcmp(img->dentries[0]->name, "b"));
	CHECK(!img->notes);
	pj_image_free(img);
}

static off_t file_size(const char *name)
{
	struct stat st;

	return fstatat(dirfd_, name, &st, 0) ? -1 : st.st_size;
}

static void flip_byte(const char *name, off_t off)
{
	int fd = openat(dirfd_, name, O_RDWR);
	unsigned char c;

	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, &c, 1, off), 1);
	c ^= 0x40;
	CHECK_EQ(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

/* A damaged last record: replay stops before it, says so, cuts the
 * journal there, and records appended afterwards are read back. */
static void test_corrupt_tail(void)
{
	struct pj *j = start_fresh();
	struct pj_image *img;
	char err[256];
	off_t before, after;
	int rc;

	for (uint64_t k = 0; k < 10; k++) {
		char name[8];

		snprintf(name, sizeof(name), "f%u", (unsigned int)k);
		add_file(j, 1, name, 10 + k, true);
	}
	CHECK_EQ(pj_flush(j), 0);
	before = file_size("journal.1");
	add_file(j, 1, "last", 99, true);
	CHECK_EQ(pj_flush(j), 0);
	pj_stop(j);
	after = file_size("journal.1");
	CHECK(after > before);
	flip_byte("journal.1", before + (after - before) / 2);

	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK_EQ(img->records, 10);
	CHECK(!pj_image_inode(img, 99));
	CHECK(pj_image_inode(img, 19) != NULL);
	CHECK(img->need_snapshot && !img->clean);
	CHECK(has_note(img, "journal", "fails its checksum"));
	CHECK_EQ(file_size("journal.1"), before);

	/* Appending goes on right after the last good record. */
	CHECK_EQ(pj_start(dirfd_, dir, CS, img, &j, err, sizeof(err)), 0);
	pj_image_free(img);
	add_file(j, 1, "again", 100, true);
	CHECK_EQ(pj_flush(j), 0);
	pj_stop(j);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK_EQ(img->records, 11);
	CHECK(pj_image_inode(img, 100) != NULL);
	CHECK(!img->notes);
	pj_image_free(img);
}

/* A record cut short (a crash in the middle of a write). */
static void test_torn_tail(void)
{
	struct pj *j = start_fresh();
	struct pj_image *img;
	char err[256];
	off_t before;
	int rc;

	add_file(j, 1, "a", 2, true);
	CHECK_EQ(pj_flush(j), 0);
	before = file_size("journal.1");
	add_file(j, 1, "b", 3, true);
	CHECK_EQ(pj_flush(j), 0);
	pj_stop(j);
	{
		int fd = openat(dirfd_, "journal.1", O_RDWR);

		CHECK_EQ(ftruncate(fd, before + 20), 0);
		close(fd);
	}
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK_EQ(img->records, 1);
	CHECK(pj_image_inode(img, 2) && !pj_image_inode(img, 3));
	CHECK(has_note(img, "journal", "incomplete record"));
	pj_image_free(img);
}

/* Snapshots replace the journal; a damaged snapshot record costs only
 * what it held. */
static void test_snapshot_chain(void)
{
	struct pj *j = start_fresh();
	struct pj_meta m = { 5000, 6000, 7 };
	struct pj_image *img;
	struct pj_rec body;
	struct pj_stats st;
	char err[256];
	int rc;

	add_file(j, 1, "old", 2, true);
	CHECK_EQ(pj_flush(j), 0);

	/* A snapshot of 12000 files (three records); then one more in the
	 * new journal. */
	pj_rec_init(&body);
	pj_hold(j);
	pj_rec_meta(&body, &m);
	{
		struct pj_attr root = attr(1, 040755);

		pj_rec_attr(&body, &root);
	}
	for (uint64_t k = 0; k < 12000; k++) {
		struct pj_attr a = attr(100 + k, 0100600);
		struct pj_data d = { .ino = 100 + k, .id = k, .size = k,
				     .map = "", .map_len = 0 };
		char name[16];

		snprintf(name, sizeof(name), "n%u", (unsigned int)k);
		pj_rec_attr(&body, &a);
		pj_rec_data(&body, &d);
		pj_rec_dset(&body, 1, name, strlen(name), 100 + k);
	}
	CHECK_EQ(pj_cut(j), 0);
	add_file(j, 1, "new", 90000, true);
	CHECK_EQ(pj_snapshot_write(j, &body), 0);
	pj_rec_release(&body);
	CHECK_EQ(pj_flush(j), 0);
	pj_stats(j, &st);
	CHECK_EQ(st.generation, 2);
	CHECK(st.snapshot_bytes > 12000 * 100);
	pj_stop(j);
	CHECK_EQ(file_size("journal.1"), -1);
	CHECK_EQ(file_size("snap.1"), -1);

	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK_EQ(img->generation, 2);
	CHECK_EQ(img->meta.next_id, 6000);
	CHECK_EQ(img->records, 1);
	CHECK(!pj_image_inode(img, 2)); /* not in the snapshot's state */
	CHECK(pj_image_inode(img, 100 + 11999) && pj_image_inode(img, 90000));
	CHECK_EQ(img->icount, 12002);
	CHECK(!img->notes);
	pj_image_free(img);

	/* Damage a byte in the middle of the snapshot: the record of about
	 * 1 MiB there is lost, the rest is there, and the journal after it
	 * too. */
	flip_byte("snap.2", file_size("snap.2") / 2);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK(has_note(img, "snapshot", "fails its checksum"));
	CHECK(img->need_snapshot);
	CHECK(pj_image_inode(img, 100) && pj_image_inode(img, 90000));
	CHECK(pj_image_inode(img, 100 + 11999) != NULL);
	CHECK(img->icount < 12002 && img->icount > 4000);
	pj_image_free(img);
}

/* Another format version, another chunk size, journals without a
 * snapshot: refused with a message, never replayed. */
static void test_refusals(void)
{
	struct pj *j = start_fresh();
	struct pj_file_hdr h;
	struct pj_image *img;
	char err[256];
	int fd, rc;

	pj_stop(j);
	img = NULL;
	CHECK_EQ(pj_image_load(dirfd_, dir, CS * 2, &img, err, sizeof(err)),
		 -EINVAL);
	CHECK(!img);
	CHECK(strstr(err, "chunk_size") != NULL);

	fd = openat(dirfd_, "snap.1", O_RDWR);
	CHECK_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	pj_hdr_decode(&h);
	h.version = 99;
	pj_hdr_encode(&h);
	CHECK_EQ(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, -EPROTO);
	CHECK(!img);
	CHECK(strstr(err, "format version 99") != NULL);

	CHECK_EQ(unlinkat(dirfd_, "snap.1", 0), 0);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, -EINVAL);
	CHECK(strstr(err, "no snapshot") != NULL);
}

static const char *adopt_some(void *ctx, struct pj_inode *i)
{
	(void)ctx;
	if (i->d.id == 666)
		return "spill file missing";
	i->user = i;
	return NULL;
}

/* What comes back after a crash. */
static void test_resolve(void)
{
	struct pj_image *img;
	struct pj_inode *i;
	struct pj_rec r;
	char err[256];
	int rc;

	fresh_dir();
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	img->fresh = false;
	pj_rec_init(&r);
	{
		struct pj_attr d = attr(2, 040700), d2 = attr(3, 040700);
		struct pj_attr f = attr(10, 0100644), g = attr(11, 0100644);
		struct pj_attr h = attr(12, 0100644), s = attr(13, 0120777);
		struct pj_attr u = attr(20, 040700), v = attr(21, 0100644);
		struct pj_data fd = { .ino = 10, .id = 1 };
		struct pj_data hd = { .ino = 12, .id = 666 };

		pj_rec_attr(&r, &d);
		pj_rec_attr(&r, &d2);
		pj_rec_attr(&r, &f);
		pj_rec_attr(&r, &g);
		pj_rec_attr(&r, &h);
		pj_rec_attr(&r, &s);
		pj_rec_attr(&r, &u);
		pj_rec_attr(&r, &v);
		pj_rec_data(&r, &fd);
		pj_rec_data(&r, &hd);
		pj_rec_dset(&r, 1, "dir", 3, 2);
		pj_rec_dset(&r, 2, "sub", 3, 3);
		pj_rec_dset(&r, 3, "f", 1, 10); /* synced */
		pj_rec_dset(&r, 1, "f-link", 6, 10); /* a hard link */
		pj_rec_dset(&r, 2, "g", 1, 11); /* never synced */
		pj_rec_dset(&r, 1, "h", 1, 12); /* spill file gone */
		pj_rec_dset(&r, 3, "s", 1, 13); /* a symlink */
		pj_rec_dset(&r, 1, "dir-again", 9, 2); /* a second name */
		pj_rec_dset(&r, 1, "nothing", 7, 55); /* no inode */
		pj_rec_dset(&r, 20, "lost", 4, 21); /* unreachable */
		pj_rec_dset(&r, 99, "x", 1, 20);
		pj_rec_dset(&r, 1, "new\nline", 8, 11);
	}
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), 0);
	pj_rec_release(&r);
	CHECK_EQ(pj_image_resolve(img, adopt_some, NULL, 42, 43), 0);
	/* root, dir, sub, f, s */
	CHECK_EQ(img->ninodes, 5);
	CHECK_EQ(img->ndentries, 5);
	for (size_t k = 1; k < img->ndentries; k++) {
		bool parent_first = false;

		for (size_t p = 0; p < k; p++)
			parent_first |= img->dentries[p]->ino ==
						img->dentries[k]->parent ||
					img->dentries[k]->parent == 1;
		CHECK(parent_first);
	}
	i = pj_image_inode(img, 1);
	CHECK(i && i->keep && i->a.uid == 42 && i->a.nlink == 3);
	CHECK(has_note(img, "made", "/"));
	i = pj_image_inode(img, 10);
	CHECK(i && i->keep && i->a.nlink == 2 && i->user == i);
	i = pj_image_inode(img, 2);
	CHECK(i && i->keep && i->a.nlink == 3 && i->parent == 1);
	/* its first name reached, escaped */
	CHECK(has_note(img, "dropped", "/new\\012line\tnever synced"));
	CHECK(has_note(img, "dropped", "/h\tspill file missing"));
	CHECK(has_note(img, "dropped", "/dir-again"));
	CHECK(has_note(img, "dropped", "/nothing"));
	CHECK(has_note(img, "dropped", "inode 20"));
	CHECK(!pj_image_inode(img, 11)->keep);
	CHECK(!pj_image_inode(img, 21)->keep);
	CHECK_EQ(img->dropped, 5);
	pj_image_free(img);
}

/* Files 33 and 34: salvaged (some chunks lost) and mended (every byte
 * kept); id 666 has no spill file. */
static const char *adopt_lf(void *ctx, struct pj_inode *i)
{
	(void)ctx;
	if (i->d.id == 666)
		return "spill file missing";
	if (i->a.ino == 33)
		i->salvaged = "2 of its chunks are lost";
	if (i->a.ino == 34)
		i->mended = "its page map is lost";
	i->user = i;
	return NULL;
}

static const struct pj_dentry *named(const struct pj_image *img,
				     uint64_t parent, const char *name)
{
	for (size_t k = 0; k < img->ndentries; k++)
		if (img->dentries[k]->parent == parent &&
		    !strcmp(img->dentries[k]->name, name))
			return img->dentries[k];
	return NULL;
}

/* Files whose bytes are kept but that no kept name reaches go to
 * lost+found, each noted with where it went (issue 31). */
static void test_lost_found(void)
{
	struct pj_image *img;
	const struct pj_dentry *d;
	struct pj_inode *lf, *i;
	struct pj_rec r;
	char err[256];
	int rc;

	fresh_dir();
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	img->fresh = false;
	img->meta.next_ino = 40;
	pj_rec_init(&r);
	{
		struct pj_attr root = attr(1, 040755), other = attr(2, 040755);
		struct pj_attr f30 = attr(30, 0100640), f31 = attr(31, 0100644);
		struct pj_attr f33 = attr(33, 0100644), f34 = attr(34, 0100644);
		struct pj_attr f35 = attr(35, 0100644);
		struct pj_data d30 = { .ino = 30, .id = 30 };
		struct pj_data d31 = { .ino = 31, .id = 31 };
		struct pj_data d32 = { .ino = 32, .id = 32, .size = 5 };
		struct pj_data d33 = { .ino = 33, .id = 33 };
		struct pj_data d34 = { .ino = 34, .id = 34 };
		struct pj_data d35 = { .ino = 35, .id = 666 };

		pj_rec_attr(&r, &root);
		/* someone's own lost+found: not one to put files in */
		pj_rec_attr(&r, &other);
		pj_rec_attr(&r, &f30);
		pj_rec_attr(&r, &f31);
		pj_rec_attr(&r, &f33);
		pj_rec_attr(&r, &f34);
		pj_rec_attr(&r, &f35);
		pj_rec_data(&r, &d30);
		pj_rec_data(&r, &d31);
		pj_rec_data(&r, &d32); /* its attributes lost */
		pj_rec_data(&r, &d33);
		pj_rec_data(&r, &d34);
		pj_rec_data(&r, &d35);
		pj_rec_dset(&r, 1, "lost+found", 10, 2);
		pj_rec_dset(&r, 20, "x", 1, 30); /* directory 20 lost */
		pj_rec_dset(&r, 1, "s", 1, 33);
		pj_rec_dset(&r, 1, "m", 1, 34);
		/* 31 and 35: no name at all */
	}
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), 0);
	pj_rec_release(&r);
	CHECK_EQ(pj_image_resolve(img, adopt_lf, NULL, 42, 43), 0);
	d = named(img, 1, "lost+found.1");
	CHECK(d != NULL);
	if (!d)
		goto out;
	CHECK(d->ino >= 40);
	CHECK(img->meta.next_ino > d->ino);
	lf = pj_image_inode(img, d->ino);
	CHECK(lf && lf->keep && lf->a.mode == 040700 && lf->a.uid == 42 &&
	      lf->a.gid == 43 && lf->a.nlink == 2 && lf->parent == 1);
	/* root: ., .., lost+found and lost+found.1 */
	CHECK_EQ(pj_image_inode(img, 1)->a.nlink, 4);
	CHECK(named(img, d->ino, "#30") && named(img, d->ino, "#31") &&
	      named(img, d->ino, "#32") && named(img, d->ino, "#33"));
	CHECK(!named(img, 1, "s"));
	CHECK(named(img, 1, "m"));
	CHECK(!named(img, d->ino, "#35"));
	i = pj_image_inode(img, 30);
	CHECK(i && i->keep && i->found && i->a.nlink == 1 &&
	      i->a.mode == 0100640 && i->user == i);
	i = pj_image_inode(img, 32);
	CHECK(i && i->keep && i->a.mode == 0100600 && i->a.uid == 42);
	CHECK_EQ(img->found, 4);
	CHECK(has_note(img, "lost+found", "inode 30\tit was 'x' in a "
		       "directory that is lost: kept as "
		       "'/lost+found.1/#30'"));
	CHECK(has_note(img, "lost+found", "inode 31\tits names are lost"));
	CHECK(has_note(img, "lost+found", "inode 32\tits attributes are "
		       "lost"));
	CHECK(has_note(img, "lost+found", "/s\t2 of its chunks are lost: "
		       "what reads back is kept as '/lost+found.1/#33'"));
	CHECK(has_note(img, "repaired", "/m\tits page map is lost"));
	CHECK(has_note(img, "dropped", "inode 35\tspill file missing"));
	CHECK(img->need_snapshot);
	/* every directory before what it holds */
	for (size_t k = 0; k < img->ndentries; k++) {
		size_t p;

		if (img->dentries[k]->parent == 1)
			continue;
		for (p = 0; p < k; p++)
			if (img->dentries[p]->ino == img->dentries[k]->parent)
				break;
		CHECK(p < k);
	}
out:
	pj_image_free(img);

	/* A lost+found an earlier recovery made is used again; a name
	 * taken there gets another. */
	img = load(&rc, err, sizeof(err));
	if (!img)
		return;
	img->fresh = false;
	pj_rec_init(&r);
	{
		struct pj_attr root = attr(1, 040755), lfa = attr(5, 040700);
		struct pj_attr f6 = attr(6, 0100644), f30 = attr(30, 0100644);
		struct pj_data d6 = { .ino = 6, .id = 6 };
		struct pj_data d30 = { .ino = 30, .id = 30 };

		lfa.uid = 42;
		pj_rec_attr(&r, &root);
		pj_rec_attr(&r, &lfa);
		pj_rec_attr(&r, &f6);
		pj_rec_attr(&r, &f30);
		pj_rec_data(&r, &d6);
		pj_rec_data(&r, &d30);
		pj_rec_dset(&r, 1, "lost+found", 10, 5);
		pj_rec_dset(&r, 5, "#30", 3, 6);
	}
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), 0);
	pj_rec_release(&r);
	CHECK_EQ(pj_image_resolve(img, adopt_lf, NULL, 42, 43), 0);
	CHECK(named(img, 5, "#30") && named(img, 5, "#30")->ino == 6);
	CHECK(named(img, 5, "#30.1") && named(img, 5, "#30.1")->ino == 30);
	CHECK(!named(img, 1, "lost+found.1"));
	CHECK_EQ(img->found, 1);
	pj_image_free(img);
}

/* A directory of format version 1 is read, and marked for a snapshot in
 * this version before anything is appended. */
static void test_old_version(void)
{
	struct pj *j = start_fresh();
	struct pj_file_hdr h;
	struct pj_image *img;
	char err[256];
	int rc, fd;

	add_file(j, 1, "f", 10, true);
	CHECK_EQ(pj_flush(j), 0);
	pj_stop(j);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	CHECK(img && !img->upgrade);
	pj_image_free(img);
	fd = openat(dirfd_, "snap.1", O_RDWR);
	CHECK_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	pj_hdr_decode(&h);
	CHECK_EQ(h.version, PJ_FORMAT_VERSION);
	h.version = 1;
	pj_hdr_encode(&h);
	CHECK_EQ(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	CHECK(img && img->upgrade);
	if (img)
		CHECK(pj_image_inode(img, 10) != NULL);
	pj_image_free(img);
}

struct commit_arg {
	struct pj *j;
	uint64_t base;
	int fails;
};

static void *committer(void *p)
{
	struct commit_arg *a = p;

	for (uint64_t k = 0; k < 200; k++) {
		char name[32];
		uint64_t seq;

		snprintf(name, sizeof(name), "t%llu",
			 (unsigned long long)(a->base + k));
		seq = add_file(a->j, 1, name, a->base + k, true);
		if (pj_commit(a->j, seq))
			a->fails++;
	}
	return NULL;
}

/* Four threads each commit 200 records: all are durable and come back,
 * in a journal whose sequence has no hole. */
static void test_group_commit(void)
{
	struct pj *j = start_fresh();
	struct commit_arg a[4];
	pthread_t t[4];
	struct pj_image *img;
	struct pj_stats st;
	char err[256];
	int rc;

	for (int k = 0; k < 4; k++) {
		a[k] = (struct commit_arg){ j, 1000 * (uint64_t)(k + 1), 0 };
		pthread_create(&t[k], NULL, committer, &a[k]);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(t[k], NULL);
		CHECK_EQ(a[k].fails, 0);
	}
	pj_stats(j, &st);
	CHECK_EQ(st.durable_seq, 800);
	printf("# 800 commits from 4 threads took %llu fdatasyncs\n",
	       (unsigned long long)st.commits);
	CHECK(st.commits <= 800);
	pj_stop(j);
	img = load(&rc, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!img)
		return;
	CHECK_EQ(img->records, 800);
	CHECK_EQ(img->dcount, 800);
	pj_image_free(img);
}

/* Malformed items are refused whole: nothing of the record applies. */
static void test_malformed(void)
{
	struct pj_image *img;
	struct pj_rec r;
	char err[256];
	int rc;

	fresh_dir();
	img = load(&rc, err, sizeof(err));
	if (!img)
		return;
	pj_rec_init(&r);
	pj_rec_dset(&r, 1, "ok", 2, 5);
	pj_rec_dset(&r, 1, "bad/name", 8, 6);
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), -EINVAL);
	CHECK_EQ(img->dcount, 0);
	pj_rec_reset(&r);
	pj_rec_dset(&r, 1, "ok", 2, 5);
	CHECK_EQ(pj_image_apply(img, r.buf, r.len - 1), -EINVAL);
	CHECK_EQ(img->dcount, 0);
	/* Names readdir makes itself (found by tests/fuzz/fuzz_journal). */
	pj_rec_reset(&r);
	pj_rec_dset(&r, 1, ".", 1, 5);
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), -EINVAL);
	pj_rec_reset(&r);
	pj_rec_dset(&r, 1, "..", 2, 5);
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), -EINVAL);
	CHECK_EQ(img->dcount, 0);
	pj_rec_reset(&r);
	{
		struct pj_attr a = attr(4, 0100644);
		struct pj_xattr x = { "user.x", "v", 6, 1 };

		a.nxattrs = 1;
		a.xattrs = &x;
		pj_rec_attr(&r, &a);
		/* the xattr's name length past the end */
		pj_put32(r.buf + 8 + PJ_ATTR_FIXED, 200);
	}
	CHECK_EQ(pj_image_apply(img, r.buf, r.len), -EINVAL);
	CHECK_EQ(img->icount, 0);
	pj_rec_release(&r);
	pj_image_free(img);
}

static void test_escape(void)
{
	char out[64];

	pj_escape("a\tb\nc\\d", 7, out, sizeof(out));
	CHECK(!strcmp(out, "a\\011b\\012c\\134d"));
	pj_escape("abcdef", 6, out, 4);
	CHECK(!strcmp(out, "abc"));
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/tfs-persist-test.%d", (int)getpid());
	tfs_log_max = TFS_LOG_ERR;
	TAP_RUN(test_round_trip);
	TAP_RUN(test_deletes);
	TAP_RUN(test_corrupt_tail);
	TAP_RUN(test_torn_tail);
	TAP_RUN(test_snapshot_chain);
	TAP_RUN(test_refusals);
	TAP_RUN(test_resolve);
	TAP_RUN(test_lost_found);
	TAP_RUN(test_old_version);
	TAP_RUN(test_group_commit);
	TAP_RUN(test_malformed);
	TAP_RUN(test_escape);
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd))
			return 1;
	}
	return tap_done();
}
