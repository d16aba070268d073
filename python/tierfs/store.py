# SPDX-License-Identifier: LGPL-2.1-or-later
"""A MutableMapping that keeps every value in its own file on a tierfs mount.

The mapping is what a Dask worker stores its results in (``Worker(data=...)``),
but nothing here needs Dask: any process can use it as a dict whose values
live in tierfs, where the daemon moves them between device, host and disk.

Layout on the mount::

    <root>/tfsdask-<host>-<pid>-<token>/      one directory per store
        .owner                                 JSON: pid, host, process start
        <readable-prefix>.<hash>               one file per key

File format (little endian), one file per value::

    magic    8 bytes  b"TFSDASK1"
    flags    u32      reserved, 0
    nbuf     u32      number of out-of-band buffers
    plen     u64      length of the pickle stream
    blen     u64 * nbuf
    padding to 64, pickle stream, padding to 64,
    each buffer followed by padding to 64

The pickle stream is protocol 5; large contiguous buffers (numpy and pandas
data) go out of band so they are written straight from the object's memory
and read back into one allocation without a copy per buffer. Nothing is
compressed here: tierfs compresses on its disk tier.
"""

from __future__ import annotations

import collections
import errno
import json
import logging
import os
import pickle
import secrets
import shutil
import signal
import socket
import struct
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, MutableMapping
from hashlib import blake2b
from typing import Any, Hashable, NamedTuple

__all__ = ["TierfsStore", "cleanup_stale", "cleanup", "remove_on_sigterm",
           "DIR_PREFIX", "MARKER"]

logger = logging.getLogger("tierfs.store")

ENV_DIR = "TIERFS_DASK_DIR"
DIR_PREFIX = "tfsdask-"
MARKER = ".owner"
TMP_PREFIX = ".tmp."

_MAGIC = b"TFSDASK1"
_HEAD = struct.Struct("<8sIIQ")
_ALIGN = 64
_ZEROS = bytes(_ALIGN)
# Linux caps one write at 0x7ffff000 bytes and one writev at IOV_MAX entries.
_MAX_IOV = 512
_MAX_WRITE = 1 << 30
_PREFIX_MAX = 96


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


def _deserialize(buf: bytearray) -> Any:
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


def _read_all(path: str) -> bytearray:
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        buf = bytearray(size)
        mv = memoryview(buf)
        got = 0
        while got < size:
            n = f.readinto(mv[got:])
            if not n:
                raise OSError(errno.EIO, "short read", path)
            got += n
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


