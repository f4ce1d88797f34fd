"""Debian's lua5.4, built with its upstream Makefile and -flto=thin through ltowrap.

The Debian tree (debsrc.py) carries 0001-build-system.patch, which turns the upstream
Makefiles into a libtool build that also needs dpkg-buildflags, debian/version-script and
a C++ copy of every object. We reverse that one patch, keep the others (module paths,
extern "C", two CVE fixes) and write the header 0002 includes, as debian/rules does.

The upstream link lines carry no CFLAGS, so ltowrap sees a plain `cc -o lua lua.o
liblua.a` with bitcode inputs and switches it to lld itself. liblua.a is made by GNU ar.
`lua` (linked with -Wl,-E) pulls every archive member; `luac` only the core and lauxlib,
so its log line has more `modules` (bitcode inputs) than backend compiles.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import check_split_dwarf, clean_env
from needs import missing

from .lua import (CFLAGS, SCRIPTS, Toolchain, links, lua_src, lua_tree, make, makefile_objects, run_lua, stats,  # noqa: F401
                  wrapper_toolchain)

pytestmark = pytest.mark.slow

def shim_toolchain(tmp_path: Path, cc: str) -> Toolchain:
    """CC=clang-22 (or clang) with `ltowrap shims` first on PATH."""
    env = clean_env(tmp_path, LTOWRAP_JOBS="2")
    real = shutil.which(cc, path=env["PATH"])
    if real is None:
        missing(f"{cc} on PATH")
    shims = subprocess.run([str(SCRIPTS / "ltowrap"), "shims"], check=True, capture_output=True, text=True).stdout.strip()
    env["PATH"] = shims + os.pathsep + env["PATH"]
    return Toolchain(cc, Path(os.path.realpath(real)).parent, env)


def check_cold_links(tree: Path, log: Path, tc: Toolchain) -> None:
    """Both links distributed; every module a link uses has one backend, compiled by a process of
    its own or (make runs the two links at once) taken from the other link's compile of it."""
    core, lib = makefile_objects(tree, "CORE_O"), makefile_objects(tree, "LIB_O")
    archive = [f"liblua.a({o})" for o in core + lib]
    used = {"lua": {"lua.o", *archive}, "luac": {"luac.o", *(f"liblua.a({o})" for o in core + ["lauxlib.o"])}}
    records = links(log)
    assert set(records) == {"lua", "luac"}
    compiled = {name: {b["module"] for b in r["backends"] if not b["cached"]} for name, r in records.items()}
    for name, r in records.items():
        other = compiled["luac" if name == "lua" else "lua"]
        assert r["decision"] == "distributed", (name, r["reason"])
        assert r["argv"][0] == str(tc.llvm_bin / "ld.lld"), name
        assert r["modules"] == len(archive) + 1, name  # every bitcode input, pulled in or not
        assert not r["thinlink_cached"], name
        origins = [b["module"] for b in r["backends"]]
        assert sorted(origins) == sorted(used[name]), name  # one backend per module, none twice
        # A cold cache: a hit can only be the other link's compile of the same module, this build.
        from_other = {b["module"] for b in r["backends"] if b["cached"]}
        assert from_other <= other, (name, from_other - other)
        assert r["backend_compiles"] == len(compiled[name]) == len(used[name]) - r["backend_hits"], name


def cold_hits(log: Path) -> int:
    """Backends one link of a cold build took from the other's compiles."""
    return sum(r["backend_hits"] for r in links(log).values())


@pytest.mark.parametrize("version", [22, 14])
def test_ltowrap_clang(lua_src: Path, tmp_path: Path, version: int) -> None:
    tc = wrapper_toolchain(tmp_path, version)
    log = tmp_path / "ltowrap.log"
    make(lua_src, tc, log)
    run_lua(lua_src, tmp_path)
    check_cold_links(lua_src, log, tc)


