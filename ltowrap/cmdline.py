"""Pure parsing of an ld.lld command line into an ordered model of its inputs and LTO options.

Only ld.lld's command line is modelled: the clang entry hands driver links to ltowrap's
ld.lld entry (`--ld-path`), so driver and direct links share this one parser. Every token
is kept verbatim and in order; a link is rewritten only by replacing input tokens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import Unsupported
from .rsp import expand_response_files

# Options whose value may be the next token (`--soname foo`, `-o out`), by name without dashes.
SEPARATE = frozenset(
    """F L Map O R T Tbss Tdata Ttext android-memtag-mode auxiliary b bp-compression-sort
    bp-startup-sort call-graph-ordering-file call-graph-profile-sort compress-debug-sections
    compress-sections dT default-script defsym dependency-file dynamic-linker dynamic-list e entry
    error-handling-script error-limit exclude-libs export-dynamic-symbol export-dynamic-symbol-list
    f filter fini format h hash-style icf image-base in-implib init irpgo-profile just-symbols
    keep-unique l library library-path load-pass-plugin lto lto-aa-pipeline lto-basic-block-sections
    lto-cs-profile-file lto-known-safe-vtables lto-newpm-passes lto-partitions lto-sample-profile m
    mllvm o oformat opt-remarks-filename opt-remarks-format opt-remarks-hotness-threshold
    opt-remarks-passes orphan-handling out-implib output pack-dyn-relocs package-metadata plugin
    plugin-opt power10-stubs print-archive-stats print-symbol-order randomize-section-padding
    remap-inputs remap-inputs-file reproduce retain-symbols-file rpath rsp-quoting script
    section-start shuffle-sections soname sort-section split-stack-adjust-size symbol-ordering-file
    sysroot target2 thinlto-cache-dir thinlto-cache-policy thinlto-distributor
    thinlto-distributor-arg thinlto-jobs thinlto-remote-compiler thinlto-remote-compiler-arg
    thinlto-remote-compiler-prepend-arg thinlto-single-module threads time-trace-file
    time-trace-granularity trace-symbol u undefined undefined-glob unresolved-symbols
    version-script warn-backrefs-exclude why-extract why-live wrap y z Ttext-segment
    plugin-opt-thinlto soname-h audit depaudit P rpath-link""".split()
)
# Single-letter options that also take a joined value (-Lfoo, -lfoo, -ofoo, -O1, -znow).
JOINED_LETTERS = frozenset("LloTeuyzmhROFfb")
# Options whose value names a file the link reads: its contents are part of the thin-link key.
READS_FILE = frozenset(
    """T script dT default-script version-script dynamic-list just-symbols symbol-ordering-file
    retain-symbols-file call-graph-ordering-file export-dynamic-symbol-list remap-inputs-file
    in-implib lto-sample-profile""".split()
)
# LTO modes ltowrap does not reproduce: the original command runs unchanged.
UNSUPPORTED = {
    "thinlto-index-only": "link is already a ThinLTO index-only link",
    "thinlto-emit-index-files": "link already emits ThinLTO index files",
    "thinlto-distributor": "link uses lld's own DTLTO distributor",
    "thinlto-single-module": "--thinlto-single-module",
    "lto-emit-asm": "--lto-emit-asm",
    "lto-emit-llvm": "--lto-emit-llvm",
    "save-temps": "--save-temps",
    "lto-obj-path": "--lto-obj-path",
    "lto-newpm-passes": "--lto-newpm-passes",
    "lto-aa-pipeline": "--lto-aa-pipeline",
    "load-pass-plugin": "--load-pass-plugin",
    "lto-cs-profile-file": "context-sensitive PGO",
    "lto-cs-profile-generate": "context-sensitive PGO",
    "lto-basic-block-sections": "--lto-basic-block-sections",
    "lto-CGO": "--lto-CGO",
    "reproduce": "--reproduce",
    "format": "--format",
    "b": "--format",
}
# -plugin-opt=<x> spellings that change what LTO produces.
UNSUPPORTED_PLUGIN_OPTS = (
    "thinlto-index-only", "thinlto-emit-imports-files", "emit-asm", "emit-llvm", "obj-path",
    "save-temps", "dwo_dir", "cs-profile", "opt-remarks", "thinlto-prefix-replace",
    "thinlto-object-suffix-replace", "lto-partitions", "stats-file", "time-trace", "legacy",
    "new-pass-manager", "debug-pass-manager", "disable-verify",
)
IGNORED_PLUGIN_OPTS = ("jobs=", "thinlto", "cache-dir=", "cache-policy=", "-fresolution=", "mcpu=", "mattr=",
                       "O", "sample-profile=", "-", "pass-through=", "-pass-through=", "LLVMgold")
GROUP_MARKERS = frozenset(["start-group", "end-group", "(", ")"])


@dataclass(frozen=True)
class LtoOptions:
    """What the link line tells LTO's code generator, in lld's own terms."""

    opt_level: str | None = None  # --lto-O<n> / -plugin-opt=O<n>
    cpu: str | None = None  # -plugin-opt=mcpu=
    attrs: tuple[str, ...] = ()  # -plugin-opt=mattr=
    mllvm: tuple[str, ...] = ()  # -mllvm / -plugin-opt=-<x>
    sample_profile: str | None = None


@dataclass(frozen=True)
class Arg:
    """One element of the link line: the original tokens, and the file if it is an input."""

    tokens: tuple[str, ...]
    input: str | None = None  # the file this input resolves to
    whole_archive: bool = False
    lazy: bool = False  # inside --start-lib ... --end-lib
    group_marker: bool = False


@dataclass(frozen=True)
class LinkCommand:
    args: tuple[Arg, ...]
    output: str
    lto: LtoOptions
    shared: bool
    pie: bool
    relocatable: bool
    read_files: tuple[str, ...] = field(default=())  # scripts and lists named by options

    def inputs(self) -> list[Arg]:
        return [a for a in self.args if a.input is not None]


def _name(token: str) -> tuple[str, str | None]:
    """'--soname=x' -> ('soname', 'x'); '-shared' -> ('shared', None); '-L=/d' -> ('L', '=/d')."""
    if not token.startswith("--") and token[1:2] in JOINED_LETTERS and token[2:3] == "=":
        return token[1], token[2:]  # lld's sysroot-relative "=dir" keeps its "="
    body = token[2:] if token.startswith("--") else token[1:]
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def parse(argv: list[str], cwd: str = ".") -> LinkCommand:
    """ld.lld argv (without argv[0]) -> LinkCommand. Raises Unsupported for modes we don't model."""
    tokens = expand_response_files(argv, cwd)
    split = _split(tokens)
    search_dirs: list[str] = []
    sysroot = ""
    for name, value, _ in split:
        if name in ("L", "library-path") and value is not None:
            search_dirs.append(value)
        elif name == "sysroot" and value is not None:
            sysroot = value
    search_dirs = [sysroot + d[1:] if d.startswith("=") else d for d in search_dirs]

    args: list[Arg] = []
    whole = lazy = static = False
    stack: list[tuple[bool, bool]] = []
    output = "a.out"
    shared = pie = relocatable = False
    opt_level = cpu = sample = None
    attrs: list[str] = []
    mllvm: list[str] = []
    read_files: list[str] = []
    for name, value, toks in split:
        if name is None:  # a positional input
            args.append(Arg(toks, input=toks[0], whole_archive=whole, lazy=lazy))
            continue
        if name in UNSUPPORTED or name.startswith("thinlto-distributor"):
            raise Unsupported(UNSUPPORTED.get(name, f"--{name}"))
        if name in ("l", "library") and value is not None:
            found = find_library(value, search_dirs, static)
            args.append(Arg(toks, input=found, whole_archive=whole, lazy=lazy))
            continue
        marker = name in GROUP_MARKERS
        args.append(Arg(toks, group_marker=marker))
        if name == "whole-archive":
            whole = True
        elif name == "no-whole-archive":
            whole = False
        elif name == "start-lib":
            lazy = True
        elif name == "end-lib":
            lazy = False
        elif name in ("Bstatic", "static", "dn", "non_shared"):
            static = True
        elif name in ("Bdynamic", "dy", "call_shared"):
            static = False
        elif name == "push-state":
            stack.append((whole, static))
        elif name == "pop-state" and stack:
            whole, static = stack.pop()
        elif name in ("o", "output") and value is not None:
            output = value
        elif name in ("shared", "Bshareable"):
            shared = True
        elif name in ("pie", "pic-executable"):
            pie = True
        elif name == "no-pie":
            pie = False
        elif name in ("r", "relocatable"):
            relocatable = True
        elif name.startswith("lto-O") and name[5:].isdigit():
            opt_level = name[5:]
        elif name == "mllvm" and value is not None:
            mllvm.append(value)
        elif name == "lto-sample-profile" and value is not None:
            sample = value
        elif name in ("plugin-opt", "plugin-opt-thinlto") and value is not None:
            opt_level, cpu, sample = _plugin_opt(value, opt_level, cpu, sample, attrs, mllvm)
        if name in READS_FILE and value is not None:
            read_files.append(value)
    return LinkCommand(
        args=tuple(args),
        output=output,
        lto=LtoOptions(opt_level, cpu, tuple(attrs), tuple(mllvm), sample),
        shared=shared,
        pie=pie and not shared,
        relocatable=relocatable,
        read_files=tuple(read_files),
    )


