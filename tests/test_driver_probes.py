"""The driver line's checks (driverline.searched_paths) against what the driver really looks at.

A cached link line is good while nothing the driver would find differently has changed. The
model says which files and directories to check; strace says which paths `clang -###` opens,
stats or probes. Every one must be covered: a file it reads by its own stat identity, a
path it probes by that path or its directory (a file that appears changes its directory).
A probe of a path whose directory does not exist is covered by the nearest directory that
does (creating the file creates a directory there). Probes the model may leave out: the
dynamic loader's (the compiler's own libraries are its identity), /proc and /dev, the user's
own inputs (relative paths), include directories (they reach compile jobs, never a link
line) and the offload toolchains' detection (CUDA, HIP: not used by a host link).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import Toolchain, run, sysroot, write
from needs import missing

from ltowrap.linkline import driverline

PROBES = "openat,open,stat,newfstatat,statx,lstat,access,faccessat,faccessat2,readlink,getdents64"
CALL = re.compile(r'^(?:\[pid +\d+\] )?(\w+)\((?:AT_FDCWD, )?"([^"]*)"')
# The loader's probes for the compiler's own libraries, and what no link line depends on.
IGNORED = re.compile(r"(^/(proc|dev|sys)/|^/etc/ld\.so|\.so(\.\d+)*$|/glibc-hwcaps/|/tls(/|$)|/x86_64(/x86_64)?$"
                     r"|/include(/|$)|cuda|ptxas|rocm|\.hipVersion|libdevice|^/usr/local/bin$)")  # (CUDA's, from ptxas)


def probes(argv: list[str], cwd: Path) -> tuple[set[str], set[str]]:
    """(paths read, paths only probed) by the command, as strace sees them."""
    if shutil.which("strace") is None:
        missing("strace", "dev/setup installs strace")
    done = subprocess.run(["strace", "-f", "-qq", "-e", f"trace={PROBES}", *argv], cwd=cwd, capture_output=True,
                          text=True)
    read: set[str] = set()
    probed: set[str] = set()
    for line in done.stderr.splitlines():
        m = CALL.match(line)
        if m is None or not m.group(2).startswith("/") or IGNORED.search(m.group(2)):
            continue
        path = os.path.normpath(m.group(2))
        if m.group(1) in ("openat", "open") and "= -1" not in line and "O_DIRECTORY" not in line:
            read.add(path)
        else:
            probed.add(path)
    return read, probed - read


def uncovered(argv: list[str], given: list[str], cwd: Path) -> list[str]:
    """The paths the driver reads or probes that the driver line's checks do not cover."""
    found = driverline.run_driver(argv[:1], given, argv[-1].split("=", 1)[1])
    assert found is not None, "the driver gave no single link line"
    line, configs = found
    covered = {os.path.realpath(p) for p in driverline.searched_paths(line, given, argv[0])}
    covered |= {os.path.realpath(p) for p in configs}
    read, probed = probes([*argv[:1], "-###", *given], cwd)
    gaps = [f"read {p}" for p in sorted(read) if os.path.realpath(p) not in covered]
    gaps += [f"probed {p}" for p in sorted(probed)
             if os.path.realpath(p) not in covered and os.path.realpath(nearest_existing(os.path.dirname(p))) not in covered]
    return gaps


def nearest_existing(path: str) -> str:
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def link_args(tc: Toolchain, *extra: str) -> list[str]:
    return ["-fuse-ld=lld", "-flto=thin", *extra, "main.o", "-o", "prog", f"--ld-path={tc.lld}"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the driver is asked in the link's directory, as ltowrap asks it


def setup(d: Path, tc: Toolchain, cxx: bool = False) -> None:
    d.mkdir(parents=True, exist_ok=True)
    write(d / "main.c", "int main(void) { return 0; }\n")
    run([tc.clangxx if cxx else tc.clang, "-flto=thin", "-O2", "-c", "-x", "c++" if cxx else "c", "main.c", "-o",
         "main.o"], d)


@pytest.mark.parametrize("cxx", [False, True], ids=["c", "c++"])
def test_a_plain_link_line_covers_every_probe(tmp_path, tc, cxx):
    setup(tmp_path, tc, cxx)
    args = link_args(tc)
    driver = tc.clangxx if cxx else tc.clang
    assert uncovered([driver, *args], args, tmp_path) == []


def test_search_options_are_covered(tmp_path, tc22):
    """-B, --sysroot and --gcc-toolchain make the driver look in directories of the user's."""
    setup(tmp_path, tc22)
    root = sysroot(tmp_path)
    if root is None:
        pytest.skip("this machine's libc/gcc files are not where the sysroot copy expects them")
    (tmp_path / "crt").mkdir()
    (tmp_path / "gcc").mkdir()
    for extra in ([f"-B{tmp_path}/crt/"], [f"--sysroot={root}"], [f"--gcc-toolchain={tmp_path}/gcc"],
                  ["-B", f"{tmp_path}/crt/pre-"]):
        args = link_args(tc22, *extra)
        assert uncovered([tc22.clang, *args], args, tmp_path) == [], extra


def test_a_config_file_and_what_it_includes_are_checked(tmp_path, tc22):
    setup(tmp_path, tc22)
    write(tmp_path / "l.cfg", "-Wl,-z,norelro @inner.cfg\n")
    write(tmp_path / "inner.cfg", "# a comment\n-Wl,-z,now\n")
    args = link_args(tc22, f"--config={tmp_path}/l.cfg")
    line = driverline.linker_command([tc22.clang], args, tc22.lld, str(tmp_path / "cache"))
    assert line is not None
    assert [p for p, _ in line.checks.configs] == [f"{tmp_path}/l.cfg", f"{tmp_path}/inner.cfg"]
    assert line.checks.hold()
    write(tmp_path / "inner.cfg", "-Wl,-z,lazy\n")
    assert not line.checks.hold()
