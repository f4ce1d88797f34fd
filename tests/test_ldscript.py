"""ldscript against the real ld.lld: for each script, what the model says lld reads must be
what lld's --dependency-file lists, and each path the model calls absent must be one lld
takes once it exists. A case the model calls unknown because lld fails must fail in lld.

Every test runs on each ld.lld Debian bookworm ships (13, 14, 15, 16, 19 and 22: dev/setup
installs them, helpers.ALL_VERSIONS), on any other ld.lld 13-22 installed in
/usr/lib/llvm-N, and on any listed in TEST_LLDS ("20=/path/to/ld.lld,...")."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ALL_VERSIONS, toolchain
from ltowrap.formats.depfile import read as read_depfile
from ltowrap.linkline import ldscript
from ltowrap.linkline.ldscript import ScriptReads
from needs import missing

REQUIRED = ALL_VERSIONS


def _versions() -> dict[int, str | None]:
    """lld major -> ld.lld path (None: a required one, found or reported missing by the fixture)."""
    found: dict[int, str | None] = {v: None for v in REQUIRED}
    for path in sorted(glob.glob("/usr/lib/llvm-*/bin/ld.lld")):
        major = int(re.search(r"llvm-(\d+)", path).group(1))
        if ldscript.OLDEST_LLD <= major <= ldscript.NEWEST_LLD:
            found.setdefault(major, path)
    for item in filter(None, os.environ.get("TEST_LLDS", "").split(",")):
        major, path = item.split("=", 1)
        found[int(major)] = path
    return found


VERSIONS = _versions()


@dataclass(frozen=True)
class Lld:
    major: int
    path: str


@pytest.fixture(params=sorted(VERSIONS), ids=[f"lld{v}" for v in sorted(VERSIONS)])
def lld(request) -> Lld:
    path = VERSIONS[request.param]
    return Lld(request.param, path if path is not None else toolchain(request.param).lld)


@pytest.fixture(scope="session")
def objects(tmp_path_factory) -> Path:
    """m.o defines _start (a link needs nothing else); e.o is empty: any number of copies link together."""
    tc = next((toolchain(v) for v in REQUIRED if Path(f"/usr/lib/llvm-{v}/bin/clang").exists()), None)
    if tc is None:
        missing("a clang to compile test objects")
    d = tmp_path_factory.mktemp("objects")
    (d / "m.c").write_text("void _start(void) {}\n")
    (d / "e.c").write_text("")
    for name in ("m", "e"):
        subprocess.run([tc.clang, "-c", "-O0", "-fno-asynchronous-unwind-tables", f"{name}.c", "-o", f"{name}.o"],
                       cwd=d, check=True)
    return d


@pytest.fixture
def work(tmp_path, objects) -> Path:
    for name in ("m.o", "e.o"):
        shutil.copy(objects / name, tmp_path / name)
    return tmp_path


def obj(work: Path, *paths: str) -> None:
    """An empty ELF object at each path (any name: lld goes by the bytes)."""
    for p in paths:
        (work / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "e.o", work / p)


def write(work: Path, path: str, text: str) -> None:
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text(text)


def run(lld: Lld, work: Path, args: list[str]) -> subprocess.CompletedProcess:
    (work / "out.d").unlink(missing_ok=True)
    return subprocess.run([lld.path, "--dependency-file=out.d", "-o", "linked.out", *args], cwd=work,
                          capture_output=True, text=True)


def lld_lists(lld: Lld, work: Path, args: list[str]) -> list[str]:
    done = run(lld, work, args)
    assert done.returncode == 0, f"lld {lld.major} failed: {done.stderr}"
    listed = read_depfile(str(work / "out.d"))
    assert listed is not None
    return listed


def norm(path: str) -> str:
    """As lld writes a path into its dependency file (remove_dots)."""
    return os.path.normpath(path)


def check(lld: Lld, work: Path, script: str, args: list[str], *, before: list[str], after: tuple[str, ...] = (),
          **model) -> ScriptReads:
    """The model and lld on one link: lld reads the files `before`, the script, what the model
    says it reads, then the files `after`."""
    got = ldscript.reads(script, lld_major=lld.major, cwd=str(work), **model)
    if got.unknown:
        if got.unknown.startswith("lld ") and " fails" in got.unknown.split(":")[0]:
            done = run(lld, work, args)
            assert done.returncode != 0, f"the model says {got.unknown!r}, lld {lld.major} linked"
        return got
    listed = lld_lists(lld, work, args)
    assert listed == [norm(p) for p in [*before, script, *got.found, *after]]
    for path in got.absent:
        _appears(lld, work, args, path, got.found)
    return got


def _appears(lld: Lld, work: Path, args: list[str], path: str, found: tuple[str, ...]) -> None:
    """Create an absent path (a copy of the file lld took for that name, else an empty object):
    lld must now read it."""
    target = work / path
    made = [p for p in reversed(target.parents) if not p.exists()]
    taken = next((work / f for f in found if os.path.basename(f) == target.name), None)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes((taken or work / "e.o").read_bytes())
    try:
        assert norm(path) in lld_lists(lld, work, args), f"lld {lld.major} ignored {path} once it existed"
    finally:
        target.unlink()
        for d in reversed(made):
            d.rmdir()


# -- libraries ----------------------------------------------------------------------------


def test_libc_so_is_read_through_without_probes(lld, work):
    """Debian's libc.so: GROUP with absolute paths and AS_NEEDED, comments, OUTPUT_FORMAT."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so"
    if not os.path.isfile(libc):
        missing(libc, "apt-get install libc6-dev")
    got = check(lld, work, libc, ["m.o", libc], before=["m.o"], search_dirs=[])
    assert got.unknown == "" and got.absent == ()
    assert "/lib/x86_64-linux-gnu/libc.so.6" in got.found


