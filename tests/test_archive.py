"""archive.read_members and has_bitcode_member on archives written by real tools (llvm-ar 22, GNU
ar), plus corrupt ones."""

from __future__ import annotations

import shutil
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from needs import missing

from ltowrap.errors import Unsupported
from ltowrap.formats.archive import Member, has_bitcode_member, read_members

LLVM = Path("/usr/lib/llvm-22/bin")
CLANG = LLVM / "clang"
LLVM_AR = LLVM / "llvm-ar"
GNU_AR = shutil.which("ar")
LONG = "a_member_name_longer_than_15.o"  # > 15 chars: needs the "//" long-name table in GNU format

needs_gnu_ar = pytest.mark.gnu_ar  # the cases that run GNU ar (see tools_installed)


@pytest.fixture(autouse=True)
def tools_installed(request) -> None:
    """clang and llvm-ar 22 for every test here, GNU ar for the cases marked so (needs.missing if not)."""
    for tool in (CLANG, LLVM_AR):
        if not tool.exists():
            missing(str(tool), "dev/setup installs clang-22 and llvm-22")
    if request.node.get_closest_marker("gnu_ar") and GNU_AR is None:
        missing("GNU ar", "dev/setup installs binutils")


def sh(*argv: object, cwd: Path) -> None:
    subprocess.run([str(a) for a in argv], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def objs(tmp_path_factory) -> Path:
    """A directory of real objects: native ELF (native.o, LONG, sub/deep.o) and ThinLTO bitcode (bitcode.o)."""
    d = tmp_path_factory.mktemp("objs")
    (d / "native.c").write_text("int native(void) { return 1; }\n")
    (d / "bitcode.c").write_text("int bitcode(int x) { return x * 3; }\n")
    (d / "long.c").write_text("int long_named(void) { return 7; }\n")
    (d / "deep.c").write_text("int deep(void) { return 9; }\n")
    (d / "sub").mkdir()
    sh(CLANG, "-c", "native.c", "-o", "native.o", cwd=d)
    sh(CLANG, "-flto=thin", "-c", "bitcode.c", "-o", "bitcode.o", cwd=d)
    sh(CLANG, "-c", "long.c", "-o", LONG, cwd=d)
    sh(CLANG, "-flto=thin", "-c", "deep.c", "-o", "sub/deep.o", cwd=d)
    (d / "odd.txt").write_bytes(b"hello")  # odd size: exercises the padding byte after a member
    return d


@pytest.fixture
def work(objs, tmp_path) -> Path:
    """A private copy of the objects, so tests may write archives beside them or delete members."""
    d = tmp_path / "w"
    shutil.copytree(objs, d)
    return d


def contents(d: Path, *names: str) -> list[tuple[str, bytes]]:
    return [(n, (d / n).read_bytes()) for n in names]


def listing(members: list[Member]) -> list[tuple[str, bytes]]:
    return [(m.name, m.read()) for m in members]


# --- regular archives -------------------------------------------------------------------------

MEMBERS = ("native.o", "bitcode.o", LONG)


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param([LLVM_AR, "rcs"], id="llvm-ar-gnu"),
        pytest.param([LLVM_AR, "--format=gnu", "rcs"], id="llvm-ar-format-gnu"),
        pytest.param([GNU_AR, "rcs"], id="gnu-ar", marks=needs_gnu_ar),
        pytest.param([GNU_AR, "rcS"], id="gnu-ar-no-symtab", marks=needs_gnu_ar),
        pytest.param([LLVM_AR, "rcS"], id="llvm-ar-no-symtab"),
    ],
)
def test_regular_archive_members_match_the_objects(work, tool):
    sh(*tool, "lib.a", *MEMBERS, cwd=work)
    members = read_members(str(work / "lib.a"))
    assert listing(members) == contents(work, *MEMBERS)
    assert all(m.data is not None and m.path is None for m in members)


@needs_gnu_ar
def test_gnu_ar_long_names_use_the_long_name_table(work):
    sh(GNU_AR, "rc", "lib.a", LONG, "native.o", cwd=work)
    raw = (work / "lib.a").read_bytes()
    assert b"//              " in raw  # the table really is there
    assert listing(read_members(str(work / "lib.a"))) == contents(work, LONG, "native.o")


def test_symbol_table_is_not_a_member(work):
    sh(LLVM_AR, "rcs", "lib.a", "native.o", "bitcode.o", cwd=work)
    assert (work / "lib.a").read_bytes()[8:10] == b"/ "  # starts with the "/" symbol table
    assert [m.name for m in read_members(str(work / "lib.a"))] == ["native.o", "bitcode.o"]


