#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Daemon memory for metadata (issue 10, finding 7).

Mounts a tierfs with the binary given, then reports the daemon's VmRSS:
  files:   before, after creating N empty files, and after removing them
           (waiting up to 30 s for the idle trim to give memory back)
  xattrs:  after setting three 64 KiB user xattrs on each of M files
           (192 KiB a file), how many files got them before ENOSPC, and
           after removing everything

usage: bench/metamem.py TIERFS_BIN [-n 1000000] [-m 4000] [-o OPTS]
"""
import argparse
import errno
import os
import subprocess
import sys
import tempfile
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def settle(pid, seconds):
    """RSS once it has not fallen for 4 s (the idle trim waits for a
    quiet second), or after @seconds."""
    low = rss_kib(pid)
    since = time.time()
    end = since + seconds
    while time.time() < end and time.time() - since < 4:
        time.sleep(0.5)
        now = rss_kib(pid)
        if now < low - 1024:
            low, since = now, time.time()
    return rss_kib(pid)


def mount(binary, opts):
    top = tempfile.mkdtemp(prefix="tfs-metamem.")
    mnt, spill = os.path.join(top, "mnt"), os.path.join(top, "spill")
    os.mkdir(mnt)
    os.mkdir(spill)
    o = f"disk_path={spill},device_backend=none" + (f",{opts}" if opts else "")
    p = subprocess.Popen([binary, mnt, "-f", "-o", o],
                         stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.ismount(mnt):
            return p, top, mnt
        if p.poll() is not None:
            raise RuntimeError("tierfs exited")
        time.sleep(0.05)
    raise RuntimeError("tierfs did not mount")


def unmount(p, top, mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=False)
    p.wait(timeout=60)
    os.rmdir(mnt)
    os.rmdir(os.path.join(top, "spill"))
    os.rmdir(top)


def mib(kib):
    return f"{kib / 1024:.0f} MiB"


def files_case(binary, n, opts):
    p, top, mnt = mount(binary, opts)
    try:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        r0 = rss_kib(p.pid)
        made = 0
        try:
            for i in range(n):
                os.close(os.open(f"{d}/f{i:07d}", os.O_CREAT | os.O_WRONLY,
                                 0o644))
                made += 1
        except OSError as e:
            print(f"files: stopped at {made}: {errno.errorcode[e.errno]}")
        r1 = rss_kib(p.pid)
        for i in range(made):
            os.unlink(f"{d}/f{i:07d}")
        os.rmdir(d)
        r2 = settle(p.pid, 30)
        print(f"files: {made} empty files: rss {mib(r0)} -> {mib(r1)} "
              f"({(r1 - r0) * 1024 / max(made, 1):.0f} B a file), "
              f"after removing them {mib(r2)}")
    finally:
        unmount(p, top, mnt)


def xattr_case(binary, m, opts):
    p, top, mnt = mount(binary, opts)
    val = os.urandom(64 * 1024)
    try:
        d = os.path.join(mnt, "x")
        os.mkdir(d)
        r0 = rss_kib(p.pid)
        full = made = 0
        for i in range(m):
            f = f"{d}/f{i:05d}"
            try:
                os.close(os.open(f, os.O_CREAT | os.O_WRONLY, 0o644))
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            made += 1
            try:
                for k in range(3):
                    os.setxattr(f, f"user.v{k}", val)
                full += 1
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        r1 = rss_kib(p.pid)
        for i in range(made):
            os.unlink(f"{d}/f{i:05d}")
        os.rmdir(d)
        r2 = settle(p.pid, 30)
        print(f"xattrs: {full} of {m} files got 3 x 64 KiB "
              f"({made} created): "
              f"rss {mib(r0)} -> {mib(r1)}, after removing them {mib(r2)}")
    finally:
        unmount(p, top, mnt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tierfs")
    ap.add_argument("-n", type=int, default=1000000)
    ap.add_argument("-m", type=int, default=4000)
    ap.add_argument("-o", default="")
    a = ap.parse_args()
    files_case(a.tierfs, a.n, a.o)
    xattr_case(a.tierfs, a.m, a.o)


if __name__ == "__main__":
    sys.exit(main())
