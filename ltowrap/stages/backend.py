"""A backend job -> its clang command line: the link's codegen options, then the module's own.

Order matters (clang takes the last of conflicting flags):
  1. what in-process lld would use: -O from --lto-O / -plugin-opt=O (default 2), the CPU
     from -plugin-opt=mcpu=, function and data sections (lld always sets both);
  2. the options the module was compiled with (optrecords.py), unless backend_opts = link:
     a file built -O1 or -fno-unroll-loops keeps that. A module without a record gets
     what in-process ThinLTO takes from the module itself (module_options): its own
     triple and, where the link leaves the relocation model to the module (-r), the
     one its "PIC Level"/"PIE Level" flags say; clang reads the code model and the
     other codegen flags from the module as lld does;
  3. what the link forces on every module: the relocation model of the output (PIC for
     -shared, PIE for -pie, static otherwise; left to the module for -r), target
     features, -mllvm options, the sample profile.
"""

from __future__ import annotations

import os

from dataclasses import dataclass, replace
from functools import cached_property

from ..errors import Reason, Unsupported
from ..formats import irmodule
from ..formats.bitcode import BadBitcode
from ..formats.irmodule import ModuleFacts
from ..fsutil import read_bytes
from ..linkline.cmdline import LinkCommand
from ..magic import ELF
from .plan import Module

BACKEND_FAILURE = "Error running ThinLTO backend"


def unusable(rc: int, obj: bytes, printed: str) -> str:
    """Why a backend compile's result cannot be used ('' if it can): clang can exit 0 after a
    fatal ThinLTO error (LLVM issue 75441) and leave an empty object, so its exit code, the
    object's bytes and what it printed all have a say. For a compile here and a remote one alike."""
    if rc != 0:
        return f"exited {rc}"
    if not obj:
        return "wrote an empty object"
    if not obj.startswith(ELF):
        return "wrote something other than an object file"
    if BACKEND_FAILURE in printed:
        return "reported a backend error"
    return ""


# Targets whose clang driver reads the CPU from -march= (clang's getCPUName: x86, SystemZ,
# MIPS, LoongArch), as an lld emulation or a triple's architecture spells them; the others
# (AArch64, ARM, RISC-V, PowerPC, ...) read it from -mcpu=, and on AArch64 and RISC-V
# -march= names an ISA, not a CPU.
MARCH_TARGETS = ("x86_64", "i386", "i486", "i586", "i686", "iamcu", "amd64", "s390", "mip", "loongarch")


def cpu_option(cpu: str, target: str) -> str:
    """The backend's spelling of the link's CPU (-plugin-opt=mcpu=) for `target`: the link's
    emulation (-m, which the clang driver always passes). A link without one (ld.lld run by
    hand) takes its target from its first input, which is not read for this: this machine's
    architecture stands in, as it did for every link before."""
    target = (target or os.uname().machine).lower()
    return f"-march={cpu}" if any(t in target for t in MARCH_TARGETS) else f"-mcpu={cpu}"


def link_sections(cmd: LinkCommand, sections: str) -> bool:
    """Does every backend get function and data sections? In-process lld gives every backend
    both; with `sections = module` each module keeps what it was compiled with, but a link that
    orders sections (--symbol-ordering-file, ...) still gets them, since it orders nothing
    without them."""
    return sections == "link" or cmd.orders_sections


def link_options(cmd: LinkCommand, sections: str = "link") -> list[str]:
    """The link's codegen options: -O, the CPU, and the sections link_sections says."""
    opts = [f"-O{cmd.lto.opt_level or '2'}"]
    if cmd.lto.cpu:
        opts.append(cpu_option(cmd.lto.cpu, cmd.emulation))
    if link_sections(cmd, sections):
        opts += ["-ffunction-sections", "-fdata-sections"]
    return opts


# A module's own options that would take back the sections the link gives (they come after
# link_options on the command line, and clang takes the last): in-process lld sets both in its
# target options whatever the module was compiled with (Kbuild compiles init/ with both).
UNSECTIONED = frozenset(["-fno-function-sections", "-fno-data-sections"])


def module_own(recorded: list[str], sectioned: bool) -> list[str]:
    """A module's recorded options, less those that undo the link's sections when it gives them."""
    return [o for o in recorded if o not in UNSECTIONED] if sectioned else recorded


# The link's remark options (-plugin-opt=-pass-remarks=inline, as clang's -Rpass=inline passes
# them) -> the backend clang's spelling: a compile of IR prints the remarks its own -R options
# select (lld prints those the LLVM options select).
REMARKS = {"-pass-remarks": "-Rpass", "-pass-remarks-missed": "-Rpass-missed",
           "-pass-remarks-analysis": "-Rpass-analysis"}


