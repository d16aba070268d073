# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every way a Dask worker ends leaves nothing on the mount.

    PYTHONPATH=python /usr/bin/python3 tests/dask/lifecycle.py MOUNTPOINT

For both forms, Nanny(data=(TierfsStore, ...)) and Nanny(worker_class=
TierfsWorker), workers holding data on MOUNTPOINT end by SIGKILL, SIGTERM,
SIGKILL with their reaper killed too (the restarted worker's store removes
the directory at its start), SIGINT (the worker closes, and its nanny with
it), retirement, and the nanny's kill after its timeout (a worker that does
not close in time, at the cluster's close).
Then workers without a nanny: Worker.close and interpreter exit. Prints
one "ok"/"not ok" line per check, then PASS or FAIL; exit 0 only on PASS.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import subprocess
import sys
import time
import traceback

results: list[tuple[bool, str]] = []


def log(msg: str) -> None:
    print("lifecycle: %s" % msg, flush=True)


def check(ok: bool, what: str) -> None:
    results.append((bool(ok), what))
    print("%s - %s" % ("ok" if ok else "not ok", what), flush=True)


def wait_for(cond, timeout: float = 60.0) -> bool:
    """Poll cond until true or timeout seconds; the machine may be loaded."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return True
        except Exception:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def entries(root: str) -> list[str]:
    return sorted(os.listdir(root))


def holders(path: str) -> list[int]:
    """Pids with path open (the reaper: its sh and flock)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) == path:
                    out.append(int(pid))
                    break
        except OSError:
            continue
    return out


class SlowClose:
    """A worker plugin whose teardown blocks the worker's event loop, so the
    worker does not close within the nanny's timeout and gets SIGKILL."""

    name = "slow-close"

    def setup(self, worker):
        pass

    def teardown(self, worker):
        time.sleep(60)


def store_of(client) -> dict[str, tuple[int, str]]:
    return client.run(lambda dask_worker: (os.getpid(), dask_worker.data.path))


def fill(client, tag: str) -> None:
    """Give every worker some results to keep (files on the mount)."""
    import numpy as np

    workers = list(client.scheduler_info()["workers"])
    futs = [client.submit(np.full, 200_000, i, key="%s-%d" % (tag, i), workers=[w])
            for i, w in enumerate(workers * 4)]
    client.gather(futs)
    fill.keep = futs  # held, so the files stay


def restarted(client, old_addr: str, n: int) -> dict:
    """Wait until the scheduler has n workers, none at old_addr; their
    stores. (Asking the workers themselves would wait on the dead one's
    connection timeout.)"""
    def ready() -> bool:
        workers = client.scheduler_info()["workers"]
        return len(workers) == n and old_addr not in workers

    if not wait_for(ready, 180):
        log("workers after the restart: %r" % list(client.scheduler_info()["workers"]))
        return {}
    return store_of(client)


def nanny_form(form: str, root: str) -> None:
    import asyncio

    from distributed import Client, Nanny, Scheduler
    from distributed.utils import LoopRunner, sync

    from tierfs.dask import TierfsStore, TierfsWorker

    os.mkdir(root)
    level = getattr(logging, os.environ.get("LIFECYCLE_LOG", "CRITICAL"))
    opts = dict(nthreads=1, memory_limit="512MiB", silence_logs=level)
    if form == "data":
        opts["data"] = (TierfsStore, {"root": root})
    else:
        opts["worker_class"] = TierfsWorker
        opts["env"] = {"TIERFS_DASK_DIR": root}

    # A scheduler and nannies of our own, not a SpecCluster: that one
    # closes a nanny whose worker vanished from the scheduler, racing the
    # nanny's restart we want to see.
    async def start():
        sched = await Scheduler(dashboard_address=None, port=0)
        nannies = await asyncio.gather(*(Nanny(sched.address, **opts) for _ in range(3)))
        return sched, nannies

    async def stop(sched, nannies):
        await asyncio.gather(*(n.close() for n in nannies))
        await sched.close()

    runner = LoopRunner(asynchronous=False)
    runner.start()
    sched, nannies = sync(runner.loop, start)
    client = Client(sched.address)
    try:
        info = store_of(client)
        check(len(info) == 3 and all(os.path.dirname(p) == root for _, p in info.values()),
              "%s: 3 workers, each with a store in the root" % form)
        for how in ("SIGKILL", "SIGTERM", "SIGKILL+reaper"):
            fill(client, how.replace("+", "-"))
            addr, (pid, path) = sorted(store_of(client).items())[0]
            check(len(os.listdir(path)) > 1, "%s: %s: the worker has files" % (form, how))
            if how == "SIGKILL+reaper":
                reaper = [p for p in holders(os.path.join(path, ".lock")) if p != pid]
                check(reaper != [], "%s: %s: the worker has a reaper" % (form, how))
                for p in reaper:
                    os.kill(p, signal.SIGKILL)
            os.kill(pid, getattr(signal, how.split("+")[0]))
            if how == "SIGKILL+reaper":
                check(wait_for(lambda: not os.path.exists("/proc/%d" % pid), 30)
                      and os.path.isdir(path),
                      "%s: %s: the directory outlives worker and reaper" % (form, how))
            info = restarted(client, addr, 3)
            check(len(info) == 3, "%s: %s: the nanny restarted the worker" % (form, how))
            # A reaper or, with none left, the restarted worker's store.
            check(wait_for(lambda: not os.path.exists(path), 60),
                  "%s: %s: the dead worker's directory is removed" % (form, how))
            check(all(os.path.isdir(p) for _, p in info.values()),
                  "%s: %s: the live workers' directories stay" % (form, how))

        # Dask's worker closes itself, and its nanny, on KeyboardInterrupt.
        fill(client, "sigint")
        addr, (pid, path) = sorted(store_of(client).items())[0]
        os.kill(pid, signal.SIGINT)
        check(wait_for(lambda: not os.path.exists(path), 60),
              "%s: SIGINT: the worker's directory is removed" % form)
        check(wait_for(lambda: len(client.scheduler_info()["workers"]) == 2, 120),
              "%s: SIGINT: the worker is gone" % form)

        fill(client, "retire")
        addr, (pid, path) = sorted(store_of(client).items())[0]
        client.retire_workers([addr], close_workers=True)
        check(wait_for(lambda: not os.path.exists(path), 60),
              "%s: retired worker's directory is removed" % form)

        (addr, (pid, path)), = store_of(client).items()
        fill(client, "slow")
        client.register_worker_plugin(SlowClose())
        t = time.monotonic()
    finally:
        client.close()
        sync(runner.loop, stop, sched, nannies)
        runner.stop()
    took = time.monotonic() - t
    check(not os.path.exists("/proc/%d" % pid) and took < 50,
          "%s: the nanny killed the worker that would not close (%.1fs)" % (form, took))
    check(wait_for(lambda: entries(root) == [], 60),
          "%s: nothing left on the mount after the cluster closed (%s)" % (form, entries(root)))
    os.rmdir(root)


