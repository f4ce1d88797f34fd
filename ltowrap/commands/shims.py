"""`ltowrap shims`: the directory of clang, clang++ and ld.lld shims to put first on PATH."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile

from ..config import Settings


def shim_dir() -> str:
    """A directory of links to this install's entry scripts: clang, clang++, ld.lld, and the
    versioned names of every clang, clang++ and ld.lld on PATH now (clang-19, ld.lld-22, ...).

    A directory holds one set of names and is never changed once made (built aside, then
    renamed into place), so a version installed later gets a new directory the next time
    `ltowrap shims` runs, a removed one leaves no shim that finds nothing, and shells with
    different PATHs do not rewrite each other's shims in the middle of a build.
    """
    from ..toolchain import SHIMMED, versioned_tools

    bindir = os.path.dirname(os.path.realpath(sys.argv[0]))
    names = [*SHIMMED, *versioned_tools()]
    key = hashlib.blake2b("\0".join([bindir, *names]).encode(), digest_size=8).hexdigest()
    parent = os.path.join(sys.prefix, "share", "ltowrap", "shims")
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError:
        from ..config import default_cache_dir

        parent = os.path.join(default_cache_dir(), "shims")
        os.makedirs(parent, exist_ok=True)
    target = os.path.join(parent, key)
    if os.path.isdir(target):
        return target
    building = tempfile.mkdtemp(prefix=".new-", dir=parent)
    for name in names:
        entry = "ld.lld" if name.startswith("ld.lld") else "clang++" if name.startswith("clang++") else "clang"
        os.symlink(os.path.join(bindir, "ltowrap-" + entry), os.path.join(building, name))
    os.chmod(building, 0o755)
    try:
        os.rename(building, target)
    except OSError:  # another `ltowrap shims` made the same set first
        shutil.rmtree(building, ignore_errors=True)
        if not os.path.isdir(target):
            raise
    return target


def run(settings: Settings, a: argparse.Namespace) -> int:
    print(shim_dir())
    return 0
