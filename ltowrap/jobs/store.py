"""The local cache's side of a run of backend jobs: claims on keys, hits written out, objects
checked and stored.

A job is claimed (locks.py) before its compile starts and let go after its object is stored,
so that another process wanting the same object waits and then finds it. A claim has two
parts, taken in this order: one named by the job's content (JobState.content: what its compile
reads that is known before its key), then its key. A module new to the cache's store compiles
before its key is made (executor._early), holding only the first part until its key is made,
then both: a keyed job of another process, which takes the first part first, waits for it;
an early compile that finds its key held by another process, once it has made it, stops and
waits for it too.
Taken in one order, the parts cannot deadlock, and a job put aside keeps the part it got (a
failed try closes nothing, so no waiter wakes another). A hit of a job
chosen for verification (config `verify`) is not served: the job compiles again and the two
objects are compared when it is done.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from .. import cachekey, log
from ..cache import OBJECTS, Cache, Entry
from ..cachedirs import MODULES
from ..stages import backend, diagnostics
from . import local
from .prepare import JobState, Resources


CONTENT = "e"  # the claim kind of a job's content (locks.CLAIM_KINDS)


@dataclass(eq=False, repr=False)
class Store:
    """The cache's side of backend jobs: claims on entries, lookups, objects stored."""

    res: Resources
    claimed: set[tuple[str, str]] = field(default_factory=set)  # (kind, name) of the claims this process holds

    @property
    def cache(self) -> Cache:
        return self.res.cache

    def claim(self, state: JobState) -> bool:
        """Claim a keyed job before it compiles (here or on the workers): its content, then its
        key. False if another process holds either; the part taken is kept while the job waits."""
        if state.key is None:  # not cached: nothing to share with another process
            return True
        with self.res.cpu.charge(log.Cpu.CACHE):
            return self._take(CONTENT, state.content) and self._take(OBJECTS, state.key)

    def claim_content(self, state: JobState) -> bool:
        """Claim a job about to compile before its key (executor._early): False if another process
        holds its content's claim (compiling it before its key, or claiming it keyed)."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            return self._take(CONTENT, state.content)

    def claim_key(self, state: JobState) -> bool:
        """A compile that started before its key, keyed now: its key claimed too. False if another
        process holds it, having claimed the same object under another content claim (the
        module at another position of another link). With no key (not cached), its content's
        claim is let go: there is nothing to share."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            if state.key is None:
                self._let_go((CONTENT, state.content))
                return True
            return self._take(OBJECTS, state.key)

    def release(self, state: JobState) -> None:
        """Let go of the job's claims (after its object is stored: a waiter finds it)."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            self._release(state)

    def let_go(self) -> None:
        """The run is over: every claim let go (a wait on another process's claim leaves nothing open)."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            self._let_go(*self.claimed)

    # _take, _let_go and _release are charged by their callers (log.Cpu.CACHE): a job's two
    # claims, one charge.

    def _release(self, state: JobState) -> None:
        if state.key is None:
            self._let_go((CONTENT, state.content))
        else:
            self._let_go((OBJECTS, state.key), (CONTENT, state.content))

    def _take(self, kind: str, name: str) -> bool:
        if (kind, name) in self.claimed:
            return True
        if not self.cache.claims.try_claim(kind, name):
            return False
        self.claimed.add((kind, name))
        return True

    def _let_go(self, *claims: tuple[str, str]) -> None:
        """Let go of those of these claims (kind, name) this process holds, waking their waiters once."""
        held = [claim for claim in claims if claim in self.claimed]
        if held:
            self.claimed.difference_update(held)
            self.cache.claims.release_all(held)

    def cached(self, state: JobState) -> Entry | None:
        """The job's object in the local cache, unless it is to be verified (then compiled
        again, and compared when done: keep)."""
        if state.key is None:
            return None
        with self.res.cpu.charge(log.Cpu.CACHE):
            entry = self.cache.get(OBJECTS, state.key)
        if entry is None or not entry.payload or \
                any(not isinstance(entry.meta.get(kind), bytes) for kind, _ in state.job.side_outputs()):
            return None
        if state.verify:
            if state.expected is None:
                state.expected = (log.Source.CACHED, cachekey.digest_bytes(entry.payload))
            return None
        return entry

    def serve(self, state: JobState, entry: Entry) -> None:
        """Write a hit out: its object and side outputs, and what its compile printed."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            self._serve(state, entry)

    def _serve(self, state: JobState, entry: Entry) -> None:
        if not self.cache.link_out(entry, state.output):
            local.write(state.output, entry.payload)
        for kind, _ in state.job.side_outputs():
            local.write(backend.side_output(state.output, kind), entry.meta[kind])
        state.printed = str(entry.meta.get("printed", ""))
        self.cache.stats.add("backend_hits")
        self.cache.stats.add("cpu_saved_seconds", float(entry.meta.get("seconds", 0)))

    def backfill(self, state: JobState, obj: bytes, printed: str, action: str) -> None:
        """Take an object the remote served (its action's, with what the compile printed): written,
        backfilled into the local cache, its claim let go (charged as a local compile's store is)."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            local.write(state.output, obj)
            self._printed(state, printed)
            if state.key is not None:
                meta = {"seconds": 0, "remote": action, "printed": state.printed}
                self.cache.put_file(OBJECTS, state.key, meta, obj, state.output)
        self.release(state)

    def keep(self, state: JobState, rc: int, out: str, seconds: float) -> local.Result:
        """Check what a compile here left (local.result; it printed `out`): a good object is
        stored under the job's key, after the verify check if the job has one; Result.why
        says if it is not good. The job's claims are let go after, whatever happened (a
        waiter finds the object, or makes it)."""
        with self.res.cpu.charge(log.Cpu.CACHE):
            try:
                return self._keep(state, rc, out, seconds)
            finally:
                self._release(state)

    def _keep(self, state: JobState, rc: int, out: str, seconds: float) -> local.Result:
        made = local.result(state, rc, out)
        if made.why:
            self.cache.stats.add("backend_failures")
            return made
        self._printed(state, made.out)
        if state.key is None:
            return made
        if state.expected is not None:
            self._check(state, made.obj)
        self.cache.stats.add("backend_misses")
        meta: dict = {"seconds": round(seconds, 4), "printed": state.printed}
        meta.update(made.sides)  # split DWARF, optimization records: kept with the object (a hit writes them all)
        self.cache.put_file(OBJECTS, state.key, meta, made.obj, state.output)  # the output becomes the entry
        return made

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
