// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cuda device backend: buffers are cudaMalloc'd in whole 2 MiB blocks,
 * copies are batched on a small pool of non-blocking streams (staged through
 * pinned buffers where the host side is pageable), and exports are CUDA IPC
 * handles. Host memory the store has page-locked through host_register (its
 * pool, host.pinned) is copied directly, without staging.
 *
 * The daemon links the static cudart, so on a machine without a driver every
 * call answers cudaErrorInsufficientDriver and init fails with -ENODEV and
 * that error's name, instead of the daemon failing to start.
 *
 * What the real runtime does that shapes this file:
 *   - cudaMalloc packs allocations under 2 MiB into shared 2 MiB blocks, and
 *     legacy IPC maps the whole block: an importer of a small buffer could
 *     read and write its neighbours. Every allocation is therefore rounded
 *     up to 2 MiB, the Programming Guide's advice for IPC, and the store
 *     charges the rounded size (tier_dmem.granted).
 *   - Errors such as an illegal address, a launch failure or an
 *     uncorrectable ECC error are sticky: they poison the context, every
 *     later call fails the same way, and only a new process recovers. The
 *     first one marks the device failed and is logged once; from then on
 *     every slot fails fast without calling CUDA (see device.h).
 *   - cudaFree synchronises the whole device, so it runs on a thread of our
 *     own rather than under the caller's buffer lock.
 *   - Legacy IPC has no read-only import and cannot be revoked, and freeing
 *     memory an importer still has open is undefined: read exports map
 *     snapshots (shared by the readers of the same bytes), write exports
 *     are detached when their lease ends, and what a handle mapped is
 *     freed only once its importer is gone (see cuda_unexport), counted
 *     meanwhile (export_held).
 *   - A context in exclusive-process compute mode keeps every other process
 *     off the GPU, so no client could map an export: init refuses it.
 *
 * Concurrency: the store calls every slot from several threads at once. A
 * batch of copies takes one slot (a stream and an event) for its whole
 * duration, and a staging pair (two pinned buffers, two events) from its
 * first pageable segment on, so no two calls share a stream or a staging
 * buffer; the pool's mutex is held only to take or return them. Three
 * threads of the backend's own: the freer (cudaFree, parked blocks), the
 * pinner (page-locking and releasing the pool's slabs) and, for a moment,
 * the threads that fault a large range in before it is page-locked.
 *
 * Files: this one has the errors, init and destroy, the freer thread,
 * allocations and exports (snapshots, parked blocks, export_held);
 * device_cuda_copy.c the slots, page-locked host ranges, the pinner and
 * batched copies; device_cuda_i.h what they share.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same on every architecture */
#endif

#include <cuda_runtime_api.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/device_cuda_i.h"

/* --- errors --------------------------------------------------------------- */

/* "what (cudaErrorName, number)" for one error, into @buf. */
const char *cuda_describe(cudaError_t e, char *buf, size_t len)
{
	snprintf(buf, len, "%s (%s, %d)", cudaGetErrorString(e),
		 cudaGetErrorName(e), (int)e);
	return buf;
}

/*
 * One errno per CUDA error that can reach us. Anything unexpected is an
 * I/O error of the device: the store keeps the other copies and reports it.
 */
int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInsufficientDriver:
	case cudaErrorNoDevice:
	case cudaErrorDevicesUnavailable:
	case cudaErrorStubLibrary:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorInitializationError:
		return -ENODEV;
	case cudaErrorInvalidDevice:
		return -ENXIO;
	case cudaErrorInvalidValue:
		return -EINVAL;
	case cudaErrorNotSupported:
	case cudaErrorNotPermitted:
		return -EOPNOTSUPP;
	case cudaErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case cudaErrorHostMemoryNotRegistered:
		return -ENOENT;
	default:
		return -EIO;
	}
}

/*
 * The errors driver_types.h documents as leaving "the process in an
 * inconsistent state": every later call returns them, and only a new
 * process gets a working context.
 */
static bool cuda_sticky_code(cudaError_t e)
{
	switch (e) {
	case cudaErrorECCUncorrectable:
	case cudaErrorNvlinkUncorrectable:
	case cudaErrorContained:
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchTimeout:
	case cudaErrorAssert:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorLaunchFailure:
	case cudaErrorTensorMemoryLeak:
	case cudaErrorMpsClientTerminated:
	case cudaErrorExternalDevice:
	case cudaErrorContextIsDestroyed:
		return true;
	default:
		return false;
	}
}

/* Mark the device failed; the first caller logs why. Returns -EIO. */
int cuda_dev_fail(struct cuda_dev *d, cudaError_t e, const char *call)
{
	char why[256];

	if (!__atomic_exchange_n(&d->failed, true, __ATOMIC_ACQ_REL))
		tfs_err("cuda: gpu %d failed: %s: %s; the device tier is off until tierfs is restarted: files with a host or disk copy stay readable, files only on the gpu read as EIO",
			d->gpu, call, cuda_describe(e, why, sizeof(why)));
	return -EIO;
}

/*
 * Does @e mean the context is gone? The documented codes do; for an error
 * this file does not expect, a cheap call that needs the context tells:
 * on a poisoned context it fails too.
 */
bool cuda_sticky(struct cuda_dev *d, cudaError_t e)
{
	cudaError_t probe;

	if (cuda_sticky_code(e))
		return true;
	if (cuda_errno(e) != -EIO || !d->slots[0].stream)
		return false;
	(void)cudaGetLastError();
	probe = cudaStreamQuery(d->slots[0].stream);
	(void)cudaGetLastError();
	return probe != cudaSuccess && probe != cudaErrorNotReady;
}

