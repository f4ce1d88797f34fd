"""Compare two linked binaries function by function, blind to where the linker put things.

`compare(a, b, objdump)` disassembles both with llvm-objdump (`-d --no-show-raw-insn`),
splits the listing at each symbol, normalises every instruction and counts the functions
whose normalised bodies are equal. What normalisation removes:

* instruction addresses, and the displacements of rip-relative operands;
* every address an instruction refers to (a branch or call target, a rip-relative operand,
  or in a non-PIE executable an absolute immediate or displacement that falls inside a
  section), replaced by what is there, resolved from the binary's own tables rather than
  from objdump's `<sym+off>` guess, which for a GOT slot names whichever symbol happens to
  precede it:
    - a GOT slot (a dynamic relocation at that address) -> `got(<what the slot holds>)`,
    - an address inside a defined symbol -> `sym` or `sym+0xoff` (an intra-function branch
      target or a field of an object keeps its offset, which does not depend on layout),
    - a PLT entry -> objdump's `name@plt`,
    - an unnamed C string in .rodata (printable up to a NUL, and not a jump table of the
      function at hand, i.e. its first entry does not point into that function) ->
      `.rodata:'its text'`,
    - anything else (jump tables, whose entries depend on layout; constant pools) -> its
      section name;
* objdump's comments (`# 0x14ca0 <main>`, `# imm = 0x1C4F`);
* trailing int3/nop padding.

PLT stubs (.plt, .plt.sec, .plt.got, .iplt) are not compared: the linker writes them.

Known blind spot (non-PIE only): an indexed absolute operand whose displacement points
outside its array, as when the compiler folds a constant into the index
(`tokens[t - 257]` -> `movq tokens-0x808(,%rax,8)`), is resolved to whatever lies at that
address, which depends on layout: a false difference, visible as two `[...]` operands
naming unrelated data. PIE code (Debian's default) addresses arrays rip-relative first.

Functions are matched by name. ThinLTO's promoted locals, `name.llvm.<hash of the module's
bitcode>`, get a tag for the module instead of the hash (a digest of the set of names
promoted out of it), so a module whose bitcode differs only in debug-info paths still
matches.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ET_EXEC = 2
PT_LOAD = 1
STRING_MAX = 65536
# Code the linker makes, not the compiler: PLT stubs, whose order and slot numbers are the
# linker's (which symbol it saw referenced first), not codegen. Calls into them stay
# compared, as `name@plt`.
LINKER_SECTIONS = (".plt", ".iplt")
GOT_SECTIONS = (".got", ".got.plt")


@dataclass
class Result:
    identical: int
    differing: list[str] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.identical} identical, {len(self.differing)} differing, "
                f"{len(self.only_a)} only in a, {len(self.only_b)} only in b")


@dataclass(frozen=True)
class Symbol:
    addr: int
    size: int
    name: str
    kind: str = ""  # objdump's type flag: F (function), O (object), or blank


# `0000000000014ca0 g     F .text	00000000000001a2              main`
_SYMTAB_LINE = re.compile(r"^([0-9a-f]+) (.{7}) (\S+)\s+([0-9a-f]+)\s+(?:\.hidden |\.protected |\.internal )?(.+)$")
# `  14 .text              00043ebd 0000000000014bb0 TEXT`
_SECTION_LINE = re.compile(r"^\s*\d+ (\S+)\s+([0-9a-f]+) ([0-9a-f]+)")
# `000000000005b3c0 R_X86_64_GLOB_DAT        __libc_start_main@GLIBC_2.34`
_DYNRELOC_LINE = re.compile(r"^([0-9a-f]+) (\S+)\s+(\S+)$")
# `0000000000014ca0 <main>:`
_FUNC_HEADER = re.compile(r"^([0-9a-f]+) <(.+)>:$")
# `   14bc4:      	leaq	0xd5(%rip), %rdi        # 0x14ca0 <main>`
_INSN_LINE = re.compile(r"^\s*([0-9a-f]+):\s*(.*)$")
_COMMENT = re.compile(r"0x([0-9a-f]+)(?:\s*<([^>]*)>)?$")
# A bare branch/call target: `0x14c08 <deregister_tm_clones+0x28>` or `0x14c08`.
_TARGET = re.compile(r"\b0x([0-9a-f]+)(?:\s*<([^>]*)>)?")
_RIP_DISP = re.compile(r"-?0x[0-9a-f]+(?=\(%rip\))|(?<![\w$])-?\d+(?=\(%rip\))")
_IMMEDIATE = re.compile(r"(\$?)(-?)0x([0-9a-f]+)")
_PADDING = re.compile(r"^(int3|nop\w*|data16\b.*\bnop\w*|xchg\w*\s+%ax, %ax|\.\.\.|addb %al, \(%rax\))(\s.*)?$")
_BRANCH = re.compile(r"^(call|j|loop|xbegin)")
_VECTOR_REG = re.compile(r"%[xyz]mm\d")
_PROMOTED = re.compile(r"\.llvm\.(\d+)(?=$|[^\w.])")


LLVM = Path("/usr/lib/llvm-22/bin")  # what the package fidelity tests build and compare with
OBJDUMP = str(LLVM / "llvm-objdump")


def needs_llvm22() -> None:
    require_llvm(LLVM)


def require_llvm(bindir: Path) -> None:
    """The LLVM tools a fidelity comparison needs, or needs.missing naming the one not installed."""
    from needs import missing

    for tool in ("clang", "ld.lld", "llvm-objdump", "llvm-nm"):
        if not (bindir / tool).exists():
            missing(str(bindir / tool), "dev/setup installs clang, lld and llvm of this version")


def record_less_cc(directory: Path, ltowrap_clang: str | Path) -> Path:
    """A CC that compiles with the real clang 22 (so ltowrap records no options) and links
    through ltowrap-clang: every module of every link then has no record, as for objects
    built before ltowrap was installed or restored by ccache after `ltowrap cache clear`."""
    cc = directory / "record-less-cc"
    cc.write_text(f"""#!/bin/sh
