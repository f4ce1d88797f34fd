"""Locks the kernel lets go of when their holder dies, shared by every ltowrap process of one user on one machine.

Each lock is a file in `<cache>/locks/<host>/`, held with flock(), like distcc's per-host
lock files: a `kill -9` never leaks one, and nothing needs cleaning before it can be
taken again. Two kinds live there:
- `slot-<n>`: the machine's pool of backend slots (slots.py);
- `<kind>-<key>`: a claim on a cache entry being made (a backend object, a thin-link, or a
  backend object named by its content before its key is made: jobs/store.py), so that a
  second process needing the same entry waits for it instead of making it again.

Waiting is event-driven. A Waker is an inotify descriptor on the directory that becomes
readable when a file there that was open for writing is closed: a holder letting go, or
dying. It is select()ed together with the executor's pidfds and make's jobserver. Every
lock file is opened for writing and a waiter keeps its descriptor open between tries (a
failed try closes nothing), so each IN_CLOSE_WRITE is a release, a death or a process
leaving, never another waiter's retry: waiters cannot wake each other in a loop.
Without inotify (none left for this user: max_user_instances) the wait falls back to a
timeout, POLL seconds.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import fsutil
from .cachedirs import LOCKS

POLL = 0.25  # seconds between tries when inotify cannot be had


def directory(cache_root: str) -> str:
    """Where this machine's locks live: per host, so a cache on a shared file system shares none."""
    return os.path.join(cache_root, LOCKS, os.uname().nodename or "localhost")


def _same_file(fd: int, path: str) -> bool:
    """Is `path` still the file `fd` is open on? (A released claim is unlinked: its inode is dead.)"""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


class Waker:
    """A descriptor that becomes readable when a lock in `path` is let go (see the module doc)."""

    def __init__(self, path: str) -> None:
        self._inotify = None
        try:
            from inotify_simple import INotify, flags

            self._inotify = INotify(nonblocking=True)
            self._inotify.add_watch(path, flags.CLOSE_WRITE)
        except (ImportError, OSError):
            if self._inotify is not None:
                self._inotify.close()
            self._inotify = None

    def fds(self) -> list[int]:
        return [self._inotify.fileno()] if self._inotify is not None else []

    @property
    def timeout(self) -> float | None:
        return None if self._inotify is not None else POLL

    def drain(self) -> None:
        """Forget the events so far: the caller tries its locks again after this."""
        if self._inotify is not None:
            self._inotify.read(timeout=0)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


@dataclass
class LockDir:
    """The lock directory of one process: its descriptors (held, or kept to try again) and its Waker."""

    path: str
    _fds: dict[str, int] = field(default_factory=dict)
    _held: set[str] = field(default_factory=set)
    _waker: Waker | None = None

    def try_lock(self, name: str) -> bool:
        """Take lock `name` if it is free (True if this process holds it). OSError if the directory is unusable.

        Before it reports a busy lock, the Waker is watching: a release after this try wakes it.
        """
        if self._try(name):
            return True
        if self._waker is None:
            self.waker()
            return self._try(name)
        return False

    def lock(self, name: str) -> bool:
        """Take lock `name`, waiting in flock() as long as another process holds it; True if it had to wait."""
        waited = False
        while not self._try(name):
            waited = True
            fcntl.flock(self._fds[name], fcntl.LOCK_EX)  # _try then checks it is still the file named
        return waited

    def _try(self, name: str) -> bool:
        if name in self._held:
            return True
        path = os.path.join(self.path, name)
        while True:
            fd = self._fds.get(name)
            if fd is None:
                fd = self._open(path)
                self._fds[name] = fd
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return False  # the descriptor stays open: the next try closes nothing
                raise
            if _same_file(fd, path):
                self._held.add(name)
                return True
            self._close(name)  # it was let go and removed since we opened it: open the new one

    def fd(self, name: str) -> int:
        return self._fds[name]

    def held(self, name: str) -> bool:
        return name in self._held

    def unlock(self, name: str, remove: bool = False) -> None:
        """Let go of `name` (closing its descriptor: that is what wakes the waiters); `remove` unlinks it first."""
        if name not in self._held:
            return
        if remove:
            try:
                os.unlink(os.path.join(self.path, name))
            except OSError:
                pass
        self._held.discard(name)
        self._close(name)

    def forget(self, name: str) -> None:
        """Close the descriptor kept for trying `name` again (not held)."""
        if name not in self._held:
            self._close(name)

    def drain(self) -> None:
        if self._waker is not None:
            self._waker.drain()

    def waker(self) -> Waker:
        if self._waker is None:
            fsutil.make_dirs(self.path)
            self._waker = Waker(self.path)
        return self._waker

    def close(self) -> None:
        for name in list(self._fds):
            self.unlock(name, remove=name.startswith(CLAIM_KINDS))
            self._close(name)
        if self._waker is not None:
            self._waker.close()
            self._waker = None

    def _open(self, path: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(path, flags, fsutil.FILE_MODE)
        except FileNotFoundError:
            fsutil.make_dirs(self.path)
            return os.open(path, flags, fsutil.FILE_MODE)

    def _close(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)


# As claim name prefixes: cache.OBJECTS and cache.THINLINKS (a key), jobs/store.CONTENT (a backend
# compile's content, claimed before its key is made).
CLAIM_KINDS = ("o-", "t-", "e-")


@dataclass
class Claims:
    """Claims on cache entries being made: `<kind>-<key>` in the lock directory.

    A claim's holder removes its file when it lets go, after storing the entry (or failing
    to), so the directory holds only claims in use and those of processes that died
    (taken over by the next claimant, or swept by `ltowrap cache trim`). A claim the
    directory cannot give (a read-only cache) is granted: the work is then done without
    coordination, as before claims existed, never refused.
    """

    locks: LockDir

    @staticmethod
    def name(kind: str, key: str) -> str:
        return f"{kind}-{key}"

    def try_claim(self, kind: str, key: str) -> bool:
        try:
            return self.locks.try_lock(self.name(kind, key))
        except OSError:
            return True

    @contextmanager
    def holding(self, kind: str, key: str) -> Iterator[bool]:
        """Hold the claim for the body, waiting for another holder first; yields whether it waited."""
        name = self.name(kind, key)
        try:
            waited: bool | None = self.locks.lock(name)
        except OSError:
            waited = None
        if waited is None:
            yield False
            return
        try:
            yield waited
        finally:
            self.locks.unlock(name, remove=True)

    def release(self, kind: str, key: str) -> None:
        self.locks.unlock(self.name(kind, key), remove=True)

    def forget(self, kind: str, key: str) -> None:
        self.locks.forget(self.name(kind, key))

    def fds(self) -> list[int]:
        return self.locks.waker().fds()

    @property
    def timeout(self) -> float | None:
        return self.locks.waker().timeout


def sweep(path: str) -> int:
    """Remove the claim files of dead processes (free ones); returns how many."""
    removed = 0
    try:
        names = [n for n in os.listdir(path) if n.startswith(CLAIM_KINDS)]
    except OSError:
        return 0
    mine = LockDir(path)
    for name in names:
        try:
            if mine._try(name):
                mine.unlock(name, remove=True)
                removed += 1
            else:
                mine.forget(name)
        except OSError:
            continue
    mine.close()
    return removed
