"""What an LLVM module says about its own code generation: its triple and its module flags.

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
Records are mostly runs of VBR6 fields, read here one window of bits per batch
(_run) rather than one slice per chunk. Anything unexpected raises BadBitcode: the
caller then knows nothing rather than something wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .bitcode import BLOCKINFO, CHAR6, MODULE_BLOCK, Abbrev, BadBitcode, _Block, _define_abbrev, _Reader, _record, _stream, \
    _sub_block, _Visitor, _walk

CONSTANTS_BLOCK = 11
METADATA_BLOCK = 15
# MODULE_BLOCK records
TRIPLE = 2
GLOBAL_VALUES = frozenset([7, 8, 9, 14, 18])  # GLOBALVAR, FUNCTION, ALIAS_OLD, ALIAS, IFUNC (LLVMBitCodes.h)
# CONSTANTS_BLOCK records
SETTYPE, NULL, INTEGER = 1, 2, 4  # an integer 0 is written as its type's NULL
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


def _values(r: _Reader, code: int, abbrevs: list[Abbrev]) -> list[int]:
    """One record's code and fields. A blob comes as two fields: its byte offset in the
    stream and its length (METADATA_STRINGS holds thousands of characters)."""
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
        values += [r.pos >> 3, n]
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
