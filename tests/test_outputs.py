"""The files a distributed link writes besides -o (issue 38): `--dependency-file` lists what
in-process lld lists, and `-Map` names the inputs and LTO objects as in-process lld names them,
never ltowrap's temporary or stored objects; cold, warm and memo-restored links alike."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import Toolchain, links, ltowrap_env, run, stats_json, wrapper, write

MAIN_C = """
int add(int, int); int mul(int, int); int nat(int); int lz(int); int th(int);
int main(void) { return add(1, 2) + mul(3, 4) + nat(1) + lz(2) + th(3) - 50; }
"""
SOURCES = {
    "main.c": MAIN_C,
    "add.c": "int add(int a, int b) { return a + b; }\n",
    "mul.c": "int mul(int a, int b) { return a * b; }\n",
    "unused.c": "int unused(int a) { return a; }\n",
    "nat.c": "int nat(int a) { return a - 1; }\n",  # native, in an archive with bitcode members
    "lz.c": "int lz(int a) { return a * 7; }\n",
    "lz2.c": "int lz2(int a) { return a * 9; }\n",  # lazy, never pulled in
    "sub/th.c": "int th(int a) { return a + 5; }\n",  # a thin archive's member, in a subdirectory
}
# A plain object, an archive mixing bitcode and native members, a thin archive found through -L,
# and bitcode between --start-lib and --end-lib.
LINK_ARGS = ["main.o", "add.o", "libmix.a", "-L.", "-lth", "-Wl,--start-lib", "lz.o", "lz2.o", "-Wl,--end-lib"]
# Paths only ltowrap's link would name: its temporary work directory and its store.
OURS = re.compile(r"link-\d+-|/idx/|\.native\.o|extractions\.o|/cache/")


def project(d: Path, tc: Toolchain) -> None:
    """The objects and archives of LINK_ARGS, compiled by the real clang (the link is what is tested)."""
    for name, text in SOURCES.items():
        write(d / name, text)
    for name in SOURCES:
        stem = name[:-2]
        lto = [] if stem == "nat" else ["-flto=thin"]
        run([tc.clang, "-O2", *lto, "-c", name, "-o", f"{stem}.o"], d)
    run([tc.ar, "rcs", "libmix.a", "mul.o", "nat.o", "unused.o"], d)
    run([tc.ar, "rcsT", "libth.a", "sub/th.o"], d)


def in_process(d: Path, tc: Toolchain, *extra: str) -> Path:
    """The same link by clang and lld alone, in a copy of `d` (the same relative paths), output `prog`."""
    ref = d.parent / f"{d.name}-ref"
    shutil.copytree(d, ref, ignore=shutil.ignore_patterns("prog", "prog.*", "Makefile"))
    run([tc.clang, "-flto=thin", "-fuse-ld=lld", *LINK_ARGS, "-o", "prog", *extra], ref)
    return ref


def ltowrap_link(d: Path, tc: Toolchain, *extra: str, **env: str) -> None:
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", *LINK_ARGS, "-o", "prog", *extra], d,
        env=ltowrap_env(tc, **env))


def map_names(text: str) -> list[str]:
    """The input file each section line of an lld map names (the `In` column, without the section)."""
    return sorted({m.group(1) for m in re.finditer(r"^ +(?:[0-9a-f]+ +){4}(\S.*?):\(", text, re.M)})


MAKEFILE = """\
prog: main.o add.o libmix.a libth.a lz.o lz2.o
\t{cc} -flto=thin -fuse-ld=lld {args} -o prog -Wl,--dependency-file=prog.d

