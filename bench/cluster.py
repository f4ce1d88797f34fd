"""Scale-out, simulated: the real client, a real BuildGrid, replay workers, a network between them.

    .venv/bin/python bench/cluster.py [--project lua redis synthetic] [--mode execute hybrid]
        [--workers 8 32 128] [--rtt 0.2 2 20] [--rate-mbit 1000] [--modules 400] [--speed 1]
        [--matrix full|cross]

Every part is real except the compile itself. For each project:
1. the objects are built through ltowrap (bench/coldlink.py's prepare_project), so each module
   has its option record; then the main binary's link line runs here on an empty cache
   (`local`, LTOWRAP_JOBS=2): its LTOWRAP_LOG gives each backend's compile time and key,
   its cache each backend's object (reapi_server.replay_dir);
2. for each case (mode, workers, round trip): a fresh BuildGrid with PostgreSQL
   (tests/reapi_server.py), `workers` replay bots (tests/reapi_worker.py --replay, 32 to a
   process) that fetch each job's inputs from the CAS, wait its recorded compile time /
   --speed and upload its recorded object, and bench/netproxy.py between the client and the
   server (delay half the round trip each way, jitter a tenth of it, --rate-mbit each way;
   the workers reach the server directly, as a cluster's own network). The same link line
   then runs on an empty cache with LTOWRAP_REMOTE through the proxy: `execute`
   (remote_local = false: every job to the workers) or `hybrid` (remote_local = true, 2
   local slots beside them), LTOWRAP_REMOTE_JOBS = 2 x workers (--jobs-per-worker), the memo off.

Per case: the link's wall time; the ideal, the link's serial part measured locally (its wall
less its backends' span) + the upload at --rate-mbit (the bytes the proxy carried to the
server) + 3 round trips (FindMissingBlobs, the upload, Execute) + the makespan of the recorded
compile times on the workers (and the 2 local slots, hybrid), longest first, with no overhead;
the jobs per second the client sustained (remote jobs over the span from the first sent to the
last answered); ltowrap's own CPU (the log's cpu.self) per executed job, and that less the
local link's, per job; bytes uploaded and deduplicated (the log's remote_uploaded and
remote_deduplicated); retries; the median time a job waited in the server's queue; and
bench/projection.py's figure for the case (its makespan and overhead model, the overhead fitted
on the case `--fit` names: the execute-mode run on the fewest workers at the same round trip).

--matrix cross (default) runs every mode and worker count at the middle round trip (2 ms),
and the other round trips at 32 workers; full runs every combination.
Writes bench/results/<date>-cluster.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench import projection  # noqa: E402
from bench.coldlink import JOBS, LLVM, prepare_project  # noqa: E402
from bench.run import BENCH, measure, write_results  # noqa: E402

import reapi_server  # noqa: E402

PROXY = BENCH / "netproxy.py"
BOTS_PER_PROCESS = 32
CASE_TIMEOUT = 900  # seconds: a link that takes longer than this is a failure, not a figure


def toolchain_line() -> str:
    return subprocess.run([str(LLVM / "clang"), "--version"], capture_output=True, text=True,
                          check=True).stdout.splitlines()[0].strip()


def record_of(log: Path) -> dict:
    records = [json.loads(x) for x in log.read_text().splitlines()]
    links = [r for r in records if r.get("backends")]
    if not links or links[-1]["decision"] != "distributed":
        raise RuntimeError(f"{log}: the link was not distributed: {records[-1] if records else 'no record'}")
    return links[-1]


def cold_cache(env: dict[str, str], where: Path) -> Path:
    """An empty ltowrap cache holding only the build's option records."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    records = Path(env["LTOWRAP_CACHE_DIR"]) / "r"
    if records.exists():
        shutil.copytree(records, where / "r")
    return where


