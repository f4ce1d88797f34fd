"""Read `ar` archives (GNU, BSD and thin) in Python: list members and their bytes.

Format (GNU/SysV):  "!<arch>\\n" then, per member, a 60-byte header
    name[16] mtime[12] uid[6] gid[6] mode[8] size[10] "`\\n"
followed by `size` bytes of data, padded to an even offset. Special names:
"/" and "/SYM64/" are symbol tables, "//" is the long-name table, "/123" is an
offset into it, "name/" is a short name. BSD archives spell long names as
"#1/<len>" with the name stored at the start of the data. Thin archives
("!<thin>\\n") store no member data: names are paths relative to the archive's
directory, and the symbol and long-name tables are the only data present.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import Reason, Unsupported
from ..magic import ARCHIVE, THIN_ARCHIVE

_HEADER = 60
_SPECIAL = (b"/", b"//", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED")  # symbol and long-name tables


def _header(path: str, header: bytes, pos: int) -> tuple[bytes, int]:
    """A member header's raw name (blank-padded field stripped) and data size; Unsupported if malformed."""
    if len(header) < _HEADER or header[58:60] != b"`\n":
        raise Unsupported(Reason.BAD_ARCHIVE, f"{path!r}: bad member header at offset {pos}")
    size_field = header[48:58].strip()
    if not size_field.isdigit():  # bytes.isdigit: ASCII digits only
        raise Unsupported(Reason.BAD_ARCHIVE, f"{path!r}: bad member size at offset {pos}")
    return header[:16].rstrip(b" "), int(size_field)


@dataclass(frozen=True)
class Member:
    """One member of an archive: its name, and its bytes or (thin archive) where they are."""

    name: str
    # Regular archives: the member's bytes. Thin archives: None, read `path` instead.
    data: bytes | None
    path: str | None = None
    offset: int = 0  # where its header starts in the archive: lld names a bitcode member `a.a(m.o at OFFSET)`

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError as e:
            raise Unsupported(Reason.UNREADABLE_INPUT, f"thin archive member {self.path!r} unreadable: {e.strerror}") from e


def read_members(path: str) -> list[Member]:
    """Every object member in archive order (duplicates kept); raises Unsupported if malformed."""
    return members_of(read_archive(path), path)


def read_archive(path: str) -> bytes:
    """The archive file's bytes (members_of reads them); Unsupported if it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise Unsupported(Reason.UNREADABLE_INPUT, f"cannot read archive {path!r}: {e.strerror}") from e


def members_of(blob: bytes, path: str) -> list[Member]:
    """read_members of the archive `path` whose bytes are `blob`."""
    thin = blob.startswith(THIN_ARCHIVE)
    if not (thin or blob.startswith(ARCHIVE)):
        raise Unsupported(Reason.BAD_ARCHIVE, f"{path!r} is not an archive")
    base = os.path.dirname(path)
    members: list[Member] = []
    longnames = b""
    pos = len(ARCHIVE)
    while pos < len(blob):
        if blob[pos : pos + 1] == b"\n":  # some writers pad with an extra newline
            pos += 1
            continue
        header_at = pos
        name_field, size = _header(path, blob[pos : pos + _HEADER], pos)
        raw_name = name_field.decode("latin-1")
        data_start = pos + _HEADER
        special = name_field in _SPECIAL
        # In a thin archive only the tables carry data.
        stored = size if (not thin or special) else 0
        if data_start + stored > len(blob):
            raise Unsupported(Reason.BAD_ARCHIVE, f"{path!r}: member at offset {pos} is truncated")
        data = blob[data_start : data_start + stored]
        pos = data_start + stored + (stored & 1)
        if raw_name == "//":
            longnames = data
            continue
        if special:
            continue
        name, data = _member_name(raw_name, data, longnames, path)
        if name.startswith("__.SYMDEF"):  # a BSD symbol table under a long name
            continue
        if thin:
            member_path = name if os.path.isabs(name) else os.path.join(base, name)
            members.append(Member(name=name, data=None, path=member_path, offset=header_at))
        else:
            members.append(Member(name=name, data=data, offset=header_at))
    return members


def _member_name(raw: str, data: bytes, longnames: bytes, path: str) -> tuple[str, bytes]:
    if raw.startswith("#1/"):  # BSD: the name leads the data
        if not raw[3:].isdigit() or int(raw[3:]) > len(data):
            raise Unsupported(Reason.BAD_ARCHIVE, f"{path!r}: bad BSD name length {raw!r}")
        n = int(raw[3:])
        return data[:n].rstrip(b"\0").decode("utf-8", "surrogateescape"), data[n:]
    if raw.startswith("/") and raw[1:].isdigit():
        offset = int(raw[1:])
        end = longnames.find(b"/\n", offset)
        if offset >= len(longnames) or end < 0:
            raise Unsupported(Reason.BAD_ARCHIVE, f"{path!r}: bad long-name offset {offset}")
        return longnames[offset:end].decode("utf-8", "surrogateescape"), data
    return raw[:-1] if raw.endswith("/") else raw, data


def may_hold_fat_member(path: str) -> bool:
    """Could this archive hold a FatLTO member (an ELF object with a `.llvm.lto` section)?

    A necessary condition, read in one pass: the section's name appears in the archive (or,
    for a thin archive, in a member). False for libc.a and every other archive of plain
    objects, whose members then stay unread.
    """
    from .elf import LLVM_LTO

    marker = LLVM_LTO + b"\0"  # as the section name table stores it
    try:
        with open(path, "rb") as f:
            blob = f.read()
        if blob.startswith(ARCHIVE):
            return marker in blob
        return any(marker in m.read() for m in read_members(path))
    except (OSError, Unsupported):
        return False


def has_bitcode_member(path: str) -> bool:
    """Does a regular archive hold a bitcode member? Reads only headers and 4 bytes a member:
    one pread a member (a header and the 4 bytes after it), at the offsets the headers give,
    so an archive of hundreds of native members (libgcc.a) costs a few hundred small reads.

    Thin archives are answered by read_members. A malformed archive answers False here: the
    link then passes through, and the linker reports it.
    """
    from ..magic import is_bitcode

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if os.pread(fd, len(ARCHIVE), 0) != ARCHIVE:
            return any(is_bitcode(m.read()[:4]) for m in read_members(path))
        pos = len(ARCHIVE)
        while True:
            chunk = os.pread(fd, _HEADER + 4, pos)  # a header and its data's first 4 bytes
            if len(chunk) < _HEADER:
                return False
            name, size = _header(path, chunk[:_HEADER], pos)
            start = pos + _HEADER
            head = chunk[_HEADER:]
            if name.startswith(b"#1/"):  # BSD: the name comes first
                n = int(name[3:]) if name[3:].isdigit() else 0
                head = os.pread(fd, 4, start + n)
            if name not in _SPECIAL and is_bitcode(head):
                return True
            pos = start + size + (size & 1)
    except (OSError, Unsupported):
        return False
    finally:
        os.close(fd)
