// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The metadata journal of persistent mounts (persist/): records replayed
 * into an image (pj_image_apply), the image resolved into what comes back
 * (pj_image_resolve), and, for some inputs, the same records written as a
 * real snapshot and journal, damaged on disk and loaded (pj_image_load).
 *
 * Records are built from the input with the pj_rec_* writers (small inode
 * numbers, short names, any file type, hard links, deletes, directories
 * named twice or inside themselves), then some of their bytes are flipped
 * or cut, so that replay meets both odd namespaces and malformed items.
 *
 * Contract checked (persist.h): apply answers 0 or -EINVAL; load answers 0
 * for any damage to a journal's records; resolve keeps a namespace the
 * daemon can build: the root first and a directory, every name's parent and
 * inode kept, parents named before their children, each kept directory
 * named once, names without '/' or NUL that are not "." or "..", nlink as
 * the names count it, every kept inode but the root named, and note lines
 * of "kind<TAB>path<TAB>why" with no other control byte.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/log.h"
#include "fuzz.h"
#include "persist/persist.h"

#define ROOT 1
#define CS (1u << 20)

static char base[4096];
static char empty[4200]; /* a directory that stays empty */
static int empty_fd = -1;
static unsigned long iter;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/tierfs-fuzz-journal.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(empty, sizeof(empty), "%s/empty", base);
	if (mkdir(empty, 0700) ||
	    (empty_fd = open(empty, O_RDONLY | O_DIRECTORY)) < 0) {
		perror(empty);
		exit(1);
	}
	tfs_log_max = 0;
	return 0;
}

static const char *const names[] = { "a", "b", "dir", "x y", ".", "..",
				     "a/b", "\t\n", "long-name-of-a-file" };

/* Append one item chosen by the input to @r. */
static void one_item(struct fuzz_in *in, struct pj_rec *r)
{
	static const uint32_t modes[] = { 040755, 0100644, 0120777, 010644 };
	uint8_t op = fuzz_u8(in), k = fuzz_u8(in);
	uint64_t ino = 1 + fuzz_u8(in) % 12, other = 1 + fuzz_u8(in) % 12;
	const char *nm = names[k % 9];
	struct pj_xattr x = { "user.k", "v", 6, 1 };

	switch (op % 8) {
	case 0:
	case 1: {
		struct pj_attr a = { .ino = ino, .mode = modes[k % 4],
				     .nlink = k, .uid = 5, .gid = 6 };

		if ((a.mode & 0170000) == 0120000) {
			a.target = "../t";
			a.target_len = 4;
		}
		if (k & 0x80) {
			a.nxattrs = 1;
			a.xattrs = &x;
		}
		pj_rec_attr(r, &a);
		break;
	}
	case 2: {
		struct pj_data d = { .ino = ino, .id = ino * 10,
				     .size = k * 1000u, .map = "map!",
				     .map_len = (uint32_t)(k % 5) };

		pj_rec_data(r, &d);
		break;
	}
	case 3:
		pj_rec_dirty(r, ino);
		break;
	case 4:
		pj_rec_free(r, ino);
		break;
	case 5:
	case 6:
		pj_rec_dset(r, other, nm, strlen(nm), ino);
		break;
	default:
		pj_rec_ddel(r, other, nm, strlen(nm));
		break;
	}
}

/* Some records come out damaged: a few bytes flipped, or cut short. */
static void damage(struct fuzz_in *in, struct pj_rec *r)
{
	uint8_t how = fuzz_u8(in);

	if (!r->len || how < 200)
		return;
	if (how < 230) {
		for (int n = 1 + how % 3; n--;)
			r->buf[fuzz_u32(in) % r->len] ^= (char)(fuzz_u8(in) | 1);
	} else {
		r->len = fuzz_u32(in) % r->len;
	}
}

static const char *adopt(void *ctx, struct pj_inode *ino)
{
	uint8_t seed = *(uint8_t *)ctx;

	return ((ino->a.ino ^ seed) & 3) == 3 ? "spill file missing" : NULL;
}

