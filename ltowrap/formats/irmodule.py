"""What an LLVM module says about its own code generation: its triple, its module flags and its
inline assembly.

In-process ThinLTO takes these from each module (llvm/lib/LTO/LTOBackend.cpp,
createTargetMachine): the triple, the relocation model from the "PIC Level" flag when
the linker leaves it open (`-r`), the code model and the large-data threshold. A
backend compile of a module that has no option record needs the first two on its
command line (clang's driver would impose its own); clang reads the others from the
module itself.

Read with bitcode.read, each reading a Want of its own (below), as little as possible:
- the triple is one of the MODULE_BLOCK's own records: none of its blocks is read for it;
- the flags are `!llvm.module.flags = !{!{i32 behaviour, !"name", i32 value}, ...}` in
  the module-level METADATA_BLOCK, read with every debug-info record passed over (its
  code alone keeps its place: metadata ids are by position). An integer operand is a
  value id: first the module's global values (one per GLOBALVAR, FUNCTION, ALIAS or
  IFUNC record), then the module-level CONSTANTS_BLOCK.
- the inline assembly (inline_asm) is what the backend's assembler parses, and what it may
  read files through (asmreads.py): the module asm (MODULE_CODE_ASM, one record of
  characters per module) and every InlineAsm constant, which the writer puts in the
  CONSTANTS_BLOCK of each function that calls it (ValueEnumerator::incorporateFunction), right
  after the function's DECLAREBLOCKS record and before its metadata and instructions
  (ModuleBitcodeWriter::writeFunction): a function block is read up to there and jumped over,
  and every other block (types, metadata, summaries, symbol tables) by its length word.
  The top-level STRTAB (every symbol name) is searched for a name an operand could print
  as a directive.
Input it cannot take (cut short, damaged) raises BadBitcode: the caller then knows nothing
rather than something wrong. Any other exception is a bug of the reader, and is let
through as one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .bitcodes import CONSTANTS_BLOCK_ID, CST_CODE_INLINEASM, CST_CODE_INLINEASM_OLD, CST_CODE_INLINEASM_OLD2, \
    CST_CODE_INLINEASM_OLD3, CST_CODE_INTEGER, CST_CODE_NULL, CST_CODE_SETTYPE, FUNCTION_BLOCK_ID, \
    FUNC_CODE_DECLAREBLOCKS, GLOBAL_VALUE_CODES, IDENTIFICATION_BLOCK_ID, IDENTIFICATION_CODE_STRING, \
    METADATA_ATTACHMENT, METADATA_BLOCK_ID, METADATA_DISTINCT_NODE, METADATA_GLOBAL_DECL_ATTACHMENT, METADATA_INDEX, \
    METADATA_INDEX_OFFSET, METADATA_KIND, METADATA_NAME, METADATA_NAMED_NODE, METADATA_NODE, METADATA_STRINGS, \
    METADATA_VALUE, MODULE_BLOCK_ID, MODULE_CODE_ASM, MODULE_CODE_TRIPLE, STRTAB_BLOB, STRTAB_BLOCK_ID
from .bitcode import TOP_LEVEL, BadBitcode, Node, Want, bitstream, metadata_strings, record_bytes
from . import bitcode

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
    """What a module says of itself: its target triple and its integer module flags."""

    triple: str  # '' when the module names none
    flags: dict[str, int] | None = None  # integer-valued module flags; None when not read

    def flag(self, name: str) -> int | None:
        return None if self.flags is None else self.flags.get(name)


# What each reading takes of a file (bitcode.Want). Records of other codes come as their code
# alone: metadata and value ids are by position.
# The producer: the top level's first block, which a backend job reads from a file's first
# 4 KiB (LLVM writes IDENTIFICATION first, then the module).
_PRODUCER = Want(enter=frozenset({IDENTIFICATION_BLOCK_ID, MODULE_BLOCK_ID}),
                 first={TOP_LEVEL: 1, MODULE_BLOCK_ID: 0})
_TRIPLE = Want(enter=frozenset({MODULE_BLOCK_ID}), only={TOP_LEVEL: frozenset(), MODULE_BLOCK_ID: frozenset({MODULE_CODE_TRIPLE})})
# The flags: the module-level constants (integers only) and metadata (strings, names, nodes,
# values); function blocks, and the metadata inside them, are jumped over.
_FLAGS = Want(enter=frozenset({MODULE_BLOCK_ID, CONSTANTS_BLOCK_ID, METADATA_BLOCK_ID}), only={
    TOP_LEVEL: frozenset(),
    MODULE_BLOCK_ID: frozenset({MODULE_CODE_TRIPLE}),
    CONSTANTS_BLOCK_ID: frozenset({CST_CODE_INTEGER}),
    METADATA_BLOCK_ID: frozenset({METADATA_STRINGS, METADATA_NAME, METADATA_NAMED_NODE, METADATA_NODE,
                                  METADATA_DISTINCT_NODE, METADATA_VALUE})})
# The inline assembly: module asm, the InlineAsm constants of the module and of each function
# (whose constants block, if any, is its second entry), and the string table.
_ASM = Want(enter=frozenset({MODULE_BLOCK_ID, CONSTANTS_BLOCK_ID, FUNCTION_BLOCK_ID, STRTAB_BLOCK_ID}),
            first={FUNCTION_BLOCK_ID: 2}, only={
    TOP_LEVEL: frozenset(),
    MODULE_BLOCK_ID: frozenset({MODULE_CODE_ASM}),
    CONSTANTS_BLOCK_ID: frozenset(INLINE_ASM),
    FUNCTION_BLOCK_ID: frozenset(),
    STRTAB_BLOCK_ID: frozenset({STRTAB_BLOB})})


def _top(root: Node) -> list[Node]:
    """The top level's blocks; BadBitcode for a record there."""
    if any(isinstance(item, list) for item in root.items):
        raise BadBitcode("a record at the top level")
    return [item for item in root.items if isinstance(item, Node)]


