"""lld's `--dependency-file`, read back: the files a link read, as lld lists them.

The link memo's manifest starts from the final link's list; the thin-link's list says
whether its key covered everything it read (thinlink.py).
"""

from __future__ import annotations

from .. import fsutil


def read(path: str) -> list[str] | None:
    """The files lld's --dependency-file lists (make syntax, lld's escaping), or None if unreadable."""
    try:
        text = fsutil.read_bytes(path).decode("utf-8", "surrogateescape")
    except OSError:
        return None
    rule = text.split("\n\n", 1)[0].rstrip("\n")
    parts = rule.split(" \\\n ")
    return [_unescape(p) for p in parts[1:]]


def _unescape(name: str) -> str:
    out = []
    i = 0
    while i < len(name):
        c = name[i]
        if c == "\\" and i + 1 < len(name) and name[i + 1] in " #":
            c = name[i + 1]
            i += 1
        elif c == "$" and name[i + 1 : i + 2] == "$":
            i += 1
        out.append(c)
        i += 1
    return "".join(out)
