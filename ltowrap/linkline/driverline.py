"""The clang driver's link line (`clang -###`), cached, so a driver link starts no second clang.

Asking the driver costs a clang start on every link. Its answer depends on its
argv, the working directory, the driver itself (its files, and the config files beside it:
toolchain.compiler_files), the environment variables it reads (toolchain.DRIVER_ENV), the
config files it loads, and what it finds, or does not find, on disk: crt files, the gcc
installation, the runtime directories. So the entry (d/, cachekey.driver_line_key) is keyed
by the first ones and holds the rest as `Checks`, which a lookup makes again:
- the contents of every config file the driver loaded (`Configuration file:` in its
  output, and what those include);
- the stat identity of every file and directory the line names that the user did not,
  of all their ancestors, and of every directory the driver searches (searched_paths):
  a file that appears in one of them changes its directory, so a libc, gcc or compiler
  upgrade, a crt file in a -B directory or a new gcc version directory misses.
tests/test_driverline.py holds the model to what the driver really probes (strace).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import cachekey, driverargs, proc, stats, toolchain
from ..cache import DRIVER_LINES, Cache

# Files the driver reads to tell the distribution (clang's Distro.cpp, Gentoo's gcc config).
# Red Hat's devtoolsets are gcc installations under /opt/rh.
DISTRO_FILES = ("/etc/os-release", "/usr/lib/os-release", "/etc/lsb-release", "/etc/debian_version",
                "/etc/redhat-release", "/etc/SuSE-release", "/etc/gentoo-release", "/etc/env.d", "/etc/env.d/gcc",
                "/opt", "/opt/rh")
# Library directories under a root where the driver looks for gcc installations (Gnu.cpp).
LIB_DIRS = ("lib", "lib64", "lib32", "libx32")
GCC_DIRS = ("gcc", "gcc-cross")
CONFIG_MARKER = "Configuration file: "


@dataclass(frozen=True)
class Checks:
    """What a driver line depends on beyond its key, as it was when the line was found."""

    stamped: tuple[str, ...]  # files and directories: their stat identity (or absence)
    stamp: str  # cachekey.stamp(stamped) then
    configs: tuple[tuple[str, str], ...]  # config files the driver loaded, with the digest of their contents

    def hold(self) -> bool:
        """Is all of it as it was?"""
        return cachekey.stamp(self.stamped) == self.stamp and all(cachekey.file_digest(p) == d
                                                                     for p, d in self.configs)

    def to_data(self) -> dict:
        return {"stamped": list(self.stamped), "stamp": self.stamp, "configs": [list(c) for c in self.configs]}

    @classmethod
    def from_data(cls, data: dict) -> Checks:
        return cls(tuple(str(p) for p in data["stamped"]), str(data["stamp"]),
                   tuple((str(p), str(d)) for p, d in data["configs"]))


@dataclass(frozen=True)
class Line:
    """The ld.lld command the driver would run, with its Checks."""

    argv: list[str]  # the ld.lld command
    checks: Checks


def linker_command(real: list[str], args: list[str], real_ld: str, cache_dir: str) -> Line | None:
    """The ld.lld command the driver would run, from the cache or from `clang -###`.

    A command that names a response file is asked of the driver every time: the key would
    not see the file's contents.
    """
    if driverargs.has_response_file(args):
        found = run_driver(real, args, real_ld)
        return None if found is None else Line(found[0], checks_of(found[0], args, real[0], found[1]))
    counts = stats.Stats()
    cache = Cache(cache_dir, counts)
    driver = cachekey.stamp(toolchain.compiler_files(real[0]))
    key = cachekey.driver_line_key(driver, real + args, os.getcwd(), toolchain.driver_env())
    line = _cached(cache, key)
    if line is not None:
        counts.add("driver_line_hits")
    else:
        counts.add("driver_line_misses")
        found = run_driver(real, args, real_ld)
        if found is not None:
            line = Line(found[0], checks_of(found[0], args, real[0], found[1]))
            cache.put_data(DRIVER_LINES, key, {"argv": line.argv, "checks": line.checks.to_data()})
    cache.close()
    stats.flush(cache_dir, counts)
    return line


def _cached(cache: Cache, key: str) -> Line | None:
    line = cache.get_data(DRIVER_LINES, key, lambda data: Line([str(a) for a in data["argv"]],
                                                                Checks.from_data(data["checks"])))
    return line if line is not None and line.checks.hold() else None


def checks_of(line: list[str], given: list[str], driver: str, configs: list[str]) -> Checks:
    stamped = tuple(searched_paths(line, given, driver))
    loaded = toolchain.config_closure(configs)
    return Checks(stamped, cachekey.stamp(stamped), tuple((p, cachekey.file_digest(p)) for p in loaded))


def searched_paths(line: list[str], given: list[str], driver: str) -> list[str]:
    """The files and directories whose change or appearance can change the driver's link line.

    - what the line names that the user's arguments do not (crt files, -L directories), and
      every ancestor of each up to the root it was found under (the sysroot, a -B or
      --gcc-toolchain directory, or /): a new gcc version or triple directory appears in one;
    - the driver's own directories (config files, programs, `bin/..` prefixes) and its
      runtime directories (lib/clang/N/lib/...: crt files found there come first);
    - where it looks for gcc installations, under the root (the sysroot, or /) and
      --gcc-toolchain, and every directory directly inside those (one per triple);
    - the directories the user's own arguments make it search (-B, --sysroot,
      --gcc-toolchain, --gcc-install-dir) and COMPILER_PATH / LIBRARY_PATH;
    - the distribution's release files.
    """
    mine = set(given)
    out: dict[str, None] = {}

    def add(path: str) -> None:
        if path:
            out.setdefault(os.path.normpath(path))

    options = _search_options(given)
    sysroot = options.get("--sysroot", [""])[-1]
    tops = [os.path.normpath(t) for t in (sysroot, *options.get("--gcc-toolchain", []), *options.get("-B", [])) if t]

    def ancestors(path: str) -> None:
        path = os.path.normpath(path)
        top = max((t for t in tops if path.startswith(t.rstrip("/") + "/")), key=len, default="/")
        while True:
            add(path)
            parent = os.path.dirname(path)
            if path == top or parent == path:
                return
            path = parent

    def with_subdirs(path: str) -> None:
        add(path)
        try:
            with os.scandir(path) as it:
                for e in it:
                    if e.is_dir():
                        add(e.path)
        except OSError:
            pass

    for arg in line[1:]:
        if arg in mine:
            continue
        path = arg[2:] if arg.startswith("-L") else arg
        if path.startswith("/"):
            ancestors(path)
            if os.path.basename(path).startswith("crtbegin"):  # multilib directories beside it (32, 64, x32)
                with_subdirs(os.path.dirname(path))
    ancestors(line[0])
    bindir = os.path.dirname(os.path.realpath(driver))
    prefix = os.path.dirname(bindir)
    ancestors(bindir)
    for d in LIB_DIRS:
        add(os.path.join(prefix, d))
    try:
        resource_dirs = [os.path.join(prefix, "lib", "clang", n) for n in os.listdir(os.path.join(prefix, "lib", "clang"))]
    except OSError:
        resource_dirs = []
    for r in resource_dirs:
        add(r)
        with_subdirs(os.path.join(r, "lib"))
    roots = [sysroot or "/", os.path.join(sysroot or "/", "usr"), prefix, *options.get("--gcc-toolchain", [])]
    for root in roots:
        add(root)
        for lib in LIB_DIRS:
            add(os.path.join(root, lib))
            for gcc in GCC_DIRS:
                with_subdirs(os.path.join(root, lib, gcc))
    for d in options.get("--gcc-install-dir", []):
        with_subdirs(d)
    for b in options.get("-B", []):
        add(b)
        add(os.path.dirname(b.rstrip("/")) if not b.endswith("/") else b)
    for var in ("COMPILER_PATH", "LIBRARY_PATH"):
        for d in os.environ.get(var, "").split(os.pathsep):
            add(d)
    for f in DISTRO_FILES:
        add(f)
        if sysroot:
            add(sysroot + f)
    return list(out)


def _search_options(args: list[str]) -> dict[str, list[str]]:
    """The values of the driver options that make it search directories, by canonical name."""
    spellings = {"-B": "-B", "--prefix": "-B", "--sysroot": "--sysroot", "--gcc-toolchain": "--gcc-toolchain",
                 "--gcc-install-dir": "--gcc-install-dir"}
    found: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if eq and name in spellings:
            found.setdefault(spellings[name], []).append(value)
        elif a in spellings and i + 1 < len(args):
            found.setdefault(spellings[a], []).append(args[i + 1])
            i += 1
        elif a.startswith("-B") and len(a) > 2:
            found.setdefault("-B", []).append(a[2:])
        i += 1
    return found


def run_driver(real: list[str], args: list[str], real_ld: str) -> tuple[list[str], list[str]] | None:
    """The ld.lld command the driver would run (from `clang -###`), if that is all it would
    run, and the config files it loaded.

    -### prints one line per job, each argument in double quotes with `"`, `\\` and `$`
    escaped by a backslash. Anything else (a compile job too, a driver error) is None,
    and the driver is run for real instead.
    """
    rc, _, err = proc.capture([*real, "-###", *args])
    if rc != 0:
        return None
    lines = err.decode("utf-8", "surrogateescape").splitlines()
    jobs = [line for line in lines if line.startswith(' "')]
    if len(jobs) != 1:
        return None
    argv = unquote_job(jobs[0])
    configs = [line[len(CONFIG_MARKER):] for line in lines if line.startswith(CONFIG_MARKER)]
    return (argv, configs) if argv and argv[0] == real_ld else None


def unquote_job(line: str) -> list[str]:
    out = []
    i = line.find('"')
    while i >= 0:
        arg: list[str] = []
        i += 1
        while i < len(line) and line[i] != '"':
            if line[i] == "\\" and i + 1 < len(line):
                i += 1
            arg.append(line[i])
            i += 1
        out.append("".join(arg))
        i = line.find('"', i + 1)
    return out
