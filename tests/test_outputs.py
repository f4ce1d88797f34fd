"""The files a distributed link writes besides -o (issue 38): `--dependency-file` lists what
in-process lld lists, and `-Map` names the inputs and LTO objects as in-process lld names them,
never ltowrap's temporary or stored objects; cold, warm and memo-restored links alike."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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
