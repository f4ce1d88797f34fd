"""The link log (config `log`, LTOWRAP_LOG): one JSON line per link or distributor run, appended whole
(logfile.py: O_APPEND, one write, under flock; the file kept bounded).

The log's names: Decision (a record's `decision`), Phase (the names of its `spans`) and
Source (a backend's `source`), defined in logfile.py for the line a relink writes there.
A record's phases are its spans; phase_seconds totals them, and reads the `phases` field
that lines written before spans carry.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from . import logfile
from .logfile import Decision as Decision, Phase as Phase, Source as Source

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: every link imports this module
    from typing import Final

# The `phases` field of older lines ({name: seconds}), by the names it used: read, never written.
LEGACY_PHASES = {"thinlink": Phase.THIN_LINK, "backends": Phase.BACKENDS, "final_link": Phase.FINAL_LINK}


@dataclass
class Backend:
    """One backend job of a run: where its object came from, and when."""

    module: str  # as the user named it: 'a.o' or 'liblua.a(lapi.o)'
    source: str  # a Source
    start: float
    end: float
    cached: bool
    action: str | None = None  # the remote action digest, when a remote service was asked
    remote_error: str | None = None  # why the remote service did not serve it
    recorded: bool | None = None  # False: the module had no option record (its own facts were used)
    output: str | None = None  # what the compile printed (warnings), kept out of the build's stderr
    waited: bool | None = None  # another process was making the same object: this one waited for it
    raced: bool | None = None  # run here and on a worker at once; `source` says which won
    uncached: str | None = None  # why this compile was not cached (what it reads cannot be told)
    verified: str | None = None  # a hit checked by compiling again (verify): 'same', or both digests
    lane: int | None = None  # compiled here: which of the link's compiles running at once it was (0, 1, ...)
    slot: int | None = None  # compiled in a slot of the machine's pool: its number
    size: int | None = None  # the module's bytes
    key: str | None = None  # its cache key (`ltowrap explain` shows what went in, after LTOWRAP_DEBUG=1)
    digest: str | None = None  # the module's content digest (its name in a remote input root: m/<rank>-<digest>.o)
    worker: str | None = None  # run on a remote worker: which (as the server names it)
    queued: float | None = None  # run on a remote worker: seconds in the server's queue first
    dropped: list[str] | None = None  # recorded options the backend clang rejects (another release's), left out


@dataclass
class Record:
    """What one invocation did. Optional fields that are None are left out of the line."""

    tool: str
    argv: list[str]
    cwd: str = field(default_factory=os.getcwd)
    pid: int = field(default_factory=os.getpid)
    start: float = field(default_factory=time.time)
    end: float | None = None
    decision: str = Decision.PASSTHROUGH  # a Decision
    reason: str | None = None  # errors.Reason's key
    detail: str | None = None  # the reason, as the user was told
    output: str | None = None  # what the step that failed printed (a backend's errors)
    modules: int = 0
    thinlink_cached: bool = False
    thinlink_uncached: str | None = None  # why the thin-link that ran was not stored
    unmemoised: str | None = None  # why the link memo did not store this link
    verified: str | None = None  # a memo hit checked by linking again (verify): 'same', or both digests
    spans: list[list] = field(default_factory=list)  # [Phase, start, end], in the order they ran (ltowrap trace)
    jobs: int | None = None  # the backend compiles this link could run at once
    # CPU seconds: ltowrap's own ("self"), the tools it ran ("children"), and its own by what it was doing ("by": CpuLedger)
    cpu: dict | None = None
    backends: list[Backend] = field(default_factory=list)
    backend_compiles: int = 0
    backend_hits: int = 0
    backend_waits: int | None = None  # backends another process was making when this one needed them
    slots: str | None = None  # where backend compiles got their slots: 'jobserver' (make's) or 'pool' (the machine's)
    forked: int | None = None  # backend compiles forked from the link's fork server (the others were started anew)
    remote_hits: int | None = None
    remote_executed: int | None = None
    remote_local: int | None = None  # execute mode: jobs compiled here beside the workers (the split: this and remote_executed)
    remote_raced: int | None = None  # execute mode: jobs run on both sides at once, the first result won
    remote_down: str | None = None
    remote_retries: int | None = None  # requests asked again after a "not now" answer
    remote_uploaded: int | None = None  # bytes sent to the CAS (inputs, and what was published)
    remote_deduplicated: int | None = None  # input bytes the jobs sent named but not uploaded (shared, or in the CAS)

    def span(self, name: str, start: float, end: float) -> None:
        """A phase of the link (a Phase) ran from start to end (time.time())."""
        self.spans.append([name, round(start, 4), round(end, 4)])

    def to_json(self) -> dict:
        out = _without_none(self)
        assert isinstance(out, dict)  # a dict's is a dict
        return out


class Cpu:
    """The headings of a record's `cpu.by` besides the Phases of the link it ran (CpuLedger)."""

    START: Final = "start"  # before the link: the interpreter, imports, the entry, the driver's link line
    IMPORTS: Final = "imports"  # the stages' modules, imported once the link memo has missed
    OPTIONS: Final = "keys: options"  # each job's options and command line (prepare.Preparer.options)
    SIDE_INPUTS: Final = "keys: module facts and side inputs"  # read once a module, for every backend importing it
    SHARD_TEXT: Final = "keys: shard text"  # the shards' canonical text (shardkey.py) and its digest
    KEY_REST: Final = "keys: the rest"  # the key's other fields, and the key dump (debug)
    STARTS: Final = "starts"  # writing shards, starting the backend clangs (local.spawn)
    CACHE: Final = "cache"  # claims, lookups, objects written out and stored
    REMOTE: Final = "remote"  # the remote service asked and answered: actions built, requests sent, replies taken
    THREADS: Final = "other threads"  # the remote service's threads (gRPC)
    REST: Final = "the rest"  # outside the stages: the log record, the counters, the cache's cleanup


