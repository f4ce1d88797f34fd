"""Locks the kernel lets go of when their holder dies, shared by every ltowrap process of one user on one machine.

They live in `<cache>/locks/<host>/`, and a `kill -9` never leaks one: the kernel lets go of
a lock when the last descriptor of its holder closes, so nothing needs cleaning before it can
be taken again. Two kinds:
- `slot-<n>`: the machine's pool of backend slots (slots.py), a file each held with flock(),
  like distcc's per-host lock files (a slot's descriptor is passed to its compile);
- claims on cache entries being made (a backend object, a thin-link, or a backend object named
  by its content before its key is made: jobs/store.py), so that a second process needing the
  same entry waits for it instead of making it again. A claim `<kind>-<key>` is one byte of
  one file, `claims`, locked with an open file description lock (F_OFD_SETLK, Linux 3.15)
  at an offset of 62 bits hashed from its name: taking and letting go of a claim creates and
  removes no file (on a journal-less ext4, allocating an inode after recent deletions scans
  the freed ones). Two names on one byte only make a process wait for an unrelated claim,
  never a wrong result; within one process they share the byte, let go with the last.

Waiting is event-driven. A Waker is one inotify descriptor per process that becomes readable
when a file it watches that was open for writing is closed: the lock directory for a slot
waiter (a slot file's holder letting go, or dying), the `claims` file for a claim waiter. A
claim's holder opens and closes `claims` for writing once it has let go (that allocates no
inode); at its death the kernel closes its descriptor, which was open for writing. The
Waker is select()ed together with the executor's pidfds and make's jobserver. A waiter keeps
its descriptors open between tries (a failed try closes nothing), so each IN_CLOSE_WRITE
is a release, a death or a process leaving, never another waiter's retry: waiters cannot
wake each other in a loop. A waiter also tries again every BACKSTOP seconds: the event of a
holder's close comes just before the kernel drops its locks (see BACKSTOP), and a holder
may let go without a close at all. Without inotify (none left for this user:
max_user_instances) the wait falls back to a timeout, POLL seconds.

Older ltowrap versions made a claim a file `<kind>-<key>` held with flock(); `sweep` removes
those its dead holders left. An older and a newer version sharing one cache at once do not
see each other's claims: each may make an entry the other is making (work done twice, and
written atomically, so never a wrong result). Both still share the slot pool; a newer
version's release also wakes an older one's waiters (they watch the directory), which try
again and wait on.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import fsutil
from .blake import blake2b
from .cachedirs import LOCKS

POLL = 0.25  # seconds between tries when inotify cannot be had
# Seconds between tries with inotify: a backstop for a wake that comes too early. The kernel
# queues a close's inotify event just before it drops the locks the closed file held, so a
# waiter that tries again in that instant finds the lock still taken and waits for the next
# event; without a backstop, a release that was the last event would leave it waiting forever.
BACKSTOP = 2.0
CLAIMS = "claims"  # the file whose bytes are the claims (see the module doc)
_DRAIN_BYTES = 65536  # what Waker.drain reads at once
_EVENT_MAX = 16 + 256  # the largest inotify event: its header and a name of NAME_MAX bytes, padded

# struct flock: l_type, l_whence, l_start, l_len, l_pid, padded to its alignment (LP64 Linux: 32 bytes).
_FLOCK = struct.Struct("hhqqi0q")


def directory(cache_root: str) -> str:
    """Where this machine's locks live: per host, so a cache on a shared file system shares none."""
    return os.path.join(cache_root, LOCKS, os.uname().nodename or "localhost")


def _same_file(fd: int, path: str) -> bool:
    """Is `path` still the file `fd` is open on? (A swept legacy claim is unlinked: its inode is dead.)"""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _open(directory: str, path: str) -> int:
    """A lock file in `directory`, open for writing (its close is what wakes waiters), made if absent."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, fsutil.FILE_MODE)
    except FileNotFoundError:
        fsutil.make_dirs(directory)
        return os.open(path, flags, fsutil.FILE_MODE)


class Waker:
    """A descriptor that becomes readable when a lock in a watched path is let go (see the module doc)."""

    def __init__(self) -> None:
        self._inotify = None
        self._watched: set[str] = set()
        self._blind = False  # a watch could not be added: waits poll
        try:
            from inotify_simple import INotify

            self._inotify = INotify(nonblocking=True)
        except (ImportError, OSError):
            self._inotify = None

    def watch(self, path: str) -> bool:
        """Watch `path` (a directory: every file in it) from now on; True if it was not watched before."""
        if path in self._watched:
            return False
        self._watched.add(path)
        if self._inotify is not None:
            from inotify_simple import flags

            try:
                self._inotify.add_watch(path, flags.CLOSE_WRITE)
            except OSError:
                self._blind = True
        return True

    def fds(self) -> list[int]:
        return [self._inotify.fileno()] if self._inotify is not None else []

    @property
    def timeout(self) -> float:
        return BACKSTOP if self._inotify is not None and not self._blind else POLL

    def drain(self) -> None:
        """Forget the events so far: the caller tries its locks again after this. They are read
        and dropped unparsed (the descriptor does not block): which lock it was does not matter."""
        if self._inotify is None:
            return
        fd = self._inotify.fileno()
        try:
            while len(os.read(fd, _DRAIN_BYTES)) > _DRAIN_BYTES - _EVENT_MAX:  # a full read: more may be queued
                pass
        except BlockingIOError:  # nothing (more) queued
            pass

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


@dataclass(eq=False, repr=False)
class LockDir:
    """The lock directory of one process: its slot files' descriptors (held, or kept to try again) and its Waker."""

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
        return self.watch(self.path) and self._try(name)

    def _try(self, name: str) -> bool:
        if name in self._held:
            return True
        path = os.path.join(self.path, name)
        while True:
            fd = self._fds.get(name)
            if fd is None:
                fd = _open(self.path, path)
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

    def watch(self, path: str) -> bool:
        """The Waker watches `path` (the directory, or a file in it) from now on; True if it did not before."""
        if self._waker is None:
            fsutil.make_dirs(self.path)
            self._waker = Waker()
        return self._waker.watch(path)

    def waker(self, path: str | None = None) -> Waker:
        """The Waker, watching `path` (by default the directory: every slot)."""
        self.watch(path or self.path)
        assert self._waker is not None
        return self._waker

    def close(self) -> None:
        for name in list(self._fds):
            self.unlock(name)
            self._close(name)
        if self._waker is not None:
            self._waker.close()
            self._waker = None

    def _close(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)


