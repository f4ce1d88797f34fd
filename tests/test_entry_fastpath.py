"""The sh fast path of ltowrap-clang decides plain compiles exactly as ltowrap/entry.py would.

The same script is ltowrap-clang, ltowrap-clang++ and `ltowrap` (whose launcher form,
`ltowrap clang ...`, CMake and meson run for every compile). A copy of it alone in a
directory has no ltowrap-entry beside it, so any case it hands to Python fails: that is
how each case's path is observed.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from helpers import BIN, ltowrap_env, run, write
from ltowrap import driverargs

REPO = Path(__file__).resolve().parent.parent

FAST = [["-c", "a.c"], ["-O2", "-S", "a.c", "-o", "a.s"], ["-E", "a.c"], ["-c", "-fno-lto", "a.c"]]
SLOW = [["-flto=thin", "-c", "a.c"], ["-flto", "-c", "a.c"], ["@args.rsp"], ["a.c", "-flto=thin", "-o", "prog"],
        ["-oprog", "a.c"]]
# Links: with no -flto and no input holding bitcode, sh runs them (Python would run them unchanged).
# With lld, archives that -l finds in -L directories are inputs too; the driver's own
# directories are not looked into (by either side).
LINKS_FAST = [["n.o", "-o", "prog"], ["n.o", "libn.a", "-o", "prog"], ["a.c", "-o", "prog"], ["--version"],
              ["n.o", "-L.", "-lb", "-o", "prog"],  # no lld: the driver's linker cannot link bitcode anyway
              ["n.o", "-fuse-ld=lld", "-o", "prog"], ["n.o", "-fuse-ld=lld", "-L.", "-ln", "-o", "prog"],
              ["n.o", "--ld-path=/usr/bin/ld", "-o", "prog"], ["n.o", "-fuse-ld=lld", "-lm", "-o", "prog"]]
LINKS_SLOW = [["b.o", "-o", "prog"], ["n.o", "libb.a", "-o", "prog"], ["n.o", "-flto=thin", "-o", "prog"],
              ["n.o", "libthin.a", "-o", "prog"], ["n.o", "-fuse-ld=lld", "-L.", "-lb", "-o", "prog"],
              ["n.o", "-fuse-ld=lld", "-lb", "-L", ".", "-o", "prog"], ["n.o", "-fuse-ld=lld", "-l:libb.a", "-L.", "-o", "prog"],
              ["n.o", "--ld-path=/usr/lib/llvm-22/bin/ld.lld", "-L.", "-lthin", "-o", "prog"]]


@pytest.fixture
def lone(tmp_path, tc22) -> tuple[Path, dict]:
    d = tmp_path / "lone"
    d.mkdir()
    for name in ("ltowrap-clang", "ltowrap-clang++", "ltowrap"):
        shutil.copy(REPO / "scripts" / name, d / name)
    write(tmp_path / "a.c", "int a(void) { return 1; }\n")
    write(tmp_path / "args.rsp", "-c a.c\n")
    env = ltowrap_env(tc22, HOME=str(tmp_path))
    env.pop("LTOWRAP_CONFIG", None)
    env.pop("XDG_CONFIG_HOME", None)
    return d, env


@pytest.mark.parametrize("args", FAST, ids=" ".join)
def test_plain_compiles_start_no_python(lone, tmp_path, args):
    d, env = lone
    assert run([str(d / "ltowrap-clang"), *args], tmp_path, env=env).returncode == 0
    # Python agrees: not a link, no LTO, so it would exec the compiler unchanged too.
    assert not driverargs.is_link(args) and not driverargs.wants_lto(args)


@pytest.mark.parametrize("args", SLOW, ids=" ".join)
def test_everything_else_goes_to_python(lone, tmp_path, args):
    d, env = lone
    done = run([str(d / "ltowrap-clang"), *args], tmp_path, env=env, check=False)
    assert done.returncode != 0 and "ltowrap-entry" in done.stderr


def _objects(d: Path, clang: str) -> None:
    """n.o native, b.o bitcode, libn.a and libb.a archives of each, libthin.a a thin one of b.o."""
    run([clang, "-c", "a.c", "-o", "n.o"], d)
    run([clang, "-flto=thin", "-c", "a.c", "-o", "b.o"], d)
    ar = str(Path(clang).parent / "llvm-ar")
    run([ar, "rcs", "libn.a", "n.o"], d)
    run([ar, "rcs", "libb.a", "b.o"], d)
    run([ar, "rcsT", "libthin.a", "b.o"], d)


@pytest.mark.parametrize("args", LINKS_FAST, ids=" ".join)
def test_links_without_bitcode_start_no_python(lone, tmp_path, tc22, args, monkeypatch):
    d, env = lone
    write(tmp_path / "a.c", "int main(void) { return 0; }\n")
    _objects(tmp_path, tc22.clang)
    assert run([str(d / "ltowrap-clang"), *args], tmp_path, env=env).returncode == 0
    # Python agrees: it would run the command unchanged (no lld route).
    from ltowrap import config, entry

    monkeypatch.chdir(tmp_path)
    assert entry._lld_route([tc22.clang], args, config.load()) is None


@pytest.mark.parametrize("args", LINKS_SLOW, ids=" ".join)
def test_links_that_may_carry_bitcode_go_to_python(lone, tmp_path, tc22, args, monkeypatch):
    d, env = lone
    write(tmp_path / "a.c", "int main(void) { return 0; }\n")
    _objects(tmp_path, tc22.clang)
    done = run([str(d / "ltowrap-clang"), *args], tmp_path, env=env, check=False)
    assert done.returncode != 0 and "ltowrap-entry" in done.stderr
    # Python agrees: a link for ltowrap's linker.
    from ltowrap import config, entry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(BIN / "ltowrap-clang")])  # where it finds its ld.lld entry
    assert entry._lld_route([tc22.clang], args, config.load()) is not None


@pytest.mark.parametrize("setting", [{"LTOWRAP_LTO": "thin"}, {"LTOWRAP_CONFIG": "/dev/null"}, "config-file",
                                     {"LTOWRAP_CLANG": "clang-22"}])  # a name, not a path: Python says what it is
def test_settings_python_must_read_go_to_python(lone, tmp_path, setting):
    d, env = lone
    if setting == "config-file":
        write(tmp_path / ".config" / "ltowrap" / "ltowrap.toml", "jobs = 2\n")
    else:
        env.update(setting)
    assert run([str(d / "ltowrap-clang"), "-c", "a.c"], tmp_path, env=env, check=False).returncode != 0


@pytest.mark.parametrize("var", ["LTOWRAP_ACTIVE", "LTOWRAP_DISABLE"])
def test_guard_and_disable_pass_everything_through(lone, tmp_path, var):
    d, env = lone
    env[var] = "1"
    assert run([str(d / "ltowrap-clang"), "-flto=thin", "-c", "a.c"], tmp_path, env=env).returncode == 0
    assert (tmp_path / "a.o").read_bytes()[:4] == b"BC\xc0\xde"


def test_path_search_skips_itself_and_other_ltowrap_installs(lone, tmp_path, tc22):
    """PATH: another install's shim, our own shim, then the real clang-22."""
    d, env = lone
    other = tmp_path / "other-install"
    other.mkdir()
    shutil.copy(REPO / "scripts" / "ltowrap-clang", other / "clang-22")
    ours = tmp_path / "shims"
    ours.mkdir()
    (ours / "clang-22").symlink_to(d / "ltowrap-clang")
    env.pop("LTOWRAP_CLANG")
    env["PATH"] = f"{other}:{ours}:{tc22.bindir.parent.parent.parent / 'bin'}:{os.environ['PATH']}"
    done = run([str(ours / "clang-22"), "-c", "a.c"], tmp_path, env=env)
    assert done.returncode == 0 and (tmp_path / "a.o").read_bytes()[:4] == b"\x7fELF"


