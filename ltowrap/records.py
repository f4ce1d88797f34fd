"""Per-module backend options: recorded when a compile writes bitcode, found again by content.

The record for a module is keyed by the BLAKE2b-128 of the bitcode file's bytes, so it is
found wherever the module travels: renamed, copied into an archive, or two different
`util.o` in two directories. (BLAKE2b because the sh entry computes it too, with
coreutils' `b2sum -l 128`.) It holds the compile's arguments, NUL-terminated, as given;
the link reads the codegen part of them (driverargs.codegen_options).
"""

from __future__ import annotations

import hashlib
import os
import sys

from . import driverargs, fsutil
from .magic import is_bitcode

RECORD_DIR = "r"


def record_path(cache_dir: str, digest: str) -> str:
    return os.path.join(cache_dir, RECORD_DIR, digest[:2], digest)


def record_key(bitcode: bytes) -> str:
    return hashlib.blake2b(bitcode, digest_size=16).hexdigest()


def load(cache_dir: str, key: str) -> list[str] | None:
    """The codegen options the module with this record_key was compiled with, if recorded."""
    path = record_path(cache_dir, key)
    try:
        data = fsutil.read_nofollow(path)
        os.utime(path)  # `ltowrap cache evict --older-than` goes by last use
    except OSError:
        return None
    args = data.decode("utf-8", "surrogateescape").split("\0")
    return driverargs.codegen_options(args[:-1] if args and args[-1] == "" else args)


def compile_and_record(real: list[str], args: list[str], seen: list[str], env, resolved: dict | None) -> int:
    """Run the compile, then record its options for each bitcode file it wrote.

    `seen` is `args` with response files expanded: what the options are read from.
    """
    from .toolchain import GUARD

    child_env = dict(env)
    child_env[GUARD] = "1"
    try:
        pid = os.posix_spawn(real[0], real + args, child_env)
    except OSError as e:
        print(f"ltowrap: cannot run {real[0]}: {e.strerror}", file=sys.stderr)
        return 127
    _, status = os.waitpid(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        return rc if rc > 0 else 128 - rc
    try:
        _record(seen, env, resolved)
    except Exception as e:  # recording is an optimisation; the compile succeeded
        print(f"ltowrap: could not record compile options: {e}", file=sys.stderr)
    return 0


def _record(args: list[str], env, resolved: dict | None) -> None:
    from .config import default_cache_dir

    cache_dir = env.get("LTOWRAP_DIR") or (str(resolved["cache_dir"][0]) if resolved else "") or default_cache_dir()
    record = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in args)
    for out in driverargs.compile_outputs(args):
        try:
            with open(out, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if is_bitcode(data[:4]):
            fsutil.atomic_write(record_path(cache_dir, record_key(data)), record)
