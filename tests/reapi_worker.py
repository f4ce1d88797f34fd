"""A test-only REAPI worker speaking the Bots API (remoteworkers v1test2) to BuildGrid.

Real deployments run buildbox-worker + buildbox-run; neither is packaged here, so the
tests use this small stand-in. It runs in the BuildGrid venv (Python 3.13, grpcio and
BuildGrid's generated protos), never in the project venv.

Loop: CreateBotSession, then UpdateBotSession as a long poll. When a lease arrives,
a thread fetches the Action, Command and input root from CAS, materialises them in a
fresh temp dir, runs argv (no shell) with exactly the Command's environment, uploads
the outputs and stdout/stderr, and the main thread reports the lease COMPLETED with
an ActionResult. While the action runs, the main thread sends a heartbeat every
--heartbeat seconds: BuildGrid reaps a session whose bot stays silent for longer than
the scheduler's bot-session-keepalive-timeout and re-queues its job, which is what
lets a SIGKILLed worker's job finish on another worker.

Replay mode (--replay DIR, bench/cluster.py and tests/test_cluster.py): every real part of
a worker but the compile. The job fetches the Action, its Command and its whole input root
from the CAS as above (the bytes are read, not written to disk), then, instead of running
clang, sleeps for the compile time a local run recorded for that backend divided by
--speed, and uploads the object that local run produced. DIR holds `times.json`
({module digest: seconds}) and `<module digest>.o` for each backend; the module is the
`m/<rank>-<digest>.o` the Command compiles (remote/action.py), so the digest is read off its
name. A module DIR does not know fails the action (exit 1), as a compile error would.
--bots N runs N bots in this one process (a thread each, one channel per 16 bots), so
that 128 of them fit on two cores. --blob-cache keeps every blob read, by digest, for the
bots of the process (a worker machine's local CAS, as buildbox-casd gives a BuildGrid
worker): a blob is fetched from the server once per process, not once per job.

Usage (see tests/reapi_server.py, which starts these):
    python reapi_worker.py --url grpc://127.0.0.1:PORT [--instance NAME]
        [--property OSFamily=linux] [--property ltowrap-toolchain=VALUE ...]
        [--ready-file PATH] [--inline-stdio] [--stall SECONDS]
        [--replay DIR [--speed F]] [--bots N] [--blob-cache [--blob-cache-mb N]] [--cas-url URL]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# The worker forks actions while gRPC threads run; gRPC's fork handlers only warn then.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402
from google.protobuf import timestamp_pb2
from buildgrid._protos.google.rpc import code_pb2, status_pb2

from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc, worker_pb2

# BuildGrid only long-polls when the client's deadline leaves at least its
# NETWORK_TIMEOUT (3 s) after taking 80 %: a deadline of 5 s gives a 4 s wait.
LONG_POLL_TIMEOUT = 5.0
# A CreateBotSession with a deadline under 3.75 s returns at once instead of long-polling,
# so the harness learns quickly that the bot is registered.
CREATE_TIMEOUT = 3.0
# Heartbeats while a job runs return at once (the bot is at capacity), so keep them short.
HEARTBEAT_RPC_TIMEOUT = 3.0
# Blobs above this go through ByteStream; BuildGrid caps batches at 4 MiB minus headroom.
MAX_BATCH_BYTES = 3 * 1024 * 1024
CHUNK = 1024 * 1024


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_worker() -> None:
    """In the action's child: get SIGKILLed if the worker dies, so a SIGKILLed worker
    leaves no stray action behind (the server re-runs the job elsewhere anyway)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def log(msg: str) -> None:
    # One write per line: the bots of one process log from their threads at once.
    sys.stderr.write(f"[reapi_worker {os.getpid()} {time.time():.3f}] {msg}\n")
    sys.stderr.flush()


def now_ts() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def digest_of(data: bytes) -> re_pb2.Digest:
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def dkey(d: re_pb2.Digest) -> tuple[str, int]:
    return (d.hash, d.size_bytes)


