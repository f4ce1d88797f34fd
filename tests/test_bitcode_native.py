"""The compiled reader (ltowrap._bitcode) against the reference (bitcode.read_python): equal
trees, or BadBitcode from both with the same message, on every bitcode corpus the suite makes (clang 13 to 22, C and
C++, -g, split LTO units, FatLTO, thin-link index shards) under every Want ltowrap reads with,
on those streams damaged at random under random Wants, and on hand-written streams for each
rule of the reader; then the fuzz target (dev/fuzz/bitcode_fuzz.c) over the C core.

The compiled reader is built by pip install (setup.py), or in a clone by
`python setup.py build_ext --inplace`: without it these tests skip, and fail under CI=true.
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import toolchain
from ltowrap.formats import bitcode, interface, irmodule
from ltowrap.formats.bitcode import CHAR6, TOP_LEVEL, BadBitcode, Block, Node, Want, _Writer, read_python
from needs import missing
from streams import MAGIC, MODULE, _at, abbreviated, block, chunks, define, found_by_fuzzing, mutate, native, nested, \
    random_module, random_shard, record, stream, unabbreviated

ROOT = Path(__file__).resolve().parent.parent


def outcome(read: Callable[[bytes, Want], Node], stream: bytes, want: Want) -> Node | str:
    try:
        return read(stream, want)
    except BadBitcode as e:
        return f"BadBitcode: {e}"


def both(stream: bytes, want: Want = Want()) -> Node | str:
    """What the reference reads ("BadBitcode" if it refuses), after checking that the compiled
    reader reads the same (or refuses it with the same message)."""
    compiled = native()
    expected = outcome(read_python, stream, want)
    got = outcome(lambda s, w: compiled.read(s, w, Node, Block, BadBitcode), stream, want)
    assert got == expected, f"compiled {str(got)[:300]}\nreference {str(expected)[:300]}\nwant {want}"
    return "BadBitcode" if isinstance(expected, str) else expected


WANTS = {
    "default": Want(),
    "blobs=False": Want(blobs=False),
    "irmodule._TRIPLE": irmodule._TRIPLE,
    "irmodule._FLAGS": irmodule._FLAGS,
    "irmodule._ASM": irmodule._ASM,
    "irmodule._PRODUCER": irmodule._PRODUCER,
    "interface._WANT": interface._WANT,
    "interface._WHOLE": interface._WHOLE,
    "bitcode._STRTAB_WANT": bitcode._STRTAB_WANT,
    "bitcode._MODULES_WANT": bitcode._MODULES_WANT,
}


def test_equal_on_the_suite_corpora(any_tc, corpora):
    streams = corpora(any_tc)
    split = bitcode.read(streams["split.o"], bitcode._MODULES_WANT).blocks(bitcode.MODULE_BLOCK_ID)
    assert len(split) == 2, "-fsplit-lto-unit made one module: the corpus lacks a split unit"
    for name, data in streams.items():
        for want in WANTS.values():
            assert both(data, want) != "BadBitcode", (name, want)


# --- damaged streams, random Wants ----------------------------------------------------------------

BLOCK_IDS = [0, 8, 9, 10, 11, 12, 13, 14, 15, 17, 19, 20, 21, 22, 23, 25, 26]


def random_want(rng: random.Random) -> Want:
    def codes() -> frozenset[int]:
        return frozenset(rng.sample(range(1, 45), rng.randrange(6)))

    keys = [TOP_LEVEL, *BLOCK_IDS]
    return Want(enter=None if rng.random() < 0.5 else frozenset(rng.sample(BLOCK_IDS, rng.randrange(len(BLOCK_IDS)))),
                skip=frozenset(rng.sample(BLOCK_IDS, rng.randrange(4))),
                only={b: codes() for b in rng.sample(keys, rng.randrange(4))},
                unread={b: codes() for b in rng.sample(keys, rng.randrange(4))},
                first={b: rng.choice([0, 1, 2, 5, 40]) for b in rng.sample(keys, rng.randrange(3))},
                blobs=rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(3))
def test_equal_on_damaged_streams_and_random_wants(tc, corpora, seed):
    """500 cases a seed and toolchain: equal trees, or BadBitcode from both."""
    rng = random.Random(seed)
    streams = sorted(corpora(tc).items())
    refused = 0
    for _ in range(500):
        name, data = rng.choice(streams)
        want = random_want(rng) if rng.random() < 0.8 else rng.choice(list(WANTS.values()))
        refused += both(mutate(rng, data), want) == "BadBitcode"
    assert 0 < refused < 500  # both kinds of answer were compared


# --- hand-written streams, one rule each ------------------------------------------------------------


def items(tree: Node | str, *path: int) -> list:
    assert isinstance(tree, Node), tree
    for i in path:
        tree = tree.items[i]
    return tree.items


def test_vbr_values_of_64_bits_are_read_and_one_more_refused():
    top = (1 << 64) - 1
    assert items(both(stream(block(MODULE, record(1, top)))), 0) == [[1, top]]
    assert both(stream(block(MODULE, record(1, 1 << 64)))) == "BadBitcode"
    # 2**64-1 with one more (zero) chunk: a chunk starting at bit 65 is refused, whatever its value
    padded = [0b111111] * 12 + [0b101111, 0]
    assert both(stream(block(MODULE, unabbreviated(1, 1, chunks(padded, 6))))) == "BadBitcode"
    # vbr32: chunks at bits 0, 31 and 62; the last may hold 2 bits of value, not 3
    for value, ok in ((top, True), (1 << 64, False)):
        s = stream(block(MODULE, define(("lit", 5), ("vbr", 32)),
                         abbreviated(4, lambda w, v=value: w.vbr(v, 32))))
        assert (both(s) != "BadBitcode") == ok
        # passed over (unread), a field is checked only for running past the end
        assert items(both(s, Want(unread={MODULE: frozenset({5})})), 0) == [[5]]
    # an unabbreviated record passed over: its fields' chunks are counted, not their values
    assert items(both(stream(block(MODULE, record(1, 1 << 70))), Want(unread={MODULE: frozenset({1})})), 0) == [[1]]


def test_fields_and_ids_up_to_32_bits():
    for kind in ("fixed", "vbr"):
        s = stream(block(MODULE, define(("lit", 5), (kind, 32)),
                         abbreviated(4, lambda w, k=kind: w.fixed((1 << 32) - 1, 32) if k == "fixed" else w.vbr(7, 32))))
        assert items(both(s), 0) == [[5, (1 << 32) - 1 if kind == "fixed" else 7]]
        assert both(stream(block(MODULE, define(("lit", 5), (kind, 33))))) == "BadBitcode"
    assert both(stream(block(MODULE, define(("lit", 5), ("vbr", 1))))) == "BadBitcode"
    # a field of no bits is a literal 0
    assert items(both(stream(block(MODULE, define(("lit", 5), ("fixed", 0)), abbreviated(4, lambda w: None)))),
                 0) == [[5, 0]]
    assert both(stream(block(MODULE, record(1, 2), width=32))) != "BadBitcode"
    assert both(stream(block(MODULE, record(1, 2), width=33))) == "BadBitcode"


def test_first_counts_records_and_blocks_not_abbreviations():
    s = stream(block(MODULE, define(("lit", 9), ("fixed", 4)), record(1, 7), nested(11, record(2)),
                     define(("lit", 8)), abbreviated(4, lambda w: w.fixed(3, 4)), record(3)))
    assert items(both(s, Want(first={MODULE: 0})), 0) == []
    assert isinstance(both(s, Want(first={MODULE: 0})).items[0], Node)
    whole = items(both(s), 0)
    assert whole[0] == [1, 7] and whole[1].bid == 11 and whole[2:] == [[9, 3], [3]]
    assert items(both(s, Want(first={MODULE: 3})), 0) == whole[:3]
    # a block jumped over counts
    assert items(both(s, Want(skip=frozenset({11}), first={MODULE: 3})), 0) == [[1, 7], [9, 3]]
    assert items(both(s, Want(first={TOP_LEVEL: 0}))) == []


def test_blocks_nested_64_deep_are_read_and_65_refused():
    def chain(depth: int) -> Callable[[_Writer], None]:
        inner = nested(11, record(1, depth))
        for _ in range(depth - 2):
            inner = nested(11, inner)
        return block(11, inner)
    assert both(stream(chain(64))) != "BadBitcode"
    assert both(stream(chain(65))) == "BadBitcode"
    # what is not read is not counted
    assert both(stream(chain(65)), Want(skip=frozenset({11}))) != "BadBitcode"


def test_a_field_passed_over_is_checked_for_the_end_only():
    # a vbr6 field of 100 chunks: too long to read, fine to pass over
    long_field = [0b100000] * 99 + [0]
    s = stream(block(MODULE, define(("lit", 7), ("vbr", 6)), abbreviated(4, chunks(long_field, 6))))
    assert both(s) == "BadBitcode"
    assert items(both(s, Want(unread={MODULE: frozenset({7})})), 0) == [[7]]
    # the block ends within the field (its 27 bits of DEFINE_ABBREV and id, then 13 chunks, in
    # 64 bits): past the end either way
    cut = stream(block(MODULE, define(("lit", 7), ("vbr", 6)), abbreviated(4, chunks([0b100000] * 12 + [0], 6)),
                       words=2))
    assert both(cut) == "BadBitcode"
    assert both(cut, Want(unread={MODULE: frozenset({7})})) == "BadBitcode"
    # counts whose fields would overflow 64 bits of position
    for want in (Want(), Want(unread={MODULE: frozenset({7, 1})})):
        assert both(stream(block(MODULE, unabbreviated(1, 1 << 63, lambda w: None))), want) == "BadBitcode"
        huge = stream(block(MODULE, define(("lit", 7), ("array", 0), ("fixed", 32)),
                            abbreviated(4, lambda w: w.vbr(1 << 59, 6))))  # 2**64 bits
        assert both(huge, want) == "BadBitcode"
        blob = stream(block(MODULE, define(("lit", 7), ("blob", 0)), abbreviated(4, lambda w: w.vbr(1 << 61, 6))))
        assert both(blob, want) == "BadBitcode"


def test_char6_and_blobs():
    s = stream(block(MODULE, define(("lit", 9), ("array", 0), ("char6", 0)),
                     abbreviated(4, lambda w: w.vbr(64, 6) or chunks(list(range(64)), 6)(w))))
    assert items(both(s), 0) == [[9, *CHAR6.encode()]]

    def put_blob(w: _Writer) -> None:
        w.fixed(42, 8)
        w.vbr(5, 6)
        w.fixed(0, -(_at(w) + 32) % 32)  # the stream's bits start after the 32-bit magic
        for byte in b"hello":
            w.fixed(byte, 8)
        w.fixed(0, -(_at(w) + 32) % 32)
    s = stream(block(MODULE, define(("lit", 10), ("fixed", 8), ("blob", 0)), abbreviated(4, put_blob)))
    assert items(both(s), 0) == [[10, 42, *b"hello"]]
    code, fixed, offset, n = items(both(s, Want(blobs=False)), 0)[0]
    assert (code, fixed, s[offset : offset + n]) == (10, 42, b"hello")


def test_blockinfo_scopes():
    setbid = lambda bid: record(1, bid)  # noqa: E731
    info_8 = block(0, setbid(MODULE), define(("lit", 3), ("fixed", 4)), width=2)
    uses_8 = abbreviated(4, lambda w: w.fixed(9, 4))
    module_own = nested(0, setbid(11), define(("lit", 6), ("fixed", 3)), width=2)
    uses_11 = nested(11, abbreviated(4, lambda w: w.fixed(5, 3)))
    s = stream(info_8, block(MODULE, uses_8, module_own, uses_11), block(MODULE, uses_8))
    tree = both(s)
    first = items(tree, 1)
    assert first[0] == [3, 9] and [n.bid for n in first[1:]] == [0, 11] and first[2].items == [[6, 5]]
    assert items(tree, 2) == [[3, 9]]
    # BLOCKINFO is read whatever the Want, in the tree only when entered
    tree = both(s, Want(enter=frozenset({MODULE, 11})))
    assert [n.bid for n in tree.items] == [MODULE, MODULE] and items(tree, 0)[0] == [3, 9]
    # the second module gets the top level's BLOCKINFO, not what the first one added
    assert both(stream(info_8, block(MODULE, module_own), block(MODULE, uses_11))) == "BadBitcode"
    assert both(stream(block(0, define(("lit", 3)), width=2))) == "BadBitcode"  # before SETBID


def test_past_the_end():
    assert both(stream(block(MODULE, nested(11, record(1)), words=1))) == "BadBitcode"  # beyond its parent's end
    assert both(stream(block(MODULE, record(1, 2), words=1000))) == "BadBitcode"
    whole = stream(block(MODULE, record(1, 2, 3)))
    assert both(whole[:-6]) == "BadBitcode"
    assert both(whole + b"\x00") != "BadBitcode"  # fewer bits than an id: the top level ends there
    assert both(stream(block(MODULE, record(1), record(1), end=False))) == "BadBitcode"  # 32 bits, no END_BLOCK
    assert both(MAGIC[:3]) == Node(TOP_LEVEL)


# --- the fuzz target --------------------------------------------------------------------------------

FUZZ_RUNS = 20000


def test_the_fuzz_target_finds_nothing(corpora, tmp_path):
    """dev/fuzz/bitcode_fuzz.c (the reader's core, then a shard's canonical text, a module's facts
    and a shard's module paths rewritten), built with libFuzzer and the address and
    undefined-behaviour sanitizers, run a bounded number of times from a seed corpus of the suite's
    modules and shards and of hand-built shards and modules: any crash, leak or undefined
    behaviour fails it (libFuzzer exits non-zero)."""
    tc = toolchain(22)
    binary = tmp_path / "bitcode_fuzz"
    built = subprocess.run([tc.clang, "-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
                            str(ROOT / "dev" / "fuzz" / "bitcode_fuzz.c"), "-o", str(binary)],
                           capture_output=True, text=True)
    if built.returncode != 0 and "libclang_rt.fuzzer" in built.stderr:
        missing("libFuzzer for clang 22 (libclang_rt.fuzzer)", "dev/setup installs libclang-rt-22-dev")
    assert built.returncode == 0, built.stderr
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    rng = random.Random(1)
    for i, (name, data) in enumerate(sorted(corpora(tc).items())):
        for k, head in enumerate((b"\x02\x00\x00\x00", rng.randbytes(4))):
            (seeds / f"{i}-{k}").write_bytes(head + data)
    for k in range(40):  # shards of random summary records, modules of random records, and what found a fault
        (seeds / f"shard-{k}").write_bytes(rng.randbytes(4) + random_shard(rng)[0])
        (seeds / f"module-{k}").write_bytes(rng.randbytes(4) + random_module(rng))
    for k, shard in enumerate(found_by_fuzzing().values()):
        (seeds / f"found-{k}").write_bytes(b"\x02\x00\x00\x00" + shard)
    work = tmp_path / "work"  # where libFuzzer adds the inputs it finds new
    work.mkdir()
    done = subprocess.run([str(binary), f"-runs={FUZZ_RUNS}", "-seed=1", "-max_len=65536", str(work), str(seeds)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"Done {FUZZ_RUNS} runs" in done.stderr


def test_a_few_bytes_of_literals_cannot_make_billions_of_fields():
    """An abbreviation of many literal operands makes each record of a few bits yield as many
    fields: both readers stop at bitcode.operand_budget (twice the stream's bits), and refuse
    alike, where a stream of kilobytes could otherwise make billions of fields."""
    lits = [("lit", 7)] * 2000
    many = stream(block(MODULE, define(*lits), *[abbreviated(4, lambda w: None)] * 3000))
    assert len(many) < 4096
    for want in (Want(), Want(only={MODULE: frozenset()})):  # decoded, or passed over
        assert both(many, want) == "BadBitcode"
        assert outcome(read_python, many, want) == f"BadBitcode: {bitcode.OVER_BUDGET}"
    few = stream(block(MODULE, define(*lits[:20]), *[abbreviated(4, lambda w: None)] * 10))
    assert items(both(few), 0) == [[7] * 20] * 10


def test_without_the_configured_compiler_clang_builds_it(tmp_path):
    """Python's configured C compiler (gcc, usually) missing: setup.py builds the reader with the
    clang every ltowrap user has, and the module it builds reads as the reference does."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                    "--build-temp", str(tmp_path / "tmp")], cwd=root, env=env, check=True, capture_output=True)
    (built,) = (tmp_path / "lib" / "ltowrap").glob("_bitcode.*.so")
    spec = importlib.util.spec_from_file_location("ltowrap._bitcode", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = stream(block(MODULE, record(1, 2, 3)))
    assert module.read(data, Want(), Node, Block, BadBitcode) == read_python(data, Want())
