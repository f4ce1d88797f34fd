"""C++ links, distributed, against in-process ThinLTO: whole-program devirtualization and CFI
(split LTO units), and the C++ link forms (libstdc++ shared and static, exceptions and RTTI
across modules, templates and COMDAT groups, a -shared library with a version script).

Each program in tests/cxx/ is compiled once through ltowrap-clang++ (which records each
module's options) and linked twice from the same objects: by ltowrap-clang++ (distributed)
and by the real clang++ (in-process ThinLTO). integration/fidelity.py then compares the two
binaries function by function, addresses ignored, and both are run.

One difference is LLVM's, not ltowrap's, and is checked to be the only one: a function that
takes the address of a vtable another module defines. Under -fwhole-program-vtables the
vtables live in the regular-LTO half of their module, and an index shard carries no summary
of regular-LTO globals, so the backend cannot mark the declaration dso_local as in-process
ThinLTO does from its combined index: it loads the address from the GOT, which lld relaxes
into the same `lea`, but instruction selection may differ around it (a branch for a cmov).
lld's own distributed ThinLTO (DTLTO) does the same. `got_vtable_users` finds those
functions in the backend objects; every other function must be identical.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from helpers import Toolchain, links, log_lines, ltowrap_env, run, stats_json, wrapper
from integration import fidelity
from ltowrap.formats import bitcode

CXX_SOURCES = Path(__file__).resolve().parent / "cxx"
SHAPES = ("shapes", "circle", "main")  # the class hierarchy of WPD and CFI
FORMS = ("items", "parse", "report", "use")  # exceptions, RTTI, templates, a shared library
HIDDEN = ["-O2", "-flto=thin", "-fvisibility=hidden"]
WPD = [*HIDDEN, "-fwhole-program-vtables"]
CFI = [*WPD, "-fsanitize=cfi"]
OBJDUMP = fidelity.OBJDUMP  # llvm-objdump 22 reads what either LLVM writes


class Program:
    """Sources of tests/cxx compiled through ltowrap-clang++ in `directory`, then linked both ways."""

    def __init__(self, tc: Toolchain, directory: Path, sources: tuple[str, ...], flags: list[str]) -> None:
        self.tc, self.dir, self.flags = tc, directory, flags
        directory.mkdir(parents=True, exist_ok=True)
        self.env = {"LTOWRAP_CLANG": tc.clang}
        self.objects = []
        for name in sources:
            run([wrapper("ltowrap-clang++"), *flags, "-c", str(CXX_SOURCES / f"{name}.cc"), "-o", f"{name}.o"],
                directory, env=self._env())
            self.objects.append(f"{name}.o")

    def _env(self, **extra: str) -> dict:
        return ltowrap_env(**self.env, **extra)

    def link(self, out: str, *args: str, objects: list[str] | None = None, **env: str) -> dict:
        """Link through ltowrap; its log record (the link must not fall back)."""
        done = run([wrapper("ltowrap-clang++"), *self.flags, "-fuse-ld=lld", *(objects or self.objects), *args,
                    "-o", out], self.dir, env=self._env(LTOWRAP_VERBOSE="1", **env))
        assert "ltowrap:" not in done.stderr, done.stderr
        record = links(self.dir.parent)[-1]
        assert record["decision"] in ("distributed", "restored"), (record["reason"], record.get("detail"))
        return record

    def reference(self, out: str, *args: str, objects: list[str] | None = None) -> None:
        """The same link by the real clang++: in-process ThinLTO."""
        run([self.tc.clangxx, *self.flags, "-fuse-ld=lld", *(objects or self.objects), *args, "-o", out], self.dir)

    def runs(self, binary: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([f"./{binary}", *args], cwd=self.dir, capture_output=True, text=True,
                              env=self._env(LD_LIBRARY_PATH=str(self.dir)))


def kept_link(program: Program, out: str, *args: str, objects: list[str] | None = None) -> set[str]:
    """Link through ltowrap keeping its work directory; got_vtable_users of its backend objects
    (the directory is removed after). Every module's option record is found (records are
    keyed by the whole file: both halves of a split unit)."""
    tmp = program.dir.parent / "cache" / "tmp"
    before = set(tmp.glob("link-*"))
    record = program.link(out, *args, objects=objects, LTOWRAP_KEEP="1")
    assert record["backends"] and all(b.get("recorded") is not False for b in record["backends"]), record["backends"]
    kept = set(tmp.glob("link-*")) - before
    assert len(kept) == 1, kept
    directory = kept.pop()
    try:
        return got_vtable_users(directory)
    finally:
        shutil.rmtree(directory)


_RELOC = re.compile(r"R_X86_64_(?:REX_)?GOTPCRELX?\s+(\S+?)(?:[-+]0x[0-9a-f]+)?$")
_HEADER = re.compile(r"^[0-9a-f]+ <(.+)>:$")


def base_name(name: str) -> str:
    """A function's name without ThinLTO's promotion suffix (fidelity tags it, objects hash it)."""
    return name.split(".llvm.")[0]


def got_vtable_users(kept: Path) -> set[str]:
    """Functions of the backend objects that load, through the GOT, the address of a symbol the
    thin-link's regular-LTO object defines (the vtables of split LTO units)."""
    regular = subprocess.run([str(fidelity.LLVM / "llvm-nm"), "--defined-only", "--format=just-symbols",
                              str(kept / "full-lto.o")], capture_output=True, text=True, check=True).stdout.split()
    users: set[str] = set()
    for obj in (kept / "idx").glob("*.o"):  # the backend objects (beside their *.thinlto.bc shards)
        current = ""
        listing = subprocess.run([OBJDUMP, "-dr", "--no-show-raw-insn", str(obj)], capture_output=True, text=True,
                                 check=True).stdout
        for line in listing.splitlines():
            if h := _HEADER.match(line):
                current = h.group(1)
            elif (m := _RELOC.search(line.strip())) and m.group(1) in regular:
                users.add(base_name(current))
    return users


