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
  (bitcode.scan). The top-level STRTAB (every symbol name) is searched for a name an operand could
  print as a directive.
Records are mostly runs of VBR6 fields, read here one window of bits per batch
(bitcode.Reader.run) rather than one slice per chunk. Input it cannot take (cut short, damaged)
raises BadBitcode: the caller then knows nothing rather than something wrong. Any other
exception is a bug of the reader, and is let through as one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from .bitcode import BLOCKINFO_BLOCK_ID, CONSTANTS_BLOCK_ID, CST_CODE_INLINEASM, CST_CODE_INLINEASM_OLD, \
    CST_CODE_INLINEASM_OLD2, CST_CODE_INLINEASM_OLD3, CST_CODE_INTEGER, CST_CODE_NULL, CST_CODE_SETTYPE, \
    FUNC_CODE_DECLAREBLOCKS, FUNCTION_BLOCK_ID, GLOBAL_VALUE_CODES, IDENTIFICATION_BLOCK_ID, IDENTIFICATION_CODE_STRING, \
    METADATA_ATTACHMENT, METADATA_BLOCK_ID, METADATA_DISTINCT_NODE, METADATA_GLOBAL_DECL_ATTACHMENT, METADATA_INDEX, \
    METADATA_INDEX_OFFSET, METADATA_KIND, METADATA_NAME, METADATA_NAMED_NODE, METADATA_NODE, METADATA_STRINGS, \
    METADATA_VALUE, MODULE_BLOCK_ID, MODULE_CODE_ASM, MODULE_CODE_TRIPLE, STRTAB_BLOB, STRTAB_BLOCK_ID, Abbrev, \
    BadBitcode, Block, Reader, Visitor, bitstream, inside, items, metadata_strings, read_values, record_bytes, scan, \
    top_level, walk

# The INLINEASM codes, each with the field its asm string's length is in: OLD, OLD2 and OLD3
# [flags, n, asm..., m, constraints...]; INLINEASM [fnty, flags, n, asm..., m, constraints...].
INLINE_ASM = {CST_CODE_INLINEASM_OLD: 1, CST_CODE_INLINEASM_OLD2: 1, CST_CODE_INLINEASM_OLD3: 1, CST_CODE_INLINEASM: 2}
_DIRECTIVE_NAME = re.compile(rb"\.(?:incbin|include|altmacro)", re.I)
# Records that define no metadata id (each other record defines the next one; METADATA_STRINGS'
# strings take the first ids).
MD_NO_ID = frozenset([METADATA_NAME, METADATA_KIND, METADATA_NAMED_NODE, METADATA_ATTACHMENT, METADATA_STRINGS,
                      METADATA_GLOBAL_DECL_ATTACHMENT, METADATA_INDEX_OFFSET, METADATA_INDEX])
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
    stream = bitstream(data)
    for item in items(top_level(stream), 2, []):
        if isinstance(item, Block) and item.bid == MODULE_BLOCK_ID:
            return _Module(stream, item, flags).read()
        if not isinstance(item, Block):
            raise BadBitcode("a record at the top level")
    raise BadBitcode("no module")



def producer(data: bytes) -> str:
    """Who wrote the first module of a bitcode file: its IDENTIFICATION block's string
    ('LLVM19.1.7'), '' when it has none; BadBitcode if unreadable. The block comes first."""
    stream = bitstream(data)
    for item in items(top_level(stream), 2, []):
        if not isinstance(item, Block):
            raise BadBitcode("a record at the top level")
        if item.bid == MODULE_BLOCK_ID:
            return ""
        if item.bid == IDENTIFICATION_BLOCK_ID:
            for values in items(inside(stream, item), item.width, []):
                if isinstance(values, list) and values[0] == IDENTIFICATION_CODE_STRING:
                    return record_bytes(values[1:]).decode("ascii", "replace")
            return ""
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
    stream = bitstream(data)
    found = ModuleAsm((), ())
    modules = 0
    strtab: bytes | None = None
    for item in items(top_level(stream), 2, []):
        if not isinstance(item, Block):
            raise BadBitcode("a record at the top level")
        if item.bid == MODULE_BLOCK_ID:
            found = _AsmReader(stream, item, found).read()
            modules += 1
        elif item.bid == STRTAB_BLOCK_ID:
            r = inside(stream, item)
            strtab = b"".join(record_bytes(v[1:]) for v in scan(r, item.width, [], {STRTAB_BLOB}) if isinstance(v, list))
    if not modules:
        raise BadBitcode("no module")
    spelt = strtab is None or _DIRECTIVE_NAME.search(strtab) is not None
    return ModuleAsm(found.module, found.templates, spelt)