class MissingBlob(Exception):
    pass


@dataclass
class BlobCache:
    """Blobs this worker process already has, by digest: the local CAS a real worker keeps
    (buildbox-casd beside buildbox-worker, Buildbarn's bb_worker with its local cache), so that
    a blob the next job needs again (for ThinLTO the imported modules, many jobs' inputs) is not
    fetched from the server again. In memory, least recently used out first beyond max_bytes;
    shared by the bots of one process (--bots), as casd is by the runners of one machine."""

    max_bytes: int
    _blobs: OrderedDict[tuple[str, int], bytes] = field(default_factory=OrderedDict)
    _size: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hits: int = 0
    hit_bytes: int = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            data = self._blobs.get(key)
            if data is not None:
                self._blobs.move_to_end(key)
                self.hits += 1
                self.hit_bytes += len(data)
            return data

    def put(self, key: tuple[str, int], data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        with self._lock:
            if key in self._blobs:
                return
            self._blobs[key] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                _, old = self._blobs.popitem(last=False)
                self._size -= len(old)


@dataclass
class Cas:
    """CAS reads and writes via BatchReadBlobs/BatchUpdateBlobs, ByteStream for big blobs;
    reads go through `cache` first when there is one. `fetched`: bytes read from the server."""

    channel: grpc.Channel
    instance: str
    cache: BlobCache | None = None
    fetched: int = 0

    def __post_init__(self) -> None:
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.bs = bytestream_pb2_grpc.ByteStreamStub(self.channel)

    def read_many(self, digests: list[re_pb2.Digest]) -> dict[tuple[str, int], bytes]:
        if self.cache is None:
            out = self._read_many(digests)
            self.fetched += sum(len(v) for v in out.values())
            return out
        out: dict[tuple[str, int], bytes] = {}
        wanted: list[re_pb2.Digest] = []
        for d in digests:
            data = self.cache.get(dkey(d))
            if data is None:
                wanted.append(d)
            else:
                out[dkey(d)] = data
        got = self._read_many(wanted) if wanted else {}
        for key, data in got.items():
            self.cache.put(key, data)
        self.fetched += sum(len(v) for v in got.values())
        return out | got

    def _resource(self, d: re_pb2.Digest) -> str:
        prefix = f"{self.instance}/" if self.instance else ""
        return f"{prefix}blobs/{d.hash}/{d.size_bytes}"

    def _read_many(self, digests: list[re_pb2.Digest]) -> dict[tuple[str, int], bytes]:
        out: dict[tuple[str, int], bytes] = {}
        unique = {dkey(d): d for d in digests}
        small = [d for d in unique.values() if d.size_bytes <= MAX_BATCH_BYTES]
        for d in unique.values():
            if d.size_bytes > MAX_BATCH_BYTES:
                out[dkey(d)] = self._bytestream_read(d)
        batch: list[re_pb2.Digest] = []
        size = 0
        for d in small + [None]:  # type: ignore[list-item]
            if d is None or (batch and size + d.size_bytes > MAX_BATCH_BYTES):
                if batch:
                    resp = self.cas.BatchReadBlobs(
                        re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=batch)
                    )
                    for r in resp.responses:
                        if r.status.code != code_pb2.OK:
                            raise MissingBlob(f"{r.digest.hash}/{r.digest.size_bytes}: {r.status.message}")
                        out[dkey(r.digest)] = r.data
                batch, size = [], 0
            if d is not None:
                batch.append(d)
                size += d.size_bytes
        return out

    def read(self, d: re_pb2.Digest) -> bytes:
        if d.size_bytes == 0:
            return b""
        return self.read_many([d])[dkey(d)]

    def _bytestream_read(self, d: re_pb2.Digest) -> bytes:
        try:
            return b"".join(
                r.data for r in self.bs.Read(bytestream_pb2.ReadRequest(resource_name=self._resource(d)))
            )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise MissingBlob(f"{d.hash}/{d.size_bytes}") from e
            raise

    def upload(self, blobs: dict[tuple[str, int], bytes]) -> None:
        if not blobs:
            return
        digests = [re_pb2.Digest(hash=h, size_bytes=s) for h, s in blobs]
        missing = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(instance_name=self.instance, blob_digests=digests)
        ).missing_blob_digests
        batch: list[re_pb2.BatchUpdateBlobsRequest.Request] = []
        size = 0

        def flush() -> None:
            if batch:
                resp = self.cas.BatchUpdateBlobs(
                    re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=batch)
                )
                for r in resp.responses:
                    if r.status.code != code_pb2.OK:
                        raise RuntimeError(f"upload of {r.digest.hash} failed: {r.status.message}")

        for d in missing:
            data = blobs[dkey(d)]
            if d.size_bytes > MAX_BATCH_BYTES:
                self._bytestream_write(d, data)
                continue
            if batch and size + d.size_bytes > MAX_BATCH_BYTES:
                flush()
                batch, size = [], 0
            batch.append(re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=data))
            size += d.size_bytes
        flush()

    def _bytestream_write(self, d: re_pb2.Digest, data: bytes) -> None:
        prefix = f"{self.instance}/" if self.instance else ""
        name = f"{prefix}uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"

        def requests():  # type: ignore[no-untyped-def]
            for off in range(0, max(len(data), 1), CHUNK):
                chunk = data[off : off + CHUNK]
                yield bytestream_pb2.WriteRequest(
                    resource_name=name if off == 0 else "",
                    write_offset=off,
                    data=chunk,
                    finish_write=off + len(chunk) >= len(data),
                )

        self.bs.Write(requests())