def instructions(binary: Path, pattern: str) -> Counter:
    """How many instructions matching `pattern` each function of `binary` has."""
    counts: Counter = Counter()
    for name, body in fidelity.functions(binary, OBJDUMP).items():
        counts[name] = sum(1 for insn in body if re.match(pattern, insn))
    return counts


def defined_symbols(binary: Path) -> set[str]:
    return set(subprocess.run([str(fidelity.LLVM / "llvm-nm"), "--defined-only", "--format=just-symbols", str(binary)],
                              capture_output=True, text=True, check=True).stdout.split())


INDIRECT_CALL = r"call\w* \*"
TRAP = r"ud[12]"


def assert_same_code(ours: Path, reference: Path, explained: set[str] = frozenset(), at_least: int = 20) -> None:
    """Every function in both, identical, except those `explained` (got_vtable_users)."""
    r = fidelity.compare(ours, reference, OBJDUMP)
    report = r.summary() + "".join(f"\n{fidelity.diff(ours, reference, OBJDUMP, n)}" for n in r.differing)
    assert r.identical >= at_least and not r.only_a and not r.only_b, report
    unexplained = [n for n in r.differing if base_name(n.split("#")[0]) not in explained]
    assert not unexplained, report


# --- whole-program devirtualization and CFI ---


def test_wpd_devirtualizes_the_calls_in_process_thinlto_does(tc, tmp_path):
    wpd = Program(tc, tmp_path / "wpd", SHAPES, WPD)
    explained = kept_link(wpd, "prog")
    wpd.reference("ref")
    for args in ((), ("good-cast",), ("bad-cast",)):  # without CFI, the bad cast calls what is there
        assert wpd.runs("prog", *args).stdout == wpd.runs("ref", *args).stdout != ""
    assert_same_code(wpd.dir / "prog", wpd.dir / "ref", explained)
    # The same calls devirtualized: as many indirect calls left in each function...
    assert instructions(wpd.dir / "prog", INDIRECT_CALL) == instructions(wpd.dir / "ref", INDIRECT_CALL)
    # ...and fewer than without whole-program devirtualization (Logger::log, Shape::sides).
    plain = Program(tc, tmp_path / "plain", SHAPES, HIDDEN)
    plain.link("prog")
    assert sum(instructions(wpd.dir / "prog", INDIRECT_CALL).values()) < \
        sum(instructions(plain.dir / "prog", INDIRECT_CALL).values())


