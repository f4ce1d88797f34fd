"""A shard's canonical text computed in C (ltowrap._bitcode.shard_text, behind shardkey.canonical)
against the reference (shardkey.canonical_python): the same text, or the same BadBitcode, and
the same callbacks (digest_of, interface_of, sample_profiled) asked in the same order, on every
index shard of the suite's corpora (clang/lld 13 to 22), on hand-built shards of random summary
records (every reason to go in raw, unknown versions among them), and on damaged shards.

The compiled reader is built by pip install (setup.py), or in a clone by
`python setup.py build_ext --inplace`: without it these tests skip, and fail under CI=true.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

import pytest

from ltowrap.formats import shardkey
from ltowrap.formats.bitcode import BadBitcode, bitstream
from streams import MODULE, STRTAB, SUMMARY, block, found_by_fuzzing, mutate, native, nested, random_shard, record, \
    stream


class Asked:
    """The callbacks of one canonical text, each call recorded; `fails` names a path whose name
    cannot be had (OSError, as a module that cannot be read)."""

    def __init__(self, interfaces: bool, sample: bool | None, fails: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.interfaces, self.sample, self.fails = interfaces, sample, fails

    def digest_of(self, path: str) -> str:
        self.calls.append(("digest", path))
        if path == self.fails:
            raise OSError(f"cannot read {path}")
        return f"d{sum(path.encode('utf-8', 'surrogateescape')) % 9973:04d}"

    def interface_of(self, path: str) -> str:
        self.calls.append(("interface", path))
        return f"i{len(path)}"

    def sample_profiled(self, path: str) -> bool:
        self.calls.append(("sample", path))
        return bool(self.sample)

    def args(self, self_path: str | None) -> tuple:
        return (self.digest_of, self_path, self.interface_of if self.interfaces else None,
                None if self.sample is None else self.sample_profiled)


def outcome(text: Callable[[], str]) -> str:
    try:
        return text()
    except (BadBitcode, OSError) as e:
        return f"{type(e).__name__}: {e}"


def compiled_text(shard: bytes, digest_of, self_path, interface_of, sample_profiled) -> str:
    """shard_text called as canonical calls it, without canonical's hand-over to Python: a shard
    the C text does not take fails the comparison."""
    count = None if sample_profiled is None or self_path is None else lambda: sample_profiled(self_path)
    own = None if self_path is None else self_path.encode("utf-8", "surrogateescape")
    text = native().shard_text(bitstream(shard), own, digest_of, interface_of, count, BadBitcode, shardkey._tables())
    assert text is not NotImplemented, "the compiled text handed this shard to Python"
    return text


def both(shard: bytes, self_path: str | None = None, interfaces: bool = True, sample: bool | None = True,
         fails: str | None = None) -> str:
    """The reference's text (or "BadBitcode: ..."), after checking that the compiled one says the
    same and asks the same callbacks in the same order."""
    expected, got = Asked(interfaces, sample, fails), Asked(interfaces, sample, fails)
    want = outcome(lambda: shardkey.canonical_python(shard, *expected.args(self_path)))
    have = outcome(lambda: compiled_text(shard, *got.args(self_path)))
    assert have == want, f"compiled:\n{have[:3000]}\nreference:\n{want[:3000]}"
    assert got.calls == expected.calls
    return want


def shards_of(streams: dict[str, bytes]) -> dict[str, bytes]:
    return {name: data for name, data in streams.items() if name.endswith(".thinlto.bc") and data}


def test_equal_on_every_shard_of_the_suite_corpora(any_tc, corpora):
    """Each shard under each way a link asks for its text: its own module named or not (or a
    path not in it), interfaces or not, the own module sample-profiled or not. The corpora's
    shards are of the known versions, so the canonical path (not raw) is what is compared."""
    shards = shards_of(corpora(any_tc))
    assert len(shards) >= 6
    for name, shard in shards.items():
        own = name[: -len(".thinlto.bc")]
        for self_path, interfaces, sample in ((None, False, None), (own, True, True), (own, True, False),
                                              ("elsewhere.o", True, None)):
            text = both(shard, self_path, interfaces, sample)
            assert text.startswith(shardkey.FORMAT) and "summaries v" in text, (name, text[:300])
    with_declarations = [both(s, n[: -len(".thinlto.bc")]) for n, s in shards.items()]
    if any_tc.version >= 19:  # -import-declaration: some module goes in by its interface
        assert any(" declarations i" in t for t in with_declarations)


@pytest.mark.parametrize("seed", range(3))
def test_equal_on_damaged_shards(tc, corpora, seed):
    """300 damaged shards a seed and toolchain: the same text (raw or not) or the same BadBitcode."""
    rng = random.Random(seed)
    shards = sorted(shards_of(corpora(tc)).items())
    answers = set()
    for _ in range(300):
        name, shard = rng.choice(shards)
        text = both(mutate(rng, shard), rng.choice([None, name[: -len(".thinlto.bc")]]), rng.random() < 0.7,
                    rng.choice([None, True, False]))
        answers.add(text.split(":")[0] if text.startswith("BadBitcode") else "raw" if "summaries raw" in text
                    else "text")
    assert answers == {"BadBitcode", "text", "raw"}, answers


# --- hand-built shards of random summary records ------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_equal_on_random_summary_records(seed):
    """500 random shards a seed, each read as a link asks it: the same text, raw (for the same
    reason) or not, or the same BadBitcode; and, over them, each kind of answer at least once."""
    rng = random.Random(seed)
    seen: set[str] = set()
    for _ in range(500):
        shard, paths = random_shard(rng)
        self_path = rng.choice([None, "nowhere.o", *paths])
        fails = rng.choice(paths) if rng.random() < 0.05 else None
        text = both(shard, self_path, rng.random() < 0.8, rng.choice([None, True, False]), fails)
        if text.startswith(("BadBitcode", "OSError")):
            seen.add(text)
            continue
        for line in text.splitlines():
            if line.startswith("summaries"):
                seen.add(line)
            elif " declarations " in line:
                seen.add("declarations")
    raw = {line for line in seen if line.startswith("summaries raw")}
    assert {"summaries v9", "summaries v10", "summaries v12", "declarations"} <= seen
    assert any(line.startswith("summaries raw (summary version [1") for line in raw)
    assert {"summaries raw (VALUE_GUID layout)", "summaries raw (value id given twice)"} <= raw
    assert len(raw) >= 10, raw
    assert any(line.startswith("BadBitcode") for line in seen) and any(line.startswith("OSError") for line in seen)


def large_shard(rng: random.Random, version: int, order: str, fault: str | None = None) -> tuple[bytes, list[str]]:
    """A shard of 300 modules, 2000 values and 1500 summaries, each list in `order` (sorted,
    reversed or shuffled, as the compiled text's sorts meet it): paths given twice (the second
    entry's rank after the first's) or one the start of another, recorded hashes shared, GUIDs
    given many summaries of one module (their texts decide) and of many. Module and value ids
    from 0 and 1 on, as LLVM 19 and 22 number them, for v12; for v9, module ids sparse (as LLVM 13
    to 16 number them) and value ids too (as none does). `fault` puts one duplicate far from its
    twin (a module id, a value id, a GUID), or a value id given twice between the first and the last."""
    def arrange(items: list, key: Callable) -> list:
        if order == "shuffled":
            return rng.sample(items, len(items))
        return sorted(items, key=key, reverse=order == "reversed")

    modids = rng.sample(range(300 if version >= 10 else 1200), 300)
    if fault == "modid":
        modids[-1] = modids[0]
    paths = [f"dir/m{rng.randrange(150)}.o{rng.choice(['', '', '.x'])}".encode() for _ in modids]
    entries = arrange(list(zip(paths, modids)), key=lambda e: e[0])
    strtab = [part for path, modid in entries
              for part in (record(1, modid, *path), record(2, rng.randrange(100), 7, 7, 7, 7))]
    guids = list(dict.fromkeys(rng.getrandbits(64) >> rng.choice([0, 0, 20, 40]) for _ in range(2100)))[:2000]
    if fault == "guid":
        guids[-1] = guids[0]
    vids = list(range(1, 2001)) if version >= 10 else sorted(rng.sample(range(1, 9000), 2000))
    if fault == "vid":
        vids[-1] = vids[0]
    if fault == "vid between":  # the first and last ids kept
        vids[1000] = vids[1001]
    values = arrange(list(zip(guids, vids)), key=lambda v: v[0])
    guid_records = [record(16, vid, g >> 32, g & 0xFFFFFFFF) if version >= 11 else record(16, vid, g)
                    for g, vid in values]
    owners, few = vids[:300], modids[:20]  # some 50 summaries share a GUID and a module with another
    summaries = []
    for _ in range(1500):
        vid, modid, flags = rng.choice(owners), rng.choice(few if rng.random() < 0.5 else modids), rng.getrandbits(11)
        kind = rng.choice(["fn", "var", "alias"])
        if kind == "fn":
            refs, calls = rng.choices(vids, k=rng.randint(0, 4)), rng.choices(vids, k=rng.randint(0, 4))
            fields = (4, vid, modid, flags, rng.randint(1, 9), 0, 0, len(refs), 0, 0, *refs, *calls)
        elif kind == "var":
            fields = (6, vid, modid, flags, rng.randint(0, 3), *rng.choices(vids, k=rng.randint(0, 3)))
        else:
            fields = (8, vid, modid, flags, rng.choice([0, *vids]))
        summaries.append(((guids[vids.index(vid)], paths[modids.index(modid)]), fields))
    summary = [record(10, version), *guid_records,
               *(record(*fields) for _, fields in arrange(summaries, key=lambda s: s[0]))]
    top = block(MODULE, record(1, 2), nested(STRTAB, *strtab), nested(SUMMARY, *summary))
    return stream(top), [p.decode() for p in paths]


@pytest.mark.parametrize("order", ["sorted", "reversed", "shuffled"])
def test_equal_on_large_shards_in_every_order(order):
    """Shards large enough that the compiled text's sorts merge runs, not only insert: the same
    text as the reference's, in each order the records may come in, and the same refusal of a
    module id, value id or GUID given twice far apart."""
    rng = random.Random(order)
    for version in (9, 12):
        shard, paths = large_shard(rng, version, order)
        text = both(shard, paths[7])
        assert f"summaries v{version}" in text and text.count("\nfn4 ") > 300, text[:300]
        if version == 12:
            assert " declarations i" in text
        assert both(large_shard(rng, version, order, "modid")[0]) == "BadBitcode: two modules with one id"
        for fault in ("vid", "vid between"):
            assert "summaries raw (value id given twice)" in both(large_shard(rng, version, order, fault)[0])
        assert "summaries raw (a GUID under two value ids)" in both(large_shard(rng, version, order, "guid")[0])


def test_numbers_in_decimal_at_every_width():
    """Each width of a 64-bit number in decimal, at the powers of ten and of two and on either
    side, in records kept as they are and as GUIDs."""
    numbers = sorted({n for k in range(20) for n in (10**k - 1, 10**k, 10**k + 1)} |
                     {n for k in range(65) for n in (2**k - 1, 2**k, 2**k + 1)} - {2**64, 2**64 + 1})
    guids = [record(16, vid, g >> 32, g & 0xFFFFFFFF) for vid, g in enumerate(numbers, start=1)]
    shard = stream(block(MODULE, record(1, *numbers), nested(STRTAB, record(1, 0, *b"a.o"), record(2, *numbers)),
                         nested(SUMMARY, record(10, 12), *guids)))
    text = both(shard, "a.o")
    assert "rec 1 0 1 2 3 4 5 7 8 9 10 11 15 16 17 31" in text and f" {2**64 - 1}\n" in text


def test_shards_found_by_fuzzing():
    for name, shard in found_by_fuzzing().items():
        assert both(shard, "a.o").startswith(shardkey.FORMAT), name


def test_the_first_value_guid_refused_says_why():
    """A value id given twice before a VALUE_GUID of the wrong layout, and after one: each says
    why the block goes in raw as the reference's loop meets them."""
    def shard(*guids: Callable) -> bytes:
        return stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")), nested(SUMMARY, record(10, 9), *guids)))

    assert "summaries raw (value id given twice)" in both(shard(record(16, 1, 5), record(16, 1, 6), record(16, 2)))
    assert "summaries raw (VALUE_GUID layout)" in both(shard(record(16, 1, 5), record(16, 2), record(16, 1, 6)))
    assert "summaries raw (value id given twice)" in both(shard(record(16, 0, 5), record(16, 2)))


