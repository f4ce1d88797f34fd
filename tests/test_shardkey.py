"""shardkey: the canonical text of real index shards from clang/lld 22 and 14.

Shards that mean the same backend compile (inputs in another order, renamed, moved, in an
archive of another name) get the same text although their bytes differ; a shard that
means another compile (other imports, other summary flags) gets another; what the reader
does not know goes in raw.
"""

from __future__ import annotations

import dataclasses

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ltowrap_env, run, write

from ltowrap import cachekey
from ltowrap.formats import bitcode, bitcodes, interface, shardkey

SRC = {
    "a.c": "int g = 3;\nint b(int);\nstatic int helper(int x) { return x * g + 1; }\n"
           "int a(int x) { return b(x) + helper(x); }\nint main(int c, char **v) { return a(c); }\n",
    "b.c": "extern int g;\nint c(int);\nint b(int x) { return c(x) + g; }\n",
    "c.c": "int c(int x) { return x * 7; }\nint c_alias(int) __attribute__((alias(\"c\")));\n"
           "const char *name(void) { return \"c\"; }\n",
    "d.c": "int c_alias(int);\nint d(int x) { return c_alias(x) - 1; }\n",
}
MEMBER = re.compile(r"^(.*)\((.*) at \d+\)")  # lld: lib.a(m.o at N), DTLTO: lib.a(m.o at N).T.PID.o


def compile_sources(tc, where: Path) -> None:
    for name, text in SRC.items():
        write(where / name, text)
        run([tc.clang, "-O2", "-flto=thin", "-c", name, "-o", name[:-2] + ".o"], where)


def shards(tc, cwd: Path, inputs: list[str], *extra: str) -> dict[str, bytes]:
    """Each module's shard, by the name lld gives the module (`lib.a(m.o at N)` for members)."""
    run([tc.lld, "--thinlto-index-only", *inputs, "-o", "out", "-e", "main", *extra], cwd)
    return {str(p.relative_to(cwd))[: -len(".thinlto.bc")]: p.read_bytes() for p in cwd.rglob("*.thinlto.bc")}


def canonical(cwd: Path, shard: bytes, module: str) -> str:
    """The text with module paths named as lld named them (archive members by their own bytes)."""

    def digest_of(path: str) -> str:
        m = MEMBER.match(path)
        if m:  # the test's archives hold the same-named objects beside them
            return cachekey.digest_bytes((cwd / m.group(2)).read_bytes())
        return cachekey.digest_bytes((cwd / path).read_bytes())

    return shardkey.canonical(shard, digest_of, module)


def by_source(found: dict[str, bytes], cwd: Path) -> dict[str, str]:
    """source letter -> canonical text, whatever name lld gave its module."""
    out = {}
    for name, shard in found.items():
        letter = (MEMBER.match(name).group(2) if MEMBER.match(name) else Path(name).name)[0]
        out[letter] = canonical(cwd, shard, name)
    return out


def test_same_meaning_same_text_whatever_the_order_names_and_archives(tc, tmp_path):
    base = tmp_path / "base"
    compile_sources(tc, base)
    first = shards(tc, base, ["a.o", "b.o", "c.o", "d.o"])
    want = by_source(first, base)
    assert "summaries v" + ("12" if tc.version == 22 else "9") in want["a"]
    assert "summaries raw" not in want["a"] and "@" in want["a"]

    # The same inputs in another order on the command line.
    for p in base.glob("*.thinlto.bc"):
        p.unlink()
    assert by_source(shards(tc, base, ["d.o", "b.o", "a.o", "c.o"]), base) == want

    # Renamed and moved (names in the same sorted order), elsewhere.
    moved = tmp_path / "elsewhere" / "deep"
    moved.mkdir(parents=True)
    for n, new in zip("abcd", ["m1", "m2", "m3", "m4"]):
        shutil.copy(base / f"{n}.o", moved / f"{new}.o")
    found = shards(tc, moved.parent, [f"deep/m{i}.o" for i in range(1, 5)])
    assert all(first[f"{n}.o"] != found[f"deep/m{i}.o"] for i, n in enumerate("abcd", 1))  # other bytes
    renamed = {n: canonical(moved.parent, found[f"deep/m{i}.o"], f"deep/m{i}.o") for i, n in enumerate("abcd", 1)}
    assert renamed == want

    # b, c and d in archives, under two names.
    texts, raw = [], []
    for lib in ("libx.a", "liby.a"):
        where = tmp_path / lib
        where.mkdir()
        for n in "abcd":
            shutil.copy(base / f"{n}.o", where / f"{n}.o")
        run([tc.ar, "rcs", lib, "b.o", "c.o", "d.o"], where)
        found = shards(tc, where, ["a.o", lib])
        raw.append(found["a.o"])
        texts.append(by_source(found, where))
    assert raw[0] != raw[1] and texts[0] == texts[1]


