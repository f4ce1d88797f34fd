"""Split DWARF distributed (issue 38): `-g -gsplit-dwarf -flto=thin` makes the driver pass
`-plugin-opt=dwo_dir=<output>-dwo` (clang 14: `<output>_dwo`); each backend compile writes its
.dwo under the name in-process lld gives it (`<dwo_dir>/<task>.dwo`, tasks numbered from 1 in
the order lld added the modules), the binary and every .dwo byte for byte in-process lld's,
and a warm rebuild after `rm -rf prog prog-dwo` gives both back from the backend cache."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import Toolchain, build_numbered, links, ltowrap_env, run, wrapper, write


CXX_SOURCES = {
    "shape.h": "#include <string>\nstruct Shape { virtual ~Shape(); virtual double area() const = 0;"
               " std::string name; };\nShape *make(int);\n",
    "shape.cc": '#include "shape.h"\nShape::~Shape() {}\n',
    "square.cc": '#include "shape.h"\n#include <vector>\nstruct Square : Shape { double s; double area() const override'
                 ' { return s * s; } };\nShape *make(int n) { auto *q = new Square; q->s = n; q->name = "sq";'
                 ' std::vector<int> v(n); return q; }\n',
    "main.cc": '#include "shape.h"\n#include <memory>\nint main(int argc, char **) {'
               ' std::unique_ptr<Shape> s(make(argc)); return (int)s->area() + (int)s->name.size(); }\n',
}
CXX_LINK = ["main.o", "shape.o", "square.o"]
FLAGS = ["-g", "-gsplit-dwarf", "-flto=thin", "-O2"]


def build_c(d: Path, tc: Toolchain) -> tuple[str, list[str]]:
    return tc.clang, build_numbered(d, tc, FLAGS)


def build_cxx(d: Path, tc: Toolchain) -> tuple[str, list[str]]:
    for name, text in CXX_SOURCES.items():
        write(d / name, text)
    for name in CXX_SOURCES:
        if name.endswith(".cc"):
            run([tc.clangxx, *FLAGS, "-c", name, "-o", name[:-3] + ".o"], d)
    return tc.clangxx, CXX_LINK


def dwo_dir(d: Path) -> Path:
    found = [p for p in d.iterdir() if re.fullmatch(r"prog[-_]dwo", p.name)]
    assert len(found) == 1, sorted(p.name for p in d.iterdir())
    return found[0]


def dwo_files(d: Path) -> dict[str, bytes]:
    out = dwo_dir(d)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def dwo_names(d: Path, tc: Toolchain) -> list[tuple[str, str]]:
    """(DW_AT_comp_dir, DW_AT_dwo_name) of each skeleton unit of prog."""
    text = run([str(tc.bindir / "llvm-dwarfdump"), "--debug-info", "prog"], d).stdout
    dirs = re.findall(r'DW_AT_comp_dir\s+\("([^"]*)"\)', text)
    names = re.findall(r'DW_AT_dwo_name\s+\("([^"]*)"\)', text)
    assert names and len(dirs) == len(names), text
    return list(zip(dirs, names))


def skeletons(prog: Path, tc: Toolchain) -> str:
    text = run([str(tc.bindir / "llvm-dwarfdump"), "--debug-info", prog.name], prog.parent).stdout
    return text.split("\n", 1)[1]


@pytest.mark.parametrize("build", [build_c, build_cxx], ids=["c", "cxx"])
def test_split_dwarf_is_distributed_as_in_process_writes_it(tmp_path, tc, build):
    d = tmp_path / "p"
    d.mkdir()
    driver, link_args = build(d, tc)
    # In-process lld first, in the same directory (the skeletons name it), its outputs set aside.
    run([driver, *FLAGS, "-fuse-ld=lld", *link_args, "-o", "prog"], d)
    ref = tmp_path / "ref"
    ref.mkdir()
    shutil.move(d / "prog", ref / "prog")
    shutil.move(dwo_dir(d), ref / dwo_dir(d).name)

    wrapped = wrapper("ltowrap-clang++" if driver == tc.clangxx else "ltowrap-clang")
    link = [wrapped, *FLAGS, "-fuse-ld=lld", *link_args, "-o", "prog"]
    run(link, d, env=ltowrap_env(tc))
    record = links(tmp_path)[-1]
    assert record["decision"] == "distributed", record
    assert "split DWARF" in (record.get("unmemoised") or ""), record

    # The same .dwo set as in-process, named and numbered alike: the same bytes (each records its own name).
    cold = dwo_files(d)
    assert cold == dwo_files(ref), (sorted(cold), sorted(dwo_files(ref)))
    assert len(cold) == len(link_args)
    # The skeleton units as in-process lld's (names, DWO ids, addresses). The binaries' bytes are
    # not compared: their symbol tables order the STT_FILE symbols otherwise, -g or not (lld
    # puts its LTO objects after every other input, the final link here puts each in place).
    assert skeletons(d / "prog", tc) == skeletons(ref / "prog", tc)
    binary = (d / "prog").read_bytes()
    for comp_dir, name in dwo_names(d, tc):
        assert (d / name).is_file() and name.startswith(dwo_dir(d).name + "/"), (comp_dir, name)

    verify = run([str(tc.bindir / "llvm-dwarfdump"), "--verify", "prog"], d)
    assert "No errors." in verify.stdout, verify.stdout
    run([str(tc.bindir / "llvm-dwp"), "-e", "prog", "-o", "prog.dwp"], d)
    assert "No errors." in run([str(tc.bindir / "llvm-dwarfdump"), "--verify", "prog.dwp"], d).stdout

    # Warm, after both are gone: every backend a hit, and the .dwo files come back with the objects.
    shutil.rmtree(dwo_dir(d))
    (d / "prog").unlink()
    run(link, d, env=ltowrap_env(tc))
    record = links(tmp_path)[-1]
    assert record["decision"] == "distributed", record
    assert record["backend_hits"] == len(link_args) and record["backend_compiles"] == 0, record
    assert dwo_files(d) == cold
    assert (d / "prog").read_bytes() == binary


def test_the_dwo_a_link_left_is_no_side_input(tmp_path, monkeypatch):
    """The .dwo name a backend records exists after the first link: it is written, not read, so
    it must not key the next one (else every relink misses once)."""
    from ltowrap.stages import backend, sideinputs

    monkeypatch.chdir(tmp_path)
    write(tmp_path / "prog-dwo" / "1.dwo", "old")
    argv = ["clang", "-c", *backend.split_dwarf_options("prog-dwo/1.dwo", "<output>.dwo")]
    assert not sideinputs.of_argv(argv)
