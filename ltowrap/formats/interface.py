"""A module's interface: what a backend that imports only declarations from it can take of it.

An index shard's canonical text (shardkey.py) names such a module by the digest of its
interface, not of its bytes (ltowrap's thin-link passes -import-declaration, so that a
backend knows what a callee's summary says: v12 flags bit 10 on every summary of that
module). What the backend takes of the declarations is their summaries, which are in the
shard and keyed there. It still opens the module: FunctionImporter loads every module of
its import list, links its metadata and calls IRMover with no global value to move
(FunctionImport.cpp, importFunctions). IRLinker::run then changes the importer only
through the module-level part: the target triple (merged) and data layout; the .symver
lines of its inline asm for the importer's names; its named metadata and module flags
(linked); the importer's global variables of the names the module's variables have (moved
to the end of the list, in the module's order: a declaration `extern int v;` in the module
reorders the importer's .data, measured in tests/test_shardkey.py); and, by name, the
module's struct types (computeTypeMapping takes every identified struct the reader
created, function bodies' included, and gives an opaque struct of the importer's the body
of the first of that name; kept from the code, though no object built here changed
through it: with clang 22 an opaque struct stayed opaque, even under llvm-link).

The interface is that part, written without ids (types as texts, values by name): the
IDENTIFICATION block, the VERSION, TRIPLE, DATALAYOUT, ASM, DEPLIB and SOURCE_FILENAME
records, the metadata kinds, operand bundle tags and sync scope names, the names of the
module's variables that are neither local nor appending, in order (a local's name matches
nothing: it stays local or is promoted to `name.llvm.<the module's hash>`, and a module
whose hash another module of the shard shares goes in by its bytes), the element types of
appending variables, intrinsics whose types hold a named struct (their mapping can take a
struct out of the by-name pass), every named struct with its body in the reader's order,
and the named metadata with what it reaches, except debug-info nodes, which reach an object
only from a function or global that is linked (an imported compile unit loses its lists,
IRLinker::prepareCompileUnitsForImport, and DwarfDebug emits no unit without them). It
leaves out the functions, aliases and ifuncs, attributes, comdats, sections, other types
and constants, the global values' metadata attachments (copied only with a global value
that is linked), the function bodies, the symbol tables, the module's summary and hash: a
new function nobody calls, or a new body of one, changes no key but its own module's
(Debian lua's lvm.c with a function appended: 23 backends, as many as lld's cache adds; 26
with shardkey 2, which kept every module-level record). Where the reader meets something it
does not know (a record, a block, a constant other than a number in the named metadata),
the whole module but its bodies goes in. Of a split LTO unit (two modules in one file,
-fwhole-program-vtables or -fsanitize=cfi), the backend opens the ThinLTO module only
(lto::findThinLTOModule): its interface is that module's.

The text is versioned with the shard's (shardkey.FORMAT): a key made from an interface is a
shard key's part.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bitcodes import BLOCKINFO_BLOCK_ID, CONSTANTS_BLOCK_ID, CST_CODE_FLOAT, CST_CODE_INTEGER, CST_CODE_NULL, \
    CST_CODE_POISON, CST_CODE_SETTYPE, CST_CODE_UNDEF, CST_CODE_WIDE_INTEGER, FUNCTION_BLOCK_ID, \
    GLOBALVAL_SUMMARY_BLOCK_ID, GLOBAL_VALUE_CODES, METADATA_BLOCK_ID, METADATA_DISTINCT_NODE, \
    METADATA_GENERIC_DEBUG, METADATA_GLOBAL_DECL_ATTACHMENT, METADATA_GLOBAL_VAR_EXPR, METADATA_INDEX, \
    METADATA_INDEX_OFFSET, METADATA_KIND, METADATA_KIND_BLOCK_ID, METADATA_LABEL, METADATA_LOCATION, METADATA_NAME, \
    METADATA_NAMED_NODE, METADATA_NODE, METADATA_STRINGS, METADATA_VALUE, MODULE_BLOCK_ID, MODULE_CODE_ALIAS_OLD, \
    MODULE_CODE_ASM, MODULE_CODE_COMDAT, MODULE_CODE_DATALAYOUT, MODULE_CODE_DEPLIB, MODULE_CODE_FUNCTION, \
    MODULE_CODE_GCNAME, MODULE_CODE_GLOBALVAR, MODULE_CODE_HASH, MODULE_CODE_SECTIONNAME, \
    MODULE_CODE_SOURCE_FILENAME, MODULE_CODE_TRIPLE, MODULE_CODE_VERSION, MODULE_CODE_VSTOFFSET, \
    OPERAND_BUNDLE_TAGS_BLOCK_ID, PARAMATTR_BLOCK_ID, PARAMATTR_GROUP_BLOCK_ID, STRTAB_BLOB, STRTAB_BLOCK_ID, \
    SYMTAB_BLOCK_ID, SYNC_SCOPE_NAMES_BLOCK_ID, TYPE_BLOCK_ID_NEW, TYPE_CODE_ARRAY, TYPE_CODE_BFLOAT, \
    TYPE_CODE_DOUBLE, TYPE_CODE_FLOAT, TYPE_CODE_FP128, TYPE_CODE_FUNCTION, TYPE_CODE_HALF, TYPE_CODE_INTEGER, \
    TYPE_CODE_LABEL, TYPE_CODE_METADATA, TYPE_CODE_NUMENTRY, TYPE_CODE_OPAQUE, TYPE_CODE_OPAQUE_POINTER, \
    TYPE_CODE_PPC_FP128, TYPE_CODE_STRUCT_ANON, TYPE_CODE_STRUCT_NAME, TYPE_CODE_STRUCT_NAMED, TYPE_CODE_TARGET_TYPE, \
    TYPE_CODE_TOKEN, TYPE_CODE_VECTOR, TYPE_CODE_VOID, TYPE_CODE_X86_AMX, TYPE_CODE_X86_FP80, TYPE_CODE_X86_MMX, \
    VALUE_SYMTAB_BLOCK_ID
from .bitcode import Node, Want, bitstream, ints_text, metadata_strings, read, record_bytes
from .shardkey import FORMAT

# Not read (a tree read for more than the interface may hold them: they are passed over).
SKIPPED_BLOCKS = frozenset({FUNCTION_BLOCK_ID, VALUE_SYMTAB_BLOCK_ID, GLOBALVAL_SUMMARY_BLOCK_ID})
# Blocks that go in as they are: names the context registers, whatever the module.
RAW_BLOCKS = frozenset({METADATA_KIND_BLOCK_ID, OPERAND_BUNDLE_TAGS_BLOCK_ID, SYNC_SCOPE_NAMES_BLOCK_ID})
# Blocks read for the interface.
READ_BLOCKS = frozenset({BLOCKINFO_BLOCK_ID, TYPE_BLOCK_ID_NEW, CONSTANTS_BLOCK_ID, METADATA_BLOCK_ID})
# Blocks left out: the attributes of functions, calls and variables (none of them is linked).
DROPPED_BLOCKS = frozenset({PARAMATTR_BLOCK_ID, PARAMATTR_GROUP_BLOCK_ID})
# Kept as they are: what IRMover reads of the module (triple, data layout, the inline asm's
# .symver lines), and the version, dependent libraries and source file name.
KEPT_MODULE_CODES = frozenset({MODULE_CODE_VERSION, MODULE_CODE_TRIPLE, MODULE_CODE_DATALAYOUT, MODULE_CODE_ASM,
                               MODULE_CODE_DEPLIB, MODULE_CODE_SOURCE_FILENAME})
# Dropped: tables that only the records of global values use (sections, GC names, comdats:
# a comdat reaches the importer only with a global value it links), where the value symbol
# table is, the module hash.
DROPPED_MODULE_CODES = frozenset({MODULE_CODE_SECTIONNAME, MODULE_CODE_GCNAME, MODULE_CODE_COMDAT,
                                  MODULE_CODE_VSTOFFSET, MODULE_CODE_HASH})
# Global values read here: variables, functions, aliases, ifuncs. The old alias record (LLVM
# before 3.7) has another layout: unknown here, it puts the whole module in.
GLOBALS_READ = GLOBAL_VALUE_CODES - {MODULE_CODE_ALIAS_OLD}
# Encoded linkages (BitcodeWriter getEncodedLinkage, and the older ones the reader still
# takes): local (internal, private, linker_private, linker_private_weak) and appending.
LOCAL_LINKAGES, APPENDING_LINKAGE, KNOWN_LINKAGES = frozenset({3, 9, 13, 14}), 2, range(20)
PRIMITIVE_TYPES = {TYPE_CODE_VOID: "void", TYPE_CODE_FLOAT: "float", TYPE_CODE_DOUBLE: "double",
                   TYPE_CODE_LABEL: "label", TYPE_CODE_HALF: "half", TYPE_CODE_X86_FP80: "x86_fp80",
                   TYPE_CODE_FP128: "fp128", TYPE_CODE_PPC_FP128: "ppc_fp128", TYPE_CODE_METADATA: "metadata",
                   TYPE_CODE_X86_MMX: "x86_mmx", TYPE_CODE_TOKEN: "token", TYPE_CODE_BFLOAT: "bfloat",
                   TYPE_CODE_X86_AMX: "x86_amx"}
# Constants that name no other value.
SIMPLE_CONSTANTS = frozenset({CST_CODE_NULL, CST_CODE_UNDEF, CST_CODE_INTEGER, CST_CODE_WIDE_INTEGER, CST_CODE_FLOAT,
                              CST_CODE_POISON})
# Debug-info nodes (LOCATION, GENERIC_DEBUG .. MACRO_FILE, GLOBAL_VAR_EXPR, LABEL .. 49).
MD_DEBUG = frozenset({METADATA_LOCATION, *range(METADATA_GENERIC_DEBUG, METADATA_STRINGS), METADATA_GLOBAL_VAR_EXPR,
                      *range(METADATA_LABEL, 50)})
# The METADATA_BLOCK records read here. Each defines one metadata id except NAME, KIND,
# NAMED_NODE, STRINGS (its strings take the first ids), GLOBAL_DECL_ATTACHMENT, INDEX_OFFSET, INDEX.
MD_KNOWN = MD_DEBUG | {METADATA_STRINGS, METADATA_NAME, METADATA_KIND, METADATA_NAMED_NODE,
                       METADATA_GLOBAL_DECL_ATTACHMENT, METADATA_INDEX_OFFSET, METADATA_INDEX, METADATA_VALUE,
                       METADATA_NODE, METADATA_DISTINCT_NODE}
# Types nested deeper than this (a cycle of unnamed structs among them) put the whole module in.
MAX_TYPE_DEPTH = 100
# Names of the intrinsics, whose types IRMover maps by the importer's function of that name.
INTRINSIC_PREFIX = b"llvm."


class _Unknown(Exception):
    """The module holds something this reader does not know: the whole module goes in."""


# What the interface reads (bitcode.Want): every block but those a declarations-only import
# never reads, the summary block kept only as a mark that its module has one (a split LTO
# unit has two modules, the ThinLTO one first, then the regular-LTO one). Debug-info nodes
# and constants other than simple ones come as their codes alone: _metadata counts a debug
# node's id and stops there, _Values takes no other constant apart. A -g module's metadata
# is mostly debug nodes.
_WANT = Want(skip=SKIPPED_BLOCKS - {GLOBALVAL_SUMMARY_BLOCK_ID}, first={GLOBALVAL_SUMMARY_BLOCK_ID: 0},
             unread={METADATA_BLOCK_ID: MD_DEBUG},
             only={CONSTANTS_BLOCK_ID: SIMPLE_CONSTANTS | {CST_CODE_SETTYPE}})
# The whole module, bodies aside, every record with its fields (for _whole).
_WHOLE = Want(skip=SKIPPED_BLOCKS)


def _name(name: bytes) -> str:
    """A symbol or type name on one line, one text per name."""
    return repr(name)[2:-1]


class _Types:
    """TYPE_BLOCK_ID_NEW: each type as a text that names no type id, and the module's
    identified struct types in the order the bitcode reader creates them."""

    def __init__(self, node: Node | None) -> None:
        self.records: list[list[int]] = []  # per type id: [code, fields...]
        self.names: dict[int, bytes] = {}  # identified struct (or target type) id -> its name
        self.created: list[int] = []  # identified structs, in BitcodeReader::getIdentifiedStructTypes order
        self._text: dict[int, str] = {}
        if node is None:
            return
        pending: bytes | None = None
        for item in node.items:
            if isinstance(item, Node):
                raise _Unknown(f"block {item.bid} in TYPE")
            code = item[0]
            if code == TYPE_CODE_NUMENTRY:
                continue
            if code == TYPE_CODE_STRUCT_NAME:
                pending = record_bytes(item[1:])
                continue
            if code != TYPE_CODE_STRUCT_ANON and code not in PRIMITIVE_TYPES and code not in (
                    TYPE_CODE_OPAQUE, TYPE_CODE_INTEGER, TYPE_CODE_ARRAY, TYPE_CODE_VECTOR, TYPE_CODE_STRUCT_NAMED,
                    TYPE_CODE_FUNCTION, TYPE_CODE_OPAQUE_POINTER, TYPE_CODE_TARGET_TYPE):
                raise _Unknown(f"type record {code}")  # typed pointers (8, LLVM < 17) among them
            tid = len(self.records)
            self.records.append(item)
            if pending is not None:
                if code not in (TYPE_CODE_OPAQUE, TYPE_CODE_STRUCT_NAMED, TYPE_CODE_TARGET_TYPE):
                    raise _Unknown("a type name before an unnamed type")
                self.names[tid] = pending
                pending = None
            # BitcodeReader creates an identified struct at its own record (before asking for
            # its elements), and a placeholder struct for a forward reference, in the order it
            # asks for the types a record names (a function's parameters before its return).
            if code in (TYPE_CODE_OPAQUE, TYPE_CODE_STRUCT_NAMED) and tid not in self.created:
                self.created.append(tid)
            for sub in self._reads(tid):
                if sub > tid and sub not in self.created:
                    self.created.append(sub)
        if pending is not None:
            raise _Unknown("a type name at the end of TYPE")
        for tid in self.created:
            if tid >= len(self.records) or self.records[tid][0] not in (TYPE_CODE_OPAQUE, TYPE_CODE_STRUCT_NAMED):
                raise _Unknown("a forward type reference to what is not a struct")

    def _reads(self, tid: int) -> list[int]:
        """The type ids a record names, in the order BitcodeReader asks for them."""
        r = self.records[tid]
        code = r[0]
        if code in (TYPE_CODE_ARRAY, TYPE_CODE_VECTOR):
            return [r[2]] if len(r) >= 3 else []
        if code in (TYPE_CODE_STRUCT_ANON, TYPE_CODE_STRUCT_NAMED):
            return r[2:]
        if code == TYPE_CODE_FUNCTION:
            return [*r[3:], *r[2:3]]  # parameters, then the return type
        if code == TYPE_CODE_TARGET_TYPE:
            return r[2 : 2 + r[1]] if len(r) >= 2 else []
        return []

    def text(self, tid: int, depth: int = 0) -> str:
        """The type as a text: a named struct by its name, any other type by its structure."""
        if tid in self._text:
            return self._text[tid]
        if tid >= len(self.records) or depth > MAX_TYPE_DEPTH:
            raise _Unknown(f"type id {tid}")
        r = self.records[tid]
        code, f = r[0], r[1:]
        sub = lambda t: self.text(t, depth + 1)  # noqa: E731
        if code in PRIMITIVE_TYPES:
            out = PRIMITIVE_TYPES[code]
        elif code == TYPE_CODE_INTEGER and len(f) == 1:
            out = f"i{f[0]}"
        elif code == TYPE_CODE_OPAQUE_POINTER and len(f) == 1:
            out = f"ptr{f[0]}"
        elif code == TYPE_CODE_ARRAY and len(f) == 2:
            out = f"[{f[0]} x {sub(f[1])}]"
        elif code == TYPE_CODE_VECTOR and len(f) in (2, 3):
            out = f"<{'vscale ' if len(f) == 3 and f[2] else ''}{f[0]} x {sub(f[1])}>"
        elif code == TYPE_CODE_FUNCTION and len(f) >= 2:
            out = f"fn{'...' if f[0] else ''} {sub(f[1])} ({', '.join(map(sub, f[2:]))})"
        elif code == TYPE_CODE_STRUCT_ANON and f:
            out = "{" + ("packed " if f[0] else "") + ", ".join(map(sub, f[1:])) + "}"
        elif code in (TYPE_CODE_STRUCT_NAMED, TYPE_CODE_OPAQUE) and tid in self.names:
            out = "%" + _name(self.names[tid])
        elif code in (TYPE_CODE_STRUCT_NAMED, TYPE_CODE_OPAQUE):
            out = "%anonymous " + self.body(tid, depth + 1)  # an unnamed identified struct
        elif code == TYPE_CODE_TARGET_TYPE and f and tid in self.names:
            out = f"target {_name(self.names[tid])} ({', '.join(map(sub, f[1 : 1 + f[0]]))}) {ints_text(f[1 + f[0]:])}"
        else:
            raise _Unknown(f"type record {ints_text(r)}")
        self._text[tid] = out
        return out

    def body(self, tid: int, depth: int = 0) -> str:
        r = self.records[tid]
        if r[0] == TYPE_CODE_OPAQUE:
            return "opaque"
        if len(r) < 2:
            raise _Unknown("struct record layout")
        return "{" + ("packed " if r[1] else "") + ", ".join(self.text(t, depth + 1) for t in r[2:]) + "}"

    def reaches_named(self, tid: int, depth: int = 0) -> bool:
        """Whether a named struct is part of the type."""
        if depth > MAX_TYPE_DEPTH or tid >= len(self.records):
            raise _Unknown(f"type id {tid}")
        return tid in self.names or any(self.reaches_named(t, depth + 1) for t in self._reads(tid))


@dataclass(eq=False, repr=False)
class _Global:
    """One global value of a module's symbol table: its record code, name, linkage and record."""

    code: int
    name: bytes
    linkage: int
    record: list[int]

    @property
    def local(self) -> bool:
        return self.linkage in LOCAL_LINKAGES

    def text(self) -> str:
        kind = "local" if self.local else "appending" if self.linkage == APPENDING_LINKAGE else "global"
        return f"@{kind} {_name(self.name)}"