def test_cfi_checks_and_traps_as_in_process(tc, tmp_path):
    cfi = Program(tc, tmp_path / "cfi", SHAPES, CFI)
    explained = kept_link(cfi, "prog")
    cfi.reference("ref")
    for binary in ("prog", "ref"):
        assert "area 34.0 sides 4" in cfi.runs(binary).stdout
        good = cfi.runs(binary, "good-cast")
        assert good.returncode == 0 and "right area 25.0" in good.stdout
        bad = cfi.runs(binary, "bad-cast")
        assert bad.returncode == -signal.SIGILL and "wrong area" not in bad.stdout, bad
        bad = cfi.runs(binary, "bad-icall")
        assert bad.returncode == -signal.SIGILL and "wrong op" not in bad.stdout, bad
    assert_same_code(cfi.dir / "prog", cfi.dir / "ref", explained)
    # The same checks in every function, the differing ones too (each ends in a trap: ud1 from
    # LLVM 17's ubsantrap, ud2 before), and the same jump tables.
    assert instructions(cfi.dir / "prog", TRAP) == instructions(cfi.dir / "ref", TRAP)
    assert sum(instructions(cfi.dir / "prog", TRAP).values()) >= 2  # main and total_area check their casts
    # twice and thrice: their bodies renamed .cfi, their names on the entries of a jump table.
    bodies = {n for n in fidelity.functions(cfi.dir / "ref", OBJDUMP) if n.endswith(".cfi")}
    assert len(bodies) == 2 and bodies <= set(fidelity.functions(cfi.dir / "prog", OBJDUMP))
    for binary in ("prog", "ref"):
        assert {n.removesuffix(".cfi") for n in bodies} <= defined_symbols(cfi.dir / binary)


def test_the_regular_lto_half_reaches_the_final_link(tmp_path, tc22):
    """Red if the object of the split units' regular-LTO halves (vtables, CFI's type ids) is
    left out of the final link: the vtables are then undefined and the link falls back."""
    cfi = Program(tc22, tmp_path / "cfi", SHAPES, CFI)
    record = cfi.link("prog")
    assert record["decision"] == "distributed" and record["modules"] == 3 and record["backend_compiles"] == 3
    defined = defined_symbols(cfi.dir / "prog")
    assert {"_ZTV6Square", "_ZTV6Circle", "_ZTV7Account"} <= defined
    assert any(s.startswith("__typeid__ZTS5Shape") for s in defined)


def test_a_thin_link_hit_gives_the_cold_runs_binary(tmp_path, tc22):
    cfi = Program(tc22, tmp_path / "cfi", SHAPES, CFI)
    cfi.link("prog")
    cold = (cfi.dir / "prog").read_bytes()
    (cfi.dir / "prog").unlink()
    record = cfi.link("prog", LTOWRAP_MEMO="0")
    assert record["thinlink_cached"] and record["backend_hits"] == 3
    assert (cfi.dir / "prog").read_bytes() == cold
    cfi.link("prog", LTOWRAP_MEMO="0", LTOWRAP_VERIFY="1")  # every hit done again and compared
    assert (cfi.dir / "prog").read_bytes() == cold
    stats = stats_json()
    assert stats["verify_checks"] == 4 and stats["verify_mismatches"] == 0  # the thin-link and 3 backends


@pytest.mark.parametrize("kind", ["regular", "thin"])
def test_split_units_in_archives(kind, tmp_path, tc):
    cfi = Program(tc, tmp_path / "cfi", SHAPES, CFI)
    run([tc.ar, "rcs" if kind == "regular" else "rcsT", "libshapes.a", "shapes.o", "circle.o"], cfi.dir)
    explained = kept_link(cfi, "prog", objects=["main.o", "libshapes.a"])
    assert links(cfi.dir.parent)[-1]["modules"] == 3
    cfi.reference("ref", objects=["main.o", "libshapes.a"])
    assert cfi.runs("prog", "good-cast").stdout == cfi.runs("ref", "good-cast").stdout
    assert cfi.runs("prog", "bad-cast").returncode == -signal.SIGILL
    assert_same_code(cfi.dir / "prog", cfi.dir / "ref", explained)


