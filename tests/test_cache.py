"""The backend cache, the thin-link cache and the stats, on real links."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import Toolchain, links, ltowrap_env, own_mounts, run, stats_json, wrapper, write
from needs import missing

N_MODULES = 6  # objects in libm.a: m0..m4 and leaf.o


def make_project(d: Path, tweak: str = "") -> None:
    """N modules in a chain; module k calls k+1 (so imports cross modules)."""
    chain = N_MODULES - 1
    for k in range(chain):
        nxt = f"f{k + 1}(x) + " if k + 1 < chain else ""
        decl = f"int f{k + 1}(int);\n" if k + 1 < chain else ""
        extra = tweak if k == chain - 1 else ""
        write(d / f"m{k}.c", f"{decl}int f{k}(int x) {{ return {nxt}x * {k + 2} {extra}; }}\n")
    write(d / "leaf.c", "__attribute__((noinline)) int leaf(int x) { return x ^ 0x55; }\n")
    write(d / "main.c", '#include <stdio.h>\nint f0(int); int leaf(int);\nint main(void){ int s = 0;'
          ' for (int i = 0; i < 50; i++) s += f0(i) + leaf(i); printf("%d\\n", s); return 0; }\n')
    names = " ".join([*(f"m{k}.o" for k in range(N_MODULES - 1)), "leaf.o"])
    write(d / "Makefile", f"""CC ?= clang
