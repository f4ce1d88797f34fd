"""The thin-link: lld with --thinlto-index-only writes one index shard per module; we read them back.

Its result (the shards, the imports, the object it compiles from the regular-LTO modules:
-flto=full ones and the regular half of split LTO units, and the symbols by which bitcode
extracted native archive members) is cached under a key of the link line and the contents
of everything it reads (cachekey.thinlink_key), so a relink with nothing changed skips it
and goes straight to the backend cache. What it reads is lld's own list (--trace: every
input file it loads, those a linker script pulls in too; it writes no --dependency-file
for an index-only link): a file there that the key did not cover (a linker script pulled it in where
ltowrap did not look) leaves the result uncached, and the record says which.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .. import proc
from ..cache import THINLINKS, Cache
from ..cachekey import shard_identity
from ..errors import Reason, Unsupported
from ..fsutil import read_bytes
from .backend import Job
from .plan import LinkPlan


@dataclass(frozen=True)
class ThinLinkResult:
    """What the thin-link gave: the backend jobs, the regular-LTO object and what the final link needs."""

    jobs: tuple[Job, ...]
    full_lto_object: str | None  # code of the regular-LTO modules, compiled by the thin-link
    # The modules the link used that have a regular-LTO part, in link order: a -flto=full module
    # (its shard is empty, it gets no job) or a split LTO unit (bitcode.module_count: both).
    regular_modules: tuple[str, ...]
    # Symbols by which bitcode made lld extract a native archive member (or a lazy native
    # object), from the thin-link's --why-extract: in-process lld links those members whatever
    # LTO leaves of the references, so the final link references them too (finallink).
    extractions: tuple[str, ...]
    cached: bool
    uncached: str = ""  # why a thin-link that ran was not stored
    unstored: tuple[str, dict, str] | None = None  # a fresh result to store (key, its data, index directory): store()



@contextmanager
def thin_link(plan: LinkPlan, ld: list[str], cache: Cache, workdir: str, store_prefix: str, thin_key: str | None,
              keyed: list[str], takes: frozenset[str], verify: bool = False) -> Iterator[ThinLinkResult]:
    """The cached thin-link, else this one run under a claim held for the body: an identical
    thin-link already running in another process is waited for (holding no slot) and its
    result taken. A fresh result is stored by store(), in the body, once the backends have
    made its jobs' shard keys: computing them all first would hold the first backend back
    (a 400-module link: seconds). `keyed`: the files besides the modules whose contents the
    key holds. `takes`: what this lld takes of toolchain.LLD_PROBES (-import-declaration:
    lld 19 and later; the key has it through lld's identity, under which the probe is
    kept). `verify`: a hit is run again and compared (the fresh result is used, and
    replaces it)."""
    if thin_key is None:  # a linker script ltowrap cannot follow (plan.script_reads): not cached
        yield _index(plan, ld, cache, workdir, store_prefix, thin_key, keyed, takes)
        return
    hit = _lookup(plan, cache, thin_key, workdir, store_prefix)
    if hit is not None and verify:
        hit_object = read_bytes(hit.full_lto_object) if hit.full_lto_object else None
        fresh = _index(plan, ld, cache, workdir, store_prefix, thin_key, keyed, takes)
        _check(cache, hit, hit_object, fresh)
        yield fresh
        return
    if hit is not None:
        yield hit
        return
    with cache.claims.holding(THINLINKS, thin_key) as waited:
        if waited:
            cache.stats.add("thinlink_waits")
            hit = _lookup(plan, cache, thin_key, workdir, store_prefix)
            if hit is not None:
                yield hit
                return
        yield _index(plan, ld, cache, workdir, store_prefix, thin_key, keyed, takes)


def store(cache: Cache, result: ThinLinkResult, identities: dict[str, str], digest_of: Callable[[str], str]) -> None:
    """Store a fresh, keyed result with each job's shard key (`identities`, by output: what the
    executor made; any it did not, an uncacheable job's, is made here)."""
    if result.unstored is None:
        return
    key, data, idx = result.unstored
    # Each module a job imports is named once, in the entry's `modules`, and by its place there
    # in every imports list: a backend imports from up to hundreds of modules, and their paths
    # written out in every list would grow the entry with modules x imports. Places go in the
    # order first named; a job's list is made by map, not one call per import.
    named: dict[str, None] = {}
    for j in result.jobs:
        named.update(dict.fromkeys(j.imports))
    modules = {path: place for place, path in enumerate(named)}
    jobs = [(j.output[len(idx) :], j.shard, list(map(modules.__getitem__, j.imports)),
             identities.get(j.output) or shard_identity(j.shard, digest_of, j.module.path)) for j in result.jobs]
    cache.put_data(THINLINKS, key, {**data, "modules": list(named), "jobs": jobs})


