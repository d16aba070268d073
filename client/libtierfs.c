// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libtierfs: open + TFS_IOC_EXPORT + cudaIpcOpenMemHandle (cuda backend) or
 * shm_open + mmap (sim backend), behind the small API of libtierfs.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef TFS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "libtierfs.h"

/* The last failure of this thread, for tfs_strerror(). */
static __thread int last_rc;
static __thread char last_msg[256];

static void clear_err(void)
{
	last_rc = 0;
	last_msg[0] = '\0';
}

static int set_err(int rc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int set_err(int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
	va_end(ap);
	last_rc = rc;
	return rc;
}

const char *tfs_strerror(int rc)
{
	static __thread char buf[64];

	if (rc == last_rc && last_msg[0])
		return last_msg;
	if (rc > 0)
		rc = -rc;
	/* GNU strerror_r may return a static string instead of filling buf. */
	return strerror_r(-rc, buf, sizeof(buf));
}

static int open_file(const char *path, int oflags)
{
	int fd = open(path, oflags | O_CLOEXEC, 0666);

	return fd < 0 ? -errno : fd;
}

/* ioctl() as 0 or -errno. */
static int xioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

/*
 * @unmapped: this process has nothing of the export mapped (closed, or
 * never opened), so the daemon may free it at once rather than wait for
 * this process to exit.
 */
static int release_lease(int fd, bool unmapped)
{
	struct tfs_ioc_release rel;
	int rc;

	memset(&rel, 0, sizeof(rel));
	rel.version = TFS_ABI_VERSION;
	rel.flags = unmapped ? TFS_RELEASE_UNMAPPED : 0;
	/*
	 * Generation 0 releases whatever lease this fd holds. The exported
	 * generation would be refused after our own commit bumped it, and
	 * this fd is ours alone, so there is no other lease to confuse.
	 */
	rel.generation = 0;
	rc = xioctl(fd, TFS_IOC_RELEASE, &rel);
	/* A daemon older than the flag refuses it: release without. */
	if (rc == -EINVAL && rel.flags) {
		rel.flags = 0;
		rc = xioctl(fd, TFS_IOC_RELEASE, &rel);
	}
	return rc;
}

static int map_shm(struct tfs_map *m, const struct tfs_ioc_export *ex)
{
	const char *name = (const char *)ex->handle;
	bool wr = m->flags & TFS_MAP_WRITE;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t end = ex->offset + ex->length;
	struct stat st;
	int sfd, rc = 0;

	if (!memchr(ex->handle, '\0', sizeof(ex->handle)) || name[0] != '/')
		return set_err(-EPROTO, "export: malformed shm handle");
	if (end < ex->offset || end > SIZE_MAX - page)
		return set_err(-EPROTO, "export: offset %llu + length %llu "
			       "out of range",
			       (unsigned long long)ex->offset,
			       (unsigned long long)ex->length);
	/*
	 * The daemon unlinks the object when the last lease ends; we hold
	 * one, so the name is there now, and our mapping outlives the name.
	 */
	sfd = shm_open(name, wr ? O_RDWR : O_RDONLY, 0);
	if (sfd < 0)
		return set_err(-errno, "shm_open \"%s\": %s", name,
			       strerror(errno));
	if (fstat(sfd, &st) < 0) {
		rc = set_err(-errno, "fstat \"%s\": %s", name,
			     strerror(errno));
		goto out_close;
	}
	/* Touching a page past the object's end would SIGBUS the caller. */
	if ((uint64_t)st.st_size < end) {
		rc = set_err(-EPROTO, "shm \"%s\" holds %lld bytes, export "
			     "says %llu", name, (long long)st.st_size,
			     (unsigned long long)end);
		goto out_close;
	}
	m->map_len = (size_t)((end + page - 1) & ~((uint64_t)page - 1));
	if (m->map_len) {
		void *p = mmap(NULL, m->map_len,
			       PROT_READ | (wr ? PROT_WRITE : 0), MAP_SHARED,
			       sfd, 0);

		if (p == MAP_FAILED) {
			rc = set_err(-errno, "mmap \"%s\": %s", name,
				     strerror(errno));
			m->map_len = 0;
			goto out_close;
		}
		m->base = p;
		m->ptr = (char *)p + ex->offset;
	}
out_close:
	close(sfd);
	return rc;
}

#ifdef TFS_HAVE_CUDA
static int cuda_rc(cudaError_t e)
{
	switch (e) {
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
	case cudaErrorStubLibrary:
	case cudaErrorInitializationError:
		return -ENODEV;
	default:
		return -EIO;
	}
}

static int cuda_fail_hint(cudaError_t e, const char *call, const char *hint)
{
	(void)cudaGetLastError();
	return set_err(cuda_rc(e), "%s: %s (%s, %d)%s%s", call,
		       cudaGetErrorString(e), cudaGetErrorName(e), (int)e,
		       hint ? ": " : "", hint ? hint : "");
}

static int cuda_fail(cudaError_t e, const char *call)
{
	return cuda_fail_hint(e, call, NULL);
}

/* nvidia-smi's spelling of a GPU UUID, without its GPU- or MIG- prefix. */
static void uuid_str(const uint8_t u[16], char *buf, size_t len)
{
	snprintf(buf, len,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		 u[10], u[11], u[12], u[13], u[14], u[15]);
}

/*
 * The ordinal of the visible GPU whose UUID is @uuid, preferring @cur.
 * Creates no context: cudaGetDeviceProperties needs none.
 */
static int find_device(const uint8_t uuid[16], int cur, int *out)
{
	struct cudaDeviceProp prop;
	bool mig = false;
	char want[40];
	cudaError_t e;
	int n, i;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaGetDeviceCount");
	for (i = -1; i < n; i++) {
		int dev = i < 0 ? cur : i;

		if (i == cur || dev < 0 || dev >= n)
			continue;
		e = cudaGetDeviceProperties(&prop, dev);
		if (e != cudaSuccess)
			return cuda_fail(e, "cudaGetDeviceProperties");
		if (!memcmp(prop.uuid.bytes, uuid, 16)) {
			*out = dev;
			return 0;
		}
		/* A MIG instance's name says so ("... MIG 1g.10gb"). */
		mig |= strstr(prop.name, "MIG ") != NULL;
	}
	uuid_str(uuid, want, sizeof(want));
	if (mig)
		return set_err(-ENODEV,
			       "tierfs's GPU (UUID %s) is not visible: this process sees MIG instances, and CUDA IPC works only inside one MIG instance; run on the instance tierfs uses (CUDA_VISIBLE_DEVICES=MIG-<its UUID>)",
			       want);
	return set_err(-ENODEV,
		       "no visible CUDA device has the UUID of tierfs's GPU (%s; %d visible): check CUDA_VISIBLE_DEVICES, and if the GPU is split into MIG instances, run on the one tierfs uses",
		       want, n);
}

/*
 * The driver's context calls, reached through the runtime so that
 * libtierfs needs no libcuda at link time. They return CUresult, 0 being
 * CUDA_SUCCESS; contexts are CUcontext, devices CUdevice (an int).
 */
static struct {
	int (*dev_get)(int *cudev, int ordinal);
	int (*retain)(void **ctx, int cudev);
	int (*release)(int cudev);
	int (*push)(void *ctx);
	int (*pop)(void **ctx);
	int (*get_current)(void **ctx); /* optional: caller_uuid() only */
} drv;
static bool drv_ok;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *drv_sym(const char *name)
{
	enum cudaDriverEntryPointQueryResult st;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000,
					     cudaEnableDefault,
					     &st) != cudaSuccess ||
	    st != cudaDriverEntryPointSuccess)
		fn = NULL;
	(void)cudaGetLastError();
	return fn;
}

