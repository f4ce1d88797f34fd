"""The files a module's inline assembly makes the backend's assembler read, or why that cannot be
told.

A backend compile assembles the module asm and the asm of every function it compiles, its own
and imported ones (irmodule.inline_asm gives both), with LLVM's MC AsmParser. Two of its
directives open files (AsmParser.cpp, LLVM 14-22, both through SourceMgr::AddIncludeFile):
- `.incbin "path"[, skip[, count]]` copies the file's bytes into the object;
- `.include "path"` assembles the file's text as if it stood there, so its own directives read
  files too: files_read follows it through `load`.
Checked and reading nothing: `.file`/`.loc`/`.line` (DWARF names; an MD5 and a DWARF 5 `source`
are given inline), `.cv_file` and the other `.cv_*` (CodeView: names and checksums inline),
`# N "file"` line markers, `.print`/`.err`/`.error`/`.warning`/`.abort` (messages), `.reloc`,
`.lto_*`, `.pseudoprobe`; the Darwin-only `.secure_log_unique` (writes $AS_SECURE_LOG_FILE) and
`.dump`/`.load` (ignored) cannot occur in an ld.lld (ELF) link. MC has no `.import` (wasm's
`.import_module`/`.import_name` are symbol metadata), and targets alias only data directives
(`.word`, `.hword`) to generic ones.

Where a relative path is looked up (SourceMgr::OpenIncludeFile): as given, that is against the
backend compile's working directory, then under each include directory in order
(MCTargetOptions::IASSearchPaths, which clang fills from its -I/-iquote/-isystem entries). For
`clang -c -x ir` the driver drops -I, -iquote and -isystem ("argument unused") and adds no
system directories, but forwards `-Wa,-I<dir>`; `-Xclang -I <dir>` counts too. The module's
own directory does not matter, and a path in an included file is looked up the same way, not
beside that file (measured with clang 22.1.8 and 14). So a key needs, per path, which of
those candidates opens first and its bytes; a path that opens nowhere (a directive under
`.if 0`, in a comment, in a macro never used) is keyed as absent: MC fails on it if it is run.

Never guessed. A directive name spelt whole anywhere is an occurrence of its word; one built by
expansion needs pieces joined, by a macro substitution or a template operand next to a letter,
a `.` or another such (a whole name passed as an argument is spelt in the invocation).
CannotTell is raised when:
- "incbin" or "include", in any case, occurs anywhere (a comment, a string, a symbol, a quoted
  directive name `".incbin"`) but in a directive understood here: the first token of a
  statement (after `label:`s), `.incbin`/`.include` in any case, then a double-quoted path;
- that path holds a backslash (MC decodes escapes), a newline, a NUL, or, in a template, an
  operand or a `$$` (`$`, or nothing in Intel dialect);
- `.altmacro` occurs (a parameter then needs no backslash, and `&` joins);
- a substitution (`\\name`, `\\()`; `\\@` and `\\+` are digits) touches a letter, a `.`, an
  operand, a `$$` or another substitution: in every text once a macro-like body (`.macro`,
  `.rept`/`.rep`, `.irp`, `.irpc`, any case) occurs in any, and in templates always (an
  operand could print a body's opener). A string argument is substituted without its quotes,
  so it can bring a `;` too;
- in a template (an InlineAsm string): an operand (`$N`, `${N:m}`) or dialect alternative
  (`$(`, `$|`, `$)`) touches a letter, a `.` or another one; `$$` joins two such; a `$` or
  `${:x}` the asm printer rejects; or any operand, when a symbol name could print as a
  directive (`directive_symbols`): an operand prints a register, a number, a label or a
  symbol name (quoted by MC if it holds a separator), so only a symbol name can spell one.
Statements end at a newline or `;`; `#`, `//` and `/* */` comments and strings (which may span
lines) are skipped, as x86's MC lexer does. Where a target differs, a directive is at worst
reported that does not run, or an occurrence not understood: both safe. Paths keep the text's
bytes (surrogateescape).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .irmodule import ModuleAsm

HOLE, JOIN = "\ue000", "\ue001"  # a template operand or dialect alternative; a `$$`
NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.")  # what a directive name is made of
_WORDS = re.compile(r"incbin|include", re.I)
_DIRECTIVE = re.compile(r"\.(incbin|include)(?![A-Za-z0-9_.$@?])[ \t]*", re.I)
_LABEL = re.compile(r'(?:[A-Za-z0-9_.$@?]+|"[^"\\\n]*")[ \t]*:[ \t]*')
_BODY = re.compile(r"\.(?:macro|rept?|irpc?)(?![A-Za-z0-9_.$@?])", re.I)
_ALTMACRO = re.compile(r"\.altmacro(?![A-Za-z0-9_.$@?])", re.I)
_SUBSTITUTION = re.compile(r"\\(?:[A-Za-z0-9_$.]+|\(\))")  # AsmParser::expandMacro; \@ and \+ give digits
_SPECIAL = {"uid": "0", "private": ".L", "comment": "#"}  # AsmPrinter::PrintSpecial (ELF)
_OPERAND = re.compile(r"\$(?:\$|[(|)]|\d+|\{\d+(?::.)?\}|\{:([a-z]+)\})")
# An operand touching a name character or another operand; a `$$` between two such.
_GLUED = re.compile(f"[A-Za-z.{HOLE}{JOIN}]{HOLE}|{HOLE}[A-Za-z.{HOLE}{JOIN}]|[A-Za-z.{HOLE}]{JOIN}+[A-Za-z.{HOLE}]")


class CannotTell(ValueError):
    """The asm may make the assembler read a file that cannot be named from its text."""


@dataclass(frozen=True)
class Read:
    """One file an inline-assembly directive reads."""

    directive: str  # "incbin" or "include", lower case
    path: str  # as written: a relative path is looked up as the module docstring says


@dataclass(frozen=True)
class Reads:
    """The files a module's inline assembly reads, or why they cannot be told."""

    files: tuple[str, ...] = ()  # the paths `.incbin` and `.include` name, as written
    unknown: str = ""  # why the files cannot be told (files is then empty)


