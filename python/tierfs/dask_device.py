# SPDX-License-Identifier: LGPL-2.1-or-later
"""GPU objects of a Dask worker, kept in tierfs files on the worker's GPU.

    from tierfs.dask import TierfsDeviceStore
    cluster = LocalCUDACluster(data=(TierfsDeviceStore, {"root": "/mnt/tierfs/dask"}))

A value is serialized with Distributed's own families, ``"cuda"`` first,
then ``"dask"`` and ``"pickle"``. Its device frames (objects with
``__cuda_array_interface__``) are copied device to device into a write
export of a new file on the worker's GPU and committed on the stream that
copied them; its header and host frames go into the same file, in front.
Reading a key rebuilds the real object on the worker's GPU: a read export
of the file (tierfs brings a spilled file back to the device itself) and a
device-to-device copy out of it into memory of the worker's allocator (RMM,
else CuPy, else cudaMalloc), or with ``zero_copy=True`` views of the map
that hold its lease. The store never moves bytes between tiers: spilling
is the daemon's, under its per-GPU limit, and that GPU's memory comes back
on demand through :func:`tierfs.device.rmm_failure_callback`, which the
store installs on the worker's RMM resource.

A worker on the same mount that asks for a key gets a hard link of the
file instead of its bytes (see :class:`TierfsLinked`); other peers get
Distributed's normal transfer.

File format (little endian), one file per value::

    magic   8 bytes  b"TFSDDEV1"
    flags   u32      0
    nframes u32
    mlen    u64      length of the pickled Distributed header
    hostend u64      end of the host part (header, meta, host frames)
    total   u64      the file's size
    nframes x (kind u64 (0 host, 1 device), offset u64, nbytes u64)
    meta (pickle protocol 5 of the header), host frames each 64-aligned,
    then from a 4096 boundary the device frames, each 256-aligned.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import ctypes
import errno
import functools
import logging
import math
import os
import pickle
import secrets
import struct
import sys
import threading
import time
import weakref
from typing import Any, Hashable

from . import device as _device
from . import xattr as _xattr
from .lifetime import DIR_PREFIX, LOCK
from .store import (_Entry, _O_NOATIME, TierfsStore, _new_buffer,
                    _unlink_quiet, _writev_all)

__all__ = ["TierfsDeviceStore", "TierfsLinked", "mount_options",
           "parse_device_memory_limit"]

logger = logging.getLogger("tierfs.dask_device")

_MAGIC = b"TFSDDEV1"
_HEAD = struct.Struct("<8sIIQQQ")
_FRAME = struct.Struct("<QQQ")
_HOST, _DEV = 0, 1
_ALIGN_HOST = 64
_ALIGN_DEV_START = 4096
_ALIGN_DEV = 256
_HEAD_READ = 4096
_HEAD_CACHE = 4096
# What the cuda backend rounds a device copy to (tiers/device_cuda_i.h)
_DEV_GRANULE = 2 << 20
_MISSING = object()

# cudaError_t and enums used here
_CUDA_ERROR_MEMORY_ALLOCATION = 2
_MEMCPY_D2D = 3
_STREAM_NON_BLOCKING = 1

#: serializers tried in order, as dask-cuda's GPUDirect spilling did
DEFAULT_SERIALIZERS = ("cuda", "dask", "pickle")
HOST_SERIALIZERS = ("dask", "pickle")

# Set by the get_data handler wrapper while Distributed's get_data reads the
# keys a worker on this mount asked for: the store hands out links then.
_link_request: contextvars.ContextVar = contextvars.ContextVar(
    "tierfs_link_request", default=None)

# This process's open device stores (a mapping is not hashable: by id).
_stores: dict[int, weakref.ref] = {}
_stores_lock = threading.Lock()


def _open_stores() -> list:
    with _stores_lock:
        refs = list(_stores.values())
    return [s for s in (r() for r in refs) if s is not None and not s.closed]


def _up(n: int, a: int) -> int:
    return -(-n // a) * a


# -- the CUDA runtime, through tierfs.device's ctypes binding -----------------


class _Gpu:
    """The GPU a store copies on: its ordinal in this process, UUID,
    retained primary context, and a non-blocking stream per thread."""

    def __init__(self, dev: int | None):
        rt = _device._runtime()
        lib = rt.lib
        vp, sz, i, u = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
        sigs = {
            "cudaMalloc": [ctypes.POINTER(vp), sz],
            "cudaFree": [vp],
            "cudaMemcpyAsync": [vp, vp, sz, i, vp],
            "cudaStreamCreateWithFlags": [ctypes.POINTER(vp), u],
            "cudaStreamSynchronize": [vp],
            "cudaMemGetInfo": [ctypes.POINTER(sz), ctypes.POINTER(sz)],
        }
        for fn, args in sigs.items():
            f = getattr(lib, fn, None)
            if f is not None:
                f.argtypes = args
                f.restype = i
        self.rt, self.lib = rt, lib
        self.dev = rt.current() if dev is None else int(dev)
        self.uuid = rt.uuid(self.dev)
        self.held = rt.retain(self.dev)
        self._local = threading.local()
        self.pid = os.getpid()
        # Released with the last user: the store, a rebuilt frame's memory.
        weakref.finalize(self, _release_ctx, rt, self.held, self.pid)

    def within(self, fn):
        return self.rt.within(self.dev, self.held, fn)

    def check(self, call, rc):
        self.rt.check(call, rc)

    def stream(self) -> int:
        s = getattr(self._local, "stream", None)
        if s is None:
            h = ctypes.c_void_p()
            self.within(lambda: self.check(
                "cudaStreamCreateWithFlags",
                self.lib.cudaStreamCreateWithFlags(ctypes.byref(h),
                                                   _STREAM_NON_BLOCKING)))
            s = self._local.stream = h.value
        return s

    def copy(self, dst: int, src: int, n: int, stream: int) -> None:
        if n:
            self.check("cudaMemcpyAsync", self.lib.cudaMemcpyAsync(
                dst, src, n, _MEMCPY_D2D, stream))

    def sync(self, stream: int) -> None:
        self.check("cudaStreamSynchronize",
                   self.lib.cudaStreamSynchronize(stream))

    def malloc(self, n: int, mount: str | None) -> int:
        """cudaMalloc(n) on this GPU; when the GPU is full, ask tierfs on
        mount for n bytes of it back and try again while it gives some."""
        p = ctypes.c_void_p()
        for _ in range(64):
            rc = self.within(lambda: self.lib.cudaMalloc(ctypes.byref(p), n))
            if rc == 0:
                return p.value
            if rc != _CUDA_ERROR_MEMORY_ALLOCATION or mount is None:
                break
            self.lib.cudaGetLastError()
            try:
                freed = _device.reclaim(mount, n, uuid=self.uuid)
            except OSError:
                freed = 0
            if not freed:
                break
        self.check("cudaMalloc", rc)
        raise MemoryError("cudaMalloc of %d bytes failed" % n)

    def free(self, ptr: int) -> None:
        if os.getpid() == self.pid:
            self.within(lambda: self.lib.cudaFree(ptr))


def _release_ctx(rt, held, pid) -> None:
    if os.getpid() == pid:
        try:
            rt.release(held)
        except Exception:
            pass


class _DeviceMemory:
    """n bytes of cudaMalloc memory on a GPU, freed with the object; what a
    value's device frames are rebuilt in without RMM or CuPy."""

    def __init__(self, gpu: _Gpu, n: int, mount: str | None):
        self._gpu = gpu
        self.nbytes = n
        self.ptr = gpu.malloc(n, mount) if n else 0

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.nbytes,), "typestr": "|u1", "strides": None,
                "data": (self.ptr, False), "version": 3}

    def __len__(self):
        return self.nbytes

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            try:
                self._gpu.free(ptr)
            except Exception:
                pass