CFLAGS = -O2 -flto=thin
prog: main.o libm.a
\t$(CC) -fuse-ld=lld $(CFLAGS) -o $@ main.o libm.a
libm.a: {names}
\t$(AR) rcs $@ $^
%.o: %.c
\t$(CC) $(CFLAGS) -c $< -o $@
clean:
\trm -f *.o *.a prog
""")


def build(d: Path, tc: Toolchain, env_extra: dict | None = None) -> subprocess.CompletedProcess[str]:
    # These tests are about the entries under the link: the link memo (tests/test_linkmemo.py)
    # would restore a relink whole before reaching them.
    env = ltowrap_env(tc, LTOWRAP_MEMO="0", **(env_extra or {}))
    return run(["make", "-s", f"CC={wrapper('ltowrap-clang')}", f"AR={tc.ar}"], d, env=env)


def prog_link(tmp_path: Path) -> dict:
    return [r for r in links(tmp_path) if "prog" in r["argv"]][-1]


def output_of(d: Path) -> str:
    return run(["./prog"], d).stdout


def test_clean_rebuild_hits_everything_and_is_byte_identical(project, tmp_path, tc):
    make_project(project)
    build(project, tc)
    first = prog_link(tmp_path)
    assert first["decision"] == "distributed" and first["backend_compiles"] == N_MODULES + 1
    binary = (project / "prog").read_bytes()
    run(["make", "-s", "clean"], project)
    build(project, tc)
    second = prog_link(tmp_path)
    assert second["backend_compiles"] == 0 and second["backend_hits"] == N_MODULES + 1
    assert second["thinlink_cached"]
    assert (project / "prog").read_bytes() == binary
    s = stats_json()
    assert s["backend_hits"] == N_MODULES + 1 and s["backend_misses"] == N_MODULES + 1
    assert s["thinlink_hits"] == 1 and s["links_distributed"] == 2


def test_moved_project_still_hits(project, tmp_path, tc22):
    make_project(project)
    build(project, tc22)
    want = output_of(project)
    moved = tmp_path / "elsewhere" / "deeper" / "copy"
    shutil.copytree(project, moved)
    run(["make", "-s", "clean"], moved)
    build(moved, tc22)
    rec = prog_link(tmp_path)
    assert rec["cwd"] == str(moved)
    assert rec["backend_compiles"] == 0 and rec["backend_hits"] == N_MODULES + 1
    assert output_of(moved) == want


def test_one_edit_misses_only_what_changed(project, tmp_path, tc22):
    make_project(project)
    build(project, tc22)
    write(project / "main.c", (project / "main.c").read_text().replace("i < 50", "i < 60"))
    build(project, tc22)
    rec = prog_link(tmp_path)
    compiled = {b["module"] for b in rec["backends"] if not b["cached"]}
    # main.o changed; no other module imports from main, so everything else is a hit.
    assert compiled == {"main.o"}, rec["backends"]
    assert not rec["thinlink_cached"]
    # A change to the body of a function nobody imports (noinline) misses for its own module
    # only: its callers' shards name it (-import-declaration) by its interface, not its bytes.
    write(project / "leaf.c", (project / "leaf.c").read_text().replace("0x55", "0x56"))
    build(project, tc22)
    rec = prog_link(tmp_path)
    compiled = {b["module"].split("(")[-1].rstrip(")") for b in rec["backends"] if not b["cached"]}
    assert compiled == {"leaf.o"}, rec["backends"]
    # A new function nobody calls, appended to it: the same (issue 24).
    write(project / "leaf.c", (project / "leaf.c").read_text() + "int fp_new(int x) { return x * 12345 + 1; }\n")
    build(project, tc22)
    rec = prog_link(tmp_path)
    compiled = {b["module"].split("(")[-1].rstrip(")") for b in rec["backends"] if not b["cached"]}
    assert compiled == {"leaf.o"}, rec["backends"]
    # A change to a module others import from misses for it and for its importers, not for all.
    write(project / "m4.c", (project / "m4.c").read_text().replace("* 6", "* 7"))
    build(project, tc22)
    rec = prog_link(tmp_path)
    compiled = {b["module"].split("(")[-1].rstrip(")") for b in rec["backends"] if not b["cached"]}
    assert "m4.o" in compiled and "leaf.o" not in compiled


def test_a_compiled_object_and_a_hit_are_the_entrys_own_file(project, tmp_path, tc22):
    """A cold link's backend outputs become their o/ entries where they lie (hard links, not
    copies), and a link of hits links those entries into its work directory (`keep` leaves
    it to look at); the program is the same either way."""
    make_project(project)
    build(project, tc22, {"LTOWRAP_KEEP": "1"})
    cache_dir = Path(os.environ["LTOWRAP_CACHE_DIR"])
    entries = {p.stat().st_ino for p in (cache_dir / "o").iterdir() if not p.name.endswith(".key.txt")}
    assert len(entries) == N_MODULES + 1

    def linked(workdir: Path) -> set[int]:
        return {p.stat().st_ino for p in workdir.rglob("*") if p.is_file() and p.stat().st_ino in entries}

    [first] = [d for d in (cache_dir / "tmp").iterdir() if d.is_dir()]
    assert linked(first) == entries
    binary = (project / "prog").read_bytes()
    run(["make", "-s", "clean"], project)
    build(project, tc22, {"LTOWRAP_KEEP": "1"})
    assert prog_link(tmp_path)["backend_hits"] == N_MODULES + 1
    [second] = [d for d in (cache_dir / "tmp").iterdir() if d.is_dir() and d != first]
    assert linked(second) == entries
    assert (project / "prog").read_bytes() == binary


def facts_entries(cache_dir: Path) -> list[dict]:
    """The c/ entries that hold module facts (cachekey.ModuleDigests.keep): module digest -> record."""
    import marshal

    from ltowrap import cache

    found = []
    for p in (cache_dir / "c").iterdir():
        entry = cache.decode(p.read_bytes())
        data = marshal.loads(entry.payload) if entry is not None else None
        if isinstance(data, dict) and data and all(isinstance(v, list) and len(v) == 9 for v in data.values()):
            found.append(data)
    return found


def test_a_link_keeps_its_modules_facts_in_one_entry_that_its_next_run_finds(project, tmp_path, tc22):
    """A cold link keeps the facts of all its modules in one c/ entry, not one a module (a file's
    creation each); after an edit, the same entry holds the edited module's facts in place of
    the old ones."""
    from ltowrap import cachekey

    make_project(project)
    build(project, tc22)
    cache_dir = Path(os.environ["LTOWRAP_CACHE_DIR"])
    modules = {cachekey.digest_bytes(p.read_bytes()) for p in (cache_dir / "m").iterdir()}
    [facts] = facts_entries(cache_dir)
    assert set(facts) == modules and len(modules) == N_MODULES + 1
    old_main = cachekey.digest_bytes((project / "main.o").read_bytes())
    write(project / "main.c", (project / "main.c").read_text().replace("i < 50", "i < 60"))
    build(project, tc22)
    [facts] = facts_entries(cache_dir)
    main = cachekey.digest_bytes((project / "main.o").read_bytes())
    assert main in facts and old_main not in facts and set(facts) == modules - {old_main} | {main}


@pytest.mark.slow
def test_concurrent_links_share_one_cache(tmp_path, tc22):
    """8 projects (4 identical pairs) linked at once on one cache: right output, exact counters."""
    dirs = []
    for i in range(8):
        d = tmp_path / f"p{i}"
        make_project(d, tweak=f"+ {i % 4}")
        dirs.append(d)
    env = ltowrap_env(tc22, LTOWRAP_JOBS="1")
    for d in dirs:
        for src in sorted(d.glob("*.c")):
            run([tc22.clang, "-O2", "-flto=thin", "-c", src.name], d)
    link = [wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", "prog", "main.o", "leaf.o",
            *(f"m{k}.o" for k in range(N_MODULES - 1))]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda d: run(link, d, env=env), dirs))
    assert all(r.returncode == 0 for r in results)
    outputs = [output_of(d) for d in dirs]
    for i in range(4):
        assert outputs[i] == outputs[i + 4]
    s = stats_json()
    recs = links(tmp_path)
    assert len(recs) == 8 and all(r["decision"] == "distributed" for r in recs)
    assert s["links_distributed"] == 8
    assert s["backend_hits"] + s["backend_misses"] == 8 * (N_MODULES + 1)
    assert s["backend_hits"] == sum(r["backend_hits"] for r in recs)
    assert s["backend_misses"] == sum(r["backend_compiles"] for r in recs)


def cache_size(cache: Path) -> int:
    """Bytes in the parts of the cache that count against max_size (see cache.SIZED_KINDS)."""
    return sum(p.stat().st_size for kind in ("o", "t", "m", "c") for p in (cache / kind).rglob("*") if p.is_file())


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "o").rglob("*") if p.is_file() and not p.name.endswith(".key.txt"))


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "swap"])
def test_damaged_entries_are_detected_and_rebuilt(project, tmp_path, tc22, damage):
    make_project(project)
    build(project, tc22)
    want = output_of(project)
    cache = tmp_path / "cache"
    entries = _entries(cache)
    victim = entries[0]
    blob = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(blob[: len(blob) // 2])
    elif damage == "bitflip":
        victim.write_bytes(blob[:-10] + bytes([blob[-10] ^ 0x01]) + blob[-9:])
    else:  # another entry's (valid) content under this key: caught by the stored key check
        victim.write_bytes(entries[1].read_bytes())
    run(["make", "-s", "clean"], project)
    build(project, tc22)
    rec = prog_link(tmp_path)
    assert output_of(project) == want
    assert rec["backend_compiles"] == 1 and rec["backend_hits"] == N_MODULES
    assert stats_json()["bad_entries"] == 1
    assert victim.read_bytes() != b""  # rebuilt and stored again


def test_unwritable_cache_still_links(project, tmp_path, tc22):
    make_project(project)
    (tmp_path / "not-a-dir").write_text("a file where the cache should be\n")
    done = build(project, tc22, {"LTOWRAP_CACHE_DIR": str(tmp_path / "not-a-dir" / "cache")})
    assert "linking without it" in done.stderr
    assert prog_link(tmp_path)["decision"] == "distributed"
    assert output_of(project)


# Inside the namespace: mount a tmpfs ($1: its options) on $2, write $3 bytes of filler,
# then run the build ("$@" after those) and save `ltowrap stats --json` (the stats live in the tmpfs).
ON_TMPFS = """set -e
mount -t tmpfs -o "$1" tmpfs "$2"
[ "$3" = 0 ] || head -c "$3" /dev/zero >"$2/filler"
shift 3
"$@"
"$LTOWRAP" stats --json >"$STATS_OUT"
"""
BIG = 100_000  # bytes of data in big.o's bitcode: more than the 64 KiB tmpfs holds


def big_module_project(d: Path) -> None:
    """main.o and big.o, whose bitcode (a 100 KB table of distinct bytes) cannot fit the cache."""
    table = ",".join(str((i * 7919) % 251) for i in range(BIG))
    write(d / "big.c", f"const unsigned char big_table[{BIG}] = {{{table}}};\n")
    write(d / "main.c", '#include <stdio.h>\nextern const unsigned char big_table[];\nint main(void){ unsigned s = 0;'
          f' for (int i = 0; i < {BIG}; i += 97) s += big_table[i]; printf("%u\\n", s); return 0; }}\n')
    write(d / "Makefile", """prog: main.o big.o