def materialise(cas: Cas, root_digest: re_pb2.Digest, root: Path) -> None:
    """Write the input tree under root, fetching directories level by level in batches."""
    level: list[tuple[Path, re_pb2.Digest]] = [(root, root_digest)]
    files: list[tuple[Path, re_pb2.FileNode]] = []
    while level:
        blobs = cas.read_many([d for _, d in level])
        next_level: list[tuple[Path, re_pb2.Digest]] = []
        for path, d in level:
            directory = re_pb2.Directory.FromString(blobs[dkey(d)] if d.size_bytes else b"")
            path.mkdir(parents=True, exist_ok=True)
            for f in directory.files:
                files.append((path / f.name, f))
            for s in directory.symlinks:
                os.symlink(s.target, path / s.name)
            for sub in directory.directories:
                next_level.append((path / sub.name, sub.digest))
        level = next_level
    contents = cas.read_many([f.digest for _, f in files if f.digest.size_bytes])
    for path, f in files:
        path.write_bytes(contents.get(dkey(f.digest), b""))
        path.chmod(0o755 if f.is_executable else 0o644)


def fetch_tree(cas: Cas, root_digest: re_pb2.Digest) -> int:
    """Read the whole input tree from the CAS, as materialise does, without writing it: its bytes."""
    level = [root_digest]
    files: list[re_pb2.Digest] = []
    total = 0
    while level:
        blobs = cas.read_many([d for d in level if d.size_bytes])
        total += sum(d.size_bytes for d in level)
        next_level: list[re_pb2.Digest] = []
        for d in level:
            directory = re_pb2.Directory.FromString(blobs[dkey(d)] if d.size_bytes else b"")
            files += [f.digest for f in directory.files if f.digest.size_bytes]
            next_level += [sub.digest for sub in directory.directories]
        level = next_level
    contents = cas.read_many(files)
    return total + sum(len(v) for v in contents.values())


