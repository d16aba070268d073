// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cuda backend's copies: a pool of slots (a non-blocking stream, two
 * pinned staging buffers and three events each), the table of host ranges
 * page-locked through host_register, and batches of copies that take one
 * slot and wait once. Split from device_cuda.c, whose top comment says why
 * the backend is built this way; shared state is in device_cuda_i.h.
 *
 * Concurrency: a batch holds its slot for its whole duration, so no two
 * calls share a stream or a staging buffer; pool_lock is held only to take
 * or return a slot, the range table's lock only to look up or change it.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cuda_runtime_api.h>

#include "config/log.h"
#include "tiers/device_cuda_i.h"

/* --- the slot pool -------------------------------------------------------- */

/* What the copies did (struct cuda_copy_counts); atomic. */
static unsigned long n_waits, n_direct, n_staged;

void cuda_copy_counts(struct cuda_copy_counts *out)
{
	out->waits = __atomic_load_n(&n_waits, __ATOMIC_RELAXED);
	out->direct = __atomic_load_n(&n_direct, __ATOMIC_RELAXED);
	out->staged = __atomic_load_n(&n_staged, __ATOMIC_RELAXED);
}

/* Take a free entry of the mask *@free, waiting for one. pool_lock held. */
static int pool_take(struct cuda_dev *d, unsigned int *free)
{
	int i;

	while (!*free)
		pthread_cond_wait(&d->pool_cond, &d->pool_lock);
	i = __builtin_ctz(*free);
	*free &= ~(1u << i);
	return i;
}

struct cuda_slot *cuda_slot_get(struct cuda_dev *d)
{
	int i;

	pthread_mutex_lock(&d->pool_lock);
	i = pool_take(d, &d->pool_free);
	pthread_mutex_unlock(&d->pool_lock);
	return &d->slots[i];
}

/*
 * Return a slot. The caller has synchronised its stream: a slot goes back
 * with no copy in flight, or the next user would overwrite staging that a
 * DMA still reads.
 */
void cuda_slot_put(struct cuda_dev *d, struct cuda_slot *s)
{
	unsigned int i = (unsigned int)(s - d->slots);

	pthread_mutex_lock(&d->pool_lock);
	d->pool_free |= 1u << i;
	pthread_cond_broadcast(&d->pool_cond);
	pthread_mutex_unlock(&d->pool_lock);
}

struct cuda_stage *cuda_stage_get(struct cuda_dev *d)
{
	int i;

	pthread_mutex_lock(&d->pool_lock);
	i = pool_take(d, &d->stage_free);
	pthread_mutex_unlock(&d->pool_lock);
	return &d->stages[i];
}

/* With no copy through it in flight, as a slot. */
void cuda_stage_put(struct cuda_dev *d, struct cuda_stage *g)
{
	unsigned int i = (unsigned int)(g - d->stages);

	pthread_mutex_lock(&d->pool_lock);
	d->stage_free |= 1u << i;
	pthread_cond_broadcast(&d->pool_cond);
	pthread_mutex_unlock(&d->pool_lock);
}

/*
 * How long a copy's waiter polls before it sleeps. Not measured: there was
 * no GPU to measure on when this was written, so the reasoning is below and
 * the number wants checking with tests/gpu/run.sh.
 *
 * The runtime's default (cudaDeviceScheduleAuto with one context) spins in
 * cudaEventSynchronize for the whole copy. The daemon runs a FUSE thread per
 * request, the spiller and lz4 workers on machines with a few cores;
 * several slots spinning would take those cores from the threads that feed
 * or drain the copies. cudaDeviceScheduleBlockingSync fixes that but pays a wakeup (an
 * interrupt, then a futex) on every wait; batches wait once, but a staged
 * copy still waits once per 2 MiB chunk, some 40-80 us of DMA, and a wakeup
 * of 5-20 us would cost a good part of the 0.8x of raw cudaMemcpy.
 *
 * So neither, per wait: poll cudaEventQuery, yielding the CPU between polls,
 * for about the length of one staging chunk's DMA, then block in
 * cudaEventSynchronize, which sleeps because the slot's events are created
 * with cudaEventBlockingSync. The device flag stays as it is: it is process
 * wide, so every other wait would sleep too.
 */
