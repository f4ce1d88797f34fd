"""How many backends a one-file edit recompiles: ltowrap against lld's own ThinLTO cache.

For each edit (one source file each, applied alone to the built tree and then undone), the
same `make -j2` runs twice side by side: in-process ThinLTO with `--thinlto-cache-dir`,
and ltowrap. lld's figure is the number of new entries in its cache directory (one per
backend it compiled); ltowrap's is the number of backend compiles in LTOWRAP_LOG. Counts,
not times: the machine's load does not move them. Writes bench/results/<date>-precision.{json,md}.

    .venv/bin/python bench/precision.py                 # redis, four edits
    .venv/bin/python bench/precision.py --project lua
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import BENCH, PROJECTS, Bench, clean_env, configs  # noqa: E402
from integration import debsrc  # noqa: E402

Edit = tuple[str, str, str]  # file under the make directory, a line as it is, the line after the edit
EDITS: dict[str, list[Edit]] = {
    "redis": [("networking.c", "#define MAX_ACCEPTS_PER_CALL 1000", "#define MAX_ACCEPTS_PER_CALL 1001"),
              ("server.c", "#define CLIENTS_CRON_MIN_ITERATIONS 5", "#define CLIENTS_CRON_MIN_ITERATIONS 6"),
              ("sds.c", "#define SDS_LLSTR_SIZE 21", "#define SDS_LLSTR_SIZE 22"),
              # Named by 53 of redis-server's shards through declaration summaries only.
              ("bio.c", "#define REDIS_THREAD_STACK_SIZE (1024*1024*4)",
               "#define REDIS_THREAD_STACK_SIZE (1024*1024*5)")],
    "lua": [("lstrlib.c", "#define MAXCCALLS\t200", "#define MAXCCALLS\t201"),
            ("lvm.c", "#define MAXTAGLOOP\t2000", "#define MAXTAGLOOP\t2001"),
            ("lgc.c", "#define GCSWEEPMAX\t100", "#define GCSWEEPMAX\t101")],
}


def apply(path: Path, old: str, new: str) -> None:
    text, n = re.subn(rf"^{re.escape(old)}$", new.replace("\\", "\\\\"), path.read_text(), flags=re.M)
    if n != 1:
        raise RuntimeError(f"{path}: expected one line {old!r}, found {n}")
    path.write_text(text)


def lld_entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir()} if cache.is_dir() else set()


def ltowrap_compiles(log: Path) -> int:
    return sum(json.loads(line).get("backend_compiles", 0) for line in log.read_text().splitlines() if line)


def measure(bench: Bench, edit: Edit, count: Callable[[Path], int], log: Path) -> int:
    src = bench.tree / bench.project.make_dir / edit[0]
    apply(src, edit[1], edit[2])
    try:
        bench.build(log=log)
        return count(log)
    finally:
        apply(src, edit[2], edit[1])
        bench.build()  # back to the built tree, so the next edit starts from it


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", choices=sorted(EDITS), default="redis")
    p.add_argument("--llvm", type=Path, default=Path("/usr/lib/llvm-22/bin"))
    p.add_argument("--out", type=Path, default=BENCH / "results")
    a = p.parse_args()
    project = PROJECTS[a.project]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ltowrap-precision-") as scratch_name:
        scratch = Path(scratch_name)
        pkg = debsrc.fetch(project.package)
        pristine = pkg.unpack(scratch / "pristine")
        project.prepare(pristine)
        by_name = {c.name: c for c in configs(a.llvm / "clang", 2, scratch)}
        benches = {}
        for name in ("thin-cache", "ltowrap"):
            work = scratch / name
            tree = Path(shutil.copytree(pristine, work / "tree", symlinks=True))
            benches[name] = Bench(project, by_name[name], tree, clean_env(work) | by_name[name].env, work / "make.out")
            benches[name].build()
        lld_cache = scratch / "lld-cache"
        for edit in EDITS[a.project]:
            before = lld_entries(lld_cache)
            lld = measure(benches["thin-cache"], edit, lambda _: len(lld_entries(lld_cache) - before),
                          scratch / "thin.log")
            ours = measure(benches["ltowrap"], edit, ltowrap_compiles, scratch / f"ltowrap-{edit[0]}.jsonl")
            rows.append({"file": edit[0], "lld_new_entries": lld, "ltowrap_compiles": ours})
            print(f"{edit[0]}: lld cache {lld} new entries, ltowrap {ours} backend compiles", flush=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    a.out.mkdir(parents=True, exist_ok=True)
    info = {"command": " ".join(["python", *sys.argv]), "project": f"{pkg.name} {pkg.version}", "date": stamp}
    (a.out / f"{stamp}-precision.json").write_text(json.dumps(info | {"rows": rows}, indent=1) + "\n")
    md = ["| edited file | lld cache: new entries | ltowrap: backend compiles |", "| --- | ---: | ---: |"]
    md += [f"| `{r['file']}` | {r['lld_new_entries']} | {r['ltowrap_compiles']} |" for r in rows]
    (a.out / f"{stamp}-precision.md").write_text(f"`{info['command']}` ({info['project']}, {stamp})\n\n"
                                                 + "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
