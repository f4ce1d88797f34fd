"""`verify`: a share of cache hits done again and compared, and `ltowrap verify`.

A sound cache gives no mismatch; an entry that is wrong but well-formed (its checksum is
valid: a poisoned cache, a non-deterministic compiler, a key hole) is caught, the fresh
result is used, and the entry is replaced.
"""

from __future__ import annotations

from pathlib import Path

from helpers import Toolchain, links, ltowrap_env, run, stats_json, wrapper, write

from ltowrap import cache

MAIN_C = '#include <stdio.h>\nint work(int);\nint main(int c, char **v) { printf("%d\\n", work(c)); return 0; }\n'
WORK_C = "int work(int x) { int s = 0; for (int i = 0; i < 1000; i++) s += (i * x) ^ (s >> 3); return s; }\n"
OTHER_C = "int work(int x) { return x * 7; }\n"


def build(d: Path, tc: Toolchain, cache_dir: Path, work: str = WORK_C, **extra: str) -> str:
    """Compile and link main.c and work.c; what the program prints."""
    write(d / "main.c", MAIN_C)
    write(d / "work.c", work)
    env = ltowrap_env(tc, LTOWRAP_CACHE_DIR=str(cache_dir), **extra)
    for name in ("main", "work"):
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", f"{name}.c", "-o", f"{name}.o"], d, env=env)
    (d / "prog").unlink(missing_ok=True)
    run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-fuse-ld=lld", "main.o", "work.o", "-o", "prog"], d, env=env)
    return run(["./prog"], d).stdout


def counts(cache_dir: Path) -> tuple[int, int]:
    s = stats_json(ltowrap_env(LTOWRAP_CACHE_DIR=str(cache_dir)))
    return s["verify_checks"], s["verify_mismatches"]


def entries(cache_dir: Path, kind: str) -> list[Path]:
    return sorted(p for p in (cache_dir / kind).rglob("*") if p.is_file() and not p.name.endswith(".txt"))


def object_of(cache_dir: Path, module: str) -> Path:
    """The backend entry of `module` (LTOWRAP_DEBUG=1 wrote what went into each key beside it)."""
    found = [p for p in entries(cache_dir, "o") if f"module: {module}\n" in
             Path(str(p) + ".key.txt").read_text(errors="replace")]
    assert len(found) == 1, found
    return found[0]


def poison(entry: Path, payload: bytes) -> None:
    """Replace an entry's payload, keeping it well-formed: its checksum is valid."""
    old = cache.decode(entry.read_bytes())
    assert old is not None
    entry.write_bytes(cache.encode(old.meta, payload))


def test_a_sound_cache_verifies_without_a_mismatch(tmp_path, tc22):
    d, c = tmp_path / "p", tmp_path / "cache"
    first = build(d, tc22, c)
    cold = (d / "prog").read_bytes()
    assert build(d, tc22, c, LTOWRAP_VERIFY="1") == first  # the memo's hit, linked again: its backends' hits too
    checks, mismatches = counts(c)
    assert checks >= 4 and mismatches == 0  # the memo, the thin-link, two backends
    assert (d / "prog").read_bytes() == cold
    assert links(tmp_path)[-1]["verified"] == "same"


def test_a_poisoned_backend_entry_is_caught_and_replaced(tmp_path, tc22):
    d, c = tmp_path / "p", tmp_path / "cache"
    right = build(d, tc22, c, LTOWRAP_DEBUG="1")
    wrong = build(tmp_path / "q", tc22, tmp_path / "other", OTHER_C, LTOWRAP_DEBUG="1")
    assert wrong != right
    # main.o: its backend inlines work(), so its object decides what the program prints
    poison(object_of(c, "main.o"), cache.decode(object_of(tmp_path / "other", "main.o").read_bytes()).payload)
    assert build(d, tc22, c, LTOWRAP_MEMO="0") == wrong  # the poison reaches the program: the check below can fail
    assert build(d, tc22, c, LTOWRAP_MEMO="0", LTOWRAP_VERIFY="1") == right
    assert counts(c)[1] == 1
    backends = {b["module"]: b for b in links(tmp_path)[-1]["backends"]}
    assert backends["main.o"]["verified"].startswith("mismatch: cache ")
    assert build(d, tc22, c, LTOWRAP_MEMO="0") == right  # the entry was replaced


def test_a_poisoned_link_memo_entry_is_caught_by_ltowrap_verify(tmp_path, tc22):
    d, c = tmp_path / "p", tmp_path / "cache"
    right = build(d, tc22, c)
    wrong = build(tmp_path / "q", tc22, tmp_path / "other", OTHER_C)
    results = [p for p in entries(c, "l") if "outputs" in cache.decode(p.read_bytes()).meta]
    assert len(results) == 1
    bad = (tmp_path / "q" / "prog").read_bytes()
    old = cache.decode(results[0].read_bytes())
    results[0].write_bytes(cache.encode({**old.meta, "outputs": [["prog", len(bad)]]}, bad))
    assert build(d, tc22, c) == wrong  # restored from the poisoned entry
    env = ltowrap_env(tc22, LTOWRAP_CACHE_DIR=str(c), LTOWRAP_LOG=str(tmp_path / "ltowrap.log"))
    done = run([wrapper("ltowrap"), "verify", "--last", "1"], d, env=env, check=False)
    assert done.returncode == 1 and "1 differed" in done.stdout, done.stdout + done.stderr
    assert run(["./prog"], d).stdout == right
    assert build(d, tc22, c) == right  # the entry was replaced
