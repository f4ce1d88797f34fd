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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import archive, elf
from .cache import Cache
from .cachekey import digest_bytes
from .cmdline import Arg, LinkCommand
from .errors import Reason, Unsupported
from .magic import is_archive, is_bitcode, read_head
from .records import record_key


@dataclass(frozen=True)
class Module:
    digest: str  # xxh3-128 of the bitcode
    path: str  # store path: the module ID in the thin-link and the backend's input
    origin: str  # as the user named it: 'a.o' or 'liblua.a(lapi.o)'
    size: int
    record_key: str = ""  # records.record_key of the bytes: finds the compile's options

    @classmethod
    def of(cls, data: bytes, path: str, origin: str, container: bytes | None = None) -> Module:
        """container: the FatLTO object the bitcode came from, whose bytes the record is under."""
        return cls(digest_bytes(data), path, origin, len(data), record_key(data if container is None else container))


@dataclass(frozen=True)
class Piece:
    """What one element of the original link line becomes."""

    arg: Arg
    members: tuple[Module | str, ...] = ()  # bitcode modules and native member files, in order
    rewritten: bool = False
    wrap_lib: bool = False  # an archive outside --whole-archive: keep its laziness


@dataclass(frozen=True)
class LinkPlan:
    command: LinkCommand
    pieces: tuple[Piece, ...]
    modules: tuple[Module, ...]
    other_inputs: tuple[str, ...]  # input files left as they are (native, shared, scripts)

    def by_path(self) -> dict[str, Module]:
        return {m.path: m for m in self.modules}

    def tokens(self, replace: Callable[[Module], str | None], eager: bool = False) -> list[str]:
        """The link line with each bitcode module replaced by replace(module) (None drops it).

        --start-group/--end-group are dropped once an archive became a --start-lib group:
        lld may not nest the two, and it resolves archives independently of position anyway.

        eager (the final link): the thin-link already chose which bitcode members and lazy
        files the link uses, so their objects are linked unconditionally. Left lazy, a member
        whose every reference was inlined away would be dropped with its constructors and
        definitions, which in-process LTO keeps. Native members stay lazy.
        """
        out: list[str] = []
        for p in self.pieces:
            if p.arg.group_marker:
                continue
            if not p.rewritten:
                out += p.arg.tokens
                continue
            modules: list[str] = []
            natives: list[str] = []
            for m in p.members:
                if isinstance(m, Module):
                    x = replace(m)
                    if x is not None:
                        (modules if eager else natives).append(x)
                else:
                    natives.append(m)
            if p.arg.lazy and modules:  # inside the user's own --start-lib: step out for them
                out += ["--end-lib", *modules, "--start-lib"]
            else:
                out += modules
            if p.wrap_lib and natives:
                out += ["--start-lib", *natives, "--end-lib"]
            else:
                out += natives
        return out


def build(command: LinkCommand, cache: Cache) -> LinkPlan:
    """The plan; each bitcode module is stored in the cache's module store, under its position."""
    pieces: list[Piece] = []
    modules: list[Module] = []
    others: list[str] = []

    def module(data: bytes, origin: str, container: bytes | None = None) -> Module:
        stored = cache.store_module(f"{len(modules):06d}-{digest_bytes(data)}", data)
        m = Module.of(data, stored, origin, container)
        modules.append(m)
        return m

    fat = command.fat_lto_objects
    for arg in command.args:
        path = arg.input
        if path is None:
            pieces.append(Piece(arg))
            continue
        head = read_head(path, 18)
        if is_bitcode(head):
            data = _read(path)
            pieces.append(Piece(arg, (module(data, path),), rewritten=True))
        elif fat and elf.is_relocatable(head) and (bitcode := fat_bitcode(data := _read(path), path)) is not None:
            # lld links a FatLTO object's bitcode, not its native code: in the final link, its
            # place goes to the object compiled from that bitcode, as for any module.
            pieces.append(Piece(arg, (module(bitcode, path, container=data),), rewritten=True))
        elif is_archive(head):
            if not archive.has_bitcode_member(path) and not (fat and archive.may_hold_fat_member(path)):
                # reads headers only (or, for --fat-lto-objects, scans once): libc.a stays cheap
                others.append(path)
                pieces.append(Piece(arg))
                continue
            expanded: list[Module | str] = []
            for m in archive.read_members(path):
                data = m.read()
                origin = f"{path}({m.name})"
                if is_bitcode(data[:4]):
                    expanded.append(module(data, origin))
                elif fat and (bitcode := fat_bitcode(data, origin)) is not None:
                    expanded.append(module(bitcode, origin, container=data))
                else:
                    expanded.append(cache.store_module(digest_bytes(data), data, ".native.o"))
            wrap = not arg.whole_archive and not arg.lazy
            pieces.append(Piece(arg, tuple(expanded), rewritten=True, wrap_lib=wrap))
        else:
            others.append(path)
            pieces.append(Piece(arg))
    if not modules:
        raise Unsupported(Reason.NO_BITCODE)
    return LinkPlan(command, tuple(pieces), tuple(modules), tuple(others))


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
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise Unsupported(Reason.UNREADABLE_INPUT, f"cannot read {path!r}: {e.strerror}") from e
