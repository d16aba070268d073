#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Readers racing growing writers, rewriters and tier movers.

race_rw.py DIR SECONDS [--files N] [--max-mb M] [--readers R] [--movers M]
           [--rewriters W] [--map-rewriters W] [--seed S] [--stat]

Each file in DIR only grows while it lives, and every byte it holds is
src[offset] of one shared random source, whoever wrote it. So a reader
that takes the size the kernel holds (lseek SEEK_END) may read everything
below it, and must get every byte, right: a read(2) that returns fewer
bytes than asked before that size is the kernel taking a short FUSE reply
as the end of the file (it then shrinks the inode's size), and a wrong
byte is a torn or stale copy. --stat takes fstat()'s size instead, which
FUSE fills from the daemon's answer even while an extending write is in
flight, ahead of what reads see (doc/design.md, "The kernel's caches"):
that mode fails, by design of FUSE, not of tierfs. Without --align a
grower's write may start inside the page the file ends in, which readers
may have cached; a page invalidation (an open with keep_cache off, a spill)
while that write is in flight can leave zeroes cached past the old end, a
kernel race tierfs cannot close (doc/design.md): the test in pagecache.bats
uses --align. Writers grow the files in unaligned blocks, each through a fresh
open (the flush at close places the buffer), rewriters write ranges
already there again (same bytes), map rewriters do so through a shared
writable mapping (closing the descriptor first, so the mapping outlives
it, as a passthrough replica must allow), movers flip user.tierfs.tier between
the tiers, and when a file reaches --max-mb it is removed and starts
again. Runs SECONDS, longer until every kind of process has done
something (ten times SECONDS at most). Prints one line of counts; exits 1
at the first wrong read.
"""
import errno
import multiprocessing as mp
import os
import random
import sys
import time

TIERS = (b"host", b"disk", b"device", b"disk", b"host")
PAGE = 4096


def fail(stop, msg):
    sys.stderr.write("race_rw: " + msg + "\n")
    sys.stderr.flush()
    stop.value = 2


def path_of(d, k):
    return os.path.join(d, "f%d" % k)


def open_any(d, nfiles, rnd, flags):
    """One of the files, opened; (path, None) when it is just gone."""
    p = path_of(d, rnd.randrange(nfiles))
    try:
        return p, os.open(p, flags)
    except FileNotFoundError:
        return p, None


def grower(d, k, src, max_bytes, max_write, align, stop, seed, count):
    rnd = random.Random(seed)
    p = path_of(d, k)
    while not stop.value:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size >= max_bytes:
            os.close(fd)
            os.unlink(p)
            continue
        n = min(rnd.randint(1, max_write), max_bytes - size)
        if align:
            # whole pages from a page boundary: no page the file ends in
            # is ever cached before the write that fills it (see --align)
            n = max(n - (size + n) % PAGE, PAGE - size % PAGE)
        done = 0
        while done < n:
            w = os.pwrite(fd, src[size + done:size + n], size + done)
            done += w
        os.close(fd)
        with count.get_lock():
            count.value += 1


def rewriter(d, nfiles, src, stop, seed, count):
    rnd = random.Random(seed)
    while not stop.value:
        p, fd = open_any(d, nfiles, rnd, os.O_WRONLY)
        if fd is None:
            continue
        size = os.fstat(fd).st_size
        if size:
            off = rnd.randrange(size)
            n = min(rnd.randint(1, 1 << 20), size - off)
            os.pwrite(fd, src[off:off + n], off)
            with count.get_lock():
                count.value += 1
        os.close(fd)


def map_rewriter(d, nfiles, src, stop, seed, count):
    import mmap
    rnd = random.Random(seed)
    while not stop.value:
        p, fd = open_any(d, nfiles, rnd, os.O_RDWR)
        if fd is None:
            continue
        size = os.fstat(fd).st_size
        m = None
        if size:
            m = mmap.mmap(fd, size, mmap.MAP_SHARED,
                          mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)  # the mapping keeps the file (a dup inside mmap)
        if m is not None:
            for _ in range(4):
                off = rnd.randrange(size)
                n = min(rnd.randint(1, 1 << 18), size - off)
                m[off:off + n] = src[off:off + n]
            m.close()
            with count.get_lock():
                count.value += 1


def mover(d, nfiles, stop, seed, count):
    rnd = random.Random(seed)
    while not stop.value:
        p = path_of(d, rnd.randrange(nfiles))
        try:
            os.setxattr(p, "user.tierfs.tier", rnd.choice(TIERS))
            with count.get_lock():
                count.value += 1
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOSPC,
                               errno.ENODEV, errno.ENOMEM):
                fail(stop, "move of %s: %s" % (p, e))
                return


def check(stop, p, fd, off, want, got, src, n):
    if len(got) != want:
        after = os.lseek(fd, 0, os.SEEK_END)
        again = len(os.pread(fd, want, off))
        fail(stop, "%s: read of %d at %d gave %d (size %d before the "
             "read, %d after; read again: %d)" %
             (p, want, off, len(got), n, after, again))
        return False
    if got != src[off:off + want]:
        bad = next(i for i in range(want) if got[i] != src[off + i])
        end = bad
        while end < want and got[end] != src[off + end]:
            end += 1
        zero = got[bad:end].count(0)
        again = os.pread(fd, want, off) == src[off:off + want]
        fail(stop, "%s: wrong bytes [%d, %d), %d of them zero (read of %d "
             "at %d, size %d; read again: %s)" %
             (p, off + bad, off + end, zero, want, off, n,
              "right" if again else "wrong"))
        return False
    return True


def size_of(fd, use_stat):
    if use_stat:
        return os.fstat(fd).st_size
    return os.lseek(fd, 0, os.SEEK_END)


def reader(d, nfiles, src, stop, seed, count, use_stat):
    rnd = random.Random(seed)
    while not stop.value:
        p, fd = open_any(d, nfiles, rnd, os.O_RDONLY)
        if fd is None:
            continue
        try:
            n = size_of(fd, use_stat)
            if rnd.random() < 0.5:
                # the whole visible prefix, as cmp -n does
                off = 0
                while off < n and not stop.value:
                    want = min(rnd.choice((4096, 32768, 131072, 1 << 20,
                                           rnd.randint(1, 1 << 20))),
                               n - off)
                    got = os.pread(fd, want, off)
                    if not check(stop, p, fd, off, want, got, src, n):
                        return
                    off += want
            else:
                for _ in range(8):
                    if not n:
                        break
                    off = rnd.randrange(n)
                    want = min(rnd.randint(1, 3 << 19), n - off)
                    got = os.pread(fd, want, off)
                    if not check(stop, p, fd, off, want, got, src, n):
                        return
                    n = size_of(fd, use_stat)
            with count.get_lock():
                count.value += 1
        finally:
            os.close(fd)


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("seconds", type=float)
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--max-mb", type=int, default=24)
    ap.add_argument("--max-write", type=int, default=3 << 19,
                    help="largest write of a grower, bytes")
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--movers", type=int, default=2)
    ap.add_argument("--map-rewriters", type=int, default=0)
    ap.add_argument("--rewriters", type=int, default=1)
    ap.add_argument("--align", action="store_true",
                    help="growers write whole pages at page boundaries")
    ap.add_argument("--stat", action="store_true",
                    help="take the size with fstat(), not SEEK_END")
    a = ap.parse_args()
    max_bytes = a.max_mb << 20
    src = random.Random(a.seed).randbytes(max_bytes)
    stop = mp.Value("i", 0)
    counts = {k: mp.Value("l", 0) for k in
              ("writes", "rewrites", "maps", "moves", "reads")}
    procs = []
    for k in range(a.files):
        procs.append(mp.Process(target=grower, args=(
            a.dir, k, src, max_bytes, a.max_write, a.align, stop,
            a.seed * 100 + k,
            counts["writes"])))
    for k in range(a.rewriters):
        procs.append(mp.Process(target=rewriter, args=(
            a.dir, a.files, src, stop, a.seed * 100 + 50 + k,
            counts["rewrites"])))
    for k in range(a.map_rewriters):
        procs.append(mp.Process(target=map_rewriter, args=(
            a.dir, a.files, src, stop, a.seed * 100 + 55 + k,
            counts["maps"])))
    for k in range(a.movers):
        procs.append(mp.Process(target=mover, args=(
            a.dir, a.files, stop, a.seed * 100 + 60 + k, counts["moves"])))
    for k in range(a.readers):
        procs.append(mp.Process(target=reader, args=(
            a.dir, a.files, src, stop, a.seed * 100 + 70 + k,
            counts["reads"], a.stat)))
    for p in procs:
        p.start()
    # Past the time, until each kind of process has done something (a
    # loaded machine is slow, not wrong), for ten times as long at most.
    start = time.monotonic()
    while not stop.value:
        if any(p.exitcode not in (None, 0) for p in procs):
            stop.value = 2
            break
        t = time.monotonic() - start
        ran = all(v.value for k, v in counts.items()
                  if k == "writes" or (k == "moves" and a.movers) or
                  (k == "rewrites" and a.rewriters) or
                  (k == "maps" and a.map_rewriters) or
                  (k == "reads" and a.readers))
        if t >= a.seconds and ran:
            break
        if t >= 10 * a.seconds:
            fail(stop, "not every process got to run in %.0f s" % t)
            break
        time.sleep(0.1)
    bad = stop.value == 2
    stop.value = stop.value or 1
    for p in procs:
        p.join()
        bad = bad or p.exitcode != 0
    print(" ".join("%s=%d" % (k, v.value) for k, v in counts.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
