// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Sparse allocations of the cuda backend (alloc_sparse, populate; see
 * tiers/device.h), with the driver's virtual memory management: an
 * address range reserved for the whole buffer (cuMemAddressReserve), each
 * populated granule its own memory (cuMemCreate, cuMemMap, cuMemSetAccess
 * read-write), and every hole granule mapping one zeroed granule of the
 * device, read-only, shared by every sparse buffer of that GPU.
 *
 * Why holes map memory instead of staying unmapped: the store copies whole
 * chunks out of a device copy (the spill, a fetch into host memory), and a
 * GPU access to an unmapped address is a sticky fault that poisons the
 * context for good. Read-only, so that a write the store did not populate
 * first faults instead of changing every hole of the GPU at once; and the
 * backend refuses such a write before the copy is issued (cuda_vmm_writable).
 *
 * The daemon links the static cudart only: the driver's calls come from
 * cudaGetDriverEntryPointByVersion, which needs no libcuda at link time.
 * Where they are missing (an old driver, no driver: init failed earlier
 * then) or the GPU lacks VMM (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_
 * SUPPORTED), or its granularity is not CUDA_GRANULE, the device offers no
 * sparse allocations (tier_dev_info.sparse false) and the store allocates
 * densely with cudaMalloc, as before.
 *
 * IPC of VMM memory is cuMemExportToShareableHandle per granule, which the
 * one cudaIpcMemHandle_t of an export cannot carry: an export first moves
 * a sparse buffer, every granule populated by then (st_dev_densify), into
 * one cudaMalloc block (cuda_vmm_densify), which then exports as any.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "config/log.h"
#include "tiers/device_cuda_i.h"

/* One sparse allocation: base.ptr of its cuda_dmem is @va. */
struct cuda_vmm {
	CUdeviceptr va; /* reserved, ngran granules */
	size_t ngran;
	size_t populated; /* granules with memory of their own */
	/* Per granule: its memory, 0 for a hole (the zero granule). */
	CUmemGenericAllocationHandle h[];
};

/* The driver's calls, looked up once for the process. */
static struct {
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
			    unsigned long long);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
			   const CUmemAllocationProp *, unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*map)(CUdeviceptr, size_t, size_t,
			CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *,
			       size_t);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
				CUmemAllocationGranularity_flags);
	CUresult (*dev_get)(CUdevice *, int);
	CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
	bool ok;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void)
{
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
#define SYM(n, f) { n, offsetof(__typeof__(drv), f) }
		SYM("cuMemAddressReserve", reserve),
		SYM("cuMemAddressFree", addr_free),
		SYM("cuMemCreate", create),
		SYM("cuMemRelease", release),
		SYM("cuMemMap", map),
		SYM("cuMemUnmap", unmap),
		SYM("cuMemSetAccess", set_access),
		SYM("cuMemGetAllocationGranularity", granularity),
		SYM("cuDeviceGet", dev_get),
		SYM("cuDeviceGetAttribute", attr),
#undef SYM
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		enum cudaDriverEntryPointQueryResult q;
		void *fp = NULL;

		/* The ABI of CUDA 12.0: these calls have not changed since
		 * 10.2, and any driver that runs this cudart has them. */
		if (cudaGetDriverEntryPointByVersion(syms[i].name, &fp, 12000,
						     cudaEnableDefault, &q) !=
			    cudaSuccess ||
		    q != cudaDriverEntryPointSuccess || !fp) {
			(void)cudaGetLastError();
			tfs_info("cuda: the driver has no %s: no sparse device copies",
				 syms[i].name);
			return;
		}
		memcpy((char *)&drv + syms[i].off, &fp, sizeof(fp));
	}
	drv.ok = true;
}

static CUmemAllocationProp prop_of(const struct cuda_dev *d)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = d->gpu;
	return p;
}

static int vmm_fail(struct cuda_dev *d, CUresult r, const char *call,
		    size_t len)
{
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return -ENOMEM;
	tfs_err("cuda: gpu %d: %s of %zu bytes: CUresult %d", d->gpu, call, len,
		(int)r);
	return -EIO;
}

