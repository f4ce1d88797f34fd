"""The names of the cache directory's parts, each in one place (cache.py's docstring says what each holds).

A module of its own, not cache.py: stats, locks and the option records name their parts
too, and they sit below cache.py in the layering (cache.py imports stats), the records on
the compile path, which must not load cache.py's xxhash. The sh entry spells RECORDS
itself (scripts/ltowrap-clang).
"""

from __future__ import annotations

MODULES = "m"  # bitcode modules and archive members, flat
OBJECTS = "o"  # backend objects
THINLINKS = "t"  # thin-link records
RECORDS = "r"  # per-module compile options
TOOLCHAINS = "c"  # facts about the tools and modules, each kept under the identity it depends on
LINKS = "l"  # the link memo
DRIVER_LINES = "d"  # the clang driver's link lines
STATS = "stats"  # counters
LOCKS = "locks"  # per host: slots and claims
TMP = "tmp"  # per-link work directories
LINK_LOG = "links.jsonl"  # the link log, when the config names none (logfile.py)
CLEANUP_LOCK = "cleanup.lock"  # held while the cache is trimmed or cleared
GONE = ("v",)  # parts older ltowrap releases made (v/: the views of ltowrap-cache-7), removed by `cache clear`
