"""`ltowrap report`: where the links of a build spent their time (terminal or `--html`); the
links of the log a command chooses (`--since`, `--last`)."""

from __future__ import annotations

import argparse
import sys

from .. import logfile
from ..config import Settings


def chosen_links(settings: Settings, a: argparse.Namespace, command: str):  # -> list[report.Link] | None
    from .. import report  # the log's views: only for this command

    if not logfile.exists(settings.log):
        print(f"ltowrap {command}: no link in the log yet ({settings.log or 'log = off'})", file=sys.stderr)
        return None
    try:
        since = report.parse_since(a.since) if a.since else None
    except ValueError:
        print(f"ltowrap {command}: --since takes 10m, 2h, an ISO date and time or seconds since the epoch, "
              f"not {a.since!r}", file=sys.stderr)
        return None
    return report.links(report.read_log(settings.log), since, a.last)


def run(settings: Settings, a: argparse.Namespace) -> int:
    from .. import report  # the log's views: only for this command

    chosen = chosen_links(settings, a, "report")
    if chosen is None:
        return 2
    if a.html:
        with open(a.html, "w", encoding="utf-8") as f:
            f.write(report.html(chosen))
        print(f"{len(chosen)} links: {a.html}", file=sys.stderr)
        return 0
    print(report.text(chosen))
    return 0
