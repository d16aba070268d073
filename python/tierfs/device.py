# SPDX-License-Identifier: LGPL-2.1-or-later
"""A tierfs file's buffer on the GPU, from Python, and GPU memory on request.

    import cupy, tierfs.device
    with tierfs.device.open("/mnt/tierfs/x", write=True) as buf:
        a = cupy.asarray(buf)          # zero copy: the file's bytes, uint8
        a[:] = 7
        buf.commit()                   # readers of the file see the 7s

``open()`` exports the file (TFS_IOC_EXPORT: the daemon moves its buffer to
the device tier, on the GPU of this thread's current CUDA context when it
has one, and gives this process a lease: for writing, on the live
copy, held there; for reading, on the sim backend, a private snapshot) and
maps it into this process: on the cuda backend the CUDA IPC handle is opened here, with the
CUDA runtime through ctypes, so the object has ``__cuda_array_interface__``
and cupy, torch and numba take it without a copy; on the sim backend the
bytes are a shared-memory mapping and ``buf.array`` (or
``numpy.asarray(buf)``) is a NumPy array over it. ``commit()`` publishes what
was written; ``close()`` (or leaving the ``with``) unmaps and ends the lease.

``reclaim()`` asks the daemon for GPU memory back (TFS_IOC_RECLAIM) and
``rmm_failure_callback()`` makes that an RMM failure callback, so that an RMM
allocation that fails makes tierfs spill and is retried::

    import rmm, tierfs.device
    mr = rmm.mr.FailureCallbackResourceAdaptor(
        rmm.mr.CudaMemoryResource(),
        tierfs.device.rmm_failure_callback("/mnt/tierfs"))
    rmm.mr.set_current_device_resource(mr)

Pure Python: ioctls through fcntl, CUDA through ctypes. The CUDA runtime is
found as ``$TIERFS_CUDART``, else ``libcudart.so`` and its versioned names
(one already loaded, by cupy or torch, is reused).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import io
import mmap
import os
import struct
import threading

__all__ = ["open", "DeviceBuffer", "reclaim", "prefetch", "rmm_failure_callback",
           "CudaError"]

# include/tierfs.h ---------------------------------------------------------

ABI_VERSION = 1
HANDLE_CUDA_IPC = 1
HANDLE_SHM = 2
EXPORT_WRITE = 0x1
RELEASE_UNMAPPED = 0x1
RECLAIM_UUID = 0x1
GPU_DEFAULT = -1


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (0xF7 << 8) | nr


_EXPORT = struct.Struct("<IIIIQQQ64s16s16sIIQ")
_RELEASE = struct.Struct("<IIQ2Q")
_COMMIT = struct.Struct("<IIII2Q")
COMMIT_WAITED_DEVICE = 1
COMMIT_WAITED_STREAM = 2
COMMIT_WAITED_EVENT = 3
_RECLAIM = struct.Struct("<IIiIQQ16s4Q")
_PREFETCH = struct.Struct("<IIIIQQII3Q")
assert (_EXPORT.size, _RELEASE.size, _COMMIT.size, _RECLAIM.size) == \
    (152, 32, 32, 80), "include/tierfs.h changed"
_W, _R = 1, 2
IOC_EXPORT = _ioc(_R | _W, 1, _EXPORT.size)
IOC_RELEASE = _ioc(_W, 2, _RELEASE.size)
IOC_COMMIT = _ioc(_W, 3, _COMMIT.size)
IOC_RECLAIM = _ioc(_R | _W, 7, _RECLAIM.size)
IOC_PREFETCH = _ioc(_R | _W, 8, _PREFETCH.size)
PREFETCH_WAIT = 0x1
_TIERS = {"device": 0, "host": 1, "disk": 2}
_PREFETCH_STATES = {1: "there", 2: "queued", 3: "done"}


def _ioctl(fd, code, packed: bytes) -> bytes:
    buf = bytearray(packed)
    fcntl.ioctl(fd, code, buf, True)
    return bytes(buf)


# The CUDA runtime, through ctypes ------------------------------------------


class CudaError(OSError):
    """A CUDA runtime call failed; ``code`` is the cudaError_t."""

    def __init__(self, call, code, name, text):
        super().__init__(errno.EIO, "%s: %s (%s, %d)" % (call, text, name,
                                                         code))
        self.code = code


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


_CUDA_ERROR_MEMORY_ALLOCATION = 2
_IPC_LAZY_ENABLE_PEER_ACCESS = 1
# cudaDeviceProp begins with char name[256] and then the 16-byte UUID in
# every CUDA release; the rest of it is never read, only given room.
_PROP_UUID_OFFSET = 256
_PROP_ROOM = 16384


class _Cudart:
    def __init__(self):
        lib = None
        tried = []
        names = [os.environ.get("TIERFS_CUDART"), "libcudart.so",
                 "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                 ctypes.util.find_library("cudart")]
        for name in names:
            if not name or name in tried:
                continue
            tried.append(name)
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise OSError(errno.ENODEV, "the file is on a GPU but no CUDA "
                          "runtime could be loaded (tried %s; set "
                          "TIERFS_CUDART to the libcudart.so to use)" %
                          ", ".join(tried))
        self.lib = lib
        c_int, c_void_p = ctypes.c_int, ctypes.c_void_p
        sigs = {
            "cudaGetDevice": [ctypes.POINTER(c_int)],
            "cudaSetDevice": [c_int],
            "cudaGetDeviceCount": [ctypes.POINTER(c_int)],
            "cudaIpcOpenMemHandle": [ctypes.POINTER(c_void_p), _IpcHandle,
                                     ctypes.c_uint],
            "cudaIpcCloseMemHandle": [c_void_p],
            "cudaDeviceSynchronize": [],
            "cudaStreamSynchronize": [c_void_p],
            "cudaEventSynchronize": [c_void_p],
            "cudaGetLastError": [],
        }
        for fn, args in sigs.items():
            f = getattr(lib, fn)
            f.argtypes = args
            f.restype = c_int
        # CUDA 12 headers call the v2 of it by the plain name.
        self.props = getattr(lib, "cudaGetDeviceProperties_v2", None) or \
            lib.cudaGetDeviceProperties
        self.props.argtypes = [c_void_p, c_int]
        self.props.restype = c_int
        for fn in ("cudaGetErrorName", "cudaGetErrorString"):
            getattr(lib, fn).argtypes = [c_int]
            getattr(lib, fn).restype = ctypes.c_char_p

    def check(self, call, code):
        if code:
            self.lib.cudaGetLastError()
            raise CudaError(call, code,
                            self.lib.cudaGetErrorName(code).decode(),
                            self.lib.cudaGetErrorString(code).decode())

    def current(self) -> int:
        d = ctypes.c_int(0)
        self.check("cudaGetDevice", self.lib.cudaGetDevice(ctypes.byref(d)))
        return d.value

    def uuid(self, dev: int) -> bytes:
        buf = ctypes.create_string_buffer(_PROP_ROOM)
        self.check("cudaGetDeviceProperties", self.props(buf, dev))
        return buf.raw[_PROP_UUID_OFFSET:_PROP_UUID_OFFSET + 16]

    def _driver_fn(self, name: str, *argtypes):
        """A driver API function through the runtime, or None."""
        fn, st = ctypes.c_void_p(), ctypes.c_int(0)
        by_version = getattr(self.lib, "cudaGetDriverEntryPointByVersion",
                             None)
        if by_version is not None:
            by_version.argtypes = [ctypes.c_char_p,
                                   ctypes.POINTER(ctypes.c_void_p),
                                   ctypes.c_uint, ctypes.c_ulonglong,
                                   ctypes.POINTER(ctypes.c_int)]
            by_version.restype = ctypes.c_int
            rc = by_version(name.encode(), ctypes.byref(fn), 12000, 0,
                            ctypes.byref(st))
        else:
            old = getattr(self.lib, "cudaGetDriverEntryPoint", None)
            if old is None:
                return None
            old.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_int)]
            old.restype = ctypes.c_int
            rc = old(name.encode(), ctypes.byref(fn), 0, ctypes.byref(st))
        if rc or st.value or not fn.value:
            self.lib.cudaGetLastError()
            return None
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(fn.value)

    def context_uuid(self) -> bytes | None:
        """The UUID of the GPU of this thread's current context; None when
        the thread has none. Makes no context: the driver says whether
        one is current, and then the runtime's device is its device."""
        get = self._driver_fn("cuCtxGetCurrent",
                              ctypes.POINTER(ctypes.c_void_p))
        ctx = ctypes.c_void_p()
        if get is None or get(ctypes.byref(ctx)) or not ctx.value:
            return None
        try:
            return self.uuid(self.current())
        except CudaError:
            return None

    def find(self, uuid: bytes) -> int:
        """The ordinal, in this process, of the GPU whose UUID is uuid."""
        n = ctypes.c_int(0)
        self.check("cudaGetDeviceCount",
                   self.lib.cudaGetDeviceCount(ctypes.byref(n)))
        for dev in range(n.value):
            if self.uuid(dev) == uuid:
                return dev
        raise OSError(errno.ENODEV, "no visible CUDA device has the UUID of "
                      "tierfs's GPU (%s; %d visible): check "
                      "CUDA_VISIBLE_DEVICES" % (_uuid_str(uuid), n.value))

    def retain(self, dev):
        """dev's primary context, retained, for within(); None when the
        driver calls cannot be had (within() then falls back to on())."""
        if not hasattr(self, "_drv"):
            p, i, vp = ctypes.POINTER, ctypes.c_int, ctypes.c_void_p
            self._drv = {n: self._driver_fn(n, *a) for n, a in (
                ("cuDeviceGet", (p(i), i)),
                ("cuDevicePrimaryCtxRetain", (p(vp), i)),
                ("cuDevicePrimaryCtxRelease", (i,)),
                ("cuCtxPushCurrent", (vp,)),
                ("cuCtxPopCurrent", (p(vp),)))}
        if not all(self._drv.values()):
            return None
        cudev, ctx = ctypes.c_int(0), ctypes.c_void_p()
        r = self._drv["cuDeviceGet"](ctypes.byref(cudev), dev)
        if not r:
            r = self._drv["cuDevicePrimaryCtxRetain"](ctypes.byref(ctx),
                                                      cudev.value)
        if r:
            raise OSError(errno.ENODEV, "cuDevicePrimaryCtxRetain of "
                          "device %d: CUresult %d" % (dev, r))
        return (cudev.value, ctx)

    def release(self, held):
        if held is not None:
            self._drv["cuDevicePrimaryCtxRelease"](held[0])

    def within(self, dev, held, fn):
        """fn() in dev's primary context (held, from retain()), pushed on
        this thread's context stack and popped after: the caller's current
        context and device stay exactly what they were, none included
        (cudaSetDevice there and back would create a context on the
        caller's device when it had none). Without held, on()."""
        if held is None:
            return self.on(dev, fn)
        r = self._drv["cuCtxPushCurrent"](held[1])
        if r:
            raise OSError(errno.EIO, "cuCtxPushCurrent: CUresult %d" % r)
        try:
            return fn()
        finally:
            self._drv["cuCtxPopCurrent"](ctypes.byref(ctypes.c_void_p()))

    def on(self, dev, fn, *args):
        """fn(*args) with dev current, and the caller's device put back."""
        prev = self.current()
        if prev != dev:
            self.check("cudaSetDevice", self.lib.cudaSetDevice(dev))
        try:
            return fn(*args)
        finally:
            if prev != dev:
                self.lib.cudaSetDevice(prev)


