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
# Environment variables the tools read that can change what they write: each is part of the
# key of whatever that tool makes (names found in the installed binaries' strings;
# tests/test_toolchain.py checks that each one still is, and that each changes an output).
# The clang driver building a link line (driverline.py, the memo's direct lane):
DRIVER_ENV = ("PATH", "COMPILER_PATH", "LIBRARY_PATH", "CCC_OVERRIDE_OPTIONS", "CLANG_NO_DEFAULT_CONFIG",
              "CLANG_CONFIG_PATH", "SDKROOT", "MACOSX_DEPLOYMENT_TARGET")
# A backend compile (`clang -c -x ir`): what edits its arguments (CCC_OVERRIDE_OPTIONS), its
# config files (CLANG_NO_DEFAULT_CONFIG) or its debug info (RC_DEBUG_*). Not PATH: the
# integrated assembler runs no tool (a module recorded with -fno-integrated-as is not cached).
BACKEND_ENV = ("CCC_OVERRIDE_OPTIONS", "CLANG_NO_DEFAULT_CONFIG", "CLANG_CONFIG_PATH", "RC_DEBUG_OPTIONS",
               "RC_DEBUG_PREFIX_MAP", "SDKROOT", "MACOSX_DEPLOYMENT_TARGET")
# ld.lld: LLD_VERSION replaces the version it writes into .comment.
LINKER_ENV = ("LLD_VERSION",)
UNSET = "\0unset"  # the value env_values gives a variable that is not set
# The tools a PATH shim stands in for, under these names and their versioned ones (clang-22).
SHIMMED = ("clang", "clang++", "ld.lld")
# Set by the clang entry, in the environment of the driver it runs with our ld.lld entry, when
# the backend clang (the `clang` setting) is not that driver: the driver, whose release the
# link must then share (entry.main passes it to pipeline.run_linker; a link the clang entry
# runs itself gets it as an argument).
DRIVER = "LTOWRAP_DRIVER"
# What ltowrap asks ld.lld before relying on a feature that came in some release (what the
# tool says, not a guess from its version). One run, `ld.lld <every probe> --version`: lld
# names each option it does not take ("unknown argument '--fat-lto-objects'", "-mllvm: ...
# Unknown command line argument '-import-declaration'") and prints its version (13-16 have
# no --fat-lto-objects, 13-14 no --thinlto-emit-index-files, 13-16 no -import-declaration,
# all but 21 and later no DTLTO).
LLD_PROBES = {
    "fat-lto-objects": ("--fat-lto-objects",),
    "thinlto-emit-index-files": ("--thinlto-emit-index-files",),
    "thinlto-distributor": ("--thinlto-distributor=ltowrap-probe",),
    "import-declaration": ("-mllvm", "-import-declaration"),
    "why-extract": ("--why-extract=/dev/null",),  # lld 14+; only 22 writes it for an index-only link
}


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
    """The files and directories whose change can change what the compiler makes: its
    binaries, its directories (a config file created there) and its config files."""
    return [*compiler_binaries(clang), *config_dirs(clang), *compiler_configs(clang)]


def compiler_binaries(clang: str) -> list[str]:
    """The driver and the LLVM libraries beside it."""
    real = os.path.realpath(clang)
    libdir = os.path.join(os.path.dirname(os.path.dirname(real)), "lib")
    try:
        libs = sorted(n for n in os.listdir(libdir) if n.startswith(("libLLVM", "libclang-cpp")) and ".so" in n)
    except OSError:
        libs = []
    return [real, *(os.path.join(libdir, n) for n in libs)]


def compiler_configs(clang: str) -> list[str]:
    """The config files this clang may read by default, and what they include."""
    return config_files(config_dirs(clang))


def config_dirs(clang: str) -> list[str]:
    """Where clang looks for its default config files: beside the driver, as it was named and
    as it really is (clang 16+: `<triple>-<mode>.cfg`, `<mode>.cfg`, `<triple>.cfg`; older
    ones derive the name from the driver's own)."""
    dirs = [os.path.dirname(os.path.realpath(clang))]
    named = os.path.dirname(os.path.abspath(clang))
    return dirs if named in dirs else [*dirs, named]


def config_files(dirs: list[str]) -> list[str]:
    """Every config file in `dirs` and every file they include (@file), nested.

    Which of them clang reads depends on the target and the driver mode of each command,
    so all of them count: a backend compile's key, the driver line's check."""
    found = []
    for d in dirs:
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".cfg"))
        except OSError:
            continue
        found += [os.path.join(d, n) for n in names]
    return config_closure(found)


