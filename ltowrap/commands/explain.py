"""`ltowrap explain`: the key dumps LTOWRAP_DEBUG=1 wrote, for the named modules or all."""

from __future__ import annotations

import argparse
import os
import sys

from ..cachedirs import OBJECTS
from ..config import Settings


def run(settings: Settings, a: argparse.Namespace) -> int:
    """Show the key dumps (LTOWRAP_DEBUG=1 writes them) for the named module digests or all."""
    root = os.path.join(settings.cache_dir, OBJECTS)
    found = 0
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            if n.endswith(".key.txt"):
                with open(os.path.join(dirpath, n), encoding="utf-8", errors="replace") as f:
                    text = f.read().replace("\0", " ")  # argv fields are NUL-separated in the key
                if not a.module or any(m in text for m in a.module):
                    print(f"== {n[:-8]}\n{text}")
                    found += 1
    if not found:
        print("No key dumps found: run the link with LTOWRAP_DEBUG=1 first.", file=sys.stderr)
        return 1
    return 0
