"""Distributed links of small real projects, with real clang and lld (no mock linker)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import compile_lto, expected_output, links, ltowrap_env, prepared, run, sources, stats_json, wrapper, write

def last_link(tmp_path: Path) -> dict:
    return links(tmp_path)[-1]


def test_executable(project, tmp_path, tc):
    want = prepared(project, tc)
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "main.o", "add.o", "mul.o", "twice.o", "-o", "prog"],
        project, env=ltowrap_env(tc))
    assert run(["./prog"], project).stdout == want
    rec = last_link(tmp_path)
    assert rec["decision"] == "distributed", rec
    assert rec["modules"] == 4 and rec["backend_compiles"] == 4
    assert len(rec["backends"]) == 4 and all(b["end"] >= b["start"] for b in rec["backends"])
    assert "phases" not in rec  # the spans carry them (log.phase_seconds)
    assert [name for name, _, _ in rec["spans"]] == ["direct lane", "driver line", "memo lookup", "plan",
                                                     "keys and cache lookups", "thin-link", "backends", "final link",
                                                     "memo store"]
    # ltowrap's own CPU by what it was doing (log.CpuLedger): every stage and every part of a
    # job's way charged, and the headings add up to the process's own CPU.
    cpu = rec["cpu"]
    assert set(cpu["by"]) >= {"start", "imports", "memo lookup", "plan", "thin-link", "backends", "keys: options",
                              "keys: module facts and side inputs", "keys: shard text", "keys: the rest", "starts",
                              "cache", "final link", "memo store", "the rest"}, cpu
    assert abs(sum(cpu["by"].values()) - cpu["self"]) < 0.01, cpu


def test_default_linker_is_switched_to_lld(project, tmp_path, tc):
    """Without -fuse-ld=lld the driver would run GNU ld; the bitcode link goes to lld instead."""
    want = prepared(project, tc)
    run([wrapper("ltowrap-clang"), "main.o", "add.o", "mul.o", "twice.o", "-o", "prog"], project, env=ltowrap_env(tc))
    assert run(["./prog"], project).stdout == want
    assert last_link(tmp_path)["decision"] == "distributed"


def test_static_archive_found_through_l(project, tmp_path, tc):
    want = prepared(project, tc)
    run([tc.ar, "rcs", "libutil.a", "add.o", "mul.o", "twice.o"], project)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "-L.", "-lutil", "-o", "prog"], project, env=ltowrap_env(tc))
    assert run(["./prog"], project).stdout == want
    rec = last_link(tmp_path)
    assert rec["decision"] == "distributed" and rec["modules"] == 4


def test_thin_archive_in_subdirectory(project, tmp_path, tc22):
    tc = tc22
    want = prepared(project, tc)
    (project / "lib").mkdir()
    run([tc.ar, "rcsT", "lib/libutil.a", "add.o", "mul.o", "twice.o"], project)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "lib/libutil.a", "-o", "prog"], project, env=ltowrap_env(tc))
    assert run(["./prog"], project).stdout == want
    assert last_link(tmp_path)["decision"] == "distributed"


def test_duplicate_member_names_and_mixed_native_members(project, tmp_path, tc22):
    """Two members named util.o with different code, plus a native member, in one archive."""
    tc = tc22
    write(project / "main.c", '#include <stdio.h>\nint f1(void); int f2(void); int nat(void);\n'
          'int main(void){ printf("%d %d %d\\n", f1(), f2(), nat()); return 0; }\n')
    write(project / "a" / "util.c", "int f1(void){ return 11; }\n")
    write(project / "b" / "util.c", "int f2(void){ return 22; }\n")
    write(project / "nat.c", "int nat(void){ return 33; }\n")
    env = ltowrap_env(tc)
    for src in ("main.c", "a/util.c", "b/util.c"):
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", src, "-o", src[:-2] + ".o"], project, env=env)
    run([tc.clang, "-O2", "-c", "nat.c", "-o", "nat.o"], project)  # native, not bitcode
    run(["ar", "q", "libdup.a", "a/util.o"], project)
    run(["ar", "q", "libdup.a", "b/util.o"], project)
    run(["ar", "q", "libdup.a", "nat.o"], project)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "libdup.a", "-o", "prog"], project, env=env)
    assert run(["./prog"], project).stdout == "11 22 33\n"
    rec = last_link(tmp_path)
    assert rec["decision"] == "distributed" and rec["modules"] == 3


def test_whole_archive_and_unused_lazy_member(project, tmp_path, tc22):
    """--whole-archive pulls every member; a plain archive's unused bitcode member gets no backend."""
    tc = tc22
    write(project / "main.c", 'int used(void); int main(void){ return used() == 5 ? 0 : 1; }\n')
    write(project / "used.c", "int used(void){ return 5; }\n")
    write(project / "unused.c", "int never_called(void){ return 6; }\n")
    write(project / "ctor.c", '#include <stdio.h>\n__attribute__((constructor)) static void hello(void){ puts("ctor ran"); }\n')
    env = ltowrap_env(tc)
    for n in ("main", "used", "unused", "ctor"):
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", f"{n}.c"], project, env=env)
    run([tc.ar, "rcs", "liblazy.a", "used.o", "unused.o"], project)
    run([tc.ar, "rcs", "libwhole.a", "ctor.o"], project)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "liblazy.a", "-Wl,--whole-archive", "libwhole.a",
         "-Wl,--no-whole-archive", "-o", "prog"], project, env=env)
    assert run(["./prog"], project).stdout == "ctor ran\n"
    rec = last_link(tmp_path)
    assert rec["decision"] == "distributed"
    assert rec["modules"] == 4  # main, used, unused, ctor are all in the link line
    compiled = sorted(b["module"].rsplit("(", 1)[-1].rstrip(")") for b in rec["backends"])
    assert compiled == ["ctor.o", "main.o", "used.o"]  # never_called's module was not pulled in