/*
 * Fail init: one line "cuda: CALL: what (name, number)" in @err, and the
 * matching errno. The runtime's last error is cleared so a later backend
 * (auto falls back to none) starts clean.
 */
int cuda_init_fail(cudaError_t e, const char *call, char *err, size_t errlen)
{
	char why[256];

	(void)cudaGetLastError();
	snprintf(err, errlen, "cuda: %s: %s", call,
		 cuda_describe(e, why, sizeof(why)));
	return cuda_errno(e);
}

/*
 * A call of a copy failed: a sticky error fails the device (logged once),
 * anything else is logged and becomes -EIO (or -ENODEV when the device went
 * away under us).
 */
int cuda_copy_fail(struct cuda_dev *d, cudaError_t e, const char *what,
		   size_t len, uint64_t off)
{
	char why[256];
	int rc = cuda_errno(e);

	(void)cudaGetLastError();
	if (cuda_sticky(d, e))
		return cuda_dev_fail(d, e, what);
	tfs_err("cuda: %s of %zu bytes at %llu: %s", what, len,
		(unsigned long long)off, cuda_describe(e, why, sizeof(why)));
	return rc == -ENODEV ? rc : -EIO;
}

/* --- the freer thread ----------------------------------------------------- */

/* How often the freer looks whether a parked block's process is gone. */
#define CUDA_PARK_POLL_MS 200

/* Has @g's process exited? A zombie has: its mappings went with its mm. */
static bool park_over(const struct cuda_gone *g)
{
	struct pollfd p = { .fd = g->pidfd, .events = POLLIN };

	if (g->pidfd >= 0)
		return poll(&p, 1, 0) > 0;
	return kill(g->pid, 0) && errno == ESRCH;
}

/* Queue @g's block for the freer. free_lock held. */
static void gone_queue_locked(struct cuda_dev *d, struct cuda_gone *g)
{
	g->next = NULL;
	*d->gone_tail = g;
	d->gone_tail = &g->next;
}

/* The snapshot called @id, or NULL once it is gone. free_lock held. */
static struct cuda_snap *snap_find_locked(struct cuda_dev *d, uint64_t id)
{
	struct cuda_snap *s;

