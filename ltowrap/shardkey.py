"""The canonical fingerprint of an index shard: what it means, not how lld spelled it.

An index shard (`M.o.thinlto.bc`, written by `ld.lld --thinlto-index-only` or by lld's
DTLTO) holds a MODULE_STRTAB block (the path and hash of every module the backend reads)
and a GLOBALVAL_SUMMARY block (one record per summary, values named by small value ids
that VALUE_GUID records map to GUIDs). lld numbers the values and orders the records by
its hash tables of module paths, so two links that mean the same backend compile can
write different bytes: rename one input, use another cache directory, or let lld pick
other temporary names for archive members (DTLTO), and the numbering of shards that
never import that module changes too.

The fingerprint is a text that keeps every field and drops only the spelling:
- each value id becomes its GUID (`@<guid>`), each module id the module's rank (`^<rank>`);
- modules are listed in the order of their paths' bytes: the backend imports modules in
  the sorted order of their paths (FunctionImporter), so that order is part of the
  meaning, and the paths themselves are not (the same shard content under other paths
  gives byte-identical objects);
- a module the backend takes function or variable bodies from (the compile's own, and
  every module some summary of which is imported as a definition) goes in by the digest
  of its bytes and its recorded hash (the hash names the module's promoted locals,
  `f.llvm.<hash>`);
- a module it imports only declarations from (ltowrap's thin-link passes
  -import-declaration, so that a backend knows what a callee's summary says: v12 flags
  bit 10 on every summary of that module) goes in by its interface (module_interface),
  not by its bytes. The backend still opens such a module (FunctionImporter loads every
  module of its import list and IRMover links it with no global value), and what that
  can change in the object is the module-level part: triple, data layout, symver
  directives of its inline asm, module flags and named metadata, and the order of its
  global variables (IRMover moves the destination's globals of the same names into it).
  The interface keeps all module-level records, types, attributes, names and the
  metadata reachable from named metadata and global attachments; it leaves out the
  function bodies, the module's own summary and hash, and debug-info nodes, which reach
  an object only from a function or global that is linked (an imported compile unit
  loses its lists, IRLinker::prepareCompileUnitsForImport, and DwarfDebug emits no unit
  without them). So a one-file edit no longer misses for modules that only call into
  the edited one (redis networking.c: 10 of 50 backends; lld's in-process cache, which
  has no declaration imports, never had them in its key). Where the interface reader
  meets a record it does not know, the whole module but its bodies goes in;
- summaries are listed in (GUID, module rank) order, each with the type-test records that
  precede it; the reader keeps a GUID's summaries in file order, which is by module, so
  the rank puts them back in that order;
- every other record is kept as it is, in its order.

Conservative by construction: the summary block is made canonical only for the summary
versions whose record layouts are known here, 9 (LLVM 14) and 12 (LLVM 22), and only if
every record in it is of a known kind whose value ids all resolve. Otherwise the block
goes in raw (value ids, record order and the module id -> rank table included), and every
module by its bytes: an unknown format costs cache hits, never a wrong object. Interfaces
are used for v12 only (v9 has no declaration imports), and only when the caller gives
interface_of (cachekey.ModuleDigests does). Summaries, including those of declarations,
keep every field (instruction counts and all): lld keeps less (linkage, visibility,
dso_local, liveness, read/write-only of what is imported or referenced), but no
measured edit missed on them, so they stay whole until one does. Abbreviation definitions and
BLOCKINFO only say how records are encoded; the records are taken as decoded.

Between the two versions: LLVM 14 (v9) writes VALUE_GUID as [valueid, guid] (a vbr64) and
writes FS_COMBINED (calls as value ids) unless some call edge has a hotness; LLVM 22 (v12)
writes VALUE_GUID as [valueid, guid high 32, guid low 32] and always FS_COMBINED_PROFILE
(calls as (value id, hotness | tail call << 3)). Function, variable and alias records
otherwise have the same fields: [valueid, modid, flags, instcount, fflags, entrycount,
numrefs, rorefcnt, worefcnt, refs..., calls...], [valueid, modid, flags, varflags,
refs...], [valueid, modid, flags, aliasee valueid or 0].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import bitcode
from .bitcode import BLOCKINFO, MODULE_BLOCK, MODULE_STRTAB, BadBitcode

SUMMARY = 20  # GLOBALVAL_SUMMARY_BLOCK
MST_HASH = 2
KNOWN_VERSIONS = (9, 12)
FORMAT = "shardkey 2"

# GLOBALVAL_SUMMARY record codes (llvm/Bitcode/LLVMBitCodes.h).
FS_COMBINED, FS_COMBINED_PROFILE, FS_COMBINED_GLOBALVAR_INIT_REFS = 4, 5, 6
FS_COMBINED_ALIAS = 8
SUMMARY_CODES = frozenset({FS_COMBINED, FS_COMBINED_PROFILE, FS_COMBINED_GLOBALVAR_INIT_REFS, FS_COMBINED_ALIAS})
# v12 summary flags: bit 10 is the import type, set when the backend gets the value's summary
# only (a declaration: -import-declaration) and no body (BitcodeWriter getEncodedGVSummaryFlags).
IMPORT_AS_DECLARATION = 1 << 10
FS_VERSION, FS_VALUE_GUID, FS_FLAGS, FS_BLOCK_COUNT = 10, 16, 20, 24
# Type tests and virtual calls of the function whose record follows: GUIDs of type ids
# and offsets, no value ids.
PREFIX_CODES = frozenset({11, 12, 13, 14, 15})
# Kept as they are, in their order: no value ids (type ids and CFI names point into the
# STRTAB block, which goes in whole).
PLAIN_CODES = frozenset({FS_VERSION, FS_FLAGS, FS_BLOCK_COUNT, 17, 18, 21})


@dataclass
class _Node:
    bid: int
    items: list[list[int] | _Node] = field(default_factory=list)


@dataclass
class _Tree(bitcode._Visitor):
    """The whole stream as nested blocks of decoded records."""

    root: _Node = field(default_factory=lambda: _Node(-1))
    open: list[_Node] = field(default_factory=list)

    def enter(self, block: bitcode._Block) -> bool:
        node = _Node(block.bid)
        (self.open[-1] if self.open else self.root).items.append(node)
        self.open.append(node)
        return True

    def leave(self, block: bitcode._Block) -> None:
        self.open.pop()

    def record(self, block: bitcode._Block | None, values: list[int]) -> None:
        (self.open[-1] if self.open else self.root).items.append(values)


class _Unknown(Exception):
    """The summary block holds something this reader does not understand: it goes in raw."""


def _ints(values: list[int] | tuple[int, ...]) -> str:
    return " ".join(map(str, values))


@dataclass
class _Modules:
    """MODULE_STRTAB: module id -> rank, each module's path and recorded hash in rank order."""

    rank: dict[int, int]
    entries: list[tuple[bytes, list[int]]]  # path, recorded hash
    self_rank: int | None
    self_line: list[str]  # "self ^<rank>" (or "self ?") when the compile's own module was named
    raw: list[str]

    def lines(self, digest_of: Callable[[str], str], interface_of: Callable[[str], str] | None,
              full: set[int] | None) -> list[str]:
        """A module the backend imports definitions from (or every module, when `full` is None
        or there is no interface_of) by its bytes and recorded hash; any other by its interface
        (module_interface)."""
        lines = []
        for r, (path, h) in enumerate(self.entries):
            name = path.decode("utf-8", "surrogateescape")
            if full is None or interface_of is None or r in full or r == self.self_rank:
                lines.append(f"module ^{r} {digest_of(name)} hash {_ints(h)}")
            else:
                lines.append(f"module ^{r} declarations {interface_of(name)}")
        return lines + self.self_line + self.raw


