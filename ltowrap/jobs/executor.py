"""Run the backend jobs: look each up in the cache, compile the misses in parallel, verify, store.

Processes are started with proc.spawn and watched through pidfds, longest job first (the
module's size plus what it imports), so a big module does not start last and hold up the
link. A backend result counts only if clang exited 0, the object is non-empty, and clang
did not print "Error running ThinLTO backend" (it can exit 0 after one: LLVM issue 75441).
Each compile holds a slot (make's jobserver, or the machine's pool: slots.py) and a claim
on its key (locks.py), so links running at once share the cores and make no key twice.

In remote execute mode the workers are a second side beside the local slots
(remote/execute.py): the queue (longest first) feeds whichever side frees first, a local
slot or the workers. Once the queue is empty, a free local slot races the job sent last
that is still out (a straggler); the first result wins and the other is cancelled (the
local compile killed, the remote operation dropped). Each job is stored once either way.

What the run knows of each job, from its key to its outcome, is one JobState.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Protocol

from .. import cachekey, config, fsutil, log, optrecords, proc, toolchain
from ..cache import OBJECTS, Cache, Entry
from ..errors import Reason, ToolFailed
from ..locks import POLL
from ..progress import Progress
from ..cachedirs import MODULES
from ..stages import backend, diagnostics, sideinputs
from ..stages.backend import PLACEHOLDERS, Job
from ..stages.plan import Module
from .slots import Gate, Local, Ticket

if TYPE_CHECKING:
    from ..remote.execute import Workers
    from ..remote.session import Asked, Session, Served, Work

# Jobs asked of the remote service at once: each takes its key and action (10-30 ms of
# Python), then they share one round trip of lookups and one FindMissingBlobs. Few, so that
# the first job goes out after a few keys rather than all of them (a 400-module link's keys
# take seconds); the next ones are asked while the first run.
ASK_AT_ONCE = 8


class BackendCommand(Protocol):
    """How a backend compile is spelled: backend.LinkBackend, distributor.DtltoBackend."""

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None, dwo: str = "") -> list[str]:
        """dwo: the .dwo name the compile records, for split DWARF (backend.split_dwarf)."""
        ...

    def unrecorded(self, module: Module) -> list[str]:
        """What stands in for `recorded` when a module has none: what it says of itself."""
        ...


@dataclass
class Outcome:
    job: Job
    source: str  # a log.Source
    start: float
    end: float
    action: str = ""  # the remote action digest, when a remote service was asked
    remote_error: str = ""  # why the remote service did not serve it
    waited: bool = False  # another process was compiling the same key: this one waited for it
    lane: int | None = None  # compiled here: which of this link's running compiles it was (0, 1, ...)
    slot: int | None = None  # compiled here in a slot of the machine's pool: its number
    worker: str = ""  # run on a remote worker: which, as the server names it
    queued: float | None = None  # run on a remote worker: seconds in the server's queue first

    @property
    def cached(self) -> bool:
        return self.source != log.Source.COMPILED


@dataclass
class _Running:
    """A backend compile running here."""

    child: proc.Child
    state: JobState
    start: float
    ticket: Ticket
    lane: int = 0


@dataclass
class JobState:
    """Everything one run knows of a backend job, from its key to its outcome."""

    job: Job
    recorded: list[str] | None = None  # the options its compile gets again (its record's, else what its module says)
    unrecorded: bool = False  # its module has no option record: what it says of itself stands in
    dropped: list[str] | None = None  # recorded options its clang rejects, left out
    side: sideinputs.SideInputs | None = None  # what it reads besides its module, shard and imports
    prepared: bool = False  # its options, key and cache lookup are done (_prepare)
    asked: bool = False  # the remote service was asked for it, if it may be (_ask_remote)
    answered: bool = False  # and its reply taken (_answered)
    key: str | None = None  # its cache key (None: not cached, side.unknown says why)
    shard_identity: str | None = None  # cachekey.shard_identity of its shard, once its key needed it
    argv: list[str] = field(default_factory=list)  # its backend command line, once it is to be made
    verify: bool = False  # a hit of it is compiled again and compared
    expected: tuple[str, str] | None = None  # verify: (where: a log.Source, digest) of the hit
    verified: str | None = None  # 'same' or what differed
    waited: bool = False  # another process was making its key: this one waited for it
    unserved: str = ""  # why the remote service did not serve it
    work: Work | None = None  # execute mode: what the workers would run (None: it may not be sent)
    here: bool = False  # it might have gone to the workers and was compiled here: the local side's share
    raced: bool = False  # run on both sides at once
    running: _Running | None = None  # its compile here, while it runs
    printed: str = ""  # what its compile printed (diagnostics.canonical: module paths as digests)

    @property
    def output(self) -> str:
        return self.job.output


@dataclass
class _Asking:
    """Jobs whose remote lookups are under way (_ask_remote)."""

    states: list[JobState]
    work: list[Work]
    asked: Asked
    start: float


@dataclass
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


@dataclass
class Executor:
    backend: BackendCommand
    res: Resources
    digest_of: Callable[[str], str]  # a module path in a shard -> digest of its bytes
    outcomes: list[Outcome] = field(default_factory=list)
    states: dict[str, JobState] = field(default_factory=dict)  # job output -> what the run knows of the job
    _rejects: dict[tuple[str, ...], list[str]] = field(default_factory=dict)  # recorded options -> those rejected
    _claimed: set[str] = field(default_factory=set)  # keys this process has claimed (locks.Claims)
    _workers: Workers[JobState] | None = None  # execute mode, while jobs may be sent
    module_reads: sideinputs.ModuleReads | None = None
    _prepared_span: tuple[float, float] | None = None  # from the first job's key to the last one's (_prepare)
    _asked_span: tuple[float, float] | None = None  # from the first remote lookup to the last one (_ask_remote)
    _asking: list[_Asking] = field(default_factory=list)  # remote lookups under way, the first asked first
    _unprepared: int = 0  # jobs whose key is still to make

    @property
    def cache(self) -> Cache:
        return self.res.cache

    @property
    def remote(self) -> Session | None:
        return self.res.remote

    def side_inputs(self, job: Job, argv: list[str]) -> sideinputs.SideInputs:
        """What the compile reads besides its module, shard and imports: what its options name,
        what the inline assembly of its module and of every module it imports reads."""
        if self.module_reads is None:
            self.module_reads = sideinputs.ModuleReads(self.cache)
        side = sideinputs.of_argv(argv)
        for path in (job.module.path, *job.imports):
            digest = job.module.digest if path == job.module.path else self.digest_of(path)
            side |= self.module_reads(path, digest)
        return side

    def key(self, state: JobState, argv: list[str]) -> tuple[str | None, list[str] | None]:
        """The job's key (None: not cacheable, sideinputs says why) and, with debug, what went in."""
        job = state.job
        side = state.side = self.side_inputs(job, argv)
        if side.unknown:
            return None, None
        shard = state.shard_identity = job.shard_identity or cachekey.shard_identity(job.shard, self.digest_of,
                                                                                      job.module.path)
        key, dump = cachekey.backend_key(self.res.compiler, self.res.env, argv, job.module.digest, shard,
                                         side.fields(), self.res.debug)
        if dump is not None:  # what the shard field stands for, so that two dumps can be diffed
            text = cachekey.shard_canonical(job.shard, self.digest_of, job.module.path)
            if text is not None:
                from ..formats import shardkey

                dump.append("shard format: " + shardkey.summary_format(text))
            dump.append("shard text (shardkey.py):\n" + text if text is not None
                        else "shard text: unreadable, its raw bytes went in")
        return key, dump

    def shard_identities(self) -> dict[str, str]:
        """The shard keys the jobs' keys took, by job output (thinlink.store keeps them)."""
        return {output: s.shard_identity for output, s in self.states.items() if s.shard_identity is not None}

    def uncached(self) -> list[str]:
        """Why some backends were not cached: one line per module."""
        return [f"{o.job.module.origin}: {side.unknown}" for o in self.outcomes
                if (side := self.states[o.job.output].side) is not None and side.unknown]

    def read_files(self) -> list[str]:
        """Every file the backends read besides modules, shards and imports (for the link memo)."""
        return list(dict.fromkeys(f for s in self.states.values() if s.side is not None for f in s.side.files))

    def fill(self, record: log.Record) -> None:
        """What LTOWRAP_LOG records of the backends: counts, and each one's source, start and end."""
        record.backend_compiles = sum(o.source == log.Source.COMPILED for o in self.outcomes)
        record.backend_hits = sum(o.source == log.Source.CACHED for o in self.outcomes)
        record.backend_waits = sum(o.waited for o in self.outcomes) or None
        record.slots = self.res.gate.name or None
        record.jobs = self.res.jobs
        if self._prepared_span is not None:
            record.span(log.Phase.KEYS, *self._prepared_span)
        if self._asked_span is not None:
            record.span(log.Phase.REMOTE_LOOKUP, *self._asked_span)
        record.backends = [log.Backend(o.job.module.origin, o.source, round(o.start, 4), round(o.end, 4), o.cached,
                                       o.action or None, o.remote_error or None,
                                       recorded=False if s.unrecorded else None,
                                       dropped=s.dropped,
                                       output=s.printed or None, waited=o.waited or None,
                                       raced=s.raced or None,
                                       uncached=s.side.unknown or None
                                       if s.side is not None else None,
                                       verified=s.verified, lane=o.lane, slot=o.slot,
                                       size=o.job.module.size, key=s.key, digest=o.job.module.digest,
                                       worker=o.worker or None,
                                       queued=round(o.queued, 4) if o.queued is not None else None)
                           for o in self.outcomes for s in (self.states[o.job.output],)]
        if self.remote is not None:
            record.remote_hits = sum(o.source == log.Source.REMOTE_CACHED for o in self.outcomes)
            record.remote_executed = sum(o.source == log.Source.REMOTE_EXECUTED for o in self.outcomes)
            if self.remote.mode == "execute":
                record.remote_local = sum(s.here for s in self.states.values())
                record.remote_raced = sum(s.raced for s in self.states.values()) or None
            record.remote_down = self.remote.down or None
            record.remote_retries = self.remote.retries or None
            record.remote_uploaded = self.remote.client.uploaded or None
            record.remote_deduplicated = self.remote.deduplicated or None

    def _done(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        if self.res.progress:
            self.res.progress.update(len(self.outcomes), sum(o.cached for o in self.outcomes))

    def _compiled(self, child: _Running, end: float) -> Outcome:
        state = child.state
        a = self.remote.actions.get(state.output) if self.remote is not None else None
        return Outcome(state.job, log.Source.COMPILED, child.start, end, a.name if a is not None else "",
                       state.unserved, state.waited, child.lane, child.ticket.slot)

    def _hit(self, state: JobState) -> bool:
        """Serve the job from the local cache if its object is there."""
        t = time.time()
        entry = self._cached(state)
        if entry is None:
            return False
        self._serve(state, entry, t)
        return True

    def _cached(self, state: JobState) -> Entry | None:
        """The job's object in the local cache, unless it is to be verified (then compiled
        again, and compared when done: _finish)."""
        if state.key is None:
            return None
        entry = self.cache.get(OBJECTS, state.key)
        if entry is None or not entry.payload or \
                any(not isinstance(entry.meta.get(kind), bytes) for kind, _ in state.job.side_outputs()):
            return None
        if state.verify:
            if state.expected is None:
                state.expected = (log.Source.CACHED, cachekey.digest_bytes(entry.payload))
            return None
        return entry

    def _serve(self, state: JobState, entry: Entry, start: float) -> None:
        _write(state.output, entry.payload)
        for kind, _ in state.job.side_outputs():
            _write(backend.side_output(state.output, kind), entry.meta[kind])
        state.printed = str(entry.meta.get("printed", ""))
        self.cache.stats.add("backend_hits")
        self.cache.stats.add("cpu_saved_seconds", float(entry.meta.get("seconds", 0)))
        self._done(Outcome(state.job, log.Source.CACHED, start, time.time(), waited=state.waited))

    def _claim(self, key: str | None) -> bool:
        if key is None:  # not cached: nothing to share with another process
            return True
        if not self.cache.claims.try_claim(OBJECTS, key):
            return False
        self._claimed.add(key)
        return True

    def _release(self, key: str | None) -> None:
        if key is not None and key in self._claimed:
            self._claimed.discard(key)
            self.cache.claims.release(OBJECTS, key)

    def run(self, jobs: list[Job], sizes: dict[str, int]) -> None:
        """Local cache, then the remote service if there is one, then local compiles; the
        heaviest job first (its module's size plus what it imports).

        Each job's key is made as the job comes up, and the next ones' while compiles run
        (_compile): the first compile does not wait for every key (on a cold 400-module link,
        seconds of shard keys). The remote service is asked the same way, a few jobs at a
        time (ASK_AT_ONCE): the first job goes to the workers after a few keys, not all."""
        states = [JobState(job) for job in jobs]
        self.states.update((s.output, s) for s in states)
        self._unprepared += len(states)
        weight = {s.output: s.job.module.size + sum(sizes.get(i, 0) for i in s.job.imports) for s in states}
        states.sort(key=lambda s: weight[s.output], reverse=True)
        self._compile(states)

    def _prepare(self, state: JobState) -> bool:
        """Make the job's options, command line and key; True if the local cache served it."""
        if not state.argv:
            self._options(state)
        self._keyed(state)
        return self._hit(state)

    def _options(self, state: JobState) -> None:
        """The job's recorded options (or what stands in for them) and its command line."""
        job = state.job
        recorded = optrecords.load(self.cache.root, job.module.record_key) if self.res.per_module_options else None
        if recorded is None:
            state.unrecorded = True
            recorded = self.backend.unrecorded(job.module)
        elif recorded:
            recorded = self._accepted(state, recorded)
        state.recorded = recorded
        state.argv = self.backend.argv(job.module.path, job.shard_path, job.output, recorded, job.dwo)

    def _keyed(self, state: JobState) -> None:
        """Make the job's key (most of it the shard key, shardkey.py) and whether a hit is verified."""
        t = time.time()
        key, dump = self.key(state, self.backend.argv(*PLACEHOLDERS, state.recorded, state.job.dwo))
        if key is None:
            self.cache.stats.add("backend_uncached")
        else:
            state.key = key
            if dump is not None:
                self._write_dump(key, dump, state.job)
            if config.pick(self.res.verify):
                state.verify = True
        state.prepared = True
        self._unprepared -= 1
        self._prepared_span = (self._prepared_span[0] if self._prepared_span else t, time.time())

    def _prepare_next(self, queue: list[JobState], running: dict[int, _Running]) -> bool:
        """Make one more key while the compiles run; False if none is left to make. A compile
        started before its key (_start: a module new to the cache) comes first: its key may
        turn out to be a hit (_early_keyed); then the next job of the queue (a hit leaves it).
        With a remote service, the remote replies that are in are taken, and the next jobs'
        keys are made to ask it for them (_ask_remote)."""
        if self.remote is not None:
            self._answered(queue)
        if not self._unprepared:
            return False
        if self.remote is not None:
            asking = self._to_ask(queue)
            if asking:
                self._ask_remote(asking)
                return True
        early = next((r for r in running.values() if not r.state.prepared), None)
        if early is not None:
            self._early_keyed(early, running)
            return True
        for i in range(len(queue) - 1, -1, -1):
            if not queue[i].prepared:
                if self._prepare(queue[i]):
                    del queue[i]
                return True
        return False

    def _early_keyed(self, child: _Running, running: dict[int, _Running]) -> None:
        """Key a compile that started without one. A hit after all stops it (its slot is free
        again; its output is the cached object); else its key is claimed, if no other process
        holds it (one that does makes the same bytes: both store them, whole)."""
        state = child.state
        self._keyed(state)
        t = time.time()
        entry = self._cached(state)
        if entry is None:
            if state.key is not None:
                self._claim(state.key)
            return
        self._stop(child, running)
        self.cache.stats.add("backend_early_stopped")
        self._serve(state, entry, t)

    def _stop(self, child: _Running, running: dict[int, _Running]) -> None:
        """Stop a compile whose object came from elsewhere (a hit after all, a worker's): killed
        and reaped, so it writes no more, and its slot given back."""
        del running[child.child.pidfd]
        child.state.running = None
        child.child.kill(signal.SIGTERM)
        self.res.gate.give(child.ticket)

    def _accepted(self, state: JobState, options: list[str]) -> list[str]:
        """The module's recorded options less those the backend clang says it rejects
        (toolchain.rejected_options): an option of another LLVM release's compile, which
        in-process ThinLTO would not apply either. Asked only of a module another release
        wrote (a compile of this release took them), once per option list and clang (c/)."""
        release = toolchain.release(cachekey.compiler_version(self.res.compiler))
        from ..formats.bitcode import BadBitcode
        from ..formats.irmodule import producer
        from ..magic import read_head

        try:
            made_by = producer(read_head(state.job.module.path, 4096))
        except BadBitcode:
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

            key = cachekey.digest_bytes("\0".join(["clang rejects", self.res.compiler, *options]).encode())
            found = self.res.cache.get_data(TOOLCHAINS, key, lambda data: [str(o) for o in data])
            if found is None:
                clang = self.backend.argv(*PLACEHOLDERS, [])[0]
                found = toolchain.rejected_options(clang, list(options))
                self.res.cache.put_data(TOOLCHAINS, key, found)
            self._rejects[options] = found
        return self._rejects[options]

    def _sendable_job(self, state: JobState) -> bool:
        """May the remote service make this job? Not one with side inputs (a worker has neither
        the files nor this CPU), nor any when this clang reads config files or environment (a
        remote key names the toolchain by its version only): the log says which."""
        why = self.res.local_only or ("it reads files or the CPU of this machine" if state.side else "") or \
            (f"it writes {', '.join(k for k, _ in state.job.side_outputs())} beside its object, which a remote result"
             " does not carry" if state.job.side_outputs() else "")
        if why:
            state.unserved = why
        return not why

    def _to_ask(self, queue: list[JobState], first: JobState | None = None) -> list[JobState]:
        """The next jobs of the queue to ask the remote service for (`first`, taken from it,
        leads), up to ASK_AT_ONCE, their keys made; a local hit among them leaves the queue."""
        asking = [first] if first is not None else []
        for i in range(len(queue) - 1, -1, -1):
            if len(asking) >= ASK_AT_ONCE:
                break
            state = queue[i]
            if state.asked:
                continue
            if not state.prepared and self._prepare(state):
                del queue[i]
                continue
            asking.append(state)
        return asking

    def _ask_remote(self, asking: list[JobState]) -> None:
        """Ask the remote service for these jobs, those it may make: their actions are built
        here, the lookups go out in the background (_answered takes the replies)."""
        from ..remote.session import Work

        assert self.remote is not None
        t = time.time()
        for state in asking:
            state.asked = True
        sendable = [s for s in asking if self._sendable_job(s)]
        for state in asking:
            state.answered = not any(s is state for s in sendable)  # nothing to wait for
        if sendable:
            # Each job with the shard identity its key took: the remote identity names it too,
            # and making it again would parse every shard a second time.
            work = [Work(replace(p.job, shard_identity=p.shard_identity or p.job.shard_identity),
                         partial(self.backend.argv, recorded=p.recorded))
                    for p in sendable]
            self._asking.append(_Asking(sendable, work, self.remote.ask(work), t))
        self._asked_span = (self._asked_span[0] if self._asked_span else t, time.time())

    def _answered(self, queue: list[JobState], wanted: JobState | None = None) -> set[str]:
        """Take the remote replies that are in, and wait for `wanted`'s: the jobs it served
        leave the queue (their outputs are returned); in execute mode the ones it lacked may
        be sent to the workers (JobState.work), their inputs uploading in the background."""
        assert self.remote is not None
        served: set[str] = set()
        while self._asking and (self._asking[0].asked.done or (wanted is not None and not wanted.answered)):
            asking = self._asking.pop(0)
            for p, w, reply in zip(asking.states, asking.work, self.remote.answers(asking.asked)):
                p.answered = True
                if reply.served is not None and p.verify:  # compiled here and compared
                    if p.expected is None:
                        p.expected = (log.Source.REMOTE_CACHED, cachekey.digest_bytes(reply.served.obj))
                elif reply.served is None:
                    if reply.error:
                        p.unserved = reply.error
                    elif self.remote.mode == "execute":
                        p.work = w
                else:
                    self._remote_object(p, reply.served, reply.action, asking.start)
                    served.add(p.output)
            sendable = [p.work for p in asking.states if p.work is not None]
            if sendable:
                self.remote.prepare(sendable)
        if served:
            queue[:] = [s for s in queue if s.output not in served]
        return served

    def _remote_object(self, state: JobState, served: Served, action: str, start: float) -> None:
        """Take an object the remote served: written, backfilled into the local cache, its claim let go."""
        job = state.job
        _write(job.output, served.obj)
        self._printed(state, served.stderr)
        if state.key is not None:
            self.cache.put(OBJECTS, state.key, {"seconds": 0, "remote": action, "printed": state.printed}, served.obj)
        self._release(state.key)
        source = log.Source.REMOTE_EXECUTED if served.executed else log.Source.REMOTE_CACHED
        self._done(Outcome(job, source, start, time.time(), action, waited=state.waited, worker=served.worker,
                           queued=served.queued))

    def _write_dump(self, key: str, dump: list[str], job: Job) -> None:
        text = f"module: {job.module.origin}\n" + "\n".join(dump) + "\n"
        try:
            fsutil.atomic_write(self.cache.path(OBJECTS, key, ".key.txt"), text.encode("utf-8", "surrogateescape"))
        except OSError:
            pass

    def _compile(self, pending: list[JobState]) -> None:
        """Run the misses, each under a claim on its key and in a slot (slots.Gate), at most `jobs` at once.

        A key another process is compiling is put aside: this process waits for it holding
        no slot, then takes the object from the cache, or compiles it itself if that
        process died or failed. One select() waits for a child to end (its pidfd), a slot
        to come free (make's jobserver readable, or the lock directory's Waker), a claim
        to be let go (the Waker too) or a remote answer (remote.execute.Wake): nothing is
        polled while inotify is available. A slot a compile frees takes the next job before
        that compile's object is checked and stored (and keyed, if it started before its key).
        """
        queue = list(reversed(pending))  # pop() takes the heaviest first
        aside: list[JobState] = []  # keys another process is making
        claimed: JobState | None = None  # claimed, waiting for a slot
        running: dict[int, _Running] = {}  # pidfd -> child
        failures: list[ToolFailed] = []
        if self.remote is not None and self.remote.mode == "execute":
            from ..remote.execute import Workers

            self._workers = Workers(self.remote, queue=not self.res.remote_local)
        try:
            while True:
                if not failures:
                    queue += self._settled(aside)
                    claimed = self._start(queue, aside, claimed, running)
                if not running and (failures or (claimed is None and not queue and not aside
                                                 and not (self._workers is not None and self._workers.busy))):
                    break
                # A job that waits for the workers only (remote_local off) waits for no slot:
                # a jobserver with tokens to spare would wake this loop for nothing.
                for_slot = claimed is not None and not failures and self._may_run_here(claimed)
                # While the compiles run, the next jobs' keys are made, one between two looks.
                busy = not failures and self._prepare_next(queue, running)
                ended = [self._ended(child) for child in self._wait(running, for_slot, bool(aside) and not failures,
                                                                     busy)]
                if ended and not failures:  # the freed slots take the next jobs before the objects are stored
                    claimed = self._start(queue, aside, claimed, running)
                for child, rc, end in ended:
                    failure = self._reap(child, rc, end)
                    if failure:
                        failures.append(failure)
                queue += self._landed(running)
        finally:
            if self._workers is not None:
                self._workers.close()
                self._workers = None
            for child in running.values():
                child.child.kill(signal.SIGTERM)
                self.res.gate.give(child.ticket)
            for key in list(self._claimed):
                self._release(key)
            for state in aside:
                if state.key is not None:
                    self.cache.claims.forget(OBJECTS, state.key)
        if failures:
            raise failures[0]

    def _settled(self, aside: list[JobState]) -> list[JobState]:
        """Jobs put aside whose claim was let go: served from the cache now, or returned to compile here."""
        ours = []
        for state in list(aside):
            if self._claim(state.key):
                aside.remove(state)
                if self._hit(state):
                    self._release(state.key)
                else:  # its maker died or failed: ours to compile
                    ours.append(state)
        return ours

    def _start(self, queue: list[JobState], aside: list[JobState], claimed: JobState | None,
               running: dict[int, _Running]) -> JobState | None:
        """Start jobs while a side has room (a local slot first: it costs no transfer); returns
        the claimed job still waiting for one. With the queue empty, free slots race stragglers.
        Once it has asked the remote service for jobs, it returns after the next one starts:
        what landed meanwhile is taken before more are asked."""
        paused = False
        while True:
            while claimed is None and queue and not paused:
                state = queue.pop()
                if not state.prepared and self._early(state, running):
                    continue
                if not state.prepared and self._prepare(state):
                    continue
                if self.remote is not None and not state.answered:
                    if not state.asked:
                        self._ask_remote(self._to_ask(queue, state))
                        paused = True
                    if state.output in self._answered(queue, state):
                        continue
                if not self._claim(state.key):
                    aside.append(state)
                    state.waited = True
                    self.cache.stats.add("backend_waits")
                elif self._hit(state):  # made by another process since the first look
                    self._release(state.key)
                else:
                    claimed = state
            if claimed is None:
                self._race(running)
                return None
            here = len(running) < self.res.jobs and self._may_run_here(claimed)
            ticket = self.res.gate.take() if here else None
            if ticket is not None:
                self._unsent(claimed)
                self._run_here(claimed, ticket, running)
            elif not self._send(claimed):
                return claimed
            claimed = None
            if paused:
                return None

    def _early(self, state: JobState, running: dict[int, _Running]) -> bool:
        """Start the compile of a module new to the cache's store (plan.Module.new) before its
        key is made, if a slot is free: no object can be cached under a key that takes the
        digest of bytes the cache has not seen (unless the store was trimmed: a hit after
        all stops it, _early_keyed). Its key is made while it runs (_prepare_next)."""
        if not state.job.module.new or self.remote is not None or len(running) >= self.res.jobs:
            return False
        ticket = self.res.gate.take()
        if ticket is None:
            return False
        self._options(state)
        self._run_here(state, ticket, running)
        return True

    def _run_here(self, state: JobState, ticket: Ticket, running: dict[int, _Running]) -> None:
        """Start the compile in this slot."""
        with _stop_signals_held() as mask:  # started and recorded in one step: a SIGTERM's cleanup stops it
            child = self._spawn(state, ticket, mask)
            lanes = {r.lane for r in running.values()}
            child.lane = next(n for n in range(len(lanes) + 1) if n not in lanes)
            running[child.child.pidfd] = state.running = child

    def _may_run_here(self, state: JobState) -> bool:
        """False for a job that should wait for the workers (remote_local off)."""
        return (self.res.remote_local or state.work is None or bool(state.unserved)
                or self.remote is None or bool(self.remote.down))

    def _unsent(self, state: JobState) -> None:
        """A job the workers could have had, compiled here because the service went down: a
        remote error, as for the jobs it failed."""
        if state.work is not None and not state.unserved and self.remote is not None and self.remote.down:
            state.unserved = self.remote.down
            self.cache.stats.add("remote_errors")

    def _send(self, state: JobState) -> bool:
        """Send the job to the workers if it may go and they have room."""
        if state.work is None or state.unserved or self._workers is None:
            return False  # the workers failed it once already
        return self._workers.send(state.work, state)

    def _race(self, running: dict[int, _Running]) -> None:
        """Free local slots compile the jobs still out on the workers too (remote.execute picks
        which first); the first result wins (_reap, _landed)."""
        if not self.res.remote_local or self._workers is None:
            return
        for state in self._workers.stragglers():
            if state.raced:
                continue
            ticket = self.res.gate.take() if len(running) < self.res.jobs else None
            if ticket is None:
                return
            self._run_here(state, ticket, running)
            state.raced = True
            self.cache.stats.add("remote_raced")

    def _landed(self, running: dict[int, _Running]) -> list[JobState]:
        """Take the remote answers that are in; returns the jobs the workers could not make, to compile here."""
        if self._workers is None:
            return []
        again: list[JobState] = []
        for landed in self._workers.landed():
            state, reply = landed.state, landed.reply
            racer = state.running  # its compile here, if it races and still runs
            if reply.served is None:
                state.unserved = reply.error or "the remote execution gave no object"  # never sent again
                if racer is None:  # compiled here instead (the racer, if any, goes on as an ordinary compile)
                    again.append(state)
                continue
            if racer is not None:  # the worker won: the local compile stops, its slot is free again
                self._stop(racer, running)
            self._remote_object(state, reply.served, reply.action, landed.start)
        return again

    def _wait(self, running: dict[int, _Running], for_slot: bool, for_claims: bool,
              busy: bool = False) -> list[_Running]:
        """Wait for a child to end, or for a slot or a claim to be let go (busy: only look);
        returns the children that ended."""
        gate, claims = self.res.gate, self.cache.claims
        fds = list(running)
        timeouts = []
        if for_slot and len(running) < self.res.jobs:
            fds += gate.fds()
            timeouts.append(gate.timeout)
        if for_claims:
            fds += claims.fds()
            timeouts.append(claims.timeout)
        if self._workers is not None:
            fds += self._workers.fds()
        timeout = 0 if busy else min((t for t in timeouts if t is not None), default=None)
        ready, _, _ = select.select(fds, [], [], POLL if not fds and timeout is None else timeout)
        self.cache.locks.drain()
        return [running.pop(fd) for fd in ready if fd in running]

    def _ended(self, child: _Running) -> tuple[_Running, int, float]:
        """A child ended: its exit code and end, its slot given back."""
        child.state.running = None
        rc = child.child.wait()
        end = time.time()
        self.res.gate.give(child.ticket)
        return child, rc, end

    def _reap(self, child: _Running, rc: int, end: float) -> ToolFailed | None:
        """Check and store the object of a child that ended (_ended), then let go of its claim."""
        state = child.state
        if not state.prepared:  # started early, done before its key: made now, to store the object under
            self._keyed(state)
            if state.key is not None:
                self._claim(state.key)
        try:
            failure = self._finish(state, rc, end - child.start)
        finally:
            self._release(state.key)  # after the store: a waiter finds the object
        if not failure:
            if self._workers is not None:  # this compile won its race: the worker's run is dropped
                self._workers.drop(state.output)
            if state.work is not None and not state.unserved:
                state.here = True
                self.cache.stats.add("remote_local")
            self._done(self._compiled(child, end))
        return failure

    def _spawn(self, state: JobState, ticket: Ticket, sigmask: set[int]) -> _Running:
        job = state.job
        shard_path = job.shard_path
        try:
            if not os.path.exists(shard_path):
                os.makedirs(os.path.dirname(shard_path) or ".", exist_ok=True)
                with open(shard_path, "wb") as f:
                    f.write(job.shard)
            child = proc.spawn(state.argv, output=job.output + ".log", watch=True,
                               keep_fds=self.res.gate.inherit(ticket), sigmask=sigmask)
        except BaseException:
            self.res.gate.give(ticket)
            raise
        return _Running(child, state, time.time(), ticket)

    def _finish(self, state: JobState, rc: int, seconds: float) -> ToolFailed | None:
        job = state.job
        with open(job.output + ".log", "rb") as f:
            out = f.read().decode("utf-8", "replace")
        try:
            with open(job.output, "rb") as f:
                obj = f.read()
        except OSError:
            obj = b""
        why = backend.unusable(rc, obj, out)
        sides: dict[str, bytes] = {}
        for kind, _ in job.side_outputs() if not why else ():
            try:
                sides[kind] = fsutil.read_bytes(backend.side_output(job.output, kind))
            except OSError:
                why = f"wrote no .{kind}"
        if why:
            self.cache.stats.add("backend_failures")
            return ToolFailed(state.argv, rc or 1, f"backend compile of {job.module.origin} {why}\n{out}",
                              Reason.BACKEND_FAILED)
        self._printed(state, out)
        if state.key is None:
            return None
        if state.expected is not None:
            self._check(state, obj)
        self.cache.stats.add("backend_misses")
        meta: dict = {"seconds": round(seconds, 4), "printed": state.printed}
        meta.update(sides)  # split DWARF, optimization records: kept with the object (a hit writes them all)
        self.cache.put(OBJECTS, state.key, meta, obj)
        if self.remote is not None and not state.side and not self.res.local_only and not sides:
            self.remote.publish(job, obj, state.printed)
        return None

    def _check(self, state: JobState, obj: bytes) -> None:
        """A verified hit, compiled again: the same bytes, or a mismatch (counted and logged;
        the fresh object is what the link takes and what replaces the entry)."""
        assert state.expected is not None
        where, cached = state.expected
        fresh = cachekey.digest_bytes(obj)
        same = self.cache.verified(fresh == cached, f"the {where} entry of {state.job.module.origin}")
        state.verified = "same" if same else f"mismatch: {where} {cached}, compiled {fresh}"

    def _printed(self, state: JobState, text: str) -> None:
        """Keep what a successful compile printed, its module paths as digests: the cache keeps
        it with the object, a hit gives it back, and the link prints it as lld would
        (diagnostics.render). With verbose, clang's own text goes to stderr too, as it comes."""
        state.printed = diagnostics.canonical(text, os.path.join(self.cache.root, MODULES) + "/") if text else ""
        if text and self.res.verbose:
            sys.stderr.write(text)

    def printed(self) -> list[tuple[Module, str]]:
        """What each backend printed (canonical text), by module, in the order in-process
        ThinLTO runs its backends on one thread: the largest module first (LTO's
        generateModulesOrdering), ties in link order."""
        states = sorted(self.states.values(), key=lambda s: -s.job.module.size)
        return [(s.job.module, s.printed) for s in states if s.printed]


@contextmanager
def _stop_signals_held() -> Iterator[set[int]]:
    """Hold SIGINT and SIGTERM back for the body (they raise in the middle of it otherwise);
    yields the mask from before, for the children started in it."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield before
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
