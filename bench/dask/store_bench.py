# SPDX-License-Identifier: LGPL-2.1-or-later
"""TierfsStore's own cost: put, get and delete of numpy arrays and a pandas
frame, next to the same bytes written and read with plain os calls on the
same directory (the floor: one file per value, no pickling).

    PYTHONPATH=python /usr/bin/python3 bench/dask/store_bench.py DIR [--quick]
        [--repeats N] [--baseline OLD_STORE_PY]

DIR is a directory on a tierfs mount whose host tier holds everything (so
this measures the store and FUSE, not the disk tier). Each case runs
(store, plain) pairs alternately, 3 times or more; prints the medians and
the median of per-pair ratios store/plain (1.0: no cost over the floor).
--baseline adds a third side, another version of tierfs/store.py (e.g.
``git show REV:python/tierfs/store.py > /tmp/old.py``), and the ratio
store/baseline: a before/after measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

MiB = 1 << 20


def values(kind: str, size: int, n: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    if kind == "ndarray":
        return [rng.random(size // 8) for _ in range(n)]
    rows = size // 24
    return [pd.DataFrame({"k": rng.integers(0, 1000, rows),
                          "v": rng.random(rows),
                          "w": rng.integers(0, 1 << 30, rows)})
            for _ in range(n)]


def raw_bytes(v) -> memoryview:
    import numpy as np

    if isinstance(v, np.ndarray):
        return memoryview(v).cast("B")
    return memoryview(v.to_numpy().tobytes())


def run_store(root: str, vals, cls=None) -> tuple[float, float, float]:
    if cls is None:
        from tierfs.store import TierfsStore as cls

    with cls(root) as s:
        t0 = time.perf_counter()
        for i, v in enumerate(vals):
            s[("x", i)] = v
        t1 = time.perf_counter()
        for i in range(len(vals)):
            s[("x", i)]
        t2 = time.perf_counter()
        for i in range(len(vals)):
            del s[("x", i)]
        if hasattr(s, "flush"):  # files go in the background: count them
            s.flush()
        t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def run_plain(root: str, vals) -> tuple[float, float, float]:
    d = os.path.join(root, "plain")
    os.mkdir(d)
    bufs = [raw_bytes(v) for v in vals]
    try:
        t0 = time.perf_counter()
        for i, b in enumerate(bufs):
            fd = os.open(os.path.join(d, str(i)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, b)
            os.close(fd)
        t1 = time.perf_counter()
        for i, b in enumerate(bufs):
            out = bytearray(b.nbytes)
            with open(os.path.join(d, str(i)), "rb", buffering=0) as f:
                f.readinto(out)
        t2 = time.perf_counter()
        for i in range(len(bufs)):
            os.unlink(os.path.join(d, str(i)))
        t3 = time.perf_counter()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return t1 - t0, t2 - t1, t3 - t2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a directory on a tierfs mount")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", help="another tierfs/store.py to compare with")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "python"))
    sides = {"store": run_store, "plain": run_plain}
    if args.baseline:
        import functools
        import importlib.util

        spec = importlib.util.spec_from_file_location("tierfs_baseline_store",
                                                      args.baseline)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sides["before"] = functools.partial(run_store, cls=mod.TierfsStore)
    total = 64 * MiB if args.quick else 256 * MiB
    cases = [("ndarray", 16 * MiB), ("ndarray", 1 * MiB), ("ndarray", 64 << 10),
             ("ndarray", 4 << 10), ("DataFrame", 1 * MiB)]
    print("%-18s %6s  %-6s %12s %12s %8s%s" % (
        "case", "n", "op", "store", "plain", "ratio",
        " %12s %8s" % ("before", "ratio") if args.baseline else ""))
    for kind, size in cases:
        n = max(4, min(total // size, 4000))
        vals = values(kind, size, n)
        res = {k: [] for k in sides}
        ratios = {k: [[], [], []] for k in sides if k != "store"}
        for r in range(max(1, args.repeats)):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            got = {}
            for which in order:
                got[which] = sides[which](args.dir, vals)
                res[which].append(got[which])
            for k in ratios:
                for i in range(3):
                    ratios[k][i].append(got["store"][i] / got[k][i])
        nbytes = sum(raw_bytes(v).nbytes for v in vals)
        for i, op in enumerate(("put", "get", "delete")):
            cols = []
            for k in sides:
                t = statistics.median(x[i] for x in res[k])
                cols.append("%7.0f MiB/s" % (nbytes / MiB / t) if op != "delete"
                            else "%9.0f us" % (t / n * 1e6))
            line = "%-18s %6d  %-6s %12s %12s %8.2f" % (
                "%s %s" % (kind, fmt_size(size)), n, op, cols[0], cols[1],
                statistics.median(ratios["plain"][i]))
            if args.baseline:
                line += " %12s %8.2f" % (cols[2], statistics.median(ratios["before"][i]))
            print(line, flush=True)
    return 0


def fmt_size(n: int) -> str:
    return "%dMiB" % (n // MiB) if n >= MiB else "%dKiB" % (n >> 10)


if __name__ == "__main__":
    sys.exit(main())