def _globals(records: list[list[int]], strtab: bytes | None) -> list[_Global]:
    """The module's global values, in value id order (their records come in that order)."""
    out = []
    for r in records:
        code = r[0]
        if code == MODULE_CODE_FUNCTION and len(r) < 18 or code != MODULE_CODE_FUNCTION and len(r) < 7:
            raise _Unknown(f"short global value record {code}")
        offset, size, linkage = r[1], r[2], r[6]
        if code == MODULE_CODE_GLOBALVAR and not r[4] & 2:
            raise _Unknown("a global variable without its value type")  # before LLVM 3.9
        if linkage not in KNOWN_LINKAGES:
            raise _Unknown(f"linkage {linkage}")
        if size and (strtab is None or offset + size > len(strtab)):
            raise _Unknown("a name past the string table")
        out.append(_Global(code, strtab[offset : offset + size] if size and strtab else b"", linkage, r))
    return out


class _Values:
    """Module-level value ids: the global values, then the constants of the module's CONSTANTS blocks."""

    def __init__(self, globals_: list[_Global], constants: list[Node], types: _Types) -> None:
        self.globals = globals_
        self.types = types
        self.constants: list[tuple[int | None, list[int]]] = []  # (type id, record)
        for c in constants:
            ty = None
            for r in c.items:
                if isinstance(r, Node):
                    raise _Unknown("block in CONSTANTS")
                if r[0] == CST_CODE_SETTYPE:
                    ty = r[1] if len(r) > 1 else None
                else:
                    self.constants.append((ty, r))

    def __len__(self) -> int:
        return len(self.globals) + len(self.constants)

    def text(self, vid: int) -> str:
        """A value named in metadata: a global value by its name (IRMover maps it to the importer's
        global of that name, or to null), a constant that names no other value by its type
        and fields. Anything else is not taken apart: the whole module goes in."""
        if vid < len(self.globals):
            g = self.globals[vid]
            if g.linkage == APPENDING_LINKAGE:
                raise _Unknown("metadata names an appending variable")  # IRMover would link it
            return g.text()
        if vid >= len(self):
            raise _Unknown(f"value id {vid}")
        ty, r = self.constants[vid - len(self.globals)]
        if ty is None or r[0] not in SIMPLE_CONSTANTS:
            raise _Unknown(f"metadata names constant {ints_text(r[:1])}")
        return f"{self.types.text(ty)} const {ints_text(r)}"