-include prog.d
"""


def test_make_with_the_depfile_does_nothing_the_second_time(tmp_path, tc):
    d = tmp_path / "p"
    project(d, tc)
    write(d / "Makefile", MAKEFILE.format(cc=wrapper("ltowrap-clang"), args=" ".join(LINK_ARGS)))
    env = ltowrap_env(tc)
    run(["make"], d, env=env)
    assert links(tmp_path)[-1]["decision"] == "distributed", links(tmp_path)[-1]
    depfile = (d / "prog.d").read_text()
    assert not OURS.search(depfile), depfile
    ref = in_process(d, tc, "-Wl,--dependency-file=prog.d")
    assert depfile == (ref / "prog.d").read_text()
    again = run(["make"], d, env=env)
    assert "'prog' is up to date" in again.stdout, again.stdout
    assert len(links(tmp_path)) == 1

    # Warm: the link memo restores the program and its depfile, and make is content again.
    (d / "prog").unlink()
    (d / "prog.d").unlink()
    hits = stats_json()["link_hits"]
    run(["make"], d, env=env)
    assert links(tmp_path)[-1]["decision"] == "restored", links(tmp_path)[-1]
    assert stats_json()["link_hits"] == hits + 1
    assert (d / "prog.d").read_text() == depfile
    assert "'prog' is up to date" in run(["make"], d, env=env).stdout

    # An input changed: make relinks, as the depfile names it.
    write(d / "lz2.c", "int lz2(int a) { return a * 11; }\n")
    run([tc.clang, "-O2", "-flto=thin", "-c", "lz2.c", "-o", "lz2.o"], d)
    run(["make"], d, env=env)
    assert len(links(tmp_path)) == 3


def test_map_is_the_same_on_every_build_and_names_what_in_process_names(tmp_path, tc):
    d = tmp_path / "p"
    project(d, tc)
    maps = []
    for n in range(2):  # two cold builds, each with an empty cache of its own
        ltowrap_link(d, tc, "-Wl,-Map=prog.map", "-Wl,--dependency-file=prog.d",
                     LTOWRAP_CACHE_DIR=str(tmp_path / f"cold{n}"))
        assert links(tmp_path)[-1]["decision"] == "distributed", links(tmp_path)[-1]
        maps.append((d / "prog.map").read_text())
    assert maps[0] == maps[1]
    assert not OURS.search(maps[0]), [line for line in maps[0].splitlines() if OURS.search(line)][:5]
    ref = in_process(d, tc, "-Wl,-Map=prog.map")
    assert map_names(maps[0]) == map_names((ref / "prog.map").read_text())

    # Warm, memo off: linked again from cached objects, the same map.
    cold = tmp_path / "cold1"
    ltowrap_link(d, tc, "-Wl,-Map=prog.map", "-Wl,--dependency-file=prog.d", LTOWRAP_CACHE_DIR=str(cold),
                 LTOWRAP_MEMO="0")
    assert (d / "prog.map").read_text() == maps[0]
    # Warm, memo on: the first link with the memo stores, the next restores; the same map and depfile.
    ltowrap_link(d, tc, "-Wl,-Map=prog.map", "-Wl,--dependency-file=prog.d", LTOWRAP_CACHE_DIR=str(cold))
    depfile = (d / "prog.d").read_text()
    for name in ("prog", "prog.map", "prog.d"):
        (d / name).unlink()
    ltowrap_link(d, tc, "-Wl,-Map=prog.map", "-Wl,--dependency-file=prog.d", LTOWRAP_CACHE_DIR=str(cold))
    assert links(tmp_path)[-1]["decision"] == "restored", links(tmp_path)[-1]
    assert (d / "prog.map").read_text() == maps[0]
    assert (d / "prog.d").read_text() == depfile


def test_odd_names_and_an_output_elsewhere_are_written_as_lld_writes_them(tmp_path, tc):
    """Spaces, `#` and `$` in names (lld's escaping), `./` and `..` (its folding), a module in a
    subdirectory and the output in another (the map's LTO objects go beside the bitcode)."""
    d = tmp_path / "p"
    write(d / "main.c", "int f(int); int g(int); int main(void) { return f(1) + g(2) - 7; }\n")
    write(d / "sub dir/a b.c", "int f(int x) { return x + 1; }\n")
    write(d / "c$#.c", "int g(int x) { return x * 2; }\n")
    (d / "out").mkdir()
    for src, obj in (("main.c", "main.o"), ("sub dir/a b.c", "sub dir/a b.o"), ("c$#.c", "c$#.o")):
        run([tc.clang, "-O2", "-flto=thin", "-c", src, "-o", obj], d)
    args = ["-flto=thin", "-fuse-ld=lld", "main.o", "sub dir/../sub dir/a b.o", "./c$#.o", "-o", "out/prog",
            "-Wl,--dependency-file=prog.d", "-Wl,-Map=prog.map"]
    run([tc.clang, *args], d)
    want_d, want_map = (d / "prog.d").read_text(), (d / "prog.map").read_text()
    run([wrapper("ltowrap-clang"), *args], d, env=ltowrap_env(tc))
    assert links(tmp_path)[-1]["decision"] == "distributed", links(tmp_path)[-1]
    assert (d / "prog.d").read_text() == want_d
    got_map = (d / "prog.map").read_text()
    assert not OURS.search(got_map)
    assert map_names(got_map) == map_names(want_map)


# lld's options that write a file or print the link's inputs (issue 38), each with what a
# distributed link does with it: "same" (distributed: the same files, byte for byte, and the
# same stdout as in-process lld), "names" (distributed: stdout is a map naming the same inputs
# and LTO objects, map_names, and none of ltowrap's paths: the layout may differ, as -Map's),
# "relocs" (distributed: the output keeps the same relocation sections), or the option the log
# names when the link falls back. The first lld release that has the option (and the last).
OUTPUT_OPTIONS = [
    ("--dependency-file=prog.d", "same", 13),
    ("--print-symbol-order=order.txt", "same", 13),
    ("--thinlto-emit-imports-files", "same", 13),
    ("--print-memory-usage", "same", 17),
    ("--print-map", "names", 13),
    ("-M", "names", 13),
    ("--emit-relocs", "relocs", 13),
    ("--why-extract=why.txt", "--why-extract", 14),
    ("--print-archive-stats=stats.txt", "--print-archive-stats", 13),
    ("--cref", "--cref", 13),
    ("--trace", "--trace", 13),
    ("-t", "-t", 13),
    ("-y,add", "-y", 13),
    ("--trace-symbol=add", "--trace-symbol", 13),
    ("--gc-sections,--print-gc-sections", "--print-gc-sections", 13),
    ("--icf=all,--print-icf-sections", "--print-icf-sections", 13),
    ("--gc-sections,--why-live=add", "--why-live", 20),
    ("--time-trace", "--time-trace", 13),
    ("--time-trace-file=t.json", "--time-trace-file", 13, 14),
    ("--time-trace=t.json", "--time-trace", 15),
    ("--reproduce=r.tar", "--reproduce", 13),
    ("--thinlto-index-only=list", "--thinlto-index-only", 13),
    ("--thinlto-emit-index-files", "--thinlto-emit-index-files", 15),
    ("--lto-emit-asm", "--lto-emit-asm", 13),
    ("--save-temps", "--save-temps", 13),
    ("--plugin-opt=emit-llvm", "emit-llvm", 13),
    ("--plugin-opt=emit-asm", "emit-asm", 13),
    ("--lto-obj-path=lto.o", "--lto-obj-path", 13),
]


def _written(d: Path, before: set[str]) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name not in before and p.name != "prog"
            and p.is_file()}


def _relocation_sections(d: Path, tc: Toolchain) -> list[str]:
    text = run([str(tc.bindir / "llvm-readelf"), "-S", "prog"], d).stdout
    return sorted(set(re.findall(r"\] (\.rela?\.\S+)", text)))


@pytest.mark.parametrize("option, expect, since, until", [(*o, 99)[:4] for o in OUTPUT_OPTIONS],
                         ids=[o[0] for o in OUTPUT_OPTIONS])
def test_each_output_option_writes_what_in_process_writes_or_falls_back_naming_it(tmp_path, tc, option, expect, since,
                                                                                   until):
    output_option(tmp_path, tc, option, expect, since, until)


@pytest.mark.slow
@pytest.mark.parametrize("option, expect, since, until", [(*o, 99)[:4] for o in OUTPUT_OPTIONS],
                         ids=[o[0] for o in OUTPUT_OPTIONS])
def test_each_output_option_on_every_release(tmp_path, any_tc, option, expect, since, until):
    if any_tc.version in (14, 22):
        pytest.skip("the test above")
    output_option(tmp_path, any_tc, option, expect, since, until)


def output_option(tmp_path: Path, tc: Toolchain, option: str, expect: str, since: int, until: int) -> None:
    if not since <= tc.version <= until:
        pytest.skip(f"lld {tc.version} has no {option}")
    d = tmp_path / "p"
    project(d, tc)
    before = {p.name for p in d.iterdir()}
    done = run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", *LINK_ARGS, "-o", "prog", f"-Wl,{option}"], d,
               env=ltowrap_env(tc))
    record = links(tmp_path)[-1]
    if expect not in ("same", "names", "relocs"):
        assert record["decision"] == "fallback" and expect in (record.get("detail") or ""), record
        return
    assert record["decision"] == "distributed", record
    ref = d.parent / "ref"
    shutil.copytree(d, ref, ignore=lambda at, names: [n for n in names if at == str(d) and n not in before])
    want_out = run([tc.clang, "-flto=thin", "-fuse-ld=lld", *LINK_ARGS, "-o", "prog", f"-Wl,{option}"], ref).stdout
    assert _written(d, before) == _written(ref, before)
    if expect == "same":
        assert done.stdout == want_out
    elif expect == "names":
        assert map_names(done.stdout) and map_names(done.stdout) == map_names(want_out)
        assert not OURS.search(done.stdout), [line for line in done.stdout.splitlines() if OURS.search(line)][:5]
    else:
        assert _relocation_sections(d, tc) == _relocation_sections(ref, tc) != []
