"""What a link prints, and its exit status, as in-process lld's: on an empty cache and on every
kind of hit (stages/diagnostics.py).

A differential harness, as the soundness harness is for hits: each case links once through
in-process lld (`--thinlto-jobs=1`: one backend at a time, so its order is fixed) and through
ltowrap four times: cold (the memo stores the link), a memo restore, backend hits with the
memo off, and cold again on an empty cache with the memo off. stdout, stderr and the exit
status must equal in-process lld's, byte for byte, each time.

The diagnostics come from the backends: -Wframe-larger-than leaves a "warn-stack-size"
attribute in the bitcode, inline assembly's `.warning` is the assembler's, remarks are asked
on the link, and a Rust module has another triple than clang's.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import Toolchain, links, ltowrap_env, on_terminal, run, toolchain, wrapper, write
from needs import missing

BIG_C = """extern void use(char *);
void careful(void);
int helper(int x) { char buf[4000]; use(buf); return buf[x]; }
int main(int argc, char **argv) { (void)argv; careful(); return helper(argc) & 1; }
"""
USE_C = "void use(char *p) { p[0] = 1; }\n"
ASM_C = 'void careful(void) { __asm__ volatile(".warning \\"careful here\\""); }\n'
QUIET_ASM_C = "void careful(void) {}\n"
MISSING_C = "int missing(void);\nint extra(void) { return missing(); }\n"
MAIN_EXTRA_C = """extern void use(char *);
int extra(void);
int helper(int x) { char buf[4000]; use(buf); return buf[x]; }
int main(int argc, char **argv) { (void)argv; return helper(argc) + extra(); }
"""
FRAME = ["-Wframe-larger-than=256"]


@dataclass(frozen=True)
class Case:
    """Sources (name -> text, each compiled -O2 -flto=thin plus `flags`), the archives made of
    some of their objects, and what the link adds."""

    sources: dict[str, str]
    flags: dict[str, list[str]] = field(default_factory=dict)
    archives: dict[str, list[str]] = field(default_factory=dict)  # archive -> objects in it
    link: list[str] = field(default_factory=list)
    min_version: int = 0  # lld options that came later

    def objects(self) -> list[str]:
        archived = {o for objs in self.archives.values() for o in objs}
        objs = [Path(s).with_suffix(".o").name for s in self.sources if Path(s).with_suffix(".o").name not in archived]
        return objs + list(self.archives)


WARNINGS = {"big.c": BIG_C, "use.c": USE_C, "asm.c": ASM_C}
CASES = {
    "silent": Case({"big.c": BIG_C, "use.c": USE_C, "asm.c": QUIET_ASM_C}),
    "frame-size": Case({"big.c": BIG_C, "use.c": USE_C, "asm.c": QUIET_ASM_C}, {"big.c": FRAME}),
    "frame-size-g": Case({"big.c": BIG_C, "use.c": USE_C, "asm.c": QUIET_ASM_C}, {"big.c": FRAME + ["-g"]}),
    "inline-asm": Case(WARNINGS),
    "inline-asm-archived": Case(WARNINGS, {"big.c": FRAME}, {"libw.a": ["use.o", "asm.o"]}),
    "fatal-warnings": Case(WARNINGS, {"big.c": FRAME}, link=["-Wl,--fatal-warnings"]),
    "fatal-then-not": Case(WARNINGS, {"big.c": FRAME}, link=["-Wl,--fatal-warnings,--no-fatal-warnings"]),
    "error-limit": Case(WARNINGS, {"big.c": FRAME}, link=["-Wl,--fatal-warnings,--error-limit=1"]),
    "no-warnings": Case(WARNINGS, {"big.c": FRAME}, link=["-Wl,--no-warnings"], min_version=16),
    "remarks": Case(WARNINGS, {"big.c": FRAME}, link=["-Rpass=inline"]),
    "remarks-fatal": Case(WARNINGS, {"big.c": FRAME}, link=["-Rpass=inline", "-Wl,--fatal-warnings"]),
    "undefined-symbol": Case({"main.c": MAIN_EXTRA_C, "use.c": USE_C, "extra.c": MISSING_C}, {"main.c": FRAME}),
}


@dataclass(frozen=True)
class Seen:
    rc: int
    stdout: str
    stderr: str


def build(case: Case, project: Path, tc: Toolchain) -> None:
    for name, text in case.sources.items():
        write(project / name, text)
        run([tc.clang, "-O2", "-flto=thin", *case.flags.get(name, []), "-c", name], project)
    for archive, objs in case.archives.items():
        run([tc.ar, "rcs", archive, *objs], project)


def link_args(case: Case, tc: Toolchain) -> list[str]:
    return ["-flto=thin", "-fuse-ld=lld", f"--ld-path={tc.lld}", "-Wl,--thinlto-jobs=1", *case.objects(),
            *case.link, "-o", "prog"]


def seen(done: subprocess.CompletedProcess[str]) -> Seen:
    return Seen(done.returncode, done.stdout, _references_sorted(done.stderr))


def _references_sorted(stderr: str) -> str:
    """lld's `>>> referenced by` pairs under an undefined symbol, sorted: lld lists them in the
    order of the objects it links, and in-process lld puts its LTO objects after every other
    input, where the final link here keeps each in its module's place (their names are
    in-process lld's: finallink.object_names)."""
    out: list[str] = []
    refs: list[str] = []
    for line in stderr.splitlines(keepends=True):
        if line.startswith(">>> referenced by "):
            refs.append(line)
        elif line.startswith(">>> ") and refs:
            refs[-1] += line
        else:
            out += sorted(refs) + [line]
            refs = []
    return "".join(out + sorted(refs))