def _metadata(node: Node, values: _Values) -> list[str]:
    """The module-level metadata a declarations-only import can link.

    IRMover links a source module's named metadata and module flags even when it moves no
    global value (FunctionImporter calls it for every module in the import list): the named
    nodes go in, with every node they reach, operands resolved (strings by their bytes,
    values by _Values.text, nodes by id). Debug-info nodes stop the walk: the imported
    compile unit loses its enums, retained types, globals, imported entities and macros
    (IRLinker::prepareCompileUnitsForImport), DwarfDebug emits no unit that has none of
    them and no function, and other debug nodes reach an object only from a function or
    global that is linked, and none is. Attachments of global values are not linked either
    (IRLinker copies them with the global value), so they are left out.
    """
    ids: list[str] = []  # metadata id -> "s<hex>" (a string), "#<id>" (a node) or "debug"
    nodes: dict[int, tuple[str, list[int]]] = {}  # id -> (text, ids it names)
    roots: list[tuple[str, list[int]]] = []
    name: str | None = None
    for item in node.items:
        if isinstance(item, Node):
            raise _Unknown(f"block {item.bid} in METADATA")
        code = item[0]
        if code not in MD_KNOWN:
            raise _Unknown(f"metadata record {code}")
        if code == METADATA_STRINGS:
            ids += ["s" + s.hex() for s in metadata_strings(item[1], item[2], record_bytes(item[3:]))]
        elif code in MD_DEBUG:
            ids.append("debug")
        elif code == METADATA_VALUE:
            if len(item) != 3:
                raise _Unknown("metadata value")
            nodes[len(ids)] = (f"value {item[1]} {item[2]}", [])  # resolved below, if reached
            ids.append(f"#{len(ids)}")
        elif code in (METADATA_NODE, METADATA_DISTINCT_NODE):
            nodes[len(ids)] = (f"node{code}", [v - 1 for v in item[1:]])  # 0: null
            ids.append(f"#{len(ids)}")
        elif code == METADATA_NAME:
            name = record_bytes(item[1:]).hex()
        elif code == METADATA_NAMED_NODE:
            if name is None:
                raise _Unknown("named node without a name")
            roots.append((f"named {name}", list(item[1:])))
            name = None
        elif code == METADATA_KIND:
            roots.append(("kind " + ints_text(item[1:]), []))
        # GLOBAL_DECL_ATTACHMENT: not linked (above). INDEX_OFFSET and INDEX: where the
        # records are, not what they say.

    def named(targets: list[int]) -> str:
        if any(t >= len(ids) for t in targets):
            raise _Unknown("metadata reference past the end")
        return " ".join("null" if t < 0 else ids[t] for t in targets)

    lines = [f"{text} {named(targets)}" for text, targets in roots]
    seen: set[int] = set()
    todo = [t for _, targets in roots for t in targets]
    while todo:
        t = todo.pop()
        if t in seen or t not in nodes:
            continue
        seen.add(t)
        todo += nodes[t][1]
    for t in sorted(seen):
        text, targets = nodes[t]
        if text.startswith("value "):
            _, ty, vid = text.split()
            text = f"value {values.types.text(int(ty))} {values.text(int(vid))}"
        lines.append(f"#{t} {text} {named(targets)}")
    return lines


