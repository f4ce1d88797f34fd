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
  not by its bytes. What the backend takes of the declarations is their summaries, which
  are in the shard and keyed below. It still opens the module: FunctionImporter loads
  every module of its import list, links its metadata and calls IRMover with no global
  value to move (FunctionImport.cpp, importFunctions). IRLinker::run then changes the
  importer only through the module-level part: the target triple (merged) and data
  layout; the .symver lines of its inline asm for the importer's names; its named
  metadata and module flags (linked); the importer's global variables of the names the
  module's variables have (moved to the end of the list, in the module's order: a
  declaration `extern int v;` in the module reorders the importer's .data, measured in
  tests/test_shardkey.py); and, by name, the module's struct types (computeTypeMapping
  takes every identified struct the reader created, function bodies' included, and gives
  an opaque struct of the importer's the body of the first of that name; kept from the
  code, though no object built here changed through it: with clang 22 an opaque struct
  stayed opaque, even under llvm-link). The interface
  is that part, written without ids (types as texts, values by name): the
  IDENTIFICATION block, the VERSION, TRIPLE, DATALAYOUT, ASM, DEPLIB and SOURCE_FILENAME
  records, the metadata kinds, operand bundle tags and sync scope names, the names of
  the module's variables that are neither local nor appending, in order (a local's name
  matches nothing: it stays local or is promoted to `name.llvm.<the module's hash>`, see
  below), the element types of appending variables, intrinsics whose types hold a named
  struct (their mapping can take a struct out of the by-name pass), every named struct
  with its body in the reader's order, and the named metadata with what it reaches,
  except debug-info nodes, which reach an object only from a function or global that is
  linked (an imported compile unit loses its lists, IRLinker::prepareCompileUnitsForImport,
  and DwarfDebug emits no unit without them). It leaves out the functions, aliases and
  ifuncs, attributes, comdats, sections, other types and constants, the global values'
  metadata attachments (copied only with a global value that is linked), the function
  bodies, the symbol tables, the module's summary and hash: a new function nobody calls,
  or a new body of one, changes no key but its own module's (Debian lua's lvm.c with a
  function appended: 23 backends, as many as lld's cache adds; 26 with shardkey 2, which
  kept every module-level record). A module whose recorded hash another module of the
  shard shares goes in by its bytes: its promoted locals could then meet names of that
  module's. Where the interface reader meets something it does not know (a record, a
  block, a constant other than a number in the named metadata), the whole module but its
  bodies goes in. Of a split LTO unit (two modules in one file, -fwhole-program-vtables or
  -fsanitize=cfi), the backend opens the ThinLTO module only (lto::findThinLTOModule): its
  interface is that module's;
- summaries are listed in (GUID, module rank) order, each with the type-test records that
  precede it; the reader keeps a GUID's summaries in file order, which is by module, so
  the rank puts them back in that order;
- every other record is kept as it is, in its order.

Conservative by construction: the summary block is made canonical only for the summary
versions whose record layouts are known here (KNOWN_VERSIONS: 9, written by LLVM 13 to 16;
10, LLVM 19; 12, LLVM 22), and only if every record in it is of a known kind whose value
ids all resolve. Otherwise the block goes in raw (value ids, record order and the module
id -> rank table included), and every module by its bytes: an unknown format costs cache
hits, never a wrong object (`ltowrap explain` says which, summary_format). Interfaces are
used for the versions with the import type in their flags (10 and 12; v9 has no
declaration imports), and only when the caller gives interface_of (cachekey.ModuleDigests
does). Summaries, including those of declarations, keep every field (instruction counts
and all): lld keeps less (linkage, visibility, dso_local, liveness, read/write-only of what
is imported or referenced), but no measured edit missed on them, so they stay whole until
one does. Abbreviation definitions and BLOCKINFO only say how records are encoded; the
records are taken as decoded.

