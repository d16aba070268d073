// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Writing the journal: building records, appending them, the group commit
 * that makes them durable, and cutting the journal for a snapshot.
 *
 * Appended records wait in j->pend until someone needs them durable (a
 * fsync, the once-a-second flush of the caller's thread). The first
 * committer takes the whole pending buffer, writes it at the journal's end
 * and fdatasyncs it with j->lock dropped; committers arriving meanwhile
 * wait for that and then see whether their record was in it, so a burst
 * of fsyncs costs one fdatasync per round, not one each.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/log.h"
#include "persist/pj_i.h"
#include "tiers/disk.h"

/* A snapshot is worth writing once the journal holds this much more than
 * twice the last one: replaying it would then cost more than reading a
 * fresh snapshot, and it is the only thing that keeps the journal from
 * growing without bound. */
#define JOURNAL_SLACK (8u << 20)
/* Snapshot records are cut at item boundaries near this size. */
#define SNAP_REC_TARGET (64u << 10)

struct pj {
	pthread_mutex_t lock; /* a leaf: see persist.h */
	pthread_cond_t done; /* a commit finished */
	int dirfd;
	char *dirpath;
	uint32_t chunk_size;

	/* Owned by whoever set busy (a committer or a snapshot's holder),
	 * read under lock. */
	int fd; /* the current journal, -1 before the first cut */
	uint64_t generation;
	uint64_t off; /* its size: where the next write goes */

	/* lock */
	bool busy; /* a commit or a cut is writing the journal */
	char *pend;
	size_t pend_len, pend_cap;
	uint64_t seq; /* the last sequence number given */
	uint64_t durable_seq;
	int error; /* sticky */
	uint64_t records; /* in the journal files since the snapshot */
	uint64_t commits;
	uint64_t snapshot_bytes;
	int64_t snapshot_time;
	/* pj_cut() to pj_snapshot_write(): what the snapshot covers */
	uint64_t cut_generation, cut_seq;
};

uint32_t pj_crc(uint32_t crc, const void *buf, size_t len)
{
	return tfs_crc32c(crc, buf, len);
}

uint32_t pj_rec_crc(const void *items, size_t len, uint64_t seq)
{
	char s[8];

	pj_put64(s, seq);
	return pj_crc(pj_crc(0, items, len), s, sizeof(s));
}

void pj_hdr_encode(struct pj_file_hdr *h)
{
	h->version = htole32(h->version);
	h->chunk_size = htole32(h->chunk_size);
	h->generation = htole64(h->generation);
	h->seq = htole64(h->seq);
	h->time = (int64_t)htole64((uint64_t)h->time);
	h->body_bytes = htole64(h->body_bytes);
	h->reserved = 0;
	h->crc = htole32(pj_hdr_crc(h));
}

void pj_hdr_decode(struct pj_file_hdr *h)
{
	h->version = le32toh(h->version);
	h->chunk_size = le32toh(h->chunk_size);
	h->generation = le64toh(h->generation);
	h->seq = le64toh(h->seq);
	h->time = (int64_t)le64toh((uint64_t)h->time);
	h->body_bytes = le64toh(h->body_bytes);
	h->crc = le32toh(h->crc);
}

uint32_t pj_hdr_crc(const struct pj_file_hdr *h)
{
	return pj_crc(0, h, offsetof(struct pj_file_hdr, crc));
}

/* --- records --- */

void pj_rec_init(struct pj_rec *r)
{
	memset(r, 0, sizeof(*r));
}

void pj_rec_reset(struct pj_rec *r)
{
	r->len = 0;
	r->items = 0;
	r->err = 0;
}

void pj_rec_release(struct pj_rec *r)
{
	free(r->buf);
	pj_rec_init(r);
}

/* Room for an item of @payload bytes; returns where its payload goes. */
static char *item_start(struct pj_rec *r, uint16_t type, size_t payload)
{
	size_t need = r->len + sizeof(struct pj_item_hdr) + payload;
	char *p;

	if (r->err)
		return NULL;
	if (payload > PJ_REC_MAX) {
		r->err = -E2BIG;
		return NULL;
	}
	if (need > r->cap) {
		size_t cap = r->cap ? r->cap : 256;
		char *b;

		while (cap < need)
			cap *= 2;
		b = realloc(r->buf, cap);
		if (!b) {
			r->err = -ENOMEM;
			return NULL;
		}
		r->buf = b;
		r->cap = cap;
	}
	p = r->buf + r->len;
	pj_put16(p, type);
	pj_put16(p + 2, 0);
	pj_put32(p + 4, (uint32_t)payload);
	r->len = need;
	r->items++;
	return p + sizeof(struct pj_item_hdr);
}

static char *put_time(char *p, const struct timespec *ts)
{
	pj_put64(p, (uint64_t)ts->tv_sec);
	pj_put32(p + 8, (uint32_t)ts->tv_nsec);
	pj_put32(p + 12, 0);
	return p + 16;
}

void pj_rec_attr(struct pj_rec *r, const struct pj_attr *a)
{
	size_t payload = PJ_ATTR_FIXED + a->target_len;
	char *p;

	for (uint32_t k = 0; k < a->nxattrs; k++)
		payload += 8 + (size_t)a->xattrs[k].nlen + a->xattrs[k].vlen;
	p = item_start(r, PJ_I_ATTR, payload);
	if (!p)
		return;
	pj_put64(p, a->ino);
	pj_put32(p + 8, a->mode);
	pj_put32(p + 12, a->uid);
	pj_put32(p + 16, a->gid);
	pj_put32(p + 20, a->nlink);
	pj_put64(p + 24, a->rdev);
	pj_put32(p + 32, a->fsflags);
	pj_put32(p + 36, a->generation);
	pj_put32(p + 40, a->iflags);
	pj_put32(p + 44, 0);
	p = put_time(p + 48, &a->atime);
	p = put_time(p, &a->mtime);
	p = put_time(p, &a->ctime);
	pj_put32(p, a->target_len);
	pj_put32(p + 4, a->nxattrs);
	p += 8;
	if (a->target_len)
		memcpy(p, a->target, a->target_len);
	p += a->target_len;
	for (uint32_t k = 0; k < a->nxattrs; k++) {
		const struct pj_xattr *x = &a->xattrs[k];

		pj_put32(p, x->nlen);
		pj_put32(p + 4, x->vlen);
		memcpy(p + 8, x->name, x->nlen);
		if (x->vlen)
			memcpy(p + 8 + x->nlen, x->value, x->vlen);
		p += 8 + x->nlen + x->vlen;
	}
}

void pj_rec_data(struct pj_rec *r, const struct pj_data *d)
{
	char *p = item_start(r, PJ_I_DATA, PJ_DATA_FIXED + d->map_len);

	if (!p)
		return;
	pj_put64(p, d->ino);
	pj_put64(p + 8, d->id);
	pj_put64(p + 16, d->size);
	p = put_time(p + 24, &d->mtime);
	p = put_time(p, &d->ctime);
	pj_put32(p, d->map_len);
	pj_put32(p + 4, 0);
	if (d->map_len)
		memcpy(p + 8, d->map, d->map_len);
}

static void rec_ino(struct pj_rec *r, uint16_t type, uint64_t ino)
{
	char *p = item_start(r, type, 8);

	if (p)
		pj_put64(p, ino);
}

void pj_rec_dirty(struct pj_rec *r, uint64_t ino)
{
	rec_ino(r, PJ_I_DIRTY, ino);
}

void pj_rec_free(struct pj_rec *r, uint64_t ino)
{
	rec_ino(r, PJ_I_FREE, ino);
}

void pj_rec_dset(struct pj_rec *r, uint64_t parent, const char *name,
		 size_t len, uint64_t ino)
{
	char *p = item_start(r, PJ_D_SET, PJ_DSET_FIXED + len);

	if (!p)
		return;
	pj_put64(p, parent);
	pj_put64(p + 8, ino);
	pj_put32(p + 16, (uint32_t)len);
	pj_put32(p + 20, 0);
	memcpy(p + 24, name, len);
}

void pj_rec_ddel(struct pj_rec *r, uint64_t parent, const char *name,
		 size_t len)
{
	char *p = item_start(r, PJ_D_DEL, PJ_DDEL_FIXED + len);

	if (!p)
		return;
	pj_put64(p, parent);
	pj_put32(p + 8, (uint32_t)len);
	pj_put32(p + 12, 0);
	memcpy(p + 16, name, len);
}

void pj_rec_meta(struct pj_rec *r, const struct pj_meta *m)
{
	char *p = item_start(r, PJ_META, PJ_META_FIXED);

	if (!p)
		return;
	pj_put64(p, m->next_ino);
	pj_put64(p + 8, m->next_id);
	pj_put32(p + 16, m->next_generation);
	pj_put32(p + 20, 0);
}

/* --- files --- */

static int write_full(int fd, const void *buf, size_t len, off_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENOSPC;
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

static void hdr_fill(struct pj_file_hdr *h, const char *magic,
		     uint32_t chunk_size, uint64_t gen, uint64_t seq,
		     uint64_t body)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, magic, strlen(magic));
	h->version = PJ_FORMAT_VERSION;
	h->chunk_size = chunk_size;
	h->generation = gen;
	h->seq = seq;
	h->time = (int64_t)time(NULL);
	h->body_bytes = body;
	pj_hdr_encode(h);
}

