"""Counters, gathered in memory during one invocation and added once to a shard file.

Like ccache: each process adds its counts to one of SHARDS files (chosen by pid) under
an flock, with an atomic rewrite, so concurrent builds lose no update and never
contend on one file. `ltowrap stats` sums the shards.

A shard is text, one counter a line: `count NAME VALUE` or `reason KEY VALUE`. A counter
can also be tallied: one byte appended to `NAME.tally` beside the shards per event (one
O_APPEND write, no lock, no rewrite), so that the sh entry counts the small links it runs
without a process; `ltowrap stats` adds each tally's size to its counter. A restored
link counts its hit here, so this module imports nothing costly: no json (it loads `re`
too), no dataclasses. Shards that ltowrap 0.x wrote as JSON are still read.
"""

from __future__ import annotations

import os
import stat
import time

from . import fsutil
from .cachedirs import STATS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .errors import Reason

SHARDS = 16

# Every counter, one row each: (name, kind, section, label, help). The table drives counting
# (Stats.add refuses a name that is not in it), `ltowrap stats` (its sections and labels, in
# this order), `stats --json` and `stats --help`. kind: "count"; "seconds" (a float);
# "size" (what is on disk: not zeroed, shown as the cache's size and files).
COUNTERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("links_distributed", "count", "Links", "Distributed", "links done as distributed ThinLTO"),
    ("links_passthrough", "count", "Links", "Passed through (no bitcode)", "links with no bitcode input, run unchanged"),
    ("links_small", "count", "Links", "Linked in-process: small",
     "links of at most small_link bitcode modules, run unchanged: lld's in-process ThinLTO, uncached"),
    ("links_fallback", "count", "Links", "Fallen back",
     "commands ltowrap could not handle, run unchanged (by reason below): links, and any command a bad setting "
     "or an internal error of ltowrap's entry passed through"),
    ("link_hits", "count", "Links", "Restored (link memo)",
     "whole links restored by the link memo: nothing they read had changed"),
    ("link_misses", "count", "Links", "Memo misses", "memoisable links the link memo did not have (linked, then stored)"),
    ("link_unmemoised", "count", "Links", "Not memoised",
     "links not memoised: they write a file the memo does not model, an input changed while they ran, or what "
     "they read cannot be told (LTOWRAP_LOG says why)"),
    ("driver_line_hits", "count", "Links", "Driver line from cache",
     "driver links whose link line (clang -###) came from the cache"),
    ("driver_line_misses", "count", "Links", "Driver line asked of clang",
     "driver links whose link line was asked of clang -### (and stored)"),
    ("distributor_runs", "count", "Links", "DTLTO job files run",
     "job files run for lld's integrated DTLTO (ltowrap-distributor)"),
    ("backend_hits", "count", "Backend compiles", "Hits", "backend compiles served from the cache"),
    ("backend_misses", "count", "Backend compiles", "Misses", "backend compiles run (and stored)"),
    ("backend_failures", "count", "Backend compiles", "Failures",
     "backend compiles that failed or wrote an empty object"),
    ("backend_waits", "count", "Backend compiles", "Waited for another link",
     "backends another ltowrap process was already making: waited for, not compiled twice"),
    ("backend_uncached", "count", "Backend compiles", "Not cached (side inputs)",
     "backend compiles not cached: what they read cannot be told (LTOWRAP_LOG says why)"),
    ("backend_early_stopped", "count", "Backend compiles", "Started early, then hit",
     "compiles of modules new to the cache, started before their key was made, stopped when it was a hit"),
    ("backend_options_dropped", "count", "Backend compiles", "Options left out",
     "backends whose recorded options held one their clang rejects (a module of another LLVM release): left out"),
    ("cpu_saved_seconds", "seconds", "Backend compiles", "CPU time saved by hits",
     "backend compile time saved by cache hits (seconds, as first measured)"),
    ("thinlink_hits", "count", "Thin-links", "Cached (skipped)",
     "thin-links skipped: inputs unchanged since a cached thin-link"),
    ("thinlink_misses", "count", "Thin-links", "Run", "thin-links run"),
    ("thinlink_waits", "count", "Thin-links", "Waited for another link",
     "thin-links another ltowrap process was already running: waited for, not run twice"),
    ("remote_hits", "count", "Remote", "Hits (action cache)", "backend objects served by the remote action cache"),
    ("remote_misses", "count", "Remote", "Misses", "backend compiles the remote action cache did not have"),
    ("remote_executed", "count", "Remote", "Executed on workers", "backend compiles run on remote workers"),
    ("remote_local", "count", "Remote", "Compiled here beside them",
     "execute mode: backend compiles the action cache lacked that ran here, beside the workers"),
    ("remote_raced", "count", "Remote", "Raced a worker",
     "execute mode: jobs run here and on a worker at once (a straggler); the first result won, the other was "
     "cancelled"),
    ("remote_errors", "count", "Remote", "Errors (compiled here)",
     "backend compiles the remote could not serve (down, timeout, failed or rejected), run locally"),
    ("remote_uploads", "count", "Remote", "Published", "locally compiled objects published to the remote action cache"),
    ("remote_upload_errors", "count", "Remote", "Not published", "objects that could not be published"),
    ("remote_retries", "count", "Remote", "Retried (server busy)",
     "remote requests asked again after the server said not now (busy, unavailable, aborted)"),
    ("verify_checks", "count", "Cache", "Hits verified", "cache hits checked by doing the work again (the verify setting)"),
    ("verify_mismatches", "count", "Cache", "Hits that differed",
     "checked hits whose bytes differed from the work done again: the fresh result was used and stored"),
    ("bad_entries", "count", "Cache", "Bad entries removed", "cache entries that failed verification (removed and rebuilt)"),
    ("cache_write_errors", "count", "Cache", "Write errors", "entries that could not be stored (disk full, read-only cache)"),
    ("cleanups", "count", "Cache", "Cleanups", "size-limit cleanups run"),
    ("files_evicted", "count", "Cache", "Files evicted", "files removed by cleanups"),
    ("bytes_added", "size", "", "", "bytes stored"),
    ("files_added", "size", "", "", "files stored"),
    ("bytes_removed", "size", "", "", "bytes removed"),
    ("files_removed", "size", "", "", "files removed"),
)
KINDS = {name: kind for name, kind, *_ in COUNTERS}
# Not zeroed by `stats --zero`: they track what is on disk.
SIZE_COUNTERS = tuple(name for name, kind, *_ in COUNTERS if kind == "size")