def test_another_import_or_flag_gives_another_text(tc, tmp_path):
    compile_sources(tc, tmp_path)
    inputs = ["a.o", "b.o", "c.o", "d.o"]
    plain = by_source(shards(tc, tmp_path, inputs), tmp_path)
    no_imports = by_source(shards(tc, tmp_path, inputs, "-mllvm", "-import-instr-limit=0"), tmp_path)
    assert no_imports["a"] != plain["a"]  # a no longer imports b
    kept = by_source(shards(tc, tmp_path, inputs, "--undefined=name"), tmp_path)
    assert kept["c"] != plain["c"]  # name() is live now: another summary flag

    # Another module's bytes behind the same path: another text.
    write(tmp_path / "c.c", SRC["c.c"].replace("x * 7", "x * 8"))
    run([tc.clang, "-O2", "-flto=thin", "-c", "c.c", "-o", "c.o"], tmp_path)
    assert by_source(shards(tc, tmp_path, inputs), tmp_path)["a"] != plain["a"]


DECL = {
    "a.c": "int b(int);\nint a(int x) { return b(x) + 1; }\nint main(int c, char **v) { return a(c); }\n",
    "b.c": "int g = 3, h = 4;\nint b(int x) { return x * 7 + g + h; }\n",
}


def decl_texts(tc, where: Path, b_source: str, *extra: str, b_flags: tuple[str, ...] = (),
               a_source: str = DECL["a.c"], shared: bool = False, flags: tuple[str, ...] = ()) -> tuple[str, str, bytes]:
    """a's shard text with and without module interfaces, and a's object, with b.c as given;
    the thin-link imports declarations too (as ltowrap's does, LLVM >= 19). `shared`: a
    -shared link of -fPIC objects, which keeps every global of a exported."""
    write(where / "a.c", a_source)
    write(where / "b.c", b_source)
    pic = ("-fPIC",) if shared else ()
    for n in "ab":
        run([tc.clang, "-O2", "-flto=thin", *pic, *flags, *(b_flags if n == "b" else ()), "-c", f"{n}.c"], where)
    declarations = ("-mllvm", "-import-declaration") if tc.version >= 19 else ()
    shard = shards(tc, where, ["a.o", "b.o"], *declarations, *(("-shared",) if shared else ()), *extra)["a.o"]

    def interface_of(path: str) -> str:
        return cachekey.digest_bytes(interface.module_interface((where / path).read_bytes()).encode())

    with_interfaces = shardkey.canonical(shard, lambda p: cachekey.digest_bytes((where / p).read_bytes()), "a.o",
                                         interface_of,
                                         lambda p: shardkey.has_sample_profile((where / p).read_bytes()))
    run([tc.clang, "-O2", *pic, "-c", "-x", "ir", "a.o", "-fthinlto-index=a.o.thinlto.bc", "-o", "a.native.o"], where)
    return with_interfaces, canonical(where, shard, "a.o"), (where / "a.native.o").read_bytes()


def changed_lines(a: str, b: str) -> list[str]:
    """The lines of text b that text a does not have, and the other way round."""
    return sorted(set(a.splitlines()) ^ set(b.splitlines()))


NEW_FUNCTION = "int fp_new(int x) { return x * 12345 + 1; }\n"  # nobody calls it