The formats, record by record (BitcodeReader parseEntireSummary, BitcodeWriter
writeCombinedGlobalValueSummary; the shards of each Debian release dumped with its own
llvm-bcanalyzer):
- VALUE_GUID: [valueid, guid] (a vbr64) up to v10; [valueid, guid high 32, guid low 32]
  from v11 (SPLIT_GUID_SINCE).
- Functions: FS_COMBINED (calls as value ids, LLVM 13 to 16 unless an edge has a hotness)
  or FS_COMBINED_PROFILE (calls as (value id, hotness | tail call << 3), always from 19):
  [valueid, modid, flags, instcount, fflags, entrycount, numrefs, rorefcnt, worefcnt,
  refs..., calls...] in every version here (the layout of v7 and later). Variables
  [valueid, modid, flags, varflags, refs...]; aliases [valueid, modid, flags, aliasee
  valueid or 0].
- Flags: bits 0-9 the same in all (linkage, not eligible to import, live, dso_local, can
  auto-hide, visibility); bit 10, the import type, from v10.
- FS_COMBINED_ORIGINAL_NAME [GUID of the original name] follows a local's summary in
  LLVM 13's shards (not later ones): it goes in with that summary.
- FS_BLOCK_COUNT [basic blocks of every module of the link] (LLVM 13 to 16, not 19 or 22):
  the only reader is Module::setPartialSampleProfileRatio of the backend's own module
  (LTOBackend thinBackend), which changes nothing unless that module has a partial
  sample profile's summary. So it goes in only for a module that may have one
  (has_sample_profile, asked through canonical's sample_profiled); otherwise a constant
  line stands for it. Kept, a new function anywhere in the link changed every key (lua's
  `lua` with a function appended to ltable.c: 33 keys of 33; left out, 25: ltable.o and
  the 24 modules that import a body from it). lld's own cache key never took it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import bitcode
from .bitcode import BLOCKINFO, MODULE_BLOCK, MODULE_STRTAB, BadBitcode

SUMMARY = 20  # GLOBALVAL_SUMMARY_BLOCK
MST_HASH = 2
FORMAT = "shardkey 4"

# The summary versions (FS_VERSION) whose combined-index layout this reader knows, and the
# Debian clang/lld releases measured writing each (LLVM 17, 18, 20 and 21 are not in
# Debian bookworm: what they write is not claimed; an unknown version goes in raw).
KNOWN_VERSIONS = {9: "LLVM 13, 14, 15, 16", 10: "LLVM 19", 12: "LLVM 22"}
# Versions whose VALUE_GUID record is [valueid, guid high 32, guid low 32] (BitcodeReader:
# Version >= 11); before: [valueid, guid].
SPLIT_GUID_SINCE = 11
# Versions with the import type in the summary flags (bit 10, IMPORT_AS_DECLARATION): the
# thin-link can import declarations (-import-declaration, lld 19 and later).
DECLARATION_VERSIONS = frozenset({10, 12})

# GLOBALVAL_SUMMARY record codes (llvm/Bitcode/LLVMBitCodes.h).
FS_COMBINED, FS_COMBINED_PROFILE, FS_COMBINED_GLOBALVAR_INIT_REFS = 4, 5, 6
FS_COMBINED_ALIAS, FS_COMBINED_ORIGINAL_NAME = 8, 9
SUMMARY_CODES = frozenset({FS_COMBINED, FS_COMBINED_PROFILE, FS_COMBINED_GLOBALVAR_INIT_REFS, FS_COMBINED_ALIAS})
# Summary flags (v10, v12): bit 10 is the import type, set when the backend gets the value's
# summary only (a declaration: -import-declaration) and no body (BitcodeWriter
# getEncodedGVSummaryFlags). v9 has no such bit (bits 0-9: linkage, not eligible to import,
# live, dso_local, can auto-hide, visibility).
IMPORT_AS_DECLARATION = 1 << 10
FS_VERSION, FS_VALUE_GUID, FS_FLAGS, FS_BLOCK_COUNT = 10, 16, 20, 24
# Type tests and virtual calls of the function whose record follows: GUIDs of type ids
# and offsets, no value ids.
PREFIX_CODES = frozenset({11, 12, 13, 14, 15})
# Kept as they are, in their order: no value ids (type ids and CFI names point into the
# STRTAB block, which goes in whole).
PLAIN_CODES = frozenset({FS_VERSION, FS_FLAGS, 17, 18, 21})
# What stands for FS_BLOCK_COUNT when the backend does not read it (see canonical).
BLOCK_COUNT_UNREAD = "block count: not read by this backend (its module has no sample profile)"
# A module whose bytes hold this string may carry a sample profile's ProfileSummary
# (`!{!"ProfileFormat", !"SampleProfile"}`): metadata strings are stored as plain bytes
# (METADATA_STRINGS, every LLVM since 4.0), so its absence rules the summary out.
SAMPLE_PROFILE_MARK = b"SampleProfile"


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
        hashes = [h for _, h in self.entries]
        for r, (path, h) in enumerate(self.entries):
            name = path.decode("utf-8", "surrogateescape")
            # A module's exported locals become `name.llvm.<its hash>` in the backend: with the
            # hash of another module of the shard they could meet that module's names, which the
            # interface (names of locals left out) does not cover.
            shared_hash = hashes.count(h) > 1
            if full is None or interface_of is None or r in full or r == self.self_rank or shared_hash:
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

    def __init__(self, node: _Node, modules: _Modules, block_count_read: Callable[[], bool] = lambda: True) -> None:
        self.modules = modules
        self.block_count_read = block_count_read
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
            if self.version < SPLIT_GUID_SINCE and len(r) == 3:
                g = r[2]
            elif self.version >= SPLIT_GUID_SINCE and len(r) == 4:
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
        if self.version not in DECLARATION_VERSIONS:
            return None
        return {self.modules.rank[r[2]] for r in self.records
                if r[0] in SUMMARY_CODES and len(r) > 3 and not r[3] & IMPORT_AS_DECLARATION}

    def lines(self) -> list[str]:
        plain: list[str] = []
        groups: list[tuple[int, int, str]] = []
        prefix: list[str] = []
        last: tuple[int, int, str] | None = None  # the summary the record before this one made
        for r in self.records:
            code = r[0]
            if code == FS_VALUE_GUID:
                continue
            if code in PREFIX_CODES:
                prefix.append(f"  pre {_ints(r)}")
            elif code in PLAIN_CODES:
                plain.append(f"rec {_ints(r)}")
            elif code == FS_BLOCK_COUNT:
                # The basic blocks of every module of the link (v9 writes it into every
                # shard): read only by Module::setPartialSampleProfileRatio of the backend's
                # own module, which changes nothing unless that module carries a partial
                # sample profile's summary (LTOBackend thinBackend).
                plain.append(f"rec {_ints(r)}" if self.block_count_read() else BLOCK_COUNT_UNREAD)
            elif code == FS_COMBINED_ORIGINAL_NAME:
                # [original name's GUID] of the summary just before it (LLVM 13; the reader
                # attaches it to the last summary, and refuses it after anything else).
                if not groups or last is not groups[-1] or len(r) != 2 or prefix:
                    raise _Unknown("an original name that does not follow a summary")
                g, rank, text = groups[-1]
                groups[-1] = last = (g, rank, f"{text}\n  origname {r[1]}")
            else:
                if prefix and code not in (FS_COMBINED, FS_COMBINED_PROFILE):
                    raise _Unknown("type tests before a record that is not a function's")
                g, rank, text = self._summary(r)
                groups.append((g, rank, "\n".join([text, *prefix])))
                last = groups[-1]
                prefix = []
                continue
            last = None
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
              interface_of: Callable[[str], str] | None = None,
              sample_profiled: Callable[[str], bool] | None = None) -> str:
    """The shard's canonical text (see the module docstring); BadBitcode if unreadable.

    digest_of(path) names a module by its bytes, interface_of(path) by what a backend that
    imports only declarations from it can take (module_interface; OSError if it cannot be
    read, BadBitcode if it cannot be parsed); without interface_of every module goes in by
    its bytes. self_path, the backend's own module, is marked by its rank.
    sample_profiled(self_path) says whether the own module may carry a sample profile's
    summary (has_sample_profile); without it (or self_path) the link's block count, which
    only such a module reads, stays in the text.
    """
    tree = _Tree()
    bitcode._read_stream(bitcode._stream(shard), tree)
    def block_count_read() -> bool:  # asked only of a shard that has the record (v9)
        return sample_profiled is None or self_path is None or sample_profiled(self_path)

    lines, found = _top_level(tree.root, lambda m: _module_block(m, digest_of, self_path, interface_of,
                                                                 block_count_read))
    if found != 1:
        raise BadBitcode(f"{found} MODULE_BLOCKs in an index shard")
    return "\n".join([FORMAT, *lines]) + "\n"


