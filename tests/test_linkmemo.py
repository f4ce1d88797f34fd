"""The link memo (linkmemo.py) with real clang and lld: restored links are the links, and any change misses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import MUL_C, TWICE_C, Toolchain, links, ltowrap_env, run, stats_json, sysroot, wrapper, write

MAIN_C = """
#include <stdio.h>
int add(int, int);
int mul(int, int);
int twice(int);
int native(int);
int main(void) {
    int acc = 0;
    for (int i = 0; i < 50; i++) acc = add(acc, mul(i, twice(native(i)))) % 1000003;
    printf("result %d\\n", acc);
    return 0;
}
"""
ADD_C = "int add(int a, int b) { return a + b; }\n"
NATIVE_C = "int native(int x) { return x + 1; }\n"
def cc(d: Path, tc: Toolchain, src: str, out: str, lto: bool = True) -> None:
    run([wrapper("ltowrap-clang"), "-O2", *(["-flto=thin"] if lto else []), "-c", src, "-o", out], d, env=ltowrap_env(tc))


def project(d: Path, tc: Toolchain) -> list[str]:
    """Sources built as ThinLTO objects, an archive found through -L, a native archive that only a
    linker script names, a linker script, a version script, a sysroot; returns the link's arguments."""
    for name, text in (("main.c", MAIN_C), ("add.c", ADD_C), ("mul.c", MUL_C), ("twice.c", TWICE_C),
                       ("native.c", NATIVE_C)):
        write(d / name, text)
    for name in ("main", "add", "mul", "twice"):
        cc(d, tc, f"{name}.c", f"{name}.o")
    cc(d, tc, "native.c", "native.o", lto=False)
    for lib in ("lib0", "lib"):
        (d / lib).mkdir()
    run([tc.ar, "rcs", "lib/libmul.a", "mul.o"], d)
    run([tc.ar, "rcs", "lib/libnative.a", "native.o"], d)
    write(d / "lib" / "libscript.so", "INPUT(libnative.a)\n")  # lld finds libnative.a through -L
    write(d / "magic.ld", "magic = 7;\n")
    write(d / "v.map", "{ global: main; local: *; };\n")
    root = sysroot(d)
    if root is None:
        pytest.skip("this machine's libc/gcc files are not where the sysroot copy expects them")
    return [f"--sysroot={root}", "main.o", "add.o", "twice.o", "-Llib0", "-Llib", "-lmul", "-lscript",
            "-Wl,-T,magic.ld", "-Wl,--version-script=v.map"]


def link(d: Path, tc: Toolchain, args: list[str], out: str = "prog", **env: str) -> subprocess.CompletedProcess[str]:
    return run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", *args, "-o", out], d, env=ltowrap_env(tc, **env))


def counts() -> tuple[int, int, int]:
    s = stats_json()
    return s["link_hits"], s["link_misses"], s["bad_entries"]


def fresh(d: Path, tc: Toolchain, args: list[str]) -> bytes:
    """The output of the same link with the memo off (the program it gives is run too)."""
    (d / "prog").unlink(missing_ok=True)
    link(d, tc, args, LTOWRAP_MEMO="0")
    assert run(["./prog"], d).stdout.startswith("result ")
    return (d / "prog").read_bytes()


def test_a_hit_restores_the_link_byte_for_byte(tmp_path, tc):
    d = tmp_path / "p"
    args = project(d, tc)
    link(d, tc, args)
    want = run(["./prog"], d).stdout
    first = (d / "prog").read_bytes()
    assert counts()[:2] == (0, 1)
    (d / "prog").unlink()
    # Under another umask, as lld does: 0777 less the umask for an executable.
    done = run(["sh", "-c", 'umask 077; exec "$@"', "sh", wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld",
                *args, "-o", "prog"], d, env=ltowrap_env(tc))
    assert done.stderr == ""
    assert counts()[:2] == (1, 1)
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "restored" and not {"thin-link", "backends", "final link"} & {s[0] for s in rec["spans"]}, rec
    assert (d / "prog").read_bytes() == first == fresh(d, tc, args)
    assert run(["./prog"], d).stdout == want
    (d / "prog").unlink()
    run(["sh", "-c", 'umask 077; exec "$@"', "sh", wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld",
         *args, "-o", "prog"], d, env=ltowrap_env(tc))
    assert (d / "prog").stat().st_mode & 0o777 == 0o700


