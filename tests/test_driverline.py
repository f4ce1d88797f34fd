"""The driver's link line (driverline.py), cached: reused when nothing it names changed, asked again when it did."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import Toolchain, links, ltowrap_env, run, stats_json, sysroot, wrapper, write

PROG_C = '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n'


def setup(d: Path, tc: Toolchain) -> Path:
    write(d / "prog.c", PROG_C)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "prog.c", "-o", "prog.o"], d, env=ltowrap_env(tc))
    root = sysroot(d)
    if root is None:
        pytest.skip("this machine's libc/gcc files are not where the sysroot copy expects them")
    return root


def link(d: Path, tc: Toolchain, root: Path, **env: str) -> list[str]:
    """Link (memo off: every link reaches the linker); the ld.lld argv the link ran."""
    (d / "prog").unlink(missing_ok=True)
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", f"--sysroot={root}", "prog.o", "-o", "prog"], d,
        env=ltowrap_env(tc, LTOWRAP_MEMO="0", **env))
    assert run(["./prog"], d).stdout == "hello\n"
    return links(d.parent)[-1]["argv"]


def counts() -> tuple[int, int]:
    s = stats_json()
    return s["driver_line_hits"], s["driver_line_misses"]


def test_the_same_driver_link_reuses_its_line(tmp_path, tc22):
    d = tmp_path / "p"
    root = setup(d, tc22)
    first = link(d, tc22, root)
    assert link(d, tc22, root) == first
    assert counts() == (1, 1)


def test_a_new_gcc_installation_in_the_sysroot_is_seen(tmp_path, tc22):
    """The driver picks the newest gcc directory: one that appears changes the line."""
    d = tmp_path / "p"
    root = setup(d, tc22)
    assert any("/gcc/x86_64-linux-gnu/12" in a for a in link(d, tc22, root))
    shutil.copytree(root / "usr/lib/gcc/x86_64-linux-gnu/12", root / "usr/lib/gcc/x86_64-linux-gnu/13")
    argv = link(d, tc22, root)
    assert any("/gcc/x86_64-linux-gnu/13" in a for a in argv), argv
    assert counts() == (0, 2)


def test_a_replaced_crt_file_or_another_environment_misses(tmp_path, tc22):
    d = tmp_path / "p"
    root = setup(d, tc22)
    link(d, tc22, root)
    crt = root / "usr/lib/x86_64-linux-gnu/crti.o"
    new = crt.with_suffix(".new")
    shutil.copy(crt, new)
    new.replace(crt)  # as a package upgrade does: a new file renamed over the old one
    link(d, tc22, root)
    assert counts() == (0, 2)
    (d / "libdir").mkdir()
    argv = link(d, tc22, root, LIBRARY_PATH=str(d / "libdir"))  # the driver adds it as -L
    assert counts() == (0, 3) and f"-L{d / 'libdir'}" in argv