/* Create journal.<@gen> whose first record will be @seq + 1, durable with
 * its directory entry. Returns its descriptor or -errno. */
static int journal_create(struct pj *j, uint64_t gen, uint64_t seq)
{
	struct pj_file_hdr h;
	char name[64];
	int fd, rc;

	snprintf(name, sizeof(name), PJ_JOURNAL_PREFIX "%" PRIu64, gen);
	fd = openat(j->dirfd, name,
		    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0) {
		rc = -errno;
		tfs_err("cannot create journal '%s/%s': %s", j->dirpath, name,
			strerror(-rc));
		return rc;
	}
	hdr_fill(&h, PJ_MAGIC_JOURNAL, j->chunk_size, gen, seq, 0);
	rc = write_full(fd, &h, sizeof(h), 0);
	if (!rc && fdatasync(fd))
		rc = -errno;
	if (!rc && fsync(j->dirfd))
		rc = -errno;
	if (rc) {
		tfs_err("cannot write journal '%s/%s': %s", j->dirpath, name,
			strerror(-rc));
		close(fd);
		unlinkat(j->dirfd, name, 0);
		return rc;
	}
	return fd;
}

int pj_start(int dirfd, const char *dirpath, uint32_t chunk_size,
	     const struct pj_image *img, struct pj **out, char *err,
	     size_t errlen)
{
	struct pj *j = calloc(1, sizeof(*j));
	char name[64];
	struct stat st;
	int rc;

	if (!j || !(j->dirpath = strdup(dirpath))) {
		free(j);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	j->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	if (j->dirfd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot duplicate a descriptor: %s",
			 strerror(-rc));
		goto out_free;
	}
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->done, NULL);
	j->chunk_size = chunk_size;
	j->seq = j->durable_seq = img->seq;
	j->generation = img->generation;
	j->records = img->fresh ? 0 : img->records;
	j->snapshot_bytes = img->snapshot_bytes;
	j->snapshot_time = img->snapshot_time;
	j->fd = -1;
	if (img->fresh)
		goto out_ok;
	/* The loader left the last journal ending after its last good
	 * record; a journal that was never written (a crash inside a cut)
	 * gets its header now. */
	snprintf(name, sizeof(name), PJ_JOURNAL_PREFIX "%" PRIu64,
		 img->generation);
	j->fd = openat(j->dirfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (j->fd >= 0 && !fstat(j->fd, &st) &&
	    st.st_size >= (off_t)sizeof(struct pj_file_hdr)) {
		j->off = (uint64_t)st.st_size;
		goto out_ok;
	}
	if (j->fd >= 0)
		close(j->fd);
	j->fd = journal_create(j, img->generation, img->seq);
	if (j->fd < 0) {
		rc = j->fd;
		snprintf(err, errlen, "cannot create a journal in '%s': %s",
			 dirpath, strerror(-rc));
		goto out_fd;
	}
	j->off = sizeof(struct pj_file_hdr);
out_ok:
	*out = j;
	return 0;

out_fd:
	pthread_cond_destroy(&j->done);
	pthread_mutex_destroy(&j->lock);
	close(j->dirfd);
out_free:
	free(j->dirpath);
	free(j);
	return rc;
}

