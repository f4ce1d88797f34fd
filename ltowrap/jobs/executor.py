"""Run the backend jobs: look each up in the cache, compile the misses in parallel, verify, store.

Compiles are started with proc.spawn and watched through pidfds (local.py), longest job
first (the module's size plus what it imports), so a big module does not start last and
hold up the link. Each compile holds a slot (make's jobserver, or the machine's pool:
slots.py) and a claim on its key (locks.py), so links running at once share the cores and
make no key twice. Each job's options and key are made as it comes up, and the next ones'
while compiles run (prepare.py).

With a remote service, its side (remoteside.py) is asked for the jobs before they compile
here. In execute mode its workers are a second side beside the local slots: the queue
(longest first) feeds whichever side frees first, a local slot or the workers. Once the
queue is empty, a free local slot races the job sent last that is still out (a straggler);
the first result wins and the other is cancelled (the local compile killed, the remote
operation dropped). Each job is stored once either way.

What the run knows of each job, from its key to its outcome, is one prepare.JobState.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING

from .. import log
from ..cache import Cache, Entry
from ..errors import Reason, ToolFailed
from ..stages.backend import Job
from ..stages.plan import Module
from .local import LocalSide, Running
from .prepare import BackendCommand, JobState, Preparer, Resources, Stage
from .remoteside import RemoteSide
from .store import Store

if TYPE_CHECKING:
    from ..cachekey import ModuleDigests
    from ..remote.session import Served


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
class Executor:
    backend: BackendCommand
    res: Resources
    digest_of: ModuleDigests  # a module path in a shard -> digest of its bytes, and the module's facts
    outcomes: list[Outcome] = field(default_factory=list)
    states: dict[str, JobState] = field(default_factory=dict)  # job output -> what the run knows of the job
    prep: Preparer = field(init=False)  # options and keys
    here: LocalSide = field(init=False)  # the compiles running here
    store: Store = field(init=False)  # the local cache: claims, hits, objects stored
    far: RemoteSide | None = field(init=False)  # the remote service's side, if there is one

    def __post_init__(self) -> None:
        self.prep = Preparer(self.backend, self.res, self.digest_of)
        self.here = LocalSide(self.res.gate, self.res.jobs, self.res.cpu, forks=self.res.forks)
        self.store = Store(self.res)
        self.far = None if self.res.remote is None else \
            RemoteSide(self.res.remote, self.res, self.backend, self._prepare, self._remote_object)

    @property
    def cache(self) -> Cache:
        return self.res.cache

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
        far = self.far
        record.backend_compiles = sum(o.source == log.Source.COMPILED for o in self.outcomes)
        record.backend_hits = sum(o.source == log.Source.CACHED for o in self.outcomes)
        record.backend_waits = sum(o.waited for o in self.outcomes) or None
        record.slots = self.res.gate.name or None
        record.jobs = self.res.jobs
        record.forked = self.here.forks.forked or None
        if self.prep.span is not None:
            record.span(log.Phase.KEYS, *self.prep.span)
        if far is not None:
            record.remote_hits = sum(o.source == log.Source.REMOTE_CACHED for o in self.outcomes)
            record.remote_executed = sum(o.source == log.Source.REMOTE_EXECUTED for o in self.outcomes)
            far.fill(record)
        record.backends = [log.Backend(o.job.module.origin, o.source, round(o.start, 4), round(o.end, 4), o.cached,
                                       o.action or None, o.remote_error or None,
                                       recorded=False if s.unrecorded else None, dropped=s.dropped,
                                       output=s.printed or None, waited=o.waited or None,
                                       raced=(far is not None and far.raced(s)) or None,
                                       uncached=s.side.unknown or None if s.side is not None else None,
                                       verified=s.verified, lane=o.lane, slot=o.slot,
                                       size=o.job.module.size, key=s.key, digest=o.job.module.digest,
                                       worker=o.worker or None,
                                       queued=round(o.queued, 4) if o.queued is not None else None)
                           for o in self.outcomes for s in (self.states[o.job.output],)]

    def _done(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        if self.res.progress:
            self.res.progress.one_more(outcome.cached)

    def _compiled(self, child: Running, end: float) -> Outcome:
        state = child.state
        action, unserved = self.far.outcome(state) if self.far is not None else ("", "")
        return Outcome(state.job, log.Source.COMPILED, child.start, end, action, unserved, state.waited, child.lane,
                       child.ticket.slot)

    # --- the local cache and the claims on its keys -------------------------------------------

    def _hit(self, state: JobState) -> bool:
        """Serve the job from the local cache if its object is there."""
        t = time.time()
        entry = self.store.cached(state)
        if entry is None:
            return False
        self._serve(state, entry, t)
        return True

    def _serve(self, state: JobState, entry: Entry, start: float) -> None:
        self.store.serve(state, entry)
        self.store.release(state)  # a claim taken on the way (_early's, a waiter's) is let go
        self._done(Outcome(state.job, log.Source.CACHED, start, time.time(), waited=state.waited))

    def _remote_object(self, state: JobState, served: Served, action: str, start: float) -> None:
        """Take an object the remote served (Store.backfill)."""
        self.store.backfill(state, served.obj, served.stderr, action)
        source = log.Source.REMOTE_EXECUTED if served.executed else log.Source.REMOTE_CACHED
        self._done(Outcome(state.job, source, start, time.time(), action, waited=state.waited, worker=served.worker,
                           queued=served.queued))

    def _settled(self, aside: list[JobState]) -> list[JobState]:
        """Jobs put aside whose claim was let go: served from the cache now, or returned to compile here."""
        ours = []
        for state in list(aside):
            if self.store.claim(state):
                aside.remove(state)
                if not self._hit(state):  # its maker died or failed: ours to compile
                    ours.append(state)
        return ours

    # --- the loop -----------------------------------------------------------------------------

    def run(self, jobs: list[Job], sizes: dict[str, int]) -> None:
        """Local cache, then the remote service if there is one, then local compiles; the
        heaviest job first (its module's size plus what it imports).

        Each job's key is made as the job comes up, and the next ones' while compiles run
        (_compile): the first compile does not wait for every key (on a cold 400-module link,
        seconds of shard keys). The remote service is asked the same way, a few jobs at a
        time (remoteside.ASK_AT_ONCE): the first job goes to the workers after a few keys, not all."""
        states = [JobState(job) for job in jobs]
        self.states.update((s.output, s) for s in states)
        self.prep.unkeyed += len(states)
        weight = {s.output: s.job.module.size + sum(map(sizes.get, s.job.imports, repeat(0))) for s in states}
        states.sort(key=lambda s: weight[s.output], reverse=True)
        self._compile(states)

    def _prepare(self, state: JobState) -> bool:
        """Make the job's options, command line and key; True if the local cache served it."""
        if state.stage is Stage.NEW:
            self.prep.options(state)
        self.prep.make_key(state)
        return self._hit(state)

    def _compile(self, pending: list[JobState]) -> None:
        """Run the misses, each under a claim on its key and in a slot (slots.Gate), at most `jobs` at once.

        A key another process is compiling is put aside: this process waits for it holding
        no slot, then takes the object from the cache, or compiles it itself if that
        process died or failed. One select() waits for a child to end (its pidfd), a slot
        to come free (make's jobserver readable, or the lock directory's Waker), a claim
        to be let go (the Waker too, with its backstop: locks.BACKSTOP) or a remote answer
        (remote.execute.Wake). A slot a compile frees takes the next job before
        that compile's object is checked and stored (and keyed, if it started before its key).
        """
        queue = list(reversed(pending))  # pop() takes the heaviest first
        aside: list[JobState] = []  # keys another process is making
        claimed: JobState | None = None  # claimed, waiting for a slot
        failures: list[ToolFailed] = []
        if self.far is not None:
            self.far.open()
        try:
            while True:
                if not failures:
                    queue += self._settled(aside)
                    claimed = self._start(queue, aside, claimed)
                if not self.here.running and (failures or (claimed is None and not queue and not aside
                                                           and not (self.far is not None and self.far.busy))):
                    break
                # A job that waits for the workers only (remote_local off) waits for no slot:
                # a jobserver with tokens to spare would wake this loop for nothing.
                for_slot = claimed is not None and not failures and self._may_run_here(claimed)
                # While the compiles run, the next jobs' keys are made, one between two looks.
                busy = not failures and self._prepare_next(queue)
                ended = [self.here.ended(child) for child in self._wait(for_slot, bool(aside) and not failures, busy)]
                if ended and not failures:  # the freed slots take the next jobs before the objects are stored
                    claimed = self._start(queue, aside, claimed)
                for child, rc, end in ended:
                    failure = self._reap(child, rc, end)
                    if failure:
                        failures.append(failure)
                queue += self._landed()
        finally:
            if self.far is not None:
                self.far.close()
            self.here.close()
            self.store.let_go()
        if failures:
            raise failures[0]

    def _start(self, queue: list[JobState], aside: list[JobState], claimed: JobState | None) -> JobState | None:
        """Start jobs while a side has room (a local slot first: it costs no transfer); returns
        the claimed job still waiting for one. With the queue empty, free slots race stragglers.
        Once it has asked the remote service for jobs, it returns after the next one starts:
        what landed meanwhile is taken before more are asked."""
        far = self.far
        paused = False
        while True:
            while claimed is None and queue and not paused:
                state = queue.pop()
                if not state.keyed and self._early(state):
                    continue
                if not state.keyed and self._prepare(state):
                    continue
                if far is not None and state.stage < Stage.ANSWERED:
                    if state.stage < Stage.ASKED:
                        far.ask(far.to_ask(queue, state))
                        paused = True
                    if state.output in far.answered(queue, state):
                        continue
                if not self.store.claim(state):
                    aside.append(state)
                    state.waited = True
                    self.cache.stats.add("backend_waits")
                elif not self._hit(state):  # a hit: made by another process since the first look
                    claimed = state
            if claimed is None:
                if far is not None:
                    far.race(self.here.start_if_free)
                return None
            ticket = self.here.take() if self._may_run_here(claimed) else None
            if ticket is not None:
                if far is not None:
                    far.unsent(claimed)
                self.here.start(claimed, ticket)
            elif far is None or not far.send(claimed):
                return claimed
            claimed = None
            if paused:
                return None

    def _may_run_here(self, state: JobState) -> bool:
        """False for a job that should wait for the workers (remote_local off)."""
        return self.far is None or self.far.may_run_here(state)

    def _early(self, state: JobState) -> bool:
        """Start the compile of a module new to the cache's store (plan.Module.new) before its
        key is made, if a slot is free: no object can be cached under a key that takes the
        digest of bytes the cache has not seen (unless the store was trimmed: a hit after
        all stops it, _early_keyed). Its key is made while it runs (_prepare_next). It claims
        its content first (Store.claim_content), as an identical link compiling the same job
        does: taken by another, the job is keyed and claimed here (_start) and waits for it."""
        if not state.job.module.new or self.far is not None:
            return False
        self.prep.options(state)
        if not self.store.claim_content(state):
            return False
        ticket = self.here.take()
        if ticket is None:
            return False
        self.here.start(state, ticket)
        return True

    def _prepare_next(self, queue: list[JobState]) -> bool:
        """Make one more key while the compiles run; False if none is left to make. A compile
        started before its key (_start: a module new to the cache) comes first: its key may
        turn out to be a hit (_early_keyed); then the next job of the queue (a hit leaves it).
        With a remote service, the remote replies that are in are taken, and the next jobs'
        keys are made to ask it for them (RemoteSide.ask)."""
        if self.far is not None:
            self.far.answered(queue)
        if not self.prep.unkeyed:
            return False
        if self.far is not None:
            asking = self.far.to_ask(queue)
            if asking:
                self.far.ask(asking)
                return True
        early = self.here.unkeyed()
        if early is not None:
            self._early_keyed(early, queue)
            return True
        i = self.prep.next_unkeyed(queue)
        if i is None:
            return False
        if self._prepare(queue[i]):
            del queue[i]
        return True

    def _early_keyed(self, child: Running, queue: list[JobState]) -> None:
        """Key a compile that started without one. A hit after all stops it (its slot is free
        again; its output is the cached object); else its key is claimed beside its content
        (Store.claim_key). A key another process holds stops it too: the job goes back to the
        queue, where _start puts it aside to wait for that process's object."""
        state = child.state
        self.prep.make_key(state)
        t = time.time()
        entry = self.store.cached(state)
        if entry is None:
            if not self.store.claim_key(state):
                self.here.stop(child)
                queue.append(state)  # the next one _start takes
            return
        self.here.stop(child)
        self.cache.stats.add("backend_early_stopped")
        self._serve(state, entry, t)

    def _landed(self) -> list[JobState]:
        """Take the remote answers that are in; returns the jobs the workers could not make, to compile here."""
        again: list[JobState] = []
        for state, served, action, start in self.far.landed() if self.far is not None else ():
            racer = self.here.of(state)  # its compile here, if it races
            if served is None:
                if racer is None:  # compiled here instead (the racer, if any, goes on as an ordinary compile)
                    again.append(state)
                continue
            if racer is not None:  # the worker won: the local compile stops, its slot is free again
                self.here.stop(racer)
            self._remote_object(state, served, action, start)
        return again

    def _wait(self, for_slot: bool, for_claims: bool, busy: bool) -> list[Running]:
        """Wait for a child to end, a slot or claim let go, or a remote answer (busy: only look); who ended."""
        claims = self.cache.claims
        fds, timeouts = (claims.fds(), [claims.timeout]) if for_claims else ([], [])
        ended, woken = self.here.wait(for_slot, fds + (self.far.fds() if self.far is not None else []), timeouts, busy)
        if woken:  # forgotten before the locks are tried again (unread, they wake the next wait that looks)
            self.cache.locks.drain()
        return ended

    # --- a compile's result -------------------------------------------------------------------

    def _reap(self, child: Running, rc: int, end: float) -> ToolFailed | None:
        """Check and store the object of a child that ended (LocalSide.ended); Store.keep lets go of its claims."""
        state = child.state
        if not state.keyed:  # started early, done before its key: made now, to store the object under
            self.prep.make_key(state)
            self.store.claim_key(state)  # held by another process or not, this object is made: it is stored
        failure = self._finish(state, rc, child.out, end - child.start)  # its claims let go after the store
        if not failure:
            if self.far is not None:  # this compile won its race: the worker's run is dropped
                self.far.won_here(state)
            self._done(self._compiled(child, end))
        return failure

    def _finish(self, state: JobState, rc: int, out: str, seconds: float) -> ToolFailed | None:
        made = self.store.keep(state, rc, out, seconds)
        if made.why:
            return ToolFailed(state.argv, rc or 1, f"backend compile of {state.job.module.origin} {made.why}\n"
                              f"{made.out}", Reason.BACKEND_FAILED)
        if self.far is not None and state.key is not None:
            self.far.publish(state, made.obj, bool(made.sides))
        return None

    def printed(self) -> list[tuple[Module, str]]:
        """What each backend printed (canonical text), by module, in the order in-process
        ThinLTO runs its backends on one thread: the largest module first (LTO's
        generateModulesOrdering), ties in link order."""
        states = sorted(self.states.values(), key=lambda s: -s.job.module.size)
        return [(s.job.module, s.printed) for s in states if s.printed]
