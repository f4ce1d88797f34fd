"""A backend job -> its clang command line: the link's codegen options, then the module's own.

Order matters (clang takes the last of conflicting flags):
  1. what in-process lld would use: -O from --lto-O / -plugin-opt=O (default 2), the CPU
     from -plugin-opt=mcpu=, function and data sections (lld always sets both);
  2. the options the module was compiled with (records.py), unless backend_opts = link:
     a file built -O1 or -fno-unroll-loops keeps that;
  3. what the link forces on every module: the relocation model of the output (PIC for
     -shared, PIE for -pie, static otherwise; left to the module for -r), target
     features, -mllvm options, the sample profile.
"""

from __future__ import annotations

import os

from dataclasses import dataclass

from .cmdline import LinkCommand
from .plan import Module

BACKEND_FAILURE = "Error running ThinLTO backend"


def link_options(cmd: LinkCommand) -> list[str]:
    opts = [f"-O{cmd.lto.opt_level or '2'}"]
    if cmd.lto.cpu:
        x86 = os.uname().machine in ("x86_64", "i386", "i686", "AMD64")
        opts.append(f"-march={cmd.lto.cpu}" if x86 else f"-mcpu={cmd.lto.cpu}")
    opts += ["-ffunction-sections", "-fdata-sections"]
    return opts


def forced_options(cmd: LinkCommand) -> list[str]:
    opts: list[str] = []
    if not cmd.relocatable:
        opts.append("-fPIC" if cmd.shared else "-fPIE" if cmd.pie else "-fno-pic")
    for attr in cmd.lto.attrs:
        opts += ["-Xclang", "-target-feature", "-Xclang", attr]
    for m in cmd.lto.mllvm:
        opts += ["-mllvm", m]
    if cmd.lto.sample_profile:
        opts.append(f"-fprofile-sample-use={os.path.abspath(cmd.lto.sample_profile)}")
    return opts


@dataclass(frozen=True)
class Job:
    """One backend compile: a module, its index shard, the modules it imports, its output."""

    module: Module
    shard: bytes
    shard_path: str
    imports: tuple[str, ...]
    output: str  # native object to write
    shard_identity: str | None = None  # bitcode.shard_identity, when already known


@dataclass(frozen=True)
class LinkBackend:
    """Backend command lines for ltowrap's own distributed link."""

    clang: str
    command: LinkCommand

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None) -> list[str]:
        return [
            self.clang, "-c", "-x", "ir", module, f"-fthinlto-index={shard}", "-o", output,
            "-Wno-unused-command-line-argument",
            *link_options(self.command),
            *(recorded or []),
            *forced_options(self.command),
        ]

    def read_files(self) -> list[str]:
        """Files the compile reads besides the module, its shard and its imports."""
        return [self.command.lto.sample_profile] if self.command.lto.sample_profile else []
