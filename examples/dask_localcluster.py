#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Dask LocalCluster whose workers keep their data on a tierfs mount.

    sudo tierfs /mnt/tierfs -o host_limit=8G
    PYTHONPATH=python python3 examples/dask_localcluster.py [/mnt/tierfs]

Each worker gets its own directory under /mnt/tierfs/dask; tierfs keeps the
hot values on the GPU (or its host tier) and spills the rest, compressed, to
its disk tier. RAM budget of one node:

    n_workers x memory_limit   (worker processes; the store's cache lives here)
  + tierfs host_limit          (the daemon's host tier)
  + the rest of the node       (OS, page cache)

so with 64 GiB, 4 workers at 8 GiB and host_limit=24G leave 8 GiB spare.
"""

import os
import sys

import dask.array as da
from distributed import Client, LocalCluster

from tierfs import xattr
from tierfs.dask import TierfsStore


def main() -> None:
    mount = sys.argv[1] if len(sys.argv) > 1 else "/mnt/tierfs"
    root = os.path.join(mount, "dask")
    os.makedirs(root, exist_ok=True)
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=2,
        memory_limit="2GiB",
        # (class, kwargs): each worker process builds its own store.
        # cache_bytes keeps recently used values deserialized in the worker;
        # the worker's memory manager drops them (evict) under pressure.
        data=(TierfsStore, {"root": root, "cache_bytes": 512 << 20}),
    )
    with cluster, Client(cluster) as client:
        x = da.random.random((40_000, 20_000), chunks=(4_000, 4_000))  # 6 GiB
        x = x.persist()
        print("mean:", x.mean().compute())
        stats = xattr.mount_stats(mount)
        for tier in ("device", "host", "disk"):
            print("%-6s used %6d MiB" % (tier, stats.get(tier + ".used", 0) >> 20))
    # Closing the cluster removed the workers' directories; a killed worker's
    # directory is removed by: python3 -m tierfs cleanup /mnt/tierfs/dask


if __name__ == "__main__":
    main()
