"""The thin-link: lld with --thinlto-index-only writes one index shard per module; we read them back.

Its result is cached under a key of the link line and the contents of everything it reads
(cachekey.thinlink_key), so a relink with nothing changed skips it and goes straight to
the backend cache. What it reads is lld's own list (--trace: every input file it loads,
those a linker script pulls in too; it writes no --dependency-file for an index-only
link): a file there that the key did not cover (a linker script pulled it in where
ltowrap did not look) leaves the result uncached, and the record says which.
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


@dataclass(frozen=True)
class ThinLinkResult:
    jobs: tuple[Job, ...]
    full_lto_object: str | None  # code of regular-LTO modules, compiled by the thin-link
    full_lto_modules: frozenset[str]  # their module paths (they get no backend job)
    cached: bool
    uncached: str = ""  # why a thin-link that ran was not stored


def run(plan: LinkPlan, ld: list[str], cache: Cache, workdir: str, store_prefix: str, thin_key: str | None,
        keyed: list[str], digest_of: Callable[[str], str], declarations: bool, verify: bool = False) -> ThinLinkResult:
    """The cached thin-link, else this one run under a claim: an identical thin-link already
    running in another process is waited for (holding no slot) and its result taken.
    `keyed`: the files besides the modules whose contents the key holds. `declarations`:
    this lld takes -import-declaration (its probe, toolchain.LLD_PROBES: lld 19 and later;
    the key has it through lld's identity, under which the probe is kept). `verify`: a hit
    is run again and compared (the fresh result is used, and replaces it)."""
    if thin_key is None:
        return _index(plan, ld, cache, workdir, store_prefix, thin_key, keyed, digest_of, declarations)
    hit = _lookup(plan, cache, thin_key, workdir, store_prefix)
    if hit is not None and verify:
        fresh = _index(plan, ld, cache, workdir, store_prefix, thin_key, keyed, digest_of, declarations)
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
        return _index(plan, ld, cache, workdir, store_prefix, thin_key, keyed, digest_of, declarations)


def _index(plan: LinkPlan, ld: list[str], cache: Cache, workdir: str, store_prefix: str, thin_key: str | None,
           keyed: list[str], digest_of: Callable[[str], str], declarations: bool) -> ThinLinkResult:
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
        "--trace",
    ]
    if declarations:
        # Shards then also summarise the functions a module only references, so a backend
        # knows they are dso_local as in-process LTO does (else: GOT loads, xz's main()).
        argv += ["-mllvm", "-import-declaration"]
    out, _ = proc.run_apart(argv, reason=Reason.THINLINK_FAILED)  # stdout: --trace's list
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
    unkeyed = _unkeyed(out.decode("utf-8", "surrogateescape"), keyed, store_prefix)
    if thin_key is not None and not full and not unkeyed:
        cache.put(THINLINKS, thin_key, {"prefix": store_prefix}, _encode_record(record))
    if thin_key is not None:
        cache.stats.add("thinlink_misses")
    uncached = f"it read {unkeyed[0]}, which its key did not cover" if unkeyed else ""
    return ThinLinkResult(tuple(jobs), full_obj if has_full else None, frozenset(full), cached=False,
                          uncached=uncached)


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