void pj_stop(struct pj *j)
{
	if (!j)
		return;
	if (j->fd >= 0)
		close(j->fd);
	close(j->dirfd);
	pthread_cond_destroy(&j->done);
	pthread_mutex_destroy(&j->lock);
	free(j->pend);
	free(j->dirpath);
	free(j);
}

/* j->lock held. Frame @r into the pending buffer; 0 when it cannot. */
static uint64_t append_locked(struct pj *j, const struct pj_rec *r,
			      uint32_t items_crc)
{
	size_t need = j->pend_len + sizeof(struct pj_rec_hdr) + r->len;
	char s[8], *p;
	uint64_t seq;

	if (need > j->pend_cap) {
		size_t cap = j->pend_cap ? j->pend_cap : 64 * 1024;
		char *b;

		while (cap < need)
			cap *= 2;
		b = realloc(j->pend, cap);
		if (!b)
			goto out_lost;
		j->pend = b;
		j->pend_cap = cap;
	}
	seq = ++j->seq;
	pj_put64(s, seq);
	p = j->pend + j->pend_len;
	pj_put32(p, (uint32_t)r->len);
	pj_put32(p + 4, pj_crc(items_crc, s, sizeof(s)));
	pj_put64(p + 8, seq);
	memcpy(p + sizeof(struct pj_rec_hdr), r->buf, r->len);
	j->pend_len = need;
	j->records++;
	return seq;

out_lost:
	if (!j->error) {
		j->error = -EIO;
		tfs_err("journal '%s': out of memory: a change is not "
			"recorded; syncs fail until the next snapshot",
			j->dirpath);
	}
	return 0;
}

