"""Index shards (`M.o.thinlto.bc`) read and rewritten with a small bitstream reader and writer.

An index shard (`M.o.thinlto.bc`) records, in its MODULE_STRTAB block, the path of every
module the backend compile will read, and lld writes whatever paths it was given:
ltowrap's store paths, or lld's own temporary names for archive members under DTLTO
(`libb.a(b.o at 80).2.5CF1.o`, different for every link). The native object depends on the
modules' contents, not on their paths. The reader below is shared with shardkey.py, which
turns a shard into its canonical text for the cache key.

A remote backend compile runs in another directory, where the shard's absolute store paths
do not exist: relocate() rewrites its MODULE_STRTAB block with other module paths.

LLVM bitstream, as far as needed here: a stream of abbreviation ids of the current width;
0 END_BLOCK, 1 ENTER_SUBBLOCK (block id vbr8, new width vbr4, align 32, length in words
fixed32), 2 DEFINE_ABBREV, 3 UNABBREV_RECORD (code vbr6, count vbr6, operands vbr6);
ids >= 4 are records laid out by a defined abbreviation. Abbreviations for a block may
also come from the BLOCKINFO block (id 0, SETBID record 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

BLOCKINFO = 0
MODULE_BLOCK = 8
MODULE_STRTAB = 19
MST_ENTRY = 1
CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"

Abbrev = list[tuple[str, int]]


class BadBitcode(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) * 8 if end is None else end

    def fixed(self, n: int) -> int:
        if n == 0:
            return 0
        if self.pos + n > self.end:
            raise BadBitcode("read past the end")
        i = self.pos >> 3
        window = int.from_bytes(self.data[i : i + 9], "little") >> (self.pos & 7)
        self.pos += n
        return window & ((1 << n) - 1)

    def vbr(self, n: int) -> int:
        # Most values fit in one chunk: read it from one window (the hot path of shardkey).
        pos = self.pos
        chunk = (int.from_bytes(self.data[pos >> 3 : (pos >> 3) + 2], "little") >> (pos & 7)) & ((1 << n) - 1) \
            if n <= 9 else -1
        if 0 <= chunk < 1 << (n - 1) and pos + n <= self.end:
            self.pos = pos + n
            return chunk
        value = shift = 0
        hi = 1 << (n - 1)
        while True:
            chunk = self.fixed(n)
            value |= (chunk & (hi - 1)) << shift
            if not chunk & hi:
                return value
            shift += n - 1
            if shift > 64:
                raise BadBitcode("vbr too long")

    def align32(self) -> None:
        self.pos = (self.pos + 31) & ~31


def _define_abbrev(r: _Reader) -> Abbrev:
    ops: Abbrev = []
    n = r.vbr(5)
    while len(ops) < n:
        if r.fixed(1):
            ops.append(("lit", r.vbr(8)))
            continue
        enc = r.fixed(3)
        if enc in (1, 2):
            ops.append(("fixed" if enc == 1 else "vbr", r.vbr(5)))
        elif enc in (3, 4, 5):
            ops.append(({3: "array", 4: "char6", 5: "blob"}[enc], 0))
        else:
            raise BadBitcode(f"bad abbreviation encoding {enc}")
    return ops


def _scalar(r: _Reader, kind: str, value: int) -> int:
    if kind == "vbr":
        return r.vbr(value)
    if kind == "fixed":
        return r.fixed(value)
    if kind == "lit":
        return value
    if kind == "char6":
        return ord(CHAR6[r.fixed(6)])
    raise BadBitcode(f"{kind} is not a scalar")


def _record(r: _Reader, abbrev: Abbrev) -> list[int]:
    values: list[int] = []
    i = 0
    while i < len(abbrev):
        kind, value = abbrev[i]
        if kind == "array":
            elt_kind, elt_value = abbrev[i + 1]
            values += [_scalar(r, elt_kind, elt_value) for _ in range(r.vbr(6))]
            i += 2
            continue
        if kind == "blob":
            n = r.vbr(6)
            r.align32()
            values += [r.fixed(8) for _ in range(n)]
            r.align32()
        else:
            values.append(_scalar(r, kind, value))
        i += 1
    return values


@dataclass(frozen=True)
class _Block:
    """Where a block lies, in bits from the start of the stream."""

    bid: int
    width: int  # abbreviation id width inside it
    length_at: int  # its length word
    start: int
    end: int


class _Visitor:
    def enter(self, block: _Block) -> bool:
        """Whether to read the block's records (else it is skipped whole)."""
        return False

    def leave(self, block: _Block) -> None:
        pass

    def record(self, block: _Block | None, values: list[int]) -> None:
        pass


