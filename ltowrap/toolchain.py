"""Find the real tools: never ltowrap itself, even through symlinks, and always one LLVM's set.

Runs on the compile path: standard library only.
"""

from __future__ import annotations

import os

# A real tool that ltowrap runs gets this variable, so that a shim it reaches (a clang
# that finds our ld.lld on PATH, a second ltowrap install) passes straight through.
GUARD = "LTOWRAP_ACTIVE"
# Set by the clang entry for the ld.lld entry it routes a bitcode link to.
REAL_LD = "LTOWRAP_REAL_LD"
MARKER = b"ltowrap-entry"


class ToolNotFound(Exception):
    pass


def is_ltowrap(path: str) -> bool:
    """Is this file one of our entry scripts (whatever it is called)?"""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith(b"#!") and MARKER in head


def find_on_path(name: str, path: str | None = None) -> str:
    """The first executable `name` on PATH that is not ltowrap."""
    for d in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            if not is_ltowrap(os.path.realpath(candidate)):
                return candidate
    raise ToolNotFound(f"no {name} on PATH other than ltowrap")


def clang_flavour(tool: str) -> tuple[str, str]:
    """'clang++-22' -> ('clang++', '-22'): the driver mode and the version suffix."""
    for mode in ("clang++", "clang"):
        if tool.startswith(mode):
            return mode, tool[len(mode) :]
    return tool, ""


def find_tool(tool: str, env: dict[str, str] | os._Environ[str], configured_clang: str = "") -> list[str]:
    """argv prefix that runs the real `tool` (a clang driver name or ld.lld)."""
    clang = env.get("LTOWRAP_CLANG") or configured_clang
    if tool.startswith("ld.lld") or tool == "ld":
        real = env.get(REAL_LD) or (sibling(clang, "ld.lld") if clang else "")
        return [real] if real else [find_on_path(tool)]
    if not clang:
        return [find_on_path(tool)]
    mode, _ = clang_flavour(tool)
    if mode == "clang++":
        base = os.path.basename(clang)
        plusplus = os.path.join(os.path.dirname(clang), base.replace("clang", "clang++", 1))
        if "clang++" not in base and os.access(plusplus, os.X_OK):
            return [plusplus]
        if "clang++" not in base:
            return [clang, "--driver-mode=g++"]
    return [clang]


def sibling(tool_path: str, name: str) -> str:
    """A tool from the same LLVM installation as `tool_path` (Debian: /usr/lib/llvm-N/bin)."""
    return os.path.join(os.path.dirname(os.path.realpath(tool_path)), name)
