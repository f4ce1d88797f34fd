"""Inline assembly that reads files (issue 24): irmodule.inline_asm against llvm-dis on real modules,
asmreads.files_read on a table of texts (checked against llvm-mc where it names the files), and
real backend compiles that read exactly the files named, imported functions' included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import Toolchain, refusals, run, write
from ltowrap.formats import asmreads, irmodule
from ltowrap.formats.asmreads import CannotTell, Read
from ltowrap.formats.bitcode import CHAR6, BadBitcode, Node, Want, _Writer, read

MODULE_C = r"""
__asm__(".pushsection .rodata\n.global blob\nblob:\n.incbin \"data.txt\"\n.popsection");
__asm__(".include \"defs.s\"");
static int helper(int x) {
    int y;
    __asm__ volatile(".pushsection .rodata.f\n.incbin \"fdata.bin\", 1\n.popsection\nmovl %1, %0" : "=r"(y) : "r"(x));
    return y;
}
int f(int x) { return helper(x) + 1; }
int g(int x) { int y; __asm__("leal 1(%1), %0  # %% $ 100%%" : "=r"(y) : "r"(x)); return y; }
int h(int x) { __asm__ volatile(".include \"fn.s\"" ::: "memory"); return x; }
int k(int x) { return x * 3; }
"""
FILES = {"data.txt": "version one\n", "fdata.bin": "XYZ", "fn.s": "nop\n",
         "defs.s": ".pushsection .rodata.d\n.incbin \"nested.bin\"\n.popsection\n", "nested.bin": "N"}


def llvm_dis_asm(tc: Toolchain, path: Path) -> tuple[tuple[str, ...], set[str]]:
    """The module asm and the InlineAsm strings llvm-dis prints (its \\XX and \\\\ escapes undone)."""
    text = run([str(tc.bindir / "llvm-dis"), str(path), "-o", "-"], path.parent).stdout
    string = r'"((?:[^"\\]|\\\\|\\[0-9A-F]{2})*)"'
    lines = [_unescape(s) for s in re.findall(rf"^module asm {string}$", text, re.M)]
    keywords = "(?:sideeffect |alignstack |inteldialect |unwind )*"
    calls = {_unescape(s) for s in re.findall(rf"\basm {keywords}{string}, ", text)}
    return ("\n".join(lines) + "\n",) if lines else (), calls


def _unescape(s: str) -> str:
    raw = re.sub(rb"\\(\\|[0-9A-F]{2})", lambda m: b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1), 16)]),
                 s.encode("utf-8", "surrogateescape"))
    return raw.decode("utf-8", "surrogateescape")


def compile_module(tc: Toolchain, d: Path, source: str, name: str = "m") -> Path:
    for file, content in FILES.items():
        write(d / file, content)  # the compile parses module asm too (its symbol table): it reads them
    write(d / f"{name}.c", source)
    run([tc.clang, "-O2", "-flto=thin", "-c", f"{name}.c", "-o", f"{name}.o"], d)
    return d / f"{name}.o"


def test_inline_asm_is_what_llvm_dis_shows(project, tc):
    path = compile_module(tc, project, MODULE_C)
    asm = irmodule.inline_asm(path.read_bytes())
    module, calls = llvm_dis_asm(tc, path)
    assert asm.module == module and set(asm.templates) == calls
    assert len(asm.templates) == 3 and len(calls) == 3  # f (helper inlined), g, h; k has none
    assert not asm.directive_symbols
    assert asmreads.files_read(asm.module, asm.templates, lambda p: (project / p).read_text()) == (
        Read("incbin", "data.txt"), Read("include", "defs.s"), Read("incbin", "fdata.bin"), Read("include", "fn.s"),
        Read("incbin", "nested.bin"))


def test_inline_asm_of_a_module_without_any(project, tc):
    path = compile_module(tc, project, "int k(int x) { return x * 3; }\nint main(void) { return k(1); }\n")
    assert irmodule.inline_asm(path.read_bytes()) == irmodule.ModuleAsm((), (), False)
    assert llvm_dis_asm(tc, path) == ((), set())


def test_inline_asm_of_many_functions_and_debug_info(project, tc):
    """Forty functions, each with its own asm (and constants, and -g metadata around them)."""
    source = "".join(f'int f{i}(int x) {{ int y; __asm__("addl ${i}, %0 # f{i}" : "=r"(y) : "0"(x)); '
                     f'return y * {i + 7} + (int)sizeof("f{i}"); }}\n' for i in range(40))
    write(project / "many.c", source)
    run([tc.clang, "-O2", "-g", "-flto=thin", "-c", "many.c", "-o", "many.o"], project)
    asm = irmodule.inline_asm((project / "many.o").read_bytes())
    assert set(asm.templates) == llvm_dis_asm(tc, project / "many.o")[1]
    assert len(asm.templates) == 40 and asm.module == ()
    assert asmreads.files_read(asm.module, asm.templates, lambda p: None) == ()


def test_inline_asm_of_every_module_in_a_file(project, tc):
    """A file may hold several modules: CFI splits a unit in two (its second module holds
    clones, asm included, of some of the first's functions), and `llvm-cat -b` puts any together.
    Each is read, as llvm-modextract and llvm-dis show them apart."""
    compile_module(tc, project, MODULE_C)
    write(project / "two.c", 'int two(int x) { int y; __asm__("leal 2(%1), %0" : "=r"(y) : "r"(x)); return y; }\n')
    run([tc.clang, "-O2", "-flto=thin", "-c", "two.c", "-o", "two.o"], project)
    run([str(tc.bindir / "llvm-cat"), "-b", "m.o", "two.o", "-o", "cat.o"], project)
    write(project / "split.c", MODULE_C + "typedef int (*fn)(int);\nfn pick(int i) { return i ? f : g; }\n")
    run([tc.clang, "-O2", "-flto=thin", "-fsanitize=cfi-icall", "-fno-sanitize-ignorelist", "-fvisibility=hidden",
         "-c", "split.c", "-o", "split.o"], project)
    for name, templates in (("cat.o", 4), ("split.o", 3)):
        asm = irmodule.inline_asm((project / name).read_bytes())
        parts = []
        for n in (0, 1):
            run([str(tc.bindir / "llvm-modextract"), "-n", str(n), name, "-o", f"part{n}.bc"], project)
            parts.append(llvm_dis_asm(tc, project / f"part{n}.bc"))
        assert asm.module == parts[0][0] + parts[1][0] and set(asm.templates) == parts[0][1] | parts[1][1]
        assert len(asm.templates) == templates


def test_inline_asm_refuses_what_it_cannot_read(project, tc22):
    data = compile_module(tc22, project, MODULE_C).read_bytes()
    for broken in (data[:12], data[: len(data) // 2], b"BC\xc0\xde" + b"\xff" * 64, b"not bitcode"):
        with pytest.raises(BadBitcode):
            irmodule.inline_asm(broken)


def test_inline_asm_on_damaged_bitcode_knows_or_says_so(project, tc22):
    """Bit flips anywhere: inline_asm gives texts or raises BadBitcode, nothing else."""
    data = compile_module(tc22, project, MODULE_C).read_bytes()
    assert refusals(irmodule.inline_asm, data, seed=24, rounds=300) > 0


def test_a_symbol_spelling_a_directive_is_reported(project, tc22):
    write(project / "s.c", 'int odd __asm__(".incbin");\n'
                           'int get(void) { int v; __asm__("movl %1, %0" : "=r"(v) : "m"(odd)); return v; }\n')
    run([tc22.clang, "-O2", "-flto=thin", "-c", "s.c", "-o", "s.o"], project)
    asm = irmodule.inline_asm((project / "s.o").read_bytes())
    assert asm.directive_symbols
    with pytest.raises(CannotTell, match="symbol"):
        asmreads.files_read(asm.module, asm.templates, lambda p: None, asm.directive_symbols)


def test_read_takes_a_string_record_in_every_encoding():
    """LLVM may write a string record unabbreviated (a VBR6 field per character) or through an
    abbreviation (a char6, 8-bit or VBR array, or a blob): each reads back the same, and a record
    of an unwanted code in the same layout is passed over exactly."""
    text = "Ab.9_z"
    chars = text.encode()
    w, width = _Writer(), 4
    layouts = {"char6": [(4, 0)], "fixed8": [(1, 8)], "vbr4": [(2, 4)], "blob": []}  # array element, or a blob
    ids = {}
    for code in (5, 9):  # DEFINE_ABBREV [literal code, array of element | blob]
        for name, element in layouts.items():
            ids[code, name] = 4 + len(ids)
            w.fixed(2, width)
            w.vbr(3 if element else 2, 5)
            w.fixed(1, 1), w.vbr(code, 8)
            w.fixed(0, 1), w.fixed(3 if element else 5, 3)
            for enc, n in element:
                w.fixed(0, 1), w.fixed(enc, 3)
                if n:
                    w.vbr(n, 5)
    for name in layouts:
        for code in (5, 9):  # 9 is wanted
            w.fixed(ids[code, name], width)
            w.vbr(len(chars), 6)
            if name == "blob":
                w.bits = (w.bits + 31) & ~31
            for c in chars:
                if name == "char6":
                    w.fixed(CHAR6.index(chr(c)), 6)
                elif name == "vbr4":
                    w.vbr(c, 4)
                else:
                    w.fixed(c, 8)
            if name == "blob":
                w.bits = (w.bits + 31) & ~31
    for code in (5, 9):  # UNABBREV_RECORD
        w.fixed(3, width), w.vbr(code, 6), w.vbr(len(chars), 6)
        for c in chars:
            w.vbr(c, 6)
    w.fixed(0, width)  # END_BLOCK
    body = w.data()
    head = _Writer()  # the top level: ENTER_SUBBLOCK of block 99 with ids of `width` bits
    head.fixed(1, 2), head.vbr(99, 8), head.vbr(width, 4)
    stream = b"BC\xc0\xde" + head.data() + (len(body) // 4).to_bytes(4, "little") + body
    (block,) = read(stream, Want(only={99: frozenset({9})})).items
    assert isinstance(block, Node)
    got = block.items
    assert len(got) == 10 and got[0::2] == [[5]] * 5
    assert [irmodule._text(v[1:]) for v in got[1::2] if isinstance(v, list)] == [text] * 5


# --- real backend compiles read exactly what files_read names ---

IMPORTED_C = r"""
int get(void) {
    int v;
    __asm__ volatile(".pushsection .rodata.a\n.incbin \"adata.bin\"\n.popsection\nmovl $7, %0" : "=r"(v));
    return v;
}
"""


def test_an_imported_function_reads_its_file_in_the_importing_backend(project, tc):
    """a.c's get() is imported into b's backend, which then reads adata.bin relative to its own
    working directory (not the module's): files_read on b's module asm and the templates of b and a
    names it, and the backend compiles exactly when the files named are there."""
    write(project / "adata.bin", "A")
    write(project / "a.c", IMPORTED_C)
    write(project / "b.c", "int get(void);\nint use(void) { return get() * 2; }\n")
    for n in ("a", "b"):
        run([tc.clang, "-O2", "-flto=thin", "-c", f"{n}.c", "-o", f"{n}.o"], project)
    a, b = project / "a.o", project / "b.o"
    run([tc.lld, "--thinlto-index-only", "--thinlto-emit-imports-files", "-e", "use", str(a), str(b), "-o", "prog"],
        project)
    assert str(a) in (project / "b.o.imports").read_text()
    asm = {n: irmodule.inline_asm((project / f"{n}.o").read_bytes()) for n in ("a", "b")}
    reads = asmreads.files_read(asm["b"].module, asm["b"].templates + asm["a"].templates, lambda p: None)
    assert reads == (Read("incbin", "adata.bin"),)
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    backend = [tc.clang, "-c", "-x", "ir", str(b), f"-fthinlto-index={b}.thinlto.bc", "-O2", "-o", "b.native.o"]
    failed = run(backend, elsewhere, check=False)
    assert failed.returncode != 0 and "adata.bin" in failed.stderr
    write(elsewhere / "adata.bin", "A")
    run(backend, elsewhere)


def test_where_a_backend_compile_looks_for_a_relative_path(project, tc):
    """As given against its working directory, then in the `-Wa,-I` directories; plain -I is
    dropped for IR input, and the module's own directory does not count (asmreads docstring)."""
    path = compile_module(tc, project, MODULE_C)  # the module's directory holds every file
    run([tc.lld, "--thinlto-index-only", "-shared", str(path), "-o", "lib.so"], project)
    backend = [tc.clang, "-c", "-x", "ir", str(path), f"-fthinlto-index={path}.thinlto.bc", "-O2", "-o", "out.o"]
    run_dir = project / "run"
    run_dir.mkdir()
    for flags, works in (([], False), ([f"-I{project}"], False), ([f"-Wa,-I{project}"], True),
                         (["-Xclang", "-I", "-Xclang", str(project)], True)):
        done = run(backend + flags, run_dir, check=False)
        assert (done.returncode == 0) == works and works != ("Could not find" in done.stderr), (flags, done.stderr)
    for name in FILES:
        write(run_dir / name, FILES[name])
    run(backend, run_dir)


# --- the directive rules, on texts ---

TEXTS = [
    ("plain", '.incbin "data.txt"', ["data.txt"]),
    ("Linux's kernel/configs.c", '\t.pushsection .rodata, "a"\t\t\n\t.global kernel_config_data\t\t\n'
     'kernel_config_data:\t\t\t\t\n\t.incbin "kernel/config_data.gz"\t\n\t.global kernel_config_data_end\t\t\n'
     'kernel_config_data_end:\t\t\t\n\t.popsection\t\t\t\t\n', ["kernel/config_data.gz"]),
    ("module asm lines", '.section .rodata\n.global blob\nblob:\n.incbin "d/a.bin"\n.text\n', ["d/a.bin"]),
    ("skip and count", '.incbin "f", 1, 2', ["f"]),
    ("no space", '.incbin"f"', ["f"]),
    ("tab and CRLF", '.byte 1\r\n\t.incbin\t"f"\r\n', ["f"]),
    ("uppercase", '.INCBIN "f"\n.IncLude "i.s"', ["f", "include:i.s"]),
    ("statements after ;", '.byte 1; .incbin "f" ; .byte 2;.incbin "g"', ["f", "g"]),
    ("labels before", 'x: y :\t.incbin "f"\n1: .incbin "g"', ["f", "g"]),
    ("absolute path", '.incbin "/tmp/x y/z.bin"', ["/tmp/x y/z.bin"]),
    ("a $ in a path", '.incbin "a$b"', ["a$b"]),
    ("a path naming include", '.incbin "include/incbin.bin"', ["include/incbin.bin"]),
    ("comments around", '.incbin "f" # trailing\n/* block\n */ .incbin "g" // x\n', ["f", "g"]),
    ("a string with # and ;", '.ascii "a # b ; c"\n.incbin "f"', ["f"]),
    ("a statement after a string with #", '.ascii "#"; .incbin "f"', ["f"]),
    ("quotes in comments", 'nop # don\'t say "x\n.incbin "f" // or "y\n.incbin "g"', ["f", "g"]),
    ("a string over lines", '.ascii "a\n.byte 1"\n.incbin "f"', ["f"]),
    ("char literals", ".byte '\"', '\\''\n.incbin \"f\"", ["f"]),
    ("under .if 0 (reported anyway)", '.if 0\n.incbin "never"\n.endif', ["never"]),
    ("a macro body without substitution", '.macro m\n.incbin "f"\n.endm\nm', ["f"]),
    ("macros whose substitutions stand alone", '.macro m a\n.byte \\a\n.Ll_\\@: .byte \\a, 2\n.endm\nm 1\n'
     '.rept 2\n.byte \\+\n.endr', []),
    ("nothing", "nop\nmovl %eax, %ebx", []),
    ("in a comment", 'nop # .incbin "f"', "outside a plain directive"),
    ("in a block comment", '/* .include "f" */', "outside a plain directive"),
    ("in a string", '.ascii ".incbin \\"f\\""', "outside a plain directive"),
    ("in a symbol", "call include_dir", "outside a plain directive"),
    ("a quoted directive name", '".incbin" "f"', "outside a plain directive"),
    ("a longer name", '.incbinx "f"', "outside a plain directive"),
    ("unquoted", ".incbin f", "without a quoted path"),
    ("single quotes", ".incbin 'f'", "without a quoted path"),
    ("an escape", '.incbin "\\146"', "not plain"),
    ("an escaped quote", '.incbin "a\\"b"', "not plain"),
    ("unterminated", '.incbin "f', "not plain"),
    ("a macro argument path", '.macro m p\n.incbin "\\p"\n.endm\nm f', "not plain"),
    ("a name spelt by macro arguments", '.macro m a, b\n\\a\\b "f"\n.endm\nm .inc, bin', "glued"),
    ("a name finished by \\()", '.macro m a\n.byte 0 \\a\\()bin "f"\n.endm\nm "; .inc"', "glued"),
    ("a name started by a substitution", ".macro m a\n.inc\\a \"f\"\n.endm\nm bin", "glued"),
    (".irpc", '.irpc c, b\n.inc\\c\\()in "f"\n.endr', "glued"),
    (".altmacro", '.altmacro\n.macro m a b\na&b "f"\n.endm\nm .inc bin', ".altmacro"),
    ("uppercase .MACRO", '.MACRO m a, b\n\\a\\b "f"\n.ENDM\n.endm', "glued"),
]


@pytest.mark.parametrize("text, want", [t[1:] for t in TEXTS], ids=[t[0] for t in TEXTS])
def test_files_read(text, want):
    if isinstance(want, str):
        with pytest.raises(CannotTell, match=re.escape(want)):
            asmreads.files_read([text], [], lambda p: None)
    else:
        assert asmreads.files_read([text], [], lambda p: None) == tuple(_read(w) for w in want)


def _read(want: str) -> Read:
    return Read("include", want[len("include:"):]) if want.startswith("include:") else Read("incbin", want)


MC_CHECKED = [t for t in TEXTS if not isinstance(t[2], str) and t[2] and not any(w.startswith("/") for w in t[2])]


@pytest.mark.parametrize("text, want", [t[1:] for t in MC_CHECKED], ids=[t[0] for t in MC_CHECKED])
def test_llvm_mc_needs_no_file_but_those_named(tmp_path, tc, text, want):
    """With exactly the files named (`never` left absent), llvm-mc assembles the text: it read no
    other file. Take the last one named away and it fails: it did read that one."""
    named = [r.path for r in map(_read, want) if r.path != "never"]
    for path in named:
        write(tmp_path / path, "\n")
    write(tmp_path / "t.s", ".data\n" + text + "\n")
    mc = [str(tc.bindir / "llvm-mc"), "-triple=x86_64-linux-gnu", "-filetype=obj", "-o", "/dev/null", "t.s"]
    run(mc, tmp_path)
    if named:
        (tmp_path / named[-1]).unlink()
        assert "Could not find" in run(mc, tmp_path, check=False).stderr


def test_includes_are_followed_through_load():
    files = {"a.s": '.include "b.s"\n.incbin "x"', "b.s": '.incbin "y"\n.include "a.s"', "c.s": None}
    loads = []

    def load(path: str) -> str | None:
        loads.append(path)
        return files[path]

    got = asmreads.files_read(['.include "a.s"\n.include "c.s"'], [], load)
    assert got == (Read("include", "a.s"), Read("include", "c.s"), Read("include", "b.s"), Read("incbin", "x"),
                   Read("incbin", "y"))
    assert loads == ["a.s", "c.s", "b.s"]  # each once, though a.s includes itself through b.s
    with pytest.raises(CannotTell, match="glued"):  # a macro in an included file counts
        asmreads.files_read(['.include "m.s"'], [], {"m.s": '.macro m a\n.inc\\a "f"\n.endm'}.get)


def test_reads_of_a_module_as_a_value():
    asm = irmodule.ModuleAsm(('.incbin "a"\n.incbin "b"\n.incbin "a"',), ('.incbin "c"',))
    assert asmreads.reads(asm) == asmreads.Reads(("a", "b", "c"))
    assert asmreads.reads(irmodule.ModuleAsm(("nop # incbin",), ())).unknown.startswith("'incbin' outside")
    included = irmodule.ModuleAsm(('.include "i.s"',), ())
    assert "not followed" in asmreads.reads(included).unknown
    assert asmreads.reads(included, {"i.s": '.incbin "n"'}.get) == asmreads.Reads(("i.s", "n"))
    both = irmodule.ModuleAsm(('.incbin "i.s"\n.include "i.s"',), ())  # one file, named once
    assert asmreads.reads(both, {"i.s": ""}.get) == asmreads.Reads(("i.s",))
    symbols = irmodule.ModuleAsm((), ("call ${0:P}",), directive_symbols=True)
    assert "symbol" in asmreads.reads(symbols).unknown


TEMPLATES = [
    ("operands", 'movl $1, $0\n.pushsection .rodata\n.incbin "t.bin"\n.popsection', ["t.bin"]),
    ("$$ and specials", "movl $$1, ${0:k} # ${:comment} 1${:uid}: .L${:private}x", []),
    ("an operand glued after", '.inc$0 "f"', "glued"),
    ("an operand glued before", '$0bin "f"', "glued"),
    ("two operands", '$0$1 "f"', "glued"),
    ("a dialect alternative", '.inc$(bin$|xx$) "f"', "glued"),
    ("$$ joining (intel drops it)", '.inc$$bin "f"', "glued"),
    ("an operand in the path", '.incbin "${0:c}"', "not plain"),
    ("a $$ in the path", '.incbin "x/$$1"', "not plain"),
    ("a stray $", "movl $x, %eax", "rejects"),
    ("an unknown special", "${:bogus}", "unknown"),
    ("a macro substitution in a template", '.inc\\a "f"', "glued"),
]


@pytest.mark.parametrize("text, want", [t[1:] for t in TEMPLATES], ids=[t[0] for t in TEMPLATES])
def test_files_read_of_templates(text, want):
    if isinstance(want, str):
        with pytest.raises(CannotTell, match=re.escape(want)):
            asmreads.files_read([], [text], lambda p: None)
    else:
        assert asmreads.files_read([], [text], lambda p: None) == tuple(_read(w) for w in want)


def test_operands_and_directive_symbols():
    assert asmreads.files_read([], ["nop"], lambda p: None, directive_symbols=True) == ()  # no operand, no symbol
    with pytest.raises(CannotTell, match="symbol"):
        asmreads.files_read([], ["call ${0:P}"], lambda p: None, directive_symbols=True)