static uint64_t append(struct pj *j, const struct pj_rec *r, void **slot,
		       void *val, void **old)
{
	uint32_t crc;
	uint64_t seq;

	if (!r->len && !r->err) {
		if (slot)
			*old = pj_swap(j, slot, val);
		return 0;
	}
	/* The expensive part outside the lock. */
	crc = r->err ? 0 : pj_crc(0, r->buf, r->len);
	pthread_mutex_lock(&j->lock);
	if (r->err || r->len > PJ_REC_MAX) {
		seq = 0;
		if (!j->error) {
			j->error = -EIO;
			tfs_err("journal '%s': a change could not be recorded "
				"(%s); syncs fail until the next snapshot",
				j->dirpath, strerror(r->err ? -r->err : E2BIG));
		}
	} else {
		seq = append_locked(j, r, crc);
	}
	if (slot) {
		*old = *slot;
		*slot = val;
	}
	pthread_mutex_unlock(&j->lock);
	return seq;
}

uint64_t pj_append(struct pj *j, const struct pj_rec *r)
{
	return append(j, r, NULL, NULL, NULL);
}

uint64_t pj_append_swap(struct pj *j, const struct pj_rec *r, void **slot,
			void *val, void **old)
{
	return append(j, r, slot, val, old);
}

void *pj_swap(struct pj *j, void **slot, void *val)
{
	void *old;

	pthread_mutex_lock(&j->lock);
	old = *slot;
	*slot = val;
	pthread_mutex_unlock(&j->lock);
	return old;
}

uint64_t pj_seq(struct pj *j)
{
	pthread_mutex_lock(&j->lock);
	uint64_t seq = j->seq;
	pthread_mutex_unlock(&j->lock);
	return seq;
}

/* j->lock held and j->busy ours. Write and sync what is pending, with the
 * lock dropped meanwhile when @unlock. */
