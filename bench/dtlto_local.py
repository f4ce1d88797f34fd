"""A local DTLTO distributor for lld: run the backend jobs of one link, N at a time.

lld (--thinlto-distributor=<python> --thinlto-distributor-arg=<this file> [...]) runs
`python dtlto_local.py [--jobs N] <job file>` in the link's directory. The JSON job file
holds `common.args` (the remote compiler and its shared options) and `jobs[i].args` (one
backend compile: bitcode input, -fthinlto-index=..., -o native object). Each job is
`common.args + jobs[i].args`; lld reads the outputs back once we exit 0.
Same schema as LLVM's llvm/utils/dtlto/local.py, which runs them with a thread pool.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def run_job(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return done.returncode, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("job_file")
    a = parser.parse_args()
    with open(a.job_file) as f:
        spec = json.load(f)
    common = spec["common"]["args"]
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(run_job, (common + job["args"] for job in spec["jobs"])))
    for rc, out in results:
        sys.stderr.write(out + (f"dtlto_local: backend compile exited {rc}\n" if rc else ""))
    return 1 if any(rc for rc, _ in results) else 0

if __name__ == "__main__":
    sys.exit(main())
