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
  bit 10 on every summary of that module) goes in by its interface (interface.py: what
  IRMover can change the importer through, written without ids), not by its bytes. What
  the backend takes of the declarations is their summaries, which are in the shard and
  keyed below. A module whose recorded hash another module of the shard shares goes in by
  its bytes: its promoted locals could then meet names of that module's (the interface
  leaves locals' names out);
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

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from .bitcodes import BLOCKINFO_BLOCK_ID, FS_BLOCK_COUNT, FS_CFI_FUNCTION_DECLS, FS_CFI_FUNCTION_DEFS, FS_COMBINED, \
    FS_COMBINED_ALIAS, FS_COMBINED_GLOBALVAR_INIT_REFS, FS_COMBINED_ORIGINAL_NAME, FS_COMBINED_PROFILE, FS_FLAGS, \
    FS_TYPE_CHECKED_LOAD_CONST_VCALL, FS_TYPE_CHECKED_LOAD_VCALLS, FS_TYPE_ID, FS_TYPE_TESTS, \
    FS_TYPE_TEST_ASSUME_CONST_VCALL, FS_TYPE_TEST_ASSUME_VCALLS, FS_VALUE_GUID, FS_VERSION, \
    GLOBALVAL_SUMMARY_BLOCK_ID, MODULE_BLOCK_ID, MODULE_STRTAB_BLOCK_ID, MST_CODE_ENTRY, MST_CODE_HASH
from . import bitcode
from .bitcode import BadBitcode, Node, bitstream, ints_text, read_tree, record_bytes

# The canonical texts' format (interface.py's too): a new one for any change of a text.
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

# The summaries: of functions (FS_COMBINED, _PROFILE), variables and aliases.
SUMMARY_CODES = frozenset({FS_COMBINED, FS_COMBINED_PROFILE, FS_COMBINED_GLOBALVAR_INIT_REFS, FS_COMBINED_ALIAS})
# Summary flags (v10, v12): bit 10 is the import type, set when the backend gets the value's
# summary only (a declaration: -import-declaration) and no body (BitcodeWriter
# getEncodedGVSummaryFlags). v9 has no such bit (bits 0-9: linkage, not eligible to import,
# live, dso_local, can auto-hide, visibility).
IMPORT_AS_DECLARATION = 1 << 10
# Type tests and virtual calls of the function whose record follows: GUIDs of type ids
# and offsets, no value ids.
PREFIX_CODES = frozenset({FS_TYPE_TESTS, FS_TYPE_TEST_ASSUME_VCALLS, FS_TYPE_CHECKED_LOAD_VCALLS,
                          FS_TYPE_TEST_ASSUME_CONST_VCALL, FS_TYPE_CHECKED_LOAD_CONST_VCALL})
# Kept as they are, in their order: no value ids (type ids and CFI names point into the
# STRTAB block, which goes in whole).
PLAIN_CODES = frozenset({FS_VERSION, FS_FLAGS, FS_CFI_FUNCTION_DEFS, FS_CFI_FUNCTION_DECLS, FS_TYPE_ID})
# What stands for FS_BLOCK_COUNT when the backend does not read it (see canonical).
BLOCK_COUNT_UNREAD = "block count: not read by this backend (its module has no sample profile)"
# A module whose bytes hold this string may carry a sample profile's ProfileSummary
# (`!{!"ProfileFormat", !"SampleProfile"}`): metadata strings are stored as plain bytes
# (METADATA_STRINGS, every LLVM since 4.0), so its absence rules the summary out.
SAMPLE_PROFILE_MARK = b"SampleProfile"


class _Unknown(Exception):
    """The summary block holds something this reader does not understand: it goes in raw."""


