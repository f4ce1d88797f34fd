"""Pure parsing of an ld.lld command line into an ordered model of its inputs and LTO options.

Only ld.lld's command line is modelled (its options are the table in lldopts): the clang
entry hands driver links to ltowrap's ld.lld entry (`--ld-path`), so driver and direct
links share this one parser. Every token is kept verbatim and in order; a link is
rewritten only by replacing input tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Reason, Unsupported
from ..rsp import expand_response_files
from . import ldscript, lldopts


# The optimization records' options (role and -plugin-opt meaning alike): lld's LTO config,
# which only the backend compiles act on.
REMARKS = ("remarks-file", "remarks-format", "remarks-passes")

# (option or None, its spelling or None for an input, its value, the original tokens)
_Token = tuple[lldopts.Option | None, str | None, str | None, tuple[str, ...]]


@dataclass(frozen=True)
class LtoOptions:
    """What the link line tells LTO's code generator, in lld's own terms."""

    opt_level: str | None = None  # --lto-O<n> / -plugin-opt=O<n>
    cpu: str | None = None  # -plugin-opt=mcpu=
    attrs: tuple[str, ...] = ()  # -plugin-opt=mattr=
    mllvm: tuple[str, ...] = ()  # -mllvm / -plugin-opt=-<x>
    sample_profile: str | None = None
    dwo_dir: str | None = None  # -plugin-opt=dwo_dir=: each backend writes <dir>/<task>.dwo
    partitions: int = 1  # --lto-partitions: regular LTO's tasks, which ThinLTO's are numbered after
    remarks_file: str | None = None  # --opt-remarks-filename: each backend writes <file>.thin.<task>.yaml
    remarks_passes: str | None = None  # --opt-remarks-passes: the passes whose records are kept (a regex)


@dataclass(frozen=True)
class Arg:
    """One element of the link line: the original tokens, and the file if it is an input."""

    tokens: tuple[str, ...]
    input: str | None = None  # the file this input resolves to
    searched: tuple[str, ...] = ()  # -l: the paths lld's search tried before it (or all, if none was found)
    static: bool = False  # -Bstatic in effect here (a linker script read here searches its -l so)
    whole_archive: bool = False
    lazy: bool = False  # inside --start-lib ... --end-lib
    group_marker: bool = False
    backends_only: bool = False  # an option only the backend compiles act on (dwo_dir, opt-remarks): the thin-link and final link leave it out


@dataclass(frozen=True)
class LinkCommand:
    """An ld.lld command as read: its arguments, its output and what the link makes."""

    args: tuple[Arg, ...]
    output: str
    lto: LtoOptions
    shared: bool
    pie: bool
    relocatable: bool
    read_files: tuple[str, ...] = field(default=())  # response files, and scripts and lists named by options
    fat_lto_objects: bool = False  # --fat-lto-objects: lld takes the bitcode of fat objects
    written: tuple[tuple[lldopts.Option, str | None], ...] = field(default=())  # options that write a file, and their values
    varies: bool = False  # an option asks for an output that differs on every link (--build-id=uuid)
    search_dirs: tuple[str, ...] = field(default=())  # every -L value, as given (lld collects them all first)
    sysroot: str = ""
    nostdlib: bool = False
    scripts: tuple[str, ...] = field(default=())  # -T and the like, as given (lld searches them: ldscript.find_script)
    emulation: str = ""  # -m: the target the link is for (elf_x86_64, aarch64linux, ...); the driver always gives it
    fatal_warnings: bool = False  # --fatal-warnings (the last of it and --no-fatal-warnings)
    no_warnings: bool = False  # --no-warnings, -w
    error_limit: int = 20  # --error-limit (0: none); lld's default
    orders_sections: bool = False  # an option that orders sections (--symbol-ordering-file, ...): it needs one a function

    def inputs(self) -> list[Arg]:
        return [a for a in self.args if a.input is not None]


@dataclass(frozen=True)
class Line:
    """An ld.lld command line as lld reads it: its @response files expanded, each option with its value."""

    tokens: tuple[_Token, ...]
    responses: tuple[str, ...]  # the response files read

    def gated(self) -> list[tuple[str, str]]:
        """(feature, option) for each option of a feature that came in some lld release
        (lldopts `probe=`: a toolchain.LLD_PROBES key), for the caller to check against what
        its ld.lld takes; the option as written, without its value."""
        return [(option.probe, tokens[0].partition("=")[0]) for option, _, _, tokens in self.tokens
                if option is not None and option.probe is not None]


def expand(argv: list[str], cwd: str = ".") -> Line:
    """ld.lld argv (without argv[0]) -> its Line. Raises Unsupported for a response file lld would not read."""
    responses: list[str] = []
    return Line(tuple(_split(expand_response_files(argv, cwd, read=responses))), tuple(responses))


def parse(argv: list[str], cwd: str = ".") -> LinkCommand:
    """ld.lld argv (without argv[0]) -> LinkCommand. Raises Unsupported for modes we don't model."""
    return parse_line(expand(argv, cwd), cwd)


