#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""shapes.py MNT REF SHAPE[,SHAPE...] TIER[,TIER...] STEP [fsync]: a file of a
given shape on a tierfs mount per TIER, and its twin on an ordinary file system,
for the persistent-mount tests (persist_shapes.bats). SHAPE "all" is every
shape. Shapes are sequences of writes, truncates and
fallocate calls: allocation past the end (KEEP_SIZE), holes at either end,
a size past the last chunk, a file of no bytes with pages allocated,
punched ranges.

STEP is one of
  make    create MNT/SHAPE.TIER and REF/SHAPE.TIER, apply the shape's
          operations to both, move the tierfs file to TIER (device, host,
          disk; inplace: to disk before the operations too, so that a file
          too large to be brought up is written in place there)
  check   compare what the mount has with the twin and with a page model
          of what tmpfs keeps: size, every byte, the data extents
          (SEEK_DATA/SEEK_HOLE), and at least the room fallocate took and
          nothing wrote (st_blocks)
  more    apply a second round of operations (writes into the allocated
          range, a punch, a grow) and move the file to TIER again
  check2  check after both rounds
With fsync, make and more fsync each tierfs file once its operations are
done, before it moves: what a kill -9 after that must keep.
Exit 1 with what differs.
"""

import ctypes
import errno
import os
import random
import sys

PG = 4096
MiB = 1 << 20
KEEP, PUNCH = 0x1, 0x2
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64)

# (op, args...): ("w", off, len) writes bytes made from the offset,
# ("t", size), ("f", mode, off, len).
SHAPES = {
    # the three the issue found dropped
    "keep-past-eof": [("w", 0, 300000), ("f", KEEP, 300000, MiB)],
    "empty-keep": [("f", KEEP, 0, 64 << 10)],
    "keep-past-eof-big": [("w", 0, 3000000), ("f", KEEP, 3000000, 4 * MiB)],
    # and what was kept, for contrast
    "keep-inside": [("w", 0, 3000), ("f", KEEP, 0, 8 << 10)],
    # allocation far past the end, in a chunk of its own
    "keep-far": [("w", 0, 5000), ("f", KEEP, 7 * MiB + 100, 9000)],
    # holes at both ends, and a size past the last chunk
    "holes-both-ends": [("t", 5 * MiB), ("w", 2 * MiB + 100, 300000)],
    "size-past-chunks": [("w", 0, 5000), ("t", 10 * MiB + 3)],
    # allocated inside the file, then the file grown over what KEEP_SIZE
    # took past its end: unwritten pages inside the size
    "keep-then-grow": [("w", 0, 10000), ("f", KEEP, 10000, MiB),
                       ("t", 600000)],
    # punched: whole chunks, pages, part of a page
    "punched": [("w", 0, 3 * MiB + 7), ("f", PUNCH | KEEP, 100000, MiB),
                ("f", PUNCH | KEEP, 2 * MiB + 10, 5000),
                ("f", PUNCH | KEEP, 3 * MiB - 4096, 8192)],
    # plainly fallocated, size and all
    "allocated": [("f", 0, 0, 2 * MiB + 5), ("w", MiB, 100)],
}

MORE = [("w", "end", 5000), ("f", PUNCH | KEEP, 4096, 8192),
        ("f", KEEP, "end", 200000), ("w", "end+300000", 10)]


def data(off, n):
    """Bytes that depend on where they are: a shift or a loss shows."""
    first, last = off // PG, (off + n - 1) // PG
    pages = b"".join(random.Random(p).randbytes(PG)
                     for p in range(first, last + 1))
    return pages[off - first * PG:off - first * PG + n]


def fallocate(fd, mode, off, n):
    if LIBC.fallocate(fd, mode, off, n) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), "fallocate")


class Model:
    """What tmpfs keeps of a file, page by page: 'w' written, 'u'
    allocated and unwritten (a hole to SEEK_DATA)."""

    def __init__(self):
        self.size = 0
        self.pages = {}

    def apply(self, op):
        if op[0] == "w":
            _, off, n = op
            for p in range(off // PG, (off + n - 1) // PG + 1):
                self.pages[p] = "w"
            self.size = max(self.size, off + n)
        elif op[0] == "t":
            # only a cut frees pages, those fallocate kept past the end
            # too; growing keeps them
            if op[1] < self.size:
                keep = (op[1] + PG - 1) // PG
                self.pages = {p: v for p, v in self.pages.items()
                              if p < keep}
            self.size = op[1]
        elif op[1] & PUNCH:
            _, _, off, n = op
            for p in range((off + PG - 1) // PG, (off + n) // PG):
                self.pages.pop(p, None)
        else:
            mode, off, n = op[1:]
            for p in range(off // PG, (off + n - 1) // PG + 1):
                # taken twice: data (zeroes) from then on
                self.pages[p] = "w" if p in self.pages else "u"
            if not mode & KEEP:
                self.size = max(self.size, off + n)

    def extents(self):
        out = []
        last = (self.size + PG - 1) // PG
        for p in sorted(self.pages):
            if p >= last or self.pages[p] != "w":
                continue
            lo, hi = p * PG, min((p + 1) * PG, self.size)
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return out

    def unwritten(self):
        return sum(PG for v in self.pages.values() if v == "u")


def resolve(op, size):
    """MORE's "end" offsets, against the size before the op."""
    out = []
    for a in op:
        if isinstance(a, str) and a.startswith("end"):
            a = size + int(a[3:] or 0)
        out.append(a)
    return tuple(out)