# The claim names' prefixes: cache.OBJECTS and cache.THINLINKS (a key), jobs/store.CONTENT (a backend
# compile's content, claimed before its key is made). Older versions' claim files are named so (sweep).
CLAIM_KINDS = ("o-", "t-", "e-")


@dataclass(eq=False, repr=False)
class Claims:
    """Claims on cache entries being made: `<kind>-<key>`, a byte of the lock directory's `claims` file.

    One descriptor of `claims` holds every claim of this process (an open file description
    lock belongs to the descriptor's open file, not to the process, so the process's other
    opens and closes of the file let go of nothing). A claim the directory cannot give (a
    read-only cache) is granted: the work is then done without coordination, as before
    claims existed, never refused.
    """

    locks: LockDir
    _fd: int | None = None
    _held: dict[int, set[str]] = field(default_factory=dict)  # a byte -> the claims this process holds on it

    @property
    def path(self) -> str:
        return os.path.join(self.locks.path, CLAIMS)

    @staticmethod
    def name(kind: str, key: str) -> str:
        return f"{kind}-{key}"

    @staticmethod
    def offset(name: str) -> int:
        """The claim's byte: 62 bits of a hash of its name (well below the largest offset a lock takes)."""
        return int.from_bytes(blake2b(name.encode(), digest_size=8).digest(), "big") >> 2

    def try_claim(self, kind: str, key: str) -> bool:
        """Take the claim if no other process holds it. Before it reports a busy claim, the Waker
        watches `claims`: a release after this try wakes it."""
        name = self.name(kind, key)
        try:
            if self._take(name, wait=False):
                return True
            return self.locks.watch(self.path) and self._take(name, wait=False)
        except OSError:
            return True

    @contextmanager
    def holding(self, kind: str, key: str) -> Iterator[bool]:
        """Hold the claim for the body, waiting for another holder first; yields whether it waited."""
        name = self.name(kind, key)
        try:
            waited = not self._take(name, wait=False)
            if waited:
                self._take(name, wait=True)
        except OSError:
            yield False
            return
        try:
            yield waited
        finally:
            if self._let_go(name):
                self._wake()

    def release(self, kind: str, key: str) -> None:
        self.release_all(((kind, key),))

    def release_all(self, claims: Iterable[tuple[str, str]]) -> None:
        """Let go of these claims (kind, key), waking the waiters once, after the last byte is free."""
        freed = False
        for kind, key in claims:
            freed = self._let_go(self.name(kind, key)) or freed
        if freed:
            self._wake()

    def fds(self) -> list[int]:
        return self.locks.waker(self.path).fds()

    @property
    def timeout(self) -> float | None:
        return self.locks.waker(self.path).timeout

    def close(self) -> None:
        """Let go of every claim: closing the descriptor does, and wakes the waiters."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._held.clear()

    def _take(self, name: str, wait: bool) -> bool:
        at = self.offset(name)
        names = self._held.get(at)
        if names is not None:  # this process holds the byte (this claim, or one whose name hashed alike)
            names.add(name)
            return True
        if self._fd is None:
            self._fd = _open(self.locks.path, self.path)
        try:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK,
                        _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, at, 1, 0))
        except OSError as e:
            if not wait and e.errno in (errno.EAGAIN, errno.EACCES):
                return False  # nothing was opened for this try: the next one closes nothing
            raise
        self._held[at] = {name}
        return True

    def _let_go(self, name: str) -> bool:
        """Let go of the claim; True if its byte is free now (its waiters are to be woken: _wake)."""
        at = self.offset(name)
        names = self._held.get(at)
        if names is None or name not in names:
            return False
        names.discard(name)
        if names or self._fd is None:
            return False
        del self._held[at]
        try:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, at, 1, 0))
        except OSError:
            return False  # held until this process closes `claims`, which then wakes them
        return True

    def _wake(self) -> None:
        """The waiters' wake, after the bytes let go are free: a close of `claims` open for writing."""
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC))
        except OSError:
            pass  # a waiter tries again at its backstop (BACKSTOP)


def sweep(path: str) -> int:
    """Remove the claim files older versions' dead processes left (free ones); returns how many.

    `claims` itself stays: a claim is one of its bytes, and every process must lock the same inode.
    """
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