def _object(d: Path, tc: Toolchain) -> None:
    write(d / "add.c", "int add(int a, int b) { return a + b + 1; }\n")
    cc(d, tc, "add.c", "add.o")


def _member_via_L(d: Path, tc: Toolchain) -> None:
    write(d / "mul.c", MUL_C.replace("r = add(r, a)", "r = add(r, a + 1)"))
    cc(d, tc, "mul.c", "mul.o")
    (d / "lib" / "libmul.a").unlink()
    run([tc.ar, "rcs", "lib/libmul.a", "mul.o"], d)


def _earlier_in_search_path(d: Path, tc: Toolchain) -> None:
    """No file the link read changes: a library appears where lld now finds it first."""
    write(d / "mul.c", MUL_C.replace("r = add(r, a)", "r = add(r, a + 2)"))
    cc(d, tc, "mul.c", "mul.o")
    run([tc.ar, "rcs", "lib0/libmul.a", "mul.o"], d)


def _named_by_a_script(d: Path, tc: Toolchain) -> None:
    """Only lld knows this file is read (a linker script names it): its --dependency-file says so."""
    write(d / "native.c", "int native(int x) { return x + 3; }\n")
    cc(d, tc, "native.c", "native.o", lto=False)
    (d / "lib" / "libnative.a").unlink()
    run([tc.ar, "rcs", "lib/libnative.a", "native.o"], d)


def _linker_script(d: Path, tc: Toolchain) -> None:
    write(d / "magic.ld", "magic = 9;\n")


def _version_script(d: Path, tc: Toolchain) -> None:
    write(d / "v.map", "V1 { global: main; local: *; };\n")


def _crt_in_sysroot(d: Path, tc: Toolchain) -> None:
    crt = d / "sysroot" / "usr/lib/x86_64-linux-gnu/crti.o"
    crt.write_bytes(crt.read_bytes() + b"\0" * 16)  # still a valid object; another file all the same


def _new_gcc_in_sysroot(d: Path, tc: Toolchain) -> None:
    """No file the link read changes: the driver now takes its crt files from a newer gcc
    directory (the direct lane's check of the driver line, linkdirect.py)."""
    gcc = d / "sysroot" / "usr/lib/gcc/x86_64-linux-gnu"
    shutil.copytree(gcc / "12", gcc / "13")


CHANGES = {"object": _object, "archive-member-via-L": _member_via_L, "earlier-in-search-path": _earlier_in_search_path,
           "named-by-a-script": _named_by_a_script, "linker-script": _linker_script, "version-script": _version_script,
           "crt-in-sysroot": _crt_in_sysroot, "new-gcc-in-sysroot": _new_gcc_in_sysroot}


@pytest.mark.parametrize("change", CHANGES)
def test_changing_what_the_link_reads_is_a_miss_and_a_correct_link(tmp_path, tc22, change):
    d = tmp_path / "p"
    args = project(d, tc22)
    link(d, tc22, args)
    before = (d / "prog").read_bytes()
    CHANGES[change](d, tc22)
    (d / "prog").unlink()
    link(d, tc22, args)
    assert counts()[:2] == (0, 2), change
    assert links(tmp_path)[-1]["decision"] == "distributed"
    got = (d / "prog").read_bytes()
    assert got == fresh(d, tc22, args)
    if change not in ("crt-in-sysroot", "new-gcc-in-sysroot"):  # the same crt bytes: the same output
        assert got != before
    (d / "prog").unlink()
    link(d, tc22, args)  # and the new link is memoised in turn
    assert counts()[:2] == (1, 2) and (d / "prog").read_bytes() == got


def test_a_changed_member_of_a_thin_archive_is_a_miss(tmp_path, tc22):
    """A thin archive holds only the names of its members: the manifest lists each member's own
    file, and a member built again (the archive left as it was) is a miss."""
    d = tmp_path / "p"
    args = [a if a != "-lmul" else "thin.a" for a in project(d, tc22)]
    run([tc22.ar, "rcsT", "thin.a", "mul.o"], d)
    link(d, tc22, args)
    before, archive = (d / "prog").read_bytes(), (d / "thin.a").read_bytes()
    _member_via_L(d, tc22)  # mul.o built again (and lib/libmul.a, which this link does not name)
    assert (d / "thin.a").read_bytes() == archive
    (d / "prog").unlink()
    link(d, tc22, args)
    assert counts()[:2] == (0, 2)
    got = (d / "prog").read_bytes()
    assert got != before and got == fresh(d, tc22, args)


