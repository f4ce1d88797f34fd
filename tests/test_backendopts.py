"""The backend option table (ltowrap/backendopts.py), row by row against the real clang.

Each row names its evidence; each test here makes clang show it for the row's example:
a kept option is accepted by clang 22 and 14 (where 14 knows it) on a backend command line
and not called unused; a dropped one is rejected there, called unused, changes nothing in
the object of a module compiled with it, is turned into a link option by the driver, or
makes the backend write no object.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import LLVM_VERSIONS, Toolchain, toolchain, write
from ltowrap import backendopts
from ltowrap.backendopts import ROWS, codegen_options, row
from ltowrap.driverargs import walk
from ltowrap.magic import ELF

# Enough C++ for each option to find something to change: virtual calls, a loop, exceptions,
# RTTI, a global constructor, a thread-local, floating point (and it compiles without
# exceptions or RTTI, for the rows that turn them off).
SOURCE = r"""
#include <stdexcept>
#include <typeinfo>
struct Base { virtual ~Base(); virtual int f(int) const; };
struct Derived : Base { int f(int x) const override; };
Base::~Base() {}
int Base::f(int x) const { return x; }
#if __cpp_exceptions
int Derived::f(int x) const { if (x < 0) throw std::runtime_error("neg"); return 2 * x; }
#else
int Derived::f(int x) const { return 2 * x; }
#endif
static thread_local int calls;
int global = Derived().f(3);
double mean(const double *v, int n) { double s = 0; for (int i = 0; i < n; i++) s += v[i] * v[i]; return s / n; }
int call(const Base *b, int x) {
  ++calls;
#if __cpp_rtti
  x += typeid(*b) == typeid(Derived);
#endif
#if __cpp_exceptions
  try { return b->f(x); } catch (const std::exception &) { return -1; }
#else
  return b->f(x);
#endif
}
"""

BACKEND_LINK_OPTIONS = ["-O2", "-ffunction-sections", "-fdata-sections"]  # as backend.link_options
ROW_IDS = [" ".join(r.options) for r in ROWS]


def examples(r: backendopts.Row, file: Path) -> tuple[list[str], list[str]]:
    """The row's example and the compile flags it needs, `{file}` made an existing file."""
    fill = [a.replace("{file}", str(file)) for a in r.example]
    return fill, [a.replace("{file}", str(file)) for a in r.compile_with]


class Bench:
    """One module compiled with some flags, thin-linked alone, and its backend run with more."""

    def __init__(self, tc: Toolchain, tmp: Path, flags: list[str]) -> None:
        self.tc, self.tmp = tc, tmp
        src = write(tmp / "m.cc", SOURCE)
        self.module = tmp / "m.o"
        self.compile = subprocess.run([tc.clangxx, "-flto=thin", "-O2", "-c", str(src), "-o", str(self.module), *flags],
                                      capture_output=True, text=True)
        if self.compile.returncode == 0:
            subprocess.run([tc.lld, "-shared", "--thinlto-index-only", "--thinlto-emit-imports-files",
                            str(self.module), "-o", str(tmp / "m.so")], check=True, capture_output=True)

    def backend(self, extra: list[str], name: str) -> subprocess.CompletedProcess[str]:
        out = self.tmp / name
        done = subprocess.run([self.tc.clang, "-c", "-x", "ir", str(self.module),
                               f"-fthinlto-index={self.module}.thinlto.bc", "-o", str(out), *BACKEND_LINK_OPTIONS,
                               *extra, "-fPIC"], capture_output=True, text=True, cwd=self.tmp)
        done.object = out.read_bytes() if out.exists() else b""  # type: ignore[attr-defined]
        return done


def unused(stderr: str) -> bool:
    return "unused during compilation" in stderr or "input unused" in stderr


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[int, Bench]:
    """A module compiled with no extra flag, per LLVM version: where kept options are tried."""
    return {v: Bench(toolchain(v), tmp_path_factory.mktemp(f"plain{v}"), []) for v in LLVM_VERSIONS}


def test_every_row_is_well_formed():
    for r in ROWS:
        assert r.action in backendopts.ACTIONS and r.evidence in backendopts.EVIDENCE, r
        assert r.keep == (r.evidence == "codegen"), f"{r}: a kept row's evidence is codegen, a dropped row's is not"
        assert r.example and r.why, r
        # The example is decided by its own row, so the evidence shown is this row's.
        opt = next(walk(r.example))[0]
        assert row(opt) is r, f"{r}: its example {r.example} falls under {row(opt)}"


def test_every_option_has_one_row():
    seen = [o for r in ROWS for o in r.options]
    assert len(seen) == len(set(seen))
    assert "*" in seen  # everything is decided by some row