def test_split_dwarf(lua_src: Path, tmp_path: Path) -> None:
    """-g -gsplit-dwarf on the compiles and the links (issue 38): both links distributed, each
    skeleton unit's DW_AT_dwo_name exists, llvm-dwarfdump --verify and llvm-dwp pass, lua runs;
    after rm -rf of the binaries and their .dwo directories, a relink gives both back, the same."""
    tc = wrapper_toolchain(tmp_path, 22)
    src = lua_src / "src"
    split = dict(cflags=CFLAGS + " -g -gsplit-dwarf")
    make(lua_src, tc, tmp_path / "cold.log", "linux", "MYLDFLAGS=-flto=thin -g -gsplit-dwarf", **split)
    run_lua(lua_src, tmp_path)
    check_cold_links(lua_src, tmp_path / "cold.log", tc)
    cold = {}
    for prog in ("lua", "luac"):
        check_split_dwarf(tc.llvm_bin, src, prog)
        cold[prog] = ((src / prog).read_bytes(), {p.name: p.read_bytes() for p in (src / f"{prog}-dwo").iterdir()})
    for prog in ("lua", "luac"):
        (src / prog).unlink()
        shutil.rmtree(src / f"{prog}-dwo")
    make(lua_src, tc, tmp_path / "warm.log", "linux", "MYLDFLAGS=-flto=thin -g -gsplit-dwarf", **split)
    for prog, record in links(tmp_path / "warm.log").items():
        assert record["decision"] == "distributed" and record["backend_compiles"] == 0, (prog, record["reason"])
        assert ((src / prog).read_bytes(), {p.name: p.read_bytes() for p in (src / f"{prog}-dwo").iterdir()}) \
            == cold[prog], prog


@pytest.mark.parametrize("cc", ["clang-22", "clang"])
def test_path_shims(lua_src: Path, tmp_path: Path, cc: str) -> None:
    tc = shim_toolchain(tmp_path, cc)
    log = tmp_path / "ltowrap.log"
    make(lua_src, tc, log)
    run_lua(lua_src, tmp_path)
    check_cold_links(lua_src, log, tc)


def test_rebuild_hits_cache(lua_src: Path, tmp_path: Path) -> None:
    """make; make clean; make: the relink compiles nothing and writes the same bytes; with the
    link memo on, a third clean build restores both links whole."""
    tc = wrapper_toolchain(tmp_path, 22)
    make(lua_src, tc, tmp_path / "first.log")
    check_cold_links(lua_src, tmp_path / "first.log", tc)
    first = (lua_src / "src" / "lua").read_bytes()
    make(lua_src, tc, tmp_path / "second.log", "clean")
    assert not (lua_src / "src" / "lua").exists()
    # Memo off: this relink is the one the caches under the link serve.
    make(lua_src, replace(tc, env=tc.env | {"LTOWRAP_MEMO": "0"}), tmp_path / "second.log")
    run_lua(lua_src, tmp_path)

    second_links = links(tmp_path / "second.log")
    r = second_links["lua"]
    # Once a bug: a relink whose thin-link was cached fell back (its objects' directory
    # was made only by a thin-link run). Now both relinks are distributed from the caches.
    for name, rec in second_links.items():
        assert rec["decision"] == "distributed", (name, rec["reason"])
        assert rec["backend_compiles"] == 0 and rec["backend_hits"] == len(rec["backends"]), name
    assert r["backend_hits"] == r["modules"]  # lua pulls in every module

    s = stats(tc)
    hits, shared = sum(rec["backend_hits"] for rec in second_links.values()), cold_hits(tmp_path / "first.log")
    # The cold build compiled as many, less what one link took from the other's compiles.
    assert s["backend_hits"] == hits + shared and s["backend_misses"] == hits - shared
    assert s["links_distributed"] == 4 and s["links_fallback"] == 0
    assert s["thinlink_hits"] == 2

    # Once a bug: the cold link added lld's empty regular-LTO object (ld-temp.o) to the
    # final link and the cached relink did not, so the binaries differed.
    assert (lua_src / "src" / "lua").read_bytes() == first

    make(lua_src, tc, tmp_path / "third.log", "clean")
    make(lua_src, tc, tmp_path / "third.log")
    run_lua(lua_src, tmp_path)
    assert {name: rec["decision"] for name, rec in links(tmp_path / "third.log").items()} == {
        "lua": "restored", "luac": "restored"}
    assert stats(tc)["link_hits"] == 2
    assert (lua_src / "src" / "lua").read_bytes() == first


def test_verify_every_hit_of_a_rebuild_finds_no_mismatch(lua_src: Path, tmp_path: Path) -> None:
    """make; make clean; make with verify = 1: both memo hits linked again, their thin-link
    and backend hits done again, every one the same bytes (issue 24)."""
    tc = wrapper_toolchain(tmp_path, 22)
    make(lua_src, tc, tmp_path / "first.log")
    first = (lua_src / "src" / "lua").read_bytes()
    make(lua_src, tc, tmp_path / "second.log", "clean")
    make(lua_src, replace(tc, env=tc.env | {"LTOWRAP_VERIFY": "1"}), tmp_path / "second.log")
    run_lua(lua_src, tmp_path)
    s = stats(tc)
    records = links(tmp_path / "second.log")
    checked = sum(b.get("verified") == "same" for r in records.values() for b in r["backends"])
    assert {r["verified"] for r in records.values()} == {"same"}
    assert checked == sum(len(r["backends"]) for r in records.values())  # every backend hit checked
    assert s["verify_mismatches"] == 0 and s["verify_checks"] == checked + 2 + 2  # + the memo's and thin-link's
    assert (lua_src / "src" / "lua").read_bytes() == first


