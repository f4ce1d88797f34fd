"""A module's facts made in C (ltowrap._bitcode.module_facts, behind modulefacts.read) against the
reference (modulefacts.read_python): the same facts (the interface text itself, not only its
digest; the inline assembly, triple, flags, producer) or the same problem, on every module and
shard of the suite's corpora (clang 13 to 22, C and C++, -g, split LTO units, FatLTO, inline
asm, module flags), on those streams damaged, and on hand-built modules of random records (each
reason for the interface to go in whole, each BadBitcode among them).

The compiled reader is built by pip install (setup.py), or in a clone by
`python setup.py build_ext --inplace`: without it these tests skip, and fail under CI=true.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from helpers import run, write
from ltowrap.formats import bitcode, interface, irmodule, modulefacts
from ltowrap.formats.bitcode import BadBitcode, _Writer
from streams import MODULE, block, metadata_strings, mutate, native, nested, random_module, record, stream

pytestmark = pytest.mark.usefixtures("compiled_reader")

ASM_C = r"""
struct S { int a; } s;
extern int g;
int get(void) { int v; __asm__ volatile("movl $7, %0" : "=r"(v)); return v + s.a + g; }
__asm__(".symver get, get@V1\n.globl marker\nmarker:");
"""


def text_of(interface_text: bytes) -> str:
    """The `digest` modulefacts.read is given: the interface text itself, so that it is compared."""
    return interface_text.decode("ascii")


def outcome(read, data: bytes) -> modulefacts.Facts | str:
    try:
        return read(data, text_of)
    except Exception as e:  # noqa: BLE001 - a reader's bug must be the same bug in both
        return f"{type(e).__name__}: {e}"


def compiled(data: bytes) -> object:
    """module_facts called as modulefacts.read calls it: a tuple, NotImplemented, or BadBitcode's text."""
    try:
        return native().module_facts(bitcode.bitstream(data), modulefacts.WANT, interface._WHOLE,
                                     interface._tables(), irmodule._tables(), BadBitcode)
    except BadBitcode as e:
        return f"BadBitcode: {e}"


def both(data: bytes, taken: bool = True) -> modulefacts.Facts | str:
    """The reference's facts (or its exception's text), after checking that read() gives the same;
    taken: that the C one made them (did not hand the module to Python)."""
    assert bitcode.implementation() == "compiled"
    want = outcome(modulefacts.read_python, data)
    have = outcome(modulefacts.read, data)
    assert have == want, f"compiled:\n{str(have)[:3000]}\nreference:\n{str(want)[:3000]}"
    if taken:
        assert compiled(data) is not NotImplemented, "the compiled facts handed this module to Python"
    return want


def test_equal_on_every_stream_of_the_suite_corpora(any_tc, corpora, tmp_path):
    """Every module and shard of the corpus, and a module with inline asm, module asm and module
    flags (-fPIC, -mcmodel=medium, -g): the same facts, nothing handed to Python."""
    native()
    write(tmp_path / "asm.c", ASM_C)
    run([any_tc.clang, "-O2", "-g", "-fPIC", "-mcmodel=medium", "-flto=thin", "-c", "asm.c", "-o", "asm.o"],
        tmp_path)
    streams = {**corpora(any_tc), "asm.o": (tmp_path / "asm.o").read_bytes()}
    seen: Counter[str] = Counter()
    for name, data in streams.items():
        facts = both(data)
        assert isinstance(facts, modulefacts.Facts), (name, facts)
        if name.endswith(".thinlto.bc"):
            continue
        assert not facts.problem and facts.producer.startswith("LLVM") and facts.triple, (name, facts)
        seen["whole" if " whole (" in facts.interface.split("\n")[0] else "interface"] += 1
        seen["flags"] += bool(facts.flags)
        seen["templates"] += bool(facts.asm.templates)
        seen["module asm"] += bool(facts.asm.module)
        seen["structs"] += "\n    %" in facts.interface
        seen["metadata"] += "\n  metadata\n" in facts.interface
    assert seen["flags"] == len(streams) - len([n for n in streams if n.endswith(".thinlto.bc")])
    assert seen["templates"] and seen["module asm"]
    if any_tc.version >= 15:  # opaque pointers: the interface is read, not the whole module
        assert seen["interface"] and seen["structs"] and seen["metadata"], seen
    else:  # typed pointers: what the interface does not know
        assert seen["whole"], seen
    split = bitcode.read(streams["split.o"], bitcode._MODULES_WANT).blocks(bitcode.MODULE_BLOCK_ID)
    assert len(split) == 2


@pytest.mark.parametrize("seed", range(3))
def test_equal_on_damaged_streams(tc, corpora, seed):
    """300 damaged streams a seed and toolchain: the same facts, or the same problem."""
    rng = random.Random(seed)
    streams = sorted(corpora(tc).items())
    answers = set()
    for _ in range(300):
        _, data = rng.choice(streams)
        facts = both(mutate(rng, data), taken=False)
        assert isinstance(facts, modulefacts.Facts), facts
        answers.add("problem" if facts.problem else "whole" if " whole (" in facts.interface.split("\n")[0]
                    else "facts")
    assert "problem" in answers and answers & {"facts", "whole"}, answers


