"""Counters, gathered in memory during one invocation and added once to a shard file.

Like ccache: each process adds its counts to one of SHARDS files (chosen by pid) under
an flock, with an atomic rewrite, so concurrent builds lose no update and never
contend on one file. `ltowrap stats` sums the shards.

A shard is text, one counter a line: `count NAME VALUE` or `reason KEY VALUE`. A restored
link counts its hit here, so this module imports nothing costly: no json (7 ms with the
`re` it loads), no dataclasses. Shards that ltowrap 0.x wrote as JSON are still read.
"""

from __future__ import annotations

import os
import time

from . import fsutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .errors import Reason

SHARDS = 16
STATS_DIR = "stats"

# Zeroable counters: name -> description (shown by `ltowrap stats` and `stats --help`).
COUNTERS: dict[str, str] = {
    "links_distributed": "links done as distributed ThinLTO",
    "links_passthrough": "links with no bitcode input, run unchanged",
    "links_fallback": "links ltowrap could not distribute, run unchanged (by reason below)",
    "backend_hits": "backend compiles served from the cache",
    "backend_misses": "backend compiles run (and stored)",
    "backend_failures": "backend compiles that failed or wrote an empty object",
    "backend_waits": "backends another ltowrap process was already making: waited for, not compiled twice",
    "thinlink_hits": "thin-links skipped: inputs unchanged since a cached thin-link",
    "thinlink_misses": "thin-links run",
    "thinlink_waits": "thin-links another ltowrap process was already running: waited for, not run twice",
    "link_hits": "whole links restored by the link memo: nothing they read had changed",
    "link_misses": "memoisable links the link memo did not have (linked, then stored)",
    "link_unmemoised": "links not memoised: they write a file the memo does not model, or an input changed while they ran",
    "driver_line_hits": "driver links whose link line (clang -###) came from the cache",
    "driver_line_misses": "driver links whose link line was asked of clang -### (and stored)",
    "distributor_runs": "job files run for lld's integrated DTLTO (ltowrap-distributor)",
    "remote_hits": "backend objects served by the remote action cache",
    "remote_misses": "backend compiles the remote action cache did not have",
    "remote_executed": "backend compiles run on remote workers",
    "remote_local": "execute mode: backend compiles the action cache lacked that ran here, beside the workers",
    "remote_raced": "execute mode: jobs run here and on a worker at once (a straggler); the first result won, the other was cancelled",
    "remote_errors": "backend compiles the remote could not serve (down, timeout, failed or rejected), run locally",
    "remote_uploads": "locally compiled objects published to the remote action cache",
    "remote_upload_errors": "objects that could not be published",
    "remote_retries": "remote requests asked again after the server said not now (busy, unavailable, aborted)",
    "backend_uncached": "backend compiles not cached: what they read cannot be told (LTOWRAP_LOG says why)",
    "backend_options_dropped": "backends whose recorded options held one their clang rejects (a module of another LLVM release): left out",
    "verify_checks": "cache hits checked by doing the work again (the verify setting)",
    "verify_mismatches": "checked hits whose bytes differed from the work done again: the fresh result was used and stored",
    "bad_entries": "cache entries that failed verification (removed and rebuilt)",
    "cache_write_errors": "entries that could not be stored (disk full, read-only cache)",
    "cleanups": "size-limit cleanups run",
    "files_evicted": "files removed by cleanups",
}
FLOAT_COUNTERS: dict[str, str] = {
    "cpu_saved_seconds": "backend compile time saved by cache hits (seconds, as first measured)",
}
# Not zeroed by `stats --zero`: they track what is on disk.
SIZE_COUNTERS = ("bytes_added", "files_added", "bytes_removed", "files_removed")


class Stats:
    """One invocation's counts, added to a shard once (flush)."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.reasons: dict[str, int] = {}

    def add(self, name: str, n: float = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def fallback(self, reason: Reason) -> None:
        """Count a fallback under its reason's stable key."""
        self.add("links_fallback")
        self.reasons[reason.value] = self.reasons.get(reason.value, 0) + 1

    def empty(self) -> bool:
        return not self.counts and not self.reasons


def reason_text(key: str) -> str:
    """What a fallback reason's key means (a key from an older ltowrap is shown as it is)."""
    from .errors import Reason

    try:
        return Reason(key).text
    except ValueError:
        return key


def _shard_path(cache_dir: str, pid: int) -> str:
    return os.path.join(cache_dir, STATS_DIR, str(pid % SHARDS))


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
        data = _read(os.path.join(cache_dir, STATS_DIR, str(i)))
        for k, v in data.get("counts", {}).items():
            counts[k] = counts.get(k, 0) + v
        for k, v in data.get("reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    zeroed: float | None = None
    try:
        text = fsutil.read_nofollow(os.path.join(cache_dir, STATS_DIR, "zeroed")).decode()
        if text.startswith("{"):  # written by an older ltowrap: {"at": seconds}
            text = text.partition(":")[2].strip(" }\n")
        zeroed = float(text)
    except (OSError, ValueError):
        pass
    return {"counts": counts, "reasons": reasons, "zeroed_at": zeroed}


def zero(cache_dir: str, keep_size: bool = True) -> None:
    """Reset the counters; the size counters survive unless the cache itself was emptied."""
    fsutil.make_dirs(os.path.join(cache_dir, STATS_DIR))
    for i in range(SHARDS):
        path = os.path.join(cache_dir, STATS_DIR, str(i))
        with fsutil.locked(path + ".lock"):
            data = _read(path)
            kept = {k: v for k, v in data.get("counts", {}).items() if keep_size and k in SIZE_COUNTERS}
            fsutil.atomic_write(path, _text(kept, {}))
    fsutil.atomic_write(os.path.join(cache_dir, STATS_DIR, "zeroed"), f"{time.time()}\n".encode())


def cache_bytes(summed: dict) -> int:
    c = summed["counts"]
    return max(0, int(c.get("bytes_added", 0) - c.get("bytes_removed", 0)))


def cache_files(summed: dict) -> int:
    c = summed["counts"]
    return max(0, int(c.get("files_added", 0) - c.get("files_removed", 0)))
