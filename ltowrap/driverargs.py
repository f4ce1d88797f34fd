"""Pure reading of a clang driver command line: compile or link, its inputs and outputs.

Runs on the compile path: standard library only, no regular expressions.
"""

from __future__ import annotations

import os

# Driver options whose value is the next argument when not joined.
TAKES_ARG = frozenset(
    """-o -x -I -D -U -include -imacros -isystem -iquote -idirafter -iprefix -iwithprefix
    -iwithprefixbefore -isysroot -imultilib -MF -MT -MQ -Xclang -Xlinker -Xassembler -Xpreprocessor
    -Xarch_host -Xarch_device -mllvm -target -arch -L -l -u -T -z -e --param -working-directory
    -dependency-file -dependency-dot -serialize-diagnostics -ivfsoverlay -aux-target -Xopenmp-target
    -Xcuda-ptxas -Xcuda-fatbinary -F -cxx-isystem -module-dependency-dir --sysroot --target
    --include-directory --define-macro --undefine-macro --output --language -Wa -Wl -Wp""".split()
)
# Any of these makes the command something other than a link.
NOT_LINK = frozenset(
    """-c -S -E -M -MM -fsyntax-only -### --version -V --help -help -print-search-dirs
    -print-libgcc-file-name -print-multiarch -print-resource-dir -print-target-triple
    -print-effective-triple -print-supported-cpus -print-targets -dumpmachine -dumpversion
    -emit-llvm -emit-ast -precompile --precompile -fdriver-only -rewrite-objc""".split()
)
NOT_LINK_PREFIXES = ("-print-prog-name=", "-print-file-name=", "--print-", "-print-multi")
SOURCE_EXTENSIONS = frozenset(".c .cc .cp .cpp .cxx .c++ .C .CC .CPP .i .ii .m .mm".split())


def split_joined(arg: str) -> tuple[str, str | None]:
    """'-o' -> ('-o', None); '-ofoo' and '--output=foo' -> ('-o', 'foo') style splits."""
    if arg.startswith("--") and "=" in arg:
        name, _, value = arg.partition("=")
        return name, value
    return arg, None


def walk(args: list[str]):
    """Yield (option, value, is_input) over a driver argv, taking values of TAKES_ARG options."""
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        if a == "-" or not a.startswith("-"):
            yield a, None, True
        elif a.startswith("--output="):
            yield "-o", a[len("--output=") :], False
        elif a in TAKES_ARG:
            i += 1
            yield a, args[i] if i < n else None, False
        elif a[:2] in ("-o", "-I", "-D", "-U", "-L", "-l", "-x") and len(a) > 2:
            yield a[:2], a[2:], False
        else:
            yield a, None, False
        i += 1


def has_response_file(args: list[str]) -> bool:
    """Does the command name an @response file (whose contents its arguments do not show)?"""
    return any(a.startswith("@") for a in args)


def inputs(args: list[str]) -> list[str]:
    return [a for a, _, is_input in walk(args) if is_input and a != "-"]


def is_link(args: list[str]) -> bool:
    """A driver command that would run the linker: no stop-before-link flag and some input."""
    has_input = False
    for opt, _, is_input in walk(args):
        if is_input:
            has_input = True
        elif opt in NOT_LINK or opt.startswith(NOT_LINK_PREFIXES):
            return False
    return has_input


def wants_lto(args: list[str]) -> bool:
    """-flto / -flto=thin / -flto=full, unless a later -fno-lto switches it off."""
    on = False
    for a in args:
        if a == "-flto" or a.startswith("-flto="):
            on = True
        elif a == "-fno-lto":
            on = False
    return on


def linker_choice(args: list[str]) -> tuple[str, str]:
    """The last -fuse-ld= value and the last --ld-path= value ('' when absent)."""
    fuse = ld_path = ""
    for a in args:
        if a.startswith("-fuse-ld="):
            fuse = a[len("-fuse-ld=") :]
        elif a.startswith("--ld-path="):
            ld_path = a[len("--ld-path=") :]
    return fuse, ld_path


def library_archives(args: list[str], library_path: str) -> list[str]:
    """The archives `-lNAME` / `-l:FILE` find in the -L directories and LIBRARY_PATH given.

    Not the driver's own search directories (they need `clang -###`): this is for deciding
    cheaply that a link carries no bitcode, where a library missed there is linked by lld's
    in-process ThinLTO, as without ltowrap. Shared libraries are never bitcode.
    """
    dirs = library_path.split(os.pathsep) if library_path else []
    names = []
    for opt, value, _ in walk(args):
        if opt == "-L" and value is not None:
            dirs.append(value)
        elif opt == "-l" and value:
            names.append(value[1:] if value.startswith(":") else f"lib{value}.a")
    return [p for name in names for d in dirs if os.path.isfile(p := os.path.join(d or ".", name))]


def is_source(path: str, lang: str | None) -> bool:
    if lang is not None:
        return lang in ("c", "c++", "cpp-output", "c++-cpp-output", "objective-c", "objective-c++")
    return os.path.splitext(path)[1] in SOURCE_EXTENSIONS


def compiles_sources(args: list[str]) -> bool:
    """Does this command compile C/C++ source (the commands LTOWRAP_LTO=thin adds -flto=thin to)?"""
    lang = None
    for opt, value, is_input in walk(args):
        if opt == "-x":
            lang = None if value == "none" else value
        elif is_input and is_source(opt, lang):
            return True
    return False


def compile_outputs(args: list[str]) -> list[str]:
    """Object files a `-c` command writes: -o, or each source's stem + .o in the cwd."""
    out = None
    sources = []
    lang = None
    for opt, value, is_input in walk(args):
        if opt in ("-o", "--output") and value is not None:
            out = value
        elif opt == "-x":
            lang = None if value == "none" else value
        elif is_input and opt != "-":
            if is_source(opt, lang) or lang is not None:
                sources.append(opt)
    if out is not None:
        return [out] if len(sources) <= 1 else []
    return [os.path.splitext(os.path.basename(s))[0] + ".o" for s in sources]