def has_sample_profile(module: bytes) -> bool:
    """May this module carry a sample profile's summary (the only thing that makes its
    backend read the link's block count, v9's FS_BLOCK_COUNT)? Conservative: True whenever
    the bytes hold the format's name anywhere."""
    return SAMPLE_PROFILE_MARK in module


def summary_format(text: str) -> str:
    """What a canonical text says of the shard's summary format, for `ltowrap explain`:
    canonical (the version and the releases that write it) or raw, and why."""
    for line in text.splitlines():
        if line.startswith("summaries v"):
            version = int(line.split()[1][1:])
            return f"summary v{version} ({KNOWN_VERSIONS.get(version, '?')}): canonical"
        if line.startswith("summaries raw"):
            reason = line[len("summaries raw"):].strip()
            return (f"summary format not canonicalised {reason}: the block went in raw, lld's numbering"
                    " and all, and every module by its bytes (costs hits, never a wrong object)")
    return "no summary block"


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
                  interface_of: Callable[[str], str] | None,
                  block_count_read: Callable[[], bool] = lambda: True) -> list[str]:
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
                parsed = _Summaries(item, modules, block_count_read)
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
IDENTIFICATION, CONSTANTS_BLOCK, FUNCTION_BLOCK, VALUE_SYMTAB, METADATA_BLOCK = 13, 11, 12, 14, 15
PARAMATTR_BLOCK, PARAMATTR_GROUP, TYPE_BLOCK, OPERAND_BUNDLE_TAGS, METADATA_KIND = 9, 10, 17, 21, 22
STRTAB_BLOCK, SYMTAB_BLOCK, SYNC_SCOPE_NAMES = 23, 25, 26
SKIPPED_BLOCKS = frozenset({FUNCTION_BLOCK, VALUE_SYMTAB, SUMMARY})  # not even read
# Blocks that go in as they are: names the context registers, whatever the module.
RAW_BLOCKS = frozenset({METADATA_KIND, OPERAND_BUNDLE_TAGS, SYNC_SCOPE_NAMES})
# Blocks left out: the attributes of functions, calls and variables (none of them is linked).
DROPPED_BLOCKS = frozenset({PARAMATTR_BLOCK, PARAMATTR_GROUP})
# MODULE_BLOCK records.
MODULE_CODE_VERSION, MODULE_CODE_TRIPLE, MODULE_CODE_DATALAYOUT, MODULE_CODE_ASM = 1, 2, 3, 4
MODULE_CODE_SECTIONNAME, MODULE_CODE_DEPLIB, MODULE_CODE_GLOBALVAR, MODULE_CODE_FUNCTION = 5, 6, 7, 8
MODULE_CODE_GCNAME, MODULE_CODE_COMDAT, MODULE_CODE_VSTOFFSET, MODULE_CODE_ALIAS = 11, 12, 13, 14
MODULE_CODE_SOURCE_FILENAME, MODULE_CODE_HASH, MODULE_CODE_IFUNC = 16, 17, 18
# Kept as they are: what IRMover reads of the module (triple, data layout, the inline asm's
# .symver lines), and the version, dependent libraries and source file name.
KEPT_MODULE_CODES = frozenset({MODULE_CODE_VERSION, MODULE_CODE_TRIPLE, MODULE_CODE_DATALAYOUT, MODULE_CODE_ASM,
                               MODULE_CODE_DEPLIB, MODULE_CODE_SOURCE_FILENAME})
