"""Reliability and security: never break a build, never serve a bad object.

Stress and fault injection on real links (clang/lld 22):
  1. 16 concurrent links on one cache: right binaries, exact counters, every entry whole;
  2. kill -9 of the ltowrap linker at random moments of the thin-link, the backends and
     the stores: nothing partial is ever visible and the next build is right;
  3. damaged thin-link records, backend objects and module-store copies;
  4. hostile inputs, compared with the plain linker (exit code, output file, message);
  5. the cache as an attack surface: modes, planted symlinks, no shell or eval.
The figures of (2) are printed: run with -s to see them.
"""

from __future__ import annotations

import ast
import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import (Toolchain, alive, children, cmdline, compile_all, links, ltowrap_env, pids, run, started,
                     stats_json, wait_until, wrapper, write)
from needs import missing
from ltowrap import cache as cache_mod
from ltowrap.cachekey import digest_bytes

REPO = Path(__file__).resolve().parent.parent
ENTRY_KINDS = ("o", "t", "c")  # encoded entries (cache.encode); m/ holds raw bitcode named by digest


# --- small programs ----------------------------------------------------------------------


def chain_program(d: Path, n: int, tweak: int = 0) -> list[str]:
    """main.c and n modules in a chain (m<k> calls m<k+1>, so imports cross modules)."""
    for k in range(n):
        call = f"f{k + 1}(x) + " if k + 1 < n else ""
        decl = f"int f{k + 1}(int);\n" if k + 1 < n else ""
        factor = k + 2 + (tweak if k == n - 1 else 0)
        write(d / f"m{k}.c", f"{decl}int f{k}(int x) {{ return {call}x * {factor}; }}\n")
    write(d / "main.c", '#include <stdio.h>\nint f0(int);\nint main(void){ int s = 0;'
          ' for (int i = 0; i < 20; i++) s += f0(i); printf("%d\\n", s); return 0; }\n')
    return ["main.o", *(f"m{k}.o" for k in range(n))]


