# SPDX-License-Identifier: LGPL-2.1-or-later
"""Who owns a store directory, and how it goes away however its owner ends.

Layout under a store's root::

    tfsdask-<host>-<pid>-<token>/     a live or dead store
        .lock                          owner JSON; flock()ed by the owner
    .tfsdask-new-<token>/             being made (renamed into place locked)
    .tfsdask-trash-<token>/           being removed

The owner holds an exclusive flock on ``.lock`` for as long as the store is
open. The kernel drops that lock when the process ends, however it ends
(close, exit, SIGTERM, SIGKILL from a nanny), so "can I take the lock?" is
exactly "is the owner gone?", with no pid reuse or clock to get wrong, and a
second live store on the same root is never touched.

Each store starts a reaper, a detached ``sh`` in its own session that waits
on a second descriptor of the same lock file (``flock N``) and then removes
the directory. Closing a store renames the directory aside (one rename) and
drops the lock; the reaper removes the files in the background, after the
worker process may already have exited. A killed owner's lock goes with it,
so the reaper removes that directory too. Only if the reaper itself was
killed (a whole cgroup stopped at once) does a directory outlive its owner;
cleanup_stale(), which every new store runs on its root, removes it then.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time

__all__ = ["DIR_PREFIX", "LOCK", "MARKER", "OwnedDir", "cleanup_stale",
           "remove_on_sigterm"]

logger = logging.getLogger("tierfs.store")

DIR_PREFIX = "tfsdask-"
LOCK = ".lock"
MARKER = ".owner"  # the pid marker of stores made before the lock existed
NEW_PREFIX = ".tfsdask-new-"
TRASH_PREFIX = ".tfsdask-trash-"
# A directory still being made is left alone this long (seconds) even when
# its lock is free: its maker may not have taken the lock yet.
NEW_GRACE = 60.0

# Waits for the lock on descriptor $3, then removes $2 (where close() renames
# the store) and $1 (where it was, if its lock file is still the one on $3: a
# store of the same name made since is not ours). In the background of a
# shell that exits at once, so the caller reaps it and it is nobody's child.
_REAPER = ('(flock "$3" && { [ "$1/.lock" -ef "/proc/self/fd/$3" ] && '
           'rm -rf -- "$1"; exec rm -rf -- "$2"; }) </dev/null >/dev/null 2>&1 &')

_dirs: set["OwnedDir"] = set()  # this process's open store directories
_dirs_lock = threading.Lock()


def _proc_start(pid: int) -> int | None:
    """Start time of pid in clock ticks since boot, or None if unknown."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: fields start after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def _alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is not None:
        now = _proc_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused by another process
    return True