def config_closure(paths: list[str]) -> list[str]:
    """`paths` and the files they include (`@file`, relative to the including file's directory,
    `<CFGDIR>` its directory), nested, in order, each once."""
    out: list[str] = []
    todo = list(paths)
    while todo:
        path = todo.pop(0)
        if path in out:
            continue
        out.append(path)
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            continue
        from .rsp import tokenize_gnu  # (errors and its enum, milliseconds: only when there is a config file)

        base = os.path.dirname(path)
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        for token in tokenize_gnu("\n".join(lines)):
            if token.startswith("@") and len(token) > 1:
                included = token[1:].replace("<CFGDIR>", base)
                todo.append(os.path.join(base, included))
    return out


def env_values(names: tuple[str, ...], env: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """(name, value) of each of these environment variables, unset ones marked as such."""
    return [(name, env.get(name, UNSET)) for name in names]


def driver_env() -> list[tuple[str, str]]:
    """The environment variables the driver reads (DRIVER_ENV)."""
    return env_values(DRIVER_ENV)


def version_text(tool: str) -> str:
    """`tool --version`, as it prints it on stdout (not what CCC_OVERRIDE_OPTIONS says on stderr)."""
    _, out, err = proc.capture([tool, "--version"])
    return (out or err).decode(errors="replace")


def release(version: str, marker: str = "clang version ") -> str:
    """The release in a `--version` text, as digits and dots: 'Debian clang version 13.0.1-11+b2'
    -> '13.0.1', 'Debian LLD 19.1.7 (compatible with GNU linkers)' with marker 'LLD ' ->
    '19.1.7', 'clang version 20.0.0git' -> '20.0.0' ('' if none)."""
    i = version.find(marker)
    if i < 0:
        return ""
    rest = version[i + len(marker) :]
    n = 0
    while n < len(rest) and (rest[n].isdigit() or rest[n] == "."):
        n += 1
    return rest[:n].strip(".")


def lld_facts(ld: str) -> dict:
    """What this ld.lld says of itself: its release (`--version`) and which LLD_PROBES it takes.
    One lld start, or one per probe when lld's errors name none of them;
    cachekey.linker_facts keeps the answer."""
    argv = [a for probe in LLD_PROBES.values() for a in probe]
    rc, out, err = proc.capture([ld, *argv, "--version"])
    text, errors = out.decode(errors="replace"), err.decode(errors="replace")
    named = [line for line in errors.splitlines() if "nknown" in line]  # unknown / Unknown
    refused = {f for f, probe in LLD_PROBES.items() if any(f"'{probe[-1]}'" in line for line in named)}
    if rc != 0 and not refused:  # it failed for another reason: ask one at a time
        refused = {f for f, probe in LLD_PROBES.items() if proc.capture([ld, *probe, "--version"])[0] != 0}
    return {"release": release(text, "LLD "), "version": text.strip().splitlines()[0] if text.strip() else "",
            "takes": [f for f in LLD_PROBES if f not in refused]}


# How clang names an option it rejects: the driver's own ('unknown argument', 'unsupported
# option ... for target'), and an -mllvm or -Xclang one the compiler itself refuses.
REJECTION_MARKERS = ("unknown argument: '", "unknown argument '", "unsupported option '",
                     "Unknown command line argument '")


def rejected_options(clang: str, options: list[str]) -> list[str]:
    """The options of `options` this clang rejects, as it says: a compile of an empty IR
    module with them names each (`clang -c -x ir /dev/null`), driver options first, those
    it passes on (-mllvm, -Xclang) once the others are gone. Empty when it takes them all,
    or fails without naming any (the backend compile then fails as it would)."""
    rejected: list[str] = []
    for _ in range(3):
        rc, _, err = proc.capture([clang, "-c", "-x", "ir", os.devnull, "-o", os.devnull,
                                   *without(options, rejected)])
        if rc == 0:
            break
        named = set()
        for line in err.decode(errors="replace").splitlines():
            for marker in REJECTION_MARKERS:
                i = line.find(marker)
                end = line.find("'", i + len(marker)) if i >= 0 else -1
                if end > 0:
                    named.add(line[i + len(marker) : end])
        found = [o for o in options if o in named and o not in rejected]
        if not found:
            break
        rejected += found
    return rejected


def without(options: list[str], rejected: list[str]) -> list[str]:
    """`options` less the rejected ones (an -mllvm or -Xclang value with the flag before it)."""
    out: list[str] = []
    i = 0
    while i < len(options):
        if options[i] in ("-mllvm", "-Xclang") and i + 1 < len(options) and options[i + 1] in rejected:
            i += 2
            continue
        if options[i] not in rejected:
            out.append(options[i])
        i += 1
    return out
