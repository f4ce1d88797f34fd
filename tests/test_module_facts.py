"""Modules without an option record are compiled with what they say of themselves, as in-process
ThinLTO compiles them: their own triple, and in a -r link their own relocation model.

The reproducer (issue 20): non-PIC modules, compiled with plain clang (so no record) for a
triple other than the driver's default, whose inline assembly takes symbol addresses with
an "i" constraint, linked `-r` and then statically. With clang's defaults (PIE, the driver's
triple) the backend of such a module fails ("invalid operand for inline asm constraint
'i'": an undefined weak symbol cannot be an immediate in PIC code) and every backend warns
about the overridden triple.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import Toolchain, links, log_lines, ltowrap_env, refusals, run, stats_json, wrapper, write
from ltowrap.distributor import DtltoBackend
from ltowrap.errors import Unsupported
from ltowrap.formats import irmodule
from ltowrap.formats.bitcode import BadBitcode
from ltowrap.stages import backend
from ltowrap.stages.plan import Module

TRIPLE = "x86_64-unknown-linux-gnu"  # what the modules say; Debian's clang defaults to x86_64-pc-linux-gnu
MODULES = 12

PROBE_C = """
extern int hook_{k} __attribute__((weak));  /* undefined: 0 in the static link */
int table_{k}[4] = {{{k}, 1, 2, 3}};
int helper_{k}(int x) {{ return x + {k}; }}
int helper_{n}(int x);
long probe_{k}(void) {{
    long a, b;
    __asm__("movq %1, %0" : "=r"(a) : "i"(&hook_{k}));
    __asm__("movq %1, %0" : "=r"(b) : "i"(&table_{k}[1]));
    return a + (b - (long)&table_{k}[0]) + helper_{n}(0) - {n};
}}
"""


def sources(d: Path) -> list[str]:
    names = []
    for k in range(MODULES):
        write(d / f"probe{k}.c", PROBE_C.format(k=k, n=(k + 1) % MODULES))
        names.append(f"probe{k}")
    decls = "".join(f"long probe_{k}(void);\n" for k in range(MODULES))
    calls = " + ".join(f"probe_{k}()" for k in range(MODULES))
    write(d / "main.c", f'#include <stdio.h>\n{decls}int main(void) {{ printf("ok %ld\\n", {calls}); return 0; }}\n')
    return [*names, "main"]


def compile_plain(d: Path, tc: Toolchain, names: list[str], flags: tuple[str, ...]) -> list[str]:
    """Compiled with the real clang, not through ltowrap: no option records."""
    for n in names:
        run([tc.clang, *flags, "-flto=thin", "-c", f"{n}.c", "-o", f"{n}.o"], d)
    return [f"{n}.o" for n in names]


def test_relocatable_link_of_non_pic_modules_without_records(project, tmp_path, tc):
    objs = compile_plain(project, tc, sources(project), ("-O2", "-fno-pic", f"--target={TRIPLE}"))
    env = ltowrap_env(tc, LTOWRAP_REAL_LD=tc.lld)
    done = run([wrapper("ltowrap-ld.lld"), "-r", "-o", "combined.o", *objs], project, env=env)
    assert done.stderr == "" and done.stdout == ""
    record = links(tmp_path)[-1]
    assert record["decision"] == "distributed" and record.get("reason") is None, record
    assert record["backend_compiles"] == MODULES + 1
    assert all(b.get("recorded") is False and "output" not in b for b in record["backends"]), record["backends"]
    assert not stats_json().get("fallbacks")
    # In-process ThinLTO makes the same relocatable object work; so must ours.
    run([tc.lld, "-r", "-o", "inprocess.o", *objs], project)
    want = f"ok {4 * MODULES}\n"
    for obj, prog in (("combined.o", "prog"), ("inprocess.o", "prog_inprocess")):
        run([tc.clang, "-static", "-fuse-ld=lld", obj, "-o", prog], project)
        assert run([f"./{prog}"], project).stdout == want


def test_dtlto_relocatable_link_of_non_pic_modules_without_records(project, tmp_path, tc22):
    """The same reproducer through lld's DTLTO with ltowrap as the distributor: lld passes no
    relocation model for -r, so the module's own is used (clang's PIE default failed)."""
    objs = compile_plain(project, tc22, sources(project), ("-O2", "-fno-pic", f"--target={TRIPLE}"))
    done = run([tc22.clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={wrapper('ltowrap-distributor')}",
                "-r", "-nostdlib", *objs, "-o", "combined.o"], project)
    assert done.stderr == ""
    run([tc22.clang, "-static", "-fuse-ld=lld", "combined.o", "-o", "prog"], project)
    assert run(["./prog"], project).stdout == f"ok {4 * MODULES}\n"
    record = [r for r in log_lines(tmp_path) if r["tool"] == "distributor"][-1]
    assert record["decision"] == "distributed" and all(b.get("recorded") is False for b in record["backends"])


def test_record_less_backend_argv_says_what_the_module_says(project, tmp_path, tc22):
    """The argv of each backend (LTOWRAP_DEBUG's key dump) names the module's triple and, for
    -r, its relocation model: -fno-pic for a non-PIC module, -fPIE for Debian's default."""
    write(project / "a.c", "int a(void) { return 1; }\n")
    write(project / "b.c", "int a(void); int b(void) { return a() + 1; }\n")
    run([tc22.clang, "-O2", "-fno-pic", f"--target={TRIPLE}", "-flto=thin", "-c", "a.c"], project)
    run([tc22.clang, "-O2", "-flto=thin", "-c", "b.c"], project)
    for mode in ("-r", "-shared"):
        cache = tmp_path / f"cache{mode}"
        env = ltowrap_env(tc22, LTOWRAP_REAL_LD=tc22.lld, LTOWRAP_DEBUG="1", LTOWRAP_CACHE_DIR=str(cache))
        run([wrapper("ltowrap-ld.lld"), mode, "-o", "out.o", "a.o", "b.o"], project, env=env)
        argv = backend_argvs(cache)
        assert f"--target={TRIPLE}" in argv["a.o"] and "--target=x86_64-pc-linux-gnu" in argv["b.o"]
        if mode == "-r":
            assert argv["a.o"][-1] == "-fno-pic" and argv["b.o"][-1] == "-fPIE", argv
        else:  # the link decides, last: PIC for -shared
            assert argv["a.o"][-1] == argv["b.o"][-1] == "-fPIC", argv


def backend_argvs(cache: Path) -> dict[str, list[str]]:
    """Module -> the backend argv its key dump (LTOWRAP_DEBUG=1) records."""
    found = {}
    for dump in cache.glob("o/*.key.txt"):
        lines = dump.read_text().splitlines()  # `module: <origin>` first; later `module: <digest>`
        argv = next(line for line in lines if line.startswith("argv: "))
        found[lines[0].split(": ", 1)[1]] = argv[len("argv: "):].split("\0")
    return found


# --- irmodule against llvm-dis, on real modules ---

VARIANTS = [
    ("-O2", "-fno-pic"),
    ("-O1", "-fPIC"),
    ("-Os", "-fpie", "-mllvm", "-bitcode-mdindex-threshold=0"),  # the metadata index, always
    ("-O2", "-g", "-mllvm", "-bitcode-mdindex-threshold=100000"),  # debug info, never indexed
    ("-O2", "-g", "-fno-pic", "-mcmodel=large"),  # debug info: indexed
    ("-O0", "-mcmodel=medium", f"--target={TRIPLE}"),
    ("-O2", "-mcmodel=medium", "-mlarge-data-threshold=1000"),  # LLVM >= 17
    ("-O2", "--target=aarch64-linux-gnu", "-fPIC"),
]
SOURCE = """
int printf(const char *, ...);
struct point { int x, y; } origin = {0, 0};
static const char *names[] = {"zero", "one", "two"};
int pick(int i) { return (int)__builtin_strlen(names[i % 3]) + origin.x; }
int main(int argc, char **argv) { printf("%d %s\\n", pick(argc), argv[0]); return 0; }
"""


def llvm_dis(tc: Toolchain, path: Path) -> str:
    return subprocess.run([str(tc.bindir / "llvm-dis"), str(path), "-o", "-"], check=True, capture_output=True,
                          text=True).stdout


def llvm_dis_facts(tc: Toolchain, path: Path) -> irmodule.ModuleFacts:
    text = llvm_dis(tc, path)
    triple = re.search(r'^target triple = "(.*)"', text, re.M).group(1)
    flags = {}
    for ref in re.search(r"^!llvm.module.flags = !\{(.*)\}", text, re.M).group(1).split(", "):
        m = re.search(rf'^{re.escape(ref)} = !\{{i32 \d+, !"([^"]+)", i(?:32|64) (-?\d+)\}}', text, re.M)
        if m:
            flags[m.group(1)] = int(m.group(2))
    return irmodule.ModuleFacts(triple, flags)


@pytest.mark.parametrize("flags", VARIANTS, ids=lambda f: " ".join(f))
def test_irmodule_reads_what_llvm_dis_reads(project, tc, flags):
    if tc.version < 17 and any(f.startswith("-mlarge-data-threshold") for f in flags):
        pytest.skip(f"clang {tc.version} has no -mlarge-data-threshold")
    write(project / "m.c", SOURCE)
    run([tc.clang, *flags, "-flto=thin", "-c", "m.c", "-o", "m.o", "-Wno-unused-command-line-argument"], project)
    data = (project / "m.o").read_bytes()
    want = llvm_dis_facts(tc, project / "m.o")
    assert irmodule.read(data) == want
    assert irmodule.read(data, flags=False) == irmodule.ModuleFacts(want.triple)
    assert want.flags  # the comparison saw flags (wchar_size at least)


IFUNC_SOURCE = """
static int impl(void) { return 42; }
static int (*resolve(void))(void) { return impl; }
int f(void) __attribute__((ifunc("resolve")));
int answer = 42;
int main(void) { return f() - answer; }
"""


@pytest.mark.parametrize("pic, levels", [("-fPIC", (2, None)), ("-fPIE", (2, 2)), ("-fpic", (1, None))])
def test_irmodule_counts_an_ifunc_among_the_global_values(project, tc, pic, levels):
    """An IFUNC record (code 18) takes a value id, as GLOBALVAR, FUNCTION and ALIAS records do: when
    code 15 (METADATA_VALUES_UNUSED) was counted instead, every integer constant was read one
    value id off, and "PIC Level" with it."""
    write(project / "m.c", IFUNC_SOURCE)
    run([tc.clang, "-O2", pic, "-flto=thin", "-c", "m.c", "-o", "m.o"], project)
    assert re.search(r"^@f = .*\bifunc\b", llvm_dis(tc, project / "m.o"), re.M)
    facts = irmodule.read((project / "m.o").read_bytes())
    assert facts == llvm_dis_facts(tc, project / "m.o")
    assert (facts.flag("PIC Level"), facts.flag("PIE Level")) == levels


def test_irmodule_refuses_what_it_cannot_read(project, tc22):
    write(project / "m.c", SOURCE)
    run([tc22.clang, "-O2", "-g", "-flto=thin", "-c", "m.c", "-o", "m.o"], project)
    data = (project / "m.o").read_bytes()
    for broken in (data[:12], data[: len(data) // 2], b"BC\xc0\xde" + b"\xff" * 64, b"not bitcode"):
        with pytest.raises(BadBitcode):
            irmodule.read(broken)
    (project / "cut.o").write_bytes(data[: len(data) // 2])
    module = Module("d", str(project / "cut.o"), "cut.o", 0)
    assert backend.read_facts(module, flags=True) is None
    with pytest.raises(Unsupported):  # a -r link cannot do without the module's relocation model
        backend.LinkBackend(tc22.clang, _relocatable()).unrecorded(module)
    assert DtltoBackend(("clang", "-c")).unrecorded(module) == []  # lld's options alone, as before


def test_irmodule_on_damaged_bitcode_knows_or_says_so(project, tc22):
    """Bit flips anywhere in a module: read() gives facts or raises BadBitcode, nothing else."""
    write(project / "m.c", SOURCE)
    run([tc22.clang, "-O2", "-g", "-flto=thin", "-c", "m.c", "-o", "m.o"], project)
    assert refusals(irmodule.read, (project / "m.o").read_bytes(), seed=20, rounds=400) > 0


def test_cut_bitcode_is_refused_and_a_reader_bug_is_not(project, tc22, monkeypatch):
    """A module cut short anywhere: each reader gives what the whole file gives, or BadBitcode
    (the reader's own error for input that ends early), nothing else. An IndexError inside a
    reader is a bug, and comes out as one rather than as 'bad bitcode'."""
    write(project / "m.c", SOURCE)
    run([tc22.clang, "-O2", "-g", "-flto=thin", "-c", "m.c", "-o", "m.o"], project)
    data = (project / "m.o").read_bytes()
    readers = (irmodule.read, irmodule.inline_asm, irmodule.producer)
    whole = [read(data) for read in readers]
    assert whole[2].startswith("LLVM22")
    refused = set()
    for cut in range(8, len(data), max(1, len(data) // 300)):
        for i, read in enumerate(readers):
            try:
                assert read(data[:cut]) == whole[i], (read.__name__, cut)
            except BadBitcode:
                refused.add(read.__name__)
    assert refused == {"read", "inline_asm", "producer"}
    assert irmodule.producer(data[:4096]) == whole[2]  # what a backend job reads of a module

    def bug(*args):
        raise IndexError("a bug")

    monkeypatch.setattr(irmodule, "_module_facts", bug)
    with pytest.raises(IndexError):
        irmodule.read(data)
    monkeypatch.setattr(irmodule, "_asm_function", bug)
    with pytest.raises(IndexError):
        irmodule.inline_asm(data)


def test_an_abbreviation_llvm_refuses_is_bad_bitcode():
    """An abbreviation whose array has no element type, or that gives a record no code, is
    refused as LLVM's reader refuses it, not met later as an IndexError."""
    from ltowrap.formats.bitcode import _Writer, define_abbrev, Reader

    for ops in ([(1, 8), (3, None)], [(3, None), (1, 8)], [], [(5, None), (1, 8)], [(1, 8), (5, None), (1, 8)]):
        w = _Writer()
        w.vbr(len(ops), 5)
        for enc, width in ops:
            w.fixed(0, 1)
            w.fixed(enc, 3)
            if width is not None:
                w.vbr(width, 5)
        with pytest.raises(BadBitcode):
            define_abbrev(Reader(w.data()))
    w = _Writer()
    w.vbr(3, 5)
    for enc, width in [(1, 8), (3, None), (2, 6)]:
        w.fixed(0, 1)
        w.fixed(enc, 3)
        if width is not None:
            w.vbr(width, 5)
    assert define_abbrev(Reader(w.data())) == [("fixed", 8), ("array", 0), ("vbr", 6)]


def _relocatable():
    from ltowrap.linkline.cmdline import parse

    return parse(["-r", "-o", "x.o"])


# --- module_options: what in-process LTO takes from a module ---


@pytest.mark.parametrize("flags, relocation, want", [
    ({}, False, ["--target=T"]),
    ({"PIC Level": 2, "PIE Level": 2}, False, ["--target=T"]),  # the link decides (forced_options)
    ({}, True, ["--target=T", "-fno-pic"]),  # no "PIC Level": static
    ({"PIC Level": 0}, True, ["--target=T", "-fno-pic"]),
    ({"PIC Level": 1}, True, ["--target=T", "-fpic"]),
    ({"PIC Level": 2}, True, ["--target=T", "-fPIC"]),
    ({"PIC Level": 2, "PIE Level": 2}, True, ["--target=T", "-fPIE"]),
    ({"PIC Level": 1, "PIE Level": 1}, True, ["--target=T", "-fpie"]),
])
def test_module_options(flags, relocation, want):
    facts = irmodule.ModuleFacts("x86_64-unknown-linux-gnu", flags)
    assert backend.module_options(facts, relocation) == [w.replace("T", facts.triple) for w in want]


def test_module_options_without_a_triple_or_a_known_default():
    assert backend.module_options(irmodule.ModuleFacts("", {}), False) == []
    with pytest.raises(Unsupported):  # ppc64 defaults to PIC: not guessed
        backend.module_options(irmodule.ModuleFacts("powerpc64le-unknown-linux-gnu", {}), True)
    assert backend.module_options(irmodule.ModuleFacts("powerpc64le-unknown-linux-gnu", {"PIC Level": 2}), True) == [
        "--target=powerpc64le-unknown-linux-gnu", "-fPIC"]


def test_dtlto_record_less_module_keeps_lld_relocation_model(project, tc22):
    """As lld's distributor: the module's triple over lld's one --target; its relocation model
    only where lld passed none; lld's -fpic stays last."""
    write(project / "m.c", "int f(void) { return 1; }\n")
    run([tc22.clang, "-O2", "-fno-pic", f"--target={TRIPLE}", "-flto=thin", "-c", "m.c"], project)
    module = Module("d", str(project / "m.o"), "m.o", 0)
    static = DtltoBackend(("clang", "-c", "--target=x86_64-pc-linux-gnu", "-O2"))
    assert static.unrecorded(module) == [f"--target={TRIPLE}", "-fno-pic"]
    pic = DtltoBackend(("clang", "-c", "--target=x86_64-pc-linux-gnu", "-O2", "-fpic"))
    opts = pic.unrecorded(module)
    assert opts == [f"--target={TRIPLE}"]
    argv = pic.argv("m.o", "m.o.thinlto.bc", "m.native.o", opts)
    assert argv.index(f"--target={TRIPLE}") > argv.index("--target=x86_64-pc-linux-gnu")
    assert argv.index("-fpic", 5) > argv.index(f"--target={TRIPLE}")


# --- link_options: the link's CPU, spelled for the link's target ---


@pytest.mark.parametrize("emulation, want", [
    ("elf_x86_64", "-march=znver3"), ("elf_i386", "-march=znver3"), ("elf32_x86_64", "-march=znver3"),
    ("aarch64linux", "-mcpu=znver3"), ("armelf_linux_eabi", "-mcpu=znver3"), ("elf64lriscv", "-mcpu=znver3"),
    ("elf64lppc", "-mcpu=znver3"), ("elf64_s390", "-march=znver3"), ("elf32btsmip", "-march=znver3"),
])
def test_the_links_cpu_is_spelled_for_its_emulation_not_this_machine(emulation, want):
    """-plugin-opt=mcpu= becomes -march= or -mcpu= by the link's target (its -m), whatever the
    host: a cross link from x86 to AArch64 must not give the backends -march=<cpu>."""
    from ltowrap.linkline.cmdline import parse

    cmd = parse(["-m", emulation, "-plugin-opt=mcpu=znver3", "a.o", "-o", "prog"])
    assert cmd.emulation == emulation
    assert backend.link_options(cmd) == ["-O2", want, "-ffunction-sections", "-fdata-sections"]


def test_without_an_emulation_the_cpu_is_spelled_for_this_machine(monkeypatch):
    from ltowrap.linkline.cmdline import parse

    cmd = parse(["-plugin-opt=mcpu=cortex-a72", "a.o", "-o", "prog"])
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "h", "6", "#1", "aarch64")))
    assert backend.link_options(cmd)[1] == "-mcpu=cortex-a72"
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "h", "6", "#1", "x86_64")))
    assert backend.link_options(cmd)[1] == "-march=cortex-a72"
