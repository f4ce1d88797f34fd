"""Real Debian source packages, built with their own upstream build systems through ltowrap.

Each package is built once through ltowrap (-O2 -flto=thin, make -j2), and its own test
suite runs on the result. The checks on LTOWRAP_LOG: every link that had bitcode, including
configure's test links, was distributed, nothing fell back, and the links the package is
known to make are all there. Each package is also built once with plain clang 22 and lld
(in-process ThinLTO, ltowrap disabled) from the same tree with the same flags, and the two
sets of binaries are compared function by function (integration/fidelity.py).

* zlib: its own ./configure, CC=ltowrap-clang. libz.a and libz.so (-shared, version
  script zlib.map, which lld >= 17 only takes with --undefined-version: passed through
  LDSHARED, because configure's shared-library probe links with LDSHARED alone), then
  example/minigzip (static) and examplesh/minigzipsh (shared); `make test`.
* bzip2: the upstream Makefiles (the Debian patch makefile.diff rewrites them, so the tree
  is unpacked with --skip-patches), through ltowrap's PATH shims with CC=clang-22:
  Makefile-libbz2_so (PIC objects, libbz2.so.1.0.8, and bzip2-shared, compiled and linked
  in one command), `make clean`, then the static build, whose bzip2 links `-L. -lbz2`
  against the local bitcode archive; `make test`. The upstream link lines carry no
  -fuse-ld, so ltowrap switches them to lld itself.
* xz-utils: autoconf + libtool, the pre-generated configure from the .orig tarball.
  liblzma.so (version script liblzma_linux.map) and liblzma.a (80 members), then xz
  linked with libtool's -static, so that it pulls members out of liblzma.a (an 80-member
  --start-lib group), then everything else against liblzma.so; `make check` (18 tests,
  which use that xz). libtool believes the linker is GNU ld; ltowrap's links are lld's.

zlib and bzip2 are each also built through the other route (zlib through the PATH shims
with CC=clang-22, bzip2 with CC=ltowrap-clang), with the same test suite and link checks
(test_zlib[shims], test_bzip2[ltowrap-clang]; about 12 s more). xz-utils, at about 35 s a
build, only goes through CC=ltowrap-clang.

Every fidelity test prints one summary line for its package (links, modules, backend
compiles, identical/differing functions, build times). The whole file takes about 80 s on
2 cores.

xz's main() once differed from in-process ThinLTO: a distributed backend did not know
that functions defined in other, not imported, modules are dso_local, until ltowrap's
thin-link passed -import-declaration (LLVM >= 19).
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import clean_env
from needs import missing

from . import debsrc, fidelity
from .fidelity import LLVM, OBJDUMP, needs_llvm22, record_less_cc, recorded_backends

pytestmark = pytest.mark.slow

SCRIPTS = Path(sysconfig.get_path("scripts"))
CFLAGS = "-O2 -flto=thin"


# --- how a package is built ---


@dataclass(frozen=True)
class Mode:
    """A way of building: make's CC, the environment, and where ltowrap logs (None: in-process)."""

    name: str
    cc: str
    env: dict[str, str]
    logdir: Path | None

    def log(self, phase: str) -> dict[str, str]:
        return {"LTOWRAP_LOG": str(self.logdir / f"{phase}.log")} if self.logdir else {}


def ltowrap_env(tmp: Path) -> dict[str, str]:
    # small_link 0: bzip2-shared's compile-and-link of one module is distributed, to be checked
    return clean_env() | {"LTOWRAP_CACHE_DIR": str(tmp / "ltowrap-cache"), "LTOWRAP_JOBS": "2",
                          "LTOWRAP_CONFIG": str(tmp / "no-config.toml"),  # not ~/.config/ltowrap
                          "LTOWRAP_SMALL_LINK": "0"}


def wrapper_mode(tmp: Path) -> Mode:
    """CC=ltowrap-clang, the real clang named by LTOWRAP_CLANG."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = ltowrap_env(tmp) | {"LTOWRAP_CLANG": str(LLVM / "clang")}
    return Mode("ltowrap-clang", str(SCRIPTS / "ltowrap-clang"), env, tmp)


def record_less_mode(tmp: Path) -> Mode:
    """Compiles by the real clang 22, links through ltowrap-clang: no module has a record."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = ltowrap_env(tmp) | {"LTOWRAP_CLANG": str(LLVM / "clang")}
    return Mode("no-records", str(record_less_cc(tmp, SCRIPTS / "ltowrap-clang")), env, tmp)


