"""The thin-link: lld with --thinlto-index-only writes one index shard per module; we read them back.

Its result is cached under a key of the link line and the contents of everything it reads
(cachekey.thinlink_key),
so a relink with nothing changed skips it and goes straight to the backend cache.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass

from . import proc
from .backend import Job
from .cache import THINLINKS, Cache
from .cachekey import shard_identity
from .errors import Reason, Unsupported
from .fsutil import read_bytes
from .plan import LinkPlan


IMPORT_DECLARATION_SINCE = 19  # LLVM release whose lld takes -mllvm -import-declaration


@dataclass(frozen=True)
class ThinLinkResult:
    jobs: tuple[Job, ...]
    full_lto_object: str | None  # code of regular-LTO modules, compiled by the thin-link
    full_lto_modules: frozenset[str]  # their module paths (they get no backend job)
    cached: bool


def run(plan: LinkPlan, ld: list[str], cache: Cache, workdir: str, store_prefix: str, thin_key: str | None,
        digest_of: Callable[[str], str], llvm_major: int, verify: bool = False) -> ThinLinkResult:
    """The cached thin-link, else this one run under a claim: an identical thin-link already
    running in another process is waited for (holding no slot) and its result taken.
    `verify`: a hit is run again and compared (the fresh result is used, and replaces it)."""
    if thin_key is None:
        return _index(plan, ld, cache, workdir, store_prefix, thin_key, digest_of, llvm_major)
    hit = _lookup(plan, cache, thin_key, workdir, store_prefix)
    if hit is not None and verify:
        fresh = _index(plan, ld, cache, workdir, store_prefix, thin_key, digest_of, llvm_major)
        _check(cache, hit, fresh)
        return fresh
    if hit is not None:
        return hit
    with cache.claims.holding(THINLINKS, thin_key) as waited:
        if waited:
            cache.stats.add("thinlink_waits")
            hit = _lookup(plan, cache, thin_key, workdir, store_prefix)
            if hit is not None:
                return hit
        return _index(plan, ld, cache, workdir, store_prefix, thin_key, digest_of, llvm_major)


def _index(plan: LinkPlan, ld: list[str], cache: Cache, workdir: str, store_prefix: str, thin_key: str | None,
           digest_of: Callable[[str], str], llvm_major: int) -> ThinLinkResult:
    idx = os.path.join(workdir, "idx") + "/"
    objects = os.path.join(workdir, "objects.txt")
    full_obj = os.path.join(workdir, "full-lto.o")
    if ";" in store_prefix or ";" in idx:
        raise Unsupported(Reason.CACHE_PATH, f"{store_prefix!r} contains ';'")
    argv = ld + plan.tokens(lambda m: m.path) + [
        f"--thinlto-index-only={objects}",
        "--thinlto-emit-imports-files",
        f"--thinlto-prefix-replace={store_prefix};{idx}",
        f"--lto-obj-path={full_obj}",
    ]
    if llvm_major >= IMPORT_DECLARATION_SINCE:
        # Shards then also summarise the functions a module only references, so a backend
        # knows they are dso_local as in-process LTO does (else: GOT loads, xz's main()).
        argv += ["-mllvm", "-import-declaration"]
    proc.run(argv, reason=Reason.THINLINK_FAILED)
    by_path = plan.by_path()
    jobs: list[Job] = []
    full: set[str] = set()
    record: list[dict] = []
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
        identity = shard_identity(shard, digest_of, module.path)
        jobs.append(Job(module, shard, line + ".thinlto.bc", imports, line, identity))
        record.append({"rel": rel, "shard": base64.b64encode(shard).decode(), "imports": list(imports), "identity": identity})
    # Regular-LTO modules are not in the object list: their shard is an empty file, and
    # their code is in full_obj. lld writes that object (empty) even when every module is
    # ThinLTO: it is used only when some module really was regular LTO, so the output is
    # the same with a cached thin-link.
    listed = {j.module.path for j in jobs}
    for m in plan.modules:
        shard_file = idx + m.path[len(store_prefix) :] + ".thinlto.bc"
        if m.path not in listed and os.path.exists(shard_file) and os.path.getsize(shard_file) == 0:
            full.add(m.path)
    has_full = bool(full) and os.path.exists(full_obj) and os.path.getsize(full_obj) > 0
    if thin_key is not None and not full:
        cache.put(THINLINKS, thin_key, {"prefix": store_prefix}, _encode_record(record))
        cache.stats.add("thinlink_misses")
    return ThinLinkResult(tuple(jobs), full_obj if has_full else None, frozenset(full), cached=False)


def _check(cache: Cache, hit: ThinLinkResult, fresh: ThinLinkResult) -> None:
    """A verified hit, run again: the same shards and imports, or a mismatch (counted, said)."""
    cache.stats.add("verify_checks")
    if [(j.output, j.shard, j.imports) for j in hit.jobs] != [(j.output, j.shard, j.imports) for j in fresh.jobs]:
        cache.stats.add("verify_mismatches")
        import sys

        print("ltowrap: verify: a cached thin-link differs from a fresh one; replaced", file=sys.stderr)


def _encode_record(record: list[dict]) -> bytes:
    import json

    return json.dumps(record).encode()


def _lookup(plan: LinkPlan, cache: Cache, thin_key: str, workdir: str, store_prefix: str) -> ThinLinkResult | None:
    import json

    entry = cache.get(THINLINKS, thin_key)
    if entry is None or entry.meta.get("prefix") != store_prefix:
        return None
    by_path = plan.by_path()
    idx = os.path.join(workdir, "idx") + "/"
    jobs = []
    try:
        for item in json.loads(entry.payload):
            module = by_path[store_prefix + item["rel"]]
            out = idx + item["rel"]
            jobs.append(Job(module, base64.b64decode(item["shard"]), out + ".thinlto.bc", tuple(item["imports"]), out,
                            item["identity"]))
    except (KeyError, ValueError, TypeError):
        cache.stats.add("bad_entries")
        return None
    cache.stats.add("thinlink_hits")
    return ThinLinkResult(tuple(jobs), None, frozenset(), cached=True)
