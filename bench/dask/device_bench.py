# SPDX-License-Identifier: LGPL-2.1-or-later
"""GPU objects in a worker's store at equal memory: TierfsDeviceStore
(device frames D2D into the device tier) against TierfsStore (the value
pickled, through host memory, as a cupy array pickles), on one mount.

    PYTHONPATH=python:tests/dask TIERFS_CUDART=LIB /usr/bin/python3 \\
        bench/dask/device_bench.py MOUNT [--n N] [--mib M] [--repeats R]

bench/dask/device_run.sh builds the daemon against the fake CUDA runtime
and runs this on a mount of fixed limits (or on a real GPU's mount with
cupy-free device arrays of the tests' own: tests/dask/devarray.py). Both
stores see the same mount, so the same device, host and disk limits:
each round puts N values of M MiB (more than the device and host tiers
hold together, so the daemon spills to disk), reads every one back and
checks its bytes, then deletes them. Prints per store the median time of
the puts and of the gets, the bytes the daemon wrote to its disk tier
and to host, and the copies through the worker's host memory; then the
ratios device store / host-pickle store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

MiB = 1 << 20


def stats(mount: str) -> dict:
    from tierfs import xattr

    return xattr.mount_stats(mount)


def settle(mount: str, timeout: float = 30.0) -> None:
    """Wait until the mount holds no stored bytes (a round's deletes)."""
    deadline = time.monotonic() + timeout
    while stats(mount).get("logical_bytes", 0) and time.monotonic() < deadline:
        time.sleep(0.05)


def one_round(kind: str, mount: str, n: int, size: int) -> dict:
    import devarray
    from tierfs.dask import TierfsDeviceStore, TierfsStore

    root = os.path.join(mount, "bench-%s" % kind)
    os.makedirs(root, exist_ok=True)
    cls = TierfsDeviceStore if kind == "device" else TierfsStore
    s = cls(root)
    vals = [devarray.DevArray.pattern(size, i, tag=i) for i in range(n)]
    want = [devarray.expected(size, i) for i in range(n)]
    devarray.HOST_COPIES.update(to_host=0, from_host=0)
    before = stats(mount)
    t0 = time.perf_counter()
    for i, v in enumerate(vals):
        s["k%d" % i] = v
    t1 = time.perf_counter()
    del vals
    ok = True
    for i in range(n):
        x = s["k%d" % i]
        ok = ok and type(x).__name__ == "DevArray" and x.tobytes() == want[i]
        del x
    t2 = time.perf_counter()
    after = stats(mount)
    copies = devarray.HOST_COPIES["to_host"] + devarray.HOST_COPIES["from_host"]
    s.close()
    shutil.rmtree(root, ignore_errors=True)
    settle(mount)
    if not ok:
        raise SystemExit("%s store: a value came back wrong" % kind)
    return {"put": t1 - t0, "get": t2 - t1,
            "disk": after.get("disk.written_bytes", 0)
            - before.get("disk.written_bytes", 0),
            "host": after.get("host.written_bytes", 0)
            - before.get("host.written_bytes", 0),
            "copies": copies}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--mib", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    s = stats(a.mount)
    print("mount: backend %s, device.limit %d MiB, host.limit %d MiB; "
          "%d values of %d MiB per round, %d rounds each"
          % (s.get("backend"), s.get("device.limit", 0) >> 20,
             s.get("host.limit", 0) >> 20, a.n, a.mib, a.repeats), flush=True)
    runs: dict[str, list[dict]] = {"host": [], "device": []}
    for _ in range(a.repeats):
        for kind in ("host", "device"):  # alternate: the same load for both
            runs[kind].append(one_round(kind, a.mount, a.n, a.mib * MiB))
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]}
           for k, v in runs.items()}
    print("%-22s %9s %9s %12s %12s %8s" % ("store", "put s", "get s",
                                           "disk MiB", "host MiB", "copies"))
    names = {"host": "TierfsStore (pickle)", "device": "TierfsDeviceStore"}
    for k in ("host", "device"):
        m = med[k]
        print("%-22s %9.3f %9.3f %12.1f %12.1f %8d" % (
            names[k], m["put"], m["get"], m["disk"] / MiB, m["host"] / MiB,
            m["copies"]))
    h, d = med["host"], med["device"]

    def ratio(x, y):
        return "%.2f" % (x / y) if y else "n/a"

    print("device/host: put %s, get %s, disk bytes %s, host-tier bytes %s"
          % (ratio(d["put"], h["put"]), ratio(d["get"], h["get"]),
             ratio(d["disk"], h["disk"]), ratio(d["host"], h["host"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