@dataclass
class _AsmReader:
    stream: bytes
    block: Block
    found: ModuleAsm
    blockinfo: dict[int, list[Abbrev]] = field(default_factory=dict)
    templates: dict[str, None] = field(default_factory=dict)

    def read(self) -> ModuleAsm:
        module = list(self.found.module)
        self.templates = dict.fromkeys(self.found.templates)
        for item in scan(inside(self.stream, self.block), self.block.width, [], {MODULE_CODE_ASM}):
            if isinstance(item, list):
                module.append(_text(item[1:]))
            elif item is None:
                continue
            elif item.bid == BLOCKINFO_BLOCK_ID:
                walk(inside(self.stream, item), item.width, item, self.blockinfo, Visitor())
            elif item.bid == CONSTANTS_BLOCK_ID:  # the module's own: no InlineAsm from LLVM's writer, but cheap to be sure
                self._constants(item)
            elif item.bid == FUNCTION_BLOCK_ID:
                self._function(item)
        return ModuleAsm(tuple(module), tuple(self.templates))

    def _function(self, block: Block) -> None:
        records = scan(inside(self.stream, block), block.width, list(self.blockinfo.get(FUNCTION_BLOCK_ID, [])),
                       {FUNC_CODE_DECLAREBLOCKS})
        if not isinstance(next(records, None), list):
            raise BadBitcode("a function block that does not start with DECLAREBLOCKS")
        second = next(records, None)
        if isinstance(second, Block) and second.bid == CONSTANTS_BLOCK_ID:
            self._constants(second)
        # No constants block there: the function has no constants, so no InlineAsm either.

    def _constants(self, block: Block) -> None:
        abbrevs = list(self.blockinfo.get(CONSTANTS_BLOCK_ID, []))
        for values in scan(inside(self.stream, block), block.width, abbrevs, INLINE_ASM):
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
    return record_bytes(chars).decode("utf-8", "surrogateescape")


@dataclass
class _Module:
    stream: bytes
    block: Block
    want_flags: bool
    triple: str = ""
    global_values: int = 0
    constants: list[int | None] = field(default_factory=list)  # by value id - global_values: an integer, if one
    blockinfo: dict[int, list[Abbrev]] = field(default_factory=dict)
    _unread: Iterator[Block | list[int]] | None = None  # the rest of the CONSTANTS_BLOCK, read on demand

    def read(self) -> ModuleFacts:
        r = inside(self.stream, self.block)
        for item in items(r, self.block.width, []):
            if isinstance(item, Block):
                if item.bid == BLOCKINFO_BLOCK_ID:
                    walk(inside(self.stream, item), item.width, item, self.blockinfo, Visitor())
                elif item.bid == CONSTANTS_BLOCK_ID and self.want_flags and self._unread is None:
                    # Read only as far as a flag's value needs (most constants are not).
                    abbrevs = list(self.blockinfo.get(CONSTANTS_BLOCK_ID, []))
                    self._unread = items(inside(self.stream, item), item.width, abbrevs)
                elif item.bid == METADATA_BLOCK_ID and self.want_flags:
                    return ModuleFacts(self.triple, _Metadata(self, item).module_flags())
            elif item[0] == MODULE_CODE_TRIPLE:
                self.triple = _text(item[1:])
                if not self.want_flags:
                    return ModuleFacts(self.triple)
            elif item[0] in GLOBAL_VALUE_CODES:
                if self._unread is not None:
                    raise BadBitcode("a global value after the module's constants")
                self.global_values += 1
        return ModuleFacts(self.triple, {} if self.want_flags else None)  # no metadata: no flags

    def integer(self, value_id: int) -> int | None:
        """The integer constant with this value id (None if it is another kind of value)."""
        i = value_id - self.global_values
        if i < 0:
            return None
        for values in self._unread or ():
            if isinstance(values, Block) or values[0] == CST_CODE_SETTYPE:
                continue  # SETTYPE defines no value
            if values[0] == CST_CODE_INTEGER and len(values) == 2:  # signed VBR: the sign in the low bit
                v = values[1]
                self.constants.append(-(v >> 1) if v & 1 else v >> 1)
            elif values[0] == CST_CODE_NULL:
                self.constants.append(0)
            else:
                self.constants.append(None)
            if len(self.constants) > i:
                break
        return self.constants[i] if i < len(self.constants) else None


