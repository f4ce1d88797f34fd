"""What the test modules share: the toolchains, running ltowrap and reading what it wrote, the
environment it runs in, the processes it starts (from /proc), and waiting for something to happen.

tests/conftest.py holds the fixtures; integration/ imports this module too (its __init__ puts
tests/ on sys.path).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from needs import missing

BIN = Path(sys.executable).parent  # the venv ltowrap is installed in
# Every test that takes `tc` runs on both; dev/setup installs both. One that is missing
# skips visibly here and fails the run in CI (needs.missing), never drops out unseen.
LLVM_VERSIONS = (22, 14)
# Every clang/lld/llvm release Debian bookworm ships (dev/setup installs all six): the tests
# that take `any_tc` (tests/test_versions.py: a small core, the summary format, the gates)
# run on each, and so does lua's fidelity check (integration/test_versions_lua.py, 22's in
# integration/test_fidelity.py); tests/test_ldscript.py takes each ld.lld.
ALL_VERSIONS = (22, 19, 16, 15, 14, 13)


@dataclass(frozen=True)
class Toolchain:
    version: int

    @property
    def bindir(self) -> Path:
        return Path(f"/usr/lib/llvm-{self.version}/bin")

    @property
    def clang(self) -> str:
        return str(self.bindir / "clang")

    @property
    def clangxx(self) -> str:
        return str(self.bindir / "clang++")

    @property
    def lld(self) -> str:
        return str(self.bindir / "ld.lld")

    @property
    def ar(self) -> str:
        return str(self.bindir / "llvm-ar")


def toolchain(version: int) -> Toolchain:
    """clang/lld `version` (Debian's /usr/lib/llvm-N), or needs.missing saying which is not installed."""
    tc = Toolchain(version)
    absent = [p for p in (tc.clang, tc.clangxx, tc.lld, tc.ar) if not Path(p).exists()]
    if absent:
        missing(f"LLVM {version}: {', '.join(absent)}", f"dev/setup installs clang-{version} lld-{version} llvm-{version}")
    return tc


def run(cmd: list[str], cwd: Path | str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


def wrapper(name: str) -> str:
    return str(BIN / name)


def log_lines(tmp_path: Path) -> list[dict]:
    path = tmp_path / "ltowrap.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def links(tmp_path: Path) -> list[dict]:
    return [r for r in log_lines(tmp_path) if r["tool"].startswith("ld.lld")]


def stats_json(env: dict | None = None) -> dict:
    done = subprocess.run([wrapper("ltowrap"), "stats", "--json"], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def refusals(read, data: bytes, seed: int, rounds: int) -> int:
    """Flip 1-4 random bits (past the magic) of `data`, `rounds` times, and call `read` on each
    copy: how many times it raised BadBitcode. Anything else it raises fails the test."""
    import random

    from ltowrap.formats.bitcode import BadBitcode

    rng = random.Random(seed)
    refused = 0
    for _ in range(rounds):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(4, len(damaged))] ^= 1 << rng.randrange(8)
        try:
            read(bytes(damaged))
        except BadBitcode:
            refused += 1
    return refused


# --- a four-module program (main, add, mul, twice) --------------------------------------------------

MAIN_C = """
#include <stdio.h>
int add(int, int);
int mul(int, int);
int twice(int);
static int local(int x) { return x * 3 + 1; }
int main(void) {
    int acc = 0;
    for (int i = 0; i < 100; i++) acc = add(acc, mul(i, twice(local(i)))) % 1000003;
    printf("result %d\\n", acc);
    return 0;
}
"""
ADD_C = "int add(int a, int b) { return a + b; }\nint unused_in_add(int a) { return a * 7; }\n"
MUL_C = "int add(int, int);\nint mul(int a, int b) { int r = 0; for (int i = 0; i < b; i++) r = add(r, a); return r; }\n"
TWICE_C = "int twice(int x) { return 2 * x; }\n"


def sources(d: Path) -> None:
    write(d / "main.c", MAIN_C)
    write(d / "add.c", ADD_C)
    write(d / "mul.c", MUL_C)
    write(d / "twice.c", TWICE_C)


def expected_output(d: Path, tc: Toolchain) -> str:
    ref = d / "ref"
    ref.mkdir(exist_ok=True)
    run([tc.clang, "-O1", "-o", str(ref / "prog"), *(str(d / f) for f in ("main.c", "add.c", "mul.c", "twice.c"))], d)
    return run([str(ref / "prog")], d).stdout


def compile_lto(d: Path, tc: Toolchain, *names: str, flags: tuple[str, ...] = ()) -> None:
    for n in names:
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", *flags, "-c", f"{n}.c", "-o", f"{n}.o"], d,
            env=ltowrap_env(tc))


def prepared(d: Path, tc: Toolchain, flags: tuple[str, ...] = ()) -> str:
    """The four sources compiled to ThinLTO objects; returns what the program should print."""
    sources(d)
    compile_lto(d, tc, "main", "add", "mul", "twice", flags=flags)
    return expected_output(d, tc)


SYSROOT_FILES = {  # what clang's driver needs in a --sysroot for a dynamic C link on Debian x86_64
    "usr/lib/x86_64-linux-gnu": ["Scrt1.o", "crti.o", "crtn.o", "libc.so", "libc.so.6", "libc_nonshared.a",
                                 "libgcc_s.so.1"],
    "lib64": ["/lib64/ld-linux-x86-64.so.2"],
    "usr/lib/gcc/x86_64-linux-gnu/12": ["crtbegin.o", "crtend.o", "crtbeginS.o", "crtendS.o", "libgcc.a", "libgcc_s.so"],
}


def sysroot(d: Path) -> Path | None:
    root = d / "sysroot"
    for sub, names in SYSROOT_FILES.items():
        (root / sub).mkdir(parents=True)
        for name in names:
            src = Path(name) if name.startswith("/") else Path("/") / sub / name
            if not src.exists():
                return None
            shutil.copy(src, root / sub / src.name)
    (root / "lib").symlink_to("usr/lib")
    return root


# --- machines of a remote service ------------------------------------------------------------------

def machine(tmp_path: Path, name: str, tc: Toolchain, url: str, **extra: str) -> dict:
    """The environment of one 'machine': its own cache directory and log."""
    return ltowrap_env(tc, LTOWRAP_CACHE_DIR=str(tmp_path / name), LTOWRAP_LOG=str(tmp_path / f"{name}.log"),
                       LTOWRAP_REMOTE=url, **extra)


def links_of(log: Path) -> list[dict]:
    """The linker records of the LTOWRAP_LOG `log`."""
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["tool"].startswith("ld.lld")]


