"""The Linux kernel's vmlinux through ltowrap, against in-process ThinLTO and no LTO (issue 41).

    .venv/bin/python bench/kernel.py [--reps 1] [--link-reps 3] [--only plain thin link module] [--tree DIR]

Debian bookworm's linux, configured as integration/kernel.py says (x86_64 tinyconfig with
LTO_CLANG_THIN, ORC and so objtool, printk), built with Kbuild unchanged:
`make -j2 LLVM=-19 O=<fresh directory> vmlinux`, the same .config in each directory.

The whole build, once per mode and repetition, modes in rotating order:

  plain    LTO_NONE (the floor: no link-time work)
  thin     in-process ThinLTO (lld's own backends, as many threads as cores)
  link     ltowrap's shims first on PATH, sections = link, an empty cache
  module   the same with sections = module (each backend keeps its module's own sections)

For the ltowrap modes, vmlinux.o's link is read from LTOWRAP_LOG and split as the RFC splits
a build: front end (make's start to the link's), thin-link, backends, final link (ltowrap's
phases), and the rest (objtool, kallsyms, the final vmlinux link: the link's end to make's).
The link must have been distributed, every module through a backend: else the run stops.

Then the vmlinux.o link alone: Kbuild's own line (.vmlinux.o.cmd, without objtool) in the
`thin` and `link` builds' directories, in alternating pairs: in-process, and ltowrap cold
(an empty cache, the compiles' option records copied in, as bench/coldlink.py does), then
ltowrap warm (the same cache once more: the link memo's hit). Its floor is bench/coldlink.py's:
in-process + modules compiled x (one backend clang-19 on an empty module) / jobs. With
`--tree DIR` (a directory where an earlier run through the shims left DIR/build and its cache
DIR/cache) no build runs: the link alone is timed there, in-process and ltowrap on the same
vmlinux.a.

Writes bench/out/<date>-kernel.{json,md} (git ignores it). Everything else lives in a
temporary directory; the source is unpacked there once.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.coldlink import empty_backend_seconds  # noqa: E402
from bench.run import BENCH, SCRIPTS, clean_env, measure, write_results  # noqa: E402
from integration import kernel  # noqa: E402

MODES = ("plain", "thin", "link", "module")
LEAST_BACKENDS = 400  # vmlinux.a's modules alone, whatever lib.a gives


def shim_env(base: dict[str, str], cache: Path, sections: str) -> dict[str, str]:
    """The environment of a build through ltowrap's shims (and the venv's python for them)."""
    where = subprocess.run([str(SCRIPTS / "ltowrap"), "shims"], capture_output=True, text=True, check=True).stdout.strip()
    return base | {"PATH": f"{where}:{SCRIPTS}:{base['PATH']}", "LTOWRAP_CACHE_DIR": str(cache),
                   "LTOWRAP_LOG": str(cache / "links.jsonl"), "LTOWRAP_JOBS": str(kernel.JOBS),
                   "LTOWRAP_SECTIONS": sections}


def vmlinux_o_record(log: Path) -> dict:
    """The last record of vmlinux.o's link; it must be distributed, every module through a backend."""
    found = [r for r in (json.loads(x) for x in log.read_text().splitlines())
             if kernel.is_vmlinux_o_link(r["argv"])]
    if not found:
        raise RuntimeError(f"{log}: no vmlinux.o link")
    r = found[-1]
    if r["decision"] not in ("distributed", "restored"):
        raise RuntimeError(f"vmlinux.o was not distributed: {r['decision']} {r.get('reason')}: {r.get('detail')}")
    # lib.a's members the link does not pull in are modules of the link that need no backend.
    if r["decision"] == "distributed" and (r["backend_compiles"] + r["backend_hits"] != len(r["backends"])
                                           or len(r["backends"]) < LEAST_BACKENDS):
        raise RuntimeError(f"vmlinux.o: {r['modules']} modules, {len(r['backends'])} backends, "
                           f"{r['backend_compiles']} compiled, {r['backend_hits']} from the cache")
    return r


