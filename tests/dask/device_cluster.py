# SPDX-License-Identifier: LGPL-2.1-or-later
"""The device store in a real Dask cluster, on a tierfs mount.

    PYTHONPATH=python:tests/dask /usr/bin/python3 tests/dask/device_cluster.py CASE MOUNT

tests/gpu/dask_device_mock.bats runs it against a daemon on
device_backend=cuda relinked with the fake CUDA runtime (TIERFS_CUDART
names the fake for the workers); tests/dask/run.sh runs the "sim" case on
its sim mount. Values are DevArrays (tests/dask/devarray.py): device memory
with a "cuda" serializer. Cases:

  tiers    one worker: values stay on the device tier up to its limit,
           the older spill to host, and all come back with their bytes
           and type; no byte went through the array's host serializer
  link     two workers, one GPU: a value one computed reaches the other
           as a hard link (the mount's stats show no new file or byte)
  nolink   the same with link_transfers=False: Distributed's own transfer
           (the bytes through host memory, a second file)
  kill     zero_copy=True: a get is a view of the read map with the
           bytes; a worker SIGKILLed while a task holds such a view (a
           read export's lease) and another value sits in a hand-off
           link: its directory, files and device memory go
  gpus     two workers on the fake runtime's two GPUs, one mount: each
           worker's values on its own GPU's tier, one host tier for both;
           a transfer between them is a link, moved GPU to GPU by tierfs
  rmm      spill on demand: the worker's (stand-in) RMM resource has
           tierfs's failure callback, and an allocation that finds the GPU
           full of tierfs's buffers succeeds after tierfs spills
  normm    the same allocation without the callback fails
  sim      a sim mount: the same store keeps host frames (numpy, pandas)
  budget   device_memory_limit below the mount's device_limit: after every
           put and every get (which brings a spilled value back) the
           worker's values on the device take at most its share, the
           store having had tierfs spill its oldest ones; a value larger
           than the share goes as host frames; all read back the same
  commit   no cluster: a put whose copy into the write export is held on
           its stream (the fake runtime's stream hold) returns only once
           the copy ran, and the bytes are in the file at once: the final
           commit(stream=) waited for that stream

Prints "ok"/"not ok" lines, then PASS or FAIL; exits 0 only on PASS.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import time
import traceback

MiB = 1 << 20
results: list[bool] = []


def check(ok, what: str) -> None:
    results.append(bool(ok))
    print("%s - %s" % ("ok" if ok else "not ok", what), flush=True)


def log(msg: str) -> None:
    print("# %s" % msg, flush=True)


# -- tasks (run in the workers) ------------------------------------------------


def make(nbytes: int, seed: int):
    from devarray import DevArray

    return DevArray.pattern(nbytes, seed, tag=seed)


def make_queued(nbytes: int, value: int):
    from devarray import DevArray

    return DevArray.queued(nbytes, value, steps=400)


def verify(x, nbytes: int, seed: int):
    """(type name, tag, whether the bytes are what make() wrote)."""
    from devarray import expected

    return type(x).__name__, x.tag, x.tobytes() == expected(nbytes, seed)


def verify_value(x, nbytes: int, value: int):
    return type(x).__name__, x.tobytes() == bytes([value]) * nbytes


def rmm_alloc(nbytes: int):
    import rmm
    import rmm.mr

    b = rmm.DeviceBuffer(size=nbytes)
    ok = b.ptr != 0
    del b
    return ok, dict(rmm.mr.FAILED)


# -- what the workers hold -------------------------------------------------------


def store_files(dask_worker):
    """key -> (file, tier, gpu, links, inode) of each value of the
    worker's store."""
    from tierfs import xattr

    s = dask_worker.data
    out = {}
    for k in list(s):
        try:
            p = s.file_of(k)
        except KeyError:
            continue
        if p is None:
            out[k] = None
            continue
        st = os.stat(p)
        out[k] = (p, xattr.tier(p), xattr.gpu(p), st.st_nlink, st.st_ino)
    return out


def worker_report(dask_worker):
    import devarray

    s = dask_worker.data
    return {"type": type(s).__name__, "metrics": s.get_metrics(),
            "host_copies": dict(devarray.HOST_COPIES),
            "gpu": None if s._gpu is None else s._gpu.dev,
            "share": getattr(s, "device_share", None), "path": s.path}