def test_sym64_symbol_table_is_not_a_member(work):
    # llvm-ar writes the 64-bit "/SYM64/" table once offsets pass SYM64_THRESHOLD (a testing knob).
    subprocess.run([str(LLVM_AR), "rcs", "lib.a", "native.o", "bitcode.o"], cwd=work, check=True,
                   env={"SYM64_THRESHOLD": "0", "PATH": "/usr/bin:/bin"})
    assert (work / "lib.a").read_bytes()[8:16] == b"/SYM64/ "
    assert listing(read_members(str(work / "lib.a"))) == contents(work, "native.o", "bitcode.o")


@pytest.mark.parametrize(
    "tool",
    [pytest.param([LLVM_AR, "rc"], id="llvm-ar"), pytest.param([GNU_AR, "rc"], id="gnu-ar", marks=needs_gnu_ar)],
)
def test_odd_sized_member_padding(work, tool):
    sh(*tool, "lib.a", "odd.txt", "native.o", cwd=work)
    assert listing(read_members(str(work / "lib.a"))) == contents(work, "odd.txt", "native.o")


@pytest.mark.parametrize(
    "tool", [pytest.param(GNU_AR, id="gnu-ar", marks=needs_gnu_ar), pytest.param(LLVM_AR, id="llvm-ar")]
)
def test_duplicate_member_names_are_all_returned_in_order(work, tool):
    first = (work / "native.o").read_bytes()
    second = (work / "bitcode.o").read_bytes()
    (work / "dup.o").write_bytes(first)
    sh(tool, "q", "lib.a", "dup.o", cwd=work)
    (work / "dup.o").write_bytes(second)
    sh(tool, "q", "lib.a", "dup.o", cwd=work)
    assert listing(read_members(str(work / "lib.a"))) == [("dup.o", first), ("dup.o", second)]


@pytest.mark.parametrize(
    "tool",
    [pytest.param([LLVM_AR, "rcs"], id="llvm-ar"), pytest.param([GNU_AR, "rcs"], id="gnu-ar", marks=needs_gnu_ar),
     pytest.param([LLVM_AR, "rcsT"], id="llvm-ar-thin")],
)
def test_empty_archive(work, tool):
    sh(*tool, "empty.a", cwd=work)
    assert (work / "empty.a").stat().st_size == 8
    assert read_members(str(work / "empty.a")) == []


def test_relative_archive_path(work, monkeypatch):
    sh(LLVM_AR, "rcs", "lib.a", "native.o", cwd=work)
    monkeypatch.chdir(work.parent)
    assert listing(read_members("w/lib.a")) == contents(work, "native.o")


# --- BSD format ------------------------------------------------------------------------------


def test_bsd_archive_member_data(work):
    sh(LLVM_AR, "--format=bsd", "rcS", "lib.a", *MEMBERS, "odd.txt", cwd=work)  # no symbol table
    assert (work / "lib.a").read_bytes()[8:11] == b"#1/"
    assert listing(read_members(str(work / "lib.a"))) == contents(work, *MEMBERS, "odd.txt")


@pytest.mark.parametrize("fmt", ["bsd", "darwin"])
def test_bsd_symbol_table_is_not_a_member(work, fmt):
    sh(LLVM_AR, f"--format={fmt}", "rcs", "lib.a", "native.o", "bitcode.o", cwd=work)
    assert [m.name for m in read_members(str(work / "lib.a"))] == ["native.o", "bitcode.o"]


# --- thin archives ---------------------------------------------------------------------------

THIN_MEMBERS = ("native.o", "sub/deep.o", LONG)


@pytest.mark.parametrize(
    "tool",
    [pytest.param([LLVM_AR, "rcsT"], id="llvm-ar"), pytest.param([GNU_AR, "rcT"], id="gnu-ar", marks=needs_gnu_ar)],
)
def test_thin_archive(work, tool):
    sh(*tool, "thin.a", *THIN_MEMBERS, cwd=work)
    assert (work / "thin.a").read_bytes().startswith(b"!<thin>\n")
    members = read_members(str(work / "thin.a"))
    assert [m.name for m in members] == list(THIN_MEMBERS)
    assert all(m.data is None for m in members)
    assert [m.path for m in members] == [str(work / n) for n in THIN_MEMBERS]
    assert listing(members) == contents(work, *THIN_MEMBERS)


