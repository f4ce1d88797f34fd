"""The REAPI servers the remote tests run against, by name: BuildGrid (reapi_server.py) and
Buildbarn (buildbarn_server.py). A test that takes the `engine` fixture runs once on each.

    with engine_cache_server("buildbarn", tmp_path) as url: ...
    with engine_exec_server("buildgrid", tmp_path, toolchain) as url: ...   # two workers
    with engine_secure_cache_server("buildbarn", tmp_path) as srv: ...   # TLS and bearer tokens
    with engine_unsteady_cache_server("buildbarn", tmp_path) as url: ... # refuses or drops requests
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from buildbarn_server import WORKER_NAME, bb_bin_or_missing, bb_cache_server, bb_exec_server, bb_secure_cache_server
from reapi_server import SecureServer, buildgrid_or_missing, cache_server, exec_server, secure_cache_server

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
def engine_secure_cache_server(engine: str, tmp_path: Path) -> Iterator[SecureServer]:
    """A cache-only server behind TLS (a self-signed certificate) that wants a JWT bearer token:
    HS256 on BuildGrid, ES256 on Buildbarn (whose key sets take public keys only)."""
    server = secure_cache_server(tmp_path) if engine == "buildgrid" else bb_secure_cache_server(tmp_path)
    with server as secure:
        yield secure


class DroppingRelay:
    """A TCP relay on loopback to 127.0.0.1:`port` that cuts every other connection (the 1st,
    3rd, ...) once the client has sent `after` bytes on it: the request those bytes belong to
    breaks in flight (UNAVAILABLE, the socket closed) and the client connects again, through
    a connection left whole, as when a server or a load balancer on the way goes away. The
    cut is by bytes, not time, so each link a test runs through it is cut once."""

    def __init__(self, port: int, after: int) -> None:
        self.target, self.after = port, after
        self.cuts = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"grpc://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._connections = 0
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                self._connections += 1
                cut = self._connections % 2 == 1
            threading.Thread(target=self._relay, args=(client, cut), daemon=True).start()

    def _relay(self, client: socket.socket, cut: bool) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        down = threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True)
        down.start()
        self._pump(client, upstream, self.after if cut else None)
        for s in (client, upstream):
            # SO_LINGER 0: the close resets the connection, as a peer that went away does.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()

    def _pump(self, source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    return
                if limit is not None and sent + len(data) >= limit:
                    sink.sendall(data[:limit - sent])
                    with self._lock:
                        self.cuts += 1
                    return
                sink.sendall(data)
                sent += len(data)
            except OSError:
                return

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        self._listener.close()
        self._accepting.join()


@contextmanager
def engine_unsteady_cache_server(engine: str, tmp_path: Path) -> Iterator[str]:
    """A cache-only server that says "not now" to many requests, each in the way it can:
    BuildGrid serves one request at a time and refuses the others (RESOURCE_EXHAUSTED);
    Buildbarn, which has no such limit, is behind a DroppingRelay that breaks a request in
    flight on every other connection (UNAVAILABLE). Yields its URL."""
    if engine == "buildgrid":
        with cache_server(tmp_path, threads=5, max_rpcs=1) as url:
            yield url
        return
    with bb_cache_server(tmp_path) as url:
        # 1 KiB: past the connection's preface and first requests, before the link's last.
        relay = DroppingRelay(int(url.rsplit(":", 1)[1]), after=1024)
        try:
            yield relay.url
        finally:
            relay.close()


@dataclass(frozen=True)
class ExecEngine:
    url: str
    # Actions the workers ran to the end, successfully; None where the engine does not say
    # (bb_worker logs no line an action).
    runs: Callable[[], int | None]


@contextmanager
def engine_exec_server_runs(engine: str, tmp_path: Path, toolchain: str) -> Iterator[ExecEngine]:
    """engine_exec_server, with a count of the actions its workers ran where it can be had."""
    if engine == "buildgrid":
        with exec_server(tmp_path, workers=2, toolchains=[toolchain]) as server:
            yield ExecEngine(server.url, lambda: sum(server.worker_log(i).count(" done: status=0 exit=0")
                                                     for i in range(2)))
    else:
        with bb_exec_server(tmp_path, concurrency=2) as bb:
            yield ExecEngine(bb.url, lambda: None)


@contextmanager
def engine_exec_server(engine: str, tmp_path: Path, toolchain: str) -> Iterator[str]:
    """A server with two workers that take ltowrap's default platform (OSFamily=<this OS>);
    BuildGrid's also advertise `toolchain` as ltowrap-toolchain. Yields its URL."""
    with engine_exec_server_runs(engine, tmp_path, toolchain) as server:
        yield server.url


def worker_prefix(engine: str) -> str:
    """How ExecutedActionMetadata.worker starts on the engine's workers."""
    return "test-worker-" if engine == "buildgrid" else '{"name":"' + WORKER_NAME + '"'
