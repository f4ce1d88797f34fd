"""driverargs: reading a clang driver command line (link or not, LTO or not, outputs, codegen options)."""

from __future__ import annotations

import pytest

from ltowrap.driverargs import compile_outputs, inputs, is_link, wants_lto


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "a.c"],
        ["a.c", "-c", "-o", "a.o"],
        ["-S", "a.c"],
        ["-E", "a.c"],
        ["-M", "a.c"],
        ["-MM", "a.c"],
        ["-fsyntax-only", "a.c"],
        ["-###", "a.o", "-o", "prog"],
        ["--version"],
        ["--version", "a.o"],
        ["-print-file-name=libc.so"],
        ["-print-file-name=libc.so", "a.o"],
        ["-print-prog-name=ld"],
        ["--print-search-dirs"],
        ["-print-search-dirs"],
        ["-emit-llvm", "-c", "a.c"],
        [],
        ["-O2", "-o", "prog"],  # no inputs: nothing to link
        ["-o", "a.o"],  # a.o is -o's value, not an input
    ],
    ids=lambda argv: " ".join(argv) or "empty",
)
def test_not_a_link(argv):
    assert not is_link(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["a.o"],
        ["a.o", "b.o", "-o", "prog"],
        ["a.c"],  # compile and link
        ["-flto=thin", "-O2", "a.o", "lib.a", "-lm", "-o", "prog"],
        ["-shared", "-fPIC", "a.o", "-o", "liba.so"],
        ["-MD", "-MF", "x.d", "a.o"],  # -MD does not stop before the link, -MF's value is not an input
        ["-Wl,--version", "a.o"],  # a linker option, not the driver's --version
        ["-Xlinker", "--version", "a.o"],
        ["-x", "c", "-"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_link(argv):
    assert is_link(argv)


def test_inputs_skip_option_values():
    assert inputs(["-o", "prog", "-I", "inc", "-include", "pre.h", "-MF", "x.d", "a.o", "-Xlinker", "-T",
                   "-Xlinker", "s.ld", "b.c", "-L", "lib", "-", "c.o"]) == ["a.o", "b.c", "c.o"]


@pytest.mark.parametrize(
    "argv, on",
    [
        ([], False),
        (["-flto"], True),
        (["-flto=thin"], True),
        (["-flto=full"], True),
        (["-flto=thin", "-fno-lto"], False),
        (["-fno-lto", "-flto=thin"], True),
        (["-flto", "-fno-lto", "-flto=thin"], True),
        (["-flto-jobs=4"], False),
        (["-ffat-lto-objects"], False),
        (["-fthinlto-index=x.thinlto.bc"], False),
    ],
)
def test_wants_lto(argv, on):
    assert wants_lto(["-c", "a.c", *argv]) is on


@pytest.mark.parametrize(
    "argv, outputs",
    [
        (["-c", "a.c", "-o", "out.o"], ["out.o"]),
        (["-c", "a.c", "-oout.o"], ["out.o"]),
        (["-c", "a.c", "--output", "out.o"], ["out.o"]),
        (["-o", "obj/out.o", "-c", "src/a.c"], ["obj/out.o"]),
        (["-c", "a.c"], ["a.o"]),
        (["-c", "src/dir/a.c"], ["a.o"]),  # default output goes to the cwd
        (["-c", "a.cpp"], ["a.o"]),
        (["-c", "a.cc"], ["a.o"]),
        (["-c", "a.c", "b.cpp", "sub/c.cxx"], ["a.o", "b.o", "c.o"]),
        (["-c", "a.c", "b.c", "-o", "x.o"], []),  # clang refuses -o with several outputs
        (["-c", "-x", "c", "code.txt"], ["code.o"]),
        (["-c", "-xc", "code.txt"], ["code.o"]),
        (["-c", "-x", "c", "a.inc", "-x", "none", "b.txt"], ["a.o"]),
        (["-c", "-I", "inc.c", "a.c"], ["a.o"]),  # -I's value is not a source
        (["-c", "-MF", "deps.c", "a.c"], ["a.o"]),
    ],
)
def test_compile_outputs(argv, outputs):
    assert compile_outputs(argv) == outputs


def test_compile_outputs_output_equals():
    assert compile_outputs(["-c", "a.c", "--output=out.o"]) == ["out.o"]