def _cuda_handle(obj, attrs):
    """The raw CUDA handle (an int) of a stream or event: an int itself,
    or what cupy (.ptr) or torch (.cuda_stream, .cuda_event) hold."""
    if isinstance(obj, int):
        return obj
    for a in attrs:
        v = getattr(obj, a, None)
        if isinstance(v, int):
            return v
    raise TypeError("not a CUDA stream or event: %r (want an int, or an "
                    "object with %s)" % (obj, " or ".join(
                        "." + a for a in attrs)))


_cudart = None
_cudart_lock = threading.Lock()


def _runtime() -> _Cudart:
    global _cudart
    with _cudart_lock:
        if _cudart is None:
            _cudart = _Cudart()
        return _cudart


_cuda_seen = False


def _cuda_in_process() -> bool:
    """Has this process loaded CUDA (a runtime or the driver)? Without it
    no thread can have a context, and nothing is loaded to ask. Once seen,
    remembered: CUDA is not unloaded."""
    global _cuda_seen
    if _cuda_seen or os.environ.get("TIERFS_CUDART"):
        return True
    try:
        with io.open("/proc/self/maps") as maps:
            _cuda_seen = any("/libcuda" in line for line in maps)
    except OSError:
        pass
    return _cuda_seen


def _caller_uuid() -> bytes:
    """What an export sends as the caller's GPU: the UUID of the current
    context's GPU, or zeros (the daemon's default GPU) when there is none
    or no CUDA runtime can be loaded."""
    if not _cuda_in_process():
        return bytes(16)
    try:
        u = _runtime().context_uuid()
    except OSError:
        u = None
    return u or bytes(16)


