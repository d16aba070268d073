# SPDX-License-Identifier: LGPL-2.1-or-later
"""Dask workload with the default worker spill store vs the tierfs store.

    PYTHONPATH=python /usr/bin/python3 bench/dask/bench.py MOUNT [--quick]

Runs the same workload (persist an array larger than the workers' memory and
reduce it twice; a dataframe task shuffle + groupby) on a LocalCluster twice
per repeat, alternating: with Dask's default SpillBuffer spilling to
--local-dir (local disk), with TierfsStore on MOUNT (write-through, the
default), and with TierfsStore(write_back=True). Same workers, same
memory limits. Prints each phase's median time and the ratio tierfs/default
(below 1: tierfs is faster). bench/dask/run.sh mounts a tierfs for it.

Note that tierfs's own host tier is RAM outside the workers' memory limits:
the comparison is "same worker limits", not "same total RAM"; the run prints
the tierfs limits next to the result.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

MiB = 1 << 20


def make_partition(i: int, rows: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    return pd.DataFrame(
        {"k": rng.integers(0, 10_000, rows), "v": rng.random(rows),
         "w": rng.integers(0, 1 << 30, rows)},
        index=pd.RangeIndex(i * rows, (i + 1) * rows),
    )


def workload(client, cfg) -> dict[str, float]:
    import dask.array as da
    import dask.dataframe as dd
    from distributed import wait

    times = {}
    t = time.perf_counter()
    x = da.random.RandomState(1).random(cfg.array_mib * MiB // 8,
                                        chunks=cfg.chunk_mib * MiB // 8)
    x = client.persist(x)
    wait(x)
    times["array persist"] = time.perf_counter() - t
    times["_spilled"] = spilled(client)
    t = time.perf_counter()
    s = client.compute(x.sum()).result()
    m = client.compute((x * 2 - 1).std()).result()
    times["array reduce x2"] = time.perf_counter() - t
    assert 0.4 < s / x.size < 0.6 and 0.5 < m < 0.7, (s, m)
    del x

    t = time.perf_counter()
    rows = cfg.df_rows // cfg.df_parts
    ddf = dd.from_map(make_partition, range(cfg.df_parts), rows=rows)
    shuffled = client.persist(ddf.shuffle("k", shuffle="tasks"))
    wait(shuffled)
    g = shuffled.groupby("k").agg({"v": "sum", "w": "max"}).compute()
    times["df shuffle+groupby"] = time.perf_counter() - t
    assert len(g) > 9000
    del shuffled
    return times


def spilled(client) -> int:
    def f(dask_worker):
        try:
            return int(dask_worker.data.spilled_total[1])
        except Exception:
            return 0
    return sum(client.run(f).values())


def one_run(kind: str, cfg) -> tuple[dict[str, float], int]:
    from distributed import Client, LocalCluster

    kw = dict(n_workers=cfg.workers, threads_per_worker=cfg.threads,
              memory_limit=cfg.memory_limit, processes=True,
              dashboard_address=None, silence_logs=logging.ERROR)
    if kind.startswith("tierfs"):
        from tierfs.dask import TierfsStore

        kw["data"] = (TierfsStore, {"root": cfg.tierfs_root,
                                    "cache_bytes": cfg.cache_mib * MiB,
                                    "write_back": kind == "tierfs-wb"})
        kw["local_directory"] = cfg.local_dir
    else:
        kw["local_directory"] = cfg.local_dir
    with LocalCluster(**kw) as cluster, Client(cluster) as client:
        times = workload(client, cfg)
    return times, times.pop("_spilled")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mount", help="a tierfs mount (bench/dask/run.sh makes one)")
    ap.add_argument("--local-dir", default=None,
                    help="where the default store spills (default: a "
                         "directory under /var/tmp, local disk)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 repeat")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--cache-mib", type=int, default=None,
                    help="TierfsStore cache (default: Dask's memory target "
                         "fraction x memory_limit, what SpillBuffer keeps in memory)")
    cfg = ap.parse_args()
    if cfg.quick:
        cfg.array_mib, cfg.memory_limit, cfg.df_rows = 512, "256MiB", 1_200_000
        cfg.repeats = cfg.repeats or 1
    else:
        cfg.array_mib, cfg.memory_limit, cfg.df_rows = 2048, "512MiB", 6_000_000
        cfg.repeats = cfg.repeats or 3
    cfg.chunk_mib, cfg.df_parts, cfg.workers, cfg.threads = 8, 24, 2, 1
    if cfg.cache_mib is None:
        # What Dask's default SpillBuffer keeps in memory: target x limit.
        import distributed  # noqa: F401  (loads its config)
        import dask
        from dask.utils import parse_bytes

        target = dask.config.get("distributed.worker.memory.target")
        cfg.cache_mib = int(parse_bytes(cfg.memory_limit) * target) // MiB

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "python"))
    from tierfs import xattr

    base = cfg.local_dir or "/var/tmp"
    cfg.local_dir = tempfile.mkdtemp(prefix="tierfs-dask-bench.", dir=base)
    cfg.tierfs_root = os.path.join(cfg.mount, "dask-bench")
    os.makedirs(cfg.tierfs_root, exist_ok=True)
    st = xattr.mount_stats(cfg.mount)
    print("dask bench: %d workers x %d thread, memory_limit %s, array %d MiB, "
          "%d df rows, %d repeat(s), tierfs store cache %d MiB" % (
              cfg.workers, cfg.threads, cfg.memory_limit, cfg.array_mib,
              cfg.df_rows, cfg.repeats, cfg.cache_mib))
    print("dask bench: default store spills to %s; tierfs backend=%s "
          "device.limit=%s host.limit=%s (RAM outside the workers' limits)" % (
              cfg.local_dir, st.get("backend"), st.get("device.limit"),
              st.get("host.limit")), flush=True)

    kinds = ["default", "tierfs", "tierfs-wb"]
    results: dict[str, dict[str, list[float]]] = {k: {} for k in kinds}
    spill: dict[str, int] = {}
    try:
        for r in range(cfg.repeats):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for kind in order:
                before = xattr.mount_stats(cfg.mount)
                times, disk = one_run(kind, cfg)
                after = xattr.mount_stats(cfg.mount)
                spill[kind] = disk
                if kind.startswith("tierfs"):
                    # Bytes really written to the disk tier: dropping a
                    # clean host copy counts in host.spill_bytes only.
                    spill[kind + " disk"] = (
                        after.get("disk.written_bytes", 0)
                        - before.get("disk.written_bytes", 0))
                for k, v in times.items():
                    results[kind].setdefault(k, []).append(v)
                print("dask bench: repeat %d %-9s %s" % (r + 1, kind, "  ".join(
                    "%s %.2fs" % kv for kv in times.items())), flush=True)
    finally:
        shutil.rmtree(cfg.local_dir, ignore_errors=True)
        shutil.rmtree(cfg.tierfs_root, ignore_errors=True)

    print()
    print("%-22s %10s %10s %10s %8s %8s" % ("phase (median)", "default", "tierfs",
                                            "tierfs-wb", "ratio", "ratio-wb"))
    tot = dict.fromkeys(kinds, 0.0)
    for phase in results["default"]:
        med = {k: statistics.median(results[k][phase]) for k in kinds}
        for k in kinds:
            tot[k] += med[k]
        print("%-22s %9.2fs %9.2fs %9.2fs %8.2f %8.2f" % (
            phase, med["default"], med["tierfs"], med["tierfs-wb"],
            med["tierfs"] / med["default"], med["tierfs-wb"] / med["default"]))
    ratio = tot["tierfs"] / tot["default"]
    ratio_wb = tot["tierfs-wb"] / tot["default"]
    print("%-22s %9.2fs %9.2fs %9.2fs %8.2f %8.2f" % (
        "total", tot["default"], tot["tierfs"], tot["tierfs-wb"], ratio, ratio_wb))
    print("last repeat, after the persist: held outside the workers' memory "
          "(MiB): default %d (local disk), tierfs %d, tierfs-wb %d; tierfs "
          "bytes written to the disk tier during the run (MiB): tierfs %d, "
          "tierfs-wb %d" % (
              spill.get("default", 0) >> 20, spill.get("tierfs", 0) >> 20,
              spill.get("tierfs-wb", 0) >> 20, spill.get("tierfs disk", 0) >> 20,
              spill.get("tierfs-wb disk", 0) >> 20))
    print("dask bench: tierfs/default time ratio %.2f (write-through), %.2f "
          "(write-back); below 1: tierfs faster" % (ratio, ratio_wb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
