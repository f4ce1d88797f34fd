"""A cold link does not wait for every key before its first compile (executor.py).

Keys are made as the jobs come up, and while compiles run; a module new to the cache's store
starts compiling before its key is made, and is stopped if that key turns out to be a hit.
Whatever the order, the cache ends as an empty-cache link leaves it and the binary is the same.
"""

from __future__ import annotations

import shutil

from helpers import links, ltowrap_env, run, stats_json, wrapper, write

MODULES = 6


def _program(project) -> list[str]:
    objs = []
    for i in range(MODULES):
        write(project / f"m{i}.c", f"int f{(i + 1) % MODULES}(int);\n"
              f"int f{i}(int x) {{ return x <= 0 ? {i} : f{(i + 1) % MODULES}(x - 1) + {i}; }}\n")
        objs.append(f"m{i}.o")
    write(project / "main.c", "int f0(int);\nint main(int c, char **v) { return f0(c + 3) & 0x7f; }\n")
    objs.append("main.o")
    return objs


def test_modules_new_to_the_store_start_before_their_key_and_a_hit_stops_them(project, tmp_path, tc22):
    objs = _program(project)
    for o in objs:
        run([tc22.clang, "-O2", "-flto=thin", "-c", o[:-2] + ".c", "-o", o], project)
    env = ltowrap_env(tc22, LTOWRAP_MEMO="0", LTOWRAP_JOBS="2")
    link = [wrapper("ltowrap-clang"), "-O2", "-fuse-ld=lld", "-o", "prog", *objs]
    run(link, project, env=env)
    first = links(tmp_path)[-1]
    assert first["backend_compiles"] == MODULES + 1
    expected = (project / "prog").read_bytes()
    # The modules' store emptied: each module is new to it again, so its compile starts before
    # its key; the key is a hit (the objects are still cached), which stops the compile.
    shutil.rmtree(tmp_path / "cache" / "m")
    (project / "prog").unlink()
    run(link, project, env=env)
    second = links(tmp_path)[-1]
    assert (project / "prog").read_bytes() == expected
    assert second["backend_hits"] == MODULES + 1 and second["backend_compiles"] == 0
    assert stats_json()["backend_early_stopped"] >= 1