def _uuid_str(u: bytes) -> str:
    h = u.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


# Device buffers --------------------------------------------------------------


class DeviceBuffer:
    """A tierfs file's buffer mapped into this process; see open()."""

    def __init__(self, path, write=False, uuid=None):
        self.path = os.fspath(path)
        self.writable = bool(write)
        self._pid = os.getpid()
        self._fd = -1
        self._mm = None
        self._array = None
        self._ptr = None
        self.device = None
        self._held = None
        self._fd = os.open(self.path, (os.O_RDWR if write else os.O_RDONLY) |
                           os.O_CLOEXEC)
        try:
            self._export(_caller_uuid() if uuid is None else bytes(uuid))
        except BaseException:
            self._release()
            os.close(self._fd)
            self._fd = -1
            raise

    def _export(self, want: bytes):
        flags = EXPORT_WRITE if self.writable else 0
        try:
            out = _ioctl(self._fd, IOC_EXPORT, _EXPORT.pack(
                ABI_VERSION, flags, 0, 0, 0, 0, 0, b"", b"", want, 0, 0, 0))
        except OSError as e:
            # A daemon older than caller_uuid refuses it: its default GPU.
            if e.errno != errno.EINVAL or not any(want):
                raise
            out = _ioctl(self._fd, IOC_EXPORT, _EXPORT.pack(
                ABI_VERSION, flags, 0, 0, 0, 0, 0, b"", b"", bytes(16), 0,
                0, 0))
        (_v, _f, self.handle_type, _r0, offset, self.nbytes,
         self.generation, handle, self.uuid, *_rest) = _EXPORT.unpack(out)
        if self.handle_type == HANDLE_SHM:
            self._map_shm(handle, offset)
        elif self.handle_type == HANDLE_CUDA_IPC:
            self._map_cuda(handle, offset)
        else:
            raise OSError(errno.EPROTO, "export of %r: unknown handle type "
                          "%d" % (self.path, self.handle_type))

    def _map_shm(self, handle, offset):
        name = handle.split(b"\0", 1)[0].decode()
        if not name.startswith("/") or "/" in name[1:]:
            raise OSError(errno.EPROTO, "export: malformed shm handle")
        import numpy as np
        end = offset + self.nbytes
        if not end:
            self._array = np.zeros(0, dtype=np.uint8)
            self._array.flags.writeable = self.writable
            return
        # shm_open(name) is open("/dev/shm" + name) on Linux.
        sfd = os.open("/dev/shm" + name, (os.O_RDWR if self.writable else
                                           os.O_RDONLY) | os.O_CLOEXEC)
        try:
            if os.fstat(sfd).st_size < end:
                raise OSError(errno.EPROTO, "shm %s is shorter than the "
                              "export says" % name)
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
            self._mm = mmap.mmap(sfd, end, mmap.MAP_SHARED, prot)
        finally:
            os.close(sfd)
        a = np.frombuffer(self._mm, dtype=np.uint8, count=self.nbytes,
                          offset=offset)
        self._array = a

    def _map_cuda(self, handle, offset):
        rt = _runtime()
        dev = rt.find(self.uuid)
        # Not h.reserved = handle: a char array field stops at a NUL.
        h = _IpcHandle.from_buffer_copy(handle)
        p = ctypes.c_void_p()
        # The mapping belongs to dev's primary context: held while mapped.
        held = rt.retain(dev)
        try:
            rt.within(dev, held, lambda: rt.check(
                "cudaIpcOpenMemHandle",
                rt.lib.cudaIpcOpenMemHandle(ctypes.byref(p), h,
                                            _IPC_LAZY_ENABLE_PEER_ACCESS)))
        except BaseException:
            rt.release(held)
            raise
        self._held = held
        self.device = dev
        self._base = p.value
        self._ptr = (p.value or 0) + offset

    # What consumers read --------------------------------------------------

    @property
    def array(self):
        """On the sim backend, a NumPy uint8 array over the mapping
        (read-only unless opened for writing); None on a GPU."""
        self._check_open()
        return self._array

    @property
    def __array_interface__(self):
        if self._array is None:
            raise AttributeError("a GPU buffer has no __array_interface__: "
                                 "use __cuda_array_interface__")
        return self._array.__array_interface__

    @property
    def __cuda_array_interface__(self):
        if self._ptr is None:
            raise AttributeError("the mount's device tier is simulated "
                                 "(sim): use .array")
        self._check_open()
        return {"shape": (self.nbytes,), "typestr": "|u1", "strides": None,
                "data": (self._ptr if self.nbytes else 0,
                         not self.writable),
                "version": 3}

    def __len__(self):
        return self.nbytes

    # Lifetime ---------------------------------------------------------------

    def _check_open(self):
        if self._fd < 0:
            raise ValueError("the device buffer of %r is closed" % self.path)

    def commit(self, stream=None, event=None):
        """Publish what was written through the mapping: lower copies are
        dropped and readers of the file (cat, read) see the new bytes. Needs
        write=True.

        On a GPU, waits first for the work that wrote it: ``stream`` (a
        cupy or torch stream, or a cudaStream_t as an int) or ``event`` (a
        cupy or torch event recorded after the writes, or a cudaEvent_t),
        whatever its GPU or context; with neither, all work on the
        buffer's device (cudaDeviceSynchronize), which stalls every stream
        there and misses writes made from another GPU."""
        self._check_open()
        if not self.writable:
            raise OSError(errno.EBADF, "commit: %r was opened read-only" %
                          self.path)
        if os.getpid() != self._pid:
            raise OSError(errno.EBADF, "commit: the buffer belongs to the "
                          "process that opened it")
        if stream is not None and event is not None:
            raise ValueError("commit: a stream or an event, not both")
        waited = 0
        if self._ptr is not None:
            rt = _runtime()
            if event is not None:
                waited = COMMIT_WAITED_EVENT
                h = _cuda_handle(event, ("ptr", "cuda_event"))
                rt.check("cudaEventSynchronize",
                         rt.lib.cudaEventSynchronize(h))
            elif stream is not None:
                waited = COMMIT_WAITED_STREAM
                h = _cuda_handle(stream, ("ptr", "cuda_stream"))
                if h:
                    rt.check("cudaStreamSynchronize",
                             rt.lib.cudaStreamSynchronize(h))
                else:
                    # The legacy default stream is its context's.
                    rt.within(self.device, self._held, lambda: rt.check(
                        "cudaStreamSynchronize",
                        rt.lib.cudaStreamSynchronize(None)))
            else:
                waited = COMMIT_WAITED_DEVICE
                rt.within(self.device, self._held, lambda: rt.check(
                    "cudaDeviceSynchronize", rt.lib.cudaDeviceSynchronize()))
        try:
            _ioctl(self._fd, IOC_COMMIT,
                   _COMMIT.pack(ABI_VERSION, 0, waited, 0, 0, 0))
        except OSError as e:
            # A daemon older than the field refuses it; the wait is done.
            if e.errno != errno.EINVAL or not waited:
                raise
            _ioctl(self._fd, IOC_COMMIT,
                   _COMMIT.pack(ABI_VERSION, 0, 0, 0, 0, 0))

    def _release(self, unmapped=False):
        # RELEASE_UNMAPPED: nothing of the export is mapped here any more,
        # so the daemon may free it now rather than when we exit. A daemon
        # older than the flag refuses it (EINVAL): release without.
        for flags in ((RELEASE_UNMAPPED, 0) if unmapped else (0,)):
            try:
                _ioctl(self._fd, IOC_RELEASE,
                       _RELEASE.pack(ABI_VERSION, flags, 0, 0, 0))
                return
            except OSError as e:
                if e.errno != errno.EINVAL:
                    return

    def close(self):
        """Unmap and end the lease. Uncommitted writes may be lost when the
        buffer moves later. NumPy views of a sim mapping stay readable
        (they keep the mapping), but no longer follow the file; a GPU
        pointer taken from the buffer must not be used after this."""
        if self._fd < 0:
            return
        owner = os.getpid() == self._pid
        unmapped = False
        try:
            if self._ptr is not None and owner:
                rt = _runtime()
                base = self._base
                self._ptr = None
                held, self._held = self._held, None
                try:
                    rt.within(self.device, held, lambda: rt.check(
                        "cudaIpcCloseMemHandle",
                        rt.lib.cudaIpcCloseMemHandle(
                            ctypes.c_void_p(base))))
                finally:
                    rt.release(held)
            self._array = None
            if self._mm is not None:
                try:
                    self._mm.close()
                    unmapped = True
                except BufferError:
                    pass  # views remain; the mapping goes with the last
                self._mm = None
            else:
                unmapped = True
        finally:
            # A forked child shares the open file: its release would end
            # the parent's lease under the parent's live mapping.
            if owner:
                self._release(unmapped)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        where = ("gpu %d" % self.device if self.device is not None else
                 "sim")
        return "<tierfs.device.DeviceBuffer %r, %d bytes on %s%s>" % (
            self.path, self.nbytes if self._fd >= 0 else 0, where,
            "" if self._fd >= 0 else ", closed")