@pytest.fixture(params=["beside", "versioned-alone", "not-named-clang", "is-clang++"])
def configured_clang(request, tmp_path, tc22) -> str:
    """LTOWRAP_CLANG in four shapes: a clang++ beside it, none beside it, a name without 'clang', a clang++."""
    d = tmp_path / "configured"
    d.mkdir()
    shape = request.param
    if shape == "beside":
        return tc22.clang
    name = {"versioned-alone": "clang-22", "not-named-clang": "cc", "is-clang++": "clang++-22"}[shape]
    (d / name).symlink_to(tc22.clangxx if shape == "is-clang++" else tc22.clang)
    return str(d / name)


def test_clangxx_with_ltowrap_clang_runs_what_python_would_without_python(lone, tmp_path, configured_clang):
    """ltowrap-clang++ with LTOWRAP_CLANG: the clang -> clang++ mapping (toolchain.find_tool) is made in sh too."""
    from ltowrap import toolchain

    d, env = lone
    env["LTOWRAP_CLANG"] = configured_clang
    args = ["-c", "-###", "a.c"]  # -### prints the jobs: a .c input is C++ only in C++ mode
    ours = run([str(d / "ltowrap-clang++"), *args], tmp_path, env=env)  # no ltowrap-entry: sh alone
    python = run([*toolchain.find_tool("clang++", configured_clang), *args], tmp_path)
    assert ours.stderr == python.stderr and '"-x" "c++"' in ours.stderr


LAUNCHED_FAST = [["clang", *args] for args in FAST] + [["ltowrap-clang", "-c", "a.c"], ["clang++", "-c", "a.c"]]
LAUNCHED_SLOW = [["clang", *args] for args in SLOW] + [["ld.lld", "-E", "a.o", "-o", "prog"], ["ld.lld-22", "--version"]]


