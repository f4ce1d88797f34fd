"""Project a cold link's time on N remote workers from two measured links. A projection, not a measurement.

    .venv/bin/python bench/projection.py LOCAL.jsonl REMOTE.jsonl [--binary lua] [--local-slots 2]

LOCAL.jsonl is the LTOWRAP_LOG of a cold link compiled here (bench/run.py --keep:
rep0-ltowrap-nomemo/cold-link-alone.jsonl), REMOTE.jsonl the same link with every job
executed remotely (rep0-remote-exec/link-alone-cold.jsonl). From them:
- each backend's compile time here (start..end of a `compiled` job);
- the remote overhead per job: the worker time the all-remote link used beyond the
  compiles themselves (its backends' span times the workers it had, `--measured-workers`,
  less the compile times here), over its jobs: upload, scheduling, the worker's own
  start, download. (A job's own start..end would count its wait in the server's queue.)
- the rest of the link (thin-link, final link, lookups): the local link's time less its
  backends' span.
Then it replays the executor's scheduling (executor.py, hybrid execute mode): jobs longest
first, each to whichever side frees first, `--local-slots` compiling here beside N workers
that compile as fast as this machine plus the overhead. What it leaves out: a server's
limits (scheduler throughput, its own queue), network bandwidth, workers slower or faster
than this machine, and the races of the last jobs (which only shorten the tail).
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
from pathlib import Path

from ltowrap.log import Source

LOCAL, REMOTE = Source.COMPILED, Source.REMOTE_EXECUTED  # the sources compared: compiled here, on a worker


def main_record(log: Path, binary: str | None) -> dict:
    """The link record of `binary` (default: the one with most backends)."""
    records = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("backends")]
    if binary is not None:
        records = [r for r in records if "-o" in r["argv"] and Path(r["argv"][r["argv"].index("-o") + 1]).name == binary]
    if not records:
        raise SystemExit(f"{log}: no link record with backends{f' for {binary}' if binary else ''}")
    return max(records, key=lambda r: len(r["backends"]))


def durations(record: dict, source: str) -> dict[str, float]:
    return {b["module"]: b["end"] - b["start"] for b in record["backends"] if b["source"] == source}


def makespan(jobs: list[float], local_slots: int, workers: int, overhead: float) -> float:
    """Greedy list scheduling, longest first, each job to the side that frees first."""
    sides = [(0.0, 0.0)] * local_slots + [(0.0, overhead)] * workers  # (free at, extra per job)
    heapq.heapify(sides)
    end = 0.0
    for d in sorted(jobs, reverse=True):
        free, extra = heapq.heappop(sides)
        done = free + d + extra
        end = max(end, done)
        heapq.heappush(sides, (done, extra))
    return end


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("local", type=Path)
    p.add_argument("remote", type=Path)
    p.add_argument("--binary")
    p.add_argument("--local-slots", type=int, default=2)
    p.add_argument("--measured-workers", type=int, default=2, help="workers of the all-remote link (bench: 2)")
    a = p.parse_args()
    local, remote = main_record(a.local, a.binary), main_record(a.remote, a.binary)
    here, there = durations(local, LOCAL), durations(remote, REMOTE)
    shared = sorted(set(here) & set(there))
    if not shared:
        raise SystemExit("no module compiled here in the first log and executed remotely in the second")
    span = max(b["end"] for b in local["backends"]) - min(b["start"] for b in local["backends"])
    rest = (local["end"] - local["start"]) - span
    executed = [b for b in remote["backends"] if b["source"] == REMOTE]
    remote_span = max(b["end"] for b in executed) - min(b["start"] for b in executed)
    overhead = max(0.0, (remote_span * a.measured_workers - sum(here[m] for m in shared)) / len(shared))
    jobs = list(here.values())
    print(f"{len(jobs)} backends, {sum(jobs):.2f} s of compiles here (longest {max(jobs):.2f} s, median "
          f"{statistics.median(jobs):.2f} s); remote overhead per job {overhead:.3f} s ({len(shared)} jobs on "
          f"{a.measured_workers} workers in {remote_span:.2f} s); rest of the link {rest:.2f} s")
    print(f"measured: local {local['end'] - local['start']:.2f} s, all remote on the loopback workers "
          f"{remote['end'] - remote['start']:.2f} s")
    print("\n| workers | local slots | projected link s | vs local only |\n|---:|---:|---:|---:|")
    alone = rest + makespan(jobs, a.local_slots, 0, overhead)
    for n in (0, 2, 8, 32, 128):
        t = rest + makespan(jobs, a.local_slots, n, overhead)
        print(f"| {n} | {a.local_slots} | {t:.2f} | {t / alone:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