def _modules(node: _Node, self_path: str | None) -> _Modules:
    entries: list[tuple[bytes, int, list[int]]] = []  # path, module id, its hash
    raw: list[str] = []
    for item in node.items:
        if isinstance(item, _Node):
            raw.append(f"block {item.bid} inside MODULE_STRTAB")
        elif item[0] == bitcode.MST_ENTRY and len(item) >= 2:
            entries.append((bytes(item[2:]), item[1], []))
        elif item[0] == MST_HASH and entries:
            entries[-1][2].extend(item[1:])
        else:
            raw.append("raw " + _ints(item))
    entries.sort(key=lambda e: e[0])
    rank = {modid: r for r, (_, modid, _) in enumerate(entries)}
    if len(rank) != len(entries):
        raise BadBitcode("two modules with one id")
    own = None if self_path is None else self_path.encode("utf-8", "surrogateescape")
    self_rank = next((r for r, (p, _, _) in enumerate(entries) if p == own), None)
    self_line = [] if own is None else ["self " + ("?" if self_rank is None else f"^{self_rank}")]
    return _Modules(rank, [(p, h) for p, _, h in entries], self_rank, self_line, raw)


class _Summaries:
    """GLOBALVAL_SUMMARY in canonical form (raises _Unknown for what it cannot canonicalise)."""

    def __init__(self, node: _Node, modules: _Modules) -> None:
        self.modules = modules
        records = []
        for item in node.items:
            if isinstance(item, _Node):
                raise _Unknown(f"block {item.bid}")
            records.append(item)
        versions = [r[1] for r in records if r[0] == FS_VERSION and len(r) == 2]
        if len(versions) != 1 or versions[0] not in KNOWN_VERSIONS:
            raise _Unknown(f"summary version {versions}")
        self.version = versions[0]
        self.guid = self._guids(records)
        self.records = records

    def _guids(self, records: list[list[int]]) -> dict[int, int]:
        guid: dict[int, int] = {}
        for r in records:
            if r[0] != FS_VALUE_GUID:
                continue
            if self.version == 9 and len(r) == 3:
                g = r[2]
            elif self.version == 12 and len(r) == 4:
                g = (r[2] << 32) | r[3]
            else:
                raise _Unknown("VALUE_GUID layout")
            if r[1] in guid or r[1] == 0:
                raise _Unknown("value id given twice")
            guid[r[1]] = g
        if len(set(guid.values())) != len(guid):
            raise _Unknown("a GUID under two value ids")
        return guid

    def _v(self, vid: int) -> str:
        if vid not in self.guid:
            raise _Unknown(f"value id {vid} without a GUID")
        return f"@{self.guid[vid]}"

    def _m(self, modid: int) -> str:
        if modid not in self.modules.rank:
            raise _Unknown(f"module id {modid} not in MODULE_STRTAB")
        return f"^{self.modules.rank[modid]}"

    def _summary(self, r: list[int]) -> tuple[int, int, str]:
        """(GUID, module rank, canonical text) of a function, variable or alias record."""
        code = r[0]
        if code in (FS_COMBINED, FS_COMBINED_PROFILE):
            if len(r) < 10 or len(r) < 10 + r[7]:
                raise _Unknown("short function record")
            refs, calls = r[10 : 10 + r[7]], r[10 + r[7] :]
            if code == FS_COMBINED_PROFILE:
                if len(calls) % 2:
                    raise _Unknown("odd call list")
                edges = [f"{self._v(calls[i])}:{calls[i + 1]}" for i in range(0, len(calls), 2)]
            else:
                edges = [self._v(c) for c in calls]
            text = (f"fn{code} {self._v(r[1])} {self._m(r[2])} {_ints(r[3:10])} refs {' '.join(map(self._v, refs))}"
                    f" calls {' '.join(edges)}")
        elif code == FS_COMBINED_GLOBALVAR_INIT_REFS:
            if len(r) < 5:
                raise _Unknown("short variable record")
            text = f"var {self._v(r[1])} {self._m(r[2])} {_ints(r[3:5])} refs {' '.join(map(self._v, r[5:]))}"
        elif code == FS_COMBINED_ALIAS:
            if len(r) != 5:
                raise _Unknown("alias record layout")
            text = f"alias {self._v(r[1])} {self._m(r[2])} {r[3]} {self._v(r[4]) if r[4] else 'none'}"
        else:
            raise _Unknown(f"record {code}")
        return self.guid[r[1]], self.modules.rank[r[2]], text

    def definition_ranks(self) -> set[int] | None:
        """Ranks of the modules the backend imports definitions from (a summary without the
        declaration bit); None where the version does not say (v9 has no such bit)."""
        if self.version != 12:
            return None
        return {self.modules.rank[r[2]] for r in self.records
                if r[0] in SUMMARY_CODES and len(r) > 3 and not r[3] & IMPORT_AS_DECLARATION}

    def lines(self) -> list[str]:
        plain: list[str] = []
        groups: list[tuple[int, int, str]] = []
        prefix: list[str] = []
        for r in self.records:
            code = r[0]
            if code == FS_VALUE_GUID:
                continue
            if code in PREFIX_CODES:
                prefix.append(f"  pre {_ints(r)}")
            elif code in PLAIN_CODES:
                plain.append(f"rec {_ints(r)}")
            else:
                if prefix and code not in (FS_COMBINED, FS_COMBINED_PROFILE):
                    raise _Unknown("type tests before a record that is not a function's")
                g, rank, text = self._summary(r)
                groups.append((g, rank, "\n".join([text, *prefix])))
                prefix = []
        if prefix:
            raise _Unknown("type tests at the end of the block")
        groups.sort()
        # Every GUID the shard names, with or without a summary: the backend's index has them all.
        return [f"summaries v{self.version}", *plain, "guids " + _ints(sorted(self.guid.values())),
                *(text for _, _, text in groups)]


