"""What lld reads because of a linker script, and which absent paths it probed first.

A linker script makes lld read files that no command-line token names: INPUT/GROUP
name objects and libraries (`-lname`, `-l:name`, relative, absolute, `=`-prefixed),
INCLUDE pulls in more script text, and any file they name may itself be a script
(libc.so is one). Some of those lookups try several paths and take the first that
exists, so a file *appearing* on an earlier path changes the link without any file that
was read changing. `reads()` returns both lists for one script, recursively, exactly as
lld of a given major version does, or says it cannot (`unknown`) and never guesses.

The model follows lld/ELF/ScriptLexer.cpp, ScriptParser.cpp (readLinkerScript,
addFile, readInput, readInclude, readSearchDir, readSections, readMemory,
readOutputSectionDescription, readExpr/readPrimary), Driver.cpp (addFile, addLibrary)
and DriverUtils.cpp (findFile, findFromSearchPaths, searchLibraryBaseName,
searchScript), checked against every ld.lld from 13 to 22 with --dependency-file
(Debian's 13-16, 19 and 22; zig's builds of 17, 18, 20 and 21; tests/test_ldscript.py
runs on any of them it is given):

- One lexer for all versions: the lazy two-state lexer of lld 20+ (PR #100493). lld 13-19
  tokenize the whole file in the script state and split tokens again inside
  expressions (maybeSplitExpr); for a script both accept, both give the same token
  stream where it matters here (where commands start and end); they differ only on
  scripts the older one rejects (`x = a^b;`, a comment glued to a token in an
  expression), and a rejected script fails the link.
- INCLUDE is honoured where lld honours it: at the top level, directly in SECTIONS, in
  an output section's body and in MEMORY. It is searched as `searchScript` does: the
  name as given (from the working directory, never beside the including script), then
  each search directory. An included file is read as script text whatever its bytes;
  its tokens continue the including one's (a construct may span the two), which lld
  13-22 all allow.
- lld 13-19 refuse a second INCLUDE of any name already INCLUDEd in the same script
  ("there is a cycle"); lld 20+ only refuse a name still open, and close a name when
  the lexer leaves the file: it forgets the *path* it opened, so a name found through
  a search directory stays open and a second INCLUDE of it fails as well.
- INPUT/GROUP and AS_NEEDED inside them: each token is a file name (a comma is a file
  named ","), searched as `addFile` does: an absolute name under the sysroot rule,
  `=name` in the sysroot, `-lname`/`-l:name` through the search directories (lib.so
  then lib.a per directory, .a only when static), and a relative name beside the script,
  then in the working directory, then in each search directory. Unchanged in 13-22.
- The sysroot rule (an absolute name in a script that lives under --sysroot is looked
  up only inside it): lld 13-19 decide once per parser, from the top script's path;
  lld 20+ decide per buffer, so an INCLUDEd file decides for its own INPUTs.
- SEARCH_DIR(dir) appends to the search path, for the rest of the link (nested scripts
  and later `-l` on the command line included), unless --nostdlib.
- A file an INPUT names is read; if it is not ELF, an archive or bitcode, lld parses it
  as a script in turn (a new parser: fresh INCLUDE bookkeeping, its own sysroot test).

What the caller passes is what lld knows at the moment it reads the script: every -L
value of the whole command line (lld collects them all first) followed by the
SEARCH_DIRs of scripts read earlier, --sysroot, --nostdlib, and whether -Bstatic is in
effect there. --chroot and --remap-inputs change which file lld opens for a path; the
model knows neither, so a link that uses them must not rely on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .. import magic

OLDEST_LLD = 13
NEWEST_LLD = 22
# lld 20 replaced the whole-file tokenizer by a lazy lexer with a buffer stack for
# INCLUDE (PR #100493, after the 19 branch): INCLUDE bookkeeping and the sysroot test
# changed with it.
LAZY_LEXER_LLD = 20
# lld has no limit on scripts naming scripts (a loop of them overflows its stack).
NESTING_LIMIT = 64

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_SCRIPT_CHARS = frozenset(_ALNUM + "_.$/\\~=+[]*?-!^:")  # a bare token outside expressions
_EXPR_CHARS = frozenset(_ALNUM + "_.$")  # a bare token inside an expression
_SPACE = frozenset(" \t\n\v\f\r")  # StringRef::ltrim's default set
_EXPR_PAIRS = frozenset({"==", "!=", "<=", ">=", "<<", ">>", "&&", "||"})
_BINARY_OPS = frozenset({"*", "/", "%", "+", "-", "<<", ">>", "<", "<=", ">", ">=", "==", "!=",
                         "&", "^", "|", "&&", "||"})
_ASSIGN_OPS = frozenset({"+=", "-=", "*=", "/=", "&=", "^=", "|=", "<<=", ">>="})
_PAREN_BUILTINS = frozenset({"ABSOLUTE", "ADDR", "ALIGN", "ALIGNOF", "ASSERT", "CONSTANT",
                             "DATA_SEGMENT_ALIGN", "DATA_SEGMENT_END", "DATA_SEGMENT_RELRO_END",
                             "DEFINED", "LENGTH", "LOADADDR", "LOG2CEIL", "MAX", "MIN", "ORIGIN",
                             "SEGMENT_START", "SIZEOF"})
_PROVIDES = frozenset({"PROVIDE", "HIDDEN", "PROVIDE_HIDDEN"})
_BYTE_COMMANDS = frozenset({"BYTE", "SHORT", "LONG", "QUAD"})
# Top-level directives that read nothing: each is skipped the way lld parses it.
_NAME_IN_PARENS = frozenset({"ENTRY", "OUTPUT"})
_LIST_IN_PARENS = frozenset({"EXTERN", "OUTPUT_ARCH", "NOCROSSREFS", "NOCROSSREFS_TO"})


@dataclass(frozen=True)
class ScriptReads:
    """`found` is what lld's --dependency-file lists because of the script (an archive,
    not the members a thin one reads from beside it); a file in `absent` that appears
    changes which file lld takes."""

    found: tuple[str, ...]  # files lld reads because of the script, in order, spelt as lld opens them
    absent: tuple[str, ...]  # paths lld probed and did not find before the one it took
    search_dirs: tuple[str, ...]  # the search path after the script (SEARCH_DIR appends to it)
    unknown: str = ""  # non-empty: why the model cannot tell what lld reads (do not cache)


def reads(path: str, *, search_dirs: list[str] | tuple[str, ...], lld_major: int, sysroot: str = "",
          static: bool = False, nostdlib: bool = False, cwd: str = ".") -> ScriptReads:
    """What ld.lld `lld_major` reads because it parses `path` as a linker script.

    `path` is spelt as lld opens it (as on the command line, or as lld's search found
    it): the script's directory and the sysroot test come from that spelling. The
    script itself is not in `found`. Relative paths, in the arguments and the result,
    are relative to `cwd`, the link's working directory."""
    link = _Link(list(search_dirs), sysroot, static, nostdlib, lld_major, cwd)
    if not OLDEST_LLD <= lld_major <= NEWEST_LLD:
        return link.result(f"lld {lld_major}: the script model covers lld {OLDEST_LLD} to {NEWEST_LLD}")
    try:
        link.parse(path, link.load(path))
    except _Unknown as e:
        return link.result(str(e))
    except RecursionError:
        return link.result("the script nests deeper than the model follows")
    return link.result()


