"""A real Buildbarn on loopback for tests: bb_storage, bb_scheduler, bb_worker, bb_runner.

dev/setup builds the four binaries from the Go module proxy into .buildbarn/bin (the versions
are dev/buildbarn/go.mod's); the configurations are the project's, dev/buildbarn/config/*.jsonnet,
filled in through environment variables (Buildbarn hands its environment to Jsonnet).

    bb_bin_or_missing()                          # or a skip (locally) / failure (CI=true)
    with bb_cache_server(tmp_path) as url: ...   # "grpc://127.0.0.1:PORT": bb_storage alone
    with bb_secure_cache_server(tmp_path) as srv: ...   # the same behind TLS and ES256 bearer tokens
    with bb_exec_server(tmp_path) as srv:        # all four; srv.url is bb_storage's
        srv.url, srv.instance

Every process listens on 127.0.0.1 only, on ports chosen free at start, gets its own process
group and is stopped by its PID (reapi_server.stop_process). Each writes its log to
<tmp_path>/<name>.log, which stays there after the test; a process that dies or is not ready
within the start-up bound fails the fixture with its log's tail.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from reapi_server import (JWT_AUDIENCE, STARTUP_TIMEOUT_S, SecureServer, _b64url, _log_tail, _wait_for, free_port,
                          make_self_signed_cert, stop_process)

REPO = Path(__file__).resolve().parent.parent
BB_BIN = REPO / ".buildbarn" / "bin"
BB_CONFIG = REPO / "dev" / "buildbarn" / "config"
BINARIES = ("bb_storage", "bb_scheduler", "bb_worker", "bb_runner")
WORKER_NAME = "bb-worker"


def bb_bin_or_missing() -> Path:
    """The directory of the four Buildbarn binaries, or needs.missing naming the absent ones."""
    absent = [name for name in BINARIES if not os.access(BB_BIN / name, os.X_OK)]
    if absent:
        from needs import missing

        missing(f"Buildbarn ({', '.join(absent)} in {BB_BIN.relative_to(REPO)})",
                "dev/setup builds it with Go from the Go module proxy")
    return BB_BIN


def _serves(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def _bb_process(name: str, binary: str, config: str, env: dict[str, str], workdir: Path,
                port: int | None, wrap: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """Start .buildbarn/bin/<binary> on dev/buildbarn/config/<config> (behind the `wrap` argv,
    which must exec it in its own place); yield once `port` takes connections (at once when
    None), stop it on exit."""
    log = workdir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*wrap, str(BB_BIN / binary), str(BB_CONFIG / config)], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=workdir)
    try:
        if port is not None:
            _wait_for(lambda: _serves(port), f"Buildbarn {name}", proc, log)
        yield proc
    finally:
        stop_process(proc, timeout=5.0)


def _env(state: Path, **values: str) -> dict[str, str]:
    """The processes' environment: the Jsonnet variables every configuration reads, and no more
    of ours than PATH (a stray variable would be a variable of the configuration too)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "BB_DIR": str(state), "BB_SCHEDULER": "",
           "BB_SCHEDULER_CLIENTS": "", "BB_SCHEDULER_WORKERS": "", "BB_RUNNER": "", "BB_CONCURRENCY": "1",
           "BB_PLATFORM": "[]", "BB_WORKER_NAME": WORKER_NAME, "BB_TLS_CERT": "", "BB_TLS_KEY": "",
           "BB_JWKS": "", "BB_JWT_AUDIENCE": "", "BB_TRANSFER_CONCURRENCY": "10"}
    env.update(values)
    return env


@contextmanager
def bb_cache_server(tmp_path: Path) -> Iterator[str]:
    """bb_storage alone: CAS, ByteStream, action cache, Capabilities; yields its URL."""
    bb_bin_or_missing()
    tmp_path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = _env(tmp_path, BB_STORAGE=f"127.0.0.1:{port}")
    with _bb_process("bb-storage", "bb_storage", "storage.jsonnet", env, tmp_path, port):
        yield f"grpc://127.0.0.1:{port}"