def shim_mode(tmp: Path) -> Mode:
    """CC=clang-22 with `ltowrap shims` first on PATH."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = ltowrap_env(tmp)
    if shutil.which("clang-22", path=env.get("PATH")) is None:
        missing("clang-22 on PATH", "dev/setup installs clang-22")
    shims = subprocess.run([str(SCRIPTS / "ltowrap"), "shims"], check=True, capture_output=True, text=True).stdout.strip()
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    return Mode("shims", "clang-22", env, tmp)


def reference_mode() -> Mode:
    """Plain clang 22, in-process ThinLTO; LTOWRAP_DISABLE in case ltowrap's shims are on PATH."""
    return Mode("in-process", str(LLVM / "clang"), clean_env() | {"LTOWRAP_DISABLE": "1"}, None)


def sh(argv: list[str], cwd: Path, mode: Mode, phase: str, extra: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=mode.env | mode.log(phase) | (extra or {}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"{mode.name}: {' '.join(argv)} exited {done.returncode} in {cwd}:\n{done.stdout[-8000:]}"
    return done.stdout


@dataclass
class Built:
    tree: Path
    mode: Mode
    seconds: float = 0.0
    output: dict[str, str] = field(default_factory=dict)  # phase -> what make printed


def copy_tree(src: Path, dest: Path) -> Path:
    return Path(shutil.copytree(src, dest, symlinks=True))


def build_by_route(build: Callable[[Path, Path, Mode], Built], src: Path, factory: pytest.TempPathFactory,
                   name: str, mode: Callable[[Path], Mode]) -> Built:
    """build(src) by one route (wrapper_mode or shim_mode), in fresh directories called `name`."""
    needs_llvm22()
    return build(src, factory.mktemp(name) / src.name, mode(factory.mktemp(f"{name}-env")))


# --- what ltowrap logged ---


@dataclass
class Links:
    by_phase: dict[str, list[dict]]

    @property
    def all(self) -> list[dict]:
        return [r for rs in self.by_phase.values() for r in rs]

    def outputs(self, phase: str | None = None) -> dict[str, dict]:
        """Build-tree-relative output path -> record (the last link of that output)."""
        found = {}
        for r in self.all if phase is None else self.by_phase.get(phase, []):
            argv = r["argv"]
            if "-o" in argv:
                out = os.path.normpath(os.path.join(r["cwd"], argv[argv.index("-o") + 1]))
                found[out] = r
        return found


def read_links(mode: Mode) -> Links:
    by_phase = {}
    for log in sorted(mode.logdir.glob("*.log")):
        by_phase[log.stem] = [json.loads(line) for line in log.read_text().splitlines()]
    return Links(by_phase)


def check_links(built: Built, expected: list[str]) -> Links:
    """Every link with bitcode distributed, none fell back, and the expected outputs linked."""
    links = read_links(built.mode)
    for r in links.all:
        argv = r["argv"]
        out = argv[argv.index("-o") + 1] if "-o" in argv else "?"
        assert r["decision"] != "fallback", (out, r["cwd"], r["reason"])
        if r["modules"] > 0:
            assert r["decision"] == "distributed", (out, r["cwd"], r["decision"], r["reason"])
            assert r["argv"][0] == str(LLVM / "ld.lld"), (out, r["argv"][0])
    outputs = links.outputs()
    for name in expected:
        path = os.path.normpath(built.tree / name)
        assert path in outputs, f"ltowrap logged no link of {name}; it logged {sorted(outputs)}"
        r = outputs[path]
        assert r["decision"] == "distributed" and r["modules"] > 0 and r["backend_compiles"] > 0, (name, r)
    return links


def link_summary(links: Links) -> str:
    recs = links.all
    dist = [r for r in recs if r["decision"] == "distributed"]
    phases = ", ".join(f"{p} {sum(r['decision'] == 'distributed' for r in rs)}" for p, rs in links.by_phase.items())
    return (f"{len(dist)} links distributed ({phases}), "
            f"{sum(r['decision'] == 'fallback' for r in recs)} fallback, "
            f"{sum(r['decision'] == 'passthrough' for r in recs)} without bitcode; "
            f"{sum(r['modules'] for r in dist)} modules, {sum(r['backend_compiles'] for r in dist)} backend compiles, "
            f"{sum(r['backend_hits'] for r in dist)} hits")


# --- comparing two binaries ---

@dataclass
class Comparison:
    pairs: list[tuple[str, fidelity.Result]] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)

    @property
    def identical(self) -> int:
        return sum(r.identical for _, r in self.pairs)

    @property
    def differing(self) -> list[str]:
        return [f"{name}:{fn}" for name, r in self.pairs for fn in r.differing]

    @property
    def unmatched(self) -> list[str]:
        return [f"{name}:{fn}" for name, r in self.pairs for fn in r.only_a + r.only_b]

    def text(self) -> str:
        return "\n".join([f"{name}: {r.summary()}" for name, r in self.pairs] + self.diffs)


def compare(ours: Path, ref: Path, binaries: list[str]) -> Comparison:
    result = Comparison()
    for name in binaries:
        a = fidelity.Binary(ours / name, OBJDUMP).disassemble()
        b = fidelity.Binary(ref / name, OBJDUMP).disassemble()
        common = sorted(a.keys() & b.keys())
        r = fidelity.Result(identical=sum(a[f] == b[f] for f in common), differing=[f for f in common if a[f] != b[f]],
                            only_a=sorted(a.keys() - b.keys()), only_b=sorted(b.keys() - a.keys()))
        result.pairs.append((name, r))
        for fn in r.differing[:3]:
            result.diffs.append("\n".join(difflib.unified_diff(a[fn], b[fn], f"ltowrap {name}:{fn}",
                                                               f"in-process {name}:{fn}", n=3, lineterm=""))[:6000])
        if r.only_a or r.only_b:
            result.diffs.append(f"{name}: only in ltowrap's: {r.only_a[:20]}; only in in-process: {r.only_b[:20]}")
    return result


def dynamic_symbols(lib: Path) -> list[str]:
    """A shared object's defined dynamic symbols with their versions (`name@@VERSION`)."""
    out = subprocess.run([str(LLVM / "llvm-nm"), "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def summary(capsys: pytest.CaptureFixture, package: str, ours: Built, ref: Built, cmp: Comparison) -> None:
    line = (f"[packages] {package}: {link_summary(read_links(ours.mode))}; "
            f"fidelity vs in-process ({len(cmp.pairs)} binaries): {cmp.identical} identical, "
            f"{len(cmp.differing)} differing{f' {cmp.differing[:5]}' if cmp.differing else ''}, "
            f"{len(cmp.unmatched)} unmatched; "
            f"build+tests via {ours.mode.name} {ours.seconds:.1f} s, in-process build {ref.seconds:.1f} s")
    with capsys.disabled():
        print("\n" + line, file=sys.stderr)


# --- zlib: ./configure, static and shared ---

ZLIB_VERSION_SCRIPT = "-Wl,-soname,libz.so.1,--version-script,zlib.map -Wl,--undefined-version"
ZLIB_LINKS = ["libz.so.1.2.13", "example", "minigzip", "examplesh", "minigzipsh"]
ZLIB_COMPARED = ["example", "minigzip", "examplesh", "minigzipsh", "libz.so.1.2.13"]


@pytest.fixture(scope="module")
def zlib_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return debsrc.fetch("zlib").unpack(tmp_path_factory.mktemp("zlib-src") / "zlib")


def build_zlib(src: Path, dest: Path, mode: Mode, ldflags: str = "", check: bool = True) -> Built:
    built = Built(copy_tree(src, dest), mode)
    start = time.monotonic()
    conf = {"CC": mode.cc, "CFLAGS": CFLAGS, "LDFLAGS": ldflags,
            "LDSHARED": f"{mode.cc} {ldflags} -shared {ZLIB_VERSION_SCRIPT}".replace("  ", " ")}
    built.output["configure"] = sh(["./configure"], built.tree, mode, "configure", conf)
    assert "Building shared library libz.so" in built.output["configure"], built.output["configure"]
    built.output["build"] = sh(["make", "-j2"], built.tree, mode, "build")
    if check:
        built.output["check"] = sh(["make", "test"], built.tree, mode, "check")
    built.seconds = time.monotonic() - start
    return built


@pytest.fixture(scope="module")
def zlib_ltowrap(zlib_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_by_route(build_zlib, zlib_src, tmp_path_factory, "zlib-ltowrap", wrapper_mode)


@pytest.fixture(scope="module")
def zlib_shims(zlib_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The other route: CC=clang-22 with ltowrap's shims first on PATH (configure, LDSHARED and make alike)."""
    return build_by_route(build_zlib, zlib_src, tmp_path_factory, "zlib-shims", shim_mode)


@pytest.mark.parametrize("route", ["zlib_ltowrap", "zlib_shims"], ids=["ltowrap-clang", "shims"])
def test_zlib(route: str, request: pytest.FixtureRequest) -> None:
    built: Built = request.getfixturevalue(route)
    out = built.output["check"]
    assert "*** zlib test OK ***" in out and "*** zlib shared test OK ***" in out, out
    links = check_links(built, ZLIB_LINKS)
    tree = built.tree
    # the static programs pulled their members out of the bitcode libz.a; the shared ones did not
    for program in ("example", "minigzip"):
        record = links.outputs()[str(tree / program)]
        assert any(b["module"].startswith("libz.a(") for b in record["backends"]), record["backends"]
    assert links.outputs()[str(tree / "libz.so.1.2.13")]["backend_compiles"] == 15
    symbols = dynamic_symbols(tree / "libz.so.1.2.13")
    assert "gzopen64@@ZLIB_1.2.3.3" in symbols and "inflateCopy@@ZLIB_1.2.0" in symbols, symbols  # zlib.map
    assert "inflate_fast" not in symbols, symbols  # local: in zlib.map
    data = b"ltowrap zlib " * 5000
    packed = subprocess.run([tree / "minigzipsh"], input=data, capture_output=True, check=True,
                            env={"LD_LIBRARY_PATH": str(tree)}).stdout
    assert subprocess.run([tree / "minigzip", "-d"], input=packed, capture_output=True, check=True).stdout == data


def test_zlib_fidelity(zlib_src: Path, zlib_ltowrap: Built, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = build_zlib(zlib_src, tmp_path / "zlib", reference_mode(), ldflags="-fuse-ld=lld", check=False)
    cmp = compare(zlib_ltowrap.tree, ref.tree, ZLIB_COMPARED)
    summary(capsys, "zlib", zlib_ltowrap, ref, cmp)
    assert cmp.identical > 250 and not cmp.differing and not cmp.unmatched, cmp.text()
    assert dynamic_symbols(zlib_ltowrap.tree / "libz.so.1.2.13") == dynamic_symbols(ref.tree / "libz.so.1.2.13")


# --- bzip2: the upstream Makefiles, through PATH shims ---

BZIP2_CFLAGS = "-Wall -Winline -O2 -g -D_FILE_OFFSET_BITS=64 -flto=thin"  # upstream's, plus -flto=thin
BZIP2_LINKS = ["libbz2.so.1.0.8", "bzip2-shared", "bzip2", "bzip2recover"]


@pytest.fixture(scope="module")
def bzip2_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream bzip2 1.0.8 as released: Debian's makefile.diff would link bzip2 against libbz2.so."""
    pkg = debsrc.fetch("bzip2")
    dest = tmp_path_factory.mktemp("bzip2-src") / "bzip2"
    debsrc.run(["dpkg-source", "-x", "--no-check", "--skip-patches", str(pkg.dsc), str(dest)])
    return dest


def build_bzip2(src: Path, dest: Path, mode: Mode, check: bool = True) -> Built:
    built = Built(copy_tree(src, dest), mode)
    tree = built.tree
    start = time.monotonic()
    cc = f"CC={mode.cc}"
    built.output["shared"] = sh(["make", "-j2", "-f", "Makefile-libbz2_so", cc, f"CFLAGS=-fpic -fPIC {BZIP2_CFLAGS}"],
                                tree, mode, "shared")
    sh(["make", "clean"], tree, mode, "clean")
    built.output["build"] = sh(["make", "-j2", cc, f"CFLAGS={BZIP2_CFLAGS}", "libbz2.a", "bzip2", "bzip2recover"],
                               tree, mode, "build")
    if check:
        built.output["check"] = sh(["make", "test", cc, f"CFLAGS={BZIP2_CFLAGS}"], tree, mode, "check")
    built.seconds = time.monotonic() - start
    return built


@pytest.fixture(scope="module")
def bzip2_shims(bzip2_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_by_route(build_bzip2, bzip2_src, tmp_path_factory, "bzip2-shims", shim_mode)


@pytest.fixture(scope="module")
def bzip2_wrapper(bzip2_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The other route: CC=ltowrap-clang on make's command line, no shims on PATH."""
    return build_by_route(build_bzip2, bzip2_src, tmp_path_factory, "bzip2-ltowrap", wrapper_mode)


@pytest.mark.parametrize("route", ["bzip2_shims", "bzip2_wrapper"], ids=["shims", "ltowrap-clang"])
def test_bzip2(route: str, request: pytest.FixtureRequest) -> None:
    built: Built = request.getfixturevalue(route)
    tree = built.tree
    out = built.output["check"]
    assert out.count("\ncmp ") == 6 and "If you got this far and the 'cmp's didn't complain" in out, out
    links = check_links(built, BZIP2_LINKS)
    outputs = links.outputs()
    assert outputs[str(tree / "libbz2.so.1.0.8")]["backend_compiles"] == 7
    # compiled and linked in one command: the driver's temporary bitcode is the one module
    assert outputs[str(tree / "bzip2-shared")]["modules"] == 1
    # -L. -lbz2 found the bitcode libbz2.a (there is no libbz2.so, only libbz2.so.1.0*)
    static = outputs[str(tree / "bzip2")]
    modules = {os.path.normpath(b["module"]) for b in static["backends"]}  # -L. names it ./libbz2.a
    assert modules >= {"bzip2.o", "libbz2.a(bzlib.o)", "libbz2.a(compress.o)"}, modules
    assert "libbz2" not in subprocess.run(["ldd", tree / "bzip2"], capture_output=True, text=True).stdout
    # the shared build, against libbz2.so.1.0.8 (its soname, libbz2.so.1.0, is the symlink)
    sample = (tree / "sample1.ref").read_bytes()
    env = {"LD_LIBRARY_PATH": str(tree)}
    packed = subprocess.run([tree / "bzip2-shared", "-1"], input=sample, capture_output=True, check=True, env=env).stdout
    assert packed == (tree / "sample1.bz2").read_bytes()
    assert subprocess.run([tree / "bzip2", "-d"], input=packed, capture_output=True, check=True).stdout == sample


def test_bzip2_fidelity(bzip2_src: Path, bzip2_shims: Built, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref_mode = reference_mode()
    # Makefile-libbz2_so links with $(CC) alone, so -fuse-ld=lld goes into CC.
    ref_mode = Mode(ref_mode.name, f"{ref_mode.cc} -fuse-ld=lld", ref_mode.env, None)
    ref = build_bzip2(bzip2_src, tmp_path / "bzip2", ref_mode, check=False)
    cmp = compare(bzip2_shims.tree, ref.tree, BZIP2_LINKS)
    summary(capsys, "bzip2", bzip2_shims, ref, cmp)
    assert cmp.identical > 120 and not cmp.differing and not cmp.unmatched, cmp.text()
    assert dynamic_symbols(bzip2_shims.tree / "libbz2.so.1.0.8") == dynamic_symbols(ref.tree / "libbz2.so.1.0.8")


# --- xz-utils: autoconf + libtool ---

XZ_CONFIGURE = ["./configure", "--disable-doc", "--disable-nls", "--disable-dependency-tracking"]
XZ_SO = "src/liblzma/.libs/liblzma.so.5.4.1"
XZ_LINKS = [XZ_SO, "src/xz/xz", "src/xzdec/.libs/xzdec", "src/xzdec/.libs/lzmadec", "src/lzmainfo/.libs/lzmainfo",
            "tests/.libs/test_index", "tests/.libs/test_block_header", "tests/.libs/create_compress_files"]


@pytest.fixture(scope="module")
def xz_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Debian's patched tree (the patches touch only C files and translations; configure is upstream's)."""
    return debsrc.fetch("xz-utils").unpack(tmp_path_factory.mktemp("xz-src") / "xz-utils")


def build_xz(src: Path, dest: Path, mode: Mode, ldflags: str = "", check: bool = True) -> Built:
    built = Built(copy_tree(src, dest), mode)
    tree = built.tree
    start = time.monotonic()
    static = f"LDFLAGS={ldflags} -static".strip()  # libtool: link the uninstalled liblzma.la as .libs/liblzma.a
    built.output["configure"] = sh([*XZ_CONFIGURE, f"CC={mode.cc}", f"CFLAGS={CFLAGS}", f"LDFLAGS={ldflags}"],
                                   tree, mode, "configure")
    built.output["liblzma"] = sh(["make", "-j2", "-C", "src/liblzma"], tree, mode, "build")
    built.output["xz"] = sh(["make", "-j2", "-C", "src/xz", static, "xz"], tree, mode, "build")
    if check:
        built.output["build"] = sh(["make", "-j2"], tree, mode, "build")
        built.output["check"] = sh(["make", "-j2", "check"], tree, mode, "check")
    built.seconds = time.monotonic() - start
    return built


@pytest.fixture(scope="module")
def xz_ltowrap(xz_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_by_route(build_xz, xz_src, tmp_path_factory, "xz-ltowrap", wrapper_mode)


def test_xz(xz_ltowrap: Built) -> None:
    tree = xz_ltowrap.tree
    out = xz_ltowrap.output["check"]
    counts = dict(re.findall(r"^# (TOTAL|PASS|FAIL|ERROR|XPASS):\s+(\d+)$", out, re.M))
    assert counts.get("FAIL") == "0" and counts.get("ERROR") == "0" and int(counts.get("PASS", 0)) >= 15, out
    assert re.search(r"^PASS: test_files\.sh$", out, re.M), out  # exercises the static xz below
    links = check_links(xz_ltowrap, XZ_LINKS)
    outputs = links.outputs()
    shared = outputs[str(tree / XZ_SO)]
    assert any("--version-script" in a for a in shared["argv"]) and shared["backend_compiles"] > 70, shared["argv"]
    symbols = dynamic_symbols(tree / XZ_SO)
    assert "lzma_code@@XZ_5.0" in symbols and "lzma_stream_decoder_mt@@XZ_5.4" in symbols, symbols
    # xz linked -static: members of the 80-member bitcode liblzma.a as an archive group, pulled lazily
    xz = outputs[str(tree / "src/xz/xz")]
    members = [b["module"] for b in xz["backends"] if b["module"].startswith("../../src/liblzma/.libs/liblzma.a(")]
    assert xz["modules"] >= 17 + 80 and 20 < len(members) < 80, (xz["modules"], members)
    assert "liblzma" not in subprocess.run(["ldd", tree / "src/xz/xz"], capture_output=True, text=True).stdout
    data = b"ltowrap xz-utils " * 20000
    packed = subprocess.run([tree / "src/xz/xz", "-T2", "-6"], input=data, capture_output=True, check=True).stdout
    assert subprocess.run([tree / "src/xz/xz", "-dc"], input=packed, capture_output=True, check=True).stdout == data


@pytest.fixture(scope="module")
def xz_reference(xz_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    needs_llvm22()
    return build_xz(xz_src, tmp_path_factory.mktemp("xz-ref") / "xz-utils", reference_mode(), ldflags="-fuse-ld=lld",
                    check=False)


@pytest.fixture(scope="module")
def xz_record_less(xz_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """xz-utils with no option record for any module (the objects compiled by plain clang)."""
    return build_by_route(functools.partial(build_xz, check=False), xz_src, tmp_path_factory, "xz-norecords",
                          record_less_mode)


@pytest.mark.parametrize("route", ["xz_ltowrap", "xz_record_less"], ids=["records", "no-records"])
def test_xz_fidelity(route: str, xz_reference: Built, request: pytest.FixtureRequest,
                     capsys: pytest.CaptureFixture) -> None:
    """xz (static, from liblzma.a) and liblzma.so against in-process ThinLTO."""
    ours: Built = request.getfixturevalue(route)
    ref = xz_reference
    # the same configure results, or the comparison would compare different programs
    assert (ours.tree / "config.h").read_text() == (ref.tree / "config.h").read_text()
    if route == "xz_record_less":
        links = check_links(ours, [XZ_SO, "src/xz/xz"])
        assert not recorded_backends(links.all), "a module had an option record"
    cmp = compare(ours.tree, ref.tree, ["src/xz/xz", XZ_SO])
    summary(capsys, f"xz-utils ({ours.mode.name})", ours, ref, cmp)
    assert dynamic_symbols(ours.tree / XZ_SO) == dynamic_symbols(ref.tree / XZ_SO)
    assert cmp.identical > 600 and not cmp.unmatched, cmp.text()
    assert not cmp.differing, cmp.text()