def stages(record: dict, make_start: float, make_end: float) -> dict[str, float]:
    phases: dict[str, float] = {}
    for name, start, end in record.get("spans", []):
        phases[name] = phases.get(name, 0.0) + end - start
    return {"front end": record["start"] - make_start, "thin-link": phases.get("thin-link", 0.0),
            "backends": phases.get("backends", 0.0), "final link": phases.get("final link", 0.0),
            "vmlinux.o link": record["end"] - record["start"], "after": make_end - record["end"]}


def build(mode: str, src: Path, tmp: Path, rep: int, base: dict[str, str]) -> dict:
    where = tmp / f"{mode}-{rep}"
    shutil.rmtree(where, ignore_errors=True)
    env = base if mode in ("plain", "thin") else shim_env(base, where / "cache", mode)
    kernel.configure(src, where / "build", lto=mode != "plain", env=env)
    t0 = time.time()
    run = measure(kernel.make_argv(where / "build", "vmlinux"), src, env, tmp / f"{mode}.out")
    t1 = time.time()
    row = {"mode": mode, "rep": rep, "wall": run.wall, "cpu": run.cpu, "rss_mib": run.rss_mib}
    if mode in ("link", "module"):
        r = vmlinux_o_record(where / "cache" / "links.jsonl")
        row |= {"modules": r["modules"], "compiled": r["backend_compiles"], "stages": stages(r, t0, t1),
                "ltowrap_cpu": r.get("cpu")}
    return row


def link_alone(thin: Path, lw: Path, tmp: Path, base: dict[str, str], reps: int) -> list[dict]:
    """vmlinux.o's link on its own, alternating in-process (in the build directory `thin`) and
    ltowrap (cold, then warm; in lw/build, with the option records of lw/cache)."""
    rows = []
    line = kernel.vmlinux_o_link(thin)
    records = lw / "cache" / "r"
    for rep in range(reps):
        for which in (("thin", "ltowrap") if rep % 2 == 0 else ("ltowrap", "thin")):
            if which == "thin":
                (thin / "vmlinux.o").unlink(missing_ok=True)
                run = measure(line, thin, base, tmp / "link.out")
                rows.append({"rep": rep, "config": "thin", "wall": run.wall, "cpu": run.cpu})
                continue
            cold = tmp / f"cold-{rep}"
            shutil.rmtree(cold, ignore_errors=True)
            cold.mkdir()
            if records.exists():
                shutil.copytree(records, cold / "r")
            env = shim_env(base, cold, "link")
            for state in ("cold", "warm"):
                (lw / "build" / "vmlinux.o").unlink(missing_ok=True)
                run = measure(line, lw / "build", env, tmp / "link.out")
                r = vmlinux_o_record(cold / "links.jsonl")
                rows.append({"rep": rep, "config": f"ltowrap {state}", "wall": run.wall, "cpu": run.cpu,
                             "decision": r["decision"], "ltowrap_cpu": r.get("cpu"),
                             "compiled": r["backend_compiles"]})
    return rows


