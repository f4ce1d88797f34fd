"""The compiles running here: each started in a slot, watched through its pidfd, its result checked.

A result counts only if clang exited 0, the object is non-empty, clang did not print "Error
running ThinLTO backend" (it can exit 0 after one: LLVM issue 75441; backend.unusable), and
every side output the job asks for (split DWARF, optimization records) was written.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import time
from dataclasses import dataclass, field

from .. import fsutil, log, proc
from ..locks import POLL
from ..stages import backend
from .forkserver import Forks
from .prepare import JobState
from .slots import Gate, Ticket

HELD = frozenset({signal.SIGINT, signal.SIGTERM})  # held back while a compile starts (LocalSide.start)


@dataclass(eq=False, repr=False)
class Running:
    """A backend compile running here; what it prints goes to `out_fd`, a file in memory
    (memfd_create: no file to create, read back and remove on the disk the objects go to)."""

    child: proc.Child
    state: JobState
    start: float
    ticket: Ticket
    out_fd: int
    lane: int = 0
    out: str = ""  # what it printed, read once it ended (LocalSide.ended)

    def printed(self) -> str:
        """What it printed (it has ended); its log stays open (LocalSide.ended empties it for
        the next compile). Most compiles print nothing: then the log's size says so, and it is
        not read."""
        if not os.fstat(self.out_fd).st_size:
            return ""
        os.lseek(self.out_fd, 0, os.SEEK_SET)
        return fsutil.read_all(self.out_fd).decode("utf-8", "replace")

    def drop(self) -> None:
        if self.out_fd >= 0:
            os.close(self.out_fd)
            self.out_fd = -1


def new_log() -> int:
    """A compile's log: a file in memory, opened for appending, so that each compile's output
    starts at the beginning of the log once it is emptied (LocalSide.ended), wherever the
    previous compile left its offset."""
    fd = os.memfd_create("ltowrap-backend", os.MFD_CLOEXEC)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, os.O_APPEND)
    except BaseException:
        os.close(fd)
        raise
    return fd


def spawn(state: JobState, gate: Gate, ticket: Ticket, sigmask: set[int], env: dict[str, str], forks: Forks,
          out_fd: int = -1) -> Running:
    """Start the job's compile in this slot (its shard written first, if it is not there),
    in `env` (proc.tool_env), through `forks`, printing to the log `out_fd` (an empty one:
    new_log, or a new one made here if -1); the slot is given back, and the log closed, if it
    cannot start."""
    job = state.job
    shard_path = job.shard_path
    try:
        if not os.path.exists(shard_path):
            os.makedirs(os.path.dirname(shard_path) or ".", exist_ok=True)
            with open(shard_path, "wb") as f:
                f.write(job.shard)
        if out_fd < 0:
            out_fd = new_log()
        child = forks.spawn(state.argv, out_fd, gate.inherit(ticket), sigmask, env)
    except BaseException:
        if out_fd >= 0:
            os.close(out_fd)
        gate.give(ticket)
        raise
    return Running(child, state, time.time(), ticket, out_fd)


@dataclass(eq=False, repr=False)
class LocalSide:
    """The backend compiles running here: at most `jobs` at once, each in a slot of `gate`."""

    gate: Gate
    jobs: int
    cpu: log.CpuLedger = field(default_factory=log.CpuLedger)  # the run's own CPU: starts charge theirs
    running: dict[int, Running] = field(default_factory=dict)  # pidfd -> child
    logs: list[int] = field(default_factory=list)  # logs of compiles that ended, emptied for the next ones
    forks: Forks = field(default_factory=Forks)  # compiles forked from one clang of the run (forkserver.py)

    def take(self) -> Ticket | None:
        """A slot, if this run has room for one more compile and the gate gives one."""
        return self.gate.take() if len(self.running) < self.jobs else None

    def start(self, state: JobState, ticket: Ticket) -> None:
        """Start the job's compile in this slot, in the first lane free, printing to a log a
        compile that ended left (else a new one).

        SIGINT and SIGTERM are held back meanwhile (they would raise in the middle of it): it is
        started and recorded in one step, so a SIGTERM's cleanup stops it; the compile starts
        with the mask from before."""
        with self.cpu.charge(log.Cpu.STARTS):
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
            try:
                child = spawn(state, self.gate, ticket, mask, self.forks.env, self.forks, self.logs.pop() if self.logs else -1)
                lanes = {r.lane for r in self.running.values()}
                child.lane = next(n for n in range(len(lanes) + 1) if n not in lanes)
                self.running[child.child.pidfd] = child
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def start_if_free(self, state: JobState) -> bool:
        """Start the job's compile if a slot is free."""
        ticket = self.take()
        if ticket is None:
            return False
        self.start(state, ticket)
        return True

    def of(self, state: JobState) -> Running | None:
        """The job's compile here, while it runs."""
        return next((r for r in self.running.values() if r.state is state), None)

    def unkeyed(self) -> Running | None:
        """A compile that started before its key was made, while it runs."""
        return next((r for r in self.running.values() if not r.state.keyed), None)

    def stop(self, child: Running) -> None:
        """Stop a compile whose object came from elsewhere (a hit after all, a worker's): killed
        and reaped, so it writes no more, and its slot given back."""
        del self.running[child.child.pidfd]
        child.child.kill(signal.SIGTERM)
        child.drop()
        self.gate.give(child.ticket)

    def wait(self, for_slot: bool, others: list[int], timeouts: list[float | None],
             busy: bool) -> tuple[list[Running], bool]:
        """Wait for a child to end, for a slot (if there is room for one), or for one of `others`
        to be readable, as long as the shortest of `timeouts` (None: no limit) or not at all
        (busy: only look); returns the children that ended, taken out of `running`, and whether
        anything else was readable (a slot's or a claim's Waker, a remote answer)."""
        fds = list(self.running)
        timeouts = list(timeouts)
        if for_slot and len(self.running) < self.jobs:
            fds += self.gate.fds()
            timeouts.append(self.gate.timeout)
        fds += others
        timeout = 0 if busy else min((t for t in timeouts if t is not None), default=None)
        ready, _, _ = select.select(fds, [], [], POLL if not fds and timeout is None else timeout)
        ended = [self.running.pop(fd) for fd in ready if fd in self.running]
        return ended, len(ended) < len(ready)

    def ended(self, child: Running) -> tuple[Running, int, float]:
        """A child ended (no longer in `running`): its exit code and end, its slot given back,
        what it printed read (Running.out), its log emptied for the next compile (no one else
        writes to it: clang leaves no process behind that holds it; a compile stopped before
        its end has its log closed instead, stop)."""
        rc = child.child.wait()
        end = time.time()
        self.gate.give(child.ticket)
        try:
            child.out = child.printed()
            if child.out:
                os.ftruncate(child.out_fd, 0)
        except BaseException:
            child.drop()
            raise
        self.logs.append(child.out_fd)
        child.out_fd = -1
        return child, rc, end

    def close(self) -> None:
        """Stop every compile still running; close the logs kept."""
        for child in self.running.values():
            child.child.kill(signal.SIGTERM)
            child.drop()
            self.gate.give(child.ticket)
        self.running.clear()
        while self.logs:
            os.close(self.logs.pop())
        self.forks.close()


@dataclass
class Result:
    """What a compile that ended left: its object, what it printed (as clang printed it), its
    side outputs by kind, and why it does not count ('' if it does)."""

    obj: bytes
    out: str
    sides: dict[str, bytes]
    why: str


def result(state: JobState, rc: int, out: str) -> Result:
    """What the job's compile left, once it exited with `rc` having printed `out`: its object
    and side outputs, read back."""
    job = state.job
    try:
        obj = fsutil.read_bytes(job.output)
    except OSError:
        obj = b""
    why = backend.unusable(rc, obj, out)
    sides: dict[str, bytes] = {}
    for kind, _ in job.side_outputs() if not why else ():
        try:
            sides[kind] = fsutil.read_bytes(backend.side_output(job.output, kind))
        except OSError:
            why = f"wrote no .{kind}"
    return Result(obj, out, sides, why)


def write(path: str, data: bytes) -> None:
    """Write a file of the link's work directory anew: what was at `path` is unlinked first, not
    written over, for it may be a cache entry's file (Cache.link_out, Cache.put_file)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    with open(path, "wb") as f:
        f.write(data)
