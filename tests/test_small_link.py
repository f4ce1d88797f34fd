"""Small links (the small_link setting, issue 40): a link of at most that many bitcode modules is
run unchanged, as lld's in-process ThinLTO (uncached), counted and logged; 0 distributes it, and a
link above the threshold is distributed as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import Toolchain, log_lines, ltowrap_env, run, stats_json, toolchain, wrapper, write

from ltowrap import log

# A warning the in-process ThinLTO backend prints through lld: the link's stderr is lld's.
MAIN_C = """
int helper(int);
int main(int argc, char **argv) {
    volatile char big[4000];
    for (int i = 0; i < 4000; i++) big[i] = (char)(i + argc);
    return helper(big[argc]) & 1;
}
"""
HELPER_C = "int helper(int x) { return x * 3; }\n"
FLAGS = ["-O2", "-flto=thin", "-Wframe-larger-than=256"]


@pytest.fixture
def tc22() -> Toolchain:
    return toolchain(22)


def objects(d: Path, tc: Toolchain, *names: str) -> None:
    write(d / "main.c", MAIN_C)
    write(d / "helper.c", HELPER_C)
    for name in names:
        run([wrapper("ltowrap-clang"), *FLAGS, "-c", f"{name}.c", "-o", f"{name}.o"], d, env=ltowrap_env(tc))


def link(d: Path, tc: Toolchain, inputs: list[str], out: str, **env: str):
    return run([wrapper("ltowrap-clang"), *FLAGS, "-fuse-ld=lld", *inputs, "-o", out], d, env=ltowrap_env(tc, **env))


def counts() -> dict:
    return stats_json()


def test_one_module_links_in_process(tmp_path: Path, tc22: Toolchain) -> None:
    write(tmp_path / "one.c", MAIN_C + HELPER_C)
    run([wrapper("ltowrap-clang"), *FLAGS, "-c", "one.c", "-o", "one.o"], tmp_path, env=ltowrap_env(tc22))
    plain = run([tc22.clang, *FLAGS, "-fuse-ld=lld", "one.o", "-o", "plain"], tmp_path)
    ours = link(tmp_path, tc22, ["one.o"], "ours", LTOWRAP_SMALL_LINK="1")
    assert "stack frame size" in plain.stderr
    assert (ours.stdout, ours.stderr) == (plain.stdout, plain.stderr)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "plain").read_bytes()
    c = counts()
    assert c.get("links_small") == 1 and not c.get("links_distributed"), c
    [record] = [r for r in log_lines(tmp_path) if r.get("decision") == "in-process"]
    assert (record["reason"], record["modules"]) == ("small_link", 1)
    assert "small_link = 1" in record["detail"]


def test_compile_and_link_in_one_command_links_in_process(tmp_path: Path, tc22: Toolchain) -> None:
    """configure's AC_LINK_IFELSE: `$CC -o conftest $CFLAGS $LDFLAGS conftest.c`."""
    write(tmp_path / "conftest.c", MAIN_C + HELPER_C)
    plain = run([tc22.clang, *FLAGS, "-fuse-ld=lld", "conftest.c", "-o", "plain"], tmp_path)
    ours = link(tmp_path, tc22, ["conftest.c"], "ours", LTOWRAP_SMALL_LINK="1")
    assert ours.stderr == plain.stderr
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "plain").read_bytes()
    assert counts().get("links_small") == 1


def test_threshold_zero_distributes(tmp_path: Path, tc22: Toolchain) -> None:
    objects(tmp_path, tc22, "main", "helper")
    write(tmp_path / "one.c", MAIN_C + HELPER_C)
    run([wrapper("ltowrap-clang"), *FLAGS, "-c", "one.c", "-o", "one.o"], tmp_path, env=ltowrap_env(tc22))
    link(tmp_path, tc22, ["one.o"], "ours", LTOWRAP_SMALL_LINK="0")
    c = counts()
    assert c.get("links_distributed") == 1 and not c.get("links_small"), c


def test_above_threshold_distributes(tmp_path: Path, tc22: Toolchain) -> None:
    objects(tmp_path, tc22, "main", "helper")
    link(tmp_path, tc22, ["main.o", "helper.o"], "two", LTOWRAP_SMALL_LINK="1")
    c = counts()
    assert c.get("links_distributed") == 1 and not c.get("links_small"), c
    # An archive with bitcode is never small: its members are not counted from the command.
    run([tc22.ar, "rcs", "libhelper.a", "helper.o"], tmp_path)
    link(tmp_path, tc22, ["main.o", "-L.", "-lhelper"], "archived", LTOWRAP_SMALL_LINK="5")
    c = counts()
    assert c.get("links_distributed") == 2 and not c.get("links_small"), c


