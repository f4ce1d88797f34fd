"""Every clang/lld Debian bookworm ships (13, 14, 15, 16, 19, 22: helpers.ALL_VERSIONS), each
on its own: the core of a distributed link, its summary format, the features that came in
some release, and setups that mix releases.

A user's project picks its compiler; these check that ltowrap works with whichever it is,
without picking another. The broad suite runs on 22 and 14 (`tc`); what runs here is
small on purpose, and the same on every release:

- test_core: a program linked through ltowrap-clang from a regular and a thin archive,
  one module compiled -O1 -fno-unroll-loops (its option record on its backend's command
  line), every backend key taken from a canonical shard of the release's own summary
  format; a relink with the memo off (every backend and the thin-link hit), one with it
  on (restored); -shared and -r links; the versioned name (clang-N) through `ltowrap
  shims`.
- test_summary_format: the shard key is a differential check per release: index-only
  links of the same modules in other orders, under other names, in an archive, and with
  edits; every job whose key another link's job shares is compiled for real, and the
  objects of one key must be byte-identical, with the canonical key and with the raw one
  a format this reader did not know would get. A misread format (a record taken for
  another, a field left out that the backend reads) shows as a shared key whose objects
  differ; a format read too coarsely, as keys that never meet.
- test_gates: FatLTO, `--thinlto-emit-index-files`, lld's DTLTO distributor and
  `-import-declaration` are used where the release's lld says it takes them
  (toolchain.lld_facts), and a link that names one it does not take runs unchanged, with
  lld's own error.
- test_mixed_*: a driver, backend clang or ld.lld of another release is refused with its
  own reason (mixed_toolchain), counted, the link run unchanged.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import (Toolchain, links, log_lines, ltowrap_env, relative_digests, run, stats_json, toolchain, wrapper,
                     write)
from ltowrap import cachekey
from ltowrap import toolchain as tools
from ltowrap.formats import bitcode, bitcodes, shardkey

# The summary version each release writes (shardkey.KNOWN_VERSIONS says the same).
SUMMARY_VERSION = {13: 9, 14: 9, 15: 9, 16: 9, 19: 10, 22: 12}

CORE = {
    "main.c": '#include <stdio.h>\nint add(int, int);\nint mul(int, int);\nint twice(int);\nint opt(int);\n'
              "static int local(int x) { return x * 3 + 1; }\n"
              "int main(void) {\n  int acc = 0;\n"
              "  for (int i = 0; i < 100; i++) acc = add(acc, mul(i, twice(local(i)))) % 1000003;\n"
              '  printf("result %d %d\\n", acc, opt(9));\n  return 0;\n}\n',
    "add.c": "int add(int a, int b) { return a + b; }\n",
    "mul.c": "int add(int, int);\nint mul(int a, int b) { int r = 0; for (int i = 0; i < b; i++) r = add(r, a); return r; }\n",
    "twice.c": "int twice(int x) { return 2 * x; }\n",
    # Compiled -O1 -fno-unroll-loops: its backend must get both.
    "opt.c": "int opt(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * i; return s; }\n",
}


def facts(tc: Toolchain) -> dict:
    return tools.lld_facts(tc.lld)


def compile_core(d: Path, tc: Toolchain, env: dict, pic: bool = False) -> None:
    for name, text in CORE.items():
        write(d / name, text)
    flags = {"opt.c": ["-O1", "-fno-unroll-loops"]}
    for name in CORE:
        run([wrapper("ltowrap-clang"), *flags.get(name, ["-O2"]), *(["-fPIC"] if pic else []), "-flto=thin", "-c",
             name], d, env=env)


def expected(d: Path, tc: Toolchain) -> str:
    run([tc.clang, "-O1", "-o", "ref", *CORE], d)
    return run(["./ref"], d).stdout


def explain(env: dict, *modules: str) -> list[str]:
    """`ltowrap explain`'s key dumps, one text each."""
    out = run([wrapper("ltowrap"), "explain", *modules], ".", env=env).stdout
    return [d for d in out.split("== ") if d.strip()]


