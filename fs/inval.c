// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Telling the kernel what the store changed behind its caches.
 *
 * The kernel keeps a file's pages across opens (keep_cache) and its
 * attributes for as long as tierfs says, because every change but the
 * store's own comes through it. The store reports its own (a spill to disk,
 * a GPU commit, a new tier) through a callback made from inside its locks,
 * often in a request handler. The notification cannot be sent from there:
 * invalidating pages locks each one, and a page being read stays locked
 * until a worker answers the read, which may be waiting for the lock this
 * thread holds, or be this very request. So the callback only queues the
 * inode, and one thread of ours that holds no lock and serves no request
 * sends the notifications.
 *
 * Nothing is lost when a notification comes late: a spill's is about
 * memory, an attribute's about st_blocks, and for changed bytes the next
 * open drops the pages anyway (tier_buf_opened()); the queue only shortens
 * how long a descriptor opened earlier may see the old ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs_i.h"

struct inval {
	uint64_t ino;
	unsigned int what; /* TIER_INVAL_* */
};

/* A queue drained all at once: the thread swaps the arrays. */
static struct {
	pthread_mutex_t lock; /* a leaf: taken under the store's locks */
	pthread_cond_t wake;
	struct inval *q; /* lock */
	size_t n, cap; /* lock */
	uint64_t dropped; /* lock: lost to a failed allocation */
	bool stop; /* lock */
	bool running;
	pthread_t thread;
} iq = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
};

void tfs_inval_queue(void *ctx, uint64_t ino, unsigned int what)
{
	pthread_mutex_lock(&iq.lock);
	if (iq.stop)
		goto out;
	/* A spill of many files, or a file moving twice, often repeats the
	 * last inode: one notification does for both. */
	if (iq.n && iq.q[iq.n - 1].ino == ino) {
		iq.q[iq.n - 1].what |= what;
		goto out;
	}
	if (iq.n == iq.cap) {
		size_t cap = iq.cap ? iq.cap * 2 : 256;
		struct inval *q = realloc(iq.q, cap * sizeof(*q));

		if (!q) {
			iq.dropped++;
			goto out;
		}
		iq.q = q;
		iq.cap = cap;
	}
	iq.q[iq.n++] = (struct inval){ ino, what };
	if (iq.n == 1)
		pthread_cond_signal(&iq.wake);
out:
	pthread_mutex_unlock(&iq.lock);
}

static void send_one(const struct inval *e)
{
	/* Pages only when the bytes changed or left memory; a negative
	 * offset invalidates the attributes alone, which locks no page. */
	off_t off = e->what & (TIER_INVAL_DATA | TIER_INVAL_GONE) ? 0 : -1;
	int rc;

	/* A GPU program's bytes: a passthrough replica takes them too. */
	if (e->what & TIER_INVAL_DATA)
		tfs_pt_sync_ino(e->ino, 0, UINT64_MAX);
	rc = fuse_lowlevel_notify_inval_inode(tfs.se, e->ino, off, 0);
	/* ENOENT: the kernel holds no inode for it, so nothing is cached. */
	if (rc && rc != -ENOENT)
		tfs_debug("cannot invalidate the kernel's cache of inode %llu: "
			  "%s", (unsigned long long)e->ino, strerror(-rc));
}

static void *inval_main(void *arg)
{
	struct inval *q = NULL;
	size_t n, cap = 0;
	uint64_t dropped;

	pthread_mutex_lock(&iq.lock);
	for (;;) {
		while (!iq.n && !iq.stop)
			pthread_cond_wait(&iq.wake, &iq.lock);
		if (iq.stop)
			break;
		struct inval *full = iq.q;
		size_t full_cap = iq.cap;

		n = iq.n;
		iq.q = q;
		iq.cap = cap;
		iq.n = 0;
		q = full;
		cap = full_cap;
		dropped = iq.dropped;
		iq.dropped = 0;
		pthread_mutex_unlock(&iq.lock);
		if (dropped)
			tfs_warn("out of memory: %llu changes of the store were "
				 "not passed on to the kernel's cache",
				 (unsigned long long)dropped);
		for (size_t k = 0; k < n; k++) {
			/* An exiting session serves no reads: a page one of
			 * them locked would never be let go. */
			if (fuse_session_exited(tfs.se))
				break;
			send_one(&q[k]);
		}
		pthread_mutex_lock(&iq.lock);
	}
	pthread_mutex_unlock(&iq.lock);
	free(q);
	return NULL;
}

void tfs_inval_attr(fuse_ino_t ino)
{
	int rc = fuse_lowlevel_notify_inval_inode(tfs.se, ino, -1, 0);

	/* ENOENT: the kernel holds no inode for it, so nothing is cached. */
	if (rc && rc != -ENOENT)
		tfs_warn("cannot invalidate the attributes of inode %llu: %s",
			 (unsigned long long)ino, strerror(-rc));
}

/* The connection's number in fusectl: the minor of the mount's device. */
static unsigned int conn_id;

int tfs_inval_start(unsigned int conn)
{
	int rc;

	conn_id = conn;
	pthread_mutex_lock(&iq.lock);
	iq.stop = false;
	pthread_mutex_unlock(&iq.lock);
	rc = pthread_create(&iq.thread, NULL, inval_main, NULL);
	if (rc)
		return -rc;
	iq.running = true;
	return 0;
}

/*
 * The thread is stuck in a notification: it waits for a page whose read no
 * worker will ever answer, since the session loop has ended while the
 * mount lives on (a signal, and files still open). Closing /dev/fuse would
 * not end it: the stuck write holds the file. Aborting the connection
 * fails the read and lets the page go.
 */
static void abort_conn(void)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort",
		 conn_id);
	tfs_warn("the kernel does not let go of a page it is invalidating: "
		 "aborting the connection");
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		tfs_err("cannot abort the connection through '%s': %s", path,
			strerror(errno));
	if (fd >= 0)
		close(fd);
}

void tfs_inval_stop(void)
{
	struct timespec ts;

	pthread_mutex_lock(&iq.lock);
	iq.stop = true;
	pthread_cond_signal(&iq.wake);
	pthread_mutex_unlock(&iq.lock);
	if (iq.running) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 5;
		if (pthread_timedjoin_np(iq.thread, NULL, &ts)) {
			if (conn_id)
				abort_conn();
			pthread_join(iq.thread, NULL);
		}
	}
	iq.running = false;
	pthread_mutex_lock(&iq.lock);
	free(iq.q);
	iq.q = NULL;
	iq.n = iq.cap = 0;
	pthread_mutex_unlock(&iq.lock);
}
