"""`ltowrap stats`: every counter of stats.COUNTERS, section by section, or as one JSON object."""

from __future__ import annotations

import argparse
import json
import time

from .. import stats
from ..config import Settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def stats_json(settings: Settings) -> dict:
    summed = stats.summary(settings.cache_dir)
    c = summed["counts"]
    out: dict[str, Any] = {name: round(float(c.get(name, 0)), 3) if kind == "seconds" else int(c.get(name, 0))
           for name, kind, *_ in stats.COUNTERS if kind != "size"}
    total = out["backend_hits"] + out["backend_misses"]
    out["backend_hit_rate"] = round(out["backend_hits"] / total, 4) if total else None
    out["fallback_reasons"] = summed["reasons"]
    out["cache_bytes"] = stats.cache_bytes(summed)
    out["cache_entries"] = stats.cache_files(summed)
    out["max_size_bytes"] = settings.max_size
    out["zeroed_at"] = summed["zeroed_at"]
    out["cache_dir"] = settings.cache_dir
    out["bitcode_reader"] = bitcode_reader()
    return out


def bitcode_reader() -> str:
    """Which bitcode reader this install runs (formats/bitcode.py): the keys are the same either way."""
    from ..formats import bitcode

    return bitcode.implementation()


def run(settings: Settings, a: argparse.Namespace) -> int:
    """Every counter of stats.COUNTERS, section by section, with what is derived from them."""
    if a.zero:
        stats.zero(settings.cache_dir)
        print("Statistics zeroed")
        return 0
    s = stats_json(settings)
    if a.json:
        print(json.dumps(s, indent=2, sort_keys=True))
        return 0
    zeroed = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["zeroed_at"])) if s["zeroed_at"] else "never"
    w = max(len(label) for _, _, _, label, _ in stats.COUNTERS) + 2
    lines = [f"{'Cache directory:':{w + 2}}{s['cache_dir']}", f"{'Stats zeroed:':{w + 2}}{zeroed}",
             f"{'Bitcode reader:':{w + 2}}{s['bitcode_reader']}"]
    remote = bool(settings.remote) or any(s[name] for name, _, section, *_ in stats.COUNTERS if section == "Remote")
    section = ""
    for name, kind, where, label, _ in stats.COUNTERS:
        if kind == "size" or (where == "Remote" and not remote):
            continue
        if where != section:
            section = where
            lines.append(f"Remote ({settings.remote or 'not set now'}):" if where == "Remote" else f"{where}:")
            if where == "Cache":
                size = _human(s["max_size_bytes"]) if s["max_size_bytes"] else "unlimited"
                lines += [f"  {'Size:':{w}}{_human(s['cache_bytes'])} / {size}", f"  {'Files:':{w}}{s['cache_entries']}"]
        value = f"{s[name]:.1f} s" if kind == "seconds" else str(s[name])
        lines.append(f"  {label + ':':{w}}{value}")
        if name == "links_fallback":
            lines += [f"    {n:6d}  {stats.reason_text(reason)}"
                      for reason, n in sorted(s["fallback_reasons"].items(), key=lambda kv: -kv[1])]
        elif name == "backend_misses":
            rate = f"{100 * s['backend_hit_rate']:.1f} %" if s["backend_hit_rate"] is not None else "-"
            lines.append(f"  {'Hit rate:':{w}}{rate}")
    print("\n".join(lines))
    return 0
