"""Debian's lua5.4 on every clang/lld Debian bookworm ships: distributed, and the same code as
that release's own in-process ThinLTO, function by function.

For each release (helpers.ALL_VERSIONS but 22, whose lua is test_fidelity.py's, in three
variants) the upstream Makefile builds `lua` once through ltowrap-clang with
LTOWRAP_CLANG at that release's clang: the compiles record their options, the link is
distributed (every backend key from a canonical shard of the release's summary format,
`ltowrap explain`). A copy of the built tree then relinks `lua` with that clang alone
(in-process ThinLTO, lld's own backends; the bitcode is the same, as the compiles were
the same), and fidelity.compare matches the two programs' functions by name. Both run
lua. Last, a relink with the memo off takes every backend from the cache.

One compile of the sources per release, two links: lua's core is every member of
liblua.a (-Wl,-E), so `luac` (the same modules again) is left out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from helpers import ALL_VERSIONS, clean_env, toolchain

from . import debsrc, fidelity
from .fidelity import OBJDUMP
from .lua import CFLAGS as LUA_CFLAGS
from .lua import LDFLAGS

pytestmark = pytest.mark.slow

SCRIPTS = Path(sysconfig.get_path("scripts"))
SUMMARY_VERSION = {13: 9, 14: 9, 15: 9, 16: 9, 19: 10}
VERSIONS = [v for v in ALL_VERSIONS if v != 22]


@pytest.fixture(scope="module")
def lua_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return debsrc.lua_upstream_tree(tmp_path_factory.mktemp("versions-lua-src") / "lua5.4")


def make_lua(tree: Path, cc: str, env: dict[str, str]) -> None:
    argv = ["make", "-C", "src", "-j2", "lua", f"CC={cc}", f"CFLAGS={LUA_CFLAGS}", f"MYLDFLAGS={LDFLAGS}",
            "SYSLIBS=-Wl,-E -ldl"]
    done = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-6000:]}"
    out = subprocess.run([tree / "src" / "lua", "-e", "print(string.format('%d %s', 6 * 7, ('ok'):upper()))"],
                         check=True, capture_output=True, text=True).stdout
    assert out == "42 OK\n"


def lua_link(log: Path) -> dict:
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r["tool"].startswith("ld.lld") and r["argv"][r["argv"].index("-o") + 1] == "lua"][-1]


@pytest.mark.parametrize("version", VERSIONS, ids=[f"llvm{v}" for v in VERSIONS])
def test_lua_distributed_and_identical_to_in_process(version: int, lua_tree: Path, tmp_path: Path) -> None:
    tc = toolchain(version)
    ours = tmp_path / "ltowrap" / "lua"
    shutil.copytree(lua_tree, ours, symlinks=True)
    log = tmp_path / "ltowrap.log"
    env = clean_env() | {
        "LTOWRAP_CACHE_DIR": str(tmp_path / "cache"), "LTOWRAP_CLANG": tc.clang, "LTOWRAP_LOG": str(log),
        "LTOWRAP_CONFIG": str(tmp_path / "no-config.toml"), "LTOWRAP_JOBS": "2", "LTOWRAP_DEBUG": "1",
    }
    make_lua(ours, str(SCRIPTS / "ltowrap-clang"), env)
    rec = lua_link(log)
    assert rec["argv"][0] == tc.lld and rec["decision"] == "distributed", rec
    assert rec["backend_compiles"] == len(rec["backends"]) >= 30, rec
    assert not any(b.get("recorded") is False for b in rec["backends"])
    dumps = subprocess.run([SCRIPTS / "ltowrap", "explain"], env=env, check=True, capture_output=True,
                           text=True).stdout
    formats = [line for line in dumps.splitlines() if line.startswith("shard format: ")]
    assert len(formats) >= 30 and all(f.startswith(f"shard format: summary v{SUMMARY_VERSION[version]} (")
                                      and f.endswith("): canonical") for f in formats), set(formats)

    # The same objects linked by this clang alone: in-process ThinLTO.
    reference = tmp_path / "in-process" / "lua"
    shutil.copytree(ours, reference, symlinks=True)
    (reference / "src" / "lua").unlink()
    make_lua(reference, tc.clang, clean_env() | {"LTOWRAP_DISABLE": "1"})
    r = fidelity.compare(ours / "src" / "lua", reference / "src" / "lua", OBJDUMP)
    print(f"\n[versions] lua, clang {version}: {r.summary()}")
    assert r.identical > 600 and not r.differing and not r.only_a and not r.only_b, (
        r.summary(), [fidelity.diff(ours / "src" / "lua", reference / "src" / "lua", OBJDUMP, n)
                      for n in r.differing[:2]])

    # Relinked with the memo off: the thin-link and every backend from the cache.
    (ours / "src" / "lua").unlink()
    make_lua(ours, str(SCRIPTS / "ltowrap-clang"), env | {"LTOWRAP_MEMO": "0", "LTOWRAP_DEBUG": "0"})
    again = lua_link(log)
    assert again["thinlink_cached"] and again["backend_compiles"] == 0, again
    assert again["backend_hits"] == rec["backend_compiles"]