def test_an_archives_native_member_keeps_its_place_before_a_bitcode_one(project, tmp_path, tc22):
    """Kbuild's vmlinux.a starts with head_64.o (assembly), whose startup_64 must open .head.text,
    then head64.o (bitcode): the final link keeps the members' order, as the archive has it."""
    write(project / "first.c", '__attribute__((section(".head.text"))) void first(void) {}\n')
    write(project / "second.c", '__attribute__((section(".head.text"))) void second(void) {}\n')
    run([tc22.clang, "-O2", "-c", "first.c"], project)  # native, as an assembly file is
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "second.c"], project, env=ltowrap_env(tc22))
    run([tc22.ar, "rcsT", "lib.a", "first.o", "second.o"], project)  # a thin archive, as Kbuild's
    link = ["-r", "--whole-archive", "lib.a", "--no-whole-archive"]
    run([tc22.lld, *link, "-o", "inproc.o"], project)
    run([wrapper("ltowrap-ld.lld"), *link, "-o", "ours.o"], project, env=ltowrap_env(tc22, LTOWRAP_REAL_LD=tc22.lld))
    assert last_link(tmp_path)["decision"] == "distributed"

    def head(obj: str) -> list[str]:
        out = run([str(tc22.bindir / "llvm-nm"), "-n", obj], project).stdout.split()
        return [name for name in out if name in ("first", "second")]

    assert head("ours.o") == head("inproc.o") == ["first", "second"]


def test_shared_library_and_pie(project, tmp_path, tc):
    write(project / "lib.c", "static int k = 7;\nint libfn(int x){ return x * k; }\n")
    write(project / "main.c", '#include <stdio.h>\nint libfn(int);\nint main(void){ printf("%d\\n", libfn(6)); return 0; }\n')
    env = ltowrap_env(tc)
    run([wrapper("ltowrap-clang"), "-O2", "-fPIC", "-flto=thin", "-c", "lib.c", "main.c"], project, env=env)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-shared", "-o", "libx.so", "lib.o"], project, env=env)
    assert last_link(tmp_path)["decision"] == "distributed"
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-pie", "main.o", "-L.", "-lx", "-Wl,-rpath,$ORIGIN", "-o", "prog"],
        project, env=env)
    assert run(["./prog"], project).stdout == "42\n"
    assert last_link(tmp_path)["decision"] == "distributed"


