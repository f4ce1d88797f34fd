"""ltowrap as lld's DTLTO distributor (LLVM >= 21; tested with lld 22)."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from helpers import (TokenPool, backend_pids, compile_all, distributor_pids, dtlto_build, log_lines, ltowrap_env,
                     make_program, run, stats_json, wait_until, wrapper, write)

def test_dtlto_link_runs_and_relink_hits_the_cache(project, tc22):
    dtlto_build(project, tc22)
    assert run(["./prog"], project).stdout == "130\n"
    (project / "prog").unlink()
    dtlto_build(project, tc22)
    assert run(["./prog"], project).stdout == "130\n"
    runs = [r for r in log_lines(project.parent) if r["tool"] == "distributor"]
    assert [(r["backend_compiles"], r["backend_hits"]) for r in runs] == [(3, 0), (0, 3)]
    s = stats_json()
    assert s["distributor_runs"] == 2 and s["backend_hits"] == 3 and s["backend_misses"] == 3


def test_failing_job_fails_the_link_with_its_own_error(project, tc22):
    done = dtlto_build(project, tc22, "-Wl,--thinlto-remote-compiler-arg=-fno-such-option", check=False)
    assert done.returncode != 0
    assert "-fno-such-option" in done.stderr  # clang's own complaint, passed on
    assert not (project / "prog").exists()


def test_unknown_field_is_a_clear_error(project, tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"common": {"args": ["clang"], "linker_output": "x", "inputs": []}, "jobs": [],
                               "priority": 3}))
    done = run([wrapper("ltowrap-distributor"), str(job)], project, check=False)
    assert done.returncode == 2 and "unknown field 'priority'" in done.stderr


def test_corrupt_module_job_fails(project, tmp_path, tc22):
    (project / "bad.o").write_bytes(b"BC\xc0\xde" + b"\x00garbage" * 10)
    (project / "bad.o.thinlto.bc").write_bytes(b"")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "common": {"linker_output": "x", "args": [tc22.clang, "-c", "-O2"], "inputs": []},
        "jobs": [{"args": ["bad.o", "-fthinlto-index=bad.o.thinlto.bc", "-o", "bad.native.o"],
                  "inputs": ["bad.o", "bad.o.thinlto.bc"], "outputs": ["bad.native.o"]}],
    }))
    done = run([wrapper("ltowrap-distributor"), str(job)], project, check=False)
    assert done.returncode == 1
    assert "bad.o" in done.stderr
    assert stats_json()["backend_failures"] == 1


@pytest.mark.parametrize("tokens", [1])
def test_dtlto_under_make_respects_the_jobserver(project, tmp_path, tc22, tokens):
    for k in range(6):
        write(project / f"m{k}.c", f"int m{k}(int x){{ int s = 0; for (int i = 0; i < x; i++) s += i * {k + 1}; return s; }}\n")
    calls = " + ".join(f"m{k}(argc)" for k in range(6))
    decls = "".join(f"int m{k}(int);" for k in range(6))
    write(project / "main.c", f"{decls}\nint main(int argc, char **argv){{ return ({calls}) & 1; }}\n")
    objs = " ".join(["main.o", *(f"m{k}.o" for k in range(6))])
    write(project / "Makefile", f"CC = {tc22.clang}\nCFLAGS = -O2 -flto=thin\nprog: {objs}\n"
          f"\t+$(CC) -fuse-ld=lld -flto=thin -fthinlto-distributor={wrapper('ltowrap-distributor')} -o $@ $^\n")
    # The distributor may run 4 (and the machine's pool has 4 slots): only the jobserver keeps it to 2.
    done = run(["make", f"-j{tokens + 1}"], project, env=ltowrap_env(LTOWRAP_JOBS="4"))
    assert "ltowrap" not in done.stderr
    runs = [r for r in log_lines(tmp_path) if r["tool"] == "distributor"]
    events = sorted([(b["start"], 1) for b in runs[0]["backends"]] + [(b["end"], -1) for b in runs[0]["backends"]],
                    key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert runs[0]["backend_compiles"] == 7 and runs[0]["slots"] == "jobserver" and peak <= tokens + 1


def test_sigterm_stops_the_children_and_returns_the_tokens(project, tmp_path, tc22):
    pool = TokenPool("fifo", tokens=1, tmp=tmp_path)
    objs = make_program(project, "a", 16)
    compile_all(project, tc22.clang)
    status = tmp_path / "status"
    distributor = write(tmp_path / "distributor.sh", f'#!/bin/sh\n"{wrapper("ltowrap-distributor")}" "$@"\n'
                        f'echo $? > "{status}"\nexit 1\n')
    distributor.chmod(0o755)
    marker = str(tmp_path / "cache").encode()
    env = ltowrap_env(LTOWRAP_JOBS="2", MAKEFLAGS=pool.makeflags)
    link = subprocess.Popen([tc22.clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={distributor}",
                             "-o", "a", *objs], cwd=project, env=env, stderr=subprocess.PIPE)
    wait_until(lambda: backend_pids(marker), 60, "a backend compile", running=[link])
    (pid,) = distributor_pids(marker)
    os.kill(pid, signal.SIGTERM)
    link.wait(timeout=60)
    assert link.returncode != 0
    assert status.read_text() == f"{128 + signal.SIGTERM}\n"  # it died of the signal, as lld's own would
    assert backend_pids(marker) == []  # its compiles were stopped (and reaped) first
    assert pool.count() == 1  # the token it held is back
    (rec,) = [r for r in log_lines(tmp_path) if r["tool"] == "distributor"]
    assert (rec["decision"], rec["reason"]) == ("interrupted", "SIGTERM")


def test_what_the_backends_print_reaches_the_link_cold_and_on_hits(project, tc22):
    """As lld's own distributor leaves it: each backend clang's stderr is the link's, and a
    job served from the cache prints what its compile printed."""
    write(project / "big.c", "extern void use(char *);\nint big(int x) { char b[4000]; use(b); return b[x]; }\n")
    write(project / "main.c", "int big(int);\nvoid use(char *p) { p[0] = 1; }\nint main(int c, char **v) { (void)v; return big(c) & 1; }\n")
    run([tc22.clang, "-O2", "-flto=thin", "-Wframe-larger-than=256", "-c", "big.c"], project)
    run([tc22.clang, "-O2", "-flto=thin", "-c", "main.c"], project)
    link = [tc22.clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={wrapper('ltowrap-distributor')}",
            "main.o", "big.o", "-o", "prog"]
    for _ in range(2):
        done = run(link, project)
        assert "stack frame size" in done.stderr and "exceeds limit (256)" in done.stderr, done.stderr
    runs = [r for r in log_lines(project.parent) if r["tool"] == "distributor"]
    assert [(r["backend_compiles"], r["backend_hits"]) for r in runs] == [(2, 0), (0, 2)]
