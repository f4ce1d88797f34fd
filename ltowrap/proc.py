"""Running tools ltowrap needs for itself; their failures carry the argv and output."""

from __future__ import annotations

import os
import subprocess

from .errors import ToolFailed
from .toolchain import GUARD


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env[GUARD] = "1"
    return env


def run(argv: list[str], cwd: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run to completion with output captured; ToolFailed on a non-zero exit."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=tool_env())
    except OSError as e:
        raise ToolFailed(argv, 127, f"cannot run {argv[0]}: {e.strerror}") from e
    if done.returncode != 0:
        raise ToolFailed(argv, done.returncode, done.stdout.decode("utf-8", "replace"))
    return done