def lt_link(tc: Toolchain) -> list[str]:
    return [wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin"]


def plain_link(tc: Toolchain) -> list[str]:
    return [tc.clang, "-fuse-ld=lld", "-flto=thin"]


def reference_output(d: Path, tc: Toolchain, objs: list[str], name: str = "ref") -> str:
    """What the program prints when linked by the plain linker, without ltowrap."""
    run([*plain_link(tc), "-o", name, *objs], d)
    return run([f"./{name}"], d).stdout


# --- looking at the cache ----------------------------------------------------------------


def cache_files(cache: Path) -> list[Path]:
    return sorted(p for kind in (*ENTRY_KINDS, "m", "r") for p in (cache / kind).rglob("*")
                  if p.is_file() or p.is_symlink())


def snapshot(cache: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in cache_files(cache) if not p.name.startswith(".tmp.") and not p.is_symlink()}


def audit(cache: Path) -> tuple[list[str], int]:
    """What a reader could see that is not whole: (problems, number of .tmp.* leftovers).

    Entries in o/, t/, c/ decode and carry their own key; files in m/ are named by the
    xxh3-128 of their bytes (`<position>-<digest>.o`, native members `<digest>.native.o`).
    """
    problems: list[str] = []
    leftovers = 0
    for p in cache_files(cache):
        if p.name.startswith(".tmp."):
            leftovers += 1
            continue
        kind = p.relative_to(cache).parts[0]
        if kind in ENTRY_KINDS and not p.name.endswith(".key.txt"):
            entry = cache_mod.decode(p.read_bytes())
            if entry is None:
                problems.append(f"{p}: does not decode")
            elif entry.meta.get("key") != p.name:
                problems.append(f"{p}: holds the entry of key {entry.meta.get('key')}")
        elif kind == "m":
            # m/<position>-<digest>.o for modules, m/<digest>.native.o for native members
            if digest_bytes(p.read_bytes()) != p.name.split(".")[0].rsplit("-", 1)[-1]:
                problems.append(f"{p}: bytes do not match the digest in its name")
    return problems, leftovers


def new_link_records(tmp_path: Path, before: int) -> list[dict]:
    return links(tmp_path)[before:]


# --- processes ---------------------------------------------------------------------------


def _ld_entry(entry_pid: int) -> int | None:
    """The process running ltowrap's link: the clang entry itself (ltowrap-entry, once it has
    read the driver's link line), or an ltowrap-ld.lld the clang driver started."""
    if any(arg.endswith(b"ltowrap-entry") for arg in cmdline(entry_pid)[:3]):
        return entry_pid
    for child in children(entry_pid):
        if any(arg.endswith(b"ltowrap-ld.lld") for arg in cmdline(child)[:3]):
            return child
    return None


def _kind(cmd: list[bytes]) -> str:
    joined = b" ".join(cmd)
    if b"--thinlto-index-only" in joined:
        return "thin-link"
    if b"-fthinlto-index=" in joined:
        return "backend"
    if cmd and cmd[0].endswith(b"ld.lld"):
        return "final link"
    return "python"


def _kids(pid: int) -> dict[int, str]:
    return {c: _kind(cmdline(c)) for c in started(pid)}


def _phase(pid: int) -> str:
    """What ltowrap is doing: a child's kind, else its own Python code (plan, module store,
    cache lookups, entry stores)."""
    kinds = set(_kids(pid).values())
    for k in ("thin-link", "backend", "final link"):
        if k in kinds:
            return k
    return "python"


def _kill_orphans(marker: str) -> None:
    """SIGKILL what a killed link left running (its lld and clang children, by our cache path in
    their command lines), again until none is left: one may be starting another."""

    def none_left() -> bool:
        left = pids(lambda argv: marker.encode() in b" ".join(argv))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not left

    wait_until(none_left, 30, f"the processes of {marker} gone")


# --- 1. concurrency ----------------------------------------------------------------------


@pytest.mark.slow
def test_16_concurrent_links_on_one_cache(tmp_path, tc22):
    """4 programs, each in two directories, each linked twice (two outputs) at once: 16 links."""
    n = 4
    variants = []
    for v in range(4):
        src = tmp_path / f"v{v}a"
        objs = chain_program(src, n, tweak=v)
        compile_all(src, tc22.clang)
        twin = tmp_path / f"v{v}b"
        shutil.copytree(src, twin)  # the same bytes in another directory
        variants.append((reference_output(src, tc22, objs), [src, twin], objs))
    jobs = [(d, out, objs, want) for want, dirs, objs in variants for d in dirs for out in ("prog1", "prog2")]
    assert len(jobs) == 16
    env = ltowrap_env(tc22)

    def link(job):
        d, out, objs, _ = job
        return subprocess.run([*lt_link(tc22), "-o", out, *objs], cwd=d, env=env, capture_output=True, text=True)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(link, jobs))
    for (d, out, _, want), r in zip(jobs, results):
        assert r.returncode == 0, r.stderr
        assert "ltowrap:" not in r.stderr
        assert run([f"./{out}"], d).stdout == want, f"{d}/{out}"
    recs = links(tmp_path)
    assert len(recs) == 16 and all(r["decision"] == "distributed" for r in recs), [r["reason"] for r in recs]
    s = stats_json()
    assert s["links_distributed"] == 16 and s["links_fallback"] == 0
    assert s["backend_hits"] + s["backend_misses"] == 16 * (n + 1)
    assert s["backend_hits"] == sum(r["backend_hits"] for r in recs)
    assert s["backend_misses"] == sum(r["backend_compiles"] for r in recs)
    assert s["backend_failures"] == 0 and s["bad_entries"] == 0
    problems, leftovers = audit(tmp_path / "cache")
    assert problems == [] and leftovers == 0
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []


# --- 2. kill -9 ----------------------------------------------------------------------------

KILL_TRIALS = 36  # six at each target
KILL_TARGETS = ("early", "thin-link", "backend", "store", "final link", "random")
HUB = "int hub(int x) { return x * SEED + 7; }\n"
WORK = """int hub(int);
static unsigned poly{k}(unsigned x, int n) {{ unsigned s = 0; for (int i = 0; i < n; i++) s = s * x + (unsigned)(i ^ {k}) + hub(i); return s; }}
unsigned work{k}(unsigned x) {{ unsigned t = 0; for (int j = 1; j < 40; j++) t += poly{k}(x / j + hub(j), j + {k}); return t; }}
"""
N_WORK = 6