class Stats:
    """One invocation's counts, added to a shard once (flush)."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.reasons: dict[str, int] = {}

    def add(self, name: str, n: float = 1) -> None:
        if name not in KINDS:
            raise ValueError(f"no counter named {name!r} (stats.COUNTERS)")
        self.counts[name] = self.counts.get(name, 0) + n

    def fallback(self, reason: Reason) -> None:
        """Count a fallback under its reason's stable key."""
        self.add("links_fallback")
        self.reasons[reason.value] = self.reasons.get(reason.value, 0) + 1

    def empty(self) -> bool:
        return not self.counts and not self.reasons


def fallback_now(cache_dir: str, reason: Reason) -> None:
    """Count one command run unchanged for `reason`, from a process that counts nothing else."""
    counts = Stats()
    counts.fallback(reason)
    flush(cache_dir, counts)


def count_now(cache_dir: str, name: str) -> None:
    """Count one event of counter `name`, from a process that counts nothing else."""
    counts = Stats()
    counts.add(name)
    flush(cache_dir, counts)


TALLY_SUFFIX = ".tally"


def tally(cache_dir: str, name: str) -> None:
    """Count one event of counter `name` in its tally file (scripts/ltowrap-clang appends the
    same way). Never raises; never writes through a symlink."""
    if name not in KINDS:
        raise ValueError(f"no counter named {name!r} (stats.COUNTERS)")
    path = os.path.join(cache_dir, STATS, name + TALLY_SUFFIX)
    try:
        fsutil.make_dirs(os.path.dirname(path))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)
    except OSError:
        pass


def _tallies(cache_dir: str) -> dict[str, int]:
    """Each tallied counter's events: its tally file's size."""
    got: dict[str, int] = {}
    for name in KINDS:
        try:
            st = os.lstat(os.path.join(cache_dir, STATS, name + TALLY_SUFFIX))
        except OSError:
            continue
        if st.st_size and stat.S_ISREG(st.st_mode):
            got[name] = st.st_size
    return got


def reason_text(key: str) -> str:
    """What a fallback reason's key means (a key from an older ltowrap is shown as it is)."""
    from .errors import Reason

    try:
        return Reason(key).text
    except ValueError:
        return key


