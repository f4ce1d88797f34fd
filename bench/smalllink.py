"""Small links (issue 40): configure-style probes through ltowrap against plain clang, and where
distributing a link starts to win.

    .venv/bin/python bench/smalllink.py [--pairs 21] [--configure xz-utils] [--configure-pairs 3]
                                        [--together] [--modules 1 2 4 8 16] [--no-crossover]

conftest   side-by-side pairs, order alternating (wall time, and the CPU time of the commands): a fresh one-line conftest.c (new text each
           time) compiled with `-O2 -flto=thin -c`, then linked with `-O2 -flto=thin
           -fuse-ld=lld`, both steps with CC=ltowrap-clang (LTOWRAP_CLANG=clang 22, default
           settings: small_link's default) and with plain clang 22. Medians and their ratio.
           Then the same in autoconf's form: `-c conftest.c` (no -o), then `-o conftest ...
           conftest.c` (compile and link in one command).
configure  autotools `./configure` of a Debian source package (integration/debsrc.py) with
           CFLAGS='-O2 -flto=thin' LDFLAGS='-flto=thin -fuse-ld=lld', CC=ltowrap-clang against
           CC=clang, side by side in fresh trees; config.h and config.status compared (the
           CC name they embed replaced by one placeholder). With --together each pair's two
           run at the same time, so that the load the rest of a shared machine adds weighs on
           both alike (configure runs one process at a time: on 2 cores each has one).
crossover  a synthetic program of N modules (bench/shardkey_cost.py's generator), linked with
           lld in-process (--thinlto-jobs=2) and through ltowrap (LTOWRAP_SMALL_LINK=0,
           LTOWRAP_JOBS=2): cold (empty cache), and after an edit of one module (warm cache,
           memo off: the backend cache's gain). Distributing wins where the edit's link through
           ltowrap beats in-process.

The installed ltowrap's modules are compiled to bytecode first, as pip does. Writes
bench/out/<date>-smalllink.{json,md} (raw dumps: not for git).
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import BENCH, SCRIPTS, clean_env, write_results  # noqa: E402
from bench.shardkey_cost import synthetic  # noqa: E402
from integration import debsrc  # noqa: E402

LLVM = Path("/usr/lib/llvm-22/bin")
CLANG = str(LLVM / "clang")
WRAPPER = str(SCRIPTS / "ltowrap-clang")


def children_cpu() -> float:
    """User+system seconds of every child waited for so far: the CPU a command took, which a
    shared machine's load does not inflate as it does wall time."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def conftest(tmp: Path, pairs: int, autoconf: bool = False) -> dict:
    """Median seconds of one configure-style compile-and-link, plain and through ltowrap.

    autoconf: the commands as autoconf writes them, AC_COMPILE_IFELSE (`-c conftest.c`, no -o)
    then AC_LINK_IFELSE (`-o conftest ... conftest.c`: compile and link in one command)."""
    env = clean_env(tmp) | {"LTOWRAP_CLANG": CLANG}
    samples: dict[str, list[float]] = {"plain": [], "ltowrap": []}
    cpu: dict[str, list[float]] = {"plain": [], "ltowrap": []}
    n = 0
    for i in range(pairs):
        for name in (("plain", "ltowrap") if i % 2 == 0 else ("ltowrap", "plain")):
            n += 1
            cc = CLANG if name == "plain" else WRAPPER
            (tmp / "conftest.c").write_text(f"int main(void) {{ return {n}; }}\n")
            c = children_cpu()
            if autoconf:
                t = timed([cc, "-c", "-O2", "-flto=thin", "conftest.c"], tmp, env)
                t += timed([cc, "-o", "conftest", "-O2", "-flto=thin", "-flto=thin", "-fuse-ld=lld", "conftest.c"], tmp, env)
            else:
                t = timed([cc, "-O2", "-flto=thin", "-c", "conftest.c", "-o", "conftest.o"], tmp, env)
                t += timed([cc, "-O2", "-flto=thin", "-fuse-ld=lld", "conftest.o", "-o", "conftest"], tmp, env)
            samples[name].append(round(t, 4))
            cpu[name].append(round(children_cpu() - c, 4))
    med = {k: statistics.median(v) for k, v in samples.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    return {"samples": samples, "median": med, "ratio": med["ltowrap"] / med["plain"], "cpu_samples": cpu,
            "cpu_median": cpu_med, "cpu_ratio": cpu_med["ltowrap"] / cpu_med["plain"]}


def together(runs: dict[str, tuple[list[str], Path, dict[str, str]]]) -> dict[str, tuple[float, float]]:
    """Run the commands at the same time: each one's wall seconds and CPU seconds (user+sys of its
    process tree, from wait4). Started together, they see the same load from the rest of the machine."""
    t = time.perf_counter()
    procs = {name: subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for name, (argv, cwd, env) in runs.items()}
    got = {}
    while procs:
        pid, status, usage = os.wait4(-1, 0)
        name = next(n for n, p in procs.items() if p.pid == pid)
        procs.pop(name).returncode = os.waitstatus_to_exitcode(status)
        if status:
            raise SystemExit(f"{name}: {runs[name][0]} failed")
        got[name] = (time.perf_counter() - t, usage.ru_utime + usage.ru_stime)
    return got


def configure(tmp: Path, package: str, pairs: int, at_once: bool = False) -> dict:
    """`./configure` wall time, plain and through ltowrap, and whether their results agree.

    at_once: each pair's two configures run at the same time, rather than one after the other."""
    source = debsrc.fetch(package)
    samples: dict[str, list[float]] = {"plain": [], "ltowrap": []}
    cpu: dict[str, list[float]] = {"plain": [], "ltowrap": []}
    differs: list[str] = []
    for i in range(pairs):
        trees = {}
        runs = {}
        for name in (("plain", "ltowrap") if i % 2 == 0 else ("ltowrap", "plain")):
            tree = source.unpack(tmp / f"{name}-{i}")
            env = clean_env(tmp / f"cache-{name}-{i}") | {"LTOWRAP_CLANG": CLANG}
            cc = CLANG if name == "plain" else WRAPPER
            argv = ["./configure", f"CC={cc}", "CFLAGS=-O2 -flto=thin", "LDFLAGS=-flto=thin -fuse-ld=lld"]
            trees[name] = (tree, cc)
            if at_once:
                runs[name] = (argv, tree, env)
                continue
            c = children_cpu()
            samples[name].append(round(timed(argv, tree, env), 3))
            cpu[name].append(round(children_cpu() - c, 3))
        for name, (wall, used) in together(runs).items() if runs else ():
            samples[name].append(round(wall, 3))
            cpu[name].append(round(used, 3))
        for f in ("config.h", "config.status"):
            texts = [(t / f).read_text(errors="replace").replace(cc, "@CC@").replace(str(t), "@TREE@")
                     for t, cc in trees.values()]
            if texts[0] != texts[1]:
                differs.append(f"{f} (pair {i})")
        for tree, _ in trees.values():
            shutil.rmtree(tree)
    med = {k: statistics.median(v) for k, v in samples.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    return {"package": f"{package} {source.version}", "samples": samples, "median": med,
            "ratio": med["ltowrap"] / med["plain"], "differs": differs, "cpu_samples": cpu, "cpu_median": cpu_med,
            "cpu_ratio": cpu_med["ltowrap"] / cpu_med["plain"]}


def crossover(tmp: Path, counts: list[int], reps: int) -> list[dict]:
    """Per module count: in-process link, ltowrap cold, ltowrap after a one-module edit (medians)."""
    rows = []
    for n in counts:
        d = tmp / f"syn{n}"
        d.mkdir()
        synthetic(d, n, LLVM)
        objects = ["main.o", *(f"m{i}.o" for i in range(n))]
        link = ["-O2", "-flto=thin", "-fuse-ld=lld", *objects, "-o", "prog"]
        got: dict[str, list[float]] = {"in-process": [], "cold": [], "edit": []}
        for r in range(reps):
            env = clean_env(tmp / f"cache{n}-{r}") | {"LTOWRAP_CLANG": CLANG, "LTOWRAP_JOBS": "2",
                                                     "LTOWRAP_SMALL_LINK": "0", "LTOWRAP_MEMO": "0"}
            got["in-process"].append(timed([CLANG, *link, "-Wl,--thinlto-jobs=2"], d, env))
            got["cold"].append(timed([WRAPPER, *link], d, env))
            (d / "m0.c").write_text((d / "m0.c").read_text() + f"int edit{r} = {r};\n")
            subprocess.run([CLANG, "-O2", "-flto=thin", "-c", "m0.c"], cwd=d, check=True)
            got["edit"].append(timed([WRAPPER, *link], d, env))
        rows.append({"modules": n, **{k: round(statistics.median(v), 4) for k, v in got.items()}, "samples": got})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--configure", default="xz-utils", help="a Debian source package with a configure script")
    ap.add_argument("--configure-pairs", type=int, default=3, help="0: leave configure out")
    ap.add_argument("--together", action="store_true",
                    help="each configure pair's two runs at the same time (the same load on both), not in turn")
    ap.add_argument("--modules", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    ap.add_argument("--reps", type=int, default=3, help="crossover repetitions per module count")
    ap.add_argument("--no-crossover", action="store_true")
    opts = ap.parse_args()
    compileall.compile_dir(str(Path(os.path.realpath(SCRIPTS.parent / "lib" / f"python{sys.version_info[0]}."
                                                    f"{sys.version_info[1]}" / "site-packages" / "ltowrap"))),
                           quiet=1)
    stamp, load = datetime.datetime.now(), os.getloadavg()[0]
    data: dict = {}
    lines = []
    with tempfile.TemporaryDirectory(prefix="smalllink-") as t:
        tmp = Path(t)
        (tmp / "conftest").mkdir()
        c = data["conftest"] = conftest(tmp / "conftest", opts.pairs)
        lines += [f"conftest compile+link, {opts.pairs} pairs: plain {c['median']['plain']:.3f} s, "
                  f"ltowrap {c['median']['ltowrap']:.3f} s, **{c['ratio']:.2f}x**; CPU (user+sys) "
                  f"{c['cpu_median']['plain']:.3f} s against {c['cpu_median']['ltowrap']:.3f} s, {c['cpu_ratio']:.2f}x", ""]
        a = data["conftest-autoconf"] = conftest(tmp / "conftest", opts.pairs, autoconf=True)
        lines += [f"conftest in autoconf's form (compile without -o, then compile-and-link), {opts.pairs} pairs: "
                  f"plain {a['median']['plain']:.3f} s, ltowrap {a['median']['ltowrap']:.3f} s, **{a['ratio']:.2f}x**; CPU "
                  f"{a['cpu_median']['plain']:.3f} s against {a['cpu_median']['ltowrap']:.3f} s, {a['cpu_ratio']:.2f}x", ""]
        if opts.configure_pairs:
            g = data["configure"] = configure(tmp, opts.configure, opts.configure_pairs, opts.together)
            lines += [f"`./configure` of {g['package']}, {opts.configure_pairs} pairs{' run together' if opts.together else ''}: plain {g['median']['plain']:.2f} s, "
                      f"ltowrap {g['median']['ltowrap']:.2f} s, **{g['ratio']:.2f}x** (CPU {g['cpu_median']['plain']:.2f} s "
                      f"against {g['cpu_median']['ltowrap']:.2f} s, {g['cpu_ratio']:.2f}x); config.h/config.status "
                      f"{'differ: ' + ', '.join(g['differs']) if g['differs'] else 'identical (CC name aside)'}", ""]
        if not opts.no_crossover:
            rows = data["crossover"] = crossover(tmp, opts.modules, opts.reps)
            lines += ["| modules | in-process | ltowrap cold | ltowrap after a one-module edit |", "|---|---|---|---|"]
            lines += [f"| {r['modules']} | {r['in-process']:.3f} | {r['cold']:.3f} | {r['edit']:.3f} |" for r in rows]
    write_results(BENCH / "out", stamp, "smalllink", "Small links", load, "\n".join(lines) + "\n", data)


if __name__ == "__main__":
    main()