def _kill_program(d: Path, clang: str) -> list[str]:
    """main + 6 modules that all import hub(): a new hub.o makes every backend miss."""
    write(d / "hub.c", HUB)
    for k in range(N_WORK):
        write(d / f"w{k}.c", WORK.format(k=k))
    decls = "".join(f"unsigned work{k}(unsigned);\n" for k in range(N_WORK))
    calls = " + ".join(f"work{k}(x)" for k in range(N_WORK))
    write(d / "main.c", f'#include <stdio.h>\n{decls}int main(void){{ unsigned x = 3; printf("%u\\n", {calls}); return 0; }}\n')
    for src in ["main.c", *(f"w{k}.c" for k in range(N_WORK))]:
        run([clang, "-O2", "-flto=thin", "-c", src], d)
    return ["main.o", *(f"w{k}.o" for k in range(N_WORK))]


def _freeze(ld: int) -> str:
    """SIGSTOP ltowrap's link process and say which phase it is stopped in.

    A child it has not reaped yet (running, or exited and not waited for) is a step it is
    still in, whatever the speed of the machine; with none, it is in its own Python code.
    """
    before = _kids(ld)  # kinds are read while the children run: a zombie has no cmdline
    os.kill(ld, signal.SIGSTOP)
    kinds = {before.get(child) or _kind(cmdline(child)) for child in started(ld)}
    for k in ("thin-link", "backend", "final link"):
        if k in kinds:
            return k
    return "python"


def _kill_at(proc: subprocess.Popen, target: str, rng: random.Random, delay: bool) -> tuple[bool, str]:
    """Wait for the moment `target` of the link in `proc`, stop it there and SIGKILL it: (killed, phase).

    Without `delay`, the kill comes as soon as the target phase is seen; with it, at a
    random moment after that (the phase seen is then whatever the link had reached).
    """
    ld = None
    deadline = time.time() + 20
    while proc.poll() is None and time.time() < deadline:
        ld = _ld_entry(proc.pid)
        if ld is not None:
            break
        time.sleep(0.001)
    if ld is None:
        return False, "finished"
    until = time.time() + 10

    def wait_for(phase: str) -> None:
        while alive(ld) and time.time() < until and _phase(ld) != phase:
            time.sleep(0.0005)

    def pause(most: float) -> None:
        if delay:
            time.sleep(rng.uniform(0, most))

    if target == "early":  # interpreter start, parse, plan, module store
        pause(0.15)
    elif target == "thin-link":
        wait_for("thin-link")
        pause(0.02)
    elif target == "backend":
        wait_for("backend")
        pause(0.25)
    elif target == "store":  # a backend has just exited: ltowrap is reading and storing its object
        seen: set[int] = set()
        while alive(ld) and time.time() < until:
            now = {p for p, k in _kids(ld).items() if k == "backend"}
            if seen - now:
                break
            seen |= now
            time.sleep(0.0002)
    elif target == "final link":
        wait_for("final link")
        pause(0.01)
    else:
        time.sleep(rng.uniform(0, 0.6))
    if not alive(ld):
        return False, "finished"
    try:
        phase = _freeze(ld)
        os.kill(ld, signal.SIGKILL)
    except ProcessLookupError:
        return False, "finished"
    return True, phase