for a; do
    case $a in -c | -S | -E) exec {LLVM / "clang"} "$@" ;; esac
done
exec {ltowrap_clang} "$@"
""")
    cc.chmod(0o755)
    return cc


def recorded_backends(records: list[dict]) -> list[str]:
    """Modules of distributed links that did have an option record (should be none)."""
    return [b["module"] for r in records if r.get("decision") == "distributed"
            for b in r["backends"] if b.get("recorded") is not False]


class Binary:
    """One linked binary: its symbol, section and dynamic relocation tables, and its code."""

    def __init__(self, path: str | Path, objdump: str) -> None:
        self.path = str(path)
        self.objdump = objdump
        with open(self.path, "rb") as f:
            self.data = f.read()
        elf64le = self.data[:6] == b"\x7fELF\x02\x01"
        self.is_exec = elf64le and int.from_bytes(self.data[16:18], "little") == ET_EXEC
        self.segments = self._load_segments() if elf64le else []
        self._current = (0, 0)  # the extent of the function being normalised
        self._symbols()
        self._sections()
        self._dynrelocs()

    def _run(self, *args: str) -> str:
        done = subprocess.run([self.objdump, *args, self.path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{self.objdump} {' '.join(args)} {self.path} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def _load_segments(self) -> list[tuple[int, int, int]]:
        """(vaddr, filesz, offset) of each PT_LOAD, to read what an address holds."""
        phoff = int.from_bytes(self.data[0x20:0x28], "little")
        phentsize = int.from_bytes(self.data[0x36:0x38], "little")
        phnum = int.from_bytes(self.data[0x38:0x3A], "little")
        segs = []
        for i in range(phnum):
            ph = self.data[phoff + i * phentsize: phoff + (i + 1) * phentsize]
            if len(ph) >= 56 and int.from_bytes(ph[0:4], "little") == PT_LOAD:
                offset, vaddr = int.from_bytes(ph[8:16], "little"), int.from_bytes(ph[16:24], "little")
                segs.append((vaddr, int.from_bytes(ph[32:40], "little"), offset))
        return segs

    def read(self, addr: int, size: int) -> bytes | None:
        """`size` bytes of the file's image at address `addr` (None where the file has none)."""
        for vaddr, filesz, offset in self.segments:
            if vaddr <= addr and addr + size <= vaddr + filesz:
                start = offset + addr - vaddr
                return self.data[start:start + size]
        return None

    def is_jump_table(self, addr: int) -> bool:
        """Does addr start a jump table of the function being read? Its first entry, relative
        to the table (PIC, 4 bytes) or absolute (8 bytes), is an address in that function."""
        lo, hi = self._current
        rel, absolute = self.read(addr, 4), self.read(addr, 8)
        return (rel is not None and lo <= addr + int.from_bytes(rel, "little", signed=True) < hi) or \
            (absolute is not None and lo <= int.from_bytes(absolute, "little") < hi)

    def string_at(self, addr: int) -> str | None:
        """The C string at addr, if it looks like one (printable up to a NUL) and is no jump table."""
        head = self.read(addr, 1)
        if head is None or self.is_jump_table(addr):
            return None
        for vaddr, filesz, offset in self.segments:
            if vaddr <= addr < vaddr + filesz:
                start = offset + addr - vaddr
                end = self.data.find(b"\0", start, min(start + STRING_MAX, offset + filesz))
                text = self.data[start:end] if end >= 0 else b"\x80"
                if all(32 <= c < 127 or c in b"\t\n\r" for c in text):
                    return repr(text.decode("ascii"))
        return None

    def _symbols(self) -> None:
        syms = []
        for line in self._run("-t").splitlines():
            m = _SYMTAB_LINE.match(line)
            if not m:
                continue
            addr, flags, section, size, name = m.groups()
            if section in ("*UND*", "*ABS*") or flags[5] == "d":
                continue  # undefined, absolute, debugging and file symbols name no code or data
            syms.append(Symbol(int(addr, 16), int(size, 16), name.strip(), flags[6].strip()))
        # By address; at one address the sized symbol (the function or object) before labels.
        syms.sort(key=lambda s: (s.addr, -s.size, s.name))
        self.syms = syms
        self._sym_addrs = [s.addr for s in syms]
        # ThinLTO names a promoted local `name.llvm.<hash of its module's bitcode>`: a path in
        # the debug info changes the hash, not the code. The module is named instead by the
        # set of names promoted out of it, which does not depend on where it was built.
        groups: dict[str, set[str]] = {}
        for s in syms:
            m = _PROMOTED.search(s.name)
            if m:
                groups.setdefault(m.group(1), set()).add(s.name[: m.start()])
        self._module_tags = {h: hashlib.sha1("\n".join(sorted(g)).encode()).hexdigest()[:10] for h, g in groups.items()}

    def untag(self, text: str) -> str:
        """`x.llvm.<module hash>` -> `x.llvm.<tag from the module's promoted names>`."""
        if ".llvm." not in text:
            return text
        return _PROMOTED.sub(lambda m: f".llvm.{self._module_tags.get(m.group(1), m.group(1))}", text)

    def _sections(self) -> None:
        secs = []
        for line in self._run("-h").splitlines():
            m = _SECTION_LINE.match(line)
            if m and int(m.group(3), 16) and int(m.group(2), 16):
                secs.append((int(m.group(3), 16), int(m.group(2), 16), m.group(1)))
        self.sections = sorted(secs)

    def _dynrelocs(self) -> None:
        self.relocs: dict[int, str] = {}
        if not any(name == ".dynamic" for _start, _size, name in self.sections):
            return  # a static executable (the kernel's vmlinux): objdump -R refuses it, and there are none
        for line in self._run("-R").splitlines():
            m = _DYNRELOC_LINE.match(line.strip())
            if m and m.group(2).startswith("R_"):
                self.relocs[int(m.group(1), 16)] = m.group(3)

    def section_of(self, addr: int) -> str | None:
        for start, size, name in self.sections:
            if start <= addr < start + size:
                return name
        return None

    def section_end(self, addr: int) -> int:
        for start, size, _name in self.sections:
            if start <= addr < start + size:
                return start + size
        return addr + 1

    def symbol_at(self, addr: int) -> str | None:
        """`sym` or `sym+0xoff` for an address inside (or at) a defined symbol."""
        i = bisect.bisect_right(self._sym_addrs, addr)
        exact = containing = None
        for s in reversed(self.syms[max(0, i - 64):i]):  # the nearest below, for nested or zero-sized symbols
            if s.addr == addr:
                if s.size:
                    exact = s
                    break
                exact = exact or s
            elif containing is None and addr < s.addr + s.size:
                containing = s
        best = exact or containing
        if best is None:
            return None
        off = addr - best.addr
        return best.name if off == 0 else f"{best.name}+{off:#x}"

    def shares_with_zero_size(self, name: str) -> bool:
        """Is the symbol `name` (as symbol_at names an address) at an address that an object of
        no size shares with another symbol?"""
        if "+" in name:  # inside a sized symbol: no object of no size shares that address with it
            return False
        if not hasattr(self, "_shared"):
            by_addr: dict[int, list[Symbol]] = {}
            for s in self.syms:
                by_addr.setdefault(s.addr, []).append(s)
            self._shared = {s.name for group in by_addr.values() if len(group) > 1
                            and any(g.kind == "O" and not g.size for g in group) for s in group}
        return name in self._shared

    def resolve(self, addr: int, hint: str | None = None, depth: int = 0) -> str:
        """What lives at `addr`, in terms that do not depend on where the linker put it."""
        if addr in self.relocs and depth < 2 and self.section_of(addr) in GOT_SECTIONS:
            value = self.relocs[addr]
            m = re.fullmatch(r"\*ABS\*\+0x([0-9a-f]+)", value)
            inner = self.resolve(int(m.group(1), 16), None, depth + 1) if m else re.sub(r"\+0x0$", "", value)
            return f"got({inner})"
        if hint and hint.endswith("@plt"):
            return hint
        code = self.code_at(addr)
        if code is not None:
            return code
        sym = self.symbol_at(addr)
        if sym is not None:
            return sym
        section = self.section_of(addr) or "?"
        if section.startswith(".rodata"):
            text = self.string_at(addr)
            if text is not None:
                return f"{section}:{text}"
        return section

    def disassemble(self) -> dict[str, list[str]]:
        """Function name -> normalised instructions. A name seen twice gets `#2`, `#3`..."""
        raw: list[tuple[str, int, list[str]]] = []  # (key, start address, instruction texts)
        ends: dict[str, int] = {}  # key -> where its function symbol's size ends it
        sizes = {(s.addr, s.name): s.size for s in self.syms if s.kind == "F" and s.size}
        names: dict[str, str] = {}  # key -> symbol name
        section = ""
        for line in self._run("-d", "--no-show-raw-insn").splitlines():
            if line.startswith("Disassembly of section "):
                section = line[len("Disassembly of section "):].rstrip(":")
                raw.append(("", 0, []))  # instructions before the section's first symbol belong to none
                continue
            if section.startswith(LINKER_SECTIONS):
                continue
            h = _FUNC_HEADER.match(line)
            if h:
                name = self.untag(h.group(2))
                key, n = name, 1
                while key in names:
                    n += 1
                    key = f"{name}#{n}"
                names[key] = name
                start = int(h.group(1), 16)
                if (start, h.group(2)) in sizes:
                    ends[key] = start + sizes[(start, h.group(2))]
                raw.append((key, start, []))
                continue
            m = _INSN_LINE.match(line)
            if m and raw:
                # Past its symbol's size the bytes are the gap to the next (zeros that decode into
                # the next function's first bytes), whose length is the layout's.
                if int(m.group(1), 16) < ends.get(raw[-1][0], 1 << 64):
                    raw[-1][2].append(m.group(2))
            elif line.strip() == "..." and raw:
                raw[-1][2].append("...")
        # Where each function's code lies, to name a branch target inside it by the function's offset
        # (from the listing: symbol sizes are 0 for hand-written code such as crtstuff's).
        named = sorted((start, names[key]) for key, start, body in raw if key and body)
        self._code = [(start, min(named[i + 1][0] if i + 1 < len(named) else start + 1, self.section_end(start)), name)
                      for i, (start, name) in enumerate(named)]
        self._code_starts = [c[0] for c in self._code]
        funcs: dict[str, list[str]] = {}
        extent = {start: end for start, end, _name in self._code}
        for key, start, body in raw:
            if not key:
                continue
            self._current = (start, extent.get(start, start))
            insns = [i for i in map(self.normalise, body) if i]
            while insns and _PADDING.match(insns[-1]):
                insns.pop()
            if insns:  # a symbol that only aliases the next one is no function
                funcs[key] = insns
        return funcs

    def code_at(self, addr: int) -> str | None:
        i = bisect.bisect_right(getattr(self, "_code_starts", []), addr) - 1
        if i < 0:
            return None
        start, end, name = self._code[i]
        if addr >= end:
            return None
        return name if addr == start else f"{name}+{addr - start:#x}"

    def normalise(self, insn: str) -> str:
        insn, _, comment = insn.partition("#")  # objdump's comments: `# 0x14ca0 <main>`, `# imm = 0x1C4F`
        target = None
        c = _COMMENT.match(comment.strip())
        insn = re.sub(r"\s+", " ", insn).strip()
        if not insn:
            return ""
        mnemonic, _, operands = insn.partition(" ")
        if c:
            addr = int(c.group(1), 16)
            # A vector constant (`movdqa REL(%rip), %xmm0`) is no C string: read as one, it runs
            # into whatever the linker placed after it. Name its section only.
            vector = _VECTOR_REG.search(operands) is not None
            target = (self.section_of(addr) or "?") if vector else self.resolve(addr, c.group(2))
        if "(%rip)" in operands:
            operands = _RIP_DISP.sub("REL", operands)
            if self.is_exec:  # an address stored to memory: `movq $-0x7e754c98, REL(%rip)`
                operands = _IMMEDIATE.sub(self._absolute, operands)
            if target is not None:
                operands += f" -> {target}"
        elif _BRANCH.match(mnemonic) and operands.startswith("*"):
            # Memory-indirect (`callq *0x13d8(%rbx)`): the number is a field offset, not a target.
            if self.is_exec:
                operands = _IMMEDIATE.sub(self._absolute, operands)
        elif _BRANCH.match(mnemonic) and _TARGET.search(operands):
            t = _TARGET.search(operands)
            operands = operands[: t.start()] + self.resolve(int(t.group(1), 16), t.group(2)) + operands[t.end():]
        elif self.is_exec:
            operands = _IMMEDIATE.sub(self._absolute, operands)
        return self.untag(f"{mnemonic} {operands}".strip())

    def _absolute(self, m: re.Match) -> str:
        """In a non-PIE executable, a constant that is an address in some section is that address's content.
        A negative one is one too where sections lie in the top 2 GiB (the kernel's code model:
        `movq $-0x7e9fdcdf, %rsi` is 0xffffffff81602321, sign-extended)."""
        addr = int(m.group(3), 16)
        if m.group(2):
            addr = (1 << 64) - addr
        if addr < 0x10000 or self.section_of(addr) is None:
            return m.group(0)
        return f"{m.group(1)}[{self.resolve(addr)}]"


