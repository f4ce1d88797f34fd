"""Two real C++ projects from Debian source, built by their own CMake through ltowrap.

* **ninja-build** 1.11.1, through CMake's compiler and linker launchers
  (`CMAKE_CXX_COMPILER_LAUNCHER=ltowrap`, the compiler /usr/lib/llvm-22/bin/clang++). Targets
  `ninja` and `ninja_test` (not the six perf tools); `ninja_test`, ninja's own unit tests (382),
  runs on ltowrap's binary.
* **fmtlib** 9.1.0, with `CMAKE_CXX_COMPILER=ltowrap-clang++` (LTOWRAP_CLANG names the real
  clang), configured as debian/rules does (a shared libfmt, PIC) with Debian's patch 0001,
  which builds googletest from /usr/src/googletest (the `googletest` package, a
  Build-Depends of fmtlib) in the tree: libgtest.so and libgmock.so are linked through
  ltowrap too. Targets: libfmt.so and 6 of the 20 test programs (FMT_TESTS: format-test,
  the main one, and five small ones); `ctest` runs them. Left out for time: core-test,
  printf-test, chrono-test and xchar-test (10-12 s of compile and 6-12 s of backends each,
  on 2 cores), posix-mock-test (its own copy of format.cc) and nine smaller ones;
  FMT_PEDANTIC's sub-builds (compile-error-test & co. run CMake again per test).

Each project is built in three variants, all `-O2 -flto=thin -fuse-ld=lld`:

* `plain`;
* `wpd`: `-fvisibility=hidden -fwhole-program-vtables` (whole-program devirtualization);
* `cfi` (ninja only): `-fvisibility=hidden -fsanitize=cfi -fno-sanitize=cfi-nvcall`. The
  nvcall check is off because ninja's test harness calls a member function through a null
  pointer: `TEST_F`'s factory sets `g_current_test` only after the fixture's constructor,
  which already runs `EXPECT_*` (StateTestWithBuiltinRules); cfi-nvcall traps that in
  in-process ThinLTO as well.

Per build: every link with bitcode is distributed (LTOWRAP_LOG: none falls back, the
expected outputs are there), the project's tests pass on ltowrap's binaries. Then the
fidelity test relinks the same objects in-process (the link outputs deleted, `cmake
--build` again with LTOWRAP_DISABLE=1: lld's own ThinLTO) and compares the main binaries
function by function (integration/fidelity.py). `plain`: identical. `wpd`/`cfi` make split
LTO units (a ThinLTO module and a regular-LTO module per file), and there no distributed
ThinLTO is identical to in-process: the shards lld writes (index-only, and DTLTO alike)
carry no summaries of the regular-LTO modules, so a backend cannot know that a vtable
defined there is dso_local, and reaches its address point through the GOT (relaxed by lld
to `leaq _ZTV…(%rip); addq $0x10` instead of `leaq _ZTV…+0x10(%rip)`). Those builds are
compared with lld's own DTLTO as well (bench/dtlto_local.py as its distributor, with
`-mllvm -import-declaration`, which ltowrap's thin-link passes): identical to it, and every
function that differs from in-process differs there too (a binary identical to in-process
is not relinked by DTLTO).

Every test prints a summary line ([cpp] ...). The file took 6 min 19 s on 2 cores shared with
another agent's builds (load average 2-3; docs/figures.md has each test's time:
`pytest --durations=0 integration/test_cpp_projects.py`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import check_split_dwarf, clean_env
from needs import missing

from . import debsrc, fidelity
from .fidelity import LLVM, OBJDUMP, needs_llvm22

pytestmark = pytest.mark.slow

SCRIPTS = Path(sysconfig.get_path("scripts"))
ROOT = Path(__file__).resolve().parent.parent
DTLTO_DISTRIBUTOR = ROOT / "bench" / "dtlto_local.py"
GOOGLETEST = Path("/usr/src/googletest")
CFI_IGNORELIST = LLVM.parent / "lib" / "clang" / "22" / "share" / "cfi_ignorelist.txt"
LTO = "-O2 -flto=thin"
VARIANTS = {
    "plain": LTO,
    "wpd": f"{LTO} -fvisibility=hidden -fwhole-program-vtables",
    "cfi": f"{LTO} -fvisibility=hidden -fsanitize=cfi -fno-sanitize=cfi-nvcall",
    "dwarf": f"{LTO} -g -gsplit-dwarf",  # split DWARF: CMake passes the flags to the link too (dwo_dir)
}
SPLIT = ("wpd", "cfi")  # variants whose modules are split LTO units


# --- the projects ---


@dataclass(frozen=True)
class Project:
    package: str
    version: str  # the Debian version the tests were written against
    targets: tuple[str, ...]  # what the build makes
    links: tuple[str, ...]  # outputs (build-tree relative) ltowrap must have linked
    compared: tuple[str, ...]  # binaries compared with in-process ThinLTO (plain)
    main: tuple[str, ...]  # binaries compared with in-process ThinLTO and lld's DTLTO (split variants)
    configure: Callable[[Path, Path, str], list[str]]  # (source, build dir, flags) -> cmake argv
    check: Callable[[Path, dict[str, str]], str]  # run the project's tests in the build dir; their output


def ninja_configure(src: Path, build: Path, flags: str) -> list[str]:
    """The launcher form, as README's CMake section gives it."""
    launcher = str(SCRIPTS / "ltowrap")
    return ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
            f"-DCMAKE_C_COMPILER={LLVM / 'clang'}", f"-DCMAKE_CXX_COMPILER={LLVM / 'clang++'}",
            f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}",
            f"-DCMAKE_C_LINKER_LAUNCHER={launcher}", f"-DCMAKE_CXX_LINKER_LAUNCHER={launcher}",
            f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}", "-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld"]