class _MapView:
    """A device frame that is a slice of a read map: zero copy. The map
    (and its lease) lives as long as any of its views."""

    def __init__(self, buf, ptr: int, n: int):
        self._buf = buf
        self.nbytes = n
        self.ptr = ptr

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.nbytes,), "typestr": "|u1", "strides": None,
                "data": (self.ptr if self.nbytes else 0, True), "version": 3}

    def __len__(self):
        return self.nbytes


def _cai_frame(f) -> tuple[int, int, int | None] | None:
    """(pointer, nbytes, stream) of a device frame, None for a host one."""
    try:
        cai = f.__cuda_array_interface__
    except AttributeError:
        return None
    if cai.get("mask") is not None:
        raise ValueError("tierfs device store: a masked device frame")
    shape = tuple(cai["shape"])
    item = int(cai["typestr"][2:])
    n = math.prod(shape) * item
    strides = cai.get("strides")
    if strides is not None and n:
        want, step = [], item
        for dim in reversed(shape):
            want.append(step)
            step *= dim
        if tuple(s for d, s in zip(shape, strides) if d != 1) != \
                tuple(s for d, s in zip(shape, reversed(want)) if d != 1):
            raise ValueError("tierfs device store: a device frame that is not "
                             "contiguous")
    stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
    return int(cai["data"][0] or 0), n, stream


def _host_view(f) -> memoryview:
    mv = memoryview(f)
    if not mv.contiguous:
        mv = memoryview(mv.tobytes())
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    return mv


# -- encoding -----------------------------------------------------------------


class _Encoded:
    __slots__ = ("value", "head", "host", "dev", "hostend", "total", "keep")

    def __init__(self, value, head, host, dev, hostend, total, keep):
        self.value = value
        self.head = head  # bytes: fixed head, frame table, meta
        self.host = host  # [(offset, memoryview)]
        self.dev = dev  # [(offset, pointer, nbytes, stream)]
        self.hostend = hostend
        self.total = total
        self.keep = keep  # the frames, alive until written


def _wants_items(x) -> bool:
    """Whether a list, tuple, set or dict holds device objects, which
    Distributed's serialize() would otherwise pickle as a whole."""
    if type(x) not in (list, tuple, set, dict):
        return False
    from distributed.protocol.cuda import cuda_serialize

    items = x.values() if type(x) is dict else x
    for v in items:
        if hasattr(v, "__cuda_array_interface__"):
            return True
        try:
            cuda_serialize.dispatch(type(v))
            return True
        except TypeError:
            continue
    return False