def test_what_the_compiled_text_does_not_take_goes_to_python():
    """A GUID above 64 bits (v12's halves each wider than 32 bits, which LLVM never writes) and a
    module name that is not ASCII: shard_text answers NotImplemented, and canonical gives the
    reference's text."""
    wide = stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")),
                        nested(SUMMARY, record(10, 12), record(16, 1, 1 << 33, 5), record(6, 1, 0, 0, 0))))
    names = Asked(True, None)
    assert native().shard_text(wide, None, names.digest_of, None, None, BadBitcode,
                               shardkey._tables()) is NotImplemented
    assert shardkey.canonical(wide, names.digest_of) == shardkey.canonical_python(wide, names.digest_of)
    assert f"guids {(1 << 65) | 5}" in shardkey.canonical(wide, names.digest_of)

    plain = stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")), nested(SUMMARY, record(10, 12))))
    assert native().shard_text(plain, None, lambda p: "\u00e9", None, None, BadBitcode,
                               shardkey._tables()) is NotImplemented
    assert shardkey.canonical(plain, lambda p: "\u00e9").splitlines()[2] == "module ^0 \u00e9 hash "


def test_canonical_runs_the_compiled_text_when_built(monkeypatch):
    """canonical() is the compiled text where the reader is compiled, and the reference with
    LTOWRAP_NATIVE=0's switch (bitcode._native None): seen through a digest_of that tells them
    apart by the call stack."""
    import inspect

    from ltowrap.formats import bitcode

    monkeypatch.setattr(bitcode, "_native", native())  # whatever LTOWRAP_NATIVE says
    shard = stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")), nested(SUMMARY, record(10, 12))))

    def digest_of(path: str) -> str:
        return "python" if any(f.function == "canonical_python" for f in inspect.stack()) else "c"

    assert "module ^0 c hash" in shardkey.canonical(shard, digest_of)
    monkeypatch.setattr(bitcode, "_native", None)
    assert "module ^0 python hash" in shardkey.canonical(shard, digest_of)


