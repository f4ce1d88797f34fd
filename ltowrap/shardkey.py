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
- modules are listed in the order of their paths' bytes, each by the digest of its bytes
  and its recorded hash: the backend imports modules in the sorted order of their paths
  (FunctionImporter), so that order is part of the meaning, and the paths themselves
  are not (the same shard content under other paths gives byte-identical objects);
- summaries are listed in (GUID, module rank) order, each with the type-test records that
  precede it; the reader keeps a GUID's summaries in file order, which is by module, so
  the rank puts them back in that order;
- every other record is kept as it is, in its order.

Conservative by construction: the summary block is made canonical only for the summary
versions whose record layouts are known here, 9 (LLVM 14) and 12 (LLVM 22), and only if
every record in it is of a known kind whose value ids all resolve. Otherwise the block
goes in raw (value ids, record order and the module id -> rank table included): an
unknown format costs cache hits, never a wrong object. Abbreviation definitions and
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
FORMAT = "shardkey 1"

# GLOBALVAL_SUMMARY record codes (llvm/Bitcode/LLVMBitCodes.h).
FS_COMBINED, FS_COMBINED_PROFILE, FS_COMBINED_GLOBALVAR_INIT_REFS = 4, 5, 6
FS_COMBINED_ALIAS = 8
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
    """MODULE_STRTAB: module id -> rank, and the canonical lines."""

    rank: dict[int, int]
    lines: list[str]


def _modules(node: _Node, digest_of: Callable[[str], str], self_path: str | None) -> _Modules:
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
    lines = [f"module ^{r} {digest_of(path.decode('utf-8', 'surrogateescape'))} hash {_ints(h)}"
             for r, (path, _, h) in enumerate(entries)]
    if self_path is not None:
        own = self_path.encode("utf-8", "surrogateescape")
        lines.append("self " + next((f"^{r}" for r, (p, _, _) in enumerate(entries) if p == own), "?"))
    return _Modules(rank, lines + raw)


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


def canonical(shard: bytes, digest_of: Callable[[str], str], self_path: str | None = None) -> str:
    """The shard's canonical text (see the module docstring); BadBitcode if unreadable.

    digest_of(path) names a module by its bytes (OSError if it cannot be read);
    self_path, the backend's own module, is marked by its rank.
    """
    tree = _Tree()
    bitcode._read_stream(bitcode._stream(shard), tree)
    out = [FORMAT]
    found = 0
    for top in tree.root.items:
        if not isinstance(top, _Node):
            out.append("rec " + _ints(top))
        elif top.bid == BLOCKINFO:
            continue
        elif top.bid != MODULE_BLOCK:
            out += _raw(top)
        else:
            found += 1
            out += _module_block(top, digest_of, self_path)
    if found != 1:
        raise BadBitcode(f"{found} MODULE_BLOCKs in an index shard")
    return "\n".join(out) + "\n"


def _module_block(node: _Node, digest_of: Callable[[str], str], self_path: str | None) -> list[str]:
    strtabs = [i for i in node.items if isinstance(i, _Node) and i.bid == MODULE_STRTAB]
    if len(strtabs) != 1:
        raise BadBitcode(f"{len(strtabs)} MODULE_STRTAB blocks")
    modules = _modules(strtabs[0], digest_of, self_path)
    out = [f"block {MODULE_BLOCK}"]
    for item in node.items:
        if not isinstance(item, _Node):
            out.append(f"rec {_ints(item)}")
        elif item.bid == MODULE_STRTAB:
            out += modules.lines
        elif item.bid == SUMMARY:
            try:
                out += _Summaries(item, modules).lines()
            except _Unknown as e:
                # Raw, numbering and all; the module ids are given their ranks so that the
                # records still say which module they mean.
                out.append(f"summaries raw ({e})")
                out.append("modids " + " ".join(f"{m}=^{r}" for m, r in sorted(modules.rank.items())))
                out += _raw(item, 1)
        elif item.bid != BLOCKINFO:
            out += _raw(item, 1)
    out.append(f"end {MODULE_BLOCK}")
    return out