# Dropped: tables that only the records of global values use (sections, GC names, comdats:
# a comdat reaches the importer only with a global value it links), where the value symbol
# table is, the module hash.
DROPPED_MODULE_CODES = frozenset({MODULE_CODE_SECTIONNAME, MODULE_CODE_GCNAME, MODULE_CODE_COMDAT,
                                  MODULE_CODE_VSTOFFSET, MODULE_CODE_HASH})
# Global values (each defines the next value id): variables, functions, aliases, ifuncs.
GLOBAL_VALUE_CODES = frozenset({MODULE_CODE_GLOBALVAR, MODULE_CODE_FUNCTION, MODULE_CODE_ALIAS, MODULE_CODE_IFUNC})
# Encoded linkages (BitcodeWriter getEncodedLinkage, and the older ones the reader still
# takes): local (internal, private, linker_private, linker_private_weak) and appending.
LOCAL_LINKAGES, APPENDING_LINKAGE, KNOWN_LINKAGES = frozenset({3, 9, 13, 14}), 2, range(20)
# TYPE_BLOCK_ID_NEW records.
TYPE_NUMENTRY, TYPE_OPAQUE, TYPE_INTEGER, TYPE_ARRAY, TYPE_VECTOR = 1, 6, 7, 11, 12
TYPE_STRUCT_ANON, TYPE_STRUCT_NAME, TYPE_STRUCT_NAMED, TYPE_FUNCTION, TYPE_OPAQUE_POINTER, TYPE_TARGET = (
    18, 19, 20, 21, 25, 26)