#define CUDA_SPIN_NS (100 * 1000)

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Wait for @ev: poll for CUDA_SPIN_NS, then sleep (see CUDA_SPIN_NS). */
cudaError_t cuda_event_wait(cudaEvent_t ev)
{
	uint64_t until = 0;
	cudaError_t e;

	__atomic_add_fetch(&n_waits, 1, __ATOMIC_RELAXED);
	for (;;) {
		e = cudaEventQuery(ev);
		if (e != cudaErrorNotReady)
			return e;
		/* Clocks cost a syscall-free vDSO read, queries a driver
		 * call: start the clock only once a wait is not instant. */
		if (!until)
			until = now_ns() + CUDA_SPIN_NS;
		else if (now_ns() >= until)
			break;
		sched_yield();
	}
	return cudaEventSynchronize(ev);
}

/* --- page-locked host ranges ---------------------------------------------- */

/*
 * Host ranges page-locked by host_register, sorted by base and never
 * overlapping (cudaHostRegister refuses overlaps), one table for every
 * instance in the process: ranges are registered portable, so a copy by
 * any GPU's instance goes direct, whichever instance registered them (the
 * store registers its pool with its default GPU's). Entries are added
 * after cudaHostRegister succeeds and removed before cudaHostUnregister,
 * so a range in the table is always page-locked.
 */
static struct {
	pthread_rwlock_t lock;
	struct cuda_reg *reg; /* lock */
	size_t n, cap; /* lock */
} regs = { .lock = PTHREAD_RWLOCK_INITIALIZER };

