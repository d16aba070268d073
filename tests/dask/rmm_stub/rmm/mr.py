# SPDX-License-Identifier: LGPL-2.1-or-later
"""rmm.mr of the stand-in: see rmm/__init__.py."""

import ctypes

#: allocations that failed, and callback calls, in this process
FAILED = {"allocations": 0, "callbacks": 0, "retried_ok": 0}


def _lib():
    from tierfs import device

    lib = device._runtime().lib
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    return lib


def _device():
    d = ctypes.c_int(0)
    _lib().cudaGetDevice(ctypes.byref(d))
    return d.value


class CudaMemoryResource:
    def allocate(self, n):
        lib = _lib()
        p = ctypes.c_void_p()
        rc = lib.cudaMalloc(ctypes.byref(p), n)
        if rc:
            lib.cudaGetLastError()
            raise MemoryError("std::bad_alloc: CUDA error: out of memory")
        return p.value

    def deallocate(self, ptr, n):
        _lib().cudaFree(ptr)


class FailureCallbackResourceAdaptor:
    def __init__(self, upstream, callback):
        self.upstream_mr = upstream
        self.callback = callback

    def allocate(self, n):
        failed = False
        while True:
            try:
                p = self.upstream_mr.allocate(n)
                if failed:
                    FAILED["retried_ok"] += 1
                return p
            except MemoryError:
                FAILED["allocations"] += 1
                failed = True
                FAILED["callbacks"] += 1
                if not self.callback(n):
                    raise

    def deallocate(self, ptr, n):
        self.upstream_mr.deallocate(ptr, n)


_current = {}


def get_current_device_resource():
    return _current.setdefault(_device(), CudaMemoryResource())


def set_current_device_resource(mr):
    _current[_device()] = mr
