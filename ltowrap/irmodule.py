"""What an LLVM module says about its own code generation: its triple, its module flags and its
inline assembly.

In-process ThinLTO takes these from each module (llvm/lib/LTO/LTOBackend.cpp,
createTargetMachine): the triple, the relocation model from the "PIC Level" flag when
the linker leaves it open (`-r`), the code model and the large-data threshold. A
backend compile of a module that has no option record needs the first two on its
command line (clang's driver would impose its own); clang reads the others from the
module itself.

Read with bitcode.py's bitstream reader, as little as possible:
- the triple is one of the first records of the MODULE_BLOCK: reading stops there
  unless the flags are wanted;
- the flags are `!llvm.module.flags = !{!{i32 behaviour, !"name", i32 value}, ...}` in
  the module-level METADATA_BLOCK. Its METADATA_INDEX_OFFSET record (written for more
  than a few dozen nodes, so for any module with debug info) leads to an index of every
  node's bit position, followed by the named metadata: the thousands of debug-info
  records in between are jumped over, as LLVM's lazy metadata loader does. An integer
  operand is a value id: first the module's global values (one per GLOBALVAR, FUNCTION,
  ALIAS or IFUNC record), then the module-level CONSTANTS_BLOCK.
- the inline assembly (inline_asm) is what the backend's assembler parses, and what it may
  read files through (asmreads.py): the module asm (MODULE_CODE_ASM, one record of
  characters per module) and every InlineAsm constant, which the writer puts in the
  CONSTANTS_BLOCK of each function that calls it (ValueEnumerator::incorporateFunction), right
  after the function's DECLAREBLOCKS record and before its metadata and instructions
  (ModuleBitcodeWriter::writeFunction): a function block is read up to there and jumped over,
  and every other block (types, metadata, summaries, symbol tables) by its length word;
  records of other codes are passed over without decoding their fields where the layout allows
  (_scan). The top-level STRTAB (every symbol name) is searched for a name an operand could
  print as a directive.
Records are mostly runs of VBR6 fields, read here one window of bits per batch
(_run) rather than one slice per chunk. Anything unexpected raises BadBitcode: the
caller then knows nothing rather than something wrong.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterator
from dataclasses import dataclass, field

from .bitcode import BLOCKINFO, CHAR6, MODULE_BLOCK, Abbrev, BadBitcode, _Block, _define_abbrev, _Reader, _record, _stream, \
    _sub_block, _Visitor, _walk

CONSTANTS_BLOCK = 11
FUNCTION_BLOCK = 12
METADATA_BLOCK = 15
# MODULE_BLOCK records
TRIPLE, MODULE_ASM = 2, 4
GLOBAL_VALUES = frozenset([7, 8, 9, 14, 18])  # GLOBALVAR, FUNCTION, ALIAS_OLD, ALIAS, IFUNC (LLVMBitCodes.h)
# CONSTANTS_BLOCK records
SETTYPE, NULL, INTEGER = 1, 2, 4  # an integer 0 is written as its type's NULL
# The INLINEASM codes, each with the field its asm string's length is in: OLD (LLVM < 3.1)
# [flags, n, asm..., m, constraints...], OLD2 (3.1-12) and OLD3 (13, with `unwind`) the same;
# INLINEASM (14 on, the function type first) [fnty, flags, n, asm..., m, constraints...].
INLINE_ASM = {18: 1, 23: 1, 28: 1, 30: 2}
# FUNCTION_BLOCK records
DECLAREBLOCKS = 1
STRTAB_BLOCK, STRTAB_BLOB = 23, 1  # top level: every symbol name, abutting
_DIRECTIVE_NAME = re.compile(rb"\.(?:incbin|include|altmacro)", re.I)
# METADATA_BLOCK records
MD_VALUE, MD_NODE, MD_NAME, MD_DISTINCT_NODE, MD_NAMED_NODE = 2, 3, 4, 5, 10
MD_STRINGS, MD_INDEX_OFFSET, MD_INDEX = 35, 38, 39
# Records that define no metadata id (each other record defines the next one): NAME, KIND,
# NAMED_NODE, ATTACHMENT, STRINGS (its strings take the first ids), GLOBAL_DECL_ATTACHMENT,
# INDEX_OFFSET, INDEX.
MD_NO_ID = frozenset([MD_NAME, 6, MD_NAMED_NODE, 11, MD_STRINGS, 36, MD_INDEX_OFFSET, MD_INDEX])
MODULE_FLAGS = b"llvm.module.flags"


@dataclass(frozen=True)
class ModuleFacts:
    triple: str  # '' when the module names none
    flags: dict[str, int] | None = None  # integer-valued module flags; None when not read

    def flag(self, name: str) -> int | None:
        return None if self.flags is None else self.flags.get(name)


def read(data: bytes, flags: bool = True) -> ModuleFacts:
    """The facts of the first module in a bitcode file; BadBitcode if they cannot be read.

    flags=False reads the triple only (a few records at the start of the module).
    """
    stream = _stream(data)
    top = _Reader(stream, 32)
    try:
        for item in _items(top, 2, []):
            if isinstance(item, _Block) and item.bid == MODULE_BLOCK:
                return _Module(stream, item, flags).read()
            if not isinstance(item, _Block):
                raise BadBitcode("a record at the top level")
    except BadBitcode:
        raise
    except (IndexError, KeyError, ValueError, OverflowError) as e:  # damaged records, as the reader met them
        raise BadBitcode(f"{type(e).__name__}: {e}") from e
    raise BadBitcode("no module")


IDENTIFICATION_BLOCK, IDENTIFICATION_STRING = 13, 1


def producer(data: bytes) -> str:
    """Who wrote the first module of a bitcode file: its IDENTIFICATION block's string
    ('LLVM19.1.7'), '' when it has none; BadBitcode if unreadable. The block comes first."""
    stream = _stream(data)
    try:
        for item in _items(_Reader(stream, 32), 2, []):
            if not isinstance(item, _Block):
                raise BadBitcode("a record at the top level")
            if item.bid == MODULE_BLOCK:
                return ""
            if item.bid == IDENTIFICATION_BLOCK:
                for values in _items(_Reader(stream, item.start, item.end), item.width, []):
                    if isinstance(values, list) and values[0] == IDENTIFICATION_STRING:
                        return bytes(values[1:]).decode("ascii", "replace")
                return ""
    except (IndexError, KeyError, ValueError, OverflowError) as e:
        raise BadBitcode(f"{type(e).__name__}: {e}") from e
    return ""


@dataclass(frozen=True)
class ModuleAsm:
    """The inline assembly of a bitcode file, as its backend's assembler gets it."""

    module: tuple[str, ...]  # each module's module asm (`module asm` lines joined by newlines), if any
    templates: tuple[str, ...]  # each distinct InlineAsm string: a template ($N operands, $$ for $)
    # A symbol name could print as `.incbin`, `.include` or `.altmacro` through an operand: the
    # string table holds one of them (names abut there, so this is a superset), or there is none.
    directive_symbols: bool = False