def in_process(case: Case, project: Path, tc: Toolchain) -> Seen:
    done = run([tc.clang, *link_args(case, tc)], project, check=False)
    Path(project / "prog").unlink(missing_ok=True)
    return seen(done)


def through_ltowrap(case: Case, project: Path, tc: Toolchain, **settings: str) -> Seen:
    env = ltowrap_env(tc, **settings)
    return seen(run([wrapper("ltowrap-clang"), *link_args(case, tc)], project, env=env, check=False))


def differential(case: Case, project: Path, tmp_path: Path, tc: Toolchain) -> Seen:
    """In-process lld's result; asserts ltowrap's equals it on each kind of link."""
    build(case, project, tc)
    expected = in_process(case, project, tc)
    kinds = [("cold", {}), ("memo restore", {}), ("backend hits", {"LTOWRAP_MEMO": "0"})]
    for kind, settings in kinds:
        got = through_ltowrap(case, project, tc, **settings)
        assert got == expected, f"{kind}: {got} != in-process {expected}"
    records = links(tmp_path)
    assert [r["decision"] for r in records] == ["distributed", "restored" if expected.rc == 0 else "distributed",
                                                 "distributed"], records
    assert records[0]["backend_compiles"] and not records[0]["backend_hits"]
    assert records[2]["backend_hits"] and not records[2]["backend_compiles"]
    shutil.rmtree(tmp_path / "cache")
    assert through_ltowrap(case, project, tc, LTOWRAP_MEMO="0") == expected, "cold, memo off"
    return expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_diagnostics_as_in_process(name, project, tmp_path, tc):
    case = CASES[name]
    if tc.version < case.min_version:
        pytest.skip(f"lld {tc.version} has no {case.link}")
    expected = differential(case, project, tmp_path, tc)
    # The cases are what they say: each prints what its name promises in-process.
    assert (expected.stderr == "") == (name in ("silent", "no-warnings")), expected
    assert (expected.rc != 0) == (name in ("fatal-warnings", "error-limit", "remarks-fatal", "undefined-symbol"))
    if name.startswith("remarks"):
        assert "inlined into 'main'" in expected.stdout
    if name == "inline-asm-archived":
        assert "libw.a(asm.o at " in expected.stderr


def test_diagnostics_on_other_releases(project, tmp_path):
    """A release between the two the suite runs on everywhere, with lld's --no-warnings."""
    case = CASES["fatal-warnings"]
    differential(case, project, tmp_path, toolchain(16))


RUST_RS = """#![no_std]
#[no_mangle]
pub extern "C" fn rust_add(a: i32, b: i32) -> i32 { a.wrapping_add(b) }
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }
"""
RUST_MAIN_C = "int rust_add(int, int);\nint other(int);\nint main(int c, char **v) { (void)v; return rust_add(c, 2) + other(c); }\n"
RUST_OTHER_C = "int rust_add(int, int);\nint other(int x) { return rust_add(x, 5); }\n"


