"""lld's `--dependency-file`: the files a link read, as lld lists them, read back and written.

The link memo's manifest starts from the final link's list; the thin-link's list says
whether its key covered everything it read (thinlink.py). The final link's list, with
ltowrap's objects replaced by the inputs they stand for, is written where the user asked
(finallink.name_outputs), in lld's own syntax (`write`).
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
    if "\\" not in name and "$" not in name:  # most names: nothing escaped
        return name
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


def normal(path: str) -> str:
    """A path as lld prints it in a dependency file: `.` components dropped and `x/..` folded
    (llvm::sys::path::remove_dots with remove_dot_dot), as it does to each name it read."""
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part == ".." and absolute:
            continue  # nothing above the root
        else:
            parts.append(part)
    return ("/" if absolute else "") + "/".join(parts)


def _escape(name: str) -> str:
    """lld's escaping of one name (make's, as gcc writes it): `#` and space behind a backslash
    (and the backslashes before a space doubled), `$` doubled."""
    out = []
    for i, c in enumerate(name):
        if c == "#":
            out.append("\\")
        elif c == " ":
            out.append("\\")
            j = i
            while j > 0 and name[j - 1] == "\\":
                out.append("\\")
                j -= 1
        elif c == "$":
            out.append("$")
        out.append(c)
    return "".join(out)


def text(target: str, deps: list[str]) -> str:
    """What lld writes: `target: \\` and one dependency a line, then an empty rule for each
    dependency (so make does not fail on one that is gone). The target is written as given."""
    rule = target + ":" + "".join(" \\\n " + _escape(normal(d)) for d in deps) + "\n"
    return rule + "".join("\n" + _escape(normal(d)) + ":\n" for d in deps)


def write(path: str, target: str, deps: list[str]) -> None:
    """Write `text(target, deps)` to path (replacing it whole), 0666 less the umask as lld's."""
    fsutil.atomic_write(path, text(target, deps).encode("utf-8", "surrogateescape"), mode=0o666, create_dirs=False)