	for (s = id ? d->snaps : NULL; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

/* One more reference to @s, @uid's. 0 or -ENOMEM. free_lock held. */
static int snap_ref_locked(struct cuda_snap *s, uid_t uid)
{
	struct cuda_snap_user *u;
	unsigned int i;

	for (i = 0; i < s->nusers && s->users[i].uid != uid; i++)
		;
	if (i == s->nusers) {
		u = realloc(s->users, (s->nusers + 1) * sizeof(*u));
		if (!u)
			return -ENOMEM;
		s->users = u;
		s->users[s->nusers++] = (struct cuda_snap_user){ uid, 0 };
	}
	s->users[i].refs++;
	s->refs++;
	return 0;
}

/* Drop one of @uid's references to @s; the last one frees it (on the
 * freer thread). free_lock held. */
static void snap_unref_locked(struct cuda_dev *d, struct cuda_snap *s,
			      uid_t uid)
{
	struct cuda_snap **pp;

	for (unsigned int i = 0; i < s->nusers; i++) {
		if (s->users[i].uid != uid)
			continue;
		if (!--s->users[i].refs)
			s->users[i] = s->users[--s->nusers];
		break;
	}
	if (--s->refs)
		return;
	for (pp = &d->snaps; *pp && *pp != s; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = s->next;
	s->gone->ptr = s->ptr;
	s->gone->granted = s->granted;
	s->gone->pid = 0;
	gone_queue_locked(d, s->gone);
	free(s->users);
	free(s);
}

/* A parked record's process is gone: free its block, or drop its
 * snapshot reference. free_lock held. */
static void park_done_locked(struct cuda_dev *d, struct cuda_gone *g)
{
	if (g->pidfd >= 0)
		close(g->pidfd);
	g->pidfd = -1;
	d->parked_bytes -= g->granted;
	if (g->snap) {
		snap_unref_locked(d, g->snap, g->uid);
		free(g);
		return;
	}
	gone_queue_locked(d, g);
}

/* Queue what parked blocks' processes let go. free_lock held. */
static void unpark(struct cuda_dev *d)
{
	struct cuda_gone **pp = &d->parked, *g;

	while ((g = *pp)) {
		if (!park_over(g)) {
			pp = &g->next;
			continue;
		}
		*pp = g->next;
		park_done_locked(d, g);
	}
}

/*
 * At destroy: what live processes still map is not freed (a GPU's context
 * dies with this process and takes it along); the rest is.
 */
static void unpark_all(struct cuda_dev *d)
{
	struct cuda_gone *g;
	unsigned int kept = 0;

	unpark(d);
	while ((g = d->parked)) {
		d->parked = g->next;
		if (g->pidfd >= 0)
			close(g->pidfd);
		if (g->snap) {
			/* The snapshot goes with its other references, or
			 * is left to the driver with them. */
			g->snap->refs--;
		} else {
			__atomic_sub_fetch(&d->held, g->granted,
					   __ATOMIC_RELAXED);
		}
		free(g);
		kept++;
	}
	d->parked_bytes = 0;
	/* Snapshots still referenced by parked processes only. */
	while (d->snaps) {
		struct cuda_snap *s = d->snaps;

		d->snaps = s->next;
		__atomic_sub_fetch(&d->held, s->granted, __ATOMIC_RELAXED);
		free(s->gone);
		free(s->users);
		free(s);
	}
	if (kept)
		tfs_notice("cuda: %u exported blocks still open in live processes left to the driver at exit",
			   kept);
}

/*
 * cudaFree waits for everything queued on the device, so a thread holding
 * a buffer lock must not call it: the store frees a device copy under the
 * buffer's lock, and every other buffer's copies would stall it. The freer
 * takes the memory off the store's hands and frees it here. It also frees
 * parked exported blocks once their processes are gone; nothing tells it
 * when, so it looks every CUDA_PARK_POLL_MS while any are parked.
 */
static void *freer_main(void *arg)
{
	struct cuda_dev *d = arg;
	struct cuda_gone *g;
	bool entered = false;
	cudaError_t e;
	char why[256];

	pthread_mutex_lock(&d->free_lock);
	for (;;) {
		while (!d->gone_head && !d->free_stop) {
			struct timespec t;

			if (!d->parked) {
				pthread_cond_wait(&d->free_wake,
						  &d->free_lock);
				continue;
			}
			clock_gettime(CLOCK_REALTIME, &t);
			t.tv_nsec += CUDA_PARK_POLL_MS * 1000000L;
			if (t.tv_nsec >= 1000000000L) {
				t.tv_sec++;
				t.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&d->free_wake, &d->free_lock,
					       &t);
			unpark(d);
		}
		if (d->free_stop && !d->gone_head)
			unpark_all(d);
		g = d->gone_head;
		if (!g)
			break;
		d->gone_head = g->next;
		if (!d->gone_head)
			d->gone_tail = &d->gone_head;
		d->freeing = true;
		pthread_mutex_unlock(&d->free_lock);

		/* A failed context took its memory with it. */
		e = cudaSuccess;
		if (!dev_failed(d)) {
			if (!entered) {
				e = cuda_enter(d);
				entered = e == cudaSuccess;
			}
			if (e == cudaSuccess && !g->vmm)
				e = cudaFree(g->ptr);
		}
		if (g->vmm)
			cuda_vmm_release(d, g->vmm);
		__atomic_sub_fetch(&d->held, g->granted, __ATOMIC_RELAXED);
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			if (cuda_sticky(d, e))
				cuda_dev_fail(d, e, "cudaFree");
			else
				tfs_err("cuda: cudaFree of %zu bytes: %s",
					g->granted,
					cuda_describe(e, why, sizeof(why)));
		}
		free(g);

		pthread_mutex_lock(&d->free_lock);
		d->freeing = false;
		if (!d->gone_head)
			pthread_cond_broadcast(&d->free_idle);
	}
	pthread_mutex_unlock(&d->free_lock);
	return NULL;
}

/* Are frees queued or running? */
static bool frees_pending(struct cuda_dev *d)
{
	bool busy;

	pthread_mutex_lock(&d->free_lock);
	busy = d->gone_head || d->freeing;
	pthread_mutex_unlock(&d->free_lock);
	return busy;
}

/* Wait until every free queued so far has run (parked blocks aside). */
static void frees_wait(struct cuda_dev *d)
{
	pthread_mutex_lock(&d->free_lock);
	while (d->gone_head || d->freeing)
		pthread_cond_wait(&d->free_idle, &d->free_lock);
	pthread_mutex_unlock(&d->free_lock);
}

/*
 * Hand @g to the freer: its block (g->ptr, g->granted) freed at once, or,
 * when process g->pid may still have it open through IPC, once that process
 * is gone; a snapshot reference (g->snap) is dropped then. 0 for the pid:
 * no such process (or none that can be known). @g was allocated with what
 * it frees, so this never fails and never calls CUDA itself.
 */
static void free_later(struct cuda_dev *d, struct cuda_gone *g)
{
	g->pidfd = -1;
	if (g->pid > 0) {
		/* Taken now, so that a reused pid cannot keep it forever. */
		g->pidfd = (int)syscall(SYS_pidfd_open, g->pid, 0);
		/* Already gone: nothing maps it any more. */
		if (g->pidfd < 0 && errno == ESRCH)
			g->pid = 0;
	}
	pthread_mutex_lock(&d->free_lock);
	if (g->snap && g->pid <= 0) {
		snap_unref_locked(d, g->snap, g->uid);
		free(g);
	} else if (g->pid > 0) {
		g->next = d->parked;
		d->parked = g;
		if (!g->snap)
			d->parked_bytes += g->granted;
	} else if (dev_failed(d)) {
		/* A failed context took its memory with it. */
		__atomic_sub_fetch(&d->held, g->granted, __ATOMIC_RELAXED);
		if (g->vmm)
			cuda_vmm_release(d, g->vmm);
		free(g);
	} else {
		gone_queue_locked(d, g);
	}
	pthread_cond_signal(&d->free_wake);
	pthread_mutex_unlock(&d->free_lock);
}

/* A record for free_later(): @ptr's @granted bytes, freed at once. */
static struct cuda_gone *gone_new(void)
{
	struct cuda_gone *g = calloc(1, sizeof(*g));

	if (g)
		g->pidfd = -1;
	return g;
}

struct cuda_gone *cuda_gone_new(void)
{
	return gone_new();
}

void cuda_free_later(struct cuda_dev *d, struct cuda_gone *g)
{
	free_later(d, g);
}

static void gone_free_now(struct cuda_dev *d, void *ptr, size_t granted,
			  struct cuda_gone *g)
{
	g->ptr = ptr;
	g->granted = granted;
	g->pid = 0;
	g->snap = NULL;
	free_later(d, g);
}

/*
 * export_held: every live snapshot once (or once per user holding it), and
 * the parked blocks of ended write leases. Parked snapshot references hold
 * their snapshot, which is counted as a snapshot.
 */
static uint64_t cuda_export_held(struct tier_dev *dev, uid_t uid)
{
	struct cuda_dev *d = to_cdev(dev);
	const struct cuda_snap *s;
	const struct cuda_gone *g;
	uint64_t n = 0;

	pthread_mutex_lock(&d->free_lock);
	for (s = d->snaps; s; s = s->next) {
		bool mine = uid == TIER_DEV_ALL_USERS;

		for (unsigned int i = 0; !mine && i < s->nusers; i++)
			mine = s->users[i].uid == uid;
		if (mine)
			n += s->granted;
	}
	for (g = d->parked; g; g = g->next)
		if (!g->snap && (uid == TIER_DEV_ALL_USERS || g->uid == uid))
			n += g->granted;
	pthread_mutex_unlock(&d->free_lock);
	return n;
}

/* --- init and destroy ----------------------------------------------------- */

/* Is an MPS control daemon running? Under MPS, exclusive-process mode is
 * the usual setting and clients share the GPU through the MPS server. */
static bool mps_running(void)
{
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char path[512];

	snprintf(path, sizeof(path), "%s/control",
		 dir && *dir ? dir : "/tmp/nvidia-mps");
	return access(path, F_OK) == 0;
}

/*
 * Asked before the context exists: in exclusive-process mode the daemon's
 * context would be the only one allowed on the GPU, so no GPU program could
 * run there, let alone map a file; in prohibited mode nobody may.
 */
static int check_compute_mode(int gpu, char *err, size_t errlen)
{
	cudaError_t e;
	int mode = 0;

	e = cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, gpu);
	if (e != cudaSuccess)
		return cuda_init_fail(e, "cudaDeviceGetAttribute", err,
				      errlen);
	if (mode == cudaComputeModeProhibited) {
		snprintf(err, errlen,
			 "cuda: gpu %d is in prohibited compute mode: no process may use it (nvidia-smi -i %d -c DEFAULT)",
			 gpu, gpu);
		return -EACCES;
	}
	if (mode == cudaComputeModeExclusiveProcess) {
		if (mps_running()) {
			tfs_notice("cuda: gpu %d is in exclusive-process compute mode under MPS: GPU programs must be MPS clients too to map files",
				   gpu);
			return 0;
		}
		snprintf(err, errlen,
			 "cuda: gpu %d is in exclusive-process compute mode: tierfs would hold its only context, and no GPU program could run there or map a file (nvidia-smi -i %d -c DEFAULT, or start MPS)",
			 gpu, gpu);
		return -EBUSY;
	}
	return 0;
}

/* Whether NVIDIA's driver library is there for cudart to load. */
static bool driver_installed(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

	if (h)
		dlclose(h);
	return h != NULL;
}

static int cuda_count(const struct tfs_config *cfg)
{
	int count = 0;

	(void)cfg;
	return cudaGetDeviceCount(&count) == cudaSuccess ? count : -ENODEV;
}

static int cuda_init(struct tier_dev **out, const struct tfs_config *cfg,
		     char *err, size_t errlen)
{
	struct cudaDeviceProp prop;
	struct cuda_dev *d;
	size_t free_b, total_b;
	cudaError_t e;
	int count = 0, rc;

	*out = NULL;
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		rc = cuda_init_fail(e, "cudaGetDeviceCount", err, errlen);
		/* cudart says "insufficient driver" both for a driver older
		 * than itself and for none at all; only the first is news. */
		if ((e == cudaErrorInsufficientDriver ||
		     e == cudaErrorStubLibrary) && !driver_installed())
			return -ENOENT;
		return rc;
	}
	if (count == 0) {
		snprintf(err, errlen, "cuda: no CUDA device found");
		return -ENODEV;
	}
	if (cfg->device.gpu < 0 || cfg->device.gpu >= count) {
		snprintf(err, errlen,
			 "cuda: device.gpu %d: no such GPU (%d visible)",
			 cfg->device.gpu, count);
		return -ENXIO;
	}
	rc = check_compute_mode(cfg->device.gpu, err, errlen);
	if (rc)
		return rc;