def ninja_check(build: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(build / "ninja_test")], cwd=build, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0 and out.rstrip().endswith("passed"), \
        f"ninja_test exited {done.returncode}:\n{out[-4000:]}"
    out += subprocess.run([str(build / "ninja"), "--version"], check=True, capture_output=True, text=True).stdout
    return out


FMT_TESTS = ("format-test", "ostream-test", "args-test", "color-test", "gtest-extra-test", "os-test")


def fmt_configure(src: Path, build: Path, flags: str) -> list[str]:
    """CXX=ltowrap-clang++ (LTOWRAP_CLANG is set); debian/rules' options, llvm-ar for the bitcode archive."""
    return ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
            f"-DCMAKE_C_COMPILER={SCRIPTS / 'ltowrap-clang'}", f"-DCMAKE_CXX_COMPILER={SCRIPTS / 'ltowrap-clang++'}",
            f"-DCMAKE_AR={LLVM / 'llvm-ar'}", f"-DCMAKE_RANLIB={LLVM / 'llvm-ranlib'}",
            f"-DCMAKE_CXX_FLAGS={flags}", "-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld",
            "-DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld",
            "-DFMT_DOC=off", "-DCMAKE_POSITION_INDEPENDENT_CODE=on", "-DBUILD_SHARED_LIBS=on"]


def fmt_check(build: Path, env: dict[str, str]) -> str:
    """ctest runs the test programs built (-V: their gtest output, to count the tests)."""
    pattern = "^(" + "|".join(FMT_TESTS) + ")$"
    done = subprocess.run(["ctest", "-V", "-R", pattern], cwd=build, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0 and f"100% tests passed, 0 tests failed out of {len(FMT_TESTS)}" in out, out[-6000:]
    return out


def gtest_passed(output: str) -> int:
    """The tests gtest reported passed, over every program in the output."""
    return sum(int(n) for n in re.findall(r"\[  PASSED  \] (\d+) tests?\.", output))


FMT_SO = "libfmt.so.9.1.0"
PROJECTS = {
    "ninja": Project("ninja-build", "1.11.1-2~deb12u1", ("ninja", "ninja_test"), ("ninja", "ninja_test"),
                     ("ninja", "ninja_test"), ("ninja",), ninja_configure, ninja_check),
    "fmt": Project("fmtlib", "9.1.0+ds1-2", ("fmt", "gtest", "gmock", "test-main", *FMT_TESTS),
                   (FMT_SO, "lib/libgtest.so.1.12.1", "lib/libgmock.so.1.12.1", *(f"bin/{t}" for t in FMT_TESTS)),
                   (FMT_SO, "bin/format-test"), (FMT_SO, "bin/format-test"), fmt_configure, fmt_check),
}


# --- building ---


@dataclass
class Built:
    project: Project
    variant: str
    src: Path
    work: Path
    env: dict[str, str]  # ltowrap's: its cache, jobs, config, the real clang
    seconds: dict[str, float] = field(default_factory=dict)  # configure, build, tests
    records: list[dict] = field(default_factory=list)  # LTOWRAP_LOG of configure and build
    check_output: str = ""

    @property
    def build(self) -> Path:
        return self.work / "build"

    @property
    def ours(self) -> Path:
        """Copies of ltowrap's link outputs, taken before anything is relinked."""
        return self.work / "ltowrap"

    def cmake_build(self, env: dict[str, str], targets: tuple[str, ...] = ()) -> None:
        argv = ["cmake", "--build", str(self.build), "-j2", "--target", *(targets or self.project.targets)]
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-8000:]}"

    def outputs(self) -> list[str]:
        """Build-tree-relative outputs of the build's links (configure's probes left out)."""
        found = []
        for r in self.records:
            argv = r["argv"]
            if "-o" not in argv:
                continue
            out = os.path.relpath(os.path.join(r["cwd"], argv[argv.index("-o") + 1]), self.build)
            if not out.startswith(("..", "CMakeFiles")) and out not in found:
                found.append(out)
        return found


