"""The canonical shard key on lua (Debian lua5.4, clang/lld 22): sound, and as precise as promised.

Soundness, as a differential test: lua's thin-link is run many ways that mean the same
backend compiles (the archive as lld reads it, its members as files in Makefile order,
reversed, renamed and moved, in an archive of another name, lld's DTLTO with its
per-link temporary names), and ways that mean other ones (one-file edits, fewer
imports). The index-only links import declarations too, as ltowrap's thin-link does, so
a module a shard names only through declarations goes into the key by its interface
(interface.module_interface): the same-name edits (lvm.c, lgc.c, lstrlib.c) check that
rule. Every backend job gets the key ltowrap would give it (the shard's canonical text,
the module's digest; the compile command is the same for all); every job that shares its
key with a job of another link is compiled for real, and the objects of one key must be
byte-identical.

Precision: lld's DTLTO relink of lua through ltowrap-distributor hits the cache for every
backend (it was 13 of 33 with the raw shard key).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import clean_env, ltowrap_env
from ltowrap.formats import bitcode

from . import debsrc
from .jobkeys import job_keys
from .lua import SCRIPTS, llvm_bin, makefile_objects

pytestmark = pytest.mark.slow

CFLAGS = ["-O2", "-flto=thin", "-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX"]
# One-file edits as a developer makes them (bench/precision.py's): the file keeps its name.
# (label, file, a line as it is or None to append, the line after the edit or the appended text)
SAME_NAME_EDITS = [("lvm", "lvm.c", "#define MAXTAGLOOP\t2000", "#define MAXTAGLOOP\t2001"),
                   # Issue 24: a new function nobody calls.
                   ("lvm-append", "lvm.c", None, "\nint fp_edit_lvm(int x) { return x * 12345 + 1; }\n"),
                   ("lgc", "lgc.c", "#define GCSWEEPMAX\t100", "#define GCSWEEPMAX\t101"),
                   ("lstrlib", "lstrlib.c", "#define MAXCCALLS\t200", "#define MAXCCALLS\t201")]
RECORDER = """import json, os, shutil, subprocess, sys
job = json.load(open(sys.argv[-1]))
keep = os.environ["SHARDS_TO"]
os.makedirs(keep, exist_ok=True)
for n, j in enumerate(job["jobs"]):
    shard = next(a.split("=", 1)[1] for a in j["args"] if a.startswith("-fthinlto-index="))
    module = j["args"][0]
    shutil.copy(shard, os.path.join(keep, f"{n}.bc"))
    with open(os.path.join(keep, f"{n}.module"), "w") as f:
        f.write(module)
    subprocess.run(job["common"]["args"] + j["args"], check=True)
"""


@dataclass(frozen=True)
class Job:
    link: str
    cwd: Path
    module: str  # as the shard names it, relative to cwd
    shard: Path
    key: str
    whole: str  # the key if every module the shard names went in by its bytes (no interfaces)


@pytest.fixture(scope="module")
def lua_objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lua.o and every liblua.a member as ThinLTO bitcode, lstrlib.o edited (lstrlib-edit.o,
    from a source of another name), and each SAME_NAME_EDITS file edited (edited/<label>/<name>.o)."""
    tree = debsrc.lua_upstream_tree(tmp_path_factory.mktemp("shardkey-lua-src") / "lua5.4")
    clang = str(llvm_bin(22) / "clang")
    src = tree / "src"
    names = ["lua.o", *makefile_objects(tree, "CORE_O"), *makefile_objects(tree, "LIB_O")]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda o: subprocess.run([clang, *CFLAGS, "-c", o[:-2] + ".c", "-o", o], cwd=src, check=True),
                      names))
    text = (src / "lstrlib.c").read_text().replace("#define MAXCCALLS\t200", "#define MAXCCALLS\t201")
    (src / "lstrlib-edit.c").write_text(text)
    subprocess.run([clang, *CFLAGS, "-c", "lstrlib-edit.c", "-o", "lstrlib-edit.o"], cwd=src, check=True)
    for label, name, old, new in SAME_NAME_EDITS:
        text = (src / name).read_text()
        assert old is None or text.count(old) == 1, (name, old)
        (src / "edited" / label).mkdir(parents=True)
        (src / "edited" / label / name).write_text(text + new if old is None else text.replace(old, new))
        subprocess.run([clang, *CFLAGS, "-I../..", "-c", name], cwd=src / "edited" / label, check=True)
    (src / "order").write_text("\n".join(names[1:]))
    return src


def _members(src: Path) -> list[str]:
    return (src / "order").read_text().split()


def _place(src: Path, where: Path, files: dict[str, str]) -> None:
    """Copy objects of src into `where` under new names (name -> object in src)."""
    for dest, obj in files.items():
        (where / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / obj, where / dest)


