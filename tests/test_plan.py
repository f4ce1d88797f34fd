"""plan.build: what it reads of the link's archives, and what it hands the link memo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import xxhash

from ltowrap.cache import Cache
from ltowrap.formats import archive
from ltowrap.linkline.cmdline import parse
from ltowrap.stages import plan
from ltowrap.stats import Stats


def objects(d: Path, tc) -> None:
    """m.o (ThinLTO bitcode), n.o (native); lib.a and thin.a hold m.o, native.a holds n.o."""
    (d / "m.c").write_text("int m(int x) { return x + 1; }\n")
    (d / "n.c").write_text("int n(int x) { return x + 2; }\n")
    subprocess.run([tc.clang, "-flto=thin", "-c", "m.c", "-o", "m.o"], cwd=d, check=True)
    subprocess.run([tc.clang, "-c", "n.c", "-o", "n.o"], cwd=d, check=True)
    for name, flags, member in (("lib.a", "rcs", "m.o"), ("thin.a", "rcsT", "m.o"), ("native.a", "rcs", "n.o")):
        subprocess.run([tc.ar, flags, name, member], cwd=d, check=True)


def test_the_memo_gets_a_regular_archives_digest_and_not_a_thin_ones(tmp_path, tc22):
    """The manifest takes the plan's digest of a regular archive it read whole; a thin archive is
    left to the memo, which lists its members (files of their own) beside it."""
    objects(tmp_path, tc22)
    lib, thin = str(tmp_path / "lib.a"), str(tmp_path / "thin.a")
    got = plan.build(parse([lib, thin, "-o", str(tmp_path / "out")]), Cache(str(tmp_path / "c"), Stats()), 22)
    assert [m.origin for m in got.modules] == [f"{lib}(m.o)", f"{thin}(m.o)"]
    assert got.read == {lib: xxhash.xxh3_128_hexdigest((tmp_path / "lib.a").read_bytes())}


def test_an_archive_named_twice_is_looked_into_once(tmp_path, tc22, monkeypatch):
    """A link names libgcc.a twice (-lgcc before and after -lc): its headers are walked once."""
    objects(tmp_path, tc22)
    asked: list[str] = []

    def has_bitcode_member(path: str) -> bool:
        asked.append(path)
        return real(path)

    real = archive.has_bitcode_member
    monkeypatch.setattr(archive, "has_bitcode_member", has_bitcode_member)
    native, lib = str(tmp_path / "native.a"), str(tmp_path / "lib.a")
    got = plan.build(parse([native, lib, native, lib, "-o", str(tmp_path / "out")]), Cache(str(tmp_path / "c"), Stats()),
                     22)
    assert asked == [native, lib, lib]  # an archive with bitcode is read whole each time it is named
    assert got.other_inputs == (native, native)
    assert [p.rewritten for p in got.pieces if p.arg.input] == [False, True, False, True]
    assert len(got.modules) == 2