# Code generator flags the clang driver passes to a link for its own options (-ggdb,
# -femulated-tls, ...: -plugin-opt=-debugger-tune=gdb), which lld reads as LLVM options
# (llc's flags, codegen::RegisterCodeGenFlags) but clang does not take as -mllvm: each as
# the backend clang spells it, by the option's name; () drops it (-function-sections=,
# -data-sections=: lld sets both on every LTO backend after reading its flags;
# -crash-diagnostics-dir=: where a crash report goes, not what is compiled).
CODEGEN_FLAGS: dict[str, tuple[str, ...]] = {
    "-debugger-tune": ("-Xclang", "-debugger-tuning={}"),
    "-emulated-tls": ("-femulated-tls",),
    "-stack-size-section": ("-fstack-size-section",),
    "-split-machine-functions": ("-fsplit-machine-functions",),
    "-function-sections": (),
    "-data-sections": (),
    "-crash-diagnostics-dir": (),
}


def llvm_option(option: str) -> list[str]:
    """An LLVM option of the link's (-mllvm, -plugin-opt=-X) as the backend clang takes it."""
    name, eq, value = option.partition("=")
    if name in CODEGEN_FLAGS:
        return [o.format(value) for o in CODEGEN_FLAGS[name]]
    if eq and name in REMARKS:  # clang prints the remarks its -R options ask for, not LLVM's
        return ["-mllvm", option, f"{REMARKS[name]}={value}"]
    return ["-mllvm", option]


def forced_options(cmd: LinkCommand) -> list[str]:
    opts: list[str] = []
    if not cmd.relocatable:
        opts.append("-fPIC" if cmd.shared else "-fPIE" if cmd.pie else "-fno-pic")
    for attr in cmd.lto.attrs:
        opts += ["-Xclang", "-target-feature", "-Xclang", attr]
    for m in cmd.lto.mllvm:
        opts += llvm_option(m)
    if cmd.lto.sample_profile:
        opts.append(f"-fprofile-sample-use={os.path.abspath(cmd.lto.sample_profile)}")
    return opts


def split_dwarf_options(name: str, path: str) -> list[str]:
    """A backend compile that writes its split DWARF to `path` and records `name` as the
    skeleton's DW_AT_dwo_name (and the .dwo's own), as in-process lld's dwo_dir does: clang's
    ThinLTO backend hands both to LTO's codegen. The .dwo's bytes depend on the name, not on
    the path (tests/test_split_dwarf.py)."""
    return ["-Xclang", "-split-dwarf-file", "-Xclang", name, "-Xclang", "-split-dwarf-output", "-Xclang", path]


# Architectures on which a module without a "PIC Level" flag is compiled static by
# in-process LTO (the target's default relocation model; LTOBackend leaves it open).
STATIC_BY_DEFAULT = ("x86_64", "i386", "i486", "i586", "i686", "aarch64", "arm", "thumb", "riscv")


def module_options(facts: ModuleFacts, relocation: bool) -> list[str]:
    """What in-process ThinLTO takes from a module that carries no option record.

    Its triple (clang would otherwise override it with its own default, and warn), and,
    with `relocation` (the link leaves the model to the module, as lld does for -r),
    the relocation model its flags say: LTOBackend's createTargetMachine makes it
    static without a "PIC Level" flag or at level 0, PIC otherwise; -fpie/-fPIE/-fpic/
    -fPIC give clang -x ir the same PIC model, and the level itself comes from the
    module. Unsupported if that model cannot be told.
    """
    opts = [f"--target={facts.triple}"] if facts.triple else []
    if not relocation:
        return opts
    pic, pie = facts.flag("PIC Level"), facts.flag("PIE Level")
    if pic is None and not facts.triple.startswith(STATIC_BY_DEFAULT):
        raise Unsupported(Reason.MODULE_FACTS, f"no \"PIC Level\" in a module for {facts.triple or 'no triple'}")
    if not pic:
        opts.append("-fno-pic")
    elif pie:
        opts.append("-fpie" if pie == 1 else "-fPIE")
    else:
        opts.append("-fpic" if pic == 1 else "-fPIC")
    return opts


def read_facts(module: Module, flags: bool) -> ModuleFacts | None:
    """The module's facts (its flags too, if asked), or None if its bitcode cannot be read."""
    try:
        return irmodule.read(read_bytes(module.path), flags)
    except (BadBitcode, OSError):
        return None


# What stands for the module, shard and output paths in an argv that goes into a key.
PLACEHOLDERS = ("<module>", "<shard>", "<output>")