/* Index of the first entry whose base is above @p. regs.lock. */
static size_t reg_upper(uintptr_t p)
{
	size_t lo = 0, hi = regs.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (regs.reg[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Is all of [p, p + len) inside one range page-locked by host_register?
 * Anything else (a FUSE buffer, a small file's malloc'd chunk) is staged,
 * which is always correct. */
static bool host_registered(const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;
	bool ok = false;

	pthread_rwlock_rdlock(&regs.lock);
	if (regs.n && a) {
		size_t i = reg_upper(a);

		if (i) {
			const struct cuda_reg *r = &regs.reg[i - 1];

			ok = a - r->base <= r->len && len <= r->len - (a - r->base);
		}
	}
	pthread_rwlock_unlock(&regs.lock);
	return ok;
}

/* Add [base, base + len) for @d. Write side of regs.lock. */
static int reg_insert(const struct cuda_dev *d, uintptr_t base, size_t len)
{
	size_t i;

	if (regs.n == regs.cap) {
		size_t cap = regs.cap ? regs.cap * 2 : 64;
		struct cuda_reg *r = realloc(regs.reg, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		regs.reg = r;
		regs.cap = cap;
	}
	i = reg_upper(base);
	memmove(&regs.reg[i + 1], &regs.reg[i], (regs.n - i) * sizeof(*regs.reg));
	regs.reg[i] = (struct cuda_reg){ base, len, d };
	regs.n++;
	return 0;
}

/* Forget @d's range starting at @base; its length, or 0 if there was none.
 * Write side of regs.lock. */
static size_t reg_remove(const struct cuda_dev *d, uintptr_t base)
{
	size_t i = reg_upper(base), len;

	if (!i || regs.reg[i - 1].base != base || regs.reg[i - 1].owner != d)
		return 0;
	len = regs.reg[i - 1].len;
	memmove(&regs.reg[i - 1], &regs.reg[i], (regs.n - i) * sizeof(*regs.reg));
	regs.n--;
	if (!regs.n) {
		free(regs.reg);
		regs.reg = NULL;
		regs.cap = 0;
	}
	return len;
}

/* One at a time: no CUDA call under the table's lock. */
size_t cuda_regs_drop(struct cuda_dev *d)
{
	size_t n = 0;

	for (;;) {
		uintptr_t base = 0;

		pthread_rwlock_wrlock(&regs.lock);
		for (size_t i = 0; !base && i < regs.n; i++)
			if (regs.reg[i].owner == d)
				base = regs.reg[i].base;
		if (base)
			reg_remove(d, base);
		pthread_rwlock_unlock(&regs.lock);
		if (!base)
			break;
		cudaHostUnregister((void *)base);
		n++;
	}
	(void)cudaGetLastError();
	return n;
}

/* --- the slots' streams, events and staging ------------------------------- */

/*
 * Staging buffers are cudaHostAlloc'd, which allocates and locks their pages
 * at once, in this thread: on the GPU's node when this thread's memory
 * policy prefers it for the call. Set for the calls and put back.
 */
static void stage_policy(int node, bool set)
{
	unsigned long mask = node >= 0 && node < 64 ? 1ul << node : 0;

	if (!mask)
		return;
	if (set ? syscall(SYS_set_mempolicy, MPOL_PREFERRED, &mask,
			  sizeof(mask) * 8) :
		  syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0))
		tfs_debug("cuda: set_mempolicy for node %d: %s", node,
			  strerror(errno));
}

void cuda_slots_destroy(struct cuda_dev *d)
{
	int i, j;

	for (i = 0; i < CUDA_SLOTS; i++) {
		struct cuda_slot *s = &d->slots[i];

		/* Idle streams, every slot back: nothing to wait for. */
		if (s->stream && !dev_failed(d) &&
		    cudaStreamQuery(s->stream) == cudaErrorNotReady)
			cudaStreamSynchronize(s->stream);
		if (s->fin)
			cudaEventDestroy(s->fin);
		if (s->stream)
			cudaStreamDestroy(s->stream);
	}
	for (i = 0; i < CUDA_STAGES; i++) {
		struct cuda_stage *g = &d->stages[i];

		for (j = 0; j < 2; j++) {
			if (g->done[j])
				cudaEventDestroy(g->done[j]);
			if (g->buf[j])
				cudaFreeHost(g->buf[j]);
		}
	}
	(void)cudaGetLastError();
}

int cuda_slots_create(struct cuda_dev *d, char *err, size_t errlen)
{
	const unsigned int evflags =
		cudaEventDisableTiming | cudaEventBlockingSync;
	cudaError_t e;
	int i, j;

	for (i = 0; i < CUDA_SLOTS; i++) {
		struct cuda_slot *s = &d->slots[i];

		e = cudaStreamCreateWithFlags(&s->stream,
					      cudaStreamNonBlocking);
		if (e != cudaSuccess)
			return cuda_init_fail(e, "cudaStreamCreateWithFlags",
					      err, errlen);
		e = cudaEventCreateWithFlags(&s->fin, evflags);
		if (e != cudaSuccess)
			return cuda_init_fail(e, "cudaEventCreateWithFlags",
					      err, errlen);
	}
	stage_policy(d->numa_node, true);
	for (i = 0, e = cudaSuccess; i < CUDA_STAGES && !e; i++)
		for (j = 0; j < 2 && !e; j++)
			e = cudaHostAlloc(&d->stages[i].buf[j], CUDA_CHUNK,
					  cudaHostAllocDefault);
	stage_policy(d->numa_node, false);
	if (e != cudaSuccess)
		return cuda_init_fail(e, "cudaHostAlloc", err, errlen);
	for (i = 0; i < CUDA_STAGES; i++) {
		struct cuda_stage *g = &d->stages[i];

		for (j = 0; j < 2; j++) {
			e = cudaEventCreateWithFlags(&g->done[j], evflags);
			if (e != cudaSuccess)
				return cuda_init_fail(e,
						      "cudaEventCreateWithFlags",
						      err, errlen);
		}
	}
	_Static_assert(CUDA_SLOTS <= 32 && CUDA_STAGES <= 32, "pool masks");
	d->pool_free = CUDA_SLOTS == 32 ? ~0u : (1u << CUDA_SLOTS) - 1;
	d->stage_free = (1u << CUDA_STAGES) - 1;
	return 0;
}

/* --- placing and page-locking host memory --------------------------------- */

int cuda_numa_node(int gpu)
{
	const char *v = getenv("TFS_CUDA_NUMA_NODE");
	char bus[32], path[96];
	int node = -1;
	FILE *f;

	if (v && *v)
		return atoi(v);
	if (cudaDeviceGetPCIBusId(bus, sizeof(bus), gpu) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	/* The runtime spells it "0000:1B:00.0"; sysfs in lower case. */
	for (char *c = bus; *c; c++)
		if (*c >= 'A' && *c <= 'F')
			*c = (char)(*c - 'A' + 'a');
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node;
}

struct touch {
	volatile char *p;
	size_t len;
};

/*
 * Fault a range in for writing, keeping its bytes: the store may already
 * write into the first chunk of a slab while the pinner touches the rest.
 * An atomic add of 0 where the kernel has no MADV_POPULATE_WRITE (before
 * 5.14, or a sandbox) faults the page as a write and changes nothing.
 */
static void *touch_main(void *arg)
{
	struct touch *t = arg;

#ifdef MADV_POPULATE_WRITE
	if (!madvise((void *)t->p, t->len, MADV_POPULATE_WRITE))
		return NULL;
#endif
	for (size_t at = 0; at < t->len; at += 4096)
		__atomic_fetch_add((char *)t->p + at, 0, __ATOMIC_RELAXED);
	return NULL;
}

/* Ranges below this are touched by the caller alone: a thread costs more. */
#define TOUCH_PER_THREAD ((size_t)16 << 20)
#define TOUCH_THREADS 8

void cuda_host_place(void *p, size_t len, int node)
{
	pthread_t t[TOUCH_THREADS];
	struct touch w[TOUCH_THREADS];
	unsigned int n = (unsigned int)(len / TOUCH_PER_THREAD), started = 0;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (node >= 0 && node < 64 && !((uintptr_t)p & 4095)) {
		unsigned long mask = 1ul << node;

		/* Preferred, not bound: a full node spills to the next one
		 * rather than failing the fault. Pages already there stay. */
		if (syscall(SYS_mbind, p, len, MPOL_PREFERRED, &mask,
			    sizeof(mask) * 8, 0))
			tfs_debug("cuda: mbind of %zu bytes to node %d: %s",
				  len, node, strerror(errno));
	}
	if (n > TOUCH_THREADS)
		n = TOUCH_THREADS;
	if (cpus > 0 && n > (unsigned int)cpus)
		n = (unsigned int)cpus;
	if (n < 2) {
		struct touch one = { p, len };

		touch_main(&one);
		return;
	}
	/* Whole pages to each; the last takes the rest. */
	size_t per = (len / n) & ~(size_t)4095;

	for (unsigned int i = 0; i < n; i++) {
		w[i].p = (volatile char *)p + i * per;
		w[i].len = i == n - 1 ? len - i * per : per;
		if (i && !pthread_create(&t[started], NULL, touch_main, &w[i]))
			started++;
		else if (i)
			touch_main(&w[i]);
	}
	touch_main(&w[0]);
	for (unsigned int i = 0; i < started; i++)
		pthread_join(t[i], NULL);
}

/* Page-lock [ptr, ptr + len) for every GPU's context and enter it in the
 * table: 0, or -errno with the first failure logged. */
static int host_lock(struct cuda_dev *d, void *ptr, size_t len)
{
	cudaError_t e;
	char why[256];
	int rc;

	if (dev_failed(d))
		return -ENODEV;
	/* Portable: page-locked for every GPU's context, not only d's. */
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaHostRegister(ptr, len, cudaHostRegisterPortable);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e))
			return cuda_dev_fail(d, e, "cudaHostRegister");
		rc = cuda_errno(e);
		if (__atomic_fetch_add(&d->reg_failed, 1, __ATOMIC_RELAXED) == 0)
			tfs_warn("cuda: cudaHostRegister of %zu bytes: %s; host copies stay pageable and are staged",
				 len, cuda_describe(e, why, sizeof(why)));
		return rc ? rc : -EIO;
	}
	pthread_rwlock_wrlock(&regs.lock);
	rc = reg_insert(d, (uintptr_t)ptr, len);
	pthread_rwlock_unlock(&regs.lock);
	if (rc) {
		cudaHostUnregister(ptr);
		(void)cudaGetLastError();
	}
	return rc;
}

/*
 * Page-lock host memory. Every range would fail for the same reason (the
 * system refusing to lock more memory, a driver without support), so only
 * the first failure is logged; destroy counts the rest. The store carries
 * on with the memory pageable, and copies of it are staged. The pages are
 * placed on the GPU's node and faulted in first (cuda_host_place).
 */
int cuda_host_register(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);

	if (!ptr || !len)
		return -EINVAL;
	if (dev_failed(d))
		return -ENODEV;
	cuda_host_place(ptr, len, d->numa_node);
	return host_lock(d, ptr, len);
}