def inline_asm(data: bytes) -> ModuleAsm:
    """Every module asm and InlineAsm string of every module in a bitcode file (a split LTO unit
    has two); BadBitcode if they cannot all be read. Strings keep their bytes (surrogateescape).

    A backend compile also assembles the functions it imports: their templates are in the
    inline_asm of the modules its index shard names (module asm is never imported)."""
    stream = _stream(data)
    found = ModuleAsm((), ())
    modules = 0
    strtab: bytes | None = None
    try:
        for item in _items(_Reader(stream, 32), 2, []):
            if not isinstance(item, _Block):
                raise BadBitcode("a record at the top level")
            if item.bid == MODULE_BLOCK:
                found = _AsmReader(stream, item, found).read()
                modules += 1
            elif item.bid == STRTAB_BLOCK:
                r = _Reader(stream, item.start, item.end)
                strtab = b"".join(bytes(v[1:]) for v in _scan(r, item.width, [], {STRTAB_BLOB}) if isinstance(v, list))
    except BadBitcode:
        raise
    except (IndexError, KeyError, ValueError, OverflowError) as e:
        raise BadBitcode(f"{type(e).__name__}: {e}") from e
    if not modules:
        raise BadBitcode("no module")
    spelt = strtab is None or _DIRECTIVE_NAME.search(strtab) is not None
    return ModuleAsm(found.module, found.templates, spelt)