\t$(CC) -fuse-ld=lld -O2 -flto=thin -o $@ main.o big.o
%.o: %.c
\t$(CC) -O2 -flto=thin -c $< -o $@
""")


@pytest.mark.parametrize("kind", ["full", "no-room-for-a-module", "readonly"])
def test_full_or_readonly_cache_still_gives_a_distributed_link(project, tmp_path, tc22, kind):
    """README: a full or read-only cache still gives a distributed link, with a throw-away cache.

    full: the 64 KiB tmpfs is filled before the build (nothing more fits, not even the stats);
    no-room-for-a-module: small files fit, big.o's module does not, so the count can be read back.
    """
    ns = own_mounts()
    (make_project if kind == "full" else big_module_project)(project)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    opts, filler, cache = {"full": ("size=64k", 60_000, mnt / "cache"),
                           "no-room-for-a-module": ("size=64k", 0, mnt / "cache"),
                           "readonly": ("size=1m,ro", 0, mnt)}[kind]
    env = ltowrap_env(tc22, LTOWRAP_CACHE_DIR=str(cache), LTOWRAP=wrapper("ltowrap"),
                      STATS_OUT=str(tmp_path / "stats.json"))
    make = ["make", "-s", f"CC={wrapper('ltowrap-clang')}", f"AR={tc22.ar}"]
    done = run([*ns, "sh", "-c", ON_TMPFS, "sh", opts, str(mnt), str(filler), *make], project, env=env)
    rec = prog_link(tmp_path)
    assert rec["decision"] == "distributed", (rec.get("detail"), done.stderr)
    assert "linking without it" in done.stderr and "internal error" not in done.stderr
    assert rec["backend_compiles"] == rec["modules"]  # every backend ran, on the throw-away cache
    run([tc22.clang, "-O2", "-o", "ref", *sorted(p.name for p in project.glob("*.c"))], project)
    assert output_of(project) == run(["./ref"], project).stdout
    if kind == "no-room-for-a-module":
        s = json.loads((tmp_path / "stats.json").read_text())
        assert s["links_distributed"] == 1 and s["links_fallback"] == 0
        assert s["cache_write_errors"] == 1  # big.o's module, once: not again for the same trouble


def test_eviction_keeps_cache_under_max_size_and_keeps_recent(project, tmp_path, tc22):
    make_project(project)
    build(project, tc22)
    cache = tmp_path / "cache"
    total = cache_size(cache)
    limit = total // 2
    run([wrapper("ltowrap"), "cache", "trim", "--max-size", str(limit)], project)
    after = cache_size(cache)
    assert after <= limit
    s = stats_json()
    assert s["cleanups"] == 1 and s["files_evicted"] > 0
    assert abs(s["cache_bytes"] - after) <= 0.05 * after + 4096


def test_lru_order_on_automatic_cleanup(tmp_path, tc22):
    """Build A, then B, touch A (a hit), then C over the limit: B's entries go first."""
    env_base = {"LTOWRAP_MAX_SIZE": "0"}
    for name in ("a", "b"):
        d = tmp_path / name
        make_project(d, tweak=f"+ {ord(name)}")
        build(d, tc22, env_base)
    cache = tmp_path / "cache"
    size_ab = cache_size(cache)
    run(["make", "-s", "clean"], tmp_path / "a")
    build(tmp_path / "a", tc22, env_base)  # hits refresh A's entries
    d = tmp_path / "c"
    make_project(d, tweak="+ 99")
    build(d, tc22, {"LTOWRAP_MAX_SIZE": str(int(size_ab * 1.1))})
    s = stats_json()
    assert s["cleanups"] >= 1
    run(["make", "-s", "clean"], tmp_path / "a")
    build(tmp_path / "a", tc22, env_base)
    a_rec = prog_link(tmp_path)
    assert a_rec["backend_hits"] >= N_MODULES  # A survived
    run(["make", "-s", "clean"], tmp_path / "b")
    build(tmp_path / "b", tc22, env_base)
    b_rec = prog_link(tmp_path)
    assert b_rec["backend_compiles"] > 0  # B was evicted (at least partly)