/* --- the pinner thread ---------------------------------------------------- */

static void host_unlock(struct cuda_dev *d, void *ptr);

/*
 * Page-locking a 64 MiB slab, and unlocking it, takes milliseconds (every
 * page faulted in, mapped for the device, and back), and the store maps
 * and unmaps its pool's slabs in a writer's path, under the buffer's lock.
 * host_register_async and host_release queue that work here instead. The
 * NUMA policy is set at once, before anyone touches the range, so that the
 * writer's own first pages land on the GPU's node too.
 */
static void *pinner_main(void *arg)
{
	struct cuda_dev *d = arg;
	struct cuda_pin_job *j;

	pthread_mutex_lock(&d->pin_lock);
	for (;;) {
		while (!d->pin_head && !d->pin_stop)
			pthread_cond_wait(&d->pin_wake, &d->pin_lock);
		j = d->pin_head;
		if (!j)
			break;
		d->pin_head = j->next;
		if (!d->pin_head)
			d->pin_tail = &d->pin_head;
		d->pin_busy = j->ptr;
		pthread_mutex_unlock(&d->pin_lock);

		if (j->release) {
			host_unlock(d, j->ptr);
			munmap(j->ptr, j->len);
		} else {
			cuda_host_place(j->ptr, j->len, -1);
			host_lock(d, j->ptr, j->len);
		}
		free(j);

		pthread_mutex_lock(&d->pin_lock);
		d->pin_busy = NULL;
		pthread_cond_broadcast(&d->pin_wake);
	}
	pthread_mutex_unlock(&d->pin_lock);
	return NULL;
}

