#!/usr/bin/python3
"""Randomized differential test: tierfs against a plain tmpfs directory.

Thousands of random operations (writes at random offsets and sizes, sparse
and across chunk boundaries, truncates that grow and shrink, reads, renames,
unlinks, hard links, operations through held-open descriptors, fsync,
chattr flags (immutable, append-only, nodump, noatime), O_TMPFILE files
named or not by linkat, fallocate (allocate, KEEP_SIZE, PUNCH_HOLE),
SEEK_DATA/SEEK_HOLE, copy_file_range, user xattrs, and explicit moves
through user.tierfs.tier) are applied to a directory on a
tierfs mount with tiny limits and to a reference directory on tmpfs, side by
side. Every operation must give the same result (value or errno) on both,
and after every step the files compare equal: existence, size and link
count, mode and chattr flags of every name, the contents and the data
extents (as SEEK_DATA/SEEK_HOLE give them) of what the step touched, and
(every
--full-every steps, and at the end) the contents of every file. Tier
usage must stay within each tier's limit.

Everything random comes from --seed, so a failure reproduces with the same
--seed and --ops. On a mismatch the seed, the step and the op log are printed
and the exit status is 1.

  difftest.py --tierfs BIN [--seed N] [--ops N]      mounts tierfs itself
  difftest.py --mount DIR --ref DIR [--seed N] ...   uses existing dirs

With --tierfs the mount uses device_backend=sim,device_limit=256K,
host_limit=512K,disk_chunk_size=64K (change with --opts).

--persist N (with --tierfs) mounts with disk_persist=yes and, every N
steps and at the end, closes every descriptor, unmounts (a clean stop),
mounts again and compares every file as it came back, before anything
reads it: size, links, mode, flags, user xattrs, data extents, every
byte, and the room fallocate took (see check_restart()); the start must
have dropped, mended and rolled back nothing. --max-size (1536K) bounds
the files; 16M puts most bytes on the disk tier.
"""
import argparse
import ctypes
import errno
import fcntl
import hashlib
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

CHUNK = 64 * 1024
DEFAULT_OPTS = ("device_backend=sim,device_limit=256K,host_limit=512K,"
                "disk_chunk_size=64K")
MAX_SIZE = 1536 * 1024
TIERS = ("device", "host", "disk")
XA_TIER = "user.tierfs.tier"
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FL_IMMUTABLE, FL_APPEND, FL_NODUMP, FL_NOATIME = 0x10, 0x20, 0x40, 0x80
FL_ALL = FL_IMMUTABLE | FL_APPEND | FL_NODUMP | FL_NOATIME
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x1, 0x2
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64)


class Mismatch(Exception):
    pass


def err_name(e):
    return errno.errorcode.get(e, str(e))


def get_flags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS,
                                              bytes(4)))[0] & FL_ALL
    finally:
        os.close(fd)


def set_flags(path, flags):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


def clear_flags(top):
    """Best effort, so that a tree with immutable files can be removed."""
    for d, dirs, files in os.walk(top):
        for n in dirs + files + ([] if d != top else ["."]):
            try:
                set_flags(os.path.join(d, n), 0)
            except OSError:
                pass


def linkat_empty(fd, path):
    """linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH): name an O_TMPFILE."""
    if LIBC.linkat(fd, b"", AT_FDCWD, path.encode(), AT_EMPTY_PATH):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def fallocate(path, mode, off, n):
    """fallocate(2) with its mode, which os.posix_fallocate lacks."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if LIBC.fallocate(fd, mode, off, n) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)


def extents(path):
    """The data extents of a file as SEEK_DATA and SEEK_HOLE give them."""
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


def user_xattrs(path):
    """A file's user.* attributes, names and values."""
    return sorted((k, os.getxattr(path, k, follow_symlinks=False))
                  for k in os.listxattr(path, follow_symlinks=False)
                  if k.startswith("user."))


def call(fn, *args):
    """('ok', value) or ('err', errno name)."""
    try:
        return ("ok", fn(*args))
    except OSError as e:
        return ("err", err_name(e.errno))


