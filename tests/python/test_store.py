# SPDX-License-Identifier: LGPL-2.1-or-later
"""TierfsStore on a plain directory: no mount needed, but for what it reads
from tierfs itself (tierfs_mount, conftest.py)."""

import json
import mmap
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

from tierfs import lifetime
from tierfs import store as st
from tierfs.store import TierfsStore, cleanup_stale


PYDIR = os.path.join(os.path.dirname(__file__), "..", "..", "python")


def files(s):
    assert s.flush(30)  # deleted keys' files go in the background
    return sorted(n for n in os.listdir(s.path) if n != st.LOCK)


def wait_for(cond, timeout=30.0):
    """Poll cond until it is true; the reaper and background removals run
    in other processes."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def child(code, root, **kw):
    """A python3 child that made a TierfsStore s in root and printed its path."""
    pre = ("import os, sys, time; sys.path.insert(0, %r)\n"
           "from tierfs import lifetime\n"
           "from tierfs.store import TierfsStore\n" % PYDIR)
    return subprocess.Popen([sys.executable, "-c", pre + code % {"root": str(root)}],
                            stdout=subprocess.PIPE, text=True, **kw)


@pytest.fixture
def store(tmp_path):
    s = TierfsStore(tmp_path)
    yield s
    s.close()


def test_root_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_DASK_DIR", str(tmp_path))
    with TierfsStore() as s:
        assert os.path.dirname(s.path) == str(tmp_path)
    monkeypatch.delenv("TIERFS_DASK_DIR")
    with pytest.raises(ValueError):
        TierfsStore()


def test_numpy_roundtrip(store):
    a = np.arange(1_000_003, dtype=np.float64)
    f = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    strided = np.arange(100)[::3]
    store["a"], store["f"], store["s"] = a, f, strided
    b = store["a"]
    assert b.dtype == a.dtype and np.array_equal(a, b)
    assert b.flags.writeable
    assert b.ctypes.data % 8 == 0
    assert np.array_equal(store["f"], f) and store["f"].flags.f_contiguous
    assert np.array_equal(store["s"], strided)
    store["z"] = np.empty(0)
    assert store["z"].shape == (0,)


def test_file_layout_is_raw(store):
    # No compression on our side: the array's bytes are in the file as is.
    a = np.arange(4096, dtype=np.uint32)
    store["x"] = a
    with open(store.file_of("x"), "rb") as f:
        data = f.read()
    assert data[:8] == b"TFSDASK1"
    assert a.tobytes() in data
    assert len(data) < a.nbytes + 4096


def test_pandas_roundtrip(store):
    df = pd.DataFrame({
        "i": np.arange(10_000),
        "f": np.random.default_rng(0).random(10_000),
        "s": ["k%d" % (i % 7) for i in range(10_000)],
        "c": pd.Categorical(["a", "b"] * 5000),
    }).set_index("i")
    store[("frame", 0)] = df
    store["series"] = df["f"]
    pd.testing.assert_frame_equal(store[("frame", 0)], df)
    pd.testing.assert_series_equal(store["series"], df["f"])


def test_plain_objects(store):
    objs = {
        "none": None, "int": 2**70, "str": "héllo", "bytes": b"\0" * 10,
        "nested": {"a": [1, 2, (3, 4)], "b": {5, 6}},
        "bytearray": bytearray(b"xyz"),
    }
    for k, v in objs.items():
        store[k] = v
    for k, v in objs.items():
        assert store[k] == v


def test_cloudpickle_fallback(store):
    store["f"] = lambda x: x + 1
    assert store["f"](1) == 2


def test_odd_keys(store):
    keys = [
        ("x-123", 0, 1),
        ("x-123", 1, 0),
        "a/b/../c",
        "/",
        ".",
        "..",
        "",
        "k" * 1000,
        "ключ-🙂",
        ("tuple", "with/slash", 3),
        42,
        ("nested", ("t", 1)),
        "x-123_0_1",  # same readable prefix as the first tuple
    ]
    for i, k in enumerate(keys):
        store[k] = i
    assert len(store) == len(keys)
    for i, k in enumerate(keys):
        assert store[k] == i
    names = files(store)
    assert len(names) == len(keys)
    assert all(len(n.encode()) <= 255 and "/" not in n for n in names)
    assert all(n not in (".", "..") for n in names)
    assert set(store) == set(keys)
    for k in keys:
        del store[k]
    assert files(store) == [] and len(store) == 0


def test_name_collision_resolved(store, monkeypatch):
    monkeypatch.setattr(st, "_key_name", lambda key: "same")
    store["a"], store["b"] = 1, 2
    assert store["a"] == 1 and store["b"] == 2
    assert files(store) == ["same", "same~1"]
    store["a"] = 3  # a new file under a free name; the old one goes
    assert files(store) == ["same~1", "same~2"]
    assert store["a"] == 3 and store["b"] == 2
    del store["a"]
    assert store["b"] == 2 and files(store) == ["same~1"]


def test_overwrite_and_delete(store):
    store["k"] = np.ones(10)
    store["k"] = "second"
    assert store["k"] == "second"
    assert len(files(store)) == 1
    del store["k"]
    assert "k" not in store
    with pytest.raises(KeyError):
        store["k"]
    with pytest.raises(KeyError):
        del store["k"]
    assert files(store) == []


def test_one_file_per_key(store):
    for i in range(20):
        store[i] = np.arange(i)
    for i in range(0, 20, 2):
        store[i] = "again"
    assert files(store) == sorted(os.path.basename(store.file_of(i)) for i in range(20))


def test_evict_without_cache(store):
    store["a"] = np.ones(1000)
    assert len(store.fast) == 0 and not store.fast
    assert store.evict() == -1
    assert "a" in store.slow and len(store.slow) == 1


def test_evict_with_cache(tmp_path):
    with TierfsStore(tmp_path, cache_bytes=10_000) as s:
        s["a"] = np.ones(500)  # 4000 bytes
        s["b"] = np.ones(500)
        assert list(s.fast) == ["a", "b"]
        s["a"]  # a becomes most recently used
        s["c"] = np.ones(500)  # 12000 > 10000: b, the LRU, leaves the cache
        assert list(s.fast) == ["a", "c"]
        assert "b" in s.slow
        n_files = len(files(s))
        w = s.evict()
        assert w >= 4000 and list(s.fast) == ["c"]
        assert len(files(s)) == n_files  # nothing written by evict
        assert s.evict() > 0 and s.evict() == -1
        assert np.array_equal(s["a"], np.ones(500))  # read back from the file
        assert list(s.fast) == ["a"]
        s["big"] = np.ones(10_000)  # larger than the cache: never cached
        assert "big" not in s.fast and "big" in s.slow


def test_spilled_total(tmp_path):
    from dask.sizeof import sizeof

    with TierfsStore(tmp_path, cache_bytes=10_000) as s:
        assert tuple(s.spilled_total) == (0, 0)
        a = np.ones(500)
        s["a"] = a
        assert tuple(s.spilled_total) == (0, 0)  # cached
        s.evict()
        mem, disk = s.spilled_total
        assert mem == sizeof(a)
        assert disk == os.path.getsize(s.file_of("a"))
        s["a"]  # back in the cache
        assert tuple(s.spilled_total) == (0, 0)
        s["b"] = np.ones(5000)  # too big for the cache
        assert s.spilled_total.memory == sizeof(np.ones(5000))
        del s["b"]
        assert tuple(s.spilled_total) == (0, 0)
        m = s.get_metrics()
        assert m["disk_write_count_total"] == 2 and m["disk_read_count_total"] == 1
        assert m["memory_count"] == 1 and m["disk_count"] == 0


def test_spilled_total_type_matches_distributed(store):
    from distributed.spill import SpilledSize

    store["x"] = 1
    assert isinstance(store.spilled_total, SpilledSize)


def test_unpicklable_kept_in_memory(store):
    lock = threading.Lock()  # neither pickle nor cloudpickle takes a lock
    store["lock"] = lock
    assert store["lock"] is lock
    assert "lock" in store.fast and files(store) == []
    assert store.evict() == -1  # it cannot be dropped: it is only in memory
    del store["lock"]
    assert len(store) == 0


def test_unpicklable_raises_when_asked(tmp_path):
    with TierfsStore(tmp_path, keep_on_error=False) as s:
        with pytest.raises(Exception):
            s["lock"] = threading.Lock()
        assert "lock" not in s and files(s) == []


def test_threads(tmp_path):
    errors = []
    with TierfsStore(tmp_path, cache_bytes=200_000) as s:
        def work(t):
            try:
                rng = np.random.default_rng(t)
                for i in range(200):
                    k = ("k", int(rng.integers(20)))
                    op = rng.integers(4)
                    if op == 0:
                        s[k] = np.full(1000, k[1])
                    elif op == 1:
                        try:
                            v = s[k]
                        except KeyError:
                            continue
                        assert (v == k[1]).all()
                    elif op == 2:
                        try:
                            del s[k]
                        except KeyError:
                            pass
                    else:
                        s.evict()
                        s.spilled_total
                        len(s.fast)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        assert set(files(s)) == {os.path.basename(s.file_of(k)) for k in s}
        for k in list(s):
            assert (s[k] == k[1]).all()
        mem, disk = s.spilled_total
        assert mem >= 0 and disk >= 0


def test_close_removes_dir(tmp_path):
    s = TierfsStore(tmp_path, cache_bytes=1 << 20)
    s["a"] = np.ones(10)
    for i in range(200):
        s[i] = i
    path = s.path
    assert os.path.isdir(path)
    s.close()
    # Renamed aside at once, removed in the background.
    assert not os.path.exists(path)
    assert wait_for(lambda: os.listdir(tmp_path) == [])
    assert len(s) == 0 and s.closed
    with pytest.raises(Exception):
        s["b"] = 1
    s.close()  # idempotent


def test_dir_removed_at_exit(tmp_path):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from tierfs import TierfsStore\n"
            "s = TierfsStore(%r); s['a'] = 1; print(s.path)\n"
            % (os.path.join(os.path.dirname(__file__), "..", "..", "python"),
               str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", code], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out.startswith(str(tmp_path))
    assert wait_for(lambda: os.listdir(tmp_path) == [])


def test_marker(store):
    with open(os.path.join(store.path, st.LOCK)) as f:
        owner = json.load(f)
    assert owner["pid"] == os.getpid()
    assert os.path.basename(store.path).startswith(st.DIR_PREFIX)


def test_sigkill_reaper_removes_dir(tmp_path):
    # Nothing in the killed process runs; its reaper sees the lock go.
    p = child("s = TierfsStore(%(root)r); s['a'] = b'x' * 100\n"
              "print(s.path, flush=True); os.kill(os.getpid(), 9)\n", tmp_path)
    dead = p.stdout.readline().strip()
    assert p.wait(30) == -9
    assert dead.startswith(str(tmp_path))
    assert wait_for(lambda: os.listdir(tmp_path) == [])


def test_sigkill_without_reaper_cleaned_at_next_start(tmp_path):
    # The reaper killed too (a whole cgroup stopped): the next store on the
    # root removes the directory at its start, and only that one.
    p = child("lifetime._have_tools = lambda: False\n"
              "s = TierfsStore(%(root)r); s['a'] = 1; print(s.path, flush=True)\n"
              "os.kill(os.getpid(), 9)\n", tmp_path)
    dead = p.stdout.readline().strip()
    assert p.wait(30) == -9 and os.path.isdir(dead)
    live = child("s = TierfsStore(%(root)r, clean_stale=False); print(s.path, flush=True)\n"
                 "sys.stdin.read()\n", tmp_path, stdin=subprocess.PIPE)
    live_path = live.stdout.readline().strip()
    other = tmp_path / "not-ours"
    other.mkdir()
    try:
        with TierfsStore(tmp_path) as s:  # clean_stale is the default
            assert not os.path.exists(dead)
            assert os.path.isdir(live_path) and other.is_dir() and os.path.isdir(s.path)
        assert wait_for(lambda: sorted(os.listdir(tmp_path)) ==
                        sorted([os.path.basename(live_path), "not-ours"]))
        assert cleanup_stale(tmp_path) == []
    finally:
        live.stdin.close()
        assert live.wait(30) == 0
    assert wait_for(lambda: os.listdir(tmp_path) == ["not-ours"])


def test_live_store_never_removed(tmp_path):
    # Another live store on the same root, whatever its pid or age says.
    live = child("s = TierfsStore(%(root)r); print(s.path, flush=True)\n"
                 "sys.stdin.read()\n", tmp_path, stdin=subprocess.PIPE)
    path = live.stdout.readline().strip()
    try:
        os.utime(path, (0, 0))
        assert cleanup_stale(tmp_path, max_age=1) == []
        with TierfsStore(tmp_path):
            pass
        assert os.path.isdir(path)
        # The lock, not the pid, decides: a wrong pid in the marker is ignored.
        with open(os.path.join(path, st.LOCK), "r+") as f:
            f.write(json.dumps({"pid": 1 << 30, "host": lifetime.socket.gethostname()}))
            f.truncate()
        assert cleanup_stale(tmp_path) == [] and os.path.isdir(path)
    finally:
        live.stdin.close()
        assert live.wait(30) == 0
    assert wait_for(lambda: os.listdir(tmp_path) == [])


def test_reused_name_survives_old_reaper(tmp_path):
    # A store closed and made again under the same name at once: the first
    # one's reaper must not remove the second's directory.
    for _ in range(5):
        TierfsStore(tmp_path, name="fixed").close()
        s = TierfsStore(tmp_path, name="fixed", clean_stale=False)
        s["a"] = 1
        assert wait_for(lambda: os.listdir(tmp_path) == ["fixed"])
        time.sleep(0.1)
        assert s["a"] == 1 and os.listdir(tmp_path) == ["fixed"]
        s.close()
    assert wait_for(lambda: os.listdir(tmp_path) == [])


def test_forked_child_neither_holds_nor_removes(tmp_path):
    s = TierfsStore(tmp_path)
    s["a"] = 1
    pid = os.fork()
    if pid == 0:  # the child closes and garbage collects its copy
        try:
            s.close()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert os.path.isdir(s.path) and s["a"] == 1
    # Without the child's copy of the lock, the parent's close still frees it.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)  # outlives the parent's close
        os._exit(0)
    s.close()
    assert wait_for(lambda: os.listdir(tmp_path) == [])
    os.write(w, b"x")
    os.waitpid(pid, 0)


def test_leftover_new_and_trash_dirs(tmp_path):
    young = tmp_path / (lifetime.NEW_PREFIX + "young")
    young.mkdir()
    old = tmp_path / (lifetime.NEW_PREFIX + "old")
    old.mkdir()
    (old / st.LOCK).write_text("")
    os.utime(old, (0, 0))
    trash = tmp_path / (lifetime.TRASH_PREFIX + "x")
    (trash / "sub").mkdir(parents=True)
    assert cleanup_stale(tmp_path) == []
    assert os.listdir(tmp_path) == [young.name]


def test_cleanup_reused_pid_and_max_age(tmp_path):
    # Our own pid with another start time: the pid was reused, the owner is dead.
    d = tmp_path / (st.DIR_PREFIX + "reused")
    d.mkdir()
    (d / st.MARKER).write_text(json.dumps(
        {"pid": os.getpid(), "host": lifetime.socket.gethostname(), "start": -1}))
    # Another host: only max_age can remove it.
    far = tmp_path / (st.DIR_PREFIX + "far")
    far.mkdir()
    (far / st.MARKER).write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    assert cleanup_stale(tmp_path) == [str(d)]
    assert cleanup_stale(tmp_path, max_age=3600) == []
    os.utime(far, (0, 0))
    assert cleanup_stale(tmp_path, max_age=3600) == [str(far)]


def test_clean_stale_on_start(tmp_path):
    d = tmp_path / (st.DIR_PREFIX + "dead")
    d.mkdir()
    (d / st.MARKER).write_text(json.dumps(
        {"pid": os.getpid(), "host": lifetime.socket.gethostname(), "start": -1}))
    with TierfsStore(tmp_path, clean_stale=True):
        assert not d.exists()


def test_cli_cleanup(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    out = subprocess.run([sys.executable, "-m", "tierfs", "cleanup", str(tmp_path)],
                         check=True, capture_output=True, text=True, env=env)
    assert out.returncode == 0


def test_pickle_of_data_tuple():
    # A nanny sends data=(TierfsStore, kwargs) to a spawned process.
    cls, kw = pickle.loads(pickle.dumps((TierfsStore, {"root": "/x"})))
    assert cls is TierfsStore and kw == {"root": "/x"}


def test_worker_memory_manager_accepts_store(tmp_path):
    from distributed.worker_memory import WorkerMemoryManager

    class FakeWorker:
        local_directory = str(tmp_path)
        periodic_callbacks = {}

    mm = WorkerMemoryManager(FakeWorker(), nthreads=1, memory_limit="1GiB",
                             data=(TierfsStore, {"root": str(tmp_path), "cache_bytes": 100}))
    assert isinstance(mm.data, TierfsStore)
    mm.data.close()


def test_many_buffers_and_short_writes(store, monkeypatch):
    # More buffers than one writev takes, and a kernel that writes little.
    arrays = [np.full(i % 50, i, dtype=np.int64) for i in range(700)]
    calls = []

    def short_writev(fd, bufs):
        calls.append(len(bufs))
        assert len(bufs) <= 1024
        return os.write(fd, b"".join(bytes(b) for b in bufs[:3])[:777])

    monkeypatch.setattr(st.os, "writev", short_writev)
    store["many"] = arrays
    monkeypatch.undo()
    assert len(calls) > 10
    got = store["many"]
    assert len(got) == 700 and all(np.array_equal(a, b) for a, b in zip(arrays, got))


def test_write_back(tmp_path):
    from dask.sizeof import sizeof

    with TierfsStore(tmp_path, cache_bytes=10_000, write_back=True) as s:
        s["a"] = np.ones(500)  # fits: held in memory only, no file yet
        s["b"] = np.ones(500)
        assert files(s) == [] and s.file_of("a") is None
        assert tuple(s.spilled_total) == (0, 0)
        s["c"] = np.ones(500)  # a leaves the cache and is written
        assert len(files(s)) == 1 and s.file_of("a") is not None
        assert list(s.fast) == ["b", "c"] and list(s.slow) == ["a"]
        mem, disk = s.spilled_total
        assert mem == sizeof(np.ones(500)) and disk == os.path.getsize(s.file_of("a"))
        assert s.evict() == sizeof(np.ones(500))  # b is written now
        assert len(files(s)) == 2
        del s["c"]  # never written, nothing to remove
        assert len(files(s)) == 2 and s.evict() == -1
        assert np.array_equal(s["a"], np.ones(500)) and "a" in s.fast
        s["big"] = np.ones(5000)  # larger than the cache: written at once
        assert len(files(s)) == 3 and "big" in s.slow
        s["a"] = "small"  # overwrite drops the old file
        assert s["a"] == "small" and len(files(s)) == 2
        for k in list(s):
            del s[k]
        assert files(s) == [] and tuple(s.spilled_total) == (0, 0)
        assert s.get_metrics()["disk_write_count_total"] == 3


def test_write_back_evict_failure_keeps_value(tmp_path):
    with TierfsStore(tmp_path, cache_bytes=1 << 20, write_back=True) as s:
        lock = threading.Lock()
        s["lock"] = lock
        assert s.evict() == -1  # cannot be written: kept in memory
        assert s["lock"] is lock and "lock" in s.fast
        s["x"] = 1
        assert s.evict() > 0 and s["x"] == 1


def test_write_back_threads(tmp_path):
    errors = []
    with TierfsStore(tmp_path, cache_bytes=50_000, write_back=True) as s:
        def work(t):
            try:
                rng = np.random.default_rng(t)
                for _ in range(300):
                    k = int(rng.integers(30))
                    op = rng.integers(4)
                    if op == 0:
                        s[k] = np.full(1000, k)
                    elif op == 1:
                        try:
                            assert (s[k] == k).all()
                        except KeyError:
                            pass
                    elif op == 2:
                        try:
                            del s[k]
                        except KeyError:
                            pass
                    else:
                        s.evict()
            except Exception as e:  # pragma: no cover
                errors.append(e)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        on_disk = {os.path.basename(p) for p in map(s.file_of, s) if p}
        assert set(files(s)) == on_disk
        assert all((s[k] == k).all() for k in list(s))
        while s.evict() != -1:
            pass
        mem, disk = s.spilled_total
        assert disk == sum(os.path.getsize(s.file_of(k)) for k in s)


def test_sigterm_removes_dir(tmp_path):
    p = child("from tierfs.store import remove_on_sigterm\n"
              "s = TierfsStore(%(root)r); s['a'] = 1\n"
              "assert remove_on_sigterm()\n"
              "print(s.path, flush=True); time.sleep(30)\n", tmp_path)
    path = p.stdout.readline().strip()
    assert os.path.isdir(path)
    p.terminate()
    assert p.wait(10) == -15  # still dies of SIGTERM
    assert wait_for(lambda: os.listdir(tmp_path) == [])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_without_handler(tmp_path, sig):
    # No handler: the process dies of the signal (or of KeyboardInterrupt)
    # and the reaper removes the directory.
    p = child("s = TierfsStore(%(root)r); s['a'] = 1\n"
              "print(s.path, flush=True); time.sleep(30)\n", tmp_path,
              stderr=subprocess.DEVNULL)
    path = p.stdout.readline().strip()
    assert os.path.isdir(path)
    p.send_signal(sig)
    assert p.wait(10) != 0
    assert wait_for(lambda: os.listdir(tmp_path) == [])


# -- speed: what each operation asks of the filesystem ------------------------

def test_one_writev_one_read_no_stat(store, monkeypatch):
    a = np.arange(1 << 20, dtype=np.float64)
    df = pd.DataFrame({"x": np.arange(1000), "y": np.ones(1000)})
    calls = {"writev": 0, "readv": 0, "stat": 0}
    real_writev, real_readv = os.writev, os.readv

    def writev(fd, bufs):
        calls["writev"] += 1
        return real_writev(fd, bufs)

    def readv(fd, bufs):
        calls["readv"] += 1
        return real_readv(fd, bufs)

    def no_stat(*a, **k):
        calls["stat"] += 1
        raise AssertionError("a stat per key")

    monkeypatch.setattr(st.os, "writev", writev)
    monkeypatch.setattr(st.os, "readv", readv)
    store["a"], store["df"] = a, df
    assert calls["writev"] == 2
    assert store.get_metrics()["file_write_bytes_total"] == \
        os.path.getsize(store.file_of("a")) + os.path.getsize(store.file_of("df"))
    for name in ("stat", "fstat", "lstat"):
        monkeypatch.setattr(st.os, name, no_stat)
    assert np.array_equal(store["a"], a)
    pd.testing.assert_frame_equal(store["df"], df)
    assert calls["readv"] == 2 and calls["stat"] == 0


@pytest.mark.skipif(not getattr(os, "O_NOATIME", 0), reason="no O_NOATIME")
def test_reads_are_no_access(store, monkeypatch):
    # Reads open with O_NOATIME (tierfs: no unspill, no atime), writes not;
    # where the flag is refused (EPERM: not the owner) reads go on without.
    store["a"] = np.arange(1000)
    seen = []
    real_open = os.open

    def spy(path, flags, *a, **k):
        seen.append(flags)
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(st.os, "open", spy)
    assert store["a"].sum() == 499500
    store["b"] = 1
    assert seen[0] & os.O_NOATIME and not seen[1] & os.O_NOATIME

    def refuse(path, flags, *a, **k):
        seen.append(flags)
        if flags & os.O_NOATIME:
            raise PermissionError(1, "not the owner", path)
        return real_open(path, flags, *a, **k)

    seen.clear()
    monkeypatch.setattr(st.os, "open", refuse)
    assert store["a"].sum() == 499500 and store["a"].sum() == 499500
    assert [bool(f & os.O_NOATIME) for f in seen] == [True, False, False]


def test_large_reads_page_aligned(store, monkeypatch):
    # A large value is read into a page-aligned buffer, so O_DIRECT sends
    # tierfs whole-page requests on its chunk boundaries; a small one into
    # a bytearray. Both come back equal and writable.
    big, small = np.arange(1 << 18, dtype=np.float64), np.arange(10)
    store["big"], store["small"] = big, small
    got = []
    real_readv = os.readv

    def readv(fd, bufs):
        got.append(np.frombuffer(bufs[0], dtype=np.uint8).ctypes.data)
        return real_readv(fd, bufs)

    monkeypatch.setattr(st.os, "readv", readv)
    b, s_ = store["big"], store["small"]
    assert got[0] % mmap.PAGESIZE == 0
    assert np.array_equal(b, big) and np.array_equal(s_, small)
    assert b.flags.writeable and s_.flags.writeable
    b[0] = 7.0
    assert store["big"][0] == 0.0


def test_read_shares_one_buffer(store):
    # Out-of-band buffers come back as views at their offsets in the one
    # buffer read, not copies.
    store["t"] = (np.arange(1001), np.ones(500))
    a, b = store["t"]
    assert b.ctypes.data - a.ctypes.data == a.nbytes + (-a.nbytes % 64)
    assert a.flags.writeable and b.flags.writeable and not a.flags.owndata


def test_short_read_is_an_error(store):
    store["a"] = np.arange(1000)
    with open(store.file_of("a"), "r+b") as f:
        f.truncate(100)
    with pytest.raises(OSError):
        store["a"]


def test_direct_io_probe(tmp_path):
    # Block filesystems refuse unaligned O_DIRECT: buffered I/O then.
    with TierfsStore(tmp_path) as s:
        if st.os.statvfs(tmp_path).f_bsize and not s.direct_io:
            with pytest.raises(ValueError):
                TierfsStore(tmp_path, direct_io=True)
        with TierfsStore(tmp_path, direct_io=False) as s2:
            s2["x"] = np.ones(10)
            assert not s2.direct_io and s2["x"].sum() == 10


def test_direct_io_on_tmpfs():
    # tmpfs (Linux 6.6 on) takes O_DIRECT at any alignment, as tierfs does.
    root = "/dev/shm"
    if not os.path.isdir(root):
        pytest.skip("no /dev/shm")
    import tempfile

    with tempfile.TemporaryDirectory(dir=root) as d:
        with TierfsStore(d) as s:
            if not s.direct_io:
                pytest.skip("this kernel's tmpfs refuses O_DIRECT")
            a = np.arange(1_000_003, dtype=np.float64)
            s["a"], s["odd"] = a, b"x" * 4097
            assert np.array_equal(s["a"], a) and s["odd"] == b"x" * 4097
        assert wait_for(lambda: os.listdir(d) == [])


def test_pop_and_discard(store, monkeypatch):
    store["a"] = np.ones(10)
    store["b"] = 2
    reads = []
    real = st._read_file
    monkeypatch.setattr(st, "_read_file", lambda *a: reads.append(a) or real(*a))
    assert store.pop("a").sum() == 10 and len(reads) == 1  # dict semantics
    assert store.pop("a", None) is None
    with pytest.raises(KeyError):
        store.pop("a")
    store.discard("b")
    store.discard("b")
    assert len(reads) == 1 and len(store) == 0 and files(store) == []
    store["c"], store["d"] = 1, 2
    store.clear()
    assert len(reads) == 1 and files(store) == []


def test_purge_does_not_read_back(store, monkeypatch):
    # distributed 2022.12 frees a key with data.pop(key, None) from
    # WorkerState._purge_state and ignores the value.
    store["a"] = np.ones(1000)
    reads = []
    real = st._read_file
    monkeypatch.setattr(st, "_read_file", lambda *a: reads.append(a) or real(*a))
    ns = {"__name__": "distributed.worker_state_machine"}
    exec("def _purge_state(data, key):\n    return data.pop(key, None)\n", ns)
    assert ns["_purge_state"](store, "a") is None
    assert reads == [] and "a" not in store and files(store) == []
    store["b"] = 1
    exec("def _other(data, key):\n    return data.pop(key, None)\n", ns)
    assert ns["_other"](store, "b") == 1 and len(reads) == 1


def test_worker_frees_without_reading(tmp_path):
    # The real worker state machine of the distributed installed here.
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None,
                      data=(TierfsStore, {"root": str(tmp_path)})) as cluster, \
            Client(cluster) as client:
        store = next(iter(cluster.workers.values())).data
        assert isinstance(store, TierfsStore)
        fut = client.submit(np.ones, 100_000, key="ones")
        assert fut.result().sum() == 100_000
        assert "ones" in store and store.file_of("ones")
        before = store.get_metrics()["disk_read_count_total"]
        del fut
        assert wait_for(lambda: "ones" not in store)
        assert store.get_metrics()["disk_read_count_total"] == before
        assert files(store) == []


# -- where the data is ----------------------------------------------------------

def set_tier(path, tier):
    os.setxattr(path, "user.tierfs.tier", tier.encode())


def test_tier_bytes_from_xattrs(tierfs_mount):
    # On a real tierfs: the moves are the daemon's, and so is each tier read.
    with TierfsStore(tierfs_mount) as s:
        s.metrics_interval = 0
        for i in range(5):
            s[i] = np.ones(1000)
        size = os.path.getsize(s.file_of(0))
        for i in range(5):
            set_tier(s.file_of(i), ("device", "host", "disk", "disk", "host")[i])
        got = s.tier_bytes()
        assert got == {"device": size, "host": 2 * size, "disk": 2 * size, "unread": 0}
        m = s.get_metrics()
        assert m["tierfs_disk_bytes"] == 2 * size and m["tierfs_unread_bytes"] == 0
        set_tier(s.file_of(0), "disk")
        del s[4]
        assert s.tier_bytes() == {"device": 0, "host": size, "disk": 3 * size,
                                  "unread": 0}
        s[1] = np.ones(2000)  # a new file, not read yet
        new = os.path.getsize(s.file_of(1))
        s.metrics_interval = 3600
        assert s.tier_bytes() == {"device": 0, "host": 0, "disk": 3 * size,
                                  "unread": new}


def test_tier_bytes_cached_and_bounded(tmp_path, monkeypatch):
    with TierfsStore(tmp_path) as s:
        for i in range(10):
            s[i] = i
            set_tier(s.file_of(i), "host")
        size = os.path.getsize(s.file_of(0))
        calls = []
        real = os.getxattr
        monkeypatch.setattr(st.os, "getxattr", lambda p, n: calls.append(p) or real(p, n))
        s.metrics_budget = 4
        s.metrics_interval = 3600
        got = s.tier_bytes()
        assert len(calls) == 4  # the newest 4
        assert got == {"device": 0, "host": 4 * size, "disk": 0, "unread": 6 * size}
        assert {os.path.basename(p) for p in calls} == \
            {os.path.basename(s.file_of(i)) for i in range(6, 10)}
        for _ in range(100):
            s.get_metrics()
        assert len(calls) == 4  # reused within metrics_interval
        s.metrics_interval = 0
        assert s.tier_bytes()["unread"] == 2 * size  # 5..2 read now
        # The last 2 never read, then the 2 read longest ago (9, 8).
        assert s.tier_bytes() == {"device": 0, "host": 10 * size, "disk": 0,
                                  "unread": 0}
        assert len(calls) == 12
        calls.clear()
        s.tier_bytes()  # then round robin: 7..4
        assert {os.path.basename(p) for p in calls} == \
            {os.path.basename(s.file_of(i)) for i in range(4, 8)}


def test_tier_bytes_off_tierfs(store):
    store["a"] = 1  # a plain directory: no user.tierfs.tier
    store.metrics_interval = 0
    assert store.tier_bytes() == {}
    assert not [k for k in store.get_metrics() if k.startswith("tierfs_")]


def test_attach_adds_worker_metrics(tmp_path):
    class FakeWorker:
        metrics = {}

    with TierfsStore(tmp_path) as s:
        s.metrics_interval = 0
        s["a"] = np.ones(100)
        set_tier(s.file_of("a"), "disk")
        w = FakeWorker()
        s.attach(w)
        assert sorted(w.metrics) == ["tierfs_device_bytes", "tierfs_disk_bytes",
                                     "tierfs_host_bytes"]
        assert w.metrics["tierfs_disk_bytes"](w) == os.path.getsize(s.file_of("a"))
        assert w.metrics["tierfs_host_bytes"](w) == 0
    del s
    import gc

    gc.collect()
    assert w.metrics["tierfs_disk_bytes"](w) == 0  # the store is gone


def test_worker_heartbeat_carries_tier_bytes(tmp_path, monkeypatch):
    # A store given as data= finds its worker; the scheduler sees the bytes.
    from distributed import Client, LocalCluster

    real = os.getxattr

    def getxattr(path, name, *a, **k):
        if name == "user.tierfs.tier" and str(path).startswith(str(tmp_path)):
            return b"disk"
        return real(path, name, *a, **k)

    monkeypatch.setattr(st.os, "getxattr", getxattr)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None,
                      data=(TierfsStore, {"root": str(tmp_path)})) as cluster, \
            Client(cluster) as client:
        worker = next(iter(cluster.workers.values()))
        fut = client.submit(np.ones, 100_000, key="ones")
        fut.result()
        size = os.path.getsize(worker.data.file_of("ones"))
        assert "tierfs_disk_bytes" in worker.metrics
        ws = cluster.scheduler.workers[worker.address]
        assert wait_for(lambda: ws.metrics.get("tierfs_disk_bytes") == size)
        assert ws.metrics["tierfs_host_bytes"] == 0


def test_unlink_in_background(store, monkeypatch):
    # del returns before the file is gone; the name is not reused until it is.
    gate = threading.Event()
    real = st._unlink_quiet
    monkeypatch.setattr(st, "_unlink_quiet", lambda p: gate.wait(30) and real(p))
    monkeypatch.setattr(st, "_key_name", lambda key: "same")
    store["a"] = 1
    old = store.file_of("a")
    t = time.monotonic()
    del store["a"]
    assert time.monotonic() - t < 5 and os.path.exists(old)
    store["a"] = 2  # the old name is still being removed
    assert store.file_of("a") != old and store["a"] == 2
    assert not store.flush(0.05)
    gate.set()
    assert store.flush(30) and not os.path.exists(old)
    assert files(store) == [os.path.basename(store.file_of("a"))]
