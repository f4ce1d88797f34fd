"""The executor's queue on a long link: the next job to key (Preparer.next_unkeyed) and the next
jobs to ask a remote service for (RemoteSide.to_ask) are found looking at each job once a run,
not by a scan of the whole queue for every job (quadratic: a 20,000-module link would spend
minutes on it)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from ltowrap.jobs.prepare import Preparer, Stage
from ltowrap.jobs.remoteside import ASK_AT_ONCE, RemoteSide

JOBS = 2000


class Job:
    """A JobState as the queue's searches see it: its stage, each look counted."""

    looks = 0

    def __init__(self) -> None:
        self._stage = Stage.COMMAND

    @property
    def stage(self) -> Stage:
        Job.looks += 1
        return self._stage

    @stage.setter
    def stage(self, stage: Stage) -> None:
        self._stage = stage

    @property
    def keyed(self) -> bool:
        return self.stage >= Stage.KEYED


def test_each_job_is_looked_at_about_once_to_find_the_next_to_key():
    """Keys made one at a time while the heaviest jobs start (pop) and a few hits leave the queue,
    as Executor._prepare_next and _start do: every job keyed once, in the queue's order from its end."""
    queue = [Job() for _ in range(JOBS)]
    prep = SimpleNamespace(_keyed_from=sys.maxsize)
    Job.looks, keyed = 0, []
    while (i := Preparer.next_unkeyed(prep, queue)) is not None:
        queue[i].stage = Stage.KEYED
        keyed.append(queue[i])
        if len(keyed) % 7 == 0:
            del queue[i]  # a hit leaves the queue
        if len(keyed) % 3 == 0:
            queue.pop()  # the next job starts
            queue.append(Job())  # a job back from elsewhere, keyed
            queue[-1].stage = Stage.ANSWERED
    assert len(keyed) == len(set(map(id, keyed))) > JOBS * 0.6
    assert all(j.keyed for j in queue)
    assert Job.looks <= 3 * JOBS, Job.looks


def test_each_job_is_looked_at_about_once_to_find_the_next_to_ask_for():
    queue = [Job() for _ in range(JOBS)]
    far = SimpleNamespace(_asked_from=sys.maxsize, prepare=lambda state: setattr(state, "stage", Stage.KEYED) or False)
    Job.looks, asked = 0, 0
    while asking := RemoteSide.to_ask(far, queue):
        assert len(asking) <= ASK_AT_ONCE
        for state in asking:  # RemoteSide.ask
            state.stage = Stage.ASKED
        asked += len(asking)
    assert asked == JOBS
    assert Job.looks <= 4 * JOBS, Job.looks
