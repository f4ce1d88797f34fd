"""The `ltowrap` command: launcher form, subcommands, help."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from conftest import links, run, wrapper, write

PROG = {"a.c": "int b(void); int main(void){ return b() == 7 ? 0 : 1; }\n", "b.c": "int b(void){ return 7; }\n"}


def _sources(d):
    for name, text in PROG.items():
        write(d / name, text)


def test_launcher_form_with_tool_name(project, tmp_path, tc22):
    _sources(project)
    env = {**os.environ, "PATH": f"{tc22.bindir}:{os.environ['PATH']}"}
    run([wrapper("ltowrap"), "clang", "-O2", "-flto=thin", "-c", "a.c", "b.c"], project, env=env)
    run([wrapper("ltowrap"), "clang", "-fuse-ld=lld", "a.o", "b.o", "-o", "prog"], project, env=env)
    run(["./prog"], project)
    assert links(tmp_path)[-1]["decision"] == "distributed"


def test_launcher_form_with_absolute_compiler_and_twice_wrapped(project, tmp_path, tc22):
    _sources(project)
    run([wrapper("ltowrap"), tc22.clang, "-O2", "-flto=thin", "-c", "a.c", "b.c"], project)
    # ccache-style double wrapping: ltowrap in front of ltowrap-clang behaves as ltowrap-clang once.
    env = {**os.environ, "LTOWRAP_CLANG": tc22.clang}
    run([wrapper("ltowrap"), wrapper("ltowrap-clang"), "-fuse-ld=lld", "a.o", "b.o", "-o", "prog"], project, env=env)
    run(["./prog"], project)
    assert [r["decision"] for r in links(tmp_path)] == ["distributed"]


def test_launcher_for_ld_lld(project, tmp_path, tc22):
    _sources(project)
    run([tc22.clang, "-O2", "-flto=thin", "-fno-pic", "-c", "a.c", "b.c"], project)
    run([wrapper("ltowrap"), tc22.lld, "-r", "a.o", "b.o", "-o", "ab.o"], project)
    assert links(tmp_path)[-1]["decision"] == "distributed"


def test_version_help_and_config(project, monkeypatch):
    assert run([wrapper("ltowrap"), "--version"], project).stdout.startswith("ltowrap ")
    stats_help = run([wrapper("ltowrap"), "stats", "--help"], project).stdout
    for counter in ("links_distributed", "backend_hits", "thinlink_hits", "cpu_saved_seconds"):
        assert counter in stats_help
    out = run([wrapper("ltowrap"), "config"], project, env={**os.environ, "LTOWRAP_JOBS": "3",
                                                         "LTOWRAP_REMOTE_HEADER": "authorization: Bearer s3cret"}).stdout
    assert "(LTOWRAP_JOBS) jobs = 3" in out and "(LTOWRAP_CACHE_DIR) cache_dir" in out and "(default) max_size" in out
    assert "remote_header = 'authorization: (hidden)'" in out and "s3cret" not in out


def test_doctor_reports_a_broken_setup(project, tmp_path, tc22):
    ok = run([wrapper("ltowrap"), "doctor"], project, env={**os.environ, "LTOWRAP_CLANG": tc22.clang}, check=False)
    assert ok.returncode == 0 and "22.1" in ok.stdout
    (tmp_path / "file").write_text("x")
    bad = run([wrapper("ltowrap"), "doctor"], project,
              env={**os.environ, "LTOWRAP_CLANG": tc22.clang, "LTOWRAP_CACHE_DIR": str(tmp_path / "file" / "c")}, check=False)
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "LTOWRAP_CACHE_DIR" in bad.stdout


def _subcommands() -> list[str]:
    from ltowrap import cli

    (sub,) = [a for a in cli.build_parser()._actions if a.dest == "command"]
    return sorted(sub.choices)


PIPED = [["--version"], ["--help"], ["stats"], ["stats", "--json"], ["config"], ["shims"], ["doctor"],
         ["cache", "trim"], *([name, "--help"] for name in _subcommands())]


@pytest.mark.parametrize("args", PIPED, ids=" ".join)
def test_every_subcommand_ends_quietly_when_its_reader_goes_away(project, args):
    """`ltowrap stats | head -3`: killed by SIGPIPE as coreutils are, not a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write: every write gets EPIPE
    try:
        done = subprocess.run([wrapper("ltowrap"), *args], cwd=project, stdout=write_end, stderr=subprocess.PIPE,
                              text=True)
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == -signal.SIGPIPE, (done.returncode, done.stderr)