def parse_line(line: Line, cwd: str = ".") -> LinkCommand:
    """An expanded Line -> LinkCommand. Raises Unsupported for modes we don't model."""
    split = list(line.tokens)
    reader = _Reader(*_search_dirs(split), cwd=cwd)
    reader.read_files += line.responses
    for option, spelling, value, tokens in split:
        if spelling is None:
            reader.input(tokens)
        else:
            reader.option(option, value, tokens)
    return reader.command()


def _search_dirs(split: list[_Token]) -> tuple[list[str], str]:
    """The -L values, as given, and the sysroot (lld collects all of them before it resolves
    any -l; ldscript resolves a sysroot-relative `=dir` as lld does)."""
    dirs: list[str] = []
    sysroot = ""
    for option, _, value, _ in split:
        if option is not None and option.role == "library-path" and value is not None:
            dirs.append(value)
        elif option is not None and option.role == "sysroot" and value is not None:
            sysroot = value
    return dirs, sysroot


@dataclass(eq=False, repr=False)
class _Reader:
    """What lld keeps while it reads a command line: the state that position decides
    (--whole-archive, --start-lib, -Bstatic, --push-state) and what the link as a whole is."""

    search_dirs: list[str]
    sysroot: str
    cwd: str = "."
    args: list[Arg] = field(default_factory=list)
    whole: bool = False
    lazy: bool = False
    static: bool = False
    stack: list[tuple[bool, bool]] = field(default_factory=list)
    output: str = "a.out"
    shared: bool = False
    pie: bool = False
    relocatable: bool = False
    fat: bool = False
    lto: dict[str, str | None] = field(default_factory=lambda: {"lto-O": None, "cpu": None, "sample-profile": None,
                                                                "dwo-dir": None, "lto-partitions": None,
                                                                "remarks-file": None, "remarks-format": None,
                                                                "remarks-passes": None})
    attrs: list[str] = field(default_factory=list)
    mllvm: list[str] = field(default_factory=list)
    read_files: list[str] = field(default_factory=list)
    written: list[tuple[lldopts.Option, str | None]] = field(default_factory=list)
    varies: bool = False
    nostdlib: bool = False
    scripts: list[str] = field(default_factory=list)
    emulation: str = ""
    fatal_warnings: bool = False
    no_warnings: bool = False
    error_limit: int = 20
    orders_sections: bool = False

    def input(self, tokens: tuple[str, ...]) -> None:
        self.args.append(Arg(tokens, input=tokens[0], static=self.static, whole_archive=self.whole, lazy=self.lazy))

    def option(self, option: lldopts.Option | None, value: str | None, tokens: tuple[str, ...]) -> None:
        role = option.role if option is not None else None
        if option is not None and option.refused is not None:
            raise Unsupported(option.refused, tokens[0])
        if role == "library" and value is not None:
            found, searched = ldscript.find_library(value, search_dirs=self.search_dirs, static=self.static,
                                                    sysroot=self.sysroot, cwd=self.cwd)
            self.args.append(Arg(tokens, input=found, searched=searched, static=self.static, whole_archive=self.whole,
                                 lazy=self.lazy))
            return
        backends_only = role in REMARKS or (role == "plugin-opt" and value is not None
                                            and lldopts.plugin_opt_meaning(value) in ("dwo-dir", *REMARKS))
        self.args.append(Arg(tokens, group_marker=role == "group", backends_only=backends_only))
        if role is not None:
            self._role(role, value)
        if option is not None and option.reads and value is not None:
            self.read_files.append(value)
        if option is not None and option.writes:
            self.written.append((option, value))
        if option is not None and option.varies is not None and value == option.varies:
            self.varies = True

    def _role(self, role: str, value: str | None) -> None:
        if role in ("whole-archive", "no-whole-archive"):
            self.whole = role == "whole-archive"
        elif role in ("start-lib", "end-lib"):
            self.lazy = role == "start-lib"
        elif role in ("static", "dynamic"):
            self.static = role == "static"
        elif role == "push-state":
            self.stack.append((self.whole, self.static))
        elif role == "pop-state" and self.stack:
            self.whole, self.static = self.stack.pop()
        elif role == "shared":
            self.shared = True
        elif role in ("pie", "no-pie"):
            self.pie = role == "pie"
        elif role == "relocatable":
            self.relocatable = True
        elif role in ("fat-lto-objects", "no-fat-lto-objects"):
            self.fat = role == "fat-lto-objects"
        elif role == "nostdlib":
            self.nostdlib = True
        elif role in ("fatal-warnings", "no-fatal-warnings"):
            self.fatal_warnings = role == "fatal-warnings"
        elif role == "no-warnings":
            self.no_warnings = True
        elif role == "section-order":
            self.orders_sections = True
        elif value is None:
            return
        elif role == "output":
            self.output = value
        elif role == "script":
            self.scripts.append(value)
        elif role == "emulation":
            self.emulation = value
        elif role == "error-limit" and value.isdigit():  # anything else: lld rejects the link itself
            self.error_limit = int(value)
        elif role in ("lto-O", "sample-profile", "lto-partitions", *REMARKS):
            self.lto[role] = value
        elif role == "mllvm":
            self.mllvm.append(value)
        elif role == "plugin-opt":
            _plugin_opt(value, self.lto, self.attrs, self.mllvm)

    def command(self) -> LinkCommand:
        remarks_format = self.lto["remarks-format"]
        if self.lto["remarks-file"] and remarks_format not in (None, "", "yaml"):
            # Another format's records are named otherwise by each lld release (.thin.<N>.bitstream
            # from lld 18 on) and lld warns that ELF carries no remarks section: not modelled.
            raise Unsupported(Reason.UNSUPPORTED_OPTION, f"--opt-remarks-format={remarks_format}")
        return LinkCommand(
            args=tuple(self.args),
            output=self.output,
            lto=LtoOptions(self.lto["lto-O"], self.lto["cpu"], tuple(self.attrs), tuple(self.mllvm),
                           self.lto["sample-profile"], self.lto["dwo-dir"], _partitions(self.lto["lto-partitions"]),
                           self.lto["remarks-file"] or None, self.lto["remarks-passes"] or None),
            shared=self.shared,
            pie=self.pie and not self.shared,
            relocatable=self.relocatable,
            read_files=tuple(self.read_files),
            fat_lto_objects=self.fat,
            written=tuple(self.written),
            varies=self.varies,
            search_dirs=tuple(self.search_dirs),
            sysroot=self.sysroot,
            nostdlib=self.nostdlib,
            scripts=tuple(self.scripts),
            emulation=self.emulation,
            fatal_warnings=self.fatal_warnings,
            no_warnings=self.no_warnings,
            error_limit=self.error_limit,
            orders_sections=self.orders_sections,
        )