def is_script(head: bytes) -> bool:
    """Whether lld may parse a file that starts with `head` (8 bytes are enough) as a linker script.

    lld parses as a script every file identify_magic calls unknown. The kinds lld links
    (ELF, ar archives, bitcode) are never that; any other kind identify_magic knows
    (COFF, Mach-O, ...; the list grows with LLVM) makes lld fail with "unknown file
    type", as does a file shorter than 18 bytes that starts like ELF, which lld parses
    as a script and rejects. Either way the link fails, whatever this says: True for
    all of them means a script lld would follow is never taken for something else."""
    return not (head.startswith(magic.ELF) or magic.is_archive(head) or magic.is_bitcode(head))


def find_script(name: str, *, search_dirs: list[str] | tuple[str, ...], sysroot: str = "",
                cwd: str = ".") -> tuple[str | None, tuple[str, ...]]:
    """searchScript, as lld finds a -T script or an INCLUDE: `name` from the working
    directory, else the first search directory that has it. (path or None, absent paths)."""
    link = _Link(list(search_dirs), sysroot, False, False, NEWEST_LLD, cwd)
    found = link.search_script(name)
    return found, tuple(dict.fromkeys(link.absent))


def find_library(spec: str, *, search_dirs: list[str] | tuple[str, ...], static: bool, sysroot: str = "",
                 cwd: str = ".") -> tuple[str | None, tuple[str, ...]]:
    """searchLibrary, as lld finds -l`spec` (`spec` is "name" or ":file"). (path or None, absent paths)."""
    link = _Link(list(search_dirs), sysroot, static, False, NEWEST_LLD, cwd)
    found = link.search_library(spec)
    return found, tuple(dict.fromkeys(link.absent))