def _openssl(*args: str, data: bytes = b"") -> bytes:
    done = subprocess.run(["openssl", *args], input=data, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed ({done.returncode}):\n{done.stderr[-2000:]!r}")
    return done.stdout


@dataclass(frozen=True)
class ES256Key:
    """A P-256 key pair for JSON Web Tokens (Buildbarn validates tokens by public keys only:
    its key sets take no shared HMAC secret). The openssl tool signs."""

    key: Path

    @staticmethod
    def make(path: Path) -> ES256Key:
        path.write_bytes(_openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout"))
        path.chmod(0o600)
        return ES256Key(path)

    def jwk(self) -> dict[str, str]:
        # The DER public key ends with the uncompressed point: 0x04, X, Y (32 bytes each).
        point = _openssl("ec", "-in", str(self.key), "-pubout", "-outform", "DER")[-65:]
        return {"kty": "EC", "crv": "P-256", "x": _b64url(point[1:33]), "y": _b64url(point[33:]), "alg": "ES256"}

    def token(self, audience: str = JWT_AUDIENCE, lifetime_s: int = 3600) -> str:
        now = int(time.time())
        parts = ({"alg": "ES256", "typ": "JWT"}, {"sub": "ltowrap-test", "aud": audience, "iat": now,
                                                   "exp": now + lifetime_s})
        signing_input = ".".join(_b64url(json.dumps(p, separators=(",", ":")).encode()) for p in parts)
        der = _openssl("dgst", "-sha256", "-sign", str(self.key), data=signing_input.encode("ascii"))
        return f"{signing_input}.{_b64url(_der_signature_to_jose(der))}"


def _der_signature_to_jose(der: bytes) -> bytes:
    """ECDSA's DER SEQUENCE { INTEGER r, INTEGER s } as JWS wants it: r and s, 32 bytes each."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        out += der[i + 2:i + 2 + n].lstrip(b"\0").rjust(32, b"\0")
        i += 2 + n
    return out


@contextmanager
def bb_secure_cache_server(tmp_path: Path) -> Iterator[SecureServer]:
    """bb_cache_server behind TLS (a self-signed certificate for 127.0.0.1) and JWT bearer auth
    (ES256, audience JWT_AUDIENCE); wrong_token is signed by a key the server does not know."""
    bb_bin_or_missing()
    tmp_path.mkdir(parents=True, exist_ok=True)
    tls_key, cert = make_self_signed_cert(tmp_path)
    signer, stranger = ES256Key.make(tmp_path / "jwt.key"), ES256Key.make(tmp_path / "other-jwt.key")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [signer.jwk()]}))
    port = free_port()
    env = _env(tmp_path, BB_STORAGE=f"127.0.0.1:{port}", BB_TLS_CERT=str(cert), BB_TLS_KEY=str(tls_key),
               BB_JWKS=str(jwks), BB_JWT_AUDIENCE=JWT_AUDIENCE)
    with _bb_process("bb-storage", "bb_storage", "storage.jsonnet", env, tmp_path, port):
        yield SecureServer(url=f"grpcs://127.0.0.1:{port}", ca=cert, token=signer.token(),
                           wrong_token=stranger.token())


@dataclass(frozen=True)
class BuildbarnServer:
    url: str  # bb_storage's: CAS, action cache, and Execute forwarded to the scheduler
    instance: str
    workdir: Path  # the logs: bb-storage.log, bb-scheduler.log, bb-worker.log, bb-runner.log
    # Each process's PID, by log name; each leads a process group (and session) of its own.
    pids: dict[str, int] = field(default_factory=dict)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")


REPLAY_SOURCE = REPO / "bench" / "bb_replay.c"


def replay_runner(replay: Path, speed: float, compiler: Path, clang: Path, out: Path) -> list[str]:
    """The runner_wrap of a replaying Buildbarn (bench/cluster.py --engine buildbarn): builds
    bench/bb_replay.c for `replay` (reapi_server.replay_dir's directory) and `speed` into `out`,
    and returns an argv that starts bb_runner in a mount namespace of its own where `compiler`
    (the path the actions name as argv[0]) is that program, bind-mounted over it. Nothing else
    changes: bb_worker, the scheduler and the client see the actions as they are, and no other
    process sees the mount. Needs unshare(1) and mount(8), and root or user namespaces."""
    replay = replay.resolve()
    times = json.loads((replay / "times.json").read_text())
    (replay / "times.txt").write_text("".join(f"{digest} {seconds}\n" for digest, seconds in sorted(times.items())))
    subprocess.run([str(clang), "-O2", f'-DREPLAY_DIR="{replay}"', f"-DSPEED={float(speed)!r}", str(REPLAY_SOURCE),
                    "-o", str(out)], check=True, stdin=subprocess.DEVNULL)
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.append("--map-root-user")  # an unprivileged user's mount namespace, where it may bind-mount
    # The bind mount follows a symlink at `compiler` and covers the file it names.
    return [*unshare, "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "bb-runner-replay",
            str(out.resolve()), str(compiler)]


def replayed(replay: Path) -> list[str]:
    """The module digests bench/bb_replay.c replayed from `replay` so far, one an action."""
    log = replay / "replayed.log"
    return log.read_text().split() if log.exists() else []


def platform_properties(platform: dict[str, str]) -> str:
    """The worker's platform as the configuration takes it: [{name, value}], sorted by name."""
    return json.dumps([{"name": k, "value": v} for k, v in sorted(platform.items())])


def _probe(url: str, instance: str, platform: dict[str, str], timeout: float) -> None:
    """Run /bin/true through the whole deployment (client -> bb_storage -> bb_scheduler ->
    bb_worker -> bb_runner) until it succeeds: until bb_worker has registered, the scheduler
    refuses the action (no worker for its platform)."""
    from ltowrap.remote import action
    from ltowrap.remote.client import Client, Endpoint, RemoteError

    client = Client(Endpoint(url, instance, timeout=5.0, exec_timeout=30.0))
    deadline = time.monotonic() + timeout
    try:
        probe = action.probe(["/bin/true"], platform, 30)
        client.upload(probe.blobs)
        while True:
            try:
                client.execute(probe.key)
                return
            except RemoteError as e:
                client.pressure.gone.clear()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Buildbarn did not run a probe action within {timeout} s: {e}") from None
                time.sleep(0.1)
    finally:
        client.close()


@contextmanager
def bb_exec_server(tmp_path: Path, instance: str = "", concurrency: int = 2,
                   platform: dict[str, str] | None = None, runner_wrap: Sequence[str] = (),
                   transfer_concurrency: int = 10) -> Iterator[BuildbarnServer]:
    """bb_storage, bb_scheduler, one bb_worker with `concurrency` runner threads and its bb_runner.

    platform: the worker's platform properties (default OSFamily=<this OS>, what ltowrap sends
    by default); Buildbarn runs an action only on a worker whose platform equals the action's.
    runner_wrap: an argv bb_runner is started behind (it must exec bb_runner in its place);
    bench/cluster.py's replay starts it in a mount namespace of its own.
    transfer_concurrency: the blobs the worker fetches and uploads at once, for all its slots.
    Yields once a probe action has run, so the worker is registered."""
    bb_bin_or_missing()
    tmp_path.mkdir(parents=True, exist_ok=True)
    platform = platform if platform is not None else {"OSFamily": sys.platform}
    state = tmp_path / "state"
    for d in ("build", "cache"):
        (state / d).mkdir(parents=True, exist_ok=True)
    storage, clients, workers, runner = (free_port() for _ in range(4))
    env = _env(state, BB_STORAGE=f"127.0.0.1:{storage}", BB_SCHEDULER=f"127.0.0.1:{clients}",
               BB_SCHEDULER_CLIENTS=f"127.0.0.1:{clients}", BB_SCHEDULER_WORKERS=f"127.0.0.1:{workers}",
               BB_RUNNER=f"127.0.0.1:{runner}", BB_CONCURRENCY=str(concurrency),
               BB_PLATFORM=platform_properties(platform), BB_TRANSFER_CONCURRENCY=str(transfer_concurrency))
    url = f"grpc://127.0.0.1:{storage}"
    with ExitStack() as stack:
        # Stopped in reverse: the worker before the runner, the scheduler and the storage.
        procs = {"bb-storage": stack.enter_context(_bb_process("bb-storage", "bb_storage", "storage.jsonnet", env,
                                                              tmp_path, storage)),
                 "bb-scheduler": stack.enter_context(_bb_process("bb-scheduler", "bb_scheduler", "scheduler.jsonnet",
                                                                env, tmp_path, workers)),
                 "bb-runner": stack.enter_context(_bb_process("bb-runner", "bb_runner", "runner.jsonnet", env,
                                                             tmp_path, runner, runner_wrap))}
        worker = procs["bb-worker"] = stack.enter_context(_bb_process("bb-worker", "bb_worker", "worker.jsonnet",
                                                                      env, tmp_path, None))
        try:
            _probe(url, instance, platform, STARTUP_TIMEOUT_S)
        except RuntimeError as e:
            state_now = "running" if worker.poll() is None else f"exited with {worker.returncode}"
            raise RuntimeError(f"{e}\nbb_worker ({state_now}):\n{_log_tail(tmp_path / 'bb-worker.log')}\n"
                               f"bb_scheduler:\n{_log_tail(tmp_path / 'bb-scheduler.log')}") from None
        yield BuildbarnServer(url=url, instance=instance, workdir=tmp_path,
                              pids={name: proc.pid for name, proc in procs.items()})