def test_stats_json_after_known_sequence(project, tmp_path, tc22):
    make_project(project)
    build(project, tc22)  # 1 distributed link, N+1 misses
    run(["make", "-s", "clean"], project)
    build(project, tc22)  # 1 distributed link, N+1 hits, thin-link hit
    write(project / "native.c", "int main(void){ return 0; }\n")
    run([tc22.clang, "-c", "native.c"], project)
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "native.o", "-o", "native"], project,
        env=ltowrap_env(tc22))  # passthrough
    s = stats_json()
    for key in ("links_distributed", "links_passthrough", "links_fallback", "backend_hits", "backend_misses",
                "thinlink_hits", "cache_bytes", "cache_entries", "max_size_bytes", "zeroed_at"):
        assert key in s
    assert (s["links_distributed"], s["links_passthrough"], s["links_fallback"]) == (2, 1, 0)
    assert (s["backend_hits"], s["backend_misses"], s["thinlink_hits"]) == (N_MODULES + 1, N_MODULES + 1, 1)
    assert s["max_size_bytes"] == 5 << 30 and s["cache_entries"] > 0 and s["cache_bytes"] > 0
    assert s["zeroed_at"] is None
    run([wrapper("ltowrap"), "stats", "--zero"], project)
    s2 = stats_json()
    assert s2["links_distributed"] == 0 and s2["zeroed_at"] is not None
    assert s2["cache_bytes"] == s["cache_bytes"]
    human = run([wrapper("ltowrap"), "stats"], project).stdout
    assert "Hit rate" in human and "Distributed" in human