static void drv_load(void)
{
	*(void **)&drv.dev_get = drv_sym("cuDeviceGet");
	*(void **)&drv.retain = drv_sym("cuDevicePrimaryCtxRetain");
	*(void **)&drv.release = drv_sym("cuDevicePrimaryCtxRelease");
	*(void **)&drv.push = drv_sym("cuCtxPushCurrent");
	*(void **)&drv.pop = drv_sym("cuCtxPopCurrent");
	*(void **)&drv.get_current = drv_sym("cuCtxGetCurrent");
	drv_ok = drv.dev_get && drv.retain && drv.release && drv.push &&
		 drv.pop;
}

/*
 * Work on @dev's primary context without changing what the caller had.
 *
 * cudaSetDevice() there and back would not do: since CUDA 12 it creates
 * the device's primary context, so putting back device 0 for a caller
 * that had no context yet created one on GPU 0, and it changes the
 * runtime's current device for the rest of the thread. Instead the
 * primary context is retained (for as long as the map lives: the IPC
 * mapping belongs to it) and pushed on the thread's context stack, and the
 * pop puts back exactly what was current, nothing included.
 */
struct dev_ctx {
	void *ctx; /* retained primary context; NULL when falling back */
	int cudev;
	int saved_dev; /* fallback only */
};