def test_a_module_of_another_triple(project, tmp_path, tc22):
    """A Rust -Clinker-plugin-lto staticlib (rustc's LLVM is 22; its triple is
    x86_64-unknown-linux-gnu) linked into C: each importer's backend warns that it links two
    triples, naming the archive member as lld does (`librs.a(... at <offset>)`)."""
    rustc = shutil.which("rustc")
    if rustc is None:
        missing("rustc (rustup's)", "rustup installs it")
    write(project / "r.rs", RUST_RS)
    run([rustc, "--crate-type=staticlib", "-Clinker-plugin-lto", "-Copt-level=2", "-Cpanic=abort", "r.rs",
         "-o", "librs.a"], project)
    case = Case({"main.c": RUST_MAIN_C, "other.c": RUST_OTHER_C}, link=["librs.a"])
    expected = differential(case, project, tmp_path, tc22)
    assert expected.stderr.count("Linking two modules of different target triples: 'librs.a(") == 2, expected


def test_a_failed_backend_keeps_its_errors_in_the_log(project, tmp_path, tc22):
    """A backend that fails makes the link run unchanged (which fails here too, as in-process
    LTO does): the backend's own errors are the log's `output`, and stderr has lld's."""
    write(project / "asm.c", 'extern int hook __attribute__((weak));\n'
          'long probe(void) { long a; __asm__("movq %1, %0" : "=r"(a) : "i"(&hook)); return a; }\n')
    run([tc22.clang, "-O2", "-fno-pic", "-flto=thin", "-c", "asm.c"], project)
    env = ltowrap_env(tc22, LTOWRAP_REAL_LD=tc22.lld)
    done = run([wrapper("ltowrap-ld.lld"), "-shared", "asm.o", "-o", "libasm.so"], project, env=env, check=False)
    assert done.returncode != 0 and "invalid operand for inline asm constraint" in done.stderr  # lld's own
    record = links(tmp_path)[-1]
    assert record["decision"] == "fallback" and record["reason"] == "backend_failed", record
    assert "invalid operand for inline asm constraint" in record["output"]


def remote_differential(case: Case, project: Path, tmp_path: Path, tc: Toolchain, url: str, **extra: str) -> Seen:
    """Machine a links first (compiling, or on the workers); machine b, with an empty cache of
    its own, gets every backend from the remote service: both print what in-process lld prints."""
    from helpers import links_of, machine

    build(case, project, tc)
    expected = in_process(case, project, tc)
    for name in ("a", "b"):
        env = machine(tmp_path, name, tc, url, LTOWRAP_MEMO="0", **extra)
        got = seen(run([wrapper("ltowrap-clang"), *link_args(case, tc)], project, env=env, check=False))
        assert got == expected, f"machine {name}: {got} != in-process {expected}"
    served = links_of(tmp_path / "b.log")[-1]
    assert served["remote_hits"] == len(served["backends"]) and not served["backend_compiles"], served
    return expected


@pytest.fixture(scope="module")
def cache_url(engine, tmp_path_factory) -> str:
    """A cache-only server of each engine in turn (tests/reapi_engines.py)."""
    from reapi_engines import engine_cache_server

    with engine_cache_server(engine, tmp_path_factory.mktemp(engine)) as url:
        yield url


@pytest.mark.parametrize("name", ["inline-asm-archived", "fatal-warnings"])
def test_remote_cache_hits_print_as_in_process(name, project, tmp_path, tc22, cache_url):
    expected = remote_differential(CASES[name], project, tmp_path, tc22, cache_url)
    assert "warning" in expected.stderr or "error" in expected.stderr