def test_trim_removes_work_directories_of_killed_links(project, tmp_path):
    tmp = tmp_path / "cache" / "tmp"
    dead = tmp / "link-999999999-abcd"  # no such process
    alive = tmp / f"link-{os.getpid()}-abcd"
    for d in (dead, alive):
        (d / "idx").mkdir(parents=True)
    run([wrapper("ltowrap"), "cache", "trim"], project)
    assert not dead.exists() and alive.exists()


def test_stats_shards_of_an_older_ltowrap_are_still_counted(tmp_path):
    """Shards were JSON before they were text lines: an upgrade keeps the counts."""
    from ltowrap import stats

    root = tmp_path / "cache"
    (root / "stats").mkdir(parents=True)
    shard = root / "stats" / str(os.getpid() % stats.SHARDS)  # the one this process adds to
    shard.write_text('{"counts": {"link_hits": 2, "cpu_saved_seconds": 1.5}, "reasons": {"no-bitcode": 1}}')
    (root / "stats" / "zeroed").write_text('{"at": 1700000000.5}')
    s = stats.summary(str(root))
    assert s == {"counts": {"link_hits": 2, "cpu_saved_seconds": 1.5}, "reasons": {"no-bitcode": 1},
                 "zeroed_at": 1700000000.5}
    added = stats.Stats()
    added.add("link_hits")
    added.add("cpu_saved_seconds", 0.25)
    stats.flush(str(root), added)
    after = stats.summary(str(root))
    assert after["counts"] == {"link_hits": 3, "cpu_saved_seconds": 1.75}
    assert after["reasons"] == {"no-bitcode": 1}
    assert shard.read_text().startswith("count ")  # rewritten in today's format