@contextmanager
def proxy(server_url: str, rtt_ms: float, rate_mbit: float, tmp: Path):
    """bench/netproxy.py in front of the server; yields (its URL, the stats it writes when stopped)."""
    port_file, stats_file = tmp / "proxy.port", tmp / "proxy.json"
    for f in (port_file, stats_file):
        f.unlink(missing_ok=True)
    target = server_url.removeprefix("grpc://")
    argv = [sys.executable, str(PROXY), "--to", target, "--rtt-ms", str(rtt_ms), "--jitter-ms", str(rtt_ms / 10),
            "--rate-mbit", str(rate_mbit), "--port-file", str(port_file), "--stats-file", str(stats_file),
            "--max-seconds", str(CASE_TIMEOUT + 120)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    stats: dict = {}
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("netproxy did not start")
            time.sleep(0.02)
        yield f"grpc://127.0.0.1:{port_file.read_text()}", stats
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if stats_file.exists():
            stats.update(json.loads(stats_file.read_text()))


def round_trip_ms(url: str, n: int = 21) -> float:
    """The median time of a GetCapabilities through the proxy: the round trip the client got."""
    from ltowrap.remote.client import Client, Endpoint

    client = Client(Endpoint(url))
    try:
        client.capabilities()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            client.capabilities()
            times.append(time.perf_counter() - t)
        return round(1000 * statistics.median(times), 3)
    finally:
        client.close()


def backend_span(record: dict, source: str | None = None) -> tuple[float, float]:
    picked = [b for b in record["backends"] if source is None or b["source"] == source]
    return min(b["start"] for b in picked), max(b["end"] for b in picked)


def one_case(project: str, mode: str, workers: int, rtt: float, a: argparse.Namespace, where: Path, line: str,
             env: dict[str, str], local: dict, replay: Path, tmp: Path) -> dict:
    tmp.mkdir(parents=True, exist_ok=True)
    words = shlex.split(line)
    out = words[words.index("-o") + 1]
    started = time.time()
    load = os.getloadavg()[0]
    with ExitStack() as stack:
        server = stack.enter_context(reapi_server.exec_server(tmp / "bgd", workers=0, toolchains=[toolchain_line()],
                                                              threads=(1 + a.jobs_per_worker) * workers + 64))
        t = time.monotonic()
        procs = [server.start_worker(wait=False, replay=replay, speed=a.speed, bots=min(BOTS_PER_PROCESS, workers - i))
                 for i in range(0, workers, BOTS_PER_PROCESS)]
        server.wait_workers()
        bots_up = time.monotonic() - t
        url, net = stack.enter_context(proxy(server.url, rtt, a.rate_mbit, tmp))
        rtt_got = round_trip_ms(url)
        log = tmp / "link.jsonl"
        cache = cold_cache(env, tmp / "cache")
        (where / out).unlink(missing_ok=True)
        run_env = env | {"LTOWRAP_CACHE_DIR": str(cache), "LTOWRAP_LOG": str(log), "LTOWRAP_MEMO": "0",
                         "LTOWRAP_REMOTE": url, "LTOWRAP_REMOTE_MODE": "execute",
                         "LTOWRAP_REMOTE_LOCAL": "1" if mode == "hybrid" else "0",
                         "LTOWRAP_REMOTE_JOBS": str(a.jobs_per_worker * workers)}
        argv = ["sh", "-c", line]  # redis's line prints its LINK banner first
        if a.profile:  # py-spy's samples of every Python process of the link, threads included
            argv = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "--threads", "--idle",
                    "--format", "raw", "--rate", "200", "-o", str(tmp / "profile.txt"), "--", *argv]
        run = measure(argv, where, run_env, tmp / "link.out")
        record = record_of(log)
        replayed = sum(server.worker_log(i).count(" replayed ") for i in range(len(procs)))
    # the proxy's stats are in `net` once it has stopped (the ExitStack closed it)
    return summarise(project, mode, workers, rtt, a, run, record, local, net, rtt_got, replayed, bots_up,
                     started, load)


def serial_part(record: dict) -> float:
    """A link's time outside its backends: thin-link, keys, lookups, final link."""
    start, end = backend_span(record)
    return (record["end"] - record["start"]) - (end - start)


def ideal(local: dict, times: list[float], workers: int, slots: int, up_bytes: int, rate_mbit: float,
          rtt_ms: float) -> float:
    transfer = up_bytes * 8 / (rate_mbit * 1e6) if rate_mbit else 0.0
    return serial_part(local) + transfer + 3 * rtt_ms / 1000 + projection.makespan(times, slots, workers, 0.0)


