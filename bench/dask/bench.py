#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Dask's default worker spilling next to TierfsStore, at equal memory.

    bench/dask/bench.py [--quick] [--repeats N] [--budget-mib M]
        [--data-ratio R] [--workers N] [--shuffle] [--workdir DIR]
        [--json FILE]

Root, a memory cgroup (v1 memory.limit_in_bytes, or v2 memory.max) and
TIERFS_BIN (default build/fs/tierfs). Each run puts everything it starts
in a fresh cgroup whose limit is the budget, which the kernel applies to
process memory and page cache alike:

- default: a LocalCluster with Dask's own spill buffer, memory_limit =
  budget / workers (what "auto" gives in a container of that size),
  spilling to a directory under --workdir (a real disk, not tmpfs);
- tierfs: the same cluster with data=(TierfsStore, cache_bytes=0) on a
  tierfs mounted for the run, its daemon inside the cgroup too, host tier
  --host-share of the budget, device tier none, disk tier under --workdir.

The workload makes an event table --data-ratio times the budget
(timestamps, user ids, two categoricals, prices, quantities: lz4 -1
shrinks it to about 0.6, printed), persists it and aggregates it (every
partition read back once); with --shuffle it also shuffles the table by
user and aggregates the shuffled copy, which writes it twice more (on the
2-core VM the default store's run alone passed 22 minutes there, one
worker killed at its memory limit, so the full run leaves it out). The
full run: 2 workers, 1 GiB, 2.5x data, 3 pairs. Each run
reports its time, the cgroup's peak memory, and the bytes written to disk
(write_bytes - cancelled_write_bytes of every process of the run, read
from /proc/self/io once they are all reaped: what reached the disk, and
no page that was dirtied and then deleted). Pairs alternate which store
goes first; the table shows medians and the median of per-pair ratios.
Exits 77 without root or a memory cgroup, 75 when a run passes its time
limit (200 s each with --quick, 1800 s otherwise).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(TOP, "python"))

EVENTS = ["view", "click", "add_to_cart", "remove", "checkout", "purchase",
          "refund", "search", "login", "logout", "share", "review"]
COUNTRIES = ["c%02d" % i for i in range(40)]
ROW_BYTES = 30  # index 8, user 8, amount 8, quantity 4, two int8 codes


