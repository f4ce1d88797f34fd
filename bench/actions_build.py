"""What remote/action.py's Actions.build costs a job: this process's CPU time a job, over the shards of
a thin-link already run in a directory (`--dir D`: each *.o.thinlto.bc beside its module, the module
paths relative to D), built as one link's Actions builds them. A first pass reads every module (Files
keeps them, as a link does) and is not counted; then `--passes` passes, each building every job once;
the median pass is printed, and beside it the part the shard's paths take (bitcode.Strtab.of, then
relocate to the names Actions.build gives). `--tree` imports ltowrap from another checkout (its compiled
reader built in place): run alternately with this one, the same measure of two commits side by side.

    .venv/bin/python bench/actions_build.py --dir /tmp/c401
    .venv/bin/python bench/actions_build.py --dir /tmp/c401 --tree /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    p.add_argument("--passes", type=int, default=5)
    args = p.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from ltowrap import cachekey
    from ltowrap.formats import bitcode
    from ltowrap.remote import action
    from ltowrap.stages.backend import Job
    from ltowrap.stages.plan import Module

    os.chdir(args.dir)
    jobs = []
    for shard_path in sorted(Path(".").glob("*.o.thinlto.bc")):
        path = shard_path.name[: -len(".thinlto.bc")]
        data, shard = Path(path).read_bytes(), shard_path.read_bytes()
        if not shard:
            continue
        imports = tuple(sorted(set(bitcode.module_paths(shard)) - {path}))
        jobs.append(Job(Module(cachekey.digest_bytes(data), path, path, len(data)), shard, str(shard_path), imports,
                        path + ".native.o"))
    digests = {p: cachekey.digest_bytes(Path(p).read_bytes()) for p in {j.module.path for j in jobs} |
               {i for j in jobs for i in j.imports}}

    def argv_for(module: str, shard: str, output: str) -> list[str]:
        return ["/usr/bin/clang", "-O2", "-c", "-x", "ir", module, f"-fthinlto-index={shard}", "-o", output]

    actions = action.Actions(digests.__getitem__, action.Files(lambda p: Path(p).read_bytes()), {}, 600)
    for k, job in enumerate(jobs):  # every module read once, as a link's Files holds them
        actions.build(job, argv_for, f"key {k}")
    renames = {}  # each shard's paths as Actions.build names them: m/<rank>-<digest>.o
    for job in jobs:
        ranked = sorted(set(bitcode.module_paths(job.shard)))
        renames[job.shard_path] = {p: f"m/{rank:06d}-{digests[p]}.o" for rank, p in enumerate(ranked)}.__getitem__
    builds, strtabs = [], []
    for _ in range(args.passes):
        start = time.process_time()
        for k, job in enumerate(jobs):
            actions.build(job, argv_for, f"key {k}")
        builds.append((time.process_time() - start) / len(jobs))
        start = time.process_time()
        for job in jobs:
            bitcode.Strtab.of(job.shard).relocate(renames[job.shard_path])
        strtabs.append((time.process_time() - start) / len(jobs))
    print(json.dumps({"tree": str(Path(bitcode.__file__).parents[2]), "jobs": len(jobs),
                      "reader": bitcode.implementation(), "compiled Strtab": hasattr(bitcode._native, "strtab_relocate"),
                      "build ms a job": round(1000 * statistics.median(builds), 4),
                      "Strtab.of + relocate ms a job": round(1000 * statistics.median(strtabs), 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
