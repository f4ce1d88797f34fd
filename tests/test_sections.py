"""The backends' sections (config `sections`): `link` gives every module function and data
sections, as in-process lld does; `module` keeps each module's own, as the kernel's distributed
ThinLTO does, except where the link orders sections.

Seen through a relocatable link (`-r`), which keeps its inputs' sections apart by name.
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import Toolchain, links, ltowrap_env, run, wrapper, write

A_C = "int helper(int x) { return x * 3 + 1; }\nint table[64] = {1};\n"
B_C = "int helper(int);\nextern int table[64];\nint entry(int x) { return helper(x) + table[x & 63]; }\n"


def sections(tc: Toolchain, obj: Path) -> set[str]:
    out = run([str(tc.bindir / "llvm-readelf"), "-S", "-W", str(obj)], obj.parent).stdout
    return {m.group(1) for m in re.finditer(r"\]\s+(\.\S+)", out)}


def compiled(project: Path, tc: Toolchain, *flags: str) -> None:
    write(project / "a.c", A_C)
    write(project / "b.c", B_C)
    for src in ("a.c", "b.c"):
        run([tc.clang, "-O2", *flags, "-c", src], project)


def relocatable(project: Path, tc: Toolchain, out: str, *extra: str, **settings: str) -> set[str]:
    run([wrapper("ltowrap-ld.lld"), "-r", "a.o", "b.o", "-o", out, *extra], project,
        env=ltowrap_env(tc, LTOWRAP_REAL_LD=tc.lld, **settings))
    return sections(tc, project / out)


def test_module_sections_are_the_non_lto_layout_and_link_sections_in_process(project, tmp_path, tc):
    compiled(project, tc)
    run([tc.lld, "-r", "a.o", "b.o", "-o", "plain.o"], project)
    plain = sections(tc, project / "plain.o")
    compiled(project, tc, "-flto=thin")
    run([tc.lld, "-r", "a.o", "b.o", "-o", "inproc.o"], project)
    in_process = sections(tc, project / "inproc.o")
    assert {".text.helper", ".text.entry"} <= in_process  # in-process lld: a section a function

    assert relocatable(project, tc, "link.o") == in_process
    module = relocatable(project, tc, "module.o", LTOWRAP_SECTIONS="module")
    assert module == plain and ".text.helper" not in module
    assert [r["decision"] for r in links(tmp_path)] == ["distributed", "distributed"]  # the setting is in the memo key


def test_a_link_that_orders_sections_gets_them_with_module(project, tmp_path, tc22):
    compiled(project, tc22, "-flto=thin")
    write(project / "order.txt", "entry\nhelper\n")
    got = relocatable(project, tc22, "ordered.o", "--symbol-ordering-file=order.txt", LTOWRAP_SECTIONS="module")
    assert {".text.helper", ".text.entry"} <= got


def test_link_sections_win_over_a_module_compiled_without_them(project, tmp_path, tc22):
    # Kbuild compiles init/ with -fno-function-sections -fno-data-sections; in-process lld gives
    # its backends both all the same, and so must `sections = link` (the record's flags come
    # after the link's on the backend command line, where clang takes the last).
    for src in ("a.c", "b.c"):
        write(project / src, A_C if src == "a.c" else B_C)
    unsectioned = ["-fno-function-sections", "-fno-data-sections"]
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", *unsectioned, "-c", "a.c"], project, env=ltowrap_env(tc22))
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", "b.c"], project, env=ltowrap_env(tc22))
    run([tc22.lld, "-r", "a.o", "b.o", "-o", "inproc.o"], project)
    in_process = sections(tc22, project / "inproc.o")
    assert {".text.helper", ".data.table"} <= in_process

    assert relocatable(project, tc22, "link.o") == in_process
    assert not any(b.get("recorded") is False for b in links(tmp_path)[0]["backends"])  # a.o's own flags were on its line


def test_each_backend_line_of_a_link_is_the_links_options_around_the_modules_own():
    """LinkBackend makes the link's part of its lines once a link: every line still has the
    link's options, those of its own module (less what would undo the link's sections) and
    the options the link forces, in that order."""
    from ltowrap.linkline.cmdline import parse
    from ltowrap.stages.backend import LinkBackend, forced_options, link_options

    for sections, argv in (("link", ["-shared", "--lto-O3", "-plugin-opt=mcpu=znver2", "-mllvm", "-x86-asm-syntax=intel"]),
                           ("module", ["-pie", "--lto-O1"]), ("module", ["-pie", "--symbol-ordering-file=o.txt"])):
        cmd = parse([*argv, "a.o", "-o", "out"])
        backend = LinkBackend("clang", cmd, sections)
        sectioned = sections == "link" or cmd.orders_sections
        for module, recorded in (("m1.o", ["-O1", "-fno-function-sections"]), ("m2.o", ["-mavx2"]), ("m3.o", None)):
            own = [o for o in recorded or [] if not (sectioned and o == "-fno-function-sections")]
            want = ["clang", "-c", "-x", "ir", module, f"-fthinlto-index={module}.bc", "-o", f"{module}.out",
                    "-Wno-unused-command-line-argument", *link_options(cmd, sections), *own, *forced_options(cmd)]
            assert backend.argv(module, f"{module}.bc", f"{module}.out", recorded) == want
