# SPDX-License-Identifier: LGPL-2.1-or-later
"""End to end: a real Dask cluster whose workers store their data on tierfs.

    PYTHONPATH=python /usr/bin/python3 tests/dask/e2e.py MOUNTPOINT

MOUNTPOINT must be a tierfs mount with small tier limits (tests/dask/run.sh
mounts one with device_backend=sim, 32M device, 64M host), so the data goes
through device, host and the disk tier. Prints one PASS or FAIL line and
exits 0 only on PASS.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
import threading
import time
import traceback

# Sized for a loaded 2-core machine: what the test needs is data well past
# the mount's device and host tiers (32 + 64 MiB, so most of it reaches the
# disk tier) and past the workers' memory limit, not volume. At 1.5 GiB the
# reads back from the disk tier took most of its 2+ minutes under load.
ARRAY_BYTES = 512 << 20  # 5x the mount's device + host, 2x one worker's limit
CHUNK_BYTES = 4 << 20
DF_PARTS = 16
DF_ROWS = DF_PARTS * 50_000
MEMORY_LIMIT = "256MiB"
CACHE = 16 << 20


def make_partition(i: int):
    import numpy as np
    import pandas as pd

    rows = DF_ROWS // DF_PARTS
    rng = np.random.default_rng(i)
    return pd.DataFrame(
        {
            "k": rng.integers(0, 1000, rows),
            "v": rng.random(rows),
            "w": rng.integers(0, 1 << 30, rows),
        },
        index=pd.RangeIndex(i * rows, (i + 1) * rows),
    )


def log(msg: str) -> None:
    print("e2e: %s" % msg, flush=True)


class Watcher(threading.Thread):
    """Samples the store directories while the cluster runs."""

    def __init__(self, root: str):
        super().__init__(daemon=True)
        self.root = root
        self.stop = threading.Event()
        self.max_files = 0
        self.max_dirs = 0
        self.tiers: dict[str, int] = {}

    def sample(self) -> None:
        from tierfs import xattr

        files = []
        dirs = 0
        try:
            for d in os.scandir(self.root):
                if d.is_dir() and d.name.startswith("tfsdask-"):
                    dirs += 1
                    files += [e.path for e in os.scandir(d.path)
                              if not e.name.startswith(".")]
        except FileNotFoundError:
            return
        self.max_files = max(self.max_files, len(files))
        self.max_dirs = max(self.max_dirs, dirs)
        for path in files[:: max(1, len(files) // 32)]:
            try:
                t = xattr.tier(path)
            except OSError:
                continue  # deleted under us
            self.tiers[t] = self.tiers.get(t, 0) + 1

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(0.2)


def children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(d))
            out += children(int(d))
    return out


def watchdog(seconds: float, state: dict) -> None:
    """Print where everything waits, then fail, if the run takes too long."""

    def fire() -> None:
        log("watchdog: still running after %ds, dumping state" % seconds)
        faulthandler.dump_traceback(all_threads=True)
        for pid in children(os.getpid()):
            try:
                with open("/proc/%d/wchan" % pid) as f:
                    wchan = f.read()
                with open("/proc/%d/stat" % pid) as f:
                    st = f.read().rsplit(")", 1)[1].split()[0]
                with open("/proc/%d/cmdline" % pid) as f:
                    cmd = f.read().replace("\0", " ")[:100]
            except OSError:
                continue
            log("pid %d state %s wchan %s: %s" % (pid, st, wchan, cmd))
        client = state.get("client")
        if client is not None:
            try:
                log("call stacks: %r" % client.call_stack())
                log("processing: %r" % client.processing())
            except Exception as e:
                log("could not ask the cluster: %s" % e)
        print("FAIL: tests/dask/e2e.py (timed out after %ds)" % seconds, flush=True)
        os._exit(1)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def leftovers(root: str) -> list[str]:
    out = []
    for top, dirs, files in os.walk(root):
        out += [os.path.join(top, n) for n in dirs + files]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("--deadline", type=float, default=280,
                    help="seconds before the watchdog dumps state and fails")
    args = ap.parse_args()
    state: dict = {}
    watchdog(args.deadline, state)

    import dask
    import dask.array as da
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    from distributed import Client, LocalCluster, wait

    from tierfs import xattr
    from tierfs.dask import TierfsStore

    mount = args.mount
    root = os.path.join(mount, "dask-e2e")
    os.mkdir(root)
    before = xattr.mount_stats(mount)
    log("tierfs backend=%s device.limit=%s host.limit=%s" % (
        before.get("backend"), before.get("device.limit"), before.get("host.limit")))

    watcher = Watcher(root)
    watcher.start()
    t0 = time.monotonic()
    # Workers fork from one process that has imported distributed, numpy
    # and pandas (as lifecycle.py's do) instead of importing them again
    # each; the example in run.sh keeps Dask's default, spawn.
    dask.config.set({"distributed.comm.timeouts.connect": "30s",
                     "distributed.worker.multiprocessing-method": "forkserver"})
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        memory_limit=MEMORY_LIMIT,
        processes=True,
        dashboard_address=None,
        silence_logs=getattr(logging, os.environ.get("E2E_LOG", "ERROR")),
        data=(TierfsStore, {"root": root, "cache_bytes": CACHE}),
    )
    client = Client(cluster)
    state["client"] = client
    try:
        kinds = client.run(lambda dask_worker: type(dask_worker.data).__name__)
        assert set(kinds.values()) == {"TierfsStore"}, kinds
        log("cluster up in %.1fs: %s" % (time.monotonic() - t0, kinds))

        # -- array: persist far more than the workers' memory, reduce it twice
        n = ARRAY_BYTES // 8
        chunk = CHUNK_BYTES // 8
        t = time.monotonic()
        x = da.random.RandomState(42).random(n, chunks=chunk)
        x = client.persist(x)
        wait(x)
        log("persisted %d MiB in %d chunks in %.1fs" % (
            ARRAY_BYTES >> 20, x.numblocks[0], time.monotonic() - t))
        watcher.sample()
        spilled = client.run(lambda dask_worker: tuple(dask_worker.data.spilled_total))
        log("spilled_total per worker: %s" % spilled)
        assert sum(m for m, _ in spilled.values()) > ARRAY_BYTES // 2, spilled

        t = time.monotonic()
        # One graph: both reductions read a chunk while it is in the cache.
        got, got2 = client.compute([x.sum(), (x * 2 - 1).mean()], sync=True)
        # Streamed: the same chunks, generated and reduced one at a time.
        want = client.compute(da.random.RandomState(42).random(n, chunks=chunk).sum()).result()
        log("sum persisted=%r streamed=%r (%.1fs)" % (got, want, time.monotonic() - t))
        assert np.isclose(got, want, rtol=1e-12, atol=0), (got, want)
        assert np.isclose(got2, 2 * want / n - 1, rtol=1e-9), got2
        del x

        # -- dataframe: shuffle + groupby, against pandas
        t = time.monotonic()
        # Partitions are made on the workers (from_pandas would ship the
        # whole frame inside the graph and hold it in every worker's memory).
        ddf = dd.from_map(make_partition, range(DF_PARTS))
        pdf = pd.concat([make_partition(i) for i in range(DF_PARTS)])
        shuffled = client.persist(ddf.shuffle("k", shuffle="tasks"))
        wait(shuffled)
        watcher.sample()
        got = (shuffled.groupby("k").agg({"v": "sum", "w": "max"})
               .compute().sort_index())
        want = pdf.groupby("k").agg({"v": "sum", "w": "max"}).sort_index()
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9)
        assert len(shuffled) == DF_ROWS
        # Every key sits in exactly one output partition after the shuffle.
        nparts = shuffled.map_partitions(lambda p: p[["k"]].drop_duplicates()) \
            .compute()["k"].value_counts()
        assert (nparts == 1).all(), nparts[nparts > 1]
        log("shuffle + groupby of %d rows matched pandas in %.1fs" % (
            DF_ROWS, time.monotonic() - t))
        del shuffled
        # Where the workers' time in the store went (for a slow run).
        m = client.run(lambda dask_worker: dask_worker.data.get_metrics())
        log("store seconds, both workers: %s" % ", ".join(
            "%s %.1f" % (k[: -len("_time_total")], sum(w[k] for w in m.values()))
            for k in ("pickle_time_total", "disk_write_time_total",
                      "disk_read_time_total", "unpickle_time_total")))
    finally:
        watcher.sample()
        watcher.stop.set()
        client.close()
        cluster.close()
        watcher.join()

    after = xattr.mount_stats(mount)
    host_spills = after.get("host.spills", 0) - before.get("host.spills", 0)
    device_spills = after.get("device.spills", 0) - before.get("device.spills", 0)
    log("seen: max %d files in %d store dirs, tiers sampled %s" % (
        watcher.max_files, watcher.max_dirs, watcher.tiers))
    log("tierfs spills: device->host %d, host->disk %d" % (device_spills, host_spills))
    assert watcher.max_dirs == 2, "expected one store directory per worker"
    assert watcher.max_files > 0, "no files appeared in the mount"
    assert watcher.tiers.get("disk", 0) > 0 or host_spills > 0, \
        "nothing reached the disk tier"
    if before.get("backend") != "none":
        assert device_spills > 0, "nothing spilled from the device tier"
    # Closing renames each store's directory aside; its reaper removes the
    # files in the background.
    deadline = time.monotonic() + 60
    while leftovers(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = leftovers(root)
    assert not left, "left after shutdown: %s" % left[:10]
    os.rmdir(root)
    log("total %.1fs" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    except Exception:
        traceback.print_exc()
        rc = 1
    print("%s: tests/dask/e2e.py" % ("PASS" if rc == 0 else "FAIL"), flush=True)
    sys.exit(rc)
