# SPDX-License-Identifier: LGPL-2.1-or-later
"""Read and set tierfs's extended attributes (names from include/tierfs.h)."""

from __future__ import annotations

import errno
import os

__all__ = ["tier", "gpu", "stat", "mount_stats", "tiers", "set_tier", "pin",
           "unpin", "TIERS"]

PREFIX = "user.tierfs."
TIER = PREFIX + "tier"
SIZE = PREFIX + "size"
STORED = PREFIX + "stored_size"
ATIME = PREFIX + "last_access"
PINS = PREFIX + "pins"
PIN = PREFIX + "pin"
DEVICE = PREFIX + "device"
STATS = PREFIX + "stats"

# The chain of a daemon without the stats' "tiers" key, and of a
# directory that is not on tierfs; tiers() reads a mount's own chain.
TIERS = ("device", "host", "disk")


def _get(path: str | os.PathLike, name: str) -> str:
    return os.getxattr(path, name).decode().strip().rstrip("\0")


def _num(text: str):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def tier(path: str | os.PathLike) -> str:
    """The tier holding path's buffer: 'device', 'host' or 'disk'.

    Raises OSError (ENODATA or ENOTSUP) on a file that is not on tierfs.
    """
    return _get(path, TIER)


def gpu(path: str | os.PathLike) -> int | None:
    """The ordinal of the GPU holding path's device copy, or None when it
    has none (its tier is not 'device')."""
    try:
        return int(_get(path, DEVICE))
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def stat(path: str | os.PathLike) -> dict:
    """tier, size, stored_size, last_access (ns since the epoch) and pins."""
    out = {"tier": tier(path)}
    for key, name in (("size", SIZE), ("stored_size", STORED),
                      ("last_access", ATIME), ("pins", PINS)):
        out[key] = _num(_get(path, name))
    return out


def mount_stats(mount: str | os.PathLike) -> dict:
    """The mount root's ``user.tierfs.stats``: one entry per key=value line,
    numbers converted to int (or float)."""
    out = {}
    for line in _get(mount, STATS).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = _num(value.strip())
    return out


def _root(path: str | os.PathLike) -> str:
    """The root of the mount path is on: the directory the daemon answers
    user.tierfs.stats on."""
    p = os.path.realpath(path)
    dev = os.stat(p).st_dev
    while p != "/":
        up = os.path.dirname(p)
        try:
            if os.stat(up).st_dev != dev:
                break
        except OSError:
            break
        p = up
    return p


def tiers(mount: str | os.PathLike) -> tuple:
    """The chain of tiers, fastest first, of the mount that mount (its root,
    or any path on it) is on, as its daemon lists them (the stats' ``tiers``
    key; TIERS from a daemon without it): the names ``user.tierfs.tier``
    takes and gives, and those of its ``TIER.*`` stats keys."""
    for line in _get(_root(mount), STATS).splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "tiers" and value.strip():
            return tuple(value.strip().split(","))
    return TIERS


def _chain(path: str | os.PathLike) -> tuple:
    """tiers() of path's mount; TIERS off tierfs (no stats to read)."""
    try:
        return tiers(path)
    except OSError as e:
        if e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return TIERS
        raise


def set_tier(path: str | os.PathLike, where: str, gpu: int | None = None) -> None:
    """Move path's buffer to a tier (explicit spill or prefetch), one its
    mount's chain names (tiers()); with gpu, to that GPU's device tier
    (where must be 'device', the chain's first). OSError ENXIO for a GPU
    the mount does not serve."""
    chain = _chain(path)
    if where not in chain:
        raise ValueError("tier must be one of %s, not %r" % (", ".join(chain), where))
    if gpu is not None:
        if where != chain[0]:
            raise ValueError("a gpu goes with the device tier, not %r" % where)
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= 255:
            raise ValueError("gpu must be an ordinal 0 to 255, not %r" % (gpu,))
        where = "%s:%d" % (where, gpu)
    os.setxattr(path, TIER, where.encode())


def pin(path: str | os.PathLike) -> None:
    """Keep path's buffer where it is until unpin()."""
    os.setxattr(path, PIN, b"1")


def unpin(path: str | os.PathLike) -> None:
    os.setxattr(path, PIN, b"0")