def summarise(project: str, mode: str, workers: int, rtt: float, a: argparse.Namespace, run, record: dict,
              local: dict, net: dict, rtt_got: float, replayed: int, bots_up: float, started: float,
              load: float) -> dict:
    times = [(b["end"] - b["start"]) / a.speed for b in local["backends"]]
    slots = JOBS if mode == "hybrid" else 0
    executed = [b for b in record["backends"] if b["source"] == "remote"]
    wall = record["end"] - record["start"]
    cpu = record.get("cpu") or {}
    local_cpu = (local.get("cpu") or {}).get("self", 0.0)
    jobs = len(record["backends"])
    first, last = backend_span(record, "remote") if executed else (0.0, 0.0)
    queued = [b["queued"] for b in executed if b.get("queued") is not None]
    best = ideal(local, times, workers, slots, net.get("bytes_up", 0), a.rate_mbit, rtt)
    return {
        "project": project, "mode": mode, "workers": workers, "rtt_ms": rtt, "rtt_measured_ms": rtt_got,
        "rate_mbit": a.rate_mbit, "speed": a.speed, "remote_jobs": a.jobs_per_worker * workers, "modules": record["modules"], "jobs": jobs,
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"), "load": round(load, 2),
        "wall": round(wall, 3), "wall_outside": run.wall, "ideal": round(best, 3), "vs_ideal": round(wall / best, 3),
        "local_wall": round(local["end"] - local["start"], 3), "executed": len(executed),
        "here": record.get("remote_local", 0), "raced": record.get("remote_raced", 0),
        "remote_errors": sum(1 for b in record["backends"] if b.get("remote_error")),
        "replayed": replayed, "retries": record.get("remote_retries", 0),
        "jobs_per_s": round(len(executed) / (last - first), 2) if executed and last > first else None,
        "cpu_self": cpu.get("self"), "cpu_children": cpu.get("children"),
        "cpu_ms_per_job": round(1000 * cpu.get("self", 0) / len(executed), 2) if executed else None,
        "cpu_ms_per_job_over_local": round(1000 * (cpu.get("self", 0) - local_cpu) / len(executed), 2)
        if executed else None,
        "uploaded": record.get("remote_uploaded", 0), "deduplicated": record.get("remote_deduplicated", 0),
        "proxy_up": net.get("bytes_up"), "proxy_down": net.get("bytes_down"), "connections": net.get("connections"),
        "queued_median": round(statistics.median(queued), 3) if queued else None,
        "queued_max": round(max(queued), 3) if queued else None,
        "bots_up_s": round(bots_up, 2), "spans": record.get("spans"),
        "backends": [{k: b.get(k) for k in ("module", "source", "start", "end", "worker", "queued", "raced")}
                     for b in record["backends"]],
    }


