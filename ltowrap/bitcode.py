"""A path-independent fingerprint of a ThinLTO index shard, read with a small bitstream reader.

An index shard (`M.o.thinlto.bc`) records, in its MODULE_STRTAB block, the path of every
module the backend compile will read, and lld writes whatever paths it was given:
ltowrap's store paths, or lld's own temporary names for archive members under DTLTO
(`libb.a(b.o at 80).2.5CF1.o`, different for every link). The native object depends on the
modules' contents, not on their paths. The fingerprint is the shard with each module
path replaced by the digest of that module's bytes; every other block is taken as its
raw, 32-bit aligned words.

LLVM bitstream, as far as needed here: a stream of abbreviation ids of the current width;
0 END_BLOCK, 1 ENTER_SUBBLOCK (block id vbr8, new width vbr4, align 32, length in words
fixed32), 2 DEFINE_ABBREV, 3 UNABBREV_RECORD (code vbr6, count vbr6, operands vbr6);
ids >= 4 are records laid out by a defined abbreviation. Abbreviations for a block may
also come from the BLOCKINFO block (id 0, SETBID record 1).
"""

from __future__ import annotations

from collections.abc import Callable

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
    if kind == "lit":
        return value
    if kind == "fixed":
        return r.fixed(value)
    if kind == "vbr":
        return r.vbr(value)
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


def shard_identity(shard: bytes, digest_of: Callable[[str], str]) -> str:
    """What the backend key takes of a shard: its fingerprint's digest, or its raw bytes' digest
    (path and all) when it cannot be read."""
    from .cachekey import digest_bytes

    try:
        return "fingerprint:" + digest_bytes(fingerprint(shard, digest_of))
    except (BadBitcode, OSError):
        return "raw:" + digest_bytes(shard)


def fingerprint(shard: bytes, digest_of: Callable[[str], str]) -> bytes:
    """The shard's contents with module paths replaced by digest_of(path); BadBitcode if unreadable."""
    if shard[:4] == b"\xde\xc0\x17\x0b":  # wrapper header: magic, version, offset, size
        offset = int.from_bytes(shard[8:12], "little")
        shard = shard[offset : offset + int.from_bytes(shard[12:16], "little")]
    if shard[:4] != b"BC\xc0\xde":
        raise BadBitcode("not bitcode")
    out: list[bytes] = []
    blockinfo: dict[int, list[Abbrev]] = {}
    _walk(_Reader(shard, 32), 2, None, blockinfo, digest_of, out)
    return b"".join(out)


def _walk(r: _Reader, width: int, block: int | None, blockinfo: dict[int, list[Abbrev]],
          digest_of: Callable[[str], str], out: list[bytes]) -> None:
    abbrevs: list[Abbrev] = list(blockinfo.get(block, [])) if block is not None else []
    current_bid: int | None = None
    while r.pos + width <= r.end:
        code = r.fixed(width)
        if code == 0:  # END_BLOCK
            r.align32()
            return
        if code == 1:  # ENTER_SUBBLOCK
            bid, new_width = r.vbr(8), r.vbr(4)
            r.align32()
            words = r.fixed(32)
            start, end = r.pos, r.pos + 32 * words
            if end > r.end:
                raise BadBitcode("block runs past the end")
            if bid in (MODULE_BLOCK, MODULE_STRTAB, BLOCKINFO):
                out.append(f"<{bid}>".encode())
                _walk(_Reader(r.data, start, end), new_width, bid, blockinfo, digest_of, out)
                out.append(f"</{bid}>".encode())
            else:  # no paths inside: its words, as they are
                out.append(f"<{bid}:{words}>".encode() + r.data[start // 8 : end // 8])
            r.pos = end
            continue
        if code == 2:
            ops = _define_abbrev(r)
            if block == BLOCKINFO:
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
        if block == BLOCKINFO and values and values[0] == 1:  # SETBID
            current_bid = values[1]
        if block == MODULE_STRTAB and values[0] == MST_ENTRY and len(values) >= 2:
            path = bytes(values[2:]).decode("utf-8", "surrogateescape")
            out.append(f"entry {values[1]} {digest_of(path)};".encode())
        else:
            out.append(("rec " + " ".join(map(str, values)) + ";").encode())
    if block is not None:
        raise BadBitcode("block without END_BLOCK")