def _interface(tree: Node) -> list[str]:
    modules = tree.blocks(MODULE_BLOCK_ID)
    # A backend imports from a file's first module with a ThinLTO summary (lto::findThinLTOModule):
    # of a split LTO unit, the ThinLTO module; its regular-LTO module is the thin-link's alone.
    imported = next((m for m in modules if m.blocks(GLOBALVAL_SUMMARY_BLOCK_ID)), None) if len(modules) > 1 else None
    if len(modules) > 1 and imported is None:
        raise _Unknown(f"{len(modules)} modules, none with a ThinLTO summary")
    strtabs = [top for top in tree.items if isinstance(top, Node) and top.bid == STRTAB_BLOCK_ID]
    if len(strtabs) > 1:
        raise _Unknown("two string tables")
    strtab = None
    if strtabs:
        blobs = [r for r in strtabs[0].items if not isinstance(r, Node) and r[0] == STRTAB_BLOB]
        if len(blobs) != 1:
            raise _Unknown("string table layout")
        strtab = record_bytes(blobs[0][1:])
    out: list[str] = [f"interface {FORMAT}"]
    count = 0
    for top in tree.items:
        if not isinstance(top, Node):
            out.append("rec " + ints_text(top))
        elif top.bid == MODULE_BLOCK_ID:
            if imported is None or top is imported:
                count += 1
                out += _module_interface(top, strtab)
        elif top.bid not in (BLOCKINFO_BLOCK_ID, STRTAB_BLOCK_ID, SYMTAB_BLOCK_ID):
            out += top.lines()  # IDENTIFICATION: the producer
        # SYMTAB: the linker's symbol table, made from the module's global values.
    if count != 1:
        raise _Unknown(f"{count} modules")
    return out


