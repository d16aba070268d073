# SPDX-License-Identifier: LGPL-2.1-or-later
"""A MutableMapping that keeps every value in its own file on a tierfs mount.

The mapping is what a Dask worker stores its results in (``Worker(data=...)``),
but nothing here needs Dask: any process can use it as a dict whose values
live in tierfs, where the daemon moves them between device, host and disk.

Layout on the mount (see tierfs.lifetime for how directories go away)::

    <root>/tfsdask-<host>-<pid>-<token>/      one directory per store
        .lock                                  owner JSON, flock()ed while open
        <readable-prefix>.<hash>[~N]           one file per key

File format (little endian), one file per value::

    magic    8 bytes  b"TFSDASK1"
    flags    u32      reserved, 0
    nbuf     u32      number of out-of-band buffers
    plen     u64      length of the pickle stream
    blen     u64 * nbuf
    padding to 64, pickle stream, padding to 64,
    each buffer followed by padding to 64

The pickle stream is protocol 5; large contiguous buffers (numpy and pandas
data) go out of band, so a value is written with one writev straight from
the object's memory and read back with one read into one allocation that
the buffers then share. Nothing is compressed here: tierfs compresses on its
disk tier. Where the filesystem takes O_DIRECT at any alignment (tierfs
does), files are opened with it: the bytes go between the worker and the
daemon without a copy in the page cache, which would also count against the
worker's memory. Reads open with O_NOATIME, which tierfs takes as no access:
a value is read about once before Dask frees it, so the read is served
from the tier the file is in and does not push other values out of the
daemon's memory (where each would cost an lz4 compression).
"""

from __future__ import annotations

import collections
import errno
import logging
import mmap
import os
import pickle
import struct
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, MutableMapping
from hashlib import blake2b
from typing import Any, Hashable, NamedTuple

from . import xattr as _xattr
from .lifetime import (DIR_PREFIX, LOCK, MARKER, OwnedDir, cleanup_stale,
                       remove_on_sigterm)

__all__ = ["TierfsStore", "cleanup_stale", "cleanup", "remove_on_sigterm",
           "DIR_PREFIX", "LOCK", "MARKER", "TIERS"]

logger = logging.getLogger("tierfs.store")

ENV_DIR = "TIERFS_DASK_DIR"
# What tier_bytes() reports off tierfs (files with user.tierfs.tier set by
# hand); on tierfs, the mount's own chain (tierfs.xattr.tiers()).
TIERS = _xattr.TIERS
_XATTR_TIER = "user.tierfs.tier"

_MAGIC = b"TFSDASK1"
_HEAD = struct.Struct("<8sIIQ")
_ALIGN = 64
_ZEROS = bytes(_ALIGN)
# Linux caps one write at 0x7ffff000 bytes and one writev at IOV_MAX entries.
_MAX_IOV = 512
_MAX_WRITE = 1 << 30
_PREFIX_MAX = 96
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_O_NOATIME = getattr(os, "O_NOATIME", 0)
# Reads of this many bytes or more go into a page-aligned mapping.
_MMAP_MIN = 1 << 20
_MISSING = object()


class SpilledSize(NamedTuple):
    """Same fields as distributed.spill.SpilledSize: sizeof() and file bytes."""

    memory: int
    disk: int


try:  # use distributed's own tuple type when it is there
    from distributed.spill import SpilledSize  # type: ignore # noqa: F811
except Exception:  # pragma: no cover - distributed is optional
    pass


def _sizeof(value: Any, fallback: int) -> int:
    try:
        from dask.sizeof import sizeof
    except Exception:  # pragma: no cover - dask is optional
        return fallback
    try:
        return int(sizeof(value))
    except Exception:
        return fallback


def _pad(n: int) -> int:
    return -n % _ALIGN