def _shard_path(cache_dir: str, pid: int) -> str:
    return os.path.join(cache_dir, STATS, str(pid % SHARDS))


def _number(text: str) -> float:
    return float(text) if "." in text or "e" in text else int(text)


def _read(path: str) -> dict:
    """A shard: {"counts": {...}, "reasons": {...}}; empty if missing or unreadable."""
    try:
        data = fsutil.read_nofollow(path)
    except OSError:
        return {}
    if data.startswith(b"{"):  # written by an older ltowrap
        import json

        try:
            old = json.loads(data)
        except ValueError:
            return {}
        return old if isinstance(old, dict) else {}
    counts: dict[str, float] = {}
    reasons: dict[str, int] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        parts = line.split(" ")
        try:
            if len(parts) == 3 and parts[0] == "count":
                counts[parts[1]] = _number(parts[2])
            elif len(parts) == 3 and parts[0] == "reason":
                reasons[parts[1]] = int(parts[2])
        except ValueError:
            continue
    return {"counts": counts, "reasons": reasons}


def _text(counts: dict[str, float], reasons: dict[str, int]) -> bytes:
    lines = [f"count {k} {v}" for k, v in sorted(counts.items())]
    lines += [f"reason {k} {v}" for k, v in sorted(reasons.items())]
    return ("\n".join(lines) + "\n").encode()


def flush(cache_dir: str, stats: Stats) -> None:
    """Add this process's counts to its shard. Never raises: stats must not break a build."""
    if stats.empty():
        return
    path = _shard_path(cache_dir, os.getpid())
    try:
        fsutil.make_dirs(os.path.dirname(path))
        with fsutil.locked(path + ".lock"):
            data = _read(path)
            counts = data.get("counts", {})
            for k, v in stats.counts.items():
                counts[k] = counts.get(k, 0) + v
            reasons = data.get("reasons", {})
            for k, v in stats.reasons.items():
                reasons[k] = reasons.get(k, 0) + v
            fsutil.atomic_write(path, _text(counts, reasons))
    except OSError:
        pass


def summary(cache_dir: str) -> dict:
    """All shards summed: {'counts': {...}, 'reasons': {...}, 'zeroed_at': float|None}."""
    counts: dict[str, float] = {}
    reasons: dict[str, int] = {}
    for i in range(SHARDS):
        data = _read(os.path.join(cache_dir, STATS, str(i)))
        for k, v in data.get("counts", {}).items():
            counts[k] = counts.get(k, 0) + v
        for k, v in data.get("reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    for k, v in _tallies(cache_dir).items():
        counts[k] = counts.get(k, 0) + v
    zeroed: float | None = None
    try:
        text = fsutil.read_nofollow(os.path.join(cache_dir, STATS, "zeroed")).decode()
        if text.startswith("{"):  # written by an older ltowrap: {"at": seconds}
            text = text.partition(":")[2].strip(" }\n")
        zeroed = float(text)
    except (OSError, ValueError):
        pass
    return {"counts": counts, "reasons": reasons, "zeroed_at": zeroed}


def zero(cache_dir: str, keep_size: bool = True) -> None:
    """Reset the counters; the size counters survive unless the cache itself was emptied."""
    fsutil.make_dirs(os.path.join(cache_dir, STATS))
    for i in range(SHARDS):
        path = os.path.join(cache_dir, STATS, str(i))
        with fsutil.locked(path + ".lock"):
            data = _read(path)
            kept = {k: v for k, v in data.get("counts", {}).items() if keep_size and k in SIZE_COUNTERS}
            fsutil.atomic_write(path, _text(kept, {}))
    for name in _tallies(cache_dir):  # no size counter is tallied
        try:
            os.unlink(os.path.join(cache_dir, STATS, name + TALLY_SUFFIX))
        except OSError:
            pass
    fsutil.atomic_write(os.path.join(cache_dir, STATS, "zeroed"), f"{time.time()}\n".encode())


def cache_bytes(summed: dict) -> int:
    c = summed["counts"]
    return max(0, int(c.get("bytes_added", 0) - c.get("bytes_removed", 0)))


def cache_files(summed: dict) -> int:
    c = summed["counts"]
    return max(0, int(c.get("files_added", 0) - c.get("files_removed", 0)))
