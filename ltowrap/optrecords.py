"""Per-module backend options: recorded when a compile writes bitcode, found again by content.

The record for a module is keyed by the BLAKE2b-128 of the file the compile wrote (the
bitcode, or a FatLTO object: an ELF object that carries it), so it is found wherever the
module travels: renamed, copied into an archive, or two different
`util.o` in two directories. (BLAKE2b because the sh entry computes it too, with
coreutils' `b2sum -l 128`.) It holds the compile's arguments, NUL-terminated, as given;
the link reads the codegen part of them (backendopts.codegen_options).
"""

from __future__ import annotations

import os
import sys

from . import driverargs, fsutil, proc
from .blake import blake2b
from .cachedirs import RECORDS
from .magic import ELF, is_bitcode


def record_path(cache_dir: str, key: str) -> str:
    """Where the record of a module with this record_key lives."""
    return os.path.join(cache_dir, RECORDS, key[:2], key)


def record_key(bitcode: bytes) -> str:
    return blake2b(bitcode, digest_size=16).hexdigest()


def load(cache_dir: str, key: str) -> list[str] | None:
    """The codegen options the module with this record_key was compiled with, if recorded."""
    path = record_path(cache_dir, key)
    try:
        data = fsutil.read_nofollow(path)
        os.utime(path)  # `ltowrap cache evict --older-than` goes by last use
    except OSError:
        return None
    from . import backendopts  # the link's: a compile only writes records

    args = data.decode("utf-8", "surrogateescape").split("\0")
    return backendopts.codegen_options(args[:-1] if args and args[-1] == "" else args)


def compile_and_record(argv: list[str], seen: list[str], cache_dir: str) -> int:
    """Run the compile `argv`, then record its options for each bitcode file it wrote.

    `seen` is its arguments with response files expanded: what the options are read from.
    """
    try:
        rc = proc.spawn(argv).wait()
    except OSError as e:
        print(f"ltowrap: cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127
    if rc != 0:
        return rc
    try:
        _record(seen, cache_dir)
    except Exception as e:  # recording is an optimisation; the compile succeeded
        print(f"ltowrap: could not record compile options: {e}", file=sys.stderr)
    return 0


def _record(args: list[str], cache_dir: str) -> None:
    record = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in args)
    for out in driverargs.compile_outputs(args):
        try:
            with open(out, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if is_bitcode(data[:4]) or data.startswith(ELF):  # ELF: a FatLTO object (-ffat-lto-objects)
            fsutil.atomic_write(record_path(cache_dir, record_key(data)), record)
