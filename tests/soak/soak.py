#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The soak's workload, against a mounted tierfs (tests/soak/run.sh mounts it).

Workers run in their own processes, each owning its own directory and a
model of every file in it, so that each can check every byte it reads
while the others churn the tiers:

  writer    rewrites, patches, truncates, extends and appends to its files
  reader    writes its files once, then reads ranges of them (read, mmap)
  renamer   renames (over other files too), swaps with RENAME_EXCHANGE,
            links and unlinks, and checks that content follows the name
  exporter  fills files through a write export (sim backend: a shared
            memory map, as a GPU program would) and reads them back
            through a read export and read(2)
  mover     moves its files between tiers (user.tierfs.tier), pins them,
            and writes and reads a file larger than the host tier

The main process sends SIGHUP every few seconds after rewriting the config
file with other limits, and samples the daemon's RSS (its anonymous and
shared pages: what it holds, not the code it has run so far). After a
warm-up (a fifth of the run, half of a short one) it
pauses the workers, lets the daemon go idle and takes the RSS beyond what
the tiers hold (host.used, plus device.used: the sim device is daemon
memory) as a baseline; at the end it does the same again and fails when
that grew by more than metadata for the files now alive. Every worker
checks all its files one last time before it stops.

Prints one "ok"/"not ok" line per check and a JSON summary; exits 1 on
any failure.
"""
import argparse
import ctypes
import errno
import json
import mmap
import multiprocessing as mp
import os
import random
import re
import signal
import subprocess
import sys
import time

MiB = 1024 * 1024
RENAME_EXCHANGE = 2
libc = ctypes.CDLL(None, use_errno=True)


def stats(mnt):
    raw = os.getxattr(mnt, "user.tierfs.stats").decode()
    out = {}
    for line in raw.splitlines():
        k, _, v = line.partition("=")
        out[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
    return out


def rss(pid):
    """The memory the daemon holds: anonymous and shared resident pages.

    Not VmRSS, which also counts the pages of the binary and its
    libraries as code paths run for the first time: 4 MiB of the ASan
    build's text came in during a 1-minute run, read as growth.
    """
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k = line.split(":")[0]
            if k in ("RssAnon", "RssShmem"):
                got[k] = int(line.split()[1]) * 1024
    if len(got) != 2:
        raise RuntimeError("no RssAnon or RssShmem")
    return got["RssAnon"] + got["RssShmem"]


def content(rng, n):
    """n bytes of one of the kinds the tiers treat differently."""
    kind = rng.randrange(4)
    if kind == 0:
        return bytearray(rng.randbytes(n))  # lz4 gives up: raw chunks
    if kind == 1:
        words = [b"tier ", b"spill ", b"chunk ", b"%d " % rng.randrange(99)]
        out = bytearray()
        while len(out) < n:
            out += rng.choice(words)
        return out[:n]  # compresses
    if kind == 2:
        return bytearray(n)  # zero chunks: a header alone on disk
    blk = rng.randbytes(4096)  # a mix within one chunk
    out = bytearray(n)
    for off in range(0, n, 65536):
        if rng.random() < 0.5:
            end = min(n, off + 4096)
            out[off:end] = blk[: end - off]
    return out


class Failure(Exception):
    pass


class Worker:
    def __init__(self, role, idx, args, pause, stop, seed):
        self.role, self.idx, self.args = role, idx, args
        self.pause, self.stop = pause, stop
        self.rng = random.Random(seed)
        self.dir = os.path.join(args.mount, f"{role}{idx}")
        self.model = {}  # path -> bytearray
        self.ops = 0
        self.history = []  # the last steps, for the failure report
        self.soft = {}  # errno name -> count, for errors the contract allows

    # -- helpers --
    def path(self, name):
        return os.path.join(self.dir, name)

    def write_all(self, p, data, off=0, trunc=False):
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0)
        fd = os.open(p, flags, 0o644)
        try:
            view = memoryview(data)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], off + done)
        finally:
            os.close(fd)

    def put(self, p, data):
        self.write_all(p, data, trunc=True)
        self.model[p] = bytearray(data)

    def check(self, p, off=0, n=None):
        want = self.model[p]
        if n is None:
            n = len(want) - off
        with open(p, "rb", buffering=0) as f:
            f.seek(off)
            got = bytearray()
            while len(got) < n:
                b = f.read(n - len(got))
                if not b:
                    break
                got += b
        exp = want[off:off + n]
        if got != exp:
            bad = next((i for i in range(min(len(got), len(exp)))
                        if got[i] != exp[i]), min(len(got), len(exp)))
            raise Failure(f"{p}: {len(got)} bytes at {off}, expected "
                          f"{len(exp)}; first difference at {off + bad}")
        size = os.stat(p).st_size
        if size != len(want):
            raise Failure(f"{p}: size {size}, expected {len(want)}")

    def note(self, *what):
        self.history.append(" ".join(str(w).replace(self.dir + "/", "")
                                     for w in what))
        del self.history[:-12]

    def soft_error(self, e, allowed):
        if e.errno not in allowed:
            raise e
        name = errno.errorcode.get(e.errno, str(e.errno))
        self.soft[name] = self.soft.get(name, 0) + 1

    def move(self, p, tier):
        try:
            os.setxattr(p, "user.tierfs.tier", tier.encode())
        except OSError as e:
            # A full tier, or a leased buffer, refuses a move.
            self.soft_error(e, (errno.ENOSPC, errno.EBUSY, errno.ENODEV))

    def size(self):
        return self.rng.choice([1, 100, 4096, 70000, 300000, 1 * MiB,
                                MiB + 12345, 2 * MiB, 3 * MiB - 7])

    # -- roles --
    def setup(self):
        os.makedirs(self.dir, exist_ok=True)
        n = {"writer": 6, "reader": 6, "renamer": 8, "exporter": 3,
             "mover": 4}[self.role]
        for i in range(n):
            self.put(self.path(f"f{i}"), content(self.rng, self.size()))
        if self.role == "mover":
            big = self.args.big_mib * MiB
            self.put(self.path("big"), content(self.rng, big))

    def step_writer(self):
        p = self.path(f"f{self.rng.randrange(6)}")
        m = self.model[p]
        op = self.rng.randrange(6)
        if op == 0:
            self.put(p, content(self.rng, self.size()))
        elif op == 1 and m:
            off = self.rng.randrange(len(m) + 1)
            data = content(self.rng, self.rng.randrange(1, 200000))
            self.write_all(p, data, off)
            if off + len(data) > len(m):
                m.extend(bytes(off + len(data) - len(m)))
            m[off:off + len(data)] = data
        elif op == 2:
            n = self.rng.randrange(0, 3 * MiB)
            os.truncate(p, n)
            if n < len(m):
                del m[n:]
            else:
                m.extend(bytes(n - len(m)))
        elif op == 3:
            data = content(self.rng, self.rng.randrange(1, 300000))
            with open(p, "ab") as f:
                f.write(data)
            m.extend(data)
        elif op == 4:
            fd = os.open(p, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.rng.random() < 0.3:
            self.check(p)

    def step_reader(self):
        p = self.path(f"f{self.rng.randrange(6)}")
        m = self.model[p]
        if not m:
            return self.check(p)
        if self.rng.random() < 0.2:
            with open(p, "rb") as f:
                with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
                    if mm[:] != m:
                        raise Failure(f"{p}: mmap read differs")
            return
        off = self.rng.randrange(len(m))
        self.check(p, off, self.rng.randrange(1, len(m) - off + 1))

    def step_renamer(self):
        names = sorted(self.model)
        a = self.rng.choice(names)
        op = self.rng.randrange(5)
        if op == 0:  # rename, maybe over another file
            b = self.path(f"f{self.rng.randrange(10)}")
            if b != a:
                self.note("rename", a, b)
                os.rename(a, b)
                self.model[b] = self.model.pop(a)
        elif op == 1 and len(names) > 1:  # swap two names
            b = self.rng.choice([n for n in names if n != a])
            self.note("exchange", a, b)
            if libc.renameat2(-100, a.encode(), -100, b.encode(),
                              RENAME_EXCHANGE):
                raise OSError(ctypes.get_errno(), "renameat2", a)
            self.model[a], self.model[b] = self.model[b], self.model[a]
        elif op == 2:  # a second name, then drop the first
            b = self.path(f"f{self.rng.randrange(10)}")
            if b != a:
                self.note("link", a, b, "then unlink", a)
                if b in self.model:
                    os.unlink(b)
                os.link(a, b)
                self.model[b] = self.model[a]
                self.check(b)
                os.unlink(a)
                del self.model[a]
        elif op == 3 and len(names) > 3:
            self.note("unlink", a)
            os.unlink(a)
            del self.model[a]
        else:
            free = [f"f{i}" for i in range(10)
                    if self.path(f"f{i}") not in self.model]
            if free:
                b = self.path(self.rng.choice(free))
                self.put(b, content(self.rng, self.size()))
                self.note("create", b, len(self.model[b]))
        for p in self.rng.sample(sorted(self.model),
                                 min(2, len(self.model))):
            self.check(p)

    def exporter_run(self, *argv):
        r = subprocess.run([self.args.export_client, *argv],
                           capture_output=True, timeout=120)
        if r.returncode:
            err = r.stderr.decode(errors="replace").strip()
            if "No space left" in err or "Device or resource busy" in err:
                self.soft["export:" + err.split(":")[-1].strip()] = \
                    self.soft.get("export:" + err.split(":")[-1].strip(),
                                  0) + 1
                return None
            raise Failure(f"export_client {' '.join(argv)}: {err}")
        return r.stdout

    def step_exporter(self):
        p = self.path(f"f{self.rng.randrange(3)}")
        op = self.rng.randrange(4)
        if op == 0:
            n = len(self.model[p]) or 4096
            if not self.model[p]:
                self.put(p, bytearray(n))
            seed = self.rng.randrange(1, 1 << 30)
            if self.exporter_run("fill", p, str(seed)) is not None:
                pat = self.exporter_run("pattern", str(n), str(seed))
                self.model[p] = bytearray(pat)
        elif op == 1:
            got = self.exporter_run("cat", p)
            if got is not None and got != self.model[p]:
                raise Failure(f"{p}: read export differs from the model")
        elif op == 2:
            self.put(p, content(self.rng, self.size()))
        self.check(p)

    def step_mover(self):
        names = sorted(self.model)
        p = self.rng.choice(names)
        op = self.rng.randrange(5)
        if op <= 1:
            self.move(p, self.rng.choice(["device", "host", "disk"]))
        elif op == 2 and len(self.model[p]) < MiB:
            # Small files only: pinned ones never make room.
            try:
                os.setxattr(p, "user.tierfs.pin",
                            self.rng.choice([b"1", b"0"]))
            except OSError as e:
                self.soft_error(e, (errno.ENOSPC,))
        elif op == 3 and p.endswith("big"):
            m = self.model[p]
            off = self.rng.randrange(len(m))
            data = content(self.rng, self.rng.randrange(1, 2 * MiB))
            self.write_all(p, data, off)
            if off + len(data) > len(m):
                m.extend(bytes(off + len(data) - len(m)))
            m[off:off + len(data)] = data
        self.check(p)

    def run(self, result_path):
        res = {"worker": f"{self.role}{self.idx}", "ok": True}
        try:
            self.setup()
            step = getattr(self, "step_" + self.role)
            while not self.stop.is_set():
                if self.pause.is_set():
                    time.sleep(0.05)
                    continue
                step()
                self.ops += 1
            for p in sorted(self.model):
                self.check(p)
            # Unpin, so that the files are ordinary again for the lead.
            if self.role == "mover":
                for p in self.model:
                    os.setxattr(p, "user.tierfs.pin", b"0")
        except Exception as e:  # the soak's own bugs fail it too
            res["ok"] = False
            res["error"] = f"{type(e).__name__}: {e}"
            res["history"] = self.history
        res["ops"] = self.ops
        res["files"] = len(self.model)
        res["soft_errors"] = self.soft
        with open(result_path, "w") as f:
            json.dump(res, f)


def worker_main(role, idx, args, pause, stop, seed, result_path):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Worker(role, idx, args, pause, stop, seed).run(result_path)


LIMITS = {
    "device": ["2M", "4M", "8M"],
    "host": ["4M", "6M", "8M", "16M"],
}


def write_config(path, args, rng):
    lim = {t: rng.choice(v) for t, v in LIMITS.items()} if rng else \
        {"device": "4M", "host": "8M"}
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write(f"[device]\nbackend = sim\nlimit = {lim['device']}\n"
                f"[host]\nlimit = {lim['host']}\n"
                f"[disk]\npath = {args.spill}\nlimit = {args.disk_limit}\n")
    os.replace(tmp, path)
    return lim


def overhead(args):
    """RSS beyond what the tiers hold, once the daemon is idle."""
    # The host pool gives back half its surplus each idle second; wait
    # until the RSS stops falling.
    last = None
    for _ in range(40):
        time.sleep(1)
        st = stats(args.mount)
        r = rss(args.pid)
        used = st["host.used"] + st["device.used"]
        cur = r - used
        if last is not None and abs(cur - last) < MiB:
            return cur, st, r
        last = cur
    return cur, st, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--spill", required=True)
    ap.add_argument("--export-client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--big-mib", type=int, default=24)
    ap.add_argument("--disk-limit", default="1G")
    ap.add_argument("--hup-every", type=float, default=5)
    ap.add_argument("--roles", default="writer,reader,renamer,exporter,"
                    "mover", help="which kinds of worker to run")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    total = args.minutes * 60
    # Long enough for ASan's quarantine (16 MiB) and the allocator's caches
    # to fill: in a 30-minute run they grew the RSS by ~6 MiB over the
    # first 8 minutes, then held. A short run gets half its length: a
    # 12 s warm-up of a 1-minute run measured them filling, 5 to 16 MiB
    # of "growth" where the daemon itself (a build without ASan, the same
    # load) stays flat.
    warmup = min(max(total * 0.2, min(total * 0.5, 60), 10), 480)
    t0 = time.monotonic()

    pause, stop = mp.Event(), mp.Event()
    roles = ([("writer", i) for i in range(args.writers)] +
             [("reader", i) for i in range(args.readers)] +
             [("renamer", 0), ("renamer", 1), ("exporter", 0),
              ("exporter", 1), ("mover", 0)])
    roles = [r for r in roles if r[0] in args.roles.split(",")]
    procs = []
    for role, i in roles:
        rp = os.path.join(args.out, f"{role}{i}.json")
        p = mp.Process(target=worker_main,
                       args=(role, i, args, pause, stop,
                             rng.randrange(1 << 30), rp))
        p.start()
        procs.append((p, rp))

    results = []
    checks = []

    def check(name, ok, detail=""):
        checks.append((name, ok, detail))
        print(f"{'ok' if ok else 'not ok'} {len(checks)} - {name}"
              f"{': ' + detail if detail else ''}", flush=True)

    hups = 0
    next_hup = time.monotonic() + args.hup_every
    base = None
    samples = []
    while time.monotonic() - t0 < total:
        time.sleep(0.5)
        now = time.monotonic()
        if not all(p.is_alive() for p, _ in procs):
            break  # a worker failed: stop early, report below
        if now >= next_hup:
            lim = write_config(args.config, args, rng)
            os.kill(args.pid, signal.SIGHUP)
            hups += 1
            next_hup = now + args.hup_every * (0.5 + rng.random())
        if base is None and now - t0 >= warmup:
            # The baseline: the config the run started with, all idle.
            write_config(args.config, args, None)
            os.kill(args.pid, signal.SIGHUP)
            pause.set()
            time.sleep(1)  # let the current steps finish
            base = overhead(args)
            pause.clear()
            print(f"# baseline after {now - t0:.0f} s: RSS "
                  f"{base[2] / MiB:.1f} MiB, beyond the tiers "
                  f"{base[0] / MiB:.1f} MiB, {base[1]['files']} files",
                  flush=True)
        if int(now - t0) % 10 == 0:
            try:
                st = stats(args.mount)
                samples.append({"t": round(now - t0), "rss": rss(args.pid),
                                "host": st["host.used"],
                                "device": st["device.used"],
                                "disk": st["disk.used"],
                                "files": st["files"]})
            except OSError:
                pass

    stop.set()
    for p, rp in procs:
        p.join(timeout=600)
        if p.is_alive():
            p.kill()
        try:
            with open(rp) as f:
                results.append(json.load(f))
        except (OSError, ValueError):
            results.append({"worker": rp, "ok": False,
                            "error": "no result (crashed or hung)"})
    for r in results:
        for h in r.get("history", []):
            print(f"# {r['worker']}: {h}")
        check(f"{r['worker']}: every byte as modelled", r["ok"],
              r.get("error", f"{r.get('ops', 0)} ops, "
                             f"{r.get('files', 0)} files"))
    alive = os.path.exists(f"/proc/{args.pid}")
    check("daemon alive", alive)
    summary = {"seconds": round(time.monotonic() - t0), "hups": hups,
               "workers": results, "samples": samples}
    if alive:
        write_config(args.config, args, None)
        os.kill(args.pid, signal.SIGHUP)
        end = overhead(args)
        summary["stats"] = end[1]
        print(f"# end: RSS {end[2] / MiB:.1f} MiB, beyond the tiers "
              f"{end[0] / MiB:.1f} MiB, {end[1]['files']} files", flush=True)
        if base is not None:
            growth = end[0] - base[0]
            # Metadata: an inode, a buffer and a name per file; generous.
            allow = 8 * MiB + 16384 * end[1]["files"]
            check("RSS beyond host.used did not grow", growth <= allow,
                  f"{growth / MiB:+.1f} MiB (allowed {allow / MiB:.1f})")
            summary["rss_growth"] = growth
        else:
            check("RSS baseline taken", False, "the run ended in warm-up")
    summary["checks"] = [{"name": n, "ok": ok, "detail": d}
                         for n, ok, d in checks]
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    failed = sum(1 for _, ok, _ in checks if not ok)
    print(f"# {hups} reloads; stats at the end:")
    for k in ("files", "host.used", "device.used", "disk.used",
              "host.spills", "host.unspills", "device.spills",
              "evict_nothing_movable", "evict_move_errors",
              "checksum_errors", "spill_read_errors", "spill_write_errors",
              "host_alloc_failures"):
        if "stats" in summary and k in summary["stats"]:
            print(f"#   {k}={summary['stats'][k]}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
