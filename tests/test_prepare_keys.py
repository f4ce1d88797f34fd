"""A job's key and content claim (prepare.Preparer) are the recipes of cachekey.backend_key and
Preparer.content, field by field, whatever is hashed once a run and copied per job: the run's
prefix (version, compiler, environment) and the command line with placeholders."""

from __future__ import annotations

from pathlib import Path

import xxhash

from ltowrap import cachekey
from ltowrap.cache import Cache
from ltowrap.formats.modulefacts import Facts
from ltowrap.jobs.prepare import JobState, Preparer, Resources, Stage
from ltowrap.stages.backend import Job
from ltowrap.stages.plan import Module
from ltowrap.stats import Stats

ENV = [("CCC_OVERRIDE_OPTIONS", "+-O1"), ("SOURCE_DATE_EPOCH", "0")]
COMPILER = "clang version 22.1.8\0stamp"


class Backend:
    """A backend command line: the module, shard and output in it, then the recorded options."""

    def argv(self, module: str, shard: str, output: str, recorded: list[str] | None, dwo: str = "") -> list[str]:
        return ["clang", "-c", module, f"-fthinlto-index={shard}", "-o", output, *(recorded or []),
                *([f"-dwo={dwo}"] if dwo else [])]

    def unrecorded(self, module: Module) -> list[str]:
        return [f"--target-of={module.digest[:4]}"]


class Digests:
    """ModuleDigests as the key sees it: no module reads anything besides itself."""

    def facts(self, path: str) -> Facts:
        return Facts()


def recipe(*fields: tuple[str, str], debug: bool = False) -> tuple[str, list[str]]:
    """A key as the documented recipe makes it: the version, then each field behind its tag and length."""
    h = xxhash.xxh3_128()
    shown = []
    for tag, value in (("version", cachekey.FORMAT_VERSION), *fields):
        data = value.encode("utf-8", "surrogateescape")
        h.update(f"\0{tag}\0{len(data)}\0".encode() + data)
        shown.append(f"{tag}: {value}")
    return h.hexdigest(), shown


def jobs(tmp_path: Path) -> list[Job]:
    out = []
    for i, name in enumerate(("a", "b", "c")):
        digest = xxhash.xxh3_128_hexdigest(name.encode())
        module = Module(digest, str(tmp_path / f"m/{i:06d}-{digest}.o"), f"{name}.o", 100 + i)
        out.append(Job(module, b"shard " + name.encode(), f"/idx/{name}.thinlto.bc", (), f"/idx/{name}.o",
                       shard_identity=f"shardkey:{name}", dwo=f"prog-dwo/{i}.dwo" if i == 2 else ""))
    return out


def test_each_jobs_key_and_claim_are_their_recipes_field_by_field(tmp_path):
    for debug in (False, True):
        res = Resources(Cache(str(tmp_path / "cache"), Stats()), COMPILER, ENV, jobs=2, debug=debug)
        prep = Preparer(Backend(), res, Digests())  # type: ignore[arg-type]
        seen = set()
        for job in jobs(tmp_path):  # several jobs of one run: each its own copy of the run's prefix
            state = JobState(job)
            prep.unkeyed += 1
            prep.options(state)
            assert state.stage is Stage.COMMAND
            line = ["<module>", "-fthinlto-index=<shard>", "-o", "<output>", f"--target-of={job.module.digest[:4]}",
                    *([f"-dwo={job.dwo}"] if job.dwo else [])]
            assert state.line == ["clang", "-c", *line]
            assert state.argv == Backend().argv(job.module.path, job.shard_path, job.output, state.recorded, job.dwo)
            run = [("compiler", COMPILER), *((f"env:{k}", v) for k, v in ENV)]
            argv = ("argv", "\0".join(["-c", *line]))
            content, _ = recipe(("claim", "content"), *run, argv, ("module", job.module.digest),
                                ("shard", job.shard.decode()))
            assert state.content == content
            key, dump = recipe(*run, argv, ("module", job.module.digest), ("shard", job.shard_identity or ""))
            got, got_dump = prep.key(state, state.line)
            assert got == key
            if debug:  # the recipe's fields, then what the shard field stands for
                assert got_dump is not None and got_dump[:-1] == dump and got_dump[-1].startswith("shard text")
            else:
                assert got_dump is None
            seen.add(got)
        assert len(seen) == 3


def test_a_copied_hasher_goes_on_from_what_it_held_and_leaves_it_as_it_was():
    prefix = cachekey.Hasher(debug=True)
    prefix.field("compiler", "x")
    first, second = prefix.copy(), prefix.copy()
    first.field("argv", "1")
    second.field("argv", "2")
    assert (first.hexdigest(), first.dump) == recipe(("compiler", "x"), ("argv", "1"), debug=True)
    assert (second.hexdigest(), second.dump) == recipe(("compiler", "x"), ("argv", "2"), debug=True)
    assert (prefix.hexdigest(), prefix.dump) == recipe(("compiler", "x"), debug=True)


def test_a_module_the_plan_cannot_read_whole_is_unsupported_with_why(tmp_path):
    """plan reads a bitcode input in one read; one it cannot read is an unreadable input (the
    link falls back), not an error of ltowrap's."""
    import pytest

    from ltowrap.errors import Unsupported
    from ltowrap.stages import plan

    (tmp_path / "m.o").write_bytes(b"BC\xc0\xde rest")
    assert plan._read(str(tmp_path / "m.o")) == b"BC\xc0\xde rest"
    with pytest.raises(Unsupported, match="cannot read .*gone.o.*No such file"):
        plan._read(str(tmp_path / "gone.o"))


def test_the_thin_link_key_takes_each_file_named_as_it_is_named_reading_it_once(tmp_path, monkeypatch):
    """A link names a library more than once (lld's links name libgcc.a twice): the key takes a
    field for each time it is named, as its recipe says, and reads the file once."""
    lib, gone = tmp_path / "libgcc.a", str(tmp_path / "gone.a")
    lib.write_bytes(b"!<arch>\nmembers")
    reads: list[str] = []
    real = cachekey.read_bytes
    monkeypatch.setattr(cachekey, "read_bytes", lambda p: (reads.append(p), real(p))[1])
    files = [str(lib), gone, str(lib), gone, str(lib)]
    key = cachekey.thinlink_key("ld.lld 22", "/src", ["ld.lld", "m.o"], [("m/0-d.o", "d")], files)
    assert sorted(reads) == sorted([str(lib), gone])
    # The recipe, field by field, each file as many times as it is named.
    recipe = cachekey.Hasher()
    for tag, value in [("thinlink", cachekey.THINLINK_FORMAT), ("ld", "ld.lld 22"), ("cwd", "/src"),
                       ("argv", "ld.lld\0m.o"), ("module", "m/0-d.o\0d")]:
        recipe.field(tag, value)
    for f in files:
        if f == str(lib):
            recipe.field("file", f"{lib}\0{cachekey.digest_bytes(lib.read_bytes())}")
        else:
            recipe.field("missing", gone)
    assert key == recipe.hexdigest()
