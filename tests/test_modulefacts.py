"""One read of a module for everything ltowrap asks of it (formats/modulefacts.py), kept as one
c/ entry a link (cachekey.ModuleDigests.facts and keep, cachekey.facts_pack_key).

The one read must give what each reader gives on its own: the interface, the inline
assembly, the triple and flags, the producer, on modules of every toolchain (plain, -g, a
split LTO unit's two modules, inline asm, module flags)."""

from __future__ import annotations

from pathlib import Path

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


def test_a_module_version_is_read_once_and_kept_for_the_links_next_run(tc22, tmp_path, monkeypatch):
    """The facts a link read are kept in one c/ entry, under the link (facts_pack_key), and its
    next run (a fresh ModuleDigests) finds them there; a run that read none writes nothing; a
    damaged entry is a miss and the module is read again; another link's entry, without the
    module, gives nothing."""
    write(tmp_path / "m.c", SOURCE)
    run([tc22.clang, "-O2", "-g", "-flto=thin", "-c", "m.c", "-o", "m.o"], tmp_path)
    path = str(tmp_path / "m.o")
    counts = Stats()
    cache = Cache(str(tmp_path / "cache"), counts)
    reads: list[int] = []
    real = modulefacts.read
    monkeypatch.setattr(modulefacts, "read", lambda data, digest: reads.append(1) or real(data, digest))
    link = cachekey.facts_pack_key(str(tmp_path), "prog")
    first = cachekey.ModuleDigests(cache=cache, pack=link)
    assert first.interface(path) and first.facts(path).asm.templates and not first.sample_profiled(path)
    assert len(reads) == 1  # one read for all three
    assert not Path(cache.path("c", link)).exists()  # kept at the link's end, not as each is read
    first.keep()
    entry = Path(cache.path("c", link))
    assert entry.exists() and counts.counts["files_added"] == 1
    second = cachekey.ModuleDigests(cache=cache, pack=link)
    assert second.facts(path) == first.facts(path) and len(reads) == 1
    second.keep()
    assert counts.counts["files_added"] == 1  # nothing new: not written again
    other = cachekey.ModuleDigests(cache=cache, pack=cachekey.facts_pack_key(str(tmp_path), "other"))
    assert other.facts(path) == first.facts(path) and len(reads) == 2
    with open(entry, "r+b") as f:  # damaged: a bad entry, removed; the module is read again
        f.seek(-3, 2)
        f.write(b"\xff\xff\xff")
    assert cachekey.ModuleDigests(cache=cache, pack=link).facts(path) == first.facts(path) and len(reads) == 3
    assert counts.counts["bad_entries"] == 1 and not entry.exists()


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
