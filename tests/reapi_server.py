"""Real REAPI servers on loopback for tests: BuildGrid 0.9.1, its PostgreSQL, test workers.

Runs on the project's Python (3.11); everything REAPI runs as subprocesses in a
separate venv, .venv-buildgrid, made from Python 3.13 (BuildGrid 0.9.1 needs >= 3.13).

    python = buildgrid_or_missing()            # or a skip (locally) / failure (CI=true) naming what is missing
    with cache_server(tmp_path) as url: ...                    # "grpc://127.0.0.1:PORT"
    with secure_cache_server(tmp_path) as srv:                 # TLS + JWT bearer tokens
        srv.url, srv.ca, srv.token                             # "grpcs://127.0.0.1:PORT"
    with exec_server(tmp_path, workers=2) as srv:
        srv.url, srv.workers, srv.kill_worker(0), srv.start_worker()

Every process is started here and stopped by its PID (and its own process group,
which each gets at start): SIGTERM, then SIGKILL after a timeout. Nothing binds
anything but 127.0.0.1.
"""

from __future__ import annotations

import base64
import fcntl
import glob
import hashlib
import hmac
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
BGD_VENV = REPO / ".venv-buildgrid"
BUILDGRID_VERSION = "0.9.1"
# Debian's PostgreSQL (bookworm: 15); the newest installed major version.
PG_BIN = max(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
             default=Path("/usr/lib/postgresql/15/bin"))
WORKER_SCRIPT = TESTS / "reapi_worker.py"
PROBE_SCRIPT = TESTS / "reapi_probe.py"

# Scheduler tuning for tests. BuildGrid only long-polls a bot when 80 % of
# min(client deadline, keepalive) is at least its NETWORK_TIMEOUT of 3 s, so the
# keepalive cannot go below 3.75 s; 4 s means a SIGKILLed bot's job is re-queued
# about 4-4.5 s after its last heartbeat (the worker beats every 1 s).
BOT_KEEPALIVE_S = 4
SESSION_REAPER_INTERVAL_S = 0.25
ASSIGNER_INTERVAL_S = 0.05
STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SchedulerTuning:
    """How often the scheduler and its bots talk: BuildGrid's sql-scheduler settings, the Execute
    streams' keepalive and the test workers' own polling. Every bot's UpdateBotSession is several
    database transactions in BuildGrid's one Python process, so these set much of its CPU per job."""

    keepalive_s: float = BOT_KEEPALIVE_S  # bot-session-keepalive-timeout
    reaper_interval_s: float = SESSION_REAPER_INTERVAL_S  # session-expiry-timer-interval
    assigners: int = 1  # priority-age-assigner threads
    assigner_interval_s: float = ASSIGNER_INTERVAL_S
    operation_keepalive_s: float = 5.0  # operation-stream-keepalive-timeout: each Execute stream's idle update
    heartbeat_s: float = 1.0  # a busy worker's UpdateBotSession period
    long_poll_s: float = 5.0  # an idle worker's UpdateBotSession deadline (BuildGrid holds it 80 % of this)
    # proactive-fetch-full-queue: a bot that reports a job done is handed the next queued one in the
    # same call and transaction, not through an assigner thread, a notification and one more call.
    proactive_fetch: bool = False


# The tests': a SIGKILLed bot's job is re-queued within about 4.5 s.
TEST_TUNING = SchedulerTuning()
# A deployment's (bench/cluster.py): dead bots are noticed in a minute, not seconds, so a busy bot
# reports every 20 s and an idle one waits up to 40 s for work (BuildGrid's default keepalive is
# 600 s, its reference config's 120 s); an Execute stream hears from the server every 60 s. A bot
# that finishes a job still reports at once, so none of this delays a result.
DEPLOYMENT_TUNING = SchedulerTuning(keepalive_s=60, reaper_interval_s=5, operation_keepalive_s=60, heartbeat_s=20,
                                    long_poll_s=50, proactive_fetch=True)


