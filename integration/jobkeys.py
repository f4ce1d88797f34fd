"""The key ltowrap gives a backend job of a link made by hand (ld.lld --thinlto-index-only in a
directory of its own), for the tests that compare keys across many links (lua, redis)."""

from __future__ import annotations

from pathlib import Path

from helpers import relative_digests
from ltowrap import cachekey


def job_keys(cwd: Path, shard: bytes, module: str) -> tuple[str, str]:
    """The key ltowrap gives the job, and the key with every module by its bytes."""
    digest_of = relative_digests(cwd)
    out = []
    for names in (digest_of, lambda p: digest_of(p)):  # a plain callable: no interfaces
        identity = cachekey.shard_identity(shard, names, module)
        assert identity.startswith("shardkey:"), module
        out.append(cachekey.digest_bytes(f"{identity}\0{digest_of(module)}".encode()))
    return out[0], out[1]