def _plugin_opt(value: str, opt_level, cpu, sample, attrs: list[str], mllvm: list[str]):
    if value.startswith(UNSUPPORTED_PLUGIN_OPTS):
        raise Unsupported(f"-plugin-opt={value}")
    if value.startswith("O") and value[1:].isdigit():
        opt_level = value[1:]
    elif value.startswith("mcpu="):
        cpu = value[5:]
    elif value.startswith("mattr="):
        attrs.extend(a for a in value[6:].split(",") if a)
    elif value.startswith("sample-profile="):
        sample = value[len("sample-profile=") :]
    elif value.startswith("-") and not value.startswith(("-fresolution=", "-pass-through=")):
        mllvm.append(value)
    elif not value.startswith(IGNORED_PLUGIN_OPTS):
        raise Unsupported(f"-plugin-opt={value}")
    return opt_level, cpu, sample


def _split(tokens: list[str]) -> list[tuple[str | None, str | None, tuple[str, ...]]]:
    """Group tokens into (option name, value, original tokens); name None for an input."""
    out: list[tuple[str | None, str | None, tuple[str, ...]]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "-" or not tok.startswith("-") or tok in ("-(", "-)"):
            if tok in ("-(", "-)"):
                out.append((tok[1], None, (tok,)))
            else:
                out.append((None, None, (tok,)))
            continue
        name, value = _name(tok)
        if value is None and name in SEPARATE and name not in ("lto",):
            if i < len(tokens):
                out.append((name, tokens[i], (tok, tokens[i])))
                i += 1
            else:
                out.append((name, None, (tok,)))
            continue
        if value is None and not tok.startswith("--") and tok[1:2] in JOINED_LETTERS and len(tok) > 2 \
                and name not in _FLAGS and name not in SEPARATE:
            out.append((tok[1], tok[2:], (tok,)))
            continue
        out.append((name, value, (tok,)))
    return out


# Flags whose single-dash spelling begins with a joined-value letter (-export-dynamic is not -e).
_FLAGS = frozenset(
    """export-dynamic eh-frame-hdr emit-relocs enable-new-dtags end-group end-lib error-unresolved-symbols
    execute-only relocatable relax rosegment shared static start-group start-lib strip-all
    strip-debug lto-O0 lto-O1 lto-O2 lto-O3 fatal-warnings fix-cortex-a53-843419 fix-cortex-a8
    force-group-allocation fortran-common fat-lto-objects o0 help Bdynamic Bstatic Bsymbolic
    Bsymbolic-functions Bshareable ul trace unique use-android-relr-tags undefined-version
    lto-whole-program-visibility lto-debug-pass-manager lto-pgo-warn-mismatch
    lto-unique-basic-block-section-names lto-validate-all-vtables-have-type-infos
    mmap-output-file merge-exidx-entries export-dynamic-symbol-list reproduce retain-symbols-file
    y yes build-id""".split()
)


def find_library(spec: str, search_dirs: list[str], static: bool) -> str | None:
    """Resolve -l<spec> as lld does: -l:name is exact; else lib<spec>.so then .a per directory."""
    names = [spec[1:]] if spec.startswith(":") else ([f"lib{spec}.a"] if static else [f"lib{spec}.so", f"lib{spec}.a"])
    for d in search_dirs:
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p):
                return p
    return None