PRIMITIVE_TYPES = {2: "void", 3: "float", 4: "double", 5: "label", 10: "half", 13: "x86_fp80", 14: "fp128",
                   15: "ppc_fp128", 16: "metadata", 17: "x86_mmx", 22: "token", 23: "bfloat", 24: "x86_amx"}
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
    """The module as a tree, less the blocks a declarations-only import never reads; and
    which MODULE_BLOCKs have a ThinLTO summary (a split LTO unit has two modules, the
    ThinLTO one first, then the regular-LTO one)."""

    summarised: list[_Node] = field(default_factory=list)

    def enter(self, block: bitcode._Block) -> bool:
        if block.bid == SUMMARY and self.open and self.open[-1].bid == MODULE_BLOCK:
            self.summarised.append(self.open[-1])
        if block.bid in SKIPPED_BLOCKS:
            return False
        return super().enter(block)


def _name(name: bytes) -> str:
    """A symbol or type name on one line, one text per name."""
    return repr(name)[2:-1]


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


class _Types:
    """TYPE_BLOCK_ID_NEW: each type as a text that names no type id, and the module's
    identified struct types in the order the bitcode reader creates them."""

    def __init__(self, node: _Node | None) -> None:
        self.records: list[list[int]] = []  # per type id: [code, fields...]
        self.names: dict[int, bytes] = {}  # identified struct (or target type) id -> its name
        self.created: list[int] = []  # identified structs, in BitcodeReader::getIdentifiedStructTypes order
        self._text: dict[int, str] = {}
        if node is None:
            return
        pending: bytes | None = None
        for item in node.items:
            if isinstance(item, _Node):
                raise _Unknown(f"block {item.bid} in TYPE")
            code = item[0]
            if code == TYPE_NUMENTRY:
                continue
            if code == TYPE_STRUCT_NAME:
                pending = bytes(item[1:])
                continue
            if code != TYPE_STRUCT_ANON and code not in PRIMITIVE_TYPES and code not in (
                    TYPE_OPAQUE, TYPE_INTEGER, TYPE_ARRAY, TYPE_VECTOR, TYPE_STRUCT_NAMED, TYPE_FUNCTION,
                    TYPE_OPAQUE_POINTER, TYPE_TARGET):
                raise _Unknown(f"type record {code}")  # typed pointers (8, LLVM < 17) among them
            tid = len(self.records)
            self.records.append(item)
            if pending is not None:
                if code not in (TYPE_OPAQUE, TYPE_STRUCT_NAMED, TYPE_TARGET):
                    raise _Unknown("a type name before an unnamed type")
                self.names[tid] = pending
                pending = None
            # BitcodeReader creates an identified struct at its own record (before asking for
            # its elements), and a placeholder struct for a forward reference, in the order it
            # asks for the types a record names (a function's parameters before its return).
            if code in (TYPE_OPAQUE, TYPE_STRUCT_NAMED) and tid not in self.created:
                self.created.append(tid)
            for sub in self._reads(tid):
                if sub > tid and sub not in self.created:
                    self.created.append(sub)
        if pending is not None:
            raise _Unknown("a type name at the end of TYPE")
        for tid in self.created:
            if tid >= len(self.records) or self.records[tid][0] not in (TYPE_OPAQUE, TYPE_STRUCT_NAMED):
                raise _Unknown("a forward type reference to what is not a struct")

    def _reads(self, tid: int) -> list[int]:
        """The type ids a record names, in the order BitcodeReader asks for them."""
        r = self.records[tid]
        code = r[0]
        if code in (TYPE_ARRAY, TYPE_VECTOR):
            return [r[2]] if len(r) >= 3 else []
        if code in (TYPE_STRUCT_ANON, TYPE_STRUCT_NAMED):
            return r[2:]
        if code == TYPE_FUNCTION:
            return [*r[3:], *r[2:3]]  # parameters, then the return type
        if code == TYPE_TARGET:
            return r[2 : 2 + r[1]] if len(r) >= 2 else []
        return []

    def text(self, tid: int, depth: int = 0) -> str:
        """The type as a text: a named struct by its name, any other type by its structure."""
        if tid in self._text:
            return self._text[tid]
        if tid >= len(self.records) or depth > 100:
            raise _Unknown(f"type id {tid}")
        r = self.records[tid]
        code, f = r[0], r[1:]
        sub = lambda t: self.text(t, depth + 1)  # noqa: E731
        if code in PRIMITIVE_TYPES:
            out = PRIMITIVE_TYPES[code]
        elif code == TYPE_INTEGER and len(f) == 1:
            out = f"i{f[0]}"
        elif code == TYPE_OPAQUE_POINTER and len(f) == 1:
            out = f"ptr{f[0]}"
        elif code == TYPE_ARRAY and len(f) == 2:
            out = f"[{f[0]} x {sub(f[1])}]"
        elif code == TYPE_VECTOR and len(f) in (2, 3):
            out = f"<{'vscale ' if len(f) == 3 and f[2] else ''}{f[0]} x {sub(f[1])}>"
        elif code == TYPE_FUNCTION and len(f) >= 2:
            out = f"fn{'...' if f[0] else ''} {sub(f[1])} ({', '.join(map(sub, f[2:]))})"
        elif code == TYPE_STRUCT_ANON and f:
            out = "{" + ("packed " if f[0] else "") + ", ".join(map(sub, f[1:])) + "}"
        elif code in (TYPE_STRUCT_NAMED, TYPE_OPAQUE) and tid in self.names:
            out = "%" + _name(self.names[tid])
        elif code in (TYPE_STRUCT_NAMED, TYPE_OPAQUE):
            out = "%anonymous " + self.body(tid, depth + 1)  # an unnamed identified struct
        elif code == TYPE_TARGET and f and tid in self.names:
            out = f"target {_name(self.names[tid])} ({', '.join(map(sub, f[1 : 1 + f[0]]))}) {_ints(f[1 + f[0]:])}"
        else:
            raise _Unknown(f"type record {_ints(r)}")
        self._text[tid] = out
        return out

    def body(self, tid: int, depth: int = 0) -> str:
        r = self.records[tid]
        if r[0] == TYPE_OPAQUE:
            return "opaque"
        if len(r) < 2:
            raise _Unknown("struct record layout")
        return "{" + ("packed " if r[1] else "") + ", ".join(self.text(t, depth + 1) for t in r[2:]) + "}"

    def reaches_named(self, tid: int, depth: int = 0) -> bool:
        """Whether a named struct is part of the type."""
        if depth > 100 or tid >= len(self.records):
            raise _Unknown(f"type id {tid}")
        return tid in self.names or any(self.reaches_named(t, depth + 1) for t in self._reads(tid))