def test_input_l_searches_every_dir_so_before_a(lld, work):
    """INPUT(-lbaz) with two -L dirs: the first dir's .so and .a are probed before the second's .so."""
    write(work, "libfoo.so", "INPUT(-lbaz)\n")
    obj(work, "L2/libbaz.so", "L2/libbaz.a")
    args = ["-L", "L1", "-L", "L2", "m.o", "libfoo.so"]
    (work / "L1").mkdir()
    got = check(lld, work, "libfoo.so", args, before=["m.o"], search_dirs=["L1", "L2"])
    assert got.found == ("L2/libbaz.so",)
    assert got.absent == ("L1/libbaz.so", "L1/libbaz.a")


def test_static_input_l_takes_only_archives(lld, work):
    write(work, "libfoo.so", "INPUT(-lbaz)\n")
    obj(work, "L2/libbaz.so", "L2/libbaz.a")
    (work / "L1").mkdir()
    args = ["-L", "L1", "-L", "L2", "-Bstatic", "m.o", "libfoo.so"]
    got = check(lld, work, "libfoo.so", args, before=["m.o"], search_dirs=["L1", "L2"], static=True)
    assert got.found == ("L2/libbaz.a",)
    assert got.absent == ("L1/libbaz.a",)


def test_input_l_colon_names_a_file(lld, work):
    write(work, "s.ld", "INPUT(-l:special.a)\n")
    obj(work, "L2/special.a")
    (work / "L1").mkdir()
    got = check(lld, work, "s.ld", ["-L", "L1", "-L", "L2", "m.o", "s.ld"], before=["m.o"], search_dirs=["L1", "L2"])
    assert got.found == ("L2/special.a",) and got.absent == ("L1/special.a",)


@pytest.mark.parametrize("where", ["beside", "cwd", "libdir"])
def test_relative_input_beside_the_script_then_cwd_then_search_dirs(lld, work, where):
    write(work, "sd/s.ld", "INPUT(x.o)\n")
    obj(work, {"beside": "sd/x.o", "cwd": "x.o", "libdir": "L/x.o"}[where])
    got = check(lld, work, "sd/s.ld", ["-L", "L", "m.o", "sd/s.ld"], before=["m.o"], search_dirs=["L"])
    expected = {"beside": (("sd/x.o",), ()), "cwd": (("x.o",), ("sd/x.o",)),
                "libdir": (("L/x.o",), ("sd/x.o", "x.o"))}[where]
    assert (got.found, got.absent) == expected


def test_script_in_cwd_has_no_beside_probe(lld, work):
    """A script spelt without a directory: lld skips the step beside it (the name has no parent)."""
    write(work, "s.ld", "INPUT(x.o)\n")
    obj(work, "L/x.o")
    got = check(lld, work, "s.ld", ["-L", "L", "m.o", "s.ld"], before=["m.o"], search_dirs=["L"])
    assert got.found == ("L/x.o",) and got.absent == ("x.o",)


