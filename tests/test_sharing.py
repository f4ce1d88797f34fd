"""Links share the machine: one slot pool for every ltowrap process, and no entry made twice at once.

Real make 4.3 and ninja run links whose recipes are not marked '+'; the number of backend
compiles running at once is taken from LTOWRAP_LOG's per-backend start/end times and,
independently, from the process table. Two identical links make each key once between
them, also when the first is killed with SIGKILL half-way.

Sizes are chosen so that a client that took no slot fails on a 2-core machine: make -j2
and ninja -j2 run two links at once, each of which would run `jobs` (2) compiles.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import (backend_pids, compile_all, distributor_pids, have, links, ltowrap_env, make_program, max_overlap,
                     open_files, own_mounts, run, started_by, stats_json, wait_until, wrapper, write)
from ltowrap import locks

PROGRAMS = ("a", "b", "c")
MODULES = 8  # per program, besides main: three links x 2 jobs would run 4 compiles at once


def _cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def _lock_dir(tmp_path: Path) -> str:
    return locks.directory(str(_cache(tmp_path)))


class ProcessTable:
    """The most backend compiles of this test seen running at once, sampled from /proc until stopped."""

    def __init__(self, tmp_path: Path) -> None:
        self.marker = str(_cache(tmp_path)).encode()
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, len(backend_pids(self.marker)))
            self.samples += 1
            time.sleep(0.002)

    def __enter__(self) -> ProcessTable:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _programs(project: Path, tc22) -> dict[str, list[str]]:
    programs = {p: make_program(project, p, MODULES) for p in PROGRAMS}
    compile_all(project, tc22.clang)
    return programs


def _check(tmp_path: Path, project: Path, done: subprocess.CompletedProcess, table: ProcessTable) -> None:
    recs = links(tmp_path)
    assert len(recs) == len(PROGRAMS) and all(r["decision"] == "distributed" for r in recs)
    assert all(r["slots"] == "pool" for r in recs)
    assert sum(r["backend_compiles"] for r in recs) == len(PROGRAMS) * (MODULES + 1)
    assert max_overlap(recs) <= 2, "more backend compiles at once than the pool has slots (log)"
    assert table.samples > 10 and 1 <= table.peak <= 2, f"{table.peak} backend compiles at once (process table)"
    assert "jobserver" not in done.stdout + done.stderr and "ltowrap:" not in done.stderr
    for p in PROGRAMS:
        assert run([f"./{p}"], project).stdout.strip()


def test_make_j2_with_unmarked_recipes_stays_within_two(project, tmp_path, tc22):
    programs = _programs(project, tc22)
    rules = "".join(f"{p}: {' '.join(objs)}\n\t$(LINK) -o $@ $^\n" for p, objs in programs.items())
    write(project / "Makefile", f"LINK = {wrapper('ltowrap-clang')} -fuse-ld=lld\nall: {' '.join(PROGRAMS)}\n{rules}")
    with ProcessTable(tmp_path) as table:
        done = run(["make", "-j2"], project, env=ltowrap_env(tc22))
    _check(tmp_path, project, done, table)


def test_ninja_j2_stays_within_two(project, tmp_path, tc22):
    if not have("ninja"):
        pytest.fail("ninja is not installed (dev/setup installs it)")
    programs = _programs(project, tc22)
    builds = "".join(f"build {p}: link {' '.join(objs)}\n" for p, objs in programs.items())
    write(project / "build.ninja",
          f"rule link\n  command = {wrapper('ltowrap-clang')} -fuse-ld=lld -o $out $in\n{builds}")
    with ProcessTable(tmp_path) as table:
        done = run(["ninja", "-j2"], project, env=ltowrap_env(tc22))
    _check(tmp_path, project, done, table)


def test_unusable_jobserver_is_said_only_when_verbose(project, tmp_path, tc22):
    objs = make_program(project, "a", 2)
    compile_all(project, tc22.clang)
    write(project / "Makefile", f"a: {' '.join(objs)}\n\t{wrapper('ltowrap-clang')} -fuse-ld=lld -o $@ $^\n"
          "doctor:\n\tltowrap doctor\n")
    # Memo off: the second link must reach the backends to say it (the memo would restore it whole).
    env = ltowrap_env(tc22, LTOWRAP_MEMO="0", PATH=f"{Path(wrapper('ltowrap')).parent}:{os.environ['PATH']}")
    quiet = run(["make", "-j2", "a"], project, env=env)
    assert quiet.stderr == "" and links(tmp_path)[-1]["slots"] == "pool"
    (project / "a").unlink()
    loud = run(["make", "-j2", "a"], project, env={**env, "LTOWRAP_VERBOSE": "1"})
    assert loud.stderr.count("ltowrap: make's jobserver") == 1 and "not open in this recipe" in loud.stderr
    doctor = run(["make", "-j2", "doctor"], project, env=env)
    assert doctor.stdout.count("is not open in this recipe") == 1
    assert "[ok] slot pool: " in doctor.stdout and "[FAIL]" not in doctor.stdout


# --- two identical links ------------------------------------------------------------------------


def _holding_all_slots(tmp_path: Path, n: int) -> locks.LockDir:
    held = locks.LockDir(_lock_dir(tmp_path))
    assert all(held.try_lock(f"slot-{i}") for i in range(n))
    return held


def _waits_for_slots(pid: int, lock_dir: str, n: int) -> bool:
    """Has the link tried every slot (it keeps each one it tried open, to try again)?"""
    return {os.path.join(lock_dir, f"slot-{i}") for i in range(n)} <= open_files(pid)


def _asleep_in_select(pid: int) -> bool:
    """Is the process asleep in select() (after its failed tries: not between a try and its wait)?"""
    with open(f"/proc/{pid}/wchan") as f:
        return f.read().startswith(("poll_schedule_timeout", "do_select"))


def _start_together(project: Path, tmp_path: Path, tc22, objs: list[str], jobs: tuple[int, int] = (2, 2)
                    ) -> tuple[list[subprocess.Popen], locks.LockDir]:
    """Two identical links (prog in a/ and in b/), started in turn, both through their thin-links
    and waiting for a slot (their first compile claimed), while the test holds every slot."""
    held = _holding_all_slots(tmp_path, max(jobs))
    procs = []
    for d, n in zip(("a", "b"), jobs):
        (project / d).mkdir()
        env = ltowrap_env(tc22, LTOWRAP_JOBS=str(n))
        procs.append(subprocess.Popen([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", "prog", *(f"../{o}" for o in objs)],
                                      cwd=project / d, env=env, stderr=subprocess.PIPE, text=True))
        wait_until(lambda: _waits_for_slots(procs[-1].pid, _lock_dir(tmp_path), n), 60, "the link waiting for a slot",
                   running=procs[-1:])
    return procs, held


def _locks_on(path: str) -> list[str]:
    """The locks /proc/locks lists on this file, held or waited for ('->')."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return [line for line in f if line.split()[-3].endswith(f":{ino}")]


