"""Links whose every backend is a hit, against in-process ThinLTO with a warm lld cache.

    .venv/bin/python bench/hitlink.py [--project lua redis synthetic] [--reps 5] [--baseline VENV]

What an edit's link pays for every module it did not touch: each backend object from the
cache, the thin-link again, the final link. ltowrap runs with the link memo off (a memo hit
would restore the whole link and measure nothing of this); in-process lld runs with a warm
`--thinlto-cache-dir`, which serves every backend too. Each configuration is warmed by one
link first, then the links alternate (the order rotating each round) and the medians are
given, with ltowrap's own CPU a module from its link log (`cache`: the heading that holds
each hit's read, check and hand-over). With --baseline VENV, the ltowrap installed in
another venv runs beside it, with a cache of its own: a change's gain in one run.

Projects as bench/coldlink.py prepares them. Writes bench/out/<date>-hitlink.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.coldlink import JOBS, LLVM, link_words, prepare_project  # noqa: E402
from bench.run import BENCH, measure, write_results  # noqa: E402
from ltowrap.log import Decision  # noqa: E402

INPROC = "in-process, warm lld cache"


def one_project(name: str, a: argparse.Namespace, tmp: Path) -> list[dict]:
    where, line, env = prepare_project(name, tmp, a.modules)
    words = link_words(line)
    lines = {INPROC: [str(LLVM / "clang"), *words[1:], f"-Wl,--thinlto-jobs={JOBS}",
                      f"-Wl,--thinlto-cache-dir={tmp / 'lld-cache'}"],
             "ltowrap": words}
    if a.baseline:
        lines["ltowrap, baseline"] = [str(a.baseline / "bin" / "ltowrap-clang"), *words[1:]]
    caches = {which: tmp / f"cache-{n}" for n, which in enumerate(lines)}
    records = Path(env["LTOWRAP_CACHE_DIR"]) / "r"
    output = tmp / f"{name}.out"
    out = where / words[words.index("-o") + 1]
    rows: list[dict] = []

    def link(which: str, rep: int) -> None:
        out.unlink(missing_ok=True)
        log = tmp / f"{name}.log"
        log.unlink(missing_ok=True)
        run = measure(lines[which], where, env | {"LTOWRAP_CACHE_DIR": str(caches[which]), "LTOWRAP_MEMO": "0",
                                                   "LTOWRAP_LOG": str(log)}, output)
        row = {"rep": rep, "config": which, "wall": run.wall, "cpu": run.cpu}
        if which != INPROC:
            record = [json.loads(x) for x in log.read_text().splitlines()][-1]
            if record["decision"] != Decision.DISTRIBUTED:
                raise RuntimeError(f"{name}: the link was not distributed: {record.get('detail')}")
            if rep >= 0 and record["backend_compiles"]:
                raise RuntimeError(f"{name} ({which}): {record['backend_compiles']} backends compiled on a warm cache")
            row |= {"modules": record["modules"], "cpu_self": record["cpu"]["self"], "cpu_by": record["cpu"]["by"]}
        rows.append(row)

    for which in lines:
        if which != INPROC:
            caches[which].mkdir()
            if records.exists():  # the compile options recorded while building
                shutil.copytree(records, caches[which] / "r")
        link(which, -1)  # warms its cache
    configs = list(lines)
    for rep in range(a.reps):
        for which in configs[rep % len(configs):] + configs[:rep % len(configs)]:
            link(which, rep)
    inproc = statistics.median(r["wall"] for r in rows if r["config"] == INPROC and r["rep"] >= 0)
    results = []
    for which in configs:
        mine = [r for r in rows if r["config"] == which and r["rep"] >= 0]
        result = {"project": name, "config": which, "wall": statistics.median(r["wall"] for r in mine),
                  "vs_inproc": statistics.median(r["wall"] for r in mine) / inproc,
                  "pairs": sorted(r["wall"] / p["wall"] for r in mine for p in rows
                                  if p["config"] == INPROC and p["rep"] == r["rep"]), "samples": mine}
        if which != INPROC:
            m = mine[0]["modules"]
            result |= {"modules": m,
                       "own_ms": statistics.median(r["cpu_self"] for r in mine) / m * 1000,
                       "cache_ms": statistics.median(r["cpu_by"].get("cache", 0) for r in mine) / m * 1000}
        results.append(result)
    return results


def table(results: list[dict]) -> str:
    lines = ["| link | configuration | wall s | vs in-process | pair by pair: median (range) | "
             "ltowrap's own CPU a module ms | of it, `cache` ms |",
             "|---|---|---:|---:|---|---:|---:|"]
    modules = {r["project"]: r["modules"] for r in results if "modules" in r}
    for r in results:
        pairs = r["pairs"]
        own = f"{r['own_ms']:.3f}" if "own_ms" in r else ""
        cache = f"{r['cache_ms']:.3f}" if "cache_ms" in r else ""
        lines.append(f"| {r['project']} ({modules.get(r['project'], '')}) | {r['config']} | {r['wall']:.3f} | "
                     f"{r['vs_inproc']:.3f}x | {statistics.median(pairs):.3f}x ({pairs[0]:.2f}-{pairs[-1]:.2f}) | "
                     f"{own} | {cache} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", nargs="+", default=["lua", "redis", "synthetic"], choices=["lua", "redis", "synthetic"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--modules", type=int, default=400, help="modules of the synthetic link")
    p.add_argument("--baseline", type=Path, metavar="VENV",
                   help="also run the ltowrap installed in this venv (VENV/bin/ltowrap-clang), side by side")
    p.add_argument("--out", type=Path, default=BENCH / "out")
    a = p.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).astimezone()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ltowrap-hitlink-") as d:
        results = []
        for name in a.project:
            (Path(d) / name).mkdir()
            results += one_project(name, a, Path(d) / name)
    write_results(a.out, started, "hitlink", "Links of hits against a warm lld cache", load[0], table(results),
                  {"results": results}, note=f"; {a.reps} alternating rounds, medians")
    return 0


if __name__ == "__main__":
    sys.exit(main())
