"""remote/execute.Workers' bookkeeping of the jobs out on the workers, against a session that
answers when the test says: each answer is taken once, dropped jobs never, and a pass of the
loop looks at the jobs that answered, not at every job out."""

from __future__ import annotations

import select
import threading
from concurrent.futures import Future
from types import SimpleNamespace

from needs import require_module

require_module("grpc")

from ltowrap.remote.client import EXECUTING, QUEUED, Running  # noqa: E402
from ltowrap.remote.execute import Workers  # noqa: E402
from ltowrap.remote.session import Execution, Reply, Session  # noqa: E402
from ltowrap.stats import Stats  # noqa: E402


class CountedFuture(Future):
    """A future that counts how often it is asked whether it is done."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def done(self) -> bool:
        self.looks += 1
        return super().done()


class Answering:
    """The part of a Session that Workers uses; each job's answer comes when answer() is called."""

    down = ""

    def __init__(self) -> None:
        self.sent: dict[str, Execution] = {}
        self.moved: dict[str, object] = {}

    def room(self, out: int, sent, queue: bool) -> bool:
        return True

    def send(self, w, done, moved=None) -> Execution:
        future = CountedFuture()
        future.add_done_callback(lambda _: done())
        execution = Execution(SimpleNamespace(name=w.job.output), future, Running(moved))
        self.sent[w.job.output], self.moved[w.job.output] = execution, moved
        return execution

    def answer(self, output: str) -> None:
        """Answer from another thread, as an execution's thread does."""
        t = threading.Thread(target=self.sent[output].future.set_result, args=((None, f"{output} failed"),))
        t.start()
        t.join()

    def taken(self, execution: Execution) -> Reply:
        served, error = execution.future.result()
        return Reply(execution.action.name, served, error)


def _work(output: str):
    return SimpleNamespace(job=SimpleNamespace(output=output))


def _readable(fds: list[int]) -> bool:
    return bool(fds) and bool(select.select(fds, [], [], 0)[0])


def test_each_answer_lands_once_in_the_order_it_came_and_a_dropped_job_never():
    session = Answering()
    workers: Workers[str] = Workers(session, queue=True)  # type: ignore[arg-type]  # the part it uses
    outputs = [f"j{i}.o" for i in range(6)]
    for out in outputs:
        assert workers.send(_work(out), state=out)
    assert not _readable(workers.fds())

    session.answer("j3.o")
    session.answer("j1.o")
    assert _readable(workers.fds())  # the loop is woken
    assert [landed.state for landed in workers.landed()] == ["j3.o", "j1.o"]
    assert [landed.reply.error for landed in workers.landed()] == []  # taken once
    assert not _readable(workers.fds())

    workers.drop("j2.o")  # made here first: its execution is cancelled, which is a landing too
    assert session.sent["j2.o"].future.cancelled()
    assert list(workers.landed()) == []
    assert sorted(workers.stragglers()) == ["j0.o", "j4.o", "j5.o"]

    for out in ("j5.o", "j0.o", "j4.o"):
        session.answer(out)
    assert [landed.state for landed in workers.landed()] == ["j5.o", "j0.o", "j4.o"]
    assert not workers.busy
    workers.close()


def test_a_pass_of_the_loop_looks_at_the_jobs_that_answered_not_at_every_job_out():
    session = Answering()
    workers: Workers[str] = Workers(session, queue=True)  # type: ignore[arg-type]
    for i in range(200):
        workers.send(_work(f"j{i}.o"), state=f"j{i}.o")
    for i in range(0, 200, 20):
        session.answer(f"j{i}.o")
        assert len(list(workers.landed())) == 1
    looks = sum(e.future.looks for e in session.sent.values())
    assert looks <= 10 * 2, looks  # each answer looked at once or twice, not 200 looks a pass
    workers.close()


def test_a_stage_change_wakes_the_loop_only_when_jobs_may_not_queue():
    """With jobs queueing on the server (no local side), room() does not read the stages: an
    execution leaving the server's queue must not cost a pass of the executor's loop."""
    for queue in (True, False):
        session = Answering()
        workers: Workers[str] = Workers(session, queue=queue)  # type: ignore[arg-type]
        workers.send(_work("a.o"), state="a.o")
        assert (session.moved["a.o"] is None) == queue
        if not queue:
            session.moved["a.o"]()  # type: ignore[operator]
            assert _readable(workers.fds())
        workers.close()


def _session(limit: int) -> Session:
    client = SimpleNamespace(endpoint=SimpleNamespace(exec_timeout=60), pressure=SimpleNamespace(limit=limit))
    session = Session(client, "execute", {}, Stats(), str, 4)  # type: ignore[arg-type]
    session._inputs["a.o"] = Future()  # an upload asked for: jobs may be sent
    return session


def _executions(*stages: int | None) -> list[Execution]:
    out = []
    for stage in stages:
        running = Running(lambda: None)
        running.stage, running.sent = stage, running.sent - 10  # sent long ago: waiting, if queued
        out.append(Execution(SimpleNamespace(name="x"), Future(), running))
    return out


def test_room_counts_the_jobs_out_against_the_requests_in_flight():
    session = _session(limit=3)
    assert session.room(2, iter(()), queue=True)
    assert not session.room(3, iter(()), queue=True)


def test_room_reads_the_jobs_out_only_when_jobs_may_not_queue():
    """Jobs that may queue on the server are sent while requests may go: the jobs out are not
    looked at (a look a send at every job out would cost the loop as many steps as there are jobs out)."""

    def unread():
        raise AssertionError("the jobs out were read")
        yield  # a generator

    session = _session(limit=8)
    assert session.room(1, unread(), queue=True)
    executing, queued = _executions(EXECUTING), _executions(EXECUTING, QUEUED)
    assert session.room(1, iter(executing), queue=False)
    assert not session.room(2, iter(queued), queue=False)  # one waits for a worker: the workers are all busy
