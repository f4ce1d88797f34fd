"""Benchmark ltowrap against lld's own ThinLTO modes on a real Debian package build.

    .venv/bin/python bench/run.py [--project lua|ninja|redis] [--reps N] [--jobs N] [--only CONFIG ...]

Each repetition builds the project once per configuration, in a fresh copy of the source
tree with fresh caches, configurations in rotating order:

  plain         -O2, no LTO (the floor)                  full build, clean rebuild
  passthrough   the same with CC=ltowrap-clang           full build, clean rebuild
  thin          lld in-process ThinLTO                   full build
  thin-cache    the same with --thinlto-cache-dir        cold build, warm relink, one-file edit,
                                                         warm link command
  dtlto         lld DTLTO, bench/dtlto_local.py          full build
  dtlto-ltowrap lld DTLTO, ltowrap-distributor           cold build, warm link alone
  ltowrap       CC=ltowrap-clang, -flto=thin             cold build, warm relink, one-file
                                                         edit, clean rebuild (warm cache),
                                                         warm link command
  ltowrap-nomemo  the same with the link memo off        the same
  thin-cache-ccache  CC='ccache clang', thin-cache       cold build, clean rebuild (every
  ltowrap-ccache     CC='ccache ltowrap-clang'           cache warm: ccache, lld's or ltowrap's)

and, with --remote, on a real REAPI service on loopback (BuildGrid, tests/reapi_server.py):

  remote-cache  ltowrap, remote_mode=cache               cold build (publishes), clean
                                                         rebuild with an empty local cache
                                                         (a second machine), link alone
  remote-busy   remote-cache through a busy server       cold build (publishes), clean
                (BuildGrid answering 2 requests at once) rebuild with an empty local cache
  remote-exec   ltowrap, remote_mode=execute, --workers  cold build, link alone: server
                (2) workers on this machine, every job   cache hits, then cold
                sent to them (remote_local=false)
  hybrid        remote-exec with the local slots on      cold build, cold link alone
                (remote_local=true, the default)         (a fresh server for each)

and measures every `make -j2` (wall, user+sys CPU, peak RSS of the largest process: the
wait4 rusage of make, which covers all its descendants) and the link of the main binary
(`lua`) on its own: the binary deleted and `make -j2 lua` rerun, nothing else running.
For ltowrap the link is also read from LTOWRAP_LOG (start..end of the ld.lld wrapper,
with its phases); inside a build that link runs beside the link of `luac`. The warm link
command is the main binary's link line (from `make -n`) run LINK_COMMAND_RUNS times per
repetition without make, whose own work (0.3 s for redis's Makefiles) is no link's.

Projects: `lua` (lua5.4, src/Makefile; main binary `lua`), `ninja` (ninja-build 1.11, a C++
project: its own CMake build with the Ninja generator, configured untimed before each tree's
first build, CXX the configuration's C compiler's `++` sibling; the default target, ninja,
ninja_test and six perf tools; main binary `ninja`; checked by a small build with it, and
ltowrap's cold build by ninja_test) and `redis` (Debian's redis 7.0,
its upstream Makefiles with MALLOC=libc, the bundled lua, hiredis, hdr_histogram and linenoise
as bitcode archives made with llvm-ar 22; main binary `redis-server`, linked beside
redis-cli, redis-benchmark and the bundled lua/luac; every build is checked with redis-cli
against a redis-server on a free loopback port, and ltowrap's cold build also with
`./runtest` units type/string and keyspace, which need tcl).

(A warm relink deletes the binaries and reruns make; the one-file edit changes a constant in
one .c file.) Backend compiles are counted per make: ltowrap's from its log, lld's as new
entries in its cache directory. Prints markdown tables of medians with ratios against
in-process ThinLTO (and against --thinlto-cache-dir in the same scenario for warm relinks
and the edit), and writes them with every sample as
JSON (and the tables as .md) to bench/out/ (git ignores it: the summaries the docs cite are copied to
bench/results/). Sources come from integration/debsrc.py.
All caches live in a temporary directory. The ltowrap measured is the one installed beside
the Python running this script (its venv's bin).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from integration import debsrc  # noqa: E402
from ltowrap import log as ltowrap_log  # noqa: E402

BENCH = Path(__file__).resolve().parent
REMOTE_CONFIGS = ("remote-cache", "remote-busy", "remote-exec", "hybrid")
SCRIPTS = Path(sys.executable).parent  # the venv's bin: ltowrap, ltowrap-clang
DISTRIBUTOR = BENCH / "dtlto_local.py"
MAKE_JOBS = 2


# ---------------------------------------------------------------- measuring one command


@dataclass
class Run:
    wall: float  # seconds
    cpu: float  # user + sys seconds of the command and all its descendants
    rss_mib: float  # peak RSS of the largest single process among them
    started: float = 0.0  # time.time() when it was started


def write_results(out: Path, stamp, kind: str, title: str, load_at_start: float, text: str, data: dict,
                  note: str = "") -> None:
    """A benchmark's table, headed by its command, the machine and the load, printed and written to
    out/<date>-<kind>.md beside its raw data (.json)."""
    head = (f"## {title}, {stamp:%Y-%m-%d %H:%M}\n\n`.venv/bin/python bench/{kind}.py "
            f"{' '.join(sys.argv[1:])}` on {os.cpu_count()} CPUs, load average {load_at_start:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end{note}\n\n")
    print(head + text)
    name = stamp.strftime("%Y-%m-%d-%H%M")
    out.mkdir(parents=True, exist_ok=True)
    # Two runs started in the same minute (short cases one after another): the second gets a
    # suffix rather than overwriting the first's results.
    base, n = name, 1
    while (out / f"{name}-{kind}.md").exists():
        n += 1
        name = f"{base}-{n}"
    (out / f"{name}-{kind}.md").write_text(head + text + "\n")
    (out / f"{name}-{kind}.json").write_text(json.dumps(data, indent=1))


def measure(argv: list[str], cwd: Path, env: dict[str, str], output: Path) -> Run:
    """Run argv to completion (output appended to `output`); fail loudly on a non-zero exit."""
    with open(output, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        started, t0 = time.time(), time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = output.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode} in {cwd}:\n{tail}")
    return Run(round(wall, 4), round(usage.ru_utime + usage.ru_stime, 4), round(usage.ru_maxrss / 1024, 1), started)


# ---------------------------------------------------------------- the project


@dataclass(frozen=True)
class Project:
    """How to unpack, build, edit and smoke-test one Debian source package."""

    package: str
    make_dir: str  # where make runs, relative to the tree
    target: str  # what a build makes
    make_vars: Callable[[str, str, str], list[str]]  # (cc, cflags, ldflags) -> make arguments
    binaries: tuple[str, ...]  # every linked program; the first is the one whose link is timed
    prepare: Callable[[Path], None]  # turn the unpacked Debian tree into a buildable one
    edit: Callable[[Path], None]  # a small real code change in one source file
    smoke: Callable[[Path], None]  # check the built program works
    check: Callable[[Path], None] | None = None  # a longer test, run once, after ltowrap's cold build (untimed)
    # A CMake project: make_dir is its build directory, configured (untimed) before the first
    # build with the configuration's compilers and flags; ninja runs the builds (make_vars unused).
    cmake: bool = False
    src: str = ""  # where the sources an edit changes are, relative to the tree (default: make_dir)

    @property
    def main_binary(self) -> str:
        return self.binaries[0]

    @property
    def src_dir(self) -> str:
        return self.src or self.make_dir


def lua_make_vars(cc: str, cflags: str, ldflags: str) -> list[str]:
    # The `linux` target's SYSCFLAGS go into CFLAGS (we override it); SYSLIBS as it sets them.
    return [f"CC={cc}", f"CFLAGS={cflags} -Wall -Wextra -DLUA_COMPAT_5_3 -DLUA_USE_LINUX",
            f"MYLDFLAGS={ldflags}", "SYSLIBS=-Wl,-E -ldl"]


def lua_edit(tree: Path) -> None:
    """lstrlib.c's pattern-matching recursion limit 200 -> 201: new code in one module, same behaviour."""
    src = tree / "src" / "lstrlib.c"
    text, n = re.subn(r"^#define MAXCCALLS\s+200$", "#define MAXCCALLS\t201", src.read_text(), flags=re.M)
    if n != 1:
        raise RuntimeError(f"{src}: no '#define MAXCCALLS 200' to edit")
    src.write_text(text)