@pytest.mark.parametrize("seed", range(2))
def test_names_known_already_are_taken_without_asking(seed):
    """With the answers of digest_of and interface_of already known for some paths (`known`,
    as cachekey.ModuleDigests keeps them), shard_text takes those names from there and asks
    the callbacks only for the others; the text is the reference's, whose callbacks give the
    same answers. A known answer that differs from the callback's shows in the text: it is
    read, not checked and ignored."""
    rng = random.Random(seed)
    shown = 0
    for _ in range(300):
        shard, paths = random_shard(rng)
        own = rng.choice([None, *paths])
        reference = Asked(True, rng.choice([None, True, False]))
        want = outcome(lambda: shardkey.canonical_python(shard, *reference.args(own)))
        if not want.startswith(shardkey.FORMAT):
            continue
        names = Asked(True, reference.sample)
        some = [p for p in paths if rng.random() < 0.6]
        known = ({p: names.digest_of(p) for p in some}, {p: names.interface_of(p) for p in some})
        names.calls.clear()
        count = None if names.sample is None or own is None else lambda: names.sample_profiled(own)
        own_bytes = None if own is None else own.encode("utf-8", "surrogateescape")

        def text(known: tuple[dict[str, str], dict[str, str]]) -> str:
            return native().shard_text(bitstream(shard), own_bytes, names.digest_of, names.interface_of, count,
                                       BadBitcode, shardkey._tables(), known)

        assert text(known) == want
        assert not {p for kind, p in names.calls if kind != "sample"} & set(some)
        shown += sum("Wrong" in text(({**known[0], p: "Wrong0"}, {**known[1], p: "Wrong1"})) for p in some)
    assert shown >= 100, shown


