"""Tagged hashing: every field goes in behind its own tag and length, so fields cannot run together.

With debug on, the hasher also keeps a readable list of what went in, which is how a
user explains a miss (`ltowrap explain`, LTOWRAP_DEBUG=1): diff two dumps.
"""

from __future__ import annotations

import xxhash

# Bump when the key's recipe or an entry's layout changes: old entries then simply miss.
FORMAT_VERSION = "ltowrap-cache-6"


def digest_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def file_digests(known: dict[str, str] | None = None):
    """A memoised path -> digest of the file's bytes, seeded with digests already known."""
    memo = dict(known or {})

    def digest_of(path: str) -> str:
        if path not in memo:
            with open(path, "rb") as f:
                memo[path] = digest_bytes(f.read())
        return memo[path]

    return digest_of


class Hasher:
    def __init__(self, debug: bool = False) -> None:
        self._h = xxhash.xxh3_128()
        self.dump: list[str] | None = [] if debug else None
        self.field("version", FORMAT_VERSION)

    def field(self, tag: str, value: str | bytes) -> None:
        data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        self._h.update(f"\0{tag}\0{len(data)}\0".encode())
        self._h.update(data)
        if self.dump is not None:
            shown = value if isinstance(value, str) else f"<{len(data)} bytes, xxh3 {digest_bytes(data)}>"
            self.dump.append(f"{tag}: {shown}")

    def hexdigest(self) -> str:
        return self._h.hexdigest()