@pytest.mark.parametrize("seed", range(4))
def test_equal_on_random_modules(seed):
    """1500 modules of random records a seed, a third of them damaged: the same facts, interface
    text and problem; over them, each kind of answer."""
    rng = random.Random(seed)
    seen: Counter[str] = Counter()
    for _ in range(1500):
        data = random_module(rng)
        if rng.random() < 0.3:
            data = mutate(rng, data)
        facts = both(data, taken=False)
        assert isinstance(facts, modulefacts.Facts), facts
        if facts.problem:
            seen["problem: " + facts.problem] += 1
            continue
        first = facts.interface.split("\n")[0]
        seen[first[first.index("whole"):] if "whole" in first else "interface"] += 1
        for part in ("  appending ", "  intrinsic ", "%anonymous ", " value ", "  structs\n    %"):
            seen[part] += part in facts.interface
        seen["flags"] += bool(facts.flags)
        seen["templates"] += bool(facts.asm.templates)
    problems = [k for k in seen if k.startswith("problem: ")]
    wholes = [k for k in seen if k.startswith("whole")]
    assert len(problems) >= 10 and len(wholes) >= 15, seen
    assert seen["interface"] >= 100 and seen["flags"] and seen["templates"] and seen[" value "], seen
    assert {"problem: a module flag whose name is not a string", "problem: a character above 255 in a string",
            "problem: block runs past the end"} <= set(seen), seen
    assert {"whole (a name past the string table)", "whole (two string tables)"} <= set(wholes), seen


def test_each_rule_of_the_interface_on_hand_built_modules():
    """Modules written for one rule each, the C text equal to the reference's: struct names that
    Python's bytes repr escapes, appending variables, an intrinsic whose type holds a named struct,
    an unnamed identified struct, metadata naming a variable and a constant, module flags of a
    constant and of a null, two flags of one name."""
    strtab = b"v\tw'x" + b"llvm.f" + b"app"
    types = nested(17, record(1, 6), record(7, 32), record(19, *b'S"\x7f\\'), record(20, 0, 0), record(11, 4, 0),
                   record(21, 0, 1, 1), record(20, 1, 0, 0))
    flags = metadata_strings([b"wchar_size", b"PIC Level"])
    data = stream(
        block(13, record(1, *b"LLVM22.1.0"), record(2, 0)),
        block(MODULE, record(1, 2), types, record(2, *b"x86_64-unknown-linux-gnu"),
              record(7, 0, 5, 0, 2, 0, 0, 0), record(8, 5, 6, 3, 0, 1, 0, *[0] * 11), record(7, 11, 3, 2, 2, 0, 2, 0),
              nested(11, record(1, 0), record(4, 8), record(2)),
              nested(15, record(35, *flags), record(2, 0, 0), record(2, 0, 3), record(2, 0, 4),
                     record(3, 1, 1, 4), record(3, 1, 2, 5), record(5, 1, 1, 5), record(3, 1, 1, 0),
                     record(4, *b"llvm.module.flags"), record(10, 5, 6, 7, 8), record(4, *b"n"), record(10, 2, 3))),
        block(23, record(1, *strtab)))
    facts = both(data)
    assert isinstance(facts, modulefacts.Facts) and not facts.problem, facts
    text = facts.interface
    assert "    v\\tw'x\n" in text and "  appending app of i32\n" in text
    assert "  intrinsic llvm.f fn %S\"\\x7f\\\\ (%S\"\\x7f\\\\)\n" in text
    assert "    %S\"\\x7f\\\\ {i32}\n" in text and "%anonymous {packed i32}" not in text
    assert "#2 value i32 @global v\\tw'x \n" in text and "#3 value i32 i32 const 4 8 \n" in text
    # wchar_size is 4 (the constant's signed VBR 8), then 0 (a null constant): the last value, the first place
    assert list(facts.flags.items()) == [("wchar_size", 0), ("PIC Level", 0)]


def test_what_the_compiled_facts_do_not_take_goes_to_python():
    """A METADATA_STRINGS record of one field in the imported module's metadata (the reference
    fails there, an IndexError: read() fails alike), and a type whose check for a named struct
    would walk 2**30 types (the reference would take hours: only the hand-over is checked)."""
    ok = metadata_strings([b"a"])
    short = stream(block(MODULE, record(1, 2), nested(15, record(35, *ok))),
                   block(MODULE, record(1, 2), nested(15, record(35, 1)), nested(20)), block(23, record(1, *b"x")))
    assert compiled(short) is NotImplemented
    assert both(short, taken=False) == "IndexError: list index out of range"

    chain = [record(1, 32), record(7, 8)] + [record(18, 0, k, k) for k in range(30)] + [record(21, 0, 30)]
    deep = stream(block(MODULE, record(1, 2), nested(17, *chain), record(8, 0, 6, 31, *[0] * 15)),
                  block(23, record(1, *b"llvm.f")))
    assert compiled(deep) is NotImplemented


