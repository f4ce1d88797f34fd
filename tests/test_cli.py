"""The `ltowrap` command: launcher form, subcommands, help."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from helpers import links, ltowrap_env, run, stats_json, wrapper, write

PROG = {"a.c": "int b(void); int main(void){ return b() == 7 ? 0 : 1; }\n", "b.c": "int b(void){ return 7; }\n"}


def _sources(d):
    for name, text in PROG.items():
        write(d / name, text)


def test_launcher_form_with_tool_name(project, tmp_path, tc22):
    _sources(project)
    env = ltowrap_env(PATH=f"{tc22.bindir}:{os.environ['PATH']}")
    run([wrapper("ltowrap"), "clang", "-O2", "-flto=thin", "-c", "a.c", "b.c"], project, env=env)
    run([wrapper("ltowrap"), "clang", "-fuse-ld=lld", "a.o", "b.o", "-o", "prog"], project, env=env)
    run(["./prog"], project)
    assert links(tmp_path)[-1]["decision"] == "distributed"


def test_launcher_form_with_absolute_compiler_and_twice_wrapped(project, tmp_path, tc22):
    _sources(project)
    run([wrapper("ltowrap"), tc22.clang, "-O2", "-flto=thin", "-c", "a.c", "b.c"], project)
    # ccache-style double wrapping: ltowrap in front of ltowrap-clang behaves as ltowrap-clang once.
    env = ltowrap_env(tc22)
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
    out = run([wrapper("ltowrap"), "config"], project, env=ltowrap_env(LTOWRAP_JOBS="3",
                                                          LTOWRAP_REMOTE_HEADER="authorization: Bearer s3cret")).stdout
    assert "(LTOWRAP_JOBS) jobs = 3" in out and "(LTOWRAP_CACHE_DIR) cache_dir" in out and "(default) max_size" in out
    assert "remote_header = 'authorization: (hidden)'" in out and "s3cret" not in out


def test_doctor_reports_a_broken_setup(project, tmp_path, tc22):
    ok = run([wrapper("ltowrap"), "doctor"], project, env=ltowrap_env(tc22), check=False)
    assert ok.returncode == 0 and "22.1" in ok.stdout
    assert f"fork server: ready: backend clangs are forked from one {tc22.clang} a link" in ok.stdout
    off = run([wrapper("ltowrap"), "doctor"], project, env=ltowrap_env(tc22, LTOWRAP_FORK_SERVER="0"), check=False)
    assert "fork server: off (fork_server): each backend clang starts anew" in off.stdout
    (tmp_path / "file").write_text("x")
    bad = run([wrapper("ltowrap"), "doctor"], project,
              env=ltowrap_env(tc22, LTOWRAP_CACHE_DIR=str(tmp_path / "file" / "c")), check=False)
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


def test_stats_shows_every_counter_of_the_table(tmp_path):
    """`ltowrap stats` is drawn from stats.COUNTERS: every row's label, every row in --json."""
    from ltowrap import stats

    env = ltowrap_env(LTOWRAP_REMOTE="grpc://127.0.0.1:9")  # the remote section shows too
    text = subprocess.run([wrapper("ltowrap"), "stats"], env=env, capture_output=True, text=True, check=True).stdout
    shown = [(name, label) for name, kind, _, label, _ in stats.COUNTERS if kind != "size"]
    assert [name for name, label in shown if f"  {label}:" not in text] == []
    data = json.loads(subprocess.run([wrapper("ltowrap"), "stats", "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    assert {name for name, _ in shown} <= set(data)


def test_a_counter_not_in_the_table_is_refused():
    from ltowrap import stats

    counts = stats.Stats()
    counts.add("links_distributed")
    with pytest.raises(ValueError, match="no counter named 'links_distributd'"):
        counts.add("links_distributd")


def test_a_bad_setting_runs_the_command_unchanged_and_is_counted(project, tmp_path, tc22):
    write(project / "m.c", "int main(void) { return 0; }\n")
    env = ltowrap_env(tc22, LTOWRAP_JOBS="many")
    done = run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "m.c", "-o", "m"], project, env=env)
    assert "LTOWRAP_JOBS" in done.stderr and "passing through" in done.stderr
    assert stats_json()["fallback_reasons"] == {"config_error": 1}