def _raw(node: _Node, depth: int = 0) -> list[str]:
    pad = "  " * depth
    out = [f"{pad}block {node.bid}"]
    for item in node.items:
        if isinstance(item, _Node):
            if item.bid != BLOCKINFO:
                out += _raw(item, depth + 1)
        else:
            out.append(f"{pad}  rec {_ints(item)}")
    out.append(f"{pad}end {node.bid}")
    return out


def canonical(shard: bytes, digest_of: Callable[[str], str], self_path: str | None = None,
              interface_of: Callable[[str], str] | None = None) -> str:
    """The shard's canonical text (see the module docstring); BadBitcode if unreadable.

    digest_of(path) names a module by its bytes, interface_of(path) by what a backend that
    imports only declarations from it can take (module_interface; OSError if it cannot be
    read, BadBitcode if it cannot be parsed); without interface_of every module goes in by
    its bytes. self_path, the backend's own module, is marked by its rank.
    """
    tree = _Tree()
    bitcode._read_stream(bitcode._stream(shard), tree)
    lines, found = _top_level(tree.root, lambda m: _module_block(m, digest_of, self_path, interface_of))
    if found != 1:
        raise BadBitcode(f"{found} MODULE_BLOCKs in an index shard")
    return "\n".join([FORMAT, *lines]) + "\n"