def reads(asm: ModuleAsm, load: Callable[[str], str | None] | None = None) -> Reads:
    """files_read of one module's inline assembly, as a value. Without `load`, an `.include` is
    unknown: what the included text reads is not followed."""
    try:
        found = files_read(asm.module, asm.templates, load or _unfollowed, asm.directive_symbols)
    except CannotTell as e:
        return Reads(unknown=str(e))
    return Reads(tuple(dict.fromkeys(r.path for r in found)))


def _unfollowed(path: str) -> str | None:
    raise CannotTell(f'.include "{path}": what its text reads is not followed')


def files_read(module: Iterable[str], templates: Iterable[str], load: Callable[[str], str | None],
               directive_symbols: bool = False) -> tuple[Read, ...]:
    """The files assembling this asm reads, in order of first mention; CannotTell if unsure.

    module: module asm texts; templates: InlineAsm strings ($N operands, $$ for $);
    load(path): the text of an `.include`d file, as the compile would find it, or None if it
    finds none (the path is still reported); directive_symbols: a symbol name of a module
    whose functions are compiled spells a directive (irmodule.ModuleAsm.directive_symbols).
    """
    texts = list(module)
    expanded = [_expand(t) for t in templates]
    if directive_symbols and any(HOLE in t for t in expanded):
        raise CannotTell("an operand could print a symbol that spells a directive")
    texts += expanded
    found: dict[Read, None] = {}
    loaded: set[str] = set()
    for text in texts:  # grows as `.include`d files are loaded
        for read in _directives(text):
            found[read] = None
            if read.directive == "include" and read.path not in loaded:
                loaded.add(read.path)
                included = load(read.path)
                if included is not None:
                    texts.append(included)
    if any(_ALTMACRO.search(t) for t in texts):
        raise CannotTell(".altmacro: a macro parameter needs no backslash there")
    # A template is checked even without a body in sight: an operand could print one's opener,
    # and a function is assembled in each module it is imported into, beside their module asm.
    for text in texts if any(_BODY.search(t) for t in texts) else expanded:
        _check_substitutions(text)
    return tuple(found)


