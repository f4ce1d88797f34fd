"""What the shard fingerprint costs: time per shard of cachekey.shard_identity, as a link pays it.

One fresh cachekey.ModuleDigests per link (as pipeline.py makes one), so each module's
digest and interface are computed once and shared by the shards that name it. Measured
twice: cold (an empty cache: every interface parsed, as the first link of a tree pays) and
warm (interfaces from the cache's c/, as a relink after a one-file edit pays for all
modules but the edited one). Two sources of shards:
- `--synthetic N`: N modules calling each other (each calls two others and reads a global
  of a third), compiled with clang -O2 -flto=thin and thin-linked as ltowrap does
  (--thinlto-index-only, -import-declaration), in a temporary directory;
- `--dir D`: the *.thinlto.bc already beside their modules in D (a thin-link run there with
  --thinlto-index-only), module paths relative to D; shards of archive members are skipped.
Wall and CPU time (this process's) a shard; the reader that ran (LTOWRAP_NATIVE=0 forces the
Python one, and `-python` ends the file names). Writes
bench/out/<date>-shardkey-cost-{synthetic,dir}[-python].{json,md} with the load average.

    .venv/bin/python bench/shardkey_cost.py --synthetic 420
    .venv/bin/python bench/shardkey_cost.py --dir /path/to/redis/src --label redis-server
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ltowrap import cachekey  # noqa: E402
from ltowrap.cache import Cache  # noqa: E402
from ltowrap.formats import bitcode  # noqa: E402
from ltowrap.stats import Stats  # noqa: E402

BENCH = Path(__file__).resolve().parent


def synthetic(where: Path, n: int, llvm: Path) -> None:
    for i in range(n):
        j, k, v = (i + 1) % n, (i * 7 + 3) % n, (i * 13 + 5) % n
        (where / f"m{i}.c").write_text(
            f"extern int g{v}; int f{j}(int); int f{k}(int); int g{i} = {i};\n"
            f"static int h{i}(int x) {{ return x * {i + 3} + g{v}; }}\n"
            f"int f{i}(int x) {{ if (x <= 0) return g{i}; return f{j}(x - 1) + f{k}(x - 2) + h{i}(x); }}\n")
    (where / "main.c").write_text("int f0(int);\nint main(int c, char **v) { return f0(c) & 0x7f; }\n")
    names = ["main", *(f"m{i}" for i in range(n))]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda m: subprocess.run([str(llvm / "clang"), "-O2", "-flto=thin", "-c", f"{m}.c"],
                                               cwd=where, check=True), names))
    subprocess.run([str(llvm / "ld.lld"), "--thinlto-index-only", "-mllvm", "-import-declaration",
                    *(f"{m}.o" for m in names), "-o", "prog", "-e", "main"], cwd=where, check=True)


class Under(cachekey.ModuleDigests):
    """Module paths relative to the link's directory."""

    def __init__(self, cwd: Path, cache: Cache) -> None:
        super().__init__(cache=cache)
        self.cwd = cwd

    def __call__(self, path: str) -> str:
        return super().__call__(str(self.cwd / path))

    def interface(self, path: str) -> str:
        return super().interface(str(self.cwd / path))


def measure(where: Path) -> dict:
    shards = [(p, str(p.relative_to(where))[: -len(".thinlto.bc")]) for p in sorted(where.rglob("*.thinlto.bc"))]
    shards = [(p, m) for p, m in shards if "(" not in m and p.stat().st_size > 0]
    data = [(p.read_bytes(), m) for p, m in shards]
    with tempfile.TemporaryDirectory(prefix="ltowrap-shardcost-cache-") as d:
        cache = Cache(d, Stats())
        return {"cold": once(where, data, cache), "warm": once(where, data, cache)}


def once(where: Path, data: list[tuple[bytes, str]], cache: Cache) -> dict:
    digests = Under(where, cache)
    per: list[float] = []
    start, cpu = time.perf_counter(), time.process_time()
    declared = 0
    for shard, module in data:
        t = time.perf_counter()
        identity = cachekey.shard_identity(shard, digests, module)
        per.append(time.perf_counter() - t)
        declared += identity.startswith("shardkey:")
    total, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"shards": len(data), "canonical": declared, "modules_read": len(digests.read),
            "total_s": round(total, 3), "mean_ms": round(1000 * total / max(len(data), 1), 2),
            "cpu_mean_ms": round(1000 * cpu / max(len(data), 1), 2),
            "median_ms": round(1000 * statistics.median(per), 2) if per else 0,
            "max_ms": round(1000 * max(per), 2) if per else 0,
            "mean_shard_bytes": int(statistics.mean(len(s) for s, _ in data)) if data else 0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--synthetic", type=int, metavar="N")
    src.add_argument("--dir", type=Path)
    p.add_argument("--label", default="")
    p.add_argument("--llvm", type=Path, default=Path("/usr/lib/llvm-22/bin"))
    p.add_argument("--out", type=Path, default=BENCH / "out")
    a = p.parse_args()
    if a.synthetic:
        with tempfile.TemporaryDirectory(prefix="ltowrap-shardcost-") as d:
            synthetic(Path(d), a.synthetic, a.llvm)
            result = measure(Path(d))
        label = a.label or f"synthetic {a.synthetic + 1} modules"
    else:
        result = measure(a.dir)
        label = a.label or str(a.dir)
    load = os.getloadavg()
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    reader = bitcode.implementation()
    name = f"{stamp}-shardkey-cost-" + ("synthetic" if a.synthetic else "dir") + ("-python" if reader == "python" else "")
    info = {"command": " ".join(["python", *sys.argv]), "label": label, "date": stamp, "reader": reader,
            "loadavg": [round(x, 2) for x in load]} | result
    print(json.dumps(info, indent=1))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    rows = "".join(f"| {label} | {run} | {r['shards']} | {r['modules_read']} | {r['mean_ms']} | "
                   f"{r['median_ms']} | {r['max_ms']} | {r['cpu_mean_ms']} |\n" for run, r in result.items())
    (a.out / f"{name}.md").write_text(
        f"`{info['command']}` ({stamp}, {reader} bitcode reader, load average {info['loadavg'][0]} at the end)\n\n"
        "| link | cache | shards | modules read | mean ms/shard | median | max | mean CPU ms/shard |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