static int write_pending(struct pj *j, bool unlock)
{
	char *buf = j->pend;
	size_t len = j->pend_len, cap = j->pend_cap;
	uint64_t upto = j->seq;
	int rc = 0;

	if (j->fd < 0 && len) {
		/* Records before the first cut: a caller bug. */
		return -EBADF;
	}
	j->pend = NULL;
	j->pend_len = j->pend_cap = 0;
	if (unlock)
		pthread_mutex_unlock(&j->lock);
	if (len)
		rc = write_full(j->fd, buf, len, (off_t)j->off);
	if (!rc && j->fd >= 0 && fdatasync(j->fd))
		rc = -errno;
	if (unlock)
		pthread_mutex_lock(&j->lock);
	if (rc) {
		/* Put the records back in front of those appended meanwhile
		 * and keep nothing of the failed write: the next try
		 * rewrites them at the same offset. */
		size_t need = len + j->pend_len;

		if (need <= cap) {
			memmove(buf + len, j->pend, j->pend_len);
			free(j->pend);
			j->pend = buf;
			j->pend_len = need;
			j->pend_cap = cap;
			buf = NULL;
		} else {
			char *b = realloc(buf, need);

			if (b) {
				memcpy(b + len, j->pend, j->pend_len);
				free(j->pend);
				j->pend = b;
				j->pend_len = need;
				j->pend_cap = need;
				buf = NULL;
			}
		}
		if (buf) {
			free(buf);
			if (!j->error)
				tfs_err("journal '%s': out of memory after a "
					"failed write", j->dirpath);
			j->error = -EIO;
		}
		tfs_err("cannot write journal '%s/" PJ_JOURNAL_PREFIX
			"%" PRIu64 "': %s", j->dirpath, j->generation,
			strerror(-rc));
		return rc;
	}
	j->off += len;
	j->durable_seq = upto;
	j->commits++;
	/* Keep the larger buffer for the next round. */
	if (!j->pend) {
		j->pend = buf;
		j->pend_cap = cap;
	} else {
		free(buf);
	}
	return 0;
}

int pj_commit(struct pj *j, uint64_t seq)
{
	int rc = 0;

	pthread_mutex_lock(&j->lock);
	for (;;) {
		if (j->error) {
			rc = j->error;
			break;
		}
		if (j->durable_seq >= seq)
			break;
		if (j->busy) {
			pthread_cond_wait(&j->done, &j->lock);
			continue;
		}
		j->busy = true;
		rc = write_pending(j, true);
		j->busy = false;
		pthread_cond_broadcast(&j->done);
		if (rc)
			break;
	}
	pthread_mutex_unlock(&j->lock);
	return rc;
}

int pj_flush(struct pj *j)
{
	return pj_commit(j, pj_seq(j));
}

bool pj_want_snapshot(struct pj *j)
{
	pthread_mutex_lock(&j->lock);
	bool want = j->error ||
		    j->off + j->pend_len >
			    JOURNAL_SLACK + 2 * j->snapshot_bytes;
	pthread_mutex_unlock(&j->lock);
	return want;
}

void pj_hold(struct pj *j)
{
	pthread_mutex_lock(&j->lock);
	while (j->busy)
		pthread_cond_wait(&j->done, &j->lock);
}

int pj_cut(struct pj *j)
{
	uint64_t gen = j->generation + 1;
	int rc = 0, fd;

	/* Held since pj_hold(): nothing can be appended or written. */
	j->busy = true;
	if (j->fd >= 0)
		rc = write_pending(j, false);
	else
		j->pend_len = 0; /* no journal yet: all of it is in the
				  * snapshot */
	if (!rc) {
		fd = journal_create(j, gen, j->seq);
		if (fd < 0) {
			rc = fd;
		} else {
			if (j->fd >= 0)
				close(j->fd);
			j->fd = fd;
			j->off = sizeof(struct pj_file_hdr);
			j->cut_generation = gen;
			j->cut_seq = j->seq;
			j->generation = gen;
			j->records = 0;
			/* The snapshot will hold everything: whatever could
			 * not be recorded before is in it. */
			j->error = 0;
		}
	}
	j->busy = false;
	pthread_cond_broadcast(&j->done);
	pthread_mutex_unlock(&j->lock);
	return rc;
}

void pj_cut_abort(struct pj *j)
{
	pthread_mutex_unlock(&j->lock);
}

/* Remove snap.N and journal.N for every N below @gen, and stale
 * temporaries. */