def _no_leaks(tmp_path: Path) -> None:
    """Every slot can be taken, and no claim is left: no file but the slots and `claims`, no lock on `claims`."""
    d = _lock_dir(tmp_path)
    mine = locks.LockDir(d)
    names = os.listdir(d)
    assert [n for n in names if not n.startswith("slot-") and n != locks.CLAIMS] == [], names
    if locks.CLAIMS in names:
        assert _locks_on(os.path.join(d, locks.CLAIMS)) == []
    assert all(mine.try_lock(n) for n in names if n.startswith("slot-"))
    mine.close()


def test_two_identical_links_compile_each_key_once(project, tmp_path, tc22):
    objs = make_program(project, "p", MODULES)
    compile_all(project, tc22.clang)
    run([tc22.clang, "-flto=thin", "-fuse-ld=lld", "-o", "ref", *objs], project)
    expected = run(["./ref"], project).stdout
    procs, held = _start_together(project, tmp_path, tc22, objs)
    held.close()  # both go
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "ltowrap:" not in err, err
    recs = links(tmp_path)
    assert [r["decision"] for r in recs] == ["distributed", "distributed"]
    s = stats_json()
    assert s["backend_misses"] == MODULES + 1, "a key was compiled twice"
    assert s["backend_hits"] == MODULES + 1 and s["backend_waits"] >= 1
    assert sum(r.get("backend_waits", 0) for r in recs) == s["backend_waits"]
    for d in ("a", "b"):
        assert run(["./prog"], project / d).stdout == expected
    _no_leaks(tmp_path)