@dataclass
class _AsmReader:
    stream: bytes
    block: _Block
    found: ModuleAsm
    blockinfo: dict[int, list[Abbrev]] = field(default_factory=dict)
    templates: dict[str, None] = field(default_factory=dict)

    def read(self) -> ModuleAsm:
        module = list(self.found.module)
        self.templates = dict.fromkeys(self.found.templates)
        for item in _scan(self._reader(self.block), self.block.width, [], {MODULE_ASM}):
            if isinstance(item, list):
                module.append(_text(item[1:]))
            elif item is None:
                continue
            elif item.bid == BLOCKINFO:
                _walk(self._reader(item), item.width, item, self.blockinfo, _Visitor())
            elif item.bid == CONSTANTS_BLOCK:  # the module's own: no InlineAsm from LLVM's writer, but cheap to be sure
                self._constants(item)
            elif item.bid == FUNCTION_BLOCK:
                self._function(item)
        return ModuleAsm(tuple(module), tuple(self.templates))

    def _reader(self, block: _Block) -> _Reader:
        return _Reader(self.stream, block.start, block.end)

    def _function(self, block: _Block) -> None:
        items = _scan(self._reader(block), block.width, list(self.blockinfo.get(FUNCTION_BLOCK, [])), {DECLAREBLOCKS})
        if not isinstance(next(items, None), list):
            raise BadBitcode("a function block that does not start with DECLAREBLOCKS")
        second = next(items, None)
        if isinstance(second, _Block) and second.bid == CONSTANTS_BLOCK:
            self._constants(second)
        # No constants block there: the function has no constants, so no InlineAsm either.

    def _constants(self, block: _Block) -> None:
        abbrevs = list(self.blockinfo.get(CONSTANTS_BLOCK, []))
        for values in _scan(self._reader(block), block.width, abbrevs, INLINE_ASM):
            if not isinstance(values, list):
                continue  # another record; or a block, which LLVM's reader skips here too
            at = INLINE_ASM[values[0]]
            fields = values[1:]
            n = fields[at] if at < len(fields) else -1
            # BitcodeReader::parseConstants: the asm string, then the constraints' length and string.
            if n < 0 or at + 1 + n >= len(fields) or at + 2 + n + fields[at + 1 + n] > len(fields):
                raise BadBitcode("bad INLINEASM record")
            self.templates[_text(fields[at + 1 : at + 1 + n])] = None


def _text(chars: list[int]) -> str:
    """A string record's characters (LLVM keeps each as a field, a char6 or 8-bit array element
    or a blob byte)."""
    if any(c > 255 for c in chars):
        raise BadBitcode("a character above 255 in a string")
    return bytes(chars).decode("utf-8", "surrogateescape")