def stats(mount):
    from tierfs import xattr

    return xattr.mount_stats(mount)


def leftovers(root: str) -> list[str]:
    out = []
    for top, dirs, files in os.walk(root):
        out += [os.path.join(top, n) for n in dirs + files]
    return out


def wait_empty(root: str, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while leftovers(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    return leftovers(root)


# -- clusters ----------------------------------------------------------------------


def cluster(root: str, n: int, store_kw: dict | None = None, specs=None,
            env=None):
    import dask
    from distributed import Client, LocalCluster

    from tierfs.dask import TierfsDeviceStore

    dask.config.set({"distributed.comm.timeouts.connect": "60s",
                     "distributed.scheduler.work-stealing": False,
                     # Replicas stay where the test puts them.
                     "distributed.scheduler.active-memory-manager.start": False,
                     "distributed.worker.memory.target": False,
                     "distributed.worker.memory.spill": False})
    kw = dict(store_kw or {}, root=root)
    c = LocalCluster(n_workers=0 if specs else n, threads_per_worker=1,
                     processes=True, dashboard_address=None,
                     memory_limit="1GiB",
                     silence_logs=getattr(logging, os.environ.get("DDC_LOG", "ERROR")),
                     data=(TierfsDeviceStore, kw), env=env or {})
    if specs:
        for name, extra in specs.items():
            spec = copy.deepcopy(c.new_spec)
            spec["options"]["data"] = (TierfsDeviceStore, dict(kw, **extra))
            c.worker_spec[name] = spec
        c.sync(c._correct_state)
    client = Client(c)
    client.wait_for_workers(n, timeout=120)
    return c, client


def workers_by_name(client) -> dict:
    info = client.scheduler_info()["workers"]
    return {w["name"]: a for a, w in info.items()}


# -- cases -------------------------------------------------------------------------


def case_tiers(mount: str, root: str) -> None:
    from distributed import wait

    n, size = 10, 6 * MiB
    before = stats(mount)
    c, client = cluster(root, 1)
    try:
        rep = client.run(worker_report)
        check(all(r["type"] == "TierfsDeviceStore" for r in rep.values()),
              "the workers' data is a TierfsDeviceStore")
        futs = [client.submit(make, size, i, key="v-%d" % i, pure=False)
                for i in range(n)]
        wait(futs)
        files = next(iter(client.run(store_files).values()))
        tiers = {k: f[1] for k, f in files.items() if f}
        log("tiers after %d puts of %d MiB: %s" % (n, size >> 20, tiers))
        s = stats(mount)
        limit = s["device.limit"]
        on_dev = [k for k, t in tiers.items() if t == "device"]
        check(len(tiers) == n, "every value is in a file of its own")
        check(len(on_dev) * size <= limit and on_dev,
              "values on the device tier, at most its limit (%d of %d)"
              % (len(on_dev), n))
        check("v-%d" % (n - 1) in on_dev, "the newest value is on the device")
        check(any(t == "host" for t in tiers.values()),
              "older values spilled to host")
        check(s["device.spills"] > before.get("device.spills", 0),
              "the daemon spilled (%d)" % s["device.spills"])
        check(s["host.written_bytes"] - before.get("host.written_bytes", 0)
              >= (n - len(on_dev)) * size,
              "what is on host got there by the daemon's spills")
        first = client.submit(verify, futs[0], size, 0, pure=False).result()
        files2 = next(iter(client.run(store_files).values()))
        check(first == ("DevArray", 0, True) and files2["v-0"][1] == "device",
              "a spilled value read on the GPU is back on the device tier")
        got = client.gather([client.submit(verify, f, size, i, pure=False)
                             for i, f in enumerate(futs)])
        check(all(g == ("DevArray", i, True) for i, g in enumerate(got)),
              "every value comes back as a DevArray with its bytes")
        # A frame whose interface names the stream still writing it.
        q = client.submit(make_queued, 4 * MiB, 0x5A, pure=False)
        check(client.submit(verify_value, q, 4 * MiB, 0x5A).result()
              == ("DevArray", True),
              "a value still being written on its stream is copied after it")
        rep = next(iter(client.run(worker_report).values()))
        check(rep["host_copies"] == {"to_host": 0, "from_host": 0},
              "no value went through host memory in the worker (%s)"
              % rep["host_copies"])
        # The client is not on the mount's peer list: Distributed's own
        # transfer, the "dask" serializer of the array.
        x = client.gather(futs[1])
        check(type(x).__name__ == "DevArray" and x.tag == 1,
              "the client gets the value by Distributed's transfer")
        del futs, q, x
    finally:
        client.close()
        c.close()
    left = wait_empty(root)
    check(not left, "nothing left on the mount after the cluster (%s)" % left[:4])


def _two_workers(mount, root, link: bool, **kw):
    from distributed import wait

    size = 8 * MiB
    c, client = cluster(root, 2, {"link_transfers": link, **kw})
    try:
        a, b = sorted(client.scheduler_info()["workers"])
        x = client.submit(make, size, 7, key="x", workers=[a], pure=False)
        wait(x)
        before = stats(mount)
        y = client.submit(verify, x, size, 7, key="y", workers=[b],
                          allow_other_workers=False, pure=False)
        got = y.result()
        after = stats(mount)
        check(got == ("DevArray", 7, True),
              "the other worker's task read the value (%s)" % (got,))
        rep = client.run(worker_report)
        fa, fb = client.run(store_files, workers=[a])[a], \
            client.run(store_files, workers=[b])[b]
        return c, client, x, before, after, rep, a, b, fa, fb, size
    except BaseException:
        client.close()
        c.close()
        raise


def case_link(mount: str, root: str) -> None:
    c, client, x, before, after, rep, a, b, fa, fb, size = \
        _two_workers(mount, root, True)
    try:
        ra, rb = rep[a], rep[b]
        log("stats before/after: files %s/%s logical %s/%s device.written %s/%s"
            % (before["files"], after["files"], before["logical_bytes"],
               after["logical_bytes"], before["device.written_bytes"],
               after["device.written_bytes"]))
        check(ra["metrics"]["link_out_count_total"] == 1,
              "the sender handed out one link")
        check(rb["metrics"]["link_in_count_total"] == 1,
              "the receiver adopted one link")
        # What the receiver wrote is the consumer task's result, a tuple.
        wrote = rb["metrics"]["file_write_bytes_total"]
        check(wrote < 4096, "the receiver wrote only its task's result (%d "
              "bytes)" % wrote)
        check(after["files"] == before["files"] + 1,
              "no new file on the mount but that result")
        check(after["logical_bytes"] == before["logical_bytes"] + wrote,
              "no new bytes on the mount but that result")
        check(after["device.written_bytes"] - before["device.written_bytes"]
              == wrote and after["host.written_bytes"]
              == before["host.written_bytes"],
              "the daemon wrote no bytes for the transfer (device %d, host %d)"
              % (after["device.written_bytes"] - before["device.written_bytes"],
                 after["host.written_bytes"] - before["host.written_bytes"]))
        check(ra["host_copies"]["to_host"] == 0
              and rb["host_copies"]["from_host"] == 0,
              "no serialized copy through host memory")
        linked = fb.get("x")
        log("sender %s, receiver %s" % (fa, fb))
        check(linked is not None and linked[3] == 2 and fa["x"][3] == 2
              and linked[4] == fa["x"][4],
              "the receiver's file is a hard link of the sender's (%s)"
              % (linked,))
        ya = client.submit(verify, x, size, 7, workers=[b], pure=False).result()
        check(ya == ("DevArray", 7, True), "the linked value reads again")
        sender = [n for n in os.listdir(ra["path"]) if n.startswith("~out.")]
        check(not sender, "no hand-off link left with the sender (%s)" % sender)
        del x
    finally:
        client.close()
        c.close()
    left = wait_empty(root)
    check(not left, "nothing left on the mount after the cluster (%s)" % left[:4])


def case_nolink(mount: str, root: str) -> None:
    c, client, x, before, after, rep, a, b, fa, fb, size = \
        _two_workers(mount, root, False)
    try:
        ra, rb = rep[a], rep[b]
        check(ra["metrics"]["link_out_count_total"] == 0
              and rb["metrics"]["link_in_count_total"] == 0, "no link")
        check(after["logical_bytes"] >= before["logical_bytes"] + size,
              "the receiver wrote a second copy (%d -> %d bytes)"
              % (before["logical_bytes"], after["logical_bytes"]))
        check(ra["host_copies"]["to_host"] == 1
              and rb["host_copies"]["from_host"] == 1,
              "the bytes went through host memory (%s, %s)"
              % (ra["host_copies"], rb["host_copies"]))
        del x
    finally:
        client.close()
        c.close()
    check(not wait_empty(root), "nothing left on the mount after the cluster")


def hold(x, seconds: float):
    """Keep x (a zero-copy view of the read map) while sleeping."""
    time.sleep(seconds)
    return type(x).__name__


def case_kill(mount: str, root: str) -> None:
    import signal

    from distributed import wait

    from tierfs import xattr

    n, size = 4, 6 * MiB
    c, client = cluster(root, 1, {"zero_copy": True})
    try:
        futs = [client.submit(make, size, i, pure=False) for i in range(n)]
        wait(futs)
        rep = next(iter(client.run(worker_report).values()))
        old = rep["path"]
        pid = next(iter(client.run(os.getpid).values()))
        got = client.submit(verify, futs[2], size, 2, pure=False).result()
        check(got == ("DevArray", 2, True),
              "a zero-copy get (a view of the read map) has the bytes")
        files = next(iter(client.run(store_files).values()))
        # A hand-off link of the kind a transfer leaves while in flight.
        os.link(files[futs[0].key][0], os.path.join(old, "~out.test"))
        leased = files[futs[1].key][0]
        held = client.submit(hold, futs[1], 600, pure=False)
        deadline = time.monotonic() + 60
        while xattr.stat(leased)["pins"] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        # A get that copies holds its read export a moment only; the task's
        # view holds it for as long as the task runs.
        time.sleep(2)
        s = stats(mount)
        check(xattr.stat(leased)["pins"] >= 1 and s["device.used"] >= n * size,
              "a task holds a lease on a value (pins %d, %d MiB on the "
              "device)" % (xattr.stat(leased)["pins"], s["device.used"] >> 20))
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while os.path.exists(old) and time.monotonic() < deadline:
            time.sleep(0.1)
        check(not os.path.exists(old), "the killed worker's directory is gone")
        deadline = time.monotonic() + 30
        while stats(mount)["device.used"] >= size and time.monotonic() < deadline:
            time.sleep(0.1)
        used = stats(mount)["device.used"]
        check(used < size, "its values' device memory is free, the leased one's "
              "too (%d bytes used)" % used)
        del futs, held
    finally:
        client.close()
        c.close()
    left = wait_empty(root)
    check(not left, "nothing left on the mount after the cluster (%s)" % left[:4])


def case_gpus(mount: str, root: str) -> None:
    from distributed import wait

    n, size = 6, 6 * MiB
    c, client = cluster(root, 2, {"device_memory_limit": "8MiB"},
                        specs={"gpu0": {"device": 0}, "gpu1": {"device": 1}})
    try:
        names = workers_by_name(client)
        futs = {}
        for g in (0, 1):
            futs[g] = [client.submit(make, size, 10 * g + i, key="g%d-%d" % (g, i),
                                     workers=[names["gpu%d" % g]], pure=False)
                       for i in range(n)]
        wait(futs[0] + futs[1])
        s = stats(mount)
        files = {g: client.run(store_files, workers=[names["gpu%d" % g]])[names["gpu%d" % g]]
                 for g in (0, 1)}
        log("per GPU used %d/%d, %d/%d; host %d; files %s" % (
            s["device0.used"], s["device0.limit"], s["device1.used"],
            s["device1.limit"], s["host.used"], files))
        for g in (0, 1):
            on_dev = [f for f in files[g].values() if f[1] == "device"]
            check(on_dev and all(f[2] == g for f in on_dev),
                  "worker %d's values on the device tier are on GPU %d" % (g, g))
            check(s["device%d.used" % g] <= s["device%d.limit" % g],
                  "GPU %d's tier within its limit" % g)
            check(any(f[1] == "host" for f in files[g].values()),
                  "worker %d's older values spilled to the shared host tier" % g)
        rep = client.run(worker_report)
        shares = {w: r["share"] for w, r in rep.items()}
        check(all(sh and sh["device_memory_limit"] == 8 * MiB
                  and sh["tierfs_limit"] > sh["device_memory_limit"]
                  for sh in shares.values()),
              "each worker compared device_memory_limit with its GPU's "
              "tierfs limit (%s)" % shares)
        # A value on GPU 0's device tier, so that reading it on GPU 1 is a
        # move between the GPUs (one on host would come up from host).
        on0 = [i for i in range(n) if files[0]["g0-%d" % i][1] == "device"]
        check(on0, "a value of worker 0 on GPU 0's tier to move")
        i = on0[-1] if on0 else n - 1
        wb = client.run(worker_report, workers=[names["gpu1"]])[names["gpu1"]]
        before = stats(mount)
        got = client.submit(verify, futs[0][i], size, i,
                            workers=[names["gpu1"]], allow_other_workers=False,
                            pure=False).result()
        after = stats(mount)
        check(got == ("DevArray", i, True),
              "a value of GPU 0 read by the worker on GPU 1")
        rep = client.run(worker_report)
        ra, rb = rep[names["gpu0"]], rep[names["gpu1"]]
        log("links out/in %s; files %d -> %d, logical %d -> %d" % (
            {w: (r["metrics"]["link_out_count_total"],
                 r["metrics"]["link_in_count_total"]) for w, r in rep.items()},
            before["files"], after["files"], before["logical_bytes"],
            after["logical_bytes"]))
        check(ra["metrics"]["link_out_count_total"] == 1
              and rb["metrics"]["link_in_count_total"] == 1,
              "the value went from worker 0 to worker 1 as a link")
        # What worker 1 wrote is its task's result, a small tuple.
        wrote = rb["metrics"]["file_write_bytes_total"] - \
            wb["metrics"]["file_write_bytes_total"]
        check(wrote < 4096 and after["files"] == before["files"] + 1
              and after["logical_bytes"] == before["logical_bytes"] + wrote,
              "no new file or byte on the mount but that task's result "
              "(%d bytes)" % wrote)
        check(after["device1.moves_in"] == before["device1.moves_in"] + 1,
              "tierfs moved the buffer to GPU 1 (moves_in %d -> %d)"
              % (before["device1.moves_in"], after["device1.moves_in"]))
        rep = client.run(worker_report)
        check(all(r["host_copies"] == {"to_host": 0, "from_host": 0}
                  for r in rep.values()), "no value through host memory")
        del futs
    finally:
        client.close()
        c.close()
    check(not wait_empty(root), "nothing left on the mount after the cluster")


def _rmm(mount: str, root: str, callback: bool) -> None:
    from distributed import wait

    n, size = 6, 32 * MiB
    stub = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rmm_stub")
    # The workers start with it on their path: spawned processes take this
    # one's sys.path (a nanny's env= is set too late for the interpreter's
    # path, and PYTHONPATH was read when this process started).
    sys.path.insert(0, stub)
    os.environ["PYTHONPATH"] = stub + os.pathsep + os.environ.get("PYTHONPATH", "")
    c, client = cluster(root, 1, {"rmm_callback": callback})
    try:
        futs = [client.submit(make, size, i, pure=False) for i in range(n)]
        wait(futs)
        s = stats(mount)
        log("device.used %d of %d, others %d" % (s["device.used"],
                                                  s["device.limit"],
                                                  s["device.others"]))
        check(s["device.used"] >= n * size, "tierfs holds %d MiB on the GPU"
              % (s["device.used"] >> 20))
        try:
            ok, failed = client.submit(rmm_alloc, 100 * MiB, pure=False).result()
        except MemoryError as e:
            ok, failed = False, str(e)
        after = stats(mount)
        log("allocation: %s %s; reclaims %d, %d bytes" % (
            ok, failed, after["device.reclaims"], after["device.reclaimed_bytes"]))
        if callback:
            check(ok, "a 100 MiB allocation succeeded")
            check(failed["callbacks"] >= 1 and failed["retried_ok"] == 1,
                  "after it failed and the callback ran (%s)" % failed)
            check(after["device.reclaims"] > s["device.reclaims"]
                  and after["device.reclaimed_bytes"] >= 36 * MiB,
                  "tierfs gave GPU memory back (%d bytes)"
                  % after["device.reclaimed_bytes"])
            got = client.gather([client.submit(verify, f, size, i, pure=False)
                                 for i, f in enumerate(futs)])
            check(all(g == ("DevArray", i, True) for i, g in enumerate(got)),
                  "every value still reads the same")
        else:
            check(not ok, "without the callback the allocation fails (%s)"
                  % (failed,))
            check(after["device.reclaims"] == s["device.reclaims"],
                  "and tierfs was not asked")
        del futs
    finally:
        client.close()
        c.close()
    check(not wait_empty(root), "nothing left on the mount after the cluster")


def case_rmm(mount, root):
    _rmm(mount, root, True)


def case_normm(mount, root):
    _rmm(mount, root, False)


def make_frame(i: int):
    import numpy as np
    import pandas as pd

    return pd.DataFrame({"i": np.arange(i * 1000, (i + 1) * 1000),
                         "f": np.full(1000, float(i))})


def case_sim(mount: str, root: str) -> None:
    import numpy as np
    import pandas as pd
    from distributed import wait

    c, client = cluster(root, 2)
    try:
        rep = client.run(worker_report)
        check(all(r["type"] == "TierfsDeviceStore" for r in rep.values()),
              "the workers' data is a TierfsDeviceStore")
        ser = client.run(lambda dask_worker: dask_worker.data.serializers)
        check(all(v == ("dask", "pickle") for v in ser.values()),
              "on a mount without a cuda device tier: host serializers (%s)"
              % ser)
        arrs = [client.submit(np.full, 1 << 20, i, pure=False) for i in range(24)]
        frames = [client.submit(make_frame, i, pure=False) for i in range(8)]
        wait(arrs + frames)
        tiers = {}
        for files in client.run(store_files).values():
            for f in files.values():
                tiers[f[1]] = tiers.get(f[1], 0) + 1
        log("tiers %s" % tiers)
        check(sum(tiers.values()) == 32, "one file per value")
        total = client.submit(lambda *xs: float(sum(x.sum() for x in xs)),
                              *arrs).result()
        check(total == float(sum(i * (1 << 20) for i in range(24))),
              "the arrays sum right")
        df = client.submit(pd.concat, frames).result()
        check(len(df) == 8000 and df["f"].sum() == 1000 * sum(range(8)),
              "the frames concatenate right")
        del arrs, frames
    finally:
        client.close()
        c.close()
    check(not wait_empty(root), "nothing left on the mount after the cluster")


def device_bytes(dask_worker):
    """Bytes the worker's values take on the device tier (what tierfs
    charges them: user.tierfs.stored_size), and how many are there."""
    from tierfs import xattr

    s = dask_worker.data
    n = k = 0
    for key in list(s):
        try:
            p = s.file_of(key)
        except KeyError:
            continue
        if p is None:
            continue
        try:
            st = xattr.stat(p)
        except OSError:
            continue
        if st["tier"] == "device":
            n += st["stored_size"]
            k += 1
    return n, k


def dir_on_device(dask_worker):
    """The files of the worker's directory on the device: name -> bytes."""
    from tierfs import xattr

    s = dask_worker.data
    out = {}
    for name in os.listdir(s.path):
        try:
            st = xattr.stat(os.path.join(s.path, name))
        except OSError:
            continue
        if st["tier"] == "device":
            out[name] = st["stored_size"]
    return out


def case_budget(mount: str, root: str) -> None:
    share, n, size = 16 * MiB, 8, 3 * MiB
    c, client = cluster(root, 1, {"device_memory_limit": "16MiB"})
    try:
        worst, worst_at = 0, None
        futs = []
        for i in range(n):
            futs.append(client.submit(make, size, i, key="b-%d" % i,
                                      pure=False))
            futs[-1].result()
            used, k = next(iter(client.run(device_bytes).values()))
            if used > worst:
                worst, worst_at = used, "put %d" % i
        rep = next(iter(client.run(worker_report).values()))
        log("share %s, budget spills %d" % (
            rep["share"], rep["metrics"].get("budget_spill_count_total", 0)))
        check(rep["share"] and rep["share"]["enforced_by"] == "store",
              "the mount's limit is larger: the store holds the share")
        check(stats(mount)["device.limit"] > share,
              "(the mount's device_limit is %d)" % stats(mount)["device.limit"])
        files = next(iter(client.run(store_files).values()))
        tiers = [files["b-%d" % i][1] for i in range(n)]
        log("tiers after the puts: %s" % tiers)
        check(tiers[-1] == "device" and "host" in tiers,
              "the newest value on the device, older ones on host")
        for i, f in enumerate(futs):
            got = client.submit(verify, f, size, i, pure=False).result()
            check(got == ("DevArray", i, True),
                  "b-%d reads back the same" % i)
            used, k = next(iter(client.run(device_bytes).values()))
            if used > worst:
                worst, worst_at = used, "get %d" % i
            files = next(iter(client.run(store_files).values()))
            check(files["b-%d" % i][1] == "device",
                  "b-%d is back on the device after its get" % i)
        log("on the device in the worker's directory: %s"
            % next(iter(client.run(dir_on_device).values())))
        check(worst <= share, "after every put and get the worker's values "
              "take at most its share on the device (worst %d of %d, at %s)"
              % (worst, share, worst_at))
        check(worst > share // 2, "and they do use it (%d)" % worst)
        big = client.submit(make, 20 * MiB, 99, key="big", pure=False)
        big.result()
        files = next(iter(client.run(store_files).values()))
        used, k = next(iter(client.run(device_bytes).values()))
        check(files["big"][1] != "device" and used <= share,
              "a value larger than the share goes as host frames (%s, "
              "%d on the device)" % (files["big"][1], used))
        check(client.submit(verify, big, 20 * MiB, 99, pure=False).result()
              == ("DevArray", 99, True), "and reads back the same")
        del futs, big
    finally:
        client.close()
        c.close()
    check(not wait_empty(root), "nothing left on the mount after the cluster")


def case_commit(mount: str, root: str) -> None:
    import threading

    from devarray import DevArray, expected
    from tierfs import dask_device as dd
    from tierfs import device, xattr
    from tierfs.dask import TierfsDeviceStore

    hold = 1.0
    lib = device._runtime().lib
    s = TierfsDeviceStore(root)
    try:
        a = DevArray.pattern(4 * MiB, 7, tag=7)
        s["warm"] = DevArray.pattern(4096, 1)
        lib.tfs_mock_hold_streams(1)
        t = threading.Timer(hold, lib.tfs_mock_hold_streams, (0,))
        t0 = time.monotonic()
        t.start()
        try:
            s["k"] = a
            took = time.monotonic() - t0
            path = s.file_of("k")
            with open(path, "rb") as f:
                data = f.read()
            log("the put took %.2fs with the stream held %.1fs; %s" %
                (took, hold, xattr.tier(path)))
            _hostend, _total, table, _header = dd._parse_head(data)
            devs = [(off, n) for kind, off, n in table if kind == dd._DEV]
            check(len(devs) == 1 and xattr.tier(path) == "device",
                  "the value's one frame is a device frame, on the device "
                  "tier")
            off, n = devs[0] if devs else (0, 0)
            # Checked before the hold ends: a copy still queued then
            # (commit not waiting) would land after the put returned.
            check(data[off:off + n] == expected(4 * MiB, 7),
                  "the file has the frame's bytes the moment the put "
                  "returns")
            check(took >= hold * 0.9, "the put waited for the held copy")
        finally:
            t.cancel()
            lib.tfs_mock_hold_streams(0)
        check(s["k"].tobytes() == expected(4 * MiB, 7),
              "and the value reads back the same")
    finally:
        s.close()


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def main() -> int:
    case, mount = sys.argv[1], sys.argv[2]
    if case not in CASES:
        print("unknown case %r: %s" % (case, ", ".join(CASES)))
        return 2
    root = os.path.join(mount, "dask-device")
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    try:
        CASES[case](mount, root)
    except Exception:
        traceback.print_exc()
        results.append(False)
    try:
        # The case's own directory: tests/dask/run.sh's example then
        # finds the mount as it left it.
        os.rmdir(root)
    except OSError:
        pass
    log("%s took %.1fs" % (case, time.monotonic() - t0))
    ok = results and all(results)
    print("%s: tests/dask/device_cluster.py %s" % ("PASS" if ok else "FAIL", case),
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