def test_first_link_killed_the_second_makes_what_was_lost(project, tmp_path, tc22):
    objs = make_program(project, "p", MODULES)
    compile_all(project, tc22.clang)
    run([tc22.clang, "-flto=thin", "-fuse-ld=lld", "-o", "ref", *objs], project)
    expected = run(["./ref"], project).stdout
    # The first may use slots 0 and 1, the second only slot 0: with slot 0 held, only the first compiles.
    (first, second), held = _start_together(project, tmp_path, tc22, objs, jobs=(2, 1))
    held.unlock("slot-1")
    marker = str(_cache(tmp_path)).encode()
    objects = _cache(tmp_path) / "o"

    def stored() -> list[Path]:
        """The objects stored: entries, not an entry's temp file before its rename (fsutil.atomic_write)."""
        return [p for p in objects.rglob("*") if p.is_file() and not p.name.startswith(".tmp.")]

    # Mid-way: the first has stored its first object (the second had put it aside) and compiles another.
    wait_until(lambda: stored()
               and [pid for pid in backend_pids(marker) if started_by(pid) == first.pid],
               60, "the first link mid-way", running=[first], every=0.005)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    held.close()
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0 and "ltowrap:" not in err, err
    assert run(["./prog"], project / "b").stdout == expected
    (rec,) = links(tmp_path)  # the killed link wrote none
    waited = {b["source"] for b in rec["backends"] if b.get("waited")}
    # It took from the cache what it had waited for, and compiled what the first lost.
    assert "cache" in waited and rec["backend_hits"] >= 1 and rec["backend_compiles"] >= 1
    assert rec["backend_compiles"] + rec["backend_hits"] == MODULES + 1
    assert len(stored()) == MODULES + 1
    # The killed link's compile runs on to its end, in its slot.
    wait_until(lambda: not backend_pids(marker), 60, "the killed link's compile ending", every=0.05)
    # The killed link held its thin-link's claim through its backends (thinlink.thin_link): the
    # kernel let go of it with the rest, and no file was left.
    _no_leaks(tmp_path)



LD_THAT_WAITS = """#!/bin/sh
# The thin-link waits for the test (a line on the fifo $0.go): the link has stored its modules by then.
case "$*" in *--thinlto-index-only*) : > "$0.started"; read _ < "$0.go";; esac
exec {lld} "$@"
"""


def _found_a_claim_busy(pid: int, lock_dir: str) -> bool:
    """Has the process found a claim another process holds? Its Waker watches `claims` from then on
    (its inotify descriptor's fdinfo names the watched inode)."""
    ino = f"ino:{os.stat(os.path.join(lock_dir, locks.CLAIMS)).st_ino:x} "
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return False
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                if any(line.startswith("inotify ") and ino in line for line in f):
                    return True
        except OSError:
            continue
    return False


def test_a_module_new_to_the_store_is_compiled_once_by_two_links(project, tmp_path, tc22):
    """The first link stores the modules, so they are new to it and it compiles them before their
    keys (executor._early); the second finds them stored, makes its keys and claims them. The
    first link's early compile of a module whose key the second has claimed waits for it instead."""
    objs = make_program(project, "p", MODULES)
    compile_all(project, tc22.clang)
    run([tc22.clang, "-flto=thin", "-fuse-ld=lld", "-o", "ref", *objs], project)
    expected = run(["./ref"], project).stdout
    lock_dir = _lock_dir(tmp_path)
    held = _holding_all_slots(tmp_path, 1)  # slot 0: the second link's only slot; the first may also use slot 1
    ld = write(tmp_path / "ld" / "ld.lld", LD_THAT_WAITS.format(lld=tc22.lld))
    ld.chmod(0o755)
    os.mkfifo(f"{ld}.go")
    procs = []
    for d, jobs, extra in (("a", "2", [f"--ld-path={ld}"]), ("b", "1", [])):
        (project / d).mkdir()
        procs.append(subprocess.Popen([wrapper("ltowrap-clang"), "-fuse-ld=lld", *extra, "-o", "prog",
                                       *(f"../{o}" for o in objs)], cwd=project / d,
                                      env=ltowrap_env(tc22, LTOWRAP_JOBS=jobs), stderr=subprocess.PIPE, text=True))
        if d == "a":  # its modules stored (new to the store: they compile before their keys), in its thin-link
            wait_until(lambda: Path(f"{ld}.started").exists(), 60, "the first thin-link", running=procs)
    first, second = procs
    # The second has claimed its first job (the heaviest, the first's first too) and waits for slot 0.
    wait_until(lambda: _waits_for_slots(second.pid, lock_dir, 1), 60, "the second link waiting for a slot",
               running=procs)
    with open(f"{ld}.go", "w") as go:
        go.write("go\n")
    # The first, with slot 1 free, comes to that job and tries a claim the second holds (the test holds none).
    wait_until(lambda: _found_a_claim_busy(first.pid, lock_dir), 60, "the first link trying the second's claim",
               running=procs)
    held.close()
    s = _both_linked(procs, project, expected, tmp_path)
    assert s["backend_misses"] == MODULES + 1, "a key was compiled twice"
    assert s["backend_hits"] == MODULES + 1 and s["backend_waits"] >= 1


