"""Several links at once: ltowrap's slot pool and claims vs in-process ThinLTO.

    .venv/bin/python bench/multilink.py [--reps N] [--links N] [--modules N]
                                        [--lib-programs N] [--lib-modules N] [--only NAME...]

1. `links`: N programs of M modules of arithmetic-heavy C, linked under `make -j2` with
   recipes *not* marked `+` (as in almost every Makefile: make 4.3 then gives them no
   jobserver), under `make -j2` with `+` recipes (make's jobserver), and under
   `ninja -j2`. In-process ThinLTO cannot share anyone's job slots (lld rejects
   --thinlto-jobs=jobserver): each link make runs starts its own threads, one per core.
   ltowrap's backends take a slot of the machine's pool (or a jobserver token), so the
   build stays within the machine. Reports the median wall time and the load: runnable
   tasks (procs_running in /proc/stat, less this sampler), sampled every 20 ms, as mean
   and 95th percentile; and the floor of distributing the links on this machine: the
   in-process wall time + every module x one backend clang on an empty module / 2
   (bench/coldlink.py's floor, summed over the links). Goal: within 5 % of that floor.
2. `shared-lib`: P programs that each link one static library of L bitcode members (plus
   their own main), under `make -j2` with unmarked recipes, cold cache: the backends
   ltowrap compiled in total against the distinct keys it stored (the difference is
   duplicate compiles: goal 0), the waits for another link's compile, and the wall time
   against in-process ThinLTO.

The load figures are machine-wide: run on a quiet machine for figures to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.coldlink import empty_backend_seconds  # noqa: E402

SCRIPTS = Path(sys.executable).parent
LLVM = Path("/usr/lib/llvm-22/bin")
CLANG = str(LLVM / "clang")
FUNCTION = """
double f_{p}_{k}_{i}(double x, int n) {{
    double s = 0, v[16];
    for (int j = 0; j < 16; j++) v[j] = x * (j + {i}) - n;
    for (int j = 0; j < n; j++) {{
        switch ((j + {i}) % 5) {{
        case 0: s += v[j % 16] * {k}; break;
        case 1: s -= v[(j * 7) % 16] / (j + 1); break;
        case 2: s *= 1.0001; break;
        case 3: v[j % 16] = s + j; break;
        default: s += (j ^ {i}) * 0.5;
        }}
    }}
    return s;
}}
"""
COMPILE_RULE = "%.o: %.c\n\t$(CC) -O2 -flto=thin -c $< -o $@\n"


def module(root: Path, p: str, k: int) -> str:
    """p_m<k>.c: 40 functions and work_<p>_<k>, which calls them; returns the object's name."""
    funcs = "".join(FUNCTION.format(p=p, k=k, i=i) for i in range(40))
    calls = " + ".join(f"f_{p}_{k}_{i}(x, {i + 20})" for i in range(40))
    (root / f"{p}_m{k}.c").write_text(funcs + f"double work_{p}_{k}(double x) {{ return {calls}; }}\n")
    return f"{p}_m{k}.o"


def main_of(root: Path, p: str, works: list[str]) -> str:
    decls = "".join(f"double {w}(double);\n" for w in works)
    calls = " + ".join(f"{w}(1.5)" for w in works)
    (root / f"{p}_main.c").write_text(f'#include <stdio.h>\n{decls}int main(void){{ printf("%f\\n", {calls}); return 0; }}\n')
    return f"{p}_main.o"


def generate_links(root: Path, links: int, modules: int) -> list[str]:
    """N independent programs; a Makefile whose link recipe is `$(PLUS)$(LINK)`; returns the programs."""
    progs, rules, objs_all = [], [], []
    for n in range(links):
        p = f"p{n}"
        objs = [main_of(root, p, [f"work_{p}_{k}" for k in range(modules)])]
        objs += [module(root, p, k) for k in range(modules)]
        rules.append(f"{p}: {' '.join(objs)}\n\t$(PLUS)$(LINK) -o $@ $^\n")
        progs.append(p)
        objs_all += objs
    (root / "Makefile").write_text(f"all: {' '.join(progs)}\nobjs: {' '.join(objs_all)}\n" + "".join(rules) + COMPILE_RULE)
    return progs