@dataclass
class _Global:
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

    def __init__(self, globals_: list[_Global], constants: list[_Node], types: _Types) -> None:
        self.globals = globals_
        self.types = types
        self.constants: list[tuple[int | None, list[int]]] = []  # (type id, record)
        for c in constants:
            ty = None
            for r in c.items:
                if isinstance(r, _Node):
                    raise _Unknown("block in CONSTANTS")
                if r[0] == CST_SETTYPE:
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
            raise _Unknown(f"metadata names constant {_ints(r[:1])}")
        return f"{self.types.text(ty)} const {_ints(r)}"


def _metadata(node: _Node, values: _Values) -> list[str]:
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
            if len(item) != 3:
                raise _Unknown("metadata value")
            nodes[len(ids)] = (f"value {item[1]} {item[2]}", [])  # resolved below, if reached
            ids.append(f"#{len(ids)}")
        elif code in (MD_NODE, MD_DISTINCT_NODE):
            nodes[len(ids)] = (f"node{code}", [v - 1 for v in item[1:]])  # 0: null
            ids.append(f"#{len(ids)}")
        elif code == MD_NAME:
            name = bytes(item[1:]).hex()
        elif code == MD_NAMED_NODE:
            if name is None:
                raise _Unknown("named node without a name")
            roots.append((f"named {name}", list(item[1:])))
            name = None
        elif code == MD_KIND:
            roots.append(("kind " + _ints(item[1:]), []))
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