def _both_linked(procs: list[subprocess.Popen], project: Path, expected: str, tmp_path: Path) -> dict:
    """Wait for the two links in a/ and b/: each succeeded quietly, each program runs as the
    reference does, nothing is left behind; the stats they counted."""
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "ltowrap:" not in err, err
    for d in ("a", "b"):
        assert run(["./prog"], project / d).stdout == expected
    _no_leaks(tmp_path)
    return stats_json()


def test_an_early_compile_whose_key_another_link_holds_stops_and_waits(project, tmp_path, tc22):
    """The same modules at other positions in two links (the second has one more module first):
    each link stores them at its own positions, so both compile them before their keys, under
    different content claims. The second link's early compile, once keyed, finds the first
    link holding that key: it stops and waits for it."""
    objs = make_program(project, "p", MODULES)
    write(project / "p_extra.c", "int extra_unused(int x) { return 3 * x; }\n")
    compile_all(project, tc22.clang)
    run([tc22.clang, "-O2", "-c", "p_main.c"], project)  # native: the heaviest job is a module both links have
    run([tc22.clang, "-flto=thin", "-fuse-ld=lld", "-o", "ref", *objs], project)
    expected = run(["./ref"], project).stdout
    lock_dir = _lock_dir(tmp_path)
    held = _holding_all_slots(tmp_path, 1)  # slot 0: the first link's only slot; the second may also use slot 1
    procs = []
    for d, jobs, order in (("a", "1", objs), ("b", "2", [objs[0], "p_extra.o", *objs[1:]])):
        (project / d).mkdir()
        procs.append(subprocess.Popen([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", "prog",
                                       *(f"../{o}" for o in order)], cwd=project / d,
                                      env=ltowrap_env(tc22, LTOWRAP_JOBS=jobs), stderr=subprocess.PIPE, text=True))
        if d == "a":  # no slot for its first job (the heaviest): keyed and claimed, it waits for slot 0
            wait_until(lambda: _waits_for_slots(procs[0].pid, lock_dir, 1), 60, "the first link waiting for a slot",
                       running=procs)
    first, second = procs
    # The second starts that job early in slot 1, keys it and tries the first's claim on its key.
    wait_until(lambda: _found_a_claim_busy(second.pid, lock_dir), 60, "the second link trying the first's claim",
               running=procs)
    held.close()
    s = _both_linked(procs, project, expected, tmp_path)
    assert s["backend_misses"] == MODULES + 1, "a key was compiled twice"  # and p_extra's
    assert s["backend_hits"] == MODULES and s["backend_waits"] >= 1

# --- identical thin-links -------------------------------------------------------------------------

# Holds a lock file (a slot, or a claim as older versions made it: legacy) until a line comes.
HOLDER = """
import sys
from ltowrap.locks import LockDir
d = LockDir(sys.argv[1])
assert d.try_lock(sys.argv[2])
print("held", flush=True)
sys.stdin.readline()
d.unlock(sys.argv[2], remove=True)
"""

# Holds claim argv[2]-argv[3] until a line comes, lets go of it, and stays until another line comes.
CLAIM_HOLDER = """
import sys
from ltowrap.locks import Claims, LockDir
c = Claims(LockDir(sys.argv[1]))
assert c.try_claim(sys.argv[2], sys.argv[3])
print("held", flush=True)
sys.stdin.readline()
c.release(sys.argv[2], sys.argv[3])
print("released", flush=True)
sys.stdin.readline()
"""