class _Unknown(Exception):
    """The model cannot tell what lld reads: lld fails on the script, or does what the model does not follow."""


def _append(*parts: str) -> str:
    """llvm::sys::path::append (POSIX): a separator between parts unless one is already there."""
    out = ""
    for part in parts:
        if out.endswith("/"):
            out += part.lstrip("/")
        elif out and not part.startswith("/"):
            out += "/" + part
        else:
            out += part
    return out


def _parent(path: str) -> str:
    """llvm::sys::path::parent_path (POSIX): "" for a bare name, "/" for a file at the root,
    and "//net" is a root name, as LLVM reads it."""
    if not path:
        return ""
    if path.endswith("/"):
        end = len(path) - 1
    else:
        slash = path.rfind("/")
        end = 0 if slash < 0 or (slash == 1 and path[0] == "/") else slash + 1
    ended_in_slash = path[end] == "/"
    root = -1  # where the root directory is (npos: none)
    if len(path) > 3 and path.startswith("//") and path[2] != "/":
        root = path.find("/", 2)
    elif path.startswith("/"):
        root = 0
    while end > 0 and (root < 0 or end > root) and path[end - 1] == "/":
        end -= 1
    if end == root and not ended_in_slash:
        return path[: root + 1]
    return path[:end]


@dataclass(eq=False, repr=False)
class _Link:
    """What lld keeps across every script of one link, and what it read and probed."""

    search_dirs: list[str]
    sysroot: str
    static: bool
    nostdlib: bool
    major: int
    cwd: str
    found: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    depth: int = 0

    def result(self, unknown: str = "") -> ScriptReads:
        return ScriptReads(tuple(dict.fromkeys(self.found)), tuple(dict.fromkeys(self.absent)),
                           tuple(self.search_dirs), unknown)

    def _at(self, path: str) -> str:
        return os.path.join(self.cwd, path)

    def exists(self, path: str) -> bool:
        """sys::fs::exists: anything stat reaches (a directory too). A miss is kept as a
        probe, except "", which no file can ever answer."""
        if path and os.path.exists(self._at(path)):
            return True
        if path:
            self.absent.append(path)
        return False

    def load(self, path: str, head: int = -1) -> bytes:
        """The file's bytes: all of them, or its first `head` if that shows it is no script."""
        try:
            with open(self._at(path), "rb") as f:
                data = f.read(head)
                # Only a script is read whole: an archive the script names may be large.
                return data + f.read() if head < 0 or is_script(data) else data
        except OSError as e:
            raise _Unknown(f"lld fails: cannot open {path}: {e.strerror}") from None

    def read(self, path: str, head: int = -1) -> bytes:
        """readFile: lld lists the path in its dependency file, then opens it."""
        self.found.append(path)
        return self.load(path, head)

    def under_sysroot(self, path: str) -> bool:
        """Whether `path` or a directory above it is the sysroot (sys::fs::equivalent: same file)."""
        if not self.sysroot:
            return False
        while path:
            try:
                if os.path.samefile(self._at(self.sysroot), self._at(path)):
                    return True
            except OSError:
                pass
            parent = _parent(path)
            if parent == path:
                break
            path = parent
        return False

    def find_file(self, directory: str, name: str) -> str | None:
        """findFile: a search directory that starts with "=" is inside the sysroot."""
        path = _append(self.sysroot, directory[1:], name) if directory.startswith("=") else _append(directory, name)
        return path if self.exists(path) else None

    def search(self, name: str) -> str | None:
        """findFromSearchPaths."""
        return next((p for d in list(self.search_dirs) if (p := self.find_file(d, name)) is not None), None)

    def search_library(self, spec: str) -> str | None:
        """searchLibrary: -l:file as named; -lname as libname.so (unless static), then libname.a, per directory."""
        if spec.startswith(":"):
            return self.search(spec[1:])
        for d in list(self.search_dirs):
            for name in ([] if self.static else [f"lib{spec}.so"]) + [f"lib{spec}.a"]:
                if (path := self.find_file(d, name)) is not None:
                    return path
        return None

    def search_script(self, name: str) -> str | None:
        """searchScript."""
        return name if self.exists(name) else self.search(name)

    def add_file(self, path: str) -> None:
        """LinkerDriver::addFile: read it; what is not ELF, an archive or bitcode is a script."""
        data = self.read(path, head=8)
        if is_script(data):
            self.parse(path, data)

    def parse(self, path: str, data: bytes) -> None:
        """readLinkerScript: a new parser for a script lld reads as an input or a -T."""
        if self.depth >= NESTING_LIMIT:
            raise _Unknown(f"{path}: scripts nest deeper than {NESTING_LIMIT} (lld recurses without end)")
        self.depth += 1
        try:
            _Parser(self, path, data).script()
        finally:
            self.depth -= 1


