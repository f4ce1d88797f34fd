"""The executor's loop between two waits: what a wait reports, and when the lock directory's Waker is drained.

A round whose wait only saw a child end (or a busy round's look that saw nothing) leaves the
Waker alone: its events, if any, are read by the first wait that selects it and finds it
readable, and the locks are tried again after that drain as after any other.
"""

from __future__ import annotations

import io
import os
import select
from types import SimpleNamespace

from ltowrap import locks, log, proc, progress
from ltowrap.jobs.executor import Executor, Outcome
from ltowrap.jobs import local
from ltowrap.jobs.local import LocalSide, Running
from ltowrap.jobs.slots import Local, Ticket


def test_a_wait_says_whether_something_besides_a_child_woke_it():
    here = LocalSide(Local(jobs=2), 2)
    r, w = os.pipe()
    try:
        assert here.wait(False, [r], [None], busy=True) == ([], False)  # a look: nothing
        child = proc.spawn(["/bin/true"], watch=True)
        running = SimpleNamespace(child=child)
        here.running[child.pidfd] = running  # type: ignore[assignment]
        assert here.wait(False, [r], [None], busy=False) == ([running], False)  # a child ended, nothing else
        child.wait()
        os.write(w, b"x")
        assert here.wait(False, [r], [None], busy=True) == ([], True)  # something else is readable
        assert not here.running
    finally:
        os.close(r)
        os.close(w)


class _Drains:
    def __init__(self) -> None:
        self.drains = 0

    def drain(self) -> None:
        self.drains += 1


def test_the_waker_is_drained_only_after_a_wait_that_something_besides_a_child_woke():
    lock_dir = _Drains()
    for woken, drains in ((False, 0), (True, 1)):
        lock_dir.drains = 0
        executor = SimpleNamespace(cache=SimpleNamespace(claims=None, locks=lock_dir), far=None,
                                   here=SimpleNamespace(wait=lambda *args, woken=woken: (["ended"], woken)))
        assert Executor._wait(executor, for_slot=True, for_claims=False, busy=False) == ["ended"]  # type: ignore[arg-type]
        assert lock_dir.drains == drains, woken


def test_a_drain_forgets_every_event_queued_and_does_not_block_when_none_is(tmp_path):
    waker = locks.Waker()
    assert waker.fds(), "no inotify here: waits would fall back to polling"
    waker.watch(str(tmp_path))
    waker.drain()  # nothing queued: returns at once
    # More events than one read takes: alternating names, so the kernel merges none of them.
    for n in range(5000):
        os.close(os.open(tmp_path / f"f{n % 2}", os.O_WRONLY | os.O_CREAT))
    assert select.select(waker.fds(), [], [], 0)[0] == waker.fds()
    waker.drain()
    assert select.select(waker.fds(), [], [], 0)[0] == []
    os.close(os.open(tmp_path / "f0", os.O_WRONLY))
    assert select.select(waker.fds(), [], [], 0)[0] == waker.fds()  # it still watches
    waker.close()


def test_what_a_compile_printed_is_read_back_and_its_log_kept():
    for text in ("", "warning: something\n"):
        fd = local.new_log()
        os.write(fd, text.encode())
        running = Running(proc.Child(0), None, 0.0, Ticket(), fd)  # type: ignore[arg-type]
        assert running.printed() == text
        assert running.out_fd == fd
        running.drop()
        assert running.out_fd == -1


def _ended(here: LocalSide, argv: list[str]) -> Running:
    """Run `argv` as the compile of a job (its shard there already), printing to a log of `here`; once ended."""
    state = SimpleNamespace(argv=argv, job=SimpleNamespace(shard_path=__file__))
    here.start(state, Ticket())  # type: ignore[arg-type]
    (running,) = here.running.values()
    ended, _ = here.wait(False, [], [None], busy=False)
    assert ended == [running]
    return here.ended(running)[0]


def test_a_log_a_compile_left_is_emptied_and_the_next_compile_prints_to_it_from_its_start():
    """Its offset is where the first compile left it, past the end once emptied: the log is
    opened for appending, so the second compile's text is not written after a hole."""
    here = LocalSide(Local(jobs=1), 1)
    try:
        first = _ended(here, ["/bin/sh", "-c", "echo a long first line"])
        assert first.out == "a long first line\n" and first.out_fd == -1 and len(here.logs) == 1
        log_fd = here.logs[0]
        second = _ended(here, ["/bin/sh", "-c", "echo second"])
        assert second.out == "second\n" and here.logs == [log_fd]  # the same log, emptied
        third = _ended(here, ["/bin/true"])
        assert third.out == "" and here.logs == [log_fd]
    finally:
        here.close()
    assert not here.logs
    try:
        os.fstat(log_fd)
    except OSError:
        return
    raise AssertionError("the log was not closed")


def test_a_compile_stopped_before_its_end_has_its_log_closed_not_kept():
    here = LocalSide(Local(jobs=1), 1)
    try:
        state = SimpleNamespace(argv=["/bin/sleep", "60"], job=SimpleNamespace(shard_path=__file__))
        here.start(state, Ticket())  # type: ignore[arg-type]
        (running,) = here.running.values()
        log_fd = running.out_fd
        here.stop(running)
        assert not here.logs and running.out_fd == -1
        try:
            os.fstat(log_fd)
        except OSError:
            return
        raise AssertionError("the log was not closed")
    finally:
        here.close()


def test_the_progress_line_counts_the_modules_done_and_cached():
    stream = io.StringIO()
    bar = progress.Progress("prog", 3, stream)
    for cached in (True, False, True):
        bar.one_more(cached)
    lines = stream.getvalue().split("\r\x1b[K")[1:]
    assert [line.split("  ")[1:3] for line in lines] == [
        ["1/3 modules", "(1 cached)"], ["2/3 modules", "(1 cached)"], ["3/3 modules", "(2 cached)"]]


def test_each_outcome_moves_the_progress_line_on():
    stream = io.StringIO()
    executor = SimpleNamespace(outcomes=[], res=SimpleNamespace(progress=progress.Progress("prog", 2, stream)))
    for source in (log.Source.CACHED, log.Source.COMPILED):
        Executor._done(executor, Outcome(None, source, 0.0, 0.0))  # type: ignore[arg-type]
    assert len(executor.outcomes) == 2
    assert stream.getvalue().split("\r\x1b[K")[-1].startswith("ltowrap: prog  2/2 modules  (1 cached)")
