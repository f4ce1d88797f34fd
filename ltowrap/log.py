"""LTOWRAP_LOG: one JSON line per invocation, appended whole (O_APPEND, one write, under flock)."""

from __future__ import annotations

import fcntl
import json
import os


def append(path: str, record: dict) -> None:
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)