def test_nested_scripts_are_followed(lld, work):
    """libfoo.so names libbar.so (a script) which names libbar.so.1 and -lqux through AS_NEEDED."""
    write(work, "lib/libfoo.so", "/* GNU ld script */\nINPUT(libbar.so)\n")
    write(work, "lib/libbar.so", "GROUP ( libbar.so.1 AS_NEEDED ( -lqux ) )\n")
    obj(work, "lib/libbar.so.1", "Q/libqux.a")
    args = ["-L", "lib", "-L", "Q", "m.o", "-lfoo"]
    got = check(lld, work, "lib/libfoo.so", args, before=["m.o"], search_dirs=["lib", "Q"])
    assert got.found == ("lib/libbar.so", "lib/libbar.so.1", "Q/libqux.a")
    assert got.absent == ("lib/libqux.so", "lib/libqux.a", "Q/libqux.so")


def test_search_dir_extends_the_path_for_the_script_and_after_it(lld, work):
    write(work, "s.ld", "SEARCH_DIR(SD)\nINPUT(-lsd)\n")
    obj(work, "SD/libsd.a", "SD/liblater.a")
    got = check(lld, work, "s.ld", ["m.o", "s.ld", "-llater"], before=["m.o"], after=("SD/liblater.a",),
                search_dirs=[])
    assert got.found == ("SD/libsd.a",) and got.search_dirs == ("SD",)
    # -llater on the command line, after the script, is found through SEARCH_DIR too.
    assert ldscript.find_library("later", search_dirs=got.search_dirs, static=False, cwd=str(work)) == (
        "SD/liblater.a", ("SD/liblater.so",))


def test_nostdlib_ignores_search_dir(lld, work):
    write(work, "s.ld", "SEARCH_DIR(SD)\nINPUT(-lsd)\n")
    obj(work, "SD/libsd.a")
    got = check(lld, work, "s.ld", ["-nostdlib", "m.o", "s.ld"], before=["m.o"], search_dirs=[], nostdlib=True)
    assert got.unknown == "lld fails: unable to find library -lsd"


# -- the sysroot --------------------------------------------------------------------------


def test_sysroot_prefixes(lld, work):
    """=name inside the sysroot, -L=dir inside it, SEARCH_DIR(=dir) as well."""
    write(work, "s.ld", "INPUT(=/lib/a.o)\nSEARCH_DIR(=/lib2)\nINPUT(-lb -lc)\n")
    obj(work, "sr/lib/a.o", "sr/lib2/libb.a", "sr/lib3/libc.a")
    args = ["--sysroot=sr", "-L=lib3", "m.o", "s.ld"]
    got = check(lld, work, "s.ld", args, before=["m.o"], search_dirs=["=lib3"], sysroot="sr")
    assert got.found == ("sr//lib/a.o", "sr/lib2/libb.a", "sr/lib3/libc.a")


def test_absolute_input_in_a_script_under_the_sysroot_stays_inside(lld, work):
    write(work, "sr/lib/s.ld", f"INPUT({work}/abs/y.o)\n")
    obj(work, "abs/y.o", f"sr/{work}/abs/y.o")
    args = ["--sysroot=sr", "m.o", "sr/lib/s.ld"]
    got = check(lld, work, "sr/lib/s.ld", args, before=["m.o"], search_dirs=[], sysroot="sr")
    assert got.found == (f"sr{work}/abs/y.o",)
    (work / f"sr/{work}/abs/y.o").unlink()
    got = check(lld, work, "sr/lib/s.ld", args, before=["m.o"], search_dirs=[], sysroot="sr")
    assert got.unknown.startswith("lld fails: cannot find")


@pytest.mark.parametrize("top_inside", [False, True], ids=["top-outside", "top-inside"])
def test_the_sysroot_test_is_per_file_from_lld_20(lld, work, top_inside):
    """A script INCLUDEs another that names an absolute path, one of them under the sysroot:
    lld 20+ judge by the file the INPUT is in, lld 13-19 by the top script."""
    top, inc = ("sr/lib/top.ld", "out/inc.ld") if top_inside else ("out/top.ld", "sr/lib/inc.ld")
    write(work, inc, f"INPUT({work}/abs/y.o)\n")
    write(work, top, f"INCLUDE {work}/{inc}\n")
    obj(work, "abs/y.o", f"sr/{work}/abs/y.o")
    args = [f"--sysroot={work}/sr", "m.o", top]
    got = check(lld, work, top, args, before=["m.o"], search_dirs=[], sysroot=f"{work}/sr")
    judge = inc if lld.major >= ldscript.LAZY_LEXER_LLD else top
    y = f"{work}/sr{work}/abs/y.o" if judge.startswith("sr/") else f"{work}/abs/y.o"
    assert got.found == (f"{work}/{inc}", y)


