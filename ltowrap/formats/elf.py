"""One question asked of ELF relocatable objects, the contents of a section by name; and one
object written, of undefined references only (undefined_references).

A FatLTO object (`clang -ffat-lto-objects`) is a native ELF object that also carries the
module's bitcode in a section called `.llvm.lto`. lld with --fat-lto-objects links the
bitcode instead of the native code of every ELF relocatable object (or archive member)
in which LLVM's IRObjectFile::findBitcodeInMemBuffer finds one: the first section of
that name, whatever its type.

ELF as far as needed: the identification bytes (class, byte order), e_type, and the
section header table (e_shoff, e_shentsize, e_shnum, e_shstrndx), with the extended
numbering of objects with 0xff00 sections or more (e_shnum 0: the count is section 0's
sh_size; e_shstrndx SHN_XINDEX: the index is section 0's sh_link). pyelftools would
answer it too, but its import and its parse of each object cost far more than these few
reads; fat links read every ELF input.
"""

from __future__ import annotations

import struct

from ..magic import ELF

ET_REL = 1
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF
LLVM_LTO = b".llvm.lto"


class BadElf(ValueError):
    pass


# Per class: e_shoff's format and the offsets of e_shoff, e_shentsize, e_shnum and
# e_shstrndx; a section header's format (sh_name, sh_type, sh_flags, sh_addr, sh_offset,
# sh_size, sh_link, ...) and size.
_LAYOUT = {
    1: ("I", 0x20, 0x2E, 0x30, 0x32, "IIIIIIIIII", 40),  # ELFCLASS32
    2: ("Q", 0x28, 0x3A, 0x3C, 0x3E, "IIQQQQIIQQ", 64),  # ELFCLASS64
}


def is_relocatable(head: bytes) -> bool:
    """Is this the start of an ELF relocatable object (ET_REL), as lld's file_magic sees it?"""
    if len(head) < 18 or not head.startswith(ELF) or head[5] not in (1, 2):
        return False
    return int.from_bytes(head[16:18], "little" if head[5] == 1 else "big") == ET_REL


def section(data: bytes, name: bytes) -> bytes | None:
    """The contents of the first section called `name` in an ELF relocatable object.

    None if `data` is no ET_REL ELF object or has no such section; BadElf if it is one
    but its tables cannot be read.
    """
    if not is_relocatable(data) or data[4] not in _LAYOUT:
        return None
    order = "<" if data[5] == 1 else ">"
    off_fmt, shoff_at, shentsize_at, shnum_at, shstrndx_at, sh_fmt, sh_size_min = _LAYOUT[data[4]]
    try:
        (shoff,) = struct.unpack_from(order + off_fmt, data, shoff_at)
        (shentsize, shnum, shstrndx) = (struct.unpack_from(order + "H", data, at)[0]
                                        for at in (shentsize_at, shnum_at, shstrndx_at))
        if shoff == 0:
            return None  # no section header table
        if shentsize < sh_size_min:
            raise BadElf(f"section headers of {shentsize} bytes")

        def header(i: int) -> tuple[int, int, int, int, int]:
            """(sh_name, sh_type, sh_offset, sh_size, sh_link) of section i."""
            fields = struct.unpack_from(order + sh_fmt, data, shoff + i * shentsize)
            return fields[0], fields[1], fields[4], fields[5], fields[6]

        first = header(0)
        if shnum == 0:
            shnum = first[3]
        if shstrndx == SHN_XINDEX:
            shstrndx = first[4]
        if shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
            raise BadElf("section header table runs past the end")
        _, _, strtab_off, strtab_size, _ = header(shstrndx)
        names = data[strtab_off : strtab_off + strtab_size]
        for i in range(shnum):
            sh_name, sh_type, sh_offset, sh_size, _ = header(i)
            end = names.find(b"\0", sh_name)
            if sh_name < len(names) and names[sh_name : end if end >= 0 else len(names)] == name:
                if sh_type == SHT_NOBITS:
                    return b""
                if sh_offset + sh_size > len(data):
                    raise BadElf(f"section {name.decode(errors='replace')} runs past the end")
                return data[sh_offset : sh_offset + sh_size]
    except struct.error as e:
        raise BadElf(str(e)) from e
    return None


def undefined_references(names: list[str], like: bytes) -> bytes:
    """An ELF relocatable object that only references `names` (global, undefined, no section
    uses them), for the target of the object `like` (its class, byte order, OS ABI, machine
    and flags). Linked, it makes lld extract the archive members that define those names,
    and nothing else: no relocation, so no section is kept alive by it (--gc-sections)."""
    if like[:4] != ELF or like[4] not in _LAYOUT or like[5] not in (1, 2):
        raise BadElf("not an ELF object")
    wide, order = like[4] == 2, "<" if like[5] == 1 else ">"
    machine = struct.unpack_from(order + "H", like, 0x12)[0]
    flags = struct.unpack_from(order + "I", like, 0x30 if wide else 0x24)[0]
    encoded = [n.encode("utf-8", "surrogateescape") + b"\0" for n in names]
    strtab = b"\0" + b"".join(encoded)
    offsets, at = [], 1
    for e in encoded:
        offsets.append(at)
        at += len(e)
    sym = order + ("IBBHQQ" if wide else "IIIBBH")
    global_undefined = 0x10  # st_info STB_GLOBAL, STT_NOTYPE; st_shndx SHN_UNDEF (0)
    symtab = b"\0" * struct.calcsize(sym) + b"".join(
        struct.pack(sym, off, global_undefined, 0, 0, 0, 0) if wide else struct.pack(sym, off, 0, 0, global_undefined, 0, 0)
        for off in offsets)
    shstrtab = b"\0.strtab\0.symtab\0.shstrtab\0"
    header_size = 64 if wide else 52
    body = bytearray(header_size)
    placed = []
    for blob, align in ((strtab, 1), (symtab, 8 if wide else 4), (shstrtab, 1)):
        body += b"\0" * (-len(body) % align)
        placed.append((len(body), len(blob)))
        body += blob
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    shdr = order + _LAYOUT[like[4]][5]
    sections = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                (1, 3, 0, 0, *placed[0], 0, 0, 1, 0),  # .strtab: SHT_STRTAB
                (9, 2, 0, 0, *placed[1], 1, 1, 8 if wide else 4, struct.calcsize(sym)),  # .symtab; 1 local
                (17, 3, 0, 0, *placed[2], 0, 0, 1, 0)]  # .shstrtab
    for s in sections:
        body += struct.pack(shdr, *s)
    ident = ELF + bytes([like[4], like[5], 1, like[7]]) + b"\0" * 8
    if wide:
        header = struct.pack(order + "16sHHIQQQIHHHHHH", ident, ET_REL, machine, 1, 0, 0, shoff, flags, 64, 0, 0, 64,
                             len(sections), 3)
    else:
        header = struct.pack(order + "16sHHIIIIIHHHHHH", ident, ET_REL, machine, 1, 0, 0, shoff, flags, 52, 0, 0, 40,
                             len(sections), 3)
    body[:header_size] = header
    return bytes(body)