	d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "cuda: out of memory");
		return -ENOMEM;
	}
	d->base.ops = &tier_dev_cuda_ops;
	d->gpu = cfg->device.gpu;
	pthread_mutex_init(&d->pool_lock, NULL);
	pthread_cond_init(&d->pool_cond, NULL);
	pthread_mutex_init(&d->free_lock, NULL);
	pthread_cond_init(&d->free_wake, NULL);
	pthread_cond_init(&d->free_idle, NULL);
	pthread_mutex_init(&d->pin_lock, NULL);
	pthread_cond_init(&d->pin_wake, NULL);
	pthread_mutex_init(&d->vmm_lock, NULL);
	d->gone_tail = &d->gone_head;

	e = cudaSetDevice(d->gpu);
	if (e != cudaSuccess) {
		rc = cuda_init_fail(e, "cudaSetDevice", err, errlen);
		goto out_free;
	}
	e = cudaGetDeviceProperties(&prop, d->gpu);
	if (e != cudaSuccess) {
		rc = cuda_init_fail(e, "cudaGetDeviceProperties", err, errlen);
		goto out_free;
	}
	/* The first call that needs a context: a broken driver shows here. */
	e = cudaMemGetInfo(&free_b, &total_b);
	if (e != cudaSuccess) {
		rc = cuda_init_fail(e, "cudaMemGetInfo", err, errlen);
		goto out_free;
	}
	d->numa_node = cuda_numa_node(d->gpu);
	rc = cuda_slots_create(d, err, errlen);
	if (rc)
		goto out_slots;
	rc = -pthread_create(&d->freer, NULL, freer_main, d);
	if (rc) {
		snprintf(err, errlen, "cuda: cannot start the freer thread: %s",
			 strerror(-rc));
		goto out_slots;
	}
	d->freer_started = true;
	/* Without it, the pool's slabs are page-locked in its caller's path,
	 * as before: slower, not wrong. */
	if (cuda_pinner_start(d))
		tfs_warn("cuda: cannot start the pinner thread: host memory is page-locked in the writers' path");

	d->info.name = "cuda";
	/* Model names are short; cut a long one rather than fail. */
	snprintf(d->info.model, sizeof(d->info.model), "%.*s",
		 (int)sizeof(d->info.model) - 1, prop.name);
	d->info.capacity = total_b;
	d->info.free = free_b;
	d->info.granule = CUDA_GRANULE;
	d->info.sparse = cuda_vmm_init(d);
	_Static_assert(sizeof(prop.uuid.bytes) == sizeof(d->info.uuid),
		       "uuid size");
	memcpy(d->info.uuid, prop.uuid.bytes, sizeof(d->info.uuid));

	tfs_info("cuda: gpu %d \"%s\": %zu MiB total, %zu MiB free, numa node %d",
		 d->gpu, d->info.model, total_b >> 20, free_b >> 20,
		 d->numa_node);
	/* A MIG instance's name says so ("... MIG 1g.10gb"). */
	if (strstr(d->info.model, "MIG "))
		tfs_notice("cuda: gpu %d is a MIG instance: only GPU programs on this same instance can map files",
			   d->gpu);
	*out = &d->base;
	return 0;