def _encode(value: Any, serializers) -> _Encoded:
    from distributed.protocol.serialize import serialize

    it = True if "cuda" in serializers and _wants_items(value) else None
    header, frames = serialize(value, serializers=list(serializers),
                               on_error="raise", iterate_collection=it)
    meta = pickle.dumps(header, protocol=5)
    kinds = []
    for f in frames:
        d = _cai_frame(f)
        kinds.append((_DEV, d) if d is not None else (_HOST, _host_view(f)))
    off = _HEAD.size + _FRAME.size * len(frames) + len(meta)
    table, host, dev = [], [], []
    for kind, x in kinds:
        if kind == _HOST:
            off = _up(off, _ALIGN_HOST)
            table.append((_HOST, off, x.nbytes))
            host.append((off, x))
            off += x.nbytes
    hostend = off
    off = _up(off, _ALIGN_DEV_START)
    it_table = iter(table)
    full = []
    for kind, x in kinds:
        if kind == _HOST:
            full.append(next(it_table))
        else:
            ptr, n, stream = x
            off = _up(off, _ALIGN_DEV)
            full.append((_DEV, off, n))
            dev.append((off, ptr, n, stream))
            off += n
    total = off if dev else hostend
    head = _HEAD.pack(_MAGIC, 0, len(frames), len(meta), hostend, total)
    head += b"".join(_FRAME.pack(*t) for t in full) + meta
    return _Encoded(value, head, host, dev, hostend, total, frames)


def _host_views(enc: _Encoded) -> list[memoryview]:
    views, at = [memoryview(enc.head)], len(enc.head)
    for off, mv in enc.host:
        if off > at:
            views.append(memoryview(bytes(off - at)))
        views.append(mv)
        at = off + mv.nbytes
    return views


def _parse_head(buf) -> tuple[int, int, list, Any]:
    """(hostend, total, frame table, header) of a file whose first bytes
    are in buf (at least its host part)."""
    mv = memoryview(buf)
    if len(mv) < _HEAD.size:
        raise ValueError("tierfs device store: file too short for a header")
    magic, _flags, nframes, mlen, hostend, total = _HEAD.unpack_from(mv, 0)
    if magic != _MAGIC:
        raise ValueError("tierfs device store: bad magic %r" % bytes(magic))
    at = _HEAD.size
    table = [_FRAME.unpack_from(mv, at + i * _FRAME.size) for i in range(nframes)]
    at += nframes * _FRAME.size
    if at + mlen > len(mv):
        raise ValueError("tierfs device store: header longer than the file")
    header = pickle.loads(mv[at:at + mlen])
    return hostend, total, table, header


def _head_size(buf) -> int | None:
    """The host part's size from a file's first bytes, None if too short."""
    if len(buf) < _HEAD.size:
        return None
    magic, _f, _n, _m, hostend, _t = _HEAD.unpack_from(memoryview(buf), 0)
    if magic != _MAGIC:
        raise ValueError("tierfs device store: bad magic %r" % bytes(magic))
    return hostend


# -- the peers on this mount ---------------------------------------------------


class _LinkRequest:
    """One get_data answered with links: the hand-off names made for it."""

    def __init__(self, store: "TierfsDeviceStore"):
        self.store = store
        self.handoffs: list[str] = []

    def done(self) -> None:
        # What the peer did not take (it failed, or gave up) goes now: a
        # taken one was renamed into the peer's directory.
        for path in self.handoffs:
            _unlink_quiet(path)


class _Ref:
    """What a store sends a worker on its mount instead of a value: the
    path of a hard link of the value's file, made for this transfer."""

    __slots__ = ("path", "nbytes", "memory", "hostend", "dev")

    def __init__(self, path, nbytes, memory, hostend, dev):
        self.path, self.nbytes, self.memory = path, nbytes, memory
        self.hostend, self.dev = hostend, dev


class TierfsLinked:
    """A value that reached this worker as a hard link of a peer's file on
    the same tierfs mount (one buffer, counted once by tierfs). It sits in
    this store's directory until the store adopts it under the key
    (Distributed puts received values into the worker's data); one that
    is dropped unadopted removes its link. Anything else that gets one
    calls :meth:`load` for the value itself."""

    def __init__(self, store: "TierfsDeviceStore", name: str, nbytes: int,
                 memory: int, hostend: int | None):
        self.store = store
        self.name = name
        self.nbytes = nbytes
        self.memory = memory
        self.hostend = hostend
        self._adopted = False
        self._finalizer = weakref.finalize(self, _unlink_quiet,
                                           os.path.join(store.path, name))

    @property
    def path(self) -> str:
        return os.path.join(self.store.path, self.name)

    def adopt(self) -> bool:
        if self._adopted or not self._finalizer.alive:
            return False
        self._adopted = True
        self._finalizer.detach()
        return True

    def load(self) -> Any:
        value, _ = self.store._read_value(self.path, self.nbytes)
        return value

    def __repr__(self):
        return "<TierfsLinked %r, %d bytes>" % (self.path, self.nbytes)


def _claim(h: dict) -> Any:
    """On the worker that asked: take the hand-off link into this process's
    store on the same mount. Without one there (or when the rename fails:
    another mount, no permission), the value itself is read from it."""
    path = h["path"]
    sender = os.path.dirname(path)
    for store in _open_stores():
        if not store.link_transfers or store._st_dev != h["dev"] \
                or store.path == sender:
            continue
        linked = store._take(path, h)
        if linked is not None:
            return linked
    for store in _open_stores():
        value, _ = store._read_value(path, h["nbytes"])
        return value
    raise OSError(errno.ENOENT, "a tierfs link arrived with no store to read it",
                  path)