def project_cases(a: argparse.Namespace) -> list[tuple[str, int, float]]:
    middle = sorted(a.rtt)[len(a.rtt) // 2]
    cases = []
    for mode in a.mode:
        for workers in a.workers:
            for rtt in a.rtt:
                if a.matrix == "full" or rtt == middle or workers == 32 or len(a.workers) == 1:
                    cases.append((mode, workers, rtt))
    return cases


def projected(results: list[dict], local: dict) -> None:
    """bench/projection.py's figure for each case: its overhead fitted on the execute run on the
    fewest workers at the same round trip (LOCAL = the local link, REMOTE = that run)."""
    times = [b["end"] - b["start"] for b in local["backends"]]
    rest = serial_part(local)
    for r in results:
        fits = [f for f in results if f["mode"] == "execute" and f["rtt_ms"] == r["rtt_ms"]]
        if not fits:
            continue
        fit = min(fits, key=lambda f: f["workers"])
        ex = [b for b in fit["backends"] if b["source"] == "remote"]
        span = max(b["end"] for b in ex) - min(b["start"] for b in ex)
        here = {b["module"]: b["end"] - b["start"] for b in local["backends"]}
        overhead = max(0.0, (span * fit["workers"] - sum(here[b["module"]] for b in ex)) / len(ex))
        slots = JOBS if r["mode"] == "hybrid" else 0
        r["projection"] = round(rest + projection.makespan([t / r["speed"] for t in times], slots, r["workers"],
                                                           overhead), 3)
        r["projection_fit"] = f"{fit['mode']} {fit['workers']} workers, overhead {overhead:.3f} s/job"
        r["projection_error"] = round((r["projection"] - r["wall"]) / r["wall"], 3)


def table(results: list[dict], locals_: dict[str, dict]) -> str:
    lines = ["| link | mode | workers | RTT ms (measured) | wall s | ideal s | wall/ideal | local s | projection s "
             "(error) | executed / here (raced) | jobs/s | ltowrap CPU ms/job (over local) | uploaded MB "
             "(dedup MB) | retries | queued median s | load |",
             "|---|---|---:|---|---:|---:|---:|---:|---|---|---:|---|---|---:|---:|---:|"]
    for r in results:
        proj = f"{r['projection']:.2f} ({100 * r['projection_error']:+.0f} %)" if "projection" in r else "—"
        lines.append(
            f"| {r['project']} ({r['jobs']}) | {r['mode']} | {r['workers']} | {r['rtt_ms']:g} ({r['rtt_measured_ms']:.2f}) "
            f"| {r['wall']:.2f} | {r['ideal']:.2f} | {r['vs_ideal']:.2f}x | {r['local_wall']:.2f} | {proj} "
            f"| {r['executed']} / {r['here']} ({r['raced']}) | {r['jobs_per_s'] or 0:.1f} "
            f"| {r['cpu_ms_per_job'] or 0:.1f} ({r['cpu_ms_per_job_over_local'] or 0:+.1f}) "
            f"| {r['uploaded'] / 1e6:.1f} ({r['deduplicated'] / 1e6:.1f}) | {r['retries']} "
            f"| {r['queued_median'] if r['queued_median'] is not None else '—'} | {r['load']:.1f} |")
    lines += ["", "Local links (the replay's source, LTOWRAP_JOBS=2, empty cache):", ""]
    for name, rec in locals_.items():
        times = [b["end"] - b["start"] for b in rec["backends"]]
        lines.append(f"- {name}: {len(times)} backends, {rec['end'] - rec['start']:.2f} s, compiles {sum(times):.1f} s "
                     f"(longest {max(times):.2f} s), serial part {serial_part(rec):.2f} s, ltowrap CPU "
                     f"{(rec.get('cpu') or {}).get('self', 0):.2f} s")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", nargs="+", default=["lua", "redis", "synthetic"], choices=["lua", "redis", "synthetic"])
    p.add_argument("--mode", nargs="+", default=["execute", "hybrid"], choices=["execute", "hybrid"])
    p.add_argument("--workers", nargs="+", type=int, default=[8, 32, 128])
    p.add_argument("--rtt", nargs="+", type=float, default=[0.2, 2.0, 20.0], help="round trips, ms")
    p.add_argument("--rate-mbit", type=float, default=1000.0)
    p.add_argument("--modules", type=int, default=400, help="modules of the synthetic link")
    p.add_argument("--speed", type=float, default=1.0, help="recorded compile times are divided by this")
    p.add_argument("--jobs-per-worker", type=int, default=2,
                   help="LTOWRAP_REMOTE_JOBS = this x workers: executions in flight beyond the workers keep the "
                   "server's queue from running dry while it dispatches")
    p.add_argument("--matrix", choices=["cross", "full"], default="cross")
    p.add_argument("--out", type=Path, default=BENCH / "results")
    p.add_argument("--profile", action="store_true", help="run each remote link under py-spy (pip install py-spy); "
                   "its samples in the case's directory, profile.txt (with --keep)")
    p.add_argument("--keep", type=Path, help="work here and keep it (logs of the server, bots and links)")
    a = p.parse_args()
    stamp = datetime.datetime.now().astimezone()
    load = os.getloadavg()
    results: list[dict] = []
    locals_: dict[str, dict] = {}
    with ExitStack() as stack:
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            tmp = a.keep
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ltowrap-cluster-")))
        for name in a.project:
            (tmp / name).mkdir()
            where, line, env = prepare_project(name, tmp / name, a.modules)
            words = shlex.split(line)
            out = words[words.index("-o") + 1]
            (where / out).unlink(missing_ok=True)
            log = tmp / name / "local.jsonl"
            cache = cold_cache(env, tmp / name / "local-cache")
            measure(["sh", "-c", line], where, env | {"LTOWRAP_CACHE_DIR": str(cache), "LTOWRAP_LOG": str(log), "LTOWRAP_MEMO": "0"},
                    tmp / name / "local.out")
            local = record_of(log)
            locals_[name] = local
            expected = (where / out).read_bytes()
            replay = reapi_server.replay_dir(local, cache, tmp / name / "replay")
            mine = []
            for mode, workers, rtt in project_cases(a):
                print(f"cluster: {name} {mode} {workers} workers {rtt:g} ms", file=sys.stderr, flush=True)
                r = one_case(name, mode, workers, rtt, a, where, line, env, local, replay,
                             tmp / name / f"{mode}-{workers}-{rtt:g}")
                r["identical"] = (where / out).read_bytes() == expected
                print(json.dumps({k: v for k, v in r.items() if k not in ("backends", "spans")}), file=sys.stderr,
                      flush=True)
                mine.append(r)
            projected(mine, local)
            results += mine
    write_results(a.out, stamp, "cluster", "Simulated cluster", load[0], table(results, locals_),
                  {"args": vars(a) | {"out": str(a.out), "keep": str(a.keep)}, "locals": locals_, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