@dataclass(frozen=True)
class Replay:
    """The compile times and objects of a local run, by module digest (see the module's docstring)."""

    root: Path
    times: dict[str, float]
    speed: float = 1.0

    @classmethod
    def load(cls, root: Path, speed: float) -> Replay:
        return cls(root, json.loads((root / "times.json").read_text()), speed)

    MODULE = re.compile(r"^m/\d+-([0-9a-f]+)\.o$")

    def module(self, argv: list[str]) -> str | None:
        """The digest of the module the Command compiles: the one positional m/<rank>-<digest>.o."""
        for arg in argv[1:]:
            found = self.MODULE.match(arg)
            if found:
                return found.group(1)
        return None


def _file_node(path: Path, name: str, blobs: dict[tuple[str, int], bytes]) -> re_pb2.FileNode:
    data = path.read_bytes()
    d = digest_of(data)
    blobs[dkey(d)] = data
    executable = bool(path.stat().st_mode & stat.S_IXUSR)
    return re_pb2.FileNode(name=name, digest=d, is_executable=executable)


def _directory(path: Path, blobs: dict[tuple[str, int], bytes], tree: list[re_pb2.Directory]) -> re_pb2.Directory:
    """Directory proto of path; every subdirectory goes into tree (for an output Tree)."""
    out = re_pb2.Directory()
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        p = Path(entry.path)
        if entry.is_symlink():
            out.symlinks.add(name=entry.name, target=os.readlink(p))
        elif entry.is_dir():
            sub = _directory(p, blobs, tree)
            tree.append(sub)
            data = sub.SerializeToString(deterministic=True)
            d = digest_of(data)
            blobs[dkey(d)] = data
            out.directories.add(name=entry.name, digest=d)
        elif entry.is_file():
            out.files.append(_file_node(p, entry.name, blobs))
    return out


def collect_outputs(
    command: re_pb2.Command, workdir: Path, result: re_pb2.ActionResult, blobs: dict[tuple[str, int], bytes]
) -> None:
    """Fill result's output files/directories/symlinks from what the action left in workdir."""
    if command.output_paths:  # REAPI v2.1+: one list, the type is whatever is found
        paths = list(command.output_paths)
    else:
        paths = list(command.output_files) + list(command.output_directories)
    for rel in paths:
        p = workdir / rel
        if p.is_symlink():
            result.output_symlinks.add(path=rel, target=os.readlink(p))
        elif p.is_dir():
            children: list[re_pb2.Directory] = []
            root = _directory(p, blobs, children)
            tree = re_pb2.Tree(root=root, children=children)
            data = tree.SerializeToString(deterministic=True)
            d = digest_of(data)
            blobs[dkey(d)] = data
            result.output_directories.add(path=rel, tree_digest=d, is_topologically_sorted=False)
        elif p.is_file():
            node = _file_node(p, rel, blobs)
            result.output_files.add(path=rel, digest=node.digest, is_executable=node.is_executable)
        # A missing output is not an error in REAPI: the client decides.


