"""The REAPI servers the remote tests run against, by name: BuildGrid (reapi_server.py) and
Buildbarn (buildbarn_server.py). A test that takes the `engine` fixture runs once on each.

    with engine_cache_server("buildbarn", tmp_path) as url: ...
    with engine_exec_server("buildgrid", tmp_path, toolchain) as url: ...   # two workers
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from buildbarn_server import WORKER_NAME, bb_bin_or_missing, bb_cache_server, bb_exec_server
from reapi_server import buildgrid_or_missing, cache_server, exec_server

ENGINES = ("buildgrid", "buildbarn")


def engine_or_missing(engine: str) -> str:
    """engine, if this machine has it; else needs.missing."""
    {"buildgrid": buildgrid_or_missing, "buildbarn": bb_bin_or_missing}[engine]()
    return engine


@contextmanager
def engine_cache_server(engine: str, tmp_path: Path) -> Iterator[str]:
    """A cache-only server (CAS, ByteStream, action cache, Capabilities); yields its URL."""
    server = cache_server(tmp_path) if engine == "buildgrid" else bb_cache_server(tmp_path)
    with server as url:
        yield url


@contextmanager
def engine_exec_server(engine: str, tmp_path: Path, toolchain: str) -> Iterator[str]:
    """A server with two workers that take ltowrap's default platform (OSFamily=<this OS>);
    BuildGrid's also advertise `toolchain` as ltowrap-toolchain. Yields its URL."""
    if engine == "buildgrid":
        with exec_server(tmp_path, workers=2, toolchains=[toolchain]) as server:
            yield server.url
    else:
        with bb_exec_server(tmp_path, concurrency=2) as server:
            yield server.url


def worker_prefix(engine: str) -> str:
    """How ExecutedActionMetadata.worker starts on the engine's workers."""
    return "test-worker-" if engine == "buildgrid" else '{"name":"' + WORKER_NAME + '"'