static int ctx_retain(int dev, struct dev_ctx *c)
{
	int r;

	pthread_once(&drv_once, drv_load);
	memset(c, 0, sizeof(*c));
	if (!drv_ok)
		return 0;
	r = drv.dev_get(&c->cudev, dev);
	if (!r)
		r = drv.retain(&c->ctx, c->cudev);
	if (r) {
		c->ctx = NULL;
		return set_err(-ENODEV,
			       "cuDevicePrimaryCtxRetain of device %d: CUresult %d",
			       dev, r);
	}
	return 0;
}

static void ctx_release(struct dev_ctx *c)
{
	if (c->ctx)
		drv.release(c->cudev);
	c->ctx = NULL;
}

/* Make @c current on this thread until ctx_leave(). */
static int ctx_enter(struct dev_ctx *c, int dev)
{
	cudaError_t e;
	int r;

	if (c->ctx) {
		r = drv.push(c->ctx);
		return r ? set_err(-EIO, "cuCtxPushCurrent: CUresult %d", r) :
			   0;
	}
	/* Without the driver calls: the old way, which may leave a context
	 * on the caller's device. */
	e = cudaGetDevice(&c->saved_dev);
	if (e == cudaSuccess && c->saved_dev != dev)
		e = cudaSetDevice(dev);
	return e == cudaSuccess ? 0 : cuda_fail(e, "cudaSetDevice");
}

static void ctx_leave(struct dev_ctx *c, int dev)
{
	void *popped;

	if (c->ctx)
		drv.pop(&popped);
	else if (c->saved_dev != dev)
		cudaSetDevice(c->saved_dev);
}

/*
 * The UUID of the GPU of the calling thread's current context, for an
 * export to land on the caller's GPU; zeros (the daemon's default GPU)
 * when the thread has no current context. Only the driver can tell that
 * without making one: the runtime's current device is 0 for a thread that
 * never chose one, and calls that need a context create it there. Without
 * the driver call, zeros too.
 */
static void caller_uuid(uint8_t uuid[16])
{
	struct cudaDeviceProp prop;
	void *ctx = NULL;
	int dev;

	memset(uuid, 0, 16);
	pthread_once(&drv_once, drv_load);
	if (!drv.get_current || drv.get_current(&ctx) || !ctx)
		return;
	/* With a context current, this is its device; neither call makes
	 * a context. */
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return;
	}
	memcpy(uuid, prop.uuid.bytes, 16);
}

/*
 * Why cudaIpcOpenMemHandle may have failed, naming only causes this
 * process checked: the PID namespace (the daemon says which pid it saw
 * us as), the GPU's compute mode, the handle's origin. Where none of them
 * is it, the text says what was ruled out; a CUDA runtime older than the
 * daemon's is mentioned as a difference, not as the cause: the driver,
 * which both share, makes and opens IPC handles, and nothing documents
 * the runtime version mattering.
 */