class _Metadata:
    """The module-level METADATA_BLOCK: its strings, its nodes (by index, or as walked), its flags."""

    def __init__(self, module: _Module, block: Block) -> None:
        self.module = module
        self.stream = module.stream
        self.block = block
        self.abbrevs: list[Abbrev] = list(module.blockinfo.get(METADATA_BLOCK_ID, []))
        self.strings: list[bytes] = []
        self.nodes: dict[int, list[int]] = {}  # metadata id -> record, for the records walked
        self.positions: list[int] = []  # bit position of each non-string node, from the index

    def module_flags(self) -> dict[str, int]:
        flags: dict[str, int] = {}
        for md in self._flag_ids():
            node = self._node(md)
            if node[0] not in (METADATA_NODE, METADATA_DISTINCT_NODE):
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

    def _flag_ids(self) -> list[int]:
        """Read the block, jumping over the nodes when they are indexed; the flag nodes' ids."""
        r = inside(self.stream, self.block)
        next_id = index_base = 0
        name: bytes | None = None
        for values in items(r, self.block.width, self.abbrevs):
            if isinstance(values, Block):
                continue
            kind = values[0]
            if name is not None and kind != METADATA_NAMED_NODE:
                raise BadBitcode("METADATA_NAME not followed by its node")
            if kind == METADATA_STRINGS:
                if len(values) != 5:  # [count, offset, blob as its place and size] (read_values)
                    raise BadBitcode("bad METADATA_STRINGS record")
                count, offset, blob_at, blob_size = values[1:]
                self.strings = metadata_strings(count, offset, self.stream[blob_at : blob_at + blob_size])
                next_id = len(self.strings)
            elif kind == METADATA_INDEX_OFFSET and len(values) == 3:
                index_base = r.pos
                r.pos = index_base + (values[1] | values[2] << 32)
                if not index_base < r.pos < r.end:
                    raise BadBitcode("metadata index outside its block")
            elif kind == METADATA_INDEX:
                pos = index_base
                for delta in values[1:]:
                    pos += delta
                    self.positions.append(pos)
            elif kind == METADATA_NAME:
                name = record_bytes(values[1:])
            elif kind == METADATA_NAMED_NODE:
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
        r = Reader(self.stream, self.positions[i], self.block.end)
        code = r.fixed(self.block.width)
        if code < 3:
            raise BadBitcode(f"the metadata index points at abbreviation id {code}")
        return read_values(r, code, self.abbrevs)

    def _integer(self, md: int) -> int | None:
        """The integer a node operand holds (a ConstantInt as metadata), else None."""
        if md < len(self.strings):
            return None
        value = self._node(md)
        if value[0] != METADATA_VALUE or len(value) != 3:
            return None
        return self.module.integer(value[2])