@pytest.mark.slow
def test_kill_9_at_random_moments_never_leaves_a_bad_entry(project, tmp_path, tc22):
    objs = _kill_program(project, tc22.clang)
    cache = tmp_path / "cache"
    env = ltowrap_env(tc22, LTOWRAP_JOBS="2")
    rng = random.Random(20240607)
    trials = faults = broken = bad = fallbacks = 0
    by_target: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    problems: list[str] = []
    max_leftovers = 0
    failures: list[str] = []
    for i in range(KILL_TRIALS):
        target = KILL_TARGETS[i % len(KILL_TARGETS)]
        hub = f"hub{i}.o"
        run([tc22.clang, "-O2", "-flto=thin", f"-DSEED={i + 2}", "-c", "hub.c", "-o", hub], project)
        inputs = [*objs, hub]
        want = reference_output(project, tc22, inputs)
        proc = subprocess.Popen([*lt_link(tc22), "-o", "prog", *inputs], cwd=project, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The first round kills each target the moment it is seen, so every phase gets a
        # fault however fast the machine; later rounds kill at random moments after it.
        killed, phase = _kill_at(proc, target, rng, delay=i >= len(KILL_TARGETS))
        rc = proc.wait(timeout=60)
        _kill_orphans(str(cache))
        trials += 1
        if killed and rc == 0:  # SIGKILL cannot be caught: the link was already exiting, its work done
            killed = False
        if killed:
            faults += 1
            by_target[target] += 1
            by_phase[phase] += 1
        found, leftovers = audit(cache)
        problems += [f"trial {i} ({target}/{phase}): {p}" for p in found]
        max_leftovers = max(max_leftovers, leftovers)
        (project / "prog").unlink(missing_ok=True)
        n = len(links(tmp_path))
        again = subprocess.run([*lt_link(tc22), "-o", "prog", *inputs], cwd=project, env=env, capture_output=True, text=True)
        recs = new_link_records(tmp_path, n)
        # "restored": the killed link had finished and been memoised before the kill landed.
        if recs and recs[-1]["decision"] not in ("distributed", "restored"):
            fallbacks += 1
            failures.append(f"trial {i} ({target}/{phase}): rebuild {recs[-1]['decision']}: {recs[-1].get('detail')}")
        if again.returncode != 0:
            broken += 1
            failures.append(f"trial {i} ({target}/{phase}): rebuild exited {again.returncode}: {again.stderr}")
            continue
        got = run(["./prog"], project, check=False).stdout
        if got != want:
            bad += 1
            failures.append(f"trial {i} ({target}/{phase}): printed {got!r}, expected {want!r}")
    stale = len(list((cache / "tmp").iterdir())) if (cache / "tmp").exists() else 0
    print(f"\nkill -9 trials: {trials} run, {faults} faults injected, {broken} builds broken, "
          f"{bad} bad objects served; rebuilds that fell back: {fallbacks}")
    print(f"  faults by target: {dict(by_target)}; by phase seen at the kill: {dict(by_phase)}")
    print(f"  .tmp.* leftovers in the cache (most at once): {max_leftovers}; "
          f"per-link work directories left in tmp/: {stale}")
    assert broken == 0 and bad == 0, "\n".join(failures)
    assert problems == [], "\n".join(problems)
    # What happened, not how fast: a fault was injected in every phase of the link.
    for phase in ("python", "thin-link", "backend", "final link"):
        assert by_phase[phase] >= 1, by_phase
    assert fallbacks == 0, "\n".join(failures)


# --- 3. damaged entries --------------------------------------------------------------------


def _damage(path: Path, how: str, other: bytes | None = None) -> None:
    blob = path.read_bytes()
    if how == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif how == "bitflip":
        mid = len(blob) // 2
        path.write_bytes(blob[:mid] + bytes([blob[mid] ^ 0x10]) + blob[mid + 1 :])
    else:
        assert other is not None and other != blob
        path.write_bytes(other)


def _entries(cache: Path, kind: str) -> set[Path]:
    return {p for p in (cache / kind).rglob("*") if p.is_file() and not p.name.endswith(".key.txt")}


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "swap"])
@pytest.mark.parametrize("kind", ["t", "o"])
def test_damaged_entry_is_detected_counted_and_rebuilt(project, tmp_path, tc22, kind, damage):
    objs = chain_program(project, 3)
    compile_all(project, tc22.clang)
    want = reference_output(project, tc22, objs)
    cache = tmp_path / "cache"
    env = ltowrap_env(tc22, LTOWRAP_MEMO="0")  # the entries under the link: the memo would restore it whole
    run([*lt_link(tc22), "-o", "prog", *objs], project, env=env)
    first = _entries(cache, kind)
    run([*lt_link(tc22), "-o", "prog2", *objs], project, env=env)  # a second thin-link record
    if kind == "t":
        (victim,) = first
        (other,) = _entries(cache, "t") - first
    else:
        victim, other = sorted(first)[:2]
    _damage(victim, damage, other.read_bytes())
    assert stats_json()["bad_entries"] == 0
    (project / "prog").unlink()
    n = len(links(tmp_path))
    run([*lt_link(tc22), "-o", "prog", *objs], project, env=env)
    (rec,) = new_link_records(tmp_path, n)
    assert rec["decision"] == "distributed"
    assert run(["./prog"], project).stdout == want
    assert stats_json()["bad_entries"] == 1
    if kind == "t":
        assert not rec["thinlink_cached"]
    else:
        assert rec["backend_compiles"] == 1
    entry = cache_mod.decode(victim.read_bytes())  # stored again, whole
    assert entry is not None and entry.meta["key"] == victim.name
    assert audit(cache) == ([], 0)