# -- INCLUDE ------------------------------------------------------------------------------


@pytest.mark.parametrize("script", [
    "INCLUDE inc.ld\n",
    'INCLUDE "inc.ld"\n',
    "SECTIONS { INCLUDE inc.ld .text : { *(.text) } }\n",
    "SECTIONS { .text : { INCLUDE inc.ld *(.text) } }\n",
    "SECTIONS { .text : { *(.text .text.*) INCLUDE inc.ld } > ram :text = 0x90 , .data : { *(.data) } }\n"
    "MEMORY { ram (rwx) : ORIGIN = 0x10000, LENGTH = 1M }\nPHDRS { text PT_LOAD FILEHDR PHDRS ; }\n",
    "MEMORY { rom : ORIGIN = 0, LENGTH = 4K - 1 INCLUDE mem.ld }\n"
    "SECTIONS { .text : { *(.text) } > ram }\n",
], ids=["top", "quoted", "sections", "body-first", "body-after-rules", "memory"])
def test_include_where_lld_honours_it(lld, work, script):
    """INCLUDE found in the cwd; a copy in -L dir L is not read."""
    write(work, "sd/s.ld", script)
    write(work, "inc.ld", "x_sym = 1;\n")
    write(work, "mem.ld", "ram (rwx) : ORIGIN = 0x10000, LENGTH = 64K\n")
    write(work, "L/inc.ld", "y_sym = 2;\n")
    got = check(lld, work, "sd/s.ld", ["-L", "L", "m.o", "-T", "sd/s.ld"], before=["m.o"], search_dirs=["L"])
    assert got.unknown == "" and got.absent == ()
    assert got.found == ("mem.ld",) if "mem.ld" in script else ("inc.ld",)


def test_include_is_searched_in_cwd_then_search_dirs_never_beside_the_script(lld, work):
    write(work, "sd/s.ld", "INCLUDE inc.ld\nINPUT(a.o)\n")
    write(work, "sd/inc.ld", "INPUT(wrong.o)\n")
    write(work, "L/inc.ld", "SEARCH_DIR(L2)\nINPUT(b.o)\n")
    obj(work, "sd/a.o", "L/b.o", "L2/libc2.a")
    got = check(lld, work, "sd/s.ld", ["-L", "L", "m.o", "sd/s.ld"], before=["m.o"], search_dirs=["L"])
    # b.o is relative to the included file's own directory first (L/b.o), a.o to s.ld's.
    assert got.found == ("L/inc.ld", "L/b.o", "sd/a.o")
    assert got.absent == ("inc.ld",)
    assert got.search_dirs == ("L", "L2")


def test_a_construct_may_span_an_include(lld, work):
    write(work, "s.ld", "INCLUDE open.ld b.o)\n")
    write(work, "open.ld", "INPUT(a.o")
    obj(work, "a.o", "b.o")
    got = check(lld, work, "s.ld", ["m.o", "s.ld"], before=["m.o"], search_dirs=[])
    assert got.found == ("open.ld", "a.o", "b.o")


def test_a_second_include_of_a_name_fails_before_lld_20(lld, work):
    write(work, "s.ld", "INCLUDE inc.ld\nINCLUDE inc.ld\n")
    write(work, "inc.ld", "x_sym = 1;\n")
    got = check(lld, work, "s.ld", ["m.o", "s.ld"], before=["m.o"], search_dirs=[])
    assert (got.unknown == "") == (lld.major >= 20)


def test_a_second_include_found_through_a_search_dir_fails_in_every_lld(lld, work):
    """lld 20+ forget an INCLUDE name by the path they opened: a name found in -L stays 'open'."""
    write(work, "s.ld", "INCLUDE inc.ld\nINCLUDE inc.ld\n")
    write(work, "L/inc.ld", "x_sym = 1;\n")
    got = check(lld, work, "s.ld", ["-L", "L", "m.o", "s.ld"], before=["m.o"], search_dirs=["L"])
    assert "cycle" in got.unknown