def _interface(tree: _Node, summarised: list[_Node]) -> list[str]:
    modules = [top for top in tree.items if isinstance(top, _Node) and top.bid == MODULE_BLOCK]
    # A backend imports from a file's first module with a ThinLTO summary (lto::findThinLTOModule):
    # of a split LTO unit, the ThinLTO module; its regular-LTO module is the thin-link's alone.
    imported = next((m for m in modules if any(m is s for s in summarised)), None) if len(modules) > 1 else None
    if len(modules) > 1 and imported is None:
        raise _Unknown(f"{len(modules)} modules, none with a ThinLTO summary")
    strtabs = [top for top in tree.items if isinstance(top, _Node) and top.bid == STRTAB_BLOCK]
    if len(strtabs) > 1:
        raise _Unknown("two string tables")
    strtab = None
    if strtabs:
        blobs = [r for r in strtabs[0].items if not isinstance(r, _Node) and r[0] == 1]
        if len(blobs) != 1:
            raise _Unknown("string table layout")
        strtab = bytes(blobs[0][1:])
    out: list[str] = [f"interface {FORMAT}"]
    modules = 0
    for top in tree.items:
        if not isinstance(top, _Node):
            out.append("rec " + _ints(top))
        elif top.bid == MODULE_BLOCK:
            if imported is None or top is imported:
                modules += 1
                out += _module_interface(top, strtab)
        elif top.bid not in (BLOCKINFO, STRTAB_BLOCK, SYMTAB_BLOCK):
            out += _raw(top)  # IDENTIFICATION: the producer
        # SYMTAB: the linker's symbol table, made from the module's global values.
    if modules != 1:
        raise _Unknown(f"{modules} modules")
    return out