def test_core(any_tc, project, tmp_path):
    tc = any_tc
    env = ltowrap_env(tc, LTOWRAP_DEBUG="1")
    compile_core(project, tc, env)
    want = expected(project, tc)
    run([tc.ar, "rcs", "libr.a", "add.o", "mul.o"], project)
    run([tc.ar, "rcsT", "libt.a", "twice.o", "opt.o"], project)
    link = [wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "libr.a", "libt.a", "-o", "prog"]
    run(link, project, env=env)
    assert run(["./prog"], project).stdout == want
    rec = links(tmp_path)[-1]
    assert rec["argv"][0] == tc.lld  # this release's lld, beside its clang
    assert rec["decision"] == "distributed" and rec["modules"] == 5 and rec["backend_compiles"] == 5, rec
    assert not any(b.get("recorded") is False for b in rec["backends"]), rec["backends"]
    dumps = explain(env)
    assert len(dumps) == 5
    want_format = f"shard format: summary v{SUMMARY_VERSION[tc.version]} ("
    assert all(want_format in d and "): canonical" in d for d in dumps), dumps[0]
    (opt,) = [d for d in dumps if "-fno-unroll-loops" in d]
    assert "\0-O1\0" in opt.replace(" ", "\0") or " -O1 " in opt

    # Relinked with the memo off: the thin-link and every backend from the cache.
    run(link, project, env={**env, "LTOWRAP_MEMO": "0"})
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "distributed" and rec["thinlink_cached"], rec
    assert rec["backend_compiles"] == 0 and rec["backend_hits"] == 5, rec
    # With it on: the link the first one stored, restored whole.
    (project / "prog").unlink()
    run(link, project, env=env)
    assert links(tmp_path)[-1]["decision"] == "restored"
    assert run(["./prog"], project).stdout == want

    # -r, straight through ltowrap-ld.lld, then linked into the program.
    run([wrapper("ltowrap-ld.lld"), "-r", "-o", "both.o", "add.o", "mul.o"], project,
        env={**env, "LTOWRAP_REAL_LD": tc.lld})
    assert links(tmp_path)[-1]["decision"] == "distributed"
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "both.o", "twice.o", "opt.o", "-o", "prog-r"], project,
        env=env)
    assert run(["./prog-r"], project).stdout == want

    # -shared, of -fPIC modules; the program linked against it.
    pic = project / "pic"
    pic.mkdir()
    compile_core(pic, tc, env, pic=True)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-shared", "add.o", "mul.o", "twice.o", "opt.o", "-o", "libc4.so"],
        pic, env=env)
    assert links(tmp_path)[-1]["decision"] == "distributed"
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "main.o", "-L.", "-lc4", "-Wl,-rpath,$ORIGIN", "-o", "prog"],
        pic, env=env)
    assert run(["./prog"], pic).stdout == want

    # The versioned name, through `ltowrap shims`: compile and link in one command.
    shims = run([wrapper("ltowrap"), "shims"], project).stdout.strip()
    named = f"clang-{tc.version}"
    assert (Path(shims) / named).exists()
    path_env = {k: v for k, v in env.items() if k != "LTOWRAP_CLANG"} | {"PATH": f"{shims}:{os.environ['PATH']}"}
    shim = project / "shim"
    shim.mkdir()
    for name, text in CORE.items():
        write(shim / name, text)
    run([named, "-O2", "-flto=thin", "-fuse-ld=lld", *CORE, "-o", "prog"], shim, env=path_env)
    assert run(["./prog"], shim).stdout == want
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "distributed" and rec["argv"][0] == tc.lld, rec


# ---------------------------------------------------------------- the summary format