def read_log(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def build_project(name: str, variant: str, src: Path, work: Path) -> Built:
    """Configure and build through ltowrap, run the project's tests, keep copies of what it linked."""
    project = PROJECTS[name]
    env = clean_env() | {"LTOWRAP_CACHE_DIR": str(work / "ltowrap-cache"), "LTOWRAP_JOBS": "2",
                         "LTOWRAP_CONFIG": str(work / "no-config.toml"), "LTOWRAP_CLANG": str(LLVM / "clang"),
                         "LTOWRAP_SMALL_LINK": "0"}  # configure's one-module probes too
    built = Built(project, variant, src, work, env)
    log = work / "ltowrap.log"
    t0 = time.monotonic()
    done = subprocess.run(project.configure(src, built.build, VARIANTS[variant]), env=env | {"LTOWRAP_LOG": str(log)},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"cmake configure exited {done.returncode}:\n{done.stdout[-8000:]}"
    t1 = time.monotonic()
    built.cmake_build(env | {"LTOWRAP_LOG": str(log)})
    t2 = time.monotonic()
    built.check_output = project.check(built.build, clean_env())
    t3 = time.monotonic()
    built.seconds = {"configure": t1 - t0, "build": t2 - t1, "tests": t3 - t2}
    built.records = read_log(log)
    for out in built.outputs():
        dest = built.ours / out
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built.build / out, dest)
    return built


def link_summary(built: Built) -> str:
    dist = [r for r in built.records if r["decision"] == "distributed"]
    return (f"{len(dist)} links distributed ({sum(r['modules'] for r in dist)} modules, "
            f"{sum(r['backend_compiles'] for r in dist)} backend compiles, "
            f"{sum(r['backend_hits'] for r in dist)} hits), "
            f"{sum(r['decision'] == 'fallback' for r in built.records)} fallback")


def check_links(built: Built) -> None:
    """Every link that had bitcode was distributed (configure's probes too), none fell back, and the
    project's own links are all there."""
    assert built.records, "ltowrap logged no link"
    for r in built.records:
        argv = r["argv"]
        out = argv[argv.index("-o") + 1] if "-o" in argv else "?"
        assert r["decision"] != "fallback", (out, r["cwd"], r["reason"], r.get("detail"),
                                             (r.get("output") or "")[-3000:])
        if r["modules"] > 0:
            assert r["decision"] == "distributed", (out, r["cwd"], r["decision"], r["reason"])
            assert r["argv"][0] == str(LLVM / "ld.lld"), (out, r["argv"][0])
    by_output = {}
    for r in built.records:
        if "-o" in r["argv"]:
            by_output[os.path.relpath(os.path.join(r["cwd"], r["argv"][r["argv"].index("-o") + 1]), built.build)] = r
    for name in built.project.links:
        assert name in by_output, f"ltowrap logged no link of {name}; it logged {sorted(by_output)}"
        r = by_output[name]
        assert r["decision"] == "distributed" and r["modules"] > 0 and r["backend_compiles"] > 0, (name, r["decision"])


# --- references: in-process ThinLTO, lld's DTLTO ---


def relink_in_process(built: Built, outputs: tuple[str, ...]) -> float:
    """`outputs` deleted and built again (ninja's targets are its outputs) with ltowrap disabled:
    the same objects, linked by lld's in-process ThinLTO. Returns the seconds it took."""
    for out in outputs:
        (built.build / out).unlink()
    log = built.work / "disabled.log"
    t0 = time.monotonic()
    built.cmake_build(built.env | {"LTOWRAP_DISABLE": "1", "LTOWRAP_LOG": str(log)}, outputs)
    seconds = time.monotonic() - t0
    assert not read_log(log), "ltowrap linked with LTOWRAP_DISABLE=1"
    for out in outputs:
        assert (built.build / out).exists(), f"the in-process relink made no {out}"
    return seconds


def link_command(build: Path, output: str) -> list[str]:
    """The real clang++ command that CMake's build.ninja links `output` with (the launcher or
    ltowrap-clang++ replaced by the real driver)."""
    done = subprocess.run(["ninja", "-C", str(build), "-t", "commands", output], check=True, capture_output=True,
                          text=True)
    words = shlex.split(done.stdout.splitlines()[-1])
    commands, current = [], []
    for w in words + ["&&"]:
        if w == "&&":
            commands.append(current)
            current = []
        else:
            current.append(w)
    (argv,) = [c for c in commands if "-o" in c and c[c.index("-o") + 1] == output]
    if os.path.basename(argv[0]) == "ltowrap":
        argv = argv[1:]
    elif os.path.basename(argv[0]).startswith("ltowrap-clang"):
        argv = [str(LLVM / "clang++"), *argv[1:]]
    return argv


def relink_dtlto(built: Built, output: str) -> Path:
    """`output` linked again by lld's DTLTO, its backends run by bench/dtlto_local.py, with
    -import-declaration as ltowrap's thin-link has it: <output>.dtlto."""
    argv = link_command(built.build, output)
    dest = output + ".dtlto"
    argv[argv.index("-o") + 1] = dest
    argv += [f"-fthinlto-distributor={sys.executable}", f"-Xthinlto-distributor={DTLTO_DISTRIBUTOR}",
             "-Xthinlto-distributor=--jobs=2", "-Wl,-mllvm,-import-declaration"]
    done = subprocess.run(argv, cwd=built.build, env=clean_env() | {"LTOWRAP_DISABLE": "1"}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"DTLTO link of {output} exited {done.returncode}:\n{done.stdout[-6000:]}"
    return built.build / dest


def compare(a: Path, b: Path) -> fidelity.Result:
    return fidelity.compare(a, b, OBJDUMP)


def show(a: Path, b: Path, result: fidelity.Result, limit: int = 3) -> str:
    text = [f"{a} vs {b}: {result.summary()}"]
    text += [fidelity.diff(a, b, OBJDUMP, name)[:4000] for name in result.differing[:limit]]
    if result.only_a or result.only_b:
        text.append(f"only in the first: {result.only_a[:20]}; only in the second: {result.only_b[:20]}")
    return "\n".join(text)


# --- fixtures and tests ---


def fetch(name: str) -> debsrc.SourcePackage:
    return debsrc.fetch(PROJECTS[name].package, version=PROJECTS[name].version)


def needs(name: str, variant: str) -> None:
    needs_llvm22()
    for tool in ("cmake", "ninja", "ctest"):
        if shutil.which(tool) is None:
            missing(tool, "dev/setup installs cmake and ninja-build")
    if name == "fmt" and not (GOOGLETEST / "CMakeLists.txt").exists():
        missing(str(GOOGLETEST), "dev/setup installs googletest")
    if variant == "cfi" and not CFI_IGNORELIST.exists():
        missing(str(CFI_IGNORELIST), "dev/setup installs libclang-rt-22-dev")


@pytest.fixture(scope="module")
def ninja_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fetch("ninja").unpack(tmp_path_factory.mktemp("ninja-src") / "ninja")


@pytest.fixture(scope="module")
def fmt_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fetch("fmt").unpack(tmp_path_factory.mktemp("fmt-src") / "fmt")


@pytest.fixture(scope="module", params=["plain", "wpd", "cfi"])
def ninja(request: pytest.FixtureRequest, ninja_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    needs("ninja", request.param)
    return build_project("ninja", request.param, ninja_src, tmp_path_factory.mktemp(f"ninja-{request.param}"))


@pytest.fixture(scope="module")
def ninja_dwarf(ninja_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    needs("ninja", "dwarf")
    return build_project("ninja", "dwarf", ninja_src, tmp_path_factory.mktemp("ninja-dwarf"))


@pytest.fixture(scope="module", params=["plain", "wpd"])
def fmt(request: pytest.FixtureRequest, fmt_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    needs("fmt", request.param)
    return build_project("fmt", request.param, fmt_src, tmp_path_factory.mktemp(f"fmt-{request.param}"))


def say(capsys: pytest.CaptureFixture, line: str) -> None:
    with capsys.disabled():
        print(f"\n[cpp] {line}", file=sys.stderr)


def check_build(built: Built, capsys: pytest.CaptureFixture) -> None:
    check_links(built)
    s = built.seconds
    say(capsys, f"{built.project.package} ({built.variant}): {link_summary(built)}; configure {s['configure']:.1f} s, "
                f"build {s['build']:.1f} s, tests {s['tests']:.1f} s")


def test_ninja(ninja: Built, capsys: pytest.CaptureFixture) -> None:
    """ninja and ninja_test linked by ltowrap; ninja's unit tests pass on them."""
    assert "[382/382]" in ninja.check_output and "1.11.1" in ninja.check_output, ninja.check_output[-2000:]
    check_build(ninja, capsys)


def test_ninja_split_dwarf(ninja_dwarf: Built, capsys: pytest.CaptureFixture) -> None:
    """-g -gsplit-dwarf (issue 38): every link distributed and ninja's tests pass; each skeleton
    unit of ninja names a .dwo that exists where in-process lld puts it (ninja-dwo/<task>.dwo,
    relative to the unit's DW_AT_comp_dir), llvm-dwarfdump --verify and llvm-dwp pass."""
    check_build(ninja_dwarf, capsys)
    build = ninja_dwarf.build
    for prog in ("ninja", "ninja_test"):
        check_split_dwarf(LLVM, build, prog)
    say(capsys, f"ninja-build (dwarf): {sum(1 for _ in (build / 'ninja-dwo').iterdir())} .dwo files of ninja")


def test_fmt(fmt: Built, capsys: pytest.CaptureFixture) -> None:
    """libfmt.so, libgtest.so, libgmock.so and seven test programs linked by ltowrap; ctest passes."""
    passed = gtest_passed(fmt.check_output)
    assert passed > 100, fmt.check_output[-2000:]
    check_build(fmt, capsys)
    say(capsys, f"fmtlib ({fmt.variant}): ctest: {len(FMT_TESTS)} programs, {passed} gtest tests passed")


def check_fidelity(built: Built, capsys: pytest.CaptureFixture) -> None:
    """ltowrap's binaries against the same objects relinked in-process (and, for split LTO units,
    by lld's DTLTO)."""
    split = built.variant in SPLIT
    names = built.project.main if split else built.project.compared
    relink = relink_in_process(built, names)
    t0 = time.monotonic()
    lines = []
    for name in names:
        ours, ref = built.ours / name, built.build / name
        vs_ref = compare(ours, ref)
        assert vs_ref.identical > 50 and not vs_ref.only_a and not vs_ref.only_b, show(ours, ref, vs_ref)
        line = f"{name}: vs in-process {vs_ref.identical} identical, {len(vs_ref.differing)} differing"
        if not split:
            assert not vs_ref.differing, show(ours, ref, vs_ref)
        elif vs_ref.differing:  # (identical to in-process needs no second reference)
            dtlto = relink_dtlto(built, name)
            vs_dtlto = compare(ours, dtlto)
            assert not vs_dtlto.differing and not vs_dtlto.only_a and not vs_dtlto.only_b, show(ours, dtlto, vs_dtlto)
            dtlto_ref = compare(dtlto, ref)
            # ltowrap is never further from in-process than lld's own distribution
            assert set(vs_ref.differing) <= set(dtlto_ref.differing), show(ours, ref, vs_ref)
            line += f" (lld's DTLTO: {len(dtlto_ref.differing)}); vs DTLTO {vs_dtlto.identical} identical, 0 differing"
        lines.append(line)
    say(capsys, f"{built.project.package} ({built.variant}) fidelity: " + "; ".join(lines)
        + f"; in-process relink {relink:.1f} s, comparisons {time.monotonic() - t0:.1f} s")


def test_ninja_fidelity(ninja: Built, capsys: pytest.CaptureFixture) -> None:
    check_fidelity(ninja, capsys)


def test_fmt_fidelity(fmt: Built, capsys: pytest.CaptureFixture) -> None:
    check_fidelity(fmt, capsys)
