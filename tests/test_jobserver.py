"""Cooperation with make: jobserver tokens, the job limit, and interruption."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from helpers import (TokenPool, backend_pids, compile_all, linker_pids, links, ltowrap_env, make_program, max_overlap,
                     run, wait_until, wrapper, write)
from ltowrap import cache as cache_mod

def test_make_j3_jobserver_limits_concurrency(project, tmp_path, tc22):
    """With '+' recipes make's jobserver is the authority: 3 links at most 3 compiles, though each
    may run 4 (LTOWRAP_JOBS) and the machine's pool would allow 4 (so a client that takes no
    tokens, or none at all, fails here)."""
    programs = {p: make_program(project, p, 6) for p in ("a", "b", "c")}
    compile_all(project, tc22.clang)
    rules = "".join(f"{p}: {' '.join(objs)}\n\t+$(LINK) -o $@ $^\n" for p, objs in programs.items())
    write(project / "Makefile", f"LINK = {wrapper('ltowrap-clang')} -fuse-ld=lld\nall: a b c\n{rules}")
    done = run(["make", "-j3"], project, env=ltowrap_env(tc22, LTOWRAP_JOBS="4"))
    assert "jobserver" not in done.stderr.lower()
    recs = links(tmp_path)
    assert len(recs) == 3 and all(r["decision"] == "distributed" and r["slots"] == "jobserver" for r in recs)
    assert sum(r["backend_compiles"] for r in recs) == 21
    assert max_overlap(recs) <= 3
    for p in programs:
        assert run([f"./{p}"], project).stdout.strip()


@pytest.mark.parametrize("style", ["fifo", "pipe"])
def test_every_token_is_returned(project, tmp_path, tc22, style):
    pool = TokenPool(style, tokens=1, tmp=tmp_path)
    programs = {p: make_program(project, p, 8) for p in ("a", "b")}
    compile_all(project, tc22.clang)
    # Each link may run 4 and the machine's pool has 4 slots: only the jobserver keeps it to 3.
    env = ltowrap_env(tc22, MAKEFLAGS=pool.makeflags, LTOWRAP_JOBS="4")
    procs = [subprocess.Popen([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", p, *objs], cwd=project, env=env,
                              pass_fds=pool.pass_fds, stderr=subprocess.PIPE, text=True)
             for p, objs in programs.items()]
    for p in procs:
        _, err = p.communicate()
        assert p.returncode == 0, err
        assert "ltowrap:" not in err
    recs = links(tmp_path)
    assert all(r["decision"] == "distributed" and r["slots"] == "jobserver" for r in recs)
    # Two links, each with its implicit slot, plus the one token.
    assert max_overlap(recs) <= 3
    assert pool.count() == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_link_leaves_nothing_behind(project, tmp_path, tc22, sig):
    pool = TokenPool("fifo", tokens=1, tmp=tmp_path)
    objs = make_program(project, "a", 16)
    compile_all(project, tc22.clang)
    cache = tmp_path / "cache"
    marker = str(cache).encode()
    env = ltowrap_env(tc22, LTOWRAP_JOBS="2", MAKEFLAGS=pool.makeflags)
    # Under a shell, as make runs it: the shell reports the link's own end as 128 + the signal.
    # The link takes the signal's default action, as under make in a terminal, even when the suite
    # itself was started where SIGINT is ignored (a background job of a shell without job control).
    # The child inherits the disposition set here for its start, not in a preexec_fn: Python run
    # in a forked child of this process, which earlier tests left with grpc's threads, can die
    # there (SIGABRT) before it execs.
    before = signal.signal(sig, signal.SIG_DFL)
    try:
        proc = subprocess.Popen(["sh", "-c", '"$@"; echo "status $?"', "sh", wrapper("ltowrap-clang"), "-fuse-ld=lld",
                                 "-o", "a", *objs], cwd=project, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(sig, before)
    # Both compiles running: the link holds its implicit slot and the pool's one token.
    wait_until(lambda: len(backend_pids(marker)) >= 2, 30, "two backend compiles at once", running=[proc])
    # The clang driver we start forks the wrapper's ld.lld entry; signal that whole group's link.
    for pid in linker_pids(marker):
        os.kill(pid, sig)
    out, _ = proc.communicate(timeout=30)
    assert out == f"status {128 + sig}\n"  # died of the signal itself (130 for SIGINT), not exit(1)
    assert backend_pids(marker) == []  # its compiles were stopped and reaped before it died
    assert list((cache / "tmp").iterdir()) == []
    for path in (cache / "o").rglob("*"):
        if path.is_file():
            assert cache_mod.decode(path.read_bytes()) is not None
    assert pool.count() == 1
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", "a", *objs], project,
        env=ltowrap_env(tc22))
    assert run(["./a"], project).stdout.strip()

