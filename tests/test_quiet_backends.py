"""What a backend compile prints stays out of the build's output: it goes to LTOWRAP_LOG, with
the module it came from, and to stderr only when the link fails or LTOWRAP_VERBOSE is set.

The warning used: -Wframe-larger-than leaves a "warn-stack-size" attribute in the bitcode,
so every backend compile of that function warns.
"""

from __future__ import annotations


from helpers import links, ltowrap_env, run, wrapper, write

BIG_C = "#include <string.h>\nint big(const char *s) { char buf[4096]; strcpy(buf, s); return buf[100] + (int)strlen(buf); }\n"
MAIN_C = "int big(const char *s);\nint main(int c, char **v) { (void)c; return big(v[0]) > 1000; }\n"
WARNING = "stack frame size"


def compiled(project, tc) -> dict:
    write(project / "big.c", BIG_C)
    write(project / "main.c", MAIN_C)
    env = ltowrap_env(tc)
    for src in ("big.c", "main.c"):
        run([wrapper("ltowrap-clang"), "-O2", "-Wframe-larger-than=64", "-flto=thin", "-c", src], project, env=env)
    return env


def test_backend_warnings_go_to_the_log(project, tmp_path, tc):
    env = compiled(project, tc)
    done = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", "big.o", "main.o", "-o", "prog"], project, env=env)
    assert done.stderr == ""
    record = links(tmp_path)[-1]
    assert record["decision"] == "distributed"
    outputs = {b["module"]: b.get("output", "") for b in record["backends"]}
    assert WARNING in outputs["big.o"], outputs
    run(["./prog"], project)


def test_backend_warnings_under_verbose(project, tmp_path, tc22):
    env = compiled(project, tc22)
    done = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", "big.o", "main.o", "-o", "prog"], project,
               env={**env, "LTOWRAP_VERBOSE": "1"})
    assert WARNING in done.stderr
    assert links(tmp_path)[-1]["decision"] == "distributed"


def test_backend_warnings_shown_when_the_link_fails(project, tmp_path, tc22):
    env = compiled(project, tc22)
    write(project / "extra.c", "int missing(void);\nint extra(void) { return missing(); }\n")
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "extra.c"], project, env=env)
    write(project / "main2.c", "int big(const char *); int extra(void);\n"
          "int main(int c, char **v) { (void)c; return big(v[0]) + extra(); }\n")
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "main2.c"], project, env=env)
    done = run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", "big.o", "extra.o", "main2.o", "-o", "prog"],
               project, env=env, check=False)
    assert done.returncode != 0
    assert "undefined symbol: missing" in done.stderr and WARNING in done.stderr
    assert done.stderr.index(WARNING) < done.stderr.index("undefined symbol")
    assert links(tmp_path)[-1]["decision"] == "distributed"  # the user's own error, reported straight away


def test_a_failed_backend_keeps_its_errors_in_the_log(project, tmp_path, tc22):
    """A backend that fails makes the link run unchanged (which fails here too, as in-process
    LTO does): the backend's own errors are the log's `output`, and stderr has lld's."""
    write(project / "asm.c", 'extern int hook __attribute__((weak));\n'
          'long probe(void) { long a; __asm__("movq %1, %0" : "=r"(a) : "i"(&hook)); return a; }\n')
    run([tc22.clang, "-O2", "-fno-pic", "-flto=thin", "-c", "asm.c"], project)
    env = ltowrap_env(tc22, LTOWRAP_REAL_LD=tc22.lld)
    done = run([wrapper("ltowrap-ld.lld"), "-shared", "asm.o", "-o", "libasm.so"], project, env=env, check=False)
    assert done.returncode != 0 and "invalid operand for inline asm constraint" in done.stderr  # lld's own
    record = links(tmp_path)[-1]
    assert record["decision"] == "fallback" and record["reason"] == "backend_failed", record
    assert "invalid operand for inline asm constraint" in record["output"]
