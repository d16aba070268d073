# SPDX-License-Identifier: LGPL-2.1-or-later
"""TierfsStore on a plain directory: no mount needed."""

import json
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest

from tierfs import store as st
from tierfs.store import TierfsStore, cleanup_stale


def files(s):
    return sorted(n for n in os.listdir(s.path) if n != st.MARKER)


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
    store["a"] = 3  # overwriting keeps its own name
    assert files(store) == ["same", "same~1"]
    del store["a"]
    assert store["b"] == 2


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


def test_no_temp_files_left(store):
    for i in range(20):
        store[i] = np.arange(i)
    assert not [n for n in files(store) if n.startswith(st.TMP_PREFIX)]


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
    path = s.path
    assert os.path.isdir(path)
    s.close()
    assert not os.path.exists(path) and os.listdir(tmp_path) == []
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
    assert os.listdir(tmp_path) == []


def test_marker(store):
    with open(os.path.join(store.path, st.MARKER)) as f:
        owner = json.load(f)
    assert owner["pid"] == os.getpid()
    assert os.path.basename(store.path).startswith(st.DIR_PREFIX)


def test_cleanup_dead_worker(tmp_path):
    # A worker killed with SIGKILL leaves its directory behind.
    code = ("import os, sys; sys.path.insert(0, %r)\n"
            "from tierfs import TierfsStore\n"
            "s = TierfsStore(%r); s['a'] = 1; print(s.path, flush=True)\n"
            "os.kill(os.getpid(), 9)\n"
            % (os.path.join(os.path.dirname(__file__), "..", "..", "python"),
               str(tmp_path)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == -9
    dead = p.stdout.strip()
    assert os.path.isdir(dead)
    live = TierfsStore(tmp_path)
    other = tmp_path / "not-ours"
    other.mkdir()
    try:
        assert cleanup_stale(tmp_path) == [dead]
        assert not os.path.exists(dead)
        assert os.path.isdir(live.path) and other.is_dir()
        assert cleanup_stale(tmp_path) == []
    finally:
        live.close()


def test_cleanup_reused_pid_and_max_age(tmp_path):
    # Our own pid with another start time: the pid was reused, the owner is dead.
    d = tmp_path / (st.DIR_PREFIX + "reused")
    d.mkdir()
    (d / st.MARKER).write_text(json.dumps(
        {"pid": os.getpid(), "host": st.socket.gethostname(), "start": -1}))
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
        {"pid": os.getpid(), "host": st.socket.gethostname(), "start": -1}))
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
    real = os.writev
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
    code = ("import os, sys, time; sys.path.insert(0, %r)\n"
            "from tierfs.store import TierfsStore, remove_on_sigterm\n"
            "s = TierfsStore(%r); s['a'] = 1\n"
            "assert remove_on_sigterm()\n"
            "print(s.path, flush=True); time.sleep(30)\n"
            % (os.path.join(os.path.dirname(__file__), "..", "..", "python"),
               str(tmp_path)))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    path = p.stdout.readline().strip()
    assert os.path.isdir(path)
    p.terminate()
    assert p.wait(10) == -15  # still dies of SIGTERM
    assert os.listdir(tmp_path) == []