# --- the text's digest, without the text ---------------------------------------------------------------

def tagged_digest(data: bytes) -> str:
    """A digest that says what it was given: bytes, and which."""
    assert type(data) is bytes, type(data)
    return "d:" + hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("seed", range(2))
def test_a_digest_of_the_text_is_that_of_the_reference_text(seed, monkeypatch):
    """shard_text with a digest answers the digest of the reference text's bytes, or the same
    BadBitcode; and canonical_digest, compiled or not (LTOWRAP_NATIVE=0's switch), the same."""
    from ltowrap.formats import bitcode

    rng = random.Random(seed)
    texts = 0
    for _ in range(300):
        shard, paths = random_shard(rng)
        own = rng.choice([None, *paths])
        names = Asked(rng.random() < 0.8, rng.choice([None, True, False]))
        want = outcome(lambda: tagged_digest(shardkey.canonical_python(shard, *names.args(own)).encode()))
        count = None if names.sample is None or own is None else lambda: names.sample_profiled(own)
        got = outcome(lambda: native().shard_text(bitstream(shard), None if own is None else own.encode(),
                                                  names.digest_of, names.interface_of if names.interfaces else None,
                                                  count, BadBitcode, shardkey._tables(), None, tagged_digest))
        assert got == want
        texts += want.startswith("d:")
        for compiled in (native(), None):
            monkeypatch.setattr(bitcode, "_native", compiled)
            args = names.args(own)
            assert outcome(lambda: shardkey.canonical_digest(shard, tagged_digest, *args)) == want
    assert texts >= 200, texts


