// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * TFS_IOC_PREFETCH: bringing buffers up a tier in the background.
 *
 * A bounded FIFO of buffers, each with the tier asked for and the callers
 * waiting (TFS_PREFETCH_WAIT), drained by one thread of ours that serves
 * no request: a move can take seconds (a large file from lz4 on disk), and
 * a request worker blocked on it would be one fewer for reads. A waiter's
 * request is answered from that thread when its buffer is there, or with
 * the errno that kept it from getting there. A second prefetch of a buffer
 * already queued joins it (asking for a faster tier raises it) instead of
 * taking another slot.
 *
 * Waiting is a blocking ioctl, not poll(): libfuse 3.14 passes FUSE_POLL
 * through, but a regular file is always ready to poll(2) (the kernel's
 * default mask, since tierfs has no poll handler), and a POLLIN that means
 * "prefetched" would change that answer for every program polling these
 * files and cost each of their polls a round trip; and poll has POLLERR
 * where the caller needs the errno.
 *
 * The queue holds no reference of the inode: a buffer being destroyed is
 * taken out first (tfs_prefetch_forget(), which also waits for a move of
 * it in flight). A waiter's open descriptor keeps its own buffer alive.
 *
 * Locks: pf.lock comes before the store's (a stat of the buffer is asked
 * under it), and is never held while a buffer moves or a reply is sent.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_i.h"


struct pf_waiter {
	struct pf_waiter *next;
	fuse_req_t req;
	struct tfs_ioc_prefetch out;
};

struct pf_entry {
	struct pf_entry *next;
	struct tier_buf *buf;
	enum tfs_tier tier;
	uid_t uid; /* who asked first: the move is charged to their share */
	struct pf_waiter *waiters;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake; /* lock: something queued, or stop */
	pthread_cond_t idle; /* lock: busy changed */
	struct pf_entry *head, **tail; /* lock */
	uint32_t pending; /* lock: entries queued */
	/* lock: the most entries queued and not yet started ([policy]
	 * prefetch_queue). A tree of many thousand files is fed in as the
	 * queue drains (tierfsctl waits on its oldest when it is full), so
	 * this bounds memory, not what can be prefetched. */
	uint32_t max;
	struct pf_entry *busy; /* lock: the one moving now */
	bool stop, running;
	pthread_t thread;
	/* lock: queued (entries taken, joins not), done (moved there, or
	 * found there when its turn came), failed, skipped (there when
	 * asked: nothing queued), cancelled (the file went first) */
	uint64_t queued, done, failed, skipped, cancelled;
} pf = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.idle = PTHREAD_COND_INITIALIZER,
	.tail = &pf.head,
};

/* In @tier or a faster one, or with nothing to bring up. */
static bool there(struct tier_buf *b, enum tfs_tier tier)
{
	struct tier_buf_stat st;

	tier_buf_stat(b, &st);
	return st.tier <= tier || !st.size;
}

static void reply(struct pf_waiter *w, int rc)
{
	struct pf_waiter *next;

	for (; w; w = next) {
		next = w->next;
		if (rc < 0) {
			fuse_reply_err(w->req, -rc);
		} else {
			w->out.state = TFS_PREFETCH_DONE;
			fuse_reply_ioctl(w->req, 0, &w->out, sizeof(w->out));
		}
		free(w);
	}
}

static void *pf_main(void *arg)
{
	pthread_mutex_lock(&pf.lock);
	for (;;) {
		struct pf_entry *e;
		int rc = 0;

		while (!pf.head && !pf.stop)
			pthread_cond_wait(&pf.wake, &pf.lock);
		if (pf.stop)
			break;
		e = pf.head;
		pf.head = e->next;
		if (!pf.head)
			pf.tail = &pf.head;
		pf.pending--;
		pf.busy = e;
		pthread_mutex_unlock(&pf.lock);

		/* Resident since it was queued (a read brought it up): done,
		 * without touching its place in the eviction order. */
		if (!there(e->buf, e->tier))
			rc = tier_buf_move_as(e->buf, e->tier, 0, e->uid);
		if (rc < 0)
			tfs_info("prefetch of buffer %" PRIu64 " to %s failed: %s",
				 tier_buf_id(e->buf), tier_name(e->tier),
				 strerror(-rc));

		pthread_mutex_lock(&pf.lock);
		/* Waiters that joined while it moved are in the list too. */
		struct pf_waiter *w = e->waiters;

		pf.busy = NULL;
		if (rc < 0)
			pf.failed++;
		else
			pf.done++;
		pthread_cond_broadcast(&pf.idle);
		pthread_mutex_unlock(&pf.lock);
		reply(w, rc);
		free(e);
		pthread_mutex_lock(&pf.lock);
	}
	pthread_mutex_unlock(&pf.lock);
	return arg;
}

int tfs_prefetch_start(unsigned int max)
{
	int rc;

	pthread_mutex_lock(&pf.lock);
	pf.stop = false;
	pf.max = max;
	pthread_mutex_unlock(&pf.lock);
	rc = pthread_create(&pf.thread, NULL, pf_main, NULL);
	if (rc) {
		tfs_err("cannot start the prefetch thread: %s", strerror(rc));
		return -rc;
	}
	pf.running = true;
	return 0;
}