def test_dtlto_distributor_gets_the_thin_halves_only(tmp_path, tc22):
    """Under lld's DTLTO, lld compiles the regular-LTO halves itself and hands out the ThinLTO
    ones: one job per module, each a whole split file."""
    cfi = Program(tc22, tmp_path / "cfi", SHAPES, CFI)
    run([tc22.clangxx, *CFI, "-fuse-ld=lld", f"-fthinlto-distributor={wrapper('ltowrap-distributor')}",
         *cfi.objects, "-o", "prog"], cfi.dir)
    runs = [r for r in log_lines(cfi.dir.parent) if r["tool"] == "distributor"]
    assert len(runs) == 1 and len(runs[0]["backends"]) == 3 and runs[0]["backend_compiles"] == 3
    assert "area 34.0" in cfi.runs("prog").stdout
    assert cfi.runs("prog", "bad-cast").returncode == -signal.SIGILL


def test_cross_dso_cfi(tmp_path, tc22):
    """-fsanitize-cfi-cross-dso: the shapes in a shared library, main in the program, each
    distributed; __cfi_check is the thin-link's regular-LTO code, the runtime the driver's."""
    flags = ["-O2", "-flto=thin", "-fvisibility=default", "-fsanitize=cfi", "-fsanitize-cfi-cross-dso", "-fPIC"]
    xdso = Program(tc22, tmp_path / "xdso", SHAPES, flags)
    (xdso.dir / "ref").mkdir()
    explained = kept_link(xdso, "libshapes.so", "-shared", objects=["shapes.o", "circle.o"])
    xdso.reference("ref/libshapes.so", "-shared", objects=["shapes.o", "circle.o"])
    xdso.link("prog", "-L.", "-lshapes", objects=["main.o"])
    for lib in ("libshapes.so", "ref/libshapes.so"):
        assert "__cfi_check" in subprocess.run([str(tc22.bindir / "llvm-nm"), "-D", lib], cwd=xdso.dir,
                                               capture_output=True, text=True, check=True).stdout
    assert "area 34.0" in xdso.runs("prog").stdout and xdso.runs("prog", "good-cast").returncode == 0
    assert xdso.runs("prog", "bad-cast").returncode == -signal.SIGILL  # main's check, across the DSO
    assert_same_code(xdso.dir / "libshapes.so", xdso.dir / "ref/libshapes.so", explained, at_least=10)


# --- C++ link forms ---

FORM_FLAGS = ["-O2", "-flto=thin", "-fPIC"]  # -fPIC: the same objects make the shared library
FORM_RUNS = {  # arguments -> what the program prints first
    ("1", "2", "abc"): "number 1; number 2; word abc; sum 3 words 7",
    ("4", "!", "x"): "parse error 'bang' at 1 (10ParseError)",  # thrown in parse.cc, caught in use.cc
    ("5", "6"): "out of range",  # thrown by std::vector::at in report.cc
}


@pytest.mark.parametrize("libstdcxx", ["shared", "static"])
def test_cxx_program(libstdcxx, tc, tmp_path):
    """Exceptions and RTTI across modules, templates and guarded statics in several modules
    (COMDAT groups), with libstdc++ shared or linked in (-static-libstdc++)."""
    forms = Program(tc, tmp_path / "forms", FORMS, FORM_FLAGS)
    extra = ["-static-libstdc++"] if libstdcxx == "static" else []
    record = forms.link("prog", *extra)
    assert record["modules"] == 4 and record["backend_compiles"] == 4
    forms.reference("ref", *extra)
    for args, first in FORM_RUNS.items():
        assert forms.runs("prog", *args).stdout == forms.runs("ref", *args).stdout
        assert forms.runs("prog", *args).stdout.startswith(first + "\n")
    if libstdcxx == "static" and tc.version == 14:
        # lld 14 (to 19) writes no --why-extract in an index-only link, so the final link extracts what
        # its objects reference: not pure.o, which in-process lld 14 extracted for Item's vtable
        # before LTO removed it (lld 22 tells: thinlink.py, finallink.extraction_object).
        r = fidelity.compare(forms.dir / "prog", forms.dir / "ref", OBJDUMP)
        assert (r.identical > 25, r.differing, r.only_a, r.only_b) == \
            (True, [], [], ["__cxa_deleted_virtual", "__cxa_pure_virtual"]), r.summary()
    else:
        assert_same_code(forms.dir / "prog", forms.dir / "ref", at_least=25)
    needed = subprocess.run([str(fidelity.LLVM / "llvm-readelf"), "-d", "prog"], cwd=forms.dir, capture_output=True,
                            text=True, check=True).stdout
    assert ("libstdc++.so" in needed) == (libstdcxx == "shared")


