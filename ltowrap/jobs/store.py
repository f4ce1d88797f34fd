"""The local cache's side of a run of backend jobs: claims on keys, hits written out, objects
checked and stored.

A key is claimed (locks.py) before its compile starts and let go after its object is stored,
so that another process wanting the same key waits and then finds the object. A hit of a job
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


@dataclass
class Store:
    res: Resources
    claimed: set[str] = field(default_factory=set)  # keys this process has claimed (locks.Claims)

    @property
    def cache(self) -> Cache:
        return self.res.cache

    def claim(self, key: str | None) -> bool:
        if key is None:  # not cached: nothing to share with another process
            return True
        if not self.cache.claims.try_claim(OBJECTS, key):
            return False
        self.claimed.add(key)
        return True

    def release(self, key: str | None) -> None:
        if key is not None and key in self.claimed:
            self.claimed.discard(key)
            self.cache.claims.release(OBJECTS, key)

    def let_go(self, aside: list[JobState]) -> None:
        """The run is over: every claim let go, and the waits on other processes' claims forgotten."""
        for key in list(self.claimed):
            self.release(key)
        for state in aside:
            if state.key is not None:
                self.cache.claims.forget(OBJECTS, state.key)

    def cached(self, state: JobState) -> Entry | None:
        """The job's object in the local cache, unless it is to be verified (then compiled
        again, and compared when done: keep)."""
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

    def serve(self, state: JobState, entry: Entry) -> None:
        """Write a hit out: its object and side outputs, and what its compile printed."""
        local.write(state.output, entry.payload)
        for kind, _ in state.job.side_outputs():
            local.write(backend.side_output(state.output, kind), entry.meta[kind])
        state.printed = str(entry.meta.get("printed", ""))
        self.cache.stats.add("backend_hits")
        self.cache.stats.add("cpu_saved_seconds", float(entry.meta.get("seconds", 0)))

    def backfill(self, state: JobState, obj: bytes, printed: str, action: str) -> None:
        """Take an object the remote served (its action's, with what the compile printed): written,
        backfilled into the local cache, its claim let go."""
        local.write(state.output, obj)
        self._printed(state, printed)
        if state.key is not None:
            self.cache.put(OBJECTS, state.key, {"seconds": 0, "remote": action, "printed": state.printed}, obj)
        self.release(state.key)

    def keep(self, state: JobState, rc: int, seconds: float) -> local.Result:
        """Check what a compile here left (local.result): a good object is stored under the
        job's key, after the verify check if the job has one; Result.why says if it is not good."""
        made = local.result(state, rc)
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
        self.cache.put(OBJECTS, state.key, meta, made.obj)
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
