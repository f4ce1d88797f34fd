"""What the tools read besides their arguments: the environment variables and config files
that every key holding their output must cover (toolchain.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import Toolchain, ltowrap_env, run, write

from ltowrap import cachekey, toolchain
from ltowrap.cache import Cache
from ltowrap.stats import Stats


def binaries(tc: Toolchain) -> list[Path]:
    lib = tc.bindir.parent / "lib"
    return [Path(os.path.realpath(tc.clang)), Path(os.path.realpath(tc.lld)),
            *lib.glob("libclang-cpp.so*"), *lib.glob("libLLVM*.so*")]


@pytest.mark.parametrize("table", ["DRIVER_ENV", "BACKEND_ENV", "LINKER_ENV"])
def test_every_variable_in_the_tables_is_one_the_tools_name(tc22, table):
    """A misspelt name would be keyed and never read: each must end a NUL-terminated string in
    the strings of clang 22's or lld's binaries."""
    blobs = [p.read_bytes() for p in binaries(tc22) if p.is_file()]
    absent = [name for name in getattr(toolchain, table)
              if not any(name.encode() + b"\0" in blob for blob in blobs)]
    assert absent == []


def test_lld_version_changes_the_output(tmp_path, tc22):
    """Why LINKER_ENV holds LLD_VERSION: it is what lld writes into .comment."""
    write(tmp_path / "m.c", "int main(void) { return 0; }\n")
    run([tc22.clang, "-c", "m.c", "-o", "m.o"], tmp_path)
    run([tc22.lld, "m.o", "-e", "main", "-o", "a"], tmp_path)
    run([tc22.lld, "m.o", "-e", "main", "-o", "b"], tmp_path, env=ltowrap_env(LLD_VERSION="other"))
    assert (tmp_path / "a").read_bytes() != (tmp_path / "b").read_bytes()


def private_clang(tmp_path: Path, tc: Toolchain) -> Path:
    """A copy of clang in a directory of its own (its libraries through a symlink)."""
    (tmp_path / "tc" / "bin").mkdir(parents=True)
    clang = tmp_path / "tc" / "bin" / "clang"
    shutil.copy2(tc.clang, clang)
    (tmp_path / "tc" / "lib").symlink_to(tc.bindir.parent / "lib")
    return clang


def test_config_files_beside_the_compiler_and_what_they_include(tmp_path, tc22):
    clang = private_clang(tmp_path, tc22)
    assert toolchain.compiler_configs(str(clang)) == []
    write(clang.parent / "clang.cfg", "-mrelax-all @more/inner.cfg\n")
    write(clang.parent / "more" / "inner.cfg", "# nothing yet\n@<CFGDIR>/deeper.txt\n")
    write(clang.parent / "more" / "deeper.txt", "-O1\n")
    assert toolchain.compiler_configs(str(clang)) == [
        str(clang.parent / "clang.cfg"), str(clang.parent / "more" / "inner.cfg"),
        str(clang.parent / "more" / "deeper.txt")]


def test_the_compiler_identity_follows_its_config_files(tmp_path, tc22):
    clang = private_clang(tmp_path, tc22)
    cache = Cache(str(tmp_path / "cache"), Stats())
    bare = cachekey.compiler_identity(str(clang), cache)
    write(clang.parent / "clang.cfg", "@inner.cfg\n")
    write(clang.parent / "inner.cfg", "-mrelax-all\n")
    with_config = cachekey.compiler_identity(str(clang), cache)
    assert with_config != bare
    write(clang.parent / "inner.cfg", "-O1\n")  # an edit in place of a file it includes
    assert cachekey.compiler_identity(str(clang), cache) not in (bare, with_config)