def table(builds: list[dict], links: list[dict], unit: float | None) -> str:
    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    by = {m: [r for r in builds if r["mode"] == m] for m in MODES if any(r["mode"] == m for r in builds)}
    thin = med(by["thin"], "wall") if "thin" in by else None
    lines = ["| vmlinux build | wall s | vs in-process | CPU s | modules | backends compiled |",
             "|---|---:|---:|---:|---:|---:|"] if by else []
    for mode, rows in by.items():
        ratio = f"{med(rows, 'wall') / thin:.2f}x" if thin else "-"
        lines.append(f"| {mode} | {med(rows, 'wall'):.1f} | {ratio} | {med(rows, 'cpu'):.1f} | "
                     f"{rows[0].get('modules', '-')} | {rows[0].get('compiled', '-')} |")
    staged = {m: rows for m, rows in by.items() if "stages" in rows[0]}
    if staged:
        names = list(next(iter(staged.values()))[0]["stages"])
        lines += ["", "| stage (s) | " + " | ".join(staged) + " |", "|---|" + "---:|" * len(staged)]
        for n in names:
            lines.append(f"| {n} | " + " | ".join(f"{statistics.median(r['stages'][n] for r in rows):.2f}"
                                                  for rows in staged.values()) + " |")
    if links:
        lines += ["", "| vmlinux.o link alone | wall s | CPU s | vs in-process |", "|---|---:|---:|---:|"]
        inproc = statistics.median(r["wall"] for r in links if r["config"] == "thin")
        for config in ("thin", "ltowrap cold", "ltowrap warm"):
            rows = [r for r in links if r["config"] == config]
            lines.append(f"| {config} | {med(rows, 'wall'):.2f} | {med(rows, 'cpu'):.2f} | "
                         f"{med(rows, 'wall') / inproc:.2f}x |")
        if unit is not None:
            compiled = next(r["compiled"] for r in links if r["config"] == "ltowrap cold")
            floor = inproc + compiled * unit / kernel.JOBS
            cold = statistics.median(r["wall"] for r in links if r["config"] == "ltowrap cold")
            thin_by_rep = {r["rep"]: r["wall"] for r in links if r["config"] == "thin"}
            pairs = sorted(r["wall"] / (thin_by_rep[r["rep"]] + compiled * unit / kernel.JOBS)
                           for r in links if r["config"] == "ltowrap cold")
            lines += ["", f"Floor (bench/coldlink.py's): in-process {inproc:.2f} s + {compiled} modules x "
                      f"{1000 * unit:.1f} ms (one backend clang-{kernel.LLVM} on an empty module, median of 30) / "
                      f"{kernel.JOBS} = {floor:.2f} s; ltowrap cold {cold:.2f} s = {cold / floor:.3f}x the floor "
                      f"(pair by pair: {', '.join(f'{x:.3f}x' for x in pairs)})"]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=1, help="whole builds per mode")
    p.add_argument("--link-reps", type=int, default=3, help="pairs of the vmlinux.o link alone (0: none)")
    p.add_argument("--only", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--tree", type=Path, help="time the link alone in DIR/build with DIR/cache's records; no builds")
    p.add_argument("--out", type=Path, default=BENCH / "out")
    a = p.parse_args()
    if a.link_reps and not a.tree and not {"thin", "link"} <= set(a.only):
        p.error("the link alone needs the thin and link builds (or --tree)")
    started = datetime.datetime.now(datetime.timezone.utc).astimezone()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ltowrap-kernel-") as d:
        tmp = Path(d)
        base = clean_env(tmp)
        builds = []
        if a.tree:
            thin, lw = a.tree / "build", a.tree
        else:
            src = kernel.tree(tmp / "linux")
            for rep in range(a.reps):
                k = rep % len(a.only)
                for mode in a.only[k:] + a.only[:k]:
                    builds.append(build(mode, src, tmp, rep, base))
            thin, lw = tmp / "thin-0" / "build", tmp / "link-0"
        unit = empty_backend_seconds(tmp, llvm=Path(f"/usr/lib/llvm-{kernel.LLVM}/bin")) if a.link_reps else None
        links = link_alone(thin, lw, tmp, base, a.link_reps) if a.link_reps else []
    note = (f"; Linux {kernel.VERSION}, clang/lld {kernel.LLVM}, {a.reps} build(s) per mode, "
            f"{a.link_reps} link pair(s), medians")
    write_results(a.out, started, "kernel", "The kernel's vmlinux", load[0], table(builds, links, unit),
                  {"builds": builds, "links": links, "empty_backend": unit, "version": kernel.VERSION,
                   "llvm": kernel.LLVM, "config": kernel.CONFIG_FRAGMENT}, note=note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