def test_structured_payloads_are_one_format_and_a_bad_one_is_a_counted_miss(tmp_path):
    """put_data/get_data: marshalled data, bytes as they are; a payload that does not decode, or
    holds data of another shape, is removed and counted; an older ltowrap's entry is a plain miss."""
    from ltowrap import cache, stats

    counts = stats.Stats()
    c = cache.Cache(str(tmp_path), counts)
    c.put_data("c", "k1", {"jobs": [("a.o", b"BC\xc0\xde", ["b.o"], "id")]})
    assert c.get_data("c", "k1", lambda d: d) == {"jobs": [("a.o", b"BC\xc0\xde", ["b.o"], "id")]}
    c.put("c", "k2", {}, b"\xff\xfe")  # a well-formed entry whose payload is no marshalled data
    assert c.get_data("c", "k2", lambda d: d) is None
    assert counts.counts["bad_entries"] == 1 and not os.path.exists(c.path("c", "k2"))
    c.put_data("c", "k3", ["a list"])
    assert c.get_data("c", "k3", cache.text_data) is None  # another shape
    assert counts.counts["bad_entries"] == 2
    old = Path(c.path("c", "k1"))
    old.write_bytes(b"LTOWRAP2" + old.read_bytes()[8:])
    assert c.get_data("c", "k1", lambda d: d) is None and counts.counts["bad_entries"] == 2


def test_entries_are_files_right_under_their_kind_and_the_fanned_out_layout_is_a_plain_miss(tmp_path):
    """Every kind is one flat directory (a new cache's link makes no directory per entry); an
    entry an older ltowrap left under o/xx/ is not read (a plain miss, not a bad entry) and
    is still trimmed."""
    from ltowrap import cache, stats

    counts = stats.Stats()
    root = tmp_path / "cache"
    c = cache.Cache(str(root), counts)
    key = "ab" + "0" * 30
    for kind in ("o", "t", "l", "c", "d"):
        assert c.path(kind, key) == str(root / kind / key)
        assert c.put(kind, key, {}, b"payload")
        assert sorted(p.name for p in (root / kind).iterdir()) == [key]
        entry = c.get(kind, key)
        assert entry is not None and entry.payload == b"payload"
    old = root / "o" / "cd" / ("cd" + "1" * 30)
    old.parent.mkdir()
    old.write_bytes(cache.encode({"key": old.name}, b"older"))
    assert c.get("o", old.name) is None and "bad_entries" not in counts.counts
    assert str(old) in [p for _, _, p in c.files()]
    assert c.trim(0) == 6 and not old.exists()


def test_a_module_stored_anew_counts_what_it_replaced_and_a_new_one_nothing(tmp_path):
    from ltowrap import cache, stats

    counts = stats.Stats()
    c = cache.Cache(str(tmp_path / "cache"), counts)
    path, new = c.store_module("000000-aa", b"BC\xc0\xde one")
    assert new and Path(path).read_bytes() == b"BC\xc0\xde one"
    assert counts.counts == {"bytes_added": 8, "files_added": 1}
    Path(path).write_bytes(b"damaged")
    assert c.store_module("000000-aa", b"BC\xc0\xde one") == (path, True)
    assert counts.counts == {"bytes_added": 16, "files_added": 2, "bad_entries": 1, "bytes_removed": 7,
                             "files_removed": 1}
    assert c.store_module("000000-aa", b"BC\xc0\xde one") == (path, False)
    assert counts.counts["files_added"] == 2