WEB = {
    # m0..m5 call each other (small bodies: imported as definitions); each has a static
    # helper (promoted when imported: a local's summary, with LLVM 13 its original name) and
    # a variable; big() is too large to import (only declared to its callers, where lld
    # imports declarations).
    **{f"m{i}.c": (f"int f{(i + 1) % 6}(int); int f{(i * 5 + 2) % 6}(int); int big{(i + 3) % 6}(int);\n"
                   f"int g{i} = {i};\n__attribute__((noinline)) static int h{i}(int x) {{ return x * {i + 2} + g{i}; }}\n"
                   f"int f{i}(int x) {{ if (x <= 0) return g{i}; return h{i}(f{(i + 1) % 6}(x - 1))"
                   f" + f{(i * 5 + 2) % 6}(x - 2); }}\n"
                   f"int big{i}(int x) {{ int s = x;"
                   + "".join(f" s = (s * {k + i + 3}) ^ (s >> {k % 5 + 1}) ^ x;" for k in range(60))
                   + f" return s + big{(i + 3) % 6}(x - 1); }}\n")
       for i in range(6)},
    "main.c": "int f0(int); int big0(int); int solo(int); int decl(int);\n"
              "int main(int c, char **v) { return (f0(c) + big0(c) + solo(c) + decl(c)) & 0x7f; }\n",
    "solo.c": "int solo(int x) { return x * 3 + 1; }\n",  # takes nothing from anyone
    "decl.c": "int big3(int);\nint decl(int x) { return big3(x) + 1; }\n",  # only a declaration of m3's
    # A partial sample profile's module: its backend reads the link's block count (v9).
    "prof.c": "int f2(int);\nint work(int x) { int s = 0; for (int i = 0; i < x; i++) s += f2(i) * x; return s; }\n",
}
APPENDED = "\nint fp_appended(int x) { return x * 12345 + 1; }\n"  # nobody calls it
PROFILE = "work:1000:10\n 1: 100\n"


def _compile_web(tc: Toolchain, d: Path, sources: dict[str, str]) -> None:
    d.mkdir(parents=True)
    write(d / "prof.txt", PROFILE)
    run([str(tc.bindir / "llvm-profdata"), "merge", "--sample", "--extbinary", "--gen-partial-profile", "prof.txt",
         "-o", "prof.prof"], d)

    def one(name: str) -> None:
        write(d / name, sources[name])
        extra = ["-fprofile-sample-use=prof.prof"] if name == "prof.c" else []
        run([tc.clang, "-O2", "-flto=thin", *extra, "-c", name], d)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, sources))


def _source(module: str) -> str:
    """m3.o, x/m3_v.o, libw.a(m3.o at 1234) -> m3."""
    name = module.split("(", 1)[1].split(" at ")[0] if module.endswith(")") else Path(module).name
    return name[:-2].removesuffix("_v")


def _index_link(tc: Toolchain, name: str, where: Path, inputs: list[str], extra: tuple[str, ...] = ()) -> list[dict]:
    """An index-only link as ltowrap's thin-link runs it; its jobs with their keys (canonical and raw)."""
    declarations = ("-mllvm", "-import-declaration") if "import-declaration" in facts(tc)["takes"] else ()
    run([tc.lld, "--thinlto-index-only", "--thinlto-emit-imports-files", *declarations, *inputs, "-o", "out",
         "-e", "main", "-E", *extra], where)
    jobs = []
    for shard in sorted(where.rglob("*.thinlto.bc")):
        module = str(shard.relative_to(where))[: -len(".thinlto.bc")]
        if not (where / (module + ".imports")).exists() or not shard.stat().st_size:
            continue
        data, digest_of = shard.read_bytes(), relative_digests(where)
        for named in [module, *bitcode.module_paths(data)]:  # archive members: a file of the name lld gave them
            if not (where / named).exists():
                shutil.copy(where / (_source(named) + ".o"), where / named)
        job = {"link": name, "cwd": where, "module": module, "shard": shard, "source": _source(module)}
        text = cachekey.shard_canonical(data, digest_of, module)
        job["canonical_text"], job["canonical"] = text, cachekey.digest_bytes(f"{text}\0{digest_of(module)}".encode())
        # The raw key: the same shard as a reader that knew no summary version keys it.
        saved = shardkey.KNOWN_VERSIONS
        shardkey.KNOWN_VERSIONS = {}
        try:
            text = cachekey.shard_canonical(data, digest_of, module)
        finally:
            shardkey.KNOWN_VERSIONS = saved
        job["raw_text"], job["raw"] = text, cachekey.digest_bytes(f"{text}\0{digest_of(module)}".encode())
        jobs.append(job)
    return jobs