def _index(plan: LinkPlan, ld: list[str], cache: Cache, workdir: str, store_prefix: str, thin_key: str | None,
           keyed: list[str], takes: frozenset[str]) -> ThinLinkResult:
    idx = os.path.join(workdir, "idx") + "/"
    objects = os.path.join(workdir, "objects.txt")
    full_obj = os.path.join(workdir, "full-lto.o")
    why_extract = os.path.join(workdir, "why-extract.txt")
    if ";" in store_prefix or ";" in idx:
        raise Unsupported(Reason.CACHE_PATH, f"{store_prefix!r} contains ';'")
    argv = ld + plan.tokens(lambda m: [m.path]) + [
        f"--thinlto-index-only={objects}",
        "--thinlto-emit-imports-files",
        f"--thinlto-prefix-replace={store_prefix};{idx}",
        f"--lto-obj-path={full_obj}",
        "--trace",
    ]
    if "why-extract" in takes:
        argv += [f"--why-extract={why_extract}", "--no-demangle"]  # its symbols as the objects name them
    if "import-declaration" in takes:
        # Shards then also summarise the functions a module only references, so a backend
        # knows they are dso_local as in-process LTO does (else: GOT loads, xz's main()).
        argv += ["-mllvm", "-import-declaration"]
    out, _ = proc.run_apart(argv, reason=Reason.THINLINK_FAILED)  # stdout: --trace's list
    by_path = plan.by_path()
    jobs: list[Job] = []
    full: set[str] = set()
    for line in read_bytes(objects).decode("utf-8", "surrogateescape").splitlines():
        if not line.startswith(idx):
            raise Unsupported(Reason.THINLINK_OUTPUT, f"an object outside its directory: {line!r}")
        rel = line[len(idx) :]
        module = by_path.get(store_prefix + rel)
        if module is None:
            raise Unsupported(Reason.THINLINK_OUTPUT, f"an unknown module: {line!r}")
        shard = read_bytes(line + ".thinlto.bc")
        imports = tuple(read_bytes(line + ".imports").decode("utf-8", "surrogateescape").splitlines())
        if not shard:  # a regular (full) LTO module: its code is in --lto-obj-path
            full.add(module.path)
            continue
        jobs.append(Job(module, shard, line + ".thinlto.bc", imports, line))
    # Regular-LTO modules are not in the object list: their shard is an empty file, and
    # their code is in full_obj. So is the regular-LTO half of a split LTO unit, whose
    # ThinLTO half has a job. lld writes that object (empty) even when every module is
    # ThinLTO; in-process lld links it only when some module it used has a regular-LTO part
    # (LTO::runRegularLTO: EmptyCombinedModule), and so does the final link here.
    listed = {j.module.path for j in jobs}
    regular: list[str] = []
    for m in plan.modules:  # in link order: the first one is where the final link puts full_obj
        shard_file = idx + m.path[len(store_prefix) :] + ".thinlto.bc"
        if m.path not in listed and os.path.exists(shard_file) and os.path.getsize(shard_file) == 0:
            regular.append(m.path)
        elif m.path in listed and m.split:
            regular.append(m.path)
    if regular and not (os.path.exists(full_obj) and os.path.getsize(full_obj) > 0):
        raise Unsupported(Reason.THINLINK_OUTPUT, "no object for the regular-LTO modules")
    full_lto = read_bytes(full_obj) if regular else None
    # lld 22 writes --why-extract for an index-only link; 14, 15, 16 and 19 (tried) write none:
    # there no extractions are known, and the final link extracts what its objects reference.
    extractions = _extractions(read_bytes(why_extract).decode("utf-8", "surrogateescape"), by_path) \
        if os.path.exists(why_extract) else ()
    unkeyed = _unkeyed(out.decode("utf-8", "surrogateescape"), keyed, store_prefix)
    unstored = None
    if thin_key is not None and not unkeyed:
        # full_lto: the hit must give the final link the same object.
        unstored = (thin_key, {"prefix": store_prefix, "full_lto": full_lto,
                               "regular": [p[len(store_prefix) :] for p in regular],
                               "extractions": list(extractions)}, idx)
    if thin_key is not None:
        cache.stats.add("thinlink_misses")
    uncached = f"it read {unkeyed[0]}, which its key did not cover" if unkeyed else ""
    return ThinLinkResult(tuple(jobs), full_obj if regular else None, tuple(regular), extractions, cached=False,
                          uncached=uncached, unstored=unstored)


