#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""random_io.py MNT REF SEED OPS [MAX]: random reads, writes, mmaps,
truncates, fallocate (KEEP_SIZE, punch hole), copy_file_range, syncs,
reopens and tier moves on a few files of up to MAX bytes (3 MiB; 8M or
more puts them on the disk tier of a small host limit) under MNT, each
mirrored by a file under REF (an ordinary filesystem), every byte
compared.

Writes go through write(2), a second descriptor of the same file and
shared mappings; reads through read(2) on either descriptor and the
mapping. Every 25 operations and at the end each file is compared whole,
size included; at the end each is also moved to disk (which drops its
cached pages) and compared again as read back from there; whole files
are also read with O_DIRECT, which reaches the daemon past the page
cache. The first
difference ends the run with the operation, offset and bytes, and exit 1.
"""

import ctypes
import errno
import mmap
import os
import random
import sys

MAX_SIZE = 3 << 20
NFILES = 3
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x1, 0x2
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64)


def fallocate(fd, mode, off, n):
    if LIBC.fallocate(fd, mode, off, n) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), "fallocate mode %d off %#x len %#x"
                      % (mode, off, n))


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


class Pair:
    def __init__(self, mnt, ref, k):
        self.path = os.path.join(mnt, f"f{k}")
        self.ref = os.path.join(ref, f"f{k}")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.fd2 = os.open(self.path, os.O_RDWR)
        self.rfd = os.open(self.ref, os.O_RDWR | os.O_CREAT, 0o644)
        self.map = None

    def size(self):
        return os.fstat(self.rfd).st_size

    def unmap(self):
        if self.map is not None:
            self.map.close()
            self.map = None

    def mapped(self):
        size = self.size()
        if self.map is not None and len(self.map) != size:
            self.unmap()
        if self.map is None and size:
            self.map = mmap.mmap(self.fd, size)
        return self.map

    def close(self):
        self.unmap()
        for fd in (self.fd, self.fd2, self.rfd):
            os.close(fd)


def fail(what, p, off, got, want):
    at = next((i for i in range(min(len(got), len(want)))
               if got[i] != want[i]), min(len(got), len(want)))
    sys.exit(f"random_io: {what} of {p.path}: differs at byte {off + at} "
             f"(got {len(got)} bytes, want {len(want)}; "
             f"{got[at:at + 8].hex()} vs {want[at:at + 8].hex()})")


def read_all(fd, size):
    got = b""
    while len(got) < size + 1:
        b = os.pread(fd, size + 1 - len(got), len(got))
        if not b:
            break
        got += b
    return got


def check_whole(p, what):
    size = p.size()
    st = os.stat(p.path).st_size
    if st != size:
        sys.exit(f"random_io: {what}: size of {p.path} is {st}, want {size}")
    want = os.pread(p.rfd, size, 0)
    got = read_all(p.fd, size)
    if got != want:
        fail(what, p, 0, got, want)
    # O_DIRECT reads what the daemon holds, past the page cache (which
    # the kernel writes back first): cached pages cannot hide a loss.
    fd = os.open(p.path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = read_all(fd, size)
    finally:
        os.close(fd)
    if got != want:
        fail(what + ", O_DIRECT", p, 0, got, want)


def move(p, tier):
    try:
        os.setxattr(p.path, "user.tierfs.tier", tier.encode())
    except OSError as e:
        # a tier too small for the file refuses it
        if e.errno not in (errno.EBUSY, errno.ENODEV, errno.ENOSPC):
            raise


def main():
    global MAX_SIZE
    mnt, ref, seed, nops = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    if len(sys.argv) > 5:
        MAX_SIZE = size_arg(sys.argv[5])
    rng = random.Random(seed)
    files = [Pair(mnt, ref, k) for k in range(NFILES)]
    counts = {}
    for n in range(nops):
        p = rng.choice(files)
        size = p.size()
        op = rng.choices(
            ["write", "write2", "read", "read2", "mwrite", "mread",
             "truncate", "fsync", "reopen", "move", "extend", "punch",
             "keep", "copy"],
            [20, 8, 15, 6, 10, 8, 6, 3, 3, 4, 2, 4, 3, 3])[0]
        counts[op] = counts.get(op, 0) + 1
        if op in ("write", "write2"):
            off = rng.randrange(0, MAX_SIZE)
            ln = min(rng.choice([1, 100, 4096, 5000, 65536, 300000]),
                     MAX_SIZE - off)
            data = rng.randbytes(ln)
            if off + ln > size:
                p.unmap()
            fd = p.fd if op == "write" else p.fd2
            if os.pwrite(fd, data, off) != ln:
                sys.exit(f"random_io: short write to {p.path}")
            os.pwrite(p.rfd, data, off)
        elif op in ("read", "read2"):
            off = rng.randrange(0, MAX_SIZE)
            ln = rng.choice([1, 4096, 10000, 1 << 20])
            fd = p.fd if op == "read" else p.fd2
            got = os.pread(fd, ln, off)
            want = os.pread(p.rfd, ln, off)
            if got != want:
                fail(op, p, off, got, want)
        elif op == "mwrite" and size:
            m = p.mapped()
            off = rng.randrange(0, size)
            ln = min(rng.choice([1, 512, 4096, 20000]), size - off)
            data = rng.randbytes(ln)
            m[off:off + ln] = data
            os.pwrite(p.rfd, data, off)
            if rng.random() < 0.3:
                m.flush()
        elif op == "mread" and size:
            m = p.mapped()
            off = rng.randrange(0, size)
            ln = min(rng.choice([1, 4096, 65536]), size - off)
            want = os.pread(p.rfd, ln, off)
            if m[off:off + ln] != want:
                fail(op, p, off, m[off:off + ln], want)
        elif op == "truncate":
            new = rng.choice([0, rng.randrange(0, MAX_SIZE),
                              size // 2, size + 1])
            p.unmap()
            if rng.random() < 0.5:
                os.ftruncate(p.fd, new)
            else:
                os.truncate(p.path, new)
            os.ftruncate(p.rfd, new)
        elif op == "extend":
            new = min(size + rng.randrange(1, 1 << 20), MAX_SIZE)
            if new > size:
                p.unmap()
                os.posix_fallocate(p.fd, 0, new)
                os.ftruncate(p.rfd, new)
        elif op in ("punch", "keep"):
            off = rng.randrange(0, MAX_SIZE)
            ln = rng.choice([1, 100, 4096, 5000, 65536, 300000, 1 << 20])
            mode = FALLOC_FL_KEEP_SIZE | (FALLOC_FL_PUNCH_HOLE
                                          if op == "punch" else 0)
            fallocate(p.fd, mode, off, ln)
            fallocate(p.rfd, mode, off, ln)
        elif op == "copy":
            q = rng.choice(files)
            qsize = q.size()
            if not qsize:
                continue
            soff = rng.randrange(0, qsize)
            ln = min(rng.choice([1, 4096, 5000, 65536, 300000, 1 << 20]),
                     qsize - soff)
            doff = rng.randrange(0, MAX_SIZE - ln)
            if q is p and abs(doff - soff) < ln:
                doff = None  # overlapping ranges of one file: EINVAL
            if doff is not None:
                if doff + ln > size:
                    p.unmap()
                # the kernel copies what the daemon says it copied: a
                # short copy goes on where it stopped
                done = 0
                while done < ln:
                    n = os.copy_file_range(q.fd, p.fd, ln - done,
                                           soff + done, doff + done)
                    if n <= 0:
                        break
                    done += n
                if done != ln:
                    sys.exit(f"random_io: copy_file_range {q.path} -> "
                             f"{p.path}: {done} of {ln} bytes")
                os.pwrite(p.rfd, os.pread(q.rfd, ln, soff), doff)
        elif op == "fsync":
            if p.map is not None:
                p.map.flush()
            os.fsync(p.fd)
        elif op == "reopen":
            p.unmap()
            os.close(p.fd)
            flags = os.O_RDWR
            if rng.random() < 0.2:
                flags |= os.O_TRUNC
                os.ftruncate(p.rfd, 0)
            p.fd = os.open(p.path, flags)
        elif op == "move":
            move(p, rng.choice(["disk", "host", "disk", "device"]))
        if n % 25 == 24:
            for q in files:
                check_whole(q, f"after op {n} ({op})")
    for q in files:
        check_whole(q, "at the end")
        q.unmap()
        os.fsync(q.fd)
        move(q, "disk")
        check_whole(q, "read back from disk")
        q.close()
    print("random_io: " + " ".join(f"{k}={v}" for k, v in
                                    sorted(counts.items())))


if __name__ == "__main__":
    main()
