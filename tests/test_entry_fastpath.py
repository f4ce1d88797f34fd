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
SLOW = [["-flto=thin", "-c", "a.c", "b.c"], ["-flto", "-c", "-x", "c", "a.c"], ["@args.rsp"],
        ["a.c", "-flto=thin", "-o", "prog"], ["-oprog", "a.c"], ["-flto=thin", "-c", "sub/.c"]]
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


@pytest.mark.parametrize("args", [["-flto=thin", "-c", "a.c"], ["-flto", "-c", "-D", "x.c", "sub/a.c"],
                                  ["-c", "-MF", "dep.cc", "-MD", "sub/a.c", "-flto=thin"]], ids=" ".join)
def test_thinlto_compile_without_output_is_recorded_in_sh_for_the_object_python_names(lone, tmp_path, args):
    """configure's AC_COMPILE_IFELSE (`$CC -c $CFLAGS conftest.c`): the object is the source's stem.o
    in the working directory, and an option's value is never taken for the source."""
    from ltowrap import optrecords

    d, env = lone
    write(tmp_path / "sub" / "a.c", "int a(void) { return 2; }\n")
    env["LTOWRAP_CACHE_DIR"] = str(tmp_path / "cache")
    run([str(d / "ltowrap-clang"), "-O1", *args], tmp_path, env=env)  # no ltowrap-entry: sh alone
    assert driverargs.compile_outputs(args) == ["a.o"]
    key = optrecords.record_key((tmp_path / "a.o").read_bytes())
    assert optrecords.load(str(tmp_path / "cache"), key) == ["-O1"]


@pytest.fixture
def lone_with_ld(lone, tmp_path, tc22) -> tuple[Path, dict]:
    """The lone copy with an ltowrap-ld.lld beside it (what Python's lld route requires), small_link
    at its default and no log: a small link is the sh entry's alone."""
    d, env = lone
    (d / "ltowrap-ld.lld").write_text("#!/bin/sh\nexit 99\n")
    (d / "ltowrap-ld.lld").chmod(0o755)
    env.pop("LTOWRAP_LOG")
    env.pop("LTOWRAP_SMALL_LINK")
    env["LTOWRAP_CACHE_DIR"] = str(tmp_path / "cache")
    write(tmp_path / "a.c", "int main(void) { return 0; }\n")
    _objects(tmp_path, tc22.clang)
    write(tmp_path / "h.c", "int h(void) { return 1; }\n")
    run([tc22.clang, "-c", "h.c", "-o", "h.o"], tmp_path)  # native: no module
    write(tmp_path / "bcfake.o", "BC, but not bitcode\n")
    return d, env


SMALL = [["b.o", "-flto=thin", "-fuse-ld=lld", "-o", "prog"], ["a.c", "-O2", "-flto=thin", "-fuse-ld=lld", "-o", "prog"],
         ["-flto", "h.o", "b.o", "libn.a", "-fuse-ld=lld", "-L", ".", "-ln", "-o", "prog"],
         ["b.o", "-flto=thin", "--ld-path=/usr/lib/llvm-22/bin/ld.lld", "-Xlinker", "-O1", "-o", "prog"],
         ["b.o", "-flto=thin", f"--ld-path={BIN / 'ltowrap-ld.lld'}", "-o", "prog"],  # ours: the lld beside clang
         ["b.o", "-flto=thin", "-o", "prog"]]  # the driver's linker: use_lld (on by default) makes it lld
NOT_SMALL = [["b.o", "a.c", "-flto=thin", "-fuse-ld=lld", "-o", "prog"],  # two modules
             ["b.o", "libb.a", "-flto=thin", "-fuse-ld=lld", "-o", "prog"], ["b.o", "-L.", "-lb", "-flto", "-fuse-ld=lld", "-o", "prog"],
             ["n.o", "-flto=thin", "-fuse-ld=lld", "-o", "prog"],  # no module seen: the link line decides
             ["bcfake.o", "-flto=thin", "-fuse-ld=lld", "-o", "prog"],  # starts with BC, not bitcode: no module
             ["-x", "c", "a.c", "-flto=thin", "-fuse-ld=lld", "-o", "prog"], ["b.o", "-flto=thin", "-fuse-ld=lld", "-###"]]