@dataclass
class _Module:
    stream: bytes
    block: _Block
    want_flags: bool
    triple: str = ""
    global_values: int = 0
    constants: list[int | None] = field(default_factory=list)  # by value id - global_values: an integer, if one
    blockinfo: dict[int, list[Abbrev]] = field(default_factory=dict)
    _unread: Iterator[_Block | list[int]] | None = None  # the rest of the CONSTANTS_BLOCK, read on demand

    def read(self) -> ModuleFacts:
        r = _Reader(self.stream, self.block.start, self.block.end)
        for item in _items(r, self.block.width, []):
            if isinstance(item, _Block):
                if item.bid == BLOCKINFO:
                    _walk(self._reader(item), item.width, item, self.blockinfo, _Visitor())
                elif item.bid == CONSTANTS_BLOCK and self.want_flags and self._unread is None:
                    # Read only as far as a flag's value needs (most constants are not).
                    self._unread = _items(self._reader(item), item.width, list(self.blockinfo.get(CONSTANTS_BLOCK, [])))
                elif item.bid == METADATA_BLOCK and self.want_flags:
                    return ModuleFacts(self.triple, _Metadata(self, item).module_flags())
            elif item[0] == TRIPLE:
                self.triple = bytes(item[1:]).decode("utf-8", "surrogateescape")
                if not self.want_flags:
                    return ModuleFacts(self.triple)
            elif item[0] in GLOBAL_VALUES:
                if self._unread is not None:
                    raise BadBitcode("a global value after the module's constants")
                self.global_values += 1
        return ModuleFacts(self.triple, {} if self.want_flags else None)  # no metadata: no flags

    def _reader(self, block: _Block) -> _Reader:
        return _Reader(self.stream, block.start, block.end)

    def integer(self, value_id: int) -> int | None:
        """The integer constant with this value id (None if it is another kind of value)."""
        i = value_id - self.global_values
        if i < 0:
            return None
        for values in self._unread or ():
            if isinstance(values, _Block) or values[0] == SETTYPE:
                continue  # SETTYPE defines no value
            if values[0] == INTEGER and len(values) == 2:  # signed VBR: the sign in the low bit
                v = values[1]
                self.constants.append(-(v >> 1) if v & 1 else v >> 1)
            elif values[0] == NULL:
                self.constants.append(0)
            else:
                self.constants.append(None)
            if len(self.constants) > i:
                break
        return self.constants[i] if i < len(self.constants) else None


class _Metadata:
    """The module-level METADATA_BLOCK: its strings, its nodes (by index, or as walked), its flags."""

    def __init__(self, module: _Module, block: _Block) -> None:
        self.module = module
        self.stream = module.stream
        self.block = block
        self.abbrevs: list[Abbrev] = list(module.blockinfo.get(METADATA_BLOCK, []))
        self.strings: list[bytes] = []
        self.nodes: dict[int, list[int]] = {}  # metadata id -> record, for the records walked
        self.positions: list[int] = []  # bit position of each non-string node, from the index

    def module_flags(self) -> dict[str, int]:
        flags: dict[str, int] = {}
        for md in self._scan():
            node = self._node(md)
            if node[0] not in (MD_NODE, MD_DISTINCT_NODE):
                raise BadBitcode("a module flag that is not a node")
            if len(node) != 4:
                continue  # not {behaviour, name, value}
            name, value = node[2] - 1, node[3] - 1  # operands are ids + 1
            if not 0 <= name < len(self.strings):
                raise BadBitcode("a module flag whose name is not a string")
            number = self._integer(value)
            if number is not None:
                flags[self.strings[name].decode("utf-8", "surrogateescape")] = number
        return flags

    def _scan(self) -> list[int]:
        """Read the block, jumping over the nodes when they are indexed; the flag nodes' ids."""
        r = _Reader(self.stream, self.block.start, self.block.end)
        next_id = index_base = 0
        name: bytes | None = None
        for values in _items(r, self.block.width, self.abbrevs):
            if isinstance(values, _Block):
                continue
            kind = values[0]
            if name is not None and kind != MD_NAMED_NODE:
                raise BadBitcode("METADATA_NAME not followed by its node")
            if kind == MD_STRINGS:
                self.strings = _strings(values, self.stream)
                next_id = len(self.strings)
            elif kind == MD_INDEX_OFFSET and len(values) == 3:
                index_base = r.pos
                r.pos = index_base + (values[1] | values[2] << 32)
                if not index_base < r.pos < r.end:
                    raise BadBitcode("metadata index outside its block")
            elif kind == MD_INDEX:
                pos = index_base
                for delta in values[1:]:
                    pos += delta
                    self.positions.append(pos)
            elif kind == MD_NAME:
                name = bytes(values[1:])
            elif kind == MD_NAMED_NODE:
                if name == MODULE_FLAGS:
                    return values[1:]  # what follows (other names, attachments) is not needed
                name = None
            elif kind not in MD_NO_ID:
                self.nodes[next_id] = values
                next_id += 1
        return []

    def _node(self, md: int) -> list[int]:
        if md in self.nodes:
            return self.nodes[md]
        i = md - len(self.strings)
        if not 0 <= i < len(self.positions):
            raise BadBitcode(f"metadata {md} not found")
        r = _Reader(self.stream, self.positions[i], self.block.end)
        code = r.fixed(self.block.width)
        if code < 3:
            raise BadBitcode(f"the metadata index points at abbreviation id {code}")
        return _values(r, code, self.abbrevs)

    def _integer(self, md: int) -> int | None:
        """The integer a node operand holds (a ConstantInt as metadata), else None."""
        if md < len(self.strings):
            return None
        value = self._node(md)
        if value[0] != MD_VALUE or len(value) != 3:
            return None
        return self.module.integer(value[2])


