"""Execute mode's second side: the remote workers, beside the local slots.

The executor's queue (longest first) feeds whichever side frees first: a local slot, or
the workers, free when no job sent is waiting in the server's queue (Session.room). Once
the queue is empty, a free local slot races the job sent last that is still out (a
straggler): the first result wins and the other is cancelled. This module keeps the jobs
out on the workers and hears of their answers; jobs/remoteside.py decides what to send
and race, and the executor starts and stops the local compiles and takes the objects.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from .session import Execution, Reply, Session, Work

S = TypeVar("S")  # the executor's record of a job (jobs/prepare.JobState), carried through untouched


class Wake:
    """A descriptor select() sees readable once a remote answer is in (written from the answer's thread).

    Closed under its lock: a late answer (a cancelled execution) never writes to a
    descriptor number that has been reused since.
    """

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self) -> None:
        with self._lock:
            if not self._closed:
                try:
                    os.write(self._write, b"x")
                except BlockingIOError:  # already readable
                    pass

    def fd(self) -> int:
        return self._read

    def drain(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


@dataclass
class Sent(Generic[S]):
    """A job out on the workers."""

    execution: Execution
    state: S
    start: float = field(default_factory=time.time)


@dataclass
class Landed(Generic[S]):
    """A sent job's answer, in: the object (reply.served) or why there is none (reply.error)."""

    state: S
    reply: Reply
    start: float  # when it was sent


class Workers(Generic[S]):
    """The jobs of one run out on the workers, in the order they were sent."""

    def __init__(self, session: Session, queue: bool) -> None:
        self.session = session
        self.queue = queue  # jobs may wait in the server's queue: there is no local side to give them to
        self._wake = Wake()
        self._out: dict[str, Sent[S]] = {}  # job output -> the job out on the workers now
        # The jobs whose answer is in (or that were cancelled), as they came, appended from the
        # answers' threads: landed() takes these rather than looking at every job out.
        self._in: deque[str] = deque()

    @property
    def busy(self) -> bool:
        """Some job is out: an answer is still to come."""
        return bool(self._out)

    def fds(self) -> list[int]:
        """What to select() on for an answer: readable once one is in."""
        return [self._wake.fd()] if self._out else []

    def send(self, work: Work, state: S) -> bool:
        """Send the job if the workers have room."""
        if not self.session.room(len(self._out), (s.execution for s in self._out.values()), queue=self.queue):
            return False
        output = work.job.output

        def done() -> None:  # on the answer's thread, maybe before send() returns
            self._in.append(output)
            self._wake()

        # A stage change matters to room() only when jobs may not queue: else the loop is woken
        # by answers alone (a wake is a pass of the executor's loop).
        self._out[output] = Sent(self.session.send(work, done, None if self.queue else self._wake), state)
        return True

    def stragglers(self) -> Iterator[S]:
        """The jobs still out with no answer yet, the one sent last first (the furthest from done)."""
        for sent in reversed(list(self._out.values())):
            if not sent.execution.future.done():
                yield sent.state

    def landed(self) -> Iterator[Landed[S]]:
        """The answers that are in (the session counts them), their jobs no longer out."""
        self._wake.drain()
        while self._in:
            output = self._in.popleft()
            sent = self._out.get(output)
            # None: dropped since (drop cancels it, which lands it here too)
            if sent is not None and sent.execution.future.done():
                del self._out[output]
                yield Landed(sent.state, self.session.taken(sent.execution), sent.start)

    def drop(self, output: str) -> None:
        """The job was made here first: the worker's run, if it is out, is dropped."""
        sent = self._out.pop(output, None)
        if sent is not None:
            sent.execution.cancel()

    def close(self) -> None:
        """Drop every job still out, then stop hearing of answers."""
        for sent in self._out.values():
            sent.execution.cancel()
        self._out.clear()
        self._wake.close()