def test_small_links_the_sh_entry_runs_are_counted_and_zeroed(tmp_path: Path, tc22: Toolchain) -> None:
    """Without LTOWRAP_LOG the installed sh entry runs a small link itself: counted in the same
    counter as Python's (stats.tally), shown by `ltowrap stats` and reset by `stats --zero`."""
    write(tmp_path / "one.c", MAIN_C + HELPER_C)
    run([wrapper("ltowrap-clang"), *FLAGS, "-c", "one.c", "-o", "one.o"], tmp_path, env=ltowrap_env(tc22))
    plain = run([tc22.clang, *FLAGS, "-fuse-ld=lld", "one.o", "-o", "plain"], tmp_path)
    ours = link(tmp_path, tc22, ["one.o"], "ours", LTOWRAP_SMALL_LINK="1", LTOWRAP_LOG=None)
    assert (ours.stdout, ours.stderr) == (plain.stdout, plain.stderr)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "plain").read_bytes()
    assert (tmp_path / "cache" / "stats" / "links_small.tally").read_bytes() == b"1"  # the sh entry's count
    link(tmp_path, tc22, ["one.o"], "ours", LTOWRAP_SMALL_LINK="1")  # with the log: Python
    assert counts().get("links_small") == 2
    assert [r["decision"] for r in log_lines(tmp_path)] == ["in-process"]  # LTOWRAP_LOG's
    default_log = (tmp_path / "cache" / "links.jsonl").read_text().splitlines()  # the sh entry's: log at its default
    assert [json.loads(line)["decision"] for line in default_log] == ["in-process"]
    # The sh entry's line is the one log.Record writes: the same fields, the same names.
    sh_line = json.loads(default_log[0])
    like = log.Record(sh_line["tool"], sh_line["argv"], sh_line["cwd"], sh_line["pid"], sh_line["start"],
                      sh_line["end"], log.Decision.IN_PROCESS, "small_link", sh_line["detail"], modules=1)
    assert sh_line == like.to_json()
    run([wrapper("ltowrap"), "stats", "--zero"], tmp_path, env=ltowrap_env())
    assert not counts().get("links_small")


def test_linker_called_directly_links_in_process_when_small(tmp_path: Path, tc22: Toolchain) -> None:
    """A build that runs ltowrap's ld.lld itself (Kbuild's `ld.lld -r`) gets the same rule, counted
    from lld's own inputs: one module runs unchanged; two are distributed, unless the threshold
    takes them; a bitcode archive is never small."""
    objects(tmp_path, tc22, "main", "helper")
    run([tc22.ar, "rcs", "libhelper.a", "helper.o"], tmp_path)

    def ld(inputs: list[str], out: str, **env: str):
        return run([wrapper("ltowrap-ld.lld"), "-r", *inputs, "-o", out], tmp_path, env=ltowrap_env(tc22, **env))

    plain = run([tc22.bindir / "ld.lld", "-r", "main.o", "-o", "plain.o"], tmp_path)
    ours = ld(["main.o"], "ours.o", LTOWRAP_SMALL_LINK="1")
    assert "stack frame size" in plain.stderr
    assert (ours.stdout, ours.stderr) == (plain.stdout, plain.stderr)
    assert (tmp_path / "ours.o").read_bytes() == (tmp_path / "plain.o").read_bytes()
    c = counts()
    assert c.get("links_small") == 1 and not c.get("links_distributed") and not c.get("links_fallback"), c
    [record] = log_lines(tmp_path)
    assert (record["decision"], record["reason"], record["modules"]) == ("in-process", "small_link", 1)
    assert "small_link = 1" in record["detail"]

    ld(["main.o", "helper.o"], "two.o", LTOWRAP_SMALL_LINK="1")
    ld(["main.o", "--whole-archive", "libhelper.a"], "archived.o", LTOWRAP_SMALL_LINK="5")
    c = counts()
    assert c.get("links_small") == 1 and c.get("links_distributed") == 2, c
    ld(["main.o", "helper.o"], "two-small.o", LTOWRAP_SMALL_LINK="2")
    ld(["main.o"], "zero.o", LTOWRAP_SMALL_LINK="0")
    c = counts()
    assert c.get("links_small") == 2 and c.get("links_distributed") == 3, c
