"""Each module's backend compile uses the options of the compile that produced it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import links, ltowrap_env, run, wrapper, write

from ltowrap.formats import shardkey

SLOW_C = "int sum_to(int n) { int s = 0; for (int i = 0; i < n; i++) s += i; return s; }\n"
HASH_C = "unsigned hash16(const unsigned char *s) { unsigned x = 5381; for (int i = 0; i < 16; i++) x = x * 33 + s[i]; return x; }\n"
MAIN_C = """#include <stdio.h>
int sum_to(int n); unsigned hash16(const unsigned char *s);
int main(int argc, char **argv) { printf("%d %u\\n", sum_to(100 + argc - 1), hash16((const unsigned char *)argv[0])); return 0; }
"""


def function_lines(binary: Path, objdump: str, name: str) -> list[str]:
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(binary)], capture_output=True, text=True, check=True).stdout
    body = out.split(f"<{name}>:\n", 1)[1].split("\n\n", 1)[0]
    return [line for line in body.splitlines() if "int3" not in line and "nop" not in line]


def has_backward_jump(lines: list[str]) -> bool:
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[1].startswith("j") and parts[2].startswith("0x"):
            if int(parts[2], 16) < int(parts[0].rstrip(":"), 16):
                return True
    return False


def test_per_module_options_survive_the_link(project, tmp_path, tc22):
    write(project / "slow.c", SLOW_C)
    write(project / "hash.c", HASH_C)
    write(project / "main.c", MAIN_C)
    env = ltowrap_env(tc22, LTOWRAP_DEBUG="1")
    cc = wrapper("ltowrap-clang")
    # -disable-O0-optnone: without it -O0 marks functions optnone, which in-process LTO honours too.
    run([cc, "-O0", "-Xclang", "-disable-O0-optnone", "-flto=thin", "-c", "slow.c"], project, env=env)
    run([cc, "-O3", "-fno-unroll-loops", "-flto=thin", "-c", "hash.c"], project, env=env)
    run([cc, "-O2", "-flto=thin", "-c", "main.c"], project, env=env)
    objs = ["slow.o", "hash.o", "main.o"]
    run([cc, "-fuse-ld=lld", *objs, "-o", "prog"], project, env=env)
    run([tc22.clang, "-fuse-ld=lld", "-flto=thin", *objs, "-o", "prog_inprocess"], project)
    run([cc, "-fuse-ld=lld", *objs, "-o", "prog_unified"], project, env={**env, "LTOWRAP_BACKEND_OPTS": "link"})
    expected = "4950 "
    for p in ("prog", "prog_inprocess", "prog_unified"):
        assert run([f"./{p}"], project).stdout.startswith(expected)
    objdump = str(tc22.bindir / "llvm-objdump")
    # The -O0 file's loop stays a loop with ltowrap...
    assert has_backward_jump(function_lines(project / "prog", objdump, "sum_to"))
    # ...while in-process ThinLTO (and ltowrap's unified mode) reduces it to closed form.
    assert not has_backward_jump(function_lines(project / "prog_inprocess", objdump, "sum_to"))
    assert not has_backward_jump(function_lines(project / "prog_unified", objdump, "sum_to"))
    # The -O3 -fno-unroll-loops file was compiled with exactly those options.
    dumps = run([wrapper("ltowrap"), "explain", "hash.o"], project, env=env).stdout
    argv_line = next(line for line in dumps.splitlines() if line.startswith("argv:") and "-fno-unroll-loops" in line)
    assert argv_line.index("-O2") < argv_line.index("-O3")  # the module's -O3 comes after the link's -O2
    # The shard's canonical text, as it went into the key: module digests, GUIDs, no paths.
    hash_dump = dumps[dumps.index("-fno-unroll-loops"):]
    assert f"shard text (shardkey.py):\n{shardkey.FORMAT}\n" in hash_dump and "\nsummaries v12\n" in hash_dump
    assert "\nself ^" in hash_dump and str(tmp_path) not in hash_dump.split("shard text")[1].split("== ")[0]
    assert has_backward_jump(function_lines(project / "prog", objdump, "hash16"))
    assert links(tmp_path)[0]["decision"] == "distributed"


def test_recorded_options_are_part_of_the_cache_key(project, tmp_path, tc22):
    """The same bitcode recorded with different options must not share a backend entry."""
    write(project / "slow.c", SLOW_C)
    write(project / "main.c", "int sum_to(int); int main(void){ return sum_to(10) == 45 ? 0 : 1; }\n")
    env = ltowrap_env(tc22)
    cc = wrapper("ltowrap-clang")
    run([cc, "-O2", "-flto=thin", "-c", "main.c"], project, env=env)
    run([cc, "-O2", "-flto=thin", "-c", "slow.c"], project, env=env)
    run([cc, "-fuse-ld=lld", "main.o", "slow.o", "-o", "prog"], project, env=env)
    first_bitcode = (project / "slow.o").read_bytes()
    # Same source and the same bitcode bytes, recorded with a codegen-only option.
    run([cc, "-O2", "-flto=thin", "-falign-loops=64", "-c", "slow.c"], project, env=env)
    assert (project / "slow.o").read_bytes() == first_bitcode
    run([cc, "-fuse-ld=lld", "main.o", "slow.o", "-o", "prog2"], project, env=env)
    second = links(tmp_path)[-1]
    slow = next(b for b in second["backends"] if b["module"] == "slow.o")
    main = next(b for b in second["backends"] if b["module"] == "main.o")
    assert main["cached"] and not slow["cached"]
    run(["./prog2"], project)


@pytest.mark.parametrize("spelling", ["LTOWRAP_CACHE_DIR", "LTOWRAP_DIR", "XDG_CACHE_HOME"])
def test_records_and_links_agree_on_the_cache_whichever_way_it_is_named(project, tmp_path, tc22, spelling):
    """The compile path (sh entry and Python entry alike) records options where the link looks for them.

    Was a silent bug: with only LTOWRAP_CACHE_DIR set, compiles recorded into ~/.cache/ltowrap
    while links used LTOWRAP_CACHE_DIR, so every module got the link's options.
    """
    env = ltowrap_env(tc22, LTOWRAP_CACHE_DIR=None, LTOWRAP_DIR=None)
    cache = tmp_path / "named-cache"
    if spelling == "XDG_CACHE_HOME":
        env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
        cache = tmp_path / "xdg" / "ltowrap"
    else:
        env[spelling] = str(cache)
    write(project / "slow.c", SLOW_C)
    write(project / "main.c", MAIN_C.replace("hash16((const unsigned char *)argv[0])", "0u"))
    cc = wrapper("ltowrap-clang")
    # slow.c by the sh entry's fast path, main.c by the Python entry (a joined -o goes there).
    run([cc, "-O0", "-Xclang", "-disable-O0-optnone", "-flto=thin", "-c", "slow.c", "-o", "slow.o"], project, env=env)
    run([cc, "-O2", "-flto=thin", "-c", "main.c", "-omain.o"], project, env=env)
    reported = run([wrapper("ltowrap"), "config"], project, env=env).stdout
    assert f"cache_dir = '{cache}'" in reported
    assert len(list((cache / "r").rglob("*"))) >= 4  # two records, each in its own directory
    run([cc, "-fuse-ld=lld", "slow.o", "main.o", "-o", "prog"], project, env=env)
    assert run(["./prog"], project).stdout.startswith("4950 ")
    assert has_backward_jump(function_lines(project / "prog", str(tc22.bindir / "llvm-objdump"), "sum_to"))