def _compile_shared(tc: Toolchain, jobs: list[dict], kinds: tuple[str, ...], out: Path) -> None:
    """Compile (once, into job["object"]) every job whose key of some kind a job of another link shares."""
    out.mkdir(exist_ok=True)
    todo = []
    for kind in kinds:
        links_of: dict[str, set[str]] = defaultdict(set)
        for j in jobs:
            links_of[j[kind]].add(j["link"])
        todo += [j for j in jobs if len(links_of[j[kind]]) > 1 and j not in todo]

    def one(n_job: tuple[int, dict]) -> None:
        n, job = n_job
        obj = out / f"{n}.o"
        run([tc.clang, "-O2", "-c", "-x", "ir", job["module"], f"-fthinlto-index={job['shard']}", "-o", str(obj)],
            job["cwd"])
        job["object"] = obj.read_bytes()
        assert job["object"], job["module"]

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, enumerate(todo)))


def _unsound(jobs: list[dict], kind: str) -> tuple[dict, int]:
    """Keys of `kind` that jobs of two links share but whose objects differ; and how many keys
    were shared with other shard bytes (what a raw key could not have matched)."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for j in jobs:
        by_key[j[kind]].append(j)
    shared = {k: js for k, js in by_key.items() if len({j["link"] for j in js}) > 1}
    unsound = {k: [f"{j['link']}:{j['module']}" for j in js] for k, js in shared.items()
               if len({j["object"] for j in js}) > 1}
    renamed = sum(len({j["shard"].read_bytes() for j in js}) > 1 for js in shared.values())
    return unsound, renamed


def test_summary_format(any_tc, tmp_path):
    tc = any_tc
    base = tmp_path / "src"
    _compile_web(tc, base, WEB)
    edited = tmp_path / "src-edited"
    _compile_web(tc, edited, {**WEB, "m3.c": WEB["m3.c"] + APPENDED})
    names = sorted(WEB, key=lambda n: (n != "main.c", n))
    objs = [n[:-2] + ".o" for n in names]

    def place(where: Path, files: dict[str, Path]) -> Path:
        for dest, src in files.items():
            (where / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, where / dest)
        return where

    plain = {o: base / o for o in objs}
    jobs = []
    jobs += _index_link(tc, "files", place(tmp_path / "files", plain), objs)
    jobs += _index_link(tc, "reversed", place(tmp_path / "reversed", plain), objs[::-1])
    moved = place(tmp_path / "moved" / "deep", {f"x/{o[:-2]}_v.o": base / o for o in objs})
    jobs += _index_link(tc, "moved", moved, [f"x/{o[:-2]}_v.o" for o in objs])
    lib = place(tmp_path / "archive", plain)
    run([tc.ar, "rcs", "libw.a", *objs[1:]], lib)
    jobs += _index_link(tc, "archive", lib, ["main.o", "libw.a"])
    # A function appended to m3.c that nobody calls: the same modules otherwise.
    jobs += _index_link(tc, "appended", place(tmp_path / "appended", {**plain, "m3.o": edited / "m3.o"}), objs)
    # Another link that means other compiles: fewer imports.
    jobs += _index_link(tc, "fewer", place(tmp_path / "fewer", plain), objs, ("-mllvm", "-import-instr-limit=3"))

    version = SUMMARY_VERSION[tc.version]
    assert all(f"\nsummaries v{version}\n" in j["canonical_text"] for j in jobs), jobs[0]["canonical_text"]
    assert all("\nsummaries raw (summary version" in j["raw_text"] for j in jobs)
    # What `ltowrap explain` says of each (its `shard format:` line).
    assert shardkey.summary_format(jobs[0]["canonical_text"]).startswith(f"summary v{version} (")
    assert shardkey.summary_format(jobs[0]["raw_text"]).startswith("summary format not canonicalised (summary version")
    _compile_shared(tc, jobs, ("canonical", "raw"), tmp_path / "objs")
    unsound, renamed = _unsound(jobs, "canonical")
    assert not unsound, unsound
    assert renamed >= 5  # the same meaning in other bytes: what the test is for
    unsound, _ = _unsound(jobs, "raw")
    assert not unsound, unsound  # an unknown format costs hits, never a wrong object

    keys = {link: {j["source"]: j["canonical"] for j in jobs if j["link"] == link}
            for link in ("files", "appended", "fewer")}
    assert keys["appended"]["m3"] != keys["files"]["m3"]
    # The new function changes no backend that takes no body from m3 (v9 writes the link's
    # block count into every shard: only the sample-profiled module's backend reads it; 19
    # and 22 name a module they take only declarations from by its interface).
    texts = {(j["link"], j["source"]): j["canonical_text"] for j in jobs}
    m3 = cachekey.digest_bytes((base / "m3.o").read_bytes())
    untouched = [s for s in keys["files"] if s not in ("m3", "prof") and f" {m3} hash " not in texts["files", s]]
    assert len(untouched) >= 2 and all(keys["appended"][s] == keys["files"][s] for s in untouched), (untouched, keys)
    declared = [s for s in untouched if " declarations " in texts["files", s]]
    assert bool(declared) == (version in shardkey.DECLARATION_VERSIONS)
    # The sample-profiled module's backend reads the block count: it stays in its text
    # (v9 writes one into every shard; 19 and 22 only where some module has a profile).
    block_counts = [line for line in texts["files", "prof"].splitlines() if line.startswith(f"rec {bitcodes.FS_BLOCK_COUNT} ")]
    assert not any(shardkey.BLOCK_COUNT_UNREAD in texts[link, "prof"] for link in ("files", "appended"))
    if version == 9:
        assert block_counts and keys["appended"]["prof"] != keys["files"]["prof"]
        assert shardkey.BLOCK_COUNT_UNREAD in texts["files", "m0"]
    if version == 9 and tc.version == 13:
        assert "\n  origname " in "".join(texts.values())  # LLVM 13's original names, kept
    assert sum(keys["fewer"][s] != k for s, k in keys["files"].items()) >= 3


# ---------------------------------------------------------------- features that came in some release


def _fallback(tmp_path: Path) -> dict:
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "fallback", rec
    return rec


def test_gates(any_tc, project, tmp_path):
    """Each feature where this lld says it takes it; a link naming one it does not take runs
    unchanged (lld's own error), with the reason counted."""
    tc = any_tc
    said = facts(tc)
    assert said["release"] and tools.release(run([tc.clang, "--version"], project).stdout) == said["release"]
    env = ltowrap_env(tc, LTOWRAP_DEBUG="1")
    write(project / "a.c", "int b(int);\nint a(int x) { return b(x) + 1; }\nint main(int c, char **v) { return a(c); }\n")
    write(project / "b.c", "int b(int x) { return x * 7; }\n")
    for n in "ab":
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", f"{n}.c"], project, env=env)

    # -import-declaration: with b() not imported, a's shard names b.o by its interface.
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "a.o", "b.o", "-Wl,-mllvm,-import-instr-limit=0", "-o", "prog"],
        project, env=env)
    assert links(tmp_path)[-1]["decision"] == "distributed"
    (a_dump,) = [d for d in explain(env) if "\nself ^0\n" in d and "module ^1" in d] or [""]
    if "import-declaration" in said["takes"]:
        assert "\nmodule ^1 declarations " in a_dump, a_dump
    else:
        assert "module ^1" not in "".join(d for d in explain(env) if "self ^0" in d)

    expected_reasons = 0
    for feature, flag in (("fat-lto-objects", "--fat-lto-objects"),
                          ("thinlto-emit-index-files", "--thinlto-emit-index-files"),
                          ("thinlto-distributor", f"--thinlto-distributor={wrapper('ltowrap-distributor')}")):
        option = f"-Wl,{flag}"
        if feature == "thinlto-distributor" and feature in said["takes"]:  # with the compiler lld is to run
            option = f"-fthinlto-distributor={wrapper('ltowrap-distributor')}"
        argv = ["-fuse-ld=lld", "-flto=thin", "a.o", "b.o", option, "-o", f"prog-{feature}"]
        plain = run([tc.clang, *argv], project, check=False)
        ours = run([wrapper("ltowrap-clang"), *argv], project, env=env, check=False)
        assert ours.returncode == plain.returncode, (feature, ours.stderr, plain.stderr)
        if feature in said["takes"]:
            assert plain.returncode == 0, plain.stderr
            rec = links(tmp_path)[-1]
            if feature == "fat-lto-objects":
                assert rec["decision"] == "distributed", rec
            else:  # already split: lld does the work, as asked
                assert rec["decision"] == "passthrough" or rec.get("reason") == "already_split", rec
            if feature == "thinlto-distributor":  # lld ran ltowrap's distributor
                assert [r["decision"] for r in log_lines(tmp_path) if r["tool"] == "distributor"][-1:] == ["distributed"]
        else:
            assert plain.returncode != 0 and "unknown argument" in plain.stderr
            assert _fallback(tmp_path)["reason"] == "linker_option"
            assert f"{flag.split('=')[0]}: " in ours.stderr
            expected_reasons += 1
    assert stats_json(env)["fallback_reasons"].get("linker_option", 0) == expected_reasons

    # FatLTO objects where this clang makes them and this lld takes them.
    if "fat-lto-objects" in said["takes"]:
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-ffat-lto-objects", "-c", "b.c", "-o", "b.fat.o"], project,
            env=env)
        run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "-flto=thin", "-ffat-lto-objects", "a.o", "b.fat.o",
             "-o", "prog-fat"], project, env=env)
        rec = links(tmp_path)[-1]
        assert "--fat-lto-objects" in rec["argv"] and rec["decision"] == "distributed" and rec["modules"] == 2, rec
        assert run(["./prog-fat", "x"], project, check=False).returncode == 15


