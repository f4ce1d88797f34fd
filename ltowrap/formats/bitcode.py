"""The LLVM bitstream layer: a reader and block walkers, the record codes ltowrap reads, and index
shards (`M.o.thinlto.bc`) read and rewritten.

Everything in ltowrap that reads bitcode goes through here: irmodule.py (a module's triple,
flags and inline assembly), shardkey.py (a shard's canonical text), interface.py (what a
declarations-only import takes of a module).

LLVM bitstream, as far as needed here: a stream of abbreviation ids of the current width;
0 END_BLOCK, 1 ENTER_SUBBLOCK (block id vbr8, new width vbr4, align 32, length in words
fixed32), 2 DEFINE_ABBREV, 3 UNABBREV_RECORD (code vbr6, count vbr6, operands vbr6);
ids >= 4 are records laid out by a defined abbreviation. Abbreviations for a block may
also come from the BLOCKINFO block (id 0, SETBID record 1).

One way to read a stream: read(stream, want), where Want says, as data, which blocks to
read, which records to decode and which to pass over, and how many entries of a block to
take. The answer is a tree of Nodes. Being data, the same walk runs in C (ltowrap/_bitcode.c,
built by pip install when a C compiler is there) or, as the reference and the fallback, in
Python (read_python); the two give equal trees and refuse the same streams, so every key
is the same whichever read it.

An index shard records, in its MODULE_STRTAB block, the path of every module the backend
compile will read, and lld writes whatever paths it was given: ltowrap's store paths, or
lld's own temporary names for archive members under DTLTO (`libb.a(b.o at 80).2.5CF1.o`,
different for every link). The native object depends on the modules' contents, not on their
paths. A remote backend compile runs in another directory, where the shard's absolute store
paths do not exist: relocate() rewrites its MODULE_STRTAB block with other module paths (Strtab:
in C when the compiled reader is built, StrtabPython the reference).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

from .bitcodes import BLOCKINFO_BLOCK_ID, MODULE_BLOCK_ID, MODULE_STRTAB_BLOCK_ID, MST_CODE_ENTRY, MST_CODE_HASH


def _compiled() -> ModuleType | None:
    """The compiled reader, unless it is missing or LTOWRAP_NATIVE=0 turns it off."""
    if os.environ.get("LTOWRAP_NATIVE", "1") == "0":
        return None
    try:
        from .. import _bitcode  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _bitcode


_native = _compiled()


def implementation() -> str:
    """Which reader runs here: 'compiled' or 'python' (`ltowrap doctor` and `stats` say it)."""
    return "python" if _native is None else "compiled"

# --- the reader --------------------------------------------------------------------------------------

CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"

# An abbreviation: its operands as (encoding, value): ("lit", the value), ("fixed"/"vbr",
# the width), ("array", 0) followed by the element's operand, ("char6", 0), ("blob", 0).
Abbrev = list[tuple[str, int]]


# The widest fixed or vbr chunk, and abbreviation id, LLVM's reader takes (MaxChunkSize).
MAX_WIDTH = 32


class BadBitcode(ValueError):
    pass


class Reader:
    """A bit cursor over `data`, from bit `pos` to bit `end`."""

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
                break
            shift += n - 1
            if shift >= 64:  # as every reader here: no chunk starts past bit 64, no value above it
                raise BadBitcode("vbr too long")
        if value >> 64:
            raise BadBitcode("vbr too long")
        return value

    def align32(self) -> None:
        self.pos = (self.pos + 31) & ~31

    def run(self, n: int, kind: str, width: int) -> list[int]:
        """n fields of one encoding in a row, as vbr/fixed read them: fixed ones cut from one
        window per 64 fields, vbr ones from a window refilled as it runs low (records are
        mostly runs of VBR6 fields, and a shard's module paths runs of characters)."""
        if kind == "char6":
            return [ord(CHAR6[c]) for c in self.run(n, "fixed", 6)]
        if kind not in ("vbr", "fixed") or (kind == "vbr" and width < 2):
            raise BadBitcode(f"an array of {kind}")
        if n * max(width, 1) > self.end - self.pos:  # as LLVM's isSizePlausible: a damaged count
            raise BadBitcode("read past the end")
        data, pos, mask = self.data, self.pos, (1 << width) - 1
        out: list[int] = []
        if kind == "fixed":
            for done in range(0, n, 64):
                count = min(n - done, 64)
                start = pos >> 3
                window = int.from_bytes(data[start : start + (count * width + 7) // 8 + 1], "little") >> (pos & 7)
                out += [(window >> shift) & mask for shift in range(0, count * width, width)]
                pos += count * width
        else:
            hi, low = 1 << (width - 1), (1 << (width - 1)) - 1
            window = avail = 0
            for _ in range(n):
                if avail < 160:  # the widest field: a 64-bit value in vbr2 chunks (130 bits)
                    start = pos >> 3
                    window = int.from_bytes(data[start : start + 64], "little") >> (pos & 7)
                    avail = 512 - (pos & 7)
                chunk = window & mask
                value, used, shift = chunk & low, width, width - 1
                if chunk & hi:
                    while chunk & hi:
                        if shift >= 64:
                            raise BadBitcode("vbr too long")
                        chunk = (window >> used) & mask
                        value |= (chunk & low) << shift
                        used += width
                        shift += width - 1
                    if value >> 64:
                        raise BadBitcode("vbr too long")
                out.append(value)
                window >>= used
                avail -= used
                pos += used
        self.pos = pos
        if pos > self.end:
            raise BadBitcode("read past the end")
        return out

    def skip_vbr6(self, n: int) -> None:
        """Move past n VBR6 fields. A field ends at a chunk whose high bit is clear, so n fields
        take n chunks plus one per set high bit among them: counted in one window, widened until
        the count holds (most records are a few hundred bits, most fields one chunk)."""
        if 6 * n > self.end - self.pos:
            raise BadBitcode("read past the end")
        chunks = n
        while True:
            start = self.pos >> 3
            window = int.from_bytes(self.data[start : start + (6 * chunks + 7) // 8 + 1], "little") >> (self.pos & 7)
            more = (window & (32 * ((1 << 6 * chunks) - 1) // 63)).bit_count()  # bit 5 of each chunk
            if n + more == chunks:
                break
            chunks = n + more
        self.pos += 6 * chunks
        if self.pos > self.end:
            raise BadBitcode("read past the end")

    def skip_vbr(self, n: int, width: int) -> None:
        """Move past n vbr fields of this width, counting their chunks (not checking their
        values: what is passed over is checked only for running past the end)."""
        if width == 6:
            self.skip_vbr6(n)
            return
        if width * n > self.end - self.pos:
            raise BadBitcode("read past the end")
        hi = 1 << (width - 1)
        for _ in range(n):
            while self.fixed(width) & hi:
                pass

    def skip(self, abbrev: Abbrev) -> None:
        """Move past one record laid out by `abbrev`: fixed-width fields and arrays by arithmetic,
        vbr fields by their chunks. Counts (an array's, a blob's) are read as any vbr."""
        i = 0
        while i < len(abbrev):
            kind, width = abbrev[i]
            if kind == "array":
                n = self.vbr(6)
                kind, width = abbrev[i + 1]
                if kind in ("fixed", "char6"):
                    self.pos += n * (6 if kind == "char6" else width)
                elif kind == "vbr":
                    self.skip_vbr(n, width)
                else:
                    raise BadBitcode(f"an array of {kind}")
                i += 2
                continue
            if kind == "blob":
                n = self.vbr(6)
                self.align32()
                self.pos += 8 * n
                self.align32()
            elif kind == "fixed" or kind == "char6":
                self.pos += 6 if kind == "char6" else width
            elif kind == "vbr":
                self.skip_vbr(1, width)
            i += 1
            if self.pos > self.end:
                raise BadBitcode("read past the end")
        if self.pos > self.end:
            raise BadBitcode("read past the end")


def define_abbrev(r: Reader) -> Abbrev:
    """The abbreviation whose DEFINE_ABBREV id was just read."""
    ops: Abbrev = []
    n = r.vbr(5)
    while len(ops) < n:
        if r.fixed(1):
            ops.append(("lit", r.vbr(8)))
            continue
        enc = r.fixed(3)
        if enc in (1, 2):
            width = r.vbr(5)
            # As LLVM's reader: a field of no bits is a literal 0, one wider than 32 bits is
            # refused (MaxChunkSize). A one-bit vbr could not say where it ends.
            if width == 0:
                ops.append(("lit", 0))
            elif width > MAX_WIDTH or (enc == 2 and width < 2):
                raise BadBitcode(f"a {'fixed' if enc == 1 else 'vbr'}{width} field")
            else:
                ops.append(("fixed" if enc == 1 else "vbr", width))
        elif enc in (3, 4, 5):
            ops.append(({3: "array", 4: "char6", 5: "blob"}[enc], 0))
        else:
            raise BadBitcode(f"bad abbreviation encoding {enc}")
    # What LLVM's reader refuses too (BitstreamCursor::ReadAbbrevRecord, readRecord): a record
    # then always has its code, an array its element type, a blob nothing after it.
    kinds = [kind for kind, _ in ops]
    if not ops or kinds[0] in ("array", "blob"):
        raise BadBitcode("an abbreviation without a code")
    if "array" in kinds and (kinds.index("array") != len(ops) - 2 or kinds[-1] in ("array", "blob")):
        raise BadBitcode("an abbreviation's array not second to last")
    if "blob" in kinds[:-1]:
        raise BadBitcode("an abbreviation's blob not last")
    return ops




def read_record(r: Reader, abbrev: Abbrev) -> list[int]:
    """One record laid out by `abbrev`, field by field (a blob as one field per byte).

    The hot loop of shardkey (a shard is a thousand small records): scalar fields are cut
    from one window of bits held in a local, arrays read a run at a time (Reader.run), a
    blob as one slice; a field read through a method call is most of the cost."""
    values: list[int] = []
    data = r.data
    pos = r.pos
    window = avail = 0  # the bits from pos on, and how many of them are read in
    i = 0
    while i < len(abbrev):
        kind, value = abbrev[i]
        if kind == "lit":
            values.append(value)
        elif kind == "fixed" or kind == "vbr" or kind == "char6":
            if avail < 160:  # the widest field: a 64-bit value in vbr2 chunks (130 bits)
                start = pos >> 3
                window = int.from_bytes(data[start : start + 48], "little") >> (pos & 7)
                avail = 384 - (pos & 7)
            width = 6 if kind == "char6" else value
            field = window & ((1 << width) - 1)
            if kind == "vbr" and field >> (width - 1):  # more chunks follow
                if width < 2:
                    raise BadBitcode(f"a vbr{width} field")
                low = (1 << (width - 1)) - 1
                field, chunk, shift, width = field & low, field, width - 1, 0
                while chunk >> (value - 1):
                    if shift >= 64:
                        raise BadBitcode("vbr too long")
                    width += value
                    chunk = (window >> width) & ((1 << value) - 1)
                    field |= (chunk & low) << shift
                    shift += value - 1
                if field >> 64:
                    raise BadBitcode("vbr too long")
                width += value
            values.append(ord(CHAR6[field]) if kind == "char6" else field)
            window >>= width
            avail -= width
            pos += width
        else:
            r.pos = pos
            if kind == "array":
                values += r.run(r.vbr(6), *abbrev[i + 1])
                i += 1
            elif kind == "blob":
                n = r.vbr(6)
                r.align32()
                start = r.pos >> 3
                if r.pos + 8 * n > r.end:
                    raise BadBitcode("read past the end")
                values += data[start : start + n]
                r.pos += 8 * n
                r.align32()
            else:
                raise BadBitcode(f"{kind} is not a field")
            pos, avail = r.pos, 0
        i += 1
    if pos > r.end:
        raise BadBitcode("read past the end")
    r.pos = pos
    return values




@dataclass(frozen=True)
class Block:
    """Where a block lies, in bits from the start of the stream."""

    bid: int
    width: int  # abbreviation id width inside it
    length_at: int  # its length word
    start: int
    end: int


def bitstream(data: bytes) -> bytes:
    """The bitstream of a bitcode file (inside its wrapper header, if it has one)."""
    if data[:4] == b"\xde\xc0\x17\x0b":  # wrapper header: magic, version, offset, size
        offset = int.from_bytes(data[8:12], "little")
        data = data[offset : offset + int.from_bytes(data[12:16], "little")]
    if data[:4] != b"BC\xc0\xde":
        raise BadBitcode("not bitcode")
    return data




def enter_block(r: Reader) -> Block:
    """The block whose ENTER_SUBBLOCK abbreviation id was just read: its id, width and extent."""
    bid, width = r.vbr(8), r.vbr(4)
    if width > MAX_WIDTH:
        raise BadBitcode(f"abbreviation ids of {width} bits")
    r.align32()
    length_at = r.pos
    words = r.fixed(32)
    block = Block(bid, width, length_at, r.pos, r.pos + 32 * words)
    if block.end > r.end:
        raise BadBitcode("block runs past the end")
    return block




# --- reading: one walk, driven by data ------------------------------------------------------------------

# The top level's id in Want's maps and as the root Node's bid.
TOP_LEVEL = -1
OVER_BUDGET = "records through more abbreviation operands than the stream has bits for"
# Blocks nested deeper than this are refused: LLVM writes four levels at most, and a hostile
# stream must not exhaust the stack of either reader.
MAX_DEPTH = 64


@dataclass(frozen=True)
class Want:
    """What read() takes of a stream. It is data, not callbacks, so that the compiled reader
    (ltowrap._bitcode) runs the whole walk without calling back into Python.

    - A sub-block is read when its id is in `enter` (None: any) and not in `skip`; any
      other is jumped over by its length word and left out of the tree. BLOCKINFO blocks
      are always read, since later blocks are encoded by their abbreviations, and are in
      the tree only when entered.
    - `only` and `unread`, by block id (TOP_LEVEL for the top level): the record codes
      whose fields are read (only), or passed over (unread). A record whose fields are
      passed over comes as [code] alone, its fields skipped as cheaply as its layout
      allows: its place still counts (metadata and value ids are by position).
    - `first`, by block id: how many entries (records and sub-blocks, read or not) of such
      a block are read; the rest is jumped over. 0 keeps the block as an empty Node, which
      says only that it is there.
    - `blobs`: a blob as one field per byte (as LLVM's reader gives it to a record that
      takes no blob), else as two fields, its byte offset in the stream and its length.
    """

    enter: frozenset[int] | None = None
    skip: frozenset[int] = frozenset()
    only: Mapping[int, frozenset[int]] = field(default_factory=dict)
    unread: Mapping[int, frozenset[int]] = field(default_factory=dict)
    first: Mapping[int, int] = field(default_factory=dict)
    blobs: bool = True

    def enters(self, bid: int) -> bool:
        return (self.enter is None or bid in self.enter) and bid not in self.skip

    def fields_of(self, bid: int) -> Callable[[int], bool]:
        """Whether a record of this code in a block of this id comes with its fields."""
        only, unread = self.only.get(bid), self.unread.get(bid, frozenset())
        if only is None:
            return lambda code: code not in unread
        return lambda code: code in only and code not in unread


def record_bytes(chars: list[int]) -> bytes:
    """A string record's characters as bytes (LLVM keeps each as a field: a char6 or 8-bit array
    element, or a blob byte); BadBitcode for one above 255."""
    try:
        return bytes(chars)
    except ValueError:
        raise BadBitcode("a character above 255 in a string") from None


def ints_text(values: list[int] | tuple[int, ...]) -> str:
    """Fields as one line of decimal numbers: how canonical texts keep a record."""
    return " ".join(map(str, values))


@dataclass
class Node:
    """A block as read(): its records (code and fields) and the sub-blocks read, in stream order,
    and where it lies. The root, bid TOP_LEVEL and no block, is the stream's top level."""

    bid: int
    items: list[list[int] | Node] = field(default_factory=list)
    block: Block | None = None

    def lines(self, depth: int = 0) -> list[str]:
        """The block as text, each record as it was read, indented by depth. BLOCKINFO blocks
        are left out: they only say how records are encoded."""
        pad = "  " * depth
        out = [f"{pad}block {self.bid}"]
        for item in self.items:
            if isinstance(item, Node):
                if item.bid != BLOCKINFO_BLOCK_ID:
                    out += item.lines(depth + 1)
            else:
                out.append(f"{pad}  rec {ints_text(item)}")
        out.append(f"{pad}end {self.bid}")
        return out

    def blocks(self, bid: int) -> list[Node]:
        """The sub-blocks of this id that were read, in order."""
        return [item for item in self.items if isinstance(item, Node) and item.bid == bid]


def read(stream: bytes, want: Want = Want()) -> Node:
    """The bitstream (bitstream() of a file) as a tree of what `want` asks for; BadBitcode if
    that cannot be read. The compiled reader when it is there, else read_python: the two
    give equal trees and refuse the same streams."""
    if _native is not None:
        return _native.read(stream, want, Node, Block, BadBitcode)
    return read_python(stream, want)


def read_python(stream: bytes, want: Want = Want()) -> Node:
    """read(), in Python: the reference the compiled reader is held to."""
    root = Node(TOP_LEVEL)
    _read_block(Reader(stream, 32), 2, root, {}, want, 0, _Budget(operand_budget(len(stream))))
    return root


def operand_budget(size: int) -> int:
    """How many abbreviation operands the records of a stream of `size` bytes may go through:
    twice its bits, and a little. An abbreviation of many literal operands makes a record of
    a few bits yield as many fields, which a stream of kilobytes could repeat into billions
    (in either reader); a record of LLVM's takes at least a bit an operand."""
    return 16 * size + 64


@dataclass(eq=False, repr=False)
class _Budget:
    """The operands a read may still go through (operand_budget)."""

    left: int


def _read_block(r: Reader, width: int, node: Node, blockinfo: dict[int, list[Abbrev]], want: Want,
                depth: int, budget: _Budget) -> None:
    """Read a block's contents (the top level's, for the root) into `node`, up to its END_BLOCK.
    `blockinfo`, block id -> abbreviations, is what BLOCKINFO blocks define; one read here
    adds to it."""
    bid = node.bid
    abbrevs: list[Abbrev] = list(blockinfo.get(bid, [])) if bid != TOP_LEVEL else []
    # BLOCKINFO is read whole whatever `want` says: the other blocks need what it defines.
    wanted = want.fields_of(bid) if bid != BLOCKINFO_BLOCK_ID else Want().fields_of(bid)
    limit = want.first.get(bid) if bid != BLOCKINFO_BLOCK_ID else None
    setbid: int | None = None  # in BLOCKINFO: the block id its abbreviations are for
    entries = 0
    while r.pos + width <= r.end:
        if limit is not None and entries >= limit:
            return
        code = r.fixed(width)
        if code == 0:  # END_BLOCK
            r.align32()
            return
        if code == 1:  # ENTER_SUBBLOCK
            sub = enter_block(r)
            entries += 1
            if sub.bid == BLOCKINFO_BLOCK_ID or want.enters(sub.bid):
                if depth >= MAX_DEPTH:
                    raise BadBitcode("blocks nested too deep")
                # A module's BLOCKINFO is its own: LLVM reads each module of a file (a split LTO
                # unit has two) with a cursor of its own, from what the top level defined.
                scope = {k: list(v) for k, v in blockinfo.items()} \
                    if bid == TOP_LEVEL and sub.bid == MODULE_BLOCK_ID else blockinfo
                child = Node(sub.bid, [], sub)
                _read_block(Reader(r.data, sub.start, sub.end), sub.width, child, scope, want, depth + 1, budget)
                if want.enters(sub.bid):
                    node.items.append(child)
            r.pos = sub.end
            continue
        if code == 2:  # DEFINE_ABBREV
            ops = define_abbrev(r)
            if bid == BLOCKINFO_BLOCK_ID:
                if setbid is None:
                    raise BadBitcode("abbreviation before SETBID")
                blockinfo.setdefault(setbid, []).append(ops)
            else:
                abbrevs.append(ops)
            continue
        entries += 1
        if code == 3:  # UNABBREV_RECORD: code, count, fields, all VBR6
            budget.left -= 2
            if budget.left < 0:
                raise BadBitcode(OVER_BUDGET)
            rec_code, n = r.vbr(6), r.vbr(6)
            if wanted(rec_code):
                values = [rec_code, *r.run(n, "vbr", 6)]
            else:
                r.skip_vbr6(n)
                values = [rec_code]
        else:
            if code - 4 >= len(abbrevs):
                raise BadBitcode(f"undefined abbreviation {code}")
            abbrev = abbrevs[code - 4]
            budget.left -= len(abbrev)
            if budget.left < 0:
                raise BadBitcode(OVER_BUDGET)
            if abbrev[0][0] == "lit" and not wanted(abbrev[0][1]):
                r.skip(abbrev)
                values = [abbrev[0][1]]
            else:
                values = _record(r, abbrev, want.blobs)
                if not wanted(values[0]):
                    values = values[:1]
        if bid == BLOCKINFO_BLOCK_ID and values[0] == 1:  # SETBID
            if len(values) < 2:
                raise BadBitcode("SETBID without a block id")
            setbid = values[1]
        node.items.append(values)
    if bid != TOP_LEVEL:
        raise BadBitcode("block without END_BLOCK")


def _record(r: Reader, abbrev: Abbrev, blobs: bool) -> list[int]:
    """The code and fields of one record laid out by `abbrev`; a blob as Want.blobs says."""
    if abbrev[-1][0] == "blob" and not blobs:
        values = read_record(r, abbrev[:-1])
        n = r.vbr(6)
        r.align32()
        values += [r.pos >> 3, n]
        r.pos += 8 * n
        r.align32()
        if r.pos > r.end:
            raise BadBitcode("read past the end")
        return values
    return read_record(r, abbrev)


def read_tree(data: bytes) -> Node:
    """A bitcode file's whole stream as a tree; BadBitcode if unreadable."""
    return read(bitstream(data))


# --- records --------------------------------------------------------------------------------------------


def metadata_strings(count: int, offset: int, blob: bytes) -> list[bytes]:
    """The strings of a METADATA_STRINGS record [count, offset, blob]: the blob holds `count`
    VBR6 lengths, then, from byte `offset`, the characters of the strings, abutting. BadBitcode
    if they do not fit in the blob."""
    if offset > len(blob):
        raise BadBitcode("bad METADATA_STRINGS offset")
    lengths = Reader(blob, 0, 8 * offset).run(count, "vbr", 6)
    out = []
    pos = offset
    for n in lengths:
        out.append(blob[pos : pos + n])
        pos += n
    if pos > len(blob):
        raise BadBitcode("METADATA_STRINGS runs past its blob")
    return out


_PADDING = (b"", b"\0", b"\0\0", b"\0\0\0")  # what follows a blob of each length mod 4, to a 32-bit boundary
# How relocate() writes MODULE_STRTAB's records: [module id, path as a blob], [hash words].
_ENTRY_ABBREV: Abbrev = [("lit", MST_CODE_ENTRY), ("vbr", 6), ("blob", 0)]
_HASH_ABBREV: Abbrev = [("lit", MST_CODE_HASH), ("array", 0), ("fixed", 32)]
# The blocks that hold MODULE_STRTAB: a shard's one MODULE_BLOCK.
_STRTAB_WANT = Want(enter=frozenset({MODULE_BLOCK_ID, MODULE_STRTAB_BLOCK_ID}))


def _vbr_bits(value: int, n: int) -> tuple[int, int]:
    """`value` as an n-bit VBR: its chunks packed into one int, and their number of bits."""
    hi = 1 << (n - 1)
    if value < hi:
        return value, n
    packed = bits = 0
    while value >= hi:
        packed |= ((value & (hi - 1)) | hi) << bits
        bits += n
        value >>= n - 1
    return packed | value << bits, bits + n


def _words(values: list[int]) -> int | None:
    """A record's fields after its code as 32-bit words packed into one int, the first lowest;
    None if one does not fit in 32 bits."""
    try:
        return int.from_bytes(struct.pack(f"<{len(values) - 1}I", *values[1:]), "little")
    except struct.error:
        return None


def _vbr6(value: int) -> tuple[int, int]:
    """_vbr_bits(value, 6), the one or two chunks of most values without its loop."""
    if value < 32:
        return value, 6
    if value < 1024:
        return (value & 31 | 32) | (value >> 5) << 6, 12
    return _vbr_bits(value, 6)


class _Writer:
    """Bits, least significant first, as a bitstream packs them. Whole 64-bit words leave the
    accumulator as they fill (one int grown bit by bit would make a long block quadratic);
    `out` always holds whole 32-bit words, so aligning `bits` to 32 aligns the stream."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.value = 0
        self.bits = 0

    def fixed(self, value: int, n: int) -> None:
        """`value` as n bits, n of any size: several fields packed into one int go in at once."""
        self.value |= value << self.bits
        self.bits += n
        if self.bits >= 64:
            whole = self.bits & ~63
            self.out += (self.value & ((1 << whole) - 1)).to_bytes(whole >> 3, "little")
            self.value >>= whole
            self.bits -= whole

    def vbr(self, value: int, n: int) -> None:
        self.fixed(*_vbr_bits(value, n))

    def align32(self) -> None:
        """Pad to a 32-bit boundary, and move what the accumulator holds to `out`."""
        self.bits = (self.bits + 31) & ~31
        self.out += self.value.to_bytes(self.bits // 8, "little")
        self.value = self.bits = 0

    def blob(self, data: bytes) -> None:
        """A blob operand: its length, then its bytes between 32-bit boundaries."""
        self.vbr(len(data), 6)
        self.blob_bytes(data)

    def blob_bytes(self, data: bytes) -> None:
        """A blob's bytes between 32-bit boundaries, its length written already."""
        self.align32()
        self.out += data
        self.out += bytes(-len(data) % 4)

    def abbrev(self, ops: Abbrev, width: int) -> None:
        """DEFINE_ABBREV of these operands, in a block whose abbreviation ids are `width` bits."""
        self.fixed(2, width)
        self.vbr(len(ops), 5)
        for kind, value in ops:
            if kind == "lit":
                self.fixed(1, 1)
                self.vbr(value, 8)
                continue
            self.fixed(0, 1)
            self.fixed({"fixed": 1, "vbr": 2, "array": 3, "char6": 4, "blob": 5}[kind], 3)
            if kind in ("fixed", "vbr"):
                self.vbr(value, 5)

    def data(self) -> bytes:
        self.align32()
        return bytes(self.out)


# Each top-level block's presence, no more (a module's length word jumps over it).
_MODULES_WANT = Want(enter=frozenset({MODULE_BLOCK_ID}), first={MODULE_BLOCK_ID: 0})


def module_count(data: bytes) -> int:
    """How many modules a bitcode file holds; BadBitcode if its top level cannot be read.

    Two for a split LTO unit (-fsplit-lto-unit, which -fwhole-program-vtables and
    -fsanitize=cfi imply): the ThinLTO module, then a regular-LTO module holding the vtables
    and type metadata, which lld links with every other regular-LTO module into one object.
    """
    return len(read(bitstream(data), _MODULES_WANT).blocks(MODULE_BLOCK_ID))


def module_paths(shard: bytes) -> list[str]:
    """The module paths a shard records, in its MODULE_STRTAB order."""
    return Strtab.of(shard).paths


def relocate(shard: bytes, rename: Callable[[str], str]) -> bytes:
    """The shard with each module path p recorded as rename(p); BadBitcode if unreadable.

    Only MODULE_STRTAB changes: it is written again (a path as a blob and a hash as 32-bit
    words, through two abbreviations of its own; any other record unabbreviated) and the length
    words of it and of the blocks around it are adjusted.
    Blocks are 32-bit aligned and a combined index holds no absolute offsets, so
    everything else is kept byte for byte.
    """
    return Strtab.of(shard).relocate(rename)


class Strtab:
    """A shard's MODULE_STRTAB, read once: its paths, and the shard relocated (remote/action.py
    needs both, the paths to rank them before it renames them).

    Read and written in C (ltowrap._bitcode.strtab_paths and strtab_relocate, from the decoded
    stream) when the compiled reader runs (bitcode.implementation()), else by StrtabPython, the
    reference: the same paths, the same bytes, the same BadBitcode, and rename asked the same
    paths in the same order. The C one hands a shard it does not write (one whose length words
    would outgrow 32 bits) to StrtabPython."""

    def __init__(self, stream: bytes, paths: list[str], native: ModuleType) -> None:
        self.stream, self.paths, self._native = stream, paths, native

    @classmethod
    def of(cls, shard: bytes) -> Strtab:
        native = _native  # read at the call: LTOWRAP_NATIVE, bench/reader.py
        if native is None or not hasattr(native, "strtab_relocate"):
            return StrtabPython.of(shard)
        stream = bitstream(shard)
        return cls(stream, native.strtab_paths(stream, _STRTAB_WANT, BadBitcode), native)

    def relocate(self, rename: Callable[[str], str]) -> bytes:
        names = [rename(path).encode("utf-8", "surrogateescape") for path in self.paths]
        shard = self._native.strtab_relocate(self.stream, _STRTAB_WANT, names, BadBitcode)
        if shard is NotImplemented:  # the Python one writes it, the same names decoded (encoded again: the same bytes)
            again = iter(names)
            return StrtabPython.of(self.stream).relocate(lambda _: next(again).decode("utf-8", "surrogateescape"))
        return shard


class StrtabPython(Strtab):
    """Strtab, in Python: the reference the compiled one is held to. It keeps the tree it read
    (the block, the blocks around it, its records), which its relocate() writes from."""

    def __init__(self, stream: bytes, parents: list[Block], strtab: Node | None) -> None:
        self.stream, self.parents, self.strtab = stream, parents, strtab
        self.records = [item for item in strtab.items if isinstance(item, list)] if strtab is not None else []
        # An entry (MST_CODE_ENTRY: the module id, then the path's characters) as opposed to a
        # hash record; a shard names hundreds of modules, so this is spelled out, not called.
        try:
            self.paths = [bytes(v[2:]).decode("utf-8", "surrogateescape") for v in self.records
                          if v[0] == MST_CODE_ENTRY and len(v) >= 2]
        except ValueError:
            raise BadBitcode("a character above 255 in a string") from None

    @classmethod
    def of(cls, shard: bytes) -> StrtabPython:
        stream = bitstream(shard)
        found: list[tuple[list[Block], Node]] = []

        def find(node: Node, parents: list[Block]) -> None:
            for sub in node.items:
                if isinstance(sub, Node) and sub.block is not None:
                    if sub.bid == MODULE_STRTAB_BLOCK_ID:
                        found.append((parents, sub))
                    find(sub, [*parents, sub.block])

        find(read(stream, _STRTAB_WANT), [])
        if len(found) > 1:
            raise BadBitcode("two MODULE_STRTAB blocks")
        return cls(stream, *found[0]) if found else cls(stream, [], None)

    def relocate(self, rename: Callable[[str], str]) -> bytes:
        stream, strtab = self.stream, self.strtab
        if strtab is None or strtab.block is None:
            raise BadBitcode("no MODULE_STRTAB block")
        block = strtab.block
        w = _Writer()
        # A path as a blob and a hash as 32-bit fields, through abbreviations of the block's own
        # (LLVM's reader gives a record that takes no blob its bytes as fields): unabbreviated,
        # every character would be a VBR6 field written bit by bit here, and a shard names
        # every module its backend reads. Abbreviation ids 4 and 5 need 3 bits.
        abbreviated = block.width >= 3
        if abbreviated:
            w.abbrev(_ENTRY_ABBREV, block.width)
            w.abbrev(_HASH_ABBREV, block.width)
        width = block.width
        # The records' bits gather in one int (`value`, `bits` of it) between two blobs; a blob
        # starts on a 32-bit boundary, so there they leave as whole words and the blob's bytes
        # follow. The block's records are mostly entries and hashes that alternate, so this
        # is _Writer's packing without a call for each field (a shard names every module its
        # backend reads, and a link relocates a shard a job).
        out = [bytes(w.out)]
        value, bits = w.value, w.bits
        paths = iter(self.paths)  # the entries' paths, decoded once (in the records' order)
        for values in self.records:
            code = values[0]
            if code == MST_CODE_ENTRY and len(values) >= 2:  # a path, as in __init__
                path = rename(next(paths)).encode("utf-8", "surrogateescape")
                if abbreviated:  # the abbreviation's id, the module id, the blob's length, then its bytes
                    module_id = values[1]
                    module_id, id_bits = (module_id, 6) if module_id < 32 else _vbr6(module_id)
                    n = len(path)
                    length, length_bits = _vbr6(n)
                    value |= (4 | module_id << width | length << (width + id_bits)) << bits
                    bits = (bits + width + id_bits + length_bits + 31) & ~31
                    out += (value.to_bytes(bits >> 3, "little"), path, _PADDING[-n % 4])
                    value = bits = 0
                    continue
                values = [*values[:2], *path]
            elif abbreviated and code == MST_CODE_HASH and len(values) > 1 and (words := _words(values)) is not None:
                # The count, then each word as 32 bits.
                n = len(values) - 1
                count, count_bits = (n, 6) if n < 32 else _vbr6(n)
                value |= (5 | count << width | words << (width + count_bits)) << bits
                bits += width + count_bits + 32 * n
                if bits >= 4096:  # hashes with no entry between: whole words out, as _Writer does
                    whole = bits & ~63
                    out.append((value & ((1 << whole) - 1)).to_bytes(whole >> 3, "little"))
                    value >>= whole
                    bits -= whole
                continue
            w.value, w.bits, w.out = value, bits, bytearray()
            w.fixed(3, width)  # UNABBREV_RECORD
            w.vbr(values[0], 6)
            w.vbr(len(values) - 1, 6)
            for v in values[1:]:
                w.vbr(v, 6)
            out.append(bytes(w.out))
            value, bits = w.value, w.bits
        w.value, w.bits, w.out = value, bits, bytearray()
        w.fixed(0, block.width)  # END_BLOCK
        out.append(w.data())
        body = b"".join(out)
        delta = len(body) // 4 - (block.end - block.start) // 32
        moved = bytearray(stream[: block.start // 8] + body + stream[block.end // 8 :])
        for around in (*self.parents, block):
            at = around.length_at // 8
            words = int.from_bytes(moved[at : at + 4], "little") + delta
            moved[at : at + 4] = words.to_bytes(4, "little")
        return bytes(moved)
