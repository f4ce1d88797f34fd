"""LinkCommand + the inputs' bytes -> LinkPlan: which inputs are bitcode and what each becomes.

Every bitcode module, whether a file on the command line or a member of an archive, is
copied into the cache's module store as `<position in the link>-<digest of its bytes>.o`,
and the thin-link sees it under that path:
- the position first keeps the sorted order of the paths (the order a backend imports
  modules in, which the shard keys keep: shardkey.py) the order of the link line;
- the store keeps the bytes, verified, once per content. Two identical inputs get two
  positions, so two module IDs.
With --fat-lto-objects, an ELF object (or archive member) that carries a `.llvm.lto`
section is, as for lld, the module in that section: its native code is not linked.
Linker scripts (an input that is one, like libc.so, and -T) are followed as lld follows
them (ldscript.py): what they make lld read, and the paths it finds absent first, are
part of what a cached thin-link or link depends on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..cache import Cache
from ..cachekey import digest_bytes
from ..errors import Reason, Unsupported
from ..formats import archive, elf
from ..formats.bitcode import BadBitcode, module_count
from ..fsutil import read_bytes
from ..linkline import ldscript
from ..linkline.cmdline import Arg, LinkCommand
from ..magic import THIN_ARCHIVE, is_archive, is_bitcode, read_head
from ..optrecords import record_key


@dataclass(frozen=True)
class Module:
    """One bitcode module of the link: its digest, its store path and how the user named it."""

    digest: str  # xxh3-128 of the bitcode
    path: str  # store path: the module ID in the thin-link and the backend's input
    origin: str  # as the user named it: 'a.o' or 'liblua.a(lapi.o)'
    size: int
    record_key: str = ""  # optrecords.record_key of the bytes: finds the compile's options
    split: bool = False  # a split LTO unit: a ThinLTO module and a regular-LTO one (bitcode.module_count)
    new: bool = False  # its bytes were not in the store at its position: no backend object of it can be cached
    lld_id: str = ""  # what in-process lld calls it: the path as given, or 'd/lib.a(m.o at 88)' (finallink.lto_object_name)

    @classmethod
    def of(cls, data: bytes, path: str, origin: str, container: bytes | None = None, new: bool = False,
           lld_id: str = "", digest: str = "") -> Module:
        """container: the FatLTO object the bitcode came from, whose bytes the record is under;
        lld_id: the module's name in in-process lld (default: origin); digest: digest_bytes(data),
        if made already."""
        try:
            split = module_count(data) > 1
        except BadBitcode:  # lld will say what is wrong with it (the thin-link fails)
            split = False
        return cls(digest or digest_bytes(data), path, origin, len(data), record_key(data if container is None else container),
                   split, new, lld_id or origin)


@dataclass(frozen=True)
class Piece:
    """What one element of the original link line becomes."""

    arg: Arg
    members: tuple[Module | str, ...] = ()  # bitcode modules and native member files, in order
    rewritten: bool = False
    wrap_lib: bool = False  # an archive outside --whole-archive: keep its laziness
    names: tuple[str, ...] = ()  # per member: how lld names a native member ('lib.a(m.o)'), '' for a module


@dataclass(frozen=True)
class LinkPlan:
    """The link's inputs, read: its pieces, bitcode modules and other inputs, in link order."""

    command: LinkCommand
    pieces: tuple[Piece, ...]
    modules: tuple[Module, ...]
    other_inputs: tuple[str, ...]  # input files left as they are (native, shared, scripts)
    scripts: ldscript.ScriptReads  # what linker scripts make lld read (files besides other_inputs), and probe
    lld_major: int = 0  # the linker's major release (what it names LTO objects in a map: finallink)
    # The input files it read whole (a bitcode module, a FatLTO object, a regular archive with
    # bitcode), by path: the digest of their bytes (the link memo's manifest takes it rather than
    # read them again). Not a thin archive: the memo lists its members, files of their own.
    read: dict[str, str] = field(default_factory=dict)

    def by_path(self) -> dict[str, Module]:
        return {m.path: m for m in self.modules}

    def tokens(self, replace: Callable[[Module], list[str]], eager: bool = False) -> list[str]:
        """The link line with each bitcode module replaced by the files replace(module) gives (none: dropped).

        --start-group/--end-group are dropped once an archive became a --start-lib group:
        lld may not nest the two, and it resolves archives independently of position anyway.

        eager (the final link): the thin-link already chose which bitcode members and lazy
        files the link uses, so their objects are linked unconditionally. Left lazy, a member
        whose every reference was inlined away would be dropped with its constructors and
        definitions, which in-process LTO keeps. Native members stay lazy.

        An archive's members keep their order, natives and modules alike: in a --whole-archive
        archive it is the order of their sections in the output (Kbuild puts head_64.o first in
        vmlinux.a, whose startup_64 must open the kernel's .head.text) and of symbol resolution.
        """
        out: list[str] = []
        for p in self.pieces:
            if p.arg.group_marker or p.arg.backends_only:
                continue
            if not p.rewritten:
                out += p.arg.tokens
                continue
            runs: list[tuple[bool, list[str]]] = []  # (lazy, files), in member order
            for m in p.members:
                lazy, files = (not eager, replace(m)) if isinstance(m, Module) else (True, [m])
                if runs and runs[-1][0] == lazy:
                    runs[-1][1].extend(files)
                elif files:
                    runs.append((lazy, list(files)))
            for lazy, files in runs:
                if lazy:
                    out += ["--start-lib", *files, "--end-lib"] if p.wrap_lib else files
                elif p.arg.lazy:  # inside the user's own --start-lib: step out for them
                    out += ["--end-lib", *files, "--start-lib"]
                else:
                    out += files
        return out