int cuda_pinner_start(struct cuda_dev *d)
{
	int rc;

	d->pin_tail = &d->pin_head;
	rc = -pthread_create(&d->pinner, NULL, pinner_main, d);
	d->pinner_started = !rc;
	return rc;
}

void cuda_pinner_stop(struct cuda_dev *d)
{
	if (!d->pinner_started)
		return;
	pthread_mutex_lock(&d->pin_lock);
	d->pin_stop = true;
	pthread_cond_broadcast(&d->pin_wake);
	pthread_mutex_unlock(&d->pin_lock);
	pthread_join(d->pinner, NULL);
	d->pinner_started = false;
}

void cuda_pins_wait(struct cuda_dev *d)
{
	pthread_mutex_lock(&d->pin_lock);
	while (d->pin_head || d->pin_busy)
		pthread_cond_wait(&d->pin_wake, &d->pin_lock);
	pthread_mutex_unlock(&d->pin_lock);
}

static int pin_queue(struct cuda_dev *d, void *ptr, size_t len, bool release)
{
	struct cuda_pin_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->ptr = ptr;
	j->len = len;
	j->release = release;
	pthread_mutex_lock(&d->pin_lock);
	*d->pin_tail = j;
	d->pin_tail = &j->next;
	pthread_cond_broadcast(&d->pin_wake);
	pthread_mutex_unlock(&d->pin_lock);
	return 0;
}

int cuda_host_register_async(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);
	int node = d->numa_node;

	if (!ptr || !len)
		return -EINVAL;
	if (dev_failed(d))
		return -ENODEV;
	if (!d->pinner_started)
		return cuda_host_register(dev, ptr, len);
	/* The policy now, before the caller's first write faults a page. */
	if (node >= 0 && node < 64 && !((uintptr_t)ptr & 4095)) {
		unsigned long mask = 1ul << node;

		if (syscall(SYS_mbind, ptr, len, MPOL_PREFERRED, &mask,
			    sizeof(mask) * 8, 0))
			tfs_debug("cuda: mbind of %zu bytes to node %d: %s",
				  len, node, strerror(errno));
	}
	return pin_queue(d, ptr, len, false);
}

/*
 * Unregister and unmap on the pinner, in order after the range's own
 * register. Without memory for the job, here: slow, but never a leak of
 * page-locked memory.
 */
void cuda_host_release(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);

	if (!ptr || !len)
		return;
	if (!d->pinner_started || pin_queue(d, ptr, len, true)) {
		cuda_host_unregister(dev, ptr, len);
		munmap(ptr, len);
	}
}

/*
 * The store calls this for everything it unmaps, registered or not (a
 * failed register leaves memory pageable); only ours go to the runtime, so
 * never-registered memory leaves no error behind. The caller guarantees no
 * copy of it is in flight: it is unmapped next.
 */
static void host_unlock(struct cuda_dev *d, void *ptr)
{
	cudaError_t e;
	char why[256];
	size_t had;

	pthread_rwlock_wrlock(&regs.lock);
	had = reg_remove(d, (uintptr_t)ptr);
	pthread_rwlock_unlock(&regs.lock);
	if (!had || dev_failed(d))
		return;
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaHostUnregister(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e))
			cuda_dev_fail(d, e, "cudaHostUnregister");
		else if (!__atomic_exchange_n(&d->unreg_warned, true,
					      __ATOMIC_RELAXED))
			tfs_warn("cuda: cudaHostUnregister of %zu bytes: %s",
				 had, cuda_describe(e, why, sizeof(why)));
	}
}

