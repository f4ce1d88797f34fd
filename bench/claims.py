"""ltowrap's own CPU and system calls per claim taken and let go (locks.Claims), each on a new key.

    .venv/bin/python bench/claims.py [--claims 2000] [--dir D] [--tree T]

A cold link takes two claims per backend job (its content's, then its key's: jobs/store.py),
each on a name no process has claimed before, and lets both go once the object is stored.
This takes `--claims` such claims in that order (a job's two, then the next job's), each let
go after its pair, uncontended, in a lock directory under `--dir` (by default a fresh one in
the current directory: the file system a cache on it would use), and prints the process's
CPU (time.process_time) per claim taken and let go. Run it under `strace -c -f` for the
system calls. `--tree` imports ltowrap from another checkout, for an A/B of two versions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=2000)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--tree", help="a checkout to import ltowrap from")
    a = ap.parse_args()
    if a.tree:
        sys.path.insert(0, a.tree)
    from ltowrap import locks

    root = tempfile.mkdtemp(prefix="claims-bench-", dir=a.dir)
    try:
        claims = locks.Claims(locks.LockDir(os.path.join(root, "locks")))
        assert claims.try_claim("o", "warm-up")  # the directory made, the modules loaded
        claims.release("o", "warm-up")
        keys = [f"{n:064x}" for n in range(a.claims // 2)]
        start = time.process_time()
        for key in keys:
            assert claims.try_claim("e", key) and claims.try_claim("o", key)
            claims.release("o", key)
            claims.release("e", key)
        cpu = time.process_time() - start
        print(f"{cpu / (2 * len(keys)) * 1e6:.1f} us CPU per claim taken and let go ({2 * len(keys)} claims)")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
