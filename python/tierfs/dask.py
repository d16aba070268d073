# SPDX-License-Identifier: LGPL-2.1-or-later
"""Dask workers that spill into tierfs.

GPU objects (cupy, cuDF, anything with a Distributed "cuda" serializer) go
to ``TierfsDeviceStore`` (tierfs.dask_device): device frames stay on the
GPU, in tierfs's device tier; workers on one mount pass values by hard link.

Two ways to use it:

- Any worker: ``Worker(data=(TierfsStore, {"root": "/mnt/tierfs/dask"}))``,
  or the same ``data=`` in ``LocalCluster(...)``. The tuple form is what works
  with nannies, which start each worker in a spawned process.
- The command line: ``TIERFS_DASK_DIR=/mnt/tierfs/dask dask worker
  SCHEDULER --worker-class tierfs.dask.TierfsWorker``.

Environment read by TierfsWorker (and TierfsStore for root):

``TIERFS_DASK_DIR``    directory on the tierfs mount (required)
``TIERFS_DASK_CACHE``  in-process LRU cache, e.g. ``64MiB`` (default 0)
"""

from __future__ import annotations

import os

from distributed import Worker

from .dask_device import TierfsDeviceStore, TierfsLinked, mount_options
from .store import (ENV_DIR, SpilledSize, TierfsStore, cleanup, cleanup_stale,
                    remove_on_sigterm)

__all__ = ["TierfsStore", "TierfsDeviceStore", "TierfsLinked", "TierfsWorker",
           "SpilledSize", "cleanup", "cleanup_stale", "mount_options"]

ENV_CACHE = "TIERFS_DASK_CACHE"


def _parse_bytes(value) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, (int, float)):
        return int(value)
    from dask.utils import parse_bytes

    return int(parse_bytes(value))


class TierfsWorker(Worker):
    """A distributed.Worker whose data lives in a TierfsStore.

    tierfs_dir and tierfs_cache default to $TIERFS_DASK_DIR and
    $TIERFS_DASK_CACHE. An explicit ``data=`` wins over both. The worker's
    directory goes however the worker ends (see tierfs.lifetime); those of
    killed workers that outlived their reaper go when a worker starts. The
    worker reports where its data is as the metrics tierfs_device_bytes,
    tierfs_host_bytes and tierfs_disk_bytes (TierfsStore.tier_bytes).
    """

    def __init__(self, *args, tierfs_dir=None, tierfs_cache=None, **kwargs):
        if kwargs.get("data") is None:
            root = tierfs_dir or os.environ.get(ENV_DIR)
            if not root:
                raise ValueError(
                    "TierfsWorker needs tierfs_dir= or $%s (a directory on a "
                    "tierfs mount)" % ENV_DIR
                )
            if tierfs_cache is None:
                tierfs_cache = os.environ.get(ENV_CACHE)
            kwargs["data"] = (
                TierfsStore,
                {
                    "root": os.fspath(root),
                    "cache_bytes": _parse_bytes(tierfs_cache),
                    "clean_stale": True,
                },
            )
        super().__init__(*args, **kwargs)
        if isinstance(self.data, TierfsStore):
            self.data.attach(self)
            remove_on_sigterm()

    async def close(self, *args, **kwargs):
        try:
            return await super().close(*args, **kwargs)
        finally:
            close = getattr(self.data, "close", None)
            if callable(close):
                close()
