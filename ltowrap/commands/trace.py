"""`ltowrap trace`: the links of the log as a Chrome trace (Perfetto, chrome://tracing)."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import Settings
from .report import chosen_links


def run(settings: Settings, a: argparse.Namespace) -> int:
    from .. import report  # the log's views: only for this command

    chosen = chosen_links(settings, a, "trace")
    if chosen is None:
        return 2
    text = json.dumps(report.trace_events(chosen))
    if a.output in (None, "-"):
        print(text)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"{len(chosen)} links traced into {a.output} (open it in https://ui.perfetto.dev or chrome://tracing)",
              file=sys.stderr)
    return 0