@pytest.mark.parametrize("damage", [
    "truncate",
    pytest.param("bitflip"),
    pytest.param("swap"),
])
def test_damaged_module_store_copy_is_never_used(tmp_path, tc22, damage):
    """val.o is linked into two programs; its copy in m/ is damaged between builds.

    `swap` puts there another valid module of exactly the same size (a different constant).
    """
    d, other = tmp_path / "v1", tmp_path / "v2"
    write(d / "val.c", "int val(int x) { return x + 111111; }\n")
    write(d / "a.c", '#include <stdio.h>\nint val(int);\nint main(void){ printf("a %d\\n", val(1)); return 0; }\n')
    write(d / "b.c", '#include <stdio.h>\nint val(int);\nint main(void){ printf("b %d\\n", val(2)); return 0; }\n')
    compile_all(d, tc22.clang)
    good = (d / "val.o").read_bytes()
    for constant in range(222222, 222272):  # another val.o of exactly the same size
        write(other / "val.c", f"int val(int x) {{ return x + {constant}; }}\n")
        compile_all(other, tc22.clang)
        evil = (other / "val.o").read_bytes()
        if len(evil) == len(good):
            break
    assert len(good) == len(evil) and good != evil
    want_a = reference_output(d, tc22, ["a.o", "val.o"], "ref_a")
    want_b = reference_output(d, tc22, ["b.o", "val.o"], "ref_b")
    cache = tmp_path / "cache"
    env = ltowrap_env(tc22)
    run([*lt_link(tc22), "-o", "a", "a.o", "val.o"], d, env=env)
    assert run(["./a"], d).stdout == want_a
    (copy,) = [p for p in (cache / "m").rglob("*") if p.name.endswith(f"-{digest_bytes(good)}.o")]
    _damage(copy, damage, evil)
    got = {}
    # A relink with everything cached; a new program sharing the module; a relink after eviction.
    run([*lt_link(tc22), "-o", "a", "a.o", "val.o"], d, env=env)
    got["relink"] = run(["./a"], d).stdout
    run([*lt_link(tc22), "-o", "b", "b.o", "val.o"], d, env=env)
    got["new program"] = run(["./b"], d).stdout
    shutil.rmtree(cache / "o")
    shutil.rmtree(cache / "t")
    run([*lt_link(tc22), "-o", "a", "a.o", "val.o"], d, env=env)
    got["after eviction"] = run(["./a"], d).stdout
    assert got == {"relink": want_a, "new program": want_b, "after eviction": want_a}
    # And the store heals: the damaged copy is replaced (or removed), not kept for every later link.
    assert not copy.exists() or copy.read_bytes() == good
    assert audit(cache) == ([], 0)


# --- 4. hostile inputs ---------------------------------------------------------------------

SENTINEL = b"an earlier output, which a failed link must leave alone\n"


def _ar_headers(blob: bytes) -> list[int]:
    pos, out = 8, []
    while pos + 60 <= len(blob):
        out.append(pos)
        size = int(blob[pos + 48 : pos + 58].decode().strip())
        pos += 60 + size + (size & 1)
    return out


def _gnu_quote(arg: str) -> str:
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _placed(project: Path, objs: list[str], where: Path, names: list[str]) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    for src, name in zip(objs, names):
        shutil.copy(project / src, where / name)
    return [str(where / n) for n in names]


