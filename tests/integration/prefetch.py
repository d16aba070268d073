#!/usr/bin/env python3
"""TFS_IOC_PREFETCH and the kernel's WILLNEED hints, for prefetch.bats.

  prefetch.py ioctl PATH TIER [wait]   print the state, or the errno name
  prefetch.py queue TIER PATH...       one ioctl each, back to back from one
                                       process: one line each, as ioctl's
  prefetch.py fadvise PATH             posix_fadvise(POSIX_FADV_WILLNEED)
  prefetch.py madvise PATH             mmap, madvise(MADV_WILLNEED)
  prefetch.py alloc PATH SIZE          TFS_IOC_ALLOC: a device-only buffer
"""
import errno
import fcntl
import mmap
import os
import struct
import sys

_PREFETCH = struct.Struct("=IIIIQQII3Q")  # struct tfs_ioc_prefetch, 64 bytes
assert _PREFETCH.size == 64
# _IOWR(0xf7, 8, 64)
IOC_PREFETCH = (3 << 30) | (_PREFETCH.size << 16) | (0xF7 << 8) | 8
TIERS = {"device": 0, "host": 1, "disk": 2}
STATES = {1: "there", 2: "queued", 3: "done"}
WAIT = 0x1
_ALLOC = struct.Struct("=IIQ2Q")  # struct tfs_ioc_alloc, 32 bytes
IOC_ALLOC = (1 << 30) | (_ALLOC.size << 16) | (0xF7 << 8) | 4


def ioctl(path, tier, wait):
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(_PREFETCH.pack(1, WAIT if wait else 0, TIERS[tier],
                                       0, 0, 0, 0, 0, 0, 0, 0))
        try:
            fcntl.ioctl(fd, IOC_PREFETCH, buf, True)
        except OSError as e:
            print(errno.errorcode[e.errno])
            return 1
        f = _PREFETCH.unpack(buf)
        print(STATES.get(f[3], f[3]), f[6])
        return 0
    finally:
        os.close(fd)


def main(argv):
    if argv[1] == "queue":
        for path in argv[3:]:
            ioctl(path, argv[2], False)
        return 0
    if argv[1] == "ioctl":
        return ioctl(argv[2], argv[3], len(argv) > 4 and argv[4] == "wait")
    if argv[1] == "alloc":
        fd = os.open(argv[2], os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.ioctl(fd, IOC_ALLOC, _ALLOC.pack(1, 0, int(argv[3]), 0, 0))
        finally:
            os.close(fd)
        return 0
    fd = os.open(argv[2], os.O_RDONLY)
    try:
        if argv[1] == "fadvise":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        else:
            m = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
            m.madvise(mmap.MADV_WILLNEED)
            m.close()
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
