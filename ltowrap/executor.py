"""Run the backend jobs: look each up in the cache, compile the misses in parallel, verify, store.

Processes are started with posix_spawn and watched through pidfds, longest job first (the
module's size plus what it imports), so a big module does not start last and hold up the
link. A backend result counts only if clang exited 0, the object is non-empty, and clang
did not print "Error running ThinLTO backend" (it can exit 0 after one: LLVM issue 75441).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import backend, bitcode, fsutil, records
from .backend import Job
from .cache import OBJECTS, Cache
from .cachekey import Hasher, digest_bytes
from .errors import ToolFailed
from .jobserver import Jobserver
from .progress import Progress
from .proc import tool_env

if TYPE_CHECKING:
    from .remote.session import Session

PLACEHOLDERS = ("<module>", "<shard>", "<output>")


class BackendCommand:
    """How a backend compile is spelled: backend.LinkBackend, distributor.DtltoBackend."""

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None) -> list[str]:
        raise NotImplementedError

    def read_files(self) -> list[str]:
        """Files the compile reads besides the module, its shard and its imports."""
        raise NotImplementedError


@dataclass
class Outcome:
    job: Job
    source: str  # COMPILED, CACHED, REMOTE_CACHED or REMOTE_EXECUTED
    start: float
    end: float
    action: str = ""  # the remote action digest, when a remote service was asked
    remote_error: str = ""  # why the remote service did not serve it

    @property
    def cached(self) -> bool:
        return self.source != COMPILED


COMPILED, CACHED, REMOTE_CACHED, REMOTE_EXECUTED = "compiled", "cache", "remote cache", "remote"


@dataclass
class _Pending:
    job: Job
    key: str
    recorded: list[str] | None


@dataclass
class _Running:
    pid: int
    pidfd: int
    job: Job
    key: str
    argv: list[str]
    start: float


@dataclass
class Executor:
    backend: BackendCommand
    compiler_identity: str
    cache: Cache
    jobs: int
    digest_of: Callable[[str], str]  # a module path in a shard -> digest of its bytes
    per_module_options: bool = True
    debug: bool = False
    jobserver: Jobserver | None = None
    progress: Progress | None = None
    remote: Session | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    _unserved: dict[str, str] = field(default_factory=dict)  # job output -> why the remote did not serve it

    def key(self, job: Job, argv: list[str]) -> tuple[str, list[str] | None]:
        """The backend cache key. What goes in, each under its own tag:
        - the cache format version (Hasher);
        - the compiler: its --version text and the identity of its binary;
        - the backend argv, with the module, shard and output paths as placeholders
          (this includes the module's recorded compile options);
        - the module's bytes (by digest) and the index shard with each module path it
          records replaced by the digest of that module's bytes (bitcode.fingerprint):
          the same for a clean rebuild, another directory, another cache, or lld's own
          temporary names under DTLTO; it names, by content, every module the compile
          imports (a shard that cannot be read goes in as raw bytes, path and all);
        - the contents of any other file the compile reads (the sample profile).
        """
        h = Hasher(debug=self.debug)
        h.field("compiler", self.compiler_identity)
        h.field("argv", "\0".join(argv[1:]))
        h.field("module", job.module.digest)
        h.field("shard", job.shard_identity or bitcode.shard_identity(job.shard, self.digest_of))
        for path in self.backend.read_files():
            with open(path, "rb") as f:
                h.field("reads", digest_bytes(f.read()))
        return h.hexdigest(), h.dump

    def log_fields(self) -> dict:
        """What LTOWRAP_LOG records of the backends: counts, and each one's start and end."""
        fields: dict = {
            "backend_compiles": sum(o.source == COMPILED for o in self.outcomes),
            "backend_hits": sum(o.source == CACHED for o in self.outcomes),
            "backends": [{"module": o.job.module.origin, "cached": o.cached, "source": o.source,
                          "start": round(o.start, 4), "end": round(o.end, 4), **({"action": o.action} if o.action else {}),
                          **({"remote_error": o.remote_error} if o.remote_error else {})}
                         for o in self.outcomes],
        }
        if self.remote is not None:
            fields["remote_hits"] = sum(o.source == REMOTE_CACHED for o in self.outcomes)
            fields["remote_executed"] = sum(o.source == REMOTE_EXECUTED for o in self.outcomes)
            if self.remote.down:
                fields["remote_down"] = self.remote.down
        return fields

    def _done(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        if self.progress:
            self.progress.update(len(self.outcomes), sum(o.cached for o in self.outcomes))

    def _compiled(self, job: Job, start: float, end: float) -> Outcome:
        a = self.remote.actions.get(job.output) if self.remote is not None else None
        return Outcome(job, COMPILED, start, end, a.name if a is not None else "", self._unserved.get(job.output, ""))

    def run(self, jobs: list[Job], sizes: dict[str, int]) -> None:
        """Local cache, then the remote service if there is one, then local compiles."""
        pending: list[_Pending] = []
        for job in jobs:
            recorded = records.load(self.cache.root, job.module.record_key) if self.per_module_options else None
            key, dump = self.key(job, self.backend.argv(*PLACEHOLDERS, recorded))
            if self.debug and dump is not None:
                self._write_dump(key, dump, job)
            t = time.time()
            entry = self.cache.get(OBJECTS, key)
            if entry is not None and entry.payload:
                _write(job.output, entry.payload)
                self.cache.stats.add("backend_hits")
                self.cache.stats.add("cpu_saved_seconds", float(entry.meta.get("seconds", 0)))
                self._done(Outcome(job, CACHED, t, time.time()))
            else:
                pending.append(_Pending(job, key, recorded))
        if self.remote is not None and pending and not self.backend.read_files():
            # A compile that reads other files (a sample profile) stays local: its input
            # root would need them under the same path.
            pending = self._serve_remotely(pending)
        weight = {p.job.module.path: p.job.module.size + sum(sizes.get(i, 0) for i in p.job.imports) for p in pending}
        pending.sort(key=lambda p: weight[p.job.module.path], reverse=True)
        self._compile([(p.job, p.key, self.backend.argv(p.job.module.path, p.job.shard_path, p.job.output, p.recorded))
                       for p in pending])

    def _serve_remotely(self, pending: list[_Pending]) -> list[_Pending]:
        """Ask the remote service for these jobs; what it cannot serve is left to compile here."""
        from .remote.session import Work

        assert self.remote is not None
        t = time.time()
        work = [Work(p.job, lambda m, s, o, recorded=p.recorded: self.backend.argv(m, s, o, recorded)) for p in pending]
        left: list[_Pending] = []
        for p, reply in zip(pending, self.remote.serve(work)):
            if reply.served is None:
                self._unserved[p.job.output] = reply.error
                left.append(p)
                continue
            _write(p.job.output, reply.served.obj)
            self.cache.put(OBJECTS, p.key, {"seconds": 0, "remote": reply.action}, reply.served.obj)  # local backfill
            source = REMOTE_EXECUTED if reply.served.executed else REMOTE_CACHED
            self._done(Outcome(p.job, source, t, time.time(), reply.action))
        return left

    def _write_dump(self, key: str, dump: list[str], job: Job) -> None:
        text = f"module: {job.module.origin}\n" + "\n".join(dump) + "\n"
        try:
            fsutil.atomic_write(self.cache.path(OBJECTS, key, ".key.txt"), text.encode("utf-8", "surrogateescape"))
        except OSError:
            pass

    def _compile(self, pending: list[tuple[Job, str, list[str]]]) -> None:
        """Run the misses, at most `jobs` at once and, under make, one per jobserver token.

        The link's own slot covers the first compile; each further one holds a token
        from make's jobserver while it runs. Children are watched through pidfds, so
        one select() waits for a child to finish or a token to arrive.
        """
        env = tool_env()
        running: dict[int, _Running] = {}  # pidfd -> child
        failures: list[ToolFailed] = []
        queue = list(reversed(pending))
        js = self.jobserver
        try:
            while queue or running:
                while queue and not failures and len(running) < self.jobs:
                    if running and js is not None and not js.try_acquire():
                        break
                    child = self._spawn(*queue.pop(), env)
                    running[child.pidfd] = child
                if not running:
                    break
                waiting = list(running)
                if js is not None and queue and not failures and len(running) < self.jobs:
                    waiting.append(js.read_fd)
                ready, _, _ = select.select(waiting, [], [])
                for fd in ready:
                    child = running.pop(fd, None)
                    if child is None:
                        continue  # the jobserver is readable: loop round and take a token
                    _, status = os.waitpid(child.pid, 0)
                    os.close(child.pidfd)
                    end = time.time()
                    if js is not None and len(js.held) > max(0, len(running) - 1):
                        js.release()
                    failure = self._finish(child.job, child.key, child.argv, os.waitstatus_to_exitcode(status), end - child.start)
                    if failure:
                        failures.append(failure)
                    else:
                        self._done(self._compiled(child.job, child.start, end))
        finally:
            for child in running.values():
                try:
                    os.kill(child.pid, signal.SIGTERM)
                    os.waitpid(child.pid, 0)
                    os.close(child.pidfd)
                except OSError:
                    pass
            if js is not None:
                js.release_all()
        if failures:
            raise failures[0]

    def _spawn(self, job: Job, key: str, argv: list[str], env: dict[str, str]) -> _Running:
        shard_path = job.shard_path
        if not os.path.exists(shard_path):
            os.makedirs(os.path.dirname(shard_path) or ".", exist_ok=True)
            with open(shard_path, "wb") as f:
                f.write(job.shard)
        log = os.open(job.output + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            pid = os.posix_spawn(argv[0], argv, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2)])
        finally:
            os.close(log)
        return _Running(pid, os.pidfd_open(pid), job, key, argv, time.time())

    def _finish(self, job: Job, key: str, argv: list[str], rc: int, seconds: float) -> ToolFailed | None:
        with open(job.output + ".log", "rb") as f:
            out = f.read().decode("utf-8", "replace")
        try:
            with open(job.output, "rb") as f:
                obj = f.read()
        except OSError:
            obj = b""
        if rc != 0 or not obj or backend.BACKEND_FAILURE in out:
            self.cache.stats.add("backend_failures")
            why = f"exited {rc}" if rc else "wrote an empty object" if not obj else "reported a backend error"
            return ToolFailed(argv, rc or 1, f"backend compile of {job.module.origin} {why}\n{out}")
        if out:  # the compiler's own warnings, as an in-process link would print them
            sys.stderr.write(out)
        self.cache.stats.add("backend_misses")
        self.cache.put(OBJECTS, key, {"seconds": round(seconds, 4)}, obj)
        if self.remote is not None:
            self.remote.publish(job, obj)
        return None


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