def test_an_unreferenced_new_function_leaves_the_key(tc, tmp_path):
    """Issue 24: a new function in a module that a backend takes only declarations from
    changes nothing the backend reads of that module (no function of it is linked), so
    its key stays, and so does its object. LLVM 14 imports no declarations: b.o is not in
    a's shard at all (and the link's block count it writes there is not read by a.o's
    backend). With b()'s body imported, b.o goes in by its bytes: the new function gives
    another key, as it does in lld's own cache (which keys an imported module by its hash)."""
    no_defs = ("-mllvm", "-import-instr-limit=0")
    base, base_whole, base_obj = decl_texts(tc, tmp_path / "base", DECL["b.c"], *no_defs)
    text, whole, obj = decl_texts(tc, tmp_path / "new", DECL["b.c"] + NEW_FUNCTION, *no_defs)
    if tc.version >= 19:
        assert "\nmodule ^1 declarations " in base
    else:
        assert "\nmodule ^1 " not in base  # a's own module only
        # LLVM 14 writes the basic blocks of the whole link into every shard (FS_BLOCK_COUNT),
        # which a.o's backend does not read (a.o has no sample profile): a constant line stands
        # for it, and the key stays. Read without that rule, the count changes.
        assert shardkey.BLOCK_COUNT_UNREAD in base
        assert [line.split()[:2] for line in changed_lines(base_whole, whole)] == [["rec", str(bitcodes.FS_BLOCK_COUNT)]] * 2
    assert text == base
    assert obj == base_obj

    imported = decl_texts(tc, tmp_path / "def", DECL["b.c"])[0]
    assert "declarations" not in imported
    assert decl_texts(tc, tmp_path / "def-new", DECL["b.c"] + NEW_FUNCTION)[0] != imported


IMPORTER_VARS = ("int av1 = 1, av2 = 2;\nint b(int);\nint a(int x) { return b(x) + av1 + av2; }\n"
                 "int main(int c, char **v) { return a(c); }\n")


def test_what_the_importer_takes_of_a_declared_module_changes_the_key(tc22, tmp_path):
    """Never narrower than what can change the object. A declaration of a variable named
    like one of the importer's, in a module the importer takes only declarations from:
    IRMover moves the importer's variable of that name to the end of its list, and the
    object changes (its .data sections swap); the key changes with it. A module flag, a
    named struct's body and a change in the summary of a declaration the importer calls
    change the key too."""
    no_defs = ("-mllvm", "-import-instr-limit=0")
    plain = "int b(int x) { return x * 7; }\n"
    base, _, base_obj = decl_texts(tc22, tmp_path / "base", plain, *no_defs, a_source=IMPORTER_VARS, shared=True)
    names_av1 = "extern int av1;\nint b(int x) { return x * 7; }\nint b_uses(void) { return av1; }\n"
    text, _, obj = decl_texts(tc22, tmp_path / "av1", names_av1, *no_defs, a_source=IMPORTER_VARS, shared=True)
    assert obj != base_obj
    assert [line.split()[:3] for line in changed_lines(base, text)] == [["module", "^1", "declarations"]] * 2

    # The same change of b.c with a name a does not have leaves a's object as it was: the
    # name is what matters. (The key still changes: which names the importer has by then,
    # its own and those of what it imported before, is not in the shard, so the interface
    # keeps every variable name of the module.)
    other = names_av1.replace("av1", "zz9")
    text, _, obj = decl_texts(tc22, tmp_path / "zz9", other, *no_defs, a_source=IMPORTER_VARS, shared=True)
    assert obj == base_obj and text != base

    # A module flag: merged into the importer's (IRMover::linkModuleFlagsMetadata).
    flags = decl_texts(tc22, tmp_path / "flags", plain, *no_defs, b_flags=("-fno-pic",))[0]
    assert flags != decl_texts(tc22, tmp_path / "no-flags", plain, *no_defs)[0]

    # A named struct of b.c (IRMover maps the module's named structs onto the importer's by
    # name, whether a function body or a global uses them): another body, another key.
    struct = ("struct S { int v[4]; };\nvoid sink(struct S *);\n"
              "int b(int x) { struct S s = {{x}}; sink(&s); return x; }\n")
    base_s = decl_texts(tc22, tmp_path / "s4", struct, *no_defs)[0]
    text = decl_texts(tc22, tmp_path / "s8", struct.replace("v[4]", "v[8]"), *no_defs)[0]
    assert [line.split()[:3] for line in changed_lines(base_s, text)] == [["module", "^1", "declarations"]] * 2

    # The summary of b(), which a calls (noinline is one of its flags): the summaries part
    # of the key changes, the interface does not.
    text = decl_texts(tc22, tmp_path / "noinline", "__attribute__((noinline)) " + plain, *no_defs)[0]
    diff = changed_lines(decl_texts(tc22, tmp_path / "inline", plain, *no_defs)[0], text)
    assert diff and not any("declarations" in line for line in diff)