static void remove_older(struct pj *j, uint64_t gen)
{
	char name[64];

	/* Generations only grow by one per cut, and a failed snapshot keeps
	 * its predecessor, so a short walk down finds them all. */
	for (uint64_t g = gen; g-- > 0;) {
		bool any = false;

		snprintf(name, sizeof(name), PJ_SNAP_PREFIX "%" PRIu64, g);
		any |= !unlinkat(j->dirfd, name, 0);
		snprintf(name, sizeof(name), PJ_JOURNAL_PREFIX "%" PRIu64, g);
		any |= !unlinkat(j->dirfd, name, 0);
		snprintf(name, sizeof(name),
			 PJ_SNAP_PREFIX "%" PRIu64 PJ_TMP_SUFFIX, g);
		any |= !unlinkat(j->dirfd, name, 0);
		if (!any && gen - g > 16)
			break;
	}
}

int pj_snapshot_write(struct pj *j, const struct pj_rec *body)
{
	char name[64], tmp[80];
	struct pj_file_hdr h;
	uint64_t gen, seq, off, nrec = 0;
	char rh[sizeof(struct pj_rec_hdr)];
	int fd, rc;

	if (body->err)
		return body->err;
	pthread_mutex_lock(&j->lock);
	gen = j->cut_generation;
	seq = j->cut_seq;
	pthread_mutex_unlock(&j->lock);
	snprintf(name, sizeof(name), PJ_SNAP_PREFIX "%" PRIu64, gen);
	snprintf(tmp, sizeof(tmp), "%s" PJ_TMP_SUFFIX, name);
	fd = openat(j->dirfd, tmp,
		    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0) {
		rc = -errno;
		goto out_log;
	}
	/* Records of about SNAP_REC_TARGET at item boundaries: a damaged
	 * one then costs what it holds, not the whole snapshot. */
	off = sizeof(h);
	for (size_t at = 0; at < body->len;) {
		size_t end = at;

		while (end < body->len &&
		       (end == at || end - at < SNAP_REC_TARGET)) {
			uint32_t ilen = pj_get32(body->buf + end + 4);

			end += sizeof(struct pj_item_hdr) + ilen;
		}
		nrec++;
		pj_put32(rh, (uint32_t)(end - at));
		pj_put32(rh + 4, pj_rec_crc(body->buf + at, end - at, nrec));
		pj_put64(rh + 8, nrec);
		rc = write_full(fd, rh, sizeof(rh), (off_t)off);
		if (!rc)
			rc = write_full(fd, body->buf + at, end - at,
					(off_t)(off + sizeof(rh)));
		if (rc)
			goto out_close;
		off += sizeof(rh) + (end - at);
		at = end;
	}
	hdr_fill(&h, PJ_MAGIC_SNAP, j->chunk_size, gen, seq,
		 off - sizeof(h));
	rc = write_full(fd, &h, sizeof(h), 0);
	if (!rc && fsync(fd))
		rc = -errno;
	if (rc)
		goto out_close;
	close(fd);
	if (renameat(j->dirfd, tmp, j->dirfd, name) || fsync(j->dirfd)) {
		rc = -errno;
		goto out_unlink;
	}
	pthread_mutex_lock(&j->lock);
	j->snapshot_bytes = off;
	j->snapshot_time = (int64_t)time(NULL);
	pthread_mutex_unlock(&j->lock);
	remove_older(j, gen);
	tfs_debug("journal: snapshot '%s/%s', %" PRIu64 " bytes", j->dirpath,
		  name, off);
	return 0;

out_close:
	close(fd);
out_unlink:
	unlinkat(j->dirfd, tmp, 0);
out_log:
	tfs_err("cannot write snapshot '%s/%s': %s", j->dirpath, name,
		strerror(-rc));
	return rc;
}

void pj_stats(struct pj *j, struct pj_stats *out)
{
	pthread_mutex_lock(&j->lock);
	out->generation = j->generation;
	out->journal_bytes = j->fd >= 0 ? j->off : 0;
	out->journal_records = j->records;
	out->pending_bytes = j->pend_len;
	out->snapshot_bytes = j->snapshot_bytes;
	out->snapshot_time = j->snapshot_time;
	out->seq = j->seq;
	out->durable_seq = j->durable_seq;
	out->commits = j->commits;
	out->error = j->error;
	pthread_mutex_unlock(&j->lock);
}