/* A smaller bound leaves what is queued beyond it queued: only new
 * requests see a full queue until it drains below. */
void tfs_prefetch_set_max(unsigned int max)
{
	pthread_mutex_lock(&pf.lock);
	pf.max = max;
	pthread_mutex_unlock(&pf.lock);
}

/*
 * The session is over: nobody reads the answers, and a reply now would be
 * written to a connection being torn down. fuse_reply_none() frees a
 * request without answering it.
 */
void tfs_prefetch_stop(void)
{
	struct pf_entry *e, *next;

	if (!pf.running)
		return;
	pthread_mutex_lock(&pf.lock);
	pf.stop = true;
	pthread_cond_broadcast(&pf.wake);
	pthread_mutex_unlock(&pf.lock);
	pthread_join(pf.thread, NULL);
	pf.running = false;
	for (e = pf.head; e; e = next) {
		struct pf_waiter *w, *wn;

		next = e->next;
		for (w = e->waiters; w; w = wn) {
			wn = w->next;
			fuse_reply_none(w->req);
			free(w);
		}
		free(e);
	}
	pf.head = NULL;
	pf.tail = &pf.head;
	pf.pending = 0;
}

void tfs_prefetch_forget(struct tier_buf *b)
{
	struct pf_entry **pp, *e, *gone = NULL;

	pthread_mutex_lock(&pf.lock);
	for (pp = &pf.head; (e = *pp);) {
		if (e->buf != b) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		pf.pending--;
		pf.cancelled++;
		e->next = gone;
		gone = e;
	}
	pf.tail = &pf.head;
	for (e = pf.head; e; e = e->next)
		pf.tail = &e->next;
	while (pf.busy && pf.busy->buf == b)
		pthread_cond_wait(&pf.idle, &pf.lock);
	pthread_mutex_unlock(&pf.lock);
	/* A waiter holds a descriptor of its file, so none is left here;
	 * should one be, it hears that the file is gone. */
	for (; gone; gone = e) {
		e = gone->next;
		reply(gone->waiters, -ENOENT);
		free(gone);
	}
}

int tfs_prefetch(fuse_req_t req, struct tier_buf *b, enum tfs_tier tier,
		 uid_t uid, struct tfs_ioc_prefetch *out)
{
	struct pf_waiter *w = NULL;
	struct pf_entry *e;
	int rc = 0;

	if (tier == TFS_TIER_DEVICE && tier_store_default_gpu(tfs.store) < 0)
		return -ENODEV;
	if (req) {
		w = calloc(1, sizeof(*w));
		if (!w)
			return -ENOMEM;
		w->req = req;
	}
	pthread_mutex_lock(&pf.lock);
	/* Asked under the lock: a move ending in between cannot then be
	 * missed (the worker takes it to count the entry done). */
	if (there(b, tier)) {
		pf.skipped++;
		out->state = TFS_PREFETCH_THERE;
		out->pending = pf.pending;
		rc = 1;
		goto out_unlock;
	}
	if (pf.stop || !pf.running) {
		rc = -ESHUTDOWN;
		goto out_unlock;
	}
	e = pf.busy && pf.busy->buf == b && pf.busy->tier <= tier ? pf.busy :
								     NULL;
	for (struct pf_entry *q = pf.head; !e && q; q = q->next)
		if (q->buf == b)
			e = q;
	if (e && e != pf.busy && tier < e->tier)
		e->tier = tier;
	if (!e) {
		if (pf.pending >= pf.max) {
			rc = -EAGAIN;
			goto out_unlock;
		}
		e = calloc(1, sizeof(*e));
		if (!e) {
			rc = -ENOMEM;
			goto out_unlock;
		}
		e->buf = b;
		e->tier = tier;
		e->uid = uid;
		*pf.tail = e;
		pf.tail = &e->next;
		pf.pending++;
		pf.queued++;
		pthread_cond_signal(&pf.wake);
	}
	out->state = TFS_PREFETCH_QUEUED;
	out->pending = pf.pending;
	if (w) {
		w->out = *out;
		w->next = e->waiters;
		e->waiters = w;
		w = NULL;
	}
out_unlock:
	pthread_mutex_unlock(&pf.lock);
	free(w);
	return rc;
}

size_t tfs_prefetch_stats(char *buf, size_t len)
{
	int n;

	pthread_mutex_lock(&pf.lock);
	n = snprintf(buf, len,
		     "prefetch.queued=%" PRIu64 "\n"
		     "prefetch.done=%" PRIu64 "\n"
		     "prefetch.failed=%" PRIu64 "\n"
		     "prefetch.skipped=%" PRIu64 "\n"
		     "prefetch.cancelled=%" PRIu64 "\n"
		     "prefetch.pending=%" PRIu32 "\n"
		     "prefetch.active=%d\n"
		     "prefetch.max=%" PRIu32 "\n",
		     pf.queued, pf.done, pf.failed, pf.skipped, pf.cancelled,
		     pf.pending,
		     pf.busy != NULL, pf.max);
	pthread_mutex_unlock(&pf.lock);
	return n > 0 ? (size_t)n : 0;
}
