// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The write policy ([policy] write, user.tierfs.write_policy). write_back
 * is the store's model: a buffer's bytes go down only when it is evicted.
 * write_through makes the disk copy in the background soon after the last
 * close (tier_buf_register()) of a written buffer, so that its later
 * eviction from the device or host only drops a copy, and a device that
 * fails loses none of it. The copy is an ordinary clean lower copy, the
 * one a spill makes: the next write drops it and the next close queues
 * the buffer again.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "config/log.h"
#include "tiers/store_i.h"

static bool write_through(const struct tier_store *s, const struct tier_buf *b)
{
	return b->wpol == TIER_WRITE_THROUGH ||
	       (b->wpol == TIER_WRITE_DEFAULT && s->write_through);
}

void tier_buf_set_write_policy(struct tier_buf *b, enum tier_write_policy p)
{
	pthread_mutex_lock(&b->s->lock);
	b->wpol = (uint8_t)p;
	pthread_mutex_unlock(&b->s->lock);
}

enum tier_write_policy tier_buf_write_policy(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	enum tier_write_policy p = write_through(s, b) ? TIER_WRITE_THROUGH :
							 TIER_WRITE_BACK;
	pthread_mutex_unlock(&s->lock);
	return p;
}

enum tier_write_policy tier_store_write_policy(struct tier_store *s)
{
	pthread_mutex_lock(&s->lock);
	bool wt = s->write_through;
	pthread_mutex_unlock(&s->lock);
	return wt ? TIER_WRITE_THROUGH : TIER_WRITE_BACK;
}

void st_wt_queue(struct tier_buf *b)
{
	struct tier_store *s = b->s;

	pthread_mutex_lock(&s->lock);
	if (b->wt_queued || b->dead || !s->disk || !write_through(s, b))
		goto out;
	if (s->nwtq == s->wtq_cap) {
		size_t cap = s->wtq_cap ? 2 * s->wtq_cap : 64;
		struct tier_buf **q = realloc(s->wtq, cap * sizeof(*q));

		/* Without room to queue it, the buffer is written back as
		 * before: nothing is lost, the eviction costs a write. */
		if (!q) {
			s->wt_errors++;
			goto out;
		}
		s->wtq = q;
		s->wtq_cap = cap;
	}
	s->wtq[s->nwtq++] = b;
	b->wt_queued = true;
	pthread_cond_signal(&s->spill_wake);
out:
	pthread_mutex_unlock(&s->lock);
}

/* s->lock held. Take @b off the queue. */
static void wt_unqueue(struct tier_store *s, size_t i)
{
	s->wtq[i]->wt_queued = false;
	memmove(&s->wtq[i], &s->wtq[i + 1],
		(s->nwtq - i - 1) * sizeof(*s->wtq));
	s->nwtq--;
}

void st_wt_forget(struct tier_store *s, struct tier_buf *b)
{
	if (!b->wt_queued)
		return;
	for (size_t i = 0; i < s->nwtq; i++) {
		if (s->wtq[i] == b) {
			wt_unqueue(s, i);
			return;
		}
	}
}

/* Keys the sketch is sized for: 64k files in 128 KiB. More files share
 * counters, which only ever makes an estimate higher. */
#define SKETCH_ITEMS 65536

bool st_admit_config(struct tier_store *s, bool on)
{
	if (!on) {
		pol_sketch_destroy(&s->sketch);
		return true;
	}
	if (s->sketch.rows)
		return true;
	return !pol_sketch_init(&s->sketch, SKETCH_ITEMS);
}

void st_admit_count(struct tier_store *s, struct tier_buf *b)
{
	if (s->sketch.rows)
		pol_sketch_add(&s->sketch, b->id);
}

bool st_admit(struct tier_store *s, struct tier_buf *b, unsigned int g,
	      uint64_t need)
{
	struct st_gpu *gp = &s->gpus[g];
	struct pol_item *it = NULL;

	/* Up to the spiller's target there is room: above it, the spiller
	 * would push the coldest out just the same. */
	if (!s->sketch.rows ||
	    gp->used + need <= (uint64_t)(s->target * (double)gp->limit))
		return true;
	/* The first buffer of this GPU eviction would take. */
	while ((it = pol_victim(&s->pol, TFS_TIER_DEVICE, it)))
		if (((struct tier_buf *)it)->dgi == g && it != &b->pi)
			break;
	if (!it || pol_admit(pol_sketch_estimate(&s->sketch, b->id),
			     pol_sketch_estimate(&s->sketch,
						 ((struct tier_buf *)it)->id)))
		return true;
	s->admit_rejects++;
	return false;
}

bool st_wt_run(struct tier_store *s)
{
	bool did = false;

	for (size_t i = 0; i < s->nwtq && !s->stop;) {
		struct tier_buf *b = s->wtq[i];

		/* Busy (a reader, a writer, an eviction): next time. */
		if (b->io_refs || b->staging ||
		    pthread_rwlock_trywrlock(&b->lock)) {
			i++;
			continue;
		}
		wt_unqueue(s, i);
		s->wt_active++;
		pthread_mutex_unlock(&s->lock);
		int rc = 0;
		uint64_t size = b->size, id = b->id;

		if (!b->dobj && !b->dirty && !b->wc && size &&
		    (b->has_host || b->dmem))
			rc = st_disk_spill(b);
		else
			size = 0;
		st_publish(b);
		pthread_mutex_lock(&s->lock);
		s->wt_active--;
		if (rc) {
			s->wt_errors++;
		} else if (size) {
			s->wt_copies++;
			s->wt_bytes += size;
		}
		/* Unlocking under s->lock keeps @b alive, as in st_shrink. */
		pthread_rwlock_unlock(&b->lock);
		if (rc && rc != -ENOSPC) {
			pthread_mutex_unlock(&s->lock);
			tfs_warn("cannot write buffer %" PRIu64 " through to "
				 "disk: %s", id, strerror(-rc));
			pthread_mutex_lock(&s->lock);
		}
		did = true;
		/* The queue may have changed while s->lock was dropped. */
		i = 0;
	}
	return did;
}
