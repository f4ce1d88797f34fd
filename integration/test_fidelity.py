"""Is ltowrap's code the code in-process ThinLTO makes? Function by function, on real projects.

Each project is built twice with the same flags (-O2 -flto=thin, links -fuse-ld=lld
-flto=thin -O2 -Wl,--thinlto-jobs=2): once with CC=ltowrap-clang (distributed ThinLTO,
per-module backend options by default, then LTOWRAP_BACKEND_OPTS=link), once with plain
clang-22 (in-process ThinLTO, ltowrap disabled). fidelity.compare then matches the
binaries' functions by name and compares their normalised disassembly (addresses,
relocation-dependent operands and padding removed; PLT stubs are the linker's, not
compared). Run with -s to see the counts and build times.

Projects: Debian lua5.4 with its upstream Makefile (lua and luac) and Debian zlib with
its own ./configure --static (example and minigzip, which link libz.a).

Also built through ltowrap:
- with no option records at all (`no-records`): the compiles run the real clang, the
  links ltowrap-clang (fidelity.record_less_cc), so every module is compiled with what
  it says of itself (its triple; in-process ThinLTO's options otherwise);
- as FatLTO objects (`-ffat-lto-objects`, linked with -Wl,--fat-lto-objects): the
  bitcode in each object's .llvm.lto section is what both links compile; the reference
  is an in-process build with the same flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import clean_env

from . import debsrc, fidelity
from .fidelity import LLVM, OBJDUMP, needs_llvm22, record_less_cc, recorded_backends
from .lua import CFLAGS as LUA_CFLAGS
from .lua import LDFLAGS, SCRIPTS

CFLAGS = "-O2 -flto=thin"


@dataclass(frozen=True)
class Build:
    """How make is told to compile, and the environment that goes with it."""

    name: str
    cc: str
    env: dict[str, str]
    log: Path | None  # ltowrap's JSON lines, for the wrapper build
    cflags: str = ""  # beyond CFLAGS / LDFLAGS
    ldflags: str = ""


def wrapper_build(tmp: Path, variant: str, cflags: str = "", ldflags: str = "") -> Build:
    """`module` or `link` (LTOWRAP_BACKEND_OPTS), or `no-records` (compiles by the real clang)."""
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "ltowrap.log"
    env = clean_env() | {
        "LTOWRAP_CACHE_DIR": str(tmp / "ltowrap-cache"), "LTOWRAP_CLANG": str(LLVM / "clang"), "LTOWRAP_LOG": str(log),
        "LTOWRAP_CONFIG": str(tmp / "no-config.toml"), "LTOWRAP_JOBS": "2",
        "LTOWRAP_BACKEND_OPTS": "link" if variant == "link" else "module",
    }
    cc = SCRIPTS / "ltowrap-clang"
    if variant == "no-records":
        cc = record_less_cc(tmp, cc)
    return Build(f"ltowrap ({variant})", str(cc), env, log, cflags, ldflags)


def reference_build(cflags: str = "", ldflags: str = "") -> Build:
    # LTOWRAP_DISABLE: even if ltowrap's PATH shims are about, this build is in-process LTO.
    return Build("in-process", str(LLVM / "clang"), clean_env() | {"LTOWRAP_DISABLE": "1"}, None, cflags, ldflags)


def run(argv: list[str], cwd: Path, build: Build, extra_env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, env=build.env | (extra_env or {}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"{build.name}: {' '.join(argv)} exited {done.returncode}:\n{done.stdout[-6000:]}"


def timed(label: str, fn) -> float:
    start = time.monotonic()
    fn()
    seconds = time.monotonic() - start
    print(f"\n[fidelity] {label}: built in {seconds:.1f} s", file=sys.stderr)
    return seconds


def link_records(log: Path) -> dict[str, dict]:
    """ltowrap's log records by output basename."""
    records = {}
    for line in log.read_text().splitlines():
        r = json.loads(line)
        argv = r["argv"]
        if "-o" in argv:
            records[os.path.basename(argv[argv.index("-o") + 1])] = r
    return records


