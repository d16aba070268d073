#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""How long each nanny takes to close its worker, with TierfsStore or
Dask's default store, on examples/dask_localcluster.py's workload.

    PYTHONPATH=python bench/dask/nanny_probe.py ROOT|default [--gib G] [--runs N]

ROOT is a directory on a tierfs mount; "default" runs Dask's own store.
Prints per run the seconds of each WorkerProcess.kill (the nanny's close:
it kills the worker after 0.8 of its 4 s timeout) and how many "still
alive ... killing" warnings Dask logged. Run it under load (stress-ng
--cpu N) to see whether the store or Dask's shutdown is what is slow.
"""
import argparse
import json
import logging
import os
import time

import dask.array as da
import distributed.nanny as nanny
from distributed import Client, LocalCluster

times, warnings = [], []


class Catch(logging.Handler):
    def emit(self, rec):
        if "still alive" in rec.getMessage():
            warnings.append(rec.getMessage())


real_kill = nanny.WorkerProcess.kill


async def kill(self, *a, **k):
    t = time.perf_counter()
    try:
        return await real_kill(self, *a, **k)
    finally:
        times.append(round(time.perf_counter() - t, 3))


nanny.WorkerProcess.kill = kill
logging.getLogger("distributed.nanny").addHandler(Catch())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    limit = 1 << 30
    kw = dict(n_workers=2, threads_per_worker=2, memory_limit=limit,
              dashboard_address=None, local_directory="/var/tmp")
    if a.root != "default":
        from tierfs.dask import TierfsStore
        root = os.path.join(a.root, "dask")
        os.makedirs(root, exist_ok=True)
        kw["data"] = (TierfsStore, {"root": root, "cache_bytes": limit // 4})
    for _ in range(a.runs):
        t0 = time.perf_counter()
        cluster = LocalCluster(**kw)
        with cluster, Client(cluster):
            cols = 20_000
            rows = int(a.gib * (1 << 30)) // (8 * cols)
            x = da.random.random((rows, cols), chunks=(min(rows, 1600), 4_000)).persist()
            x.mean().compute()
            t1 = time.perf_counter()
        print(json.dumps({"store": a.root if a.root == "default" else "tierfs",
                          "work_s": round(t1 - t0, 1),
                          "close_s": round(time.perf_counter() - t1, 2),
                          "kill_s": times[-2:], "warnings": len(warnings),
                          "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
