"""Debian's Linux kernel, configured small, built with Kbuild unchanged (issue 41).

`tree(dest)` unpacks Debian bookworm's linux source (integration/debsrc.py's cache) at `dest`.
`configure(tree, build, lto)` writes `build/.config`: x86's tinyconfig plus CONFIG_FRAGMENT,
then olddefconfig. `make(tree, build, env)` runs `make -j2 LLVM=-<version> O=<build> vmlinux`.

The configuration builds vmlinux in minutes on 2 cores and still has what a distributed link
of the kernel must get right:
- 64BIT: x86's tinyconfig alone is a 32-bit kernel; the RFC's figures are x86_64's.
- LTO_CLANG_THIN: vmlinux.o is then one relocatable ThinLTO link (`ld.lld -r`) of every
  module in vmlinux.a, a thin archive of thin archives (built-in.a), with Kbuild's
  `-mllvm -import-instr-limit=5` and an initcall-ordering script (`-T .tmp_initcalls.lds`)
  on the line.
- UNWINDER_ORC (tinyconfig has UNWINDER_GUESS): it selects OBJTOOL, and with LTO objtool
  reads vmlinux.o, the native code the backends wrote, and writes the ORC tables into it.
- PRINTK: the kernel's printk and its format sections, which most of the code calls.

The version is pinned: the same text every run, and the newest security upload can be gone
from a mirror before its index is.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from . import debsrc

VERSION = "6.1.176-1"  # bookworm's point release (bookworm/main)
LLVM = "19"  # clang/lld of this version build Linux 6.1 with LTO_CLANG_THIN
JOBS = 2
CONFIG_FRAGMENT = {"64BIT": "y", "LTO_CLANG_THIN": "y", "LTO_NONE": "n", "UNWINDER_ORC": "y",
                   "UNWINDER_GUESS": "n", "UNWINDER_FRAME_POINTER": "n", "PRINTK": "y"}
NO_LTO = {"LTO_CLANG_THIN": "n", "LTO_NONE": "y"}


def tree(dest: Path) -> Path:
    """A fresh, patched tree at `dest` (which must not exist yet)."""
    return debsrc.fetch("linux", version=VERSION).unpack(dest)


def make_argv(build: Path, *targets: str) -> list[str]:
    return ["make", f"-j{JOBS}", f"LLVM=-{LLVM}", f"O={build}", *targets]


def configure(tree: Path, build: Path, lto: bool = True, env: dict[str, str] | None = None) -> dict[str, str]:
    """Write build/.config; returns the configuration's settings of CONFIG_FRAGMENT (as .config has them)."""
    build.mkdir(parents=True, exist_ok=True)
    env = env or dict(os.environ)
    subprocess.run(make_argv(build, "tinyconfig"), cwd=tree, env=env, check=True, capture_output=True)
    wanted = CONFIG_FRAGMENT | ({} if lto else NO_LTO)
    args = []
    for name, value in wanted.items():
        args += ["-e" if value == "y" else "-d", name]
    subprocess.run([str(tree / "scripts/config"), "--file", str(build / ".config"), *args], check=True)
    subprocess.run(make_argv(build, "olddefconfig"), cwd=tree, env=env, check=True, capture_output=True)
    got = settings(build)
    missing = {k: v for k, v in wanted.items() if got.get(k, "n") != v}
    if missing:
        raise RuntimeError(f"{build}/.config does not have {missing} after olddefconfig (Kconfig dependencies)")
    return got


def settings(build: Path) -> dict[str, str]:
    """CONFIG_X -> value ('n' for '# CONFIG_X is not set') from build/.config."""
    out = {}
    for line in (build / ".config").read_text().splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            k, v = line[len("CONFIG_"):].split("=", 1)
            out[k] = v
        elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
            out[line[len("# CONFIG_"):-len(" is not set")]] = "n"
    return out


def vmlinux_o_link(build: Path) -> list[str]:
    """Kbuild's own vmlinux.o link line (from .vmlinux.o.cmd), without the objtool step after it."""
    text = (build / ".vmlinux.o.cmd").read_text().splitlines()[0]
    line = text.split(":=", 1)[1].split(";", 1)[0]
    return line.split()


def is_vmlinux_o_link(argv: list[str]) -> bool:
    """Is this linker command line vmlinux.o's link (the final link of vmlinux reads vmlinux.o)?"""
    return "-r" in argv and any(a == "-o" and b == "vmlinux.o" for a, b in zip(argv, argv[1:]))
