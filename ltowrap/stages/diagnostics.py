"""What the backend compiles printed, printed as in-process lld prints it.

In-process ThinLTO runs every backend inside lld, whose diagnostic handler prints each LLVM
diagnostic through lld's own error handler (lld's diagnosticHandler):
    ld.lld: warning: <DiagnosticInfo::print>        warnings and errors, on stderr
    ld.lld: warning: <module> <SMDiagnostic>        inline assembly's (.warning, ...)
    <DiagnosticInfo::print>                         remarks and notes, on stdout
with `--fatal-warnings` turning every warning into an error (the link then fails),
`--no-warnings` dropping them, `--error-limit` stopping after that many errors, and a
blank line before any message that follows a message of several lines.

A distributed backend is `clang -x ir`, which wraps the same LLVM text in clang's own
rendering (CodeGenAction.cpp, for IR input, where there is no source location):
    warning: <DiagnosticInfo::print> [-Wflag]       most kinds
    warning: linking module '<dest>': <text> [-Wlinker-warnings]
    <inline asm>:1:2: warning: <msg>                the SMDiagnostic, then clang's own line
    <source line>                                   "warning: cannot compile inline asm"
    <caret>
    remark: <DiagnosticInfo::print> [-Rpass=inline]
    N warnings generated.
`parse` takes clang's rendering back to LLVM's diagnostics; `render` prints those as lld
would. Lines that are not diagnostics (an LLVM release that prints to stderr directly)
are kept as they are, where they came.

What a backend prints names modules by their paths: the module store's
(`<cache>/m/NNNNNN-<digest>.o`) for a compile here, the action's input root
(`m/NNNNNN-<digest>.o`) for a remote one. `canonical` turns both into a token of the
module's digest, which is what the caches keep (the text then depends on the key alone);
`render` names each module as lld names it (`names`: `a.o`, `lib.a(m.o at 1234)`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A module named by its content digest, in canonical text.
_TOKEN = "{ltowrap-module:%s}"
_TOKEN_RE = re.compile(r"\{ltowrap-module:([0-9a-f]{32})\}")
_STORE_PATH = re.compile(r"(?<![^\s'\"(])m/\d{6}-([0-9a-f]{32})\.o")

_CLANG = re.compile(r"(?:fatal )?(warning|error|remark|note): ")
_SRCMGR = re.compile(r"([^\s:][^:]*):(\d+):(\d+): (warning|error|remark|note): ")
_FLAG = re.compile(r" \[-[WR][^\]\s]*\]\n?$")
_GENERATED = re.compile(r"\d+ (?:warnings?|errors?)(?: and \d+ errors?)? generated\.\n?$")
_INLINE_ASM_FOLLOWUP = re.compile(r"(?:warning|error|note|remark): cannot compile inline asm(?: \[-W[^\]]*\])?\n?$")
_LINKING = re.compile(r"linking module '[^']*': ")

TOO_MANY_ERRORS = "too many errors emitted, stopping now (use {}=0 to see all errors)"


def canonical(text: str, store_prefix: str) -> str:
    """`text` with every module path (this machine's store, a remote action's input root)
    replaced by its digest's token."""
    if store_prefix:
        text = text.replace(store_prefix, "m/")
    return _STORE_PATH.sub(lambda m: _TOKEN % m.group(1), text)


def named(text: str, names: dict[str, str]) -> str:
    """Canonical text with each module's token replaced by the name `names` gives its digest."""
    return _TOKEN_RE.sub(lambda m: names.get(m.group(1), m.group(0)), text)


@dataclass(frozen=True)
class Diagnostic:
    """One LLVM diagnostic, as LLVM prints it (DiagnosticInfo::print); `raw` for a line
    that was printed as it is, outside any diagnostic."""

    severity: str  # warning, error, remark, note; '' for a raw line
    message: str  # without clang's severity label and flag
    inline_asm: bool = False  # an SMDiagnostic of inline assembly: lld puts the module's name first