out_slots:
	if (d->freer_started) {
		pthread_mutex_lock(&d->free_lock);
		d->free_stop = true;
		pthread_cond_signal(&d->free_wake);
		pthread_mutex_unlock(&d->free_lock);
		pthread_join(d->freer, NULL);
	}
	cuda_slots_destroy(d);
out_free:
	pthread_mutex_destroy(&d->vmm_lock);
	pthread_cond_destroy(&d->pin_wake);
	pthread_mutex_destroy(&d->pin_lock);
	pthread_cond_destroy(&d->free_idle);
	pthread_cond_destroy(&d->free_wake);
	pthread_mutex_destroy(&d->free_lock);
	pthread_cond_destroy(&d->pool_cond);
	pthread_mutex_destroy(&d->pool_lock);
	free(d);
	return rc;
}

static void cuda_destroy(struct tier_dev *dev)
{
	struct cuda_dev *d = to_cdev(dev);
	unsigned long failed;
	size_t i;

	if (!d)
		return;
	/* Each runs what is queued (the pool's last slabs, the last frees),
	 * then stops. */
	cuda_pinner_stop(d);
	if (d->freer_started) {
		pthread_mutex_lock(&d->free_lock);
		d->free_stop = true;
		pthread_cond_signal(&d->free_wake);
		pthread_mutex_unlock(&d->free_lock);
		pthread_join(d->freer, NULL);
	}
	cuda_enter(d);
	cuda_vmm_destroy(d);
	cuda_slots_destroy(d);
	/*
	 * The store unregisters all it registered before it destroys the
	 * device; anything left is its leak, but the page locks are ours to
	 * drop.
	 */
	i = cuda_regs_drop(d);
	if (i)
		tfs_warn("cuda: %zu host ranges still registered at exit", i);
	failed = __atomic_load_n(&d->reg_failed, __ATOMIC_RELAXED);
	if (failed > 1)
		tfs_info("cuda: %lu host ranges could not be page-locked and were staged",
			 failed);
	pthread_cond_destroy(&d->pin_wake);
	pthread_mutex_destroy(&d->pin_lock);
	pthread_cond_destroy(&d->free_idle);
	pthread_cond_destroy(&d->free_wake);
	pthread_mutex_destroy(&d->free_lock);
	pthread_cond_destroy(&d->pool_cond);
	pthread_mutex_destroy(&d->pool_lock);
	pthread_mutex_destroy(&d->vmm_lock);
	free(d);
}

static bool cuda_failed(struct tier_dev *dev)
{
	return dev_failed(to_cdev(dev));
}

/* --- allocations ---------------------------------------------------------- */