def _strings(values: list[int], stream: bytes) -> list[bytes]:
    """METADATA_STRINGS [count, offset, blob]: `count` VBR6 lengths, then the characters."""
    if len(values) != 5:
        raise BadBitcode("bad METADATA_STRINGS record")
    count, offset, blob_at, blob_size = values[1:]
    if offset > blob_size:
        raise BadBitcode("bad METADATA_STRINGS offset")
    lengths = _run(_Reader(stream, 8 * blob_at, 8 * (blob_at + offset)), count, "vbr", 6)
    out = []
    pos = blob_at + offset
    for n in lengths:
        out.append(stream[pos : pos + n])
        pos += n
    if pos > blob_at + blob_size:
        raise BadBitcode("METADATA_STRINGS runs past its blob")
    return out


def _items(r: _Reader, width: int, abbrevs: list[Abbrev]) -> Iterator[_Block | list[int]]:
    """The sub-blocks and records of a block, up to its END_BLOCK; abbreviations are added to
    `abbrevs` as they are defined. A sub-block is skipped once the caller has seen it; the
    caller may move r.pos between records (to jump)."""
    while r.pos + width <= r.end:
        code = r.fixed(width)
        if code == 0:  # END_BLOCK
            return
        if code == 1:  # ENTER_SUBBLOCK
            block = _sub_block(r)
            yield block
            r.pos = block.end
        elif code == 2:
            abbrevs.append(_define_abbrev(r))
        else:
            yield _values(r, code, abbrevs)


def _scan(r: _Reader, width: int, abbrevs: list[Abbrev], codes: Container[int]) -> Iterator[_Block | list[int] | None]:
    """As _items, but only the records whose code is in `codes` are decoded (blobs as bytes);
    any other record is passed over, as cheaply as its layout allows, and comes as None."""
    while r.pos + width <= r.end:
        code = r.fixed(width)
        if code == 0:  # END_BLOCK
            return
        if code == 1:  # ENTER_SUBBLOCK
            block = _sub_block(r)
            yield block
            r.pos = block.end
        elif code == 2:
            abbrevs.append(_define_abbrev(r))
        elif code == 3:  # UNABBREV_RECORD: code, count, fields, all VBR6
            rec_code, n = r.vbr(6), r.vbr(6)
            if rec_code in codes:
                yield [rec_code, *_run(r, n, "vbr", 6)]
            else:
                _skip_vbr6(r, n)
                yield None
        elif code - 4 >= len(abbrevs):
            raise BadBitcode(f"undefined abbreviation {code}")
        elif abbrevs[code - 4][0][0] == "lit" and abbrevs[code - 4][0][1] not in codes:
            _skip(r, abbrevs[code - 4])
            yield None
        else:
            values = _values(r, code, abbrevs, blobs=True)
            yield values if values[0] in codes else None


def _skip(r: _Reader, abbrev: Abbrev) -> None:
    """Move past one record laid out by `abbrev`: fixed-width fields and arrays by arithmetic."""
    i = 0
    while i < len(abbrev):
        kind, width = abbrev[i]
        if kind == "array":
            n = r.vbr(6)
            kind, width = abbrev[i + 1]
            if kind in ("fixed", "char6"):
                r.pos += n * (6 if kind == "char6" else width)
            else:
                _run(r, n, kind, width)
            i += 2
            continue
        if kind == "blob":
            n = r.vbr(6)
            r.align32()
            r.pos += 8 * n
            r.align32()
        elif kind == "fixed" or kind == "char6":
            r.pos += 6 if kind == "char6" else width
        elif kind == "vbr":
            r.vbr(width)
        i += 1
    if r.pos > r.end:
        raise BadBitcode("read past the end")