/* A range queued for the pinner is registered, or released, first. */
void cuda_host_unregister(struct tier_dev *dev, void *ptr, size_t len)
{
	struct cuda_dev *d = to_cdev(dev);

	if (d->pinner_started)
		cuda_pins_wait(d);
	host_unlock(d, ptr);
}

/* --- batched copies ------------------------------------------------------- */

/*
 * One batch of copies on one slot's stream. Direct pieces (host memory
 * page-locked by host_register) are queued as they come; staged pieces go
 * through a staging pair's two pinned buffers in turns, taken at the first
 * such piece, waiting only when a buffer comes round again. The batch ends
 * with one event and one wait.
 */
struct xfer {
	struct cuda_dev *d;
	struct cuda_slot *s;
	struct cuda_stage *g; /* taken at the first staged piece */
	char *dev; /* the allocation's first byte */
	bool busy[2]; /* g->buf[i] has a queued copy not yet waited for */
	char *out[2]; /* d2h: where g->buf[i]'s bytes go once it is done */
	size_t out_len[2];
	int next; /* the staging buffer to use next */
	int rc;
};

/* Wait for staging buffer @b and, for a read, copy its bytes out. */
static int stage_drain(struct xfer *x, int b, uint64_t off)
{
	cudaError_t e;

	if (!x->busy[b])
		return 0;
	e = cuda_event_wait(x->g->done[b]);
	if (e != cudaSuccess)
		return cuda_copy_fail(x->d, e, "staged copy", CUDA_CHUNK,
				      off);
	if (x->out[b])
		memcpy(x->out[b], x->g->buf[b], x->out_len[b]);
	x->busy[b] = false;
	x->out[b] = NULL;
	return 0;
}

/* Queue one piece of at most CUDA_CHUNK through staging. */
static int stage_one(struct xfer *x, void *host, size_t n, uint64_t off,
		     bool d2h)
{
	struct cuda_slot *s = x->s;
	int b, rc;
	cudaError_t e;

	if (!x->g)
		x->g = cuda_stage_get(x->d);
	b = x->next;
	x->next ^= 1;
	rc = stage_drain(x, b, off);
	if (rc)
		return rc;
	if (d2h) {
		e = cudaMemcpyAsync(x->g->buf[b], x->dev + off, n,
				    cudaMemcpyDeviceToHost, s->stream);
		x->out[b] = host;
		x->out_len[b] = n;
	} else {
		memcpy(x->g->buf[b], host, n);
		e = cudaMemcpyAsync(x->dev + off, x->g->buf[b], n,
				    cudaMemcpyHostToDevice, s->stream);
	}
	if (e == cudaSuccess)
		e = cudaEventRecord(x->g->done[b], s->stream);
	if (e != cudaSuccess) {
		x->out[b] = NULL;
		return cuda_copy_fail(x->d, e,
				      d2h ? "cudaMemcpyAsync d2h" :
					    "cudaMemcpyAsync h2d",
				      n, off);
	}
	__atomic_add_fetch(&n_staged, 1, __ATOMIC_RELAXED);
	x->busy[b] = true;
	return 0;
}

/* Queue one segment. */
static int xfer_seg(struct xfer *x, const struct tier_dev_seg *g, bool d2h)
{
	struct cuda_slot *s = x->s;
	cudaError_t e;
	size_t at;
	int rc;

	if (!g->len)
		return 0;
	if (!d2h && !g->host) {
		/* A slot's stream, not the legacy default stream, which
		 * would serialise with every other copy on the device. */
		e = cudaMemsetAsync(x->dev + g->off, 0, g->len, s->stream);
		return e == cudaSuccess ? 0 :
					  cuda_copy_fail(x->d, e, "cudaMemsetAsync",
							 g->len, g->off);
	}
	if (host_registered(g->host, g->len)) {
		/* One DMA of the whole range, as raw cudaMemcpy does. */
		e = d2h ? cudaMemcpyAsync(g->host, x->dev + g->off, g->len,
					  cudaMemcpyDeviceToHost, s->stream) :
			  cudaMemcpyAsync(x->dev + g->off, g->host, g->len,
					  cudaMemcpyHostToDevice, s->stream);
		if (e == cudaSuccess)
			__atomic_add_fetch(&n_direct, 1, __ATOMIC_RELAXED);
		return e == cudaSuccess ? 0 :
					  cuda_copy_fail(x->d, e,
							 d2h ? "cudaMemcpyAsync d2h" :
							       "cudaMemcpyAsync h2d",
							 g->len, g->off);
	}
	for (at = 0; at < g->len; at += CUDA_CHUNK) {
		size_t n = g->len - at < CUDA_CHUNK ? g->len - at : CUDA_CHUNK;

		rc = stage_one(x, (char *)g->host + at, n, g->off + at, d2h);
		if (rc)
			return rc;
	}
	return 0;
}

