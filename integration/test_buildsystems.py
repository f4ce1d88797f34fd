"""ltowrap fits every build the way ccache does: CMake, meson, ninja, recursive make, C++, ccache.

Each test writes a small project, builds it through ltowrap the way that build system's
users would (CMake's <LANG>_COMPILER_LAUNCHER/<LANG>_LINKER_LAUNCHER, meson's
CC="ltowrap clang-22", a hand-written build.ninja, make -j3 with sub-makes, CC="ccache
ltowrap-clang"), runs the program, and checks from LTOWRAP_LOG that every link with
bitcode was distributed (and nothing fell back).

The real compiler is clang 22 throughout (/usr/bin/clang-22, or LTOWRAP_CLANG for the
ltowrap-clang forms); archives are made with llvm-ar-22 because the default llvm-ar here
is LLVM 14's, which cannot read LLVM 22 bitcode.

The CMake test also runs with CMAKE_NINJA_FORCE_RESPONSE_FILE, where every compile's flags
sit in an @file, which ltowrap's compile path expands to find them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env
from needs import missing

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent  # the venv ltowrap is installed in
LLVM = Path("/usr/lib/llvm-22/bin")
CLANG = "/usr/bin/clang-22"
CLANGXX = "/usr/bin/clang++-22"
AR = "/usr/bin/llvm-ar-22"
RANLIB = "/usr/bin/llvm-ranlib-22"


def needs(*tools: str) -> None:
    for tool in (CLANG, CLANGXX, AR, str(LLVM / "ld.lld"), *tools):
        if shutil.which(tool) is None:
            missing(tool)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without ltowrap, make, compiler or ccache settings; ltowrap on PATH.

    LTOWRAP_CLANG is not set: the launcher forms name their compiler; tests that use
    ltowrap-clang set it themselves.
    """
    # Only the ccache test uses ccache, and then with its own directory.
    return clean_env(tmp_path, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", CCACHE_DISABLE="1")


def wrapper(name: str) -> str:
    return str(BIN / name)


def sh(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def log_records(env: dict[str, str]) -> list[dict]:
    path = Path(env["LTOWRAP_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def output_of(record: dict) -> str:
    argv = record["argv"]
    for i, a in enumerate(argv):
        if a == "-o" and i + 1 < len(argv):
            return os.path.basename(argv[i + 1])
        if a.startswith("-o") and len(a) > 2:
            return os.path.basename(a[2:])
    return ""


def distributed_links(env: dict[str, str], expected: dict[str, int]) -> dict[str, dict]:
    """The log's links by output name; those in `expected` were distributed with that many modules.

    Links without bitcode (configure-time probes, sanity checks) may pass through; nothing
    may fall back, and every named output is linked exactly once.
    """
    records = [r for r in log_records(env) if r["tool"].startswith("ld.lld")]
    bad = [(output_of(r), r["decision"], r.get("reason")) for r in records if r["decision"] not in ("distributed", "passthrough")]
    assert not bad, f"links fell back: {bad}"
    by_output: dict[str, list[dict]] = {}
    for r in records:
        by_output.setdefault(output_of(r), []).append(r)
    found = {}
    for name, modules in expected.items():
        recs = by_output.get(name, [])
        assert len(recs) == 1, f"{name}: {len(recs)} link records, expected 1; links: {sorted(by_output)}"
        r = recs[0]
        assert r["decision"] == "distributed", f"{name}: {r['decision']} ({r.get('reason')})"
        assert r["modules"] == modules, f"{name}: {r['modules']} bitcode modules, expected {modules}"
        assert r["backend_compiles"] + r["backend_hits"] == modules, r
        found[name] = r
    return found


def ltowrap_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ltowrap:")]


# --- a small C project: a static library (4 modules), a shared library and a program -------

C_SOURCES = {
    "src/calc.h": """\
int add(int a, int b);
int mul(int a, int b);
int square(int a);
int fib(int n);
const char *greet(const char *who);
""",
    "src/add.c": '#include "calc.h"\nint add(int a, int b) { return a + b; }\n',
    "src/mul.c": """\
#include "calc.h"
int mul(int a, int b) { int r = 0; for (int i = 0; i < b; i++) r = add(r, a); return r; }
""",
    "src/square.c": '#include "calc.h"\nint square(int a) { return mul(a, a); }\n',
    "src/fib.c": """\
#include "calc.h"
static int table[64];
__attribute__((constructor)) static void fill(void) {
    table[0] = 0; table[1] = 1;
    for (int i = 2; i < 64; i++) table[i] = add(table[i - 1], table[i - 2]);
}
int fib(int n) { return n >= 0 && n < 47 ? table[n] : -1; }
""",
    "src/greet.c": """\
#include <stdio.h>
#include "calc.h"
const char *greet(const char *who) {
    static char buf[64];
    snprintf(buf, sizeof buf, "hello %s", who);
    return buf;
}
""",
    "src/main.c": """\
#include <stdio.h>
#include "calc.h"
int main(int argc, char **argv) {
    (void)argv;
    printf("%s: %d %d %d\\n", greet("lto"), square(7 + argc - 1), fib(20), mul(6, 7));
    return 0;
}
""",
}
C_EXPECTED = "hello lto: 49 6765 42\n"
LIB_SOURCES = ["src/add.c", "src/mul.c", "src/square.c", "src/fib.c"]

# The CMake project adds one C++ module to the program, so the program is linked by clang++.
CXX_EXTRA = {
    "src/report.cpp": """\
#include <map>
#include <string>
extern "C" int square(int);
extern "C" int report(void) {
    std::map<std::string, int> m{{"nine", square(3)}, {"four", square(2)}};
    return m.at("nine") - m.at("four");
}
""",
    "src/main_cxx.c": """\
#include <stdio.h>
#include "calc.h"
int report(void);
int main(void) {
    printf("%s: %d %d %d report %d\\n", greet("cmake"), square(7), fib(20), mul(6, 7), report());
    return 0;
}
""",
}

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(demo C CXX)
include(CheckIPOSupported)
check_ipo_supported(RESULT ipo OUTPUT why LANGUAGES C CXX)
if(NOT ipo)
  message(FATAL_ERROR "IPO not supported: ${why}")
endif()
add_library(calc STATIC src/add.c src/mul.c src/square.c src/fib.c)
add_library(greet SHARED src/greet.c)
set_source_files_properties(src/mul.c PROPERTIES COMPILE_OPTIONS "-O1;-fno-unroll-loops")
add_executable(prog src/main_cxx.c src/report.cpp)
target_link_libraries(prog calc greet)
"""




@pytest.mark.parametrize("rsp", [
    pytest.param(False, id="argv"),
    pytest.param(True, id="response-files"),
])
def test_cmake_ninja_launchers(tmp_path: Path, env: dict[str, str], rsp: bool) -> None:
    """CMake + Ninja, compilers /usr/bin/clang{,++}-22 with ltowrap as compiler and linker launcher, IPO on.

    mul.c has its own COMPILE_OPTIONS (-O1 -fno-unroll-loops), which its backend compile must keep.
    """
    needs("cmake", "ninja", RANLIB)
    src = write_tree(tmp_path / "cmake-proj", C_SOURCES | CXX_EXTRA | {"CMakeLists.txt": CMAKELISTS})
    build = tmp_path / "cmake-build"
    env = env | {"LTOWRAP_DEBUG": "1"}
    configure = sh(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    f"-DCMAKE_C_COMPILER={CLANG}", f"-DCMAKE_CXX_COMPILER={CLANGXX}",
                    "-DCMAKE_C_COMPILER_LAUNCHER=ltowrap", "-DCMAKE_CXX_COMPILER_LAUNCHER=ltowrap",
                    "-DCMAKE_C_LINKER_LAUNCHER=ltowrap", "-DCMAKE_CXX_LINKER_LAUNCHER=ltowrap",
                    "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=ON",
                    "-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld", "-DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld",
                    *(["-DCMAKE_NINJA_FORCE_RESPONSE_FILE=ON"] if rsp else [])],  # even =OFF forces them
                   tmp_path, env)
    assert not ltowrap_lines(configure.stderr), configure.stderr
    done = sh(["ninja", "-C", str(build), "-v", "-j2"], tmp_path, env)
    assert not ltowrap_lines(done.stderr + done.stdout), done.stdout + done.stderr

    # What CMake's IPO did with clang: -flto=thin on every compile and link, LLVM 22's ar/ranlib.
    commands = done.stdout
    compiles = [line for line in commands.splitlines() if " -c " in line]
    assert len(compiles) == 7 and all(f"ltowrap {CLANG} " in c or f"ltowrap {CLANGXX} " in c for c in compiles), commands
    if rsp:
        assert all(".rsp" in c for c in compiles), commands
    else:
        assert all("-flto=thin" in c for c in compiles), commands
    assert re.search(r"llvm-ar-22\"? .*libcalc\.a", commands) and "llvm-ranlib-22" in commands, commands
    assert f"ltowrap {CLANGXX} " in next(line for line in commands.splitlines() if "-o prog " in line)

    found = distributed_links(env, {"prog": 6, "libgreet.so": 1})  # main, report + the 4 calc members
    assert found["prog"]["backend_compiles"] == 6
    assert sh([str(build / "prog")], tmp_path, env).stdout == "hello cmake: 49 6765 42 report 5\n"

    explain = sh([wrapper("ltowrap"), "explain", "mul.c.o"], tmp_path, env).stdout
    argv = [line[len("argv:"):].split() for line in explain.splitlines() if line.startswith("argv:")]
    assert len(argv) == 1, explain
    opt_levels = [a for a in argv[0] if a.startswith("-O")]
    assert opt_levels[-1] == "-O1" and "-fno-unroll-loops" in argv[0], argv  # the module's own options win


MESON_BUILD = """\
project('demo', 'c')
calc = static_library('calc', 'src/add.c', 'src/mul.c', 'src/square.c', 'src/fib.c')
greet = shared_library('greet', 'src/greet.c')
executable('prog', 'src/main.c', link_with: [calc, greet])
"""


def test_meson_ninja(tmp_path: Path, env: dict[str, str]) -> None:
    """meson with CC="ltowrap clang-22" (meson splits it), CC_LD=lld, -Db_lto=true -Db_lto_mode=thin."""
    needs("meson", "ninja")
    src = write_tree(tmp_path / "meson-proj", C_SOURCES | {"meson.build": MESON_BUILD})
    build = tmp_path / "meson-build"
    # AR: meson's default is llvm-ar (14 here), which can't index clang 22's bitcode.
    menv = env | {"CC": "ltowrap clang-22", "CC_LD": "lld", "AR": "llvm-ar-22"}
    configure = sh(["meson", "setup", str(build), str(src), "--buildtype=release", "-Db_lto=true",
                    "-Db_lto_mode=thin"], tmp_path, menv)
    assert "C compiler for the host machine: ltowrap clang-22" in configure.stdout, configure.stdout
    assert "ld.lld 22" in configure.stdout, configure.stdout
    done = sh(["ninja", "-C", str(build), "-v", "-j2"], tmp_path, menv)
    assert not ltowrap_lines(done.stderr + done.stdout), done.stdout + done.stderr
    compiles = [line for line in done.stdout.splitlines() if " -c " in line]
    assert len(compiles) == 6 and all(c.split("] ", 1)[1].startswith("ltowrap clang-22 ") and "-flto=thin" in c
                                      for c in compiles), done.stdout
    distributed_links(menv, {"prog": 5, "libgreet.so": 1})  # meson's libcalc.a is a thin archive
    assert sh([str(build / "prog")], tmp_path, menv).stdout == C_EXPECTED


BUILD_NINJA = f"""\
cflags = -O2 -flto=thin -Wall
rule cc
  command = ltowrap-clang $cflags -MD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
rule cc_pic
  command = ltowrap-clang $cflags -fPIC -MD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
rule ar
  command = rm -f $out && {AR} rcs $out $in
rule link
  command = ltowrap-clang -O2 -flto=thin -fuse-ld=lld $in -o $out $libs
rule solink
  command = ltowrap-clang -O2 -flto=thin -fuse-ld=lld -shared $in -o $out

build obj/add.o: cc src/add.c
build obj/mul.o: cc src/mul.c
build obj/square.o: cc src/square.c
build obj/fib.o: cc src/fib.c
build obj/main.o: cc src/main.c
build obj/greet.o: cc_pic src/greet.c
build libcalc.a: ar obj/add.o obj/mul.o obj/square.o obj/fib.o
build libgreet.so: solink obj/greet.o
build prog: link obj/main.o libcalc.a | libgreet.so
  libs = -L. -lgreet '-Wl,-rpath,$$ORIGIN'
default prog
"""


def test_plain_ninja(tmp_path: Path, env: dict[str, str]) -> None:
    """A hand-written build.ninja whose rules call ltowrap-clang."""
    needs("ninja")
    src = write_tree(tmp_path / "ninja-proj", C_SOURCES | {"build.ninja": BUILD_NINJA})
    nenv = env | {"LTOWRAP_CLANG": str(LLVM / "clang")}
    done = sh(["ninja", "-j2"], src, nenv)
    assert not ltowrap_lines(done.stderr + done.stdout), done.stdout + done.stderr
    distributed_links(nenv, {"prog": 5, "libgreet.so": 1})
    assert sh([str(src / "prog")], src, nenv).stdout == C_EXPECTED
    # Nothing changed: ninja has no work, and ltowrap is not run at all.
    assert "no work to do" in sh(["ninja", "-j2"], src, nenv).stdout
    assert len([r for r in log_records(nenv) if r["tool"].startswith("ld.lld")]) == 2


# --- make -j3 with sub-makes: one jobserver shared through `+` recipes --------------------------

TOP_MAKEFILE = """\
.PHONY: all lib app clean
all: app
lib:
\t$(MAKE) -C lib
app: lib
\t$(MAKE) -C app
clean:
\t$(MAKE) -C lib clean
\t$(MAKE) -C app clean
"""
LIB_MAKEFILE = f"""\
CC = ltowrap-clang
CFLAGS = -O2 -flto=thin -I../src
OBJS = add.o mul.o square.o fib.o
all: libcalc.a libgreet.so
%.o: ../src/%.c
\t$(CC) $(CFLAGS) -c $< -o $@
greet.o: ../src/greet.c
\t$(CC) $(CFLAGS) -fPIC -c $< -o $@
libcalc.a: $(OBJS)
\trm -f $@ && {AR} rcs $@ $^
libgreet.so: greet.o
\t+$(CC) -O2 -flto=thin -fuse-ld=lld -shared $^ -o $@
clean:
\trm -f *.o *.a *.so
"""
APP_MAKEFILE = """\
CC = ltowrap-clang
CFLAGS = -O2 -flto=thin -I../src
LDFLAGS = -O2 -flto=thin -fuse-ld=lld
all: prog prog-static jobserver
.PHONY: all jobserver clean
# What ltowrap sees in a '+' recipe two makes down: make's jobserver, usable.
jobserver:
\t+ltowrap doctor | grep 'make jobserver'
main.o: ../src/main.c
\t$(CC) $(CFLAGS) -c $< -o $@
prog: main.o ../lib/libcalc.a ../lib/libgreet.so
\t+$(CC) $(LDFLAGS) main.o ../lib/libcalc.a -L../lib -lgreet -Wl,-rpath,'$$ORIGIN/../lib' -o $@
greet_static.o: ../src/greet.c
\t$(CC) $(CFLAGS) -c $< -o $@
prog-static: main.o greet_static.o ../lib/libcalc.a
\t+$(CC) $(LDFLAGS) $^ -o $@
# The control: a link recipe without '+' gets no jobserver from make 4.3 (ltowrap says so only when verbose).
prog-noplus: main.o greet_static.o ../lib/libcalc.a
\t$(CC) $(LDFLAGS) $^ -o $@
clean:
\trm -f *.o prog prog-static prog-noplus
"""


def jobserver_complaints(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if line.startswith("ltowrap:") or "jobserver" in line or re.match(r"make(\[\d+\])?: warning", line)]


def test_make_recursion_jobserver(tmp_path: Path, env: dict[str, str]) -> None:
    """make -j3 with $(MAKE) -C lib / -C app; link recipes marked '+' share make's jobserver."""
    needs("make")
    root = write_tree(tmp_path / "make-proj", C_SOURCES | {"Makefile": TOP_MAKEFILE, "lib/Makefile": LIB_MAKEFILE,
                                                          "app/Makefile": APP_MAKEFILE})
    menv = env | {"LTOWRAP_CLANG": str(LLVM / "clang")}
    done = sh(["make", "-j3"], root, menv)
    assert not jobserver_complaints(done.stderr), done.stderr
    assert "[ok] make jobserver: usable" in done.stdout, done.stdout
    distributed_links(menv, {"libgreet.so": 1, "prog": 5, "prog-static": 6})
    assert sh([str(root / "app/prog")], root, menv).stdout == C_EXPECTED
    assert sh([str(root / "app/prog-static")], root, menv).stdout == C_EXPECTED

    # The check above can see the complaint: without '+', make 4.3 closes the jobserver for the
    # recipe. The link then shares the machine's slot pool, and says so only when verbose.
    control = sh(["make", "-j3", "-C", "app", "prog-noplus"], root, menv)
    assert not jobserver_complaints(control.stderr), control.stderr
    (root / "app/prog-noplus").unlink()
    control = sh(["make", "-j3", "-C", "app", "prog-noplus"], root,  # memo off: a restored link runs no backend
                 menv | {"LTOWRAP_VERBOSE": "1", "LTOWRAP_LOG": str(tmp_path / "verbose.log"), "LTOWRAP_MEMO": "0"})
    assert any("jobserver" in line for line in ltowrap_lines(control.stderr)), control.stderr
    distributed_links(menv, {"prog-noplus": 6})
    assert sh([str(root / "app/prog-noplus")], root, menv).stdout == C_EXPECTED


# --- C++: templates, virtual functions, RTTI, exceptions across modules, a static library ------

CXX_SOURCES = {
    "shapes.h": """\
#pragma once
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct ShapeError : std::runtime_error {
    using std::runtime_error::runtime_error;
    ~ShapeError() override;  // key function in errors.cpp: typeinfo and vtable live there
};

struct Shape {
    virtual ~Shape();
    virtual double area() const = 0;
    virtual std::string name() const = 0;
};

std::unique_ptr<Shape> make_shape(const std::string &kind, double size);  // throws ShapeError
std::map<std::string, int> &registry();                                 // filled by static constructors
int lookup(const std::string &kind);                                    // std::out_of_range if unknown

template <typename T>
T total(const std::vector<T> &xs) {
    T sum{};
    for (const T &x : xs) sum += x;
    return sum;
}

template <typename T>
struct Stats {
    std::vector<T> values;
    void add(T v) { values.push_back(v); }
    T sum() const { return total(values); }
};
""",
    "errors.cpp": """\
#include "shapes.h"
ShapeError::~ShapeError() = default;
Shape::~Shape() = default;
""",
    "registry.cpp": """\
#include "shapes.h"
std::map<std::string, int> &registry() {
    static std::map<std::string, int> r;
    return r;
}
int lookup(const std::string &kind) { return registry().at(kind); }
""",
    "circle.cpp": """\
#include "shapes.h"
namespace {
struct Circle final : Shape {
    double r;
    explicit Circle(double r) : r(r) {}
    double area() const override { return 3.0 * r * r; }
    std::string name() const override { return "circle(" + std::to_string(int(r)) + ")"; }
};
struct Register { Register() { registry()["circle"] = 1; } } registered;
}
std::unique_ptr<Shape> make_circle(double r) { return std::make_unique<Circle>(r); }
""",
    "square.cpp": """\
#include "shapes.h"
struct Square : Shape {
    double side;
    explicit Square(double s) : side(s) {}
    double area() const override { return side * side; }
    std::string name() const override { return "square(" + std::to_string(int(side)) + ")"; }
};
namespace { struct Register { Register() { registry()["square"] = 2; } } registered; }
std::unique_ptr<Shape> make_square(double s) { return std::make_unique<Square>(s); }
bool is_square(const Shape &s) { return dynamic_cast<const Square *>(&s) != nullptr; }
""",
    "factory.cpp": """\
#include "shapes.h"
std::unique_ptr<Shape> make_circle(double r);
std::unique_ptr<Shape> make_square(double s);
std::unique_ptr<Shape> make_shape(const std::string &kind, double size) {
    Stats<int> seen;
    seen.add(lookup(kind));  // std::out_of_range for a kind nobody registered
    if (kind == "circle") return make_circle(size);
    if (kind == "square") return make_square(size);
    throw ShapeError("unknown shape " + kind);
}
""",
    "main.cpp": """\
#include <cstdio>
#include "shapes.h"
bool is_square(const Shape &s);
int main() {
    registry()["hexagon"] = 6;  // registered, but make_shape can't build one
    std::vector<std::unique_ptr<Shape>> shapes;
    std::vector<std::string> errors;
    for (const char *kind : {"circle", "square", "hexagon", "triangle", "square"}) {
        try {
            shapes.push_back(make_shape(kind, double(shapes.size() + 2)));
        } catch (const ShapeError &e) {
            errors.push_back(std::string("ShapeError:") + e.what());
        } catch (const std::out_of_range &) {
            errors.push_back(std::string("out_of_range:") + kind);
        }
    }
    Stats<double> areas;
    std::map<std::string, int> squares;
    for (const auto &s : shapes) {
        areas.add(s->area());
        squares[s->name()] = is_square(*s);
    }
    std::printf("%zu shapes, area %.1f, ints %d\\n", shapes.size(), areas.sum(), total(std::vector<int>{1, 2, 3}));
    for (const auto &[name, sq] : squares) std::printf("%s%s\\n", name.c_str(), sq ? " is a square" : "");
    for (const auto &e : errors) std::printf("%s\\n", e.c_str());
    std::printf("registry %zu\\n", registry().size());
    return 0;
}
""",
}
CXX_EXPECTED = """\
3 shapes, area 37.0, ints 6
circle(2)
square(3) is a square
square(4) is a square
ShapeError:unknown shape hexagon
out_of_range:triangle
registry 3
"""
CXX_LIB = ["errors", "registry", "circle", "square", "factory"]


def test_cxx_program_static_library(tmp_path: Path, env: dict[str, str]) -> None:
    """ltowrap-clang++ compiles and links a C++ program against a static library of C++ bitcode."""
    needs()
    src = write_tree(tmp_path / "cxx-proj", CXX_SOURCES)
    xenv = env | {"LTOWRAP_CLANG": str(LLVM / "clang")}
    cxx = ["ltowrap-clang++", "-std=c++17", "-O2", "-flto=thin", "-Wall"]
    procs = [subprocess.Popen([*cxx, "-c", f"{name}.cpp", "-o", f"{name}.o"], cwd=src, env=xenv,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name in [*CXX_LIB, "main"]]
    for p in procs:
        out = p.communicate()[0]
        assert p.returncode == 0, f"{p.args}: {out}"
    for name in [*CXX_LIB, "main"]:
        assert (src / f"{name}.o").read_bytes()[:4] == b"BC\xc0\xde", f"{name}.o is not bitcode"
    sh([AR, "rcs", "libshapes.a", *(f"{n}.o" for n in CXX_LIB)], src, xenv)
    done = sh(["ltowrap-clang++", "-O2", "-flto=thin", "-fuse-ld=lld", "main.o", "libshapes.a", "-o", "shapes"], src, xenv)
    assert not ltowrap_lines(done.stderr), done.stderr
    distributed_links(xenv, {"shapes": 6})
    assert sh([str(src / "shapes")], src, xenv).stdout == CXX_EXPECTED


# --- ccache in front: CC="ccache ltowrap-clang" ----------------------------------------------------

CCACHE_MAKEFILE = f"""\
CC = ccache ltowrap-clang
CFLAGS = -O2 -flto=thin -Isrc
OBJS = add.o mul.o square.o fib.o greet.o
prog: main.o libcalc.a
\t+$(CC) -O2 -flto=thin -fuse-ld=lld $^ -o $@
libcalc.a: $(OBJS)
\trm -f $@ && {AR} rcs $@ $^
%.o: src/%.c
\t$(CC) $(CFLAGS) -c $< -o $@
clean:
\trm -f *.o *.a prog
"""


def ccache_stats(env: dict[str, str]) -> dict[str, int]:
    done = sh(["ccache", "--print-stats"], Path(env["CCACHE_DIR"]).parent, env)
    return {k: int(v) for k, v in (line.split("\t") for line in done.stdout.splitlines() if "\t" in line)}


def test_ccache_in_front(tmp_path: Path, env: dict[str, str]) -> None:
    """ccache caches the compiles to bitcode, ltowrap the link's backends: a clean rebuild is all hits."""
    needs("ccache", "make")
    root = write_tree(tmp_path / "ccache-proj", C_SOURCES | {"Makefile": CCACHE_MAKEFILE})
    # CCACHE_COMPILERCHECK as README advises: ccache's default (the mtime of ltowrap-clang) can't
    # see which clang LTOWRAP_CLANG picks; `ltowrap-clang --version` is the real clang's.
    cenv = {k: v for k, v in env.items() if k != "CCACHE_DISABLE"} | {
        "LTOWRAP_CLANG": str(LLVM / "clang"), "CCACHE_DIR": str(tmp_path / "ccache"),
        "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf"), "CCACHE_TEMPDIR": str(tmp_path / "ccache-tmp"),
        "CCACHE_COMPILERCHECK": "%compiler% --version"}
    sh(["ccache", "-z"], tmp_path, cenv)
    first = sh(["make", "-j2"], root, cenv)
    assert not ltowrap_lines(first.stderr), first.stderr
    assert sh([str(root / "prog")], root, cenv).stdout == C_EXPECTED
    cold = distributed_links(cenv, {"prog": 6})["prog"]
    assert cold["backend_compiles"] == 6 and cold["backend_hits"] == 0, cold
    s = ccache_stats(cenv)
    assert s["cache_miss"] == 6 and s["direct_cache_hit"] + s["preprocessed_cache_hit"] == 0, s
    assert s["called_for_link"] == 1, s  # ccache hands the link straight to ltowrap-clang

    sh(["make", "clean"], root, cenv)
    Path(cenv["LTOWRAP_LOG"]).unlink()
    sh(["ccache", "-z"], tmp_path, cenv)
    second = sh(["make", "-j2"], root, cenv | {"LTOWRAP_MEMO": "0"})  # the backend cache's turn
    assert not ltowrap_lines(second.stderr), second.stderr
    s = ccache_stats(cenv)
    assert s["direct_cache_hit"] == 6 and s["cache_miss"] == 0, s
    warm = distributed_links(cenv, {"prog": 6})["prog"]
    assert warm["backend_hits"] == warm["modules"] == 6 and warm["backend_compiles"] == 0, warm
    assert sh([str(root / "prog")], root, cenv).stdout == C_EXPECTED
    # With the link memo on, the next clean rebuild restores the link whole.
    sh(["make", "clean"], root, cenv)
    Path(cenv["LTOWRAP_LOG"]).unlink()
    sh(["make", "-j2"], root, cenv)
    assert [r["decision"] for r in log_records(cenv) if r["tool"].startswith("ld.lld")] == ["restored"]
    assert sh([str(root / "prog")], root, cenv).stdout == C_EXPECTED

    # Another clang behind the same ltowrap-clang is another compiler to ccache: a miss, not LLVM 22 bitcode.
    clang14 = Path("/usr/lib/llvm-14/bin/clang")
    if not clang14.exists():
        missing(str(clang14), "dev/setup installs clang-14")
    sh(["ccache", "-z"], tmp_path, cenv)
    sh(["ccache", "ltowrap-clang", "-O2", "-flto=thin", "-Isrc", "-c", "src/main.c", "-o", "main14.o"], root,
       cenv | {"LTOWRAP_CLANG": str(clang14)})
    assert ccache_stats(cenv)["cache_miss"] == 1
    dump = sh([str(LLVM / "llvm-bcanalyzer"), "--dump", "main14.o"], root, cenv).stdout
    assert "record string = 'LLVM14." in dump, dump[:2000]
