"""Facts about the real tools: where they are (never ltowrap itself, even through symlinks,
always one LLVM's set), which files make up the compiler, and its version.

Runs on the compile path: standard library only.
"""

from __future__ import annotations

import os

from . import proc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# Set by the clang entry for the ld.lld entry it routes a bitcode link to: the real ld.lld.
REAL_LD = "LTOWRAP_REAL_LD"
# Every entry script carries this marker in its first lines (see is_ltowrap).
MARKER = b"ltowrap-entry"
# What the clang driver reads from the environment when it builds a link line.
DRIVER_ENV = ("PATH", "COMPILER_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "CCC_OVERRIDE_OPTIONS",
              "CLANG_NO_DEFAULT_CONFIG", "CLANG_CONFIG_FILE_SYSTEM_DIR", "CLANG_CONFIG_FILE_USER_DIR", "SDKROOT")
# The tools a PATH shim stands in for, under these names and their versioned ones (clang-22).
SHIMMED = ("clang", "clang++", "ld.lld")


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


def versioned_tools(path: str | None = None) -> list[str]:
    """The versioned names of SHIMMED tools on PATH that are not ltowrap ('clang-19', 'ld.lld-22', ...).

    Versioned names are whatever the machine has (Debian's clang-N, apt.llvm.org's, a
    hand-made clang-19.1), so `ltowrap shims` asks PATH each time rather than a list.
    """
    found = set()
    for d in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        try:
            names = os.listdir(d or ".")
        except OSError:
            continue
        for name in names:
            base, dash, version = name.rpartition("-")
            if not dash or base not in SHIMMED or not all(p.isdigit() for p in version.split(".")):
                continue
            candidate = os.path.join(d or ".", name)
            if name not in found and os.access(candidate, os.X_OK) and not is_ltowrap(os.path.realpath(candidate)):
                found.add(name)
    return sorted(found)


def clang_flavour(tool: str) -> tuple[str, str]:
    """'clang++-22' -> ('clang++', '-22'): the driver mode and the version suffix."""
    for mode in ("clang++", "clang"):
        if tool.startswith(mode):
            return mode, tool[len(mode) :]
    return tool, ""


def is_linker(tool: str) -> bool:
    return tool.startswith("ld.lld") or tool == "ld"


def find_tool(tool: str, clang: str = "", env: Mapping[str, str] = os.environ) -> list[str]:
    """argv prefix that runs the real `tool` (a clang driver name or ld.lld); `clang` is the
    configured real clang (the `clang` setting), if any."""
    if is_linker(tool):
        real = env.get(REAL_LD) or (sibling(clang, "ld.lld") if clang else "")
        return [real] if real else [find_on_path(tool)]
    if not clang:
        return [find_on_path(tool)]
    mode, _ = clang_flavour(tool)
    base = os.path.basename(clang)
    if mode != "clang++" or "clang++" in base:
        return [clang]
    # The sh entry (scripts/ltowrap-clang) maps clang++ the same way; tests/test_entry_fastpath.py checks.
    plusplus = os.path.join(os.path.dirname(clang), base.replace("clang", "clang++", 1))
    if "clang" in base and os.path.isfile(plusplus) and os.access(plusplus, os.X_OK):
        return [plusplus]
    return [clang, "--driver-mode=g++"]


def sibling(tool_path: str, name: str) -> str:
    """A tool from the same LLVM installation as `tool_path` (Debian: /usr/lib/llvm-N/bin)."""
    return os.path.join(os.path.dirname(os.path.realpath(tool_path)), name)


def find_backend_clang(real_ld: str, configured: str = "") -> str | None:
    """The clang that compiles backends: the configured one, else the one beside ld.lld (None if not runnable)."""
    clang = configured or sibling(real_ld, "clang")
    return clang if os.access(clang, os.X_OK) else None


def backend_clang(real_ld: str, configured: str = "") -> str:
    """find_backend_clang, or Unsupported(NO_BACKEND_COMPILER)."""
    clang = find_backend_clang(real_ld, configured)
    if clang is None:
        from .errors import Reason, Unsupported

        raise Unsupported(Reason.NO_BACKEND_COMPILER, f"no clang beside {real_ld}")
    return clang


def compiler_files(clang: str) -> list[str]:
    """The files whose change changes the compiler: the driver and the LLVM libraries beside it."""
    real = os.path.realpath(clang)
    libdir = os.path.join(os.path.dirname(os.path.dirname(real)), "lib")
    try:
        libs = sorted(n for n in os.listdir(libdir) if n.startswith(("libLLVM", "libclang-cpp")) and ".so" in n)
    except OSError:
        libs = []
    return [real, *(os.path.join(libdir, n) for n in libs)]


def driver_files(driver: str) -> list[str]:
    """The files and directory whose change changes the driver's link line: the compiler's
    files and its directory, where its config files live."""
    return [*compiler_files(driver), os.path.dirname(os.path.realpath(driver))]


def driver_env() -> list[tuple[str, str]]:
    """The environment variables the driver reads (DRIVER_ENV), unset ones marked as such."""
    return [(name, os.environ.get(name, "\0unset")) for name in DRIVER_ENV]


def version_text(tool: str) -> str:
    """`tool --version`, as it prints it."""
    _, out, _ = proc.capture([tool, "--version"], merge=True)
    return out.decode(errors="replace")


def llvm_major(version: str) -> int:
    """The major version in a `clang version N.x` text (0 if not found).

    The thin-link's lld is the one beside this clang (sibling), so it is the same.
    """
    marker = "clang version "
    i = version.find(marker)
    digits = version[i + len(marker) :].split(".", 1)[0] if i >= 0 else ""
    return int(digits) if digits.isdigit() else 0