def test_a_module_only_declared_goes_in_by_its_interface(tc22, tmp_path):
    """A module a backend imports only declarations from goes in by its interface: another
    body of b() gives the same text and the same object; other module-level content of b.c
    (a global's order, a module flag) another text. With b()'s body imported, its bytes."""
    no_defs = ("-mllvm", "-import-instr-limit=0")
    base, base_whole, base_obj = decl_texts(tc22, tmp_path / "base", DECL["b.c"], *no_defs)
    assert "declarations" in base and "declarations" not in base_whole
    body = DECL["b.c"].replace("x * 7", "x * 9")
    text, whole, obj = decl_texts(tc22, tmp_path / "body", body, *no_defs)
    assert text == base and whole != base_whole and obj == base_obj

    # What IRMover takes of a module it links with no global value: the order of its
    # globals, its module flags.
    reordered = DECL["b.c"].replace("int g = 3, h = 4;", "int h = 4, g = 3;")
    assert decl_texts(tc22, tmp_path / "order", reordered, *no_defs)[0] != base
    assert decl_texts(tc22, tmp_path / "flags", DECL["b.c"], *no_defs, b_flags=("-fno-pic",))[0] != base

    # b() imported as a definition: b.o by its bytes, so another body, another text.
    imported, _, _ = decl_texts(tc22, tmp_path / "def", DECL["b.c"])
    assert "declarations" not in imported
    assert decl_texts(tc22, tmp_path / "def-body", body)[0] != imported


SPLIT_B = ("int g = 3, h = 4;\nstatic int t(int x) { return x + 1; }\nint (*fp)(int) = t;\n"
           "int b(int x) { return fp(x) * 7 + g + h; }\n")  # t's address taken: CFI's type metadata


def test_a_split_lto_unit_only_declared_goes_in_by_its_thinlto_modules_interface(tc22, tmp_path):
    """b.o is a split LTO unit (CFI: a ThinLTO module and a regular-LTO one in one file). A
    backend that imports only declarations from it opens its ThinLTO module
    (lto::findThinLTOModule), so that module's interface is what goes in: another body of
    b() gives the same text and the same object. (The reader once took the second module's
    abbreviations for the first's, and the shard went in raw, paths and numbering and all.)"""
    no_defs = ("-mllvm", "-import-instr-limit=0")
    cfi = ("-fsanitize=cfi-icall", "-fvisibility=hidden")  # a.c: split too (lld wants every unit split alike)
    base, _, base_obj = decl_texts(tc22, tmp_path / "base", SPLIT_B, *no_defs, flags=cfi)
    from ltowrap.formats.bitcode import module_count

    assert module_count((tmp_path / "base" / "b.o").read_bytes()) == 2
    text = interface.module_interface((tmp_path / "base" / "b.o").read_bytes())
    assert "whole" not in text.splitlines()[0] and text.count("\nblock 8\n") == 1
    assert "declarations" in base
    text, _, obj = decl_texts(tc22, tmp_path / "body", SPLIT_B.replace("* 7", "* 9"), *no_defs, flags=cfi)
    assert text == base and obj == base_obj
    # What IRMover takes of the ThinLTO module (the order of its globals) still changes it.
    reordered = SPLIT_B.replace("int g = 3, h = 4;", "int h = 4, g = 3;")
    assert decl_texts(tc22, tmp_path / "order", reordered, *no_defs, flags=cfi)[0] != base


def test_the_own_module_is_marked(tc, tmp_path):
    """The compile's own module is named by its rank: two identical inputs are two modules."""
    compile_sources(tc, tmp_path)
    found = shards(tc, tmp_path, ["a.o", "b.o", "c.o", "d.o"])
    assert "\nself ^0\n" in canonical(tmp_path, found["a.o"], "a.o")
    assert "\nself ^1\n" in canonical(tmp_path, found["a.o"], "b.o")
    assert "\nself ?\n" in canonical(tmp_path, found["a.o"], "elsewhere/a.o")


