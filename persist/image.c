// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Reading a persistent spill directory back: the newest snapshot, the
 * journals after it, replayed into two maps, and the decision of what
 * comes back (pj_image_resolve).
 *
 * Every length read from disk is checked against what is left before it is
 * used: the bytes may be torn by a crash or damaged, and the worst they
 * may cause is a note and a stop, never a read out of bounds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/log.h"
#include "persist/pj_i.h"

#define HASH_MIN 1024
#define ROOT_INO 1

/* FATE_FOUND: kept, in lost+found rather than at its names. */
enum fate { FATE_UNSEEN = 0, FATE_KEEP, FATE_DROP, FATE_FOUND };

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t dhash(uint64_t parent, const char *name, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ mix64(parent);

	for (size_t k = 0; k < len; k++)
		h = (h ^ (unsigned char)name[k]) * 0x100000001b3ULL;
	return mix64(h);
}

/* --- notes --- */

void pj_escape(const char *name, size_t len, char *out, size_t outlen)
{
	size_t o = 0;

	if (!outlen)
		return;
	for (size_t k = 0; k < len; k++) {
		unsigned char c = (unsigned char)name[k];

		if (c < 0x20 || c == 0x7f || c == '\\') {
			if (o + 4 >= outlen)
				break;
			snprintf(out + o, 5, "\\%03o", c);
			o += 4;
		} else {
			if (o + 1 >= outlen)
				break;
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
}

void pj_image_note(struct pj_image *img, const char *kind, const char *path,
		   const char *why)
{
	size_t len = strlen(kind) + strlen(path) + strlen(why) + 3;
	struct pj_note *n = malloc(sizeof(*n) + len);

	tfs_warn("recovery: %s '%s': %s", kind, path, why);
	if (!n)
		return;
	snprintf(n->text, len, "%s\t%s\t%s", kind, path, why);
	n->next = NULL;
	*img->notes_tail = n;
	img->notes_tail = &n->next;
}

/* --- maps --- */

static struct pj_image *image_new(void)
{
	struct pj_image *img = calloc(1, sizeof(*img));

	if (!img)
		return NULL;
	img->ihash = calloc(HASH_MIN, sizeof(*img->ihash));
	img->dhash = calloc(HASH_MIN, sizeof(*img->dhash));
	if (!img->ihash || !img->dhash) {
		free(img->ihash);
		free(img->dhash);
		free(img);
		return NULL;
	}
	img->imask = img->dmask = HASH_MIN - 1;
	img->notes_tail = &img->notes;
	return img;
}

struct pj_inode *pj_image_inode(const struct pj_image *img, uint64_t ino)
{
	struct pj_inode *i = img->ihash[mix64(ino) & img->imask];

	while (i && i->a.ino != ino)
		i = i->hnext;
	return i;
}

static void inode_free(struct pj_inode *i)
{
	free(i->lost_why);
	free(i->attr_raw);
	free(i->data_raw);
	free(i->xv);
	free(i);
}

/* A failed doubling leaves the table denser: slower, still correct. */
static void ihash_grow(struct pj_image *img)
{
	size_t nb = (img->imask + 1) * 2;
	struct pj_inode **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (size_t k = 0; k <= img->imask; k++) {
		struct pj_inode *i = img->ihash[k], *next;

		for (; i; i = next) {
			size_t at = mix64(i->a.ino) & (nb - 1);

			next = i->hnext;
			i->hnext = b[at];
			b[at] = i;
		}
	}
	free(img->ihash);
	img->ihash = b;
	img->imask = nb - 1;
}

static void dhash_grow(struct pj_image *img)
{
	size_t nb = (img->dmask + 1) * 2;
	struct pj_dentry **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (size_t k = 0; k <= img->dmask; k++) {
		struct pj_dentry *d = img->dhash[k], *next;

		for (; d; d = next) {
			size_t at = dhash(d->parent, d->name, d->len) &
				    (nb - 1);

			next = d->hnext;
			d->hnext = b[at];
			b[at] = d;
		}
	}
	free(img->dhash);
	img->dhash = b;
	img->dmask = nb - 1;
}

static struct pj_inode *inode_get(struct pj_image *img, uint64_t ino)
{
	struct pj_inode *i = pj_image_inode(img, ino);
	size_t at;

	if (i)
		return i;
	i = calloc(1, sizeof(*i));
	if (!i)
		return NULL;
	i->a.ino = ino;
	at = mix64(ino) & img->imask;
	i->hnext = img->ihash[at];
	img->ihash[at] = i;
	if (++img->icount > img->imask + 1)
		ihash_grow(img);
	return i;
}

static void inode_del(struct pj_image *img, uint64_t ino)
{
	struct pj_inode **pp = &img->ihash[mix64(ino) & img->imask];

	while (*pp && (*pp)->a.ino != ino)
		pp = &(*pp)->hnext;
	if (*pp) {
		struct pj_inode *i = *pp;

		*pp = i->hnext;
		img->icount--;
		inode_free(i);
	}
}

static struct pj_dentry **dentry_find(struct pj_image *img, uint64_t parent,
				      const char *name, size_t len)
{
	struct pj_dentry **pp =
		&img->dhash[dhash(parent, name, len) & img->dmask];

	while (*pp && ((*pp)->parent != parent || (*pp)->len != len ||
		       memcmp((*pp)->name, name, len)))
		pp = &(*pp)->hnext;
	return pp;
}

/* --- items --- */

static struct timespec get_time(const char *p)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(int64_t)pj_get64(p);
	ts.tv_nsec = (long)pj_get32(p + 8);
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_nsec = 0;
	return ts;
}

static int apply_attr(struct pj_image *img, const char *p, uint32_t len,
		      bool dry)
{
	struct pj_attr a = { 0 };
	struct pj_xattr *xv = NULL;
	struct pj_inode *i;
	const char *q, *end;
	char *raw;

	if (len < PJ_ATTR_FIXED)
		return -EINVAL;
	a.target_len = pj_get32(p + 96);
	a.nxattrs = pj_get32(p + 100);
	if (a.target_len > len - PJ_ATTR_FIXED ||
	    a.nxattrs > (len - PJ_ATTR_FIXED - a.target_len) / 8 ||
	    !pj_get64(p))
		return -EINVAL;
	if (dry) {
		q = p + PJ_ATTR_FIXED + a.target_len;
		end = p + len;
		for (uint32_t k = 0; k < a.nxattrs; k++) {
			uint32_t nl, vl;

			if (end - q < 8)
				return -EINVAL;
			nl = pj_get32(q);
			vl = pj_get32(q + 4);
			if (!nl || nl > 255 || nl > (size_t)(end - q - 8) ||
			    vl > (size_t)(end - q - 8) - nl)
				return -EINVAL;
			q += 8 + nl + vl;
		}
		return q == end ? 0 : -EINVAL;
	}
	raw = malloc(len);
	if (!raw)
		return -ENOMEM;
	memcpy(raw, p, len);
	if (a.nxattrs) {
		xv = calloc(a.nxattrs, sizeof(*xv));
		if (!xv) {
			free(raw);
			return -ENOMEM;
		}
	}
	q = raw + PJ_ATTR_FIXED + a.target_len;
	end = raw + len;
	for (uint32_t k = 0; k < a.nxattrs; k++) {
		uint32_t nl, vl;

		if (end - q < 8)
			goto out_bad;
		nl = pj_get32(q);
		vl = pj_get32(q + 4);
		if (!nl || nl > 255 || nl > (size_t)(end - q - 8) ||
		    vl > (size_t)(end - q - 8) - nl)
			goto out_bad;
		xv[k] = (struct pj_xattr){ q + 8, q + 8 + nl, nl, vl };
		q += 8 + nl + vl;
	}
	if (q != end)
		goto out_bad;
	a.ino = pj_get64(raw);
	a.mode = pj_get32(raw + 8);
	a.uid = pj_get32(raw + 12);
	a.gid = pj_get32(raw + 16);
	a.nlink = pj_get32(raw + 20);
	a.rdev = pj_get64(raw + 24);
	a.fsflags = pj_get32(raw + 32);
	a.generation = pj_get32(raw + 36);
	a.iflags = pj_get32(raw + 40);
	a.atime = get_time(raw + 48);
	a.mtime = get_time(raw + 64);
	a.ctime = get_time(raw + 80);
	a.target = a.target_len ? raw + PJ_ATTR_FIXED : NULL;
	a.xattrs = xv;
	if (!a.ino)
		goto out_bad;
	i = inode_get(img, a.ino);
	if (!i) {
		free(xv);
		free(raw);
		return -ENOMEM;
	}
	free(i->attr_raw);
	free(i->xv);
	i->attr_raw = raw;
	i->xv = xv;
	i->a = a;
	i->has_attr = true;
	return 0;

out_bad:
	free(xv);
	free(raw);
	return -EINVAL;
}

static int apply_data(struct pj_image *img, const char *p, uint32_t len,
		      bool dry)
{
	struct pj_inode *i;
	uint32_t map_len;
	char *raw;

	if (len < PJ_DATA_FIXED)
		return -EINVAL;
	map_len = pj_get32(p + 56);
	if (map_len != len - PJ_DATA_FIXED || !pj_get64(p))
		return -EINVAL;
	if (dry)
		return 0;
	raw = malloc(len);
	if (!raw)
		return -ENOMEM;
	memcpy(raw, p, len);
	i = inode_get(img, pj_get64(raw));
	if (!i) {
		free(raw);
		return -ENOMEM;
	}
	free(i->data_raw);
	i->data_raw = raw;
	i->d.ino = pj_get64(raw);
	i->d.id = pj_get64(raw + 8);
	i->d.size = pj_get64(raw + 16);
	i->d.mtime = get_time(raw + 24);
	i->d.ctime = get_time(raw + 40);
	i->d.map_len = map_len;
	i->d.map = raw + PJ_DATA_FIXED;
	i->has_data = true;
	i->dirty = false;
	return 0;
}

/* A name no directory can hold: the item that carries one is damaged.
 * "." and ".." would be listed by readdir next to the real ones. */
static bool bad_name(const char *n, uint32_t nl)
{
	return !nl || nl > 255 || memchr(n, '/', nl) || memchr(n, '\0', nl) ||
	       (nl == 1 && n[0] == '.') ||
	       (nl == 2 && n[0] == '.' && n[1] == '.');
}

static int apply_dset(struct pj_image *img, const char *p, uint32_t len,
		      bool dry)
{
	struct pj_dentry **pp, *d;
	uint64_t parent, ino;
	uint32_t nl;

	if (len < PJ_DSET_FIXED)
		return -EINVAL;
	parent = pj_get64(p);
	ino = pj_get64(p + 8);
	nl = pj_get32(p + 16);
	if (nl != len - PJ_DSET_FIXED || !ino ||
	    bad_name(p + PJ_DSET_FIXED, nl))
		return -EINVAL;
	if (dry)
		return 0;
	pp = dentry_find(img, parent, p + PJ_DSET_FIXED, nl);
	if (*pp) {
		(*pp)->ino = ino;
		(*pp)->order = img->next_order++;
		return 0;
	}
	d = malloc(sizeof(*d) + nl + 1);
	if (!d)
		return -ENOMEM;
	d->parent = parent;
	d->ino = ino;
	d->order = img->next_order++;
	d->len = (uint16_t)nl;
	memcpy(d->name, p + PJ_DSET_FIXED, nl);
	d->name[nl] = '\0';
	d->hnext = NULL;
	*pp = d;
	if (++img->dcount > img->dmask + 1)
		dhash_grow(img);
	return 0;
}

static int apply_ddel(struct pj_image *img, const char *p, uint32_t len,
		      bool dry)
{
	struct pj_dentry **pp, *d;
	uint32_t nl;

	if (len < PJ_DDEL_FIXED)
		return -EINVAL;
	nl = pj_get32(p + 8);
	if (nl != len - PJ_DDEL_FIXED || !nl || nl > 255)
		return -EINVAL;
	if (dry)
		return 0;
	pp = dentry_find(img, pj_get64(p), p + PJ_DDEL_FIXED, nl);
	d = *pp;
	if (d) {
		*pp = d->hnext;
		img->dcount--;
		free(d);
	}
	return 0;
}

static int apply_items(struct pj_image *img, const void *items, size_t len,
		       bool dry)
{
	const char *p = items, *end = p + len;
	struct pj_inode *i;
	int rc = 0;

	while (!rc && p < end) {
		uint16_t type;
		uint32_t ilen;

		if ((size_t)(end - p) < sizeof(struct pj_item_hdr))
			return -EINVAL;
		type = pj_get16(p);
		ilen = pj_get32(p + 4);
		p += sizeof(struct pj_item_hdr);
		if (pj_get16(p - 6) || ilen > (size_t)(end - p))
			return -EINVAL;
		switch (type) {
		case PJ_I_ATTR:
			rc = apply_attr(img, p, ilen, dry);
			break;
		case PJ_I_DATA:
			rc = apply_data(img, p, ilen, dry);
			break;
		case PJ_I_DIRTY:
			if (ilen != 8 || !pj_get64(p))
				return -EINVAL;
			if (dry)
				break;
			i = inode_get(img, pj_get64(p));
			if (!i)
				return -ENOMEM;
			i->dirty = true;
			break;
		case PJ_I_FREE:
			if (ilen != 8)
				return -EINVAL;
			if (!dry)
				inode_del(img, pj_get64(p));
			break;
		case PJ_D_SET:
			rc = apply_dset(img, p, ilen, dry);
			break;
		case PJ_D_DEL:
			rc = apply_ddel(img, p, ilen, dry);
			break;
		case PJ_META:
			if (ilen != PJ_META_FIXED)
				return -EINVAL;
			if (dry)
				break;
			img->meta.next_ino = pj_get64(p);
			img->meta.next_id = pj_get64(p + 8);
			img->meta.next_generation = pj_get32(p + 16);
			break;
		default:
			return -EINVAL;
		}
		p += ilen;
	}
	return rc;
}

/* A record is applied whole or not at all: checked first, then applied. */
int pj_image_apply(struct pj_image *img, const void *items, size_t len)
{
	int rc = apply_items(img, items, len, true);

	return rc ? rc : apply_items(img, items, len, false);
}

/* --- files --- */

struct file_map {
	int fd;
	const char *base; /* the whole file, mapped; NULL when empty */
	size_t size;
};

/* @rw: a journal, which a stop cuts. */
static int map_file(int dirfd, const char *name, bool rw, struct file_map *m)
{
	struct stat st;

	m->base = NULL;
	m->size = 0;
	m->fd = openat(dirfd, name,
		       (rw ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
	if (m->fd < 0)
		return -errno;
	if (fstat(m->fd, &st) || !S_ISREG(st.st_mode)) {
		close(m->fd);
		return -EINVAL;
	}
	m->size = (size_t)st.st_size;
	if (!m->size)
		return 0;
	m->base = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, m->fd, 0);
	if (m->base == MAP_FAILED) {
		int rc = -errno;

		close(m->fd);
		return rc;
	}
	/* Read once, front to back. */
	madvise((void *)m->base, m->size, MADV_SEQUENTIAL);
	return 0;
}

static void unmap_file(struct file_map *m)
{
	if (m->base)
		munmap((void *)m->base, m->size);
	close(m->fd);
}

/* 1: a header of @magic that checks out, 0: not one, <0: refused (another
 * version or chunk size), with @err set. */
static int check_hdr(const struct file_map *m, const char *magic,
		     const char *dirpath, const char *name,
		     uint32_t chunk_size, struct pj_file_hdr *h, char *err,
		     size_t errlen)
{
	char want[8] = { 0 };

	if (m->size < sizeof(*h))
		return 0;
	memcpy(h, m->base, sizeof(*h));
	memcpy(want, magic, strlen(magic));
	if (memcmp(h->magic, want, sizeof(want)))
		return 0;
	pj_hdr_decode(h);
	if (h->crc != pj_hdr_crc(m->base ? (const void *)m->base : h))
		return 0;
	if (h->version < PJ_FORMAT_OLDEST || h->version > PJ_FORMAT_VERSION) {
		snprintf(err, errlen, "'%s/%s' is of format version %u; this "
			 "tierfs reads versions %u to %u", dirpath, name,
			 h->version, PJ_FORMAT_OLDEST, PJ_FORMAT_VERSION);
		return -EPROTO;
	}
	if (h->chunk_size != chunk_size) {
		snprintf(err, errlen, "'%s/%s' was written with chunk_size "
			 "%u, this mount has %u: mount with "
			 "disk_chunk_size=%u", dirpath, name, h->chunk_size,
			 chunk_size, h->chunk_size);
		return -EINVAL;
	}
	return 1;
}

static void note_file(struct pj_image *img, const char *kind,
		      const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void note_file(struct pj_image *img, const char *kind,
		      const char *name, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	pj_image_note(img, kind, name, why);
	img->need_snapshot = true;
}

/* Replay the snapshot's records; a bad record is skipped when its length
 * can be trusted, else the rest is. */
static void replay_snapshot(struct pj_image *img, const struct file_map *m,
			    const char *name, uint64_t body)
{
	size_t off = sizeof(struct pj_file_hdr), end = off + body;
	uint64_t nrec = 0;

	while (off < end) {
		const char *p = m->base + off;
		uint32_t len, crc;
		int rc;

		nrec++;
		if (end - off < sizeof(struct pj_rec_hdr) ||
		    (len = pj_get32(p)) >
			    end - off - sizeof(struct pj_rec_hdr)) {
			note_file(img, "snapshot", name, "record %" PRIu64
				  " at byte %zu has a bad length: the last "
				  "%zu bytes are lost", nrec, off, end - off);
			return;
		}
		crc = pj_get32(p + 4);
		if (pj_get64(p + 8) != nrec ||
		    crc != pj_rec_crc(p + sizeof(struct pj_rec_hdr), len,
				      nrec)) {
			note_file(img, "snapshot", name, "record %" PRIu64
				  " at byte %zu fails its checksum: what it "
				  "held (%u bytes) is lost", nrec, off, len);
		} else {
			rc = pj_image_apply(img, p + sizeof(struct pj_rec_hdr),
					    len);
			if (rc == -ENOMEM) {
				img->error = rc;
				return;
			}
			if (rc)
				note_file(img, "snapshot", name,
					  "record %" PRIu64 " at byte %zu is "
					  "malformed: part of it is lost",
					  nrec, off);
		}
		off += sizeof(struct pj_rec_hdr) + len;
	}
}

/*
 * Replay journal @name of generation @gen. Returns 1 when it ended
 * cleanly (the next journal may follow), 0 when it stopped early (cut
 * there), <0 refused.
 */
static int replay_journal(struct pj_image *img, int dirfd,
			  const char *dirpath, const char *name, uint64_t gen,
			  uint32_t chunk_size, char *err, size_t errlen)
{
	struct pj_file_hdr h;
	struct file_map m;
	size_t off;
	int rc, arc = 0;

	rc = map_file(dirfd, name, true, &m);
	if (rc == -ENOENT)
		return 0;
	if (rc) {
		note_file(img, "journal", name, "cannot be read: %s",
			  strerror(-rc));
		return 0;
	}
	img->journal_bytes += m.size;
	rc = check_hdr(&m, PJ_MAGIC_JOURNAL, dirpath, name, chunk_size, &h,
		       err, errlen);
	if (rc < 0)
		goto out;
	if (!rc || h.generation != gen || h.seq != img->seq) {
		/* A journal whose header never reached the disk was being
		 * created by a cut when the daemon died: it holds nothing. */
		if (m.size > sizeof(h) || (rc && m.size))
			note_file(img, "journal", name, "%s: its %zu bytes "
				  "are not used", !rc ? "bad header" :
				  "does not follow the snapshot", m.size);
		/* Emptied, so that appending starts it afresh. */
		if (m.size && ftruncate(m.fd, 0))
			tfs_warn("cannot empty journal '%s/%s': %s", dirpath,
				 name, strerror(errno));
		rc = 0;
		goto out;
	}
	if (h.version < PJ_FORMAT_VERSION)
		img->upgrade = true;
	off = sizeof(h);
	rc = 1;
	while (off < m.size) {
		const char *p = m.base + off;
		const char *why = NULL;
		uint32_t len = 0;

		if (m.size - off < sizeof(struct pj_rec_hdr))
			why = "an incomplete record";
		else if ((len = pj_get32(p)) >
			 m.size - off - sizeof(struct pj_rec_hdr))
			why = "an incomplete record";
		else if (pj_get64(p + 8) != img->seq + 1)
			why = "a record out of sequence";
		else if (pj_get32(p + 4) !=
			 pj_rec_crc(p + sizeof(struct pj_rec_hdr), len,
				    img->seq + 1))
			why = "a record that fails its checksum";
		else if ((arc = pj_image_apply(img,
					       p + sizeof(struct pj_rec_hdr),
					       len)))
			why = "a malformed record";
		if (arc == -ENOMEM) {
			img->error = arc;
			rc = 0;
			break;
		}
		if (why) {
			note_file(img, "journal", name, "stopped at byte %zu "
				  "after record %" PRIu64 ": %s; %zu bytes "
				  "dropped", off, img->seq, why, m.size - off);
			if (ftruncate(m.fd, (off_t)off))
				tfs_warn("cannot cut journal '%s/%s': %s",
					 dirpath, name, strerror(errno));
			rc = 0;
			break;
		}
		img->seq++;
		img->records++;
		off += sizeof(struct pj_rec_hdr) + len;
	}
out:
	unmap_file(&m);
	return rc;
}

static int parse_gen(const char *s, const char *prefix, uint64_t *gen)
{
	size_t pl = strlen(prefix);
	char *end;

	if (strncmp(s, prefix, pl) || s[pl] < '0' || s[pl] > '9')
		return 0;
	errno = 0;
	*gen = strtoull(s + pl, &end, 10);
	return !errno && !*end;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

int pj_image_load(int dirfd, const char *dirpath, uint32_t chunk_size,
		  struct pj_image **out, char *err, size_t errlen)
{
	uint64_t *snaps = NULL, gen, max_journal = 0;
	size_t nsnaps = 0, cap = 0, njournals = 0;
	struct pj_image *img = image_new();
	struct dirent *e;
	DIR *dir;
	int fd, rc = 0;

	if (!img) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* A descriptor of its own: a dup would share (and move) the
	 * caller's directory offset. */
	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	dir = fd < 0 ? NULL : fdopendir(fd);
	if (!dir) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		snprintf(err, errlen, "cannot read '%s': %s", dirpath,
			 strerror(-rc));
		goto out_free;
	}
	while ((e = readdir(dir))) {
		size_t nl = strlen(e->d_name), tl = strlen(PJ_TMP_SUFFIX);

		if (nl > tl && !strcmp(e->d_name + nl - tl, PJ_TMP_SUFFIX) &&
		    !strncmp(e->d_name, PJ_SNAP_PREFIX,
			     strlen(PJ_SNAP_PREFIX))) {
			/* A snapshot that was never renamed into place. */
			unlinkat(dirfd, e->d_name, 0);
		} else if (parse_gen(e->d_name, PJ_SNAP_PREFIX, &gen)) {
			if (nsnaps == cap) {
				uint64_t *n;

				cap = cap ? cap * 2 : 8;
				n = realloc(snaps, cap * sizeof(*n));
				if (!n) {
					rc = -ENOMEM;
					break;
				}
				snaps = n;
			}
			snaps[nsnaps++] = gen;
		} else if (parse_gen(e->d_name, PJ_JOURNAL_PREFIX, &gen)) {
			njournals++;
			if (gen > max_journal)
				max_journal = gen;
		}
	}
	closedir(dir);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	if (!nsnaps && !njournals) {
		img->fresh = true;
		img->need_snapshot = true;
		goto out_ok;
	}
	if (!nsnaps) {
		snprintf(err, errlen, "'%s' holds journals but no snapshot: "
			 "not a directory this tierfs can recover", dirpath);
		rc = -EINVAL;
		goto out_free;
	}
	qsort(snaps, nsnaps, sizeof(*snaps), cmp_desc);
	rc = -ENOENT;
	for (size_t k = 0; k < nsnaps && rc == -ENOENT; k++) {
		struct pj_file_hdr h;
		struct file_map m;
		char name[64];
		int ok;

		snprintf(name, sizeof(name), PJ_SNAP_PREFIX "%" PRIu64,
			 snaps[k]);
		if (map_file(dirfd, name, false, &m))
			continue;
		ok = check_hdr(&m, PJ_MAGIC_SNAP, dirpath, name, chunk_size,
			       &h, err, errlen);
		if (ok < 0) {
			rc = ok;
		} else if (!ok || h.generation != snaps[k] ||
			   h.body_bytes != m.size - sizeof(h)) {
			note_file(img, "snapshot", name, "bad header or "
				  "wrong size: using an older one");
		} else {
			img->generation = snaps[k];
			img->upgrade |= h.version < PJ_FORMAT_VERSION;
			img->seq = h.seq;
			img->snapshot_time = h.time;
			img->snapshot_bytes = m.size;
			replay_snapshot(img, &m, name, h.body_bytes);
			rc = 0;
		}
		unmap_file(&m);
	}
	if (rc == -ENOENT) {
		snprintf(err, errlen, "no snapshot in '%s' checks out: "
			 "refusing to guess what it held", dirpath);
		rc = -EINVAL;
	}
	if (rc)
		goto out_free;
	/* The journals from the snapshot's generation on, in order; one
	 * that stops early ends the chain, and later ones go. */
	gen = img->generation;
	for (uint64_t g = gen;; g++) {
		char name[64];

		snprintf(name, sizeof(name), PJ_JOURNAL_PREFIX "%" PRIu64, g);
		rc = replay_journal(img, dirfd, dirpath, name, g, chunk_size,
				    err, errlen);
		if (rc < 0)
			goto out_free;
		if (!faccessat(dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW))
			img->generation = g;
		if (!rc)
			break;
	}
	rc = 0;
	for (uint64_t g = img->generation + 1; g <= max_journal; g++) {
		char name[64];
		struct stat st;

		snprintf(name, sizeof(name), PJ_JOURNAL_PREFIX "%" PRIu64, g);
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		note_file(img, "journal", name, "follows a journal that "
			  "stopped early: its %jd bytes are dropped",
			  (intmax_t)st.st_size);
		unlinkat(dirfd, name, 0);
	}
	if (img->error) {
		snprintf(err, errlen, "out of memory reading '%s'", dirpath);
		rc = img->error;
		goto out_free;
	}
	img->clean = !img->records && !img->need_snapshot;
out_ok:
	free(snaps);
	*out = img;
	return 0;

out_free:
	free(snaps);
	pj_image_free(img);
	return rc;
}

/* --- resolve --- */

static int cmp_dentry(const void *a, const void *b)
{
	const struct pj_dentry *x = *(const struct pj_dentry *const *)a;
	const struct pj_dentry *y = *(const struct pj_dentry *const *)b;

	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* "/a/b/name" for the name @d in a kept directory. */
static void dentry_path(const struct pj_image *img,
			const struct pj_dentry *d, char *out, size_t len)
{
	const struct pj_dentry *chain[256];
	size_t n = 0, o = 0;

	chain[n++] = d;
	while (n < 256) {
		struct pj_inode *p = pj_image_inode(img, chain[n - 1]->parent);

		if (!p || !p->via)
			break;
		chain[n++] = p->via;
	}
	out[0] = '\0';
	while (n-- && o + 2 < len) {
		out[o++] = '/';
		pj_escape(chain[n]->name, chain[n]->len, out + o, len - o);
		o += strlen(out + o);
	}
}

static void root_make(struct pj_inode *r, uint32_t uid, uint32_t gid)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	free(r->attr_raw);
	free(r->xv);
	r->attr_raw = NULL;
	r->xv = NULL;
	memset(&r->a, 0, sizeof(r->a));
	r->a.ino = ROOT_INO;
	r->a.mode = 040755;
	r->a.uid = uid;
	r->a.gid = gid;
	r->a.atime = r->a.mtime = r->a.ctime = now;
	r->has_attr = true;
}

/*
 * Call @adopt for regular file @i: NULL when it is kept (FATE_KEEP, or
 * FATE_FOUND when what it kept is not the file as it was), else why not
 * (FATE_DROP). What it mended is noted under @d's path, or @what.
 */
static const char *adopt_one(struct pj_image *img, struct pj_inode *i,
			     const struct pj_dentry *d, const char *what,
			     const char *(*adopt)(void *, struct pj_inode *),
			     void *ctx)
{
	const char *why;

	i->mended = i->salvaged = NULL;
	why = adopt(ctx, i);
	if (why) {
		i->fate = FATE_DROP;
		return why;
	}
	if (i->mended) {
		char path[4096];

		if (d)
			dentry_path(img, d, path, sizeof(path));
		else
			snprintf(path, sizeof(path), "%s", what);
		pj_image_note(img, "repaired", path, i->mended);
		img->need_snapshot = true;
	}
	i->fate = FATE_KEEP;
	if (i->salvaged) {
		free(i->lost_why);
		i->lost_why = strdup(i->salvaged);
		i->fate = FATE_FOUND;
	}
	i->mended = i->salvaged = NULL;
	return NULL;
}

/* The fate of regular file @i first reached by name @d. */
static void decide_file(struct pj_image *img, struct pj_inode *i,
			const struct pj_dentry *d,
			const char *(*adopt)(void *, struct pj_inode *),
			void *ctx)
{
	char path[4096];
	const char *why = NULL;

	if (!i->has_data) {
		why = "never synced: created and written, no fsync succeeded "
		      "before the crash";
		i->fate = FATE_DROP;
	} else {
		why = adopt_one(img, i, d, NULL, adopt, ctx);
	}
	if (i->fate == FATE_FOUND) {
		i->named = d; /* noted where it goes */
		return;
	}
	if (!why && !i->dirty)
		return;
	dentry_path(img, d, path, sizeof(path));
	if (why) {
		pj_image_note(img, "dropped", path, why);
		img->dropped++;
	} else {
		pj_image_note(img, "rolled back", path, "comes back as at its "
			      "last sync; later writes are lost");
		img->rolled_back++;
	}
}

/* A name in the maps, as a record would set it; NULL out of memory. */
static struct pj_dentry *dentry_new(struct pj_image *img, uint64_t parent,
				    const char *name, uint64_t ino)
{
	size_t nl = strlen(name);
	struct pj_dentry **pp = dentry_find(img, parent, name, nl), *d;

	d = malloc(sizeof(*d) + nl + 1);
	if (!d)
		return NULL;
	d->parent = parent;
	d->ino = ino;
	d->order = img->next_order++;
	d->len = (uint16_t)nl;
	memcpy(d->name, name, nl + 1);
	d->hnext = NULL;
	*pp = d;
	if (++img->dcount > img->dmask + 1)
		dhash_grow(img);
	return d;
}

static int cmp_ino(const void *a, const void *b)
{
	uint64_t x = (*(const struct pj_inode *const *)a)->a.ino;
	uint64_t y = (*(const struct pj_inode *const *)b)->a.ino;

	return x < y ? -1 : x > y;
}

/*
 * The directory lost+found goes in: one made by an earlier recovery
 * (kept, a directory of @uid that no one else may enter, reached by that
 * name), else a new one under the first free name, the root's nlink
 * counting it. NULL when there is none to be had (out of memory).
 */
static struct pj_inode *lf_dir(struct pj_image *img, uint32_t uid,
			       uint32_t gid)
{
	struct pj_inode *root = pj_image_inode(img, ROOT_INO), *lf;
	struct pj_dentry *d;
	struct timespec now;
	uint64_t ino = img->meta.next_ino;
	char name[32];

	for (int k = 0; k < 100; k++) {
		struct pj_dentry **pp;

		if (k)
			snprintf(name, sizeof(name), PJ_LOST_FOUND ".%d", k);
		else
			snprintf(name, sizeof(name), PJ_LOST_FOUND);
		pp = dentry_find(img, ROOT_INO, name, strlen(name));
		if (*pp) {
			lf = pj_image_inode(img, (*pp)->ino);
			if (lf && lf->keep && lf->via == *pp &&
			    (lf->a.mode & 0170000) == 040000 &&
			    lf->a.uid == uid && !(lf->a.mode & 077))
				return lf;
			continue;
		}
		for (size_t b = 0; b <= img->imask; b++)
			for (struct pj_inode *i = img->ihash[b]; i;
			     i = i->hnext)
				if (i->a.ino >= ino)
					ino = i->a.ino + 1;
		lf = inode_get(img, ino);
		if (!lf)
			return NULL;
		d = dentry_new(img, ROOT_INO, name, ino);
		if (!d) {
			inode_del(img, ino);
			return NULL;
		}
		clock_gettime(CLOCK_REALTIME, &now);
		lf->a.mode = 040700;
		lf->a.uid = uid;
		lf->a.gid = gid;
		lf->a.nlink = 2;
		lf->a.atime = lf->a.mtime = lf->a.ctime = now;
		lf->has_attr = true;
		lf->keep = true;
		lf->fate = FATE_KEEP;
		lf->parent = ROOT_INO;
		lf->via = d;
		root->a.nlink++;
		img->meta.next_ino = ino + 1;
		img->inodes[img->ninodes++] = lf;
		img->dentries[img->ndentries++] = d;
		return lf;
	}
	return NULL;
}

/*
 * Regular files whose bytes are kept but that no kept name reaches go to
 * lost+found: those salvaged, and those whose names or directories are
 * lost, in the order of their inode numbers. @all: every name, @n of
 * them.
 */
static int lost_found(struct pj_image *img, struct pj_dentry **all, size_t n,
		      const char *(*adopt)(void *, struct pj_inode *),
		      void *ctx, uint32_t uid, uint32_t gid)
{
	struct pj_inode **cand, *lf = NULL;
	size_t nc = 0;

	for (size_t b = 0; b <= img->imask; b++)
		for (struct pj_inode *i = img->ihash[b]; i; i = i->hnext)
			nc += !i->keep && i->fate != FATE_DROP &&
			      i->has_data &&
			      (!i->has_attr ||
			       (i->a.mode & 0170000) == 0100000);
	if (!nc)
		return 0;
	cand = malloc(nc * sizeof(*cand));
	if (!cand)
		return -ENOMEM;
	nc = 0;
	for (size_t b = 0; b <= img->imask; b++)
		for (struct pj_inode *i = img->ihash[b]; i; i = i->hnext)
			if (!i->keep && i->fate != FATE_DROP && i->has_data &&
			    (!i->has_attr || (i->a.mode & 0170000) == 0100000))
				cand[nc++] = i;
	qsort(cand, nc, sizeof(*cand), cmp_ino);
	/* A name each, for the notes, among those no kept directory
	 * holds. */
	for (size_t k = 0; k < n; k++) {
		struct pj_inode *c = pj_image_inode(img, all[k]->ino);

		if (c && !c->keep && !c->named)
			c->named = all[k];
	}
	/* Room for lost+found and a name each. */
	struct pj_inode **in = realloc(img->inodes,
				       (img->icount + 1) * sizeof(*in));
	struct pj_dentry **dn = in ? realloc(img->dentries,
					     (img->dcount + nc + 1) *
						     sizeof(*dn)) :
				     NULL;

	if (in)
		img->inodes = in;
	if (!dn) {
		free(cand);
		return -ENOMEM;
	}
	img->dentries = dn;
	for (size_t k = 0; k < nc; k++) {
		struct pj_inode *c = cand[k];
		char what[64], name[40], where[64], esc[1100], why[2048];
		const char *path = what;
		char full[4096];
		struct pj_dentry *d;

		bool made = false;

		snprintf(what, sizeof(what), "inode %" PRIu64, c->a.ino);
		if (c->fate == FATE_UNSEEN) {
			const char *no;

			if (!c->has_attr) {
				made = true;
				/* Nothing says whose it was: root's alone. */
				memset(&c->a, 0, sizeof(c->a));
				c->a.ino = c->d.ino;
				c->a.mode = 0100600;
				c->a.uid = uid;
				c->a.gid = gid;
				c->a.atime = c->a.mtime = c->a.ctime =
					c->d.mtime;
				c->has_attr = true;
			}
			no = adopt_one(img, c, NULL, what, adopt, ctx);
			if (no) {
				pj_image_note(img, "dropped", what, no);
				img->dropped++;
				img->need_snapshot = true;
				continue;
			}
		}
		if (!lf && !(lf = lf_dir(img, uid, gid))) {
			free(cand);
			return -ENOMEM;
		}
		snprintf(name, sizeof(name), "#%" PRIu64, c->a.ino);
		for (int x = 1; *dentry_find(img, lf->a.ino, name,
					     strlen(name)); x++)
			snprintf(name, sizeof(name), "#%" PRIu64 ".%d",
				 c->a.ino, x);
		d = dentry_new(img, lf->a.ino, name, c->a.ino);
		if (!d) {
			free(cand);
			return -ENOMEM;
		}
		snprintf(where, sizeof(where), "%s/%s", lf->via->name, name);
		if (c->fate == FATE_FOUND) {
			/* Reached by a name: that is its path. */
			dentry_path(img, c->named, full, sizeof(full));
			path = full;
			snprintf(why, sizeof(why), "%s: what reads back is "
				 "kept as '/%s'", c->lost_why ? c->lost_why :
				 "some of its bytes are lost", where);
		} else if (made) {
			snprintf(why, sizeof(why), "its attributes are lost: "
				 "kept as '/%s', 0600, the daemon's user's%s%s",
				 where, c->lost_why ? "; " : "",
				 c->lost_why ? c->lost_why : "");
		} else if (c->named) {
			pj_escape(c->named->name, c->named->len, esc,
				  sizeof(esc));
			snprintf(why, sizeof(why), "it was '%s' in a "
				 "directory that is lost: kept as '/%s'%s%s",
				 esc, where, c->lost_why ? "; " : "",
				 c->lost_why ? c->lost_why : "");
		} else {
			snprintf(why, sizeof(why), "its names are lost: kept "
				 "as '/%s'%s%s", where, c->lost_why ? "; " : "",
				 c->lost_why ? c->lost_why : "");
		}
		pj_image_note(img, PJ_LOST_FOUND, path, why);
		c->fate = FATE_KEEP;
		c->keep = c->found = true;
		c->a.nlink = 1;
		img->inodes[img->ninodes++] = c;
		img->dentries[img->ndentries++] = d;
		img->found++;
		img->need_snapshot = true;
	}
	free(cand);
	return 0;
}

int pj_image_resolve(struct pj_image *img,
		     const char *(*adopt)(void *ctx, struct pj_inode *ino),
		     void *ctx, uint32_t uid, uint32_t gid)
{
	struct pj_dentry **all;
	struct pj_inode *root;
	size_t n = 0, head = 0;
	int rc;

	root = inode_get(img, ROOT_INO);
	if (!root)
		return -ENOMEM;
	if (!root->has_attr || (root->a.mode & 0170000) != 040000) {
		if (!img->fresh) {
			pj_image_note(img, "made", "/", "the root directory's "
				      "record is lost: made anew");
			img->need_snapshot = true;
		}
		root_make(root, uid, gid);
	}
	all = malloc((img->dcount ? img->dcount : 1) * sizeof(*all));
	img->inodes = malloc(img->icount * sizeof(*img->inodes));
	img->dentries = malloc((img->dcount ? img->dcount : 1) *
			       sizeof(*img->dentries));
	if (!all || !img->inodes || !img->dentries) {
		free(all);
		return -ENOMEM;
	}
	for (size_t k = 0; k <= img->dmask; k++)
		for (struct pj_dentry *d = img->dhash[k]; d; d = d->hnext)
			all[n++] = d;
	qsort(all, n, sizeof(*all), cmp_dentry);

	/* Breadth first from the root: a directory is kept by its first
	 * name only, which also breaks any cycle damage could make. */
	root->keep = true;
	root->fate = FATE_KEEP;
	root->parent = ROOT_INO;
	root->a.nlink = 2;
	img->inodes[img->ninodes++] = root;
	while (head < img->ninodes) {
		struct pj_inode *dir = img->inodes[head++];
		size_t lo = 0, hi = n;

		if ((dir->a.mode & 0170000) != 040000)
			continue;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (all[mid]->parent < dir->a.ino)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < n && all[lo]->parent == dir->a.ino; lo++) {
			struct pj_dentry *d = all[lo];
			struct pj_inode *c = pj_image_inode(img, d->ino);
			char path[4096];

			if (!c || !c->has_attr) {
				/* (bytes without attributes go to
				 * lost+found, below) */
				if (c && c->has_data)
					continue;
				dentry_path(img, d, path, sizeof(path));
				pj_image_note(img, "dropped", path,
					      "its inode's record is lost");
				img->dropped++;
				img->need_snapshot = true;
				continue;
			}
			if ((c->a.mode & 0170000) == 040000) {
				if (c->keep) {
					dentry_path(img, d, path,
						    sizeof(path));
					pj_image_note(img, "dropped", path,
						      "a second name of a "
						      "directory");
					img->need_snapshot = true;
					continue;
				}
				c->via = d;
				c->parent = dir->a.ino;
				c->a.nlink = 2;
				dir->a.nlink++;
			} else {
				if ((c->a.mode & 0170000) == 0100000 &&
				    c->fate == FATE_UNSEEN)
					decide_file(img, c, d, adopt, ctx);
				else if (c->fate == FATE_UNSEEN)
					c->fate = FATE_KEEP;
				if (c->fate == FATE_DROP ||
				    c->fate == FATE_FOUND) {
					img->need_snapshot = true;
					continue;
				}
				if (!c->keep)
					c->a.nlink = 0;
				c->a.nlink++;
			}
			if (!c->keep) {
				c->keep = true;
				img->inodes[img->ninodes++] = c;
			}
			img->dentries[img->ndentries++] = d;
		}
	}
	rc = lost_found(img, all, n, adopt, ctx, uid, gid);
	if (rc) {
		free(all);
		return rc;
	}
	/* Named, but not from anywhere the root reaches. */
	for (size_t k = 0; k < n; k++) {
		struct pj_inode *c = pj_image_inode(img, all[k]->ino);
		struct pj_inode *p = pj_image_inode(img, all[k]->parent);
		char what[64];

		if (!c || c->keep || c->fate == FATE_DROP || (p && p->keep))
			continue;
		c->fate = FATE_DROP;
		snprintf(what, sizeof(what), "inode %" PRIu64, c->a.ino);
		pj_image_note(img, "dropped", what, "its directory is lost");
		img->dropped++;
		img->need_snapshot = true;
	}
	free(all);
	return 0;
}

void pj_image_free(struct pj_image *img)
{
	struct pj_note *nt, *next;

	if (!img)
		return;
	for (size_t k = 0; k <= img->imask; k++) {
		struct pj_inode *i = img->ihash[k], *nx;

		for (; i; i = nx) {
			nx = i->hnext;
			inode_free(i);
		}
	}
	for (size_t k = 0; k <= img->dmask; k++) {
		struct pj_dentry *d = img->dhash[k], *nx;

		for (; d; d = nx) {
			nx = d->hnext;
			free(d);
		}
	}
	for (nt = img->notes; nt; nt = next) {
		next = nt->next;
		free(nt);
	}
	free(img->ihash);
	free(img->dhash);
	free(img->inodes);
	free(img->dentries);
	free(img);
}