def _top_level(root: _Node, module: Callable[[_Node], list[str]]) -> tuple[list[str], int]:
    """The stream's top level as lines, each MODULE_BLOCK as `module` gives it; and how many there were."""
    out: list[str] = []
    found = 0
    for top in root.items:
        if not isinstance(top, _Node):
            out.append("rec " + _ints(top))
        elif top.bid == BLOCKINFO:
            continue
        elif top.bid != MODULE_BLOCK:
            out += _raw(top)
        else:
            found += 1
            out += module(top)
    return out, found


def _module_block(node: _Node, digest_of: Callable[[str], str], self_path: str | None,
                  interface_of: Callable[[str], str] | None) -> list[str]:
    strtabs = [i for i in node.items if isinstance(i, _Node) and i.bid == MODULE_STRTAB]
    if len(strtabs) != 1:
        raise BadBitcode(f"{len(strtabs)} MODULE_STRTAB blocks")
    modules = _modules(strtabs[0], self_path)
    summaries: list[str] | None = None
    full: set[int] | None = None  # None: every module by its bytes
    body: list[str | _Node] = []  # the block's lines, MODULE_STRTAB's place marked by its node
    for item in node.items:
        if not isinstance(item, _Node):
            body.append(f"rec {_ints(item)}")
        elif item.bid == MODULE_STRTAB:
            body.append(item)
        elif item.bid == SUMMARY:
            if summaries is not None:
                raise BadBitcode("two summary blocks")
            try:
                parsed = _Summaries(item, modules)
                summaries = parsed.lines()
                full = parsed.definition_ranks()
            except _Unknown as e:
                # Raw, numbering and all; the module ids are given their ranks so that the
                # records still say which module they mean.
                summaries = [f"summaries raw ({e})",
                             "modids " + " ".join(f"{m}=^{r}" for m, r in sorted(modules.rank.items())),
                             *_raw(item, 1)]
            body += summaries
        elif item.bid != BLOCKINFO:
            body += _raw(item, 1)
    out = [f"block {MODULE_BLOCK}"]
    for line in body:
        out += modules.lines(digest_of, interface_of, full) if isinstance(line, _Node) else [line]
    out.append(f"end {MODULE_BLOCK}")
    return out


