"""The canonical shard key on redis (Debian redis, clang/lld 22): one-file edits, differential.

redis-server's objects (with -g, as redis builds them) are thin-linked as ltowrap does
(--thinlto-index-only, -import-declaration, archive members as files between --start-lib
and --end-lib), once as built and once after each of bench/precision.py's one-file edits
(networking.c, server.c, sds.c, bio.c), and after a new function nobody calls is appended
to networking.c (issue 24). Every backend job gets ltowrap's key; a job of an edited
link whose key equals the base link's although some module its shard names has other
bytes (a module it imports only declarations from, named by its interface) is compiled
for real on both sides, and the two objects must be byte-identical.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from . import debsrc
from .jobkeys import job_keys
from .lua import llvm_bin

pytestmark = pytest.mark.slow

# (label, file, a line as it is or None to append, the line after the edit or the appended text)
EDITS = [("networking", "networking.c", "#define MAX_ACCEPTS_PER_CALL 1000", "#define MAX_ACCEPTS_PER_CALL 1001"),
         ("server", "server.c", "#define CLIENTS_CRON_MIN_ITERATIONS 5", "#define CLIENTS_CRON_MIN_ITERATIONS 6"),
         ("sds", "sds.c", "#define SDS_LLSTR_SIZE 21", "#define SDS_LLSTR_SIZE 22"),
         ("bio", "bio.c", "#define REDIS_THREAD_STACK_SIZE (1024*1024*4)", "#define REDIS_THREAD_STACK_SIZE (1024*1024*5)"),
         ("networking-append", "networking.c", None, "\nint fp_edit_networking(int x) { return x * 12345 + 1; }\n")]
ARCHIVES = ["../deps/hiredis/libhiredis.a", "../deps/lua/src/liblua.a", "../deps/hdr_histogram/libhdrhistogram.a"]


def _make(src: Path, *targets: str) -> None:
    bin22 = llvm_bin(22)
    subprocess.run(["make", "-j2", *targets, f"CC={bin22 / 'clang'}", "CFLAGS=-O2 -flto=thin", "MALLOC=libc",
                    "USE_SYSTEMD=no", f"AR={bin22 / 'llvm-ar'}", f"RANLIB={bin22 / 'llvm-ranlib'}", "REDIS_LD=true"],
                   cwd=src, check=True, capture_output=True)


@pytest.fixture(scope="module")
def redis_objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """redis-server's objects and its archives' members as bitcode (base/), and each edited
    file's object (edited/<label>/<name>.o, compiled from the file under its own name)."""
    tree = debsrc.fetch("redis").unpack(tmp_path_factory.mktemp("shardkey-redis") / "redis")
    src = tree / "src"
    _make(src, "redis-server")  # REDIS_LD=true: objects and archives, no link
    objects = re.search(r"^REDIS_SERVER_OBJ=(.*)$", (src / "Makefile").read_text(), re.M).group(1).split()
    base = tree / "base"
    base.mkdir()
    for o in objects:
        shutil.copy(src / o, base / o)
    members = []
    for lib in ARCHIVES:
        where = base / Path(lib).stem
        where.mkdir()
        subprocess.run([str(llvm_bin(22) / "llvm-ar"), "x", str(src / lib)], cwd=where, check=True)
        members += sorted(str(p.relative_to(base)) for p in where.iterdir())
    (base / "inputs").write_text("\n".join([*objects, "--start-lib", *members, "--end-lib"]))
    for label, name, old, new in EDITS:
        text = (src / name).read_text()
        assert old is None or text.count(old) == 1, (name, old)
        (src / name).write_text(text + new if old is None else text.replace(old, new))
        _make(src, name[:-2] + ".o")
        (tree / "edited" / label).mkdir(parents=True)
        shutil.move(src / (name[:-2] + ".o"), tree / "edited" / label / (name[:-2] + ".o"))
        (src / name).write_text(text)
    return tree


def _link(tree: Path, name: str, replace: dict[str, Path]) -> dict[str, tuple[str, str, Path]]:
    """A thin-link of redis-server in its own directory: module -> (key, whole key, directory)."""
    where = tree / name
    shutil.copytree(tree / "base", where)
    for module, obj in replace.items():
        shutil.copy(obj, where / module)
    inputs = (where / "inputs").read_text().split()
    subprocess.run([str(llvm_bin(22) / "ld.lld"), "--thinlto-index-only=used", "--thinlto-emit-imports-files",
                    "-mllvm", "-import-declaration", "-pie", "-e", "main", *inputs, "-o", "redis-server"],
                   cwd=where, check=True, capture_output=True)
    jobs = {}
    for module in (where / "used").read_text().split():
        shard = (where / (module + ".thinlto.bc")).read_bytes()
        jobs[module] = (*job_keys(where, shard, module), where)
    return jobs


def _compile(where: Path, module: str, out: Path) -> bytes:
    subprocess.run([str(llvm_bin(22) / "clang"), "-O2", "-ffunction-sections", "-fdata-sections", "-c", "-x", "ir",
                    module, f"-fthinlto-index={module}.thinlto.bc", "-o", str(out)],
                   cwd=where, check=True, capture_output=True)
    return out.read_bytes()


def test_redis_edits_share_keys_only_where_objects_are_the_same(redis_objects: Path) -> None:
    base = _link(redis_objects, "link-base", {})
    pairs = []
    report = []
    for label, name, _, _ in EDITS:
        module = name[:-2] + ".o"
        link = _link(redis_objects, f"link-{label}", {module: redis_objects / "edited" / label / module})
        assert link[module][0] != base[module][0]
        changed = sum(link[m][0] != base[m][0] for m in base)
        changed_whole = sum(link[m][1] != base[m][1] for m in base)
        # Same key, other bytes in some module the shard names: the rule under test.
        via_interface = [m for m in base if link[m][0] == base[m][0] and link[m][1] != base[m][1]]
        pairs += [(m, base[m][2], link[m][2]) for m in via_interface]
        report.append(f"{label}: {changed} of {len(base)} backends to compile ({changed_whole} with every module "
                      f"by its bytes), {len(via_interface)} same-key pairs across a changed module")
    out = redis_objects / "objs"
    out.mkdir()

    # Every pair's first side is the base link's job: each such module is compiled once.
    with ThreadPoolExecutor(2) as pool:
        based = sorted({(m, a) for m, a, _ in pairs})
        before = dict(zip(based, pool.map(lambda ma: _compile(ma[1], ma[0], out / f"base-{ma[0]}.o".replace("/", "_")),
                                          based)))
        after = list(pool.map(lambda t: _compile(t[1][2], t[1][0], out / f"{t[0]}-b.o"), enumerate(pairs)))
    results = [before[(m, a)] == b for (m, a, _), b in zip(pairs, after)]
    print("\n" + "\n".join(report) + f"\n{len(pairs)} same-key pairs compiled and compared")
    assert all(results), [p[0] for p, ok in zip(pairs, results) if not ok]
    assert len(pairs) >= 30