def _register_dispatch() -> None:
    from dask.sizeof import sizeof
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    @dask_serialize.register(_Ref)
    def _ser_ref(r: _Ref):
        return {"path": r.path, "nbytes": r.nbytes, "memory": r.memory,
                "hostend": r.hostend, "dev": r.dev}, []

    @dask_deserialize.register(_Ref)
    def _deser_ref(header, frames):
        return _claim(header)

    sizeof.register(_Ref)(lambda r: r.memory)
    sizeof.register(TierfsLinked)(lambda r: r.memory)


try:
    _register_dispatch()
except ImportError:  # pragma: no cover - without Dask there are no transfers
    pass


def _wrap_get_data(worker, store: "TierfsDeviceStore") -> None:
    """Make the worker's get_data handler answer a worker on this mount
    with links: the handler is Distributed's own, run with _link_request
    set, so its throttling, accounting and two-step handshake stay."""
    original = worker.handlers.get("get_data")
    if original is None or getattr(original, "_tierfs_link", False):
        return
    ref = weakref.ref(store)

    @functools.wraps(original)
    async def get_data(comm, *args, **kwargs):
        s = ref()
        who = kwargs.get("who")
        if s is None or s.closed or not s.link_transfers or not s._is_peer(who):
            return await original(comm, *args, **kwargs)
        req = _LinkRequest(s)
        token = _link_request.set(req)
        try:
            return await original(comm, *args, **kwargs)
        finally:
            _link_request.reset(token)
            req.done()

    get_data._tierfs_link = True
    worker.handlers["get_data"] = get_data


# -- limits ----------------------------------------------------------------------


def parse_device_memory_limit(limit, total: int | None = None) -> int | None:
    """dask-cuda's device_memory_limit as bytes: an int, a size string
    ("16GiB"), a fraction of the GPU's memory (0.8, "80%"), or None/0."""
    if limit in (None, 0, "0", "default", "auto"):
        return None if limit in (None, 0, "0") else (
            int(0.8 * total) if total else None)
    if isinstance(limit, str) and limit.endswith("%"):
        limit = float(limit[:-1]) / 100
    if isinstance(limit, float) and limit <= 1:
        if not total:
            raise ValueError("a fraction of GPU memory needs the GPU's size")
        return int(limit * total)
    if isinstance(limit, str):
        from dask.utils import parse_bytes

        return int(parse_bytes(limit))
    return int(limit)


def mount_options(device_memory_limit, memory_limit, n_workers: int,
                  gpu_memory: int | None = None, gpus: str = "all") -> str:
    """The tierfs -o options that give a node of n_workers Dask-CUDA
    workers (one per GPU) the budget dask-cuda's device_memory_limit and
    memory_limit give them: each GPU's device tier holds device_memory_limit
    of stored values (tierfs's device_limit is per GPU), the rest of the GPU
    is the worker's to compute in (tierfs's device_reserve and the RMM
    failure callback give memory back when it needs more); the host tier
    holds what the workers would have spilled to host memory,
    n_workers x memory_limit, in one budget the workers share."""
    dev = parse_device_memory_limit(device_memory_limit, gpu_memory)
    host = parse_device_memory_limit(memory_limit, None)
    if not host:
        raise ValueError("memory_limit: a size is needed for host_limit")
    gpus = gpus.replace(",", ":")
    opts = ["device_backend=cuda", "device_gpus=%s" % gpus]
    if dev:
        opts.append("device_limit=%d" % dev)
    opts.append("host_limit=%d" % (host * int(n_workers)))
    return ",".join(opts)


# -- the store ------------------------------------------------------------------