def do(fd, op):
    if op[0] == "w":
        os.pwrite(fd, data(op[1], op[2]), op[1])
    elif op[0] == "t":
        os.ftruncate(fd, op[1])
    else:
        fallocate(fd, op[1], op[2], op[3])


def extents(path):
    fd = os.open(path, os.O_RDONLY)
    out = []
    try:
        off = 0
        while True:
            try:
                d = os.lseek(fd, off, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    return out
                raise
            h = os.lseek(fd, d, os.SEEK_HOLE)
            out.append((d, h))
            off = h
    finally:
        os.close(fd)


def move(path, tier):
    try:
        os.setxattr(path, "user.tierfs.tier", tier.encode())
    except OSError as e:
        # an empty file has no device copy to make
        if e.errno not in (errno.ENOSPC, errno.ENODEV, errno.EOPNOTSUPP):
            raise


def ops_of(shape, rounds):
    model, ops = Model(), []
    for op in SHAPES[shape]:
        ops.append(op)
        model.apply(op)
    if rounds > 1:
        for op in MORE:
            op = resolve(op, model.size)
            ops.append(op)
            model.apply(op)
    return ops, model


def main():
    mnt, ref, shapes, tiers, step = sys.argv[1:6]
    sync = sys.argv[6:] == ["fsync"]
    if len(sys.argv) > 7 or sys.argv[6:] not in ([], ["fsync"]):
        sys.exit("usage: shapes.py MNT REF SHAPE TIER STEP [fsync]")
    shapes = list(SHAPES) if shapes == "all" else shapes.split(",")
    return max(one(mnt, ref, shape, tier, step, sync)
               for shape in shapes for tier in tiers.split(","))


def one(mnt, ref, shape, tier, step, sync=False):
    name = "%s.%s" % (shape, tier)
    t, r = os.path.join(mnt, name), os.path.join(ref, name)
    if step in ("make", "more"):
        ops, _ = ops_of(shape, 1)
        if step == "more":
            ops = ops_of(shape, 2)[0][len(ops):]
        for path in (t, r):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if path == t and tier == "inplace":
                move(t, "disk")
            for op in ops:
                do(fd, op)
            if sync and path == t:
                os.fsync(fd)
            os.close(fd)
        move(t, "disk" if tier == "inplace" else tier)
        return 0
    _, model = ops_of(shape, 2 if step == "check2" else 1)
    bad = []
    st = os.stat(t)
    # before anything reads it: st_blocks of the tier it came back on
    room = st.st_blocks * 512
    if st.st_size != model.size or os.stat(r).st_size != model.size:
        bad.append("size %d, twin %d, want %d" % (
            st.st_size, os.stat(r).st_size, model.size))
    try:
        where = os.getxattr(t, "user.tierfs.tier").decode()
    except OSError:
        where = "disk"  # not tierfs: tmpfs, checking the model
    # On disk every page fallocate took keeps its room; the device copy
    # is the file's bytes alone, the host copy cut at its end.
    if where == "disk" and room < model.unwritten():
        bad.append("st_blocks %d: %d bytes, less than the %d fallocate "
                   "took" % (st.st_blocks, room, model.unwritten()))
    with open(t, "rb") as f:
        got = f.read()
    with open(r, "rb") as f:
        want = f.read()
    if got != want:
        at = next((i for i in range(min(len(got), len(want)))
                   if got[i] != want[i]), min(len(got), len(want)))
        bad.append("bytes differ from byte %d (%d bytes, want %d)" % (
            at, len(got), len(want)))
    if extents(t) != model.extents():
        bad.append("data extents %r, want %r" % (extents(t),
                                                 model.extents()))
    if bad:
        print("%s: %s" % (name, "; ".join(bad)))
        return 1
    print("%s: ok, %d bytes, %d extents, %d KiB allocated" % (
        name, model.size, len(model.extents()), room // 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