def find_python313() -> Path | None:
    """A Python 3.13 interpreter: pyenv's first, then python3.13 on PATH."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for candidate in sorted(glob.glob(f"{pyenv}/versions/3.13*/bin/python"), reverse=True):
        if os.access(candidate, os.X_OK):
            return Path(candidate)
    found = shutil.which("python3.13")
    if found is None:
        return None
    # A pyenv shim on PATH may exist without a 3.13 behind it: ask it.
    probe = subprocess.run([found, "-c", "import sys; print(sys.executable)"],
                           capture_output=True, text=True, check=False)
    return Path(probe.stdout.strip()) if probe.returncode == 0 and probe.stdout.strip() else None


def _venv_complete() -> bool:
    # pip installs dependencies before the package that needs them, so buildgrid's
    # dist-info appearing means the install finished.
    return bool(glob.glob(str(BGD_VENV / f"lib/python3*/site-packages/buildgrid-{BUILDGRID_VERSION}.dist-info")))


def ensure_buildgrid_venv() -> tuple[Path | None, str]:
    """(the venv's python, "") when usable, creating it if needed; else (None, why not).

    Creating it takes ~10 s (pip install buildgrid==0.9.1); dev/setup does it up front.
    A lock keeps concurrent test sessions from building it twice.
    """
    python = BGD_VENV / "bin" / "python"
    if _venv_complete() and python.exists():
        return python, ""
    base = find_python313()
    if base is None:
        return None, "no Python 3.13 (BuildGrid 0.9.1 needs >= 3.13): looked in pyenv's versions and PATH"
    lock_path = Path(tempfile.gettempdir()) / "ltowrap-venv-buildgrid.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (_venv_complete() and python.exists()):
            shutil.rmtree(BGD_VENV, ignore_errors=True)
            subprocess.run([str(base), "-m", "venv", str(BGD_VENV)], check=True)
            pip = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 f"buildgrid=={BUILDGRID_VERSION}"],
                capture_output=True, text=True, check=False,
            )
            if pip.returncode != 0 or not _venv_complete():
                return None, f"pip install buildgrid=={BUILDGRID_VERSION} failed:\n{pip.stderr[-2000:]}"
    return python, ""


def buildgrid_or_missing() -> Path:
    """The BuildGrid venv's python, or needs.missing naming what is not there (a test that needs it cannot run)."""
    python, reason = ensure_buildgrid_venv()
    if python is None:
        from needs import missing

        missing(f"BuildGrid {BUILDGRID_VERSION} in {BGD_VENV.name} ({reason})",
                "dev/setup makes it from a Python >= 3.13")
    return python


def buildgrid_python() -> Path:
    python, reason = ensure_buildgrid_venv()
    if python is None:
        raise RuntimeError(reason)
    return python


def free_port() -> int:
    """A free loopback TCP port (bind to :0 and release; tiny race, fine for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
    """Signal proc by PID, SIGKILL it after timeout, then sweep its process group.

    Every process here is started with start_new_session=True, so its PID is also the
    ID of a group holding only it and what it spawned: killing that group leaves no
    stray child even when the leader has already gone.
    """
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _log_tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _wait_for(predicate, what: str, proc: subprocess.Popen[bytes] | None, log: Path | None,  # type: ignore[no-untyped-def]
              timeout: float = STARTUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n"
                               f"{_log_tail(log) if log else ''}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout} s:\n{_log_tail(log) if log else ''}")
        time.sleep(0.02)


def _q(s: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(s)


def _storage_yaml(cache_failed_actions: bool, client_updates: bool = True, cas_url: str | None = None,
                  cas_dir: Path | None = None) -> str:
    """The CAS and the action cache clients see (&ac); the scheduler writes to &sched_ac, which
    is &ac itself unless clients may not write it (BuildGrid's read-only cache refuses the
    scheduler too, so a read-only &ac gets a writable one of the scheduler's own). With cas_url
    the blobs live in that server (a CAS of its own, as deployments split it from the scheduler)
    and this one reads and writes them there; with cas_dir, in that directory, which another
    server may serve too (BuildGrid's disk storage writes a blob whole, then renames it)."""
    if cas_url:
        # The action cache too: the scheduler of the process that serves the bots writes it, the
        # client reads it from another (exec_server's split).
        url = _q(cas_url.replace("grpc://", "http://"))
        assert client_updates, "a read-only action cache beside a CAS of its own: not needed yet"
        return f"""\
storages:
  - !remote-storage &cas
    url: {url}
caches:
  - !remote-action-cache &ac
    url: {url}
"""
    storage = (f"  - !disk-storage &cas\n    path: {_q(str(cas_dir))}\n" if cas_dir is not None
               else "  - !lru-storage &cas\n    size: 512MB\n")
    text = f"""\
storages:
{storage}caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: {str(client_updates).lower()}
    cache-failed-actions: {str(cache_failed_actions).lower()}
"""
    if not client_updates:
        text += f"""\
  - !lru-action-cache &sched_ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: {str(cache_failed_actions).lower()}
"""
    return text


@dataclass(frozen=True)
class ServerSecurity:
    """TLS and JWT settings for _server_yaml: PEM key and certificate, HS256 secret file."""

    tls_key: Path
    tls_cert: Path
    jwt_secret_file: Path
    jwt_audience: str


def _server_yaml(port: int, security: ServerSecurity | None = None, threads: int = 128,
                 max_rpcs: int | None = None) -> str:
    # so_reuseport off: gRPC turns it on by default, which would let two servers
    # silently share a port picked by free_port().
    # thread-pool-size: every waiting Execute stream holds a server thread (and the
    # concurrent-RPC limit defaults to the pool size). Two links with 16 requests in
    # flight each filled 32 threads; the bots' long polls then found none and no job
    # ran, so leave room for make -j links x remote_jobs, plus the bots. A small pool
    # (threads, max_rpcs) stands for a busy shared server: beyond max_rpcs requests at
    # once, gRPC answers RESOURCE_EXHAUSTED "Concurrent RPC limit exceeded!".
    if security is None:
        channel = "    insecure-mode: true\n"
        authorization = "  method: none\n"
    else:
        channel = f"""\
    insecure-mode: false
    credentials:
      tls-server-key: {_q(str(security.tls_key))}
      tls-server-cert: {_q(str(security.tls_cert))}
"""
        # allow-localhost-requests stays off (its default): every test client is on
        # 127.0.0.1, and it would let them all in without a token.
        authorization = f"""\
  method: jwt
  algorithm: hs256
  secret: {_q(str(security.jwt_secret_file))}
  audience: {_q(security.jwt_audience)}
  allow-localhost-requests: false
"""
    return f"""\
server:
  - !channel
    address: {_q(f"127.0.0.1:{port}")}
{channel}grpc-server-options:
  grpc.so_reuseport: 0
authorization:
{authorization}thread-pool-size: {threads}
""" + (f"maximum-concurrent-rpcs: {max_rpcs}\n" if max_rpcs is not None else "")


def cache_config(port: int, instance: str = "", security: ServerSecurity | None = None, threads: int = 128,
                 max_rpcs: int | None = None) -> str:
    """BuildGrid config: in-memory LRU CAS + action cache, no database, no execution."""
    # The client decides what it uploads, so store whatever it sends, failures included.
    return _server_yaml(port, security, threads, max_rpcs) + _storage_yaml(cache_failed_actions=True) + _instance_yaml(instance)


def _instance_yaml(instance: str, extra_services: str = "") -> str:
    """The instance: CAS, ByteStream and the action cache, then extra_services."""
    return f"""\
instances:
  - name: {_q(instance)}
    services:
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
      - !action-cache
        cache: *ac
""" + extra_services


def exec_config(port: int, db_url: str, instance: str = "", match_toolchain: bool = True,
                match_keys: tuple[str, ...] = (), client_updates: bool = True, threads: int = 128,
                tuning: SchedulerTuning = TEST_TUNING, cas_url: str | None = None,
                role: str = "all", cas_dir: Path | None = None) -> str:
    """BuildGrid config: cache services + Execution/Operations/Bots on a PostgreSQL scheduler.

    Platform keys accepted: OSFamily and ISA (always match keys in BuildGrid) and
    ltowrap-toolchain, a match key when match_toolchain (a job runs only on a bot that
    advertises the same value) else a wildcard key (accepted, ignored for matching).
    match_keys are further match keys (container-image, a pool name: what a deployment
    selects its workers by). Any other key makes Execute fail with FAILED_PRECONDITION.
    client_updates: whether clients may write the action cache (UpdateActionResult; the
    capabilities say so); if not, what the scheduler caches is not in the one clients read.
    threads: the server's thread pool. Every bot's long poll and every client's waiting
    Execute stream holds one, so a cluster of N bots with a client of remote_jobs J needs
    more than N + J (bench/cluster.py: 128 bots and 128 streams). tuning: see SchedulerTuning.
    cas_url: the blobs and the action cache are that server's (see _storage_yaml); the CAS services
    here pass through. role: "all" serves Execution, Operations and Bots; "execution" the first
    two (the clients' frontend, no assigner) and "bots" the last (the workers', with the
    assigners): one PostgreSQL, so two processes share the scheduler's work and their GILs.
    cas_dir: the blobs in that directory (see _storage_yaml).

    The scheduler writes each finished job's ActionResult to the action cache itself;
    exit codes other than 0 are not cached (cache-failed-actions: false), like Bazel.
    """
    match = [*(["ltowrap-toolchain"] if match_toolchain else []), *match_keys]
    wildcard = [] if match_toolchain else ["ltowrap-toolchain"]
    keys = "\n      ".join(f"{name}: {json.dumps(value)}" for name, value in
                          (("match-property-keys", match), ("wildcard-property-keys", wildcard)) if value)
    return _server_yaml(port, threads=threads) + f"""\
connections:
  - !sql-connection &sql
    connection-string: {_q(db_url)}
    pool-size: {max(10, threads // 8)}
    max-overflow: {max(20, threads // 4)}
""" + _storage_yaml(cache_failed_actions=False, client_updates=client_updates, cas_url=cas_url,
                    cas_dir=cas_dir) + f"""\
schedulers:
  - !sql-scheduler &sched
    sql: *sql
    storage: *cas
    action-cache: {"*ac" if client_updates else "*sched_ac"}
    property-set: !dynamic-property-set
      {keys}
    bot-session-keepalive-timeout: {tuning.keepalive_s:g}
    session-expiry-timer-interval: {tuning.reaper_interval_s:g}
    poll-interval: 0.05
    bot-poll-interval: 0.05
    max-job-attempts: 5
    proactive-fetch-full-queue: {str(tuning.proactive_fetch).lower()}
""" + ("" if role == "execution" else f"""\
    assigners:
      - !priority-age-assigner
        count: {tuning.assigners}
        interval: {tuning.assigner_interval_s:g}
        jitter-factor: 0
        failure-backoff: 0.1
        busy-sleep-factor: 0.1
""") + _instance_yaml(instance, f"""\
      - !execution
        scheduler: *sched
        operation-stream-keepalive-timeout: {tuning.operation_keepalive_s:g}
        endpoints: {json.dumps({"all": ["execution", "operations", "bots"], "execution": ["execution", "operations"],
                                "bots": ["bots"]}[role])}
""")


@contextmanager
def _bgd_server(python: Path, make_config: Callable[[int], str], workdir: Path, name: str,
                started: list[subprocess.Popen[bytes]] | None = None) -> Iterator[int]:
    """Start `bgd server start` with make_config(a free port); yield the port once it serves
    (and append its process to `started`, for a test that stops it early)."""
    port = free_port()
    config = workdir / f"{name}.yml"
    config.write_text(make_config(port))
    pid_file = workdir / f"{name}.pid"
    log = workdir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(python.parent / "bgd"), "server", "start", "--pid-file", str(pid_file), str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=workdir,
        )
    if started is not None:
        started.append(proc)
    try:
        # bgd writes the pid file from its on-server-start callback: the gRPC server is up.
        _wait_for(pid_file.exists, f"BuildGrid ({name})", proc, log)
        yield port
    finally:
        stop_process(proc, timeout=5.0)


@contextmanager
def cache_server(tmp_path: Path, instance: str = "", threads: int = 128, max_rpcs: int | None = None) -> Iterator[str]:
    """A cache-only REAPI server (CAS, ByteStream, ActionCache, Capabilities); yields its URL."""
    with stoppable_cache_server(tmp_path, instance, threads, max_rpcs) as server:
        yield server.url


@dataclass
class CacheServer:
    url: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stop the server now (SIGKILL: requests in flight break, as when a machine goes away)."""
        stop_process(self.proc, sig=signal.SIGKILL)


@contextmanager
def stoppable_cache_server(tmp_path: Path, instance: str = "", threads: int = 128,
                           max_rpcs: int | None = None) -> Iterator[CacheServer]:
    """cache_server, with a handle that stops it while the test goes on."""
    python = buildgrid_python()
    tmp_path.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[bytes]] = []
    with _bgd_server(python, lambda port: cache_config(port, instance, threads=threads, max_rpcs=max_rpcs), tmp_path,
                     "bgd-cache", started) as port:
        yield CacheServer(f"grpc://127.0.0.1:{port}", started[0])


JWT_AUDIENCE = "ltowrap-tests"


@dataclass(frozen=True)
class SecureServer:
    url: str  # grpcs://127.0.0.1:PORT
    ca: Path  # PEM the client should trust: the server's self-signed certificate
    token: str  # a bearer token the server accepts for an hour
    wrong_token: str  # well formed, unexpired, right audience: signed with another key


def make_self_signed_cert(directory: Path, days: int = 1) -> tuple[Path, Path]:
    """(key, certificate) PEMs for 127.0.0.1 (CN and subjectAltName IP), by the openssl tool."""
    key, cert = directory / "server.key", directory / "server.crt"
    done = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl req failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return key, cert


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_jwt(secret: str, audience: str = JWT_AUDIENCE, lifetime_s: int = 3600, subject: str = "ltowrap-test") -> str:
    """An HS256 JWT. BuildGrid 0.9.1 requires exp and, with an audience configured, a matching aud."""
    now = int(time.time())
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sub": subject, "aud": audience, "iat": now, "exp": now + lifetime_s}
    signing_input = ".".join(_b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))
    signature = hmac.new(secret.encode(), signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"


@contextmanager
def secure_cache_server(tmp_path: Path, instance: str = "") -> Iterator[SecureServer]:
    """cache_server behind TLS (a self-signed certificate for 127.0.0.1) and JWT bearer auth (HS256)."""
    python = buildgrid_python()
    tmp_path.mkdir(parents=True, exist_ok=True)
    key, cert = make_self_signed_cert(tmp_path)
    # BuildGrid strips the file's text and uses it as the HMAC key: hex has nothing to strip.
    secret = secrets.token_hex(32)
    secret_file = tmp_path / "jwt.secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    security = ServerSecurity(tls_key=key, tls_cert=cert, jwt_secret_file=secret_file, jwt_audience=JWT_AUDIENCE)
    with _bgd_server(python, lambda port: cache_config(port, instance, security), tmp_path, "bgd-cache-tls") as port:
        yield SecureServer(url=f"grpcs://127.0.0.1:{port}", ca=cert, token=make_jwt(secret),
                           wrong_token=make_jwt("0" * 64))


@dataclass
class Postgres:
    """A throwaway PostgreSQL 15 cluster: 127.0.0.1 only, socket dir private, no durability."""

    root: Path  # under the system temp dir: pytest's tmp_path is 0700 root, unreadable to postgres
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://bgd@127.0.0.1:{self.port}/postgres"

    def _as_owner(self) -> dict[str, object]:
        # postgres refuses to run as root; tests run as root here.
        if os.geteuid() != 0:
            return {}
        pw = pwd.getpwnam("postgres")
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def start(self) -> None:
        owner = self._as_owner()
        if owner:
            os.chown(self.root, owner["user"], owner["group"])  # type: ignore[arg-type]
        data, sock, log = self.root / "data", self.root / "sock", self.root / "postgres.log"
        subprocess.run(
            [str(PG_BIN / "initdb"), "-D", str(data), "-U", "bgd", "--auth=trust", "-E", "UTF8",
             "--no-sync", "--no-instructions"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            cwd=self.root, **owner,  # type: ignore[arg-type]
        )
        subprocess.run(["mkdir", "-m", "700", str(sock)], check=True, cwd=self.root, **owner)  # type: ignore[arg-type]
        self.port = free_port()
        with open(log, "wb") as out:
            if owner:
                os.chown(log, owner["user"], owner["group"])  # type: ignore[arg-type]
            self.proc = subprocess.Popen(
                [str(PG_BIN / "postgres"), "-D", str(data),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"port={self.port}",
                 "-c", f"unix_socket_directories={sock}",
                 # Throwaway data: durability only costs time.
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                cwd=self.root, **owner,  # type: ignore[arg-type]
            )

        def ready() -> bool:
            return subprocess.run([str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                                  check=False).returncode == 0

        _wait_for(ready, "PostgreSQL", self.proc, log)

    def stop(self) -> None:
        if self.proc is not None:
            # SIGQUIT = immediate shutdown: the postmaster takes its backends down at once.
            stop_process(self.proc, sig=signal.SIGQUIT, timeout=5.0)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class ExecServer:
    """A running execution server; workers are Popen objects of tests/reapi_worker.py."""

    url: str
    instance: str
    python: Path
    workdir: Path
    worker_properties: list[tuple[str, str]]
    postgres: Postgres
    tuning: SchedulerTuning = TEST_TUNING
    cas_url: str | None = None  # the workers' CAS when it is a server of its own (exec_server's separate_cas)
    bots_url: str | None = None  # the workers' Bots server when it is not url (exec_server's split)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def start_worker(self, wait: bool = True, extra: tuple[tuple[str, str], ...] = (),
                     stall: float = 0.0, replay: Path | None = None, speed: float = 1.0,
                     bots: int = 1, blob_cache: bool = False) -> subprocess.Popen[bytes]:
        """Start one more worker process (advertising `extra` properties too; `stall`: seconds it waits
        before running each action, a slow worker; `replay`: a replay directory, its compiles
        replayed `speed` times as fast, see reapi_worker.py; `bots`: bots in the process); with
        wait, return once every bot session exists."""
        i = len(self.workers)
        ready = self.workdir / f"worker{i}.ready"
        log = self.workdir / f"worker{i}.log"
        argv = [str(self.python), str(WORKER_SCRIPT), "--url", self.bots_url or self.url, "--instance", self.instance,
                "--bot-id", f"test-worker-{i}-{os.getpid()}", "--ready-file", str(ready),
                "--heartbeat", f"{self.tuning.heartbeat_s:g}", "--long-poll", f"{self.tuning.long_poll_s:g}"]
        for k, v in (*self.worker_properties, *extra):
            argv += ["--property", f"{k}={v}"]
        if stall:
            argv += ["--stall", str(stall)]
        if replay is not None:
            argv += ["--replay", str(replay), "--speed", str(speed)]
        if bots != 1:
            argv += ["--bots", str(bots)]
        if blob_cache:
            argv += ["--blob-cache"]
        if self.cas_url is not None:
            argv += ["--cas-url", self.cas_url]
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.workdir)
        self.workers.append(proc)
        if wait:
            _wait_for(ready.exists, f"worker {i}", proc, log)
        return proc

    def wait_workers(self) -> None:
        for i, proc in enumerate(self.workers):
            _wait_for((self.workdir / f"worker{i}.ready").exists, f"worker {i}", proc,
                      self.workdir / f"worker{i}.log")

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i (its running action dies with it): the server must re-queue its job."""
        proc = self.workers[i]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def worker_log(self, i: int) -> str:
        return (self.workdir / f"worker{i}.log").read_text(errors="replace")

    def stop_workers(self) -> None:
        for proc in self.workers:
            stop_process(proc, timeout=3.0)


@contextmanager
def exec_server(
    tmp_path: Path,
    workers: int = 2,
    instance: str = "",
    toolchains: list[str] | None = None,
    match_keys: tuple[str, ...] = (),
    client_updates: bool = True,
    threads: int = 128,
    tuning: SchedulerTuning = TEST_TUNING,
    separate_cas: bool = False,
    split: bool = False,
) -> Iterator[ExecServer]:
    """BuildGrid with execution on a fresh PostgreSQL, plus `workers` test workers.

    toolchains: values of ltowrap-toolchain the workers advertise; the key is then a
    match key, so an action runs only where its value is advertised. None makes the key
    a wildcard: any value is accepted and ignored for matching. Workers always
    advertise OSFamily=linux. client_updates, threads, tuning: see exec_config. separate_cas: the
    blobs in a second BuildGrid process of their own (a CAS server, as deployments run one apart
    from the scheduler): the workers read and write them there, and the execution server's own
    CAS services pass the client's through to it. Unless split, both serve one directory on tmpfs
    (two frontends of one storage), so neither passes blobs through the other. split: the execution
    server in two processes on the one PostgreSQL, as BuildGrid's `endpoints` allow: the clients'
    (Execution, Operations; url) and the workers' (Bots and the assigners; bots_url).
    """
    python = buildgrid_python()
    if not (PG_BIN / "initdb").exists():
        from needs import missing

        missing(f"PostgreSQL ({PG_BIN / 'initdb'}), which BuildGrid's scheduler needs", "dev/setup installs postgresql")
    tmp_path.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        pg = Postgres(Path(tempfile.mkdtemp(prefix="ltowrap-pg-")))
        stack.callback(pg.stop)
        pg.start()
        migrate_log = tmp_path / "bgd-migrate.log"
        with open(migrate_log, "wb") as out:
            migrate = subprocess.run([str(python.parent / "bgd"), "migrate", "apply", pg.url],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False)
        if migrate.returncode != 0:
            raise RuntimeError(f"bgd migrate apply failed:\n{_log_tail(migrate_log)}")

        cas_url, cas_dir = None, None
        if split:
            cas_port = stack.enter_context(_bgd_server(python, lambda port: cache_config(port, instance, threads=threads),
                                                       tmp_path, "bgd-cas"))
            cas_url = f"grpc://127.0.0.1:{cas_port}"
        elif separate_cas:
            cas_dir = Path(tempfile.mkdtemp(prefix="ltowrap-cas-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
            stack.callback(shutil.rmtree, cas_dir, ignore_errors=True)

            def cas_config(port: int) -> str:
                return (_server_yaml(port, threads=threads) + _storage_yaml(cache_failed_actions=False, cas_dir=cas_dir)
                        + _instance_yaml(instance))

            cas_port = stack.enter_context(_bgd_server(python, cas_config, tmp_path, "bgd-cas"))
            cas_url = f"grpc://127.0.0.1:{cas_port}"

        def make_config(role: str) -> Callable[[int], str]:
            return lambda port: exec_config(port, pg.url, instance, match_toolchain=toolchains is not None,
                                            match_keys=match_keys, client_updates=client_updates, threads=threads,
                                            tuning=tuning, cas_url=cas_url if split else None, role=role,
                                            cas_dir=cas_dir)

        bots_url = None
        if split:
            bots_port = stack.enter_context(_bgd_server(python, make_config("bots"), tmp_path, "bgd-bots"))
            bots_url = f"grpc://127.0.0.1:{bots_port}"
        port = stack.enter_context(_bgd_server(python, make_config("execution" if split else "all"), tmp_path,
                                               "bgd-exec"))
        props = [("OSFamily", "linux")] + [("ltowrap-toolchain", t) for t in toolchains or []]
        server = ExecServer(url=f"grpc://127.0.0.1:{port}", instance=instance, python=python,
                            workdir=tmp_path, worker_properties=props, postgres=pg, tuning=tuning,
                            cas_url=cas_url, bots_url=bots_url)
        # Workers stop before the server and the server before PostgreSQL (ExitStack is LIFO).
        stack.callback(server.stop_workers)
        for _ in range(workers):
            server.start_worker(wait=False)  # start in parallel: Python + grpc import is the slow part
        server.wait_workers()
        yield server


def replay_dir(record: dict, cache_dir: Path, out: Path) -> Path:
    """A replay directory for reapi_worker.py --replay from a local link: `record` is the link's
    LTOWRAP_LOG line, `cache_dir` that run's ltowrap cache. Each backend compiled there gives
    its compile time (end - start) and its object (o/<key>), under its module's digest.
    Returns out, holding times.json and <digest>.o."""
    from ltowrap.cache import OBJECTS, Cache
    from ltowrap.stats import Stats

    cache = Cache(str(cache_dir), Stats())
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    for b in record["backends"]:
        if b["source"] != "compiled":
            raise ValueError(f"{b['module']} was not compiled in this run ({b['source']}): no compile time to replay")
        entry = cache.get(OBJECTS, b["key"])
        if entry is None or not entry.payload:
            raise ValueError(f"{b['module']}: no object under its key {b['key']} in {cache_dir}")
        (out / f"{b['digest']}.o").write_bytes(entry.payload)
        times[b["digest"]] = round(b["end"] - b["start"], 4)
    (out / "times.json").write_text(json.dumps(times, indent=0, sort_keys=True))
    return out


def run_probe(python: Path, *args: str, timeout: float = 120.0) -> dict[str, object]:
    """Run tests/reapi_probe.py in the BuildGrid venv and return the JSON it prints."""
    out = subprocess.run([str(python), str(PROBE_SCRIPT), *args], capture_output=True, text=True,
                         timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"reapi_probe {args[0]} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
