"""A shard's module paths read and rewritten in C (ltowrap._bitcode.strtab_paths and strtab_relocate,
behind bitcode.Strtab) against the reference (bitcode.StrtabPython): the same paths, the same bytes
for every rename, rename asked the same paths in the same order, or the same error, on every index
shard of the suite's corpora (clang/lld 13 to 22), on the shards of a link of many modules, on
hand-built shards of random MODULE_STRTAB records and of each layout the rewrite treats apart, and
on damaged shards; then the fuzz target's spelling of bitcode._STRTAB_WANT.

The compiled reader is built by pip install (setup.py), or in a clone by
`python setup.py build_ext --inplace`: without it these tests skip, and fail under CI=true.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from helpers import Toolchain, many_modules, run
from ltowrap.formats import bitcode
from ltowrap.formats.bitcode import BadBitcode, StrtabPython
from streams import MODULE, STRTAB, SUMMARY, abbreviated, block, chunks, define, found_by_fuzzing, mutate, native, \
    nested, random_shard, record, stream

# Renames of every kind of length: shorter and longer than lld's paths (lengths of one, two and three
# VBR6 chunks), empty, not ASCII, surrogate-escaped bytes; unencodable gives a name that cannot be encoded.
RENAMES: dict[str, Callable[[str], str]] = {
    "ranked": lambda p: f"m/{len(p):06d}-{'f' * 32}.o",
    "shorter": lambda p: "x",
    "empty": lambda p: "",
    "longer": lambda p: "n" * 2000 + p,
    "non-ASCII": lambda p: "\u00e9" * 20 + p[-3:],
    "surrogate-escaped": lambda p: "m\udcff\udcc3\udca9" + p[-5:],
}


def unencodable(path: str) -> str:
    return "m\ud800.o"  # a lone surrogate that is not an escaped byte


class Compiled:
    """ltowrap._bitcode as bitcode.Strtab calls it, the shards the compiled one handed to Python
    counted (every other name passes through, for read())."""

    def __init__(self, module: ModuleType) -> None:
        self.module, self.handed, self.refuse = module, 0, False

    def strtab_relocate(self, *args):
        moved = NotImplemented if self.refuse else self.module.strtab_relocate(*args)
        self.handed += moved is NotImplemented
        return moved

    def __getattr__(self, name: str):
        return getattr(self.module, name)


@pytest.fixture
def compiled(monkeypatch) -> Compiled:
    spy = Compiled(native())
    monkeypatch.setattr(bitcode, "_native", spy)
    return spy


class Asked:
    """A rename, each path it is asked for recorded."""

    def __init__(self, rename: Callable[[str], str]) -> None:
        self.rename, self.paths = rename, []

    def __call__(self, path: str) -> str:
        self.paths.append(path)
        return self.rename(path)


def outcome(of: Callable[[bytes], bitcode.Strtab], shard: bytes, rename: Asked) -> tuple[list[str], bytes] | str:
    try:
        strtab = of(shard)
        return strtab.paths, strtab.relocate(rename)
    except (BadBitcode, UnicodeEncodeError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"


def both(shard: bytes, rename: Callable[[str], str]) -> tuple[list[str], bytes] | str:
    """The reference's paths and relocated shard (or its error), after checking that the compiled
    Strtab gives the same and asks rename the same paths in the same order."""
    expected, got = Asked(rename), Asked(rename)
    want = outcome(StrtabPython.of, shard, expected)
    have = outcome(bitcode.Strtab.of, shard, got)
    assert have == want, f"compiled {str(have)[:600]}\nreference {str(want)[:600]}"
    assert got.paths == expected.paths
    return want


def encoded(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def shards_of(streams: dict[str, bytes]) -> dict[str, bytes]:
    return {name: data for name, data in streams.items() if name.endswith(".thinlto.bc") and data}


def test_equal_on_every_shard_of_the_suite_corpora(any_tc, corpora, compiled):
    shards = shards_of(corpora(any_tc))
    assert len(shards) >= 6
    for name, shard in shards.items():
        assert type(bitcode.Strtab.of(shard)) is bitcode.Strtab, "the Python Strtab ran"
        for kind, rename in RENAMES.items():
            got = both(shard, rename)
            assert not isinstance(got, str), (name, kind, got)
            paths, moved = got
            assert paths and [encoded(p) for p in bitcode.module_paths(moved)] == [encoded(rename(p)) for p in paths], \
                (name, kind)
        assert both(shard, unencodable).startswith("UnicodeEncodeError"), name
    assert compiled.handed == 0


@pytest.fixture
def many(project: Path, tc22: Toolchain) -> dict[str, bytes]:
    """The shards of a link of a main and 40 modules (module ids of one and two VBR6 chunks)."""
    objects = many_modules(project, tc22, 40)
    run([tc22.lld, "--thinlto-index-only", *objects, "-o", "out", "-e", "main"], project)
    return {o: (project / f"{o}.thinlto.bc").read_bytes() for o in objects}


def test_equal_on_the_shards_of_many_modules(many, compiled):
    assert len(bitcode.module_paths(many["main.o"])) == 41
    for name, shard in many.items():
        for kind, rename in RENAMES.items():
            assert not isinstance(both(shard, rename), str), (name, kind)
    assert compiled.handed == 0


@pytest.mark.parametrize("seed", range(3))
def test_equal_on_damaged_shards(any_tc, corpora, compiled, seed):
    """300 damaged shards a seed and toolchain (bit flips, cuts, inserted bytes), then 100 shards
    cut short: the same paths and bytes, or the same BadBitcode."""
    rng = random.Random(seed)
    shards = sorted(shards_of(corpora(any_tc)).items())
    answers = set()
    renames = [*RENAMES.values(), unencodable]
    for k in range(400):
        _, shard = rng.choice(shards)
        damaged = mutate(rng, shard) if k < 300 else shard[: rng.randrange(4, len(shard))]
        got = both(damaged, rng.choice(renames))
        answers.add(got.split(":")[0] if isinstance(got, str) else "relocated")
    assert {"BadBitcode", "relocated"} <= answers, answers


@pytest.mark.parametrize("seed", range(4))
def test_equal_on_random_shards(compiled, seed):
    """500 hand-built shards a seed (streams.random_shard: entries with and without hashes, a path
    given twice, records and blocks MODULE_STRTAB does not hold, two module blocks)."""
    rng = random.Random(seed)
    answers = set()
    for _ in range(500):
        shard, _ = random_shard(rng)
        got = both(shard, rng.choice(list(RENAMES.values())))
        answers.add(got.split(":")[0] if isinstance(got, str) else "relocated")
    assert answers == {"BadBitcode", "relocated"}, answers
    assert compiled.handed == 0


def _strtab(*records, width: int = 3) -> bytes:
    """A shard of this MODULE_STRTAB (ids `width` bits wide) and a summary block."""
    return stream(block(MODULE, record(1, 2), nested(STRTAB, *records, width=width), nested(SUMMARY, record(10, 12))))


ENTRY = record(1, 0, *b"dir/a.o")
HASH = record(2, 1, 2, 3, 4, 5)


def test_each_layout_the_rewrite_treats_apart(compiled):
    big = (1 << 64) - 1
    layouts = {
        "ids of 4 bits": _strtab(ENTRY, HASH, width=4),
        "ids of 32 bits": _strtab(ENTRY, HASH, width=32),
        "a hash word above 32 bits": _strtab(ENTRY, record(2, 1, 1 << 32, 3, 4, 5)),
        "a hash of no words": _strtab(ENTRY, record(2)),
        "a hash of 40 words": _strtab(ENTRY, record(2, *range(40))),
        "an entry of no path": _strtab(record(1, 7), HASH),
        "an entry of no module id": _strtab(record(1), ENTRY),
        "module ids of one, two and thirteen chunks": _strtab(record(1, 31, *b"a"), record(1, 32, *b"b"),
                                                              record(1, big, *b"c")),
        "other records": _strtab(ENTRY, record(3, big, 0), record(1 << 40, 1), record(2, 1 << 32)),
        "a block inside": _strtab(ENTRY, nested(0, record(1, 8)), HASH),
        "abbreviated records": _strtab(define(("lit", 1), ("vbr", 6), ("array", 0), ("char6", 0)),
                                       abbreviated(4, chunks([3, 3, 0, 1, 2], 6)), HASH, width=4),
        "no path": _strtab(HASH),
        "at the top level": stream(block(STRTAB, ENTRY, HASH), block(MODULE, record(1, 2))),
        "two modules deep": stream(block(MODULE, nested(MODULE, record(1, 2), nested(STRTAB, ENTRY, HASH)),
                                         nested(SUMMARY, record(10, 12)))),
        "blocks after it": stream(block(MODULE, nested(STRTAB, ENTRY), nested(SUMMARY, record(10, 12))),
                                  block(13, record(1, 5)), block(MODULE, record(1, 2))),
    }
    for name, shard in layouts.items():
        for rename in RENAMES.values():
            assert not isinstance(both(shard, rename), str), name
    wrapped = bitcode.bitstream(layouts["ids of 4 bits"])
    header = b"\xde\xc0\x17\x0b" + (0).to_bytes(4, "little") + (20).to_bytes(4, "little")
    assert not isinstance(both(header + len(wrapped).to_bytes(4, "little") + bytes(4) + wrapped, RENAMES["ranked"]),
                          str)
    assert compiled.handed == 0


def test_ids_too_narrow_for_the_abbreviations(compiled):
    """Ids of 2 bits cannot name abbreviations 4 and 5: every record is written unabbreviated. Ids of
    1 bit or none name no record (the block holds only its END_BLOCK, or nothing)."""
    for shard in (_strtab(ENTRY, HASH, record(1, 40, *b"b.o"), record(3, 1), width=2), _strtab(width=1),
                  _strtab(width=0)):
        for rename in RENAMES.values():
            assert not isinstance(both(shard, rename), str), shard
    assert compiled.handed == 0


def test_a_shard_handed_to_python_is_renamed_once(compiled):
    """Where the compiled rewrite answers NotImplemented (length words that would outgrow 32 bits),
    StrtabPython writes the shard from the names already asked, the same bytes."""
    compiled.refuse = True
    for shard in (_strtab(ENTRY, HASH, record(1, 3, *b"b.o")), _strtab(ENTRY, width=2)):
        for rename in RENAMES.values():
            assert not isinstance(both(shard, rename), str)
    assert compiled.handed == 2 * len(RENAMES)


def test_the_same_refusals(compiled):
    refused = {
        "a character above 255 in a string": _strtab(ENTRY, record(1, 1, 97, 256)),
        "two MODULE_STRTAB blocks": stream(block(MODULE, nested(STRTAB, ENTRY), nested(STRTAB, ENTRY))),
        "two MODULE_STRTAB blocks ": _strtab(ENTRY, nested(STRTAB, ENTRY)),
        "no MODULE_STRTAB block": stream(block(MODULE, record(1, 2), nested(SUMMARY, record(10, 12)))),
    }
    for message, shard in refused.items():
        assert both(shard, RENAMES["ranked"]) == f"BadBitcode: {message.strip()}", message
    for cut in range(5, 40):
        assert str(both(_strtab(ENTRY, HASH)[:-cut], RENAMES["ranked"])).startswith("BadBitcode"), cut
    for shard in found_by_fuzzing().values():
        both(shard, RENAMES["shorter"])


def test_without_the_compiled_reader_the_reference_runs(monkeypatch):
    monkeypatch.setattr(bitcode, "_native", None)
    shard = _strtab(ENTRY, HASH)
    assert type(bitcode.Strtab.of(shard)) is StrtabPython
    assert bitcode.module_paths(bitcode.relocate(shard, lambda p: "m/" + p)) == ["m/dir/a.o"]


def test_the_fuzz_targets_want_is_strtabs():
    """dev/fuzz/bitcode_fuzz.c runs without Python, so it spells bitcode._STRTAB_WANT out."""
    source = (Path(__file__).resolve().parent.parent / "dev" / "fuzz" / "bitcode_fuzz.c").read_text()
    enter = re.search(r"STRTAB_ENTER\[\] = \{([0-9, ]*)\}", source)
    assert enter is not None and [int(x) for x in enter.group(1).split(",")] == sorted(bitcode._STRTAB_WANT.enter)
    assert "bc_want want = {0, SET(STRTAB_ENTER), {NULL, 0}, NULL, 0, 1};" in source
    assert bitcode._STRTAB_WANT == bitcode.Want(enter=bitcode._STRTAB_WANT.enter)
