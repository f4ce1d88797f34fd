"""What a backend compile reads besides its module, its index shard and the modules it imports.

A backend key covers these too (cachekey.backend_key), or the compile is not cached:
- files its options name: any argument, or the value after an option's last `=`, that
  names an existing file (the sample profile, `-fbasic-block-sections=list=`, `-mllvm`
  options that read a file), keyed by contents. Checking every argument rather than a
  list of known options means an option we have never heard of is covered too; at worst
  a file that happens to share a value's name costs a hit;
- the host CPU, for `-march=native` / `-mcpu=native` / `-mtune=native`: what clang makes
  of `native` is this machine's CPU (/proc/cpuinfo's identity and feature flags);
- files the inline assembly of the module, or of a module it imports functions from,
  reads (`.incbin`, `.include` and what the included text reads: asmreads.py), resolved
  as the assembler resolves them, against the compile's working directory (the link's);
- what cannot be told is a reason instead (`unknown`): an external assembler
  (-fno-integrated-as runs whatever `as` is found), directories given to the assembler
  (-Wa,-I), inline assembly that builds a path we cannot read with certainty, or a
  module whose assembly cannot be read. Such a compile is not cached and its link is not
  memoised; never a guess.
A compile with any side input runs locally: a remote worker has neither the files nor
this machine's CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .. import cachekey

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..formats.modulefacts import Facts

NATIVE = "=native"
EXTERNAL_ASSEMBLER = ("-fno-integrated-as", "-no-integrated-as")
# cc1 options (each value behind -Xclang) that name a file the compile writes, not one it
# reads (a .dwo left by the last link must not key the next one), or a value that is no file.
WRITTEN = ("-split-dwarf-file", "-split-dwarf-output", "-opt-record-file", "-opt-record-format", "-opt-record-passes")
# Options that give the assembler directories to search for `.include` and `.incbin` files.
ASSEMBLER_DIRS = ("-Wa,", "-Xassembler")


@dataclass(frozen=True)
class SideInputs:
    """What a backend compile depends on beyond its module, shard and options: the files it
    reads, the host CPU, or why that cannot be told."""

    files: tuple[str, ...] = ()  # files the compile reads, as it names them (relative to its working directory)
    host: str = ""  # this machine's CPU, when an option leaves the CPU to it
    unknown: str = ""  # why what the compile reads cannot be told: it is not cached

    def __bool__(self) -> bool:
        return bool(self.files or self.host or self.unknown)

    def fields(self, digest: Callable[[str], str] = cachekey.file_digest) -> list[tuple[str, str]]:
        """What goes into the backend key: each file with the digest of its contents (`digest`:
        cachekey.file_digest, or a link's memo of it), the host CPU."""
        out = [("reads", f"{p}\0{digest(p)}") for p in self.files]
        if self.host:
            out.append(("host", self.host))
        return out

    def __or__(self, other: SideInputs) -> SideInputs:
        if not other:
            return self
        return SideInputs(tuple(dict.fromkeys(self.files + other.files)), self.host or other.host,
                          self.unknown or other.unknown)


# What a module without inline assembly adds.
NONE = SideInputs()


def of_argv(argv: list[str]) -> SideInputs:
    """What the backend argv (module, shard and output as placeholders) makes the compile read."""
    files: list[str] = []
    host = ""
    for i, arg in enumerate(argv[1:], 1):
        if i >= 2 and argv[i - 2] in WRITTEN and argv[i - 1] == "-Xclang":
            continue
        if arg in EXTERNAL_ASSEMBLER:
            return SideInputs(unknown=f"an external assembler ({arg})")
        if arg.startswith(ASSEMBLER_DIRS) or (arg.startswith("-I") and "-Xclang" in argv):
            return SideInputs(unknown=f"options for the assembler ({arg}): where it finds files is not followed")
        if arg.endswith(NATIVE):
            host = host_cpu()
        value = arg.rpartition("=")[2] if arg.startswith("-") else arg
        if value and not value.startswith("<") and value not in files and os.path.isfile(value):
            files.append(value)
    return SideInputs(tuple(files), host)


def host_cpu() -> str:
    """The digest of what identifies this machine's CPU to the compiler (vendor, family,
    model, stepping and feature flags of /proc/cpuinfo's first processor)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            first = f.read().split("\n\n", 1)[0]
    except OSError:
        return "unknown cpu"
    keep = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features", "CPU implementer",
            "CPU architecture", "CPU variant", "CPU part", "CPU revision")
    lines = [line for line in first.splitlines() if line.split(":", 1)[0].strip() in keep]
    return cachekey.digest_bytes("\n".join(lines).encode())


def of_module(path: str, facts: Callable[[str], Facts]) -> tuple[SideInputs, bool]:
    """What the inline assembly of a module makes its backend read (asmreads.py), and whether
    that was worked out from files besides the module (an `.include`d text, which can name
    others). The assembly texts are read from its bitcode once per module version
    (cachekey.ModuleDigests.facts); an answer that followed no `.include` depends on them
    alone, and one that did is worked out again on every use."""
    try:
        found = facts(path)
    except OSError as e:
        return SideInputs(unknown=f"cannot read the inline assembly of {path}: {e.strerror}"), True
    if found.problem:
        return SideInputs(unknown=f"cannot read the inline assembly of {path}: {found.problem}"), False
    asm = found.asm
    if not asm.module and not asm.templates:
        return NONE, False
    from ..formats import asmreads

    loaded: list[str] = []

    def load(included: str) -> str | None:
        loaded.append(included)
        return _text(included)

    reads = asmreads.reads(asm, load)
    return SideInputs(reads.files, unknown=reads.unknown), bool(loaded)


def _text(path: str) -> str | None:
    """An `.include`d file's text, as the backend's assembler finds it: relative to its working directory."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return None