def open(path, write=False,  # noqa: A001 (tierfs.device.open)
         uuid: bytes | None = None) -> DeviceBuffer:
    """Export the tierfs file at path to the device and map it here.

    Returns a DeviceBuffer: on a GPU it has ``__cuda_array_interface__``
    (cupy.asarray, torch.as_tensor, numba.cuda.as_cuda_array take it without
    a copy), on the sim backend ``.array`` is a NumPy array over the shared
    memory. With write=True (which needs the file open for reading and
    writing, as write(2) would) the map is the file's live device copy,
    which stays on the device until close(); a view kept after close()
    is detached from the file (sim). A read map is a private snapshot of the bytes as
    they are now (sim; on cuda, until the backend has snapshots, it maps the
    live copy and holds it): the file may be written, moved or truncated
    meanwhile, and the map shows none of it.

    The buffer goes to the GPU of the calling thread's current CUDA context,
    which the daemon finds by its UUID; with no context (none is made to
    ask), or a GPU the mount does not serve, the daemon's default GPU. uuid
    (16 bytes) names a GPU instead. ``.uuid`` is the GPU's UUID it is on.

    Raises OSError: ENODEV when the mount has no device tier (or no GPU in
    this process has tierfs's), ENOSPC when the file does not fit on the
    device, ENOTTY when path is not on tierfs, EBADF without the permission,
    CudaError for a CUDA failure.
    """
    if uuid is not None and len(uuid) != 16:
        raise ValueError("a GPU UUID is 16 bytes")
    return DeviceBuffer(path, write, uuid)