@pytest.mark.parametrize("version,flag", [(16, "--fat-lto-objects"), (14, "--fat-lto-objects"),
                                          (14, "--thinlto-emit-index-files")])
def test_gate_in_response_file(version, flag, project, tmp_path):
    """A gated option that comes inside an @response file is checked as one on the command
    line is: on an lld without it, the link runs unchanged, with lld's own error, exactly as
    without ltowrap (it once went by unchecked, and the thin-link failed on it)."""
    tc = toolchain(version)
    assert flag.lstrip("-") not in facts(tc)["takes"]
    env = ltowrap_env(tc)
    write(project / "a.c", "int b(int);\nint main(int c, char **v) { return b(c); }\n")
    write(project / "b.c", "int b(int x) { return x * 7; }\n")
    for n in "ab":
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-c", f"{n}.c"], project, env=env)
    write(project / "opts.rsp", f"--as-needed\n{flag}\n")
    argv = ["-fuse-ld=lld", "-flto=thin", "a.o", "b.o", "-Wl,@opts.rsp", "-o", "prog"]
    plain = run([tc.clang, *argv], project, check=False)
    ours = run([wrapper("ltowrap-clang"), *argv], project, env=env, check=False)
    assert plain.returncode != 0 and f"unknown argument '{flag}'" in plain.stderr, plain.stderr
    assert ours.returncode == plain.returncode
    (said,) = [line for line in ours.stderr.splitlines(keepends=True) if line.startswith("ltowrap:")]
    assert f" {flag}: " in said and "does not take it; running the link unchanged" in said, said
    assert ours.stderr.replace(said, "") == plain.stderr
    assert _fallback(tmp_path)["reason"] == "linker_option"
    assert stats_json(env)["fallback_reasons"] == {"linker_option": 1}