class TierfsDeviceStore(TierfsStore):
    """A TierfsStore for GPU objects: device frames stay on the GPU, in
    tierfs's device tier, and are rebuilt there.

    Parameters, besides TierfsStore's (root, cache_bytes, clean_stale,
    keep_on_error, name, direct_io):

    device:
        The CUDA device (this process's ordinal) the store copies on and
        puts values on; None: the current one when it first needs it (0
        under dask-cuda, whose workers each see their own GPU as 0).
    serializers:
        Distributed's families tried in order; ``("cuda", "dask",
        "pickle")``. On a mount without a cuda device tier (sim, none, or
        not tierfs) "cuda" is left out: device objects go to host by their
        own "dask" serializer.
    link_transfers:
        Answer a worker on the same mount with a hard link (default True).
    zero_copy:
        Rebuild device frames as views of the read map, which keeps its
        lease for as long as the object lives, instead of copying them out
        (default False; see python/README.md).
    rmm_callback:
        Install tierfs.device.rmm_failure_callback on the current RMM
        resource of the store's GPU: None (default) when RMM is loaded in
        the worker, True always (RMM must import), False never.
    device_alloc:
        A callable n -> object with __cuda_array_interface__ of n bytes on
        the store's GPU, for the rebuilt frames; default RMM, else CuPy,
        else cudaMalloc (retried after a reclaim when the GPU is full).
    device_memory_limit:
        dask-cuda's setting: this worker's share of its GPU's device tier
        (bytes, a size string, a fraction of the GPU's memory). Where the
        mount's limit for the GPU is larger (a mount with more room than
        one worker may take, or shared by several workers of one GPU),
        the store holds the share itself: before a value goes on the
        device (a put, or a get that brings one back) it has tierfs spill
        this store's least recently used values on the device to host
        until the new one fits, and a value larger than the share is
        written as host frames. See mount_options().
    """

    def __init__(self, root=None, *, device: int | None = None,
                 serializers=DEFAULT_SERIALIZERS, link_transfers: bool = True,
                 zero_copy: bool = False, rmm_callback: bool | None = None,
                 device_alloc=None, device_memory_limit=None, **kwargs):
        super().__init__(root, **kwargs)
        try:
            self._setup(device, serializers, link_transfers, zero_copy,
                        rmm_callback, device_alloc, device_memory_limit)
        except BaseException:
            self.close()
            raise

    def _setup(self, device, serializers, link_transfers, zero_copy,
               rmm_callback, device_alloc, device_memory_limit):
        self.mount = _mount_root(self.path)
        try:
            stats = _xattr.mount_stats(self.mount)
        except OSError:
            stats = {}
        self.backend = stats.get("backend", "")
        #: whether device frames go to tierfs's device tier (a cuda mount)
        self.device_tier = self.backend == "cuda"
        serializers = tuple(serializers)
        if not self.device_tier:
            serializers = tuple(s for s in serializers if s != "cuda")
        self.serializers = serializers
        self.link_transfers = bool(link_transfers)
        self.zero_copy = bool(zero_copy)
        self.rmm_callback = rmm_callback
        self.device_alloc = device_alloc
        self.device_memory_limit = device_memory_limit
        self._device_arg = device
        self._gpu: _Gpu | None = None
        self._gpu_lock = threading.Lock()
        self._st_dev = os.stat(self.path).st_dev
        # File name -> (end of its host part, that part when it is only the
        # header of a value with device frames: a get then reads nothing
        # through the mount, where those bytes sit on the GPU too).
        self._heads: dict[str, tuple[int, bytes | None]] = {}
        self._rmm_mr = None
        self._peers: dict[str, tuple[bool, float]] = {}
        self._limit_checked = False
        #: bytes this store's values may take on its GPU's device tier when
        #: the store holds the share itself (None: the mount's limit does)
        self.device_budget: int | None = None
        # Placing a value on the device and making room for it are one step
        # (two puts must not both fit in the same room): _budget_lock, taken
        # before _ledger_lock. A write-back flush takes it with self._lock
        # held, so nothing under it takes self._lock; _ledger_lock is a leaf
        # and also guards budget_spill_count_total in _m. _ledger: file
        # name -> bytes on the device, least recently used first, of the
        # values this store put or brought back there; what tierfs spilled
        # since is dropped when the store next needs room (_room).
        self._budget_lock = threading.Lock()
        self._ledger_lock = threading.Lock()
        self._ledger: collections.OrderedDict[str, int] = \
            collections.OrderedDict()
        self._dir.owner["links"] = 1 if self.link_transfers else 0
        self._dir.write_owner()
        with _stores_lock:
            _stores[id(self)] = weakref.ref(self)
        if self.rmm_callback:
            self._install_rmm()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            # Made inside Worker.__init__: find that worker once it listens
            # (its address is what peers ask with).
            loop.call_soon(self._poll_attach, loop, time.monotonic() + 120)

    # -- the worker -----------------------------------------------------------

    def _poll_attach(self, loop, deadline) -> None:
        if self.closed or self._hooked:
            return
        if not self._find_worker() and time.monotonic() < deadline:
            loop.call_later(0.05, self._poll_attach, loop, deadline)

    def _find_worker(self) -> bool:
        mod = sys.modules.get("distributed.worker")
        if mod is None:
            return False
        for w in list(getattr(mod.Worker, "_instances", ())):
            try:
                mine = w.data is self
                addr = w.address if mine else None
            except Exception:
                continue
            if mine and addr:
                self._attach_worker(w)
                return True
        return False

    def _maybe_attach(self) -> None:
        now = time.monotonic()
        if now - self._hook_at < 1.0:
            return
        self._hook_at = now
        self._find_worker()

    def _attach_worker(self, worker) -> None:
        self.attach(worker)
        if self.link_transfers:
            _wrap_get_data(worker, self)
        self._dir.owner["address"] = worker.address
        try:
            self._dir.write_owner()
        except OSError as e:
            logger.warning("tierfs device store: cannot record the worker's "
                           "address in %r: %s", self.path, e)

    def _is_peer(self, who) -> bool:
        """Whether who (a worker address) has a device store on this root
        that takes links, made by this user."""
        if not who:
            return False
        now = time.monotonic()
        hit = self._peers.get(who)
        if hit is not None and hit[1] > now:
            return hit[0]
        found = False
        import json

        try:
            names = os.listdir(self.root)
        except OSError:
            names = []
        for name in names:
            if not name.startswith(DIR_PREFIX):
                continue
            d = os.path.join(self.root, name)
            if d == self.path:
                continue
            try:
                if os.stat(d).st_uid != os.getuid():
                    continue
                # O_NOATIME: tierfs takes the read as no access, and does
                # not bring the file back to the GPU for it.
                fd = os.open(os.path.join(d, LOCK),
                             os.O_RDONLY | os.O_CLOEXEC | _O_NOATIME)
                try:
                    data = os.read(fd, 65536)
                finally:
                    os.close(fd)
                owner = json.loads(data.rstrip(b"\0 ") or b"{}")
            except (OSError, ValueError):
                continue
            if owner.get("address") == who and owner.get("links"):
                found = True
                break
        self._peers[who] = (found, now + (30.0 if found else 2.0))
        return found

    # -- the GPU --------------------------------------------------------------

    def gpu(self) -> _Gpu:
        g = self._gpu
        if g is None:
            with self._gpu_lock:
                if self._gpu is None:
                    self._gpu = _Gpu(self._device_arg)
                g = self._gpu
        return g

    def _install_rmm(self) -> None:
        """tierfs.device.rmm_failure_callback on the store's GPU's current
        RMM resource, once; again if something replaced it since (dask-cuda's
        RMM setup runs after the store is made)."""
        if self.rmm_callback is False or not self.device_tier:
            return
        if self.rmm_callback is None and "rmm" not in sys.modules:
            return
        try:
            import rmm.mr
        except ImportError:
            if self.rmm_callback:
                raise
            return
        gpu = self.gpu()

        def install():
            cur = rmm.mr.get_current_device_resource()
            if cur is self._rmm_mr:
                return
            new = rmm.mr.FailureCallbackResourceAdaptor(
                cur, _device.rmm_failure_callback(self.mount))
            rmm.mr.set_current_device_resource(new)
            self._rmm_mr = new

        gpu.within(install)

    def _alloc(self, n: int):
        if self.device_alloc is not None:
            return self.device_alloc(n)
        gpu = self.gpu()
        if "rmm" in sys.modules or self.rmm_callback:
            try:
                import rmm
            except ImportError:
                pass
            else:
                return gpu.within(lambda: rmm.DeviceBuffer(size=n))
        if "cupy" in sys.modules:
            import cupy

            with cupy.cuda.Device(gpu.dev):
                return cupy.empty((n,), dtype="u1")
        return _DeviceMemory(gpu, n, self.mount)

    # -- writing ----------------------------------------------------------------

    def __setitem__(self, key: Hashable, value: Any) -> None:
        if isinstance(value, TierfsLinked):
            if value.store is self and value.adopt():
                self._install_linked(key, value)
                return
            value = value.load()
        super().__setitem__(key, value)

    def _encode(self, value: Any) -> _Encoded:
        if self.rmm_callback is not False and self.device_tier:
            self._install_rmm()
        return _encode(value, self.serializers)

    def _write_encoded(self, path: str, enc: _Encoded) -> int:
        if enc.dev:
            try:
                with self._budget_lock:
                    self._place(path, enc)
            except OSError as e:
                # No room for it on the GPU (or this user's share is used
                # up): it goes to tierfs as host frames, as on a mount
                # without a device tier.
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                logger.info("tierfs device store: %r does not fit on the "
                            "device (%s): written as host frames", path, e)
                _unlink_quiet(path)
                enc = _encode(enc.value, HOST_SERIALIZERS)
            else:
                head = enc.head if not enc.host and \
                    len(enc.head) <= _HEAD_CACHE else None
                self._heads[os.path.basename(path)] = (enc.hostend, head)
                return enc.total
        if self.device_budget is None:
            self._write_host(path, enc)
        else:
            with self._budget_lock:
                self._place_host(path, enc)
        self._heads[os.path.basename(path)] = (enc.hostend, None)
        return enc.total

    def _write_host(self, path: str, enc: _Encoded) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                     | self._oflags, 0o600)
        try:
            _writev_all(fd, _host_views(enc))
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)

    def _place_host(self, path: str, enc: _Encoded) -> None:
        """Write a value of host frames within the store's share: tierfs
        places a file it is written on the device too, when it is closed.
        _budget_lock held."""
        need = _up(enc.total, _DEV_GRANULE)
        fits = need <= self.device_budget
        if fits:
            self._room(need)
        self._write_host(path, enc)
        if fits:
            self._ledger_add(path)
            return
        # Larger than the share: tierfs put it on the device at close (no
        # flag asks it not to); sent down at once.
        try:
            _xattr.set_tier(path, "host")
        except OSError as e:
            logger.warning("tierfs device store: cannot move %r, larger "
                           "than device_memory_limit, to host: %s", path, e)
            self._ledger_add(path)
            self._room(0, keep=os.path.basename(path))

    def _place(self, path: str, enc: _Encoded) -> None:
        """Write enc with its device frames on the GPU within the store's
        share; _budget_lock held. OSError ENOSPC when the value is larger
        than the share."""
        budget = self.device_budget
        if budget is not None:
            need = _up(enc.total, _DEV_GRANULE)
            if need > budget:
                raise OSError(errno.ENOSPC, "the value takes %d bytes on the "
                              "device, device_memory_limit is %d"
                              % (need, budget))
            self._room(need)
        self._write_device(path, enc)
        self._check_limit(path)
        self._ledger_add(path)
        if self.device_budget is not None and budget is None:
            # The first value, placed before the share was known.
            self._room(0, keep=os.path.basename(path))

    def _ledger_add(self, path: str) -> None:
        if self.device_budget is None:
            return
        try:
            st = _xattr.stat(path)
        except OSError:
            return
        if st["tier"] != "device":
            return
        with self._ledger_lock:
            name = os.path.basename(path)
            self._ledger[name] = int(st["stored_size"] or 0)
            self._ledger.move_to_end(name)

    def _room(self, need: int, keep: str | None = None) -> bool:
        """Make need bytes of room in the store's share of the device tier:
        forget what tierfs spilled already, then have tierfs spill this
        store's least recently used values on the device to host (the
        daemon moves them; keep stays). _budget_lock held. Whether the
        room is there."""
        budget = self.device_budget
        with self._ledger_lock:
            used = sum(self._ledger.values())
            if used + need <= budget:
                return True
            names = list(self._ledger)
        for name in names:
            try:
                st = _xattr.stat(os.path.join(self.path, name))
                n = int(st["stored_size"] or 0) if st["tier"] == "device" \
                    else None
            except OSError:
                n = None
            with self._ledger_lock:
                if name not in self._ledger:
                    continue
                if n is None:
                    del self._ledger[name]
                else:
                    self._ledger[name] = n
        with self._ledger_lock:
            used = sum(self._ledger.values())
            names = [x for x in self._ledger if x != keep]
        for name in names:
            if used + need <= budget:
                break
            try:
                _xattr.set_tier(os.path.join(self.path, name), "host")
            except OSError as e:
                # Gone (deleted), or held on the device (pinned, leased):
                # the next one.
                if e.errno == errno.ENOENT:
                    with self._ledger_lock:
                        used -= self._ledger.pop(name, 0)
                else:
                    logger.debug("tierfs device store: no spill of %r: %s",
                                 name, e)
                continue
            with self._ledger_lock:
                used -= self._ledger.pop(name, 0)
                self._m["budget_spill_count_total"] += 1
        return used + need <= budget

    def _write_device(self, path: str, enc: _Encoded) -> None:
        gpu = self.gpu()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                     | self._oflags, 0o600)
        try:
            _writev_all(fd, _host_views(enc))
            os.ftruncate(fd, enc.total)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        buf = _device.open(path, write=True, uuid=gpu.uuid)
        try:
            base = buf.__cuda_array_interface__["data"][0]

            def copy():
                # A frame whose __cuda_array_interface__ names a stream
                # (version 3: 1 the legacy default stream, 2 the per-thread
                # one) is copied on that stream, after the work that made
                # it, as the protocol allows; the others on the store's.
                streams = []
                for off, ptr, n, producer in enc.dev:
                    s = gpu.stream() if producer is None else producer
                    gpu.copy(base + off, ptr, n, s)
                    if s not in streams:
                        streams.append(s)
                for s in streams[:-1]:
                    gpu.sync(s)
                return streams[-1]

            s = gpu.within(copy)
            _commit(buf, gpu, s)
        finally:
            buf.close()

    def _check_limit(self, path: str) -> None:
        """Once, at the first value on the device: this store's share of
        its GPU's device tier. Where the mount lets that GPU hold more than
        device_memory_limit (dask-cuda's setting), the store holds the
        share itself (device_budget); else the mount's limit does."""
        if self._limit_checked or self.device_memory_limit in (None, 0):
            return
        self._limit_checked = True
        try:
            g = _xattr.gpu(path)
            stats = _xattr.mount_stats(self.mount)
        except OSError:
            return
        if g is None:
            return
        limit = stats.get("device%d.limit" % g, stats.get("device.limit"))
        total = None
        try:
            free, tot = ctypes.c_size_t(), ctypes.c_size_t()
            gp = self.gpu()
            gp.within(lambda: gp.lib.cudaMemGetInfo(ctypes.byref(free),
                                                    ctypes.byref(tot)))
            total = tot.value or None
        except Exception:
            pass
        want = parse_device_memory_limit(self.device_memory_limit, total)
        by = "tierfs"
        if want and not (isinstance(limit, int) and 0 < limit <= want):
            self.device_budget = want
            by = "store"
            logger.info(
                "tierfs device store: the mount lets GPU %d hold %s bytes of "
                "values, more than device_memory_limit (%d): the store keeps "
                "its values there within %d bytes", g, limit, want, want)
        self.device_share = {"gpu": g, "tierfs_limit": limit,
                             "device_memory_limit": want, "enforced_by": by}

    # -- reading ----------------------------------------------------------------

    def __getitem__(self, key: Hashable) -> Any:
        req = _link_request.get()
        if req is not None and req.store is self:
            ref = self._handoff(key, req)
            if ref is not None:
                return ref
        return super().__getitem__(key)

    def _read_value(self, path: str, size: int) -> tuple[Any, float]:
        from distributed.protocol.serialize import deserialize

        t0 = time.perf_counter()
        hostend, head = self._heads.get(os.path.basename(path), (None, None))
        if head is not None:
            buf = bytearray(head)
        else:
            buf = self._read_host_part(path, size, hostend)
        hostend, total, table, header = _parse_head(buf)
        mv = memoryview(buf)
        frames = [None] * len(table)
        devs = []
        for i, (kind, off, n) in enumerate(table):
            if kind == _HOST:
                frames[i] = mv[off:off + n]
            else:
                devs.append((i, off, n))
        if devs:
            self._read_device(path, devs, frames)
        t1 = time.perf_counter()
        return deserialize(header, frames), t1 - t0

    def _read_host_part(self, path: str, size: int, hostend: int | None):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | self._rflags)
        try:
            if hostend is None:
                first = _pread_all(fd, min(size, _HEAD_READ), 0)
                hostend = _head_size(first)
                if hostend is None:
                    raise ValueError("tierfs device store: %r is no value file"
                                     % path)
                if hostend > len(first):
                    buf = _new_buffer(hostend)
                    memoryview(buf)[:len(first)] = first
                    _pread_into(fd, memoryview(buf)[len(first):], len(first))
                else:
                    buf = first
            else:
                buf = _new_buffer(hostend)
                _pread_into(fd, memoryview(buf), 0)
        finally:
            os.close(fd)
        return buf

    def _read_device(self, path: str, devs, frames) -> None:
        if self.device_budget is None:
            self._map_device(path, devs, frames)
            return
        # The read map brings a spilled value back to the GPU: room for it
        # in the share first.
        name = os.path.basename(path)
        with self._budget_lock:
            with self._ledger_lock:
                mine = name in self._ledger and \
                    os.path.dirname(path) == self.path
                if mine:
                    self._ledger.move_to_end(name)
            if not mine:
                try:
                    need = _up(os.stat(path).st_size, _DEV_GRANULE)
                except OSError:
                    need = 0
                self._room(need)
            self._map_device(path, devs, frames)
            if os.path.dirname(path) == self.path:
                self._ledger_add(path)

    def _map_device(self, path: str, devs, frames) -> None:
        if self.rmm_callback is not False and self.device_tier:
            self._install_rmm()
        gpu = self.gpu()
        buf = _device.open(path, uuid=gpu.uuid)
        try:
            base = buf.__cuda_array_interface__["data"][0]
            if self.zero_copy:
                for i, off, n in devs:
                    frames[i] = _MapView(buf, base + off, n)
                buf = None  # the views hold it
                return
            dsts = [(i, self._alloc(n), off, n) for i, off, n in devs]

            def copy():
                s = gpu.stream()
                for i, dst, off, n in dsts:
                    ptr = dst.__cuda_array_interface__["data"][0]
                    gpu.copy(ptr, base + off, n, s)
                # Before the map is closed under the copies.
                gpu.sync(s)

            gpu.within(copy)
            for i, dst, _off, _n in dsts:
                frames[i] = dst
        finally:
            if buf is not None:
                buf.close()

    # -- links ----------------------------------------------------------------

    def _handoff(self, key: Hashable, req: _LinkRequest) -> _Ref | None:
        with self._lock:
            entry = self._index.get(key)
            if entry is None or entry.name is None or key in self._cache \
                    or key in self._pinned:
                return None
            name, nbytes, memory = entry.name, entry.disk, entry.memory
            hostend = self._heads.get(name, (None, None))[0]
        src = os.path.join(self.path, name)
        dst = os.path.join(self.path, "~out.%s" % secrets.token_hex(8))
        try:
            os.link(src, dst)
        except OSError as e:
            logger.debug("tierfs device store: no link of %r: %s", src, e)
            return None
        req.handoffs.append(dst)
        with self._lock:
            self._m["link_out_count_total"] += 1
            self._m["link_out_bytes_total"] += nbytes
        return _Ref(dst, nbytes, memory, hostend, self._st_dev)

    def _take(self, path: str, h: dict) -> TierfsLinked | None:
        name = "~in.%s" % secrets.token_hex(8)
        try:
            os.rename(path, os.path.join(self.path, name))
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise
            logger.info("tierfs device store: cannot take the link %r: %s",
                        path, e)
            return None
        return TierfsLinked(self, name, int(h["nbytes"]), int(h["memory"]),
                            h.get("hostend"))

    def _install_linked(self, key: Hashable, linked: TierfsLinked) -> None:
        with self._lock:
            if self._closed:
                _unlink_quiet(linked.path)
                raise RuntimeError("tierfs store %r is closed" % self.path)
            self._discard(key)
            if linked.hostend is not None:
                self._heads[linked.name] = (linked.hostend, None)
            self._install(key, _Entry(linked.name, linked.nbytes, linked.memory))
            self._m["link_in_count_total"] += 1
            self._m["link_in_bytes_total"] += linked.nbytes
        if not self._hooked:
            self._maybe_attach()

    def _discard(self, key: Hashable) -> None:
        entry = self._index.get(key)
        if entry is not None and entry.name is not None:
            self._heads.pop(entry.name, None)
            with self._ledger_lock:
                self._ledger.pop(entry.name, None)
        super()._discard(key)

    def get_metrics(self) -> dict[str, float]:
        out = super().get_metrics()
        with self._lock:
            for k in ("link_out_count_total", "link_out_bytes_total",
                      "link_in_count_total", "link_in_bytes_total",
                      "budget_spill_count_total"):
                out[k] = self._m[k]
        return out

    def close(self) -> None:
        with _stores_lock:
            if _stores.get(id(self), lambda: None)() is self:
                del _stores[id(self)]
        super().close()
        with self._gpu_lock:
            self._gpu = None

    def __repr__(self) -> str:
        return "<TierfsDeviceStore %r: %d keys>" % (self.path, len(self._index))


def _commit(buf, gpu: _Gpu, stream: int) -> None:
    """COMMIT once the copies on stream are done: commit(stream=) waits
    for that stream only, not for every stream of the device."""
    buf.commit(stream=stream)


def _mount_root(path: str) -> str:
    """The top directory of the filesystem holding path."""
    p = os.path.realpath(path)
    dev = os.stat(p).st_dev
    while True:
        parent = os.path.dirname(p)
        if parent == p or os.stat(parent).st_dev != dev:
            return p
        p = parent


def _pread_into(fd: int, mv: memoryview, off: int) -> None:
    got = 0
    while got < mv.nbytes:
        n = os.preadv(fd, [mv[got:]], off + got)
        if not n:
            raise OSError(errno.EIO, "tierfs device store: file shorter than "
                          "its header says")
        got += n


def _pread_all(fd: int, n: int, off: int):
    buf = bytearray(n)
    _pread_into(fd, memoryview(buf), off)
    return buf