@dataclass(frozen=True)
class Job:
    """One backend compile: a module, its index shard, the modules it imports, its output."""

    module: Module
    shard: bytes
    shard_path: str
    imports: tuple[str, ...]
    output: str  # native object to write
    shard_identity: str | None = None  # cachekey.shard_identity, when already known
    dwo: str = ""  # split DWARF: the .dwo's final name, which its skeleton unit records (split_dwarf)
    remarks: str = ""  # optimization records: the final name of the file the compile writes (split_dwarf)

    def side_outputs(self) -> tuple[tuple[str, str], ...]:
        """The files the compile writes besides its object, each (kind, final name): the kind is
        its key in the object entry's meta and its suffix beside the object (side_output)."""
        return tuple((kind, name) for kind, name in (("dwo", self.dwo), ("remarks", self.remarks)) if name)


def split_dwarf(jobs: tuple[Job, ...], regular_modules: tuple[str, ...], cmd: LinkCommand) -> list[Job]:
    """The jobs, each with the names in-process lld gives the files its task writes besides the
    object: under -plugin-opt=dwo_dir=, the .dwo (LTOBackend's codegen: `<dwo_dir>/<task>.dwo`,
    the name as given, relative names staying relative); under --opt-remarks-filename=F, the
    optimization records (LTO's setupLLVMOptimizationRemarks: `F.thin.<task>.yaml`, the only
    format ltowrap takes). ThinLTO tasks are numbered after regular LTO's (--lto-partitions, 1
    by default), in the order lld added the modules, which is the order of the thin-link's
    object list. In-process lld writes the regular-LTO code's split DWARF and records too (task
    0, and F itself), which the thin-link's cached object cannot give back: such a link falls back."""
    dwo_dir, remarks = cmd.lto.dwo_dir, cmd.lto.remarks_file
    if not dwo_dir and not remarks:
        return list(jobs)
    if regular_modules:
        raise Unsupported(Reason.UNSUPPORTED_OPTION, ("-plugin-opt=dwo_dir=" if dwo_dir else "--opt-remarks-filename")
                          + " with regular-LTO modules")
    tasks = range(cmd.lto.partitions, cmd.lto.partitions + len(jobs))
    return [replace(j, dwo=os.path.join(dwo_dir, f"{task}.dwo") if dwo_dir else "",
                    remarks=f"{remarks}.thin.{task}.yaml" if remarks else "") for task, j in zip(tasks, jobs)]


def side_output(output: str, kind: str) -> str:
    """Where a backend compile writes its side output of this kind (Job.side_outputs): beside its object."""
    return f"{output}.{kind}"


def dwo_output(output: str) -> str:
    """Where a backend compile writes its .dwo: beside its object (the name it records is Job.dwo)."""
    return side_output(output, "dwo")


def remarks_options(cmd: LinkCommand, path: str) -> list[str]:
    """A backend compile that writes its optimization records to `path`, filtered as the link
    asks: clang's ThinLTO backend hands them to LTO's, which, given no task number, writes the
    file under this very name (LTO appends `.thin.<task>.yaml` only in-process)."""
    opts = ["-Xclang", "-opt-record-file", "-Xclang", path, "-Xclang", "-opt-record-format", "-Xclang", "yaml"]
    if cmd.lto.remarks_passes:
        opts += ["-Xclang", "-opt-record-passes", "-Xclang", cmd.lto.remarks_passes]
    return opts


@dataclass(frozen=True)
class LinkBackend:
    """Backend command lines for ltowrap's own distributed link."""

    clang: str
    command: LinkCommand
    sections: str = "link"  # config.Settings.sections

    @cached_property
    def _link_parts(self) -> tuple[tuple[str, ...], bool, tuple[str, ...]]:
        """What every backend command line of the link shares: link_options, link_sections and
        forced_options of its command (made once a link: a link makes two lines a module)."""
        cmd = self.command
        return tuple(link_options(cmd, self.sections)), link_sections(cmd, self.sections), tuple(forced_options(cmd))

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None, dwo: str = "") -> list[str]:
        link, sectioned, forced = self._link_parts
        return [
            self.clang, "-c", "-x", "ir", module, f"-fthinlto-index={shard}", "-o", output,
            "-Wno-unused-command-line-argument",
            *link,
            *module_own(recorded or [], sectioned),
            *forced,
            *(split_dwarf_options(dwo, dwo_output(output)) if dwo else []),
            *(remarks_options(self.command, side_output(output, "remarks")) if self.command.lto.remarks_file else []),
        ]

    def unrecorded(self, module: Module) -> list[str]:
        """The module's own options when it has no record (module_options).

        A module that cannot be read keeps the driver's triple, as before; in a -r link,
        where its relocation model must come from it, the link falls back instead.
        """
        relocation = self.command.relocatable
        facts = read_facts(module, flags=relocation)
        if facts is None:
            if relocation:
                raise Unsupported(Reason.MODULE_FACTS, f"cannot read the module flags of {module.origin}")
            return []
        return module_options(facts, relocation)