@pytest.mark.parametrize(
    "tool",
    [pytest.param([LLVM_AR, "rcsT"], id="llvm-ar"), pytest.param([GNU_AR, "rcT"], id="gnu-ar", marks=needs_gnu_ar)],
)
def test_thin_archive_members_are_relative_to_the_archive_directory(work, tool, monkeypatch):
    (work / "lib").mkdir()
    sh(*tool, "lib/thin.a", "native.o", "sub/deep.o", cwd=work)
    members = read_members(str(work / "lib" / "thin.a"))
    assert [m.name for m in members] == ["../native.o", "../sub/deep.o"]
    assert listing(members) == [("../native.o", (work / "native.o").read_bytes()),
                                ("../sub/deep.o", (work / "sub/deep.o").read_bytes())]
    # Also when the archive itself is named relative to an unrelated cwd.
    monkeypatch.chdir(work / "sub")
    again = read_members("../lib/thin.a")
    assert [m.read() for m in again] == [m.read() for m in members]


def test_thin_archive_with_absolute_member_paths(work):
    (work / "lib").mkdir()
    sh(LLVM_AR, "rcsT", "lib/thin.a", work / "native.o", cwd=work)
    members = read_members(str(work / "lib" / "thin.a"))
    assert [m.read() for m in members] == [(work / "native.o").read_bytes()]


@needs_gnu_ar
def test_thin_archive_gnu_ar_full_paths(work):
    sh(GNU_AR, "rcTP", "thin.a", work / "native.o", cwd=work)
    members = read_members(str(work / "thin.a"))
    assert [(m.name, m.path) for m in members] == [(str(work / "native.o"), str(work / "native.o"))]
    assert members[0].read() == (work / "native.o").read_bytes()


def test_thin_archive_missing_member_raises_on_read(work):
    sh(LLVM_AR, "rcsT", "thin.a", "native.o", "sub/deep.o", cwd=work)
    (work / "sub" / "deep.o").unlink()
    members = read_members(str(work / "thin.a"))  # listing does not need the member files
    assert members[0].read() == (work / "native.o").read_bytes()
    with pytest.raises(Unsupported, match="deep.o"):
        members[1].read()


# --- not archives, unreadable, corrupt -------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(Unsupported, match="cannot read archive"):
        read_members(str(tmp_path / "nope.a"))


def test_directory(tmp_path):
    with pytest.raises(Unsupported):
        read_members(str(tmp_path))


def test_object_file_is_not_an_archive(work):
    with pytest.raises(Unsupported, match="not an archive"):
        read_members(str(work / "native.o"))


@pytest.fixture
def gnu_blob(work) -> bytes:
    """A real GNU archive: symbol table, long-name table, then native.o, LONG, bitcode.o."""
    sh(LLVM_AR, "rcs", "lib.a", "native.o", LONG, "bitcode.o", cwd=work)
    return (work / "lib.a").read_bytes()


def first_member_offset(blob: bytes, name: bytes) -> int:
    pos = blob.index(name.ljust(16))
    assert blob[pos + 58 : pos + 60] == b"`\n"
    return pos


def corrupt(tmp_path: Path, blob: bytes) -> str:
    p = tmp_path / "corrupt.a"
    p.write_bytes(blob)
    return str(p)


def with_size(blob: bytes, pos: int, field: bytes) -> bytes:
    return blob[: pos + 48] + field.ljust(10) + blob[pos + 58 :]


def test_truncated_in_the_middle_of_a_member(tmp_path, gnu_blob):
    pos = first_member_offset(gnu_blob, b"native.o/")
    with pytest.raises(Unsupported, match="truncated"):
        read_members(corrupt(tmp_path, gnu_blob[: pos + 60 + 100]))


def test_truncated_in_the_middle_of_a_header(tmp_path, gnu_blob):
    pos = first_member_offset(gnu_blob, b"native.o/")
    with pytest.raises(Unsupported, match="header"):
        read_members(corrupt(tmp_path, gnu_blob[: pos + 30]))


def test_truncated_last_member(tmp_path, gnu_blob):
    with pytest.raises(Unsupported, match="truncated"):
        read_members(corrupt(tmp_path, gnu_blob[:-1]))


def test_bad_file_magic(tmp_path, gnu_blob):
    with pytest.raises(Unsupported, match="not an archive"):
        read_members(corrupt(tmp_path, b"!<arhc>\n" + gnu_blob[8:]))


def test_bad_header_terminator(tmp_path, gnu_blob):
    pos = first_member_offset(gnu_blob, b"native.o/")
    blob = gnu_blob[: pos + 58] + b"XX" + gnu_blob[pos + 60 :]
    with pytest.raises(Unsupported, match="bad member header"):
        read_members(corrupt(tmp_path, blob))


@pytest.mark.parametrize("field", [b"12x4", b"abc", b"0x10", b"1e3", b"\xff\xfe"])
def test_bad_size_field(tmp_path, gnu_blob, field):
    pos = first_member_offset(gnu_blob, b"native.o/")
    with pytest.raises(Unsupported, match="bad member size"):
        read_members(corrupt(tmp_path, with_size(gnu_blob, pos, field)))