class Daemon:
    """A tierfs mount of our own, in the foreground, in the background."""

    def __init__(self, binary, opts, keep_log):
        self.tmp = tempfile.mkdtemp(prefix="tierfs-diff.", dir="/tmp")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.spill = os.path.join(self.tmp, "spill")
        self.log = keep_log or os.path.join(self.tmp, "tierfs.log")
        os.mkdir(self.mnt)
        os.mkdir(self.spill)
        self.binary = binary
        self.allopts = "disk_path=%s,%s" % (self.spill, opts)
        self.logf = open(self.log, "w")
        self.start()

    def restart(self):
        """A clean stop, and a start on what it left; the log goes on."""
        self.stop()
        self.logf = open(self.log, "a")
        self.start()

    def start(self):
        self.log_at = self.logf.tell()
        self.proc = subprocess.Popen([self.binary, self.mnt, "-f", "-o",
                                      self.allopts],
                                     stdout=self.logf, stderr=self.logf)
        for _ in range(400):
            if os.path.ismount(self.mnt):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.025)
        self.logf.flush()
        with open(self.log) as f:
            sys.stderr.write(f.read())
        self.stop()
        raise SystemExit("difftest: tierfs did not mount")

    def stop(self):
        if os.path.ismount(self.mnt):
            if subprocess.call(["fusermount3", "-u", self.mnt],
                               stderr=subprocess.DEVNULL):
                subprocess.call(["fusermount3", "-uz", self.mnt])
        # A persistent mount writes out what it holds before it exits:
        # files of 16 MiB in 64 KiB chunks take a while on a loaded
        # machine, and a kill here would be a crash, not a clean stop.
        try:
            self.proc.wait(timeout=120 if "disk_persist=yes" in
                           self.allopts else 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            sys.stderr.write("difftest: tierfs did not exit after unmount\n")
        self.logf.close()

    def log_since_start(self):
        with open(self.log, errors="replace") as f:
            f.seek(self.log_at)
            return f.read()

    def sanitizer_report(self):
        with open(self.log, errors="replace") as f:
            text = f.read()
        for pat in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                    "runtime error:"):
            if pat in text:
                return text
        return None

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


