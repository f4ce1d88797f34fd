"""Bitstreams for the tests of the compiled reader and the compiled shard text
(test_bitcode_native.py, test_shardkey_native.py): the suite's corpora (modules and index shards
of each clang and lld), streams written by hand, rule by rule, damaged ones, and shards of random
summary records."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from helpers import ADD_C, MAIN_C, MUL_C, TWICE_C, Toolchain, run, write
from ltowrap.formats import elf
from ltowrap.formats.bitcode import _Writer, bitstream
from needs import missing

MODULE, STRTAB, SUMMARY = 8, 19, 20


def native() -> ModuleType:
    try:
        from ltowrap import _bitcode  # type: ignore[attr-defined]
    except ImportError as e:
        missing(f"the compiled bitstream reader ltowrap._bitcode ({e})",
                "pip install . builds it with a C compiler; in a clone, python setup.py build_ext --inplace")
    return _bitcode


CLASS_CC = """
struct Shape { virtual double area() const = 0; virtual ~Shape(); };
struct Square : Shape { double side; explicit Square(double s) : side(s) {} double area() const override; };
Shape::~Shape() {}
double Square::area() const { return side * side; }
template <typename T> double total(T *const *items, int n) { double sum = 0; for (int i = 0; i < n; i++) sum += items[i]->area(); return sum; }
double sum_of(Square *const *s, int n) { return total(s, n) + 0.5; }
extern "C" double make(double side) { Square sq(side); Shape *s = &sq; return s->area(); }
"""


def corpus(tc: Toolchain, d: Path) -> dict[str, bytes]:
    """Bitstreams of modules and index shards made by this clang and lld, by name."""
    for name, text in (("main.c", MAIN_C), ("add.c", ADD_C), ("mul.c", MUL_C), ("twice.c", TWICE_C),
                       ("shape.cc", CLASS_CC)):
        write(d / name, text)
    thin = ["-O2", "-flto=thin", "-c"]
    objects = {"main.o": ["main.c"], "add.o": ["add.c"], "mul.o": ["-g", "mul.c"], "twice.o": ["-O0", "twice.c"],
               "shape.o": ["-g", "shape.cc"],
               "split.o": ["-fsplit-lto-unit", "-fwhole-program-vtables", "shape.cc"]}
    for out, args in objects.items():
        run([tc.clangxx if args[-1].endswith(".cc") else tc.clang, *thin, *args, "-o", out], d)
    import_declarations = ["-mllvm", "-import-declaration"] if tc.version >= 19 else []
    # two thin-links: shape.o and split.o define the same symbols
    for out, inputs in (("lib.so", [o for o in objects if o != "split.o"]), ("split.so", ["split.o"])):
        run([tc.lld, "--thinlto-index-only", "-shared", *import_declarations, *inputs, "-o", out], d)
    streams = {name: bitstream((d / name).read_bytes()) for name in objects}
    streams |= {f"{name}.thinlto.bc": bitstream((d / f"{name}.thinlto.bc").read_bytes()) for name in objects}
    if tc.version >= 19:  # FatLTO objects: clang 18 on
        run([tc.clang, *thin, "-ffat-lto-objects", "add.c", "-o", "fat.o"], d)
        section = elf.section((d / "fat.o").read_bytes(), b".llvm.lto")
        assert section is not None
        streams["fat.o"] = bitstream(section)
    return streams


def mutate(rng: random.Random, data: bytes) -> bytes:
    """1-3 bit flips, truncations or inserted bytes, past the magic."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if len(out) <= 5:
            break
        what = rng.random()
        if what < 0.5:
            out[rng.randrange(4, len(out))] ^= 1 << rng.randrange(8)
        elif what < 0.7:
            del out[rng.randrange(4, len(out)):]
        else:
            at = rng.randrange(4, len(out) + 1)
            out[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(out)


MAGIC = b"BC\xc0\xde"


def _at(w: _Writer) -> int:
    return 8 * len(w.out) + w.bits


def stream(*parts: Callable[[_Writer], None]) -> bytes:
    """A stream of these top-level parts (abbreviation ids 2 bits wide)."""
    w = _Writer()
    for part in parts:
        part(w)
    return MAGIC + w.data()


def block(bid: int, *parts: Callable[[_Writer], None], width: int = 4, words: int | None = None,
          outer: int = 2, end: bool = True) -> Callable[[_Writer], None]:
    """A block of these parts (each taking the block's id width); `words` overrides its length."""
    def put(w: _Writer) -> None:
        inner = _Writer()
        for part in parts:
            part(inner, width) if _takes_width(part) else part(inner)
        if end:
            inner.fixed(0, width)
        body = inner.data()
        w.fixed(1, outer)
        w.vbr(bid, 8)
        w.vbr(width, 4)
        w.fixed(0, -_at(w) % 32)
        w.fixed(len(body) // 4 if words is None else words, 32)
        for byte in body:
            w.fixed(byte, 8)
    put.block_width = width  # type: ignore[attr-defined]
    return put


def _takes_width(part: Callable) -> bool:
    return getattr(part, "takes_width", False)


def in_block(f: Callable[[_Writer, int], None]) -> Callable[[_Writer, int], None]:
    f.takes_width = True  # type: ignore[attr-defined]
    return f


def nested(bid: int, *parts, width: int = 4) -> Callable[[_Writer, int], None]:
    """A sub-block inside a block (its parent's id width comes at write time)."""
    @in_block
    def put(w: _Writer, outer: int) -> None:
        block(bid, *parts, width=width, outer=outer)(w)
    return put


def record(code: int, *fields: int) -> Callable[[_Writer, int], None]:
    @in_block
    def put(w: _Writer, width: int) -> None:
        w.fixed(3, width)
        w.vbr(code, 6)
        w.vbr(len(fields), 6)
        for f in fields:
            w.vbr(f, 6)
    return put


def define(*ops: tuple[str, int]) -> Callable[[_Writer, int], None]:
    @in_block
    def put(w: _Writer, width: int) -> None:
        w.abbrev(list(ops), width)
    return put


def unabbreviated(code: int, count: int, write_fields: Callable[[_Writer], None]) -> Callable[[_Writer, int], None]:
    """An unabbreviated record whose count and fields need not agree."""
    @in_block
    def put(w: _Writer, width: int) -> None:
        w.fixed(3, width)
        w.vbr(code, 6)
        w.vbr(count, 6)
        write_fields(w)
    return put


def abbreviated(abbrev_id: int, write_fields: Callable[[_Writer], None]) -> Callable[[_Writer, int], None]:
    @in_block
    def put(w: _Writer, width: int) -> None:
        w.fixed(abbrev_id, width)
        write_fields(w)
    return put


def chunks(values: list[int], width: int) -> Callable[[_Writer], None]:
    """Raw vbr chunks (continuation bit included), to write what no writer would."""
    def put(w: _Writer) -> None:
        for v in values:
            w.fixed(v, width)
    return put


# --- index shards ---------------------------------------------------------------------------------

PATHS = ["a.o", "b.o", "dir/c.o", "lib.a(m.o at 12)", "\u00e9t\u00e9.o", "a.o"]


def random_shard(rng: random.Random) -> tuple[bytes, list[str]]:
    """A shard of a MODULE_STRTAB and a summary block of records drawn at random: mostly what lld
    writes (known versions, ids that resolve), sometimes each thing the reader refuses or does
    not take (a version it does not know, a value id without a GUID, a module id not in the
    table, a GUID given twice, type tests before a variable, an original name after anything but
    a summary, an unknown record, a block inside the summary block, two module blocks)."""
    def rare() -> bool:
        return rng.random() < 0.025

    version = rng.choice([9, 10, 12, 12]) if not rare() else rng.choice([7, 11, 13])
    modids = rng.sample(range(6), rng.randint(1, 4))
    if rare():
        modids.append(modids[0])
    paths = [rng.choice(PATHS).encode() for _ in modids]
    hashes = [[rng.choice([1, 2]), 7, 7, 7, 7] for _ in modids]
    strtab = []
    for modid, path, h in zip(modids, paths, hashes):
        strtab.append(record(1, modid, *path))
        if not rare():
            strtab.append(record(2, *h))
    if rare():
        strtab.append(record(3, 1, 2))
    if rare():
        strtab.append(nested(0, record(1, 8)))
    nvalues = rng.randint(0, 8)
    vids = list(range(1, nvalues + 1))
    guids = rng.sample(range(1, 1 << 12), nvalues) if rng.random() < 0.5 else \
        [rng.getrandbits(64) for _ in range(nvalues)]
    if nvalues and rare():
        vids[-1] = rng.choice([0, vids[0]])
    if nvalues > 1 and rare():
        guids[-1] = guids[0]

    def vid() -> int:
        return rng.choice(vids) if vids and not rare() else rng.randint(0, 12)

    def modid() -> int:
        return rng.choice(modids) if not rare() else rng.randint(0, 9)

    def flags() -> int:
        return rng.getrandbits(11)

    summary = [record(10, version)]
    if rare():
        summary.append(record(10, version))
    if rng.random() < 0.05:  # a VALUE_GUID of the other layout
        summary.append(record(16, rng.randint(0, 9), 5) if version >= 11 else record(16, rng.randint(0, 9), 0, 5))
    for v, g in zip(vids, guids):
        summary.append(record(16, v, g >> 32, g & 0xFFFFFFFF) if version >= 11 else record(16, v, g))
    for _ in range(rng.randint(0, 12)):
        kind = rng.choice(["fn", "fn", "profile", "var", "alias", "plain", "count"] if not rare() else
                          ["origname", "pre", "odd"])
        if kind in ("fn", "profile"):
            if rng.random() < 0.3:  # type tests and virtual calls of the function that follows
                summary.append(record(rng.randint(11, 15), rng.getrandbits(64), 3))
            refs, calls = [vid() for _ in range(rng.randint(0, 3))], [vid() for _ in range(rng.randint(0, 3))]
            if kind == "profile":
                calls = [x for c in calls for x in (c, rng.randint(0, 12))] + ([1] if rare() else [])
            numrefs = len(refs) + (rng.randint(1, 9) if rare() else 0)
            fields = [vid(), modid(), flags(), rng.randint(1, 90), 0, 0, numrefs, 0, 0, *refs, *calls]
            summary.append(record(4 if kind == "fn" else 5, *(fields[: rng.randint(0, 9)] if rare() else fields)))
        elif kind == "var":
            fields = [vid(), modid(), flags(), rng.randint(0, 3), *[vid() for _ in range(rng.randint(0, 3))]]
            summary.append(record(6, *(fields[: rng.randint(0, 3)] if rare() else fields)))
        elif kind == "alias":
            summary.append(record(8, vid(), modid(), flags(), rng.choice([0, vid()]), *([1] if rare() else [])))
        elif kind == "plain":
            summary.append(record(rng.choice([20, 17, 18, 21]), rng.randint(0, 99)))
        elif kind == "count":
            summary.append(record(24, *[rng.randint(1, 9) for _ in range(len(modids))]))
        elif kind == "pre":
            summary.append(record(rng.randint(11, 15), rng.getrandbits(64), 3))
        elif kind == "odd":
            summary.append(record(rng.choice([7, 25, 1 << 40]), 1, 2))
        if kind == "origname" or (kind in ("fn", "var", "alias") and rng.random() < 0.2):  # LLVM 13's, of a local
            summary.append(record(9, rng.getrandbits(64), *([1] if rare() else [])))
    if rare():
        summary.insert(rng.randrange(len(summary) + 1), nested(21, record(1, 1)))
    if rng.random() < 0.3:  # value ids after the summaries, as no lld writes them
        rng.shuffle(summary)
    body = [record(1, 2), nested(STRTAB, *strtab), nested(SUMMARY, *summary)]
    if rng.random() < 0.5:
        body.reverse()
    if rare():
        body.append(nested(SUMMARY, record(10, version)))
    if rare():
        body.append(nested(17, record(1, 5), nested(0, record(1, 2))))
    top = [block(13, record(1, 5)), block(MODULE, *body)]
    if rare():
        top.append(block(MODULE, *body))
    if rare():
        top.insert(0, block(0, record(1, 8)))
    return stream(*top), [p.decode() for p in paths]


def found_by_fuzzing() -> dict[str, bytes]:
    """Shards the fuzz target (dev/fuzz/bitcode_fuzz.c) found a fault with, each fixed: here for
    the comparison, and seeds of the fuzz target, where the sanitizers watch them every run."""
    return {
        # MST_CODE_HASH of no words, before any other: memcpy to the hash words' unallocated array
        "empty hash record": stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o"), record(2)),
                                          nested(SUMMARY, record(10, 12)))),
    }