@dataclass(eq=False, repr=False)
class CpuLedger:
    """ltowrap's own CPU (its main thread's), by what it was doing: each second goes to one
    heading, so that the headings add up to the whole. The link's stages say where it is
    (`now`: a Phase, from then on); work inside a stage charges its own heading for its
    time (`charge`: a Cpu heading, then back to the stage's)."""

    spent: dict[str, float] = field(default_factory=dict)
    _heading: str = Cpu.REST
    _mark: float = 0.0

    def __post_init__(self) -> None:
        self._mark = time.thread_time()
        self.spent[Cpu.START] = self._mark

    def charge(self, heading: str) -> _Charge:
        """For a `with` block: its time to `heading`, then back to the heading before."""
        return _Charge(self, heading)

    def now(self, heading: str) -> str:
        """Charge the time from here on to `heading`; returns the heading charged until now."""
        now = time.thread_time()
        self.spent[self._heading] = self.spent.get(self._heading, 0.0) + now - self._mark
        outer, self._heading, self._mark = self._heading, heading, now
        return outer

    def by(self, whole: float) -> dict[str, float]:
        """Seconds by heading, rounded; `whole`, the process's own CPU (getrusage), less the
        main thread's, is the other threads'."""
        self.now(self._heading)
        out = {name: round(seconds, 4) for name, seconds in self.spent.items() if seconds > 0}
        threads = whole - sum(self.spent.values())
        if threads > 0.0005:
            out[Cpu.THREADS] = round(threads, 4)
        return out


class _Charge:
    """CpuLedger.charge's block (a class: a generator's context manager costs several times
    more, and a link charges a few dozen a module)."""

    __slots__ = ("ledger", "heading", "outer")

    def __init__(self, ledger: CpuLedger, heading: str) -> None:
        self.ledger, self.heading, self.outer = ledger, heading, ""

    def __enter__(self) -> None:
        self.outer = self.ledger.now(self.heading)

    def __exit__(self, *exc: object) -> None:
        self.ledger.now(self.outer)


def _without_none(value: object) -> object:
    """The value as JSON takes it, every None in a dict left out: a record or a backend as the
    dict of its fields (asdict, without its deep copy: json.dumps reads, and a link logs a
    backend record a module)."""
    if isinstance(value, (Record, Backend)):
        value = vars(value)
    if isinstance(value, dict):
        return {k: v if type(v) in _PLAIN else _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [v if type(v) in _PLAIN else _without_none(v) for v in value]
    return value


_PLAIN = frozenset({str, int, float, bool})  # values _without_none gives back as they are


def append(path: str, record: Record) -> None:
    logfile.append(path, (json.dumps(record.to_json(), sort_keys=True) + "\n").encode())


def records(path: str) -> list[dict]:
    """The log's records, oldest first (a line that is not JSON is skipped: a log being written)."""
    out = []
    for line in logfile.lines(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def phase_seconds(record: dict) -> dict[str, float]:
    """Seconds per phase of a link record, by Phase name, in the order each phase first ran:
    its spans summed, or for an older line without spans its `phases` field."""
    out: dict[str, float] = {}
    if record.get("spans"):
        for name, start, end in record["spans"]:
            out[str(name)] = out.get(str(name), 0.0) + float(end) - float(start)
        return out
    return {LEGACY_PHASES.get(name, name): float(seconds) for name, seconds in (record.get("phases") or {}).items()}