static bool is_dir(const struct pj_inode *i)
{
	return (i->a.mode & 0170000) == 040000;
}

static void check_resolved(struct pj_image *img)
{
	FUZZ_CHECK(img->ninodes >= 1 && img->inodes[0]->a.ino == ROOT &&
			   is_dir(img->inodes[0]),
		   "the root is not first, or not a directory");
	for (size_t k = 0; k < img->ninodes; k++) {
		struct pj_inode *i = img->inodes[k];
		uint32_t links = 0, subdirs = 0, named = 0;

		FUZZ_CHECK(i->keep, "inode %lu listed but not kept",
			   (unsigned long)i->a.ino);
		FUZZ_CHECK(pj_image_inode(img, i->a.ino) == i,
			   "inode %lu listed twice or not found",
			   (unsigned long)i->a.ino);
		for (size_t d = 0; d < img->ndentries; d++) {
			const struct pj_dentry *e = img->dentries[d];
			struct pj_inode *c = pj_image_inode(img, e->ino);

			if (e->ino == i->a.ino)
				named++;
			if (e->parent == i->a.ino && c && is_dir(c))
				subdirs++;
		}
		links = is_dir(i) ? 2 + subdirs : named;
		FUZZ_CHECK(i->a.nlink == links,
			   "inode %lu (mode %o): nlink %u, its names say %u",
			   (unsigned long)i->a.ino, i->a.mode, i->a.nlink,
			   links);
		if (i->a.ino != ROOT) {
			FUZZ_CHECK(named >= 1, "kept inode %lu has no name",
				   (unsigned long)i->a.ino);
			FUZZ_CHECK(!is_dir(i) || named == 1,
				   "directory %lu has %u names",
				   (unsigned long)i->a.ino, named);
		} else {
			FUZZ_CHECK(!named, "the root has a name");
		}
	}
	for (size_t d = 0; d < img->ndentries; d++) {
		const struct pj_dentry *e = img->dentries[d];
		struct pj_inode *p = pj_image_inode(img, e->parent);
		struct pj_inode *c = pj_image_inode(img, e->ino);

		FUZZ_CHECK(p && p->keep && is_dir(p) && c && c->keep,
			   "name '%s' in %lu: parent or inode not kept",
			   e->name, (unsigned long)e->parent);
		FUZZ_CHECK(e->len && e->len == strlen(e->name) &&
				   !strchr(e->name, '/') &&
				   strcmp(e->name, ".") && strcmp(e->name, ".."),
			   "bad name kept: '%s'", e->name);
		/* The parent's own name comes first. */
		if (e->parent != ROOT) {
			size_t q;

			for (q = 0; q < d; q++)
				if (img->dentries[q]->ino == e->parent)
					break;
			FUZZ_CHECK(q < d, "'%s' named before its directory %lu",
				   e->name, (unsigned long)e->parent);
		}
	}
	for (struct pj_note *n = img->notes; n; n = n->next) {
		int tabs = 0;

		for (const char *c = n->text; *c; c++) {
			tabs += *c == '\t';
			FUZZ_CHECK(*c == '\t' || (unsigned char)*c >= 0x20,
				   "control byte in a note: %s", n->text);
		}
		FUZZ_CHECK(tabs == 2, "note with %d tabs: %s", tabs, n->text);
	}
}

/* A fresh directory of its own for each on-disk round. */
static int fresh_dir(char *path, size_t len)
{
	snprintf(path, len, "%s/%lu", base, iter++);
	if (mkdir(path, 0700))
		return -1;
	return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void rm_dir(const char *path, int fd)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;

	if (!d)
		abort();
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(fd, e->d_name, 0);
	closedir(d);
	FUZZ_CHECK(!rmdir(path), "'%s': %s", path, strerror(errno));
}

/* Write @recs through a real journal after a first snapshot, damage the
 * journal file, and load it back. */