def parse(text: str) -> list[Diagnostic]:
    """The diagnostics in a backend clang's stderr (its rendering for IR input), in order."""
    lines = text.splitlines(keepends=True)
    out: list[Diagnostic] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _GENERATED.match(line):
            i += 1
            continue
        sm = _SRCMGR.match(line)
        if sm is not None:
            end = _next_header(lines, i + 1)
            head = f"{sm.group(1)}:{sm.group(2)}:{sm.group(3)}: {line[sm.end():]}"
            out.append(Diagnostic(sm.group(4), head + "".join(lines[i + 1 : end]), inline_asm=True))
            i = end + 1 if end < len(lines) and _INLINE_ASM_FOLLOWUP.match(lines[end]) else end
            continue
        clang = _CLANG.match(line)
        if clang is None:
            out.append(Diagnostic("", line))
            i += 1
            continue
        # The message runs to clang's flag (`[-Wframe-larger-than]`), which may stand on a
        # line of its own after a message that ends in a newline; one without a flag is one line.
        end = _next_header(lines, i + 1)
        last = next((j for j in range(i, end) if _FLAG.search(lines[j])), i)
        body = "".join(lines[i : last + 1])[clang.end():]
        body = _FLAG.sub("", body) if _FLAG.search(body) else body.removesuffix("\n")
        linking = _LINKING.match(body)  # IRMover's: clang names the module it links into first
        out.append(Diagnostic(clang.group(1), body[linking.end():] if linking else body))
        out.extend(Diagnostic("", raw) for raw in lines[last + 1 : end])
        i = end
    return out


def _next_header(lines: list[str], start: int) -> int:
    """The index of the first line from `start` that starts a diagnostic of its own."""
    for j in range(start, len(lines)):
        if _CLANG.match(lines[j]) or _SRCMGR.match(lines[j]) or _GENERATED.match(lines[j]):
            return j
    return len(lines)


@dataclass(frozen=True)
class Policy:
    """How the link's lld treats diagnostics (its command line)."""

    log_name: str = "ld.lld"  # lld's prefix: its argv[0] without directory
    fatal_warnings: bool = False
    no_warnings: bool = False
    error_limit: int = 20  # 0: no limit
    lld_major: int = 22  # lld 13 and 14 spell the option -error-limit when they stop at the limit


@dataclass
class Printed:
    """What lld would have printed of the backends' diagnostics."""

    stdout: str = ""
    stderr: str = ""
    errors: int = 0  # the link fails if any (a warning under --fatal-warnings)
    separator: str = ""  # what lld prints before its next message: a blank line after one of several lines
    stopped: bool = False  # the error limit was reached: lld exits there
    _out: list[str] = field(default_factory=list)
    _err: list[str] = field(default_factory=list)


def render(modules: list[tuple[str, str]], names: dict[str, str], policy: Policy) -> Printed:
    """lld's output for the backends' canonical texts, given as (module's lld name, text) in
    the order lld would run them; `names` maps a module digest to its lld name."""
    printed = Printed()
    for module, text in modules:
        if not text:
            continue
        for d in parse(text):  # parsed before the modules are named: a name may hold anything
            _report(printed, policy, Diagnostic(d.severity, named(d.message, names), d.inline_asm), module)
            if printed.stopped:
                break
        if printed.stopped:
            break
    printed.stdout, printed.stderr = "".join(printed._out), "".join(printed._err)
    return printed


def _report(printed: Printed, policy: Policy, d: Diagnostic, module: str) -> None:
    """One diagnostic through lld's error handler (ErrorHandler::warn, error, message)."""
    if not d.severity:
        printed._err.append(d.message)
        return
    message = f"{module} {d.message}" if d.inline_asm else d.message
    if d.severity in ("remark", "note"):
        printed._out.append(message + "\n")
        return
    kind = d.severity
    if kind == "warning":
        if policy.no_warnings:
            return
        if policy.fatal_warnings:
            kind = "error"
    if kind == "error":
        if policy.error_limit and printed.errors >= policy.error_limit:
            option = "-error-limit" if policy.lld_major < 15 else "--error-limit"
            printed._err.append(f"{printed.separator}{policy.log_name}: error: {TOO_MANY_ERRORS.format(option)}\n")
            printed.errors += 1
            printed.stopped = True
            return
        printed.errors += 1
    printed._err.append(f"{printed.separator}{policy.log_name}: {kind}: {message}\n")
    printed.separator = "\n" if "\n" in message else ""


def joined(printed: Printed, link_stderr: bytes) -> bytes:
    """The backends' lines, then the final link's own: with lld's blank line between two
    messages when the last backend message had several lines."""
    head = printed.stderr.encode("utf-8", "surrogateescape")
    if head and link_stderr and printed.separator:
        head += printed.separator.encode()
    return head + link_stderr