def _expand(template: str) -> str:
    """A template as the assembler could get it: each operand or alternative marker a HOLE,
    each `$$` a JOIN, the specials their ELF text (AsmPrinterInlineAsm.cpp EmitInlineAsmStr)."""
    out = []
    pos = 0
    for m in _OPERAND.finditer(template):
        out.append(template[pos : m.start()])
        special = m.group(1)
        if special is not None and special not in _SPECIAL:
            raise CannotTell(f"an unknown ${{:{special}}} in {template!r}")
        out.append(_SPECIAL[special] if special else JOIN if m.group() == "$$" else HOLE)
        pos = m.end()
    out.append(template[pos:])
    text = "".join(out)
    if "$" in text:
        raise CannotTell(f"a $ the asm printer rejects in {template!r}")
    if _GLUED.search(text):
        raise CannotTell(f"an operand glued to a name in {template!r}")
    return text


def _directives(text: str) -> Iterator[Read]:
    """Each `.incbin`/`.include` at a statement start, with a plain quoted path; CannotTell for any
    other occurrence of either word."""
    if not _WORDS.search(text):  # neither word anywhere (most of the kernel's asm): nothing to lex
        return
    covered = []
    for start in _starts(text):
        m = _DIRECTIVE.match(text, start)
        if not m:
            continue
        if text[m.end() : m.end() + 1] != '"':
            raise CannotTell(f"{m.group().strip()} without a quoted path: {_around(text, start)}")
        end = _string_end(text, m.end())
        path = text[m.end() + 1 : end - 1]
        if end > len(text) or any(c in path for c in "\\\n\r\0" + HOLE + JOIN):
            raise CannotTell(f"a path that is not plain: {_around(text, start)}")
        covered.append((start, end))
        yield Read(m.group(1).lower(), path)
    for word in _WORDS.finditer(text):
        if not any(a < word.start() < b for a, b in covered):
            raise CannotTell(f"{word.group()!r} outside a plain directive: {_around(text, word.start())}")


def _starts(text: str) -> Iterator[int]:
    """Where each statement's first token (after labels) starts, as MC's lexer splits them."""
    i, n, at_start = 0, len(text), True
    while i < n:
        c = text[i]
        if at_start:
            if c in " \t":
                i += 1
                continue
            if text.startswith("/*", i):  # a comment token: the statement has not started yet
                close = text.find("*/", i + 2)
                i = n if close < 0 else close + 2
                continue
            label = _LABEL.match(text, i)
            if label:
                i = label.end()
                continue
            yield i
            at_start = False
        if c == '"':
            i = _string_end(text, i)
        elif c == "'":  # 'c' or '\c' (AsmLexer::LexSingleQuote)
            i += 4 if text[i + 1 : i + 2] == "\\" else 3
        elif c == "#" or text.startswith("//", i):
            while i < n and text[i] not in "\n\r":
                i += 1
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
        elif c in ";\n\r":
            at_start = True
            i += 1
        else:
            i += 1


def _string_end(text: str, i: int) -> int:
    """Past the string that opens at text[i] (a backslash escapes the next character, newlines
    included, as in AsmLexer::LexQuote); past the end of the text if it is not closed."""
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return len(text) + 1


def _check_substitutions(text: str) -> None:
    for m in _SUBSTITUTION.finditer(text):
        before = text[m.start() - 1 : m.start()]
        after = text[m.end() : m.end() + 1]
        if before and before in NAME | {HOLE, JOIN} or after and after in NAME | {HOLE, JOIN, "\\"}:
            raise CannotTell(f"a macro substitution glued to a name: {_around(text, m.start())}")


def _around(text: str, i: int) -> str:
    return repr(text[max(0, i - 20) : i + 30])
