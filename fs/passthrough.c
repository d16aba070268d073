// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * FUSE passthrough of reads ([fs] passthrough; the wire in passthrough.h,
 * the rules in doc/design.md, "Passthrough reads").
 *
 * A host-tier file opened read-only while nothing else has it open gets a
 * replica: a memfd the daemon fills from the store and registers with the
 * kernel, which then serves every read and mmap of that open file from it
 * without a request. The store stays what holds the file: the replica is a
 * copy that every change made through the daemon while it lives is copied
 * into before the change is answered (tfs_pt_sync()), so a reader never
 * sees bytes older than a write that returned. While a replica lives, every
 * open of its inode is a passthrough one (the kernel allows no page-cache
 * open beside it): read-only ones read the replica, the others get
 * direct_io and reach the daemon. The last close drops the replica, and
 * marks the page cache stale, so that a later cached open drops pages that
 * the changes made meanwhile (through direct_io) never updated.
 *
 * But the kernel maps the replica itself for those other opens too, with
 * their own flags: once one that may write joined it, a shared mapping may
 * write the replica, which then holds the file's bytes (reads through the
 * daemon come from it) until it settles: copied back into the store once
 * no writer's file is left on it, else kept past the last close (design.md,
 * "A writer's mapping").
 *
 * Locks: replicas[] and each replica's nopen, refs, wr and settling under
 * ns_lock; a replica's fd contents under its own lock, taken without
 * ns_lock and held across the store read that copies bytes in (so that
 * copies of one file never interleave: the last one to run leaves the
 * store's bytes) and across the store write that copies them back.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/fs_i.h"
#include "fs/passthrough.h"
#include "fs/statx.h"

/* Replicas, by inode number: few files are open at once. */
#define PT_BUCKETS 256u
/* Enough entries for TFS_IO_MAX in the smallest chunks, split twice. */
#define PT_IOV_MAX (TFS_IO_MAX / (64 * 1024) * 2 + 4)

struct pt_replica {
	struct pt_replica *next; /* ns_lock */
	uint64_t ino;
	struct tier_buf *buf;
	uint32_t nopen; /* ns_lock: open files using it */
	uint32_t refs; /* ns_lock: copies in progress */
	bool ready; /* ns_lock: filled and registered, or failed */
	/* ns_lock: a writable open joined it, so a shared mapping of that
	 * open may have written it: it holds the file's bytes, not the
	 * store, until settle() copies them back. */
	bool wr;
	bool settling; /* ns_lock: settle() runs; opens wait for it */
	uint64_t swept; /* ns_lock: the sweep() that last tried it */
	int32_t id; /* the kernel's backing id; <= 0 until ready, or failed */
	pthread_mutex_t lock; /* fd's contents, size */
	int fd;
	int rofd; /* fd opened again read-only: what the kernel reads */
	uint64_t size; /* lock, and atomically read by stats */
};

static struct {
	enum cfg_passthrough mode;
	atomic_bool on; /* negotiated at INIT, not refused since */
	atomic_bool said; /* the refusal was logged */
	uint32_t in_flags, in_flags2; /* of the INIT request */
	uint64_t init_unique;
	bool init_seen; /* init_unique is the INIT request's */
	struct pt_replica *replicas[PT_BUCKETS]; /* ns_lock */
	pthread_cond_t ready; /* with ns_lock: a fill or a settle ended */
	/* Whether a read lease tells that no writer's file is left on a
	 * replica (probe()); without, a written one is kept until unmount. */
	bool lease_probe;
	atomic_uint_fast64_t opens, refusals, bytes, files, min_size;
	atomic_uint_fast64_t held, settled; /* kept past the last close */
	uint64_t sweeps; /* ns_lock */
} pt = {
	.ready = PTHREAD_COND_INITIALIZER,
};

atomic_uint_fast64_t tfs_read_requests;

/* The open whose reply this thread is about to send (tfs_pt_reply()). */
static __thread struct {
	uint64_t fh;
	int32_t id;
} pt_reply;

void tfs_pt_configure(enum cfg_passthrough mode, uint64_t min_size)
{
	pt.mode = mode;
	atomic_store(&pt.min_size, min_size);
}

bool tfs_pt_enabled(void)
{
	return atomic_load_explicit(&pt.on, memory_order_relaxed);
}

/* Say once, and only once, why reads keep going through the daemon. */
static void refuse(const char *why, int err)
{
	atomic_store(&pt.on, false);
	atomic_fetch_add(&pt.refusals, 1);
	if (atomic_exchange(&pt.said, true))
		return;
	if (pt.mode == CFG_PASSTHROUGH_ON)
		tfs_warn("passthrough refused: %s%s%s; reads go through the "
			 "daemon", why, err ? ": " : "", err ? strerror(err) : "");
	else
		tfs_info("passthrough off: %s%s%s", why, err ? ": " : "",
			 err ? strerror(err) : "");
}

void tfs_pt_init_request(const void *body, size_t len, uint64_t unique)
{
	struct tfs_fuse_init_in in;

	memset(&in, 0, sizeof(in));
	memcpy(&in, body, len < sizeof(in) ? len : sizeof(in));
	pt.in_flags = in.flags;
	pt.in_flags2 = (in.flags & TFS_FUSE_INIT_EXT) && len >= sizeof(in) ?
			       in.flags2 : 0;
	pt.init_unique = unique;
	pt.init_seen = true;
}

static int backing_open(int fd)
{
	struct tfs_fuse_backing_map map = { .fd = fd };
	int id = ioctl(fuse_session_fd(tfs.se), TFS_FUSE_DEV_IOC_BACKING_OPEN,
		       &map);

	return id < 0 ? -errno : id;
}

static void backing_close(int32_t id)
{
	uint32_t v = (uint32_t)id;

	/* After the session went (tfs_pt_stop() runs before): none. */
	if (tfs.se && ioctl(fuse_session_fd(tfs.se),
			    TFS_FUSE_DEV_IOC_BACKING_CLOSE, &v) < 0)
		tfs_warn("cannot close backing file %d: %s", (int)id,
			 strerror(errno));
}

static int fd_path(int fd, char *buf, size_t len)
{
	int n = snprintf(buf, len, "/proc/self/fd/%d", fd);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* @fd's file opened again, by its /proc path, with @flags. */
static int reopen(int fd, int flags)
{
	char path[64];
	int rc = fd_path(fd, path, sizeof(path)), nfd;

	if (rc)
		return rc;
	nfd = open(path, flags | O_CLOEXEC);
	return nfd < 0 ? -errno : nfd;
}

/*
 * Whether no file is open for writing on the memfd @fd but the one
 * memfd_create() made: 1 yes, 0 no, or -errno. The kernel opens the
 * backing file anew for each passthrough open, with that open's flags,
 * and a mapping holds that file until it is unmapped; a read lease is
 * granted only while no file is open for writing (the memfd_create()
 * one is not counted: lease_probe_works() checks that on this kernel).
 * Taken and given back at once, at a time no open can start (settle()).
 */
static int writers_gone(int fd)
{
	int pfd = reopen(fd, O_RDONLY), rc;

	if (pfd < 0)
		return pfd;
	rc = fcntl(pfd, F_SETLEASE, F_RDLCK);
	if (rc == 0) {
		fcntl(pfd, F_SETLEASE, F_UNLCK);
		rc = 1;
	} else {
		rc = errno == EAGAIN ? 0 : -errno;
	}
	close(pfd);
	return rc;
}

/* Whether writers_gone() tells on this kernel: alone, beside a reader,
 * not beside a second writer, and alone again once it went. */
static bool lease_probe_works(int fd)
{
	int ro = reopen(fd, O_RDONLY), rw = -1;
	bool ok = false;

	if (ro < 0 || writers_gone(fd) != 1)
		goto out;
	rw = reopen(fd, O_RDWR);
	if (rw < 0 || writers_gone(fd) != 0)
		goto out;
	close(rw);
	rw = -1;
	ok = writers_gone(fd) == 1;
out:
	if (rw >= 0)
		close(rw);
	if (ro >= 0)
		close(ro);
	return ok;
}

/*
 * After the kernel took the INIT reply: whether it registers a backing
 * file at all (CAP_SYS_ADMIN, a kernel that set passthrough up).
 */
static void probe(void)
{
	int fd = memfd_create("tierfs-probe", MFD_CLOEXEC);
	int id;

	if (fd < 0) {
		refuse("cannot make a memfd", errno);
		return;
	}
	id = backing_open(fd);
	if (id < 0) {
		close(fd);
		refuse("the kernel refused a backing file", -id);
		return;
	}
	backing_close(id);
	pt.lease_probe = lease_probe_works(fd);
	close(fd);
	if (!pt.lease_probe)
		tfs_notice("passthrough: no read lease on a memfd; a file "
			 "written beside a passthrough reader keeps its replica "
			 "until unmount");
	atomic_store(&pt.on, true);
	tfs_info("passthrough on: the kernel reads host-tier files opened "
		 "read-only itself");
}

bool tfs_pt_init_reply(uint64_t unique, void *body, size_t len)
{
	enum tfs_pt_init r;

	if (pt.mode == CFG_PASSTHROUGH_OFF || !pt.init_seen ||
	    unique != pt.init_unique)
		return false;
	pt.init_seen = false;
	r = tfs_pt_patch_init(body, len, pt.in_flags, pt.in_flags2);
	switch (r) {
	case TFS_PT_ASKED:
		return true;
	case TFS_PT_NO_KERNEL:
		refuse("the kernel does not offer it (Linux 6.9 and "
		       "CONFIG_FUSE_PASSTHROUGH have it)", 0);
		break;
	case TFS_PT_WRITEBACK:
		refuse("the writeback cache is on", 0);
		break;
	case TFS_PT_SHORT:
		refuse("libfuse's INIT reply is too short", 0);
		break;
	}
	return false;
}

void tfs_pt_init_done(void)
{
	probe();
}

void tfs_pt_reply(const struct tfs_file *f)
{
	pt_reply.fh = (uintptr_t)f;
	pt_reply.id = f->pt != TFS_PT_NONE ? f->pt_id : 0;
}

void tfs_pt_reply_done(void)
{
	pt_reply.id = 0;
}

void tfs_pt_patch_reply(struct iovec *iov, int count)
{
	struct tfs_fuse_out_header h;
	struct iovec *last;

	if (pt_reply.id <= 0 || count < 2 || iov[0].iov_len < sizeof(h))
		return;
	memcpy(&h, iov[0].iov_base, sizeof(h));
	last = &iov[count - 1];
	/* An OPEN's reply ends with its fuse_open_out, a CREATE's too. */
	if (h.error || last->iov_len < sizeof(struct tfs_fuse_open_out))
		return;
	if (tfs_pt_patch_open((char *)last->iov_base + last->iov_len -
				      sizeof(struct tfs_fuse_open_out),
			      sizeof(struct tfs_fuse_open_out), pt_reply.fh,
			      pt_reply.id))
		pt_reply.id = 0;
}

static struct pt_replica **slot_locked(uint64_t ino)
{
	struct pt_replica **pp = &pt.replicas[ino % PT_BUCKETS];

	while (*pp && (*pp)->ino != ino)
		pp = &(*pp)->next;
	return pp;
}

/*
 * Copy [off, off + len) of the store's bytes into @r and give it the
 * store's size. Called with r->lock held.
 */
static int copy_in(struct pt_replica *r, uint64_t off, uint64_t len)
{
	struct iovec iov[PT_IOV_MAX];
	uint64_t size = tier_buf_size(r->buf), end;
	int rc = 0;

	if (size != r->size) {
		if (ftruncate(r->fd, (off_t)size) < 0)
			return -errno;
		atomic_fetch_add(&pt.bytes, size - r->size);
		/* Host memory holding the file: the host limit counts it. */
		tier_store_charge_outside(tfs.store,
					  (int64_t)size - (int64_t)r->size);
		r->size = size;
	}
	end = off + len < off || off + len > size ? size : off + len;
	while (off < end) {
		size_t want = end - off > TFS_IO_MAX ? TFS_IO_MAX : end - off;
		ssize_t n, w;
		int niov;

		n = tier_buf_read_iov_as(r->buf, want, (off_t)off, iov,
					 PT_IOV_MAX, &niov, TIER_READ_NOACCESS);
		if (n > 0) {
			w = pwritev(r->fd, iov, niov, (off_t)off);
			rc = w < 0 ? -errno : 0;
			tier_buf_read_done(r->buf);
		} else if (n == -EAGAIN) {
			void *buf = tfs_reply_buf();

			if (!buf)
				return -ENOMEM;
			n = tier_buf_read_as(r->buf, buf, want, (off_t)off,
					     TIER_READ_NOACCESS);
			if (n <= 0)
				return n < 0 ? (int)n : -EIO;
			w = pwrite(r->fd, buf, (size_t)n, (off_t)off);
			rc = w < 0 ? -errno : 0;
		} else {
			/* Shorter than its size said: truncated meanwhile,
			 * and that truncate's copy comes after this one. */
			return n < 0 ? (int)n : 0;
		}
		if (rc)
			return rc;
		if (w < n)
			return -EIO;
		off += (uint64_t)w;
	}
	return 0;
}

static void replica_free(struct pt_replica *r)
{
	if (r->id > 0)
		backing_close(r->id);
	if (r->fd >= 0)
		close(r->fd);
	if (r->rofd >= 0)
		close(r->rofd);
	atomic_fetch_sub(&pt.bytes, r->size);
	tier_store_charge_outside(tfs.store, -(int64_t)r->size);
	atomic_fetch_sub(&pt.files, 1);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* Make, fill and register the replica @r, in the table but not ready:
 * only this thread sets its fd and id. */
static int replica_fill(struct pt_replica *r)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	r->fd = memfd_create("tierfs-passthrough", MFD_CLOEXEC);
	rc = r->fd < 0 ? -errno : copy_in(r, 0, UINT64_MAX);
	pthread_mutex_unlock(&r->lock);
	if (rc)
		return rc;
	/*
	 * The kernel gets a read-only descriptor of it, which protects
	 * nothing: it opens the backing file anew for each open, with that
	 * open's flags, and maps that. What a writer's shared mapping
	 * writes lands here, not in the store: the wr flag and settle().
	 */
	r->rofd = reopen(r->fd, O_RDONLY);
	if (r->rofd < 0)
		return r->rofd;
	rc = backing_open(r->rofd);
	if (rc < 0) {
		/* EPERM, ENOTTY, ...: the kernel takes none at all. */
		if (rc != -ENOMEM && rc != -EMFILE && rc != -ENFILE)
			refuse("the kernel refused a backing file", -rc);
		return rc;
	}
	r->id = rc;
	return 0;
}

bool tfs_pt_eligible(struct tfs_inode *i, bool readonly)
{
	struct tier_buf_stat st;

	if (!readonly || !tfs_pt_enabled() || tier_buf_held(i->buf))
		return false;
	tier_buf_stat(i->buf, &st);
	return st.tier == TFS_TIER_HOST && st.gpu < 0 &&
	       st.size >= atomic_load(&pt.min_size);
}

void tfs_pt_open_locked(struct tfs_inode *i, struct tfs_file *f,
			bool readonly, bool eligible)
{
	struct pt_replica **pp, *r;

	f->pt = TFS_PT_NONE;
	f->pt_rep = NULL;
	f->pt_fill = false;
	/* One being settled is copied back and dropped, or kept: after
	 * that, this open joins what is left. */
	for (;;) {
		pp = slot_locked(i->ino);
		r = *pp;
		if (!r || !r->settling)
			break;
		pthread_cond_wait(&pt.ready, &tfs.ns_lock);
	}
	if (r) {
		/* A fill that failed: the opens that waited for it go
		 * through the page cache, and so does this one. */
		if (r->ready && r->id <= 0)
			return;
		if (!r->nopen++)
			atomic_fetch_sub(&pt.held, 1);
		/* Its shared mappings write the replica (settle()). */
		if (!readonly)
			r->wr = true;
		f->pt_rep = r;
		f->pt = readonly ? TFS_PT_READ : TFS_PT_DIRECT;
		return;
	}
	/* Opens through the page cache: none beside them. */
	if (!eligible || i->nopen || !tfs_pt_enabled())
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->ino = i->ino;
	r->buf = i->buf;
	r->fd = -1;
	r->rofd = -1;
	r->nopen = 1;
	pthread_mutex_init(&r->lock, NULL);
	atomic_fetch_add(&pt.files, 1);
	r->next = *pp;
	*pp = r;
	f->pt_rep = r;
	f->pt_fill = true;
	f->pt = TFS_PT_READ;
}

/* Take @r out of the table and free it, once no copy into it runs.
 * Called with ns_lock held, which it drops. */
static void replica_drop_locked(struct tier_buf *buf, struct pt_replica *r)
{
	struct pt_replica **pp;

	for (pp = slot_locked(r->ino); *pp && *pp != r;)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
	while (r->refs) {
		tfs_ns_unlock();
		usleep(100);
		tfs_ns_lock();
	}
	tfs_ns_unlock();
	/* Changes through direct_io never reached the page cache. */
	tier_buf_cache_stale(buf);
	replica_free(r);
}

/* What copy_back() compares at once: a page of a mapping. */
#define PT_CMP_BLOCK 4096u

/*
 * Write into the store those blocks of @len bytes of @rep at @off (the
 * replica's) that differ from @st (the store's, @slen of them), each run
 * of them in one write; adds their bytes to *@changed.
 */
static int write_changed(struct tier_buf *b, const char *rep, const char *st,
			 size_t len, size_t slen, uint64_t off,
			 uint64_t *changed)
{
	size_t k = 0, run, blk = 0;
	ssize_t w;

	for (; k < len; k = run + blk) {
		/* [k, run) differs; the block at run, if any, does not. */
		for (run = k; run < len; run += blk) {
			blk = len - run < PT_CMP_BLOCK ? len - run :
							 PT_CMP_BLOCK;
			if (run + blk <= slen &&
			    !memcmp(rep + run, st + run, blk))
				break;
		}
		if (run >= len)
			blk = 0;
		if (run == k)
			continue;
		w = tier_buf_write(b, rep + k, run - k, (off_t)(off + k));
		if (w < 0)
			return (int)w;
		*changed += run - k;
	}
	return 0;
}

/*
 * Copy the bytes of @r that differ from the store's back into it (so that
 * a file a writer did not change stays clean, and where it is), up to the
 * smaller of the two sizes (a truncate from a path that came meanwhile
 * stays), skipping the replica's holes (where the store has none of its
 * own: every byte the store had was copied in). Sets *@changed to the
 * bytes written. Called with r->settling set and no open.
 */
static int copy_back(struct pt_replica *r, uint64_t *changed)
{
	uint64_t end, off = 0;
	char *buf = malloc(2 * (size_t)TFS_IO_MAX), *sbuf = buf + TFS_IO_MAX;
	int rc = 0;

	*changed = 0;
	if (!buf)
		return -ENOMEM;
	pthread_mutex_lock(&r->lock);
	end = tier_buf_size(r->buf);
	if (end > r->size)
		end = r->size;
	while (off < end && !rc) {
		off_t d = lseek(r->fd, (off_t)off, SEEK_DATA), h;

		if (d < 0) {
			rc = errno == ENXIO ? 0 : -errno;
			break;
		}
		h = lseek(r->fd, d, SEEK_HOLE);
		if (h < 0) {
			rc = -errno;
			break;
		}
		if ((uint64_t)h > end)
			h = (off_t)end;
		for (off = (uint64_t)d; off < (uint64_t)h;) {
			uint64_t left = (uint64_t)h - off;
			size_t want = left > TFS_IO_MAX ? TFS_IO_MAX : left;
			ssize_t n = pread(r->fd, buf, want, (off_t)off), s;

			if (n <= 0) {
				rc = n < 0 ? -errno : -EIO;
				break;
			}
			s = tier_buf_read_as(r->buf, sbuf, (size_t)n, (off_t)off,
					     TIER_READ_NOACCESS);
			rc = write_changed(r->buf, buf, sbuf, (size_t)n,
					   s > 0 ? (size_t)s : 0, off, changed);
			if (rc)
				break;
			off += (uint64_t)n;
		}
	}
	pthread_mutex_unlock(&r->lock);
	free(buf);
	return rc;
}

/*
 * A written replica with no open left: when no writer's file remains on
 * it (a mapping keeps one past the close), copy it back into the store
 * and drop it; else keep it, with its backing id, as the file's bytes:
 * the next open of the inode joins it, and a later settle() (the next
 * last close, a stats read, unmount) tries again. Called with
 * r->settling set (so no open starts) and ns_lock not held.
 */
static void settle(struct tfs_inode *i, struct pt_replica *r, bool kept)
{
	uint64_t changed = 0;
	int gone = 0, rc = 0;

	/* Under the replica's lock: its ftruncate (a copy in) breaks the
	 * lease, which would signal this process. */
	pthread_mutex_lock(&r->lock);
	if (pt.lease_probe)
		gone = writers_gone(r->fd);
	pthread_mutex_unlock(&r->lock);

	if (gone == 1) {
		rc = copy_back(r, &changed);
		if (rc)
			tfs_err("cannot copy the passthrough replica of inode "
				"%llu back: %s; it stays the file's bytes",
				(unsigned long long)r->ino, strerror(-rc));
	} else if (gone < 0) {
		tfs_warn("cannot tell whether a mapping writes the "
			 "passthrough replica of inode %llu: %s",
			 (unsigned long long)r->ino, strerror(-gone));
	}
	tfs_ns_lock();
	r->settling = false;
	pthread_cond_broadcast(&pt.ready);
	if (gone != 1 || rc) {
		if (!kept)
			atomic_fetch_add(&pt.held, 1);
		tfs_ns_unlock();
		return;
	}
	if (kept)
		atomic_fetch_sub(&pt.held, 1);
	atomic_fetch_add(&pt.settled, 1);
	/* For the placing and saving that follow a written file's close. */
	if (changed)
		i->flags |= TFS_I_DIRTY;
	replica_drop_locked(i->buf, r);
}

/* Drop @r's open; the last one takes it out and frees it, or, when a
 * writer joined it, settles it. */
static void replica_put(struct tfs_inode *i, struct pt_replica *r)
{
	tfs_ns_lock();
	if (--r->nopen) {
		tfs_ns_unlock();
		return;
	}
	if (r->wr && r->id > 0) {
		r->settling = true;
		tfs_ns_unlock();
		settle(i, r, false);
		return;
	}
	replica_drop_locked(i->buf, r);
}

void tfs_pt_open_finish(struct tfs_inode *i, struct tfs_file *f)
{
	struct pt_replica *r = f->pt_rep;
	int rc = 0;

	if (!r)
		return;
	if (f->pt_fill) {
		rc = replica_fill(r);
		tfs_ns_lock();
		r->ready = true;
		pthread_cond_broadcast(&pt.ready);
		tfs_ns_unlock();
		if (rc)
			tfs_debug("no passthrough for inode %llu: %s",
				  (unsigned long long)i->ino, strerror(-rc));
	} else {
		tfs_ns_lock();
		while (!r->ready)
			pthread_cond_wait(&pt.ready, &tfs.ns_lock);
		tfs_ns_unlock();
	}
	if (r->id <= 0) {
		f->pt = TFS_PT_NONE;
		f->pt_rep = NULL;
		replica_put(i, r);
		return;
	}
	f->pt_id = r->id;
	if (f->pt == TFS_PT_READ)
		atomic_fetch_add(&pt.opens, 1);
}

void tfs_pt_release(struct tfs_inode *i, struct tfs_file *f)
{
	if (f->pt_rep)
		replica_put(i, f->pt_rep);
	f->pt_rep = NULL;
	f->pt = TFS_PT_NONE;
}

static void sync_replica(struct pt_replica *r, uint64_t off, uint64_t len)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	/* One being filled: this change is in the store already, and the
	 * fill, which holds the lock, copies what it finds there. */
	rc = r->fd >= 0 ? copy_in(r, off, len) : 0;
	pthread_mutex_unlock(&r->lock);
	if (rc)
		tfs_err("cannot copy a change of inode %llu to its passthrough "
			"replica: %s; readers may see the bytes before it",
			(unsigned long long)r->ino, strerror(-rc));
}

void tfs_pt_sync_ino(uint64_t ino, uint64_t off, uint64_t len)
{
	struct pt_replica *r;

	if (!atomic_load_explicit(&pt.files, memory_order_relaxed))
		return;
	tfs_ns_lock();
	r = *slot_locked(ino);
	if (r)
		r->refs++;
	tfs_ns_unlock();
	if (!r)
		return;
	sync_replica(r, off, len);
	tfs_ns_lock();
	r->refs--;
	tfs_ns_unlock();
}

void tfs_pt_sync(struct tfs_inode *i, uint64_t off, uint64_t len)
{
	if (S_ISREG(i->mode))
		tfs_pt_sync_ino(i->ino, off, len);
}

/*
 * Settle each replica kept past its last close, once: a munmap sends
 * nothing, so this is how a replica whose mappings are gone goes back.
 */
static void sweep(void)
{
	uint64_t gen;

	if (!atomic_load(&pt.held))
		return;
	tfs_ns_lock();
	gen = ++pt.sweeps;
	tfs_ns_unlock();
	for (unsigned b = 0; b < PT_BUCKETS; b++) {
		for (;;) {
			struct pt_replica *r;
			struct tfs_inode *i = NULL;

			tfs_ns_lock();
			for (r = pt.replicas[b]; r; r = r->next) {
				if (r->nopen || r->settling || r->swept == gen ||
				    !r->wr || r->id <= 0)
					continue;
				i = tfs_inode_get_locked(r->ino);
				if (i)
					break;
			}
			if (!r) {
				tfs_ns_unlock();
				break;
			}
			r->swept = gen;
			r->settling = true;
			tfs_ns_unlock();
			settle(i, r, true);
		}
	}
}

ssize_t tfs_pt_read(struct tfs_file *f, void *buf, size_t size, off_t off)
{
	struct pt_replica *r = f->pt_rep;
	ssize_t n;
	bool wr;

	if (!r || f->pt != TFS_PT_DIRECT)
		return -ENOENT;
	tfs_ns_lock();
	wr = r->wr;
	tfs_ns_unlock();
	if (!wr)
		return -ENOENT;
	pthread_mutex_lock(&r->lock);
	n = pread(r->fd, buf, size, off);
	if (n < 0)
		n = -errno;
	pthread_mutex_unlock(&r->lock);
	return n;
}

bool tfs_pt_written(struct tfs_inode *i)
{
	struct pt_replica *r;
	bool wr;

	if (!atomic_load_explicit(&pt.files, memory_order_relaxed))
		return false;
	tfs_ns_lock();
	r = *slot_locked(i->ino);
	wr = r && r->wr;
	tfs_ns_unlock();
	return wr;
}

void tfs_pt_forget(uint64_t ino)
{
	struct pt_replica *r;

	if (!atomic_load(&pt.files))
		return;
	tfs_ns_lock();
	for (;;) {
		r = *slot_locked(ino);
		if (!r || !r->settling)
			break;
		pthread_cond_wait(&pt.ready, &tfs.ns_lock);
	}
	if (!r) {
		tfs_ns_unlock();
		return;
	}
	/* Its file is gone: its bytes with it. */
	if (r->wr && !r->nopen)
		atomic_fetch_sub(&pt.held, 1);
	replica_drop_locked(r->buf, r);
}

void tfs_pt_stop(void)
{
	struct pt_replica *list = NULL, *r, *next;

	tfs_ns_lock();
	for (unsigned b = 0; b < PT_BUCKETS; b++) {
		for (r = pt.replicas[b]; r; r = next) {
			next = r->next;
			r->next = list;
			list = r;
		}
		pt.replicas[b] = NULL;
	}
	tfs_ns_unlock();
	/* Unmounted: no mapping is left, and no open. A signal may end
	 * the daemon before: then what it has is the best there is. */
	for (r = list; r; r = next) {
		uint64_t changed;
		int rc = 0;

		next = r->next;
		if (r->wr && r->id > 0)
			rc = copy_back(r, &changed);
		if (rc)
			tfs_err("cannot copy the passthrough replica of inode "
				"%llu back: %s", (unsigned long long)r->ino,
				strerror(-rc));
		replica_free(r);
	}
	atomic_store(&pt.held, 0);
}

size_t tfs_pt_stats(char *buf, size_t len)
{
	int n;

	sweep();
	n = snprintf(buf, len,
		     "passthrough=%s\npassthrough.opens=%" PRIu64
		     "\npassthrough.refusals=%" PRIu64
		     "\npassthrough.files=%" PRIu64
		     "\npassthrough.bytes=%" PRIu64
		     "\npassthrough.held=%" PRIu64
		     "\npassthrough.settled=%" PRIu64
		     "\nread_requests=%" PRIu64 "\n",
		     tfs_pt_enabled() ? "on" : "off",
		     (uint64_t)atomic_load(&pt.opens),
		     (uint64_t)atomic_load(&pt.refusals),
		     (uint64_t)atomic_load(&pt.files),
		     (uint64_t)atomic_load(&pt.bytes),
		     (uint64_t)atomic_load(&pt.held),
		     (uint64_t)atomic_load(&pt.settled),
		     (uint64_t)atomic_load(&tfs_read_requests));

	return n < 0 ? 0 : (size_t)n;
}