static int cuda_alloc(struct tier_dev *dev, size_t len, struct tier_dmem **out)
{
	struct cuda_dev *d = to_cdev(dev);
	/* An empty buffer still gets a block: cudaMalloc(0) gives NULL,
	 * which cannot be exported. */
	size_t granted = len ? (len + CUDA_GRANULE - 1) & ~(CUDA_GRANULE - 1) :
			       CUDA_GRANULE;
	struct cuda_dmem *m;
	cudaError_t e;
	int rc;

	*out = NULL;
	if (granted < len)
		return -ENOMEM;
	if (dev_failed(d))
		return -ENODEV;
	m = calloc(1, sizeof(*m));
	if (m)
		m->gone = gone_new();
	if (!m || !m->gone) {
		free(m);
		return -ENOMEM;
	}
	__atomic_add_fetch(&d->held, granted, __ATOMIC_RELAXED);
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaMalloc(&m->ptr, granted);
	/* Memory the freer has not given back yet is ours to wait for. */
	if (e == cudaErrorMemoryAllocation && frees_pending(d)) {
		(void)cudaGetLastError();
		frees_wait(d);
		e = cudaMalloc(&m->ptr, granted);
	}
	if (e != cudaSuccess) {
		__atomic_sub_fetch(&d->held, granted, __ATOMIC_RELAXED);
		free(m->gone);
		free(m);
		/*
		 * Out of memory is not sticky, but it stays the last error:
		 * clear it, or the next unrelated cudaGetLastError() would
		 * report it. The store evicts and retries on -ENOMEM.
		 */
		if (e == cudaErrorMemoryAllocation) {
			(void)cudaGetLastError();
			return -ENOMEM;
		}
		rc = cuda_copy_fail(d, e, "cudaMalloc", granted, 0);
		return dev_failed(d) ? -ENODEV : rc;
	}
	m->base.len = len;
	m->base.granted = granted;
	*out = &m->base;
	return 0;
}

static void cuda_free(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);

	if (!m)
		return;
	m->gone->ptr = m->ptr;
	m->gone->vmm = m->vmm;
	m->gone->granted = m->base.granted;
	m->gone->pid = m->lent ? m->lent_pid : 0;
	m->gone->uid = m->lent_uid;
	free_later(d, m->gone);
	free(m);
}

/* --- export --------------------------------------------------------------- */

/*
 * An importer maps the whole allocation, and cudaMalloc'd memory holds
 * whatever was there before: the bytes past len could be another file's,
 * freed earlier. Cleared once, at the first export; the store never writes
 * past len.
 */