def _skip_vbr6(r: _Reader, n: int) -> None:
    """Move past n VBR6 fields. A field ends at a chunk whose high bit is clear, so n fields
    take n chunks plus one per set high bit among them: counted in one window, widened until
    the count holds (most records are a few hundred bits, most fields one chunk)."""
    chunks = n
    while True:
        start = r.pos >> 3
        window = int.from_bytes(r.data[start : start + (6 * chunks + 7) // 8 + 1], "little") >> (r.pos & 7)
        more = (window & (32 * ((1 << 6 * chunks) - 1) // 63)).bit_count()  # bit 5 of each chunk
        if n + more == chunks:
            break
        chunks = n + more
    r.pos += 6 * chunks
    if r.pos > r.end:
        raise BadBitcode("read past the end")


def _values(r: _Reader, code: int, abbrevs: list[Abbrev], blobs: bool = False) -> list[int]:
    """One record's code and fields. A blob comes as two fields: its byte offset in the
    stream and its length (METADATA_STRINGS holds thousands of characters); with blobs=True,
    as one field per byte, as LLVM's reader gives it to a record that takes no blob."""
    if code == 3:  # UNABBREV_RECORD: code, count, fields, all VBR6
        rec_code = r.vbr(6)
        return [rec_code, *_run(r, r.vbr(6), "vbr", 6)]
    if code - 4 >= len(abbrevs):
        raise BadBitcode(f"undefined abbreviation {code}")
    abbrev = abbrevs[code - 4]
    # An array is the abbreviation's last operand but its element's; a blob, the last one.
    if abbrev[-1][0] == "blob":
        values = _record(r, abbrev[:-1])
        n = r.vbr(6)
        r.align32()
        values += list(r.data[r.pos >> 3 : (r.pos >> 3) + n]) if blobs else [r.pos >> 3, n]
        r.pos += 8 * n
        r.align32()
    elif len(abbrev) >= 2 and abbrev[-2][0] == "array":
        values = _record(r, abbrev[:-2])
        values += _run(r, r.vbr(6), *abbrev[-1])
    else:
        values = _record(r, abbrev)
    if r.pos > r.end:
        raise BadBitcode("read past the end")
    return values


def _run(r: _Reader, n: int, kind: str, width: int) -> list[int]:
    """n fields of one encoding in a row, as _Reader.vbr/.fixed read them, from one window
    of bits per batch."""
    if kind == "char6":
        return [ord(CHAR6[c]) for c in _run(r, n, "fixed", 6)]
    if kind not in ("vbr", "fixed") or (kind == "vbr" and width < 2):
        raise BadBitcode(f"an array of {kind}")
    vbr = kind == "vbr"
    hi = 1 << (width - 1)
    low, mask = hi - 1, (1 << width) - 1
    chunks = 64 // (width - 1) + 2 if vbr else 1  # the longest field _Reader.vbr accepts
    out: list[int] = []
    while len(out) < n:
        batch = min(n - len(out), 32)
        start = r.pos >> 3
        window = int.from_bytes(r.data[start : start + (batch * chunks * width + 7) // 8 + 1], "little") >> (r.pos & 7)
        for _ in range(batch):
            if not vbr:
                out.append(window & mask)
                window >>= width
                r.pos += width
                continue
            value = shift = 0
            while True:
                chunk = window & mask
                window >>= width
                r.pos += width
                value |= (chunk & low) << shift
                if not chunk & hi:
                    break
                shift += width - 1
                if shift > 64:
                    raise BadBitcode("vbr too long")
            out.append(value)
    if r.pos > r.end:
        raise BadBitcode("read past the end")
    return out
