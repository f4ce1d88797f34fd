"""The clang driver's link line (`clang -###`), cached, so a driver link starts no second clang.

Asking the driver costs a clang start (26-35 ms), on every link. Its answer depends on its
argv, the working directory, the driver itself (and its config files, beside it), a few
environment variables, and what it finds on disk: crt files, the gcc installation, the
library directories. So the entry (d/, cachekey.driver_line_key) is keyed by the first
ones, and holds, beside the line, the stat identity of every file and directory the line
names that the user did not (crt files, `-L` directories) and of their parent directories
(a new gcc version directory appears in one). A lookup stats them again: a compiler, libc
or gcc upgrade misses.
"""

from __future__ import annotations

import json
import os

from . import cachekey, driverargs, proc, stats, toolchain
from .cache import DRIVER_LINES, Cache

def linker_command(real: list[str], args: list[str], real_ld: str, cache_dir: str) -> list[str] | None:
    """The ld.lld command the driver would run, from the cache or from `clang -###`.

    A command that names a response file is asked of the driver every time: the key would
    not see the file's contents.
    """
    if driverargs.has_response_file(args):
        return run_driver(real, args, real_ld)
    counts = stats.Stats()
    cache = Cache(cache_dir, counts)
    driver = cachekey.stamp(toolchain.driver_files(real[0]))
    key = cachekey.driver_line_key(driver, real + args, os.getcwd(), toolchain.driver_env())
    argv = _cached(cache, key)
    if argv is not None:
        counts.add("driver_line_hits")
    else:
        counts.add("driver_line_misses")
        argv = run_driver(real, args, real_ld)
        if argv is not None:
            named = named_paths(argv, args)
            cache.put(DRIVER_LINES, key, {}, json.dumps({"argv": argv, "named": named,
                                                          "stamp": cachekey.stamp(named)}).encode())
    cache.close()
    stats.flush(cache_dir, counts)
    return argv


def _cached(cache: Cache, key: str) -> list[str] | None:
    entry = cache.get(DRIVER_LINES, key)
    if entry is None:
        return None
    try:
        data = json.loads(entry.payload)
        argv, named, stamp = [str(a) for a in data["argv"]], [str(p) for p in data["named"]], data["stamp"]
    except (ValueError, KeyError, TypeError):
        cache.stats.add("bad_entries")
        return None
    return argv if cachekey.stamp(named) == stamp else None


def named_paths(argv: list[str], given: list[str]) -> list[str]:
    """The files and directories the link line names that the user's arguments do not, and their parents."""
    mine = set(given)
    paths: list[str] = [argv[0]]
    for arg in argv[1:]:
        if arg in mine:
            continue
        path = arg[2:] if arg.startswith("-L") else arg
        if path.startswith("/"):
            paths.append(path)
    out: list[str] = []
    for path in paths:
        for p in (path, os.path.dirname(path)):
            if p not in out:
                out.append(p)
    return out


def run_driver(real: list[str], args: list[str], real_ld: str) -> list[str] | None:
    """The ld.lld command the driver would run (from `clang -###`), if that is all it would run.

    -### prints one line per job, each argument in double quotes with `"`, `\\` and `$`
    escaped by a backslash. Anything else (a compile job too, a driver error) is None,
    and the driver is run for real instead.
    """
    rc, _, err = proc.capture([*real, "-###", *args])
    if rc != 0:
        return None
    jobs = [line for line in err.decode("utf-8", "surrogateescape").splitlines() if line.startswith(' "')]
    if len(jobs) != 1:
        return None
    argv = unquote_job(jobs[0])
    return argv if argv and argv[0] == real_ld else None


def unquote_job(line: str) -> list[str]:
    out = []
    i = line.find('"')
    while i >= 0:
        arg: list[str] = []
        i += 1
        while i < len(line) and line[i] != '"':
            if line[i] == "\\" and i + 1 < len(line):
                i += 1
            arg.append(line[i])
            i += 1
        out.append("".join(arg))
        i = line.find('"', i + 1)
    return out