def _serialize(value: Any) -> tuple[list[memoryview], int]:
    """Return the views that make one file, and their total length."""
    raws: list[memoryview] = []

    def out_of_band(pb: pickle.PickleBuffer) -> bool:
        try:
            raws.append(pb.raw())
        except BufferError:
            return True  # not contiguous: let pickle copy it in band
        return False

    try:
        stream = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    except Exception:
        # Lambdas, closures and classes defined in __main__ need cloudpickle,
        # which dask ships; its output loads with plain pickle.
        import cloudpickle

        raws.clear()
        stream = cloudpickle.dumps(value, protocol=5, buffer_callback=out_of_band)

    head = _HEAD.pack(_MAGIC, 0, len(raws), len(stream))
    head += struct.pack("<%dQ" % len(raws), *(r.nbytes for r in raws))
    head += _ZEROS[: _pad(len(head))]
    views = [memoryview(head), memoryview(stream)]
    if _pad(len(stream)):
        views.append(memoryview(_ZEROS)[: _pad(len(stream))])
    for r in raws:
        views.append(r)
        if _pad(r.nbytes):
            views.append(memoryview(_ZEROS)[: _pad(r.nbytes)])
    return views, sum(v.nbytes for v in views)


def _deserialize(buf: bytearray | mmap.mmap) -> Any:
    mv = memoryview(buf)
    if len(buf) < _HEAD.size:
        raise ValueError("tierfs store: file too short for a header")
    magic, _flags, nbuf, plen = _HEAD.unpack_from(mv, 0)
    if magic != _MAGIC:
        raise ValueError("tierfs store: bad magic %r" % magic)
    lens = struct.unpack_from("<%dQ" % nbuf, mv, _HEAD.size)
    off = _HEAD.size + 8 * nbuf
    off += _pad(off)
    stream = mv[off : off + plen]
    off += plen + _pad(plen)
    buffers = []
    for n in lens:
        buffers.append(mv[off : off + n])
        off += n + _pad(n)
    if off > len(buf):
        raise ValueError("tierfs store: file shorter than its header says")
    return pickle.loads(stream, buffers=buffers)


def _writev_all(fd: int, views: list[memoryview]) -> None:
    views = [v for v in views if v.nbytes]
    i = 0
    while i < len(views):
        batch, size = [], 0
        for v in views[i : i + _MAX_IOV]:
            if size + v.nbytes > _MAX_WRITE and batch:
                break
            batch.append(v[: _MAX_WRITE] if v.nbytes > _MAX_WRITE else v)
            size += batch[-1].nbytes
        n = os.writev(fd, batch)
        # Consume n bytes from the front of views[i:], splitting a partly
        # written view (short writes happen on FUSE and under signals).
        while n > 0:
            v = views[i]
            if n >= v.nbytes:
                n -= v.nbytes
                i += 1
            else:
                views[i] = v[n:]
                n = 0


def _new_buffer(size: int) -> bytearray | mmap.mmap:
    """A zeroed, writable buffer of size bytes to read a file into. From
    _MMAP_MIN on it is an anonymous mapping: page aligned, so that an
    O_DIRECT read goes to tierfs in requests of whole pages that start on
    its chunk boundaries (from a malloc()ed buffer 16 bytes into a page,
    every 1 MiB request straddled two chunks of a spilled file, and the
    daemon decompressed each chunk twice); and its pages are fresh zero
    pages the read fills, with no memset first."""
    if size >= _MMAP_MIN:
        return mmap.mmap(-1, size)
    return bytearray(size)