# ---------------------------------------------------------------- mixed releases


def _two(a: int, b: int) -> tuple[Toolchain, Toolchain]:
    return toolchain(a), toolchain(b)


def _objects_of(tc: Toolchain, d: Path) -> None:
    write(d / "a.c", "int b(int);\nint main(int c, char **v) { return b(c); }\n")
    write(d / "b.c", "int b(int x) { return x + 4; }\n")
    for n in "ab":
        run([tc.clang, "-O2", "-flto=thin", "-c", f"{n}.c"], d)


def test_mixed_driver_and_backends_are_refused(project, tmp_path):
    """A clang 19 driver (named by its path) with LTOWRAP_CLANG at clang 22: the link line's
    lld is 19's; and with --ld-path to 22's lld, the driver is still 19, whether the clang
    entry runs the link itself or (a command that compiles too) the driver runs our ld.lld
    entry, which is told the driver in its environment. All run unchanged."""
    old, new = _two(19, 22)
    _objects_of(old, project)
    env = ltowrap_env(new)
    commands = ([], [f"--ld-path={new.lld}"], [f"--ld-path={new.lld}", "-O2", "-flto=thin", "a.c"])
    for n, extra in enumerate(commands):
        inputs = ["b.o"] if "a.c" in extra else ["a.o", "b.o"]
        done = run([wrapper("ltowrap"), old.clang, "-fuse-ld=lld", *extra, *inputs, "-o", f"prog{n}"], project,
                   env=env)
        assert "tools of different LLVM releases" in done.stderr and "19.1" in done.stderr, done.stderr
        assert _fallback(tmp_path)["reason"] == "mixed_toolchain"
        assert run([f"./prog{n}"], project, check=False).returncode == 5
    assert stats_json(env)["fallback_reasons"] == {"mixed_toolchain": 3}