def test_cxx_shared_library_with_a_version_script(tc, tmp_path):
    """A -shared C++ library whose version script exports the C++ interface only; a program
    linked against it catches the library's exceptions."""
    forms = Program(tc, tmp_path / "forms", FORMS, FORM_FLAGS)
    library = ["items.o", "parse.o", "report.o"]
    script = f"-Wl,--version-script={CXX_SOURCES / 'items.map'}"
    forms.link("libitems.so", "-shared", script, objects=library)
    (forms.dir / "ref").mkdir()
    forms.reference("ref/libitems.so", "-shared", script, objects=library)
    assert_same_code(forms.dir / "libitems.so", forms.dir / "ref/libitems.so", at_least=25)
    exported = [dynamic_symbols(forms.dir / lib) for lib in ("libitems.so", "ref/libitems.so")]
    assert exported[0] == exported[1]
    assert not any(s.startswith("items_internal") for s in exported[0])
    assert any(s.startswith("_Z5parse") and s.endswith("@@ITEMS_1") for s in exported[0])
    forms.link("prog", "-L.", "-litems", "-Wl,-rpath,$ORIGIN", objects=["use.o"])
    for args, first in FORM_RUNS.items():
        assert forms.runs("prog", *args).stdout.startswith(first + "\n")


def dynamic_symbols(library: Path) -> set[str]:
    """The symbols a shared library defines in its dynamic symbol table, with their versions."""
    out = subprocess.run([str(fidelity.LLVM / "llvm-nm"), "-D", "--defined-only", "--format=just-symbols", str(library)],
                         capture_output=True, text=True, check=True).stdout  # `name@@ITEMS_1`
    return set(out.split())


def test_a_split_unit_compiles_the_same_in_a_remote_input_root(tmp_path, tc):
    """A remote backend's input root holds each module file whole (remote/action.py), beside
    the shard with its paths rewritten (bitcode.relocate): a split unit's backend there
    writes the object it writes here."""
    cfi = Program(tc, tmp_path / "cfi", SHAPES, CFI)
    paths = [str(cfi.dir / o) for o in cfi.objects]
    run([tc.lld, "--thinlto-index-only=list", "--thinlto-emit-imports-files", f"--lto-obj-path={cfi.dir / 'full.o'}",
         *paths, "-o", "out", "-shared"], cfi.dir)
    root = cfi.dir / "root"
    (root / "m").mkdir(parents=True)
    for o in cfi.objects:
        (root / "m" / o).write_bytes((cfi.dir / o).read_bytes())
    imported = 0
    for o in cfi.objects:
        shard = (cfi.dir / f"{o}.thinlto.bc").read_bytes()
        imported += len(bitcode.module_paths(shard)) - 1
        (root / "index.bc").write_bytes(bitcode.relocate(shard, lambda p: "m/" + os.path.basename(p)))
        run([tc.clang, "-O2", "-c", "-x", "ir", f"m/{o}", "-fthinlto-index=index.bc", "-o", "out.o"], root)
        run([tc.clang, "-O2", "-c", "-x", "ir", str(cfi.dir / o), f"-fthinlto-index={cfi.dir / o}.thinlto.bc",
             "-o", "local.o"], cfi.dir)
        assert (root / "out.o").read_bytes() == (cfi.dir / "local.o").read_bytes(), o
    assert imported >= 2  # main.o's backend imports from both other split units