@pytest.mark.parametrize("args", SMALL, ids=" ".join)
def test_small_links_start_no_python_and_run_what_python_would(lone_with_ld, tmp_path, tc22, args, monkeypatch):
    from ltowrap import config, entry, stats

    d, env = lone_with_ld
    run([str(d / "ltowrap-clang"), *args], tmp_path, env=env)
    assert stats.summary(env["LTOWRAP_CACHE_DIR"])["counts"].get("links_small") == 1
    # Python agrees: a small link, run as `clang ARGS -fuse-ld=lld --ld-path=<lld beside clang>`.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LTOWRAP_SMALL_LINK", "1")
    monkeypatch.setattr(sys, "argv", [str(BIN / "ltowrap-clang")])
    settings = config.load()
    route = entry._lld_route([tc22.clang], args, settings)
    assert route is not None and entry._small_link(args, settings) is not None
    ours = (tmp_path / "prog").read_bytes()
    run([tc22.clang, *args, "-fuse-ld=lld", f"--ld-path={route[1]}"], tmp_path)
    assert (tmp_path / "prog").read_bytes() == ours


@pytest.mark.parametrize("args", NOT_SMALL, ids=" ".join)
def test_links_that_may_not_be_small_go_to_python(lone_with_ld, tmp_path, args):
    d, env = lone_with_ld
    done = run([str(d / "ltowrap-clang"), *args], tmp_path, env=env, check=False)
    assert done.returncode != 0 and "ltowrap-entry" in done.stderr


@pytest.mark.parametrize("setting", [{"LTOWRAP_LOG": "~/links.jsonl"}, {"LTOWRAP_SMALL_LINK": "0"}, {"LTOWRAP_USE_LLD": "1"},
                                     {"LTOWRAP_SMALL_LINK": "01"}, "escaped-argument",
                                     {"LTOWRAP_SMALL_LINK": "one"}, "no-ld-entry"])
def test_small_link_settings_the_sh_entry_cannot_honour_go_to_python(lone_with_ld, tmp_path, setting):
    """Python expands ~, distributes with small_link = 0, reports a bad value and writes a log line
    JSON escapes; without ltowrap's ld.lld beside it, Python would not route the link to lld."""
    d, env = lone_with_ld
    if setting == "no-ld-entry":
        (d / "ltowrap-ld.lld").unlink()
    elif setting != "escaped-argument":
        env.update(setting)
    args = ["b.o", "-flto=thin", "-o", "prog"] if "LTOWRAP_USE_LLD" in setting else SMALL[0]  # no lld named
    if setting == "escaped-argument":
        args = [*args, "-Wl,-Map,caf\u00e9.map"]
    done = run([str(d / "ltowrap-clang"), *args], tmp_path, env=env, check=False)
    assert done.returncode != 0 and "ltowrap-entry" in done.stderr


def test_small_link_log_line_is_pythons(lone_with_ld, tmp_path, tc22):
    """The sh entry's log line for a small link is the one Python writes (entry._link_in_process)."""
    import json

    d, env = lone_with_ld
    log = Path(env["LTOWRAP_CACHE_DIR"]) / "links.jsonl"  # the default log
    args = ["-O1", "b.o", "-flto=thin", "-fuse-ld=lld", "-o", "prog"]
    run([str(d / "ltowrap-clang"), *args], tmp_path, env=env)  # sh alone
    run([sys.executable, "-S", str(BIN / "ltowrap-entry"), str(d / "ltowrap-clang"), *args], tmp_path, env=env)
    sh, python = (json.loads(line) for line in log.read_text().splitlines())
    for record in (sh, python):
        assert record.pop("start") == record.pop("end") and record.pop("pid")
    assert sh == python and sh["decision"] == "in-process"
    env["LTOWRAP_LOG"] = "off"
    run([str(d / "ltowrap-clang"), *args], tmp_path, env=env)
    assert len(log.read_text().splitlines()) == 2