def _module_interface(node: Node, strtab: bytes | None) -> list[str]:
    """The module's part of module_interface (see there)."""
    kept: list[str] = []
    global_records: list[list[int]] = []
    type_nodes = [i for i in node.items if isinstance(i, Node) and i.bid == TYPE_BLOCK_ID_NEW]
    constants = [i for i in node.items if isinstance(i, Node) and i.bid == CONSTANTS_BLOCK_ID]
    metadata = [i for i in node.items if isinstance(i, Node) and i.bid == METADATA_BLOCK_ID]
    if len(type_nodes) > 1 or len(metadata) > 1:
        raise _Unknown("two type tables or metadata blocks")
    for item in node.items:
        if isinstance(item, Node):
            if item.bid in RAW_BLOCKS:
                kept += item.lines(1)
            elif item.bid not in READ_BLOCKS | DROPPED_BLOCKS | SKIPPED_BLOCKS:
                raise _Unknown(f"block {item.bid} in MODULE_BLOCK")
        elif item[0] == MODULE_CODE_VERSION and item[1:] != [2]:
            raise _Unknown(f"module version {ints_text(item[1:])}")  # 2: names in the string table
        elif item[0] in KEPT_MODULE_CODES:
            kept.append(f"  rec {ints_text(item)}")
        elif item[0] in GLOBALS_READ:
            global_records.append(item)
        elif item[0] not in DROPPED_MODULE_CODES:
            raise _Unknown(f"module record {item[0]}")
    types = _Types(type_nodes[0] if type_nodes else None)
    globals_ = _globals(global_records, strtab)
    values = _Values(globals_, constants, types)
    out = [f"block {MODULE_BLOCK_ID}", *kept]
    # IRMover's last step moves the importer's global variable of each name the module's
    # variables have (not appending, not local: a local keeps no name it could match, and
    # a promoted one has the module's hash in it) to the end of its list, in this order.
    out += ["  variables", *(f"    {_name(g.name)}" for g in globals_ if g.code == MODULE_CODE_GLOBALVAR
                             and g.name and not g.local and g.linkage != APPENDING_LINKAGE)]
    # Appending variables of the same name unify their element types (computeTypeMapping).
    for g in globals_:
        if g.code == MODULE_CODE_GLOBALVAR and g.linkage == APPENDING_LINKAGE:
            value_type = types.records[g.record[3]] if g.record[3] < len(types.records) else None
            if value_type is None or value_type[0] != TYPE_CODE_ARRAY or len(value_type) != 3:
                raise _Unknown("an appending variable that is not an array")
            out.append(f"  appending {_name(g.name)} of {types.text(value_type[2])}")
    # An intrinsic of the importer with the name of one of the module's functions: its type
    # is mapped (getLinkedToGlobal), which can take a named struct out of the by-name pass.
    for g in globals_:
        if g.code == MODULE_CODE_FUNCTION and g.name.startswith(INTRINSIC_PREFIX) and types.reaches_named(g.record[3]):
            out.append(f"  intrinsic {_name(g.name)} {types.text(g.record[3])}")
    # computeTypeMapping maps, by name, every identified struct the reader created (the
    # materializer's list, function bodies' types included, not only what a TypeFinder
    # reaches), in that order; an opaque struct of the importer's takes the body of the first.
    out += ["  structs", *(f"    %{_name(types.names[t])} {types.body(t)}" for t in types.created
                           if t in types.names)]
    for m in metadata:
        out += ["  metadata", *("    " + line for line in _metadata(m, values))]
    out.append(f"end {MODULE_BLOCK_ID}")
    return out


