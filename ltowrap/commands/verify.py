"""`ltowrap verify`: the last links of the log linked again, every cache hit checked."""

from __future__ import annotations

import argparse
import os
import sys

from .. import log, logfile, proc
from ..config import Settings
from .stats import stats_json


def run(settings: Settings, a: argparse.Namespace) -> int:
    """Link the last N links of the log again, in their directories, with every cache hit
    checked (verify = 1): a hit that differs from the work done again is counted, said and
    replaced. Their outputs are written again, as a build would."""
    if not logfile.exists(settings.log):
        print(f"ltowrap verify: no link in the log yet ({settings.log or 'log = off'})", file=sys.stderr)
        return 2
    records = log.records(settings.log)
    kept = (log.Decision.DISTRIBUTED, log.Decision.RESTORED)
    todo = [r for r in records if r.get("tool", "").startswith("ld.lld") and r.get("decision") in kept]
    todo = todo[-a.last:] if a.last else todo
    if not todo:
        print("ltowrap verify: the log holds no distributed or restored link", file=sys.stderr)
        return 2
    entry = os.path.join(os.path.dirname(os.path.realpath(sys.argv[0])), "ltowrap-ld.lld")
    before = stats_json(settings)
    failed = 0
    for r in todo:
        env = {**os.environ, "LTOWRAP_VERIFY": "1", "LTOWRAP_REAL_LD": r["argv"][0]}
        # Not guarded: the ld.lld entry is to distribute the link, not pass it through.
        rc, _, err = proc.capture([entry, *r["argv"][1:]], cwd=r["cwd"], env=env, guard=False)
        if rc != 0:
            failed += 1
            print(f"ltowrap verify: the link of {r['cwd']} exited {rc}:\n{err.decode(errors='replace')}",
                  file=sys.stderr)
    after = stats_json(settings)
    checks = after["verify_checks"] - before["verify_checks"]
    mismatches = after["verify_mismatches"] - before["verify_mismatches"]
    print(f"{len(todo)} links linked again: {checks} hits checked, {mismatches} differed"
          + (f", {failed} links failed" if failed else ""))
    return 1 if mismatches or failed else 0