def test_relocatable_link_and_linker_script(project, tmp_path, tc22):
    tc = tc22
    want = prepared(project, tc)
    env = ltowrap_env(tc)
    # A -r link of bitcode, as the kernel's vmlinux.o: distributed, output is a native object.
    run([wrapper("ltowrap-ld.lld"), "-r", "-o", "combined.o", "add.o", "mul.o", "twice.o"], project, env=env)
    assert last_link(tmp_path)["decision"] == "distributed"
    assert (project / "combined.o").read_bytes()[:4] == b"\x7fELF"
    write(project / "keep.ld", "SECTIONS { .note.ltowrap : { KEEP(*(.note.ltowrap)) } } INSERT AFTER .text;\n")
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "combined.o", "-Wl,-T,keep.ld", "-o", "prog"],
        project, env=env)
    assert run(["./prog"], project).stdout == want
    assert last_link(tmp_path)["decision"] == "distributed"


def test_undefined_symbol_fails_like_the_plain_linker(project, tmp_path, tc):
    write(project / "main.c", "int missing(void);\nint main(void){ return missing(); }\n")
    env = ltowrap_env(tc)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "main.c"], project, env=env)
    plain = run([tc.clang, "-fuse-ld=lld", "-flto=thin", "main.o", "-o", "prog"], project, check=False)
    ours = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", "main.o", "-o", "prog"], project, env=env, check=False)
    assert plain.returncode != 0 and ours.returncode == plain.returncode
    assert "undefined symbol: missing" in ours.stderr
    assert ours.stderr.count("undefined symbol: missing") == plain.stderr.count("undefined symbol: missing")
    assert not (project / "prog").exists()


def test_compile_and_link_in_one_command(project, tmp_path, tc):
    sources(project)
    want = expected_output(project, tc)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "main.c", "add.c", "mul.c", "twice.c", "-o", "prog"],
        project, env=ltowrap_env(tc))
    assert run(["./prog"], project).stdout == want
    rec = last_link(tmp_path)
    assert rec["decision"] == "distributed" and rec["modules"] == 4


def test_cxx_program_with_archive(project, tmp_path, tc):
    write(project / "shape.hpp", "#include <memory>\n#include <vector>\nstruct Shape { virtual ~Shape() = default; virtual double area() const = 0; };\n"
          "std::vector<std::unique_ptr<Shape>> make_shapes(int n);\n")
    write(project / "shapes.cpp", '#include "shape.hpp"\n#include <stdexcept>\n'
          "template <int K> struct Sq : Shape { double s; explicit Sq(double s) : s(s) {} double area() const override { return K * s * s; } };\n"
          "std::vector<std::unique_ptr<Shape>> make_shapes(int n) { if (n < 0) throw std::invalid_argument(\"n\");\n"
          "  std::vector<std::unique_ptr<Shape>> v; for (int i = 0; i < n; i++) v.push_back(std::make_unique<Sq<2>>(i)); return v; }\n")
    write(project / "main.cpp", '#include "shape.hpp"\n#include <cstdio>\n#include <stdexcept>\n'
          "int main() { double t = 0; for (auto &s : make_shapes(10)) t += s->area();\n"
          '  try { make_shapes(-1); } catch (const std::invalid_argument &) { t += 1; }\n  std::printf("%.1f\\n", t); }\n')
    env = ltowrap_env(tc)
    for n in ("shapes", "main"):
        run([wrapper("ltowrap-clang++"), "-O2", "-flto=thin", "-c", f"{n}.cpp"], project, env=env)
    run([tc.ar, "rcs", "libshapes.a", "shapes.o"], project)
    run([wrapper("ltowrap-clang++"), "-fuse-ld=lld", "main.o", "libshapes.a", "-o", "prog"], project, env=env)
    assert run(["./prog"], project).stdout == "571.0\n"
    assert last_link(tmp_path)["decision"] == "distributed"