# GPU memory on request -------------------------------------------------------


def reclaim(mount, nbytes: int, gpu: int | None = None,
            uuid: bytes | None = None) -> int:
    """Ask the tierfs mount holding mount (any file or directory on it) to
    give back at least nbytes of a GPU's memory; returns the bytes it gave
    back, fewer when nothing more could move.

    gpu is an ordinal as the daemon numbers its GPUs (tierfsctl status),
    uuid a GPU's 16-byte UUID instead; neither: the daemon's default GPU.
    Raises OSError: ENODEV without a device tier, ENXIO for a GPU tierfs
    does not use, ENOTTY when mount is not on tierfs.
    """
    if nbytes < 0:
        raise ValueError("nbytes must not be negative")
    flags, g, u = 0, GPU_DEFAULT if gpu is None else int(gpu), b""
    if uuid is not None:
        if len(uuid) != 16:
            raise ValueError("a GPU UUID is 16 bytes")
        flags, g, u = RECLAIM_UUID, 0, bytes(uuid)
    fd = os.open(os.fspath(mount), os.O_RDONLY | os.O_CLOEXEC)
    try:
        out = _ioctl(fd, IOC_RECLAIM, _RECLAIM.pack(
            ABI_VERSION, flags, g, 0, nbytes, 0, u, 0, 0, 0, 0))
    finally:
        os.close(fd)
    return _RECLAIM.unpack(out)[5]


