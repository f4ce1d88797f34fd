"""Recognise inputs by their first bytes, never by their names (Kbuild's built-in.o is an archive)."""

from __future__ import annotations

BITCODE = b"BC\xc0\xde"
BITCODE_WRAPPER = b"\xde\xc0\x17\x0b"
ARCHIVE = b"!<arch>\n"
THIN_ARCHIVE = b"!<thin>\n"
ELF = b"\x7fELF"


def is_bitcode(head: bytes) -> bool:
    return head.startswith(BITCODE) or head.startswith(BITCODE_WRAPPER)


def is_archive(head: bytes) -> bool:
    return head.startswith(ARCHIVE) or head.startswith(THIN_ARCHIVE)


def read_head(path: str, size: int = 8) -> bytes:
    """The first bytes of a file, or b"" for anything that cannot be read as a regular file."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""
