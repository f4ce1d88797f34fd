"""`ltowrap cache clear|trim|evict`: cache maintenance."""

from __future__ import annotations

import argparse

from .. import stats
from ..cache import Cache
from ..config import Settings, parse_age, parse_size


def _cache(settings: Settings) -> tuple[Cache, stats.Stats]:
    counters = stats.Stats()
    return Cache(settings.cache_dir, counters, settings.max_size), counters


def run(settings: Settings, a: argparse.Namespace) -> int:
    cache, counters = _cache(settings)
    if a.action == "clear":
        cache.clear()
        stats.zero(settings.cache_dir, keep_size=False)
        print(f"Cleared {settings.cache_dir}")
        return 0
    if a.action == "trim":
        limit = parse_size(a.max_size) if a.max_size else settings.max_size
        removed = cache.trim(limit if limit else 1 << 62)
        print(f"Removed {removed} files")
    elif a.action == "evict":
        removed = cache.trim(0, older_than=parse_age(a.older_than))
        print(f"Removed {removed} files not used for {a.older_than}")
    stats.flush(settings.cache_dir, counters)
    return 0
