#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Dask LocalCluster whose workers keep their data on a tierfs mount.

    sudo tierfs /mnt/tierfs -o host_limit=8G
    PYTHONPATH=python python3 examples/dask_localcluster.py [/mnt/tierfs]
        [--gib 6] [--memory-limit 2GiB]

Each worker gets its own directory under /mnt/tierfs/dask; tierfs keeps the
hot values on the GPU (or its host tier) and spills the rest, compressed, to
its disk tier. RAM budget of one node:

    n_workers x memory_limit   (worker processes; the store's cache lives here)
  + tierfs host_limit          (the daemon's host tier)
  + the rest of the node       (OS, page cache)

so with 64 GiB, 4 workers at 8 GiB and host_limit=24G leave 8 GiB spare.
"""

import argparse
import os
import time

import dask.array as da
from dask.utils import parse_bytes
from distributed import Client, LocalCluster

from tierfs import xattr
from tierfs.dask import TierfsStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mount", nargs="?", default="/mnt/tierfs")
    ap.add_argument("--gib", type=float, default=6, help="array size (GiB)")
    ap.add_argument("--memory-limit", default="2GiB", help="per worker")
    args = ap.parse_args()
    root = os.path.join(args.mount, "dask")
    os.makedirs(root, exist_ok=True)
    limit = parse_bytes(args.memory_limit)
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=2,
        memory_limit=limit,
        dashboard_address=None,
        # (class, kwargs): each worker process builds its own store.
        # cache_bytes keeps recently used values deserialized in the worker;
        # the worker's memory manager drops them (evict) under pressure.
        data=(TierfsStore, {"root": root, "cache_bytes": limit // 4}),
    )
    with cluster, Client(cluster) as client:
        cols = 20_000
        rows = int(args.gib * (1 << 30)) // (8 * cols)
        # 4000 x 4000 chunks (128 MiB) for 2 GiB workers; smaller with less.
        chunk = max(1, min(4_000, rows, limit // 16 // (8 * 4_000)))
        x = da.random.random((rows, cols), chunks=(chunk, 4_000))
        x = x.persist()
        print("mean:", x.mean().compute())
        stats = xattr.mount_stats(args.mount)
        for tier in ("device", "host", "disk"):
            print("%-6s used %6d MiB" % (tier, stats.get(tier + ".used", 0) >> 20))
        # Where each worker's own files are (also the dashboard's worker
        # table columns tierfs_*_bytes), a moment after the first writes.
        for addr, tiers in client.run(lambda dask_worker: dask_worker.data.tier_bytes()).items():
            print(addr, ", ".join("%s %d MiB" % (t, n >> 20) for t, n in tiers.items()))
    # Closing the cluster renamed the workers' directories aside; their
    # files go in the background, so wait a little before counting.
    deadline = time.monotonic() + 30
    while os.listdir(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = sum(len(files) for _, _, files in os.walk(root))
    print("left on the mount: %d files" % left)


if __name__ == "__main__":
    main()