def make_events(i: int, rows: int):
    """One partition of the event table (deterministic in i)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    start = np.datetime64("2024-01-01", "ns").astype(np.int64) + i * rows * 2_000_000
    ts = start + np.cumsum(rng.integers(0, 2_000_000, rows))
    return pd.DataFrame({
        # Few heavy users, many light ones (log-uniform ids).
        "user": np.exp(rng.random(rows) * np.log(1e6)).astype(np.int64),
        "event": pd.Categorical.from_codes(
            rng.integers(0, len(EVENTS), rows, dtype=np.int8), EVENTS),
        "country": pd.Categorical.from_codes(
            rng.integers(0, len(COUNTRIES), rows, dtype=np.int8), COUNTRIES),
        "amount": np.round(np.exp(rng.normal(3, 1, rows)), 2),
        "quantity": rng.integers(1, 10, rows, dtype=np.int32),
    }, index=pd.DatetimeIndex(ts.view("datetime64[ns]"), name="time"))


# -- one run, inside the cgroup (bench.py --child KIND CONF_JSON) -------------

def child(kind: str, conf: dict) -> int:
    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster, wait

    dask.config.set({"distributed.comm.timeouts.connect": "60s"})
    kw = dict(n_workers=conf["workers"], threads_per_worker=conf["threads"],
              memory_limit=conf["memory_limit"], processes=True,
              dashboard_address=None, silence_logs=logging.ERROR,
              local_directory=conf["local_dir"])
    if kind == "tierfs":
        from tierfs.dask import TierfsStore

        cache = int(conf["memory_limit"] * conf["cache_share"])
        kw["data"] = (TierfsStore, {"root": conf["root"], "cache_bytes": cache,
                                    "write_back": cache > 0})
    times = {}
    t0 = time.perf_counter()
    with LocalCluster(**kw) as cluster, Client(cluster) as client:
        times["startup"] = time.perf_counter() - t0
        rows, parts = conf["rows"], conf["parts"]
        t = time.perf_counter()
        ddf = dd.from_map(make_events, range(parts), rows=rows)
        ddf = client.persist(ddf)
        wait(ddf)
        times["persist"] = time.perf_counter() - t

        t = time.perf_counter()
        agg = ddf.groupby("event").agg({"amount": "sum", "quantity": "count"}).compute()
        times["aggregate"] = time.perf_counter() - t
        assert agg.quantity.sum() == rows * parts, agg

        if conf["shuffle"]:
            t = time.perf_counter()
            shuffled = client.persist(ddf.shuffle("user", shuffle="tasks"))
            wait(shuffled)
            del ddf
            top = shuffled.groupby("user").amount.sum().nlargest(10).compute()
            times["shuffle+aggregate"] = time.perf_counter() - t
            assert len(top) == 10
            del shuffled
        # The stores' own counters (seconds summed over workers).
        metrics = client.run(lambda dask_worker: dask_worker.data.get_metrics())
        for k in ("file_write_bytes_total", "disk_write_time_total",
                  "disk_read_time_total", "pickle_time_total", "unpickle_time_total"):
            times[k] = sum(m.get(k, 0) for m in metrics.values())
        t = time.perf_counter()
    times["close"] = time.perf_counter() - t
    # The workers are reaped: their I/O is in this process's.
    times["io"] = proc_io()
    print("RESULT " + json.dumps(times), flush=True)
    return 0


# -- the cgroup ------------------------------------------------------------------

class Cgroup:
    """A fresh memory cgroup (v1 or v2) with a limit; everything started
    through enter() runs inside it."""

    V1 = "/sys/fs/cgroup/memory"
    V2 = "/sys/fs/cgroup"

    def __init__(self, name: str, limit: int):
        if os.path.exists(os.path.join(self.V1, "memory.limit_in_bytes")):
            self.v2 = False
            self.path = os.path.join(self.V1, name)
        elif "memory" in read(os.path.join(self.V2, "cgroup.controllers"), ""):
            self.v2 = True
            self.path = os.path.join(self.V2, name)
        else:
            raise OSError("no memory cgroup (v1 %s or v2 %s)" % (self.V1, self.V2))
        os.mkdir(self.path)
        if self.v2:
            write(os.path.join(self.path, "memory.max"), limit)
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                write(os.path.join(self.path, "memory.swap.max"), 0)
        else:
            write(os.path.join(self.path, "memory.limit_in_bytes"), limit)
            memsw = os.path.join(self.path, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):
                write(memsw, limit)
        self.limit = limit
        self._peak = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def enter(self, cmd: list[str]) -> list[str]:
        """cmd, run inside this cgroup (its shell joins, then execs)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"',
                os.path.join(self.path, "cgroup.procs")] + cmd

    def _sample(self) -> None:
        # memory.peak is new in v2 (Linux 5.19); sampling is the fallback.
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        while not self._stop.wait(0.05):
            self._peak = max(self._peak, int(read(os.path.join(self.path, name), "0")))

    def peak(self) -> int:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        return max(self._peak, int(read(os.path.join(self.path, name), "0") or 0))

    def oom_kills(self) -> int:
        name = "memory.events" if self.v2 else "memory.oom_control"
        for line in read(os.path.join(self.path, name), "").splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def kill(self, spare: int | None = None) -> None:
        """SIGKILL every process in the cgroup (all started by this run)
        but spare."""
        for pid in read(os.path.join(self.path, "cgroup.procs"), "").split():
            if int(pid) != spare:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove(self, timeout: float = 120) -> None:
        """Wait for every process to leave (a store's reaper finishes its
        removal after its worker), then remove the cgroup."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        while read(os.path.join(self.path, "cgroup.procs"), "").strip():
            if time.monotonic() > deadline:
                log("cgroup %s still has processes; left in place" % self.path)
                return
            time.sleep(0.1)
        os.rmdir(self.path)


def read(path: str, default: str | None = None) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        if default is None:
            raise
        return default


def write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def proc_io(pid: str = "self") -> int:
    """Bytes this process and its reaped children sent to storage, less
    the dirty pages they deleted before writeback."""
    d = {}
    for line in read("/proc/%s/io" % pid).splitlines():
        k, _, v = line.partition(":")
        d[k] = int(v)
    return d["write_bytes"] - d["cancelled_write_bytes"]


def proc_cpu(pid: int) -> float:
    """User + system seconds of a live process so far (/proc/PID/stat)."""
    f = read("/proc/%d/stat" % pid).rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def fs_type(path: str) -> str:
    """The type of the filesystem path is on (/proc/self/mountinfo)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    for line in read("/proc/self/mountinfo", "").splitlines():
        f = line.split()
        mnt, typ = f[4], f[f.index("-") + 1]
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, kind = mnt, typ
    return kind