def _spawn_detached(script: str, args: list[str], pass_fds=()) -> bool:
    """Run sh -c script in a new session, detached: returns once sh has
    put it in the background. False if that could not be started."""
    try:
        subprocess.run(["sh", "-c", script, "sh", *args], pass_fds=pass_fds,
                       start_new_session=True, cwd="/", check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        logger.debug("tierfs store: cannot start %r: %s", script, e)
        return False
    return True


def remove_later(path: str) -> None:
    """Remove path in the background, in a process that outlives this one
    (a thread if no shell can be started)."""
    if _spawn_detached('rm -rf -- "$1" </dev/null >/dev/null 2>&1 &', [path]):
        return
    threading.Thread(target=shutil.rmtree, args=(path, True), daemon=True,
                     name="tierfs-remove").start()


def _have_tools() -> bool:
    return all(shutil.which(t) for t in ("sh", "flock", "rm"))


class OwnedDir:
    """A store directory this process owns: made locked, released fast.

    release() renames the directory aside and drops the lock; it is what
    close(), the store's finalizer (garbage collection, interpreter exit)
    and the SIGTERM handler call. Idempotent, and a no-op in a forked child.
    """

    def __init__(self, root: str, name: str | None):
        self.pid = os.getpid()
        host = socket.gethostname().split(".")[0] or "host"
        token = secrets.token_hex(4)
        if name is None:
            name = "%s%s-%d-%s" % (DIR_PREFIX, host, self.pid, token)
        self.path = os.path.join(root, name)
        self.trash = os.path.join(root, "%s%s-%s" % (TRASH_PREFIX, name, token))
        if os.path.lexists(self.path):
            raise FileExistsError(errno.EEXIST, "store directory exists", self.path)
        os.makedirs(root, exist_ok=True)
        # Made under a name cleanup_stale() leaves alone, locked, then
        # renamed into place: a tfsdask-* directory always has a held lock
        # or a dead owner, never a lock not taken yet.
        new = os.path.join(root, NEW_PREFIX + token)
        os.mkdir(new, 0o700)
        self.fd = -1
        try:
            self.fd = os.open(os.path.join(new, LOCK),
                              os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.locked = True
            except OSError as e:
                # No flock here (some network filesystems): cleanup falls
                # back to the pid in the marker.
                logger.warning("tierfs store: no lock on %r (%s); a killed worker's "
                               "directory is found by its pid instead", new, e)
                self.locked = False
            self.owner = {"pid": self.pid, "host": socket.gethostname(),
                          "start": _proc_start(self.pid), "created": time.time()}
            os.rename(new, self.path)
        except BaseException:
            if self.fd >= 0:
                os.close(self.fd)
            shutil.rmtree(new, ignore_errors=True)
            raise
        self.reaper = self.locked and self._start_reaper()
        with _dirs_lock:
            _dirs.add(self)

    def _start_reaper(self) -> bool:
        if not _have_tools():
            return False
        # A second open file description: the reaper's flock waits on the
        # owner's instead of sharing it (a shared one would keep the lock
        # held for as long as the reaper lives, which is forever).
        try:
            wait_fd = os.open(os.path.join(self.path, LOCK), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return _spawn_detached(_REAPER, [self.path, self.trash, str(wait_fd)],
                                   pass_fds=(wait_fd,))
        finally:
            os.close(wait_fd)

    def write_owner(self, fd: int | None = None) -> None:
        """Write the owner JSON into the lock file, through fd if given."""
        data = json.dumps(self.owner).encode()
        os.pwrite(self.fd if fd is None else fd, data, 0)

    def release(self) -> None:
        fd, self.fd = self.fd, -1
        with _dirs_lock:
            _dirs.discard(self)
        if fd < 0 or os.getpid() != self.pid:
            return
        try:
            os.rename(self.path, self.trash)
            gone = self.trash
        except OSError:
            gone = self.path  # root unmounted or renamed: leave it to cleanup
        os.close(fd)  # drops the lock: the reaper wakes and removes it
        if not self.reaper and os.path.lexists(gone):
            remove_later(gone)


def _after_fork_in_child() -> None:
    # A forked child shares the owner's lock; closing its copy keeps the
    # directory's life tied to the owner, not to the child.
    with _dirs_lock:
        dirs = list(_dirs)
        _dirs.clear()
    for d in dirs:
        fd, d.fd = d.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def remove_on_sigterm() -> bool:
    """Make SIGTERM release this process's store directories (rename aside,
    unlock) before it ends the process as before. Only where SIGTERM has its
    default action and from the main thread; returns whether the handler is
    installed.

    The reaper removes a directory whose owner died of SIGTERM anyway; the
    handler makes the directory vanish from its name at once, and covers
    systems without flock or sh.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return signal.getsignal(signal.SIGTERM) is _on_sigterm
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def _on_sigterm(signum, frame) -> None:
    with _dirs_lock:
        dirs = list(_dirs)
    for d in dirs:
        try:
            d.release()
        except Exception:
            pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _owner_gone(path: str) -> bool | None:
    """True if the store at path has no live owner, False if it has, None
    if that cannot be told (no lock and no readable marker of this host)."""
    try:
        fd = os.open(os.path.join(path, LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    except OSError:
        return None
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True  # closing fd below lets the next cleaner in too
        except BlockingIOError:
            return False
        except OSError:
            pass  # no flock on this filesystem: the marker decides
        finally:
            os.close(fd)
    for name in (LOCK, MARKER):
        try:
            with open(os.path.join(path, name)) as f:
                owner = json.load(f)
            pid, host, start = int(owner["pid"]), owner["host"], owner.get("start")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host != socket.gethostname():
            return None
        return not _alive(pid, start)
    return None


def cleanup_stale(root: str | os.PathLike, max_age: float | None = None,
                  wait: bool = True) -> list[str]:
    """Remove the directories that dead stores left under root.

    A ``tfsdask-*`` directory goes when its owner has ended: its lock can be
    taken (or, for a store without a lock, its marker names a process of
    this host that is gone). With max_age (seconds), one whose owner cannot
    be told also goes when it has not changed for max_age seconds. Leftover
    ``.tfsdask-trash-*`` directories go too. Other names are never touched,
    so root may hold other files.

    Each dead directory is first renamed aside, so two cleaners never both
    claim it; with wait=False its files are removed in the background.
    Returns the store directories claimed.
    """
    root = os.fspath(root)
    removed, trash = [], []
    now = time.time()
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return removed
    for name in names:
        path = os.path.join(root, name)
        if name.startswith(TRASH_PREFIX):
            trash.append(path)
            continue
        if not name.startswith((DIR_PREFIX, NEW_PREFIX)):
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        gone = _owner_gone(path)
        if name.startswith(NEW_PREFIX):
            try:
                young = now - os.stat(path).st_mtime < NEW_GRACE
            except FileNotFoundError:
                continue
            if not gone or young:
                continue
        elif gone is None and max_age is not None:
            try:
                gone = now - os.stat(path).st_mtime > max_age
            except FileNotFoundError:
                continue
        if not gone:
            continue
        aside = os.path.join(root, "%s%s-%s" % (TRASH_PREFIX, name, secrets.token_hex(4)))
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            continue  # another cleaner (or the reaper) got there first
        except OSError as e:
            logger.warning("tierfs store: cannot remove stale %r: %s", path, e)
            continue
        trash.append(aside)
        if name.startswith(DIR_PREFIX):
            removed.append(path)
            logger.info("tierfs store: removing stale %r", path)
    for path in trash:
        if wait:
            shutil.rmtree(path, ignore_errors=True)
        else:
            remove_later(path)
    return removed