static int zero_tail(struct cuda_dev *d, struct cuda_dmem *m)
{
	size_t n = m->base.granted - m->base.len;
	struct cuda_slot *s;
	cudaError_t e;
	int rc = 0;

	if (m->tail_zeroed || !n)
		return 0;
	s = cuda_slot_get(d);
	e = cudaMemsetAsync((char *)m->ptr + m->base.len, 0, n, s->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(s->fin, s->stream);
	if (e == cudaSuccess)
		e = cuda_event_wait(s->fin);
	if (e != cudaSuccess) {
		rc = cuda_copy_fail(d, e, "cudaMemsetAsync", n, m->base.len);
		if (!dev_failed(d)) {
			cudaStreamSynchronize(s->stream);
			(void)cudaGetLastError();
		}
	}
	cuda_slot_put(d, s);
	if (!rc)
		m->tail_zeroed = true;
	return rc;
}

/*
 * A new block of @m's size holding its bytes (the tail past len zeroed),
 * for a read export's snapshot or a write export's detach. -ENOSPC when
 * the device has no room, -ENODEV once it failed, -EIO.
 */
static int block_copy(struct cuda_dev *d, struct cuda_dmem *m, void **out,
		      struct cuda_gone **gout)
{
	size_t granted = m->base.granted, len = m->base.len;
	struct cuda_gone *g;
	struct cuda_slot *s;
	void *p = NULL;
	cudaError_t e;
	int rc = 0;

	*out = NULL;
	*gout = NULL;
	/* The record that frees the block, before there is a block. */
	g = gone_new();
	if (!g)
		return -ENOMEM;
	__atomic_add_fetch(&d->held, granted, __ATOMIC_RELAXED);
	e = cudaMalloc(&p, granted);
	if (e == cudaErrorMemoryAllocation && frees_pending(d)) {
		(void)cudaGetLastError();
		frees_wait(d);
		e = cudaMalloc(&p, granted);
	}
	if (e != cudaSuccess) {
		__atomic_sub_fetch(&d->held, granted, __ATOMIC_RELAXED);
		free(g);
		if (e == cudaErrorMemoryAllocation) {
			(void)cudaGetLastError();
			return -ENOSPC;
		}
		rc = cuda_copy_fail(d, e, "cudaMalloc", granted, 0);
		return dev_failed(d) ? -ENODEV : rc;
	}
	s = cuda_slot_get(d);
	e = len ? cudaMemcpyAsync(p, m->ptr, len, cudaMemcpyDeviceToDevice,
				  s->stream) :
		  cudaSuccess;
	if (e == cudaSuccess && granted > len)
		e = cudaMemsetAsync((char *)p + len, 0, granted - len,
				    s->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(s->fin, s->stream);
	if (e == cudaSuccess)
		e = cuda_event_wait(s->fin);
	if (e != cudaSuccess) {
		rc = cuda_copy_fail(d, e, "d2d copy", len, 0);
		if (!dev_failed(d)) {
			cudaStreamSynchronize(s->stream);
			(void)cudaGetLastError();
		}
	}
	cuda_slot_put(d, s);
	if (rc) {
		/* Nothing was exported: nobody maps it. */
		gone_free_now(d, p, granted, g);
		return dev_failed(d) ? -ENODEV : rc;
	}
	*out = p;
	*gout = g;
	return 0;
}

/*
 * An IPC handle for the block at @ptr (@len bytes, for the message): 0,
 * -ENODEV when the device is lost, -EOPNOTSUPP or -EIO otherwise.
 */
static int ipc_handle(struct cuda_dev *d, cudaIpcMemHandle_t *h, void *ptr,
		      size_t len)
{
	cudaError_t e = cudaIpcGetMemHandle(h, ptr);
	char why[256];

	if (e == cudaSuccess)
		return 0;
	(void)cudaGetLastError();
	if (cuda_sticky(d, e)) {
		cuda_dev_fail(d, e, "cudaIpcGetMemHandle");
		return -ENODEV;
	}
	tfs_err("cuda: cudaIpcGetMemHandle of %zu bytes: %s", len,
		cuda_describe(e, why, sizeof(why)));
	return cuda_errno(e) == -EOPNOTSUPP ? -EOPNOTSUPP : -EIO;
}

/*
 * The snapshot of @m's bytes that a read export maps: the one readers of
 * these same bytes share already, or a new block copied from @m. Buffer
 * lock held for writing, as for export.
 */
static int snap_get(struct cuda_dev *d, struct cuda_dmem *m, uid_t uid,
		    struct cuda_snap **out)
{
	struct cuda_snap *sn;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&d->free_lock);
	sn = m->wexp || m->lent ? NULL : snap_find_locked(d, m->snap_id);
	rc = sn ? snap_ref_locked(sn, uid) : 0;
	pthread_mutex_unlock(&d->free_lock);
	if (sn) {
		*out = rc ? NULL : sn;
		return rc;
	}
	sn = calloc(1, sizeof(*sn));
	if (!sn)
		return -ENOMEM;
	rc = block_copy(d, m, &sn->ptr, &sn->gone);
	if (rc) {
		free(sn);
		return rc;
	}
	sn->granted = m->base.granted;
	rc = ipc_handle(d, &sn->handle, sn->ptr, m->base.len);
	if (rc) {
		gone_free_now(d, sn->ptr, sn->granted, sn->gone);
		free(sn);
		return rc;
	}
	pthread_mutex_lock(&d->free_lock);
	rc = snap_ref_locked(sn, uid);
	if (!rc) {
		sn->id = ++d->snap_seq;
		sn->next = d->snaps;
		d->snaps = sn;
	}
	pthread_mutex_unlock(&d->free_lock);
	if (rc) {
		gone_free_now(d, sn->ptr, sn->granted, sn->gone);
		free(sn);
		return rc;
	}
	/* Readers to come share it, until @m is written. */
	if (!m->wexp && !m->lent)
		m->snap_id = sn->id;
	*out = sn;
	return 0;
}

static uint64_t cuda_export_cost(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	bool shared;

	pthread_mutex_lock(&d->free_lock);
	shared = !m->wexp && !m->lent && snap_find_locked(d, m->snap_id);
	pthread_mutex_unlock(&d->free_lock);
	return shared ? 0 : m->base.granted;
}

/*
 * Legacy CUDA IPC has no read-only import and no revocation: whoever opens
 * a handle may write what it maps until it closes it or exits. So a read
 * export maps a device-to-device snapshot (read_snapshots), whose writes
 * reach nothing the store serves, and a write export maps the allocation
 * itself, which unexport detaches (below). Readers of the same unchanged
 * bytes share one snapshot: N readers of a 20 GB file took N x 20 GB. A
 * kernel writing through one reader's map changes what the others see,
 * which is no more than each could do to its own copy: none of it reaches
 * the file, and the reader gets what it mapped for reading. @uid is not
 * checked: CUDA IPC has no owner, and the handle goes only to whoever
 * passed the file's permission checks; it is recorded for export_held.
 */
static int cuda_export(struct tier_dev *dev, struct tier_dmem *dm,
		       bool writable, uid_t uid, gid_t gid,
		       struct tfs_ioc_export *out, struct tier_dexp **exp)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	struct cuda_dexp *x;
	cudaIpcMemHandle_t h;
	cudaError_t e;
	int rc;

	_Static_assert(sizeof(h) == sizeof(out->handle), "IPC handle size");
	*exp = NULL;
	if (dev_failed(d))
		return -ENODEV;
	x = calloc(1, sizeof(*x));
	if (x)
		x->spare = gone_new();
	if (!x || !x->spare) {
		free(x);
		return -ENOMEM;
	}
	x->uid = uid;
	e = cuda_enter(d);
	if (e != cudaSuccess) {
		rc = cuda_copy_fail(d, e, "cudaSetDevice", 0, 0);
		goto out_free;
	}
	/* A GPU program maps the buffer whole, through one IPC handle. */
	rc = cuda_vmm_densify(d, m);
	if (rc)
		goto out_free;
	if (!writable) {
		rc = snap_get(d, m, uid, &x->snap);
		if (rc)
			goto out_free;
		memcpy(&h, &x->snap->handle, sizeof(h));
		x->granted = x->snap->granted;
		goto out_ok;
	}
	rc = zero_tail(d, m);
	if (rc)
		goto out_free;
	rc = ipc_handle(d, &h, m->ptr, m->base.len);
	if (rc)
		goto out_free;
	/* The holder writes it from now on: no reader shares a snapshot
	 * of bytes that may be changing. */
	m->wexp = true;
	m->snap_id = 0;
	x->m = m;
	x->ptr = m->ptr;
	x->granted = m->base.granted;
out_ok:
	x->base.writable = writable;
	out->handle_type = TFS_HANDLE_CUDA_IPC;
	/* Informational: what made the handle (libtierfs reports a client
	 * runtime older than this alongside an IPC failure). */
	out->cuda_runtime = CUDART_VERSION;
	memcpy(out->handle, &h, sizeof(out->handle));
	/* Every buffer and snapshot is its own 2 MiB-rounded cudaMalloc,
	 * whose handle maps its start and nothing of another buffer. */
	out->offset = 0;
	memcpy(out->uuid, d->info.uuid, sizeof(out->uuid));
	*exp = &x->base;
	return 0;

out_free:
	free(x->spare);
	free(x);
	return dev_failed(d) ? -ENODEV : rc;
}