# --- modules --------------------------------------------------------------------------------------

def metadata_strings(strings: list[bytes]) -> list[int]:
    """A METADATA_STRINGS record's fields: [count, offset, blob], the blob the strings' VBR6 lengths
    (padded to 32 bits), then their characters."""
    w = _Writer()
    for s in strings:
        w.vbr(len(s), 6)
    lengths = w.data()
    return [len(strings), len(lengths), *lengths, *b"".join(strings)]


NAMES = [b"g", b"h", b"llvm.memcpy", b"llvm.x", b"it's", b'"q"', b"a\tb\\", b"\xff\xe9", b"", b"struct.S"]


def random_module(rng: random.Random) -> bytes:
    """A module stream of records drawn at random, with what formats/modulefacts.py reads: a type
    table (named and unnamed structs, forward references, functions, target types), global values
    named in the string table, module-level constants, module asm and InlineAsm constants, metadata
    (strings, named nodes, module flags, values, debug nodes), function blocks, an identification
    block; mostly what LLVM writes, sometimes each thing a reader refuses or does not know (an
    unknown record or block, a short record, a name past the string table, a cycle of types, two
    modules, a second string table, a character above 255, METADATA_STRINGS that do not fit)."""
    def rare() -> bool:
        return rng.random() < 0.012

    def some(n: int) -> int:
        return rng.randint(0, n)

    names = rng.sample(NAMES, 6)
    strtab = b"".join(names)
    whole = [(len(b"".join(names[:k])), len(n)) for k, n in enumerate(names)]

    def name() -> tuple[int, int]:
        if rare():
            return rng.randint(0, 90), rng.randint(1, 9)
        if rng.random() < 0.8:
            return rng.choice(whole)
        at = rng.randrange(len(strtab))
        return at, rng.randint(0, min(12, len(strtab) - at))

    ntypes = rng.randint(1, 14)
    defined = 0  # the types written so far: a type names earlier ones, a struct sometimes a later one

    def tid() -> int:
        if rare():
            return rng.randint(0, 40)
        return rng.randrange(ntypes) if not defined or rng.random() < 0.005 else rng.randrange(defined)

    types = [record(1, ntypes), record(7, 32)]
    for defined in range(1, ntypes):
        kind = rng.choice(["int", "int", "ptr", "void", "float", "array", "vector", "named", "opaque", "anon",
                           "fn", "fn"] if not rare() else ["target", "typed ptr", "unknown", "name only", "short"])
        if kind == "int":
            types.append(record(7, rng.choice([1, 8, 32, 64])))
        elif kind == "ptr":
            types.append(record(25, rng.choice([0, 0, 1])))
        elif kind == "void":
            types.append(record(2))
        elif kind == "float":
            types.append(record(rng.choice([3, 4, 10, 13, 16, 22, 24])))
        elif kind == "array":
            types.append(record(11, rng.randint(0, 9), tid()))
        elif kind == "vector":
            types.append(record(12, rng.randint(1, 9), tid(), *([rng.randint(0, 1)] if rng.random() < 0.3 else [])))
        elif kind in ("named", "opaque"):
            if rng.random() < 0.7:
                types.append(record(19, *rng.choice(NAMES + [b"%\x7f\n", bytes([300 % 256])])))
            types.append(record(20, some(1), *[tid() for _ in range(some(3))]) if kind == "named" else record(6, 0))
        elif kind == "anon":
            types.append(record(18, some(1), *[tid() for _ in range(some(3))]))
        elif kind == "fn":
            types.append(record(21, some(1), tid(), *[tid() for _ in range(some(3))]))
        elif kind == "target":
            if rng.random() < 0.8:
                types.append(record(19, *rng.choice(NAMES)))
            n = some(2)
            types.append(record(26, n, *[tid() for _ in range(n)], *[some(9) for _ in range(some(2))]))
        elif kind == "typed ptr":
            types.append(record(8, tid(), 0))
        elif kind == "unknown":
            types.append(record(rng.choice([9, 27, 40]), 1))
        elif kind == "name only":
            types.append(record(19, 300 if rng.random() < 0.3 else 97))
        else:
            types.append(record(rng.choice([7, 11, 21, 18, 20]), *([1] if rng.random() < 0.5 else [])))
    if rare():
        types.append(nested(11, record(1, 0)))

    module = [record(1, 2 if not rare() else rng.choice([1, 3]))]
    if rng.random() < 0.9:
        module.append(nested(17, *types, width=4))
    if rare():
        module.append(nested(17, record(1, 1), record(7, 8)))
    module.append(record(2, *b"x86_64-unknown-linux-gnu"))
    if rng.random() < 0.3:
        module.append(record(3, *b"e-m:e-i64:64"))
    if rng.random() < 0.3:
        module.append(record(4, *rng.choice([b".symver f, f@v1", b".globl marker\nmarker:", b"\xe9"])))
    if rare():
        module.append(record(rng.choice([9, 10, 15, 99]), 1, 2))
    if rng.random() < 0.2:
        module.append(record(rng.choice([5, 11, 12, 16]), *b"sec"))
    nglobals = rng.randint(0, 6)
    for _ in range(nglobals):
        at, size = name()
        linkage = rng.choice([0, 0, 0, 3, 9, 5, 0, 0, 0, 3, 9, 5, 2]) if not rare() else rng.choice([20, 33])
        if rng.random() < 0.6:
            fields = [at, size, tid(), rng.choice([2, 3]) if not rare() else 0, some(3), linkage, 0, 0]
            module.append(record(7, *fields[: rng.randint(3, 6)] if rare() else fields))
        else:
            fields = [at, size, tid(), 0, some(1), linkage, *[0] * 12]
            module.append(record(rng.choice([8, 8, 8, 14, 18]), *fields[: rng.randint(5, 16)] if rare() else fields))
    nconstants = rng.randint(0, 6)
    constants = []
    for _ in range(nconstants):
        what = rng.random()
        if what < 0.3:
            constants.append(record(1, tid()) if not rare() else record(1))
        if what < 0.6:
            constants.append(record(4, rng.getrandbits(rng.choice([3, 8, 64]))))
        elif what < 0.7:
            constants.append(record(rng.choice([2, 3, 26])))
        elif what < 0.8:
            constants.append(record(6, some(99)))
        elif what < 0.9:
            asm = rng.choice([b"movl $7, %0", b"nop", b""])
            cons = b"=r"
            fields = [tid(), some(3), len(asm), *asm, len(cons), *cons]
            constants.append(record(30, *fields[: rng.randint(0, len(fields))] if rare() else fields))
        else:
            constants.append(record(rng.choice([20, 21, 25]), some(3), some(3)))
    if rare():
        constants.append(nested(15, record(1)))
    if constants:
        module.append(nested(11, *constants))
    nvalues = nglobals + nconstants

    if rng.random() < 0.85:
        strings = rng.sample([b"wchar_size", b"PIC Level", b"llvm.x", b"", b"\x00\xff", b"Code Model"],
                             rng.randint(0, 5))
        md = []
        nids = len(strings)
        if rng.random() < 0.9:
            fields = metadata_strings(strings)
            if rare():
                fields = rng.choice([fields[:2], fields[:1], [fields[0] + 9, *fields[1:]], [fields[0], 999, *fields[2:]],
                                     [*fields[:3], 300, *fields[4:]]])
            md.append(record(35, *fields))
        else:
            nids = 0

        def op() -> int:
            return rng.randint(0, nids) if not rare() else rng.randint(0, nids + 9)

        nodes, values, flags = [], [], []
        for _ in range(rng.randint(0, 10)):
            what = rng.random()
            if what < 0.25:
                # mostly a constant's, as a module flag's value is
                vid = rng.randrange(nglobals, nvalues) if nconstants and rng.random() < 0.7 else \
                    rng.randrange(nvalues) if nvalues and not rare() else some(9)
                md.append(record(2, tid(), vid))
                values.append(nids)
            elif what < 0.55:
                if strings and rng.random() < 0.6:  # a module flag: {behaviour, name, value}
                    value = rng.choice(values) + 1 if values and rng.random() < 0.8 else op()
                    md.append(record(rng.choice([3, 3, 5]), op(), rng.randint(1, len(strings)) if not rare() else op(),
                                     value))
                    flags.append(nids)
                else:
                    md.append(record(rng.choice([3, 5]), *[op() for _ in range(some(4))]))
                nodes.append(nids)
            elif what < 0.75:
                md.append(record(rng.choice([7, 12, 17, 31, 37]), some(5), some(5)))
            elif what < 0.8:
                md.append(record(6, some(9), *b"dbg"))
                continue
            elif what < 0.85:
                md.append(record(rng.choice([36, 38, 39]), some(5)))
                continue
            else:
                md.append(record(rng.choice([11, 99]) if rare() else 7, some(5)))
            nids += 1
        for k in range(rng.randint(0, 2)):
            module_flags = k == 0 and rng.random() < 0.7
            md.append(record(4, *(b"llvm.module.flags" if module_flags else b"llvm.ident")))
            named = flags if module_flags and not rare() else nodes + values
            if not rare():
                md.append(record(10, *rng.sample(named, min(len(named), some(4))) if not rare() else [some(20)]))
        if rare():
            md.insert(rng.randrange(len(md) + 1), rng.choice([record(10, 0), record(4, *b"x"), nested(22, record(6))]))
        module.append(nested(15, *md))
    if rng.random() < 0.3:
        module.append(nested(22, record(6, 0, *b"dbg")))
    for _ in range(rng.randint(0, 2)):
        body = [record(1, 1) if not rare() else record(2)]
        if rng.random() < 0.5:
            asm = rng.choice([b"movl $7, %0", b".incbin \"f\""])
            body.append(nested(11, record(1, 0), record(30, 0, 0, len(asm), *asm, 2, *b"=r")))
        body.append(record(10))
        module.append(nested(12, *body))
    if rare():
        module.append(nested(rng.choice([9, 14, 20, 26, 30]), record(1, 1)))
    top = [block(13, record(1, *(b"LLVM22.1.0" if not rare() else b"LLVM\xff")), record(2, 0)),
           block(8, *module)]
    if rare():  # a split LTO unit: a second module, one of the two with a summary
        top.append(block(8, record(1, 2), *([nested(20, record(1, 1))] if rng.random() < 0.7 else [])))
        if rng.random() < 0.7:
            top[1] = block(8, *module, nested(20, record(1, 1)))
    if rng.random() < 0.9:
        top.append(block(23, record(1, *strtab) if not rare() else record(1, 300)))
    if rare():
        top.append(block(23, record(1, *strtab)))
    if rng.random() < 0.3:
        top.append(block(25, record(1, 1, 2)))
    if rare():
        top.insert(rng.randrange(len(top) + 1), block(rng.choice([14, 8, 17]), record(1, 1)))
    return stream(*top)