def test_direct_ld_lld_with_bitcode(project, tmp_path, tc22):
    tc = tc22
    write(project / "start.c", "void _start(void){ __asm__ volatile(\"mov $60, %eax; mov $3, %edi; syscall\"); }\n")
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-fno-pic", "-c", "start.c"], project, env=ltowrap_env(tc))
    run([wrapper("ltowrap-ld.lld"), "-static", "start.o", "-o", "prog"], project,
        env=ltowrap_env(tc, LTOWRAP_REAL_LD=tc.lld))
    assert run(["./prog"], project, check=False).returncode == 3
    assert last_link(tmp_path)["decision"] == "distributed"


def test_native_only_link_passes_through(project, tmp_path, tc):
    write(project / "main.c", "int main(void){ return 0; }\n")
    run([tc.clang, "-c", "main.c"], project)
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "main.o", "-o", "prog"], project, env=ltowrap_env(tc))
    run(["./prog"], project)
    assert last_link(tmp_path)["decision"] == "passthrough"


@pytest.mark.parametrize("args", [["-###", "-c", "x.c"], ["--version"], ["-v"], ["-print-prog-name=ld"]])
def test_informational_commands_pass_through(project, tc, args):
    write(project / "x.c", "int x;\n")
    plain = run([tc.clang, *args], project, check=False)
    ours = run([wrapper("ltowrap-clang"), *args], project, env=ltowrap_env(tc), check=False)
    assert ours.returncode == plain.returncode
    assert ours.stdout == plain.stdout
    assert ours.stderr == plain.stderr


def test_compile_error_is_reported_unchanged(project, tc):
    write(project / "bad.c", "int f(void) { return undeclared; }\n")
    plain = run([tc.clang, "-flto=thin", "-c", "bad.c"], project, check=False)
    ours = run([wrapper("ltowrap-clang"), "-flto=thin", "-c", "bad.c"], project, env=ltowrap_env(tc), check=False)
    assert plain.returncode != 0 and ours.returncode == plain.returncode
    assert ours.stderr == plain.stderr


def build_through(cc: str, d: Path, env: dict) -> str:
    """The four sources compiled -flto=thin and linked by the command `cc` as found on env's PATH; prog's output."""
    for n in ("main", "add", "mul", "twice"):
        run([cc, "-O2", "-flto=thin", "-c", f"{n}.c"], d, env=env)
    run([cc, "-fuse-ld=lld", "main.o", "add.o", "mul.o", "twice.o", "-o", "prog"], d, env=env)
    return run(["./prog"], d).stdout


def test_path_shims_never_recurse(project, tmp_path, tc22):
    """Shims first on PATH, twice (also through a symlinked directory): the real clang is found."""
    tc = tc22
    shims = run([wrapper("ltowrap"), "shims"], project).stdout.strip()
    alias = tmp_path / "alias"
    alias.symlink_to(shims)
    sources(project)
    want = expected_output(project, tc)
    env = ltowrap_env(PATH=f"{shims}:{alias}:{os.environ['PATH']}")
    assert build_through("clang-22", project, env) == want
    assert last_link(tmp_path)["decision"] == "distributed"
    assert "ltowrap" not in run(["clang-22", "-print-prog-name=clang"], project, env=env).stdout


def shims_for(path: str, cwd: Path) -> Path:
    return Path(run([wrapper("ltowrap"), "shims"], cwd, env=ltowrap_env(PATH=path)).stdout.strip())