def test_unknown_records_go_in_raw(tc, tmp_path):
    """Stack safety's PARAM_ACCESS records name values by id in a layout this reader does not
    take apart: the summary block goes in raw, numbering and all."""
    write(tmp_path / "m.c", "void use(char *p, int n);\nint main(void) { char b[16]; use(b, 3); return b[0]; }\n")
    write(tmp_path / "u.c", "void use(char *p, int n) { p[n] = 1; }\n")
    for n in "mu":
        run([tc.clang, "-O2", "-flto=thin", "-mllvm", "-stack-safety-run", "-c", f"{n}.c"], tmp_path)
    text = canonical(tmp_path, shards(tc, tmp_path, ["m.o", "u.o"])["m.o"], "m.o")
    assert "summaries raw (record 25)" in text and "modids 0=^0 1=^1" in text
    assert f"  rec {bitcodes.FS_VALUE_GUID} " in text  # the value ids, as lld numbered them


def test_unreadable_shard_is_keyed_by_its_bytes():
    assert cachekey.shard_identity(b"not bitcode", lambda p: p) == "raw:" + cachekey.digest_bytes(b"not bitcode")


# A distributor that keeps each job's shard and the module it names, then fails the link:
# the shards are all the renumbering test reads, and a link without backends is quick.
RECORDER = """import json, os, shutil, sys
job = json.load(open(sys.argv[-1]))
keep = os.environ["SHARDS_TO"]
os.makedirs(keep, exist_ok=True)
for j in job["jobs"]:
    shard = next(a.split("=", 1)[1] for a in j["args"] if a.startswith("-fthinlto-index="))
    module = next(a for a in j["args"] if not a.startswith("-") and a != shard and not a.endswith(".native.o"))
    shutil.copy(shard, os.path.join(keep, module.split(" at ")[0].replace("/", "_") + ".bc"))
    with open(os.path.join(keep, module.split(" at ")[0].replace("/", "_") + ".path"), "w") as f:
        f.write(module)
sys.exit(1)
"""


def web_of_calls(tc, where: Path, n: int) -> None:
    """main.o and libm.a of n modules calling each other: lld's DTLTO renumbers their shards."""
    for i in range(n):
        j, k = (i + 1) % n, (i * 7 + 3) % n
        write(where / f"m{i}.c", f"int f{j}(int); int f{k}(int); int g{i} = {i};\n"
              f"int f{i}(int x) {{ if (x <= 0) return g{i}; return f{j}(x - 1) + f{k}(x - 2) + g{i}; }}\n")
        run([tc.clang, "-O2", "-flto=thin", "-c", f"m{i}.c"], where)
    write(where / "main.c", "int f0(int);\nint main(int c, char **v) { return f0(c) & 0x7f; }\n")
    run([tc.clang, "-O2", "-flto=thin", "-c", "main.c"], where)
    run([tc.ar, "rcs", "libm.a", *(f"m{i}.o" for i in range(n))], where)


def test_dtlto_renumbering_is_not_in_the_text(tc22, tmp_path):
    """lld's DTLTO names archive members after its process id and numbers the values in
    their shards by those names: two links of the same inputs renumber most shards."""
    n = 12
    web_of_calls(tc22, tmp_path, n)
    write(tmp_path / "record.py", RECORDER)
    script = write(tmp_path / "record.sh", f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'record.py'} \"$@\"\n")
    script.chmod(0o755)
    texts, raw = [], []
    # Which of two numberings lld picks follows its process id; the first link's is the
    # likelier one about 7 times in 10 here, so link until another process id picks the other.
    for link in range(64):
        env = ltowrap_env(SHARDS_TO=str(tmp_path / str(link)))
        subprocess.run([tc22.clang, "-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={script}", "main.o",
                        "libm.a", "-o", "prog"], cwd=tmp_path, env=env, capture_output=True)
        got = {}
        for bc in sorted((tmp_path / str(link)).glob("*.bc")):
            got[bc.stem] = canonical(tmp_path, bc.read_bytes(), bc.with_suffix(".path").read_text())
        texts.append(got)
        raw.append({k: _summary_records(tmp_path / str(link) / f"{k}.bc") for k in got})
        assert len(got) == n + 1 and got == texts[0]
        if raw[-1] != raw[0]:
            break
    assert raw[-1] != raw[0], "lld never renumbered a shard"


