"""The key ltowrap gives a backend job of a link made by hand (ld.lld --thinlto-index-only in a
directory of its own), for the tests that compare keys across many links (lua, redis)."""

from __future__ import annotations

from pathlib import Path

from ltowrap import cachekey


class _Under(cachekey.ModuleDigests):
    """ltowrap's module digests, for paths relative to a link's directory."""

    def __init__(self, cwd: Path) -> None:
        super().__init__()
        self.cwd = cwd

    def __call__(self, path: str) -> str:
        return super().__call__(str(self.cwd / path))

    def interface(self, path: str) -> str:
        return super().interface(str(self.cwd / path))


def job_keys(cwd: Path, shard: bytes, module: str) -> tuple[str, str]:
    """The key ltowrap gives the job, and the key with every module by its bytes."""
    digest_of = _Under(cwd)
    out = []
    for names in (digest_of, lambda p: digest_of(p)):  # a plain callable: no interfaces
        identity = cachekey.shard_identity(shard, names, module)
        assert identity.startswith("shardkey:"), module
        out.append(cachekey.digest_bytes(f"{identity}\0{digest_of(module)}".encode()))
    return out[0], out[1]