def _stream(shard: bytes) -> bytes:
    if shard[:4] == b"\xde\xc0\x17\x0b":  # wrapper header: magic, version, offset, size
        offset = int.from_bytes(shard[8:12], "little")
        shard = shard[offset : offset + int.from_bytes(shard[12:16], "little")]
    if shard[:4] != b"BC\xc0\xde":
        raise BadBitcode("not bitcode")
    return shard


def _sub_block(r: _Reader) -> _Block:
    """The block whose ENTER_SUBBLOCK abbreviation id was just read: its id, width and extent."""
    bid, width = r.vbr(8), r.vbr(4)
    r.align32()
    length_at = r.pos
    words = r.fixed(32)
    block = _Block(bid, width, length_at, r.pos, r.pos + 32 * words)
    if block.end > r.end:
        raise BadBitcode("block runs past the end")
    return block


def _walk(r: _Reader, width: int, block: _Block | None, blockinfo: dict[int, list[Abbrev]], visitor: _Visitor) -> None:
    abbrevs: list[Abbrev] = list(blockinfo.get(block.bid, [])) if block is not None else []
    current_bid: int | None = None
    while r.pos + width <= r.end:
        code = r.fixed(width)
        if code == 0:  # END_BLOCK
            r.align32()
            return
        if code == 1:  # ENTER_SUBBLOCK
            sub = _sub_block(r)
            if visitor.enter(sub):
                # A module's BLOCKINFO is its own: LLVM reads each module of a file (a split LTO
                # unit has two) with a cursor of its own, from what the top level defined.
                scope = {k: list(v) for k, v in blockinfo.items()} if block is None and sub.bid == MODULE_BLOCK \
                    else blockinfo
                _walk(_Reader(r.data, sub.start, sub.end), sub.width, sub, scope, visitor)
                visitor.leave(sub)
            r.pos = sub.end
            continue
        if code == 2:
            ops = _define_abbrev(r)
            if block is not None and block.bid == BLOCKINFO:
                if current_bid is None:
                    raise BadBitcode("abbreviation before SETBID")
                blockinfo.setdefault(current_bid, []).append(ops)
            else:
                abbrevs.append(ops)
            continue
        if code == 3:
            rec_code = r.vbr(6)
            values = [rec_code, *(r.vbr(6) for _ in range(r.vbr(6)))]
        else:
            if code - 4 >= len(abbrevs):
                raise BadBitcode(f"undefined abbreviation {code}")
            values = _record(r, abbrevs[code - 4])
        if block is not None and block.bid == BLOCKINFO and values and values[0] == 1:  # SETBID
            current_bid = values[1]
        visitor.record(block, values)
    if block is not None:
        raise BadBitcode("block without END_BLOCK")


def _read_stream(stream: bytes, visitor: _Visitor) -> None:
    _walk(_Reader(stream, 32), 2, None, {}, visitor)


def _module_path(values: list[int]) -> str:
    return bytes(values[2:]).decode("utf-8", "surrogateescape")


def _is_entry(values: list[int]) -> bool:
    """Is this MODULE_STRTAB record a module's path (not its hash)?"""
    return values[0] == MST_ENTRY and len(values) >= 2


# Blocks that may hold MODULE_STRTAB, or abbreviations for it.
_PATH_BLOCKS = (MODULE_BLOCK, MODULE_STRTAB, BLOCKINFO)


