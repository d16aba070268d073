// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The disk tier's per-thread scratch buffers and its worker pool, which
 * compresses and decompresses runs of chunks in parallel (see disk.c).
 */
#include "tiers/disk_i.h"

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static __thread struct scratch *tls_scratch;

static void scratch_free(void *p)
{
	struct scratch *s = p;

	free(s->in);
	free(s->out);
	free(s->lz4_state);
	free(s);
}

static void scratch_key_init(void)
{
	if (pthread_key_create(&scratch_key, scratch_free))
		abort();
}

/* This thread's scratch with room for a stored chunk of @cs (and, when
 * @want_out, a decoded one); NULL when out of memory. */
struct scratch *scratch_get(uint32_t cs, bool want_out)
{
	struct scratch *s = tls_scratch;
	size_t in_need = HDR + (size_t)LZ4_compressBound((int)cs);

	if (!s) {
		pthread_once(&scratch_once, scratch_key_init);
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		s->lz4_state = malloc((size_t)LZ4_sizeofState());
		if (!s->lz4_state || pthread_setspecific(scratch_key, s)) {
			free(s->lz4_state);
			free(s);
			return NULL;
		}
		tls_scratch = s;
	}
	if (s->in_cap < in_need) {
		char *p = malloc(in_need);

		if (!p)
			return NULL;
		free(s->in);
		s->in = p;
		s->in_cap = in_need;
	}
	if (want_out && s->out_cap < cs) {
		char *p = malloc(cs);

		if (!p)
			return NULL;
		free(s->out);
		s->out = p;
		s->out_cap = cs;
	}
	return s;
}

/* --- worker pool --- */

static void job_claim_locked(struct pool *p, struct pool_job *job,
			     size_t *item)
{
	*item = job->next++;
	if (job->next == job->n) {
		struct pool_job **pp = &p->queue;

		while (*pp != job)
			pp = &(*pp)->link;
		*pp = job->link;
	}
}

static void *pool_worker(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct pool_job *job = p->queue;
		size_t item;

		if (!job) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->work_cv, &p->lock);
			continue;
		}
		job_claim_locked(p, job, &item);
		pthread_mutex_unlock(&p->lock);
		job->fn(job, item);
		pthread_mutex_lock(&p->lock);
		/* After this the submitter may return and free @job. */
		if (++job->done == job->n)
			pthread_cond_broadcast(&p->done_cv);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void pool_start(struct pool *p)
{
	cpu_set_t set;
	unsigned int want = 0;

	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 1)
		want = (unsigned int)CPU_COUNT(&set) - 1;
	if (want > MAX_POOL_THREADS)
		want = MAX_POOL_THREADS;
	for (p->nthreads = 0; p->nthreads < want; p->nthreads++) {
		if (pthread_create(&p->threads[p->nthreads], NULL, pool_worker,
				   p)) {
			tfs_warn("cannot start disk tier worker %u of %u: "
				 "compressing with fewer threads",
				 p->nthreads + 1, want);
			break;
		}
	}
}

void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->work_cv);
	pthread_mutex_destroy(&p->lock);
}

/* Run every item of @job, on the pool and on this thread; returns when all
 * have finished. */
void pool_run(struct pool *p, struct pool_job *job)
{
	size_t item;

	job->next = 0;
	job->done = 0;
	if (!job->n)
		return;
	pthread_mutex_lock(&p->lock);
	job->link = p->queue;
	p->queue = job;
	if (p->nthreads && job->n > 1) {
		if (job->n - 1 >= p->nthreads)
			pthread_cond_broadcast(&p->work_cv);
		else
			for (size_t i = 0; i < job->n - 1; i++)
				pthread_cond_signal(&p->work_cv);
	}
	while (job->next < job->n) {
		job_claim_locked(p, job, &item);
		pthread_mutex_unlock(&p->lock);
		job->fn(job, item);
		pthread_mutex_lock(&p->lock);
		job->done++;
	}
	while (job->done < job->n)
		pthread_cond_wait(&p->done_cv, &p->lock);
	pthread_mutex_unlock(&p->lock);
}
