"""The link log's file: JSON lines appended whole, the file kept bounded.

Every link is logged by default (config: `log`, a file in the cache directory), so that
`ltowrap report`, `trace` and `verify` work on the last build as `ccache -s` does. The file
is kept to BOUND bytes: past it, it becomes `<path>.1` (the one before is dropped) and a new
one starts; `lines` reads both, oldest first.

A restored link writes its line from here, without the json module (whose import, with the
re module, would cost a relink more than the link itself): `encode` uses the same C
escaping json does (`_json.encode_basestring_ascii`).
"""

from __future__ import annotations

import fcntl
import os

from _json import encode_basestring_ascii

BOUND = 16 << 20  # bytes of log kept before it is rotated


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


def restored(path: str, tool: str, argv: list[str], start: float, end: float, span: str) -> None:
    """The line of a link the memo's direct lane restored, as log.Record writes it
    (tests/test_linkmemo.py holds the two equal), without json or dataclasses."""
    line = {"argv": argv, "backend_compiles": 0, "backend_hits": 0, "backends": [], "cwd": os.getcwd(),
            "decision": "restored", "end": end, "modules": 0, "phases": {}, "pid": os.getpid(),
            "spans": [[span, round(start, 4), round(end, 4)]], "start": start, "thinlink_cached": False, "tool": tool}
    append(path, (encode(line) + "\n").encode())
