"""The `ltowrap` command: launcher form, subcommands, help."""

from __future__ import annotations

import os

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
    assert "(LTOWRAP_JOBS) jobs = 3" in out and "(LTOWRAP_DIR) cache_dir" in out and "(default) max_size" in out
    assert "remote_header = 'authorization: (hidden)'" in out and "s3cret" not in out


def test_doctor_reports_a_broken_setup(project, tmp_path, tc22):
    ok = run([wrapper("ltowrap"), "doctor"], project, env={**os.environ, "LTOWRAP_CLANG": tc22.clang}, check=False)
    assert ok.returncode == 0 and "22.1" in ok.stdout
    (tmp_path / "file").write_text("x")
    bad = run([wrapper("ltowrap"), "doctor"], project,
              env={**os.environ, "LTOWRAP_CLANG": tc22.clang, "LTOWRAP_DIR": str(tmp_path / "file" / "c")}, check=False)
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "LTOWRAP_DIR" in bad.stdout