static int cuda_xfer(struct tier_dev *dev, struct tier_dmem *dm,
		     const struct tier_dev_seg *seg, unsigned int n, bool d2h)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	struct xfer x = { .d = d, .dev = m->ptr };
	uint64_t first = n ? seg[0].off : 0;
	size_t total = 0;
	cudaError_t e;
	unsigned int i;
	int rc = 0;

	for (i = 0; i < n; i++) {
		if (!in_range(m, seg[i].len, seg[i].off))
			return -EINVAL;
		/* Into a hole of a sparse allocation: the store populates
		 * first; the zero granule there is read-only. */
		if (!d2h && !cuda_vmm_writable(m, seg[i].len, seg[i].off))
			return -EINVAL;
		total += seg[i].len;
	}
	if (dev_failed(d))
		return -EIO;
	/* The bytes change: readers to come need a snapshot of their own.
	 * The caller holds the buffer's lock for writing. */
	if (!d2h && total)
		m->snap_id = 0;
	e = cuda_enter(d);
	if (e != cudaSuccess)
		return cuda_copy_fail(d, e, "cudaSetDevice", 0, 0);
	x.s = cuda_slot_get(d);
	for (i = 0; i < n && !rc; i++)
		rc = xfer_seg(&x, &seg[i], d2h);
	if (!rc) {
		/* The stream runs in order: its last event covers it all. */
		e = cudaEventRecord(x.s->fin, x.s->stream);
		if (e == cudaSuccess)
			e = cuda_event_wait(x.s->fin);
		if (e != cudaSuccess)
			rc = cuda_copy_fail(d, e,
					    d2h ? "d2h copy" : "h2d copy",
					    total, first);
	}
	if (!rc) {
		for (i = 0; i < 2; i++)
			if (x.out[i])
				memcpy(x.out[i], x.g->buf[i], x.out_len[i]);
	} else if (!dev_failed(d)) {
		/* A DMA may still target staging: drain before reuse. */
		cudaStreamSynchronize(x.s->stream);
		(void)cudaGetLastError();
	}
	if (x.g)
		cuda_stage_put(d, x.g);
	cuda_slot_put(d, x.s);
	return rc;
}

int cuda_readv(struct tier_dev *dev, struct tier_dmem *m,
		      const struct tier_dev_seg *seg, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		if (seg[i].len && !seg[i].host)
			return -EINVAL;
	return cuda_xfer(dev, m, seg, n, true);
}

int cuda_writev(struct tier_dev *dev, struct tier_dmem *m,
		       const struct tier_dev_seg *seg, unsigned int n)
{
	return cuda_xfer(dev, m, seg, n, false);
}

int cuda_read(struct tier_dev *dev, struct tier_dmem *m, void *dst,
		     size_t len, uint64_t off)
{
	struct tier_dev_seg g = { .host = dst, .len = len, .off = off };

	return len ? cuda_readv(dev, m, &g, 1) :
		     (in_range(to_cmem(m), 0, off) ? 0 : -EINVAL);
}

int cuda_write(struct tier_dev *dev, struct tier_dmem *m,
		      const void *src, size_t len, uint64_t off)
{
	struct tier_dev_seg g = { .host = (void *)src, .len = len, .off = off };

	if (!len)
		return in_range(to_cmem(m), 0, off) ? 0 : -EINVAL;
	if (!src)
		return -EINVAL;
	return cuda_writev(dev, m, &g, 1);
}

int cuda_zero(struct tier_dev *dev, struct tier_dmem *m, size_t len,
		     uint64_t off)
{
	struct tier_dev_seg g = { .host = NULL, .len = len, .off = off };

	return len ? cuda_writev(dev, m, &g, 1) :
		     (in_range(to_cmem(m), 0, off) ? 0 : -EINVAL);
}

/* --- copies between GPUs -------------------------------------------------- */

/*
 * Can @src's copy engine write @dst's memory directly? The answer is the
 * hardware's (NVLink, or PCIe under one switch) and does not change, but
 * the copy only goes straight when peer access is enabled in the context
 * that issues it (src's): enabled here on the first yes, once per pair.
 */