def generate_shared_lib(root: Path, programs: int, lib_modules: int) -> list[str]:
    """P programs that each use every member of one static library of bitcode."""
    lib = [module(root, "lib", k) for k in range(lib_modules)]
    works = [f"work_lib_{k}" for k in range(lib_modules)]
    progs, rules, mains = [], [], []
    for n in range(programs):
        p = f"prog{n}"
        mains.append(main_of(root, p, works))
        rules.append(f"{p}: {p}_main.o libshared.a\n\t$(LINK) -o $@ $^\n")
        progs.append(p)
    (root / "Makefile").write_text(
        f"all: {' '.join(progs)}\nobjs: libshared.a {' '.join(mains)}\n"
        f"libshared.a: {' '.join(lib)}\n\trm -f $@ && {LLVM / 'llvm-ar'} rcs $@ $^\n" + "".join(rules) + COMPILE_RULE)
    return progs


def write_ninja(root: Path, progs: list[str], link: str) -> None:
    makefile = (root / "Makefile").read_text().splitlines()
    builds = []
    for p in progs:
        deps = next(line for line in makefile if line.startswith(f"{p}:")).split(":", 1)[1].split()
        builds.append(f"build {p}: link {' '.join(deps)}\n")
    (root / "build.ninja").write_text(f"rule link\n  command = {link} -o $out $in\n" + "".join(builds))


