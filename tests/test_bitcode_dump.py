"""The bitcode reader held to LLVM's own: every block and record that bitcode.read gives, against
`llvm-bcanalyzer -dump` of the same release, on modules (C, C++, -g, a split LTO unit's two
modules, a FatLTO object's bitcode) and on the index shards a thin-link writes. Not the project's own writer: the
streams clang and lld write, and the records LLVM's reader sees in them.

The dump names each block by its id and each record by its code and operands. A blob is
not among the operands (it follows as text): a record with one is compared up to it.
BLOCKINFO is not dumped, only named: it is left out of both sides."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import run, write
from ltowrap.formats import bitcode

BLOCK = re.compile(r"\s*<(?:\w+ BlockID=(\d+)|UnknownBlock(\d+)) NumWords=\d+ BlockCodeSize=\d+>$")
# A record's line may end with a remark in brackets before its `/>` (METADATA_INDEX: "(offset match)").
RECORD = re.compile(r"\s*<(?:\w+ codeid=(\d+)|UnknownCode(\d+))(?: abbrevid=\d+)?((?: op\d+=-?\d+)*)(?: \([^)]*\))?/>(.*)$")
END = re.compile(r"\s*</\w+>$")

SOURCE = r"""
#include <stdio.h>
struct point { int x, y; };
static int scale(struct point *p, int k) { return p->x * k + p->y; }
extern int shared_counter;
int across(int v);
int entry(int v) {
    struct point p = {v, v + 1};
    int r;
    __asm__ volatile("movl %1, %0" : "=r"(r) : "r"(v));
    return scale(&p, 3) + r + across(v) + shared_counter;
}
"""
OTHER = "int shared_counter; int across(int v) { return v * 2 + shared_counter; }\n"
CXX = r"""
struct B { virtual int f(); virtual ~B(); };
struct D : B { int f() override { return 2; } };
int use(B *b) { return b->f(); }
B *make() { return new D; }
"""


def dumped(path: Path, analyzer: str) -> list:
    """The dump as nested lists: ["block", id, items] and ["rec", code, ops, has_blob]."""
    root: list = []
    open_items = [root]
    text = run([analyzer, "-dump", "-non-symbolic", str(path)], path.parent).stdout
    for line in text.splitlines():
        if (m := BLOCK.match(line)):
            block: list = ["block", int(m.group(1) or m.group(2)), []]
            open_items[-1].append(block)
            open_items.append(block[2])
        elif END.match(line):
            open_items.pop()
        elif (m := RECORD.match(line)):
            ops = [int(x.split("=")[1]) % 2**64 for x in m.group(3).split()]  # dumped as int64
            has_blob = "blob data" in m.group(4) or "num-strings" in m.group(4)
            open_items[-1].append(["rec", int(m.group(1) or m.group(2)), ops, has_blob])
    assert len(open_items) == 1, "unbalanced dump"
    return root


def mismatches(ours: bitcode.Node, theirs: list, where: str = "top") -> list[str]:
    """Where our tree and the dump differ (BLOCKINFO left out of ours, as the dump leaves it)."""
    items = [i for i in ours.items if not (isinstance(i, bitcode.Node) and i.bid == bitcode.BLOCKINFO_BLOCK_ID)]
    if len(items) != len(theirs):
        return [f"{where}: {len(items)} items against the dump's {len(theirs)}"]
    out = []
    for n, (mine, dump) in enumerate(zip(items, theirs)):
        here = f"{where}/{n}"
        if isinstance(mine, bitcode.Node):
            if dump[0] != "block" or dump[1] != mine.bid:
                out.append(f"{here}: block {mine.bid} against {dump[:2]}")
            else:
                out += mismatches(mine, dump[2], f"{here}(block {mine.bid})")
        elif dump[0] != "rec" or dump[1] != mine[0]:
            out.append(f"{here}: record {mine[:1]} against {dump[:2]}")
        else:
            ops = dump[2]
            fields = mine[1 : 1 + len(ops)] if dump[3] else mine[1:]  # a blob: compared up to it
            if fields != ops:
                out.append(f"{here}: record {mine[0]} fields {mine[1:8]}... against {ops[:7]}...")
    return out


@pytest.mark.parametrize("version", [22, 19, 16, 15, 14, 13])
def test_the_reader_reads_what_llvm_bcanalyzer_dumps(tmp_path, version):
    clang, lld, analyzer = (shutil.which(f"clang-{version}"), shutil.which(f"ld.lld-{version}"),
                            shutil.which(f"llvm-bcanalyzer-{version}"))
    if not (clang and lld and analyzer):
        pytest.skip(f"clang, lld and llvm-bcanalyzer {version} are not all installed")
    write(tmp_path / "a.c", SOURCE)
    write(tmp_path / "b.c", OTHER)
    write(tmp_path / "x.cc", CXX)
    run([clang, "-O2", "-g", "-flto=thin", "-c", "a.c", "-o", "a.o"], tmp_path)
    run([clang, "-O1", "-flto=thin", "-c", "b.c", "-o", "b.o"], tmp_path)
    run([clang, "-x", "c++", "-O2", "-flto=thin", "-fwhole-program-vtables", "-fsplit-lto-unit", "-c", "x.cc",
         "-o", "x.o"], tmp_path)
    declarations = ["-mllvm", "-import-declaration"] if version >= 19 else []
    run([lld, "--thinlto-index-only", *declarations, "-e", "entry", "a.o", "b.o", "-o", "prog"], tmp_path)
    files = ["a.o", "b.o", "x.o", "a.o.thinlto.bc", "b.o.thinlto.bc"]
    if version >= 19:  # a FatLTO object's bitcode, as formats/elf.py takes it from its .llvm.lto section
        run([clang, "-O2", "-flto=thin", "-ffat-lto-objects", "-c", "a.c", "-o", "fat.o"], tmp_path)
        run([shutil.which(f"llvm-objcopy-{version}") or "llvm-objcopy", "--dump-section=.llvm.lto=fat.bc", "fat.o"],
            tmp_path)
        files.append("fat.bc")
    # A shard as the remote client sends it (bitcode.relocate: paths as blobs, hashes as 32-bit
    # fields, through abbreviations of its own): LLVM must read back the records it was given.
    shard = (tmp_path / "a.o.thinlto.bc").read_bytes()
    (tmp_path / "moved.bc").write_bytes(bitcode.relocate(shard, lambda p: "modules/" + Path(p).name))
    files.append("moved.bc")
    for name in files:
        path = tmp_path / name
        theirs = dumped(path, analyzer)
        stream = bitcode.bitstream(path.read_bytes())
        for read in (bitcode.read, bitcode.read_python):
            assert mismatches(read(stream), theirs) == [], (name, read.__name__)
    moved, original = dumped(tmp_path / "moved.bc", analyzer), dumped(tmp_path / "a.o.thinlto.bc", analyzer)
    assert [i for i in moved[0][2] if i[:2] != ["block", bitcode.MODULE_STRTAB_BLOCK_ID]] == \
        [i for i in original[0][2] if i[:2] != ["block", bitcode.MODULE_STRTAB_BLOCK_ID]]
    text = run([analyzer, "-dump", str(tmp_path / "moved.bc")], tmp_path).stdout
    assert re.findall(r"blob data = '(modules/[ab]\.o)'", text) == ["modules/a.o", "modules/b.o"]
    # The comparison can fail: a record's field changed is seen.
    tree = bitcode.read_python(bitcode.bitstream((tmp_path / "a.o").read_bytes()))
    module = tree.blocks(bitcode.MODULE_BLOCK_ID)[0]
    version_record = next(i for i in module.items if isinstance(i, list))
    version_record.append(99)
    assert mismatches(tree, dumped(tmp_path / "a.o", analyzer))
