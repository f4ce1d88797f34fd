"""Everything ltowrap reads of a module's bitcode, in one read, kept as one record.

A link asks several things of each module it distributes:
- the interface, for a shard that imports only declarations from it (interface.py);
- whether it may carry a sample profile (shardkey.has_sample_profile);
- its inline assembly, for the files the backend's assembler may read (irmodule.inline_asm);
- its triple and module flags, for a module compiled without an option record (irmodule.read);
- its producer, for a module another LLVM release wrote (irmodule.producer).
They are all read from one tree (bitcode.read with WANT, the union of what each asks; with the
compiled reader, made in C straight from that read's decoded stream, read_python the reference)
and kept together: in memory for the link, by the module's digest, and in the cache (c/, one
entry a link, cachekey.ModuleDigests.keep), so that a link reads each version of a module once.

Bitcode that cannot be read gives a record that says why (`problem`) and nothing else:
each user then does what it does without the fact (keys the module by its bytes, does not
cache the job, falls back), as it did when each read failed on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import bitcode, interface, irmodule, shardkey
from .bitcodes import CONSTANTS_BLOCK_ID, CST_CODE_SETTYPE, FUNCTION_BLOCK_ID, GLOBALVAL_SUMMARY_BLOCK_ID, \
    METADATA_BLOCK_ID, VALUE_SYMTAB_BLOCK_ID
from .bitcode import BadBitcode, Want
from .irmodule import ModuleAsm, ModuleFacts

# The record's format: a new one for any change of what it holds or of how a part is read
# (the interface's text has its own format, shardkey.FORMAT, taken in too).
FORMAT = f"module facts 1, {shardkey.FORMAT}"

# What each part needs, at once: the interface's blocks and records, the module's function
# blocks up to their constants (the inline assembly), the summary block as a mark.
WANT = Want(skip=frozenset({VALUE_SYMTAB_BLOCK_ID}), first={FUNCTION_BLOCK_ID: 2, GLOBALVAL_SUMMARY_BLOCK_ID: 0},
            unread={METADATA_BLOCK_ID: interface.MD_DEBUG},
            only={CONSTANTS_BLOCK_ID: interface.SIMPLE_CONSTANTS | {CST_CODE_SETTYPE} | set(irmodule.INLINE_ASM),
                  FUNCTION_BLOCK_ID: frozenset()})


@dataclass(frozen=True)
class Facts:
    """A module's facts, or why its bitcode cannot be read (`problem`, and no facts)."""

    problem: str = ""
    interface: str = ""  # the digest of its interface text
    sample_profile: bool = True
    asm: ModuleAsm = ModuleAsm((), ())
    triple: str = ""
    flags: dict[str, int] = field(default_factory=dict)
    producer: str = ""

    def module_facts(self) -> ModuleFacts | None:
        return None if self.problem else ModuleFacts(self.triple, dict(self.flags))

    def to_data(self) -> list:
        """As the cache keeps it (cache.py's plain values)."""
        return [self.problem, self.interface, self.sample_profile, list(self.asm.module), list(self.asm.templates),
                self.asm.directive_symbols, self.triple, sorted(self.flags.items()), self.producer]

    @classmethod
    def from_data(cls, data: object) -> Facts:
        """to_data's list back; TypeError or ValueError for anything else (a bad entry)."""
        if not isinstance(data, list) or len(data) != 9:
            raise TypeError("not a module facts record")
        problem, iface, sample, module, templates, directive, triple, flags, made_by = data
        if not all(isinstance(s, str) for s in (problem, iface, triple, made_by, *module, *templates)) \
                or not isinstance(sample, bool) or not isinstance(directive, bool):
            raise TypeError("a module facts record of the wrong shape")
        return cls(problem, iface, sample, ModuleAsm(tuple(module), tuple(templates), directive), triple,
                   {str(k): int(v) for k, v in flags}, made_by)


def read(data: bytes, digest: Callable[[bytes], str]) -> Facts:
    """The facts of a module's bytes (one read of its bitstream); `digest` names its interface
    text (cachekey.digest_bytes).

    Made in C (ltowrap._bitcode.module_facts, straight from the decoded stream, no tree) when the
    compiled reader runs (bitcode.implementation()), else by read_python, the reference: the same
    facts, the same problem. The C one hands the rare module it does not take to read_python."""
    native = getattr(bitcode._native, "module_facts", None)  # read at the call: LTOWRAP_NATIVE, bench/reader.py
    if native is None:
        return read_python(data, digest)
    sample = shardkey.has_sample_profile(data)
    try:
        got = native(bitcode.bitstream(data), WANT, interface._WHOLE, interface._tables(), irmodule._tables(),
                     BadBitcode)
    except BadBitcode as e:
        return Facts(problem=str(e) or "bad bitcode", sample_profile=sample)
    if got is NotImplemented:
        return read_python(data, digest)
    text, module, templates, strtab, triple, flags, producer = got
    return Facts("", digest(text.encode()), sample, irmodule.asm_from(list(module), list(templates), strtab),
                 irmodule.decoded(triple), {irmodule.decoded(name): value for name, value in flags},
                 irmodule.producer_text(producer))


def read_python(data: bytes, digest: Callable[[bytes], str]) -> Facts:
    """read(), in Python from the reader's tree: the reference the compiled facts are held to."""
    sample = shardkey.has_sample_profile(data)
    try:
        stream = bitcode.bitstream(data)
        tree = bitcode.read(stream, WANT)
        asm = irmodule.asm_of(tree)
        facts = irmodule.facts_of(tree)
        return Facts("", digest(interface.interface_of(stream, tree).encode()), sample, asm, facts.triple,
                     facts.flags or {}, irmodule.producer_of(tree))
    except BadBitcode as e:
        return Facts(problem=str(e) or "bad bitcode", sample_profile=sample)
