"""One read of a module for everything ltowrap asks of it (formats/modulefacts.py), kept as one
c/ entry a module version (cachekey.ModuleDigests.facts, cachekey.module_facts_key).

The one read must give what each reader gives on its own: the interface, the inline
assembly, the triple and flags, the producer, on modules of every toolchain (plain, -g, a
split LTO unit's two modules, inline asm, module flags)."""

from __future__ import annotations

import pytest

from helpers import run, write
from ltowrap import cachekey
from ltowrap.cache import Cache
from ltowrap.formats import interface, irmodule, modulefacts
from ltowrap.stats import Stats

SOURCE = r"""
struct S { int a; } s;
extern int g;
int get(void) { int v; __asm__ volatile("movl $7, %0" : "=r"(v)); return v + s.a + g; }
__asm__(".globl marker\nmarker:");
"""
CXX_SOURCE = r"""
struct B { virtual int f(); };
struct D : B { int f() override { return 2; } };
int use(B *b) { return b->f(); }
B *make() { return new D; }
"""


@pytest.mark.parametrize("flags", [("-O2",), ("-O2", "-g"), ("-O0", "-fPIC", "-mcmodel=medium")])
def test_one_read_gives_what_each_reader_gives(any_tc, tmp_path, flags):
    write(tmp_path / "m.c", SOURCE)
    write(tmp_path / "x.cc", CXX_SOURCE)
    run([any_tc.clang, *flags, "-flto=thin", "-c", "m.c", "-o", "m.o"], tmp_path)
    cxx = any_tc.clang.replace("clang", "clang++")
    run([cxx, *flags, "-flto=thin", "-fwhole-program-vtables", "-fsplit-lto-unit", "-c", "x.cc", "-o", "x.o"],
        tmp_path)
    for name in ("m.o", "x.o"):
        data = (tmp_path / name).read_bytes()
        facts = modulefacts.read(data, cachekey.digest_bytes)
        assert facts.problem == ""
        assert facts.interface == cachekey.digest_bytes(interface.module_interface(data).encode())
        assert facts.asm == irmodule.inline_asm(data)
        assert facts.module_facts() == irmodule.read(data)
        assert facts.producer == irmodule.producer(data) and facts.producer.startswith("LLVM")
        assert modulefacts.Facts.from_data(facts.to_data()) == facts
    assert irmodule.inline_asm((tmp_path / "m.o").read_bytes()).templates  # the reader did find the asm


def test_a_module_version_is_read_once_and_kept_in_one_entry(tc22, tmp_path, monkeypatch):
    """A second link (a fresh ModuleDigests) finds the facts in c/, under module_facts_key; a
    damaged entry is a miss, and the module is read again."""
    write(tmp_path / "m.c", SOURCE)
    run([tc22.clang, "-O2", "-g", "-flto=thin", "-c", "m.c", "-o", "m.o"], tmp_path)
    path = str(tmp_path / "m.o")
    cache = Cache(str(tmp_path / "cache"), Stats())
    reads: list[int] = []
    real = modulefacts.read
    monkeypatch.setattr(modulefacts, "read", lambda data, digest: reads.append(1) or real(data, digest))
    first = cachekey.ModuleDigests(cache=cache)
    assert first.interface(path) and first.facts(path).asm.templates and not first.sample_profiled(path)
    assert len(reads) == 1  # one read for all three
    entry = cache.path("c", cachekey.module_facts_key(first(path)))
    second = cachekey.ModuleDigests(cache=cache)
    assert second.facts(path) == first.facts(path) and len(reads) == 1
    with open(entry, "r+b") as f:  # damaged: a bad entry, removed; the module is read again
        f.seek(-3, 2)
        f.write(b"\xff\xff\xff")
    assert cachekey.ModuleDigests(cache=cache).facts(path) == first.facts(path) and len(reads) == 2


def test_unreadable_bitcode_gives_facts_that_say_so(tmp_path):
    """Bytes that are not bitcode: the record says why and holds no facts; the interface is refused
    as BadBitcode (the shard then names the module by its bytes)."""
    from ltowrap.formats.bitcode import BadBitcode

    bad = tmp_path / "bad.o"
    bad.write_bytes(b"BC\xc0\xde" + b"\xff" * 64)
    facts = modulefacts.read(bad.read_bytes(), cachekey.digest_bytes)
    assert facts.problem and facts.module_facts() is None and facts.interface == ""
    with pytest.raises(BadBitcode):
        cachekey.ModuleDigests().interface(str(bad))
