"""Where a backend compile gets its slot: make's jobserver when it reaches the link, else the machine's pool.

make 4.3 closes its jobserver in recipes not marked `+`; ninja, `cmake --build` and
scripts have none; two builds at once share none. So unless make's jobserver reaches the
link, every backend compile of every ltowrap process of this user on this machine holds
one of `jobs` slots (default: the usable CPUs), each a lock in the cache's lock directory
(locks.py) that the kernel lets go of when its holder dies. A link's own implicit slot
counts: its first compile takes a slot like the others, so three links under `ninja -j2`
run at most `jobs` compiles between them, not three plus the pool.

A slot's descriptor is passed to the compile it pays for, so it is let go when that
compile ends even if the link itself was killed and left it running.

With make's jobserver the jobserver is the authority, as in make's own protocol: the
link's implicit slot covers one compile, each further one holds a token.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ..config import Settings
from ..locks import LockDir
from . import jobserver


@dataclass(frozen=True)
class Ticket:
    """What one running compile holds."""

    slot: int | None = None  # a slot of the machine's pool
    token: bool = False  # a jobserver token
    implicit: bool = False  # the link's own slot under make's jobserver


class Gate:
    """Hands out tickets (non-blocking) and says what to select() on for the next one."""

    name = ""
    jobs = 1  # compiles at once in this process, at most

    def take(self) -> Ticket | None:
        raise NotImplementedError

    def give(self, ticket: Ticket) -> None:
        raise NotImplementedError

    def inherit(self, ticket: Ticket) -> tuple[int, ...]:
        """Descriptors the compile should carry (its slot's lock)."""
        return ()

    def fds(self) -> list[int]:
        """Readable when a take() may succeed."""
        return []

    @property
    def timeout(self) -> float | None:
        return None

    def close(self) -> None:
        pass


@dataclass(eq=False, repr=False)
class Local(Gate):
    """No sharing: only `jobs` bounds this process (when nothing else is known)."""

    jobs: int = 1

    def take(self) -> Ticket | None:
        return Ticket()

    def give(self, ticket: Ticket) -> None:
        pass


@dataclass(eq=False, repr=False)
class JobserverGate(Gate):
    """Slots from make's jobserver: the implicit one, then a token for each more."""

    js: jobserver.Jobserver
    jobs: int
    name = "jobserver"
    _implicit_busy: bool = False

    def take(self) -> Ticket | None:
        if not self._implicit_busy:
            self._implicit_busy = True
            return Ticket(implicit=True)
        return Ticket(token=True) if self.js.try_acquire() else None

    def give(self, ticket: Ticket) -> None:
        if ticket.implicit:
            self._implicit_busy = False
        elif ticket.token:
            self.js.release()

    def fds(self) -> list[int]:
        return [self.js.read_fd]

    def close(self) -> None:
        self.js.close()


@dataclass(eq=False, repr=False)
class PoolGate(Gate):
    """Slots from the cache's pool of slot locks, shared by the links on this machine."""

    locks: LockDir
    jobs: int  # the pool's size
    name = "pool"
    broken: str = ""  # why the pool could not be used (then only `jobs` bounds this process)

    @staticmethod
    def slot(n: int) -> str:
        return f"slot-{n}"

    def take(self) -> Ticket | None:
        try:
            return next((Ticket(slot=n) for n in range(self.jobs)
                         if not self.locks.held(self.slot(n)) and self.locks.try_lock(self.slot(n))), None)
        except OSError as e:  # a read-only or full cache: never worse than before the pool
            self.broken = e.strerror or str(e)
            return Ticket()

    def give(self, ticket: Ticket) -> None:
        if ticket.slot is not None:
            self.locks.unlock(self.slot(ticket.slot))

    def inherit(self, ticket: Ticket) -> tuple[int, ...]:
        return (self.locks.fd(self.slot(ticket.slot)),) if ticket.slot is not None else ()

    def fds(self) -> list[int]:
        return self.locks.waker().fds()

    @property
    def timeout(self) -> float | None:
        return self.locks.waker().timeout

    def in_use(self) -> int:
        """How many slots other processes hold now (for doctor)."""
        busy = 0
        for n in range(self.jobs):
            if self.locks.try_lock(self.slot(n)):
                self.locks.unlock(self.slot(n))
            else:
                busy += 1
        return busy


def for_run(settings: Settings, locks: LockDir, marker_dir: str | None) -> Gate:
    """make's jobserver if it reaches this process, else the machine's pool.

    A jobserver make did not open in this recipe is no longer worth a line on the build's
    stderr (the pool takes its place): `ltowrap doctor` says it, and `verbose` prints it
    once per make run.
    """
    try:
        js = jobserver.connect(os.environ.get("MAKEFLAGS", ""))
    except jobserver.Unusable as e:
        js = None
        if settings.verbose and jobserver.first_warning(marker_dir):
            print(f"ltowrap: {e}; backend compiles share the machine's {pool_size(settings)} slots", file=sys.stderr)
    if js is not None:
        return JobserverGate(js, settings.jobs if settings.jobs > 0 else 1 << 16)
    return PoolGate(locks, pool_size(settings))


def pool_size(settings: Settings) -> int:
    return jobserver.default_jobs(settings.jobs)