def test_another_directory_or_option_is_a_miss(tmp_path, tc22):
    d = tmp_path / "p"
    args = project(d, tc22)
    link(d, tc22, args)
    other = tmp_path / "q"
    shutil.copytree(d, other, symlinks=True)
    (other / "prog").unlink()
    # The same relative command line elsewhere: --sysroot names the first tree, the rest is relative.
    link(other, tc22, args)
    assert counts()[:2] == (0, 2)
    link(d, tc22, [*args, "-Wl,--build-id=sha1"])
    assert counts()[:2] == (0, 3)
    assert links(tmp_path)[-1]["decision"] == "distributed"


def test_a_corrupt_entry_is_detected_counted_and_replaced(tmp_path, tc22):
    d = tmp_path / "p"
    args = project(d, tc22)
    link(d, tc22, args)
    want = (d / "prog").read_bytes()
    result, = (p for p in (tmp_path / "cache" / "l").rglob("*") if p.is_file() and want in p.read_bytes())
    blob = bytearray(result.read_bytes())
    blob[-100] ^= 0xFF
    result.write_bytes(bytes(blob))
    (d / "prog").unlink()
    link(d, tc22, args)
    assert counts() == (0, 2, 1)
    assert (d / "prog").read_bytes() == want
    (d / "prog").unlink()
    link(d, tc22, args)
    assert counts() == (1, 2, 1) and (d / "prog").read_bytes() == want