def _proc_start(pid: int) -> int | None:
    """Start time of pid in clock ticks since boot, or None if unknown."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: fields start after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def _alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is not None:
        now = _proc_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused by another process
    return True


_live_dirs: set[str] = set()  # directories of this process's open stores


def _remove_dir(path: str) -> None:
    _live_dirs.discard(path)
    shutil.rmtree(path, ignore_errors=True)


def remove_on_sigterm() -> bool:
    """Make SIGTERM remove this process's store directories before it ends
    the process as before. Only where SIGTERM has its default action and from
    the main thread; returns whether the handler is installed.

    A worker stopped by systemd, ``timeout`` or a terminal's process group
    signal gets SIGTERM with no chance to close its store; TierfsWorker calls
    this so those directories go too.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return signal.getsignal(signal.SIGTERM) is _on_sigterm

    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def _on_sigterm(signum, frame) -> None:
    for path in list(_live_dirs):
        shutil.rmtree(path, ignore_errors=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


class _Entry:
    __slots__ = ("name", "disk", "memory")

    def __init__(self, name: str | None, disk: int, memory: int):
        self.name = name  # None: held in memory only (it failed to write)
        self.disk = disk  # file bytes
        self.memory = memory  # sizeof() of the value


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
        own subdirectory there and removes it on :meth:`close`, when it is
        garbage collected, or at interpreter exit.
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
        :func:`cleanup_stale`) before making this one.
    name:
        Subdirectory name; by default ``tfsdask-<host>-<pid>-<random>``.
    write_back:
        Values that fit in the cache are kept there only, and written to
        tierfs when they leave it (LRU overflow or ``evict()``), as Dask's
        SpillBuffer does; short-lived values are then never written. The
        write happens under the store's lock. Off by default: every value is
        written at once, and ``evict()`` never writes.

    Dask's worker memory manager uses the ``fast`` mapping (what is cached in
    memory) and ``evict()`` to shed memory, and reports ``spilled_total``:
    sizeof() and file bytes of the values that are on tierfs only.
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        cache_bytes: int = 0,
        keep_on_error: bool = True,
        clean_stale: bool = False,
        name: str | None = None,
        write_back: bool = False,
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
            cleanup_stale(self.root)
        host = socket.gethostname().split(".")[0] or "host"
        if name is None:
            name = "%s%s-%d-%s" % (DIR_PREFIX, host, os.getpid(), secrets.token_hex(4))
        self.path = os.path.join(self.root, name)
        os.makedirs(self.path)
        self._finalizer = weakref.finalize(self, _remove_dir, self.path)
        _live_dirs.add(self.path)
        marker = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "start": _proc_start(os.getpid()),
            "created": time.time(),
        }
        tmp = os.path.join(self.path, TMP_PREFIX + MARKER)
        with open(tmp, "w") as f:
            json.dump(marker, f)
        os.rename(tmp, os.path.join(self.path, MARKER))

        # Lock order: only this lock. It guards every field below. File
        # writes and reads run outside it; renames and unlinks run under it so
        # that a delete never removes a newer value of the same key.
        self._lock = threading.RLock()
        self._index: dict[Hashable, _Entry] = {}
        self._names: dict[str, Hashable] = {}
        self._cache: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._cache_weight = 0
        self._pinned: dict[Hashable, Any] = {}
        self._closed = False
        # Totals over _index, and over the entries held in memory.
        self._all_memory = self._all_disk = 0
        self._mem_memory = self._mem_disk = 0
        self._m = collections.Counter()

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
            tmp, nbytes, t_pickle, t_write = self._write_tmp(value)
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
                _unlink_quiet(tmp)
                raise RuntimeError("tierfs store %r is closed" % self.path)
            old = self._index.get(key)
            name = self._install(key, tmp, old.name if old is not None else None)
            self._discard(key, unlink=False)
            self._index[key] = _Entry(name, nbytes, memory)
            self._names[name] = key
            self._all_memory += memory
            self._all_disk += nbytes
            self._remember(key, value)
            self._count_write(memory, t_pickle, t_write)

    def _write_tmp(self, value: Any) -> tuple[str, int, float, float]:
        """Serialize value into a new temporary file; return its path, size
        and the seconds spent pickling and writing. Removes it on failure."""
        t0 = time.perf_counter()
        views, nbytes = _serialize(value)
        t1 = time.perf_counter()
        tmp = os.path.join(self.path, "%s%s" % (TMP_PREFIX, secrets.token_hex(8)))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _writev_all(fd, views)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quiet(tmp)
            raise
        return tmp, nbytes, t1 - t0, time.perf_counter() - t1

    def _install(self, key: Hashable, tmp: str, name: str | None) -> str:
        """Rename tmp to key's file (name, or a new one); lock held."""
        if name is None:
            name = self._new_name(key)
        try:
            os.rename(tmp, os.path.join(self.path, name))
        except BaseException:
            _unlink_quiet(tmp)
            raise
        return name

    def _count_write(self, memory: int, t_pickle: float, t_write: float) -> None:
        m = self._m
        m["disk_write_count_total"] += 1
        m["disk_write_bytes_total"] += memory
        m["pickle_time_total"] += t_pickle
        m["disk_write_time_total"] += t_write

    def _flush(self, key: Hashable, value: Any) -> bool:
        """Write a value held only in the cache (write_back), which the
        caller has just taken out of the cache; lock held. On failure the
        value stays in memory (pinned) and False is returned."""
        entry = self._index[key]
        try:
            tmp, nbytes, t_pickle, t_write = self._write_tmp(value)
            entry.name = self._install(key, tmp, None)
        except Exception as e:
            logger.warning("tierfs store: keeping %r in memory: %s: %s",
                           key, type(e).__name__, e)
            self._pinned[key] = value
            self._mem_memory += entry.memory
            return False
        self._names[entry.name] = key
        entry.disk = nbytes
        self._all_disk += nbytes
        self._count_write(entry.memory, t_pickle, t_write)
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
                buf = _read_all(os.path.join(self.path, entry.name))
            except FileNotFoundError:
                # Deleted or closed under us; try again if the key is back.
                continue
            t1 = time.perf_counter()
            value = _deserialize(buf)
            t2 = time.perf_counter()
            with self._lock:
                m = self._m
                m["disk_read_count_total"] += 1
                m["disk_read_bytes_total"] += entry.memory
                m["disk_read_time_total"] += t1 - t0
                m["unpickle_time_total"] += t2 - t1
                if self._index.get(key) is entry:
                    self._remember(key, value)
            return value
        raise KeyError(key)

    def __delitem__(self, key: Hashable) -> None:
        with self._lock:
            if key not in self._index:
                raise KeyError(key)
            self._discard(key)

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
        """The counters SpillBuffer.get_metrics reports, for Prometheus."""
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
                      "pickle_time_total", "unpickle_time_total"):
                out[k] = self._m[k]
            return out

    # -- lifetime ------------------------------------------------------------

    def close(self) -> None:
        """Forget every key and remove this store's directory. Idempotent."""
        with self._lock:
            self._closed = True
            self._index.clear()
            self._names.clear()
            self._cache.clear()
            self._pinned.clear()
            self._cache_weight = 0
            self._all_memory = self._all_disk = 0
            self._mem_memory = self._mem_disk = 0
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
        while name in self._names and self._names[name] != key:
            i += 1
            name = "%s~%d" % (base, i)
        return name

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

    def _discard(self, key: Hashable, unlink: bool = True) -> None:
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
            del self._names[entry.name]
            if unlink:
                _unlink_quiet(os.path.join(self.path, entry.name))


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def cleanup_stale(root: str | os.PathLike, max_age: float | None = None) -> list[str]:
    """Remove the directories that dead stores left under root.

    A directory is removed when its ``.owner`` marker names a process on this
    host that no longer runs (or whose pid now belongs to another process).
    With max_age (seconds), a directory is also removed when its owner cannot
    be checked (another host, or no readable marker) and it has not changed
    for max_age seconds. Only ``tfsdask-*`` directories are considered, so
    root may be shared with other files. Returns the paths removed.
    """
    root = os.fspath(root)
    here = socket.gethostname()
    removed = []
    now = time.time()
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return removed
    for name in names:
        if not name.startswith(DIR_PREFIX):
            continue
        path = os.path.join(root, name)
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        try:
            with open(os.path.join(path, MARKER)) as f:
                owner = json.load(f)
            pid, host, start = int(owner["pid"]), owner["host"], owner.get("start")
        except (OSError, ValueError, KeyError, TypeError):
            owner = None
        if owner is not None and host == here:
            dead = not _alive(pid, start)
        elif max_age is not None:
            try:
                dead = now - os.stat(path).st_mtime > max_age
            except FileNotFoundError:
                continue
        else:
            dead = False
        if dead:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            logger.info("tierfs store: removed stale %r", path)
    return removed


cleanup = cleanup_stale