def _index_link(name: str, src: Path, where: Path, inputs: list[str], options: tuple[str, ...] = ("-E",)) -> list[Job]:
    """A --thinlto-index-only link of `inputs` in `where`; its jobs, with the keys ltowrap would give them."""
    lld = str(llvm_bin(22) / "ld.lld")
    # As ltowrap's thin-link runs it: declarations imported too (thinlink.py).
    subprocess.run([lld, "--thinlto-index-only", "--thinlto-emit-imports-files", "-mllvm", "-import-declaration",
                    *inputs, "-o", "lua", *options],
                   cwd=where, check=True, capture_output=True)
    jobs = []
    for shard in where.rglob("*.thinlto.bc"):
        module = str(shard.relative_to(where))[: -len(".thinlto.bc")]
        data = shard.read_bytes()
        if not data or not (where / (module + ".imports")).exists():
            continue
        _materialise(src, where, bitcode.module_paths(data))
        jobs.append(Job(name, where, module, shard, *job_keys(where, data, module)))
    return jobs


def _materialise(src: Path, where: Path, modules: list[str]) -> None:
    """Archive members, named as lld names them (`liblua.a(lapi.o at 1234)`, or under DTLTO
    its temporary names): a file of that name, which the backend compile can open."""
    for module in modules:
        if not (where / module).exists():
            shutil.copy(src / module.split("(", 1)[1].split(" at ")[0], where / module)


def _archive(where: Path, name: str, members: list[str]) -> None:
    subprocess.run([str(llvm_bin(22) / "llvm-ar"), "rcs", name, *members], cwd=where, check=True)


def _links(src: Path, tmp: Path) -> list[Job]:
    members = _members(src)
    jobs: list[Job] = []
    # 1. The archive as lld reads it (modules `liblua.a(lapi.o at 1234)`); 2. another archive
    # name, members in another order.
    for name, lib, order in (("archive", "liblua.a", members), ("other-archive", "libother.a", sorted(members))):
        d = tmp / name
        _place(src, d, {"lua.o": "lua.o", **{m: m for m in members}})
        _archive(d, lib, order)
        jobs += _index_link(name, src, d, ["lua.o", lib])
    # 3. Members as files, in Makefile order; 4. reversed; 5. renamed and moved, in another order.
    files = {"lua.o": "lua.o", **{f"obj/{m}": m for m in members}}
    for name, inputs in (("files", ["lua.o", *(f"obj/{m}" for m in members)]),
                         ("reversed", [*(f"obj/{m}" for m in reversed(members)), "lua.o"])):
        _place(src, tmp / name, files)
        jobs += _index_link(name, src, tmp / name, inputs)
    moved = {"a/main.o": "lua.o", **{f"b/c/{m[:-2]}_x.o": m for m in members}}
    _place(src, tmp / "moved" / "deeper", moved)
    jobs += _index_link("moved", src, tmp / "moved" / "deeper", [*sorted(moved)[1:], "a/main.o"])
    # 6. A one-file edit (lstrlib.c), members as files.
    _place(src, tmp / "edit", {**files, "obj/lstrlib.o": "lstrlib-edit.o"})
    jobs += _index_link("edit", src, tmp / "edit", ["lua.o", *(f"obj/{m}" for m in members)])
    # 6b. Edits as a developer makes them (the source keeps its name): modules that import
    # only declarations from the edited one keep their keys.
    for label, name, _, _ in SAME_NAME_EDITS:
        link = f"edit-{label}"
        _place(src, tmp / link, {**files, f"obj/{name[:-2]}.o": f"edited/{label}/{name[:-2]}.o"})
        jobs += _index_link(link, src, tmp / link, ["lua.o", *(f"obj/{m}" for m in members)])
    # 7. A link that means other compiles: fewer imports. Its keys must differ wherever its
    # objects do.
    _place(src, tmp / "fewer-imports", files)
    jobs += _index_link("fewer-imports", src, tmp / "fewer-imports", ["lua.o", *(f"obj/{m}" for m in members)],
                        ("-E", "-mllvm", "-import-instr-limit=10"))
    return jobs


def _dtlto(src: Path, where: Path, n: int) -> list[Job]:
    """lld's DTLTO link with a distributor that keeps each shard and compiles it as lld asks."""
    where.mkdir(parents=True)
    shutil.copy(src / "lua.o", where / "lua.o")
    for m in _members(src):
        shutil.copy(src / m, where / m)
    _archive(where, "liblua.a", _members(src))
    (where / "record.py").write_text(RECORDER)
    script = where / "record.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {where / 'record.py'} \"$@\"\n")
    script.chmod(0o755)
    clang = str(llvm_bin(22) / "clang")
    subprocess.run([clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={script}", "lua.o", "liblua.a",
                    "-o", "lua", "-Wl,-E", "-lm", "-ldl"], cwd=where, check=True, capture_output=True,
                   env=ltowrap_env(SHARDS_TO=str(where / "shards")))
    jobs = []
    for bc in sorted((where / "shards").glob("*.bc")):
        module = bc.with_suffix(".module").read_text()
        _materialise(src, where, bitcode.module_paths(bc.read_bytes()))
        jobs.append(Job(f"dtlto{n}", where, module, bc, *job_keys(where, bc.read_bytes(), module)))
    return jobs


def _compile(job: Job, out: Path) -> bytes:
    clang = str(llvm_bin(22) / "clang")
    subprocess.run([clang, "-O2", "-c", "-x", "ir", job.module, f"-fthinlto-index={job.shard}", "-o", str(out)],
                   cwd=job.cwd, check=True, capture_output=True)
    return out.read_bytes()