@pytest.mark.parametrize("args", LAUNCHED_FAST, ids=" ".join)
def test_launcher_form_compiles_start_no_python(lone, tmp_path, args):
    """`ltowrap clang -c a.c`, as CMake's launcher and meson's CC="ltowrap clang" run it: sh and an exec."""
    d, env = lone
    assert run([str(d / "ltowrap"), *args], tmp_path, env=env).returncode == 0


def test_launcher_form_with_a_named_compiler_uses_exactly_that_one(lone, tmp_path, tc14):
    d, env = lone  # LTOWRAP_CLANG names clang 22; the command names clang 14, as Python's launcher() keeps it
    done = run([str(d / "ltowrap"), tc14.clang, "-c", "-###", "a.c"], tmp_path, env=env)
    assert f"InstalledDir: {tc14.bindir}" in done.stderr


def test_launcher_form_wrapping_a_named_ltowrap_entry_records_once_without_python(lone, tmp_path):
    """`ltowrap /venv/bin/ltowrap-clang -flto=thin -c ...`: the inner entry passes through, the outer records."""
    from ltowrap import optrecords

    d, env = lone
    env["LTOWRAP_CACHE_DIR"] = str(tmp_path / "cache")
    run([str(d / "ltowrap"), str(d / "ltowrap-clang"), "-O1", "-flto=thin", "-c", "a.c", "-o", "a.o"], tmp_path, env=env)
    key = optrecords.record_key((tmp_path / "a.o").read_bytes())
    assert optrecords.load(str(tmp_path / "cache"), key) == ["-O1"]


@pytest.mark.parametrize("args", LAUNCHED_SLOW, ids=" ".join)
def test_launcher_form_links_and_the_rest_go_to_python(lone, tmp_path, args):
    """Links (ld.lld's -E is --export-dynamic, not a preprocess) and whatever the sh entry leaves."""
    d, env = lone
    done = run([str(d / "ltowrap"), *args], tmp_path, env=env, check=False)
    assert done.returncode != 0 and "ltowrap-entry" in done.stderr


def test_every_subcommand_goes_to_python(lone, tmp_path):
    """The sh entry's list of subcommands is entry.SUBCOMMANDS, which is the CLI's."""
    from ltowrap import cli, entry

    (sub,) = [a for a in cli.build_parser()._actions if a.dest == "command"]
    assert set(sub.choices) == entry.SUBCOMMANDS
    d, env = lone
    # A program of the same name on PATH, and arguments that look like a compile: only the
    # list keeps `ltowrap cache -c a.c` from running that program.
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    for name in entry.SUBCOMMANDS:
        (decoys / name).symlink_to(shutil.which("true"))
    env["PATH"] = f"{decoys}{os.pathsep}{env['PATH']}"
    for args in [[name, "-c", "a.c"] for name in sorted(entry.SUBCOMMANDS)] + [[], ["--version"], [""]]:
        done = run([str(d / "ltowrap"), *args], tmp_path, env=env, check=False)
        assert done.returncode != 0 and "ltowrap-entry" in done.stderr, args


def test_installed_entry_is_the_sh_script():
    assert (BIN / "ltowrap-clang").read_bytes().startswith(b"#!/bin/sh")


def test_thinlto_compile_is_recorded_in_sh_as_python_records_it(lone, tmp_path):
    from ltowrap import optrecords

    d, env = lone
    cache = tmp_path / "cache"
    env["LTOWRAP_CACHE_DIR"] = str(cache)
    flags = ["-O1", "-fno-unroll-loops", "-flto=thin", "-c", "a.c"]
    run([str(d / "ltowrap-clang"), *flags, "-o", "a.o"], tmp_path, env=env)  # sh: -o FILE
    key = optrecords.record_key((tmp_path / "a.o").read_bytes())
    assert optrecords.load(str(cache), key) == ["-O1", "-fno-unroll-loops"]
    (cache / "r").rename(tmp_path / "sh-records")
    run([str(BIN / "ltowrap-clang"), *flags, "-oa.o"], tmp_path, env=env)  # -oFILE: Python
    assert optrecords.load(str(cache), key) == ["-O1", "-fno-unroll-loops"]
    assert oct((cache / "r").stat().st_mode & 0o777) == oct(0o700)


def test_failed_thinlto_compile_keeps_its_exit_code_and_records_nothing(lone, tmp_path):
    d, env = lone
    env["LTOWRAP_CACHE_DIR"] = str(tmp_path / "cache")
    write(tmp_path / "bad.c", "int f(void) { return undeclared; }\n")
    done = run([str(d / "ltowrap-clang"), "-flto=thin", "-c", "bad.c", "-o", "bad.o"], tmp_path, env=env, check=False)
    assert done.returncode == 1 and "undeclared" in done.stderr
    assert not (tmp_path / "cache" / "r").exists()


def test_config_variable_naming_a_missing_file_keeps_the_fast_path(lone, tmp_path):
    d, env = lone
    env["LTOWRAP_CONFIG"] = str(tmp_path / "absent.toml")
    assert run([str(d / "ltowrap-clang"), "-c", "a.c"], tmp_path, env=env).returncode == 0