def _case(name: str, project: Path, objs: list[str], tc: Toolchain) -> tuple[list[str], Path, str]:
    """-> (link arguments, output path, a name the diagnostic should mention)."""
    out = project / "out"
    if name == "truncated archive":
        blob = (project / "libm.a").read_bytes()
        (project / "libtrunc.a").write_bytes(blob[: int(len(blob) * 0.6)])
        return ["main.o", "libtrunc.a"], out, "libtrunc.a"
    if name == "bad member header":
        blob = bytearray((project / "libm.a").read_bytes())
        at = _ar_headers(bytes(blob))[2]
        blob[at + 58 : at + 60] = b"XX"
        (project / "libbad.a").write_bytes(bytes(blob))
        return ["main.o", "libbad.a"], out, "libbad.a"
    if name == "bitcode magic then garbage":
        (project / "junk.o").write_bytes(b"BC\xc0\xde" + random.Random(1).randbytes(300))
        return [*objs, "junk.o"], out, "junk.o"
    if name == "missing input":
        return [*objs, "missing.o"], out, "missing.o"
    if name == "response file includes itself":
        write(project / "self.rsp", "@self.rsp\n")
        return [*objs, "-Wl,@self.rsp"], out, "self.rsp"
    if name == "missing response file":
        return [*objs, "-Wl,@nowhere.rsp"], out, "nowhere.rsp"
    if name == "spaces":
        where = project / "dir with  spaces"
        return _placed(project, objs, where, [f"obj {o}" for o in objs]), where / "out put", "spaces"
    if name == "semicolons":
        where = project / "semi;colon"
        return _placed(project, objs, where, [f"x;{o}" for o in objs]), where / "out;put", "semi;colon"
    if name == "quotes":
        where = project / "q'uo\"tes"
        return _placed(project, objs, where, [f"it's \"{o}\"" for o in objs]), where / "o'ut\"", "quotes"
    if name == "quotes in a response file":
        where = project / "q 'uo\" tes\\"
        paths = _placed(project, objs[1:], where, [f"it's \"{o}\" \\" for o in objs[1:]])
        write(project / "inputs.rsp", "\n".join(_gnu_quote(p) for p in paths) + "\n")
        return [objs[0], "-Wl,@inputs.rsp"], project / "out", "inputs.rsp"
    if name == "unicode":
        where = project / "ünïcødé ✓"
        return _placed(project, objs, where, [f"модуль-{o}" for o in objs]), where / "выход", "unicode"
    if name == "leading dash":
        _placed(project, objs, project, [f"-{o}" for o in objs])
        return [f"./-{o}" for o in objs], project / "-out", "-out"
    if name == "very long command line":
        # 3000 search directories (~130 KB): past the size where the final link uses a response file.
        return [*(["-L/nonexistent/dir/" + "x" * 24] * 3000), *objs], out, "long"
    raise AssertionError(name)


HOSTILE = [
    "truncated archive", "bad member header", "bitcode magic then garbage", "missing input",
    "response file includes itself", "missing response file", "spaces", "semicolons", "quotes",
    "quotes in a response file", "unicode", "leading dash", "very long command line",
]


@pytest.fixture
def warm(project, tc22):
    """A project linked once through ltowrap, so the cache holds its modules and entries."""
    objs = chain_program(project, 3)
    compile_all(project, tc22.clang)
    run([tc22.ar, "rcs", "libm.a", *objs[1:]], project)
    for out, inputs in (("warm1", objs), ("warm2", ["main.o", "libm.a"])):
        run([*lt_link(tc22), "-o", out, *inputs], project, env=ltowrap_env(tc22))
    return objs


def _result(done: subprocess.CompletedProcess, out: Path) -> tuple[int, bytes | None, str | None]:
    state = out.read_bytes() if out.exists() else None
    printed = run([str(out)], out.parent).stdout if done.returncode == 0 else None
    return done.returncode, state, printed