def test_read_runs_the_compiled_facts_when_built(monkeypatch):
    """read() is the compiled facts where the reader is compiled, and the reference with
    LTOWRAP_NATIVE=0's switch (bitcode._native None): seen through a digest that tells them apart
    by the call stack."""
    import inspect

    native()
    data = stream(block(MODULE, record(1, 2)), block(23, record(1, *b"x")))

    def digest(text: bytes) -> str:
        return "python" if any(f.function == "read_python" for f in inspect.stack()) else "c"

    assert modulefacts.read(data, digest).interface == "c"
    monkeypatch.setattr(bitcode, "_native", None)
    assert modulefacts.read(data, digest).interface == "python"


def test_limits_of_type_depth_and_string_lengths():
    """A type nested MAX_TYPE_DEPTH deep is written, one deeper puts the whole module in; a
    METADATA_STRINGS length of 2**64-1 is read (and runs past its blob), one of 2**64 is too long."""
    def nested_arrays(depth: int) -> bytes:
        arrays = [record(11, 1, k) for k in range(depth)]
        return stream(block(MODULE, record(1, 2), nested(17, record(1, depth + 1), record(7, 8), *arrays),
                            nested(15, record(35, *metadata_strings([])), record(2, depth, 0), record(4, *b"n"),
                                   record(10, 0)), record(7, 0, 1, 0, 2, 0, 0, 0)), block(23, record(1, *b"v")))

    limit = interface.MAX_TYPE_DEPTH
    deepest = both(nested_arrays(limit))
    assert isinstance(deepest, modulefacts.Facts) and " whole (" not in deepest.interface.split("\n")[0]
    assert "[1 x " * limit + "i8" in deepest.interface
    deeper = both(nested_arrays(limit + 1))
    assert isinstance(deeper, modulefacts.Facts) and deeper.interface.split("\n")[0].endswith(" whole (type id 0)")

    def one_length(last_chunk: int) -> bytes:
        w = _Writer()
        for _ in range(12):
            w.fixed(0b111111, 6)
        w.fixed(last_chunk, 6)
        lengths = w.data()
        return stream(block(MODULE, record(1, 2), nested(15, record(35, 1, len(lengths), *lengths, *b"abc"))),
                      block(23, record(1, *b"v")))

    assert both(one_length(0b001111)).problem == "METADATA_STRINGS runs past its blob"  # 2**64-1
    assert both(one_length(0b011111)).problem == "vbr too long"


def test_the_fuzz_targets_tables_are_the_modules():
    """dev/fuzz/bitcode_fuzz.c runs without Python, so it spells interface.py's and irmodule.py's
    tables (and modulefacts.WANT's sets) out: they must be what _tables() gives."""
    import re
    from pathlib import Path

    source = (Path(__file__).resolve().parent.parent / "dev" / "fuzz" / "bitcode_fuzz.c").read_text()
    arrays = {name: [int(x) for x in body.replace("\n", " ").split(",") if x.strip()]
              for name, body in re.findall(r"\b([A-Z_]+)\[\] = \{([0-9,\s]*)\}", source)}
    names = re.search(r"PRIMITIVE_NAMES\[\] = \{([^}]*)\}", source)
    assert names is not None
    t = interface._tables()
    for k, name in ((1, "RAW_BLOCKS"), (2, "PASSED_BLOCKS"), (3, "KEPT_CODES"), (4, "DROPPED_CODES"),
                    (5, "GLOBALS_READ"), (6, "LOCAL_LINKAGES"), (8, "KNOWN_LINKAGES"), (10, "SIMPLE_CONSTANTS"),
                    (11, "MD_DEBUG"), (12, "MD_KNOWN")):
        assert arrays[name] == sorted(t[k]), name  # sorted there, as bc_set wants
    assert list(zip(arrays["PRIMITIVE"], re.findall(r'"([^"]*)"', names.group(1)))) == sorted(t[9])
    assert f'"{t[0]}", SET(RAW_BLOCKS)' in source and f"SET(MD_KNOWN), {t[13]}, (const uint8_t *)\"llvm.\"" in source
    asm, no_id, flags, global_values = irmodule._tables()
    assert sorted(zip(arrays["ASM_CODES"], arrays["ASM_AT"])) == sorted(asm) and f'"{flags.decode()}"' in source
    assert arrays["MD_NO_ID"] == sorted(no_id) and arrays["GLOBAL_VALUE_CODES"] == sorted(global_values)
    assert arrays["FACTS_SKIP"] == sorted(modulefacts.WANT.skip) and arrays["WHOLE_SKIP"] == sorted(interface._WHOLE.skip)
    assert arrays["FACTS_CONSTANTS"] == sorted(modulefacts.WANT.only[11]) and interface.INTRINSIC_PREFIX == b"llvm."