def lua_smoke(tree: Path) -> None:
    code = "print(string.format('%d %s', 6 * 7, ('x'):rep(3)), string.find('hello', 'l+'))"
    out = subprocess.run([str(tree / "src" / "lua"), "-e", code], check=True, capture_output=True, text=True).stdout
    if out != "42 xxx\t3\t4\n":
        raise RuntimeError(f"lua printed {out!r}")


def redis_prepare(tree: Path) -> None:
    """Debian's patched tree builds as is with the upstream Makefiles (bundled deps; jemalloc not used)."""


def redis_make_vars(cc: str, cflags: str, ldflags: str) -> list[str]:
    # CFLAGS and LDFLAGS reach src/ (FINAL_CFLAGS/FINAL_LDFLAGS, after its own -O2) and, through make's
    # command-line variables, deps/: lua (CFLAGS, MYLDFLAGS), hiredis, hdr_histogram and linenoise. Their
    # static archives hold bitcode, so llvm-ar/llvm-ranlib of clang 22. MALLOC=libc: the bundled jemalloc's
    # configure would run in every fresh tree and namespaces its symbols with nm on the (bitcode) objects.
    return [f"CC={cc}", f"CFLAGS={cflags}", f"LDFLAGS={ldflags}", "MALLOC=libc", "USE_SYSTEMD=no",
            "AR=llvm-ar-22", "RANLIB=llvm-ranlib-22", "NM=llvm-nm-22"]