def compare_with_plain_linker(project: Path, tmp_path: Path, tc: Toolchain, args: list[str], out: Path,
                              mention: str, write_sentinel: bool = True) -> dict:
    cache = tmp_path / "cache"
    kw = dict(cwd=project, capture_output=True, encoding="utf-8", errors="replace")
    if write_sentinel:
        out.write_bytes(SENTINEL)
    plain = subprocess.run([*plain_link(tc), *args, "-o", str(out)], **kw)
    plain_rc, plain_state, plain_printed = _result(plain, out)
    if write_sentinel:
        out.write_bytes(SENTINEL)
    before = snapshot(cache)
    n = len(links(tmp_path))
    fallbacks = stats_json()["links_fallback"]
    lt = subprocess.run([*lt_link(tc), *args, "-o", str(out)], env=ltowrap_env(tc), **kw)
    lt_rc, lt_state, lt_printed = _result(lt, out)
    after = snapshot(cache)
    recs = new_link_records(tmp_path, n)

    assert lt_rc == plain_rc, f"plain linker exited {plain_rc}, ltowrap {lt_rc}\n{plain.stderr}\n---\n{lt.stderr}"
    notes = [line for line in lt.stderr.splitlines() if line.startswith("ltowrap:")]
    assert len(notes) <= 1, lt.stderr
    if plain_rc == 0:
        assert lt_printed == plain_printed
        assert recs and recs[-1]["decision"] == "distributed", (recs[-1]["reason"] if recs else "no link record", lt.stderr)
    else:
        assert plain_state in (SENTINEL, None) and lt_state == plain_state, "a failed link changed the output file"
        errors = [line for line in plain.stderr.splitlines() if "error:" in line]
        own_diagnostic = bool(errors) and all(line in lt.stderr for line in errors)
        named = any(mention in note for note in notes)
        assert own_diagnostic or named, f"plain:\n{plain.stderr}\nltowrap:\n{lt.stderr}"
        if recs:  # ltowrap's linker was reached: the fallback is counted, with its reason
            assert recs[-1]["decision"] == "fallback" and recs[-1]["reason"], recs[-1]
            assert stats_json()["links_fallback"] == fallbacks + 1
    changed = sorted(p for p in before if after.get(p) != before[p])
    assert changed == [], f"cache entries changed or removed: {changed}"
    assert audit(cache)[0] == []
    return {"rc": lt_rc, "new entries": sorted(set(after) - set(before)), "notes": notes}


@pytest.mark.slow
@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_input_behaves_like_the_plain_linker(project, tmp_path, tc22, warm, case):
    args, out, mention = _case(case, project, warm, tc22)
    result = compare_with_plain_linker(project, tmp_path, tc22, args, out, mention)
    print(f"\n{case}: exit {result['rc']}, {len(result['new entries'])} new cache files, {result['notes']}")


@contextmanager
def read_only_directory(tmp_path: Path) -> Iterator[Path]:
    """A directory no one may write in, holding `out`: mode 0555, or for root (whom modes do not
    stop) a read-only bind mount."""
    src, mnt = tmp_path / "ro-src", tmp_path / "ro"
    src.mkdir()
    mnt.mkdir()
    (src / "out").write_bytes(SENTINEL)
    if os.geteuid() != 0:
        os.rmdir(mnt)
        src.rename(mnt)
        mnt.chmod(0o555)
        try:
            yield mnt
        finally:
            mnt.chmod(0o755)
        return
    if subprocess.run(["mount", "-o", "bind,ro", str(src), str(mnt)], capture_output=True).returncode != 0:
        missing("a read-only bind mount (root may not mount here)", "run the tests as a user, or where root may mount")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)])


def test_output_in_read_only_directory(project, tmp_path, tc22, warm):
    with read_only_directory(tmp_path) as ro:
        with pytest.raises(OSError):
            (ro / "probe").write_bytes(b"")
        result = compare_with_plain_linker(project, tmp_path, tc22, warm, ro / "out", "ro/out", write_sentinel=False)
        assert result["rc"] != 0