def check_distributed(build: Build, outputs: list[str]) -> dict[str, dict]:
    records = link_records(build.log)
    for out in outputs:
        assert out in records, f"ltowrap logged no link of {out}"
        assert records[out]["decision"] == "distributed", (out, records[out]["reason"])
        assert records[out]["backend_compiles"] > 0, out
    if "no-records" in build.name:
        assert not recorded_backends(list(records.values())), "a module had an option record"
    if "--fat-lto-objects" in build.ldflags:
        for out in outputs:
            assert "--fat-lto-objects" in records[out]["argv"], records[out]["argv"]
    return records


def assert_same_code(package: str, build: Build, ours: Path, reference: Path, programs: tuple[str, ...],
                     min_identical: int) -> None:
    """Every function of each program the same in ours and in the in-process reference build;
    more than min_identical of them, so the comparison saw the program's code."""
    failures = []
    for program in programs:
        r = fidelity.compare(ours / program, reference / program, OBJDUMP)
        text = report(f"{package} {program} {build.name} vs in-process", r, ours / program, reference / program)
        assert r.identical > min_identical, text
        if r.differing or r.only_a or r.only_b:
            failures.append(text)
    assert not failures, "\n\n".join(failures)


def report(label: str, r: fidelity.Result, a: Path, b: Path) -> str:
    line = f"[fidelity] {label}: {r.summary()}"
    print("\n" + line, file=sys.stderr)
    details = [line]
    for name in r.differing[:3]:
        details.append(fidelity.diff(a, b, OBJDUMP, name))
    if r.only_a or r.only_b:
        details.append(f"only in ltowrap's: {r.only_a[:20]}\nonly in in-process: {r.only_b[:20]}")
    return "\n".join(details)


# --- Debian lua5.4, upstream Makefile ---