def test_a_traced_build(lua_src: Path, tmp_path: Path) -> None:
    """`ltowrap trace` of a cold build: valid trace events, one span per backend job named by its
    module, never more compiles of a link at once than its slots; `ltowrap report` bounds each link."""
    tc = wrapper_toolchain(tmp_path, 22)
    log = tmp_path / "ltowrap.log"
    make(lua_src, tc, log)
    env = tc.env | {"LTOWRAP_LOG": str(log)}
    trace = json.loads(subprocess.run([str(SCRIPTS / "ltowrap"), "trace"], env=env, check=True, capture_output=True,
                                      text=True).stdout)["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    assert all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in spans)
    for name, record in links(log).items():
        jobs = [e for e in spans if e["pid"] == record["pid"] and e["cat"] != "phase"]
        assert sorted(e["name"] for e in jobs) == sorted(b["module"] for b in record["backends"]), name
        edges = sorted([(e["ts"], 1) for e in jobs if e["cat"] == "compiled"] +
                       [(e["ts"] + e["dur"], -1) for e in jobs if e["cat"] == "compiled"])
        running = [sum(step for _, step in edges[:i + 1]) for i in range(len(edges))]
        assert max(running) <= record["jobs"], name
    text = subprocess.run([str(SCRIPTS / "ltowrap"), "report"], env=env, check=True, capture_output=True,
                          text=True).stdout
    assert text.count("bounded by: ") == 2 and "slowest modules" in text


def test_one_file_edit_recompiles_only_what_depends_on_it(lua_src: Path, tmp_path: Path) -> None:
    """lstrlib.c edited (nothing imports from it): lua recompiles that one module, luac nothing.

    Module paths that changed with an edit renumber the values in unrelated shards (lld's
    hash order of paths); the keys take the shards' canonical text (shardkey.py), which
    does not depend on the numbering.
    """
    tc = wrapper_toolchain(tmp_path, 22)
    make(lua_src, tc, tmp_path / "first.log")
    src = lua_src / "src" / "lstrlib.c"
    text, n = re.subn(r"^#define MAXCCALLS\s+200$", "#define MAXCCALLS\t201", src.read_text(), flags=re.M)
    assert n == 1
    src.write_text(text)
    make(lua_src, tc, tmp_path / "edit.log")
    run_lua(lua_src, tmp_path)
    edited = links(tmp_path / "edit.log")
    assert edited["lua"]["decision"] == "distributed"
    assert [b["module"] for b in edited["lua"]["backends"] if not b["cached"]] == ["liblua.a(lstrlib.o)"]
    assert edited["luac"]["backend_compiles"] == 0


def test_cache_shared_across_checkouts(lua_tree: Path, lua_src: Path, tmp_path: Path) -> None:
    """A second checkout elsewhere: a new thin-link (cwd differs), every backend a hit, same bytes."""
    tc = wrapper_toolchain(tmp_path, 22)
    make(lua_src, tc, tmp_path / "first.log")
    other = Path(shutil.copytree(lua_tree, tmp_path / "elsewhere" / "lua", symlinks=True))
    make(other, tc, tmp_path / "second.log")
    run_lua(other, tmp_path)
    second_links = links(tmp_path / "second.log")
    for name, rec in second_links.items():
        assert rec["decision"] == "distributed", (name, rec["reason"])
        assert not rec["thinlink_cached"], name
        assert rec["backend_compiles"] == 0 and rec["backend_hits"] == len(rec["backends"]) > 0, name
    for binary in ("lua", "luac"):
        assert (other / "src" / binary).read_bytes() == (lua_src / "src" / binary).read_bytes(), binary
    s = stats(tc)
    hits, shared = sum(rec["backend_hits"] for rec in second_links.values()), cold_hits(tmp_path / "first.log")
    assert s["backend_hits"] == hits + shared and s["backend_misses"] == hits - shared and s["links_fallback"] == 0