@dataclass
class Job:
    """One lease being executed in a thread; the main thread reads status/result when done."""

    lease: bots_pb2.Lease
    cas: Cas
    worker_name: str
    keep_dirs: bool
    inline_stdio: bool
    stall: float = 0.0
    replay: Replay | None = None
    done: threading.Event = field(default_factory=threading.Event)
    status: status_pb2.Status = field(default_factory=status_pb2.Status)
    result: re_pb2.ActionResult = field(default_factory=re_pb2.ActionResult)
    proc: subprocess.Popen[bytes] | None = None
    cancelled: bool = False
    _woken: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run_guarded, name=f"job-{self.lease.id}", daemon=True).start()

    def cancel(self) -> None:
        self.cancelled = True
        self._woken.set()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _run_guarded(self) -> None:
        try:
            self._run()
        except MissingBlob as e:
            self.status = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=f"missing blob: {e}")
        except Exception as e:  # INTERNAL is retryable: BuildGrid re-queues the job
            log(f"job {self.lease.id} failed: {e!r}")
            self.status = status_pb2.Status(code=code_pb2.INTERNAL, message=repr(e))
        finally:
            self.done.set()

    def _action(self) -> re_pb2.Action:
        payload = self.lease.payload
        action = re_pb2.Action()
        if payload.Is(re_pb2.Action.DESCRIPTOR):
            payload.Unpack(action)
            # The Action as the server packed it: its digest, for tests that read it back from the CAS.
            log(f"lease {self.lease.id} action {hashlib.sha256(payload.value).hexdigest()}/{len(payload.value)}")
            return action
        digest = re_pb2.Digest()
        payload.Unpack(digest)
        log(f"lease {self.lease.id} action {digest.hash}/{digest.size_bytes}")  # for tests that read it back
        return re_pb2.Action.FromString(self.cas.read(digest))

    def _run(self) -> None:
        meta = self.result.execution_metadata
        meta.worker = self.worker_name
        meta.worker_start_timestamp.CopyFrom(now_ts())
        meta.input_fetch_start_timestamp.CopyFrom(now_ts())
        action = self._action()
        command = re_pb2.Command.FromString(self.cas.read(action.command_digest))
        if self.replay is not None:
            self._replay(action, command)
            return
        root = Path(tempfile.mkdtemp(prefix="reapi-job-"))
        try:
            materialise(self.cas, action.input_root_digest, root)
            workdir = root / command.working_directory
            # REAPI: the worker creates the parent directories of every output path.
            for rel in list(command.output_paths) + list(command.output_files) + list(command.output_directories):
                (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
            meta.input_fetch_completed_timestamp.CopyFrom(now_ts())
            if self.stall:
                log(f"lease {self.lease.id} stalling {self.stall:g} s")
                self._woken.wait(self.stall)  # a slow worker; a cancel ends the wait
            if self.cancelled:
                log(f"lease {self.lease.id} cancelled before it ran")
                return

            env = {v.name: v.value for v in command.environment_variables}
            timeout = action.timeout.ToTimedelta().total_seconds() if action.HasField("timeout") else None
            meta.execution_start_timestamp.CopyFrom(now_ts())
            stdout, stderr, exit_code = self._exec(list(command.arguments), workdir, env, timeout)
            meta.execution_completed_timestamp.CopyFrom(now_ts())
            if self.cancelled:
                return

            meta.output_upload_start_timestamp.CopyFrom(now_ts())
            blobs: dict[tuple[str, int], bytes] = {}
            self.result.exit_code = exit_code
            collect_outputs(command, workdir, self.result, blobs)
            for data, digest_field, raw_field in (
                (stdout, "stdout_digest", "stdout_raw"),
                (stderr, "stderr_digest", "stderr_raw"),
            ):
                d = digest_of(data)
                blobs[dkey(d)] = data
                getattr(self.result, digest_field).CopyFrom(d)
                if self.inline_stdio:
                    setattr(self.result, raw_field, data)
            self.cas.upload(blobs)
            meta.output_upload_completed_timestamp.CopyFrom(now_ts())
            meta.worker_completed_timestamp.CopyFrom(now_ts())
        finally:
            if not self.keep_dirs:
                shutil.rmtree(root, ignore_errors=True)

    def _replay(self, action: re_pb2.Action, command: re_pb2.Command) -> None:
        """Fetch the inputs, wait the recorded compile time, answer with the recorded object."""
        assert self.replay is not None
        meta = self.result.execution_metadata
        # A bot runs one job at a time, so the growth of its Cas's count is this job's.
        from_server = self.cas.fetched
        fetched = fetch_tree(self.cas, action.input_root_digest)
        from_server = self.cas.fetched - from_server
        meta.input_fetch_completed_timestamp.CopyFrom(now_ts())
        module = self.replay.module(list(command.arguments))
        seconds = self.replay.times.get(module or "")
        meta.execution_start_timestamp.CopyFrom(now_ts())
        blobs: dict[tuple[str, int], bytes] = {}
        stderr = b""
        if seconds is None:
            self.result.exit_code = 1
            stderr = f"reapi_worker: replay: no recorded backend for module {module}\n".encode()
        else:
            self._woken.wait(seconds / self.replay.speed)  # the compile; a cancel ends it
            if self.cancelled:
                log(f"lease {self.lease.id} cancelled while it ran")
                return
            data = (self.replay.root / f"{module}.o").read_bytes()
            d = digest_of(data)
            blobs[dkey(d)] = data
            outputs = list(command.output_paths) or list(command.output_files)
            self.result.output_files.add(path=outputs[0], digest=d)
        meta.execution_completed_timestamp.CopyFrom(now_ts())
        meta.output_upload_start_timestamp.CopyFrom(now_ts())
        d = digest_of(stderr)
        blobs[dkey(d)] = stderr
        self.result.stderr_digest.CopyFrom(d)
        self.result.stdout_digest.CopyFrom(digest_of(b""))
        blobs[dkey(digest_of(b""))] = b""
        self.cas.upload(blobs)
        meta.output_upload_completed_timestamp.CopyFrom(now_ts())
        meta.worker_completed_timestamp.CopyFrom(now_ts())
        # fetched: the input tree's bytes, read from the server or from the blob cache.
        def span(a: timestamp_pb2.Timestamp, b: timestamp_pb2.Timestamp) -> float:
            return (b.ToNanoseconds() - a.ToNanoseconds()) / 1e9

        log(f"lease {self.lease.id} replayed {module}: {fetched} bytes fetched, {from_server} from the server "
            f"(seconds: fetch {span(meta.input_fetch_start_timestamp, meta.input_fetch_completed_timestamp):.3f}, "
            f"compile {span(meta.execution_start_timestamp, meta.execution_completed_timestamp):.3f}, "
            f"upload {span(meta.output_upload_start_timestamp, meta.output_upload_completed_timestamp):.3f})")

    def _exec(
        self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float | None
    ) -> tuple[bytes, bytes, int]:
        if not argv:
            self.status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="empty Command.arguments")
            return b"", b"", 0
        try:
            # Own process group, so a cancel or timeout also kills what the command spawned.
            self.proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=_die_with_worker,
            )
        except OSError as e:
            # Like a shell: the action ran and failed, so the client sees exit 127 and why.
            return b"", f"reapi_worker: cannot execute {argv[0]!r}: {e}\n".encode(), 127
        try:
            stdout, stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            stdout, stderr = self.proc.communicate()
            self.status = status_pb2.Status(
                code=code_pb2.DEADLINE_EXCEEDED, message=f"action timed out after {timeout} s"
            )
        return stdout, stderr, self.proc.returncode


