"""cmdline: ld.lld argv -> LinkCommand (inputs vs option values, input state, libraries, @files, LTO options)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ltowrap.errors import Unsupported
from ltowrap.linkline import ldscript
from ltowrap.linkline.cmdline import LinkCommand, LtoOptions, expand, expand_response_files, parse, parse_line


def inputs(argv: list[str], cwd: str = ".") -> list[str]:
    return [a.input for a in parse(argv, cwd).inputs()]


def groups(argv: list[str]) -> list[tuple[str, ...]]:
    return [a.tokens for a in parse(argv).args]


# --- positional inputs vs option values ----------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-o", "out"],
        ["-oout"],
        ["--output", "out"],
        ["--output=out"],
        ["--soname", "libx.so"],
        ["--soname=libx.so"],
        ["-soname", "libx.so"],
        ["-h", "libx.so"],
        ["-hlibx.so"],
        ["-T", "script.ld"],
        ["-Tscript.ld"],
        ["--script", "script.ld"],
        ["--version-script=v.map"],
        ["--version-script", "v.map"],
        ["-version-script", "v.map"],
        ["-m", "elf_x86_64"],
        ["-melf_x86_64"],
        ["-z", "now"],
        ["-znow"],
        ["-e", "main"],
        ["-emain"],
        ["--entry=main"],
        ["-u", "sym"],
        ["--undefined", "sym"],
        ["-R", "/rpath"],
        ["-rpath", "/rpath"],
        ["--rpath=/rpath"],
        ["-L", "/libdir"],
        ["-L/libdir"],
        ["--library-path", "/libdir"],
        ["--library-path=/libdir"],
        ["--dynamic-linker", "/lib64/ld-linux-x86-64.so.2"],
        ["-dynamic-linker", "/lib64/ld-linux-x86-64.so.2"],
        ["-plugin", "/usr/lib/LLVMgold.so"],
        ["-Map", "out.map"],
        ["--defsym", "a=b"],
        ["--hash-style", "gnu"],
        ["--sysroot", "/sysroot"],
        ["--sysroot=/sysroot"],
        ["-mllvm", "-enable-foo"],
        ["--wrap", "malloc"],
        ["--export-dynamic-symbol", "foo"],
        ["-export-dynamic"],
        ["--export-dynamic"],
        ["-E"],
        ["--build-id"],
        ["--build-id=sha1"],
        ["-O2"],
        ["--gc-sections"],
        ["--as-needed"],
        ["-pie"],
        ["--eh-frame-hdr"],
        ["-eh-frame-hdr"],
        ["--fatal-warnings"],
        ["-fatal-warnings"],
        ["--no-undefined"],
        ["--start-group"],
        ["-("],
        ["--threads=4"],
        ["--thinlto-cache-dir=/c"],
        ["-plugin-opt=O2"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_option_values_are_not_inputs(argv):
    """Each option (with its value) is one Arg, and the objects around it are still inputs."""
    cmd = parse(["first.o", *argv, "second.o"])
    assert [a.input for a in cmd.inputs()] == ["first.o", "second.o"]
    assert [a.tokens for a in cmd.args] == [("first.o",), tuple(argv), ("second.o",)]


def test_separate_values_group_with_their_option():
    assert groups(["-o", "out", "a.o", "-z", "now", "-znow", "--soname", "x", "-soname", "y", "-T", "s.ld"]) == [
        ("-o", "out"), ("a.o",), ("-z", "now"), ("-znow",), ("--soname", "x"), ("-soname", "y"), ("-T", "s.ld"),
    ]


def test_export_dynamic_is_a_flag_not_e_with_a_value():
    # If -export-dynamic were read as "-e xport-dynamic" or "-e" + next token, main.o would be lost.
    cmd = parse(["-export-dynamic", "main.o", "-e", "entry", "b.o", "-eentry", "c.o"])
    assert [a.tokens for a in cmd.args] == [
        ("-export-dynamic",), ("main.o",), ("-e", "entry"), ("b.o",), ("-eentry",), ("c.o",),
    ]
    assert [a.input for a in cmd.inputs()] == ["main.o", "b.o", "c.o"]


@pytest.mark.parametrize("flag", ["-eh-frame-hdr", "-enable-new-dtags", "-emit-relocs", "-end-group",
                                  "-fatal-warnings", "-undefined-version", "-Bstatic", "-static",
                                  "-Bsymbolic-functions", "-error-unresolved-symbols"])
def test_single_dash_long_flags_do_not_swallow_the_next_input(flag):
    assert inputs([flag, "x.o"]) == ["x.o"]


def test_rpath_link_value_is_not_an_input():
    assert inputs(["-rpath-link", "/usr/lib", "a.o"]) == ["a.o"]


def test_single_dash_build_id_is_a_flag():
    assert inputs(["-build-id", "a.o"]) == ["a.o"]


def test_single_dash_omagic_is_an_output_name():
    assert parse(["-omagic", "a.o"]).output == "magic"


def test_dash_is_an_input_and_dangling_option_is_kept():
    cmd = parse(["a.o", "-", "-o"])
    assert [a.tokens for a in cmd.args] == [("a.o",), ("-",), ("-o",)]
    assert cmd.output == "a.out"


@pytest.mark.parametrize(
    "argv, output",
    [([], "a.out"), (["-o", "x"], "x"), (["-ox"], "x"), (["--output", "x"], "x"), (["--output=x"], "x"),
     (["-o", "first", "-o", "last"], "last")],
)
def test_output(argv, output):
    assert parse(["a.o", *argv]).output == output


# --- output kind --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, shared, pie, relocatable",
    [
        ([], False, False, False),
        (["-shared"], True, False, False),
        (["--shared"], True, False, False),
        (["-Bshareable"], True, False, False),
        (["-pie"], False, True, False),
        (["--pie"], False, True, False),
        (["--pic-executable"], False, True, False),
        (["-pie", "--no-pie"], False, False, False),
        (["-shared", "-pie"], True, False, False),
        (["-pie", "-shared"], True, False, False),
        (["-r"], False, False, True),
        (["--relocatable"], False, False, True),
    ],
)
def test_output_kind(argv, shared, pie, relocatable):
    cmd = parse(["a.o", *argv])
    assert (cmd.shared, cmd.pie, cmd.relocatable) == (shared, pie, relocatable)


@pytest.mark.parametrize("argv, fat", [
    ([], False),
    (["--fat-lto-objects"], True),
    (["--fat-lto-objects", "--no-fat-lto-objects"], False),
    (["--no-fat-lto-objects", "--fat-lto-objects"], True),
])
def test_fat_lto_objects(argv, fat):
    cmd = parse(["a.o", *argv])
    assert cmd.fat_lto_objects == fat and [a.input for a in cmd.inputs()] == ["a.o"]


def test_gated_options_are_seen_inside_response_files(tmp_path):
    """Options of a feature some lld release lacks, as lld reads them: from a response file too,
    and before a refused one (the caller checks them first)."""
    (tmp_path / "opts.rsp").write_text("--fat-lto-objects\n--thinlto-distributor=/bin/d\n")
    line = expand(["a.o", "@opts.rsp", "--thinlto-emit-index-files"], str(tmp_path))
    assert line.gated() == [("fat-lto-objects", "--fat-lto-objects"), ("thinlto-distributor", "--thinlto-distributor"),
                            ("thinlto-emit-index-files", "--thinlto-emit-index-files")]
    assert line.responses == (str(tmp_path / "opts.rsp"),)
    assert expand(["a.o", "--fatal-warnings", "-o", "x"]).gated() == []
    with pytest.raises(Unsupported):
        parse_line(line, str(tmp_path))


# --- per-input state -----------------------------------------------------------------------------


def state(cmd: LinkCommand) -> list[tuple[str, bool, bool]]:
    return [(a.input, a.whole_archive, a.lazy) for a in cmd.inputs()]


def test_whole_archive_state():
    cmd = parse(["a.o", "--whole-archive", "b.a", "c.a", "--no-whole-archive", "d.a", "-whole-archive", "e.a"])
    assert state(cmd) == [("a.o", False, False), ("b.a", True, False), ("c.a", True, False),
                          ("d.a", False, False), ("e.a", True, False)]


def test_start_lib_state():
    cmd = parse(["a.o", "--start-lib", "b.o", "c.o", "--end-lib", "d.o", "-start-lib", "e.o", "-end-lib"])
    assert state(cmd) == [("a.o", False, False), ("b.o", False, True), ("c.o", False, True),
                          ("d.o", False, False), ("e.o", False, True)]


def test_push_and_pop_state_restore_whole_archive():
    cmd = parse(["--whole-archive", "a.a", "--push-state", "--no-whole-archive", "b.a", "--pop-state", "c.a",
                 "--push-state", "--whole-archive", "--pop-state", "--no-whole-archive", "d.a", "--pop-state", "e.a"])
    # The last --pop-state has nothing to pop and changes nothing.
    assert [(i, w) for i, w, _ in state(cmd)] == [("a.a", True), ("b.a", False), ("c.a", True), ("d.a", False),
                                                  ("e.a", False)]


def test_group_markers():
    cmd = parse(["--start-group", "a.a", "b.a", "--end-group", "-(", "c.a", "-)", "-start-group", "-end-group"])
    assert [(a.tokens[0], a.group_marker) for a in cmd.args] == [
        ("--start-group", True), ("a.a", False), ("b.a", False), ("--end-group", True),
        ("-(", True), ("c.a", False), ("-)", True), ("-start-group", True), ("-end-group", True),
    ]
    assert [a.input for a in cmd.inputs()] == ["a.a", "b.a", "c.a"]


def test_state_applies_to_libraries(libdirs):
    d1, _ = libdirs
    cmd = parse([f"-L{d1}", "--whole-archive", "-lfoo", "--no-whole-archive", "--start-lib", "-lfoo", "--end-lib"])
    assert state(cmd) == [(f"{d1}/libfoo.a", True, False), (f"{d1}/libfoo.a", False, True)]


# --- libraries ----------------------------------------------------------------------------------


@pytest.fixture
def libdirs(tmp_path) -> tuple[str, str]:
    """d1: libfoo.a only. d2: libfoo.so, libbar.so + libbar.a, libbaz.a, libplain.a."""
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    for p in (d1 / "libfoo.a", d2 / "libfoo.so", d2 / "libbar.so", d2 / "libbar.a", d2 / "libbaz.a"):
        p.write_bytes(b"")
    (d2 / "libdir.so").mkdir()  # lld takes any path that exists, and then fails to read it
    return str(d1), str(d2)


@pytest.mark.parametrize(
    "spelling",
    [["-lbar"], ["-l", "bar"], ["--library=bar"], ["--library", "bar"], ["-library", "bar"]],
)
def test_library_spellings(libdirs, spelling):
    _, d2 = libdirs
    cmd = parse([f"-L{d2}", *spelling])
    assert [(a.tokens, a.input) for a in cmd.inputs()] == [(tuple(spelling), f"{d2}/libbar.so")]


@pytest.mark.parametrize("spelling", [["-l:libbar.a"], ["-l", ":libbar.a"], ["--library=:libbar.a"]])
def test_exact_library_name(libdirs, spelling):
    _, d2 = libdirs
    assert inputs([f"-L{d2}", *spelling]) == [f"{d2}/libbar.a"]


@pytest.mark.parametrize(
    "spelling", [lambda d: [f"-L{d}"], lambda d: ["-L", d], lambda d: [f"--library-path={d}"],
                 lambda d: ["--library-path", d]],
    ids=["-Ldir", "-L dir", "--library-path=dir", "--library-path dir"],
)
def test_search_dir_spellings(libdirs, spelling):
    _, d2 = libdirs
    assert inputs([*spelling(d2), "-lbaz"]) == [f"{d2}/libbaz.a"]


def test_search_dirs_in_order_and_so_before_a_within_a_dir(libdirs):
    d1, d2 = libdirs
    assert inputs([f"-L{d1}", f"-L{d2}", "-lfoo"]) == [f"{d1}/libfoo.a"]  # first directory wins
    assert inputs([f"-L{d2}", f"-L{d1}", "-lfoo"]) == [f"{d2}/libfoo.so"]
    assert inputs([f"-L{d2}", "-lbar"]) == [f"{d2}/libbar.so"]


def test_search_dirs_after_the_library_count(libdirs):
    _, d2 = libdirs  # lld collects every -L before resolving any -l
    assert inputs(["-lbar", f"-L{d2}"]) == [f"{d2}/libbar.so"]


def test_relative_search_dir(libdirs, monkeypatch):
    _, d2 = libdirs
    monkeypatch.chdir(Path(d2).parent)
    assert inputs(["-Ld2", "-lbar"]) == ["d2/libbar.so"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["-Bstatic", "-lbar"], "libbar.a"),
        (["-static", "-lbar"], "libbar.a"),
        (["-dn", "-lbar"], "libbar.a"),
        (["-non_shared", "-lbar"], "libbar.a"),
        (["-Bstatic", "-Bdynamic", "-lbar"], "libbar.so"),
        (["-Bstatic", "-dy", "-lbar"], "libbar.so"),
        (["-Bstatic", "-call_shared", "-lbar"], "libbar.so"),
        (["-Bstatic", "--push-state", "-Bdynamic", "--pop-state", "-lbar"], "libbar.a"),
        (["--push-state", "-Bstatic", "--pop-state", "-lbar"], "libbar.so"),
        (["-Bstatic", "-lfoo"], None),  # d2 has only libfoo.so
        (["-Bstatic", "-l:libfoo.so"], "libfoo.so"),  # -l: is exact even when static
    ],
)
def test_bstatic_chooses_the_archive(libdirs, argv, expected):
    _, d2 = libdirs
    cmd = parse([f"-L{d2}", *argv])
    lib = [a for a in cmd.args if a.tokens[0].startswith("-l")]
    assert [a.input for a in lib] == [None if expected is None else f"{d2}/{expected}"]


def test_missing_library_is_kept_verbatim_without_an_input(libdirs):
    _, d2 = libdirs
    cmd = parse([f"-L{d2}", "-lnothere", "-ldir"])
    assert [(a.tokens, a.input) for a in cmd.args[1:]] == [(("-lnothere",), None), (("-ldir",), f"{d2}/libdir.so")]


def test_the_paths_tried_before_a_library_are_recorded(libdirs):
    d1, d2 = libdirs
    cmd = parse([f"-L{d2}", f"-L{d1}", "-Bstatic", "-lfoo"])
    assert cmd.args[-1].input == f"{d1}/libfoo.a" and cmd.args[-1].searched == (f"{d2}/libfoo.a",)
    assert cmd.args[-1].static


def test_find_library_directly(libdirs):
    d1, d2 = libdirs

    def find(spec: str, dirs: list[str], static: bool) -> str | None:
        return ldscript.find_library(spec, search_dirs=dirs, static=static)[0]

    assert find("foo", [d1, d2], static=False) == f"{d1}/libfoo.a"
    assert find("foo", [d2, d1], static=False) == f"{d2}/libfoo.so"
    assert find("foo", [d2, d1], static=True) == f"{d1}/libfoo.a"
    assert find(":libbar.a", [d1, d2], static=False) == f"{d2}/libbar.a"
    assert find("nothere", [d1, d2], static=False) is None
    assert find("foo", [], static=False) is None


def test_sysroot_prefixes_equals_search_dirs(libdirs):
    _, d2 = libdirs
    root, rel = str(Path(d2).parent), "/" + Path(d2).name
    assert inputs([f"--sysroot={root}", "-L", f"={rel}", "-lbar"]) == [f"{d2}/libbar.so"]
    assert inputs(["--sysroot", root, f"--library-path=={rel}", "-lbar"]) == [f"{d2}/libbar.so"]
    assert inputs(["-L", f"={rel}", f"--sysroot={root}", "-lbar"]) == [f"{d2}/libbar.so"]  # order-independent


def test_sysroot_does_not_touch_plain_search_dirs(libdirs):
    _, d2 = libdirs
    assert inputs(["--sysroot=/nonexistent", f"-L{d2}", "-lbar"]) == [f"{d2}/libbar.so"]


def test_sysroot_with_joined_equals_search_dir(libdirs):
    _, d2 = libdirs
    root, rel = str(Path(d2).parent), "/" + Path(d2).name
    assert inputs([f"--sysroot={root}", f"-L={rel}", "-lbar"]) == [f"{d2}/libbar.so"]


def test_equals_search_dir_without_sysroot(libdirs):
    _, d2 = libdirs
    assert inputs(["-L", f"={d2}", "-lbar"]) == [f"{d2}/libbar.so"]


# --- response files -----------------------------------------------------------------------------


def test_response_file(tmp_path):
    (tmp_path / "args.rsp").write_text("a.o -o out\n  b.o\n")
    assert expand_response_files(["x.o", "@args.rsp", "y.o"], str(tmp_path)) == ["x.o", "a.o", "-o", "out", "b.o", "y.o"]
    assert parse(["@args.rsp"], str(tmp_path)).output == "out"


def test_response_file_quotes_and_spaces(tmp_path):
    (tmp_path / "q.rsp").write_text("\"with space.o\" 'single quoted.o' back\\ slash.o \"g h\".o -o \"out dir/x\"\n")
    assert expand_response_files(["@q.rsp"], str(tmp_path)) == [
        "with space.o", "single quoted.o", "back slash.o", "g h.o", "-o", "out dir/x",
    ]


def test_response_file_backslash_in_double_quotes_like_lld(tmp_path):
    (tmp_path / "q.rsp").write_text('"a\\b.o"\n')
    assert expand_response_files(["@q.rsp"], str(tmp_path)) == ["ab.o"]


def test_nested_response_files_resolve_against_cwd(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "outer.rsp").write_text("outer.o @sub/inner.rsp last.o")
    (tmp_path / "sub" / "inner.rsp").write_text("inner.o @deepest.rsp")
    (tmp_path / "deepest.rsp").write_text("deepest.o")
    assert expand_response_files(["@sub/outer.rsp"], str(tmp_path)) == ["outer.o", "inner.o", "deepest.o", "last.o"]


def test_missing_response_file(tmp_path):
    with pytest.raises(Unsupported, match="nothere.rsp"):
        expand_response_files(["@nothere.rsp"], str(tmp_path))
    with pytest.raises(Unsupported):
        parse(["a.o", "@nothere.rsp"], str(tmp_path))


def test_self_including_response_file(tmp_path):
    (tmp_path / "loop.rsp").write_text("a.o @loop.rsp")
    with pytest.raises(Unsupported, match="nested too deep"):
        expand_response_files(["@loop.rsp"], str(tmp_path))


def test_mutually_including_response_files(tmp_path):
    (tmp_path / "a.rsp").write_text("@b.rsp")
    (tmp_path / "b.rsp").write_text("@a.rsp")
    with pytest.raises(Unsupported):
        parse(["@a.rsp"], str(tmp_path))


def test_unbalanced_quote_in_response_file_runs_to_the_end_like_llvm(tmp_path):
    (tmp_path / "bad.rsp").write_text('"a.o b.o')
    assert expand_response_files(["@bad.rsp"], str(tmp_path)) == ["a.o b.o"]


def test_lone_at_sign_is_not_a_response_file():
    assert expand_response_files(["@"]) == ["@"]


# --- tokens are never lost -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-o", "out", "a.o", "--soname", "x", "-soname", "y", "-T", "s.ld", "--version-script=v", "-m", "elf_x86_64",
         "-z", "now", "-znow", "-export-dynamic", "b.o"],
        ["--whole-archive", "a.a", "--no-whole-archive", "--start-lib", "b.o", "--end-lib", "-(", "c.a", "-)",
         "--push-state", "-Bstatic", "-lm", "--pop-state", "-L", "/x", "-L/y", "--library-path=/z", "-lc", "-l", "m"],
        ["--lto-O3", "-plugin-opt=mcpu=znver3", "-mllvm", "-foo", "-plugin", "gold.so", "-plugin-opt=-bar", "a.o", "-o"],
        ["@all.rsp", "tail.o"],
    ],
)
def test_tokens_round_trip(tmp_path, argv):
    (tmp_path / "all.rsp").write_text("-o 'my out' --start-group a.o \"b c.o\" --end-group -z relro @more.rsp")
    (tmp_path / "more.rsp").write_text("-L d -lx -plugin-opt=O2")
    expanded = expand_response_files(argv, str(tmp_path))
    cmd = parse(argv, str(tmp_path))
    assert [t for a in cmd.args for t in a.tokens] == expanded
    assert all(a.tokens for a in cmd.args)


# --- LTO options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, lto",
    [
        ([], LtoOptions()),
        (["--lto-O3"], LtoOptions(opt_level="3")),
        (["--lto-O0"], LtoOptions(opt_level="0")),
        (["-plugin-opt=O1"], LtoOptions(opt_level="1")),
        (["--plugin-opt=O2"], LtoOptions(opt_level="2")),
        (["-plugin-opt", "O3"], LtoOptions(opt_level="3")),
        (["--lto-O3", "-plugin-opt=O1"], LtoOptions(opt_level="1")),  # last one wins
        (["-plugin-opt=mcpu=znver3"], LtoOptions(cpu="znver3")),
        (["-plugin-opt=mattr=+avx2,-sse4a"], LtoOptions(attrs=("+avx2", "-sse4a"))),
        (["-plugin-opt=mattr=+avx2", "-plugin-opt=mattr=-sse4a"], LtoOptions(attrs=("+avx2", "-sse4a"))),
        (["-mllvm", "-foo"], LtoOptions(mllvm=("-foo",))),
        (["-mllvm=-foo"], LtoOptions(mllvm=("-foo",))),
        (["--mllvm=-foo"], LtoOptions(mllvm=("-foo",))),
        (["-plugin-opt=-foo"], LtoOptions(mllvm=("-foo",))),
        (["-mllvm", "-a", "-plugin-opt=-b=1"], LtoOptions(mllvm=("-a", "-b=1"))),
        (["--lto-sample-profile=p.prof"], LtoOptions(sample_profile="p.prof")),
        (["-plugin-opt=sample-profile=p.prof"], LtoOptions(sample_profile="p.prof")),
        # Recognised and ignored: they do not change what the backends produce.
        (["-plugin-opt=thinlto", "-plugin-opt=jobs=8", "-plugin-opt=-pass-through=-lgcc",
          "-plugin-opt=-fresolution=x.res", "-plugin", "/usr/lib/LLVMgold.so"], LtoOptions()),
        # The linker's own -O is not the LTO level.
        (["-O2"], LtoOptions()),
    ],
)
def test_lto_options(argv, lto):
    assert parse(["a.o", *argv]).lto == lto


def test_lto_options_together():
    cmd = parse(["--lto-O3", "-plugin-opt=O1", "-plugin-opt=mcpu=znver3", "-plugin-opt=mattr=+avx2,-sse4a",
                 "-mllvm", "-foo", "-plugin-opt=-bar", "--lto-sample-profile=p", "a.o"])
    assert cmd.lto == LtoOptions(opt_level="1", cpu="znver3", attrs=("+avx2", "-sse4a"), mllvm=("-foo", "-bar"),
                                 sample_profile="p")
    assert [a.input for a in cmd.inputs()] == ["a.o"]


def test_read_files():
    cmd = parse(["-T", "s.ld", "--version-script=v.map", "--dynamic-list", "d.list", "--lto-sample-profile=p",
                 "-o", "out", "a.o"])
    assert cmd.read_files == ("s.ld", "v.map", "d.list", "p")


@pytest.mark.parametrize(
    "argv",
    [
        ["--thinlto-index-only"],
        ["--thinlto-index-only=list.txt"],
        ["-plugin-opt=thinlto-index-only"],
        ["--thinlto-emit-index-files"],
        ["--thinlto-distributor=x"],
        ["--thinlto-distributor", "x"],
        ["--thinlto-distributor-arg=y"],
        ["--thinlto-single-module=a.o"],
        ["--save-temps"],
        ["-save-temps"],
        ["-plugin-opt=save-temps"],
        ["--lto-emit-asm"],
        ["-plugin-opt=emit-asm"],
        ["--lto-emit-llvm"],
        ["-plugin-opt=emit-llvm"],
        ["--lto-obj-path=x.o"],
        ["-plugin-opt=obj-path=x.o"],
        ["--lto-cs-profile-generate"],
        ["-plugin-opt=cs-profile-path=p"],
        ["--lto-newpm-passes=default<O2>"],
        ["--load-pass-plugin=p.so"],
        ["--lto-basic-block-sections=all"],
        ["-plugin-opt=some-unknown-option"],
        ["--reproduce=r.tar"],
        ["--format=binary"],
        ["-b", "binary"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_unsupported(argv):
    with pytest.raises(Unsupported):
        parse(["a.o", *argv, "b.o"])


def test_split_dwarf_is_for_the_backends_only():
    cmd = parse(["a.o", "-plugin-opt=dwo_dir=prog-dwo", "--lto-partitions=3", "b.o"])
    assert (cmd.lto.dwo_dir, cmd.lto.partitions) == ("prog-dwo", 3)
    assert [a.tokens for a in cmd.args if a.backends_only] == [("-plugin-opt=dwo_dir=prog-dwo",)]
    assert parse(["a.o"]).lto.partitions == 1