def test_shims_cover_every_version_on_path_and_one_installed_later(project, tmp_path, tc22):
    """`PATH=$(ltowrap shims):$PATH make CC=clang-N` must not bypass ltowrap for a version it had no list entry for.

    "Installing" clang N (a version this machine does not have) puts LLVM 22's clang and
    ld.lld on PATH as clang-N, clang++-N and ld.lld-N, the way Debian's versioned names
    point into /usr/lib/llvm-N.
    """
    path = os.environ["PATH"]
    before = shims_for(path, project)
    on_machine = {n for d in path.split(os.pathsep) if os.path.isdir(d) for n in os.listdir(d)
                  if n.rpartition("-")[0] in ("clang", "clang++", "ld.lld") and n.rpartition("-")[2].isdigit()}
    assert {"clang", "clang++", "ld.lld"} | on_machine <= {p.name for p in before.iterdir()}
    assert {f"clang-{tc22.version}", f"ld.lld-{tc22.version}"} <= on_machine  # Debian's names, so the check means something

    n = next(v for v in range(23, 100) if f"clang-{v}" not in on_machine)
    later = tmp_path / f"llvm-{n}" / "bin"
    later.mkdir(parents=True)
    for name, real in ((f"clang-{n}", tc22.clang), (f"clang++-{n}", tc22.clangxx), (f"ld.lld-{n}", tc22.lld)):
        (later / name).symlink_to(real)
    with_later = f"{later}{os.pathsep}{path}"
    shims = shims_for(with_later, project)
    assert {f"clang-{n}", f"clang++-{n}", f"ld.lld-{n}"} <= {p.name for p in shims.iterdir()}
    assert f"clang-{n}" not in {p.name for p in before.iterdir()}  # a directory once made is never changed

    sources(project)
    want = expected_output(project, tc22)
    assert build_through(f"clang-{n}", project, ltowrap_env(PATH=f"{shims}{os.pathsep}{with_later}")) == want
    assert last_link(tmp_path)["decision"] == "distributed"

    shutil.rmtree(later)  # uninstalled: no shim is left that would find nothing
    assert f"clang-{n}" not in {p.name for p in shims_for(with_later, project).iterdir()}


def test_disable_is_pure_passthrough(project, tmp_path, tc):
    sources(project)
    compile_lto(project, tc, "main", "add", "mul", "twice")
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", "main.o", "add.o", "mul.o", "twice.o", "-o", "prog"],
        project, env=ltowrap_env(tc, LTOWRAP_DISABLE="1"))
    run(["./prog"], project)
    assert links(tmp_path) == []


def test_lto_thin_mode_adds_flto(project, tmp_path, tc):
    sources(project)
    want = expected_output(project, tc)
    env = ltowrap_env(tc, LTOWRAP_LTO="thin")
    for n in ("main", "add", "mul", "twice"):
        run([wrapper("ltowrap-clang"), "-O2", "-c", f"{n}.c"], project, env=env)
    assert (project / "main.o").read_bytes()[:4] == b"BC\xc0\xde"
    run([wrapper("ltowrap-clang"), "main.o", "add.o", "mul.o", "twice.o", "-o", "prog"], project, env=env)
    assert run(["./prog"], project).stdout == want
    assert last_link(tmp_path)["decision"] == "distributed"


def test_unsupported_option_falls_back_and_is_counted(project, tmp_path, tc22):
    tc = tc22
    want = prepared(project, tc)
    done = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-Wl,--lto-emit-asm", "main.o", "add.o", "mul.o", "twice.o",
                "-o", "prog.s"], project, env=ltowrap_env(tc))
    assert "ltowrap: unsupported option: --lto-emit-asm; running the link unchanged" in done.stderr
    assert last_link(tmp_path)["decision"] == "fallback"
    assert stats_json()["links_fallback"] == 1
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "add.o", "mul.o", "twice.o", "-o", "prog"], project,
        env=ltowrap_env(tc))
    assert run(["./prog"], project).stdout == want