def prefetch(path, tier: str = "device", wait: bool = False) -> str:
    """Bring the file at path up to tier ("device" or "host") in the
    background (TFS_IOC_PREFETCH). Returns "there" (it was, nothing
    queued), "queued", or with wait, "done" once it is there. Raises
    OSError with the move's errno when waiting (ENOSPC, EDQUOT, EBUSY for a
    pinned file), EAGAIN when the daemon's queue is full, ENODEV for the
    device tier of a mount without one.
    """
    if tier not in _TIERS:
        raise ValueError("tier must be device, host or disk")
    fd = os.open(os.fspath(path), os.O_RDONLY | os.O_CLOEXEC)
    try:
        out = _ioctl(fd, IOC_PREFETCH, _PREFETCH.pack(
            ABI_VERSION, PREFETCH_WAIT if wait else 0, _TIERS[tier], 0, 0, 0,
            0, 0, 0, 0, 0))
    finally:
        os.close(fd)
    return _PREFETCH_STATES[_PREFETCH.unpack(out)[3]]


def rmm_failure_callback(mount, gpu: int | None = None):
    """A callback for ``rmm.mr.FailureCallbackResourceAdaptor``: when an
    allocation of nbytes fails, it asks tierfs to give back nbytes of the
    GPU the allocation was for, and says to retry if tierfs gave back
    anything. RMM calls it again while allocations keep failing, so it ends
    once tierfs has nothing more to give.

    The GPU is the calling thread's current CUDA device, found on the
    daemon's side by its UUID; pass gpu (the daemon's ordinal) to name one
    instead. Without a CUDA runtime in this process, the daemon's default
    GPU is asked. Errors (no device tier, a GPU tierfs does not use) make
    the callback return False, and RMM raises MemoryError as without it.
    """
    def callback(nbytes: int) -> bool:
        try:
            if gpu is not None:
                freed = reclaim(mount, nbytes, gpu=gpu)
            else:
                try:
                    rt = _runtime()
                    u = rt.uuid(rt.current())
                except OSError:
                    u = None
                freed = reclaim(mount, nbytes, uuid=u)
        except OSError:
            return False
        return freed > 0

    return callback
