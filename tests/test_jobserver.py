"""Cooperation with make: jobserver tokens, the job limit, and interruption."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import ltowrap_env, links, run, wrapper, write
from ltowrap import cache as cache_mod

HEAVY = """
static double poly{k}(double x, int n) {{ double s = 0; for (int i = 0; i < n; i++) s = s * x + (i ^ {k}); return s; }}
double work{k}(double x) {{ double t = 0; for (int j = 1; j < 40; j++) t += poly{k}(x / j, j + {k}); return t; }}
"""


def make_program(d: Path, name: str, modules: int) -> list[str]:
    objs = []
    decls = "".join(f"double work{k}(double);\n" for k in range(modules))
    calls = " + ".join(f"work{k}(x)" for k in range(modules))
    write(d / f"{name}_main.c", f'#include <stdio.h>\n{decls}int main(void){{ double x = 1.5; printf("%.3f\\n", {calls}); return 0; }}\n')
    objs.append(f"{name}_main.o")
    for k in range(modules):
        write(d / f"{name}_m{k}.c", HEAVY.format(k=k))
        objs.append(f"{name}_m{k}.o")
    return objs


def compile_all(d: Path, clang: str) -> None:
    for src in sorted(d.glob("*.c")):
        run([clang, "-O2", "-flto=thin", "-c", src.name], d)


def max_overlap(records: list[dict]) -> int:
    events = []
    for r in records:
        for b in r["backends"]:
            if not b["cached"]:
                events += [(b["start"], 1), (b["end"], -1)]
    level = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        level += delta
        peak = max(peak, level)
    return peak


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


class TokenPool:
    """A jobserver of our own, fifo or pipe style, that can count its tokens afterwards."""

    def __init__(self, style: str, tokens: int, tmp: Path) -> None:
        self.style = style
        self.tokens = tokens
        self.pass_fds: tuple[int, ...] = ()
        if style == "fifo":
            self.path = tmp / "jobserver.fifo"
            os.mkfifo(self.path)
            self.r = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            self.w = os.open(self.path, os.O_WRONLY)
            self.makeflags = f" -j{tokens + 1} --jobserver-auth=fifo:{self.path}"
        else:
            self.r, self.w = os.pipe()
            os.set_blocking(self.r, False)
            self.pass_fds = (self.r, self.w)
            self.makeflags = f" -j{tokens + 1} --jobserver-auth={self.r},{self.w}"
        os.write(self.w, b"+" * tokens)

    def count(self) -> int:
        n = 0
        while True:
            try:
                chunk = os.read(self.r, 1024)
            except BlockingIOError:
                return n
            if not chunk:
                return n
            n += len(chunk)


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


def _backend_pids(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd and b"-fthinlto-index" in cmd:
                pids.append(int(entry))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_link_leaves_nothing_behind(project, tmp_path, tc22, sig):
    pool = TokenPool("fifo", tokens=1, tmp=tmp_path)
    objs = make_program(project, "a", 16)
    compile_all(project, tc22.clang)
    cache = tmp_path / "cache"
    env = ltowrap_env(tc22, LTOWRAP_JOBS="2", MAKEFLAGS=pool.makeflags)
    # Under a shell, as make runs it: the shell reports the link's own end as 128 + the signal.
    proc = subprocess.Popen(["sh", "-c", '"$@"; echo "status $?"', "sh", wrapper("ltowrap-clang"), "-fuse-ld=lld",
                             "-o", "a", *objs], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 30
    while time.time() < deadline and not _backend_pids(str(cache)):
        time.sleep(0.02)
    assert _backend_pids(str(cache)), "no backend compile started"
    time.sleep(0.2)
    # The clang driver we start forks the wrapper's ld.lld entry; signal that whole group's link.
    for pid in _linker_pids(str(cache)):
        os.kill(pid, sig)
    out, _ = proc.communicate(timeout=30)
    assert out == f"status {128 + sig}\n"  # died of the signal itself (130 for SIGINT), not exit(1)
    time.sleep(0.2)
    assert _backend_pids(str(cache)) == []
    assert list((cache / "tmp").iterdir()) == []
    for path in (cache / "o").rglob("*"):
        if path.is_file():
            assert cache_mod.decode(path.read_bytes()) is not None
    assert pool.count() == 1
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", "a", *objs], project,
        env=ltowrap_env(tc22))
    assert run(["./a"], project).stdout.strip()


def _linker_pids(marker: str) -> list[int]:
    """ltowrap's link processes running for this test (its cache directory is in their environment)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            # The link runs in the clang entry itself (`python -S ltowrap-entry`), or (when the
            # driver runs it) in ltowrap-ld.lld.
            if any(c.endswith((b"ltowrap-ld.lld", b"ltowrap-entry")) for c in cmd[1:3]) and marker.encode() in environ:
                pids.append(int(entry))
    return pids