@pytest.mark.parametrize(
    "option",
    ["-fwhole-program-vtables", "-fsanitize=cfi", "-fsanitize=cfi-vcall,cfi-icall", "-fsanitize-cfi-cross-dso",
     "-fsanitize-trap=cfi", "-fno-sanitize-trap=cfi", "-fno-sanitize=cfi-nvcall", "-fsplit-lto-unit",
     "-fvirtual-function-elimination", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fforce-emit-vtables",
     "-fsanitize-cfi-icall-generalize-pointers", "-fsanitize-cfi-canonical-jump-tables", "-fprofile-instr-generate",
     "-fcs-profile-generate", "-fexperimental-sanitize-metadata=atomics", "-fsanitize-stats"],
)
def test_the_wpd_and_cfi_family_never_reaches_a_backend(option):
    """Red if the filter passes one through: clang rejects -fwhole-program-vtables and
    -fsanitize=cfi* without -flto, and every such link would fall back."""
    assert codegen_options(["-O2", "-flto=thin", option, "-fno-unroll-loops", "-c", "a.cc"]) == ["-O2", "-fno-unroll-loops"]


KEPT = ["-O2", "-g", "-march=x", "-fno-unroll-loops", "-falign-loops=1", "-fPIC", "-mno-sse", "-mllvm", "X"]


def test_codegen_options_keep_codegen_and_drop_the_rest():
    argv = [
        "-O2", "-DNAME=1", "-D", "OTHER", "-g", "-Iinclude", "-I", "inc2", "-include", "pre.h", "-march=x",
        "-isystem", "sysdir", "-fno-unroll-loops", "-Wall", "-Werror", "-falign-loops=1", "-MD", "-MF", "a.d",
        "-Wp,-MD,b.d", "-fPIC", "-x", "c", "-c", "-mno-sse", "-o", "a.o", "a.c", "-flto=thin", "-std=c99",
        "-mllvm", "X",
    ]
    assert codegen_options(argv) == KEPT


