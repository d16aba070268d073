# SPDX-License-Identifier: LGPL-2.1-or-later
"""A device array of the tests' own, for the device store without a GPU.

DevArray holds bytes of device memory from the CUDA runtime tierfs.device
loads ($TIERFS_CUDART: the fake runtime tests/gpu/cuda_mock.c, whose device
memory the CPU can read, which is how the tests look at the bytes). It has
``__cuda_array_interface__`` (version 3, naming the stream that wrote it
when one did), a Distributed "cuda" serializer (its one frame is the array
itself: device memory, no copy) and a "dask" one (a copy to host, counted
in ``HOST_COPIES``), as cupy has both, and pickles through host memory
as cupy does (counted too).
"""

from __future__ import annotations

import ctypes
import os

from dask.sizeof import sizeof
from distributed.protocol import (cuda_deserialize, cuda_serialize,
                                  dask_deserialize, dask_serialize)

#: times a DevArray went to host memory through its "dask" serializer, and
#: came back from it, in this process
HOST_COPIES = {"to_host": 0, "from_host": 0}


def _lib():
    from tierfs import device

    lib = device._runtime().lib
    vp = ctypes.c_void_p
    lib.cudaMalloc.argtypes = [ctypes.POINTER(vp), ctypes.c_size_t]
    lib.cudaFree.argtypes = [vp]
    lib.cudaMemsetAsync.argtypes = [vp, ctypes.c_int, ctypes.c_size_t, vp]
    lib.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
    return lib


class DevArray:
    """nbytes of device memory; owner keeps another object's memory alive
    (a deserialized frame) instead of allocating."""

    def __init__(self, nbytes: int, ptr: int | None = None, owner=None,
                 tag=None):
        self.nbytes = int(nbytes)
        self.tag = tag
        self.stream = None
        self._owner = owner
        self._mine = ptr is None
        if ptr is None and self.nbytes:
            p = ctypes.c_void_p()
            rc = _lib().cudaMalloc(ctypes.byref(p), self.nbytes)
            if rc:
                raise MemoryError("cudaMalloc(%d): %d" % (self.nbytes, rc))
            ptr = p.value
        self.ptr = ptr or 0

    @classmethod
    def pattern(cls, nbytes: int, seed: int, tag=None) -> "DevArray":
        """Bytes that depend on seed and position, written by the CPU."""
        a = cls(nbytes, tag=tag)
        if nbytes:
            ctypes.memmove(a.ptr, expected(nbytes, seed), nbytes)
        return a

    @classmethod
    def queued(cls, nbytes: int, value: int, steps: int = 8) -> "DevArray":
        """nbytes of value, written by steps memsets queued on a stream of
        its own that the interface names: the bytes are there only once the
        stream has run them all (the fake runtime delays each)."""
        lib = _lib()
        a = cls(nbytes)
        s = ctypes.c_void_p()
        assert lib.cudaStreamCreateWithFlags(ctypes.byref(s), 1) == 0
        a.stream = s.value
        step = -(-nbytes // steps)
        for off in range(0, nbytes, step):
            n = min(step, nbytes - off)
            assert lib.cudaMemsetAsync(a.ptr + off, value, n, a.stream) == 0
        return a

    @property
    def __cuda_array_interface__(self):
        cai = {"shape": (self.nbytes,), "typestr": "|u1", "strides": None,
               "data": (self.ptr, False), "version": 3}
        if self.stream is not None:
            cai["stream"] = self.stream
        return cai

    def __reduce__(self):
        # As cupy's arrays pickle: through a copy to host (counted).
        HOST_COPIES["to_host"] += 1
        return _from_host, (self.tobytes(), self.tag)

    def tobytes(self) -> bytes:
        """The bytes, read by the CPU (the fake runtime only)."""
        return ctypes.string_at(self.ptr, self.nbytes) if self.nbytes else b""

    def __del__(self):
        if self._mine and self.ptr:
            try:
                _lib().cudaFree(self.ptr)
            except Exception:
                pass
            self.ptr = 0


def _from_host(data: bytes, tag) -> DevArray:
    HOST_COPIES["from_host"] += 1
    a = DevArray(len(data), tag=tag)
    if a.nbytes:
        ctypes.memmove(a.ptr, data, a.nbytes)
    return a


def expected(nbytes: int, seed: int) -> bytes:
    """What DevArray.pattern(nbytes, seed) holds."""
    import numpy as np

    return (np.arange(nbytes, dtype=np.uint64) * 2654435761 + seed * 97) \
        .astype(np.uint8).tobytes()


@cuda_serialize.register(DevArray)
def _cuda_ser(x: DevArray):
    return {"nbytes": x.nbytes, "tag": x.tag}, [x]


@cuda_deserialize.register(DevArray)
def _cuda_deser(header, frames):
    (f,) = frames
    cai = f.__cuda_array_interface__
    a = DevArray(header["nbytes"], ptr=cai["data"][0], owner=f,
                 tag=header["tag"])
    return a


@dask_serialize.register(DevArray)
def _dask_ser(x: DevArray):
    HOST_COPIES["to_host"] += 1
    return {"nbytes": x.nbytes, "tag": x.tag}, [x.tobytes()]


@dask_deserialize.register(DevArray)
def _dask_deser(header, frames):
    HOST_COPIES["from_host"] += 1
    a = DevArray(header["nbytes"], tag=header["tag"])
    if a.nbytes:
        ctypes.memmove(a.ptr, bytes(frames[0]), a.nbytes)
    return a


sizeof.register(DevArray)(lambda x: x.nbytes)


def host_copies(dask_worker=None) -> dict:
    return dict(HOST_COPIES, pid=os.getpid())
