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
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from needs import missing

from . import debsrc

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SCRIPTS = Path(sysconfig.get_path("scripts"))
EXERCISE = HERE / "lua_exercise.lua"
CFLAGS = "-O2 -flto=thin -Wall -Wextra -DLUA_COMPAT_5_3 -DLUA_USE_LINUX"  # CFLAGS= drops the target's SYSCFLAGS
EXPECTED = """\
HELLO, LUA 5.4 14 5.4 Hello, Lua 5.4|Hello, Lua 5.4 4.5 auL ,olleH
a;b;;c 3
4 The-Quick-Brown-Fox 5 key val
65 Lua 5 3 items
(11,22) 3 2 nil
1000 333833500
7 11
1 1 2 3 5 done
true 42 false 7 dead
false boom false true false handled: deep
true 1 2
[ 3.14|42   |ff|002.7|true|1e+20|"q"]
-4 9 3 -2 1024.0 3 1
integer float nil true 4.0 0.500 2.5 7 2 1024 -1
true 0,2,19,41,75,75,82,107 953 846117
fig date kiwi pear apple banana
"""

@dataclass(frozen=True)
class Toolchain:
    """How make is told to compile: CC, and the environment ltowrap needs for it."""

    cc: str
    llvm_bin: Path  # the LLVM whose ld.lld and clang should do the links
    env: dict[str, str]


def llvm_bin(version: int) -> Path:
    path = Path(f"/usr/lib/llvm-{version}/bin")
    if not (path / "clang").exists() or not (path / "ld.lld").exists():
        missing(f"clang/lld {version} ({path})", f"dev/setup installs clang-{version} and lld-{version}")
    return path


def base_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without ltowrap or make settings, plus a fresh cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LTOWRAP_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(LTOWRAP_CACHE_DIR=str(tmp_path / "ltowrap-cache"), LTOWRAP_JOBS="2",
               LTOWRAP_CONFIG=str(tmp_path / "no-config.toml"))  # ignore ~/.config/ltowrap.toml
    return env


def wrapper_toolchain(tmp_path: Path, version: int) -> Toolchain:
    """CC=ltowrap-clang, the real clang chosen by LTOWRAP_CLANG."""
    bindir = llvm_bin(version)
    env = base_env(tmp_path) | {"LTOWRAP_CLANG": str(bindir / "clang")}
    return Toolchain(str(SCRIPTS / "ltowrap-clang"), bindir, env)


def shim_toolchain(tmp_path: Path, cc: str) -> Toolchain:
    """CC=clang-22 (or clang) with `ltowrap shims` first on PATH."""
    env = base_env(tmp_path)
    real = shutil.which(cc, path=env["PATH"])
    if real is None:
        missing(f"{cc} on PATH")
    shims = subprocess.run([str(SCRIPTS / "ltowrap"), "shims"], check=True, capture_output=True, text=True).stdout.strip()
    env["PATH"] = shims + os.pathsep + env["PATH"]
    return Toolchain(cc, Path(os.path.realpath(real)).parent, env)


def makefile_objects(tree: Path, var: str) -> list[str]:
    """CORE_O / LIB_O from the upstream src/Makefile."""
    m = re.search(rf"^{var}=\s*(.*)$", (tree / "src" / "Makefile").read_text(), re.M)
    assert m, f"no {var} in src/Makefile"
    return m.group(1).split()


def make(tree: Path, tc: Toolchain, log: Path, *targets: str) -> None:
    argv = ["make", "-C", "src", "-j2", *(targets or ("linux",)), f"CC={tc.cc}", f"CFLAGS={CFLAGS}"]
    done = subprocess.run(argv, cwd=tree, env=tc.env | {"LTOWRAP_LOG": str(log)},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}"


def links(log: Path) -> dict[str, dict]:
    """The log's linker records by output name ('lua', 'luac')."""
    records = {}
    for line in log.read_text().splitlines():
        r = json.loads(line)
        argv = r["argv"]
        records[os.path.basename(argv[argv.index("-o") + 1])] = r
    return records


def stats(tc: Toolchain) -> dict:
    done = subprocess.run([str(SCRIPTS / "ltowrap"), "stats", "--json"], env=tc.env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def run_lua(tree: Path, tmp_path: Path) -> None:
    """lua runs the exercise; luac compiles it and lua runs the bytecode, same output."""
    lua, luac = tree / "src" / "lua", tree / "src" / "luac"
    out = subprocess.run([lua, EXERCISE], check=True, capture_output=True, text=True).stdout
    assert out == EXPECTED
    chunk = tmp_path / "exercise.luac"
    subprocess.run([luac, "-o", chunk, EXERCISE], check=True)
    assert subprocess.run([lua, chunk], check=True, capture_output=True, text=True).stdout == EXPECTED


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


@pytest.fixture(scope="session")
def lua_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One unpacked lua5.4 tree with the upstream build system, copied by each test."""
    return debsrc.lua_upstream_tree(tmp_path_factory.mktemp("lua5.4-src") / "lua5.4")


@pytest.fixture
def lua_src(lua_tree: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(lua_tree, tmp_path / "lua5.4", symlinks=True))


@pytest.mark.parametrize("version", [22, 14])
def test_ltowrap_clang(lua_src: Path, tmp_path: Path, version: int) -> None:
    tc = wrapper_toolchain(tmp_path, version)
    log = tmp_path / "ltowrap.log"
    make(lua_src, tc, log)
    run_lua(lua_src, tmp_path)
    check_cold_links(lua_src, log, tc)


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