@pytest.mark.parametrize(
    "dropped",
    [
        ["-DX"], ["-D", "X"], ["-UX"], ["-U", "X"], ["-Iinc"], ["-I", "inc"], ["-include", "f.h"],
        ["-imacros", "m.h"], ["-isystem", "d"], ["-iquote", "d"], ["-idirafter", "d"], ["-isysroot", "/s"],
        ["--sysroot=/s"], ["-Wall"], ["-Werror"], ["-Wno-unused"], ["-MD"], ["-MMD"], ["-MF", "f.d"],
        ["-MT", "t"], ["-MQ", "q"], ["-MP"], ["-Wp,-MD,f.d"], ["-x", "c"], ["-xc++"], ["-c"], ["-o", "f.o"],
        ["-of.o"], ["a.c"], ["-"], ["-flto=thin"], ["-flto"], ["-fno-lto"], ["-flto-jobs=2"], ["-std=c99"],
        ["-std=gnu++20"], ["-fsanitize=address"], ["-fprofile-instr-generate"], ["-fcolor-diagnostics"],
        ["-fmacro-prefix-map=/a=/b"], ["-Xclang", "-foo"], ["-Wa,--noexecstack"], ["-fuse-ld=lld"],
        ["-pthread"], ["-nostdinc"], ["-gsplit-dwarf"], ["-gsplit-dwarf=single"], ["-fthinlto-index=x"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_codegen_options_drop(dropped):
    assert codegen_options(["-O2", *dropped, "-g"]) == ["-O2", "-g"]


@pytest.mark.parametrize(
    "kept",
    [
        ["-O3"], ["-Os"], ["-Ofast"], ["-g"], ["-g0"], ["-gdwarf-4"], ["-march=znver3"],
        ["-mtune=generic"], ["-mcpu=cortex-a53"], ["-mno-red-zone"], ["-mavx2"], ["-fPIC"], ["-fpie"],
        ["-fno-omit-frame-pointer"], ["-ffunction-sections"], ["-fdata-sections"], ["-falign-loops=1"],
        ["-fno-unroll-loops"], ["-fstack-protector-strong"], ["-mllvm", "-x=1"], ["-target", "x86_64-linux-gnu"],
        ["--target=x86_64-linux-gnu"], ["--target", "x86_64-linux-gnu"], ["-fbasic-block-sections=all"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_codegen_options_keep(kept):
    assert codegen_options(["-c", "a.c", *kept, "-o", "a.o"]) == kept


# --- each row's evidence, from the real clang ---


@pytest.mark.parametrize("r", [r for r in ROWS if r.keep], ids=[i for i, r in zip(ROW_IDS, ROWS) if r.keep])
@pytest.mark.parametrize("version", LLVM_VERSIONS, ids=[f"llvm{v}" for v in LLVM_VERSIONS])
def test_kept_rows_mean_something_to_a_backend(r, version, plain, tmp_path):
    example, _ = examples(r, tmp_path / "f")
    done = plain[version].backend(example, f"keep-{version}.o")
    if version != 22 and "unknown argument" in done.stderr:
        return  # "where it exists": clang 22 must know every kept option; older ones may not
    assert done.returncode == 0 and done.object.startswith(ELF), done.stderr
    assert not unused(done.stderr), done.stderr


DROPPED = [r for r in ROWS if not r.keep]
DROPPED_IDS = [f"{r.evidence}: {i}" for i, r in zip(ROW_IDS, ROWS) if not r.keep]


@pytest.mark.parametrize("r", DROPPED, ids=DROPPED_IDS)
def test_dropped_rows_show_why(r, tmp_path, tc22):
    file = write(tmp_path / "f", "")  # {file}: an empty sanitizer ignorelist, profile, ...
    example, compile_with = examples(r, file)
    if r.evidence == "link":
        assert link_options_from(tc22, example, tmp_path), f"{r}: the driver does not pass {example} to the link"
        return
    bench = Bench(tc22, tmp_path, [*example, *compile_with] if r.evidence in ("same", "rejected") else compile_with)
    assert bench.compile.returncode == 0, bench.compile.stderr  # a ThinLTO compile takes it: it can be recorded
    with_it = bench.backend(example, "with.o")
    if r.evidence == "rejected":
        assert with_it.returncode != 0, f"{r}: clang accepts {example} on a backend command line"
    elif r.evidence == "unused":
        assert with_it.returncode == 0 and unused(with_it.stderr), with_it.stderr
    elif r.evidence == "no-object":
        assert not with_it.object.startswith(ELF), f"{r}: the backend still writes an object"
    else:
        assert r.evidence == "same"
        without = bench.backend([], "without.o")
        assert with_it.returncode == 0 and without.returncode == 0, with_it.stderr + without.stderr
        assert with_it.object == without.object, f"{r}: {example} changes what the backend writes"


def link_options_from(tc: Toolchain, example: list[str], tmp: Path) -> list[str]:
    """The -plugin-opt= options a ThinLTO driver link gains from `example` (clang -###)."""
    module = tmp / "m.o"
    subprocess.run([tc.clangxx, "-flto=thin", "-c", str(write(tmp / "m.cc", SOURCE)), "-o", str(module)], check=True)

    def line(extra: list[str]) -> set[str]:
        done = subprocess.run([tc.clangxx, "-###", "-flto=thin", "-fuse-ld=lld", str(module), "-o", str(tmp / "prog"),
                               *extra], capture_output=True, text=True, check=True)
        return set(done.stderr.strip().splitlines()[-1].replace('"', "").split())

    return sorted(t for t in line(example) - line([]) if t.startswith("-plugin-opt="))


def test_the_evidence_checks_can_fail(tmp_path, tc22, plain):
    """Each check on its own tells a wrong row: a codegen option is neither unused nor
    without effect; a front-end option is no link option; a kept option is not rejected."""
    assert plain[22].backend(["-fno-pic"], "a.o").object != plain[22].backend(["-mcmodel=large"], "b.o").object
    assert not unused(plain[22].backend(["-fno-unroll-loops"], "c.o").stderr)
    assert unused(plain[22].backend(["-MD"], "d.o").stderr)
    assert plain[22].backend(["-fno-unroll-loops"], "e.o").returncode == 0
    assert link_options_from(tc22, ["-fvisibility=hidden"], tmp_path) == []


@pytest.mark.slow
def test_no_kept_f_option_is_one_a_backend_rejects(tmp_path, tc22, plain):
    """Every -f flag clang 22 knows (no value) that the table keeps: if the backend's driver
    rejects it (clang -###), a ThinLTO compile rejects it too, so no record can hold it."""
    listed = subprocess.run([tc22.clang, "--autocomplete=-f"], capture_output=True, text=True, check=True).stdout
    flags = sorted({line.split("\t")[0] for line in listed.splitlines()
                    if line.startswith("-f") and not line.split("\t")[0].endswith("=")})
    kept = [f for f in flags if codegen_options([f]) == [f]]
    assert "-fno-unroll-loops" in kept and "-fwhole-program-vtables" not in kept
    bench = plain[22]
    src = write(tmp_path / "t.cc", SOURCE)

    def backend_rejects(flag: str) -> bool:
        return subprocess.run([tc22.clang, "-###", "-c", "-x", "ir", str(bench.module),
                               f"-fthinlto-index={bench.module}.thinlto.bc", "-o", "x.o", flag],
                              capture_output=True, text=True).returncode != 0

    def compile_takes(flag: str) -> bool:
        return subprocess.run([tc22.clangxx, "-###", "-flto=thin", "-c", str(src), "-o", "x.o", flag],
                              capture_output=True, text=True).returncode == 0

    with ThreadPoolExecutor(4) as pool:
        rejected = [f for f, bad in zip(kept, pool.map(backend_rejects, kept)) if bad]
        harmful = [f for f, ok in zip(rejected, pool.map(compile_takes, rejected)) if ok]
    assert harmful == [], "kept, accepted by a ThinLTO compile, rejected by its backend"