def _claim_holder(lock_dir: str, kind: str, key: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", CLAIM_HOLDER, lock_dir, kind, key], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _lock_waiters(path: str) -> int:
    """How many processes wait in the kernel for a lock on this file (/proc/locks lists them with '->')."""
    return sum(1 for line in _locks_on(path) if "->" in line)


@pytest.mark.parametrize("first", ["stored", "died"])
def test_identical_thinlink_waits_for_the_one_running(project, tmp_path, tc22, first):
    """A thin-link whose key another process holds is waited for, then taken from the cache, or
    run here if that process died without storing it."""
    objs = make_program(project, "p", 3)
    compile_all(project, tc22.clang)
    env = ltowrap_env(tc22, LTOWRAP_MEMO="0")  # the relink must reach its thin-link
    out = f"prog-{os.getpid()}-{first}"
    link = [wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", out, *objs]
    run(link, project, env=env)
    expected = run([f"./{out}"], project).stdout
    (entry,) = [p for p in (_cache(tmp_path) / "t").rglob("*") if p.is_file()]
    saved = entry.read_bytes()
    entry.unlink()  # as if the first thin-link were still running
    holder = _claim_holder(_lock_dir(tmp_path), "t", entry.name)
    (project / out).unlink()
    second = subprocess.Popen(link, cwd=project, env=env, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: _lock_waiters(os.path.join(_lock_dir(tmp_path), locks.CLAIMS)), 60,
               "the second link waiting for the claim", running=[second])
    if first == "stored":
        entry.write_bytes(saved)
        holder.communicate("go\n")
    else:
        holder.kill()
        holder.wait()
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0 and "ltowrap:" not in err, err
    assert run([f"./{out}"], project).stdout == expected
    rec = links(tmp_path)[-1]
    assert rec["thinlink_cached"] == (first == "stored")
    s = stats_json()
    assert s["thinlink_waits"] == 1 and s["thinlink_misses"] == (1 if first == "stored" else 2)
    _no_leaks(tmp_path)


# --- the pool itself ------------------------------------------------------------------------------


def test_a_slot_is_let_go_when_its_holder_dies_and_the_waker_says_so(tmp_path):
    d = str(tmp_path / "locks")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, d, "slot-0"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    mine = locks.LockDir(d)
    assert not mine.try_lock("slot-0")  # busy: and now the Waker watches
    waker = mine.waker().fds()
    assert waker, "no inotify here: waits would fall back to polling"
    import select

    # A failed try of another process closes nothing, so it wakes no one.
    other = locks.LockDir(d)
    assert not other.try_lock("slot-0")
    assert select.select(waker, [], [], 0)[0] == []
    holder.kill()
    holder.wait()
    assert select.select(waker, [], [], 30)[0] == waker  # the death woke it
    mine.drain()
    assert mine.try_lock("slot-0")
    assert not other.try_lock("slot-0")
    mine.close()
    other.close()


def test_a_link_waiting_for_a_slot_let_go_without_a_wake_still_goes_on(project, tmp_path, tc22):
    """The backstop (locks.BACKSTOP): a slot let go with no close that inotify would report, as
    when the kernel's close event comes before it drops the lock, is found by a later try."""
    import fcntl

    objs = make_program(project, "p", 2)
    compile_all(project, tc22.clang)
    held = _holding_all_slots(tmp_path, 2)
    link = subprocess.Popen([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-o", "prog", *objs], cwd=project,
                            env=ltowrap_env(tc22, LTOWRAP_JOBS="2"), stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _waits_for_slots(link.pid, _lock_dir(tmp_path), 2) and _asleep_in_select(link.pid), 60,
                   "the link waiting for a slot", running=[link])
        for i in range(2):  # let go, keeping the descriptors open: no IN_CLOSE_WRITE
            fcntl.flock(held.fd(f"slot-{i}"), fcntl.LOCK_UN)
        _, err = link.communicate(timeout=120)
    finally:
        link.kill()
        held.close()
    assert link.returncode == 0 and "ltowrap:" not in err, err
    assert run(["./prog"], project).stdout.strip()


def test_a_compile_keeps_its_slot_after_the_link_is_killed(tmp_path):
    """The slot's lock is passed to the compile: a killed link's orphans still count."""
    d = str(tmp_path / "locks")
    code = ("import sys, time; from ltowrap import locks, proc; d = locks.LockDir(sys.argv[1]);"
            "assert d.try_lock('slot-0'); c = proc.spawn(['/bin/sleep', '30'], keep_fds=(d.fd('slot-0'),));"
            "print(c.pid, flush=True); time.sleep(60)")
    link = subprocess.Popen([sys.executable, "-c", code, d], stdout=subprocess.PIPE, text=True)
    orphan = int(link.stdout.readline())
    link.kill()
    link.wait()
    mine = locks.LockDir(d)
    try:
        assert not mine.try_lock("slot-0"), "the slot was let go while its compile still ran"
        os.kill(orphan, signal.SIGKILL)
        wait_until(lambda: mine.try_lock("slot-0"), 30, "the slot let go once its compile died")
    finally:
        try:
            os.kill(orphan, signal.SIGKILL)
        except ProcessLookupError:
            pass
        mine.close()


def test_trim_sweeps_the_claim_files_older_versions_left(tmp_path):
    """Older versions made a claim a file held with flock() (HOLDER holds one as they did): trim
    removes those of dead processes, leaves a live one's, and leaves `claims` and its claims alone."""
    d = _lock_dir(tmp_path)
    holders = {}
    for name in ("o-dead", "e-dead", "o-alive"):
        holders[name] = subprocess.Popen([sys.executable, "-c", HOLDER, d, name], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
        assert holders[name].stdout.readline() == "held\n"
    for name in ("o-dead", "e-dead"):  # a key's claim and a content's (jobs/store.py)
        holders[name].kill()
        holders[name].wait()
    claimant = _claim_holder(d, "o", "alive")
    try:
        run([wrapper("ltowrap"), "cache", "trim"], tmp_path)
        assert sorted(os.listdir(d)) == [locks.CLAIMS, "o-alive"]
        assert not locks.Claims(locks.LockDir(d)).try_claim("o", "alive")  # still held, by the same file
    finally:
        claimant.kill()
    holders["o-alive"].communicate("go\n")
    assert os.listdir(d) == [locks.CLAIMS]


# --- claims: bytes of one file ---------------------------------------------------------------------


def test_a_claim_held_is_busy_for_another_process_and_makes_no_file(tmp_path):
    d = str(tmp_path / "locks")
    holder = _claim_holder(d, "o", "k")
    mine = locks.Claims(locks.LockDir(d))
    try:
        assert not mine.try_claim("o", "k")
        assert os.listdir(d) == [locks.CLAIMS]  # the claim is a byte of `claims`, not a file of its own
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "released\n"
        assert mine.try_claim("o", "k")
        assert os.listdir(d) == [locks.CLAIMS]
    finally:
        holder.kill()
        mine.close()


@pytest.mark.parametrize("how", ["released", "killed"])
def test_a_claim_waiter_is_woken_when_the_holder_lets_go_or_dies(tmp_path, how):
    """The holder stays alive after its release: the wake is the release's, not its exit's."""
    import select

    d = str(tmp_path / "locks")
    holder = _claim_holder(d, "o", "k")
    mine = locks.Claims(locks.LockDir(d))
    other = locks.Claims(locks.LockDir(d))
    try:
        assert not mine.try_claim("o", "k")  # busy: and now the Waker watches `claims`
        waker = mine.fds()
        assert waker, "no inotify here: waits would fall back to polling"
        assert mine.timeout == locks.BACKSTOP
        # A failed try of another waiter wakes no one.
        assert not other.try_claim("o", "k")
        assert select.select(waker, [], [], 0)[0] == []
        if how == "released":
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "released\n"
        else:
            holder.kill()
            holder.wait()
        assert select.select(waker, [], [], 30)[0] == waker
        mine.locks.drain()
        assert mine.try_claim("o", "k")
        assert not other.try_claim("o", "k")
    finally:
        holder.kill()
        mine.close()
        other.close()


def test_claims_of_different_keys_do_not_block_each_other(tmp_path):
    d = str(tmp_path / "locks")
    holder = _claim_holder(d, "o", "k")
    mine = locks.Claims(locks.LockDir(d))
    try:
        assert mine.try_claim("o", "k2") and mine.try_claim("e", "k")
        with mine.holding("t", "k") as waited:  # a blocking claim too
            assert waited is False
        assert not mine.try_claim("o", "k")
    finally:
        holder.kill()
        mine.close()


def test_two_claims_on_one_byte_in_one_process_are_let_go_with_the_last(tmp_path, monkeypatch):
    """Names that hash to one byte share it within a process: letting go of one keeps the other."""
    monkeypatch.setattr(locks.Claims, "offset", staticmethod(lambda name: 7))
    d = str(tmp_path / "locks")
    mine = locks.Claims(locks.LockDir(d))
    other = locks.Claims(locks.LockDir(d))  # another open file of `claims`: its locks conflict as another process's
    try:
        assert mine.try_claim("o", "a") and mine.try_claim("o", "b")
        mine.release("o", "a")
        assert not other.try_claim("o", "c")
        mine.release("o", "b")
        assert other.try_claim("o", "c")
    finally:
        mine.close()
        other.close()


def test_claims_let_go_together_wake_their_waiters_once_after_the_last_is_free(tmp_path, monkeypatch):
    """A job's two claims are let go in one step (Store.release): one close of `claims`, when
    both bytes are free, so a woken waiter finds both free."""
    d = str(tmp_path / "locks")
    mine = locks.Claims(locks.LockDir(d))
    other = locks.Claims(locks.LockDir(d))
    wakes: list[tuple[bool, bool]] = []

    def wake(claims: locks.Claims) -> None:  # mine: what a waiter woken now would find
        if claims is mine:
            wakes.append((other.try_claim("o", "k"), other.try_claim("e", "c")))
            other.release_all([("o", "k"), ("e", "c")])

    monkeypatch.setattr(locks.Claims, "_wake", wake)
    try:
        assert mine.try_claim("o", "k") and mine.try_claim("e", "c")
        mine.release_all([("o", "k"), ("e", "c"), ("o", "not held")])
        assert wakes == [(True, True)]
        mine.release_all([("o", "k")])  # not held any more: nothing let go, no wake
        assert len(wakes) == 1
    finally:
        mine.close()
        other.close()


# Inside a mount namespace: a read-only tmpfs on $1, then the claims tried in a lock directory under it.
READ_ONLY = """set -e
mount -t tmpfs -o ro tmpfs "$1"
exec "$2" -c "$3" "$1"
"""
CLAIM_READ_ONLY = """
import sys
from ltowrap.locks import Claims, LockDir, directory
c = Claims(LockDir(directory(sys.argv[1])))
assert c.try_claim("o", "k") and c.try_claim("o", "k")
with c.holding("t", "k") as waited:
    assert waited is False
c.release("o", "k")
print("granted")
"""


def test_a_claim_a_read_only_cache_cannot_give_is_granted(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = run([*own_mounts(), "sh", "-c", READ_ONLY, "sh", str(mnt), sys.executable, CLAIM_READ_ONLY], tmp_path)
    assert done.stdout == "granted\n"


def test_two_dtlto_links_at_once_compile_each_key_once(project, tmp_path, tc22):
    """lld's DTLTO with ltowrap-distributor: the same claims, across two lld processes."""
    objs = make_program(project, "p", MODULES)
    compile_all(project, tc22.clang)
    run([tc22.clang, "-flto=thin", "-fuse-ld=lld", "-o", "ref", *objs], project)
    expected = run(["./ref"], project).stdout
    held = _holding_all_slots(tmp_path, 2)
    env = ltowrap_env(LTOWRAP_JOBS="2")
    procs = []
    for d in ("a", "b"):
        (project / d).mkdir()
        procs.append(subprocess.Popen([tc22.clang, "-fuse-ld=lld", "-flto=thin",
                                       f"-fthinlto-distributor={wrapper('ltowrap-distributor')}", "-o", "prog",
                                       *(f"../{o}" for o in objs)], cwd=project / d, env=env, stderr=subprocess.PIPE,
                                      text=True))
    marker = str(_cache(tmp_path)).encode()

    def both_wait() -> bool:
        pids = distributor_pids(marker)
        return len(pids) == 2 and all(_waits_for_slots(p, _lock_dir(tmp_path), 2) for p in pids)

    wait_until(both_wait, 60, "both distributors waiting for a slot", running=procs)
    held.close()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    s = stats_json()
    assert s["distributor_runs"] == 2 and s["backend_misses"] == MODULES + 1, "a key was compiled twice"
    assert s["backend_hits"] == MODULES + 1 and s["backend_waits"] >= 1
    for d in ("a", "b"):
        assert run(["./prog"], project / d).stdout == expected
    _no_leaks(tmp_path)