def read(data: bytes, flags: bool = True) -> ModuleFacts:
    """The facts of the first module in a bitcode file; BadBitcode if they cannot be read.

    flags=False reads the triple only (the module's own records, none of its blocks).
    """
    return facts_of(bitcode.read(bitstream(data), _FLAGS if flags else _TRIPLE), flags)


def facts_of(root: Node, flags: bool = True) -> ModuleFacts:
    """read()'s facts, from a tree read with (at least) what _FLAGS or _TRIPLE asks."""
    modules = [b for b in _top(root) if b.bid == MODULE_BLOCK_ID]
    if not modules:
        raise BadBitcode("no module")
    return _module_facts(modules[0], flags)


def producer(data: bytes) -> str:
    """Who wrote the first module of a bitcode file: its IDENTIFICATION block's string
    ('LLVM19.1.7'), '' when it has none or when another block comes first; BadBitcode if
    unreadable."""
    return producer_of(bitcode.read(bitstream(data), _PRODUCER))


def producer_of(root: Node) -> str:
    """producer(), from a tree read with (at least) what _PRODUCER asks."""
    for block in _top(root):
        if block.bid != IDENTIFICATION_BLOCK_ID:
            return ""
        for values in block.items:
            if isinstance(values, list) and values[0] == IDENTIFICATION_CODE_STRING:
                return producer_text(record_bytes(values[1:]))
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
    return asm_of(bitcode.read(bitstream(data), _ASM))


def asm_of(root: Node) -> ModuleAsm:
    """inline_asm(), from a tree read with (at least) what _ASM asks."""
    module: list[bytes] = []
    templates: list[bytes] = []
    modules = 0
    strtab: bytes | None = None
    for block in _top(root):
        if block.bid == MODULE_BLOCK_ID:
            modules += 1
            for item in block.items:
                if isinstance(item, list):
                    if item[0] == MODULE_CODE_ASM:
                        module.append(record_bytes(item[1:]))
                elif item.bid == CONSTANTS_BLOCK_ID:  # the module's own: no InlineAsm from LLVM's writer, but cheap to be sure
                    _asm_constants(item, templates)
                elif item.bid == FUNCTION_BLOCK_ID:
                    _asm_function(item, templates)
        elif block.bid == STRTAB_BLOCK_ID:
            strtab = b"".join(record_bytes(v[1:]) for v in block.items if isinstance(v, list) and v[0] == STRTAB_BLOB)
    if not modules:
        raise BadBitcode("no module")
    return asm_from(module, templates, strtab)


def asm_from(module: list[bytes], templates: list[bytes], strtab: bytes | None) -> ModuleAsm:
    """The ModuleAsm of each module asm's bytes, each InlineAsm string's (in order, repeats
    included) and the string table's (None: there is none)."""
    spelt = strtab is None or _DIRECTIVE_NAME.search(strtab) is not None
    return ModuleAsm(tuple(map(decoded, module)), tuple(dict.fromkeys(map(decoded, templates))), spelt)


def _asm_function(block: Node, templates: list[bytes]) -> None:
    first = block.items[0] if block.items else None
    if not isinstance(first, list) or first[0] != FUNC_CODE_DECLAREBLOCKS:
        raise BadBitcode("a function block that does not start with DECLAREBLOCKS")
    second = block.items[1] if len(block.items) > 1 else None
    if isinstance(second, Node) and second.bid == CONSTANTS_BLOCK_ID:
        _asm_constants(second, templates)
    # No constants block there: the function has no constants, so no InlineAsm either.


def _asm_constants(block: Node, templates: list[bytes]) -> None:
    for values in block.items:
        if not isinstance(values, list) or values[0] not in INLINE_ASM:
            continue  # another record; or a block, which LLVM's reader skips here too
        at = INLINE_ASM[values[0]]
        fields = values[1:]
        n = fields[at] if at < len(fields) else -1
        # BitcodeReader::parseConstants: the asm string, then the constraints' length and string.
        if n < 0 or at + 1 + n >= len(fields) or at + 2 + n + fields[at + 1 + n] > len(fields):
            raise BadBitcode("bad INLINEASM record")
        templates.append(record_bytes(fields[at + 1 : at + 1 + n]))