@dataclass(eq=False, repr=False)
class _Buffer:
    """One file the lexer reads: the top script or an INCLUDEd one."""

    text: str  # the bytes as latin-1: one character per byte, as lld's StringRef sees them
    name: str  # the path lld opened it by (its MemoryBuffer identifier)
    under_sysroot: bool
    pos: int = 0


class _Lexer:
    """lld 20's ScriptLexer: tokens made on demand in one of two states (script or
    expression), a stack of INCLUDEd buffers that continues in the includer at their end."""

    def __init__(self, top: _Buffer, popped):
        self.buf = top
        self.stack: list[_Buffer] = []
        self.popped = popped  # called with each INCLUDEd buffer the lexer leaves
        self.ahead: tuple[str, bool, int] | None = None  # a peeked token, its state, where it starts
        self.last = top  # the buffer of the last token next() returned

    def push(self, buf: _Buffer) -> None:
        assert self.ahead is None
        self.stack.append(self.buf)
        self.buf = buf

    def peek(self, expr: bool = False) -> str:
        """The next token ("" at the end); one peeked in the other state is lexed again, as lld does."""
        if self.ahead is not None:
            token, state, start = self.ahead
            if state == expr:
                return token
            self.buf.pos = start
        token, start = self._lex(expr)
        self.ahead = (token, expr, start)
        return token

    def next(self, expr: bool = False) -> str:
        token = self.peek(expr)
        self.ahead = None
        self.last = self.buf
        return token

    def _skip_space(self, b: _Buffer) -> None:
        t, i, n = b.text, b.pos, len(b.text)
        while i < n:
            if t.startswith("/*", i):
                end = t.find("*/", i + 2)
                if end < 0:
                    raise _Unknown(f"lld fails: {b.name}: unclosed comment")
                i = end + 2
            elif t[i] == "#":
                end = t.find("\n", i + 1)
                i = n if end < 0 else end + 1
            elif t[i] in _SPACE:
                i += 1
            else:
                break
        b.pos = i

    def _lex(self, expr: bool) -> tuple[str, int]:
        while True:
            b = self.buf
            self._skip_space(b)
            if b.pos < len(b.text):
                break
            if not self.stack:
                return "", b.pos
            self.popped(b)
            self.buf = self.stack.pop()
        t, i, n = b.text, b.pos, len(b.text)
        if t[i] == '"':
            end = t.find('"', i + 1)
            if end < 0:
                raise _Unknown(f"lld fails: {b.name}: unclosed quote")
            j = end + 1
        elif t.startswith(("<<=", ">>="), i):
            j = i + 3
        elif i + 1 < n and t[i + 1] == "=" and t[i] in "+-*/!&^|":
            j = i + 2
        else:
            chars = _EXPR_CHARS if expr else _SCRIPT_CHARS
            j = i
            while j < n and t[j] in chars:
                j += 1
            if j == i and expr and t[i:i + 2] in _EXPR_PAIRS:
                j = i + 2
            elif j == i:
                j = i + 1
        b.pos = j
        return t[i:j], i