def test_archive_members_bitcode_extracted_stay_linked(project, tmp_path, tc22):
    """lld extracts an archive member for a bitcode module's reference before LTO, and links it
    even when LTO removes the reference: here a constructor of that member runs in the
    in-process program, so it must in ltowrap's (the thin-link's --why-extract, finallink)."""
    tc = tc22
    write(project / "main.c", '#include <stdio.h>\nint helper(int);\n'
          'int dead_caller(int x) { return helper(x); }\nint main(void) { puts("main"); return 0; }\n')
    write(project / "helper.c", '#include <stdio.h>\nint helper(int x) { return x + 1; }\n'
          '__attribute__((constructor)) static void hello(void) { puts("helper linked"); }\n')
    run([tc.clang, "-O2", "-c", "helper.c"], project)
    run([tc.ar, "rcs", "libhelper.a", "helper.o"], project)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "main.c"], project, env=ltowrap_env(tc))
    for extra in ([], ["-Wl,--gc-sections"]):
        run([tc.clang, "-flto=thin", "-fuse-ld=lld", "main.o", "libhelper.a", "-o", "ref", *extra], project)
        assert run(["./ref"], project).stdout == "helper linked\nmain\n"  # LTO removed dead_caller, not the member
        run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "main.o", "libhelper.a", "-o", "prog", *extra],
            project, env=ltowrap_env(tc, LTOWRAP_MEMO="0"))
        assert last_link(tmp_path)["decision"] == "distributed"
        assert run(["./prog"], project).stdout == "helper linked\nmain\n"
    assert last_link(tmp_path)["thinlink_cached"] is False  # --gc-sections is another thin-link


def test_regular_lto_module_beside_thinlto_modules(project, tmp_path, tc22):
    """A -flto=full module gets no shard of its own: its code comes from --lto-obj-path."""
    tc = tc22
    write(project / "a.c", '#include <stdio.h>\nint f(int); int g(int);\nint main(void){ printf("%d\\n", f(2) + g(3)); return 0; }\n')
    write(project / "f.c", "int f(int x) { return x * 10; }\n")
    write(project / "g.c", "int g(int x) { return x + 100; }\n")
    env = ltowrap_env(tc)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "a.c", "g.c"], project, env=env)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=full", "-c", "f.c"], project, env=env)
    done = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "a.o", "f.o", "g.o", "-o", "prog"], project, env=env)
    assert "ltowrap:" not in done.stderr
    assert run(["./prog"], project).stdout == "123\n"
    rec = last_link(tmp_path)
    assert rec["decision"] == "distributed" and rec["modules"] == 3 and rec["backend_compiles"] == 2


CFI_MAIN = r"""
#include <cstdio>
#include <cstring>
struct Shape { virtual int area() const; virtual ~Shape(); };
struct Other { virtual int other() const; virtual ~Other(); };
Shape* make(int n);
Other* make_other();
int (*pick(int n))(int);
int main(int argc, char** argv) {
    Shape* s = make(argc);
    std::printf("area %d fn %d\n", s->area(), pick(argc)(7));
    if (argc > 1 && !std::strcmp(argv[1], "bad")) {
        // A cast to an unrelated class: -fsanitize=cfi traps the virtual call.
        Shape* wrong = reinterpret_cast<Shape*>(make_other());
        std::printf("not reached %d\n", wrong->area());
    }
    delete s;
    return 0;
}
"""
CFI_SHAPES = """
struct Shape { virtual int area() const; virtual ~Shape(); };
struct Square : Shape { int side; explicit Square(int s) : side(s) {} int area() const override; };
struct Other { virtual int other() const; virtual ~Other(); };
int Shape::area() const { return 0; }
Shape::~Shape() {}
int Square::area() const { return side * side; }
int Other::other() const { return 1; }
Other::~Other() {}
Shape* make(int n) { return n > 1 ? new Square(n + 2) : new Shape; }
Other* make_other() { return new Other; }
static int add1(int x) { return x + 1; }
static int add2(int x) { return x + 2; }
int (*pick(int n))(int) { return n > 1 ? add2 : add1; }
"""


