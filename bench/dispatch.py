"""Each REAPI server's dispatch rate on its own: trivial jobs through BuildGrid and Buildbarn, side by side.

    .venv/bin/python bench/dispatch.py [--engine buildgrid buildbarn] [--jobs 300] [--slots 32]
        [--in-flight 64] [--reps 1] [--keep DIR]

No compile and no network in between: each job is an Action that runs `/bin/true job-<n>` (an
empty input root, do_not_cache, a different argument each so that no two are merged), sent by
ltowrap's own client (ltowrap.remote.client, `--in-flight` Execute calls at once from a
thread pool, the blobs uploaded before the clock starts) straight to the server on loopback.
What a job costs is then the server's scheduling: the Execute stream, queueing, handing the
job to a worker, taking its result back, answering.

- buildgrid: tests/reapi_server.exec_server as bench/cluster.py runs it (PostgreSQL, the CAS in a
  process of its own, reapi_server.DEPLOYMENT_TUNING), `--slots` bots of tests/reapi_worker.py,
  32 to a process, running the command for real;
- buildbarn: tests/buildbarn_server.bb_exec_server, one bb_worker with `--slots` slots and its
  bb_runner, running the command for real.

Per engine and repetition: jobs a second (the jobs over the span from the first Execute sent to
the last answered), the server's CPU per job (from /proc, over that span: BuildGrid's processes,
and PostgreSQL beside them, which holds its queue; bb_storage and bb_scheduler), the workers'
side's CPU per job (the bots; bb_worker and bb_runner), and this client's CPU per job. Engines
alternate within a repetition, so that a change in the machine's load falls on both. Writes
bench/out/<date>-dispatch.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.cluster import BOTS_PER_PROCESS, group_cpu  # noqa: E402
from bench.run import BENCH, write_results  # noqa: E402

import reapi_server  # noqa: E402

PLATFORM = {"OSFamily": sys.platform}


@dataclass(frozen=True)
class Server:
    url: str
    groups: dict[str, int]  # process group of each process, by name
    server: tuple[str, ...]  # those that are the server
    database: tuple[str, ...]  # those that hold the server's queue, beside it
    workers: tuple[str, ...]  # the workers' side


@contextmanager
def buildgrid(slots: int, tmp: Path) -> Iterator[Server]:
    with reapi_server.exec_server(tmp, workers=0, threads=3 * slots + 64, tuning=reapi_server.DEPLOYMENT_TUNING,
                                  separate_cas=True) as server:
        bots = [server.start_worker(wait=False, bots=min(BOTS_PER_PROCESS, slots - i), blob_cache=True)
                for i in range(0, slots, BOTS_PER_PROCESS)]
        server.wait_workers()

        def pid_of(name: str) -> int:
            path = tmp / f"{name}.pid"
            return int(path.read_text().split()[0]) if path.exists() else 0

        groups = {"bgd": pid_of("bgd-exec"), "bgd_cas": pid_of("bgd-cas"),
                  "postgres": server.postgres.proc.pid if server.postgres.proc else 0,
                  **{f"bots{i}": b.pid for i, b in enumerate(bots)}}
        yield Server(server.url, groups, ("bgd", "bgd_cas"), ("postgres",), tuple(f"bots{i}" for i in range(len(bots))))


@contextmanager
def buildbarn(slots: int, tmp: Path) -> Iterator[Server]:
    import buildbarn_server

    with buildbarn_server.bb_exec_server(tmp, concurrency=slots, platform=PLATFORM) as server:
        groups = {name.replace("-", "_"): pid for name, pid in server.pids.items()}
        yield Server(server.url, groups, ("bb_storage", "bb_scheduler"), (), ("bb_worker", "bb_runner"))


def one_run(engine: str, a: argparse.Namespace, tmp: Path, rep: int) -> dict:
    from ltowrap.remote import action
    from ltowrap.remote.client import Client, Endpoint

    start = buildgrid if engine == "buildgrid" else buildbarn
    with ExitStack() as stack:
        server = stack.enter_context(start(a.slots, tmp / f"{engine}-{rep}"))
        client = Client(Endpoint(server.url, timeout=60.0, exec_timeout=600.0, jobs=a.in_flight))
        stack.callback(client.close)
        probes = [action.probe(["/bin/true", f"job-{rep}-{n}"], PLATFORM, 60) for n in range(a.jobs)]
        blobs = {k: v for p in probes for k, v in p.blobs.items()}
        client.upload(blobs)
        load = os.getloadavg()[0]
        spans: list[tuple[float, float]] = []
        failed = 0

        def one(probe) -> None:
            nonlocal failed
            t = time.monotonic()
            response = client.execute(probe.key)
            spans.append((t, time.monotonic()))
            if response.result.exit_code != 0:
                failed += 1

        before, own = group_cpu(server.groups), resource.getrusage(resource.RUSAGE_SELF)
        with ThreadPoolExecutor(a.in_flight) as pool:
            list(pool.map(one, probes))
        after, own_after = group_cpu(server.groups), resource.getrusage(resource.RUSAGE_SELF)
    span = max(e for _, e in spans) - min(s for s, _ in spans)

    def cpu(names: tuple[str, ...]) -> float:
        return sum(after[g] - before[g] for g in names)

    ms = 1000 / a.jobs
    return {"engine": engine, "rep": rep, "jobs": a.jobs, "failed": failed, "slots": a.slots,
            "in_flight": a.in_flight, "load": round(load, 2), "span_s": round(span, 3),
            "jobs_per_s": round(a.jobs / span, 1),
            "server_cpu_ms_per_job": round(ms * cpu(server.server), 2),
            "database_cpu_ms_per_job": round(ms * cpu(server.database), 2),
            "workers_cpu_ms_per_job": round(ms * cpu(server.workers), 2),
            "client_cpu_ms_per_job": round(ms * (own_after.ru_utime + own_after.ru_stime
                                                 - own.ru_utime - own.ru_stime), 2),
            "latency_median_s": round(statistics.median(e - s for s, e in spans), 3),
            "by_process_cpu_s": {g: round(after[g] - before[g], 2) for g in server.groups}}


def table(results: list[dict]) -> str:
    lines = ["| engine | rep | jobs | jobs/s | server CPU ms/job | its database ms/job | workers' side ms/job "
             "| client ms/job | job latency median s | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['engine']} | {r['rep']} | {r['jobs']} | {r['jobs_per_s']:.1f} "
                     f"| {r['server_cpu_ms_per_job']:.1f} | {r['database_cpu_ms_per_job']:.1f} "
                     f"| {r['workers_cpu_ms_per_job']:.1f} | {r['client_cpu_ms_per_job']:.1f} "
                     f"| {r['latency_median_s']:.3f} | {r['load']:.1f} |")
    engines = sorted({r["engine"] for r in results})
    if any(sum(r["engine"] == e for r in results) > 1 for e in engines):
        lines += ["", "Medians:", ""]
        for e in engines:
            mine = [r for r in results if r["engine"] == e]
            lines.append(f"- {e}: {statistics.median(r['jobs_per_s'] for r in mine):.1f} jobs/s, server "
                         f"{statistics.median(r['server_cpu_ms_per_job'] for r in mine):.1f} ms/job "
                         f"(+ database {statistics.median(r['database_cpu_ms_per_job'] for r in mine):.1f})")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", nargs="+", default=["buildgrid", "buildbarn"], choices=["buildgrid", "buildbarn"])
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--slots", type=int, default=32, help="workers (BuildGrid bots; bb_worker's slots)")
    p.add_argument("--in-flight", type=int, default=64, help="Execute calls at once")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", type=Path, default=BENCH / "out")
    p.add_argument("--keep", type=Path, help="work here and keep it (the servers' logs)")
    a = p.parse_args()
    stamp = datetime.datetime.now().astimezone()
    load = os.getloadavg()[0]
    results = []
    with ExitStack() as stack:
        tmp = a.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ltowrap-dispatch-")))
        for rep in range(a.reps):
            order = a.engine if rep % 2 == 0 else list(reversed(a.engine))
            for engine in order:
                print(f"dispatch: {engine} rep {rep}", file=sys.stderr, flush=True)
                r = one_run(engine, a, tmp, rep)
                print(r, file=sys.stderr, flush=True)
                results.append(r)
    write_results(a.out, stamp, "dispatch", "Dispatch rate, trivial jobs", load, table(results),
                  {"args": vars(a) | {"out": str(a.out), "keep": str(a.keep)}, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
