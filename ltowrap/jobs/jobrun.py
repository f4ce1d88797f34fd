"""One run of backend jobs, set up and torn down the same way by the link pipeline and the distributor.

`job_run` owns what every such run must undo whatever happens: SIGTERM handling (raised
like KeyboardInterrupt, so every finally block stops its children and returns its
jobserver tokens), the counters (flushed once), the log record (written once), and a
death by the same signal when interrupted, as the linker would have died.
`JobRun.executor` owns what the backends of one run share: the compiler's identity, where
compiles get their slots (make's jobserver or the machine's pool: slots.py), the progress
line and the remote session.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import cachekey, fsutil, log, stats, toolchain
from ..cache import Cache
from ..config import Settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..cachekey import ModuleDigests
    from .executor import Executor
    from .forkserver import Forks
    from .prepare import BackendCommand


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every finally block runs."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated()


@dataclass(frozen=True)
class LinkerFacts:
    """What an ld.lld says of itself (toolchain.lld_facts; cachekey.linker_facts keeps it, as
    plain data, in the cache: a restored link imports cachekey, and no dataclass there)."""

    release: str  # '22.1.8'; '' when lld could not be run
    version: str  # the first line of its --version
    takes: frozenset[str]  # the toolchain.LLD_PROBES features it takes

    @property
    def major(self) -> int:
        return int(self.release.split(".")[0])


@dataclass(eq=False, repr=False)
class JobRun:
    """One link's run: its settings, log record, counters, CPU ledger and cache."""

    settings: Settings
    record: log.Record
    stats: stats.Stats = field(default_factory=stats.Stats)
    cpu: log.CpuLedger = field(default_factory=log.CpuLedger)  # its own CPU by heading: the stages charge it
    cache: Cache = field(init=False)
    _identities: dict[str, str] = field(default_factory=dict)
    _linkers: dict[str, LinkerFacts] = field(default_factory=dict)
    _forks: Forks | None = None  # how the backends start (forkserver.py), made when a stage first needs it

    def __post_init__(self) -> None:
        self.cache = Cache(self.settings.cache_dir, self.stats, self.settings.max_size)

    def forks(self) -> Forks:
        if self._forks is None:
            with self.cpu.charge(log.Cpu.IMPORTS):  # here: a restored link starts no backend
                from .forkserver import Forks

            self._forks = Forks(self.settings.fork_server)
        return self._forks

    def prestart_backends(self, clang: str) -> None:
        """Start the backends' fork server as the thin-link starts, so that its clang has loaded
        by the first compile. Not with a remote service: its workers may take every job."""
        if self.settings.fork_server and not self.settings.remote:
            forks = self.forks()
            forks.prestart(clang, forks.env, signal.pthread_sigmask(signal.SIG_BLOCK, ()))

    def compiler_identity(self, clang: str) -> str:
        if clang not in self._identities:
            self._identities[clang] = cachekey.compiler_identity(clang, self.cache)
        return self._identities[clang]

    def linker_facts(self, ld: str) -> LinkerFacts:
        """What ld.lld says of itself (cachekey.linker_facts): its release and the features it takes."""
        if ld not in self._linkers:
            facts = cachekey.linker_facts(ld, self.cache)
            self._linkers[ld] = LinkerFacts(facts["release"], facts["version"], frozenset(facts["takes"]))
        return self._linkers[ld]

    @contextmanager
    def without_cache(self) -> Iterator[None]:
        """Run the body on a throw-away cache: the real one is read-only, full or not a directory."""
        real = self.cache
        if real.write_error is None:  # a failed store has counted itself; a failed mkdir has not
            self.stats.add("cache_write_errors")
        root = fsutil.temp_dir("ltowrap-nocache-")
        self.cache = Cache(root, stats.Stats(), 0)  # its sizes are not the real cache's
        self._identities.clear()
        self._linkers.clear()
        try:
            yield
        finally:
            self.cache.close()
            self.cache = real
            fsutil.remove_tree(root)

    @contextmanager
    def executor(self, backend: BackendCommand, clang: str, digest_of: ModuleDigests, name: str,
                 total: int) -> Iterator[Executor]:
        """An executor for `total` backend jobs of the output `name`; its outcomes go into the log record."""
        # Imported here: a link the memo restores runs no backend and needs none of it (tens of ms).
        with self.cpu.charge(log.Cpu.IMPORTS):
            from .. import progress, remote
            from . import slots
            from .executor import Executor
            from .prepare import Resources

        s = self.settings
        identity = self.compiler_identity(clang)
        gate = slots.for_run(s, self.cache.locks, self.cache.tmp_dir())
        bar = progress.for_link(name, total, s.progress)
        session = remote.connect(s, self.stats, identity, digest_of)
        env = toolchain.env_values(toolchain.BACKEND_ENV)
        res = Resources(self.cache, identity, env, gate.jobs, gate, per_module_options=s.backend_opts == "module",
                        debug=s.debug, verbose=s.verbose, progress=bar, remote=session, remote_local=s.remote_local,
                        local_only=local_only(clang, env) if session is not None else "", verify=s.verify,
                        forks=self.forks(), cpu=self.cpu)
        executor = Executor(backend, res, digest_of)
        try:
            yield executor
        finally:
            gate.close()
            if bar is not None:
                bar.finish()
            if session is not None:
                session.close()
            executor.fill(self.record)

    def finish(self, cleanup: bool) -> None:
        import resource

        self.record.end = self.record.end or time.time()
        if self._forks is not None:  # started ahead for compiles that never came (a failed thin-link)
            self._forks.close()
        me, tools = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        own = me.ru_utime + me.ru_stime
        self.record.cpu = {"self": round(own, 3), "children": round(tools.ru_utime + tools.ru_stime, 3),
                           "by": self.cpu.by(own)}
        self.cache.close()
        if cleanup:
            try:
                self.cache.maybe_cleanup(self.stats)
            except OSError:
                pass
        stats.flush(self.settings.cache_dir, self.stats)
        if self.settings.log:
            log.append(self.settings.log, self.record)


def local_only(clang: str, env: list[tuple[str, str]]) -> str:
    """Why no backend of this clang may go remote ('' if they may): a remote key names the
    toolchain by its version, so what else changes this clang's output stays here."""
    configs = toolchain.compiler_configs(clang)
    if configs:
        return f"the backend clang reads config files ({', '.join(configs)})"
    set_vars = [name for name, value in env if value != toolchain.UNSET]
    return f"the backend clang reads {', '.join(set_vars)} from the environment" if set_vars else ""


@contextmanager
def job_run(settings: Settings, record: log.Record) -> Iterator[JobRun]:
    """The run; on SIGINT/SIGTERM its record says so and the process dies of that signal."""
    run = JobRun(settings, record)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield run
    except (KeyboardInterrupt, Terminated) as e:
        sig = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
        record.decision, record.reason = log.Decision.INTERRUPTED, signal.Signals(sig).name
        run.finish(cleanup=False)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        raise
    run.finish(cleanup=record.decision in (log.Decision.DISTRIBUTED, log.Decision.FAILED))