def _plugin_opt(value: str, lto: dict[str, str | None], attrs: list[str], mllvm: list[str]) -> None:
    """-plugin-opt=<value>: what it means for the backends, or Unsupported (lldopts.PLUGIN_OPTS)."""
    meaning = lldopts.plugin_opt_meaning(value)
    if meaning in ("split", "unsupported", None):
        raise Unsupported(Reason.ALREADY_SPLIT if meaning == "split" else Reason.UNSUPPORTED_OPTION,
                          f"-plugin-opt={value}")
    if meaning == "lto-O" and value[1:].isdigit():
        lto["lto-O"] = value[1:]
    elif meaning in ("cpu", "sample-profile", "dwo-dir", *REMARKS):
        lto[meaning] = value.partition("=")[2]
    elif meaning == "attrs":
        attrs.extend(a for a in value.partition("=")[2].split(",") if a)
    elif meaning == "mllvm":
        mllvm.append(value)


def _partitions(value: str | None) -> int:
    """--lto-partitions (lld's default: 1; lld itself rejects a value that is not a number)."""
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else 1


def _split(tokens: list[str]) -> list[_Token]:
    """Group tokens into (option, spelling, value, original tokens); (None, None, ...) for an input."""
    out: list[_Token] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "-" or not tok.startswith("-"):
            out.append((None, None, None, (tok,)))
            continue
        m = lldopts.match(tok)
        if m.takes_next and i < len(tokens):
            out.append((m.option, m.name, tokens[i], (tok, tokens[i])))
            i += 1
        else:
            out.append((m.option, m.name, m.value, (tok,)))
    return out