bool cuda_vmm_init(struct cuda_dev *d)
{
	CUmemAllocationProp p = prop_of(d);
	CUdevice cudev;
	size_t gran = 0;
	int yes = 0;

	pthread_once(&drv_once, drv_load);
	if (!drv.ok)
		return false;
	if (drv.dev_get(&cudev, d->gpu) != CUDA_SUCCESS ||
	    drv.attr(&yes,
		     CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
		     cudev) != CUDA_SUCCESS ||
	    !yes) {
		tfs_info("cuda: gpu %d has no virtual memory management: no sparse device copies",
			 d->gpu);
		return false;
	}
	if (drv.granularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
		    CUDA_SUCCESS ||
	    !gran || CUDA_GRANULE % gran) {
		tfs_info("cuda: gpu %d maps memory in granules of %zu bytes, not a divisor of %zu: no sparse device copies",
			 d->gpu, gran, CUDA_GRANULE);
		return false;
	}
	return true;
}

void cuda_vmm_destroy(struct cuda_dev *d)
{
	if (d->zero && !dev_failed(d))
		drv.release(d->zero);
	d->zero = 0;
}

/* The zero granule, made at the first sparse allocation: vmm_lock. */
static int zero_get(struct cuda_dev *d, CUmemGenericAllocationHandle *out)
{
	CUmemAllocationProp p = prop_of(d);
	CUmemAccessDesc a = { .location = p.location,
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr va = 0;
	cudaError_t e;
	CUresult r;
	int rc = 0;

	pthread_mutex_lock(&d->vmm_lock);
	if (d->zero)
		goto out;
	r = drv.create(&h, CUDA_GRANULE, &p, 0);
	if (r != CUDA_SUCCESS) {
		rc = vmm_fail(d, r, "cuMemCreate", CUDA_GRANULE);
		goto out;
	}
	__atomic_add_fetch(&d->held, CUDA_GRANULE, __ATOMIC_RELAXED);
	/* Zeroed once through a mapping of its own, gone after. */
	r = drv.reserve(&va, CUDA_GRANULE, CUDA_GRANULE, 0, 0);
	if (r == CUDA_SUCCESS) {
		r = drv.map(va, CUDA_GRANULE, 0, h, 0);
		if (r == CUDA_SUCCESS) {
			r = drv.set_access(va, CUDA_GRANULE, &a, 1);
			if (r == CUDA_SUCCESS) {
				e = cudaMemset((void *)(uintptr_t)va, 0,
					       CUDA_GRANULE);
				if (e != cudaSuccess) {
					rc = cuda_copy_fail(d, e, "cudaMemset",
							    CUDA_GRANULE, 0);
					r = CUDA_SUCCESS;
				}
			}
			drv.unmap(va, CUDA_GRANULE);
		}
		drv.addr_free(va, CUDA_GRANULE);
	}
	if (r != CUDA_SUCCESS)
		rc = vmm_fail(d, r, "cuMemMap", CUDA_GRANULE);
	if (rc) {
		drv.release(h);
		__atomic_sub_fetch(&d->held, CUDA_GRANULE, __ATOMIC_RELAXED);
		goto out;
	}
	d->zero = h;
out:
	*out = d->zero;
	pthread_mutex_unlock(&d->vmm_lock);
	return rc;
}

/* Map the zero granule read-only over granules [i, i + n) of @v. */
static CUresult map_zero(struct cuda_dev *d, struct cuda_vmm *v, size_t i,
			 size_t n, CUmemGenericAllocationHandle zero)
{
	CUmemAccessDesc a = { .location = prop_of(d).location,
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READ };
	CUresult r = CUDA_SUCCESS;
	size_t k;

	for (k = 0; k < n && r == CUDA_SUCCESS; k++)
		r = drv.map(v->va + (i + k) * CUDA_GRANULE, CUDA_GRANULE, 0,
			    zero, 0);
	if (r != CUDA_SUCCESS) {
		/* What was mapped goes: the caller frees the range. */
		if (k > 1)
			drv.unmap(v->va + i * CUDA_GRANULE,
				  (k - 1) * CUDA_GRANULE);
		return r;
	}
	return drv.set_access(v->va + i * CUDA_GRANULE, n * CUDA_GRANULE, &a,
			      1);
}

int cuda_alloc_sparse(struct tier_dev *dev, size_t len, struct tier_dmem **out)
{
	struct cuda_dev *d = to_cdev(dev);
	size_t ngran = (len + CUDA_GRANULE - 1) / CUDA_GRANULE;
	CUmemGenericAllocationHandle zero;
	struct cuda_dmem *m;
	struct cuda_vmm *v;
	CUresult r;
	int rc;

	*out = NULL;
	if (!d->info.sparse)
		return -EOPNOTSUPP;
	if (dev_failed(d))
		return -ENODEV;
	if (!len || ngran > (SIZE_MAX - sizeof(*v)) / sizeof(v->h[0]) /
				    CUDA_GRANULE)
		return -EINVAL;
	if (cuda_enter(d) != cudaSuccess)
		return -ENODEV;
	rc = zero_get(d, &zero);
	if (rc)
		return rc;
	m = calloc(1, sizeof(*m));
	v = calloc(1, sizeof(*v) + ngran * sizeof(v->h[0]));
	if (m)
		m->gone = cuda_gone_new();
	if (!m || !v || !m->gone) {
		rc = -ENOMEM;
		goto out_free;
	}
	v->ngran = ngran;
	r = drv.reserve(&v->va, ngran * CUDA_GRANULE, CUDA_GRANULE, 0, 0);
	if (r != CUDA_SUCCESS) {
		rc = vmm_fail(d, r, "cuMemAddressReserve", ngran * CUDA_GRANULE);
		goto out_free;
	}
	r = map_zero(d, v, 0, ngran, zero);
	if (r != CUDA_SUCCESS) {
		rc = vmm_fail(d, r, "cuMemMap", ngran * CUDA_GRANULE);
		drv.addr_free(v->va, ngran * CUDA_GRANULE);
		goto out_free;
	}
	m->ptr = (void *)(uintptr_t)v->va;
	m->vmm = v;
	m->base.len = len;
	m->base.granted = 0;
	*out = &m->base;
	return 0;

out_free:
	if (m)
		free(m->gone);
	free(m);
	free(v);
	return rc;
}

int cuda_populate(struct tier_dev *dev, struct tier_dmem *dm, uint64_t off,
		  size_t len)
{
	struct cuda_dev *d = to_cdev(dev);
	struct cuda_dmem *m = to_cmem(dm);
	struct cuda_vmm *v = m->vmm;
	CUmemAllocationProp p = prop_of(d);
	CUmemAccessDesc a = { .location = p.location,
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	struct cuda_slot *slot = NULL;
	size_t i, end;
	cudaError_t e;
	int rc = 0;
	size_t cap = v ? v->ngran * CUDA_GRANULE : m->base.granted;

	/* The store asks by whole granules: up to the last one's end. */
	if (off > cap || len > cap - off)
		return -EINVAL;
	if (!v || !len)
		return 0;
	if (dev_failed(d))
		return -ENODEV;
	e = cuda_enter(d);
	if (e != cudaSuccess)
		return cuda_copy_fail(d, e, "cudaSetDevice", 0, 0);
	end = (off + len + CUDA_GRANULE - 1) / CUDA_GRANULE;
	for (i = off / CUDA_GRANULE; i < end && !rc; i++) {
		CUdeviceptr at = v->va + i * CUDA_GRANULE;
		CUmemGenericAllocationHandle h = 0;
		CUresult r;

		if (v->h[i])
			continue;
		r = drv.create(&h, CUDA_GRANULE, &p, 0);
		if (r != CUDA_SUCCESS) {
			rc = vmm_fail(d, r, "cuMemCreate", CUDA_GRANULE);
			break;
		}
		r = drv.unmap(at, CUDA_GRANULE);
		if (r == CUDA_SUCCESS)
			r = drv.map(at, CUDA_GRANULE, 0, h, 0);
		if (r == CUDA_SUCCESS)
			r = drv.set_access(at, CUDA_GRANULE, &a, 1);
		if (r != CUDA_SUCCESS) {
			rc = vmm_fail(d, r, "cuMemMap", CUDA_GRANULE);
			drv.unmap(at, CUDA_GRANULE);
			drv.release(h);
			/* A hole again, or the range has a hole in it that
			 * reads would fault on: the device is unusable. */
			if (map_zero(d, v, i, 1, d->zero) != CUDA_SUCCESS)
				cuda_dev_fail(d, cudaErrorIllegalAddress,
					      "cuMemMap");
			break;
		}
		v->h[i] = h;
		v->populated++;
		m->base.granted += CUDA_GRANULE;
		__atomic_add_fetch(&d->held, CUDA_GRANULE, __ATOMIC_RELAXED);
		/* cuMemCreate's memory holds whatever was there before. */
		if (!slot)
			slot = cuda_slot_get(d);
		e = cudaMemsetAsync((void *)(uintptr_t)at, 0, CUDA_GRANULE,
				    slot->stream);
		if (e != cudaSuccess)
			rc = cuda_copy_fail(d, e, "cudaMemsetAsync",
					    CUDA_GRANULE, i * CUDA_GRANULE);
	}
	if (slot) {
		e = cudaEventRecord(slot->fin, slot->stream);
		if (e == cudaSuccess)
			e = cuda_event_wait(slot->fin);
		if (e != cudaSuccess && !rc)
			rc = cuda_copy_fail(d, e, "populate", len, off);
		cuda_slot_put(d, slot);
	}
	return rc;
}

bool cuda_vmm_writable(const struct cuda_dmem *m, size_t len, uint64_t off)
{
	const struct cuda_vmm *v = m->vmm;

	if (!v || !len)
		return true;
	for (size_t i = off / CUDA_GRANULE;
	     i < (off + len + CUDA_GRANULE - 1) / CUDA_GRANULE; i++)
		if (!v->h[i])
			return false;
	return true;
}

void cuda_vmm_release(struct cuda_dev *d, struct cuda_vmm *v)
{
	CUresult r = CUDA_SUCCESS, q;

	if (!dev_failed(d)) {
		r = drv.unmap(v->va, v->ngran * CUDA_GRANULE);
		for (size_t i = 0; i < v->ngran; i++)
			if (v->h[i] && (q = drv.release(v->h[i])) != CUDA_SUCCESS)
				r = q;
		q = drv.addr_free(v->va, v->ngran * CUDA_GRANULE);
		if (r == CUDA_SUCCESS)
			r = q;
		if (r != CUDA_SUCCESS)
			tfs_err("cuda: gpu %d: releasing a sparse allocation of %zu granules: CUresult %d",
				d->gpu, v->ngran, (int)r);
	}
	free(v);
}

int cuda_vmm_densify(struct cuda_dev *d, struct cuda_dmem *m)
{
	struct cuda_vmm *v = m->vmm;
	size_t n = v ? v->ngran * CUDA_GRANULE : 0;
	struct cuda_gone *g;
	struct cuda_slot *slot;
	void *ptr = NULL;
	cudaError_t e;
	int rc;

	if (!v)
		return 0;
	if (v->populated != v->ngran)
		return -EINVAL;
	g = cuda_gone_new();
	if (!g)
		return -ENOMEM;
	__atomic_add_fetch(&d->held, n, __ATOMIC_RELAXED);
	e = cuda_enter(d);
	if (e == cudaSuccess)
		e = cudaMalloc(&ptr, n);
	if (e != cudaSuccess) {
		__atomic_sub_fetch(&d->held, n, __ATOMIC_RELAXED);
		free(g);
		if (e == cudaErrorMemoryAllocation) {
			(void)cudaGetLastError();
			return -ENOSPC;
		}
		return cuda_copy_fail(d, e, "cudaMalloc", n, 0);
	}
	slot = cuda_slot_get(d);
	e = cudaMemcpyAsync(ptr, m->ptr, n, cudaMemcpyDeviceToDevice,
			    slot->stream);
	if (e == cudaSuccess)
		e = cudaEventRecord(slot->fin, slot->stream);
	if (e == cudaSuccess)
		e = cuda_event_wait(slot->fin);
	cuda_slot_put(d, slot);
	if (e != cudaSuccess) {
		rc = cuda_copy_fail(d, e, "d2d copy", n, 0);
		g->ptr = ptr;
		g->granted = n;
		cuda_free_later(d, g);
		return rc;
	}
	/* The sparse range goes on the freer thread, as cudaFree would. */
	g->vmm = v;
	g->granted = n;
	cuda_free_later(d, g);
	m->ptr = ptr;
	m->vmm = NULL;
	m->base.granted = n;
	return 0;
}