def test_mixed_lld_and_backends_are_refused(project, tmp_path):
    """ltowrap-ld.lld called with lld 14 while LTOWRAP_CLANG names clang 22 (which would read
    the modules, and compile other code than lld 14 in-process)."""
    old, new = _two(14, 22)
    _objects_of(old, project)
    env = ltowrap_env(new, LTOWRAP_REAL_LD=old.lld)
    start = ["--entry=main", "-o", "prog"]
    done = run([wrapper("ltowrap-ld.lld"), "a.o", "b.o", *start], project, env=env)
    assert "ld.lld 14.0" in done.stderr and _fallback(tmp_path)["reason"] == "mixed_toolchain"
    # The same release on both sides: distributed.
    run([wrapper("ltowrap-ld.lld"), "a.o", "b.o", *start], project, env={**env, "LTOWRAP_CLANG": old.clang})
    assert links(tmp_path)[-1]["decision"] == "distributed"
    assert stats_json(env)["fallback_reasons"] == {"mixed_toolchain": 1}


def test_options_the_backend_clang_rejects_are_left_out(project, tmp_path):
    """A module compiled by clang 14 with -flegacy-pass-manager (which 15 and later reject),
    linked with the 16 toolchain (lld 16 reads 14's bitcode): the backend clang says it
    rejects the recorded option, so the backend compile goes without it (as in-process
    ThinLTO, which applies no compile option), logged and counted; a module of clang 16's
    own release keeps its options unprobed."""
    old, new = _two(14, 16)
    _objects_of(old, project)
    for n in "ab":  # the same through ltowrap-clang: their option records
        run([wrapper("ltowrap-clang"), "-O2", "-flto=thin", "-flegacy-pass-manager", "-c", f"{n}.c"], project,
            env=ltowrap_env(old))
    write(project / "c.c", "int c(int x) { return x - 1; }\n")
    run([wrapper("ltowrap-clang"), "-O1", "-flto=thin", "-c", "c.c"], project, env=ltowrap_env(new))
    env = ltowrap_env(new)
    run([wrapper("ltowrap-clang"), "-fuse-ld=lld", "a.o", "b.o", "c.o", "-o", "prog"], project, env=env)
    assert run(["./prog"], project, check=False).returncode == 5
    rec = links(tmp_path)[-1]
    assert rec["decision"] == "distributed", rec
    dropped = {b["module"]: b.get("dropped") for b in rec["backends"]}
    assert dropped == {"a.o": ["-flegacy-pass-manager"], "b.o": ["-flegacy-pass-manager"], "c.o": None}, dropped
    assert stats_json(env)["backend_options_dropped"] == 2