def _extractions(why_extract: str, modules: dict) -> tuple[str, ...]:
    """The symbols of --why-extract's lines (`reference<TAB>extracted<TAB>symbol`, after a
    header) whose reference is a bitcode module and whose extracted file is not: a native
    archive member, or a lazy native object. Members that native files extracted, the final
    link extracts again by itself."""
    names: dict[str, None] = {}
    for line in why_extract.splitlines()[1:]:
        reference, extracted, symbol = line.split("\t", 2)
        if reference in modules and extracted not in modules:
            names[symbol] = None
    return tuple(names)


def _unkeyed(trace: str, keyed: list[str], store_prefix: str) -> list[str]:
    """The files lld's --trace says the thin-link loaded (an archive member as its archive)
    that are neither modules in the store nor keyed."""
    known = {os.path.abspath(p) for p in keyed}
    out = []
    for line in trace.splitlines():
        member = line.rfind("(")
        path = os.path.abspath(line[:member] if line.endswith(")") and member > 0 else line)
        if line and not path.startswith(store_prefix) and path not in known:
            out.append(line)
    return out


def _check(cache: Cache, hit: ThinLinkResult, hit_object: bytes | None, fresh: ThinLinkResult) -> None:
    """A verified hit, run again: the same shards, imports and regular-LTO object, or a
    mismatch (counted, said)."""
    fresh_object = read_bytes(fresh.full_lto_object) if fresh.full_lto_object else None
    cache.verified([(j.output, j.shard, j.imports) for j in hit.jobs] == [(j.output, j.shard, j.imports) for j in fresh.jobs]
                   and (hit.regular_modules, hit_object, hit.extractions) ==
                   (fresh.regular_modules, fresh_object, fresh.extractions), "a cached thin-link")


def _lookup(plan: LinkPlan, cache: Cache, thin_key: str, workdir: str, store_prefix: str) -> ThinLinkResult | None:
    idx = os.path.join(workdir, "idx") + "/"

    def read(data: dict) -> tuple[list[Job], tuple[str, ...], bytes | None, tuple[str, ...]] | None:
        """The record's jobs, regular-LTO modules and object, extractions; None if it was made
        under another store (a plain miss); KeyError, TypeError, ValueError for another shape."""
        if data["prefix"] != store_prefix:
            return None
        by_path = plan.by_path()
        modules = [str(path) for path in data["modules"]]
        jobs = []
        for rel, shard, imports, identity in data["jobs"]:
            if not isinstance(shard, bytes):
                raise TypeError("a shard that is not bytes")
            out = idx + rel
            imported = tuple(map(modules.__getitem__, imports))
            jobs.append(Job(by_path[store_prefix + rel], shard, out + ".thinlto.bc", imported, out, identity))
        regular = tuple(by_path[store_prefix + rel].path for rel in data["regular"])
        full = data["full_lto"] if regular else None
        if regular and not isinstance(full, bytes):
            raise ValueError("no regular-LTO object")
        return jobs, regular, full, tuple(str(name) for name in data["extractions"])

    found = cache.get_data(THINLINKS, thin_key, read)
    if found is None:
        return None
    jobs, regular, full, extractions = found
    full_obj = None
    if full is not None:
        full_obj = os.path.join(workdir, "full-lto.o")
        with open(full_obj, "wb") as f:
            f.write(full)
    cache.stats.add("thinlink_hits")
    return ThinLinkResult(tuple(jobs), full_obj, regular, extractions, cached=True)
