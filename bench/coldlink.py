"""Where a cold link's time goes, against in-process ThinLTO and the floor of distributing it.

    .venv/bin/python bench/coldlink.py [--project lua redis synthetic] [--reps 5] [--modules 400] [--python-reader] [--started-anew]
        [--baseline VENV] [--cache-on-tmpfs]

For each project the objects are built once through ltowrap (so every module has its option
record), and then, repetition by repetition and alternating, the main binary's link line runs:

  in-process  the same line with the real clang: lld's in-process ThinLTO, --thinlto-jobs=2
  ltowrap     the line through ltowrap, LTOWRAP_JOBS=2, on an empty cache (the records copied in)

The floor of a distributed link on this machine is in-process + modules x (one backend
clang on an empty module) / 2: a backend compile pays a process start that in-process
ThinLTO does not. Everything above it is ltowrap's own. (A backend forked from the link's
fork server, the default, pays less than that start, so a link can come in under the floor.) From LTOWRAP_LOG each ltowrap link
gives its phases (driver line, memo lookup, plan, thin-link, keys and cache lookups, backends,
final link, memo store), its CPU (ltowrap's own Python, and the tools it ran), ltowrap's own
CPU by what it was doing (the record's cpu.by: log.CpuLedger), the time between the
thin-link's end and the first backend's start, and the slot time left idle while compiles
were waiting to start.

The gap above the floor is then split by what caused it. On a machine whose cores the
backends keep busy, a second of CPU costs half a second of wall with 2 jobs, so:
  ltowrap's own      its own CPU / jobs (shard keys, side inputs, starting processes)
  the tools' excess  (the tools' CPU - in-process CPU - modules x the empty backend) / jobs:
                     what the backend clangs spend above lld's own backends and their
                     starts (each reads its shard and loads the modules it imports from)
  serial             the rest: where a core had nothing to do (the thin-link, the final
                     link, the last backend alone, idle slots)

With --python-reader a third configuration runs beside them: ltowrap with its pure-Python
bitcode reader (LTOWRAP_NATIVE=0), so that one run gives the compiled reader's gain. With
--started-anew, ltowrap with every backend clang started anew rather than forked from the
link's fork server (LTOWRAP_FORK_SERVER=0): the fork server's gain, in the tools' CPU. With
--baseline VENV, the ltowrap installed in another venv (an earlier commit's `pip install`), its
entry VENV/bin/ltowrap-clang: a change's gain against the code before it, in one run. With
--cache-on-tmpfs, ltowrap with its cache in /dev/shm (and the baseline too, with --baseline):
what creating the cache's files costs on the benchmark's own file system (each cold link
makes an inode or three a module), and a change's gain without that cost's swings. Each
run's cache is a directory of its own, removed with the rest at the end: removing one run's
thousands of files just before the next run makes the next run's file creation dearer on an
ext4 without a journal, which skips inodes deleted in the last minute or more, one by one.

Projects: `lua` (lua5.4's `lua`), `redis` (redis-server), `synthetic` (N small modules
calling each other, bench/shardkey_cost.py's generator). Writes bench/out/<date>-coldlink.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import BENCH, PROJECTS, SCRIPTS, Bench, Config, clean_env, measure, write_results  # noqa: E402
from bench.shardkey_cost import synthetic  # noqa: E402
from integration import debsrc  # noqa: E402
from ltowrap.log import Decision, Phase, Source, phase_seconds  # noqa: E402

JOBS = 2
LLVM = Path("/usr/lib/llvm-22/bin")


def empty_backend_seconds(tmp: Path, runs: int = 30, llvm: Path = LLVM) -> float:
    """The median wall time of one backend compile of an empty module (the process start), by `llvm`'s clang."""
    (tmp / "e.c").write_text("")
    subprocess.run([str(llvm / "clang"), "-O2", "-flto=thin", "-c", "e.c", "-o", "e.o"], cwd=tmp, check=True)
    subprocess.run([str(llvm / "ld.lld"), "--thinlto-index-only", "e.o", "-o", "e", "-e", "0"], cwd=tmp, check=True)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([str(llvm / "clang"), "-c", "-x", "ir", "e.o", "-fthinlto-index=e.o.thinlto.bc", "-O2",
                        "-o", "eo.o"], cwd=tmp, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def idle_slot_seconds(backends: list[dict], jobs: int) -> float:
    """Slot time left unused while some compile of the link had not started yet."""
    compiled = [b for b in backends if b["source"] == Source.COMPILED]
    if not compiled:
        return 0.0
    events = sorted([(b["start"], 1) for b in compiled] + [(b["end"], -1) for b in compiled])
    last_start = max(b["start"] for b in compiled)
    idle, running, t_prev = 0.0, 0, events[0][0]
    for t, step in events:
        if t_prev < last_start:
            idle += max(0, jobs - running) * (min(t, last_start) - t_prev)
        running += step
        t_prev = t
    return idle


def breakdown(record: dict, started: float) -> dict:
    """The link record's figures; `started`, when the link's process was started (time.time())."""
    spans = {name: round(seconds, 4) for name, seconds in phase_seconds(record).items()}
    thin_end = max((e for n, s, e in record.get("spans", []) if n == Phase.THIN_LINK), default=None)
    first = min((b["start"] for b in record["backends"] if b["source"] == Source.COMPILED), default=None)
    return {"wall": round(record["end"] - record["start"], 4), "phases": spans, "cpu": record.get("cpu"),
            "to_first_backend": round(first - thin_end, 4) if first is not None and thin_end is not None else None,
            "before_first_backend": round(first - started, 4) if first is not None else None,
            "idle_slot_seconds": round(idle_slot_seconds(record["backends"], record.get("jobs") or JOBS), 4),
            "modules": record["modules"], "compiled": record["backend_compiles"]}


def prepare_project(name: str, tmp: Path, modules: int) -> tuple[Path, str, dict[str, str]]:
    """(the directory the link line runs in, the link line, ltowrap's environment with its records)."""
    cache = tmp / "build-cache"
    env = clean_env(cache) | {"LTOWRAP_JOBS": str(JOBS), "LTOWRAP_CLANG": str(LLVM / "clang")}
    if name == "synthetic":
        where = tmp / "synthetic"
        where.mkdir()
        synthetic(where, modules, LLVM)  # compiled by clang itself: records come from the link's own flags
        objects = " ".join(["main.o", *(f"m{i}.o" for i in range(modules))])
        return where, f"{SCRIPTS / 'ltowrap-clang'} -O2 -fuse-ld=lld {objects} -o prog", env
    project = PROJECTS[name]
    tree = debsrc.fetch(project.package).unpack(tmp / project.package)
    project.prepare(tree)
    config = Config("ltowrap", str(SCRIPTS / "ltowrap-clang"), "-O2 -flto=thin", "-fuse-ld=lld")
    bench = Bench(project, config, tree, env, tmp / "build.out")
    bench.build()
    return tree / project.make_dir, bench.link_command(), env


def link_words(line: str) -> list[str]:
    """A prepared project's link line (prepare_project) as words, the link alone, from its compiler
    on: redis's recipe prints its own banner first (`printf ... 1>&2;cc ...`)."""
    words = shlex.split(line)
    return [str(SCRIPTS / "ltowrap-clang"), *words[1 + next(i for i, w in enumerate(words) if w.endswith("ltowrap-clang")):]]


def one_project(name: str, a: argparse.Namespace, tmp: Path, floor_unit: float, shm: Path | None) -> list[dict]:
    """One project's rows: `tmp` is its directory, `shm` its directory on tmpfs (--cache-on-tmpfs)."""
    where, line, env = prepare_project(name, tmp, a.modules)
    words = link_words(line)
    inproc = [str(LLVM / "clang"), *words[1:], f"-Wl,--thinlto-jobs={JOBS}"]
    # lld's index-only thin-link alone, its shards written aside: what ltowrap's own time before
    # the first backend is set against (it runs one such thin-link itself).
    shards = tmp / "index-only"
    index_only = [*inproc, f"-Wl,--thinlto-index-only={tmp / 'index-only.txt'}",
                  f"-Wl,--thinlto-prefix-replace=;{shards}/"]
    output = tmp / f"{name}.out"
    rows = []
    variants = {"ltowrap": {}, **({"ltowrap, Python reader": {"LTOWRAP_NATIVE": "0"}} if a.python_reader else {}),
                **({"ltowrap, started anew": {"LTOWRAP_FORK_SERVER": "0"}} if a.started_anew else {}),
                **({"ltowrap, baseline": {}} if a.baseline else {}),
                **({"ltowrap, cache on tmpfs": {}} if shm is not None else {}),
                **({"ltowrap, baseline, cache on tmpfs": {}} if shm is not None and a.baseline else {})}
    baseline = str(a.baseline / "bin" / "ltowrap-clang") if a.baseline else ""
    entries = {"ltowrap, baseline": baseline, "ltowrap, baseline, cache on tmpfs": baseline} if a.baseline else {}
    roots = {"ltowrap, cache on tmpfs": shm, "ltowrap, baseline, cache on tmpfs": shm} if shm is not None else {}
    configs = ["inproc", *variants]
    for rep in range(a.reps):
        for which in configs[rep % len(configs):] + configs[:rep % len(configs)]:
            out = words[words.index("-o") + 1]
            (where / out).unlink(missing_ok=True)
            if which == "inproc":
                run = measure(inproc, where, env, output)
                index = measure(index_only, where, env, output)
                rows.append({"rep": rep, "config": which, "wall": run.wall, "cpu": run.cpu, "index_only": index.wall})
                continue
            cold = roots.get(which, tmp) / f"cold-{rep}-{configs.index(which)}"
            cold.mkdir()
            records = Path(env["LTOWRAP_CACHE_DIR"]) / "r"
            if records.exists():
                shutil.copytree(records, cold / "r")
            log = tmp / f"{name}-{rep}.log"
            run = measure([entries.get(which, words[0]), *words[1:]], where,
                          env | variants[which] | {"LTOWRAP_CACHE_DIR": str(cold), "LTOWRAP_LOG": str(log)}, output)
            record = [json.loads(x) for x in log.read_text().splitlines()][-1]
            if record["decision"] != Decision.DISTRIBUTED:
                raise RuntimeError(f"{name}: the link was not distributed: {record.get('detail')}")
            rows.append({"rep": rep, "config": which, "wall": run.wall, "cpu": run.cpu, **breakdown(record, run.started)})
    return [summary(f"{name} ({which})" if which != "ltowrap" else name, rows, which, floor_unit) for which in variants]


def summary(label: str, rows: list[dict], which: str, floor_unit: float) -> dict:
    """One ltowrap variant's medians against the in-process runs beside it."""
    modules = next(r["modules"] for r in rows if r["config"] == which)
    inproc_wall = statistics.median(r["wall"] for r in rows if r["config"] == "inproc")
    ltowrap_rows = [r for r in rows if r["config"] == which]
    floor = inproc_wall + modules * floor_unit / JOBS
    phases = sorted({p for r in ltowrap_rows for p in r["phases"]})
    return {"project": label, "modules": modules, "inproc": inproc_wall,
            "ltowrap": statistics.median(r["wall"] for r in ltowrap_rows), "floor": floor,
            "phases": {p: statistics.median(r["phases"].get(p, 0) for r in ltowrap_rows) for p in phases},
            "to_first_backend": statistics.median(r["to_first_backend"] or 0 for r in ltowrap_rows),
            "before_first_backend": statistics.median(r["before_first_backend"] or 0 for r in ltowrap_rows),
            "index_only": statistics.median(r["index_only"] for r in rows if r["config"] == "inproc"),
            "idle_slot_seconds": statistics.median(r["idle_slot_seconds"] for r in ltowrap_rows),
            "cpu_self": statistics.median((r["cpu"] or {}).get("self", 0) for r in ltowrap_rows),
            "cpu_children": statistics.median((r["cpu"] or {}).get("children", 0) for r in ltowrap_rows),
            "cpu_by": {h: statistics.median(((r["cpu"] or {}).get("by") or {}).get(h, 0) for r in ltowrap_rows)
                       for h in sorted({h for r in ltowrap_rows for h in ((r["cpu"] or {}).get("by") or {})})},
            "inproc_cpu": statistics.median(r["cpu"] for r in rows if r["config"] == "inproc"),
            "pair_ratios": pair_ratios(rows, which, modules, floor_unit),
            "samples": [r for r in rows if r["config"] in ("inproc", which)]}


def pair_ratios(rows: list[dict], which: str, modules: int, floor_unit: float) -> list[float]:
    """Each pair's ltowrap wall over the floor of its own in-process run: this machine's speed
    drifts by a fifth from minute to minute (a shared host), a pair's two runs less."""
    inproc = {r["rep"]: r["wall"] for r in rows if r["config"] == "inproc"}
    return sorted(r["wall"] / (inproc[r["rep"]] + modules * floor_unit / JOBS) for r in rows
                  if r["config"] == which and r["rep"] in inproc)


def gap(r: dict, floor_unit: float) -> dict[str, float]:
    """The wall seconds above the floor, by cause (the module docstring)."""
    python = r["cpu_self"] / JOBS
    tools = (r["cpu_children"] - r["inproc_cpu"] - r["modules"] * floor_unit) / JOBS
    over = r["ltowrap"] - r["floor"]
    return {"over": over, "python": python, "tools": tools, "serial": over - python - tools}


def table(results: list[dict], floor_unit: float) -> str:
    lines = [f"empty-module backend: {1000 * floor_unit:.1f} ms (median of 30); floor = in-process + "
             f"modules x that / {JOBS}", "",
             "| link | modules | in-process s | floor s | ltowrap s | vs floor | thin-link end -> first backend s "
             "| idle slot s | ltowrap's own CPU s | its CPU a module ms | tools' CPU s "
             "| vs floor pair by pair: median (range) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        pairs = r["pair_ratios"]
        lines.append(f"| {r['project']} | {r['modules']} | {r['inproc']:.2f} | {r['floor']:.2f} | {r['ltowrap']:.2f} | "
                     f"{r['ltowrap'] / r['floor']:.3f}x | {r['to_first_backend']:.2f} | {r['idle_slot_seconds']:.2f} | "
                     f"{r['cpu_self']:.2f} | {1000 * r['cpu_self'] / r['modules']:.1f} | {r['cpu_children']:.2f} | "
                     f"{statistics.median(pairs):.3f}x "
                     f"({pairs[0]:.2f}-{pairs[-1]:.2f}) |")
    lines += ["", "The seconds above the floor, by cause (medians; see bench/coldlink.py):", "",
              "| link | above the floor s | ltowrap's own CPU / jobs s | tools' CPU above in-process and starts / jobs s "
              "| serial (the rest) s |", "|---|---:|---:|---:|---:|"]
    for r in results:
        g = gap(r, floor_unit)
        lines.append(f"| {r['project']} | {g['over']:.2f} | {g['python']:.2f} | {g['tools']:.2f} | {g['serial']:.2f} |")
    lines += ["", "ltowrap's own CPU by what it was doing (the log's cpu.by, medians), ms a module; `start` "
              "(the interpreter, imports, the driver's link line) and `imports` are paid once a link:", ""]
    headings = sorted({h for r in results for h in r["cpu_by"]}, key=lambda h: -max(r["cpu_by"].get(h, 0) for r in results))
    lines += ["| heading | " + " | ".join(r["project"] for r in results) + " |",
              "|---|" + "---:|" * len(results)]
    for h in headings:
        lines.append(f"| {h} | " + " | ".join(f"{1000 * r['cpu_by'].get(h, 0) / r['modules']:.2f}" for r in results) + " |")
    once = ("start", "imports")
    lines.append("| **a module, less `start` and `imports`** | " + " | ".join(
        f"**{1000 * (r['cpu_self'] - sum(r['cpu_by'].get(h, 0) for h in once)) / r['modules']:.2f}**"
        for r in results) + " |")
    lines += ["", "Before the first backend (medians, s): from the link's start (its driver) to the first backend "
              "compile, against lld's index-only thin-link run alone through the same driver line:", "",
              "| link | ltowrap, to the first backend | lld's index-only thin-link | ltowrap's own beyond it |",
              "|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['project']} | {r['before_first_backend']:.3f} | {r['index_only']:.3f} | "
                     f"{r['before_first_backend'] - r['index_only']:.3f} |")
    lines += ["", "Phases (medians, s):", ""]
    for r in results:
        lines.append(f"- {r['project']}: " + ", ".join(f"{p} {v:.2f}" for p, v in r["phases"].items()))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", nargs="+", default=["lua", "redis", "synthetic"],
                   choices=["lua", "redis", "synthetic"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--modules", type=int, default=400, help="modules of the synthetic link")
    p.add_argument("--python-reader", action="store_true",
                   help="also run ltowrap with the pure-Python bitcode reader (LTOWRAP_NATIVE=0), side by side")
    p.add_argument("--started-anew", action="store_true",
                   help="also run ltowrap with every backend clang started anew (LTOWRAP_FORK_SERVER=0), side by side")
    p.add_argument("--baseline", type=Path, metavar="VENV",
                   help="also run the ltowrap installed in this venv (VENV/bin/ltowrap-clang), side by side")
    p.add_argument("--cache-on-tmpfs", action="store_true",
                   help="also run ltowrap (and the baseline) with its cache in /dev/shm, side by side")
    p.add_argument("--out", type=Path, default=BENCH / "out")
    a = p.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).astimezone()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ltowrap-coldlink-") as d, \
            tempfile.TemporaryDirectory(prefix="ltowrap-coldlink-", dir="/dev/shm") as shm:
        tmp = Path(d)
        unit = empty_backend_seconds(tmp)
        results = []
        for name in a.project:
            for root in (tmp, Path(shm)):
                (root / name).mkdir()
            results += one_project(name, a, tmp / name, unit, Path(shm) / name if a.cache_on_tmpfs else None)
    write_results(a.out, started, "coldlink", "Cold links against their floor", load[0], table(results, unit),
                  {"empty_backend": unit, "results": results}, note=f"; {a.reps} alternating pairs, medians")
    return 0


if __name__ == "__main__":
    sys.exit(main())
