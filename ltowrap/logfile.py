"""The link log's file: JSON lines appended whole, the file kept bounded; and the log's names.

Every link is logged by default (config: `log`, a file in the cache directory), so that
`ltowrap report`, `trace` and `verify` work on the last build as `ccache -s` does. The file
is kept to BOUND bytes: past it, it becomes `<path>.1` (the one before is dropped) and a new
one starts; `lines` reads both, oldest first.

A restored link writes its line from here, without the json module (whose import, with the
re module, would cost a relink more than the link itself): `encode` uses the same C
escaping json does (`_json.encode_basestring_ascii`). For that line, the log's names
(Decision, Phase, Source) are defined here rather than in log.py, which imports both: every
other module names them as log.Decision, log.Phase and log.Source.
"""

from __future__ import annotations

import fcntl
import os

from _json import encode_basestring_ascii

TYPE_CHECKING = False
if TYPE_CHECKING:  # Final: mypy refuses an assignment to a name (typing costs a relink its import)
    from typing import Final

BOUND = 16 << 20  # bytes of log kept before it is rotated


class Decision:
    """What a record's `decision` says the invocation did."""

    DISTRIBUTED: Final = "distributed"
    RESTORED: Final = "restored"  # by the link memo: its direct lane, or its lookup
    PASSTHROUGH: Final = "passthrough"  # no bitcode, or not a link ltowrap distributes: run unchanged
    FALLBACK: Final = "fallback"  # the original command ran instead; `reason` says why
    INTERRUPTED: Final = "interrupted"  # a signal stopped it (`reason`: its name)
    FAILED: Final = "failed"  # the distributor's, until its run is done
    # A small link (small_link): lld's in-process ThinLTO. scripts/ltowrap-clang writes this
    # name too, in the line it writes itself (tests/test_small_link.py holds the two equal).
    IN_PROCESS: Final = "in-process"


class Phase:
    """The names of a link record's `spans` ([phase, start, end]), in the order a link runs them.
    KEYS and REMOTE_LOOKUP are the executor's, inside BACKENDS."""

    DIRECT_LANE: Final = "direct lane"
    DRIVER_LINE: Final = "driver line"
    MEMO_LOOKUP: Final = "memo lookup"
    PLAN: Final = "plan"
    THIN_LINK: Final = "thin-link"
    KEYS: Final = "keys and cache lookups"
    REMOTE_LOOKUP: Final = "remote lookup"
    BACKENDS: Final = "backends"
    FINAL_LINK: Final = "final link"
    MEMO_STORE: Final = "memo store"
    INNER: Final = (KEYS, REMOTE_LOOKUP)


class Source:
    """Where a backend job's object came from (a Backend's `source`)."""

    COMPILED: Final = "compiled"  # compiled here
    CACHED: Final = "cache"  # the local cache
    REMOTE_CACHED: Final = "remote cache"  # the remote service's action cache
    REMOTE_EXECUTED: Final = "remote"  # compiled on a remote worker


def append(path: str, line: bytes, bound: int = BOUND) -> None:
    """Append one line (O_APPEND, one write, under flock); rotate the file once it passes `bound`.
    A log that cannot be written is skipped: it never fails a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
        if os.fstat(fd).st_size > bound:  # under the lock: one writer rotates, later ones open the new file
            os.replace(path, path + ".1")
    except OSError:
        pass
    finally:
        os.close(fd)


def lines(path: str) -> list[str]:
    """The log's lines, oldest first: the rotated file's, then the current one's."""
    out: list[str] = []
    for p in (path + ".1", path):
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                out += f.readlines()
        except OSError:
            continue
    return out


def exists(path: str) -> bool:
    return bool(path) and (os.path.exists(path) or os.path.exists(path + ".1"))


def encode(value: object) -> str:
    """JSON text of plain data (None, bool, int, float, str, list, tuple, dict with str keys)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{encode_basestring_ascii(k)}: {encode(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not plain data: {type(value).__name__}")


def restored(path: str, tool: str, argv: list[str], start: float, end: float) -> None:
    """The line of a link the memo's direct lane restored, as log.Record writes it
    (tests/test_linkmemo.py holds the two equal), without json or dataclasses."""
    line = {"argv": argv, "backend_compiles": 0, "backend_hits": 0, "backends": [], "cwd": os.getcwd(),
            "decision": Decision.RESTORED, "end": end, "modules": 0, "pid": os.getpid(),
            "spans": [[Phase.DIRECT_LANE, round(start, 4), round(end, 4)]], "start": start, "thinlink_cached": False,
            "tool": tool}
    append(path, (encode(line) + "\n").encode())
