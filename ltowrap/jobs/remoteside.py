"""The remote service's side of a run of backend jobs: ask it for jobs, take its answers,
send it jobs to run (execute mode), race its stragglers, take what lands.

The executor (executor.py) keeps the queue and the local compiles; it hands this side the
jobs as they come up and asks it, once it has no local slot left, whether a job may wait for
the workers. Asking goes a few jobs at a time (ASK_AT_ONCE), in the background: the replies
are taken as the loop comes round (`answered`). In execute mode a job the remote cache lacks
may go to the workers (remote/execute.py); once the queue is empty, a free local slot races
the job sent last that is still out, and the first result wins. What this side knows of each
job is a `RemoteJob`, kept here: the local side never reads it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from .. import cachekey, log
from .prepare import BackendCommand, JobState, Resources, Stage

if TYPE_CHECKING:
    from ..remote.execute import Workers
    from ..remote.session import Asked, Served, Session, Work

# Jobs asked of the remote service at once: each takes its key and action (Python's work
# on its shard), then they share one round trip of lookups and one FindMissingBlobs. Few, so that
# the first job goes out after a few keys rather than all of them (a 400-module link's keys
# take seconds); the next ones are asked while the first run.
ASK_AT_ONCE = 8


@dataclass
class RemoteJob:
    """What the remote side knows of one job."""

    unserved: str = ""  # why the remote service did not serve it (then it is never sent)
    work: Work | None = None  # execute mode: what the workers would run (None: it may not be sent)
    here: bool = False  # it might have gone to the workers and was compiled here: the local side's share
    raced: bool = False  # run on both sides at once


@dataclass
class _Asking:
    """Jobs whose remote lookups are under way (RemoteSide.ask)."""

    states: list[JobState]
    work: list[Work]
    asked: Asked
    start: float


@dataclass
class RemoteSide:
    session: Session
    res: Resources
    backend: BackendCommand
    prepare: Callable[[JobState], bool]  # make a job's key; True if the local cache served it
    take: Callable[[JobState, Served, str, float], None]  # an object the remote served, from its start
    span: tuple[float, float] | None = None  # from the first remote lookup to the last one
    jobs: dict[str, RemoteJob] = field(default_factory=dict)  # job output -> what this side knows of it
    _asking: list[_Asking] = field(default_factory=list)  # remote lookups under way, the first asked first
    _workers: Workers[JobState] | None = None  # execute mode, while jobs may be sent
    _asked_from: int = sys.maxsize  # in the run's queue, every job from here on has been asked for (to_ask)

    def of(self, state: JobState) -> RemoteJob:
        return self.jobs.setdefault(state.output, RemoteJob())

    def _sendable_job(self, state: JobState) -> bool:
        """May the remote service make this job? Not one with side inputs (a worker has neither
        the files nor this CPU), nor any when this clang reads config files or environment (a
        remote key names the toolchain by its version only): the log says which."""
        why = self.res.local_only or ("it reads files or the CPU of this machine" if state.side else "") or \
            (f"it writes {', '.join(k for k, _ in state.job.side_outputs())} beside its object, which a remote result"
             " does not carry" if state.job.side_outputs() else "")
        if why:
            self.of(state).unserved = why
        return not why

    def to_ask(self, queue: list[JobState], first: JobState | None = None) -> list[JobState]:
        """The next jobs of the queue to ask the remote service for (`first`, taken from it,
        leads), up to ASK_AT_ONCE, their keys made; a local hit among them leaves the queue.
        Each job is looked at once a run: the jobs added to the queue's end were asked for
        already, a job leaving it only moves the ones after it forward, and those returned
        are asked for (ask) before the next look, so every job from _asked_from on stays asked."""
        asking = [first] if first is not None else []
        i = min(self._asked_from, len(queue))
        while i > 0 and len(asking) < ASK_AT_ONCE:
            i -= 1
            state = queue[i]
            if state.stage >= Stage.ASKED:
                continue
            if not state.keyed and self.prepare(state):
                del queue[i]
                continue
            asking.append(state)
        self._asked_from = i
        return asking

    def ask(self, asking: list[JobState]) -> None:
        """Ask the remote service for these jobs, those it may make: their actions are built
        here, the lookups go out in the background (`answered` takes the replies)."""
        with self.res.cpu.charge(log.Cpu.REMOTE):
            self._ask(asking)

    def _ask(self, asking: list[JobState]) -> None:
        from ..remote.session import Work

        t = time.time()
        sendable = [s for s in asking if self._sendable_job(s)]
        for state in asking:  # one that may not go has nothing to wait for
            state.stage = Stage.ASKED if any(s is state for s in sendable) else Stage.ANSWERED
        if sendable:
            # Each job with the shard identity its key took: the remote identity names it too,
            # and making it again would parse every shard a second time.
            work = [Work(replace(p.job, shard_identity=p.shard_identity or p.job.shard_identity),
                         partial(self.backend.argv, recorded=p.recorded))
                    for p in sendable]
            self._asking.append(_Asking(sendable, work, self.session.ask(work), t))
        self.span = (self.span[0] if self.span else t, time.time())

    def answered(self, queue: list[JobState], wanted: JobState | None = None) -> set[str]:
        """Take the remote replies that are in, and wait for `wanted`'s: the jobs it served
        leave the queue (their outputs are returned); in execute mode the ones it lacked may
        be sent to the workers (RemoteJob.work), their inputs uploading in the background."""
        with self.res.cpu.charge(log.Cpu.REMOTE):
            return self._answered(queue, wanted)

    def _answered(self, queue: list[JobState], wanted: JobState | None) -> set[str]:
        served: set[str] = set()
        while self._asking and (self._asking[0].asked.done or (wanted is not None and wanted.stage < Stage.ANSWERED)):
            asking = self._asking.pop(0)
            for p, w, reply in zip(asking.states, asking.work, self.session.answers(asking.asked)):
                p.stage = Stage.ANSWERED
                if reply.served is not None and p.verify:  # compiled here and compared
                    if p.expected is None:
                        p.expected = (log.Source.REMOTE_CACHED, cachekey.digest_bytes(reply.served.obj))
                elif reply.served is None:
                    if reply.error:
                        self.of(p).unserved = reply.error
                    elif self.session.mode == "execute":
                        self.of(p).work = w
                else:
                    self.take(p, reply.served, reply.action, asking.start)
                    served.add(p.output)
            sendable = [work for p in asking.states if (work := self.of(p).work) is not None]
            if sendable:
                self.session.prepare(sendable)
        if served:
            queue[:] = [s for s in queue if s.output not in served]
        return served

    # --- execute mode: the workers, beside the local slots ----------------------------------

    def open(self) -> None:
        """Start hearing of the workers, in execute mode."""
        if self.session.mode == "execute":
            from ..remote.execute import Workers

            self._workers = Workers(self.session, queue=not self.res.remote_local)

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    @property
    def busy(self) -> bool:
        """Some job is out on the workers: an answer is still to come."""
        return self._workers is not None and self._workers.busy

    def fds(self) -> list[int]:
        return self._workers.fds() if self._workers is not None else []

    def may_run_here(self, state: JobState) -> bool:
        """False for a job that should wait for the workers (remote_local off)."""
        r = self.of(state)
        return self.res.remote_local or r.work is None or bool(r.unserved) or bool(self.session.down)

    def unsent(self, state: JobState) -> None:
        """A job the workers could have had, compiled here because the service went down: a
        remote error, as for the jobs it failed."""
        r = self.of(state)
        if r.work is not None and not r.unserved and self.session.down:
            r.unserved = self.session.down
            self.res.cache.stats.add("remote_errors")

    def send(self, state: JobState) -> bool:
        """Send the job to the workers if it may go and they have room."""
        r = self.of(state)
        if r.work is None or r.unserved or self._workers is None:
            return False  # the workers failed it once already
        with self.res.cpu.charge(log.Cpu.REMOTE):
            return self._workers.send(r.work, state)

    def race(self, start_here: Callable[[JobState], bool]) -> None:
        """Free local slots compile the jobs still out on the workers too (remote.execute picks
        which first; start_here is False once no slot is free); the first result wins."""
        if not self.res.remote_local or self._workers is None:
            return
        for state in self._workers.stragglers():
            r = self.of(state)
            if r.raced:
                continue
            if not start_here(state):
                return
            r.raced = True
            self.res.cache.stats.add("remote_raced")

    def landed(self) -> Iterator[tuple[JobState, Served | None, str, float]]:
        """The remote answers that are in: each job, its object (None: the workers could not
        make it, and it is never sent again), its action and when it was sent."""
        if self._workers is None:
            return
        with self.res.cpu.charge(log.Cpu.REMOTE):
            answers = list(self._workers.landed())
        for landed in answers:
            state, reply = landed.state, landed.reply
            if reply.served is None:
                self.of(state).unserved = reply.error or "the remote execution gave no object"
            yield state, reply.served, reply.action, landed.start

    def won_here(self, state: JobState) -> None:
        """The job's compile here made its object: the worker's run, if any, is dropped."""
        if self._workers is not None:
            self._workers.drop(state.output)
        r = self.of(state)
        if r.work is not None and not r.unserved:
            r.here = True
            self.res.cache.stats.add("remote_local")

    # --- what the local side asks of it -----------------------------------------------------

    def outcome(self, state: JobState) -> tuple[str, str]:
        """A job compiled here: its remote action's name ('' if it has none) and why the service did not serve it."""
        a = self.session.actions.get(state.output)
        return a.name if a is not None else "", self.of(state).unserved

    def publish(self, state: JobState, obj: bytes, sides: bool) -> None:
        """Share an object compiled here, if a worker could have made it (no side inputs or outputs)."""
        if not state.side and not self.res.local_only and not sides:
            with self.res.cpu.charge(log.Cpu.REMOTE):
                self.session.publish(state.job, obj, state.printed)

    def raced(self, state: JobState) -> bool:
        return self.of(state).raced

    def fill(self, record: log.Record) -> None:
        """What the log records of the remote service, besides each job's source."""
        if self.span is not None:
            record.span(log.Phase.REMOTE_LOOKUP, *self.span)
        if self.session.mode == "execute":
            record.remote_local = sum(r.here for r in self.jobs.values())
            record.remote_raced = sum(r.raced for r in self.jobs.values()) or None
        record.remote_down = self.session.down or None
        record.remote_retries = self.session.retries or None
        record.remote_uploaded = self.session.client.uploaded or None
        record.remote_deduplicated = self.session.deduplicated or None
