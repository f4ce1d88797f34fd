"""Optimization records distributed (issue 38): `-fsave-optimization-record` on a ThinLTO link
makes the driver pass `-plugin-opt=opt-remarks-filename=<output>-opt.ld.yaml` (clang 14:
`<output>.opt.ld.yaml`) and `opt-remarks-format=yaml`; in-process lld writes that file (empty
when no code is regular LTO) and `<file>.thin.<task>.yaml` per backend task, tasks numbered
from 1 in the order lld added the modules. A distributed link writes the same set of files
under the same names, cold and from the backend cache; their records are in-process lld's
(same passes, remarks and functions, in the same order), but for the names of basic blocks
a pass made, which in-process LTO's context discards and clang's backend keeps."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import NUMBERED_LINK, Toolchain, build_numbered, links, ltowrap_env, run, wrapper, write

LINK = NUMBERED_LINK
FLAGS = ["-flto=thin", "-O2"]
RECORDS = re.compile(r"prog[-.]opt\.ld\.yaml.*")
# One record's identity: everything but the arguments that name a basic block.
BLOCK = re.compile(r"^  - BasicBlock: .*$", re.M)


def build(d: Path, tc: Toolchain) -> None:
    build_numbered(d, tc, FLAGS)


def records(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if RECORDS.fullmatch(p.name)}


def move_records(d: Path, to: Path) -> None:
    for p in list(d.iterdir()):
        if RECORDS.fullmatch(p.name):
            shutil.move(p, to / p.name)


@pytest.mark.parametrize("passes", [[], ["-foptimization-record-passes=inline"]], ids=["all", "inline"])
def test_optimization_records_are_distributed_as_in_process_writes_them(tmp_path, tc, passes):
    d = tmp_path / "p"
    d.mkdir()
    build(d, tc)
    link_args = [*FLAGS, "-fsave-optimization-record", *passes, "-fuse-ld=lld", *LINK, "-o", "prog"]
    run([tc.clang, *link_args], d)
    ref = tmp_path / "ref"
    ref.mkdir()
    move_records(d, ref)
    expected = records(ref)
    assert len(expected) == 1 + len(LINK), sorted(expected)

    link = [wrapper("ltowrap-clang"), *link_args]
    run(link, d, env=ltowrap_env(tc))
    record = links(tmp_path)[-1]
    assert record["decision"] == "distributed", record
    assert "optimization records" in (record.get("unmemoised") or ""), record
    cold = records(d)
    assert sorted(cold) == sorted(expected)
    top = min(expected, key=len)
    assert cold[top] == expected[top] == ""  # the regular-LTO task's: no code is regular LTO
    for name in expected:
        assert BLOCK.sub("", cold[name]) == BLOCK.sub("", expected[name]), name
    if passes:
        assert all("Pass:            inline" in text for text in cold.values() if "Pass:" in text)

    # Warm, after the records are gone: every backend a hit, and the records come back with the objects.
    for name in cold:
        (d / name).unlink()
    run(link, d, env=ltowrap_env(tc))
    record = links(tmp_path)[-1]
    assert record["decision"] == "distributed", record
    assert record["backend_hits"] == len(LINK) and record["backend_compiles"] == 0, record
    assert records(d) == cold


@pytest.mark.parametrize("option, reason", [
    ("-Wl,--plugin-opt=opt-remarks-format=bitstream", "opt-remarks-format=bitstream"),
    ("-Wl,--opt-remarks-with-hotness", "opt-remarks-with-hotness"),
    ("-Wl,--opt-remarks-hotness-threshold=10", "opt-remarks-hotness-threshold"),
])
def test_records_not_modelled_fall_back_and_say_which_option(tmp_path, tc22, option, reason):
    d = tmp_path / "p"
    d.mkdir()
    build(d, tc22)
    run([wrapper("ltowrap-clang"), *FLAGS, "-fsave-optimization-record", option, "-fuse-ld=lld", *LINK, "-o", "prog"],
        d, env=ltowrap_env(tc22))
    record = links(tmp_path)[-1]
    assert record["decision"] != "distributed" and reason in str(record), record


def test_the_records_file_is_no_side_input(tmp_path, monkeypatch):
    """The records a backend writes exist after the first link: written, not read, they must not
    key the next one; nor may the format or passes, which name no file."""
    from ltowrap.linkline import cmdline
    from ltowrap.stages import backend, sideinputs

    monkeypatch.chdir(tmp_path)
    for name in ("out.remarks", "yaml", "inline"):
        write(tmp_path / name, "old")
    cmd = cmdline.parse(["--opt-remarks-filename", "r.yaml", "--plugin-opt=opt-remarks-passes=inline", "a.o"])
    assert not sideinputs.of_argv(["clang", "-c", *backend.remarks_options(cmd, "out.remarks")])