def _module_interface(node: _Node, strtab: bytes | None) -> list[str]:
    """The module's part of module_interface (see there)."""
    kept: list[str] = []
    global_records: list[list[int]] = []
    type_nodes = [i for i in node.items if isinstance(i, _Node) and i.bid == TYPE_BLOCK]
    constants = [i for i in node.items if isinstance(i, _Node) and i.bid == CONSTANTS_BLOCK]
    metadata = [i for i in node.items if isinstance(i, _Node) and i.bid == METADATA_BLOCK]
    if len(type_nodes) > 1 or len(metadata) > 1:
        raise _Unknown("two type tables or metadata blocks")
    for item in node.items:
        if isinstance(item, _Node):
            if item.bid in RAW_BLOCKS:
                kept += _raw(item, 1)
            elif item.bid not in {BLOCKINFO, TYPE_BLOCK, CONSTANTS_BLOCK, METADATA_BLOCK} | DROPPED_BLOCKS:
                raise _Unknown(f"block {item.bid} in MODULE_BLOCK")
        elif item[0] == MODULE_CODE_VERSION and item[1:] != [2]:
            raise _Unknown(f"module version {_ints(item[1:])}")  # 2: names in the string table
        elif item[0] in KEPT_MODULE_CODES:
            kept.append(f"  rec {_ints(item)}")
        elif item[0] in GLOBAL_VALUE_CODES:
            global_records.append(item)
        elif item[0] not in DROPPED_MODULE_CODES:
            raise _Unknown(f"module record {item[0]}")
    types = _Types(type_nodes[0] if type_nodes else None)
    globals_ = _globals(global_records, strtab)
    values = _Values(globals_, constants, types)
    out = [f"block {MODULE_BLOCK}", *kept]
    # IRMover's last step moves the importer's global variable of each name the module's
    # variables have (not appending, not local: a local keeps no name it could match, and
    # a promoted one has the module's hash in it) to the end of its list, in this order.
    out += ["  variables", *(f"    {_name(g.name)}" for g in globals_ if g.code == MODULE_CODE_GLOBALVAR
                             and g.name and not g.local and g.linkage != APPENDING_LINKAGE)]
    # Appending variables of the same name unify their element types (computeTypeMapping).
    for g in globals_:
        if g.code == MODULE_CODE_GLOBALVAR and g.linkage == APPENDING_LINKAGE:
            value_type = types.records[g.record[3]] if g.record[3] < len(types.records) else None
            if value_type is None or value_type[0] != TYPE_ARRAY or len(value_type) != 3:
                raise _Unknown("an appending variable that is not an array")
            out.append(f"  appending {_name(g.name)} of {types.text(value_type[2])}")
    # An intrinsic of the importer with the name of one of the module's functions: its type
    # is mapped (getLinkedToGlobal), which can take a named struct out of the by-name pass.
    for g in globals_:
        if g.code == MODULE_CODE_FUNCTION and g.name.startswith(b"llvm.") and types.reaches_named(g.record[3]):
            out.append(f"  intrinsic {_name(g.name)} {types.text(g.record[3])}")
    # computeTypeMapping maps, by name, every identified struct the reader created (the
    # materializer's list, function bodies' types included, not only what a TypeFinder
    # reaches), in that order; an opaque struct of the importer's takes the body of the first.
    out += ["  structs", *(f"    %{_name(types.names[t])} {types.body(t)}" for t in types.created
                           if t in types.names)]
    for m in metadata:
        out += ["  metadata", *("    " + line for line in _metadata(m, values))]
    out.append(f"end {MODULE_BLOCK}")
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
    tree = _ModuleTree()
    bitcode._read_stream(bitcode._stream(module), tree)
    try:
        lines = _interface(tree.root, tree.summarised)
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