def test_response_file_backslash_in_single_quotes_names_what_lld_reads(project, tmp_path, tc22):
    """'m\\ain.o' in a response file is main.o to lld; a file really named m\\ain.o must not be linked."""
    objs = chain_program(project, 2)
    compile_all(project, tc22.clang)
    write(project / "other.c", '#include <stdio.h>\nint main(void){ puts("the wrong main"); return 0; }\n')
    run([tc22.clang, "-O2", "-flto=thin", "-c", "other.c", "-o", "m\\ain.o"], project)
    write(project / "in.rsp", "'m\\ain.o'\n")
    want = reference_output(project, tc22, ["-Wl,@in.rsp", *objs[1:]])
    assert want != "the wrong main\n"  # lld read main.o
    run([*lt_link(tc22), "-o", "prog", "-Wl,@in.rsp", *objs[1:]], project, env=ltowrap_env(tc22))
    assert run(["./prog"], project).stdout == want


# --- 5. security -----------------------------------------------------------------------------

@pytest.mark.parametrize("debug", ["0", "1"], ids=["plain", "debug"])
def test_fresh_cache_is_private(project, tmp_path, tc22, debug):
    """Every directory under a new cache is 0700 and every file 0600 (with debug: the key dumps too)."""
    fresh = tmp_path / "fresh-cache"
    objs = chain_program(project, 2)
    compile_all(project, tc22.clang)
    run([*lt_link(tc22), "-o", "prog", *objs], project, env=ltowrap_env(tc22, LTOWRAP_CACHE_DIR=str(fresh), LTOWRAP_DEBUG=debug))
    assert run(["./prog"], project).stdout
    wrong = []
    for root, dirs, files in os.walk(fresh):
        for name, want in [(".", 0o700), *((d, 0o700) for d in dirs), *((f, 0o600) for f in files)]:
            p = Path(root) / name
            mode = p.lstat().st_mode & 0o777
            if mode != want:
                wrong.append(f"{p.relative_to(tmp_path)} {mode:o}")
    assert len(cache_files(fresh)) > 0
    assert wrong == []


@pytest.mark.parametrize("where", ["o", "t", "m", "c", "stats", "o-key-dump"])
def test_planted_symlink_in_the_cache_is_not_followed(project, tmp_path, tc22, where):
    """Every file of one kind is replaced by a symlink to a file outside the cache, then we relink."""
    objs = chain_program(project, 3)
    compile_all(project, tc22.clang)
    want = reference_output(project, tc22, objs)
    cache = tmp_path / "cache"
    env = ltowrap_env(tc22, LTOWRAP_DEBUG="1" if where == "o-key-dump" else "0")
    run([*lt_link(tc22), "-o", "prog", *objs], project, env=env)
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious.txt"
    precious.write_bytes(b"mine, not the cache's\n")
    precious.chmod(0o644)
    if where == "o-key-dump":
        victims = [p for p in (cache / "o").rglob("*.key.txt")]
    elif where == "stats":
        victims = [cache / "stats" / str(i) for i in range(16)]
    else:
        victims = [p for p in (cache / where).rglob("*") if p.is_file() and not p.name.endswith(".key.txt")]
    assert victims
    for v in victims:
        v.unlink(missing_ok=True)
        v.symlink_to(precious)
    (project / "prog").unlink()
    run([*lt_link(tc22), "-o", "prog", *objs], project, env=env)
    assert run(["./prog"], project).stdout == want
    assert precious.read_bytes() == b"mine, not the cache's\n"
    assert precious.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in outside.iterdir()] == ["precious.txt"]


def _python_sources() -> list[Path]:
    files = sorted((REPO / "ltowrap").rglob("*.py"))
    files += [p for p in sorted((REPO / "scripts").glob("*")) if p.is_file() and p.read_bytes().startswith(b"#!python")]
    return files


def test_no_shell_and_no_eval_of_strings_in_the_package():
    assert len(_python_sources()) > 10
    found = []
    for path in _python_sources():
        text = path.read_text()
        if "shell=True" in text:
            found.append(f"{path.name}: shell=True")
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("eval", "exec", "compile"):
                found.append(f"{path.name}:{node.lineno}: {f.id}()")
            if isinstance(f, ast.Attribute) and f.attr in ("system", "popen") and getattr(f.value, "id", "") == "os":
                found.append(f"{path.name}:{node.lineno}: os.{f.attr}()")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"{path.name}:{node.lineno}: shell=")
    assert found == []