def test_t_script_found_through_a_search_dir(lld, work):
    """-T main.ld: searchScript tries the cwd, then each -L dir; INCLUDE in it, too."""
    write(work, "L/main.ld", "INCLUDE extra.ld\n")
    write(work, "L/extra.ld", "hook_alias = 1;\n")
    path, absent = ldscript.find_script("main.ld", search_dirs=["L"], cwd=str(work))
    assert (path, absent) == ("L/main.ld", ("main.ld",))
    got = check(lld, work, path, ["-L", "L", "-T", "main.ld", "m.o"], before=[], after=("m.o",), search_dirs=["L"])
    assert got.found == ("L/extra.ld",) and got.absent == ("extra.ld",)


# -- syntax -------------------------------------------------------------------------------


def test_comments_quotes_and_ignored_directives(lld, work):
    write(work, "s.ld", '/* INPUT(no1.o) */ # INPUT(no2.o)\nOUTPUT_FORMAT("elf64-x86-64", "elf64-x86-64",\n'
                        ' "elf64-x86-64") OUTPUT_ARCH(i386:x86-64) ENTRY(_start) EXTERN(a b)\n'
                        'INPUT("sp ace.o" /* c */ b.o)#INPUT(no3.o)\nGROUP(c.o)\n')
    obj(work, "sp ace.o", "b.o", "c.o")
    got = check(lld, work, "s.ld", ["m.o", "s.ld"], before=["m.o"], search_dirs=[])
    assert got.found == ("sp ace.o", "b.o", "c.o")


KERNEL_STYLE = """\
OUTPUT_FORMAT("elf64-x86-64")
ENTRY(_start)
jiffies = _start;
PHDRS { text PT_LOAD FLAGS(5); data PT_LOAD FLAGS(6); note PT_NOTE FLAGS(0); }
SECTIONS
{
  . = 0xffffffff81000000 + SIZEOF_HEADERS;
  _text = .;
  .text : AT(ADDR(.text) - 0xffffffff80000000) ALIGN(4096) {
    _stext = .;
    *(.text.hot .text.hot.*) *(.text .text.fixup)
    KEEP(*(SORT_BY_INIT_PRIORITY(.init_array.*) SORT(.ctors.*)))
    *(EXCLUDE_FILE(*crtend.o) .text.unlikely)
    . = ALIGN(8); __start_x = .; BYTE(1) SHORT(2) LONG(3) QUAD(4) FILL(0x90909090)
    PROVIDE(__etext_hint = .);
    INCLUDE body.ld
  } :text = 0xcccccccc
  .data (NOLOAD) : { *(.data) x = DEFINED(y) ? y : (1 << 4) | 0x3; }
  ASSERT(. <= 0xffffffffa0000000, "kernel image bigger than KERNEL_IMAGE_SIZE")
  /DISCARD/ : { *(.discard) *(.eh_frame) }
}
ASSERT(_stext != 0, "no text") INPUT(tail.o)
"""


def test_a_kernel_style_script_reads_only_its_include_and_input(lld, work):
    write(work, "vmlinux.lds", KERNEL_STYLE)
    write(work, "body.ld", "__body = .;\n")
    obj(work, "tail.o")
    got = check(lld, work, "vmlinux.lds", ["-T", "vmlinux.lds", "m.o"], before=[], after=("m.o",), search_dirs=[])
    assert got.found == ("body.ld", "tail.o")