def module_interface(module: bytes) -> str:
    """What a backend that imports only declarations from this module can take of it.

    FunctionImporter loads the module, links its metadata and calls IRMover with no global
    value to move (FunctionImport.cpp, IRMover.cpp). What that can change in the importer:
    the target triple (merged), the data layout, the inline asm's .symver lines for the
    importer's names, the named metadata and module flags, the place of the importer's
    global variables of the names the module's variables have, and the body of an opaque
    struct of the importer's taken from the module's struct of that name. So the interface
    keeps: the IDENTIFICATION block; the module records VERSION, TRIPLE, DATALAYOUT, ASM,
    DEPLIB and SOURCE_FILENAME; the metadata kinds, operand bundle tags and sync scope
    names; the names of the global variables, in order; the element types of appending
    variables; intrinsics whose types hold a named struct; every named struct with its
    body (types as texts, never by id); the named metadata and what it reaches (_metadata).
    It leaves out the functions, aliases and ifuncs, the attributes, comdats, sections,
    every other type, every other constant, the function bodies, the value symbol table,
    the linker's symbol table, the module's summary and hash: a new function nobody calls
    changes none of it. What this reader does not know puts the whole module (bodies
    aside) in. BadBitcode if unreadable."""
    stream = bitstream(module)
    return interface_of(stream, read(stream, _WANT))