# What a backend reads of a module it imports only declarations from (module_interface).
CONSTANTS_BLOCK, FUNCTION_BLOCK, VALUE_SYMTAB, METADATA_BLOCK = 11, 12, 14, 15
SKIPPED_BLOCKS = frozenset({FUNCTION_BLOCK, VALUE_SYMTAB, SUMMARY})
# In MODULE_BLOCK: where the function-body offsets are, and the hash of the whole module.
MODULE_CODE_VSTOFFSET, MODULE_CODE_HASH = 13, 17
# Module records that define a global value (value ids count them, in order): GLOBALVAR,
# FUNCTION, ALIAS_OLD, ALIAS, IFUNC.
GLOBAL_VALUE_CODES = frozenset({7, 8, 9, 14, 18})
CST_SETTYPE = 1
# Constants that name no other value: NULL, UNDEF, INTEGER, WIDE_INTEGER, FLOAT, POISON.
SIMPLE_CONSTANTS = frozenset({2, 3, 4, 5, 6, 26})
# METADATA_BLOCK records (LLVMBitCodes.h). Each record defines one metadata id except these:
MD_STRINGS, MD_NAME, MD_KIND, MD_NAMED_NODE = 35, 4, 6, 10
MD_GLOBAL_DECL_ATTACHMENT, MD_INDEX_OFFSET, MD_INDEX = 36, 38, 39
MD_VALUE, MD_NODE, MD_DISTINCT_NODE = 2, 3, 5
# Debug-info nodes (LOCATION, GENERIC_DEBUG .. MACRO_FILE, GLOBAL_VAR_EXPR, LABEL .. 49).
MD_DEBUG = frozenset({7, *range(12, 35), 37, *range(40, 50)})
MD_KNOWN = MD_DEBUG | {MD_STRINGS, MD_NAME, MD_KIND, MD_NAMED_NODE, MD_GLOBAL_DECL_ATTACHMENT, MD_INDEX_OFFSET,
                       MD_INDEX, MD_VALUE, MD_NODE, MD_DISTINCT_NODE}


@dataclass
class _ModuleTree(_Tree):
    """The module as a tree, less the blocks a declarations-only import never reads."""

    def enter(self, block: bitcode._Block) -> bool:
        if block.bid in SKIPPED_BLOCKS:
            (self.open[-1] if self.open else self.root).items.append([-1, block.bid])  # "a skipped block"
            return False
        return super().enter(block)


def _strings(r: list[int]) -> list[bytes]:
    """METADATA_STRINGS [count, offset, blob]: the lengths (vbr6) then the characters."""
    count, offset, blob = r[1], r[2], bytes(r[3:])
    reader = bitcode._Reader(blob, 0, offset * 8)
    lengths = [reader.vbr(6) for _ in range(count)]
    out, at = [], offset
    for n in lengths:
        out.append(blob[at : at + n])
        at += n
    if at > len(blob):
        raise _Unknown("metadata strings past their blob")
    return out


def _metadata(node: _Node, values: list[tuple[str, list[int] | None]]) -> tuple[list[str], bool]:
    """The module-level metadata a declarations-only import can link, and whether it names a
    constant that is not simple (then every module constant goes in).

    IRMover links a source module's named metadata and module flags even when it moves no
    global value (FunctionImporter calls it for every module in the import list): the named
    nodes and global attachments go in, with every node they reach, operands resolved
    (strings by their bytes, values by their constants, nodes by id). Debug-info nodes stop
    the walk: the imported compile unit loses its enums, retained types, globals, imported
    entities and macros (IRLinker::prepareCompileUnitsForImport), DwarfDebug emits no unit
    that has none of them and no function, and other debug nodes reach an object only from
    a function or global that is linked, and none is.
    """
    ids: list[str] = []  # metadata id -> "s<hex>" (a string), "#<id>" (a node) or "debug"
    nodes: dict[int, tuple[str, list[int], list[int] | None]] = {}  # id -> (text, ids it names, its constant)
    roots: list[tuple[str, list[int]]] = []
    name: str | None = None
    for item in node.items:
        if isinstance(item, _Node):
            raise _Unknown(f"block {item.bid} in METADATA")
        code = item[0]
        if code not in MD_KNOWN:
            raise _Unknown(f"metadata record {code}")
        if code == MD_STRINGS:
            ids += ["s" + s.hex() for s in _strings(item)]
        elif code in MD_DEBUG:
            ids.append("debug")
        elif code == MD_VALUE:
            if len(item) != 3 or item[2] >= len(values):
                raise _Unknown("metadata value")
            nodes[len(ids)] = (f"value {item[1]} {values[item[2]][0]}", [], values[item[2]][1])
            ids.append(f"#{len(ids)}")
        elif code in (MD_NODE, MD_DISTINCT_NODE):
            nodes[len(ids)] = (f"node{code}", [v - 1 for v in item[1:]], None)  # 0: null
            ids.append(f"#{len(ids)}")
        elif code == MD_NAME:
            name = bytes(item[1:]).hex()
        elif code == MD_NAMED_NODE:
            if name is None:
                raise _Unknown("named node without a name")
            roots.append((f"named {name}", list(item[1:])))
            name = None
        elif code == MD_GLOBAL_DECL_ATTACHMENT:
            if len(item) < 2 or len(item) % 2 or item[1] >= len(values):
                raise _Unknown("global attachment layout")
            roots.append((f"attach {values[item[1]][0]} kinds {_ints(item[2::2])}", item[3::2]))
        elif code == MD_KIND:
            roots.append(("kind " + _ints(item[1:]), []))
        # INDEX_OFFSET and INDEX: where the records are, not what they say.

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
    all_constants = False
    for t in sorted(seen):
        text, targets, cst = nodes[t]
        lines.append(f"#{t} {text} {named(targets)}")
        all_constants |= cst is not None and cst[0] not in SIMPLE_CONSTANTS
    return lines, all_constants