static void ipc_hint(cudaError_t e, const struct tfs_ioc_export *ex, int dev,
		     char *buf, size_t len)
{
	int mode = -1, mine = 0;
	size_t n;

	if (ex->caller_pid && ex->caller_pid != (uint32_t)getpid()) {
		snprintf(buf, len,
			 "this process is in another PID namespace than tierfs (it sees this process as pid %u, here it is %d): CUDA IPC needs both in one (containers: --pid=host --ipc=host)",
			 ex->caller_pid, (int)getpid());
		return;
	}
	if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, dev) !=
	    cudaSuccess)
		mode = -1;
	if (mode == cudaComputeModeExclusiveProcess) {
		snprintf(buf, len,
			 "GPU %d is in exclusive-process compute mode and tierfs holds it",
			 dev);
		return;
	}
	(void)cudaGetLastError();
	if (e == cudaErrorDeviceUninitialized) {
		snprintf(buf, len,
			 "the handle was exported by this very process");
		return;
	}
	n = (size_t)snprintf(buf, len, "%s GPU %d is tierfs's (same UUID)%s",
			     ex->caller_pid ? "same PID namespace as tierfs;" :
					      "PID namespace not known (tierfs did not say);",
			     dev,
			     mode == cudaComputeModeDefault ?
				     ", in default compute mode" :
				     "");
	if (n < len && ex->cuda_runtime &&
	    cudaRuntimeGetVersion(&mine) == cudaSuccess &&
	    mine < (int)ex->cuda_runtime)
		snprintf(buf + n, len - n,
			 "; this process's CUDA runtime %d.%d is older than tierfs's %d.%d",
			 mine / 1000, mine % 1000 / 10,
			 (int)ex->cuda_runtime / 1000,
			 (int)ex->cuda_runtime % 1000 / 10);
	(void)cudaGetLastError();
}

static int map_cuda(struct tfs_map *m, const struct tfs_ioc_export *ex)
{
	struct dev_ctx c;
	cudaIpcMemHandle_t h;
	int cur, dev = -1, rc;
	cudaError_t e;
	void *p;

	_Static_assert(sizeof(h) == sizeof(ex->handle), "IPC handle size");
	/* Only a hint for which device to try first: creates nothing. */
	e = cudaGetDevice(&cur);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaGetDevice");
	rc = find_device(ex->uuid, cur, &dev);
	if (rc)
		return rc;
	rc = ctx_retain(dev, &c);
	if (rc)
		return rc;
	rc = ctx_enter(&c, dev);
	if (rc) {
		ctx_release(&c);
		return rc;
	}
	memcpy(&h, ex->handle, sizeof(h));
	/* Lazy peer access lets kernels on the caller's other GPUs reach it. */
	e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
	ctx_leave(&c, dev);
	if (e != cudaSuccess) {
		char hint[512];

		(void)cudaGetLastError();
		ipc_hint(e, ex, dev, hint, sizeof(hint));
		ctx_release(&c);
		return cuda_fail_hint(e, "cudaIpcOpenMemHandle", hint);
	}
	m->device = dev;
	m->base = p;
	m->ptr = (char *)p + ex->offset;
	m->cuctx = c.ctx;
	m->cudev = c.cudev;
	return 0;
}

static int unmap_cuda(struct tfs_map *m)
{
	struct dev_ctx c = { .ctx = m->cuctx, .cudev = m->cudev };
	cudaError_t e;
	int rc;

	rc = ctx_enter(&c, m->device);
	if (rc) {
		ctx_release(&c);
		return rc;
	}
	e = cudaIpcCloseMemHandle(m->base);
	ctx_leave(&c, m->device);
	ctx_release(&c);
	m->cuctx = NULL;
	return e == cudaSuccess ? 0 : cuda_fail(e, "cudaIpcCloseMemHandle");
}

/*
 * Wait for the writes to @m before a commit: the whole device (@waited
 * TFS_COMMIT_WAITED_DEVICE), one stream or one event of the caller's. A
 * stream or event belongs to its own context, whichever is current; the
 * map's context is pushed for the legacy default stream (NULL) and the
 * device-wide wait, which mean its context's.
 */