_FUNCTIONS: dict[tuple, tuple[Binary, dict[str, list[str]]]] = {}


def _read(binary: str | Path, objdump: str) -> tuple[Binary, dict[str, list[str]]]:
    st = os.stat(binary)
    key = (os.path.abspath(binary), objdump, st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _FUNCTIONS:
        b = Binary(binary, objdump)
        _FUNCTIONS[key] = (b, b.disassemble())
    return _FUNCTIONS[key]


def functions(binary: str | Path, objdump: str) -> dict[str, list[str]]:
    """Function name -> normalised body (remembered while the file is unchanged, for diff())."""
    return _read(binary, objdump)[1]


# A symbol an operand was resolved to: `-> name`, `-> name+0x10`, `$[name]`, `[name+0x8]`; or a number.
ADDRESS_LIKE = 1 << 20
_OPERAND_NAME = re.compile(r"(?<=-> )[^\s,\]]+|(?<=\[)[^\]\s]+(?=\])|-?\b0x[0-9a-f]+\b")


def _placed(operand: str) -> bool:
    """An address inside some symbol (`name+0x663`), or a number of an address's size (a physical
    address the code computes: `leaq 0x18b06ff(%rax)`), not a small constant."""
    if operand.lstrip("-").startswith("0x"):
        return int(operand.lstrip("-"), 16) >= ADDRESS_LIKE
    return "+" in operand


def layout_only(binary_a: str | Path, binary_b: str | Path, objdump: str, name: str) -> bool:
    """Do the function's two bodies differ only in operands that name what the layout decides?
    Such an operand, on either side, is an address that an object of no size shares with
    another symbol (the kernel's lockdep keys without lockdep take the address of whatever the
    linker put next), or, on both sides, a number or an address inside some other symbol
    (`e820_table_init+0x663`: an address the link computes from linker-script symbols, which
    falls wherever the layout puts it). Instructions, their order and every operand that names
    a symbol's start must be the same."""
    (a, fa), (b, fb) = _read(binary_a, objdump), _read(binary_b, objdump)
    body_a, body_b = fa.get(name, []), fb.get(name, [])
    if len(body_a) != len(body_b):
        return False
    for x, y in zip(body_a, body_b):
        if x == y:
            continue
        if _OPERAND_NAME.sub("N", x) != _OPERAND_NAME.sub("N", y):
            return False
        for p, q in zip(_OPERAND_NAME.findall(x), _OPERAND_NAME.findall(y)):
            if p != q and not (_placed(p) and _placed(q)) and not a.shares_with_zero_size(p) \
                    and not b.shares_with_zero_size(q):
                return False
    return True


def compare(binary_a: str | Path, binary_b: str | Path, objdump: str) -> Result:
    a, b = functions(binary_a, objdump), functions(binary_b, objdump)
    common = sorted(a.keys() & b.keys())
    differing = [n for n in common if a[n] != b[n]]
    return Result(
        identical=len(common) - len(differing),
        differing=differing,
        only_a=sorted(a.keys() - b.keys()),
        only_b=sorted(b.keys() - a.keys()),
    )


def diff(binary_a: str | Path, binary_b: str | Path, objdump: str, name: str, context: int = 3) -> str:
    """A unified diff of one function's two normalised bodies, for a report."""
    import difflib

    a = functions(binary_a, objdump).get(name, [])
    b = functions(binary_b, objdump).get(name, [])
    return "\n".join(difflib.unified_diff(a, b, f"a:{name}", f"b:{name}", n=context, lineterm=""))


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--objdump", default="llvm-objdump-22")
    p.add_argument("--show", action="append", default=[], help="print this function's diff")
    p.add_argument("--show-all", action="store_true", help="print every differing function's diff")
    args = p.parse_args()
    r = compare(args.a, args.b, args.objdump)
    print(r.summary())
    for name in r.differing:
        print("  differs:", name)
    for name in r.only_a:
        print("  only in a:", name)
    for name in r.only_b:
        print("  only in b:", name)
    for name in (r.differing if args.show_all else args.show):
        print(diff(args.a, args.b, args.objdump, name))
