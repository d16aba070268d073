/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libtierfs: map a tierfs file's buffer into a GPU program.
 *
 *	struct tfs_map m;
 *	int rc = tfs_map_open("/mnt/tierfs/x", TFS_MAP_WRITE, &m);
 *	if (rc)
 *		errx(1, "%s", tfs_strerror(rc));
 *	kernel<<<...>>>(m.ptr, m.length);
 *	tfs_map_commit(&m);
 *	tfs_map_close(&m);
 *
 * With the cuda backend, ptr is a device pointer on the GPU numbered
 * m.device in this process (CUDA IPC). With the sim backend, ptr is host
 * memory (a shared-memory mapping). handle_type says which.
 *
 * Every function returns 0 or a negative errno. CUDA failures become -EIO,
 * or -ENODEV when no device matches or none is usable; tfs_strerror() then
 * names the CUDA error and, where it can, the likely cause (another PID
 * namespace, MIG instance or compute mode). A build without CUDA answers a
 * CUDA export with -ENOTSUP.
 *
 * CUDA contexts: the library works in the primary context of m.device,
 * which it retains while the map is open, and leaves the calling thread's
 * current context (or lack of one) and current device as they were: it
 * never creates a context on a GPU the map is not on.
 *
 * Thread safety: distinct maps may be used from different threads at once;
 * one map must not be used by two threads at once.
 *
 * fork: a map belongs to the process that opened it. A child inherits the
 * descriptor that holds the lease (not the CUDA mapping, which a forked
 * child cannot use); in the child tfs_map_close() only closes that
 * descriptor (and unmaps the child's copy of a shm map), leaving the
 * parent's map and lease alone, and tfs_map_commit() returns -EBADF.
 *
 * Link with `pkg-config --cflags --libs tierfs`.
 */
#ifndef LIBTIERFS_H
#define LIBTIERFS_H

#include <stddef.h>
#include <stdint.h>

#include "tierfs.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFS_MAP_READ 0x1 /* map for reading */
#define TFS_MAP_WRITE 0x2 /* map for writing (and reading); needs write
			   * permission on the file */

struct tfs_map {
	void *ptr; /* the buffer's first byte; NULL for an empty sim file */
	size_t length; /* logical size of the buffer in bytes */
	int handle_type; /* enum tfs_handle_type */
	int device; /* CUDA device ordinal ptr lives on; -1 for shm */
	uint64_t generation; /* as exported; bumped when replaced */
	uint8_t uuid[16]; /* the GPU it is on; see tierfs.h */

	/* private to libtierfs */
	int fd; /* open file holding the lease; -1 once closed */
	int flags;
	void *base; /* what was mapped: ptr - offset */
	size_t map_len; /* bytes mmap'd (shm) */
	int pid; /* the process that opened the map */
	int cudev; /* CUdevice of cuctx */
	void *cuctx; /* the primary context retained for the map (CUDA) */
};

/*
 * Open @path (O_RDONLY for TFS_MAP_READ, O_RDWR for TFS_MAP_WRITE), export
 * its buffer (TFS_IOC_EXPORT: the daemon moves it to the device tier and
 * holds it there with a lease) and map it into this process. On success
 * @out describes the mapping, which stays valid until tfs_map_close(); the
 * buffer does not move while it is mapped. On failure @out holds no
 * resources (fd is -1) and need not be closed.
 *
 * Errors: those of open(2); -EINVAL for bad @flags; -ENOTTY when @path is
 * not on tierfs; -ENODEV when the mount has no device tier or (cuda) no
 * visible GPU has the exported UUID; -ENOSPC when the buffer does not fit
 * on the device; -ENOTSUP for a CUDA export in a build without CUDA;
 * -EIO for a CUDA error; -EPROTO for a malformed answer.
 */
int tfs_map_open(const char *path, int flags, struct tfs_map *out);

/*
 * Tell the daemon the buffer was written through this map
 * (TFS_IOC_COMMIT): lower-tier copies are dropped, mtime is bumped and
 * readers of the file see the new bytes. For CUDA, waits for all work on
 * the map's device first (cudaDeviceSynchronize of the map's context), so
 * kernels and copies writing the buffer must have been queued before; that
 * stalls every stream of the process on that GPU, and misses writes queued
 * in another context or from another GPU. Needs TFS_MAP_WRITE, else
 * -EBADF. -EIO when the device synchronisation fails.
 */
int tfs_map_commit(struct tfs_map *m);

/*
 * tfs_map_commit(), waiting only for @stream (a cudaStream_t; NULL is the
 * legacy default stream of the map's context), or for @event (a
 * cudaEvent_t recorded after the last write, -EINVAL for NULL): the work
 * that wrote the buffer, whatever its GPU or context, and nothing else.
 * With a sim map they wait for nothing, as tfs_map_commit().
 */
int tfs_map_commit_stream(struct tfs_map *m, void *stream);
int tfs_map_commit_event(struct tfs_map *m, void *event);

/*
 * Unmap (cudaIpcCloseMemHandle or munmap), release the lease
 * (TFS_IOC_RELEASE) and close the file. Always frees everything; returns
 * the first error met. Closing a closed map (fd -1) is a no-op returning 0.
 * Uncommitted writes through the map may be lost when the buffer moves
 * later: commit first. In a child after fork, only closes the child's
 * descriptor (see above).
 */
int tfs_map_close(struct tfs_map *m);

/* TFS_IOC_STAT on @path: its tier, sizes, pins, leases and generation. */
int tfs_stat(const char *path, struct tfs_ioc_stat *st);

/* Move @path's buffer to @tier (TFS_IOC_MOVE). -EBUSY while another open
 * file holds a lease on it, -ENOSPC when the tier has no room, -EINVAL for
 * a bad tier. */
int tfs_move(const char *path, enum tfs_tier tier);

/*
 * Queue @path's buffer to be brought up to @tier in the background
 * (TFS_IOC_PREFETCH); with @flags TFS_PREFETCH_WAIT, return once it is
 * there. Returns the enum tfs_prefetch_state (TFS_PREFETCH_THERE when it
 * was there already), or -errno: the move's (-ENOSPC, -EDQUOT, -EBUSY for
 * a pinned buffer) when waiting, -EAGAIN when the queue is full, -ENODEV
 * for the device tier of a mount without one, -ENOTTY from a daemon
 * older than the ioctl (tfs_move() then does it, blocking).
 */
int tfs_prefetch(const char *path, enum tfs_tier tier, unsigned int flags);

/*
 * Give the empty file @path @size bytes of zeroed device memory
 * (TFS_IOC_ALLOC), creating it (mode 0666 & ~umask) when it does not exist.
 * -EEXIST when the file is not empty. Map it with TFS_MAP_WRITE next.
 */
int tfs_alloc(const char *path, uint64_t size);

/* For tfs_reclaim(): the GPU this thread's CUDA runtime has current, found
 * on the daemon's side by its UUID; without CUDA, the daemon's default. */
#define TFS_GPU_CURRENT (-2)
/* For tfs_reclaim(): the daemon's default GPU ([device] gpu). */
#define TFS_GPU_DEFAULT (-1)

/*
 * Ask the tierfs mount that holds @path (the mount point, or any file or
 * directory on it) to give back at least @bytes of a GPU's memory
 * (TFS_IOC_RECLAIM): it spills its least recently used buffers of that GPU
 * to host memory and returns once the memory is free for cudaMalloc, or
 * once nothing more can move. @gpu is an ordinal as the daemon numbers its
 * GPUs ([device] gpu, `tierfsctl status`), TFS_GPU_DEFAULT or
 * TFS_GPU_CURRENT. *@freed (may be NULL) gets the bytes given back, which
 * is less than @bytes when too little could move; that is not an error.
 *
 * Errors: those of open(2); -ENOTTY when @path is not on tierfs; -ENODEV
 * when the mount has no device tier; -ENXIO when it does not use that GPU
 * (TFS_GPU_CURRENT: the caller's GPU is not one of tierfs's).
 */
int tfs_reclaim(const char *path, int gpu, uint64_t bytes, uint64_t *freed);

/*
 * cudaMalloc(@ptr, @size) on this thread's current device, and when the
 * device is out of memory, tfs_reclaim() @size bytes of it from the tierfs
 * mount holding @mount and try again, for as long as tierfs gives memory
 * back. For GPU programs that call cudaMalloc directly and share the GPU
 * with tierfs. 0 with *@ptr set; -ENOMEM when the memory cannot be found
 * even after tierfs gave back what it could; -EIO (tfs_strerror() names
 * the CUDA error) or -ENODEV for other CUDA failures; -ENOTSUP in a build
 * without CUDA.
 */
int tfs_cuda_malloc(void **ptr, size_t size, const char *mount);

/*
 * A description of @rc, a return value of this library. When @rc is the
 * last error this thread got from libtierfs and a CUDA call caused it, the
 * text names the CUDA error ("cudaIpcOpenMemHandle: invalid argument
 * (cudaErrorInvalidValue, 1)"); otherwise it is strerror(-rc). The string
 * lives until this thread's next libtierfs call.
 */
const char *tfs_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif
