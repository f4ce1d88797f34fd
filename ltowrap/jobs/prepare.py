"""What a backend job is before it runs: its options, its command line, what it reads, its key.

A job's state is one `JobState`, and where it stands in its life is one `Stage`: the
executor (executor.py) moves it forward, never back. The remote side's own facts of a job
(why the service did not serve it, what the workers would run) are remoteside.py's.
"""

from __future__ import annotations

import enum
import sys
import time
from dataclasses import dataclass, field
from itertools import filterfalse
from typing import TYPE_CHECKING, Protocol

from .. import cachekey, config, fsutil, log, optrecords, toolchain
from ..cache import OBJECTS, Cache
from ..progress import Progress
from ..stages import sideinputs
from ..stages.backend import PLACEHOLDERS, Job
from ..stages.plan import Module
from .forkserver import Forks
from .slots import Gate, Local

if TYPE_CHECKING:
    from ..cachekey import ModuleDigests
    from ..remote.session import Session


class BackendCommand(Protocol):
    """How a backend compile is spelled: backend.LinkBackend, distributor.DtltoBackend."""

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None, dwo: str = "") -> list[str]:
        """dwo: the .dwo name the compile records, for split DWARF (backend.split_dwarf)."""
        ...

    def unrecorded(self, module: Module) -> list[str]:
        """What stands in for `recorded` when a module has none: what it says of itself."""
        ...


@dataclass(eq=False, repr=False)
class Resources:
    """What the backend jobs of one run share (jobrun.JobRun.executor builds it)."""

    cache: Cache
    compiler: str  # cachekey.compiler_identity of the backend clang
    env: list[tuple[str, str]]  # the environment the backend clang reads (toolchain.BACKEND_ENV)
    jobs: int  # compiles at once, at most
    gate: Gate = field(default_factory=Local)  # where each compile gets its slot: make's jobserver or the pool
    per_module_options: bool = True  # each module's recorded options (else the link's only)
    debug: bool = False  # write what went into each key (ltowrap explain)
    verbose: bool = False  # what each backend clang prints, on stderr as it comes (besides lld's rendering)
    progress: Progress | None = None
    remote: Session | None = None
    remote_local: bool = True  # execute mode: the local slots compile beside the workers (else only what they cannot)
    local_only: str = ""  # why no backend may go remote (the local clang reads config files or environment)
    verify: float = 0.0  # share of hits compiled again and compared (config.Settings.verify)
    forks: Forks = field(default_factory=Forks)  # how compiles start: forked from one clang a run (forkserver.py)
    cpu: log.CpuLedger = field(default_factory=log.CpuLedger)  # the run's own CPU, by heading


class Stage(enum.IntEnum):
    """Where a job stands, in the order it gets there. A job may skip a stage (a module new to
    the cache's store gets its command before its key; a job the remote service may not make
    is answered as soon as it is asked), never go back."""

    NEW = 0  # nothing made yet
    COMMAND = 1  # its options and command line made (Preparer.options): it may compile before its key
    KEYED = 2  # its key made (Preparer.make_key) and the local cache looked at
    ASKED = 3  # the remote service asked for it; its reply not taken yet (remoteside.py)
    ANSWERED = 4  # the remote reply taken, or none to wait for: what is left is to compile it or send it


@dataclass(eq=False, repr=False)
class JobState:
    """Everything one run knows of a backend job, from its key to its outcome (but the remote
    side's own facts: remoteside.RemoteJob)."""

    job: Job
    stage: Stage = Stage.NEW
    recorded: list[str] | None = None  # the options its compile gets again (its record's, else what its module says)
    unrecorded: bool = False  # its module has no option record: what it says of itself stands in
    dropped: list[str] | None = None  # recorded options its clang rejects, left out
    side: sideinputs.SideInputs | None = None  # what it reads besides its module, shard and imports
    key: str | None = None  # its cache key (None: not cached, side.unknown says why)
    content: str = ""  # its claim's name before its key (Preparer.content), from Stage.COMMAND on
    shard_identity: str | None = None  # cachekey.shard_identity of its shard, once its key needed it
    argv: list[str] = field(default_factory=list)  # its backend command line, from Stage.COMMAND on
    # The same line with the module, shard and output as PLACEHOLDERS (what its claim and key take), from Stage.COMMAND on
    line: list[str] = field(default_factory=list)
    verify: bool = False  # a hit of it is compiled again and compared
    expected: tuple[str, str] | None = None  # verify: (where: a log.Source, digest) of the hit
    verified: str | None = None  # 'same' or what differed
    waited: bool = False  # another process was making its key: this one waited for it
    printed: str = ""  # what its compile printed (diagnostics.canonical: module paths as digests)

    @property
    def output(self) -> str:
        return self.job.output

    @property
    def keyed(self) -> bool:
        return self.stage >= Stage.KEYED


@dataclass(eq=False, repr=False)
class Preparer:
    """Makes each job's options, command line and key, as the executor asks for them."""

    backend: BackendCommand
    res: Resources
    digest_of: ModuleDigests  # a module path in a shard -> digest of its bytes, and the module's facts
    unkeyed: int = 0  # jobs whose key is still to make
    span: tuple[float, float] | None = None  # from the first job's key to the last one's
    _rejects: dict[tuple[str, ...], list[str]] = field(default_factory=dict)  # recorded options -> those rejected
    # A module's side inputs that depend on its bytes alone (no `.include` followed), by store path:
    # a module is imported by many of a link's backends.
    _module_sides: dict[str, sideinputs.SideInputs] = field(default_factory=dict)
    _read_nothing: set[str] = field(default_factory=set)  # the modules whose side inputs are sideinputs.NONE
    _keyed_from: int = sys.maxsize  # in the run's queue, every job from here on has its key (next_unkeyed)
    # What a backend command line (module, shard and output as placeholders) reads, by that line:
    # a link's jobs share a few (one for each set of recorded options).
    _argv_sides: dict[tuple[str, ...], sideinputs.SideInputs] = field(default_factory=dict)
    # The side inputs' digests, read once a link: a sample profile is read by every backend.
    _file_digests: dict[str, str] = field(default_factory=dict)
    # The fields every key (cachekey.backend_prefix) and every content claim (content) of the run starts with.
    _key_prefix: cachekey.Hasher = field(init=False)
    _claim_prefix: cachekey.Hasher = field(init=False)

    def __post_init__(self) -> None:
        self._key_prefix = cachekey.backend_prefix(self.res.compiler, self.res.env, self.res.debug)
        h = self._claim_prefix = cachekey.Hasher()
        h.field("claim", "content")
        h.field("compiler", self.res.compiler)
        for name, value in self.res.env:
            h.field(f"env:{name}", value)

    @property
    def cache(self) -> Cache:
        return self.res.cache

    def side_inputs(self, job: Job, argv: list[str]) -> sideinputs.SideInputs:
        """What the compile reads besides its module, shard and imports: what its options name,
        what the inline assembly of its module and of every module it imports reads."""
        with self.res.cpu.charge(log.Cpu.SIDE_INPUTS):
            return self._side_inputs(job, argv)

    def _side_inputs(self, job: Job, argv: list[str]) -> sideinputs.SideInputs:
        line = tuple(argv)
        side = self._argv_sides.get(line)
        if side is None:
            side = self._argv_sides[line] = sideinputs.of_argv(argv)
        # Most modules have no inline assembly, and a backend imports hundreds: those known to
        # read nothing are passed over without a look.
        for path in filterfalse(self._read_nothing.__contains__, (job.module.path, *job.imports)):
            found = self._module_sides.get(path)
            if found is None:
                found, followed = sideinputs.of_module(path, self.digest_of.facts)
                if not followed:
                    if found is sideinputs.NONE:
                        self._read_nothing.add(path)
                        continue
                    self._module_sides[path] = found
            if found is not sideinputs.NONE:
                side |= found
        return side

    def next_unkeyed(self, queue: list[JobState]) -> int | None:
        """Where the job of the run's queue nearest its end (the next to start) without a key
        is, or None. Each job is looked at once a run: a job in the queue keeps its key, the
        jobs added to its end have theirs, and a job leaving it only moves the ones after it
        forward, so every job from _keyed_from on stays keyed."""
        for i in range(min(self._keyed_from, len(queue)) - 1, -1, -1):
            if not queue[i].keyed:
                self._keyed_from = i + 1  # the caller keys it
                return i
        self._keyed_from = 0
        return None

    def key(self, state: JobState, argv: list[str]) -> tuple[str | None, list[str] | None]:
        """The job's key (None: not cacheable, sideinputs says why) and, with debug, what went in."""
        job = state.job
        side = state.side = self.side_inputs(job, argv)
        if side.unknown:
            return None, None
        with self.res.cpu.charge(log.Cpu.SHARD_TEXT):
            shard = state.shard_identity = job.shard_identity or cachekey.shard_identity(job.shard, self.digest_of,
                                                                                          job.module.path)
        key, dump = cachekey.backend_key(self._key_prefix, argv, job.module.digest, shard, side.fields(self._file_digest))
        if dump is not None:  # what the shard field stands for, so that two dumps can be diffed
            text = cachekey.shard_canonical(job.shard, self.digest_of, job.module.path)
            if text is not None:
                from ..formats import shardkey

                dump.append("shard format: " + shardkey.summary_format(text))
            dump.append("shard text (shardkey.py):\n" + text if text is not None
                        else "shard text: unreadable, its raw bytes went in")
        return key, dump

    def _file_digest(self, path: str) -> str:
        found = self._file_digests.get(path)
        if found is None:
            found = self._file_digests[path] = cachekey.file_digest(path)
        return found

    def options(self, state: JobState) -> None:
        """The job's recorded options (or what stands in for them) and its command line."""
        with self.res.cpu.charge(log.Cpu.OPTIONS):
            self._options(state)

    def _options(self, state: JobState) -> None:
        job = state.job
        recorded = optrecords.load(self.cache.root, job.module.record_key) if self.res.per_module_options else None
        if recorded is None:
            state.unrecorded = True
            recorded = self.backend.unrecorded(job.module)
        elif recorded:
            recorded = self._accepted(state, recorded)
        state.recorded = recorded
        state.argv = self.backend.argv(job.module.path, job.shard_path, job.output, recorded, job.dwo)
        state.line = self.backend.argv(*PLACEHOLDERS, recorded, job.dwo)
        state.content = self.content(state)
        state.stage = Stage.COMMAND

    def content(self, state: JobState) -> str:
        """The name of the job's claim by content (store.Store.claim): what its compile reads that
        is known before its key, cheaply. A module new to the cache's store compiles before its
        key (executor._early), so it can claim nothing else; a keyed job takes this claim first,
        so two identical links wait for each other's early compiles. It covers the compiler and
        the environment it reads, the command line with placeholders, the module's bytes by
        digest and the shard's raw bytes (which name every imported module by its store path:
        its position in the link and its digest). Not a key: two jobs with one name and
        different keys only wait for each other (the waiter then misses and compiles); two
        names for one key (the module at another position in another link, or lld's own
        names under DTLTO) are coordinated by the key's claim alone, once made."""
        job = state.job
        h = self._claim_prefix.copy()  # the claim's kind, the compiler and the environment it reads
        h.field("argv", "\0".join(state.line[1:]))
        h.field("module", job.module.digest)
        h.field("shard", job.shard)
        return h.hexdigest()

    def make_key(self, state: JobState) -> None:
        """Make the job's key (most of it the shard key, shardkey.py) and whether a hit is verified."""
        t = time.time()
        with self.res.cpu.charge(log.Cpu.KEY_REST):
            key, dump = self.key(state, state.line)
        if key is None:
            self.cache.stats.add("backend_uncached")
        else:
            state.key = key
            if dump is not None:
                self._write_dump(key, dump, state.job)
            if config.pick(self.res.verify):
                state.verify = True
        state.stage = Stage.KEYED
        self.unkeyed -= 1
        self.span = (self.span[0] if self.span else t, time.time())

    def _accepted(self, state: JobState, options: list[str]) -> list[str]:
        """The module's recorded options less those the backend clang says it rejects
        (toolchain.rejected_options): an option of another LLVM release's compile, which
        in-process ThinLTO would not apply either. Asked only of a module another release
        wrote (a compile of this release took them), once per option list and clang (c/)."""
        release = toolchain.release(cachekey.compiler_version(self.res.compiler))
        try:
            made_by = self.digest_of.facts(state.job.module.path).producer
        except OSError:
            made_by = ""
        if made_by.startswith("LLVM") and toolchain.release(made_by, "LLVM") == release:
            return options
        rejected = self._rejected(tuple(options))
        if not rejected:
            return options
        kept = toolchain.without(options, rejected)
        state.dropped = [o for o in options if o not in kept]
        self.res.cache.stats.add("backend_options_dropped")
        return kept

    def _rejected(self, options: tuple[str, ...]) -> list[str]:
        if options not in self._rejects:
            from ..cache import TOOLCHAINS

            key = cachekey.rejected_options_key(self.res.compiler, options)
            found = self.res.cache.get_data(TOOLCHAINS, key, lambda data: [str(o) for o in data])
            if found is None:
                clang = self.backend.argv(*PLACEHOLDERS, [])[0]
                found = toolchain.rejected_options(clang, list(options))
                self.res.cache.put_data(TOOLCHAINS, key, found)
            self._rejects[options] = found
        return self._rejects[options]

    def _write_dump(self, key: str, dump: list[str], job: Job) -> None:
        text = f"module: {job.module.origin}\n" + "\n".join(dump) + "\n"
        try:
            fsutil.atomic_write(self.cache.path(OBJECTS, key, ".key.txt"), text.encode("utf-8", "surrogateescape"))
        except OSError:
            pass