def _summary_records(shard: Path) -> list[list[int]]:
    """The shard's summary records (value ids and all) in lld's order."""
    found: list[list[int]] = []

    def walk(node: bitcode.Node) -> None:
        for item in node.items:
            if isinstance(item, bitcode.Node):
                walk(item)
            elif node.bid == bitcodes.GLOBALVAL_SUMMARY_BLOCK_ID:
                found.append(item)

    walk(bitcode.read_tree(shard.read_bytes()))
    return found


def test_interfaces_are_kept_in_the_cache(tc22, tmp_path, monkeypatch):
    """A module's interface is parsed once per version: later links read it from c/."""
    from ltowrap.cache import Cache
    from ltowrap.stats import Stats

    write(tmp_path / "b.c", DECL["b.c"])
    run([tc22.clang, "-O2", "-flto=thin", "-c", "b.c"], tmp_path)
    cache = Cache(str(tmp_path / "cache"), Stats())
    first = cachekey.file_digests(cache=cache).interface(str(tmp_path / "b.o"))

    def no_parse(module: bytes) -> str:
        raise AssertionError("parsed again")

    monkeypatch.setattr(interface, "module_interface", no_parse)
    assert cachekey.file_digests(cache=cache).interface(str(tmp_path / "b.o")) == first


DEBUG_SRC = ("struct node { int v; struct node *next; };\nstatic struct node tail = {2, 0};\n"
             "struct node head = {1, &tail};\nconst char *names[] = {\"a\", \"b\"};\ndouble ratio = 1.5;\n"
             "int walk(struct node *n) { int s = 0; for (; n; n = n->next) s += n->v; return s; }\n"
             "int main(void) { return walk(&head) + (int)ratio + names[1][0]; }\n")


@pytest.mark.parametrize("flags", [("-g",), ("-g", "-fsanitize=cfi-icall", "-fvisibility=hidden"), ()],
                         ids=["debug", "split-debug", "plain"])
def test_records_passed_over_change_no_interface(tc, tmp_path, monkeypatch, flags):
    """The interface reader passes over the fields of debug-info nodes and of constants other
    than simple ones (interface._WANT): the text must be the one a reader of every field
    writes, for a -g module (mostly debug nodes), a split LTO unit, and a plain one; and a
    module it cannot take apart still goes in whole, every field read."""
    write(tmp_path / "m.c", DEBUG_SRC)
    run([tc.clang, "-O2", "-flto=thin", *flags, "-c", "m.c", "-o", "m.o"], tmp_path)
    data = (tmp_path / "m.o").read_bytes()
    fast = interface.module_interface(data)
    every_field = dataclasses.replace(interface._WANT, only={}, unread={})
    monkeypatch.setattr(interface, "_WANT", every_field)
    assert fast == interface.module_interface(data)
    if flags == ("-g",) and tc.version == 22:  # LLVM 14's typed pointers put the module in whole
        assert "whole" not in fast.splitlines()[0] and "  metadata" in fast

    def unknown(*args):
        raise interface._Unknown("test")

    monkeypatch.undo()
    monkeypatch.setattr(interface, "_interface", unknown)
    whole = interface.module_interface(data)
    monkeypatch.setattr(interface, "_WANT", every_field)
    assert whole == interface.module_interface(data) and whole.startswith(f"interface {shardkey.FORMAT} whole (test)")


def test_a_cut_module_is_refused_and_a_reader_bug_is_not(tc22, tmp_path, monkeypatch):
    """A module cut short anywhere: module_interface raises BadBitcode, the reader's own error
    (a shard that names the module is then keyed by its bytes), or reads what is there. An
    IndexError in the reader is a bug: it comes out as one, not as a 'whole' interface."""
    write(tmp_path / "m.c", DEBUG_SRC)
    run([tc22.clang, "-O2", "-g", "-flto=thin", "-c", "m.c", "-o", "m.o"], tmp_path)
    data = (tmp_path / "m.o").read_bytes()
    cuts = range(8, len(data), max(1, len(data) // 300))
    refused = 0
    for cut in cuts:
        try:
            interface.module_interface(data[:cut])
        except bitcode.BadBitcode:
            refused += 1
    assert refused == len(cuts)  # every block's length word says it runs past the end

    def bug(*args):
        raise IndexError("a bug")

    monkeypatch.setattr(interface, "_interface", bug)
    with pytest.raises(IndexError):
        interface.module_interface(data)
