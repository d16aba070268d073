# SPDX-License-Identifier: LGPL-2.1-or-later
"""A stand-in for RMM's few calls the device store and its tests make, on
the CUDA runtime tierfs.device loads (the fake one): per-device current
resources, a cudaMalloc resource, FailureCallbackResourceAdaptor (retry
while the callback says so, as RMM's does) and DeviceBuffer. Not RMM: it
only lets the tests check that an allocation that fails makes tierfs
spill, as it would through RMM."""

from . import mr

__all__ = ["DeviceBuffer", "mr"]


class DeviceBuffer:
    def __init__(self, size=0):
        self.size = int(size)
        self._mr = mr.get_current_device_resource()
        self.ptr = 0  # __del__ of one whose allocation failed
        self.ptr = self._mr.allocate(self.size) if self.size else 0

    @property
    def nbytes(self):
        return self.size

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.size,), "typestr": "|u1", "strides": None,
                "data": (self.ptr, False), "version": 3}

    def __del__(self):
        if self.ptr:
            self._mr.deallocate(self.ptr, self.size)
            self.ptr = 0