def _read_file(path: str, size: int, flags: int) -> bytearray | mmap.mmap:
    """The size bytes of path in one new buffer; size is known from the
    write, so there is no stat, and the read goes straight into the buffer."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
    try:
        buf = _new_buffer(size)
        mv = memoryview(buf)
        got = 0
        while got < size:
            n = os.readv(fd, [mv[got:]])
            if not n:
                raise OSError(errno.EIO, "tierfs store: file shorter than written", path)
            got += n
    finally:
        os.close(fd)
    return buf


def _key_name(key: Hashable) -> str:
    """A readable, safe file name for key (the caller resolves collisions)."""
    if isinstance(key, tuple):
        text = "_".join(str(k) for k in key)
    else:
        text = str(key)
    safe = "".join(c if (c.isascii() and (c.isalnum() or c in "-_")) else "_"
                   for c in text[:_PREFIX_MAX])
    digest = blake2b(repr((type(key).__name__, key)).encode("utf-8", "surrogatepass"),
                     digest_size=16).hexdigest()
    return "%s.%s" % (safe or "_", digest)


def _drops_result(frame) -> bool:
    """Whether frame is Dask's WorkerState._purge_state, which frees a key
    with data.pop(key, None) and ignores what pop returns (distributed
    before 2023.3.1; later versions call del)."""
    return (frame is not None and frame.f_code.co_name == "_purge_state"
            and frame.f_globals.get("__name__") == "distributed.worker_state_machine")


class _Entry:
    __slots__ = ("name", "disk", "memory")

    def __init__(self, name: str | None, disk: int, memory: int):
        self.name = name  # None: held in memory only (it failed to write)
        self.disk = disk  # file bytes
        self.memory = memory  # sizeof() of the value


class _Unlinker:
    """Removes the files of deleted keys in a thread of its own.

    An unlink is a round trip to the daemon, milliseconds when it is busy,
    and Dask frees keys from its event loop: a worker freeing a thousand
    results at the end of a computation would not answer its nanny's close
    in time. The thread holds no reference to the store.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._queue: collections.deque[str] = collections.deque()
        self._pending: set[str] = set()  # paths queued or being unlinked
        self._thread: threading.Thread | None = None
        self._stopped = False

    def pending(self, path: str) -> bool:
        with self._cond:
            return path in self._pending

    def put(self, path: str) -> None:
        with self._cond:
            if self._stopped:
                return
            self._queue.append(path)
            self._pending.add(path)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="tierfs-unlink")
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                path = self._queue.popleft()
            _unlink_quiet(path)
            with self._cond:
                self._pending.discard(path)
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending or self._stopped,
                                       timeout)

    def stop(self) -> None:
        """Drop what is queued (the directory goes as a whole) and end."""
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._pending.clear()
            self._cond.notify_all()


def _finalize(owned: OwnedDir, unlinker: _Unlinker) -> None:
    unlinker.stop()
    owned.release()


class _TierMetric:
    """A Worker metric (a callable of the worker): bytes of the store's
    files in one tier. Holds the store weakly; 0 once it is gone."""

    def __init__(self, store: "TierfsStore", tier: str):
        self._store = weakref.ref(store)
        self._tier = tier

    def __call__(self, worker=None) -> int:
        s = self._store()
        return 0 if s is None else s.tier_bytes().get(self._tier, 0)


