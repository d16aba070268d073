#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""bench/passthrough.py TIERFS_BIN: [fs] passthrough off and auto, side by
side with tmpfs (/dev/shm), in one run: sequential write, the cold read
(the first open after the write), a second read, 4 KiB random reads and
open+read+close of 4 KiB files. A scratch measurement for issue 29, not
part of bench/run; see bench/README.md, "Passthrough (issue 29)".
"""
import os, sys, time, random, subprocess, tempfile
BIN = sys.argv[1]
SZ = 256 << 20
def seq_read(p):
    t = time.perf_counter(); fd = os.open(p, os.O_RDONLY); n = 0
    while True:
        b = os.read(fd, 1 << 20)
        if not b: break
        n += len(b)
    os.close(fd); return n / (time.perf_counter() - t) / 1e6
def rand_read(p, k=20000):
    fd = os.open(p, os.O_RDONLY); r = random.Random(1)
    t = time.perf_counter()
    for _ in range(k): os.pread(fd, 4096, r.randrange(SZ // 4096) * 4096)
    os.close(fd); return k / (time.perf_counter() - t)
def seq_write(p):
    buf = os.urandom(1 << 20); t = time.perf_counter()
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    for _ in range(SZ >> 20): os.write(fd, buf)
    os.close(fd); return SZ / (time.perf_counter() - t) / 1e6
def small(d, n=2000):
    for i in range(n):
        with open(f"{d}/s{i}", "wb") as f: f.write(b"x" * 4096)
    t = time.perf_counter()
    for i in range(n):
        fd = os.open(f"{d}/s{i}", os.O_RDONLY); os.read(fd, 8192); os.close(fd)
    return n / (time.perf_counter() - t)
def case(d):
    out = {}
    out["seq write MB/s"] = seq_write(f"{d}/big")
    out["cold seq read MB/s"] = seq_read(f"{d}/big")
    out["second read MB/s"] = seq_read(f"{d}/big")
    out["4K random IOPS"] = rand_read(f"{d}/big")
    os.mkdir(f"{d}/sm"); out["small open+read+close /s"] = small(f"{d}/sm")
    return out
res = {}
for mode in ("off", "auto", "tmpfs"):
    tmp = tempfile.mkdtemp(prefix="i29ptb.", dir="/tmp")
    if mode == "tmpfs":
        mnt = tempfile.mkdtemp(prefix="i29ptb.", dir="/dev/shm")
        res[mode] = case(mnt); subprocess.run(["rm", "-rf", mnt]); continue
    mnt = f"{tmp}/mnt"; os.mkdir(mnt); os.mkdir(f"{tmp}/spill")
    p = subprocess.Popen([BIN, mnt, "-f", "-o", f"disk_path={tmp}/spill,device_backend=none,host_limit=2G,fs_passthrough={mode}"], stderr=open(f"{tmp}/log", "w"))
    for _ in range(100):
        if os.path.ismount(mnt): break
        time.sleep(0.1)
    try:
        res[mode] = case(mnt)
    finally:
        subprocess.run(["fusermount3", "-u", mnt]); p.wait(timeout=30)
        subprocess.run(["rm", "-rf", tmp])
for k in res["off"]:
    t = res["tmpfs"][k]
    print(f"{k:28s} off {res['off'][k]:9.0f} ({res['off'][k]/t:.2f}x)  passthrough {res['auto'][k]:9.0f} ({res['auto'][k]/t:.2f}x)  tmpfs {t:9.0f}")