def redis_edit(tree: Path) -> None:
    """networking.c's MAX_ACCEPTS_PER_CALL 1000 -> 1001: new code in one module of redis-server, same behaviour."""
    src = tree / "src" / "networking.c"
    text, n = re.subn(r"^#define MAX_ACCEPTS_PER_CALL 1000$", "#define MAX_ACCEPTS_PER_CALL 1001", src.read_text(),
                      flags=re.M)
    if n != 1:
        raise RuntimeError(f"{src}: no '#define MAX_ACCEPTS_PER_CALL 1000' to edit")
    src.write_text(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_smoke(tree: Path) -> None:
    """redis-server --version, then redis-cli against a redis-server on a free loopback port (stopped by PID)."""
    src = tree / "src"
    out = subprocess.run([str(src / "redis-server"), "--version"], check=True, capture_output=True, text=True).stdout
    if not out.startswith("Redis server v=7."):
        raise RuntimeError(f"redis-server --version printed {out!r}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="redis-smoke-") as wd:
        server = subprocess.Popen([str(src / "redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--daemonize", "no", "--dir", wd],
                                  cwd=wd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def cli(*args: str) -> str:
                return subprocess.run([str(src / "redis-cli"), "-h", "127.0.0.1", "-p", str(port), *args],
                                      capture_output=True, text=True, timeout=10).stdout.strip()

            deadline = time.monotonic() + 10
            while cli("PING") != "PONG":
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not answer PING (exit {server.poll()})")
                time.sleep(0.05)
            got = [cli("SET", "k", "v" * 100), cli("GET", "k"), cli("INCR", "n"), cli("INCRBY", "n", "41"),
                   cli("RPUSH", "l", "a", "b"), cli("LPUSH", "l", "z"), cli("LRANGE", "l", "0", "-1"),
                   cli("EVAL", "return redis.call('INCR', KEYS[1]) * 2", "1", "n")]
            want = ["OK", "v" * 100, "1", "42", "2", "3", "z\na\nb", "86"]
            if got != want:
                raise RuntimeError(f"redis-cli got {got!r}, wanted {want!r}")
        finally:
            server.terminate()
            server.wait(timeout=10)


def redis_check(tree: Path) -> None:
    """Redis's own test suite (tcl), two units, servers on loopback ports it picks."""
    done = subprocess.run(["./runtest", "--single", "unit/type/string", "--single", "unit/keyspace", "--clients", "2"],
                          cwd=tree, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or "All tests passed without errors" not in done.stdout:
        raise RuntimeError(f"runtest exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    print("  runtest unit/type/string unit/keyspace: all passed", flush=True)


def no_make_vars(cc: str, cflags: str, ldflags: str) -> list[str]:
    return []


def no_prepare(tree: Path) -> None:
    """Debian's patched tree builds as is."""


def ninja_edit(tree: Path) -> None:
    """deps_log.cc's kMaxRecordSize (1 << 19) - 1 -> - 2: new code in one module, the same
    behaviour for any real .ninja_deps."""
    src = tree / "src" / "deps_log.cc"
    text, n = re.subn(r"^const unsigned kMaxRecordSize = \(1 << 19\) - 1;$",
                      "const unsigned kMaxRecordSize = (1 << 19) - 2;", src.read_text(), flags=re.M)
    if n != 1:
        raise RuntimeError(f"{src}: no 'const unsigned kMaxRecordSize = (1 << 19) - 1;' to edit")
    src.write_text(text)


NINJA_SMOKE = """rule cat
  command = cat $in > $out
rule up
  command = tr a-z A-Z < $in > $out
build mid.txt: cat a.txt b.txt
build out.txt: up mid.txt
default out.txt
"""


def ninja_smoke(tree: Path) -> None:
    """ninja --version, then a two-step build and a no-op rebuild in a scratch directory."""
    ninja = tree / "build" / "ninja"
    out = subprocess.run([str(ninja), "--version"], check=True, capture_output=True, text=True).stdout
    if out != "1.11.1\n":
        raise RuntimeError(f"ninja --version printed {out!r}")
    with tempfile.TemporaryDirectory(prefix="ninja-smoke-") as wd:
        work = Path(wd)
        (work / "build.ninja").write_text(NINJA_SMOKE)
        (work / "a.txt").write_text("hello ")
        (work / "b.txt").write_text("ninja\n")
        subprocess.run([str(ninja), "-C", wd], check=True, capture_output=True)
        again = subprocess.run([str(ninja), "-C", wd], check=True, capture_output=True, text=True).stdout
        if (work / "out.txt").read_text() != "HELLO NINJA\n" or "no work to do" not in again:
            raise RuntimeError(f"ninja built {(work / 'out.txt').read_text()!r}, then said {again!r}")


def ninja_check(tree: Path) -> None:
    """ninja's own unit tests (ninja_test, part of the default target)."""
    build = tree / "build"
    done = subprocess.run([str(build / "ninja_test")], cwd=build, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not done.stdout.rstrip().endswith("passed"):
        raise RuntimeError(f"ninja_test exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    print("  ninja_test: passed", flush=True)


PROJECTS = {
    "lua": Project("lua5.4", "src", "all", lua_make_vars, ("lua", "luac"), debsrc.prepare_lua_upstream, lua_edit, lua_smoke),
    "redis": Project("redis", "src", "all", redis_make_vars,
                     ("redis-server", "redis-cli", "redis-benchmark", "redis-sentinel", "redis-check-rdb",
                      "redis-check-aof"), redis_prepare, redis_edit, redis_smoke, redis_check),
    # ninja-build's own CMake build (the default target: ninja, ninja_test and six perf tools).
    "ninja": Project("ninja-build", "build", "all", no_make_vars,
                     ("ninja", "ninja_test", "build_log_perftest", "canon_perftest", "clparser_perftest",
                      "depfile_parser_perftest", "hash_collision_bench", "manifest_parser_perftest"),
                     no_prepare, ninja_edit, ninja_smoke, ninja_check, cmake=True, src="src"),
}


# ---------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Config:
    name: str
    cc: str
    cflags: str
    ldflags: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Bench:
    """Everything a configuration's scenarios need: the tree, the make command, where output goes."""

    project: Project
    config: Config
    tree: Path
    env: dict[str, str]
    output: Path  # build output of this configuration, for post-mortems
    workers: int = 2  # remote-exec and hybrid: the loopback workers

    def make(self, *targets: str, log: Path | None = None) -> Run:
        if self.project.cmake:
            self.configure()
            argv = ["ninja", "-C", self.project.make_dir, f"-j{MAKE_JOBS}", *(targets or (self.project.target,))]
        else:
            vars_ = self.project.make_vars(self.config.cc, self.config.cflags, self.config.ldflags)
            argv = ["make", "-C", self.project.make_dir, f"-j{MAKE_JOBS}", *(targets or (self.project.target,)), *vars_]
        env = self.env | ({"LTOWRAP_LOG": str(log)} if log else {})
        return measure(argv, self.tree, env, self.output)

    def configure(self) -> None:
        """A CMake project's build directory, once (untimed): the configuration's C compiler and
        its C++ sibling (clang -> clang++, ltowrap-clang -> ltowrap-clang++; a `ccache` in front
        becomes CMake's compiler launcher), its flags, and its link flags for executables."""
        build = self.tree / self.project.make_dir
        if (build / "build.ninja").exists():
            return
        *launcher, cc = self.config.cc.split()
        argv = ["cmake", "-S", str(self.tree), "-B", str(build), "-G", "Ninja", f"-DCMAKE_C_COMPILER={cc}",
                f"-DCMAKE_CXX_COMPILER={cc}++", f"-DCMAKE_C_FLAGS={self.config.cflags}",
                f"-DCMAKE_CXX_FLAGS={self.config.cflags}", f"-DCMAKE_EXE_LINKER_FLAGS={self.config.ldflags}"]
        if launcher:
            argv += [f"-DCMAKE_C_COMPILER_LAUNCHER={';'.join(launcher)}",
                     f"-DCMAKE_CXX_COMPILER_LAUNCHER={';'.join(launcher)}"]
        measure(argv, self.tree, self.env, self.output)

    def remove_binaries(self, names: tuple[str, ...]) -> None:
        for name in names:
            (self.tree / self.project.make_dir / name).unlink(missing_ok=True)

    def link_alone(self, log: Path | None = None) -> Run:
        """Relink the main binary with every object already built: `make <binary>`."""
        self.remove_binaries((self.project.main_binary,))
        run = self.make(self.project.main_binary, log=log)
        self.project.smoke(self.tree)
        return run

    def link_command(self) -> str:
        """The shell line make runs to link the main binary (from `make -n`, the binary removed)."""
        self.remove_binaries((self.project.main_binary,))
        if self.project.cmake:  # the last command ninja would run for the binary is its link
            dry = subprocess.run(["ninja", "-C", self.project.make_dir, "-t", "commands", self.project.main_binary],
                                 cwd=self.tree, env=self.env, capture_output=True, text=True, check=True).stdout
            return dry.splitlines()[-1]
        vars_ = self.project.make_vars(self.config.cc, self.config.cflags, self.config.ldflags)
        dry = subprocess.run(["make", "-n", "-C", self.project.make_dir, self.project.main_binary, *vars_],
                             cwd=self.tree, env=self.env, capture_output=True, text=True, check=True).stdout
        lines = [line for line in dry.splitlines() if f"-o {self.project.main_binary} " in line]
        if len(lines) != 1:
            raise RuntimeError(f"no single link line for {self.project.main_binary} in make -n:\n{dry[-2000:]}")
        return lines[0]

    def run_link_command(self, line: str) -> Run:
        """The link line alone, without make (whose own work is 0.3 s of a redis relink): the binary
        removed, then `sh -c LINE` where make would run it."""
        self.remove_binaries((self.project.main_binary,))
        run = measure(["sh", "-c", line], self.tree / self.project.make_dir, self.env, self.output)
        self.project.smoke(self.tree)
        return run

    def build(self, log: Path | None = None) -> Run:
        run = self.make(log=log)
        self.project.smoke(self.tree)
        return run


def clean_env(cache_root: Path) -> dict[str, str]:
    """The caller's environment without ltowrap or make settings; ltowrap's cache in cache_root."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LTOWRAP_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return env | {"LTOWRAP_CACHE_DIR": str(cache_root / "ltowrap-cache"), "LTOWRAP_CONFIG": str(cache_root / "none.toml"),
                  "LTOWRAP_PROGRESS": "0", "LC_ALL": "C"}


def configs(clang: Path, jobs: int, scratch: Path) -> list[Config]:
    wrapper = str(SCRIPTS / "ltowrap-clang")
    thin_ld = f"-flto=thin -fuse-ld=lld -Wl,--thinlto-jobs={jobs}"
    dtlto_ld = (f"-flto=thin -fuse-ld=lld -fthinlto-distributor={sys.executable} "
                f"-Xthinlto-distributor={DISTRIBUTOR} -Xthinlto-distributor=--jobs={jobs}")
    wrapped = {"LTOWRAP_CLANG": str(clang), "LTOWRAP_JOBS": str(jobs)}
    return [
        Config("plain", str(clang), "-O2", "-fuse-ld=lld"),
        Config("passthrough", wrapper, "-O2", "-fuse-ld=lld", wrapped),
        # The project's own link line (the driver's default linker): what the sh entry decides alone.
        Config("plain-default-ld", str(clang), "-O2", ""),
        Config("passthrough-default-ld", wrapper, "-O2", "", wrapped),
        Config("thin", str(clang), "-O2 -flto=thin", thin_ld),
        Config("thin-cache", str(clang), "-O2 -flto=thin", f"{thin_ld} -Wl,--thinlto-cache-dir={scratch / 'lld-cache'}"),
        Config("dtlto", str(clang), "-O2 -flto=thin", dtlto_ld),
        Config("dtlto-ltowrap", str(clang), "-O2 -flto=thin",
               f"-flto=thin -fuse-ld=lld -fthinlto-distributor={SCRIPTS / 'ltowrap-distributor'}", wrapped),
        Config("ltowrap", wrapper, "-O2 -flto=thin", "", wrapped),
        # The same without the link memo: what the caches under the link give a relink.
        Config("ltowrap-nomemo", wrapper, "-O2 -flto=thin", "", wrapped | {"LTOWRAP_MEMO": "0"}),
        # Behind ccache (a CI job, a second checkout): `make clean && make` with every cache warm.
        Config("thin-cache-ccache", f"ccache {clang}", "-O2 -flto=thin",
               f"{thin_ld} -Wl,--thinlto-cache-dir={scratch / 'lld-cache-ccache'}",
               {"CCACHE_DIR": str(scratch / "ccache-thin")}),
        Config("ltowrap-ccache", f"ccache {wrapper}", "-O2 -flto=thin", "", wrapped | {"CCACHE_DIR": str(scratch / "ccache-ltowrap")}),
        # The memo off: a restored link would ask the remote nothing (these measure the remote).
        Config("remote-cache", wrapper, "-O2 -flto=thin", "", wrapped | {"LTOWRAP_REMOTE_MODE": "cache", "LTOWRAP_MEMO": "0"}),
        Config("remote-busy", wrapper, "-O2 -flto=thin", "", wrapped | {"LTOWRAP_REMOTE_MODE": "cache", "LTOWRAP_MEMO": "0"}),
        Config("remote-exec", wrapper, "-O2 -flto=thin", "",
               wrapped | {"LTOWRAP_REMOTE_MODE": "execute", "LTOWRAP_REMOTE_LOCAL": "0", "LTOWRAP_MEMO": "0"}),
        Config("hybrid", wrapper, "-O2 -flto=thin", "",
               wrapped | {"LTOWRAP_REMOTE_MODE": "execute", "LTOWRAP_REMOTE_LOCAL": "1", "LTOWRAP_MEMO": "0"}),
    ]


# ---------------------------------------------------------------- scenarios


@dataclass
class Sample:
    """One measurement: a row of a table (`row`) in one repetition."""

    row: str
    rep: int
    run: Run
    ltowrap: dict | None = None  # the main binary's link record from LTOWRAP_LOG, summarised
    compiles: int | None = None  # backend compiles of every link in the command (ltowrap log, lld cache)


def link_records(log: Path) -> dict[str, dict]:
    """LTOWRAP_LOG's linker records by output name."""
    records = {}
    if log.exists():
        for line in log.read_text().splitlines():
            r = json.loads(line)
            argv = r.get("argv", [])
            if "decision" in r and "-o" in argv[:-1]:
                records[os.path.basename(argv[argv.index("-o") + 1])] = r
    return records


def summarise(record: dict) -> dict:
    return {"seconds": round(record["end"] - record["start"], 3), "decision": record["decision"],
            "reason": record.get("reason"), "modules": record["modules"],
            "backend_compiles": record["backend_compiles"], "backend_hits": record["backend_hits"],
            "remote_hits": record.get("remote_hits", 0), "remote_executed": record.get("remote_executed", 0),
            "remote_retries": record.get("remote_retries", 0), "remote_local": record.get("remote_local", 0),
            "remote_raced": record.get("remote_raced", 0),
            "thinlink_cached": record["thinlink_cached"],
            "phases": {p: round(s, 4) for p, s in ltowrap_log.phase_seconds(record).items()}}


class Recorder:
    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.problems: list[str] = []

    def add(self, row: str, rep: int, run: Run, log: Path | None = None, main: str = "", lto: bool = True,
            compiles: int | None = None) -> None:
        summary = None
        if log is not None:
            records = link_records(log)
            compiles = sum(r["backend_compiles"] for r in records.values()) if lto else None
            for name, r in records.items():
                decision = ltowrap_log.Decision
                expected = (decision.DISTRIBUTED, decision.RESTORED) if lto else (decision.PASSTHROUGH,)
                if r["decision"] not in expected:
                    self.problems.append(f"rep {rep} {row}: link of {name}: {r['decision']} ({r.get('reason')})")
            if main in records:
                summary = summarise(records[main])
            elif lto:
                self.problems.append(f"rep {rep} {row}: no LTOWRAP_LOG record for the link of {main}")
        self.samples.append(Sample(row, rep, run, summary, compiles))
        note = f"  {compiles} backend compiles" if compiles is not None else ""
        note += f"  ltowrap {summary['seconds']:.2f}s {summary['phases']}" if summary else ""
        print(f"  {row:<34} {run.wall:7.2f}s wall {run.cpu:7.2f}s cpu {run.rss_mib:6.0f} MiB{note}", flush=True)


def scenarios_plain(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """Non-LTO (real clang, or ltowrap passing through): two full builds, one link."""
    name = b.config.name
    log = (tmp / "log.jsonl") if name == "passthrough" else None
    rec.add(f"{name}: full build", rep, b.build(log=log), log, lto=False)
    rec.add(f"{name}: link alone", rep, b.link_alone())
    b.make("clean")
    rec.add(f"{name}: clean rebuild", rep, b.build())


def scenarios_lld(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """In-process ThinLTO or DTLTO: a full build, the main link alone."""
    rec.add(f"{b.config.name}: full build", rep, b.build())
    rec.add(f"{b.config.name}: link alone", rep, b.link_alone())


def lld_cache_entries(cache: Path) -> set[str]:
    """lld's cache: one llvmcache-<key> file per backend compile it ever stored."""
    return {p.name for p in cache.glob("llvmcache-*")} if cache.is_dir() else set()


LINK_COMMAND_RUNS = 5  # per repetition: a relink without make is tens of ms


def scenarios_thin_cache(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """--thinlto-cache-dir: cold build, warm relink (no change), warm link alone, one-file edit, cold link alone."""
    cache = tmp / "lld-cache"

    def step(row: str, run: Callable[[], Run]) -> None:
        before = lld_cache_entries(cache)
        done = run()
        rec.add(row, rep, done, compiles=len(lld_cache_entries(cache) - before))

    step("thin-cache: cold build", b.build)
    b.remove_binaries(b.project.binaries)
    step("thin-cache: warm relink", b.build)
    step("thin-cache: warm link alone", b.link_alone)
    line = b.link_command()
    for _ in range(LINK_COMMAND_RUNS):
        step("thin-cache: warm link command", lambda: b.run_link_command(line))
    b.project.edit(b.tree)
    step("thin-cache: one-file edit", b.build)
    shutil.rmtree(cache)
    step("thin-cache: cold link alone", b.link_alone)


def scenarios_ltowrap(b: Bench, rec: Recorder, rep: int, tmp: Path) -> dict:
    """ltowrap: cold build, warm relink, one-file edit, clean rebuild; then the link alone cold and warm."""
    main = b.project.main_binary
    steps: list[tuple[str, Callable[[], None]]] = [
        ("cold build", lambda: None),
        ("warm relink", lambda: b.remove_binaries(b.project.binaries)),
        ("one-file edit", lambda: b.project.edit(b.tree)),
        ("clean rebuild", lambda: b.make("clean")),
    ]
    for label, before in steps:
        before()
        log = tmp / f"{label.replace(' ', '-')}.jsonl"
        rec.add(f"{b.config.name}: {label}", rep, b.build(log=log), log, main)
        if label == "cold build" and b.project.check:
            b.project.check(b.tree)
    stats = json.loads(subprocess.run([str(SCRIPTS / "ltowrap"), "stats", "--json"], env=b.env, check=True,
                                      capture_output=True, text=True).stdout)
    subprocess.run([str(SCRIPTS / "ltowrap"), "cache", "clear"], env=b.env, check=True, capture_output=True)
    log = tmp / "cold-link-alone.jsonl"
    rec.add(f"{b.config.name}: cold link alone", rep, b.link_alone(log=log), log, main)
    # Warm, without LTOWRAP_LOG, as in a user's build: writing the log costs json's import.
    rec.add(f"{b.config.name}: warm link alone", rep, b.link_alone())
    line = b.link_command()
    for _ in range(LINK_COMMAND_RUNS):
        rec.add(f"{b.config.name}: warm link command", rep, b.run_link_command(line))
    return stats


def scenarios_ccache(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """Behind ccache: a cold build, then `make clean && make` with every cache warm."""
    rec.add(f"{b.config.name}: cold build", rep, b.build())
    b.make("clean")
    rec.add(f"{b.config.name}: clean rebuild", rep, b.build())


def scenarios_dtlto_ltowrap(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """lld DTLTO with ltowrap-distributor: a cold build, then the main link alone (warm cache)."""
    rec.add("dtlto-ltowrap: full build", rep, b.build())
    rec.add("dtlto-ltowrap: warm link alone", rep, b.link_alone())


def _reapi():
    """tests/reapi_server.py: BuildGrid (its own Python 3.13 venv), PostgreSQL, test workers."""
    sys.path.insert(0, str(ROOT / "tests"))
    import reapi_server

    python, reason = reapi_server.ensure_buildgrid_venv()
    if python is None:
        raise RuntimeError(f"--remote needs BuildGrid: {reason}")
    return reapi_server


def _drop_local_objects(b: Bench) -> None:
    """Empty the local backend and thin-link caches, as on a machine that compiled the sources but
    never linked them. `ltowrap cache clear` would also drop the compile records, and so
    change every backend's options and its action."""
    for kind in ("o", "t"):
        shutil.rmtree(Path(b.env["LTOWRAP_CACHE_DIR"]) / kind, ignore_errors=True)


def _publish_then_read(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """A cold build that publishes, then a clean rebuild with an empty local cache (a second machine)."""
    for label, before in (("cold build", lambda: None),
                          ("clean rebuild, new machine", lambda: (_drop_local_objects(b), b.make("clean")))):
        before()
        log = tmp / f"{label.split(',')[0].replace(' ', '-')}.jsonl"
        rec.add(f"{b.config.name}: {label}", rep, b.build(log=log), log, b.project.main_binary)


def scenarios_remote_cache(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """A cache-only REAPI server: the first machine publishes, a second (empty local cache) reads."""
    with _reapi().cache_server(tmp / "bgd") as url:
        b.env["LTOWRAP_REMOTE"] = url
        _publish_then_read(b, rec, rep, tmp)
        _drop_local_objects(b)
        log = tmp / "link-alone.jsonl"
        rec.add("remote-cache: link alone, remote hits", rep, b.link_alone(log=log), log, b.project.main_binary)


def scenarios_remote_busy(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """remote-cache's builds through a server that answers 2 requests at once (maximum-concurrent-rpcs):
    the rest are refused with RESOURCE_EXHAUSTED and retried."""
    with _reapi().cache_server(tmp / "bgd", threads=10, max_rpcs=2) as url:
        b.env["LTOWRAP_REMOTE"] = url
        _publish_then_read(b, rec, rep, tmp)


@contextmanager
def _workers(b: Bench, where: Path) -> Iterator[None]:
    """A fresh BuildGrid execution server with b.workers loopback workers for b's clang, as b's LTOWRAP_REMOTE."""
    clang = b.config.env["LTOWRAP_CLANG"]
    toolchain = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0].strip()
    with _reapi().exec_server(where, workers=b.workers, toolchains=[toolchain]) as server:
        b.env["LTOWRAP_REMOTE"] = server.url
        yield


def scenarios_remote_exec(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """Execution on the loopback workers (--workers): cold build, link alone served from the server's cache, link alone cold."""
    main = b.project.main_binary
    with _workers(b, tmp / "bgd"):
        log = tmp / "cold-build.jsonl"
        rec.add("remote-exec: cold build", rep, b.build(log=log), log, main)
        _drop_local_objects(b)
        log = tmp / "link-alone-hits.jsonl"
        rec.add("remote-exec: link alone, server cache hits", rep, b.link_alone(log=log), log, main)
    with _workers(b, tmp / "bgd2"):
        _drop_local_objects(b)
        log = tmp / "link-alone-cold.jsonl"
        rec.add("remote-exec: cold link alone", rep, b.link_alone(log=log), log, main)


def scenarios_hybrid(b: Bench, rec: Recorder, rep: int, tmp: Path) -> None:
    """The local slots and the loopback workers together: a cold build, then a cold link alone
    (each on a fresh server, so no job is answered from its cache)."""
    main = b.project.main_binary
    with _workers(b, tmp / "bgd"):
        log = tmp / "cold-build.jsonl"
        rec.add("hybrid: cold build", rep, b.build(log=log), log, main)
    with _workers(b, tmp / "bgd2"):
        _drop_local_objects(b)
        log = tmp / "link-alone-cold.jsonl"
        rec.add("hybrid: cold link alone", rep, b.link_alone(log=log), log, main)


SCENARIOS = {"plain": scenarios_plain, "passthrough": scenarios_plain, "plain-default-ld": scenarios_plain,
             "passthrough-default-ld": scenarios_plain, "thin": scenarios_lld,
             "thin-cache": scenarios_thin_cache, "dtlto": scenarios_lld, "dtlto-ltowrap": scenarios_dtlto_ltowrap,
             "ltowrap": scenarios_ltowrap, "ltowrap-nomemo": scenarios_ltowrap,
             "thin-cache-ccache": scenarios_ccache, "ltowrap-ccache": scenarios_ccache, "remote-cache": scenarios_remote_cache,
             "remote-busy": scenarios_remote_busy, "remote-exec": scenarios_remote_exec, "hybrid": scenarios_hybrid}


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    baselines: tuple[str, ...] = ()  # rows this one is compared with (ratios of medians)


THIN = "thin: full build"
THIN_LINK = "thin: link alone"
BUILD_ROWS = [
    Row("plain: full build", "non-LTO -O2 (floor)", (THIN,)),
    Row("passthrough: full build", "non-LTO, CC=ltowrap-clang", (THIN,)),
    Row("plain-default-ld: full build", "non-LTO -O2, default linker", (THIN, "plain-default-ld: full build")),
    Row("passthrough-default-ld: full build", "non-LTO, CC=ltowrap-clang, default linker",
        (THIN, "plain-default-ld: full build")),
    Row(THIN, "in-process ThinLTO", (THIN,)),
    Row("thin-cache: cold build", "in-process + cache-dir, cold", (THIN,)),
    Row("dtlto: full build", "DTLTO (local distributor)", (THIN,)),
    Row("dtlto-ltowrap: full build", "DTLTO, ltowrap-distributor, cold cache", (THIN,)),
    Row("ltowrap: cold build", "ltowrap, cold cache", (THIN,)),
    Row("thin-cache: warm relink", "in-process + cache-dir, warm relink", (THIN, "thin-cache: warm relink")),
    Row("ltowrap: warm relink", "ltowrap, warm relink", (THIN, "thin-cache: warm relink")),
    Row("ltowrap-nomemo: warm relink", "ltowrap, memo off, warm relink", (THIN, "thin-cache: warm relink")),
    Row("thin-cache: one-file edit", "in-process + cache-dir, one-file edit", (THIN, "thin-cache: one-file edit")),
    Row("ltowrap: one-file edit", "ltowrap, one-file edit", (THIN, "thin-cache: one-file edit")),
    Row("ltowrap: clean rebuild", "ltowrap, clean rebuild, warm cache", (THIN,)),
    Row("ltowrap-nomemo: clean rebuild", "ltowrap, memo off, clean rebuild, warm cache", (THIN,)),
    Row("thin-cache-ccache: clean rebuild", "ccache + in-process + cache-dir, clean rebuild, warm",
        (THIN, "thin-cache-ccache: clean rebuild")),
    Row("ltowrap-ccache: clean rebuild", "ccache + ltowrap, clean rebuild, warm", (THIN, "thin-cache-ccache: clean rebuild")),
]
LINK_ROWS = [
    Row("plain: link alone", "non-LTO -O2 (floor)", (THIN_LINK,)),
    Row("passthrough: link alone", "non-LTO, CC=ltowrap-clang", (THIN_LINK,)),
    Row("plain-default-ld: link alone", "non-LTO -O2, default linker", (THIN_LINK, "plain-default-ld: link alone")),
    Row("passthrough-default-ld: link alone", "non-LTO, CC=ltowrap-clang, default linker",
        (THIN_LINK, "plain-default-ld: link alone")),
    Row(THIN_LINK, "in-process ThinLTO", (THIN_LINK,)),
    Row("thin-cache: cold link alone", "in-process + cache-dir, cold", (THIN_LINK,)),
    Row("dtlto: link alone", "DTLTO (local distributor)", (THIN_LINK,)),
    Row("ltowrap: cold link alone", "ltowrap, cold cache", (THIN_LINK,)),
    Row("ltowrap: cold build", "ltowrap, cold, in build (log)", (THIN_LINK,)),
    Row("thin-cache: warm link alone", "in-process + cache-dir, warm", (THIN_LINK, "thin-cache: warm link alone")),
    Row("ltowrap: warm link alone", "ltowrap, warm", (THIN_LINK, "thin-cache: warm link alone")),
    Row("ltowrap-nomemo: warm link alone", "ltowrap, memo off, warm", (THIN_LINK, "thin-cache: warm link alone")),
    Row("thin-cache: warm link command", "in-process + cache-dir, warm, link line without make",
        (THIN_LINK, "thin-cache: warm link command")),
    Row("ltowrap: warm link command", "ltowrap, warm, link line without make", (THIN_LINK, "thin-cache: warm link command")),
    Row("ltowrap-nomemo: warm link command", "ltowrap, memo off, warm, link line without make",
        (THIN_LINK, "thin-cache: warm link command")),
    Row("dtlto-ltowrap: warm link alone", "DTLTO, ltowrap-distributor, warm", (THIN_LINK, "thin-cache: warm link alone")),
    Row("ltowrap: warm relink", "ltowrap, warm, in build (log)", (THIN_LINK, "thin-cache: warm link alone")),
    Row("ltowrap-nomemo: warm relink", "ltowrap, memo off, warm, in build (log)",
        (THIN_LINK, "thin-cache: warm link alone")),
    Row("ltowrap: one-file edit", "ltowrap, one-file edit, in build (log)", (THIN_LINK,)),
    Row("ltowrap: clean rebuild", "ltowrap, clean rebuild, in build (log)", (THIN_LINK,)),
]
IN_BUILD = {f"{c}: {label}" for c in ("ltowrap", "ltowrap-nomemo")
            for label in ("cold build", "warm relink", "one-file edit", "clean rebuild")}
# Remote rows -> the local ltowrap row each is compared with (same scenario, no remote; both with the memo off).
REMOTE_ROWS = [
    ("remote-cache: cold build", "build", "ltowrap-nomemo: cold build", "publishes every object"),
    ("remote-cache: clean rebuild, new machine", "build", "ltowrap-nomemo: clean rebuild", "empty local cache; local: warm"),
    ("remote-busy: cold build", "build", "ltowrap-nomemo: cold build", "server answers 2 requests at once"),
    ("remote-busy: clean rebuild, new machine", "build", "ltowrap-nomemo: clean rebuild",
     "server answers 2 requests at once; local: warm"),
    ("remote-exec: cold build", "build", "ltowrap-nomemo: cold build", "every backend on the loopback workers (--workers)"),
    ("remote-cache: link alone, remote hits", "link", "ltowrap-nomemo: warm link alone", "local: local cache hits"),
    ("remote-exec: link alone, server cache hits", "link", "ltowrap-nomemo: warm link alone", "local: local cache hits"),
    ("remote-exec: cold link alone", "link", "ltowrap-nomemo: cold link alone", "local: compiled here"),
    ("hybrid: cold build", "build", "ltowrap-nomemo: cold build", "local slots + loopback workers (--workers)"),
    ("hybrid: cold link alone", "link", "ltowrap-nomemo: cold link alone", "local slots + loopback workers (--workers)"),
]


def median_of(samples: list[Sample], key: str, get: Callable[[Sample], float | None]) -> float | None:
    values = [v for s in samples if s.row == key and (v := get(s)) is not None]
    return statistics.median(values) if values else None


def link_seconds(s: Sample) -> float | None:
    """A link row's time: the LTOWRAP_LOG record inside a build, else the wall time of `make <binary>`."""
    if s.row in IN_BUILD:
        return s.ltowrap["seconds"] if s.ltowrap else None
    return s.run.wall


def phases(samples: list[Sample], key: str) -> str:
    def phase(name: str) -> Callable[[Sample], float | None]:
        return lambda s: s.ltowrap["phases"].get(name) if s.ltowrap and s.ltowrap["phases"] else None

    phase_names = (ltowrap_log.Phase.THIN_LINK, ltowrap_log.Phase.BACKENDS, ltowrap_log.Phase.FINAL_LINK)
    meds = [median_of(samples, key, phase(p)) for p in phase_names]
    if all(m is None for m in meds):
        return ""
    first = next((s.ltowrap for s in samples if s.row == key and s.ltowrap), None)
    counts = f" ({first['backend_compiles']} compiled, {first['backend_hits']} hits)" if first else ""
    return " / ".join(f"{m:.2f}" if m is not None else "-" for m in meds) + counts


def ratio_cells(value: float | None, medians: dict[str, float | None], row: Row, width: int) -> list[str]:
    cells = []
    for i in range(width):
        base = medians.get(row.baselines[i]) if i < len(row.baselines) else None
        cells.append(f"{value / base:.2f}x" if value is not None and base else "")
    return cells


def rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def tables(samples: list[Sample]) -> tuple[str, dict]:
    """The markdown tables and the medians behind them."""
    keys = {s.row for s in samples}
    build_med = {r.key: median_of(samples, r.key, lambda s: s.run.wall) for r in BUILD_ROWS}
    build_cpu = {r.key: median_of(samples, r.key, lambda s: s.run.cpu) for r in BUILD_ROWS}
    link_med = {r.key: median_of(samples, r.key, link_seconds) for r in LINK_ROWS}
    out = [f"### Whole build, `make -j{MAKE_JOBS}` (`ninja -j{MAKE_JOBS}` for a CMake project) (medians)", "",
           "Backend compiles: per repetition, over all links of the make (ltowrap: LTOWRAP_LOG; "
           "lld cache-dir: new cache entries).", "",
           "| configuration | wall s | user+sys s | peak RSS MiB | wall vs in-process | wall vs cache-dir "
           "| user+sys vs in-process | backend compiles |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
    medians: dict = {"build": {}, "link": {}}
    for r in BUILD_ROWS:
        if r.key not in keys:
            continue
        cpu = build_cpu[r.key]
        rss = median_of(samples, r.key, lambda s: s.run.rss_mib)
        compiles = [s.compiles for s in samples if s.row == r.key and s.compiles is not None]
        out.append("| " + " | ".join([r.label, fmt(build_med[r.key]), fmt(cpu), fmt(rss, 0),
                                      *ratio_cells(build_med[r.key], build_med, r, 2),
                                      *ratio_cells(cpu, build_cpu, r, 1),
                                      " ".join(map(str, compiles))]) + " |")
        medians["build"][r.key] = {"wall": rounded(build_med[r.key]), "cpu": rounded(cpu), "rss_mib": rounded(rss),
                                   "backend_compiles": compiles}
    out += ["", "### Link of the main binary (medians)", "",
            "Alone: the binary deleted and `make` rerun, wall time, nothing else running. In build (log): "
            "the LTOWRAP_LOG record (ld.lld wrapper start..end) inside the build, beside the other link.", "",
            "| configuration | s | user+sys s | peak RSS MiB | vs in-process | vs cache-dir "
            "| ltowrap thin-link / backends / final s |",
            "|---|---:|---:|---:|---:|---:|---|"]
    for r in LINK_ROWS:
        if r.key not in keys:
            continue
        alone = r.key not in IN_BUILD
        cpu = median_of(samples, r.key, lambda s: s.run.cpu) if alone else None
        rss = median_of(samples, r.key, lambda s: s.run.rss_mib) if alone else None
        out.append("| " + " | ".join([r.label, fmt(link_med[r.key]), fmt(cpu), fmt(rss, 0),
                                      *ratio_cells(link_med[r.key], link_med, r, 2), phases(samples, r.key)]) + " |")
        medians["link"][r.key] = {"seconds": rounded(link_med[r.key]), "cpu": rounded(cpu), "rss_mib": rounded(rss)}
    remote, medians["remote"] = remote_table(samples)
    out += remote
    overhead = compile_overhead(samples)
    medians["compile_overhead"] = overhead
    if overhead:
        out += ["", f"### Compile path: non-LTO build, CC=ltowrap-clang vs real clang ({overhead['pairs']} pairs)", "",
                f"median ratio: wall {overhead['wall']:.3f}x, user+sys {overhead['cpu']:.3f}x"]
    return "\n".join(out), medians


def backends(s: Sample) -> int | None:
    """Backend jobs of the main link, however each was served."""
    t = s.ltowrap
    return None if t is None else t["backend_compiles"] + t["backend_hits"] + t["remote_hits"] + t["remote_executed"]


def remote_table(samples: list[Sample]) -> tuple[list[str], dict]:
    """Remote rows against their local counterparts: ratio, and the difference per backend job."""
    keys = {s.row for s in samples}
    rows = [r for r in REMOTE_ROWS if r[0] in keys]
    if not rows:
        return [], {}
    out = ["", "### Remote (REAPI on loopback) vs the same scenario local (medians)", "",
           "Per job: (remote - local) / backend jobs of the main link; builds compare the whole make.", "",
           "| scenario | s | local s | vs local | jobs | per job ms | served | note |",
           "|---|---:|---:|---:|---:|---:|---|---|"]
    medians = {}
    for key, kind, local, note in rows:
        get = (lambda s: s.run.wall) if kind == "build" else link_seconds
        value, base = median_of(samples, key, get), median_of(samples, local, get)
        jobs = median_of(samples, key, backends)
        first = next((s.ltowrap for s in samples if s.row == key and s.ltowrap), None)
        served = (f"{first['remote_executed']} executed, {first['remote_hits']} remote hits, "
                  f"{first['backend_compiles']} local"
                  + (f" ({first['remote_raced']} raced)" if first.get("remote_raced") else "")
                  + (f", {first['remote_retries']} retries" if first.get("remote_retries") else "") if first else "")
        per_job = (value - base) / jobs * 1000 if value is not None and base is not None and jobs else None
        out.append("| " + " | ".join([key, fmt(value), fmt(base), f"{value / base:.2f}x" if value and base else "",
                                      fmt(jobs, 0), fmt(per_job, 1), served, note]) + " |")
        medians[key] = {"seconds": rounded(value), "local": rounded(base), "jobs": jobs, "per_job_ms": rounded(per_job)}
    return out, medians


def compile_overhead(samples: list[Sample]) -> dict | None:
    """Median over (rep, build) pairs of passthrough / plain, for wall and for CPU."""
    pairs = []
    for kind in ("full build", "clean rebuild"):
        by_rep = {s.rep: s for s in samples if s.row == f"plain: {kind}"}
        pairs += [(by_rep[s.rep].run, s.run) for s in samples if s.row == f"passthrough: {kind}" and s.rep in by_rep]
    if not pairs:
        return None
    return {"pairs": len(pairs), "wall": round(statistics.median(w.wall / p.wall for p, w in pairs), 4),
            "cpu": round(statistics.median(w.cpu / p.cpu for p, w in pairs), 4)}


# ---------------------------------------------------------------- main


def machine_info(clang: Path) -> dict:
    def first_line(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()[0]

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "kernel": platform.release(),
            "loadavg_at_start": os.getloadavg(), "clang": first_line([str(clang), "--version"]),
            "lld": first_line([str(clang.parent / "ld.lld"), "--version"]), "make_jobs": MAKE_JOBS,
            "python": platform.python_version(), "ltowrap": ltowrap_source()}


def ltowrap_source() -> dict:
    """Which ltowrap was measured: the scripts used, and the repository state it was installed from."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    return {"scripts": str(SCRIPTS), "head": git("rev-parse", "--short", "HEAD"),
            "modified": git("status", "--porcelain", "--", "ltowrap").splitlines()}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", choices=sorted(PROJECTS), default="lua")
    p.add_argument("--reps", type=int, default=3, help="repetitions (default 3); medians are reported")
    p.add_argument("--jobs", type=int, default=MAKE_JOBS,
                   help="backend parallelism: LTOWRAP_JOBS, --thinlto-jobs, distributor --jobs (default 2)")
    p.add_argument("--workers", type=int, default=2, help="loopback workers of remote-exec and hybrid (default 2)")
    p.add_argument("--llvm", type=Path, default=Path("/usr/lib/llvm-22/bin"), help="LLVM bin dir (needs DTLTO: 22+)")
    p.add_argument("--only", nargs="+", metavar="CONFIG", help="run only these configurations")
    p.add_argument("--remote", action="store_true",
                   help="also remote-cache, remote-busy, remote-exec and hybrid, on BuildGrid on loopback "
                   "(needs Python 3.13, PostgreSQL)")
    p.add_argument("--out", type=Path, default=BENCH / "out", help="where the JSON and .md go (git ignores bench/out)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (trees, caches, logs)")
    return p.parse_args()


def run_reps(a: argparse.Namespace, project: Project, clang: Path, scratch: Path, info: dict,
             rec: Recorder) -> list[dict]:
    """Every repetition: each configuration in a fresh copy of the tree, order rotated per rep."""
    pkg = debsrc.fetch(project.package)
    pristine = pkg.unpack(scratch / "pristine")
    project.prepare(pristine)
    info["source"] = f"{pkg.name} {pkg.version}"
    stats = []
    names = [c.name for c in configs(clang, a.jobs, scratch)
             if (c.name in a.only if a.only else a.remote or c.name not in REMOTE_CONFIGS)]
    for rep in range(a.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:  # no config always first
            work = scratch / f"rep{rep}-{name}"
            work.mkdir()
            config = next(c for c in configs(clang, a.jobs, work) if c.name == name)
            tree = Path(shutil.copytree(pristine, work / "tree", symlinks=True))
            bench = Bench(project, config, tree, clean_env(work) | config.env, work / "make.out", a.workers)
            print(f"rep {rep + 1}/{a.reps} {name}", flush=True)
            result = SCENARIOS[name](bench, rec, rep, work)
            if result:
                stats.append({"rep": rep} | result)
            if not a.keep:
                shutil.rmtree(tree)
    return stats


def main() -> int:
    a = parse_args()
    project = PROJECTS[a.project]
    clang = a.llvm / "clang"
    command = [os.path.relpath(sys.executable), os.path.relpath(sys.argv[0]), *sys.argv[1:]]
    info = machine_info(clang) | {"command": " ".join(command),
                                  "project": project.package, "reps": a.reps, "jobs": a.jobs}
    print(json.dumps(info, indent=1))
    rec = Recorder()
    scratch = Path(tempfile.mkdtemp(prefix="ltowrap-bench-"))
    try:
        stats = run_reps(a, project, clang, scratch, info, rec)
    except BaseException:
        print(f"failed; kept {scratch} (trees, caches, make.out, LTOWRAP_LOG files)", file=sys.stderr)
        raise
    if a.keep:
        print(f"kept {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    info["loadavg_at_end"] = os.getloadavg()
    table, medians = tables(rec.samples)
    report = "\n".join([f"## {info['source']}: {a.reps} reps, jobs {a.jobs}, {info['date']}", "",
                        f"`{info['command']}` on {info['nproc']} CPUs ({info['cpu']}), {info['clang']}, "
                        f"load average {info['loadavg_at_start'][0]:.1f} at start, "
                        f"{info['loadavg_at_end'][0]:.1f} at end", "", table])
    if rec.problems:
        report += "\n\n### ltowrap problems observed\n\n" + "\n".join(f"- {p}" for p in rec.problems)
    print("\n" + report)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    stem.with_suffix(".json").write_text(json.dumps(
        {"machine": info, "medians": medians, "problems": rec.problems, "ltowrap_stats": stats,
         "samples": [asdict(s) for s in rec.samples]}, indent=1) + "\n")
    stem.with_suffix(".md").write_text(report + "\n")
    print(f"\nwrote {stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
