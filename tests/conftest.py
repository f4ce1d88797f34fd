"""Shared fixtures: real toolchains, an isolated cache, and a way to build small projects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from needs import missing

BIN = Path(sys.executable).parent  # the venv ltowrap is installed in
# Every test that takes `tc` runs on both; dev/setup installs both. One that is missing
# skips visibly here and fails the run in CI (needs.missing), never drops out unseen.
LLVM_VERSIONS = (22, 14)
# Every clang/lld/llvm release Debian bookworm ships (dev/setup installs all six): the tests
# that take `any_tc` (tests/test_versions.py: a small core, the summary format, the gates)
# run on each, and so does lua's fidelity check (integration/test_versions_lua.py, 22's in
# integration/test_fidelity.py); tests/test_ldscript.py takes each ld.lld.
ALL_VERSIONS = (22, 19, 16, 15, 14, 13)


@dataclass(frozen=True)
class Toolchain:
    version: int

    @property
    def bindir(self) -> Path:
        return Path(f"/usr/lib/llvm-{self.version}/bin")

    @property
    def clang(self) -> str:
        return str(self.bindir / "clang")

    @property
    def clangxx(self) -> str:
        return str(self.bindir / "clang++")

    @property
    def lld(self) -> str:
        return str(self.bindir / "ld.lld")

    @property
    def ar(self) -> str:
        return str(self.bindir / "llvm-ar")


def toolchain(version: int) -> Toolchain:
    """clang/lld `version` (Debian's /usr/lib/llvm-N), or needs.missing saying which is not installed."""
    tc = Toolchain(version)
    absent = [p for p in (tc.clang, tc.clangxx, tc.lld, tc.ar) if not Path(p).exists()]
    if absent:
        missing(f"LLVM {version}: {', '.join(absent)}", f"dev/setup installs clang-{version} lld-{version} llvm-{version}")
    return tc


@pytest.fixture(params=LLVM_VERSIONS, ids=[f"llvm{v}" for v in LLVM_VERSIONS])
def tc(request) -> Toolchain:
    return toolchain(request.param)


@pytest.fixture(params=ALL_VERSIONS, ids=[f"llvm{v}" for v in ALL_VERSIONS])
def any_tc(request) -> Toolchain:
    return toolchain(request.param)


@pytest.fixture
def tc22() -> Toolchain:
    return toolchain(22)


@pytest.fixture
def tc14() -> Toolchain:
    return toolchain(14)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Never touch the real user cache or config; every test gets its own cache and log."""
    for var in [v for v in os.environ if v.startswith("LTOWRAP_")] + ["MAKEFLAGS", "MFLAGS"]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LTOWRAP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LTOWRAP_LOG", str(tmp_path / "ltowrap.log"))
    monkeypatch.setenv("LTOWRAP_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def run(cmd: list[str], cwd: Path | str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


def wrapper(name: str) -> str:
    return str(BIN / name)


def log_lines(tmp_path: Path) -> list[dict]:
    path = tmp_path / "ltowrap.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def links(tmp_path: Path) -> list[dict]:
    return [r for r in log_lines(tmp_path) if r["tool"].startswith("ld.lld")]


def stats_json(env: dict | None = None) -> dict:
    done = subprocess.run([wrapper("ltowrap"), "stats", "--json"], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def project(tmp_path) -> Path:
    d = tmp_path / "proj"
    d.mkdir()
    return d


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def refusals(read, data: bytes, seed: int, rounds: int) -> int:
    """Flip 1-4 random bits (past the magic) of `data`, `rounds` times, and call `read` on each
    copy: how many times it raised BadBitcode. Anything else it raises fails the test."""
    import random

    from ltowrap.bitcode import BadBitcode

    rng = random.Random(seed)
    refused = 0
    for _ in range(rounds):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(4, len(damaged))] ^= 1 << rng.randrange(8)
        try:
            read(bytes(damaged))
        except BadBitcode:
            refused += 1
    return refused