def interface_of(stream: bytes, tree: Node) -> str:
    """module_interface() of the stream, from a tree of it read with (at least) what _WANT
    asks; the stream is read again, whole, only for a module this reader does not know."""
    try:
        lines = _interface(tree)
    except _Unknown as e:
        lines = [f"interface {FORMAT} whole ({e})", *_whole(read(stream, _WHOLE))]
    return "\n".join(lines) + "\n"


def _tables() -> tuple:
    """What the compiled facts (ltowrap._bitcode.module_facts, behind modulefacts.read) take of this
    module's tables, so that they are defined here alone; read at each call, as interface_of reads
    them."""
    return (FORMAT, tuple(RAW_BLOCKS), tuple(READ_BLOCKS | DROPPED_BLOCKS | SKIPPED_BLOCKS), tuple(KEPT_MODULE_CODES),
            tuple(DROPPED_MODULE_CODES), tuple(GLOBALS_READ), tuple(LOCAL_LINKAGES), APPENDING_LINKAGE,
            tuple(KNOWN_LINKAGES), tuple(PRIMITIVE_TYPES.items()), tuple(SIMPLE_CONSTANTS), tuple(MD_DEBUG),
            tuple(MD_KNOWN), MAX_TYPE_DEPTH, INTRINSIC_PREFIX)


def _whole(node: Node) -> list[str]:
    """Every record but the module hash and the function-body offsets."""
    out = []
    for item in node.items:
        if isinstance(item, Node):
            out += [f"block {item.bid}", *_whole(item), f"end {item.bid}"]
        elif node.bid != MODULE_BLOCK_ID or item[0] not in (MODULE_CODE_VSTOFFSET, MODULE_CODE_HASH):
            out.append(ints_text(item))
    return out