def _interface(tree: _Node) -> list[str]:
    lines, modules = _top_level(tree, _module_interface)
    if modules != 1:
        raise _Unknown(f"{modules} modules")
    return [f"interface {FORMAT}", *lines]


def _module_interface(node: _Node) -> list[str]:
    values: list[tuple[str, list[int] | None]] = []  # value id -> (text, its constant record)
    out = [f"block {MODULE_BLOCK}"]
    constants: list[_Node] = []
    metadata: list[_Node] = []
    for item in node.items:
        if isinstance(item, _Node):
            if item.bid == CONSTANTS_BLOCK:
                constants.append(item)
                ty = None
                for r in item.items:
                    if isinstance(r, _Node):
                        raise _Unknown("block in CONSTANTS")
                    if r[0] == CST_SETTYPE:
                        ty = r[1] if len(r) > 1 else None
                    else:
                        values.append((f"type {ty} const {_ints(r)}", r))
            elif item.bid == METADATA_BLOCK:
                metadata.append(item)
            elif item.bid != BLOCKINFO:
                out += _raw(item, 1)
        elif item[0] == -1:
            out.append(f"  skipped {item[1]}")
        elif item[0] in (MODULE_CODE_VSTOFFSET, MODULE_CODE_HASH):
            continue
        else:
            if item[0] in GLOBAL_VALUE_CODES:
                values.append((f"global {len(values)}", None))
            out.append(f"  rec {_ints(item)}")
    all_constants = False
    for m in metadata:
        lines, more = _metadata(m, values)
        out += ["  metadata", *("    " + line for line in lines)]
        all_constants |= more
    if all_constants:
        for c in constants:
            out += _raw(c, 1)
    out.append(f"end {MODULE_BLOCK}")
    return out


def module_interface(module: bytes) -> str:
    """What a backend that imports only declarations from this module can take of it: the
    module-level records (triple, data layout, inline asm, the global values and their order,
    which the import's IRMover gives the destination's globals), types, attributes, names,
    and the metadata it links (_metadata); not the function bodies, their offsets, the
    module's own summary or hash. What this reader does not know puts the whole module
    (bodies aside) in. BadBitcode if unreadable."""
    tree = _ModuleTree()
    bitcode._read_stream(bitcode._stream(module), tree)
    try:
        lines = _interface(tree.root)
    except (_Unknown, IndexError) as e:
        lines = [f"interface {FORMAT} whole ({e})", *_whole(tree.root)]
    return "\n".join(lines) + "\n"


def _whole(node: _Node) -> list[str]:
    """Every record but the module hash and the function-body offsets."""
    out = []
    for item in node.items:
        if isinstance(item, _Node):
            out += [f"block {item.bid}", *_whole(item), f"end {item.bid}"]
        elif node.bid != MODULE_BLOCK or item[0] not in (MODULE_CODE_VSTOFFSET, MODULE_CODE_HASH):
            out.append(_ints(item))
    return out