/*
 * The lease ended, but a handle is a name for the allocation, not a
 * reference to a lease, and cannot be revoked: an importer's mapping lasts
 * until it closes it or exits. So what the handle maps must neither stay
 * the buffer's live copy nor be freed under a process that may still have
 * it open (undefined behaviour, which could show another file's bytes
 * there later).
 *
 * A write export is detached: the buffer moves to a new block holding its
 * bytes, and the old one is what the holder keeps. The old block and a
 * read export's reference to its snapshot are then given up at once when
 * the exporting process said it closed its mapping (TFS_RELEASE_UNMAPPED,
 * as libtierfs does) or is unknown, else once that process is gone; the
 * last reference frees a snapshot. The process is the exporter's thread
 * group (the store passes it), not the thread that asked: a thread's exit
 * is no process's. Not knowable: a process that passed the handle on to
 * another one; that one's mapping may outlive the exporter's.
 */
static void cuda_unexport(struct tier_dev *dev, struct tier_dexp *exp)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dexp *x = (struct cuda_dexp *)exp;
	pid_t pid = exp->unmapped ? 0 : exp->pid;
	struct cuda_dmem *m = x->m;
	struct cuda_gone *g = x->spare;
	void *p;

	g->uid = x->uid;
	g->pid = pid;
	if (!exp->writable) {
		g->snap = x->snap;
		g->ptr = NULL;
		g->granted = 0;
		free_later(d, g);
		goto out;
	}
	m->wexp = false;
	/*
	 * Nothing to detach when m moved to another block meanwhile, when
	 * nobody can still map this one (!pid), or when an earlier holder
	 * still may (lent: it stays that holder's, and goes when it is gone;
	 * this holder is not waited for, a limit of one record per block).
	 */
	if (m->ptr != x->ptr || dev_failed(d) || !pid || m->lent) {
		free(g);
		goto out;
	}
	if (cuda_enter(d) == cudaSuccess) {
		struct cuda_gone *ng;

		if (!block_copy(d, m, &p, &ng)) {
			/* m->gone frees the new block in its time; the old
			 * one is the holder's, freed when it is gone. */
			free(ng);
			m->ptr = p;
			m->tail_zeroed = true;
			g->ptr = x->ptr;
			g->granted = x->granted;
			free_later(d, g);
			goto out;
		}
	}
	(void)cudaGetLastError();
	free(g);
	/*
	 * No room for a new block: the holder's mapping stays the live
	 * copy until the buffer next moves, and its block is not freed
	 * before the holder is gone.
	 */
	m->lent = true;
	m->lent_pid = pid;
	m->lent_uid = x->uid;
	m->snap_id = 0;
	tfs_warn("cuda: no room to detach a write export of %zu bytes from its buffer: process %d keeps access to it until the buffer moves",
		 m->base.len, (int)pid);
out:
	free(x);
}

/*
 * What the reserve watcher polls: cudaMemGetInfo counts every process's
 * allocations, ours included, so held (what we cudaMalloc'd and have not
 * cudaFree'd yet) tells them apart. A failed device reports nothing.
 */
static int cuda_meminfo(struct tier_dev *dev, uint64_t *free_b,
			uint64_t *total, uint64_t *held)
{
	struct cuda_dev *d = to_cdev(dev);
	uint64_t before, after;
	size_t f = 0, t = 0;
	cudaError_t e;

	if (dev_failed(d))
		return -ENODEV;
	/*
	 * held never reads below what the device gave us (see its comment),
	 * and the larger of a read before and one after the driver's count
	 * covers an allocation or a free running meanwhile: other processes'
	 * use may be underestimated for one poll, never overestimated, so
	 * our own traffic never looks like pressure and makes us spill.
	 */
	before = __atomic_load_n(&d->held, __ATOMIC_RELAXED);
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&f, &t);
	after = __atomic_load_n(&d->held, __ATOMIC_RELAXED);
	*held = before > after ? before : after;
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (cuda_sticky(d, e))
			return cuda_dev_fail(d, e, "cudaMemGetInfo");
		return cuda_errno(e) ? cuda_errno(e) : -EIO;
	}
	*free_b = f;
	*total = t;
	return 0;
}

static void cuda_drain(struct tier_dev *dev)
{
	frees_wait(to_cdev(dev));
}

/* free is what cudaMemGetInfo said at init, before the store allocated
 * anything: the default device limit is a share of it, and asking again
 * later would count the store's own buffers as used by others. */
static void cuda_info(struct tier_dev *dev, struct tier_dev_info *out)
{
	*out = to_cdev(dev)->info;
}

const struct tier_dev_ops tier_dev_cuda_ops = {
	.name = "cuda",
	.init = cuda_init,
	.count = cuda_count,
	.destroy = cuda_destroy,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.read = cuda_read,
	.write = cuda_write,
	.zero = cuda_zero,
	.export = cuda_export,
	.unexport = cuda_unexport,
	.read_snapshots = true,
	.info = cuda_info,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.readv = cuda_readv,
	.writev = cuda_writev,
	.failed = cuda_failed,
	.host_register_async = cuda_host_register_async,
	.host_release = cuda_host_release,
	.host_populates = true,
	.meminfo = cuda_meminfo,
	.drain = cuda_drain,
	.export_held = cuda_export_held,
	.export_cost = cuda_export_cost,
	.alloc_sparse = cuda_alloc_sparse,
	.populate = cuda_populate,
	.can_peer = cuda_can_peer,
	.copy_peer = cuda_copy_peer,
};