static int sync_cuda(struct tfs_map *m, uint32_t waited, void *what)
{
	struct dev_ctx c = { .ctx = m->cuctx, .cudev = m->cudev };
	const char *call;
	cudaError_t e;
	int rc;

	if (waited == TFS_COMMIT_WAITED_EVENT) {
		e = cudaEventSynchronize((cudaEvent_t)what);
		return e == cudaSuccess ? 0 : cuda_fail(e, "cudaEventSynchronize");
	}
	if (waited == TFS_COMMIT_WAITED_STREAM && what) {
		e = cudaStreamSynchronize((cudaStream_t)what);
		return e == cudaSuccess ? 0 :
					  cuda_fail(e, "cudaStreamSynchronize");
	}
	rc = ctx_enter(&c, m->device);
	if (rc)
		return rc;
	if (waited == TFS_COMMIT_WAITED_STREAM) {
		call = "cudaStreamSynchronize";
		e = cudaStreamSynchronize(NULL);
	} else {
		call = "cudaDeviceSynchronize";
		e = cudaDeviceSynchronize();
	}
	ctx_leave(&c, m->device);
	return e == cudaSuccess ? 0 : cuda_fail(e, call);
}

/* The UUID of this thread's current device; creates no context. */
static int current_uuid(uint8_t uuid[16])
{
	struct cudaDeviceProp prop;
	cudaError_t e;
	int cur;

	e = cudaGetDevice(&cur);
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&prop, cur);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaGetDeviceProperties");
	memcpy(uuid, prop.uuid.bytes, 16);
	return 0;
}

static int reclaim_path(const char *path, int gpu, const uint8_t *uuid,
			uint64_t bytes, uint64_t *freed);

int tfs_cuda_malloc(void **ptr, size_t size, const char *mount)
{
	uint8_t uuid[16];
	uint64_t freed;
	cudaError_t e;
	int rc;

	clear_err();
	*ptr = NULL;
	for (;;) {
		e = cudaMalloc(ptr, size);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorMemoryAllocation)
			return cuda_fail(e, "cudaMalloc");
		/* Not sticky, but it stays the last error: clear it. */
		(void)cudaGetLastError();
		rc = current_uuid(uuid);
		if (rc)
			return rc;
		/*
		 * Ask for the whole size each time: another process may take
		 * what tierfs gave back before us. The loop ends when tierfs
		 * has nothing more to give.
		 */
		rc = reclaim_path(mount, 0, uuid, size, &freed);
		if (rc == -ENXIO || (!rc && !freed))
			return set_err(-ENOMEM, "cudaMalloc of %zu bytes: out "
				       "of memory, and tierfs has no more of "
				       "this GPU to give back", size);
		if (rc)
			return rc;
	}
}
#else
static void caller_uuid(uint8_t uuid[16])
{
	memset(uuid, 0, 16);
}

int tfs_cuda_malloc(void **ptr, size_t size, const char *mount)
{
	clear_err();
	*ptr = NULL;
	return set_err(-ENOTSUP, "tfs_cuda_malloc: this libtierfs was built "
		       "without CUDA");
}

static int map_cuda(struct tfs_map *m, const struct tfs_ioc_export *ex)
{
	return set_err(-ENOTSUP, "the file is on a CUDA device and this "
		       "libtierfs was built without CUDA");
}

static int unmap_cuda(struct tfs_map *m)
{
	return 0;
}

static int sync_cuda(struct tfs_map *m, uint32_t waited, void *what)
{
	return 0;
}
#endif

/*
 * Undo the mapping only; the lease and fd stay. In a child after fork()
 * (@owner false) a CUDA map is left alone: a forked child cannot call
 * CUDA, and the mapping it would close is its parent's.
 */
static int unmap(struct tfs_map *m, bool owner)
{
	int rc = 0;

	if (!m->base)
		return 0;
	if (m->handle_type == TFS_HANDLE_SHM) {
		if (munmap(m->base, m->map_len) < 0)
			rc = -errno;
	} else if (m->handle_type == TFS_HANDLE_CUDA_IPC && owner) {
		rc = unmap_cuda(m);
	}
	m->base = NULL;
	m->ptr = NULL;
	m->map_len = 0;
	return rc;
}

static void map_reset(struct tfs_map *m)
{
	memset(m, 0, sizeof(*m));
	m->fd = -1;
	m->device = -1;
}