def _text(chars: list[int]) -> str:
    return decoded(record_bytes(chars))


def decoded(string: bytes) -> str:
    """A string of the module as a str, every byte kept (surrogateescape)."""
    return string.decode("utf-8", "surrogateescape")


def producer_text(string: bytes) -> str:
    """The IDENTIFICATION string as producer() gives it."""
    return string.decode("ascii", "replace")


def _tables() -> tuple:
    """What the compiled facts (ltowrap._bitcode.module_facts, behind modulefacts.read) take of this
    module's tables, so that they are defined here alone; read at each call."""
    return tuple(INLINE_ASM.items()), tuple(MD_NO_ID), MODULE_FLAGS, tuple(GLOBAL_VALUE_CODES)


def _module_facts(module: Node, want_flags: bool) -> ModuleFacts:
    triple = ""
    global_values = 0
    constants: Node | None = None
    metadata: Node | None = None
    for item in module.items:
        if isinstance(item, Node):
            if item.bid == CONSTANTS_BLOCK_ID and constants is None:
                constants = item
            elif item.bid == METADATA_BLOCK_ID and metadata is None:
                metadata = item
                break  # what follows the module-level metadata is not needed
        elif item[0] == MODULE_CODE_TRIPLE:
            triple = _text(item[1:])
            if not want_flags:
                return ModuleFacts(triple)
        elif item[0] in GLOBAL_VALUE_CODES:
            if constants is not None:
                raise BadBitcode("a global value after the module's constants")
            global_values += 1
    if not want_flags:
        return ModuleFacts(triple)
    if metadata is None:
        return ModuleFacts(triple, {})  # no metadata: no flags
    return ModuleFacts(triple, _module_flags(metadata, _Constants(global_values, constants)))


@dataclass(eq=False, repr=False)
class _Constants:
    """The module-level constants by value id: the global values come first, then the records
    of the module's CONSTANTS_BLOCK, each defining one value (SETTYPE none)."""

    global_values: int
    block: Node | None

    def integer(self, value_id: int) -> int | None:
        """The integer constant with this value id (None if it is another kind of value)."""
        i = value_id - self.global_values
        if i < 0 or self.block is None:
            return None
        for values in self.block.items:
            if isinstance(values, Node) or values[0] == CST_CODE_SETTYPE:
                continue
            if i == 0:
                if values[0] == CST_CODE_INTEGER and len(values) == 2:  # signed VBR: the sign in the low bit
                    v = values[1]
                    return -(v >> 1) if v & 1 else v >> 1
                return 0 if values[0] == CST_CODE_NULL else None
            i -= 1
        return None


def _module_flags(block: Node, constants: _Constants) -> dict[str, int]:
    """`!llvm.module.flags`'s integer-valued flags, from the module-level METADATA_BLOCK."""
    strings: list[bytes] = []
    nodes: dict[int, list[int]] = {}  # metadata id -> record
    next_id = 0
    name: bytes | None = None
    flag_ids: list[int] = []
    for values in block.items:
        if isinstance(values, Node):
            continue
        kind = values[0]
        if name is not None and kind != METADATA_NAMED_NODE:
            raise BadBitcode("METADATA_NAME not followed by its node")
        if kind == METADATA_STRINGS:
            if len(values) < 3:  # [count, offset, the blob's bytes]
                raise BadBitcode("bad METADATA_STRINGS record")
            strings = metadata_strings(values[1], values[2], record_bytes(values[3:]))
            next_id = len(strings)
        elif kind == METADATA_NAME:
            name = record_bytes(values[1:])
        elif kind == METADATA_NAMED_NODE:
            if name == MODULE_FLAGS:
                flag_ids = values[1:]
            name = None
        elif kind not in MD_NO_ID:
            nodes[next_id] = values
            next_id += 1
    flags: dict[str, int] = {}
    for md in flag_ids:
        node = nodes.get(md)
        if node is None:
            raise BadBitcode(f"metadata {md} not found")
        if node[0] not in (METADATA_NODE, METADATA_DISTINCT_NODE):
            raise BadBitcode("a module flag that is not a node")
        if len(node) != 4:
            continue  # not {behaviour, name, value}
        name_id, value_id = node[2] - 1, node[3] - 1  # operands are ids + 1
        if not 0 <= name_id < len(strings):
            raise BadBitcode("a module flag whose name is not a string")
        number = _integer(nodes, len(strings), value_id, constants)
        if number is not None:
            flags[decoded(strings[name_id])] = number
    return flags


def _integer(nodes: dict[int, list[int]], strings: int, md: int, constants: _Constants) -> int | None:
    """The integer a node operand holds (a ConstantInt as metadata), else None."""
    if md < strings:
        return None
    value = nodes.get(md)
    if value is None:
        raise BadBitcode(f"metadata {md} not found")
    if value[0] != METADATA_VALUE or len(value) != 3:
        return None
    return constants.integer(value[2])