class Test:
    def __init__(self, args, seed, mnt, ref, own_mount):
        self.args = args
        self.daemon = None  # set for --persist: restarted every N steps
        self.restarts = 0
        # inodes (tmpfs's numbers) whose pages past the end may hold
        # data: fallocate took pages there a second time
        self.keep_twice = set()
        self.keep_past = set()
        self.seed = seed
        self.rng = random.Random(seed)
        self.mnt = mnt  # the tierfs directory we work in
        self.ref = ref  # the tmpfs directory
        self.root = None  # the tierfs mount root, for stats
        self.own_mount = own_mount
        self.log = []
        self.step = 0
        self.names = (["f%d" % i for i in range(8)] +
                      ["d1/g%d" % i for i in range(4)])
        self.fds = []  # [name opened as, tierfs fd, ref fd, flags desc]
        self.touched = set()
        self.counts = {}
        self.next_full = 0

    # ---- helpers ----

    def t(self, name):
        return os.path.join(self.mnt, name)

    def r(self, name):
        return os.path.join(self.ref, name)

    def note(self, s):
        self.log.append("%d: %s" % (self.step, s))

    def fail(self, what):
        raise Mismatch(what)

    def same(self, what, a, b):
        if a != b:
            self.fail("%s: tierfs %r, tmpfs %r" % (what, short(a), short(b)))

    def existing(self):
        return [n for n in self.names if os.path.lexists(self.r(n))]

    def pick_name(self, exist_bias=0.8):
        ex = self.existing()
        if ex and self.rng.random() < exist_bias:
            return self.rng.choice(ex)
        return self.rng.choice(self.names)

    def size_of(self, name):
        try:
            return os.stat(self.r(name)).st_size
        except OSError:
            return 0

    def gen_data(self, n):
        rng = self.rng
        kind = rng.random()
        if kind < 0.4:
            return rng.randbytes(n)
        if kind < 0.7:
            pat = rng.randbytes(rng.randint(1, 64))
            return (pat * (n // len(pat) + 1))[:n]
        if kind < 0.85:
            return bytes(n)
        half = n // 2
        return bytes(half) + rng.randbytes(n - half)

    def gen_off_len(self, size):
        rng = self.rng
        k = rng.random()
        if k < 0.35:
            off = rng.randint(0, size + 16)
        elif k < 0.6:  # around a chunk boundary
            off = max(0, rng.randint(0, MAX_SIZE // CHUNK) * CHUNK +
                      rng.randint(-200, 200))
        elif k < 0.75:  # sparse: well past the end
            off = size + rng.randint(1, 512 * 1024)
        elif k < 0.85:
            off = 0
        else:
            off = size
        k = rng.random()
        if k < 0.35:
            n = rng.randint(1, 512)
        elif k < 0.65:
            n = rng.randint(1, CHUNK)
        elif k < 0.9:
            n = rng.randint(CHUNK, 3 * CHUNK + 1000)
        else:
            n = rng.randint(256 * 1024, 600 * 1024)
        if off > MAX_SIZE:
            off = rng.randint(0, MAX_SIZE)
        if off + n > MAX_SIZE:
            n = max(1, MAX_SIZE - off)
        return off, n

    def gen_size(self, size):
        rng = self.rng
        k = rng.random()
        if k < 0.15:
            return 0
        if k < 0.45:
            return rng.randint(0, size) if size else 0
        if k < 0.7:
            return rng.randint(0, MAX_SIZE // CHUNK) * CHUNK + \
                rng.choice((-1, 0, 0, 1))
        return min(MAX_SIZE, size + rng.randint(1, 300 * 1024))

    def both(self, what, fn_t, fn_r):
        """Run the op on both sides; results must agree. Returns it."""
        a = call(fn_t)
        b = call(fn_r)
        self.same(what + " result", a, b)
        return a

    # ---- operations ----

    def op_write(self):
        name = self.pick_name(0.85)
        off, n = self.gen_off_len(self.size_of(name))
        data = self.gen_data(n)
        trunc = self.rng.random() < 0.1
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0)
        self.note("write %s off=%d len=%d%s" % (name, off, n,
                                                 " O_TRUNC" if trunc else ""))

        def w(path):
            fd = os.open(path, flags, 0o644)
            try:
                done = 0
                while done < n:
                    done += os.pwrite(fd, data[done:], off + done)
                return done
            finally:
                os.close(fd)
        self.both("write", lambda: w(self.t(name)), lambda: w(self.r(name)))
        self.touched.add(name)

    def op_truncate(self):
        name = self.pick_name(0.9)
        size = self.gen_size(self.size_of(name))
        self.note("truncate %s %d" % (name, size))
        self.both("truncate", lambda: os.truncate(self.t(name), size),
                  lambda: os.truncate(self.r(name), size))
        self.touched.add(name)

    def op_read(self):
        name = self.pick_name(0.95)
        size = self.size_of(name)
        off = self.rng.randint(0, size + 1000)
        n = self.rng.randint(1, 300 * 1024)
        self.note("read %s off=%d len=%d" % (name, off, n))

        def rd(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.pread(fd, n, off)
            finally:
                os.close(fd)
        self.both("read", lambda: rd(self.t(name)), lambda: rd(self.r(name)))

    def op_rename(self):
        a = self.pick_name(0.9)
        b = self.pick_name(0.4)
        self.note("rename %s %s" % (a, b))
        self.both("rename", lambda: os.rename(self.t(a), self.t(b)),
                  lambda: os.rename(self.r(a), self.r(b)))
        self.touched.update((a, b))

    def op_unlink(self):
        name = self.pick_name(0.9)
        self.note("unlink %s" % name)
        self.both("unlink", lambda: os.unlink(self.t(name)),
                  lambda: os.unlink(self.r(name)))
        self.touched.add(name)

    def op_link(self):
        a = self.pick_name(0.9)
        b = self.pick_name(0.3)
        self.note("link %s %s" % (a, b))
        self.both("link", lambda: os.link(self.t(a), self.t(b)),
                  lambda: os.link(self.r(a), self.r(b)))
        self.touched.update((a, b))

    def op_move(self):
        name = self.pick_name(0.95)
        tier = self.rng.choice(TIERS + ("disk",))
        self.note("setfattr %s=%s %s" % (XA_TIER, tier, name))
        exists = os.path.exists(self.r(name))
        res = call(lambda: os.setxattr(self.t(name), XA_TIER, tier.encode()))
        if not exists:
            self.same("move of a missing file", res, ("err", "ENOENT"))
            return
        size = self.size_of(name)
        if res[0] == "err":
            # Only a tier without room for the whole buffer may refuse it.
            # Without a device tier a move there is ENODEV.
            if not ((res[1] == "ENOSPC" and tier != "disk") or
                    (res[1] == "ENODEV" and tier == "device")):
                self.fail("move %s (%d bytes) to %s: %s" %
                          (name, size, tier, res[1]))
            self.count("move-" + res[1].lower())
            return
        got = call(lambda: os.getxattr(self.t(name), XA_TIER))
        if got[0] != "ok" or got[1].decode() not in TIERS:
            self.fail("tier of %s after a move to %s: %r" % (name, tier, got))
        # The background spiller may already have moved it further down,
        # never up.
        now = got[1].decode()
        if TIERS.index(now) < TIERS.index(tier):
            self.fail("%s is on %s after a move down to %s" %
                      (name, now, tier))
        self.count("move-" + tier + ("" if now == tier else "-then-lower"))

    def op_open(self):
        if len(self.fds) >= 3:
            return self.op_close()
        name = self.pick_name(0.8)
        append = self.rng.random() < 0.2
        flags = os.O_RDWR | os.O_CREAT | (os.O_APPEND if append else 0)
        self.note("open %s%s -> #%d" % (name, " O_APPEND" if append else "",
                                        len(self.fds)))
        a = call(lambda: os.open(self.t(name), flags, 0o644))
        b = call(lambda: os.open(self.r(name), flags, 0o644))
        if a[0] == "ok" and b[0] == "ok":
            self.fds.append([name, a[1], b[1], append])
        else:
            for x in (a, b):
                if x[0] == "ok":
                    os.close(x[1])
            self.same("open result", a[0], b[0])
            self.same("open result", a, b)
        self.touched.add(name)

    def op_close(self):
        if not self.fds:
            return self.op_open()
        i = self.rng.randrange(len(self.fds))
        name, ft, fr, _ = self.fds.pop(i)
        self.note("close #%d (%s)" % (i, name))
        self.both("close", lambda: os.close(ft), lambda: os.close(fr))
        self.touched.add(name)

    def op_fd(self):
        """An operation through a held descriptor."""
        if not self.fds:
            return self.op_open()
        i = self.rng.randrange(len(self.fds))
        name, ft, fr, append = self.fds[i]
        size = os.fstat(fr).st_size
        k = self.rng.random()
        if k < 0.45:
            off, n = self.gen_off_len(size)
            data = self.gen_data(n)
            if append:
                self.note("#%d (%s) append len=%d" % (i, name, n))
                self.both("fd append", lambda: os.write(ft, data),
                          lambda: os.write(fr, data))
            else:
                self.note("#%d (%s) pwrite off=%d len=%d" % (i, name, off, n))
                self.both("fd pwrite", lambda: os.pwrite(ft, data, off),
                          lambda: os.pwrite(fr, data, off))
        elif k < 0.7:
            off = self.rng.randint(0, size + 100)
            n = self.rng.randint(1, 200 * 1024)
            self.note("#%d (%s) pread off=%d len=%d" % (i, name, off, n))
            self.both("fd pread", lambda: os.pread(ft, n, off),
                      lambda: os.pread(fr, n, off))
        elif k < 0.85:
            sz = self.gen_size(size)
            self.note("#%d (%s) ftruncate %d" % (i, name, sz))
            self.both("ftruncate", lambda: os.ftruncate(ft, sz),
                      lambda: os.ftruncate(fr, sz))
        else:
            self.note("#%d (%s) fsync" % (i, name))
            self.both("fsync", lambda: os.fsync(ft), lambda: os.fsync(fr))
        self.same("fstat size", os.fstat(ft).st_size, os.fstat(fr).st_size)
        self.touched.add(name)

    def held_inodes(self):
        return {os.fstat(fr).st_ino for _, _, fr, _ in self.fds}

    def op_chattr(self):
        """chattr on a file or d1. tierfs refuses writes through a
        descriptor opened before +i or +a, where tmpfs does not check
        again: such files are left alone. And like ext4, unlike tmpfs, it
        refuses any other flag change of an immutable inode."""
        rng = self.rng
        name = self.pick_name(0.9) if rng.random() < 0.85 else "d1"
        new = 0 if rng.random() < 0.4 else (
            (FL_IMMUTABLE if rng.random() < 0.3 else 0) |
            (FL_APPEND if rng.random() < 0.3 else 0) |
            (FL_NODUMP if rng.random() < 0.5 else 0) |
            (FL_NOATIME if rng.random() < 0.5 else 0))
        try:
            st = os.lstat(self.r(name))
            old = get_flags(self.r(name))
        except OSError:
            st, old = None, 0
        if (st and (new & (FL_IMMUTABLE | FL_APPEND)) and
                st.st_ino in self.held_inodes()):
            return
        self.note("chattr =%#x %s (was %#x)" % (new, name, old))
        if st and (old & new & FL_IMMUTABLE) and old != new:
            self.same("chattr of an immutable inode",
                      call(lambda: set_flags(self.t(name), new)),
                      ("err", "EPERM"))
            self.count("chattr-immutable-refused")
            return
        self.both("chattr", lambda: set_flags(self.t(name), new),
                  lambda: set_flags(self.r(name), new))
        self.touched.add(name)

    def op_tmpfile(self):
        """An O_TMPFILE file, written, maybe named by linkat."""
        rng = self.rng
        where = rng.choice(("", "d1"))
        excl = rng.random() < 0.2
        data = self.gen_data(rng.randint(1, 200 * 1024))
        target = self.pick_name(0.3) if rng.random() < 0.7 else None
        # The kernel refuses to link an O_EXCL tmpfile (ENOENT) before it
        # asks a FUSE daemon, and so before the immutable directory's
        # EPERM that tmpfs says first.
        if excl and target:
            dflags = call(get_flags, self.r(os.path.dirname(target) or "."))
            if dflags[0] == "ok" and dflags[1] & FL_IMMUTABLE:
                target = None
        flags = os.O_TMPFILE | os.O_RDWR | (os.O_EXCL if excl else 0)
        self.note("tmpfile in %s%s len=%d%s" % (
            where or ".", " O_EXCL" if excl else "", len(data),
            " -> " + target if target else ""))

        def tf(base):
            fd = os.open(os.path.join(base, where), flags, 0o640)
            try:
                os.write(fd, data)
                st = os.fstat(fd)
                out = [st.st_nlink, st.st_size, oct(st.st_mode)]
                if target:
                    out.append(call(lambda: linkat_empty(
                        fd, os.path.join(base, target))))
                return out
            finally:
                os.close(fd)
        self.both("tmpfile", lambda: tf(self.mnt), lambda: tf(self.ref))
        if target:
            self.touched.add(target)

    def op_fallocate(self):
        name = self.pick_name(0.9)
        size = self.size_of(name)
        off, n = self.gen_off_len(size)
        n = max(n, 1)
        mode = self.rng.choice((0, FALLOC_FL_KEEP_SIZE,
                                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
        self.note("fallocate %s mode=%d off=%d len=%d" % (name, mode, off, n))
        res = self.both("fallocate",
                        lambda: fallocate(self.t(name), mode, off, n),
                        lambda: fallocate(self.r(name), mode, off, n))
        if res[0] == "ok" and mode == FALLOC_FL_KEEP_SIZE and off + n > size:
            ino = os.stat(self.r(name)).st_ino
            if ino in self.keep_past:
                self.keep_twice.add(ino)
            self.keep_past.add(ino)
        self.touched.add(name)

    def op_seek(self):
        name = self.pick_name(0.95)
        off = self.rng.randint(0, self.size_of(name) + 5000)
        whence = self.rng.choice((os.SEEK_DATA, os.SEEK_HOLE))
        self.note("lseek %s %d %s" % (name, off, "SEEK_DATA"
                                      if whence == os.SEEK_DATA else
                                      "SEEK_HOLE"))

        def sk(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.lseek(fd, off, whence)
            finally:
                os.close(fd)
        self.both("lseek", lambda: sk(self.t(name)), lambda: sk(self.r(name)))

    def op_copy(self):
        """copy_file_range between two files (or within one), until it
        is done or the source ends, as cp does."""
        src = self.pick_name(0.95)
        dst = self.pick_name(0.8)
        size = self.size_of(src)
        soff = self.rng.randint(0, size + 100)
        doff, n = self.gen_off_len(self.size_of(dst))
        if src == dst and abs(soff - doff) < n:
            doff = soff + n  # one file's ranges may not overlap
        self.note("copy_file_range %s off=%d -> %s off=%d len=%d" %
                  (src, soff, dst, doff, n))

        def cp(base):
            fs = os.open(os.path.join(base, src), os.O_RDONLY)
            try:
                fd = os.open(os.path.join(base, dst), os.O_WRONLY)
            except OSError:
                os.close(fs)
                raise
            try:
                done = 0
                while done < n:
                    k = os.copy_file_range(fs, fd, n - done, soff + done,
                                           doff + done)
                    if not k:
                        break
                    done += k
                return done
            finally:
                os.close(fs)
                os.close(fd)
        self.both("copy_file_range", lambda: cp(self.mnt),
                  lambda: cp(self.ref))
        self.touched.add(dst)

    XATTRS = ("user.a", "user.b", "user.long")

    def op_xattr(self):
        name = self.pick_name(0.9)
        key = self.rng.choice(self.XATTRS)
        if self.rng.random() < 0.3:
            self.note("removexattr %s %s" % (name, key))
            self.both("removexattr",
                      lambda: os.removexattr(self.t(name), key),
                      lambda: os.removexattr(self.r(name), key))
        else:
            val = self.rng.randbytes(self.rng.choice((0, 1, 10, 300)))
            self.note("setxattr %s %s len=%d" % (name, key, len(val)))
            self.both("setxattr",
                      lambda: os.setxattr(self.t(name), key, val),
                      lambda: os.setxattr(self.r(name), key, val))
        self.touched.add(name)

    OPS = (
        (op_write, 26), (op_truncate, 8), (op_read, 12), (op_rename, 6),
        (op_unlink, 4), (op_link, 4), (op_move, 14), (op_open, 5),
        (op_close, 4), (op_fd, 17), (op_chattr, 4), (op_tmpfile, 3),
        (op_fallocate, 6), (op_seek, 6),
    )
    # with --persist or --extra-ops
    EXTRA_OPS = ((op_copy, 4), (op_xattr, 3))

    def count(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1

    # ---- checks ----

    def read_all(self, path):
        with open(path, "rb") as f:
            return f.read()

    def check_names(self):
        for n in self.names:
            a = call(lambda: os.lstat(self.t(n)))
            b = call(lambda: os.lstat(self.r(n)))
            self.same("exists %s" % n, a[0], b[0])
            if a[0] == "err":
                self.same("lstat %s" % n, a, b)
                continue
            sa, sb = a[1], b[1]
            self.same("size of %s" % n, sa.st_size, sb.st_size)
            self.same("links of %s" % n, sa.st_nlink, sb.st_nlink)
            self.same("mode of %s" % n, oct(sa.st_mode), oct(sb.st_mode))
            self.same("flags of %s" % n, call(get_flags, self.t(n)),
                      call(get_flags, self.r(n)))
            self.same("user xattrs of %s" % n, call(user_xattrs, self.t(n)),
                      call(user_xattrs, self.r(n)))
        # hard links: the same names share an inode on both sides
        groups_t, groups_r = {}, {}
        for n in self.existing():
            groups_t.setdefault(os.lstat(self.t(n)).st_ino, []).append(n)
            groups_r.setdefault(os.lstat(self.r(n)).st_ino, []).append(n)
        self.same("hard link groups", sorted(groups_t.values()),
                  sorted(groups_r.values()))

    def check_content(self, names):
        for n in sorted(names):
            if not os.path.exists(self.r(n)):
                continue
            a = call(lambda: self.read_all(self.t(n)))
            b = call(lambda: self.read_all(self.r(n)))
            if a != b:
                self.fail("content of %s: %s" % (n, describe_diff(a, b)))
            if a[0] == "ok":
                # (a directory's lseek is the kernel's, not the daemon's)
                self.same("data extents of %s" % n, call(extents, self.t(n)),
                          call(extents, self.r(n)))
                xs = call(lambda: os.getxattr(self.t(n), "user.tierfs.size"))
                self.same("user.tierfs.size of %s" % n, xs,
                          ("ok", str(len(b[1])).encode()))
                self.counts["bytes-compared"] = \
                    self.counts.get("bytes-compared", 0) + len(b[1])

    def stats(self):
        raw = os.getxattr(self.root, "user.tierfs.stats").decode()
        out = {}
        for line in raw.splitlines():
            k, _, v = line.partition("=")
            out[k] = v
        return out

    def check_limits(self):
        st = self.stats()
        for t in TIERS:
            used, limit = int(st[t + ".used"]), int(st[t + ".limit"])
            if used > limit:
                self.fail("%s.used=%d over %s.limit=%d" % (t, used, t, limit))
        if int(st.get("checksum_errors", 0)):
            self.fail("checksum_errors=%s" % st["checksum_errors"])
        return st

    def check_files(self):
        """The store holds one buffer per inode, no more (with no open
        descriptors, once the kernel has sent its releases)."""
        inodes = {os.lstat(self.r(n)).st_ino for n in self.existing()}
        for _ in range(100):
            files = int(self.stats()["files"])
            if files == len(inodes) + self.base_files:
                return
            time.sleep(0.01)
        self.fail("stats files=%d, expected %d buffers" %
                  (files, len(inodes) + self.base_files))

    def data_pages(self, path, size):
        """Pages of @path within @size that SEEK_DATA finds."""
        return sum((min(h, size) + 4095) // 4096 - d // 4096
                   for d, h in extents(path))

    def check_restart(self):
        """Right after a restart, before anything reads a file (which
        would bring it up from the disk tier it came back on): names,
        links, modes, flags and xattrs, and the room fallocate took. On
        tmpfs that is the pages it holds (st_blocks) less those it has
        data in; tierfs stores such pages whole on disk (the host copy is
        cut at the file's end and the device copy is its bytes alone, so
        only on disk does the bound hold), so its st_blocks is at least
        that. A file that fallocate took pages past its end of twice is
        left out: those pages are data (zeroes) on tmpfs, which tierfs's
        disk tier stores as a header alone."""
        st = self.stats()
        for k, want in (("recovery", "clean"), ("recovery_dropped", "0"),
                        ("recovery_rolled_back", "0"),
                        ("recovery_lost_found", "0")):
            self.same("after restart %d: %s" % (self.restarts, k),
                      st.get(k, "0" if k != "recovery" else None), want)
        log = self.daemon.log_since_start()
        if "recovery:" in log:
            self.fail("restart %d: the start says: %s" % (
                self.restarts, "; ".join(
                    ln for ln in log.splitlines() if "recovery:" in ln)))
        self.check_names()
        for n in sorted(self.existing()):
            sr = os.lstat(self.r(n))
            if not os.path.isfile(self.r(n)) or sr.st_ino in self.keep_twice:
                continue
            st_t = os.lstat(self.t(n))
            tier = call(lambda: os.getxattr(self.t(n), XA_TIER))
            if tier != ("ok", b"disk"):
                self.fail("%s came back on %r, not on disk" % (n, tier))
            room = sr.st_blocks * 512 - 4096 * self.data_pages(
                self.r(n), sr.st_size)
            if st_t.st_blocks * 512 < room:
                self.fail("st_blocks of %s after restart %d: %d bytes, "
                          "less than the %d bytes fallocate took on tmpfs"
                          % (n, self.restarts, st_t.st_blocks * 512, room))
            self.count("restart-room-checked")
        self.check_content(self.existing())

    def restart(self):
        self.step += 1
        self.note("close all, restart %d" % (self.restarts + 1))
        while self.fds:
            name, ft, fr, _ = self.fds.pop()
            self.both("close", lambda: os.close(ft), lambda: os.close(fr))
        self.daemon.restart()
        self.restarts += 1
        self.count("restarts")
        self.check_restart()
        self.touched = set()

    def check(self, full):
        self.check_names()
        self.check_content(self.touched if not full else self.existing())
        if self.root:
            self.check_limits()
            if full and not self.fds:
                self.check_files()
        self.touched = set()

    # ---- driver ----

    def run(self):
        os.makedirs(self.t("d1"))
        os.makedirs(self.r("d1"))
        if self.root:
            self.base_files = int(self.stats()["files"])
        mix = self.OPS + (self.EXTRA_OPS if self.args.extra_ops or
                          self.args.persist else ())
        ops = [o for o, w in mix for _ in range(w)]
        for step in range(1, self.args.ops + 1):
            self.step = step + self.restarts
            op = self.rng.choice(ops)
            op(self)
            self.count(op.__name__)
            full = (self.args.full_every and
                    step % self.args.full_every == 0)
            self.check(full)
            if self.args.persist and step % self.args.persist == 0:
                self.restart()
        if self.args.persist and self.args.ops % self.args.persist:
            self.restart()
        self.step += 1
        self.note("close all, full check")
        while self.fds:
            name, ft, fr, _ = self.fds.pop()
            self.both("close", lambda: os.close(ft), lambda: os.close(fr))
        self.check(True)
        # and once more with everything spilled to disk
        self.step += 1
        self.note("move everything to disk, full check")
        for n in self.existing():
            self.same("move %s to disk" % n,
                      call(lambda: os.setxattr(self.t(n), XA_TIER, b"disk")),
                      ("ok", None))
        self.check(True)
        self.same("flags of d1", call(get_flags, self.t("d1")),
                  call(get_flags, self.r("d1")))


def short(v):
    s = repr(v)
    return s if len(s) < 200 else s[:200] + "...(%d chars)" % len(s)


def describe_diff(a, b):
    if a[0] != "ok" or b[0] != "ok":
        return "tierfs %s, tmpfs %s" % (short(a) if a[0] == "err" else
                                        "%d bytes" % len(a[1]),
                                        short(b) if b[0] == "err" else
                                        "%d bytes" % len(b[1]))
    x, y = a[1], b[1]
    if len(x) != len(y):
        return "tierfs %d bytes, tmpfs %d bytes" % (len(x), len(y))
    i = next(i for i in range(len(x)) if x[i] != y[i])
    j = i
    while j < len(x) and x[j] != y[j]:
        j += 1
    return ("first difference at byte %d (chunk %d, +%d), %d bytes differ "
            "from there; tierfs %s, tmpfs %s" %
            (i, i // CHUNK, i % CHUNK, j - i, x[i:i + 16].hex(),
             y[i:i + 16].hex()))


def on_alarm(signum, frame):
    raise Mismatch("step took longer than the step timeout (hung?)")


def main():
    global MAX_SIZE
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--mount", help="a directory on a tierfs mount")
    p.add_argument("--ref", help="a directory on tmpfs")
    p.add_argument("--tierfs", help="the daemon: mount it ourselves")
    p.add_argument("--opts", default=DEFAULT_OPTS,
                   help="mount options with --tierfs (default: %(default)s)")
    p.add_argument("--log", help="keep the daemon's log in this file")
    p.add_argument("--full-every", type=int, default=25,
                   help="compare every file's content every N steps "
                        "(0: only at the end; touched files every step)")
    p.add_argument("--persist", type=int, default=0, metavar="N",
                   help="disk_persist=yes, and unmount and mount again "
                        "every N steps and at the end (with --tierfs)")
    p.add_argument("--max-size", default=str(MAX_SIZE),
                   help="the largest file (default %(default)s bytes; "
                        "K, M suffixes)")
    p.add_argument("--extra-ops", action="store_true",
                   help="copy_file_range and user xattrs in the mix too "
                        "(always with --persist)")
    p.add_argument("--step-timeout", type=int, default=60)
    p.add_argument("--tail", type=int, default=60,
                   help="op log lines to print on a mismatch (0: all)")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if not args.tierfs and not args.mount:
        p.error("give --tierfs BIN, or --mount DIR and --ref DIR")
    if args.persist and not args.tierfs:
        p.error("--persist restarts the daemon: give --tierfs BIN")
    mult = {"K": 1 << 10, "M": 1 << 20}
    m = args.max_size
    MAX_SIZE = int(m[:-1]) * mult[m[-1]] if m[-1] in mult else int(m)

    daemon = None
    made = []
    rc = 1
    try:
        if args.tierfs:
            daemon = Daemon(args.tierfs, args.opts +
                            (",disk_persist=yes" if args.persist else ""),
                            args.log)
            mnt_root = daemon.mnt
        else:
            mnt_root = args.mount
        work = "diff.%d.%d" % (args.seed, os.getpid())
        mnt = os.path.join(mnt_root, work)
        if args.ref:
            ref = os.path.join(args.ref, work)
        else:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else None
            ref = tempfile.mkdtemp(prefix="tierfs-diff-ref.", dir=base)
            made.append(ref)
            ref = os.path.join(ref, work)
        os.mkdir(mnt)
        os.mkdir(ref)
        made.append(ref)
        test = Test(args, args.seed, mnt, ref, bool(daemon))
        test.daemon = daemon
        test.root = mnt_root if (daemon or _is_tierfs_root(mnt_root)) \
            else None
        signal.signal(signal.SIGALRM, on_alarm)
        t0 = time.time()
        rc = 0
        try:
            signal.alarm(args.step_timeout * (args.ops + 2))
            test.run()
            signal.alarm(0)
        except Mismatch as e:
            signal.alarm(0)
            rc = 1
            print("MISMATCH seed=%d step=%d: %s" % (args.seed, test.step, e))
            lines = test.log if not args.tail else test.log[-args.tail:]
            print("op log (%s of %d):" % ("all" if not args.tail else
                                          "last %d" % len(lines),
                                          len(test.log)))
            for line in lines:
                print("  " + line)
            print("reproduce: %s --seed %d --ops %d%s%s%s" %
                  (sys.argv[0], args.seed, args.ops,
                   " --tierfs %s --opts '%s'" % (args.tierfs, args.opts)
                   if args.tierfs else "",
                   " --persist %d" % args.persist if args.persist else "",
                   " --max-size %s" % args.max_size
                   if MAX_SIZE != 1536 * 1024 else ""))
            if test.root:
                try:
                    print("stats: " + " ".join(
                        "%s=%s" % kv for kv in test.stats().items()))
                except OSError as e2:
                    print("stats unavailable: %s" % e2)
        for _, ft, fr, _ in test.fds:
            for fd in (ft, fr):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if rc == 0:
            c = test.counts
            oplog = hashlib.sha1("\n".join(test.log).encode()).hexdigest()
            print("seed=%d ops=%d ok in %.1fs, oplog=%s: %s" % (
                args.seed, args.ops, time.time() - t0, oplog[:16],
                ", ".join("%s=%d" % (k.replace("op_", ""), v)
                          for k, v in sorted(c.items()))))
            if test.root:
                st = test.stats()
                print("  spills device=%s host=%s, unspills host=%s "
                      "device=%s, disk.used=%s" % (
                          st["device.spills"], st["host.spills"],
                          st["host.unspills"], st["device.unspills"],
                          st["disk.used"]))
            clear_flags(mnt)
            shutil.rmtree(mnt, ignore_errors=True)
    finally:
        for d in made:
            clear_flags(d)
            shutil.rmtree(d, ignore_errors=True)
        if daemon:
            daemon.stop()
            report = daemon.sanitizer_report()
            if report:
                print("sanitizer report in the daemon's log:\n" + report)
                rc = 1
            if rc and not args.log:
                with open(daemon.log, errors="replace") as f:
                    tail = f.read()[-4000:]
                print("daemon log (tail):\n" + tail)
            daemon.cleanup()
    return rc


def _is_tierfs_root(path):
    try:
        os.getxattr(path, "user.tierfs.stats")
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