def log(msg: str) -> None:
    print("dask bench: %s" % msg, file=sys.stderr, flush=True)


# -- one run, from outside -----------------------------------------------------

def mount_tierfs(cg: Cgroup, cfg, work: str, host_limit: int):
    mnt = tempfile.mkdtemp(prefix="mnt.", dir=work)
    spill = tempfile.mkdtemp(prefix="spill.", dir=work)
    logf = open(os.path.join(work, "tierfs.log"), "a")
    opts = "disk_path=%s,device_backend=none,host_limit=%d" % (spill, host_limit)
    if cfg.mount_opts:
        opts += "," + cfg.mount_opts
    p = subprocess.Popen(cg.enter([cfg.tierfs, mnt, "-f", "-o", opts]),
                         stdout=logf, stderr=logf)
    for _ in range(400):
        if os.path.ismount(mnt):
            return p, mnt
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    p.wait()
    raise RuntimeError("tierfs did not mount (see %s)" % logf.name)


def unmount(p, mnt: str) -> None:
    for args in (["fusermount3", "-u", mnt], ["fusermount3", "-uz", mnt]):
        if subprocess.run(args, stderr=subprocess.DEVNULL).returncode == 0:
            break
        time.sleep(1)
    try:
        p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def one_run(kind: str, cfg, n: int) -> dict:
    from tierfs import xattr

    work = tempfile.mkdtemp(prefix="run.", dir=cfg.work)
    cg = Cgroup("tfs-dask-bench-%d-%d-%s" % (os.getpid(), n, kind), cfg.budget)
    daemon = mnt = None
    out: dict = {"kind": kind}
    io0 = proc_io()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        conf = dict(workers=cfg.workers, threads=cfg.threads, rows=cfg.rows,
                    parts=cfg.parts, shuffle=cfg.shuffle,
                    cache_share=cfg.cache_share,
                    memory_limit=cfg.budget // cfg.workers,
                    local_dir=tempfile.mkdtemp(prefix="dask.", dir=work))
        if kind == "tierfs":
            daemon, mnt = mount_tierfs(cg, cfg, work, cfg.host_limit)
            conf["root"] = os.path.join(mnt, "dask")
            os.mkdir(conf["root"])
        env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"))
        t = time.perf_counter()
        r = subprocess.run(cg.enter([sys.executable, os.path.abspath(__file__),
                                     "--child", kind, json.dumps(conf)]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=cfg.timeout)
        out["wall"] = time.perf_counter() - t
        res = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if r.returncode or not res:
            raise RuntimeError("%s run failed (exit %d): %s" % (
                kind, r.returncode, r.stderr[-3000:]))
        out["phases"] = json.loads(res[-1][len("RESULT "):])
        child_io = out["phases"].pop("io")
        # What the workers wrote into tierfs: FUSE writes count as
        # write_bytes in /proc/PID/io, and reach no disk.
        fuse = out["phases"].pop("file_write_bytes_total", 0) if kind == "tierfs" else 0
        out["store"] = {k: out["phases"].pop(k) for k in list(out["phases"])
                        if k.endswith("_time_total") or k.endswith("_bytes_total")}
        out["time"] = sum(v for k, v in out["phases"].items()
                          if k not in ("startup", "close"))
        if kind == "tierfs":
            st = xattr.mount_stats(mnt)
            out["disk_tier_input"] = st.get("disk.written_bytes", 0)
            out["host_spill_bytes"] = st.get("host.spill_bytes", 0)
            out["cpu_daemon"] = proc_cpu(daemon.pid)
            unmount(daemon, mnt)
            daemon = None
    except BaseException:
        # A run that failed or timed out leaves workers behind.
        cg.kill(spare=daemon.pid if daemon is not None else None)
        raise
    finally:
        if daemon is not None:
            unmount(daemon, mnt)
        out["peak"] = cg.peak()
        out["oom_kills"] = cg.oom_kills()
        cg.remove()
        shutil.rmtree(work, ignore_errors=True)
    # Every process of the run is reaped now: its I/O is in ours. The
    # Python side's includes what the workers wrote into tierfs (FUSE
    # writes count as write_bytes too), which reached no disk.
    out["written_daemon"] = proc_io() - io0 - child_io
    out["written_python"] = child_io - fuse
    out["written"] = out["written_daemon"] + out["written_python"]
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return out


def data_ratio(rows: int) -> float | None:
    """lz4 -1's stored/input on one pickled partition (for the report)."""
    import pickle

    if not shutil.which("lz4"):
        return None
    b = pickle.dumps(make_events(0, rows), protocol=5)
    z = subprocess.run(["lz4", "-1", "-c"], input=b, stdout=subprocess.PIPE).stdout
    return len(z) / len(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 worker, 384 MiB, 1.5x data in 8 MiB parts, no "
                    "shuffle, 1 pair: under a minute of CPU")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--shuffle", action="store_true",
                    help="also shuffle by user and aggregate (heavy)")
    ap.add_argument("--budget-mib", type=int, default=None)
    ap.add_argument("--data-ratio", type=float, default=None,
                    help="data size / budget (2-3)")
    ap.add_argument("--host-share", type=float, default=None,
                    help="tierfs host tier / budget")
    ap.add_argument("--cache-share", type=float, default=0.0,
                    help="TierfsStore cache_bytes / memory_limit (write_back "
                    "when above 0)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--part-mib", type=int, default=None)
    ap.add_argument("--mount-opts", default="", help="more tierfs -o options")
    ap.add_argument("--workdir", default="/var/tmp",
                    help="spill directories and the disk tier (a disk)")
    ap.add_argument("--only", choices=("default", "tierfs"), default=None)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    cfg = ap.parse_args()
    if cfg.child:
        return child(cfg.child[0], json.loads(cfg.child[1]))
    # SIGTERM as SIGINT: one_run() kills the run's cgroup and unmounts.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    q = cfg.quick
    cfg.workers = cfg.workers or (1 if q else 2)
    cfg.threads = 1
    cfg.budget = (cfg.budget_mib or (384 if q else 1024)) * MiB
    cfg.ratio = cfg.data_ratio or (1.5 if q else 2.5)
    cfg.part_mib = cfg.part_mib or (8 if q else 16)
    cfg.repeats = cfg.repeats or (1 if q else 3)
    cfg.host_share = cfg.host_share or 0.5
    cfg.host_limit = int(cfg.budget * cfg.host_share)
    cfg.rows = cfg.part_mib * MiB // ROW_BYTES
    cfg.parts = max(2, int(cfg.budget * cfg.ratio) // (cfg.rows * ROW_BYTES))
    cfg.timeout = 200 if q else 1800
    cfg.tierfs = os.environ.get("TIERFS_BIN", os.path.join(TOP, "build", "fs", "tierfs"))
    if os.geteuid() != 0:
        log("skipped: needs root (memory cgroups, mounts)")
        return 77
    if not os.access(cfg.tierfs, os.X_OK):
        log("skipped: no tierfs at %r" % cfg.tierfs)
        return 77
    try:
        Cgroup("tfs-dask-bench-probe-%d" % os.getpid(), 64 * MiB).remove()
    except OSError as e:
        log("skipped: %s" % e)
        return 77
    if fs_type(cfg.workdir) in ("tmpfs", "ramfs"):
        # Dask's spill directory must be a disk, as the issue measures.
        log("%s is %s, not a disk: using /var/tmp" % (cfg.workdir, fs_type(cfg.workdir)))
        cfg.workdir = "/var/tmp"
    cfg.work = tempfile.mkdtemp(prefix="tierfs-dask-bench.", dir=cfg.workdir)
    lz = data_ratio(cfg.rows)
    log("budget %d MiB per store (processes + page cache%s), %d worker(s) x "
        "memory_limit %d MiB; data %d x %.0f MiB = %.0f MiB (%.1fx budget, lz4 -1 "
        "ratio %s); tierfs host tier %d MiB; %d pair(s)%s" % (
            cfg.budget >> 20, ", tierfs daemon included", cfg.workers,
            cfg.budget // cfg.workers >> 20, cfg.parts, cfg.rows * ROW_BYTES / MiB,
            cfg.parts * cfg.rows * ROW_BYTES / MiB, cfg.ratio,
            "%.2f" % lz if lz else "?", cfg.host_limit >> 20, cfg.repeats,
            ", with shuffle" if cfg.shuffle else ""))
    kinds = [cfg.only] if cfg.only else ["default", "tierfs"]
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        for i in range(cfg.repeats):
            for kind in (kinds if i % 2 == 0 else kinds[::-1]):
                try:
                    r = one_run(kind, cfg, i)
                except subprocess.TimeoutExpired:
                    # A loaded machine, not a failure of either store.
                    log("pair %d %s: timed out after %ds" % (i + 1, kind, cfg.timeout))
                    return 75
                runs[kind].append(r)
                log("pair %d %-7s %6.1fs (%s) cpu %.1fs peak %d MiB written %d MiB%s" % (
                    i + 1, kind, r["time"], ", ".join(
                        "%s %.1f" % kv for kv in r["phases"].items()), r["cpu"],
                    r["peak"] >> 20, r["written"] >> 20,
                    " oom kills %d" % r["oom_kills"] if r["oom_kills"] else ""))
                if "cpu_daemon" in r:
                    log("pair %d tierfs cpu: daemon %.1fs, the rest %.1fs" % (
                        i + 1, r["cpu_daemon"], r["cpu"] - r["cpu_daemon"]))
                if kind == "tierfs":
                    log("pair %d tierfs store: %s" % (i + 1, ", ".join(
                        "%s %.1f" % (k[:-len("_time_total")], v)
                        for k, v in r["store"].items() if k.endswith("_time_total"))))
    finally:
        shutil.rmtree(cfg.work, ignore_errors=True)
    result = {"config": {k: getattr(cfg, k) for k in (
        "quick", "workers", "budget", "ratio", "host_limit", "rows", "parts",
        "repeats", "shuffle")}, "lz4_ratio": lz, "runs": runs}
    if len(kinds) == 2:
        result["summary"] = summary(runs)
        print_table(result["summary"])
    if cfg.json:
        with open(cfg.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def summary(runs: dict) -> dict:
    out = {}
    for key in ("time", "cpu", "peak", "written"):
        d = [r[key] for r in runs["default"]]
        t = [r[key] for r in runs["tierfs"]]
        pairs = [b / a for a, b in zip(d, t) if a]
        out[key] = {"default": statistics.median(d), "tierfs": statistics.median(t),
                    "ratio": statistics.median(pairs) if pairs else None}
    return out


def print_table(s: dict) -> None:
    fmt = {"time": lambda v: "%.1f s" % v, "cpu": lambda v: "%.1f s" % v,
           "peak": lambda v: "%.0f MiB" % (v / MiB),
           "written": lambda v: "%.0f MiB" % (v / MiB)}
    target = {"time": "<= 1.0", "cpu": "-", "peak": "<= 1.0", "written": "<= 0.6"}
    print("%-22s %12s %12s %8s %8s" % ("", "default", "tierfs", "ratio", "target"))
    for key, name in (("time", "time"), ("cpu", "cpu time (all processes)"),
                      ("peak", "peak memory"),
                      ("written", "written to disk")):
        r = s[key]
        print("%-22s %12s %12s %8s %8s" % (
            name, fmt[key](r["default"]), fmt[key](r["tierfs"]),
            "-" if r["ratio"] is None else "%.2f" % r["ratio"], target[key]))


if __name__ == "__main__":
    sys.exit(main())