def toolchain_line(tc: Toolchain) -> str:
    """What ltowrap puts in each Command as LTOWRAP_TOOLCHAIN: clang's version line."""
    return run([tc.clang, "--version"], ".").stdout.splitlines()[0].strip()


def many_modules(d: Path, tc: Toolchain, n: int) -> list[str]:
    """n modules of different sizes (so longest-first has an order) and a main that calls
    them all, compiled to ThinLTO objects; returns the object names, main's first."""
    calls = []
    for i in range(n):
        body = "".join(f"    for (int j{k} = 0; j{k} < x % {k + 3}; j{k}++) x = x * {2 * k + 3} + {i};\n"
                       for k in range(1 + i % 6))
        write(d / f"m{i}.c", f"int f{i}(int x) {{\n{body}    return x;\n}}\n")
        calls.append(f"acc = (acc + f{i}(acc + {i})) % 1000003;")
    write(d / "main.c", "#include <stdio.h>\n" + "".join(f"int f{i}(int);\n" for i in range(n))
          + "int main(void) {\n    int acc = 1;\n    " + "\n    ".join(calls)
          + '\n    printf("%d\\n", acc);\n    return 0;\n}\n')
    objects = ["main.o", *(f"m{i}.o" for i in range(n))]
    for o in objects:
        run([tc.clang, "-O2", "-flto=thin", "-c", o[:-2] + ".c", "-o", o], d)
    return objects


def link_all(d: Path, env: dict, objects: list[str], out: str) -> subprocess.CompletedProcess[str]:
    return run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", "-o", out, *objects], d, env=env)


# --- programs to link, and make's jobserver -------------------------------------------------------

HEAVY = """
static double poly{k}(double x, int n) {{ double s = 0; for (int i = 0; i < n; i++) s = s * x + (i ^ {k}); return s; }}
double work{k}(double x) {{ double t = 0; for (int j = 1; j < 40; j++) t += poly{k}(x / j, j + {k}); return t; }}
"""