def build(command: LinkCommand, cache: Cache, lld_major: int) -> LinkPlan:
    """The plan; each bitcode module is stored in the cache's module store, under its position."""
    pieces: list[Piece] = []
    modules: list[Module] = []
    others: list[str] = []
    scripts: list[Arg] = []
    read: dict[str, str] = {}

    def module(data: bytes, origin: str, container: bytes | None = None, lld_id: str = "") -> Module:
        digest = digest_bytes(data)
        stored, new = cache.store_module(f"{len(modules):06d}-{digest}", data)
        m = Module.of(data, stored, origin, container, new, lld_id, digest)
        modules.append(m)
        return m

    fat = command.fat_lto_objects
    native: set[str] = set()  # archives found to hold no module (a link names libgcc.a twice)
    for arg in command.args:
        path = arg.input
        if path is None:
            pieces.append(Piece(arg))
            continue
        head = read_head(path, 18)
        if is_bitcode(head):
            whole = module(_read(path), path)
            read[path] = whole.digest
            pieces.append(Piece(arg, (whole,), rewritten=True))
        elif fat and elf.is_relocatable(head) and (bitcode := fat_bitcode(data := _read(path), path)) is not None:
            # lld links a FatLTO object's bitcode, not its native code: in the final link, its
            # place goes to the object compiled from that bitcode, as for any module.
            read[path] = digest_bytes(data)
            pieces.append(Piece(arg, (module(bitcode, path, container=data),), rewritten=True))
        elif is_archive(head):
            if path in native or (not archive.has_bitcode_member(path)
                                  and not (fat and archive.may_hold_fat_member(path))):
                # reads headers only (or, for --fat-lto-objects, scans once): libc.a stays cheap
                native.add(path)
                others.append(path)
                pieces.append(Piece(arg))
                continue
            blob = archive.read_archive(path)
            if not blob.startswith(THIN_ARCHIVE):
                read[path] = digest_bytes(blob)
            expanded: list[Module | str] = []
            names: list[str] = []
            for m in archive.members_of(blob, path):
                data = m.read()
                origin = f"{path}({m.name})"
                # lld's names: a bitcode member's module, and a native member in a map (toString(InputFile))
                lld_id = f"{path}({os.path.basename(m.name)} at {m.offset})"
                if is_bitcode(data[:4]):
                    expanded.append(module(data, origin, lld_id=lld_id))
                    names.append("")
                elif fat and (bitcode := fat_bitcode(data, origin)) is not None:
                    expanded.append(module(bitcode, origin, container=data, lld_id=lld_id))
                    names.append("")
                else:
                    expanded.append(cache.store_module(digest_bytes(data), data, ".native.o")[0])
                    names.append(f"{path}({os.path.basename(m.name)})")
            wrap = not arg.whole_archive and not arg.lazy
            pieces.append(Piece(arg, tuple(expanded), rewritten=True, wrap_lib=wrap, names=tuple(names)))
        else:
            others.append(path)
            pieces.append(Piece(arg))
            if ldscript.is_script(head):
                scripts.append(arg)
    if not modules:
        raise Unsupported(Reason.NO_BITCODE)
    return LinkPlan(command, tuple(pieces), tuple(modules), tuple(others), script_reads(command, scripts, lld_major),
                    lld_major, read)


def script_reads(command: LinkCommand, inputs: list[Arg], lld_major: int) -> ldscript.ScriptReads:
    """What the link's linker scripts make lld read and probe: the -T scripts (searched as lld
    searches them) and what they name, and what the script inputs name (`unknown` says why
    that cannot be told)."""
    found: list[str] = []
    absent: list[str] = []
    dirs = command.search_dirs

    def follow(path: str, static: bool) -> str:
        got = ldscript.reads(path, search_dirs=dirs, lld_major=lld_major, sysroot=command.sysroot, static=static,
                             nostdlib=command.nostdlib)
        found.extend(got.found)
        absent.extend(got.absent)
        if not got.unknown and got.search_dirs != tuple(dirs):
            return f"{path}: SEARCH_DIR changes where the rest of the link finds libraries"
        return got.unknown

    unknown = ""
    for name in command.scripts:
        path, missed = ldscript.find_script(name, search_dirs=dirs, sysroot=command.sysroot)
        absent.extend(missed)
        if path is None:
            unknown = unknown or f"lld fails: cannot find linker script {name}"
            continue
        found.append(path)
        unknown = unknown or follow(path, static=False)
    for arg in inputs:
        assert arg.input is not None
        unknown = unknown or follow(arg.input, arg.static)
    return ldscript.ScriptReads(tuple(dict.fromkeys(found)), tuple(dict.fromkeys(absent)), tuple(dirs), unknown)


def fat_bitcode(data: bytes, origin: str) -> bytes | None:
    """The bitcode lld links in place of a FatLTO object under --fat-lto-objects: its
    `.llvm.lto` section (None: a plain native object, linked as it is)."""
    try:
        bitcode = elf.section(data, elf.LLVM_LTO)
    except elf.BadElf as e:
        raise Unsupported(Reason.UNREADABLE_INPUT, f"cannot read the sections of {origin}: {e}") from e
    if bitcode is not None and not is_bitcode(bitcode[:4]):
        raise Unsupported(Reason.UNREADABLE_INPUT, f"{origin}: its .llvm.lto section holds no bitcode")
    return bitcode


def _read(path: str) -> bytes:
    try:
        return read_bytes(path)
    except OSError as e:
        raise Unsupported(Reason.UNREADABLE_INPUT, f"cannot read {path!r}: {e.strerror}") from e