static void on_disk(struct fuzz_in *in, struct pj_rec *recs, size_t n,
		    uint8_t seed)
{
	struct pj_meta m = { 20, 20, 1 };
	struct pj_attr root = { .ino = ROOT, .mode = 040755, .nlink = 2 };
	struct pj_image *img = NULL;
	struct pj *j = NULL;
	struct pj_rec body;
	char path[4200], err[512], jname[64];
	int fd = fresh_dir(path, sizeof(path)), rc;

	if (fd < 0)
		return;
	rc = pj_image_load(fd, path, CS, &img, err, sizeof(err));
	FUZZ_CHECK(!rc && img && img->fresh, "a new directory: %d %s", rc,
		   err);
	rc = pj_start(fd, path, CS, img, &j, err, sizeof(err));
	pj_image_free(img);
	img = NULL;
	if (rc)
		goto out;
	pj_rec_init(&body);
	pj_hold(j);
	pj_rec_meta(&body, &m);
	pj_rec_attr(&body, &root);
	rc = pj_cut(j);
	if (!rc)
		rc = pj_snapshot_write(j, &body);
	pj_rec_release(&body);
	if (rc)
		goto out_stop;
	for (size_t k = 0; k < n; k++)
		pj_append(j, &recs[k]);
	pj_flush(j);
	pj_stop(j);
	j = NULL;

	/* Damage the newest journal behind the reader's back. */
	for (int g = 7; g >= 0; g--) {
		struct stat st;

		snprintf(jname, sizeof(jname), "journal.%d", g);
		if (fstatat(fd, jname, &st, 0) || !st.st_size)
			continue;
		int jfd = openat(fd, jname, O_RDWR | O_CLOEXEC);

		if (jfd < 0)
			break;
		for (int d = fuzz_u8(in) % 4; d--;) {
			uint8_t b = fuzz_u8(in);
			off_t at = (off_t)(fuzz_u32(in) % (uint64_t)st.st_size);

			if (b == 0xff) {
				if (ftruncate(jfd, at))
					abort();
			} else if (pwrite(jfd, &b, 1, at) != 1) {
				abort();
			}
		}
		close(jfd);
		break;
	}
	rc = pj_image_load(fd, path, CS, &img, err, sizeof(err));
	/* A damaged header refuses the file; damaged records cost only
	 * themselves and what follows. */
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EPROTO,
		   "load: %d %s", rc, err);
	if (!rc) {
		FUZZ_CHECK(!pj_image_resolve(img, adopt, &seed, 0, 0),
			   "resolve after load failed");
		check_resolved(img);
	}
	pj_image_free(img);
	goto out;
out_stop:
	pj_stop(j);
out:
	rm_dir(path, fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint8_t mode = fuzz_u8(&in), seed = fuzz_u8(&in);
	struct pj_rec recs[16];
	struct pj_image *img = NULL;
	char err[512];
	size_t n = 0;
	int rc;

	while (in.left && n < 16) {
		pj_rec_init(&recs[n]);
		for (int items = 1 + fuzz_u8(&in) % 6; items--;)
			one_item(&in, &recs[n]);
		if (recs[n].err) {
			pj_rec_release(&recs[n]);
			break;
		}
		if (!(mode & 1))
			damage(&in, &recs[n]);
		n++;
	}

	if (mode & 1) {
		on_disk(&in, recs, n, seed);
	} else {
		rc = pj_image_load(empty_fd, empty, CS, &img, err,
				   sizeof(err));
		FUZZ_CHECK(!rc && img, "a new directory: %d %s", rc, err);
		for (size_t k = 0; k < n; k++) {
			rc = pj_image_apply(img, recs[k].buf, recs[k].len);
			FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM,
				   "apply: %d", rc);
		}
		FUZZ_CHECK(!pj_image_resolve(img, adopt, &seed, 0, 0),
			   "resolve failed");
		check_resolved(img);
		pj_image_free(img);
	}
	for (size_t k = 0; k < n; k++)
		pj_rec_release(&recs[k]);
	return 0;
}