def test_same_key_same_object_over_many_lua_links(lua_objects: Path, tmp_path: Path) -> None:
    jobs = _links(lua_objects, tmp_path) + _dtlto(lua_objects, tmp_path / "dtlto1", 1) + \
        _dtlto(lua_objects, tmp_path / "dtlto2", 2)
    by_key: dict[str, list[Job]] = defaultdict(list)
    for j in jobs:
        by_key[j.key].append(j)
    shared = {k: js for k, js in by_key.items() if len({j.link for j in js}) > 1}
    raw_differs = sum(len({j.shard.read_bytes() for j in js}) > 1 for js in shared.values())
    # Keys shared although a module the shard imports declarations from differs.
    via_interface = sum(len({j.whole for j in js}) > 1 for js in shared.values())
    to_compile = [(k, n, j) for k, js in shared.items() for n, j in enumerate(js)]
    (tmp_path / "objs").mkdir()
    with ThreadPoolExecutor(2) as pool:
        objects = list(pool.map(lambda t: (t[0], _compile(t[2], tmp_path / "objs" / f"{t[0]}-{t[1]}.o")), to_compile))
    per_key: dict[str, set[bytes]] = defaultdict(set)
    for k, obj in objects:
        assert obj, k
        per_key[k].add(obj)
    unsound = {k: [f"{j.link}:{j.module}" for j in shared[k]] for k, objs in per_key.items() if len(objs) > 1}
    pairs = sum(len(js) - 1 for js in shared.values())
    print(f"\n{len(jobs)} jobs in {len({j.link for j in jobs})} links, {len(by_key)} keys; "
          f"{len(shared)} keys shared across links ({raw_differs} of them with different shard bytes, "
          f"{via_interface} with a declarations-only module that differs), {pairs} same-key pairs compiled and compared")
    assert not unsound, unsound
    assert len(shared) >= 30 and raw_differs >= 30  # the test compared what the raw key could not
    # lua's modules import definitions from most modules they import anything from: three
    # keys here (redis's networking.c edit has ten such backends).
    assert via_interface >= 3
    edits = [f"edit-{label}" for label, _, _, _ in SAME_NAME_EDITS]
    keys = {link: {j.module: j.key for j in jobs if j.link == link}
            for link in ("files", "edit", "fewer-imports", *edits)}
    wholes = {link: {j.module: j.whole for j in jobs if j.link == link} for link in ("files", *edits)}
    assert keys["edit"]["obj/lstrlib.o"] != keys["files"]["obj/lstrlib.o"]
    for (_, name, _, _), link in zip(SAME_NAME_EDITS, edits):
        assert keys[link][f"obj/{name[:-2]}.o"] != keys["files"][f"obj/{name[:-2]}.o"]
    # Issue 24: ldo.o takes only declarations from lvm.o, and a new function in lvm.c nobody
    # calls leaves its key (it changed with the whole module in the key, shardkey 2).
    assert wholes["edit-lvm-append"]["obj/ldo.o"] != wholes["files"]["obj/ldo.o"]
    assert keys["edit-lvm-append"]["obj/ldo.o"] == keys["files"]["obj/ldo.o"]
    changed = sum(keys[link][m] != k for link in edits for m, k in keys["files"].items())
    changed_whole = sum(wholes[link][m] != k for link in edits for m, k in wholes["files"].items())
    print(f"same-name edits: {changed} backends to compile ({changed_whole} with every module by its bytes)")
    assert changed < changed_whole
    assert sum(keys["fewer-imports"][m] != k for m, k in keys["files"].items()) >= 10


def test_dtlto_relink_of_lua_hits_for_every_backend(lua_objects: Path, tmp_path: Path) -> None:
    where = tmp_path / "lua"
    where.mkdir()
    shutil.copy(lua_objects / "lua.o", where / "lua.o")
    for m in _members(lua_objects):
        shutil.copy(lua_objects / m, where / m)
    _archive(where, "liblua.a", _members(lua_objects))
    env = clean_env(tmp_path, LTOWRAP_LOG=str(tmp_path / "log"))
    clang = str(llvm_bin(22) / "clang")
    for _ in range(2):
        subprocess.run([clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={SCRIPTS / 'ltowrap-distributor'}",
                        "lua.o", "liblua.a", "-o", "lua", "-Wl,-E", "-lm", "-ldl"], cwd=where, check=True, env=env)
    runs = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    runs = [r for r in runs if r["tool"] == "distributor"]
    print(f"\nDTLTO relink: {runs[1]['backend_hits']} of {len(runs[1]['backends'])} backends hit")
    assert len(runs) == 2 and runs[0]["backend_compiles"] == len(runs[0]["backends"]) >= 30
    assert runs[1]["backend_compiles"] == 0 and runs[1]["backend_hits"] == len(runs[0]["backends"])
    out = subprocess.run([where / "lua", "-e", "print(6 * 7)"], check=True, capture_output=True, text=True).stdout
    assert out == "42\n"