@pytest.fixture(scope="module")
def lua_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A patched lua5.4 tree with the upstream build system (as integration/test_lua.py makes it)."""
    return debsrc.lua_upstream_tree(tmp_path_factory.mktemp("fidelity-lua-src") / "lua5.4")


def build_lua(tree: Path, dest: Path, build: Build) -> Path:
    debsrc.run(["cp", "-a", str(tree), str(dest)])
    src = dest
    argv = ["make", "-C", "src", "-j2", "linux", f"CC={build.cc}", f"CFLAGS={LUA_CFLAGS} {build.cflags}".strip(),
            f"MYLDFLAGS={LDFLAGS} {build.ldflags}".strip()]
    timed(f"lua5.4 {build.name}", lambda: run(argv, src, build))
    lua = src / "src" / "lua"
    out = subprocess.run([lua, "-e", "print(string.format('%d %s', 6 * 7, ('ok'):upper()))"],
                         check=True, capture_output=True, text=True).stdout
    assert out == "42 OK\n", build.name
    return src / "src"


@pytest.fixture(scope="module")
def lua_reference(lua_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_llvm22()
    return build_lua(lua_tree, tmp_path_factory.mktemp("fidelity-lua-ref") / "lua", reference_build())


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["module", "link", "no-records"])
def test_lua(lua_tree: Path, lua_reference: Path, tmp_path: Path, variant: str) -> None:
    build = wrapper_build(tmp_path, variant)
    ours = build_lua(lua_tree, tmp_path / "lua", build)
    check_distributed(build, ["lua", "luac"])
    assert_same_code("lua5.4", build, ours, lua_reference, ("lua", "luac"), min_identical=300)


# --- Debian zlib, ./configure --static ---

ZLIB_PROGRAMS = ("example", "minigzip")


@pytest.fixture(scope="module")
def zlib_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return debsrc.fetch("zlib").unpack(tmp_path_factory.mktemp("fidelity-zlib-src") / "zlib")


def build_zlib(tree: Path, dest: Path, build: Build) -> Path:
    debsrc.run(["cp", "-a", str(tree), str(dest)])
    # Only the static parts: zlib.map needs -Wl,--undefined-version with lld >= 17 for libz.so.
    conf = {"CC": build.cc, "CFLAGS": f"{CFLAGS} {build.cflags}".strip(), "LDFLAGS": f"{LDFLAGS} {build.ldflags}".strip()}

    def configure_and_make() -> None:
        run(["./configure", "--static"], dest, build, conf)
        run(["make", "-j2", "libz.a", *ZLIB_PROGRAMS], dest, build)

    timed(f"zlib {build.name}", configure_and_make)
    for program in ZLIB_PROGRAMS:  # example writes foo.gz in the cwd
        subprocess.run([dest / program], cwd=dest, check=True, capture_output=True)
    data = b"fidelity " * 1000
    packed = subprocess.run([dest / "minigzip"], input=data, check=True, capture_output=True).stdout
    assert subprocess.run([dest / "minigzip", "-d"], input=packed, check=True, capture_output=True).stdout == data
    return dest


@pytest.fixture(scope="module")
def zlib_reference(zlib_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_llvm22()
    return build_zlib(zlib_tree, tmp_path_factory.mktemp("fidelity-zlib-ref") / "zlib", reference_build())


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["module", "link", "no-records"])
def test_zlib(zlib_tree: Path, zlib_reference: Path, tmp_path: Path, variant: str) -> None:
    build = wrapper_build(tmp_path, variant)
    ours = build_zlib(zlib_tree, tmp_path / "zlib", build)
    check_distributed(build, list(ZLIB_PROGRAMS))
    assert_same_code("zlib", build, ours, zlib_reference, ZLIB_PROGRAMS, min_identical=40)


# --- FatLTO: -ffat-lto-objects, linked with -Wl,--fat-lto-objects ---

FAT_CFLAGS, FAT_LDFLAGS = "-ffat-lto-objects", "-Wl,--fat-lto-objects"


def check_fatlto(package: str, build_fn, tree: Path, tmp_path: Path, fat_objects: tuple[str, ...],
                 programs: tuple[str, ...], archive: str, min_identical: int) -> Path:
    """Build `tree` FatLTO through ltowrap: the objects really are fat (native ELF with a
    .llvm.lto section), every program's link was distributed with --fat-lto-objects and
    compiled members of `archive`, and their code is in-process FatLTO's, function by
    function. The build directory (for the package's own tests)."""
    from ltowrap.formats import elf

    build = wrapper_build(tmp_path / "ours", "module", FAT_CFLAGS, FAT_LDFLAGS)
    ours = build_fn(tree, tmp_path / package, build)
    for obj in fat_objects:
        assert elf.section((ours / obj).read_bytes(), elf.LLVM_LTO) is not None, obj
    records = check_distributed(build, list(programs))
    for program in programs:
        assert any(b["module"].startswith(f"{archive}(") for b in records[program]["backends"]), program
    reference = build_fn(tree, tmp_path / f"{package}-ref", reference_build(FAT_CFLAGS, FAT_LDFLAGS))
    assert_same_code(f"{package} FatLTO", build, ours, reference, programs, min_identical)
    return ours


@pytest.mark.slow
def test_lua_fatlto(lua_tree: Path, tmp_path: Path) -> None:
    from .lua import EXERCISE, EXPECTED

    needs_llvm22()
    ours = check_fatlto("lua5.4", build_lua, lua_tree, tmp_path, ("lapi.o", "lua.o"), ("lua", "luac"), "liblua.a",
                        min_identical=300)
    assert subprocess.run([ours / "lua", EXERCISE], check=True, capture_output=True, text=True).stdout == EXPECTED


@pytest.mark.slow
def test_zlib_fatlto(zlib_tree: Path, tmp_path: Path) -> None:
    needs_llvm22()  # build_zlib runs example and minigzip (zlib's `make test`) on the result
    check_fatlto("zlib", build_zlib, zlib_tree, tmp_path, ("inflate.o", "example.o"), ZLIB_PROGRAMS, "libz.a",
                 min_identical=40)


# --- what the zlib comparison first found: a pulled-in archive member dropped by the final link ---


def test_pulled_member_keeps_its_constructor(tmp_path: Path) -> None:
    """main calls get() from an archive member that also has a constructor. In-process
    ThinLTO runs the constructor; so must the distributed link, even though get() is
    imported and inlined into main and nothing references the member any more. (Before
    6b2dda8 the final link had the member's object lazily, inside --start-lib, and lost it:
    zlib's gzclose(), inlined into every caller, was missing from example and minigzip.)"""
    needs_llvm22()
    (tmp_path / "m.c").write_text('#include <stdio.h>\nint get(void) { return 42; }\n'
                                  '__attribute__((constructor)) static void init(void) { puts("ctor"); }\n')
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint get(void);\nint main(void) { printf("%d\\n", get()); return 0; }\n')
    build = wrapper_build(tmp_path, "module")
    cc = [build.cc, *CFLAGS.split()]
    run([*cc, "-c", "m.c", "main.c"], tmp_path, build)
    run([str(LLVM / "llvm-ar"), "rc", "libm.a", "m.o"], tmp_path, build)
    run([*cc, *LDFLAGS.split(), "main.o", "libm.a", "-o", "dist"], tmp_path, build)
    ref = reference_build()
    run([ref.cc, *CFLAGS.split(), *LDFLAGS.split(), "main.o", "libm.a", "-o", "inproc"], tmp_path, ref)
    assert subprocess.run([tmp_path / "inproc"], capture_output=True, text=True).stdout == "ctor\n42\n"
    record = check_distributed(build, ["dist"])["dist"]
    assert "libm.a(m.o)" in {b["module"] for b in record["backends"]}
    assert subprocess.run([tmp_path / "dist"], capture_output=True, text=True).stdout == "ctor\n42\n"


# --- the comparison itself: blind to layout, not to code ---

PROGRAM = r"""
#include <stdio.h>
#include <string.h>
static const char *names[] = {"zero", "one", "two", "three"};
__attribute__((noinline)) int pick(int i) { return (int)strlen(names[i & 3]) * K; }
__attribute__((noinline)) int twice(int x) { return pick(x) + pick(x + 1); }
EXTRA
int main(int argc, char **argv) { printf("%d %s\n", twice(argc), names[argc & 3]); return 0; }
"""


@pytest.mark.parametrize("pie", ["-pie", "-no-pie"])
def test_compare_sees_code_not_layout(tmp_path: Path, pie: str) -> None:
    """b has an extra function laid out before the others (every address moves) and a
    different constant in pick(): one function differs, one is only in b, the rest match."""
    needs_llvm22()
    extra = "__attribute__((noinline)) int first(int x) { return x * 3 + 1; }\n" \
            '__attribute__((used)) static const char pad[] = "moves .rodata along";'

    for name, k, ext in (("a", 7, ""), ("b", 9, extra)):
        src = tmp_path / f"{name}.c"
        src.write_text(PROGRAM.replace("EXTRA", ext).replace("K", str(k)))
        fpic = "-fPIE" if pie == "-pie" else "-fno-pic"
        subprocess.run([str(LLVM / "clang"), "-O2", fpic, pie, "-fuse-ld=lld", str(src), "-o", str(tmp_path / name)],
                       check=True, capture_output=True)
    r = fidelity.compare(tmp_path / "a", tmp_path / "b", OBJDUMP)
    assert r.differing == ["pick"], fidelity.diff(tmp_path / "a", tmp_path / "b", OBJDUMP, "main")
    assert r.only_a == [] and r.only_b == ["first"]
    assert r.identical >= 3  # twice, main, and the C runtime's own (_start ...)
    assert fidelity.compare(tmp_path / "a", tmp_path / "a", OBJDUMP).differing == []