@dataclass(eq=False, repr=False)
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
        (interface.module_interface)."""
        lines = []
        hashes = Counter(tuple(h) for _, h in self.entries)
        for r, (path, h) in enumerate(self.entries):
            name = path.decode("utf-8", "surrogateescape")
            # A module's exported locals become `name.llvm.<its hash>` in the backend: with the
            # hash of another module of the shard they could meet that module's names, which the
            # interface (names of locals left out) does not cover.
            shared_hash = hashes[tuple(h)] > 1
            if full is None or interface_of is None or r in full or r == self.self_rank or shared_hash:
                lines.append(f"module ^{r} {digest_of(name)} hash {ints_text(h)}")
            else:
                lines.append(f"module ^{r} declarations {interface_of(name)}")
        return lines + self.self_line + self.raw


def _modules(node: Node, self_path: str | None) -> _Modules:
    entries: list[tuple[bytes, int, list[int]]] = []  # path, module id, its hash
    raw: list[str] = []
    for item in node.items:
        if isinstance(item, Node):
            raw.append(f"block {item.bid} inside MODULE_STRTAB")
        elif item[0] == MST_CODE_ENTRY and len(item) >= 2:
            entries.append((record_bytes(item[2:]), item[1], []))
        elif item[0] == MST_CODE_HASH and entries:
            entries[-1][2].extend(item[1:])
        else:
            raw.append("raw " + ints_text(item))
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

    def __init__(self, node: Node, modules: _Modules, block_count_read: Callable[[], bool] = lambda: True) -> None:
        self.modules = modules
        self.block_count_read = block_count_read
        records = []
        for item in node.items:
            if isinstance(item, Node):
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
            text = (f"fn{code} {self._v(r[1])} {self._m(r[2])} {ints_text(r[3:10])} refs {' '.join(map(self._v, refs))}"
                    f" calls {' '.join(edges)}")
        elif code == FS_COMBINED_GLOBALVAR_INIT_REFS:
            if len(r) < 5:
                raise _Unknown("short variable record")
            text = f"var {self._v(r[1])} {self._m(r[2])} {ints_text(r[3:5])} refs {' '.join(map(self._v, r[5:]))}"
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
                prefix.append(f"  pre {ints_text(r)}")
            elif code in PLAIN_CODES:
                plain.append(f"rec {ints_text(r)}")
            elif code == FS_BLOCK_COUNT:
                # The basic blocks of every module of the link (v9 writes it into every
                # shard): read only by Module::setPartialSampleProfileRatio of the backend's
                # own module, which changes nothing unless that module carries a partial
                # sample profile's summary (LTOBackend thinBackend).
                plain.append(f"rec {ints_text(r)}" if self.block_count_read() else BLOCK_COUNT_UNREAD)
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
        return [f"summaries v{self.version}", *plain, "guids " + ints_text(sorted(self.guid.values())),
                *(text for _, _, text in groups)]


def _tables() -> tuple:
    """What the compiled text (ltowrap._bitcode.shard_text) takes of this module's tables, so that
    they are defined here alone; read at each call, as canonical_python reads them."""
    return FORMAT, BLOCK_COUNT_UNREAD, tuple(KNOWN_VERSIONS), tuple(DECLARATION_VERSIONS), SPLIT_GUID_SINCE


def canonical(shard: bytes, digest_of: Callable[[str], str], self_path: str | None = None,
              interface_of: Callable[[str], str] | None = None,
              sample_profiled: Callable[[str], bool] | None = None,
              known: tuple[dict[str, str], dict[str, str]] | None = None) -> str:
    """The shard's canonical text (see the module docstring); BadBitcode if unreadable.

    digest_of(path) names a module by its bytes, interface_of(path) by what a backend that
    imports only declarations from it can take (interface.module_interface; OSError if it cannot be
    read, BadBitcode if it cannot be parsed); without interface_of every module goes in by
    its bytes. self_path, the backend's own module, is marked by its rank.
    sample_profiled(self_path) says whether the own module may carry a sample profile's
    summary (has_sample_profile); without it (or self_path) the link's block count, which
    only such a module reads, stays in the text.

    Computed in C (ltowrap._bitcode.shard_text, straight from the decoded stream) when the
    compiled reader runs (bitcode.implementation()), else by canonical_python, the reference:
    the same text, the same BadBitcode, the same callbacks in the same order. The C text hands
    the rare shard it does not take (a GUID above 64 bits, a module name that is not ASCII)
    to canonical_python. `known` holds answers of digest_of and interface_of already given,
    by path: the compiled text takes a name from there before it calls them (a shard names
    hundreds of modules), and the Python one, which the callbacks' own memos serve as fast,
    does without.
    """
    return _canonical(shard, digest_of, self_path, interface_of, sample_profiled, known, None)


def canonical_digest(shard: bytes, digest: Callable[[bytes], str], digest_of: Callable[[str], str],
                     self_path: str | None = None, interface_of: Callable[[str], str] | None = None,
                     sample_profiled: Callable[[str], bool] | None = None,
                     known: tuple[dict[str, str], dict[str, str]] | None = None) -> str:
    """digest(canonical(...)'s UTF-8 bytes, surrogates escaped), as canonical() takes the rest;
    BadBitcode if unreadable. The compiled text hands `digest` its bytes as it made them: a
    key that needs only the text's digest makes no str of tens of kilobytes, nor bytes of that str."""
    return _canonical(shard, digest_of, self_path, interface_of, sample_profiled, known, digest)


def _canonical(shard: bytes, digest_of: Callable[[str], str], self_path: str | None,
               interface_of: Callable[[str], str] | None, sample_profiled: Callable[[str], bool] | None,
               known: tuple[dict[str, str], dict[str, str]] | None, digest: Callable[[bytes], str] | None) -> str:
    """canonical(), or with digest canonical_digest()."""
    native = getattr(bitcode._native, "shard_text", None)  # read at the call: LTOWRAP_NATIVE, bench/reader.py
    own = None
    if native is not None:
        try:
            own = None if self_path is None else self_path.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # canonical_python raises it where it meets it
            native = None
    if native is not None:
        count = None if sample_profiled is None or self_path is None else lambda: sample_profiled(self_path)
        text = native(bitstream(shard), own, digest_of, interface_of, count, BadBitcode, _tables(), known, digest)
        if text is not NotImplemented:
            return text
    text = canonical_python(shard, digest_of, self_path, interface_of, sample_profiled)
    return text if digest is None else digest(text.encode("utf-8", "surrogateescape"))


def canonical_python(shard: bytes, digest_of: Callable[[str], str], self_path: str | None = None,
                     interface_of: Callable[[str], str] | None = None,
                     sample_profiled: Callable[[str], bool] | None = None) -> str:
    """canonical(), in Python: the reference the compiled text is held to."""
    root = read_tree(shard)

    def block_count_read() -> bool:  # asked only of a shard that has the record (v9)
        return sample_profiled is None or self_path is None or sample_profiled(self_path)

    lines, found = _top_level(root, lambda m: _module_block(m, digest_of, self_path, interface_of,
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


def _top_level(root: Node, module: Callable[[Node], list[str]]) -> tuple[list[str], int]:
    """The stream's top level as lines, each MODULE_BLOCK as `module` gives it; and how many there were."""
    out: list[str] = []
    found = 0
    for top in root.items:
        if not isinstance(top, Node):
            out.append("rec " + ints_text(top))
        elif top.bid == BLOCKINFO_BLOCK_ID:
            continue
        elif top.bid != MODULE_BLOCK_ID:
            out += top.lines()
        else:
            found += 1
            out += module(top)
    return out, found


def _module_block(node: Node, digest_of: Callable[[str], str], self_path: str | None,
                  interface_of: Callable[[str], str] | None,
                  block_count_read: Callable[[], bool] = lambda: True) -> list[str]:
    strtabs = [i for i in node.items if isinstance(i, Node) and i.bid == MODULE_STRTAB_BLOCK_ID]
    if len(strtabs) != 1:
        raise BadBitcode(f"{len(strtabs)} MODULE_STRTAB blocks")
    modules = _modules(strtabs[0], self_path)
    summaries: list[str] | None = None
    full: set[int] | None = None  # None: every module by its bytes
    body: list[str | Node] = []  # the block's lines, MODULE_STRTAB's place marked by its node
    for item in node.items:
        if not isinstance(item, Node):
            body.append(f"rec {ints_text(item)}")
        elif item.bid == MODULE_STRTAB_BLOCK_ID:
            body.append(item)
        elif item.bid == GLOBALVAL_SUMMARY_BLOCK_ID:
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
                             *item.lines(1)]
            body += summaries
        elif item.bid != BLOCKINFO_BLOCK_ID:
            body += item.lines(1)
    out = [f"block {MODULE_BLOCK_ID}"]
    for line in body:
        out += modules.lines(digest_of, interface_of, full) if isinstance(line, Node) else [line]
    out.append(f"end {MODULE_BLOCK_ID}")
    return out
