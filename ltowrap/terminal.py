"""What lld's and the clang driver's messages look like on a terminal: their colours.

In-process, lld writes to the build's stderr and colours the kind of each message when that
is a terminal (`--color-diagnostics`, `=auto` by default). ltowrap runs the final link with
its output captured, and prints the backends' diagnostics itself, so it colours the lines the
same way when they reach a terminal: the same escape sequences, on the same words. What the
caches keep is never coloured. A restored link imports this module: no re, nothing costly.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

RESET = "\033[0m"
LLD_KINDS = {"warning": "\033[0;35m", "error": "\033[0;31m"}  # raw_ostream's MAGENTA and RED, not bold


def lld_wants(args: Iterable[str], fd: int = 2) -> bool:
    """Would lld colour its messages: the last --color-diagnostics[=always|never|auto] or
    --no-color-diagnostics of its command line, `auto` (a terminal on `fd`) without one."""
    choice = "auto"
    for a in args:
        name = a.lstrip("-")
        if name == "no-color-diagnostics":
            choice = "never"
        elif name == "color-diagnostics":
            choice = "always"
        elif name.startswith("color-diagnostics="):
            choice = name.partition("=")[2]
    return choice == "always" or (choice == "auto" and os.isatty(fd))


def lld(text: bytes, log_name: str) -> bytes:
    """lld's messages with their kinds coloured as lld colours them (`ld.lld: warning: ` ->
    `ld.lld: ESC[0;35mwarning: ESC[0m`): the lines that start a message, none twice."""
    if not text:
        return text
    lines = text.split(b"\n")
    for kind, colour in LLD_KINDS.items():
        plain = f"{log_name}: {kind}: ".encode("utf-8", "surrogateescape")
        coloured = f"{log_name}: {colour}{kind}: {RESET}".encode("utf-8", "surrogateescape")
        lines = [coloured + line[len(plain):] if line.startswith(plain) else line for line in lines]
    return b"\n".join(lines)


def driver_wants(args: Iterable[str], fd: int = 2) -> bool:
    """Would the clang driver colour its messages: the last -f[no-]color-diagnostics, else a terminal."""
    choice = None
    for a in args:
        if a in ("-fcolor-diagnostics", "-fdiagnostics-color", "-fdiagnostics-color=always"):
            choice = True
        elif a in ("-fno-color-diagnostics", "-fno-diagnostics-color", "-fdiagnostics-color=never"):
            choice = False
        elif a == "-fdiagnostics-color=auto":
            choice = None
    return os.isatty(fd) if choice is None else choice


def driver_error(name: str, message: str, colour: bool) -> str:
    """A clang driver's `error:` line, as it prints it (bold, the kind bold red, on a terminal)."""
    if not colour:
        return f"{name}: error: {message}"
    return f"{name}: \033[0;1;31merror: {RESET}\033[1m{message}{RESET}"