@dataclass
class Worker:
    url: str
    instance: str
    bot_id: str
    properties: list[tuple[str, str]]
    heartbeat: float
    ready_file: Path | None
    keep_dirs: bool
    inline_stdio: bool
    stall: float = 0.0
    replay: Replay | None = None
    long_poll: float = LONG_POLL_TIMEOUT
    cas_channel: grpc.Channel | None = None  # the CAS's, when it is not the Bots server's (--cas-url)
    channel: grpc.Channel | None = None  # shared by the bots of one process (--bots); else its own
    blob_cache: BlobCache | None = None  # shared by the bots of one process too

    def __post_init__(self) -> None:
        target = self.url.removeprefix("grpc://")
        if self.channel is None:
            self.channel = grpc.insecure_channel(target)
        self.bots = bots_pb2_grpc.BotsStub(self.channel)
        self.cas = Cas(self.cas_channel or self.channel, self.instance, self.blob_cache)
        self.jobs: dict[str, Job] = {}
        self.updates = 0  # UpdateBotSession calls: what this bot costs the scheduler

    def _new_session(self) -> bots_pb2.BotSession:
        device = worker_pb2.Device(
            handle=self.bot_id,
            properties=[worker_pb2.Device.Property(key=k, value=v) for k, v in self.properties],
        )
        session = bots_pb2.BotSession(
            bot_id=self.bot_id,
            status=bots_pb2.BotStatus.OK,
            worker=worker_pb2.Worker(devices=[device]),
        )
        while True:
            try:
                return self.bots.CreateBotSession(
                    bots_pb2.CreateBotSessionRequest(parent=self.instance, bot_session=session),
                    timeout=CREATE_TIMEOUT,
                )
            except grpc.RpcError as e:
                log(f"CreateBotSession: {e.code()} {e.details()}; retrying")
                time.sleep(0.2)

    def run(self, ready: Callable[[str], None] | None = None) -> None:
        session = self._new_session()
        log(f"session {session.name} for bot {self.bot_id} with {self.properties}")
        if ready is not None:
            ready(session.name)
        elif self.ready_file is not None:
            self.ready_file.write_text(session.name)
        while True:
            self._sync_jobs(session)
            if self._running():
                # Report at the next heartbeat, or as soon as a running job finishes. Not at once
                # for a lease just taken: the server handed it out and holds it for the keepalive,
                # so a call now would tell it nothing and cost it a transaction per job.
                deadline = time.monotonic() + self.heartbeat
                while (running := self._running()) and time.monotonic() < deadline:
                    running[0].done.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                self._sync_jobs(session)
            busy = bool(self._running())
            self.updates += 1
            try:
                session = self.bots.UpdateBotSession(
                    bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                    timeout=HEARTBEAT_RPC_TIMEOUT if busy else self.long_poll,
                )
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                    time.sleep(0.1)
                    continue
                # The server dropped our session (e.g. reaped after a stall): its jobs are
                # re-queued elsewhere, so abandon ours and start afresh.
                log(f"UpdateBotSession: {e.code()} {e.details()}; new session")
                for job in self.jobs.values():
                    job.cancel()
                self.jobs.clear()
                session = self._new_session()
                continue
            self._drop_revoked(session)

    def _running(self) -> list[Job]:
        return [j for j in self.jobs.values() if not j.done.is_set()]

    def _sync_jobs(self, session: bots_pb2.BotSession) -> None:
        """Start new leases and mark finished ones COMPLETED in the session we send next."""
        for lease in session.leases:
            if lease.state == bots_pb2.LeaseState.ACTIVE and lease.id not in self.jobs:
                log(f"lease {lease.id}")
                job = Job(lease=lease, cas=self.cas, worker_name=self.bot_id,
                          keep_dirs=self.keep_dirs, inline_stdio=self.inline_stdio, stall=self.stall,
                          replay=self.replay)
                self.jobs[lease.id] = job
                job.start()
            elif lease.state == bots_pb2.LeaseState.ACTIVE and self.jobs[lease.id].done.is_set():
                job = self.jobs[lease.id]
                lease.state = bots_pb2.LeaseState.COMPLETED
                lease.status.CopyFrom(job.status)
                lease.result.Pack(job.result)
                log(f"lease {lease.id} done: status={job.status.code} exit={job.result.exit_code} "
                    f"(bot {self.bot_id}: {self.updates} UpdateBotSession calls before this one)")

    def _drop_revoked(self, session: bots_pb2.BotSession) -> None:
        """Forget reported jobs; kill jobs whose lease the server took back (cancelled)."""
        live = {lease.id for lease in session.leases}
        for lease_id in list(self.jobs):
            if lease_id not in live:
                job = self.jobs.pop(lease_id)
                if not job.done.is_set():
                    log(f"lease {lease_id} revoked; cancelling")
                    job.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="grpc://127.0.0.1:PORT")
    ap.add_argument("--instance", default="", help="REAPI instance name (default: empty)")
    ap.add_argument("--bot-id", default=None, help="unique bot id (default: host-pid)")
    ap.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE",
        help="device property advertised to the scheduler; repeat a key for several values "
        "(default: OSFamily=linux)",
    )
    ap.add_argument("--heartbeat", type=float, default=1.0, help="seconds between heartbeats while busy")
    ap.add_argument("--long-poll", type=float, default=LONG_POLL_TIMEOUT,
                    help="an idle bot's UpdateBotSession deadline; BuildGrid holds the call 80 %% of it, or of its "
                    "keepalive if shorter, when no job comes")
    ap.add_argument("--cas-url", default=None, help="grpc://HOST:PORT of the CAS when it is a server of its own "
                    "(default: --url's)")
    ap.add_argument("--ready-file", type=Path, default=None, help="written once the bot session exists")
    ap.add_argument("--keep-dirs", action="store_true", help="keep job directories (debugging)")
    ap.add_argument("--inline-stdio", action="store_true", help="also put stdout/stderr in *_raw fields")
    ap.add_argument("--stall", type=float, default=0.0, help="seconds to wait before running each action (a slow worker)")
    ap.add_argument("--replay", type=Path, default=None,
                    help="replay a local run's compiles (DIR: times.json and <module digest>.o) instead of running them")
    ap.add_argument("--speed", type=float, default=1.0, help="replay: recorded compile times are divided by this")
    ap.add_argument("--bots", type=int, default=1, help="bots in this process (one thread each)")
    ap.add_argument("--blob-cache", action="store_true",
                    help="keep the blobs fetched, by digest, and read them from there again (a worker's local CAS, "
                    "as buildbox-casd keeps); one cache for the bots of this process")
    ap.add_argument("--blob-cache-mb", type=int, default=1024, help="the blob cache's size (least recently used out)")
    args = ap.parse_args(argv)
    props = [tuple(p.split("=", 1)) for p in args.property] or [("OSFamily", "linux")]
    if any(len(p) != 2 for p in props):
        ap.error("--property takes KEY=VALUE")
    replay = Replay.load(args.replay, args.speed) if args.replay is not None else None
    bot_id = args.bot_id or f"{socket.gethostname()}-{os.getpid()}"
    target = args.url.removeprefix("grpc://")
    channels = [grpc.insecure_channel(target) for _ in range((args.bots + 15) // 16)] if args.bots > 1 else [None]
    blob_cache = BlobCache(args.blob_cache_mb << 20) if args.blob_cache else None
    cas_channels = ([grpc.insecure_channel(args.cas_url.removeprefix("grpc://")) for _ in channels]
                    if args.cas_url else [None] * len(channels))
    workers = [
        Worker(
            url=args.url,
            instance=args.instance,
            bot_id=bot_id if args.bots == 1 else f"{bot_id}-{i}",
            properties=props,  # type: ignore[arg-type]
            heartbeat=args.heartbeat,
            ready_file=args.ready_file,
            keep_dirs=args.keep_dirs,
            inline_stdio=args.inline_stdio,
            stall=args.stall,
            replay=replay,
            long_poll=args.long_poll,
            channel=channels[i // 16],
            cas_channel=cas_channels[i // 16],
            blob_cache=blob_cache,
        )
        for i in range(args.bots)
    ]

    def stop(*_: object) -> None:
        for worker in workers:
            for job in list(worker.jobs.values()):
                job.cancel()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    if len(workers) == 1:
        workers[0].run()
        return 0
    # Many bots: the ready file is written once every one of them has its session.
    sessions: list[str] = []
    lock = threading.Lock()

    def ready(name: str) -> None:
        with lock:
            sessions.append(name)
            if len(sessions) == len(workers) and args.ready_file is not None:
                args.ready_file.write_text("\n".join(sessions))

    for worker in workers:
        threading.Thread(target=worker.run, args=(ready,), name=worker.bot_id, daemon=True).start()
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
