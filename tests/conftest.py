"""Shared fixtures: real toolchains, an isolated cache, and a place to build small projects.

The functions the test modules share are in helpers.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import streams
from helpers import ALL_VERSIONS, LLVM_VERSIONS, Toolchain, callers_setting, isolation, toolchain
from reapi_engines import ENGINES, engine_or_missing
from reapi_server import buildgrid_or_missing


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


@pytest.fixture
def compiled_reader(monkeypatch) -> None:
    """The compiled reader in place whatever LTOWRAP_NATIVE says: for the tests that hold it to
    the Python one (the whole suite also runs with LTOWRAP_NATIVE=0)."""
    from ltowrap.formats import bitcode

    monkeypatch.setattr(bitcode, "_native", streams.native())


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Never touch the real user cache or config; every test gets its own cache and log, and none of
    the caller's ltowrap, make or build settings (helpers.ltowrap_env builds on this)."""
    for var in [v for v in os.environ if callers_setting(v)]:
        monkeypatch.delenv(var)
    for var, value in isolation(tmp_path).items():
        monkeypatch.setenv(var, value)


@pytest.fixture(scope="module")
def buildgrid() -> None:
    """BuildGrid's venv (tests/reapi_server.py), or needs.missing."""
    buildgrid_or_missing()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request) -> str:
    """The REAPI server a test runs against, each in turn (tests/reapi_engines.py), or needs.missing."""
    return engine_or_missing(request.param)


@pytest.fixture
def project(tmp_path) -> Path:
    d = tmp_path / "proj"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def corpora(tmp_path_factory) -> Callable[[Toolchain], dict[str, bytes]]:
    """Each toolchain's bitcode corpus (streams.corpus: modules and index shards), made once for
    the session: the compiled reader's and the compiled shard text's tests share it."""
    made: dict[int, dict[str, bytes]] = {}

    def of(tc: Toolchain) -> dict[str, bytes]:
        if tc.version not in made:
            made[tc.version] = streams.corpus(tc, tmp_path_factory.mktemp(f"llvm{tc.version}"))
        return made[tc.version]

    return of