def test_two_identical_links_at_once_both_succeed(tmp_path, tc22):
    d = tmp_path / "p"
    args = project(d, tc22)
    want = fresh(d, tc22, args)
    for _ in range(2):  # cold (both link and store), then warm (both restore)
        (d / "prog").unlink()
        cmd = [wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", *args, "-o", "prog"]
        procs = [subprocess.Popen(cmd, cwd=d, env=ltowrap_env(tc22), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        for p in procs:
            out, err = p.communicate()
            assert p.returncode == 0, err
            assert err == b""
        assert (d / "prog").read_bytes() == want
    hits, misses, bad = counts()
    assert hits + misses == 4 and hits >= 2 and bad == 0


def test_a_map_file_is_restored_and_other_outputs_are_never_left_stale(tmp_path, tc22):
    d = tmp_path / "p"
    args = project(d, tc22)
    link(d, tc22, [*args, "-Wl,-Map=prog.map"])
    want = (d / "prog.map").read_bytes()
    (d / "prog.map").unlink()
    (d / "prog").unlink()
    link(d, tc22, [*args, "-Wl,-Map=prog.map"])
    assert counts()[:2] == (1, 1) and (d / "prog.map").read_bytes() == want
    assert (d / "prog.map").stat().st_mode & 0o111 == 0  # a map is not executable
    # --opt-remarks-filename writes files the memo does not model: such a link runs every time.
    for _ in range(2):
        (d / "r.yaml").unlink(missing_ok=True)
        link(d, tc22, [*args, "-Wl,--opt-remarks-filename,r.yaml"])
        assert (d / "r.yaml").exists()
    s = stats_json()
    assert (s["link_hits"], s["link_misses"], s["link_unmemoised"]) == (1, 1, 2)


def test_the_memo_can_be_turned_off(tmp_path, tc22):
    d = tmp_path / "p"
    args = project(d, tc22)
    for _ in range(2):
        link(d, tc22, args, LTOWRAP_MEMO="0")
        assert links(tmp_path)[-1]["decision"] == "distributed"
    assert counts()[:2] == (0, 0) and not (tmp_path / "cache" / "l").exists()


def test_links_without_bitcode_are_not_counted_by_the_memo(tmp_path, tc22):
    d = tmp_path / "p"
    write(d / "n.c", "int main(void) { return 0; }\n")
    run([tc22.clang, "-c", "n.c"], d)
    for _ in range(2):
        run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "n.o", "-o", "n"], d, env=ltowrap_env(tc22))
    s = stats_json()
    assert (s["links_passthrough"], s["link_hits"], s["link_misses"], s["link_unmemoised"]) == (2, 0, 0, 0)


def test_a_random_build_id_is_never_restored(tmp_path, tc22):
    """--build-id=uuid asks for a new id on every link: such a link is never memoised."""
    d = tmp_path / "p"
    args = [*project(d, tc22), "-Wl,--build-id=uuid"]
    ids = set()
    for _ in range(2):
        (d / "prog").unlink(missing_ok=True)
        link(d, tc22, args)
        ids.add((d / "prog").read_bytes())
    assert len(ids) == 2
    s = stats_json()
    assert (s["link_hits"], s["link_misses"], s["link_unmemoised"]) == (0, 0, 2)


def test_a_restored_link_loads_none_of_the_link_stages(tmp_path, tc22):
    """The memo's point is speed: a hit must not import what only a distributed link uses
    (the plan, the thin-link, the executor and its slots, tempfile, subprocess), tens of ms,
    nor, on the direct lane (linkdirect.py), the driver line, the link-line parser or the
    costly standard modules (json and the re it loads, dataclasses, contextlib, and site:
    the sh entry starts Python with -S). The first,
    missed link of the same command shows the check sees those imports. The link log is on,
    as in a user's build by default: the hit writes its line without json (logfile.restored),
    the same line log.Record would write."""
    d = tmp_path / "p"
    args = project(d, tc22)
    stages = {"ltowrap.stages.plan", "ltowrap.stages.thinlink", "ltowrap.jobs.executor", "ltowrap.jobs.slots",
              "ltowrap.stages.finallink", "tempfile", "subprocess"}
    lean = {"ltowrap.linkline.driverline", "ltowrap.linkline.cmdline", "ltowrap.pipeline", "ltowrap.linkmemo", "json",
            "re", "enum", "dataclasses", "contextlib", "site"}

    def imported() -> set[str]:
        (d / "prog").unlink(missing_ok=True)
        done = link(d, tc22, args, PYTHONPROFILEIMPORTTIME="1", LTOWRAP_LOG=None)
        return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}

    assert stages | lean - {"site"} <= imported()  # a miss: the whole link
    assert counts()[0] == 0
    hit = imported()
    assert counts()[0] == 1
    assert hit & (stages | lean) == set()
    from ltowrap import log

    written = log.records(str(tmp_path / "cache" / "links.jsonl"))[-1]
    assert written["decision"] == "restored"
    like = log.Record(written["tool"], written["argv"], written["cwd"], written["pid"], written["start"],
                      written["end"], "restored")
    like.span("direct lane", written["start"], written["end"])
    assert written == like.to_json()
    # A subpackage the hit passes through (ltowrap/formats/ for an archive, say) costs only its
    # empty __init__.py: the package's layout adds no import to the hit.
    package = Path(__file__).resolve().parent.parent / "ltowrap"
    inits = [package.joinpath(*m.split(".")[1:], "__init__.py") for m in hit if m.startswith("ltowrap.")]
    assert [str(i) for i in inits if i.is_file() and i.read_text()] == []


def test_another_ltowrap_install_or_version_restores_nothing(tmp_path, monkeypatch):
    """The memo's keys take ltowrap's identity: a reinstall (its `__init__.py` written anew) or
    another version misses, so a link an older ltowrap made is not restored by a newer one."""
    import os

    import ltowrap
    from ltowrap import cachekey

    init = tmp_path / "__init__.py"
    init.write_text("# ltowrap\n")
    monkeypatch.setattr(ltowrap, "__file__", str(init))

    def keys() -> tuple[str, str]:
        return (cachekey.link_memo_key("ld", "cc", [], "/w", ["ld.lld", "a.o"], [], []),
                cachekey.link_direct_key(["clang", "a.o"], "/w", [], "tools", []))

    first = keys()
    assert keys() == first
    again = tmp_path / "new"
    again.write_text("# ltowrap\n")
    os.replace(again, init)  # what an install does: the same text, a new file
    reinstalled = keys()
    assert all(a != b for a, b in zip(first, reinstalled))
    monkeypatch.setattr(ltowrap, "__version__", "0.0.0-other")
    assert all(a != b for a, b in zip(reinstalled, keys()))