class _View(Mapping):
    """Read-only view of some keys of a store, for inspection by Dask."""

    def __init__(self, store: "TierfsStore", cached: bool):
        self._store = store
        self._cached = cached

    def _keys(self) -> list:
        s = self._store
        with s._lock:
            if self._cached:
                return list(s._cache) + list(s._pinned)
            return [k for k in s._index if k not in s._cache and k not in s._pinned]

    def __getitem__(self, key):
        s = self._store
        with s._lock:
            if self._cached:
                if key in s._cache:
                    return s._cache[key]
                return s._pinned[key]
        if key in self._keys():
            return s[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator:
        return iter(self._keys())

    def __len__(self) -> int:
        s = self._store
        with s._lock:
            n = len(s._cache) + len(s._pinned)
            return n if self._cached else len(s._index) - n

    def __contains__(self, key) -> bool:
        s = self._store
        with s._lock:
            inmem = key in s._cache or key in s._pinned
            return inmem if self._cached else (key in s._index and not inmem)


class TierfsStore(MutableMapping):
    """Dict-like store with one file per value in a private directory on tierfs.

    Parameters
    ----------
    root:
        Directory on a tierfs mount (any directory works, which is how the
        unit tests run); defaults to ``$TIERFS_DASK_DIR``. The store makes its
        own subdirectory there and removes it however its process ends: on
        :meth:`close`, garbage collection, interpreter exit, a signal, or a
        SIGKILL (see :mod:`tierfs.lifetime`).
    cache_bytes:
        Size of an in-memory LRU cache of deserialized values, by ``sizeof``.
        0 (the default) keeps nothing in the process: every read comes from
        tierfs, whose own host and device tiers are the cache. Unless
        write_back is set, values are written through to tierfs at once, so
        dropping a cached value never writes anything.
    keep_on_error:
        If a value cannot be pickled or written (every tier full), keep it in
        memory and log a warning, as Dask's own SpillBuffer does, instead of
        raising from ``__setitem__``.
    clean_stale:
        Remove the directories of dead stores under root (see
        :func:`cleanup_stale`), in the background, before making this one.
        On by default: a live store's directory is never touched.
    name:
        Subdirectory name; by default ``tfsdask-<host>-<pid>-<random>``.
    write_back:
        Values that fit in the cache are kept there only, and written to
        tierfs when they leave it (LRU overflow or ``evict()``), as Dask's
        SpillBuffer does; short-lived values are then never written. The
        write happens under the store's lock. Off by default: every value is
        written at once, and ``evict()`` never writes.
    direct_io:
        Open files with O_DIRECT. None (the default) uses it where the
        filesystem takes it at any alignment, as tierfs does; True insists.

    Dask's worker memory manager uses the ``fast`` mapping (what is cached in
    memory) and ``evict()`` to shed memory, and reports ``spilled_total``:
    sizeof() and file bytes of the values that are on tierfs only.
    """

    #: seconds for which tier_bytes() answers from what it last read
    metrics_interval = 2.0
    #: most files whose tier one tier_bytes() refresh reads
    metrics_budget = 256

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        cache_bytes: int = 0,
        keep_on_error: bool = True,
        clean_stale: bool = True,
        name: str | None = None,
        write_back: bool = False,
        direct_io: bool | None = None,
    ):
        if root is None:
            root = os.environ.get(ENV_DIR)
            if not root:
                raise ValueError(
                    "TierfsStore needs root= or $%s (a directory on a tierfs mount)"
                    % ENV_DIR
                )
        self.root = os.fspath(root)
        self.cache_bytes = int(cache_bytes)
        self.keep_on_error = keep_on_error
        self.write_back = bool(write_back)
        if clean_stale:
            cleanup_stale(self.root, wait=False)
        self._dir = OwnedDir(self.root, name)
        self.path = self._dir.path
        self._unlinker = _Unlinker()
        self._finalizer = weakref.finalize(self, _finalize, self._dir, self._unlinker)
        try:
            self.direct_io = self._write_owner(direct_io)
        except BaseException:
            self._finalizer()
            raise
        self._oflags = _O_DIRECT if self.direct_io else 0
        # Reads open with O_NOATIME, which tierfs takes as "no access": a
        # value is read about once before Dask frees it, and bringing it
        # back to host memory (policy unspill) would only push out, and
        # compress, a value that has not been read yet. EPERM (a file
        # this process does not own) turns it off.
        self._rflags = self._oflags | _O_NOATIME

        # Lock order: this lock, then the unlinker's. It guards every field
        # below. File writes, reads and unlinks run outside it; a name is
        # not reused while the unlinker still has its old file.
        self._lock = threading.RLock()
        self._index: dict[Hashable, _Entry] = {}
        # File name -> key, for every file there is or being written
        # (_MISSING until its key is installed).
        self._names: dict[str, Any] = {}
        self._cache: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._cache_weight = 0
        self._pinned: dict[Hashable, Any] = {}
        self._closed = False
        # Totals over _index, and over the entries held in memory.
        self._all_memory = self._all_disk = 0
        self._mem_memory = self._mem_disk = 0
        self._m = collections.Counter()
        # Where the files are, for tier_bytes(): names whose tier was never
        # read (oldest first) and their bytes; names read, least recently
        # read first, with the tier and bytes counted in _tier_sum.
        self._tier_new: dict[str, int] = {}
        self._tier_new_bytes = 0
        self._tier_seen: collections.OrderedDict[str, tuple[str, int]] = \
            collections.OrderedDict()
        self._tier_sum = collections.Counter()
        self._tier_at = -float("inf")
        self._tier_ok = True  # False once the files show no tierfs xattrs
        # The mount's chain, read once here rather than on a heartbeat.
        try:
            self._tiers = _xattr.tiers(self.path)
        except OSError:
            self._tiers = TIERS
        self._hooked = False
        self._hook_at = -float("inf")

    def _write_owner(self, direct_io: bool | None) -> bool:
        """Write the owner marker, probing O_DIRECT with it (an unaligned
        write, which tierfs takes and block filesystems refuse)."""
        if direct_io is False or not _O_DIRECT:
            if direct_io:
                raise ValueError("tierfs store: no O_DIRECT on this platform")
            self._dir.write_owner()
            return False
        try:
            fd = os.open(os.path.join(self.path, LOCK),
                         os.O_WRONLY | os.O_CLOEXEC | _O_DIRECT)
        except OSError as e:
            if e.errno != errno.EINVAL or direct_io:
                raise
            self._dir.write_owner()
            return False
        try:
            self._dir.write_owner(fd)
            return True
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            if direct_io:
                raise ValueError("tierfs store: %r does not take unaligned O_DIRECT "
                                 "writes" % self.root) from e
            self._dir.write_owner()
            return False
        finally:
            os.close(fd)

    # -- the mapping --------------------------------------------------------

    def __setitem__(self, key: Hashable, value: Any) -> None:
        if self.write_back:
            memory = _sizeof(value, -1)
            if 0 <= memory <= self.cache_bytes:
                with self._lock:
                    if self._closed:
                        raise RuntimeError("tierfs store %r is closed" % self.path)
                    self._discard(key)
                    self._index[key] = _Entry(None, 0, memory)
                    self._all_memory += memory
                    self._remember(key, value)
                return
        try:
            name, nbytes, t_pickle, t_write = self._write_file(key, value)
        except Exception as e:
            if not self.keep_on_error or self._closed:
                raise
            logger.warning("tierfs store: keeping %r in memory: %s: %s",
                           key, type(e).__name__, e)
            size = _sizeof(value, 0)
            with self._lock:
                self._discard(key)
                self._index[key] = _Entry(None, 0, size)
                self._pinned[key] = value
                self._all_memory += size
                self._mem_memory += size
            return
        memory = _sizeof(value, nbytes)
        with self._lock:
            if self._closed:
                self._names.pop(name, None)
                raise RuntimeError("tierfs store %r is closed" % self.path)
            self._discard(key)
            self._install(key, _Entry(name, nbytes, memory))
            self._remember(key, value)
            self._count_write(memory, nbytes, t_pickle, t_write)
        if not self._hooked:
            self._maybe_attach()

    def _write_file(self, key: Hashable, value: Any) -> tuple[str, int, float, float]:
        """Serialize value into a new file of its own; return its name, size
        and the seconds spent pickling and writing. The name is reserved in
        _names (the caller installs or drops it); the file is removed on
        failure."""
        t0 = time.perf_counter()
        encoded = self._encode(value)
        t1 = time.perf_counter()
        with self._lock:
            if self._closed:
                raise RuntimeError("tierfs store %r is closed" % self.path)
            name = self._new_name(key)
            self._names[name] = _MISSING
        path = os.path.join(self.path, name)
        try:
            # A new name every time, never a rename over the old file: a
            # reader of the old value keeps reading whole bytes, and the
            # rename's round trip to the daemon is saved.
            nbytes = self._write_encoded(path, encoded)
        except BaseException:
            _unlink_quiet(path)
            with self._lock:
                self._names.pop(name, None)
            raise
        return name, nbytes, t1 - t0, time.perf_counter() - t1

    # What a subclass changes to keep values in another format: _encode()
    # turns a value into what _write_encoded() writes into a new file (it
    # creates path, O_EXCL, and returns the file's size); _read_value()
    # gives the value back from a file of that size. Neither holds the lock.

    def _encode(self, value: Any) -> Any:
        return _serialize(value)

    def _write_encoded(self, path: str, encoded: Any) -> int:
        views, nbytes = encoded
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                     | self._oflags, 0o600)
        try:
            _writev_all(fd, views)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # tierfs places the buffer here: it can fail
        return nbytes

    def _read_value(self, path: str, size: int) -> tuple[Any, float]:
        """The value in path and the seconds its read took (the rest is
        deserialization)."""
        t0 = time.perf_counter()
        buf = _read_file(path, size, self._rflags)
        t1 = time.perf_counter()
        return _deserialize(buf), t1 - t0

    def _count_write(self, memory: int, nbytes: int, t_pickle: float,
                     t_write: float) -> None:
        m = self._m
        m["disk_write_count_total"] += 1
        m["disk_write_bytes_total"] += memory
        m["file_write_bytes_total"] += nbytes
        m["pickle_time_total"] += t_pickle
        m["disk_write_time_total"] += t_write

    def _flush(self, key: Hashable, value: Any) -> bool:
        """Write a value held only in the cache (write_back), which the
        caller has just taken out of the cache; lock held. On failure the
        value stays in memory (pinned) and False is returned."""
        entry = self._index[key]
        try:
            name, nbytes, t_pickle, t_write = self._write_file(key, value)
        except Exception as e:
            logger.warning("tierfs store: keeping %r in memory: %s: %s",
                           key, type(e).__name__, e)
            self._pinned[key] = value
            self._mem_memory += entry.memory
            return False
        entry.name, entry.disk = name, nbytes
        self._names[name] = key
        self._all_disk += nbytes
        self._tier_add_new(name, nbytes)
        self._count_write(entry.memory, nbytes, t_pickle, t_write)
        return True

    def __getitem__(self, key: Hashable) -> Any:
        for _ in range(100):
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    self._m["memory_read_count_total"] += 1
                    self._m["memory_read_bytes_total"] += self._index[key].memory
                    return self._cache[key]
                if key in self._pinned:
                    return self._pinned[key]
                entry = self._index[key]  # KeyError if absent
            t0 = time.perf_counter()
            try:
                value, t_read = self._read_value(os.path.join(self.path, entry.name),
                                                 entry.disk)
            except FileNotFoundError:
                # Deleted or closed under us; try again if the key is back.
                continue
            except PermissionError:
                if not self._rflags & _O_NOATIME:
                    raise
                self._rflags &= ~_O_NOATIME
                continue
            t2 = time.perf_counter()
            with self._lock:
                m = self._m
                m["disk_read_count_total"] += 1
                m["disk_read_bytes_total"] += entry.memory
                m["disk_read_time_total"] += t_read
                m["unpickle_time_total"] += t2 - t0 - t_read
                if self._index.get(key) is entry:
                    self._remember(key, value)
            return value
        raise KeyError(key)

    def __delitem__(self, key: Hashable) -> None:
        with self._lock:
            if key not in self._index:
                raise KeyError(key)
            self._discard(key)

    def discard(self, key: Hashable) -> None:
        """Delete key if it is there, without reading its value."""
        with self._lock:
            self._discard(key)

    def pop(self, key: Hashable, default: Any = _MISSING) -> Any:
        """As dict.pop. A value held only on tierfs is read back to be
        returned, except when Dask's worker frees a key (it ignores the
        value): then the file is just removed."""
        with self._lock:
            entry = self._index.get(key)
            if entry is None:
                if default is _MISSING:
                    raise KeyError(key)
                return default
            if key in self._cache:
                value = self._cache[key]
            elif key in self._pinned:
                value = self._pinned[key]
            elif _drops_result(sys._getframe(1)):
                # Reading the value back only to drop it cost a full read
                # (and a decompression on the disk tier) per freed key.
                self._discard(key)
                return None if default is _MISSING else default
            else:
                value = _MISSING
            if value is not _MISSING:
                self._discard(key)
                return value
        try:
            value = self[key]
        except KeyError:
            if default is _MISSING:
                raise
            return default
        with self._lock:
            if self._index.get(key) is entry:
                self._discard(key)
        return value

    def clear(self) -> None:
        """Delete every key without reading any value."""
        with self._lock:
            for key in list(self._index):
                self._discard(key)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the files of deleted keys are gone (they are removed
        in the background); False if timeout seconds passed first."""
        return self._unlinker.flush(timeout)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._index

    def __iter__(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._index))

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def __repr__(self) -> str:
        return "<TierfsStore %r: %d keys, %d cached>" % (
            self.path, len(self._index), len(self._cache))

    # -- what Dask's worker memory manager uses ----------------------------

    @property
    def fast(self) -> Mapping:
        """Values held in this process's memory (the LRU cache)."""
        return _View(self, cached=True)

    @property
    def slow(self) -> Mapping:
        """Values that are on tierfs only."""
        return _View(self, cached=False)

    memory = fast
    disk = slow

    def evict(self) -> int:
        """Drop the least recently used cached value; it is already on tierfs.

        Returns the value's sizeof(), or -1 if nothing can be dropped. Never
        raises.
        """
        try:
            with self._lock:
                if not self._cache:
                    return -1
                key, value = self._cache.popitem(last=False)
                entry = self._index[key]
                self._forget_weight(entry)
                if entry.name is None and not self._flush(key, value):
                    return -1
                return entry.memory
        except Exception:  # pragma: no cover - the protocol forbids raising
            logger.exception("tierfs store: evict failed")
            return -1

    @property
    def spilled_total(self) -> SpilledSize:
        """sizeof() and file bytes of the values not held in memory."""
        with self._lock:
            return SpilledSize(self._all_memory - self._mem_memory,
                               self._all_disk - self._mem_disk)

    def get_metrics(self) -> dict[str, float]:
        """The counters SpillBuffer.get_metrics reports, for Prometheus;
        file_write_bytes_total, the bytes written into files (what the
        *_bytes_total counters count is sizeof()); and tierfs_<tier>_bytes,
        where the store's files are (tier_bytes())."""
        tiers = self.tier_bytes()
        with self._lock:
            out = {
                "memory_count": len(self._cache) + len(self._pinned),
                "memory_bytes": self._mem_memory,
                "disk_count": len(self._index) - len(self._cache) - len(self._pinned),
                "disk_bytes": self._all_disk - self._mem_disk,
            }
            for k in ("memory_read_count_total", "memory_read_bytes_total",
                      "disk_read_count_total", "disk_read_bytes_total",
                      "disk_read_time_total", "disk_write_count_total",
                      "disk_write_bytes_total", "disk_write_time_total",
                      "pickle_time_total", "unpickle_time_total",
                      "file_write_bytes_total"):
                out[k] = self._m[k]
        for tier, n in tiers.items():
            out["tierfs_%s_bytes" % tier] = n
        return out

    # -- where the files are --------------------------------------------------

    def tier_bytes(self) -> dict[str, int]:
        """Bytes of this store's files by the tier tierfs keeps them in, one
        key per tier of the mount's chain (tiers(): ``device``, ``host``,
        ``disk``), and ``unread`` for files whose tier has not been read
        yet. {} when the files are not on tierfs.

        Cheap enough for every heartbeat: the answer is reused for
        metrics_interval seconds; a refresh reads the ``user.tierfs.tier``
        of at most metrics_budget files, the never-read newest first, then
        those read longest ago, and no stat. So the figures trail the
        daemon's moves by a few refreshes on a store with many files.
        """
        now = time.monotonic()
        chain = self.tiers()
        with self._lock:
            if not self._tier_ok:
                return {}
            todo = []
            if now - self._tier_at >= self.metrics_interval and not self._closed:
                self._tier_at = now
                budget = self.metrics_budget
                for name in reversed(self._tier_new):
                    if len(todo) >= budget:
                        break
                    todo.append(name)
                for name in self._tier_seen:
                    if len(todo) >= budget:
                        break
                    todo.append(name)
        if todo:
            self._read_tiers(todo)
        with self._lock:
            if not self._tier_ok:
                return {}
            out = {t: self._tier_sum[t] for t in chain}
            out["unread"] = self._tier_new_bytes
            return out

    def tiers(self) -> tuple:
        """The chain of tiers of the mount the store is on, fastest first,
        as its daemon lists them (tierfs.xattr.tiers()): the keys of
        tier_bytes(); TIERS off tierfs."""
        return self._tiers

    def _read_tiers(self, names: list[str]) -> None:
        got = []
        for name in names:
            try:
                tier = os.getxattr(os.path.join(self.path, name), _XATTR_TIER)
            except FileNotFoundError:
                continue  # deleted since
            except OSError as e:
                if e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                    with self._lock:
                        self._tier_ok = False
                    return
                continue
            got.append((name, tier.decode("ascii", "replace").strip("\0 \n")))
        with self._lock:
            for name, tier in got:
                key = self._names.get(name, _MISSING)
                entry = self._index.get(key) if key is not _MISSING else None
                if entry is None or entry.name != name:
                    continue  # deleted or rewritten since
                self._tier_forget(name)
                self._tier_seen[name] = (tier, entry.disk)
                self._tier_sum[tier] += entry.disk

    def attach(self, worker) -> None:
        """Report tier_bytes() as the worker's metrics tierfs_device_bytes,
        tierfs_host_bytes and tierfs_disk_bytes: they go with each heartbeat
        and show as columns of the dashboard's worker table. TierfsWorker
        calls it; a store given as Worker(data=...) finds its worker itself
        on its first write."""
        self._hooked = True
        for tier in self.tiers():
            worker.metrics.setdefault("tierfs_%s_bytes" % tier, _TierMetric(self, tier))

    def _maybe_attach(self) -> None:
        now = time.monotonic()
        if now - self._hook_at < 1.0:
            return
        self._hook_at = now
        mod = sys.modules.get("distributed.worker")
        if mod is None:
            return
        for w in list(getattr(mod.Worker, "_instances", ())):
            try:
                mine = w.data is self
            except Exception:
                continue
            if mine:
                self.tier_bytes()
                if self._tier_ok:
                    self.attach(w)
                else:
                    self._hooked = True  # not on tierfs: nothing to show
                return

    # -- lifetime ------------------------------------------------------------

    def close(self) -> None:
        """Forget every key and remove this store's directory: it is renamed
        aside at once and its files are removed in the background. Idempotent."""
        with self._lock:
            self._closed = True
            self._index.clear()
            self._names.clear()
            self._cache.clear()
            self._pinned.clear()
            self._cache_weight = 0
            self._all_memory = self._all_disk = 0
            self._mem_memory = self._mem_disk = 0
            self._tier_new.clear()
            self._tier_seen.clear()
            self._tier_sum.clear()
            self._tier_new_bytes = 0
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "TierfsStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def file_of(self, key: Hashable) -> str | None:
        """Path of the file holding key, or None if it is held in memory only."""
        with self._lock:
            name = self._index[key].name
        return None if name is None else os.path.join(self.path, name)

    # -- helpers; the caller holds self._lock ------------------------------

    def _new_name(self, key: Hashable) -> str:
        base = _key_name(key)
        name, i = base, 0
        while name in self._names or self._unlinker.pending(os.path.join(self.path, name)):
            i += 1
            name = "%s~%d" % (base, i)
        return name

    def _install(self, key: Hashable, entry: _Entry) -> None:
        self._index[key] = entry
        self._names[entry.name] = key
        self._all_memory += entry.memory
        self._all_disk += entry.disk
        self._tier_add_new(entry.name, entry.disk)

    def _tier_add_new(self, name: str, nbytes: int) -> None:
        self._tier_new[name] = nbytes
        self._tier_new_bytes += nbytes

    def _tier_forget(self, name: str) -> None:
        nbytes = self._tier_new.pop(name, None)
        if nbytes is not None:
            self._tier_new_bytes -= nbytes
        seen = self._tier_seen.pop(name, None)
        if seen is not None:
            self._tier_sum[seen[0]] -= seen[1]

    def _forget_weight(self, entry: _Entry) -> None:
        self._cache_weight -= entry.memory
        self._mem_memory -= entry.memory
        self._mem_disk -= entry.disk

    def _remember(self, key: Hashable, value: Any) -> None:
        entry = self._index[key]
        if entry.memory > self.cache_bytes or key in self._cache:
            return
        while self._cache and self._cache_weight + entry.memory > self.cache_bytes:
            old, old_value = self._cache.popitem(last=False)
            old_entry = self._index[old]
            self._forget_weight(old_entry)
            if old_entry.name is None:
                self._flush(old, old_value)
        self._cache[key] = value
        self._cache_weight += entry.memory
        self._mem_memory += entry.memory
        self._mem_disk += entry.disk

    def _discard(self, key: Hashable) -> None:
        entry = self._index.pop(key, None)
        if entry is None:
            return
        self._all_memory -= entry.memory
        self._all_disk -= entry.disk
        if key in self._cache:
            del self._cache[key]
            self._forget_weight(entry)
        elif key in self._pinned:
            del self._pinned[key]
            self._mem_memory -= entry.memory
        if entry.name is not None:
            self._tier_forget(entry.name)
            del self._names[entry.name]
            self._unlinker.put(os.path.join(self.path, entry.name))


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


cleanup = cleanup_stale
