"""Code generator flags the clang driver passes to a link for its own options (-ggdb: 
-plugin-opt=-debugger-tune=gdb; -femulated-tls, -fstack-size-section, ...): lld reads them
as LLVM options, the backend clang takes them under its own spelling (backend.CODEGEN_FLAGS).
Each link is distributed, and its output has in-process lld's sections and symbols."""

from __future__ import annotations

import pytest

from helpers import links, ltowrap_env, run, wrapper, write

TLS_C = "_Thread_local int counter;\nint bump(int x) { counter += x; return counter; }\n"
MAIN_C = "int bump(int);\nint main(int c, char **v) { (void)v; return bump(c) + bump(2) - 3 - c; }\n"


def names(tc, prog, what: str) -> list[str]:
    if what == "sections":
        out = run([str(tc.bindir / "llvm-readelf"), "-S", "-W", prog], ".").stdout
        return sorted(line.split()[1] for line in out.splitlines() if line.strip().startswith("["))
    return sorted(run([str(tc.bindir / "llvm-nm"), "--format=just-symbols", prog], ".").stdout.split())


@pytest.mark.parametrize("flags", [["-g", "-ggdb"], ["-g", "-glldb"], ["-femulated-tls"], ["-fstack-size-section"]],
                         ids=lambda f: f[-1])
def test_a_driver_codegen_flag_is_distributed_as_in_process(flags, project, tmp_path, tc22):
    write(project / "tls.c", TLS_C)
    write(project / "main.c", MAIN_C)
    for src in ("tls.c", "main.c"):
        run([tc22.clang, "-O2", "-flto=thin", *flags, "-c", src], project)
    link = ["-flto=thin", "-fuse-ld=lld", f"--ld-path={tc22.lld}", *flags, "main.o", "tls.o"]
    run([tc22.clang, *link, "-o", "ref"], project)
    run([wrapper("ltowrap-clang"), *link, "-o", "prog"], project, env=ltowrap_env(tc22))
    assert links(tmp_path)[-1]["decision"] == "distributed", links(tmp_path)[-1]
    for what in ("sections", "symbols"):
        assert names(tc22, str(project / "prog"), what) == names(tc22, str(project / "ref"), what), what
    assert run(["./prog"], project, check=False).returncode == run(["./ref"], project, check=False).returncode


def test_llvm_options_as_the_backend_clang_spells_them():
    from ltowrap.stages.backend import llvm_option

    assert llvm_option("-debugger-tune=gdb") == ["-Xclang", "-debugger-tuning=gdb"]
    assert llvm_option("-function-sections=1") == []
    assert llvm_option("-pass-remarks=inline") == ["-mllvm", "-pass-remarks=inline", "-Rpass=inline"]
    assert llvm_option("-x86-asm-syntax=intel") == ["-mllvm", "-x86-asm-syntax=intel"]