def make_program(d: Path, name: str, modules: int) -> list[str]:
    """main and `modules` heavy modules, sources named after `name`; the object names."""
    objs = []
    decls = "".join(f"double work{k}(double);\n" for k in range(modules))
    calls = " + ".join(f"work{k}(x)" for k in range(modules))
    write(d / f"{name}_main.c", f'#include <stdio.h>\n{decls}int main(void){{ double x = 1.5; printf("%.3f\\n", {calls}); return 0; }}\n')
    objs.append(f"{name}_main.o")
    for k in range(modules):
        write(d / f"{name}_m{k}.c", HEAVY.format(k=k))
        objs.append(f"{name}_m{k}.o")
    return objs


def compile_all(d: Path, clang: str, *extra: str) -> None:
    """Every .c in `d` to a ThinLTO object beside it."""
    for src in sorted(d.glob("*.c")):
        run([clang, "-O2", "-flto=thin", *extra, "-c", src.name], d)


def max_overlap(records: list[dict]) -> int:
    """The most backend compiles of these link records that ran at once (from their start/end times)."""
    events = []
    for r in records:
        for b in r["backends"]:
            if not b["cached"]:
                events += [(b["start"], 1), (b["end"], -1)]
    level = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        level += delta
        peak = max(peak, level)
    return peak


class TokenPool:
    """A jobserver of our own, fifo or pipe style, that can count its tokens afterwards."""

    def __init__(self, style: str, tokens: int, tmp: Path) -> None:
        self.style = style
        self.tokens = tokens
        self.pass_fds: tuple[int, ...] = ()
        if style == "fifo":
            self.path = tmp / "jobserver.fifo"
            os.mkfifo(self.path)
            self.r = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            self.w = os.open(self.path, os.O_WRONLY)
            self.makeflags = f" -j{tokens + 1} --jobserver-auth=fifo:{self.path}"
        else:
            self.r, self.w = os.pipe()
            os.set_blocking(self.r, False)
            self.pass_fds = (self.r, self.w)
            self.makeflags = f" -j{tokens + 1} --jobserver-auth={self.r},{self.w}"
        os.write(self.w, b"+" * tokens)

    def count(self) -> int:
        n = 0
        while True:
            try:
                chunk = os.read(self.r, 1024)
            except BlockingIOError:
                return n
            if not chunk:
                return n
            n += len(chunk)


DTLTO_SRC = {
    "main.c": '#include <stdio.h>\nint f(int); int g(int);\nint main(void){ printf("%d\\n", f(3) + g(4)); return 0; }\n',
    "f.c": "int g(int); int f(int x){ return g(x) * 2; }\n",
    "g.c": "int g(int x){ return x + 40; }\n",
}