@dataclass
class _StrtabFinder(_Visitor):
    """The MODULE_STRTAB block, its records, and the blocks around it."""

    open: list[_Block] = field(default_factory=list)
    found: tuple[list[_Block], _Block] | None = None
    records: list[list[int]] = field(default_factory=list)

    def enter(self, block: _Block) -> bool:
        if block.bid not in _PATH_BLOCKS:
            return False
        self.open.append(block)
        return True

    def leave(self, block: _Block) -> None:
        self.open.pop()
        if block.bid == MODULE_STRTAB:
            if self.found is not None:
                raise BadBitcode("two MODULE_STRTAB blocks")
            self.found = (list(self.open), block)

    def record(self, block: _Block | None, values: list[int]) -> None:
        if block is not None and block.bid == MODULE_STRTAB:
            self.records.append(values)


class _Writer:
    def __init__(self) -> None:
        self.value = 0
        self.bits = 0

    def fixed(self, value: int, n: int) -> None:
        self.value |= value << self.bits
        self.bits += n

    def vbr(self, value: int, n: int) -> None:
        hi = 1 << (n - 1)
        while value >= hi:
            self.fixed((value & (hi - 1)) | hi, n)
            value >>= n - 1
        self.fixed(value, n)

    def data(self) -> bytes:
        self.bits = (self.bits + 31) & ~31
        return self.value.to_bytes(self.bits // 8, "little")


class _ModuleCounter(_Visitor):
    def __init__(self) -> None:
        self.modules = 0

    def enter(self, block: _Block) -> bool:
        self.modules += block.bid == MODULE_BLOCK
        return False  # top-level blocks only, each jumped over by its length word


def module_count(data: bytes) -> int:
    """How many modules a bitcode file holds; BadBitcode if its top level cannot be read.

    Two for a split LTO unit (-fsplit-lto-unit, which -fwhole-program-vtables and
    -fsanitize=cfi imply): the ThinLTO module, then a regular-LTO module holding the vtables
    and type metadata, which lld links with every other regular-LTO module into one object.
    """
    counter = _ModuleCounter()
    _read_stream(_stream(data), counter)
    return counter.modules


def module_paths(shard: bytes) -> list[str]:
    """The module paths a shard records, in its MODULE_STRTAB order."""
    return Strtab.of(shard).paths


def relocate(shard: bytes, rename: Callable[[str], str]) -> bytes:
    """The shard with each module path p recorded as rename(p); BadBitcode if unreadable.

    Only MODULE_STRTAB changes: it is written again with unabbreviated records (which every
    reader accepts) and the length words of it and of the blocks around it are adjusted.
    Blocks are 32-bit aligned and a combined index holds no absolute offsets, so
    everything else is kept byte for byte.
    """
    return Strtab.of(shard).relocate(rename)


class Strtab:
    """A shard's MODULE_STRTAB, read once: its paths, and the shard relocated (remote/action.py
    needs both, the paths to rank them before it renames them)."""

    def __init__(self, stream: bytes, finder: _StrtabFinder) -> None:
        self.stream, self.finder = stream, finder
        self.paths = [_module_path(v) for v in finder.records if _is_entry(v)]

    @classmethod
    def of(cls, shard: bytes) -> Strtab:
        stream = _stream(shard)
        finder = _StrtabFinder()
        _read_stream(stream, finder)
        return cls(stream, finder)

    def relocate(self, rename: Callable[[str], str]) -> bytes:
        stream, finder = self.stream, self.finder
        if finder.found is None:
            raise BadBitcode("no MODULE_STRTAB block")
        parents, strtab = finder.found
        w = _Writer()
        for values in finder.records:
            if _is_entry(values):
                values = [*values[:2], *rename(_module_path(values)).encode("utf-8", "surrogateescape")]
            w.fixed(3, strtab.width)  # UNABBREV_RECORD
            w.vbr(values[0], 6)
            w.vbr(len(values) - 1, 6)
            for v in values[1:]:
                w.vbr(v, 6)
        w.fixed(0, strtab.width)  # END_BLOCK
        body = w.data()
        delta = len(body) // 4 - (strtab.end - strtab.start) // 32
        out = bytearray(stream[: strtab.start // 8] + body + stream[strtab.end // 8 :])
        for block in (*parents, strtab):
            at = block.length_at // 8
            words = int.from_bytes(out[at : at + 4], "little") + delta
            out[at : at + 4] = words.to_bytes(4, "little")
        return bytes(out)