def test_split_lto_units_keep_their_regular_lto_part(project, tmp_path, tc22):
    """-fsanitize=cfi splits each module into a ThinLTO part and a regular-LTO part (vtables with
    their type metadata, the jump tables): the thin-link compiles the regular parts into
    --lto-obj-path's object, which the final link needs although no module is regular LTO
    as a whole. Once a bug: that object was left out, and the final link failed (undefined
    vtables and `.cfi` functions), so the link fell back. The program's CFI checks still trap."""
    tc = tc22
    ignorelist = tc.bindir.parent / "lib" / "clang" / "22" / "share" / "cfi_ignorelist.txt"
    if not ignorelist.exists():
        from needs import missing

        missing(str(ignorelist), "dev/setup installs libclang-rt-22-dev")
    write(project / "main.cc", CFI_MAIN)
    write(project / "shapes.cc", CFI_SHAPES)
    flags = ["-O2", "-flto=thin", "-fvisibility=hidden", "-fsanitize=cfi"]
    env = ltowrap_env(tc)
    for src in ("main.cc", "shapes.cc"):
        run([wrapper("ltowrap-clang++"), *flags, "-c", src], project, env=env)
    for n, memo in enumerate(("1", "0")):  # the second: the memo off, the thin-link's cache consulted
        done = run([wrapper("ltowrap-clang++"), *flags, "-fuse-ld=lld", "main.o", "shapes.o", "-o", "prog"], project,
                   env=ltowrap_env(tc, LTOWRAP_MEMO=memo))
        assert "ltowrap:" not in done.stderr, done.stderr
        rec = last_link(tmp_path)
        assert rec["decision"] == "distributed", (n, rec.get("reason"), rec.get("output"))
        assert run(["./prog"], project).stdout == "area 0 fn 8\n"
        assert run(["./prog", "x"], project).stdout == "area 16 fn 9\n"
        bad = run(["./prog", "bad"], project, check=False)
        assert bad.returncode == -4 and "not reached" not in bad.stdout, (bad.returncode, bad.stdout)  # SIGILL: ud2


def test_a_failed_final_link_says_why(project, tmp_path, tc22):
    """A final link that fails for a reason of ltowrap's own making falls back to the original
    command; what the linker said is kept in the log's `output` and, with verbose, printed.
    Here an ld.lld (first on PATH) that refuses any link naming a file in ltowrap's cache."""
    tc = tc22
    want = prepared(project, tc)
    fake = tmp_path / "fake-bin"
    write(fake / "ld.lld", f"""#!/bin/sh
case "$*" in
*--thinlto-index-only*) ;;
*"$LTOWRAP_CACHE_DIR"*) echo "fake-ld: no objects from $LTOWRAP_CACHE_DIR, please" >&2; exit 1 ;;
esac
exec {tc.lld} "$@"
""").chmod(0o755)
    (fake / "clang").symlink_to(tc.clang)  # the backend compiler: the clang beside the ld.lld run
    env = ltowrap_env(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", LTOWRAP_VERBOSE="1")
    done = run([wrapper("ltowrap-ld.lld"), "-r", "-o", "combined.o", "main.o", "add.o", "mul.o", "twice.o"], project,
               env=env)
    rec = last_link(tmp_path)
    assert rec["argv"][0] == str(fake / "ld.lld")
    assert rec["decision"] == "fallback" and rec["reason"] == "final_link_failed", rec
    assert "fake-ld: no objects from" in rec["output"], rec
    assert "fake-ld: no objects from" in done.stderr, done.stderr
    # the original command ran instead, and linked
    run([tc.clang, "-fuse-ld=lld", "combined.o", "-o", "prog"], project)
    assert run(["./prog"], project).stdout == want
