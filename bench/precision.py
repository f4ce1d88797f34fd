"""How many backends a one-file edit recompiles: ltowrap against lld's own ThinLTO cache.

For each edit (one source file each, applied alone to the built tree and then undone), the
same `make -j2` runs twice side by side: in-process ThinLTO with `--thinlto-cache-dir`,
and ltowrap. lld's figure is the number of new entries in its cache directory (one per
backend it compiled); ltowrap's is the number of backend compiles in LTOWRAP_LOG. Counts,
not times: the machine's load does not move them. Writes bench/out/<date>-precision.{json,md}.

    .venv/bin/python bench/precision.py                 # redis, five edits
    .venv/bin/python bench/precision.py --project lua
    .venv/bin/python bench/precision.py --project ninja   # ninja-build, its CMake build (C++)
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import BENCH, PROJECTS, Bench, clean_env, configs  # noqa: E402
from integration import debsrc  # noqa: E402

# File under the make directory, a line as it is and the line after the edit; or, with None for
# the line as it is, text appended to the file.
Edit = tuple[str, str | None, str]
EDITS: dict[str, list[Edit]] = {
    "redis": [("networking.c", "#define MAX_ACCEPTS_PER_CALL 1000", "#define MAX_ACCEPTS_PER_CALL 1001"),
              ("server.c", "#define CLIENTS_CRON_MIN_ITERATIONS 5", "#define CLIENTS_CRON_MIN_ITERATIONS 6"),
              ("sds.c", "#define SDS_LLSTR_SIZE 21", "#define SDS_LLSTR_SIZE 22"),
              # Named by 53 of redis-server's shards through declaration summaries only.
              ("bio.c", "#define REDIS_THREAD_STACK_SIZE (1024*1024*4)",
               "#define REDIS_THREAD_STACK_SIZE (1024*1024*5)"),
              # A new exported function that nothing calls (issue 24).
              ("networking.c", None, "\nint fp_edit_networking(int x) { return x * 12345 + 1; }\n")],
    "lua": [("lstrlib.c", "#define MAXCCALLS\t200", "#define MAXCCALLS\t201"),
            ("lvm.c", "#define MAXTAGLOOP\t2000", "#define MAXTAGLOOP\t2001"),
            # A new exported function that nothing calls (issue 24).
            ("lvm.c", None, "\nint fp_edit_lvm(int x) { return x * 12345 + 1; }\n"),
            ("lgc.c", "#define GCSWEEPMAX\t100", "#define GCSWEEPMAX\t101"),
            # Issue 26, per LLVM version (--only 'ltable.c (append)' 'lvm.c (append)' 'lstrlib.c (append)').
            ("ltable.c", None, "\nint fp_edit_ltable(int x) { return x * 12345 + 1; }\n"),
            ("lstrlib.c", None, "\nint fp_edit_lstrlib(int x) { return x * 12345 + 1; }\n")],
    "ninja": [("deps_log.cc", "const unsigned kMaxRecordSize = (1 << 19) - 1;",
               "const unsigned kMaxRecordSize = (1 << 19) - 2;"),
              ("util.cc", "  const int kMaxValidEditDistance = 3;", "  const int kMaxValidEditDistance = 4;"),
              # ninja.cc: main()'s own module (`-t targets`' default depth)
              ("ninja.cc", "  int depth = 1;", "  int depth = 2;"),
              # A new exported function that nothing calls (issue 24).
              ("graph.cc", None, "\nint fp_edit_graph(int x) { return x * 12345 + 1; }\n")],
}


def apply(path: Path, old: str | None, new: str) -> str:
    """Make the edit; returns the file's text before it."""
    before = path.read_text()
    if old is None:
        path.write_text(before + new)
        return before
    text, n = re.subn(rf"^{re.escape(old)}$", new.replace("\\", "\\\\"), before, flags=re.M)
    if n != 1:
        raise RuntimeError(f"{path}: expected one line {old!r}, found {n}")
    path.write_text(text)
    return before


