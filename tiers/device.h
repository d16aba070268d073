/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Device tier backends: GPU memory (cuda) or a host-memory stand-in with a
 * fixed capacity (sim). A backend is a table of functions; an instance's
 * first member points at it. The store serialises nothing for a backend:
 * every slot must be safe to call from several threads at once, on
 * different allocations.
 */
#ifndef TFS_TIERS_DEVICE_H
#define TFS_TIERS_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tierfs.h"

struct tfs_config;

/* One device allocation. Backends embed it first in their own struct. */
struct tier_dmem {
	size_t len; /* bytes usable */
};

struct tier_dev_info {
	const char *name; /* "cuda", "sim" */
	char model[64]; /* "NVIDIA H200", "simulated device" */
	uint64_t capacity; /* total bytes */
	uint64_t free; /* bytes free at init */
	uint8_t uuid[16];
};

struct tier_dev;

struct tier_dev_ops {
	const char *name;
	/*
	 * Open the backend for @cfg (device.gpu, host.pinned, ...). Returns 0,
	 * or -ENODEV / -ENXIO / ... with one line in @err naming the cause
	 * (for cuda: the CUDA error's name and number); -ENOENT when the
	 * machine has no driver for the device at all, which backend=auto
	 * takes as the ordinary case of a machine without a GPU.
	 */
	int (*init)(struct tier_dev **out, const struct tfs_config *cfg,
		    char *err, size_t errlen);
	void (*destroy)(struct tier_dev *dev);
	/* Allocate @len bytes. -ENOMEM when the device is out of memory. */
	int (*alloc)(struct tier_dev *dev, size_t len, struct tier_dmem **out);
	void (*free)(struct tier_dev *dev, struct tier_dmem *m);
	/* Copy device -> host. @off + @len <= m->len. Returns 0 or -errno. */
	int (*read)(struct tier_dev *dev, struct tier_dmem *m, void *dst,
		    size_t len, uint64_t off);
	/* Copy host -> device. */
	int (*write)(struct tier_dev *dev, struct tier_dmem *m, const void *src,
		     size_t len, uint64_t off);
	/* Zero a range. */
	int (*zero)(struct tier_dev *dev, struct tier_dmem *m, size_t len,
		    uint64_t off);
	/*
	 * Fill handle_type, handle, offset and uuid of @out so that a process
	 * of @uid can map @m. Called once per lease epoch; unexport is called
	 * when the last lease ends.
	 */
	int (*export)(struct tier_dev *dev, struct tier_dmem *m, uid_t uid,
		      gid_t gid, struct tfs_ioc_export *out);
	void (*unexport)(struct tier_dev *dev, struct tier_dmem *m);
	void (*info)(struct tier_dev *dev, struct tier_dev_info *out);
	/*
	 * Optional. Page-lock host memory the store will copy to and from
	 * (host.pinned), so that copies of it need no staging. Called once
	 * per pool chunk when the chunk is first mapped; unregister before it
	 * is unmapped. A failed register is not an error: the chunk stays
	 * pageable and copies of it are staged.
	 */
	/* Optional: where the daemon can address @m's bytes directly (sim),
	 * so reads are replied without a copy; NULL when it cannot (cuda). */
	void *(*host_ptr)(struct tier_dev *dev, struct tier_dmem *m);
	int (*host_register)(struct tier_dev *dev, void *ptr, size_t len);
	void (*host_unregister)(struct tier_dev *dev, void *ptr, size_t len);
};

struct tier_dev {
	const struct tier_dev_ops *ops;
};

/* The backend called @name ("cuda", "sim"), or NULL if not built in. */
const struct tier_dev_ops *tier_dev_lookup(const char *name);

extern const struct tier_dev_ops tier_dev_sim_ops;
#ifdef TFS_HAVE_CUDA
extern const struct tier_dev_ops tier_dev_cuda_ops;
#endif

#endif