/* Was @m opened by this process (and not inherited through fork)? */
static bool map_owner(const struct tfs_map *m)
{
	return m->pid == (int)getpid();
}

int tfs_map_open(const char *path, int flags, struct tfs_map *out)
{
	static const uint8_t zero_uuid[16];
	struct tfs_ioc_export ex;
	int fd, rc;

	clear_err();
	map_reset(out);
	if (!flags || (flags & ~(TFS_MAP_READ | TFS_MAP_WRITE)))
		return -EINVAL;
	fd = open_file(path, flags & TFS_MAP_WRITE ? O_RDWR : O_RDONLY);
	if (fd < 0)
		return fd;

	memset(&ex, 0, sizeof(ex));
	ex.version = TFS_ABI_VERSION;
	ex.flags = flags & TFS_MAP_WRITE ? TFS_EXPORT_WRITE : 0;
	caller_uuid(ex.caller_uuid);
	rc = xioctl(fd, TFS_IOC_EXPORT, &ex);
	/* A daemon older than caller_uuid refuses it: its default GPU. */
	if (rc == -EINVAL && memcmp(ex.caller_uuid, zero_uuid, 16)) {
		memset(ex.caller_uuid, 0, sizeof(ex.caller_uuid));
		rc = xioctl(fd, TFS_IOC_EXPORT, &ex);
	}
	if (rc) {
		close(fd);
		return rc;
	}
	if (ex.length > SIZE_MAX) {
		rc = set_err(-EPROTO, "export: length %llu too large",
			     (unsigned long long)ex.length);
		goto out_release;
	}
	out->fd = fd;
	out->flags = flags;
	out->pid = (int)getpid();
	out->length = (size_t)ex.length;
	out->handle_type = (int)ex.handle_type;
	out->generation = ex.generation;
	memcpy(out->uuid, ex.uuid, sizeof(out->uuid));

	switch (ex.handle_type) {
	case TFS_HANDLE_SHM:
		rc = map_shm(out, &ex);
		break;
	case TFS_HANDLE_CUDA_IPC:
		rc = map_cuda(out, &ex);
		break;
	default:
		rc = set_err(-EPROTO, "export: unknown handle type %u",
			     ex.handle_type);
		break;
	}
	if (!rc)
		return 0;
out_release:
	release_lease(fd, true);
	close(fd);
	map_reset(out);
	return rc;
}

static int map_commit(struct tfs_map *m, uint32_t waited, void *what)
{
	struct tfs_ioc_commit c;
	int rc;

	clear_err();
	if (m->fd < 0)
		return -EBADF;
	if (!(m->flags & TFS_MAP_WRITE))
		return set_err(-EBADF, "commit: the map is read-only");
	if (!map_owner(m))
		return set_err(-EBADF, "commit: the map belongs to process %d, "
			       "not this one (after fork only the parent may "
			       "commit)", m->pid);
	if (m->handle_type == TFS_HANDLE_CUDA_IPC) {
		rc = sync_cuda(m, waited, what);
		if (rc)
			return rc;
	} else if (m->handle_type == TFS_HANDLE_SHM) {
		waited = 0; /* host memory: nothing of a GPU's to wait for */
	}
	memset(&c, 0, sizeof(c));
	c.version = TFS_ABI_VERSION;
	c.waited = waited;
	rc = xioctl(m->fd, TFS_IOC_COMMIT, &c);
	/* A daemon older than the field refuses it: the wait is done. */
	if (rc == -EINVAL && c.waited) {
		c.waited = 0;
		rc = xioctl(m->fd, TFS_IOC_COMMIT, &c);
	}
	return rc;
}

int tfs_map_commit(struct tfs_map *m)
{
	return map_commit(m, TFS_COMMIT_WAITED_DEVICE, NULL);
}

int tfs_map_commit_stream(struct tfs_map *m, void *stream)
{
	return map_commit(m, TFS_COMMIT_WAITED_STREAM, stream);
}

int tfs_map_commit_event(struct tfs_map *m, void *event)
{
	if (!event)
		return -EINVAL;
	return map_commit(m, TFS_COMMIT_WAITED_EVENT, event);
}