NO_NANNY = r"""
import os, sys, time
import numpy as np
from distributed import Client, LocalCluster
from tierfs.dask import TierfsStore, TierfsWorker
for root, form in zip(sys.argv[1::2], sys.argv[2::2]):
    kw = dict(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    if form == "data":
        kw["data"] = (TierfsStore, {"root": root})
    else:
        kw["worker_class"] = TierfsWorker
        kw["tierfs_dir"] = root
    cluster = LocalCluster(**kw)
    client = Client(cluster)
    futs = client.map(np.ones, range(100_000, 100_008))
    client.gather(futs)
    path, = client.run(lambda dask_worker: dask_worker.data.path).values()
    assert len(os.listdir(path)) == 9, os.listdir(path)
    del futs
    client.close()
    cluster.close()
    print(form, path, os.path.exists(path), flush=True)
"""


def no_nanny(roots: dict[str, str]) -> None:
    """Both forms in one interpreter (one start of it, not two): each
    cluster closes, then the interpreter exits with the data= store's
    directory still there."""
    args = []
    for form, root in roots.items():
        os.mkdir(root)
        args += [root, form]
    p = subprocess.run([sys.executable, "-c", NO_NANNY] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    if p.returncode:
        log(p.stderr[-3000:])
    out = {ln.split()[0]: ln.split()[1:] for ln in p.stdout.splitlines() if ln.strip()}
    for form, root in roots.items():
        path, there = (out.get(form, []) + ["", ""])[:2]
        check(p.returncode == 0 and path.startswith(root),
              "%s, no nanny: the worker ran and exited" % form)
        if form == "worker":
            check(there == "False", "%s, no nanny: Worker.close removed the directory" % form)
        check(wait_for(lambda: entries(root) == [], 60),
              "%s, no nanny: nothing left after the interpreter exited (%s)" % (
                  form, entries(root)))
        os.rmdir(root)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("--deadline", type=float, default=560)
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.deadline, exit=True)
    # Each worker (12 with the restarts) starts as a fork of one server
    # process that has imported distributed, numpy and pandas, as in
    # Dask's own test suite, not as a fresh interpreter that imports them
    # again: those imports were most of this test's CPU time, and on a
    # loaded 2-core machine most of its wall time. A store's lifetime hangs
    # on its lock and its reaper, not on how its process began.
    import dask

    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    top = os.path.join(args.mount, "lifecycle")
    os.mkdir(top)
    for form in ("data", "worker"):
        t = time.monotonic()
        nanny_form(form, os.path.join(top, form))
        log("%s form with nannies took %.1fs" % (form, time.monotonic() - t))
    t = time.monotonic()
    no_nanny({form: os.path.join(top, form + "-no-nanny") for form in ("data", "worker")})
    log("both forms without a nanny took %.1fs" % (time.monotonic() - t))
    os.rmdir(top)
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    except Exception:
        traceback.print_exc()
        rc = 1
    failed = [w for ok, w in results if not ok]
    rc = rc or (1 if failed else 0)
    print("%d checks, %d failed" % (len(results), len(failed)))
    print("%s: tests/dask/lifecycle.py" % ("PASS" if rc == 0 else "FAIL"), flush=True)
    sys.exit(rc)