@pytest.mark.parametrize("script, found", [
    ("SECTIONS { OVERLAY 0x100000 : AT(0x200000) { .o1 { *(.o1) } .o2 { *(.o2) } }\n"
     "  .text : { *(.text) INCLUDE inc.ld } }\nINPUT(a.o)\n", ("inc.ld", "a.o")),
    ("VERSION { V1 { global: _start; local: *; }; }\nSECTIONS { .foo : { *(.foo) } } INSERT AFTER .text\n"
     "PROVIDE_HIDDEN(foo = 1); HIDDEN(bar = 2);\nINPUT(a.o)\n", ("a.o",)),
    ("OVERWRITE_SECTIONS { .text : { *(.text) INCLUDE inc.ld } }\nINPUT(a.o)\n", ("inc.ld", "a.o")),
    ("MEMORY { ram (!w) : org = 0x10000, l = 1M }\n"
     "SECTIONS { .text : { *(.text) } >ram AT>ram .data : { *(.data) } > ram =0x90, }\nINPUT(a.o)\n", ("a.o",)),
], ids=["overlay", "version-insert-provide", "overwrite-sections", "memory-regions-fill"])
def test_statements_that_read_nothing_end_where_lld_ends_them(lld, work, script, found):
    write(work, "s.ld", script)
    write(work, "inc.ld", "x_sym = 1;\n")
    obj(work, "a.o")
    got = check(lld, work, "s.ld", ["-T", "s.ld", "m.o"], before=[], after=("m.o",), search_dirs=[])
    assert got.unknown == "" and got.found == found


def test_a_comment_glued_to_a_token_in_an_expression(lld, work):
    """lld 20+ lex an expression in its own state: `1/*` is 1, then a comment. lld 13-19
    tokenize the whole file first (`1/*` is one token) and fail; the model answers as 20+
    do, which for 13-19 is an answer about a link that fails."""
    write(work, "s.ld", "x = 1/* ) INPUT(no.o) */;\nINPUT(a.o)\n")
    obj(work, "a.o")
    if lld.major >= ldscript.LAZY_LEXER_LLD:
        assert check(lld, work, "s.ld", ["m.o", "s.ld"], before=["m.o"], search_dirs=[]).found == ("a.o",)
    else:
        assert run(lld, work, ["m.o", "s.ld"]).returncode != 0


# -- what the model does not follow --------------------------------------------------------


@pytest.mark.parametrize("text, reason", [
    ("INPUT(-lnone)\n", "lld fails: unable to find library -lnone"),
    ("INPUT(a.o,b.o)\n", "lld fails: unable to find ,"),
    ("INPUT(a.o /* open\n", "lld fails: s.ld: unclosed comment"),
    ('INPUT("a.o)\n', "lld fails: s.ld: unclosed quote"),
    ("INPUT(a.o\n", "lld fails: s.ld: unexpected end of the script"),
    ("TARGET(binary)\nINPUT(a.o)\n", "TARGET(binary): lld reads later inputs as data"),
    ("FOO(a.o)\n", "lld fails: s.ld: unknown directive: FOO"),
    ("INCLUDE s.ld\n", "cycle in linker script INCLUDEs"),
])
def test_unknown_when_lld_fails_or_reads_otherwise(lld, work, text, reason):
    write(work, "s.ld", text)
    obj(work, "a.o", "b.o")
    got = check(lld, work, "s.ld", ["m.o", "s.ld"], before=["m.o"], search_dirs=[])
    assert reason in got.unknown


def test_scripts_that_name_each_other_are_unknown(work):
    """lld recurses without end (it dies on its stack); the model stops."""
    write(work, "a.so", "INPUT(b.so)\n")
    write(work, "b.so", "INPUT(a.so)\n")
    got = ldscript.reads("a.so", search_dirs=[], lld_major=22, cwd=str(work))
    assert "nest deeper" in got.unknown


@pytest.mark.parametrize("major", [12, 23])
def test_an_lld_outside_the_model_is_unknown(work, major):
    write(work, "s.ld", "INPUT(a.o)\n")
    assert ldscript.reads("s.ld", search_dirs=[], lld_major=major, cwd=str(work)).unknown.startswith(f"lld {major}")


def test_is_script_is_false_only_for_what_lld_links():
    assert not ldscript.is_script(b"\x7fELF\x02\x01\x01\x00")
    assert not ldscript.is_script(b"!<arch>\n") and not ldscript.is_script(b"!<thin>\n")
    assert not ldscript.is_script(b"BC\xc0\xde") and not ldscript.is_script(b"\xde\xc0\x17\x0b")
    assert ldscript.is_script(b"/* GNU ld script") and ldscript.is_script(b"") and ldscript.is_script(b"INPUT(")


@pytest.mark.parametrize("path, parent", [("sd/s.ld", "sd"), ("s.ld", ""), ("/s.ld", "/"), ("/", ""),
                                          ("sd//s.ld", "sd"), ("./s.ld", "."), ("//net/s.ld", "//net/")])
def test_parent_is_llvm_parent_path(path, parent):
    assert ldscript._parent(path) == parent