def dtlto_build(project: Path, tc22: Toolchain, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """main.o and libfg.a (f.o, g.o) linked by lld's DTLTO with ltowrap-distributor into prog."""
    for name, text in DTLTO_SRC.items():
        write(project / name, text)
    for name in DTLTO_SRC:
        run([tc22.clang, "-O2", "-flto=thin", "-c", name], project)
    run([tc22.ar, "rcs", "libfg.a", "f.o", "g.o"], project)
    return run([tc22.clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={wrapper('ltowrap-distributor')}",
                "main.o", "libfg.a", "-o", "prog", *extra], project, check=check)


# --- the environment ltowrap runs in ----------------------------------------------------------

# The caller's settings a test must not inherit: ltowrap's own (LTOWRAP_*), ccache's (CCACHE_*),
# make's jobserver and recursion, and what a build system takes from the environment.
CALLER_PREFIXES = ("LTOWRAP_", "CCACHE_")
CALLER_SETTINGS = frozenset({
    "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "LIBS",
    "AR", "RANLIB", "CC_LD", "CXX_LD", "NINJA_STATUS", "CMAKE_GENERATOR", "CMAKE_BUILD_PARALLEL_LEVEL",
    "CTEST_PARALLEL_LEVEL"})


def callers_setting(name: str) -> bool:
    return name.startswith(CALLER_PREFIXES) or name in CALLER_SETTINGS


def isolation(tmp: Path) -> dict[str, str]:
    """A cache, log and (absent) config file of its own under `tmp`: never the user's. Every link
    with bitcode is distributed (LTOWRAP_SMALL_LINK=0): the suite's programs are small on purpose,
    to exercise distribution; tests of small links (test_small_link.py) set it themselves."""
    return {"LTOWRAP_CACHE_DIR": str(tmp / "cache"), "LTOWRAP_LOG": str(tmp / "ltowrap.log"),
            "LTOWRAP_CONFIG": str(tmp / "no-config.toml"), "XDG_CACHE_HOME": str(tmp / "xdg-cache"),
            "LTOWRAP_SMALL_LINK": "0"}


def ltowrap_env(tc: Toolchain | None = None, **settings: str | None) -> dict[str, str]:
    """The environment to run ltowrap in: this process's (under pytest, conftest.isolated_env has
    given the test its own cache, log and config), LTOWRAP_CLANG naming `tc`'s clang when
    given, and `settings` over both (one given as None is unset)."""
    env = dict(os.environ)
    if tc is not None:
        env["LTOWRAP_CLANG"] = tc.clang
    return _over(env, settings)


def clean_env(tmp: Path | None = None, **settings: str | None) -> dict[str, str]:
    """The caller's environment without its ltowrap, ccache, make or build settings
    (callers_setting); with `tmp`, ltowrap's isolation under it; `settings` over both (one given
    as None is unset). For what runs outside pytest's conftest (integration/) or must not
    inherit the test's own settings."""
    env = {k: v for k, v in os.environ.items() if not callers_setting(k)}
    if tmp is not None:
        env.update(isolation(tmp))
    return _over(env, settings)


def _over(env: dict[str, str], settings: dict[str, str | None]) -> dict[str, str]:
    for name, value in settings.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


# --- processes, from /proc ----------------------------------------------------------------------


def cmdline(pid: int) -> list[bytes]:
    """Its argv ([] once it is gone, or a zombie)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def environ(pid: int) -> bytes:
    """Its environment as /proc has it (b"" once it is gone, or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command's name: state, parent, ... ([] once gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Running or stopped: not gone, and not a zombie no one has reaped yet."""
    state = _stat(pid)
    return bool(state) and state[0] != "Z"


def parent_pid(pid: int) -> int:
    state = _stat(pid)
    return int(state[1]) if state else 0


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def fork_server(pid: int) -> bool:
    """Is it a link's fork server (jobs/forkserver.py), the parent of the backends it forks?"""
    return any(a.startswith(b"--ltowrap-fork-server=") for a in cmdline(pid)[1:2])


def started(pid: int) -> list[int]:
    """The processes `pid` started: its children, a fork server's counted as its own."""
    return [p for c in children(pid) for p in (children(c) if fork_server(c) else [c])]


def started_by(pid: int) -> int:
    """The process that started `pid`: its parent, or a fork server's parent for a compile it forked."""
    parent = parent_pid(pid)
    return parent_pid(parent) if fork_server(parent) else parent


def own_mounts() -> list[str]:
    """The prefix that runs a command in a mount namespace of its own (unshare; no root needed).

    Its mounts vanish with it, so a killed test leaves none behind.
    """
    ns = ["unshare", "--mount", *([] if os.geteuid() == 0 else ["--map-root-user"])]
    if not have("unshare") or subprocess.run([*ns, "true"], capture_output=True).returncode != 0:
        missing("a mount namespace of its own (unshare --mount, util-linux)",
                "util-linux's unshare, and root or unprivileged user namespaces")
    return ns


def open_files(pid: int) -> set[str]:
    """What its file descriptors point at (empty once it is gone)."""
    try:
        return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return set()


def pids(argv: Callable[[list[bytes]], bool], env_has: bytes | None = None) -> list[int]:
    """The processes other than this one whose argv `argv` accepts and, with `env_has`, whose
    environment holds those bytes (a test's cache directory tells its processes from others')."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if argv(cmdline(pid)) and (env_has is None or env_has in environ(pid)):
            found.append(pid)
    return found


def backend_pids(marker: bytes) -> list[int]:
    """Backend compiles ltowrap started for the test whose cache directory is `marker`."""
    return pids(lambda argv: b"-fthinlto-index" in b" ".join(argv), marker)


def linker_pids(marker: bytes) -> list[int]:
    """ltowrap's link processes of this test: the clang entry itself (`python -S ltowrap-entry`), or
    (when the driver runs it) ltowrap-ld.lld."""
    return pids(lambda argv: any(a.endswith((b"ltowrap-ld.lld", b"ltowrap-entry")) for a in argv[1:3]), marker)


def distributor_pids(marker: bytes) -> list[int]:
    """ltowrap-distributor processes of this test (not the clang and lld that name it, nor a child
    it is starting, which shows its command line until it execs)."""
    found = pids(lambda argv: any(a.endswith(b"/ltowrap-distributor") for a in argv[:2]), marker)
    return [p for p in found if parent_pid(p) not in found]


# --- waiting ------------------------------------------------------------------------------------

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, running: Sequence[subprocess.Popen] = (),
               every: float = 0.01) -> T:
    """Poll `predicate` until it returns something true, and return that. Fail saying `what` was
    waited for in vain if `timeout` seconds pass first, or one of the `running` processes ends."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        for p in running:
            assert p.poll() is None, f"{what}: {p.args!r} ended first, status {p.returncode}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(every)
    return value


def relative_digests(cwd: Path):
    """ltowrap's module digests (cachekey.ModuleDigests: interfaces, sample profiles) for the
    paths of a link made by hand in its own directory, which its shards name relative to it."""
    from ltowrap import cachekey

    class Relative(cachekey.ModuleDigests):
        def __call__(self, path: str) -> str:
            return super().__call__(str(cwd / path))

        def interface(self, path: str) -> str:
            return super().interface(str(cwd / path))

        def sample_profiled(self, path: str) -> bool:
            return super().sample_profiled(str(cwd / path))

    return Relative()


# --- a program whose backend tasks are numbered: a link's side outputs (split DWARF, records) ---

# The largest module last and one in an archive: lld numbers its backend tasks in link order
# (not by size), an archive member where lld extracts it.
NUMBERED_SOURCES = {
    "main.c": "int add(int, int); int big(int); int mem(int);\n"
              "int main(int argc, char **argv) { int s = 0; for (int i = 0; i < argc; i++) s += add(i, 2);"
              " return s + big(argc) + mem(argc); }\n",
    "add.c": "int add(int a, int b) { return a + b; }\n",
    "mem.c": "struct P { int x, y; };\nint mem(int x) { struct P p = {x, x + 1}; return p.x * p.y; }\n",
    "big.c": "".join(f"static int f{i}(int x) {{ return x * {i} + (x >> {i % 7}); }}\n" for i in range(40))
             + "int big(int x) { int s = 0;" + "".join(f" s += f{i}(x + s);" for i in range(40)) + " return s; }\n",
}
NUMBERED_LINK = ["main.o", "add.o", "libmem.a", "big.o"]


def build_numbered(d: Path, tc: Toolchain, flags: list[str]) -> list[str]:
    """NUMBERED_SOURCES compiled with `flags` (mem.o into libmem.a); the link's inputs."""
    for name, text in NUMBERED_SOURCES.items():
        write(d / name, text)
        run([tc.clang, *flags, "-c", name, "-o", name[:-2] + ".o"], d)
    run([tc.ar, "rcs", "libmem.a", "mem.o"], d)
    return NUMBERED_LINK


# --- what a terminal shows, and split DWARF ---------------------------------------------------------


def on_terminal(argv: list[str], cwd: Path | str, env: dict | None = None,
                stdout: int | None = None) -> tuple[int, bytes]:
    """Run argv with its stderr (and its stdout, unless `stdout` says where else) on a terminal (a
    pty): its exit status and the bytes the terminal showed."""
    import pty
    import select

    primary, secondary = pty.openpty()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=secondary if stdout is None else stdout, stderr=secondary)
    os.close(secondary)
    seen = b""
    while select.select([primary], [], [], 60)[0]:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    return child.wait(60), seen


def check_split_dwarf(llvm_bin: Path, where: Path, prog: str) -> None:
    """prog's skeleton units each name a .dwo that exists, under prog-dwo/ as in-process lld puts
    them; llvm-dwarfdump --verify passes on prog with them, and llvm-dwp packs them."""
    dwarfdump = str(llvm_bin / "llvm-dwarfdump")
    text = run([dwarfdump, "--debug-info", prog], where).stdout
    names = re.findall(r'DW_AT_dwo_name\s+\("([^"]*)"\)', text)
    assert names and all((where / n).is_file() and n.startswith(f"{prog}-dwo/") for n in names), (prog, names[:3])
    verify = run([dwarfdump, "--verify", prog], where, check=False).stdout
    assert "No errors." in verify, verify[-2000:]
    run([str(llvm_bin / "llvm-dwp"), "-e", prog, "-o", f"{prog}.dwp"], where)