def test_size_field_larger_than_the_file(tmp_path, gnu_blob):
    pos = first_member_offset(gnu_blob, b"native.o/")
    with pytest.raises(Unsupported, match="truncated"):
        read_members(corrupt(tmp_path, with_size(gnu_blob, pos, b"999999999")))


def test_long_name_offset_outside_the_table(tmp_path, gnu_blob):
    pos = gnu_blob.index(b"/0 ")  # LONG's header names offset 0 in "//"
    blob = gnu_blob[:pos] + b"/999".ljust(16) + gnu_blob[pos + 16 :]
    with pytest.raises(Unsupported, match="long-name offset"):
        read_members(corrupt(tmp_path, blob))


def test_long_name_without_a_table(tmp_path, gnu_blob):
    start = gnu_blob.index(b"//".ljust(16))
    size = int(gnu_blob[start + 48 : start + 58])
    end = start + 60 + size + (size & 1)
    with pytest.raises(Unsupported, match="long-name offset"):
        read_members(corrupt(tmp_path, gnu_blob[:start] + gnu_blob[end:]))


@contextmanager
def deadline(seconds: float):
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds}s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_negative_size_field_does_not_hang(tmp_path, gnu_blob):
    pos = first_member_offset(gnu_blob, b"native.o/")
    path = corrupt(tmp_path, with_size(gnu_blob, pos, b"-60"))
    with deadline(0.5), pytest.raises(Unsupported):
        read_members(path)


def bsd_header(name: bytes, size: int) -> bytes:
    fields = [(name, 16), (b"0", 12), (b"0", 6), (b"0", 6), (b"644", 8), (str(size).encode(), 10)]
    return b"".join(value.ljust(width) for value, width in fields) + b"`\n"


@pytest.mark.parametrize("name", [b"#1/zz", b"#1/100", b"#1/-2"])
def test_bad_bsd_name_length(tmp_path, name):
    path = corrupt(tmp_path, b"!<arch>\n" + bsd_header(name, 4) + b"abcd")
    with pytest.raises(Unsupported):
        read_members(path)


# --- has_bitcode_member: headers and 4 bytes a member, at the offsets the headers give --------


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param([LLVM_AR, "rcs"], id="llvm-ar"),
        pytest.param([GNU_AR, "rcs"], id="gnu-ar", marks=needs_gnu_ar),
        pytest.param([LLVM_AR, "--format=bsd", "rcs"], id="llvm-ar-bsd"),
        pytest.param([LLVM_AR, "rcsT"], id="llvm-ar-thin"),
    ],
)
def test_a_bitcode_member_after_native_ones_of_every_size_is_found(work, tool):
    """The bitcode member comes last, after an odd-sized one (its padding byte), a long name
    (the long-name table, or BSD's #1/ name before the data) and many native members."""
    natives = []
    for i in range(40):
        (work / f"n{i}.o").write_bytes((work / "native.o").read_bytes() + b"\0" * i)
        natives.append(f"n{i}.o")
    sh(*tool, "lib.a", "odd.txt", LONG, *natives, "bitcode.o", cwd=work)
    assert has_bitcode_member(str(work / "lib.a"))
    sh(*tool, "native.a", "odd.txt", LONG, *natives, cwd=work)
    assert not has_bitcode_member(str(work / "native.a"))


def test_a_bsd_long_named_bitcode_member_is_read_past_its_name(work):
    (work / "a_long_bitcode_member_name.o").write_bytes((work / "bitcode.o").read_bytes())
    sh(LLVM_AR, "--format=bsd", "rcS", "lib.a", "a_long_bitcode_member_name.o", cwd=work)
    assert b"#1/" in (work / "lib.a").read_bytes()[8:24]
    assert has_bitcode_member(str(work / "lib.a"))


def test_a_malformed_or_unreadable_archive_holds_no_bitcode(work, gnu_blob, tmp_path):
    """The link then passes through, and the linker says what is wrong."""
    assert has_bitcode_member(corrupt(tmp_path, gnu_blob))
    pos = first_member_offset(gnu_blob, b"native.o/")
    bad = gnu_blob[: pos + 58] + b"XX" + gnu_blob[pos + 60 :]  # native.o's header, before bitcode.o
    assert not has_bitcode_member(corrupt(tmp_path, bad))
    bitcode_at = first_member_offset(gnu_blob, b"bitcode.o/")
    assert not has_bitcode_member(corrupt(tmp_path, gnu_blob[: bitcode_at + 60 + 2]))  # 2 bytes of it left
    assert not has_bitcode_member(str(tmp_path / "absent.a"))
    assert not has_bitcode_member(str(tmp_path))