def test_a_digest_of_what_the_compiled_text_does_not_take_is_that_of_python_s_text():
    """The shards the compiled text hands to Python (a GUID above 64 bits, a name that is not
    ASCII, one with a byte that is not UTF-8 among them): canonical_digest digests Python's text,
    encoded as shard_identity always encoded it (UTF-8, surrogates escaped)."""
    wide = stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")),
                        nested(SUMMARY, record(10, 12), record(16, 1, 1 << 33, 5), record(6, 1, 0, 0, 0))))
    plain = stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")), nested(SUMMARY, record(10, 12))))
    for shard, name in ((wide, "d"), (plain, "\u00e9"), (plain, "\udcff")):
        text = shardkey.canonical_python(shard, lambda p: name)
        assert shardkey.canonical_digest(shard, tagged_digest, lambda p: name) == \
            tagged_digest(text.encode("utf-8", "surrogateescape"))


def test_guids_numbered_in_their_own_order_and_not():
    """Value ids that count up in GUID order (as LLVM numbers them) and ids in another order, the
    GUIDs of every width: the list of GUIDs and each summary naming them as the reference has them."""
    rng = random.Random(7)
    guids = sorted({rng.getrandbits(64) >> rng.choice([0, 0, 30, 50, 60]) for _ in range(400)} - {0})
    for vids in (list(range(1, len(guids) + 1)), rng.sample(range(1, len(guids) + 1), len(guids))):
        values = [record(16, vid, g >> 32, g & 0xFFFFFFFF) for vid, g in zip(vids, guids)]
        summaries = [record(6, vid, 0, 0, 0, *rng.choices(vids, k=3)) for vid in vids[::3]]
        shard = stream(block(MODULE, nested(STRTAB, record(1, 0, *b"a.o")),
                             nested(SUMMARY, record(10, 12), *values, *summaries)))
        text = both(shard, "a.o")
        assert "guids " + " ".join(map(str, guids)) + "\n" in text and text.count("\nvar @") == len(summaries)


def test_a_shard_identity_is_the_digest_of_its_canonical_text(tmp_path):
    """cachekey.shard_identity: "shardkey:" and the digest of the canonical text's bytes (with a
    ModuleDigests and with a plain digest_of), "raw:" and the digest of the shard's bytes when it
    cannot be read."""
    from ltowrap import cachekey

    own = str(tmp_path / "a.o")  # its own module: named by its bytes, not read for an interface
    shard = stream(block(MODULE, nested(STRTAB, record(1, 0, *own.encode())), nested(SUMMARY, record(10, 12))))
    names = Asked(True, None)
    for digest_of in (names.digest_of, cachekey.file_digests({own: "d1"})):
        text = cachekey.shard_canonical(shard, digest_of, own)
        assert text is not None and "module ^0 " in text
        assert cachekey.shard_identity(shard, digest_of, own) == \
            "shardkey:" + cachekey.digest_bytes(text.encode("utf-8", "surrogateescape"))
    assert cachekey.shard_identity(b"BC\xc0\xde junk", names.digest_of) == "raw:" + cachekey.digest_bytes(
        b"BC\xc0\xde junk")