def sample_load(stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    out.append(int(line.split()[1]) - 1)  # less this sampler
        time.sleep(0.02)


def link_all(root: Path, progs: list[str], tool: str, link: str, plus: bool, env: dict) -> tuple[float, list[int]]:
    for p in progs:
        (root / p).unlink(missing_ok=True)
    if tool == "ninja":
        write_ninja(root, progs, link)
        argv = ["ninja", "-j2"]
    else:
        argv = ["make", "-s", "-j2", f"LINK={link}", f"PLUS={'+' if plus else ''}"]
    loads: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(stop, loads))
    sampler.start()
    t = time.perf_counter()
    subprocess.run(argv, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    stop.set()
    sampler.join()
    return wall, loads


IN_PROCESS = f"{CLANG} -fuse-ld=lld -flto=thin"
LTOWRAP = f"{SCRIPTS / 'ltowrap-clang'} -fuse-ld=lld -flto=thin"


def prepare(root: Path, generate: Callable[[Path], list[str]]) -> tuple[list[str], dict[str, str]]:
    """Generate the project in `root` and compile its objects: (programs, environment)."""
    root.mkdir()
    progs = generate(root)
    env = {**os.environ, "CC": CLANG, "LTOWRAP_CLANG": CLANG}
    subprocess.run(["make", "-s", "-j2", "objs"], cwd=root, env=env, check=True)
    return progs, env


def bench_links(a: argparse.Namespace, tmp: Path) -> None:
    root = tmp / "links"
    progs, env = prepare(root, lambda r: generate_links(r, a.links, a.modules))
    configs = {  # name -> (tool, link command, '+' recipes)
        "make -j2, unmarked: in-process ThinLTO": ("make", IN_PROCESS, False),
        "make -j2, unmarked: ltowrap (slot pool)": ("make", LTOWRAP, False),
        "make -j2, '+' recipes: ltowrap (make's jobserver)": ("make", LTOWRAP, True),
        "ninja -j2: in-process ThinLTO": ("ninja", IN_PROCESS, False),
        "ninja -j2: ltowrap (slot pool)": ("ninja", LTOWRAP, False),
    }
    results: dict[str, list[tuple[float, list[int]]]] = {k: [] for k in configs}
    for rep in range(a.reps):
        for name in (list(configs) if rep % 2 == 0 else list(reversed(configs))):
            # A cold ltowrap cache each time: this measures scheduling, not caching.
            env["LTOWRAP_CACHE_DIR"] = tempfile.mkdtemp(dir=tmp, prefix="cache-")
            tool, link, plus = configs[name]
            results[name].append(link_all(root, progs, tool, link, plus, env))
    unit = empty_backend_seconds(tmp)
    spawns = a.links * (a.modules + 1) * unit / 2
    print(f"## {a.links} links x {a.modules + 1} modules, {os.cpu_count()} CPUs, {a.reps} reps (medians)\n")
    print(f"Empty-module backend {1000 * unit:.1f} ms (median of 30): the floor is the in-process wall time + "
          f"{a.links * (a.modules + 1)} modules x that / 2 = + {spawns:.2f} s\n")
    print("| configuration | wall s | vs in-process | vs floor | runnable tasks, mean | runnable tasks, p95 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        walls = [w for w, _ in runs]
        loads = sorted(x for _, ls in runs for x in ls) or [0]
        anchor = f"{name.split(':')[0]}: in-process ThinLTO"
        anchor = anchor if anchor in results else "make -j2, unmarked: in-process ThinLTO"
        inproc = statistics.median(w for w, _ in results[anchor])
        ratio = statistics.median(walls) / inproc
        floor = statistics.median(walls) / (inproc + spawns)
        p95 = loads[int(0.95 * (len(loads) - 1))]
        print(f"| {name} | {statistics.median(walls):.2f} | {ratio:.2f}x | {floor:.3f}x | {statistics.mean(loads):.2f} "
              f"| {p95} |")
    print()


def cache_objects(cache: Path) -> int:
    return sum(1 for p in (cache / "o").rglob("*") if p.is_file() and not p.name.endswith(".key.txt"))


def bench_shared_lib(a: argparse.Namespace, tmp: Path) -> None:
    root = tmp / "shared-lib"
    progs, env = prepare(root, lambda r: generate_shared_lib(r, a.lib_programs, a.lib_modules))
    rows: dict[str, list[dict]] = {"in-process ThinLTO": [], "ltowrap": []}
    for rep in range(a.reps):
        for name in (list(rows) if rep % 2 == 0 else list(reversed(rows))):
            cache = Path(tempfile.mkdtemp(dir=tmp, prefix="cache-"))
            log = cache.with_suffix(".log")
            env.update(LTOWRAP_CACHE_DIR=str(cache), LTOWRAP_LOG=str(log))
            wall, loads = link_all(root, progs, "make", IN_PROCESS if name.startswith("in-") else LTOWRAP, False, env)
            row = {"wall": wall, "load": statistics.mean(loads) if loads else 0.0}
            if name == "ltowrap":
                recs = [json.loads(line) for line in log.read_text().splitlines()]
                row |= {"jobs": sum(r["modules"] for r in recs), "compiled": sum(r["backend_compiles"] for r in recs),
                        "distinct": cache_objects(cache), "waits": sum(r.get("backend_waits", 0) for r in recs)}
            rows[name].append(row)
    anchor = statistics.median(r["wall"] for r in rows["in-process ThinLTO"])
    print(f"## {a.lib_programs} programs x one static library of {a.lib_modules} members, make -j2 (unmarked), "
          f"cold cache, {a.reps} reps (medians)\n")
    print("| configuration | wall s | vs in-process | runnable tasks, mean | backend jobs | compiled | distinct keys |"
          " duplicates | waits |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in rows.items():
        wall = statistics.median(r["wall"] for r in runs)
        cells = [f"{wall:.2f}", f"{wall / anchor:.2f}x", f"{statistics.median(r['load'] for r in runs):.2f}"]
        if name == "ltowrap":
            med = {k: statistics.median(r[k] for r in runs) for k in ("jobs", "compiled", "distinct", "waits")}
            cells += [f"{med['jobs']:.0f}", f"{med['compiled']:.0f}", f"{med['distinct']:.0f}",
                      f"{max(r['compiled'] - r['distinct'] for r in runs)} (worst rep)", f"{med['waits']:.0f}"]
        else:
            cells += [""] * 5
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--links", type=int, default=4)
    ap.add_argument("--modules", type=int, default=12)
    ap.add_argument("--lib-programs", type=int, default=4)
    ap.add_argument("--lib-modules", type=int, default=16)
    ap.add_argument("--only", nargs="*", choices=["links", "shared-lib"], default=["links", "shared-lib"])
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average at the start: {f.read().split()[0]}\n")
    with tempfile.TemporaryDirectory(prefix="ltowrap-multilink-") as tmp:
        if "links" in a.only:
            bench_links(a, Path(tmp))
        if "shared-lib" in a.only:
            bench_shared_lib(a, Path(tmp))
    with open("/proc/loadavg") as f:
        print(f"load average at the end: {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
