"""Debian's lua5.4 built with its upstream Makefile (test_lua.py says how), for the tests that
build it: the tree, CC and its environment, make, and what the build left (log, stats, binaries)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import clean_env
from needs import missing

from . import debsrc

HERE = Path(__file__).resolve().parent
SCRIPTS = Path(sysconfig.get_path("scripts"))
EXERCISE = HERE / "lua_exercise.lua"
CFLAGS = "-O2 -flto=thin -Wall -Wextra -DLUA_COMPAT_5_3 -DLUA_USE_LINUX"  # CFLAGS= drops the target's SYSCFLAGS
# The link flags of the builds compared with in-process ThinLTO (test_fidelity.py, test_versions_lua.py).
LDFLAGS = "-fuse-ld=lld -flto=thin -O2 -Wl,--thinlto-jobs=2"
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


def wrapper_toolchain(tmp_path: Path, version: int) -> Toolchain:
    """CC=ltowrap-clang, the real clang chosen by LTOWRAP_CLANG."""
    bindir = llvm_bin(version)
    env = clean_env(tmp_path, LTOWRAP_JOBS="2", LTOWRAP_CLANG=str(bindir / "clang"))
    return Toolchain(str(SCRIPTS / "ltowrap-clang"), bindir, env)


def makefile_objects(tree: Path, var: str) -> list[str]:
    """CORE_O / LIB_O from the upstream src/Makefile."""
    m = re.search(rf"^{var}=\s*(.*)$", (tree / "src" / "Makefile").read_text(), re.M)
    assert m, f"no {var} in src/Makefile"
    return m.group(1).split()


def make(tree: Path, tc: Toolchain, log: Path, *targets: str, cflags: str = CFLAGS) -> None:
    argv = ["make", "-C", "src", "-j2", *(targets or ("linux",)), f"CC={tc.cc}", f"CFLAGS={cflags}"]
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


@pytest.fixture(scope="session")
def lua_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One unpacked lua5.4 tree with the upstream build system, copied by each test."""
    return debsrc.lua_upstream_tree(tmp_path_factory.mktemp("lua5.4-src") / "lua5.4")


@pytest.fixture
def lua_src(lua_tree: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(lua_tree, tmp_path / "lua5.4", symlinks=True))