@pytest.mark.slow
def test_remote_execution_prints_as_in_process(project, tmp_path, tc22, engine):
    """The workers' stderr names modules by their paths in the action's input root."""
    from helpers import links_of, toolchain_line
    from reapi_engines import engine_exec_server

    with engine_exec_server(engine, tmp_path / engine, toolchain_line(tc22)) as url:
        remote_differential(CASES["inline-asm-archived"], project, tmp_path, tc22, url,
                            LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0")
    # What machine a printed came from the workers, not from compiles here after a remote failure.
    ran = links_of(tmp_path / "a.log")[-1]
    assert ran["remote_executed"] == len(ran["backends"]), ran
    assert not [b["remote_error"] for b in ran["backends"] if b.get("remote_error")]


D1, D2 = "0d2c1f5dc8483c9f24e0df97de15f253", "6dec7f4082e4c7809facfbf9e55c75a7"
# A backend clang's stderr, as clang 22 prints it for IR input (the Rust link above, run on a
# worker: modules under the action's input root).
LINKER_WARNING = (f"warning: linking module 'm/000000-{D1}.o': Linking two modules of different target triples: "
                  f"'m/000001-{D2}.o' is 'x86_64-unknown-linux-gnu' whereas 'm/000000-{D1}.o' is "
                  "'x86_64-pc-linux-gnu'\n [-Wlinker-warnings]\n1 warning generated.\n")


def test_canonical_text_names_modules_by_digest_wherever_they_were_compiled():
    from ltowrap.stages import diagnostics

    here = LINKER_WARNING.replace("'m/", "'/home/u/.cache/ltowrap/m/")
    assert diagnostics.canonical(here, "/home/u/.cache/ltowrap/m/") == diagnostics.canonical(LINKER_WARNING, "")
    assert D1 in diagnostics.canonical(LINKER_WARNING, "") and "m/000000" not in diagnostics.canonical(LINKER_WARNING, "")


def test_render_names_modules_as_lld_and_drops_what_only_clang_prints():
    from ltowrap.stages import diagnostics

    text = diagnostics.canonical(LINKER_WARNING + "<inline asm>:1:2: warning: careful here\n\t.warning \"x\"\n\t^\n"
                                 "warning: cannot compile inline asm [-Winline-asm]\n"
                                 "remark: <unknown>:0:0: 'f' inlined into 'main' [-Rpass=inline]\n"
                                 "0/3880 (0.00%) spills, 3880/3880 (100.00%) variables\n", "")
    names = {D1: "main.o", D2: "librs.a(r.o at 98096)"}
    printed = diagnostics.render([("main.o", text)], names, diagnostics.Policy())
    assert printed.stderr == ("ld.lld: warning: Linking two modules of different target triples: 'librs.a(r.o at 98096)'"
                              " is 'x86_64-unknown-linux-gnu' whereas 'main.o' is 'x86_64-pc-linux-gnu'\n\n"
                              "\nld.lld: warning: main.o <inline asm>:1:2: careful here\n\t.warning \"x\"\n\t^\n\n"
                              "0/3880 (0.00%) spills, 3880/3880 (100.00%) variables\n")
    assert printed.stdout == "<unknown>:0:0: 'f' inlined into 'main'\n" and printed.errors == 0
    fatal = diagnostics.render([("main.o", text)], names, diagnostics.Policy(fatal_warnings=True, error_limit=1))
    assert fatal.errors == 2 and fatal.stopped and fatal.stderr.endswith("(use --error-limit=0 to see all errors)\n")


def terminal_shows(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[int, str]:
    """Exit status and what the terminal showed, its line ends as a pipe would carry them."""
    rc, seen = on_terminal(argv, cwd, env)
    return rc, seen.decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.mark.parametrize("name", ["inline-asm-archived", "fatal-warnings"])
def test_on_a_terminal_the_colours_are_lld_s_and_the_driver_s(name, project, tmp_path, tc22):
    """lld colours the kind of each message on a terminal, the driver its error line: ltowrap's
    link shows the same bytes, cold and when the memo restores it (the cache keeps them plain)."""
    case = CASES[name]
    build(case, project, tc22)
    expected = terminal_shows([tc22.clang, *link_args(case, tc22)], project)
    assert "\033[0;35mwarning: \033[0m" in expected[1] or "\033[0;31merror: \033[0m" in expected[1], expected
    env = ltowrap_env(tc22, LTOWRAP_PROGRESS="0")  # the progress line is ltowrap's own, on a terminal
    for kind in ("cold", "again"):
        got = terminal_shows([wrapper("ltowrap-clang"), *link_args(case, tc22)], project, env)
        assert got == expected, f"{kind}: {got!r} != in-process {expected!r}"
    assert [r["decision"] for r in links(tmp_path)] == ["distributed", "restored" if expected[0] == 0 else "distributed"]
    plain = seen(run([wrapper("ltowrap-clang"), *link_args(case, tc22)], project, env=env, check=False))
    assert "\033[" not in plain.stderr  # not on a terminal: plain, whatever the cache kept
