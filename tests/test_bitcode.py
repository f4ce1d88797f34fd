"""The bitstream reader against what a writer put: every field encoding, at every bit offset.

bitcode.read_record and Reader.run cut fields from windows of bits for speed (the shard
keys read a thousand records a shard); here each is held to the plain definition of the
encodings (LLVM's BitstreamReader), field by field, on records written by bitcode._Writer.
"""

from __future__ import annotations

import random

import pytest

from ltowrap.formats.bitcode import CHAR6, BadBitcode, Reader, _Writer, read_record


def _field(rng: random.Random, kind: str, width: int) -> int:
    if kind == "char6":
        return ord(rng.choice(CHAR6))
    bits = min(width, 64) if kind == "fixed" else rng.choice([1, 3, width - 1, width, 2 * width, 40, 64])
    return rng.getrandbits(max(bits, 1)) if rng.random() < 0.8 else (1 << bits) - 1


def _put(w: _Writer, kind: str, width: int, value: int) -> None:
    if kind == "fixed":
        w.fixed(value, width)
    elif kind == "vbr":
        w.vbr(value, width)
    else:
        w.fixed(CHAR6.index(chr(value)), 6)


def _at(w: _Writer) -> int:
    return 8 * len(w.out) + w.bits


def _random_record(rng: random.Random) -> tuple[list[tuple[str, int]], list[int], bytes, int, int]:
    """An abbreviation (scalars, then perhaps an array or a blob), its values, and a stream
    holding them after a random number of leading bits: (abbrev, values, data, start, end)."""
    w = _Writer()
    lead = rng.randrange(0, 97)
    w.fixed(rng.getrandbits(lead) if lead else 0, lead)
    abbrev: list[tuple[str, int]] = []
    values: list[int] = []
    for _ in range(rng.randrange(0, 8)):
        kind = rng.choice(["lit", "fixed", "vbr", "char6"])
        width = rng.randrange(1, 65) if kind == "fixed" else rng.randrange(2, 33) if kind == "vbr" else 0
        if kind == "lit":
            abbrev.append(("lit", v := rng.getrandbits(20)))
            values.append(v)
            continue
        abbrev.append((kind, width))
        values.append(v := _field(rng, kind, width))
        _put(w, kind, width, v)
    tail = rng.choice(["none", "array", "blob"])
    if tail == "array":
        kind = rng.choice(["fixed", "vbr", "char6"])
        width = rng.randrange(1, 65) if kind == "fixed" else rng.randrange(2, 33) if kind == "vbr" else 0
        abbrev += [("array", 0), (kind, width)]
        items = [_field(rng, kind, width) for _ in range(rng.choice([0, 1, 5, 63, 64, 65, 200]))]
        w.vbr(len(items), 6)
        for v in items:
            _put(w, kind, width, v)
        values += items
    elif tail == "blob":
        abbrev.append(("blob", 0))
        blob = rng.randbytes(rng.randrange(0, 40))
        w.vbr(len(blob), 6)
        w.fixed(0, -_at(w) % 32)
        for b in blob:
            w.fixed(b, 8)
        w.fixed(0, -_at(w) % 32)
        values += blob
    end = _at(w)
    w.fixed(rng.getrandbits(64), 64)  # what follows the record is not read
    return abbrev, values, w.data(), lead, end


@pytest.mark.parametrize("seed", range(20))
def test_read_record_gives_what_was_written(seed):
    rng = random.Random(seed)
    for _ in range(200):
        abbrev, values, data, start, end = _random_record(rng)
        r = Reader(data, start)
        assert read_record(r, abbrev) == values, abbrev
        assert r.pos == end, abbrev


def test_a_record_past_the_end_is_bad_bitcode():
    w = _Writer()
    w.vbr(1 << 40, 8)  # 48 bits
    w.vbr(10, 6)
    for b in range(10):
        w.fixed(b, 8)
    data = w.data()
    with pytest.raises(BadBitcode):
        read_record(Reader(data, 0, 40), [("vbr", 8)])
    assert read_record(Reader(data, 0, 48 + 6 + 80), [("vbr", 8), ("array", 0), ("fixed", 8)]) == [1 << 40, *range(10)]
    with pytest.raises(BadBitcode):
        read_record(Reader(data, 0, 48 + 6 + 79), [("vbr", 8), ("array", 0), ("fixed", 8)])


@pytest.mark.parametrize("seed", range(10))
def test_skip_lands_where_the_record_ends(seed):
    """Reader.skip passes over a record without reading it (VBR6 arrays by counting chunks):
    it must end where reading it would."""
    rng = random.Random(1000 + seed)
    for _ in range(200):
        abbrev, _, data, start, end = _random_record(rng)
        r = Reader(data, start)
        r.skip(abbrev)
        assert r.pos == end, abbrev