def label(edit: Edit) -> str:
    return edit[0] if edit[1] is not None else f"{edit[0]} (append)"


def lld_entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir()} if cache.is_dir() else set()


def ltowrap_compiles(log: Path) -> int:
    return sum(json.loads(line).get("backend_compiles", 0) for line in log.read_text().splitlines() if line)


def measure(bench: Bench, edit: Edit, count: Callable[[Path], int], log: Path) -> int:
    src = bench.tree / bench.project.src_dir / edit[0]
    before = apply(src, edit[1], edit[2])
    try:
        bench.build(log=log)
        return count(log)
    finally:
        src.write_text(before)
        bench.build()  # back to the built tree, so the next edit starts from it


def git_head() -> str:
    """The commit measured (and whether the tree differed from it)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCH, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (" (modified)" if git("status", "--porcelain", "--", "..") else "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", choices=sorted(EDITS), default="redis")
    p.add_argument("--llvm", type=Path, default=Path("/usr/lib/llvm-22/bin"))
    p.add_argument("--out", type=Path, default=BENCH / "out")
    p.add_argument("--only", nargs="+", metavar="EDIT", help="only these edits (as the table names them)")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="work in DIR (which must not exist) and keep it: trees, caches, logs; with"
                        " LTOWRAP_DEBUG=1, so that `ltowrap explain` shows what went into each key")
    a = p.parse_args()
    project = PROJECTS[a.project]
    edits = [e for e in EDITS[a.project] if not a.only or label(e) in a.only]
    if not edits:
        p.error(f"no edit named {a.only}: {[label(e) for e in EDITS[a.project]]}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ltowrap-precision-") as scratch_name:
        scratch = Path(scratch_name)
        if a.keep:
            a.keep.mkdir(parents=True)
            scratch = a.keep.resolve()
        pkg = debsrc.fetch(project.package)
        pristine = pkg.unpack(scratch / "pristine")
        project.prepare(pristine)
        by_name = {c.name: c for c in configs(a.llvm / "clang", 2, scratch)}
        benches = {}
        for name in ("thin-cache", "ltowrap"):
            work = scratch / name
            tree = Path(shutil.copytree(pristine, work / "tree", symlinks=True))
            env = clean_env(work) | by_name[name].env | ({"LTOWRAP_DEBUG": "1"} if a.keep else {})
            benches[name] = Bench(project, by_name[name], tree, env, work / "make.out")
            benches[name].build()
        lld_cache = scratch / "lld-cache"
        for edit in edits:
            before = lld_entries(lld_cache)
            lld = measure(benches["thin-cache"], edit, lambda _: len(lld_entries(lld_cache) - before),
                          scratch / "thin.log")
            ours = measure(benches["ltowrap"], edit, ltowrap_compiles, scratch / f"ltowrap-{len(rows)}-{edit[0]}.jsonl")
            rows.append({"file": label(edit), "lld_new_entries": lld, "ltowrap_compiles": ours})
            print(f"{label(edit)}: lld cache {lld} new entries, ltowrap {ours} backend compiles", flush=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    a.out.mkdir(parents=True, exist_ok=True)
    info = {"command": " ".join(["python", *sys.argv]), "ltowrap": git_head(), "project": f"{pkg.name} {pkg.version}",
            "date": stamp}
    (a.out / f"{stamp}-precision.json").write_text(json.dumps(info | {"rows": rows}, indent=1) + "\n")
    md = ["| edited file | lld cache: new entries | ltowrap: backend compiles |", "| --- | ---: | ---: |"]
    md += [f"| `{r['file']}` | {r['lld_new_entries']} | {r['ltowrap_compiles']} |" for r in rows]
    (a.out / f"{stamp}-precision.md").write_text(f"`{info['command']}` ({info['project']}, {stamp})\n\n"
                                                 + "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