def _unquote(token: str) -> str:
    return token[1:-1] if token.startswith('"') else token


def _path(token: str) -> str:
    """A file name as the file system spells it (the script's bytes, decoded as os does)."""
    return os.fsdecode(token.encode("latin-1"))


class _Parser:
    """One ScriptParser: the statements that make lld read files are followed, every other
    statement is skipped along lld's own grammar, so that the next statement starts where
    lld's does."""

    def __init__(self, link: _Link, path: str, data: bytes):
        self.link = link
        self.lazy = link.major >= LAZY_LEXER_LLD
        top = _Buffer(data.decode("latin-1"), path, link.under_sysroot(path))
        self.lex = _Lexer(top, self._left)
        # lld 20+: activeFilenames, which starts with the top script; 13-19: `seen`, which does not.
        self.included: set[str] = {path} if self.lazy else set()
        self.top_under_sysroot = top.under_sysroot

    def _left(self, buf: _Buffer) -> None:
        if self.lazy:
            self.included.discard(buf.name)

    # -- tokens ---------------------------------------------------------------------------

    def _next(self, expr: bool = False) -> str:
        token = self.lex.next(expr)
        if not token:
            raise _Unknown(f"lld fails: {self.lex.buf.name}: unexpected end of the script")
        return token

    def _expect(self, want: str, expr: bool = False) -> None:
        got = self.lex.next(expr)
        if got != want:
            raise _Unknown(f"lld fails: {self.lex.last.name}: {want} expected, but got {got or 'the end'}")

    def _consume(self, want: str, expr: bool = False) -> bool:
        if self.lex.peek(expr) != want:
            return False
        self.lex.next(expr)
        return True

    def _till(self, end: str, expr: bool = False) -> str | None:
        """ScriptLexer::till: the next token, or None at `end` (the end of the script is an error)."""
        token = self._next(expr)
        return None if token == end else token

    def _group(self, expr: bool = False) -> None:
        """A parenthesised group skipped whole (its parentheses balance in any script lld accepts)."""
        self._expect("(", expr)
        depth = 1
        while depth:
            token = self._next(expr)
            depth += (token == "(") - (token == ")")

    # -- the top level --------------------------------------------------------------------

    def script(self) -> None:
        """readLinkerScript."""
        while token := self.lex.next():
            if token == ";":
                continue
            if token in ("INPUT", "GROUP"):
                self._input()
            elif token == "INCLUDE":
                self._include()
            elif token == "SEARCH_DIR":
                self._expect("(")
                directory = _path(_unquote(self._next()))
                if not self.link.nostdlib:
                    self.link.search_dirs.append(directory)
                self._expect(")")
            elif token == "TARGET":
                self._target()
            elif token in _NAME_IN_PARENS:
                self._expect("(")
                self._next()
                self._expect(")")
            elif token in _LIST_IN_PARENS:
                self._expect("(")
                while self._till(")") is not None:
                    pass
            elif token == "OUTPUT_FORMAT":
                self._output_format()
            elif token == "REGION_ALIAS":
                self._expect("(")
                self._next()
                self._expect(",")
                self._next()
                self._expect(")")
            elif token == "SECTIONS":
                self._sections()
            elif token == "MEMORY":
                self._memory()
            elif token == "PHDRS":
                self._phdrs()
            elif token == "VERSION":
                self._braces()
            elif token == "OVERWRITE_SECTIONS":
                self._expect("{")
                while (name := self._till("}")) is not None:
                    self._output_section(name)
            elif not self._assignment(token):
                raise _Unknown(f"lld fails: {self.lex.last.name}: unknown directive: {token}")

    def _input(self) -> None:
        """readInput (GROUP is INPUT as far as reading goes)."""
        self._expect("(")
        while (token := self._till(")")) is not None:
            if token == "AS_NEEDED":
                self._expect("(")
                while (name := self._till(")")) is not None:
                    self._add_file(_path(_unquote(name)))
            else:
                self._add_file(_path(_unquote(token)))

    def _add_file(self, name: str) -> None:
        """ScriptParser::addFile."""
        link = self.link
        buf = self.lex.last  # the buffer the name came from
        under = buf.under_sysroot if self.lazy else self.top_under_sysroot
        if under and name.startswith("/"):
            inside = link.sysroot + name
            if not link.exists(inside):
                raise _Unknown(f"lld fails: cannot find {name} inside {link.sysroot}")
            link.add_file(inside)
        elif name.startswith("/"):
            link.add_file(name)
        elif name.startswith("="):
            link.add_file(link.sysroot + "/" + name[1:] if link.sysroot else name[1:])
        elif name.startswith("-l"):
            found = link.search_library(name[2:])
            if found is None:
                raise _Unknown(f"lld fails: unable to find library {name}")
            link.add_file(found)
        else:
            directory = _parent(buf.name)
            if directory and link.exists(beside := _append(directory, name)):
                link.add_file(beside)
            elif link.exists(name):
                link.add_file(name)
            elif (found := link.search(name)) is not None:
                link.add_file(found)
            else:
                raise _Unknown(f"lld fails: unable to find {name}")

    def _include(self) -> None:
        """readInclude: the included text continues the token stream where INCLUDE stood."""
        name = _path(_unquote(self._next()))
        if name in self.included:
            raise _Unknown(f"lld {self.link.major} fails: INCLUDE {name}: a cycle in linker script INCLUDEs")
        self.included.add(name)
        path = self.link.search_script(name)
        if path is None:
            raise _Unknown(f"lld fails: cannot find linker script {name}")
        text = self.link.read(path).decode("latin-1")
        # lld 13-19 never ask an included file whether it is under the sysroot (the top script decides).
        self.lex.push(_Buffer(text, path, self.link.under_sysroot(path) if self.lazy else False))

    def _target(self) -> None:
        self._expect("(")
        target = _unquote(self._next())
        self._expect(")")
        if target == "binary":
            # lld reads every later input as raw bytes, scripts included.
            raise _Unknown("TARGET(binary): lld reads later inputs as data")
        if not target.startswith("elf"):
            raise _Unknown(f"lld fails: unknown target: {target}")

    def _output_format(self) -> None:
        self._expect("(")
        self._next()
        if not self._consume(")"):
            self._expect(",")
            self._next()
            self._expect(",")
            self._next()
            self._consume(")")  # lld does not insist on it

    def _braces(self) -> None:
        """A block whose inside reads nothing and honours no INCLUDE (VERSION)."""
        self._expect("{")
        depth = 1
        while depth:
            token = self._next()
            depth += (token == "{") - (token == "}")

    def _phdrs(self) -> None:
        self._expect("{")
        while self._till("}") is not None:
            self._next()  # the type
            while (token := self._next()) != ";":
                if token in ("AT", "FLAGS"):
                    self._paren_expr()
                elif token not in ("FILEHDR", "PHDRS"):
                    raise _Unknown(f"lld fails: unexpected header attribute: {token}")

    # -- assignments and expressions ------------------------------------------------------

    def _assignment(self, token: str) -> bool:
        """readAssignment: whether `token` starts one (it is then read, through its ";")."""
        if token == "ASSERT":  # readAssert; no ";" follows
            self._expect("(")
            self._expr()
            self._expect(",")
            self._next()
            self._expect(")")
            return True
        op = self.lex.peek()
        if op.startswith("=") or op in _ASSIGN_OPS:
            self._next(expr=True)  # "=5" is "=" then "5" in the expression state
            self._expr()
        elif token in _PROVIDES:
            self._expect("(", expr=True)
            self._next(expr=True)
            self._expect("=", expr=True)
            self._expr()
            self._expect(")", expr=True)
        else:
            return False
        self._expect(";")
        return True

    def _expr(self) -> None:
        """readExpr: a primary, then operators and primaries, where a ternary takes the rest."""
        self._primary()
        while True:
            op = self.lex.peek(expr=True)
            if op == "?":
                self.lex.next(expr=True)
                self._expr()
                self._expect(":", expr=True)
                self._expr()
                return
            if op not in _BINARY_OPS:
                return
            self.lex.next(expr=True)
            self._primary()

    def _primary(self) -> None:
        token = self.lex.peek(expr=True)
        if token == "(":
            self._paren_expr()
            return
        self._next(expr=True)
        if token in ("~", "!", "-"):
            self._primary()
        elif token in _PAREN_BUILTINS:
            self._group(expr=True)

    def _paren_expr(self) -> None:
        self._expect("(", expr=True)
        self._expr()
        self._expect(")", expr=True)

    # -- SECTIONS, MEMORY -----------------------------------------------------------------

    def _sections(self) -> None:
        """readSections, then an optional INSERT AFTER|BEFORE name."""
        self._expect("{")
        while (token := self._till("}")) is not None:
            if token == "OVERLAY":
                self._overlay()
            elif token == "CLASS":
                self._class_name()
                self._braces()
            elif token == "INCLUDE":
                self._include()
            elif not self._assignment(token):
                self._output_section(token)
        if self._consume("INSERT"):
            if not (self._consume("AFTER") or self._consume("BEFORE")):
                raise _Unknown("lld fails: INSERT without AFTER or BEFORE")
            self._next()

    def _overlay(self) -> None:
        """readOverlay: an address, ":", an optional AT(...), then a block of sections that honours no INCLUDE."""
        if not self._consume(":"):
            self._expr()
            self._expect(":")
        if self._consume("AT"):
            self._paren_expr()
        self._braces()

    def _output_section(self, name: str) -> None:
        """readOutputSectionDescription: header, body, then > region, AT> region, :phdr..., =fill, ","."""
        # The header (address, type, ":", AT(), ALIGN(), SUBALIGN(), ONLY_IF_*) holds no "{" in
        # a script lld accepts; it is lexed in the expression state as lld lexes most of it.
        while self._next(expr=True) != "{":
            pass
        while (token := self._till("}")) is not None:
            if token == ";" or self._assignment(token) or token in ("CONSTRUCTORS",):
                continue
            if token in _BYTE_COMMANDS or token == "FILL":
                self._paren_expr()
            elif token == "SORT":
                self._expect("(")
                self._expect("CONSTRUCTORS")
                self._expect(")")
            elif token == "INCLUDE":
                self._include()
            elif token in ("(", ")"):
                raise _Unknown("lld fails: expected filename pattern")
            elif self.lex.peek() == "(":
                self._input_sections(token)
            # else: a file name alone, all its sections
        if self._consume(">"):
            self._next()
        if self._consume("AT"):
            self._expect(">")
            self._next()
        while self.lex.peek().startswith(":"):
            if self._next() == ":":
                self._next()
        if self.lex.peek().startswith("="):
            self._expect("=", expr=True)
            self._primary()
        self._consume(",")

    def _input_sections(self, token: str) -> None:
        """readInputSectionDescription: KEEP(...), INPUT_SECTION_FLAGS(...) rules, CLASS(name), or rules."""
        keep = token == "KEEP"
        if keep:
            self._expect("(")
            if self._consume("INPUT_SECTION_FLAGS"):
                self._group()
            token = self._next()
        elif token == "INPUT_SECTION_FLAGS":
            self._group()
            token = self._next()
        if token == "CLASS":
            self._class_name()
        else:
            self._section_rules()
        if keep:
            self._expect(")")

    def _class_name(self) -> None:
        self._expect("(")
        self._next()
        self._expect(")")

    def _section_rules(self) -> None:
        """readInputSectionRules: SORT*(...) nests, EXCLUDE_FILE(...) is a flat list of names."""
        self._expect("(")
        depth = 1
        while depth:
            token = self._next()
            if token == "EXCLUDE_FILE":
                self._expect("(")
                while self._till(")") is not None:
                    pass
            else:
                depth += (token == "(") - (token == ")")

    def _memory(self) -> None:
        """readMemory: INCLUDE, or name [(attributes)] : ORIGIN = expr , LENGTH = expr."""
        self._expect("{")
        while (token := self._till("}")) is not None:
            if token == "INCLUDE":
                self._include()
                continue
            if self._consume("("):
                self._next()
                self._expect(")")
            self._expect(":")
            for names in (("ORIGIN", "org", "o"), ("LENGTH", "len", "l")):
                if self._next() not in names:
                    raise _Unknown(f"lld fails: expected one of {', '.join(names)}")
                self._expect("=")
                self._expr()
                if names[0] == "ORIGIN":
                    self._expect(",")
