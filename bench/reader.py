"""What reading bitcode costs ltowrap per module, with the compiled reader and with the Python one.

    .venv/bin/python bench/reader.py [--synthetic 400] [--dir D ...] [--reps 5]

Costs, each per file in CPU time and measured with both readers side by side (ltowrap._bitcode, and
formats/bitcode.py's read_python, the reference), the median of --reps runs of each file,
averaged over the files:
  read     bitcode.read of the whole stream (every block, every record), modules and shards (a
           shard's is the tree canonical_python builds its text from)
  facts    formats/modulefacts.read: everything a link asks of a module, in one read: with the
           compiled reader, made in C from the decoded stream (ltowrap._bitcode.module_facts)
  facts, Python text
           modulefacts.read_python: the same facts built in Python from the reader's tree (with
           the compiled reader: what `facts` cost before they were made in C)
  facts' read
           bitcode.read under modulefacts.WANT alone: the tree read_python builds the facts from
           (with the compiled reader, the C read and the Nodes made of it)
  shard    shardkey.canonical: a shard's canonical text, the modules' digests and interfaces
           given (what the backend key takes of the shard): with the compiled reader, made in C
           from the decoded stream (ltowrap._bitcode.shard_text)
  shard, Python text
           shardkey.canonical_python: the same text built in Python from the reader's tree (with
           the compiled reader: what `shard` cost before its text was made in C)
Corpora: `--synthetic N` (bench/shardkey_cost.py's N modules calling each other, compiled
with clang 22 and thin-linked as ltowrap does) and each `--dir` (its *.o modules and the
*.thinlto.bc shards beside them, e.g. lua's objects after `ld.lld --thinlto-index-only`).
Writes bench/out/<date>-reader.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import BENCH, write_results  # noqa: E402
from bench.shardkey_cost import synthetic  # noqa: E402
from ltowrap import cachekey  # noqa: E402
from ltowrap.formats import bitcode, modulefacts, shardkey  # noqa: E402


def per_file(files: list[bytes], work: Callable[[bytes], object], reps: int) -> float:
    """CPU seconds a file (this process's: on a shared machine, time spent preempted is not the
    work's): each file's median over reps, averaged."""
    total = 0.0
    for data in files:
        times = []
        for _ in range(reps):
            t = time.process_time()
            work(data)
            times.append(time.process_time() - t)
        total += statistics.median(times)
    return total / max(len(files), 1)


def corpus(where: Path) -> dict[str, list[bytes]]:
    modules = {p: p.read_bytes() for p in sorted(where.glob("*.o"))}
    shards = [p.read_bytes() for p in sorted(where.glob("*.thinlto.bc")) if p.stat().st_size]
    return {"modules": list(modules.values()), "shards": shards, "paths": [str(p) for p in modules]}


def measure(files: dict, reps: int) -> dict[str, dict[str, float]]:
    facts = {p: modulefacts.read(data, cachekey.digest_bytes) for p, data in zip(files["paths"], files["modules"])}
    digest = {p: cachekey.digest_bytes(data) for p, data in zip(files["paths"], files["modules"])}

    def canonical(shard: bytes, text: Callable[..., str] = shardkey.canonical) -> str:
        return text(shard, lambda p: digest.get(p, p), None, lambda p: facts[p].interface if p in facts else p)

    out: dict[str, dict[str, float]] = {}
    compiled = bitcode._native
    for reader in ("compiled", "python"):
        bitcode._native = compiled if reader == "compiled" else None  # the switch read() looks at
        out[reader] = {
            "read module": per_file(files["modules"], lambda d: bitcode.read(bitcode.bitstream(d)), reps),
            "read shard": per_file(files["shards"], lambda d: bitcode.read(bitcode.bitstream(d)), reps),
            "facts": per_file(files["modules"], lambda d: modulefacts.read(d, cachekey.digest_bytes), reps),
            "facts, Python text": per_file(files["modules"],
                                           lambda d: modulefacts.read_python(d, cachekey.digest_bytes), reps),
            "facts' read": per_file(files["modules"], lambda d: bitcode.read(bitcode.bitstream(d), modulefacts.WANT),
                                    reps),
            "shard": per_file(files["shards"], canonical, reps),
            "shard, Python text": per_file(files["shards"], lambda d: canonical(d, shardkey.canonical_python), reps),
        }
    bitcode._native = compiled
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--synthetic", type=int, default=0, metavar="N")
    p.add_argument("--dir", type=Path, nargs="*", default=[])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--llvm", type=Path, default=Path("/usr/lib/llvm-22/bin"))
    p.add_argument("--out", type=Path, default=BENCH / "out")
    a = p.parse_args()
    if bitcode.implementation() != "compiled":
        sys.exit("bench/reader.py: the compiled reader is not built (pip install . with a C compiler)")
    started = datetime.datetime.now(datetime.timezone.utc).astimezone()
    load = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory(prefix="ltowrap-reader-") as d:
        if a.synthetic:
            synthetic(Path(d), a.synthetic, a.llvm)
            results[f"synthetic, {a.synthetic + 1} modules"] = (Path(d), measure(corpus(Path(d)), a.reps))
        for where in a.dir:
            results[str(where)] = (where, measure(corpus(where), a.reps))
    lines = ["| corpus | cost | compiled ms | Python ms | Python / compiled |", "|---|---|---:|---:|---:|"]
    for label, (_, r) in results.items():
        for cost in r["compiled"]:
            c, py = r["compiled"][cost], r["python"][cost]
            lines.append(f"| {label} | {cost} | {1000 * c:.3f} | {1000 * py:.3f} | {py / c:.1f}x |")
    write_results(a.out, started, "reader", "Reading bitcode, compiled and in Python", load[0], "\n".join(lines),
                  {label: r for label, (_, r) in results.items()}, note=f"; medians of {a.reps} runs a file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