int tfs_map_close(struct tfs_map *m)
{
	bool owner;
	int rc, rc2;

	clear_err();
	if (m->fd < 0)
		return 0;
	owner = map_owner(m);
	/*
	 * Unmap before the release: once the lease is gone the buffer may
	 * move and its memory be freed under a live mapping. A child after
	 * fork() shares its parent's open file, so its release would end the
	 * parent's lease under the parent's live mapping: a child only
	 * closes its own descriptor, which ends nothing while the parent
	 * keeps its own.
	 */
	rc = unmap(m, owner);
	if (owner) {
		rc2 = release_lease(m->fd, !rc);
		if (!rc)
			rc = rc2;
	}
	if (close(m->fd) < 0 && !rc)
		rc = -errno;
	map_reset(m);
	return rc;
}

/* open @path, one ioctl on it, close: 0 or -errno. */
static int path_ioctl(const char *path, int oflags, unsigned long cmd,
		      void *arg)
{
	int fd, rc;

	clear_err();
	fd = open_file(path, oflags);
	if (fd < 0)
		return fd;
	rc = xioctl(fd, cmd, arg);
	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc;
}

int tfs_stat(const char *path, struct tfs_ioc_stat *st)
{
	memset(st, 0, sizeof(*st));
	st->version = TFS_ABI_VERSION;
	return path_ioctl(path, O_RDONLY, TFS_IOC_STAT, st);
}

int tfs_move(const char *path, enum tfs_tier tier)
{
	struct tfs_ioc_move mv;

	memset(&mv, 0, sizeof(mv));
	mv.version = TFS_ABI_VERSION;
	mv.tier = (uint32_t)tier;
	return path_ioctl(path, O_RDONLY, TFS_IOC_MOVE, &mv);
}

int tfs_prefetch(const char *path, enum tfs_tier tier, unsigned int flags)
{
	struct tfs_ioc_prefetch p;
	int rc;

	memset(&p, 0, sizeof(p));
	p.version = TFS_ABI_VERSION;
	p.flags = flags;
	p.tier = (uint32_t)tier;
	rc = path_ioctl(path, O_RDONLY, TFS_IOC_PREFETCH, &p);
	return rc < 0 ? rc : (int)p.state;
}

int tfs_alloc(const char *path, uint64_t size)
{
	struct tfs_ioc_alloc a;

	memset(&a, 0, sizeof(a));
	a.version = TFS_ABI_VERSION;
	a.size = size;
	return path_ioctl(path, O_RDWR | O_CREAT, TFS_IOC_ALLOC, &a);
}

/* TFS_IOC_RECLAIM on @path: by @uuid when it is not NULL, else GPU @gpu. */
static int reclaim_path(const char *path, int gpu, const uint8_t *uuid,
			uint64_t bytes, uint64_t *freed)
{
	struct tfs_ioc_reclaim r;
	int fd, rc;

	memset(&r, 0, sizeof(r));
	r.version = TFS_ABI_VERSION;
	r.bytes = bytes;
	if (uuid) {
		r.flags = TFS_RECLAIM_UUID;
		memcpy(r.uuid, uuid, sizeof(r.uuid));
	} else {
		r.gpu = gpu;
	}
	/* Any descriptor does, a directory's too: O_RDONLY opens both. */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = xioctl(fd, TFS_IOC_RECLAIM, &r);
	close(fd);
	if (!rc && freed)
		*freed = r.freed;
	return rc;
}

int tfs_reclaim(const char *path, int gpu, uint64_t bytes, uint64_t *freed)
{
	clear_err();
	if (freed)
		*freed = 0;
	if (gpu < TFS_GPU_CURRENT)
		return -EINVAL;
#ifdef TFS_HAVE_CUDA
	if (gpu == TFS_GPU_CURRENT) {
		uint8_t uuid[16];
		int rc = current_uuid(uuid);

		if (rc)
			return rc;
		return reclaim_path(path, 0, uuid, bytes, freed);
	}
#else
	if (gpu == TFS_GPU_CURRENT)
		gpu = TFS_GPU_DEFAULT;
#endif
	return reclaim_path(path, gpu, NULL, bytes, freed);
}