def test_an_entry_written_in_parts_is_the_whole_encoding(tmp_path):
    """put writes the payload, then its tail (no copy of it into one buffer): the file is the
    payload, the meta, the meta's length, the xxh3-128 of all that comes before it, MAGIC."""
    import marshal

    import xxhash

    from ltowrap import cache
    from ltowrap.stats import Stats

    c = cache.Cache(str(tmp_path / "cache"), Stats())
    payload = os.urandom(3 << 20)
    assert c.put("o", "k" * 32, {"size": len(payload)}, payload)
    blob = Path(c.path("o", "k" * 32)).read_bytes()
    assert blob[-8:] == cache.MAGIC and blob[-24:-8] == xxhash.xxh3_128_digest(blob[:-24])
    n = int.from_bytes(blob[-28:-24], "little")
    assert marshal.loads(blob[-28 - n : -28]) == {"size": len(payload), "key": "k" * 32}
    assert blob[: -28 - n] == payload
    entry = c.get("o", "k" * 32)
    assert entry is not None and entry.payload == payload


def test_an_output_becomes_its_entry_and_a_hit_is_linked_out(tmp_path):
    """put_file makes the file that holds an object its entry, the tail appended and the file
    linked into o/ (no copy, no file of its own); link_out gives the work directory a link
    to the entry it read and verified, not to what replaced it since."""
    from ltowrap import cache
    from ltowrap.stats import Stats

    counts = Stats()
    c = cache.Cache(str(tmp_path / "cache"), counts)
    work = tmp_path / "work"
    work.mkdir()
    obj = b"\x7fELF" + os.urandom(5000)
    out = work / "a.o"
    out.write_bytes(obj)
    assert c.put_file("o", "k" * 32, {"seconds": 1.5}, obj, str(out))
    path = Path(c.path("o", "k" * 32))
    assert path.stat().st_ino == out.stat().st_ino and path.stat().st_nlink == 2
    assert out.read_bytes().startswith(obj) and oct(out.stat().st_mode & 0o777) == oct(0o600)
    assert counts.counts == {"bytes_added": path.stat().st_size, "files_added": 1}
    entry = c.get("o", "k" * 32)
    assert entry is not None and entry.payload == obj and entry.meta == {"seconds": 1.5, "key": "k" * 32}

    served = work / "b.o"
    assert c.link_out(entry, str(served))
    assert served.stat().st_ino == path.stat().st_ino
    # Replaced between the read and the link: not served from the file now there.
    again = c.get("o", "k" * 32)
    assert again is not None
    assert c.put("o", "k" * 32, {"seconds": 2}, obj)
    assert not c.link_out(again, str(work / "c.o")) and not (work / "c.o").exists()
    # A name already in the work directory (a compile stopped before its end) is replaced.
    fresh = c.get("o", "k" * 32)
    assert fresh is not None and c.link_out(fresh, str(served))
    assert served.stat().st_ino == path.stat().st_ino
    # Kept apart from the entry's file: written anew, the entry keeps its bytes.
    from ltowrap.jobs import local

    local.write(str(served), b"other")
    assert c.get("o", "k" * 32) is not None and Path(path).read_bytes().startswith(obj)


def test_an_output_the_cache_cannot_link_is_written_as_an_entry(tmp_path):
    """Where the output and the cache are on two file systems (EXDEV), or the output cannot be
    appended to, the entry is written as put writes it; it reads back the same. A hit cannot be
    linked into another file system either (link_out: False, and the payload is written)."""
    from ltowrap import cache
    from ltowrap.stats import Stats

    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        missing("/dev/shm on a file system of its own beside the test's directory", "a tmpfs at /dev/shm")
    c = cache.Cache(str(tmp_path / "cache"), Stats())
    obj = b"\x7fELF" + os.urandom(3000)
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as elsewhere:
        out = Path(elsewhere) / "a.o"
        out.write_bytes(obj)
        assert c.put_file("o", "k" * 32, {}, obj, str(out))
        path = Path(c.path("o", "k" * 32))
        assert path.stat().st_nlink == 1 and path.read_bytes() == out.read_bytes()
        entry = c.get("o", "k" * 32)  # and a hit cannot be linked there: the caller writes it
        assert entry is not None and not c.link_out(entry, str(Path(elsewhere) / "b.o"))
    gone = tmp_path / "gone.o"
    assert c.put_file("o", "j" * 32, {}, obj, str(gone)) and not gone.exists()
    entry = c.get("o", "j" * 32)
    assert entry is not None and entry.payload == obj