bool cuda_can_peer(struct tier_dev *src, struct tier_dev *dst)
{
	struct cuda_dev *s = to_cdev(src), *d = to_cdev(dst);
	uint64_t bit = d->gpu < 64 ? (uint64_t)1 << d->gpu : 0;
	cudaError_t e;
	int can = 0;

	if (s->gpu == d->gpu)
		return true;
	if (dev_failed(s) || dev_failed(d))
		return false;
	if (bit && (__atomic_load_n(&s->peer_on, __ATOMIC_ACQUIRE) & bit))
		return true;
	e = cudaDeviceCanAccessPeer(&can, s->gpu, d->gpu);
	if (e != cudaSuccess || !can) {
		(void)cudaGetLastError();
		return false;
	}
	e = cuda_enter(s);
	if (e == cudaSuccess)
		e = cudaDeviceEnablePeerAccess(d->gpu, 0);
	if (e == cudaErrorPeerAccessAlreadyEnabled)
		e = cudaSuccess;
	if (e != cudaSuccess) {
		char why[256];

		(void)cudaGetLastError();
		if (cuda_sticky(s, e))
			cuda_dev_fail(s, e, "cudaDeviceEnablePeerAccess");
		else
			tfs_warn("cuda: gpu %d cannot enable peer access to gpu %d: %s; copies between them go through host memory",
				 s->gpu, d->gpu,
				 cuda_describe(e, why, sizeof(why)));
		return false;
	}
	if (bit)
		__atomic_or_fetch(&s->peer_on, bit, __ATOMIC_RELEASE);
	return true;
}

/* Copy [off, off + len) from @sm to @dm through host memory, a chunk at
 * a time, each copy its own GPU's. */
static int peer_bounce(struct tier_dev *src, struct tier_dmem *sm,
		       struct tier_dev *dst, struct tier_dmem *dm, size_t len,
		       uint64_t off)
{
	void *buf = malloc(CUDA_CHUNK);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t at = 0; !rc && at < len; at += CUDA_CHUNK) {
		size_t n = len - at < CUDA_CHUNK ? len - at : CUDA_CHUNK;

		rc = cuda_read(src, sm, buf, n, off + at);
		if (!rc)
			rc = cuda_write(dst, dm, buf, n, off + at);
	}
	free(buf);
	return rc;
}

/* One cudaMemcpyPeerAsync on a slot of @src's, waited for once. */
int cuda_copy_peer(struct tier_dev *src, struct tier_dmem *sdm,
		   struct tier_dev *dst, struct tier_dmem *ddm, size_t len,
		   uint64_t off)
{
	struct cuda_dev *s = to_cdev(src), *d = to_cdev(dst);
	struct cuda_dmem *sm = to_cmem(sdm), *dm = to_cmem(ddm);
	struct cuda_slot *slot;
	cudaError_t e;
	int rc = 0;

	if (!in_range(sm, len, off) || !in_range(dm, len, off) ||
	    !cuda_vmm_writable(dm, len, off))
		return -EINVAL;
	if (dev_failed(s) || dev_failed(d))
		return -ENODEV;
	if (!len)
		return 0;
	/*
	 * A sparse allocation's mappings give access to its own GPU only, and
	 * a peer copy with peer access enabled has one GPU's engine touch the
	 * other's memory: through host memory instead, each side by its own.
	 */
	if ((sm->vmm || dm->vmm) && s->gpu != d->gpu)
		return peer_bounce(src, sdm, dst, ddm, len, off);
	dm->snap_id = 0;
	e = cuda_enter(s);
	if (e != cudaSuccess)
		return cuda_copy_fail(s, e, "cudaSetDevice", 0, 0);
	slot = cuda_slot_get(s);
	e = cudaMemcpyPeerAsync((char *)dm->ptr + off, d->gpu,
				(char *)sm->ptr + off, s->gpu, len,
				slot->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(slot->fin, slot->stream);
	if (e == cudaSuccess)
		e = cuda_event_wait(slot->fin);
	if (e != cudaSuccess) {
		rc = cuda_copy_fail(s, e, "peer copy", len, off);
		if (!dev_failed(s)) {
			cudaStreamSynchronize(slot->stream);
			(void)cudaGetLastError();
		}
	}
	cuda_slot_put(s, slot);
	return dev_failed(s) || dev_failed(d) ? -ENODEV : rc;
}
