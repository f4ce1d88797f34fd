"""`make -j2` of a project with several links: ltowrap under make's jobserver vs in-process ThinLTO.

    .venv/bin/python bench/multilink.py [--reps N] [--links N] [--modules N]

In-process ThinLTO cannot share make's job slots (lld rejects --thinlto-jobs=jobserver):
each of the links make runs at once starts its own threads, one per core by default.
ltowrap's backends take jobserver tokens, so the whole build stays within -j. Reports
the median wall time and the load: runnable tasks (procs_running in /proc/stat),
sampled every 20 ms, as mean and 95th percentile. The project is generated: N programs
of M modules of arithmetic-heavy C, whose links are `+` recipes (so make passes its
jobserver to them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SCRIPTS = Path(sys.executable).parent
CLANG = "/usr/lib/llvm-22/bin/clang"
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


def generate(root: Path, links: int, modules: int) -> None:
    rules = []
    for p in range(links):
        objs = [f"p{p}_main.o"]
        decls = "".join(f"double work_{p}_{k}(double);\n" for k in range(modules))
        calls = " + ".join(f"work_{p}_{k}(1.5)" for k in range(modules))
        (root / f"p{p}_main.c").write_text(f'#include <stdio.h>\n{decls}int main(void){{ printf("%f\\n", {calls}); return 0; }}\n')
        for k in range(modules):
            funcs = "".join(FUNCTION.format(p=p, k=k, i=i) for i in range(40))
            calls_k = " + ".join(f"f_{p}_{k}_{i}(x, {i + 20})" for i in range(40))
            (root / f"p{p}_m{k}.c").write_text(funcs + f"double work_{p}_{k}(double x) {{ return {calls_k}; }}\n")
            objs.append(f"p{p}_m{k}.o")
        rules.append(f"p{p}: {' '.join(objs)}\n\t+$(LINK) -o $@ $^\n")
    progs = " ".join(f"p{p}" for p in range(links))
    (root / "Makefile").write_text(f"all: {progs}\n" + "".join(rules) + "%.o: %.c\n\t$(CC) -O2 -flto=thin -c $< -o $@\n")


def sample_load(stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    out.append(int(line.split()[1]) - 1)  # less this sampler
        time.sleep(0.02)


def link_all(root: Path, link: str, env: dict) -> tuple[float, list[int]]:
    for p in root.glob("p*[0-9]"):
        if p.is_file() and os.access(p, os.X_OK):
            p.unlink()
    loads: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(stop, loads))
    sampler.start()
    t = time.perf_counter()
    subprocess.run(["make", "-s", "-j2", f"LINK={link}"], cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    stop.set()
    sampler.join()
    return wall, loads


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--links", type=int, default=4)
    ap.add_argument("--modules", type=int, default=12)
    a = ap.parse_args()
    configs = {
        "in-process ThinLTO (default threads)": f"{CLANG} -fuse-ld=lld -flto=thin",
        "ltowrap (jobserver)": f"{SCRIPTS / 'ltowrap-clang'} -fuse-ld=lld -flto=thin",
    }
    results: dict[str, list[tuple[float, list[int]]]] = {k: [] for k in configs}
    with tempfile.TemporaryDirectory(prefix="ltowrap-multilink-") as tmp:
        root = Path(tmp)
        generate(root, a.links, a.modules)
        env = {**os.environ, "CC": CLANG, "LTOWRAP_CLANG": CLANG}
        subprocess.run(["make", "-s", "-j2", "CC=" + CLANG, "LINK=true"], cwd=root, env=env, check=True)
        for rep in range(a.reps):
            order = list(configs) if rep % 2 == 0 else list(reversed(configs))
            for name in order:
                # A cold ltowrap cache each time: this measures scheduling, not caching.
                env["LTOWRAP_DIR"] = tempfile.mkdtemp(dir=tmp, prefix="cache-")
                results[name].append(link_all(root, configs[name], env))
    print(f"{a.links} links x {a.modules + 1} modules, make -j2, {os.cpu_count()} CPUs, {a.reps} reps (medians)\n")
    print("| configuration | wall s | runnable tasks, mean | runnable tasks, p95 |")
    print("|---|---:|---:|---:|")
    for name, runs in results.items():
        walls = [w for w, _ in runs]
        loads = sorted(x for _, ls in runs for x in ls) or [0]
        p95 = loads[int(0.95 * (len(loads) - 1))]
        print(f"| {name} | {statistics.median(walls):.2f} | {statistics.mean(loads):.2f} | {p95} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
