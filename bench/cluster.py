"""Scale-out, simulated: the real client, a real server (BuildGrid or Buildbarn), replay workers, a network between them.

    .venv/bin/python bench/cluster.py [--engine buildgrid|buildbarn [--bb-transfers N]]
        [--project lua redis synthetic] [--mode execute hybrid]
        [--workers 8 32 128] [--rtt 0.2 2 20] [--rate-mbit 1000] [--modules 400] [--speed 1]
        [--matrix full|cross] [--no-worker-cache] [--tuning deployment|test] [--proactive-fetch]
        [--assigners N] [--separate-cas | --split] [--profile-server] [--keep DIR [--reuse [--record-again] | --prepare-only]]
        [--client DIR]

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

--engine buildbarn runs step 2 on Buildbarn instead (tests/buildbarn_server.py: bb_storage with
the CAS and action cache in memory, bb_scheduler, one bb_worker with `workers` slots, its
bb_runner), where only the compile is not real: bb_worker takes each action from the scheduler,
fetches its input root from the CAS into a build directory (hard links from its file cache, so
a blob is fetched once per run, as a worker machine's cache does), has bb_runner run the
Command, and uploads out.o and the result. The Command is the client's, unchanged; its argv[0]
is clang's absolute path, which bb_runner executes as it is (no PATH lookup, only the
Command's environment). So bb_runner runs in a mount namespace of its own (unshare(1)) where
that path is bench/bb_replay.c, bind-mounted over clang (buildbarn_server.replay_runner): a
small C program built for the replay directory and --speed, which reads the module off
`m/<rank>-<digest>.o` as the BuildGrid replay does, waits its recorded compile time / --speed,
and writes the recorded object to the -o path. No other process sees the mount. The server
is bb_storage and bb_scheduler (their CPU is the server's); bb_worker and bb_runner are the
workers' side. --bb-transfers sets bb_worker's download and upload concurrency (for all its
slots together; 64 by default, where a cluster of one-slot workers would have that per worker).
The BuildGrid-only options (--tuning, --separate-cas, --split, --assigners, --worker-cache,
--profile-server) do not apply to it.

The cluster is set up as a deployment would be, not as the tests are: each worker process keeps
the blobs it fetched (--worker-cache, on: buildbox-casd's local CAS), the scheduler and bots
talk at a deployment's keepalives and polls, and a bot that reports a job done takes the next
queued one in the same call (--tuning deployment: reapi_server.DEPLOYMENT_TUNING, proactive
fetch on), and the CAS is served by a BuildGrid process of its own on the same storage
(--separate-cas, on with --tuning deployment: a deployment runs its CAS apart from the
scheduler, as BuildGrid's own distributed configurations do, so that the scheduler's database
work does not hold up the workers' reads). --tuning test --no-worker-cache is the cluster as
the tests run it; --split runs BuildGrid as three processes (CAS and action cache; Execution;
Bots and the assigners).

Per case: the link's wall time; the ideal, the link's serial part measured locally (its wall
less its backends' span) + the upload at --rate-mbit (the bytes the proxy carried to the
server) + 3 round trips (FindMissingBlobs, the upload, Execute) + the makespan of the recorded
compile times on the workers (and the 2 local slots, hybrid), longest first, with no overhead;
the jobs per second the client sustained (remote jobs over the span from the first sent to the
last answered); ltowrap's own CPU (the log's cpu.self) per executed job, and that less the
local link's, per job; bytes uploaded and deduplicated (the log's remote_uploaded and
remote_deduplicated); retries; the median time a job waited in the server's queue; the server's
CPU over the link (every process of its, from /proc) and per executed job; where a job's time
went (`legs`, medians: submit, queue, worker, back; see job_legs); how busy the machine's
cores were over the link (/proc/stat: every process, other users' too) and the proxy's CPU;
and bench/projection.py's figure for the case (its makespan and overhead model, the overhead fitted on the execute-mode
run on the fewest workers at the same round trip).

--matrix cross (default) runs every mode and worker count at the middle round trip (2 ms),
and the other round trips at 32 workers; full runs every combination. --profile-server samples
BuildGrid with py-spy during each link (server-profile.txt, and each thread's CPU beside it).
Writes bench/out/<date>-cluster.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench import projection  # noqa: E402
from bench.coldlink import JOBS, LLVM, prepare_project  # noqa: E402
from bench.run import BENCH, SCRIPTS, measure, write_results  # noqa: E402
from ltowrap.log import Decision, Source  # noqa: E402

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
    if not links or links[-1]["decision"] != Decision.DISTRIBUTED:
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
        used = _stop_reaped(proc)
        if stats_file.exists():
            stats.update(json.loads(stats_file.read_text()))
        # The proxy's CPU over its life (start, the round-trip probe, the link): what it adds to the
        # machine's load, which a real network would not.
        stats["cpu_s"] = used


def _stop_reaped(proc: subprocess.Popen) -> float | None:
    """SIGTERM proc (SIGKILL after 10 s), reap it with wait4 and return the CPU seconds it used
    (None if it had already been reaped)."""
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # Popen reaped it already
            return None
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return round(usage.ru_utime + usage.ru_stime, 2)
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


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


def _proc_cpu(pid: int) -> tuple[int, int, float]:
    """(parent, process group, user+sys CPU seconds) of a live process, from /proc; zeros once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0, 0.0
    # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    return int(fields[1]), int(fields[2]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_cpu(pgids: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by every live process of each named process group (the server,
    PostgreSQL, the bots: each was started in a session of its own), and by the leader's children
    (PostgreSQL's backends each start a session of their own)."""
    out = dict.fromkeys(pgids, 0.0)
    names = {pgid: name for name, pgid in pgids.items() if pgid}  # 0: none (kernel threads have group 0)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            ppid, pgrp, cpu = _proc_cpu(int(entry.name))
            name = names.get(pgrp) or names.get(ppid)
            if name is not None:
                out[name] += cpu
    return out


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of pid so far, by thread id (py-spy names the same ids)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


@contextmanager
def server_profile(pid: int, out: Path):
    """py-spy sampling one process (the server) while the body runs: only the thread holding the
    GIL is sampled (--gil: a thread waiting on the database or a condition otherwise looks busy to
    py-spy), in py-spy's raw (collapsed stacks) format; SIGINT makes it write. Beside it, each
    thread's CPU over the body from /proc (out with .threads.json): what py-spy cannot see, gRPC's
    own C threads, and how far the GIL samples cover the process's CPU."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("--profile-server needs py-spy (pip install py-spy)")
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--threads", "--gil", "--nonblocking", "--rate", "100",
                             "--format", "raw", "-o", str(out)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    before = thread_cpu(pid)
    try:
        yield
    finally:
        after = thread_cpu(pid)
        names = {int(tid): comm for tid in after
                 for comm in [Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                              if Path(f"/proc/{pid}/task/{tid}/comm").exists() else "?"]}
        used = {tid: round(after[tid] - before.get(tid, 0.0), 2) for tid in after}
        out.with_suffix(".threads.json").write_text(json.dumps(
            [{"tid": tid, "comm": names[tid], "cpu": cpu} for tid, cpu in sorted(used.items(), key=lambda x: -x[1])
             if cpu > 0], indent=0))
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def backend_span(record: dict, source: str | None = None) -> tuple[float, float]:
    picked = [b for b in record["backends"] if source is None or b["source"] == source]
    return min(b["start"] for b in picked), max(b["end"] for b in picked)


def tuning_of(a: argparse.Namespace) -> reapi_server.SchedulerTuning:
    base = reapi_server.DEPLOYMENT_TUNING if a.tuning == "deployment" else reapi_server.TEST_TUNING
    return dataclasses.replace(base, assigners=a.assigners,
                               proactive_fetch=base.proactive_fetch if a.proactive_fetch is None else a.proactive_fetch)


@dataclasses.dataclass
class Cluster:
    """A running simulated cluster, whichever engine: the server's URL (the client's goes through
    the proxy), its processes by name and process group (each leads a session of its own), which
    of them are the server (not the workers), and what its replay workers did once the link ends."""

    url: str
    groups: dict[str, int]
    server: tuple[str, ...]
    bots_up: float
    workers_did: Callable[[], dict]  # replayed, worker_fetched, worker_from_server (None: not known)


@contextmanager
def buildgrid_cluster(workers: int, a: argparse.Namespace, replay: Path, tmp: Path) -> Iterator[Cluster]:
    """BuildGrid with PostgreSQL and `workers` replay bots (tests/reapi_worker.py --replay)."""
    with reapi_server.exec_server(tmp / "bgd", workers=0, toolchains=[toolchain_line()],
                                  threads=(1 + a.jobs_per_worker) * workers + 64, tuning=tuning_of(a),
                                  separate_cas=a.separate_cas, split=a.split) as server:
        t = time.monotonic()
        procs = [server.start_worker(wait=False, replay=replay, speed=a.speed, bots=min(BOTS_PER_PROCESS, workers - i),
                                     blob_cache=a.worker_cache)
                 for i in range(0, workers, BOTS_PER_PROCESS)]
        server.wait_workers()
        bots_up = time.monotonic() - t

        def pid_of(name: str) -> int:
            path = tmp / "bgd" / f"{name}.pid"
            return int(path.read_text().split()[0]) if path.exists() else 0

        def did() -> dict:
            logs = [server.worker_log(i) for i in range(len(procs))]
            # The bytes of the jobs' input trees, and of those the part read from the server (the
            # rest came from the workers' blob caches).
            return {"replayed": sum(log.count(" replayed ") for log in logs),
                    "worker_fetched": sum(int(n) for log in logs
                                          for n in re.findall(r" replayed \S+: (\d+) bytes fetched", log)),
                    "worker_from_server": sum(int(n) for log in logs
                                              for n in re.findall(r" bytes fetched, (\d+) from the server", log))}

        groups = {"bgd": pid_of("bgd-exec"), "bgd_cas": pid_of("bgd-cas"), "bgd_bots": pid_of("bgd-bots"),
                  "postgres": server.postgres.proc.pid if server.postgres.proc else 0,
                  **{f"bots{i}": w.pid for i, w in enumerate(procs)}}
        yield Cluster(server.url, groups, ("bgd", "bgd_cas", "bgd_bots"), bots_up, did)


@contextmanager
def buildbarn_cluster(workers: int, a: argparse.Namespace, replay: Path, tmp: Path) -> Iterator[Cluster]:
    """Buildbarn: bb_storage, bb_scheduler, one bb_worker with `workers` slots and its bb_runner,
    which runs bench/bb_replay.c where the actions name clang (buildbarn_server.replay_runner)."""
    import buildbarn_server

    compiler = LLVM / "clang"  # the backend's argv[0]: LTOWRAP_CLANG (bench/coldlink.py), no remote_compiler
    wrap = buildbarn_server.replay_runner(replay, a.speed, compiler, compiler, tmp / "bb-replay")
    (replay / "replayed.log").unlink(missing_ok=True)
    t = time.monotonic()
    with buildbarn_server.bb_exec_server(tmp / "bb", concurrency=workers, runner_wrap=wrap,
                                         transfer_concurrency=a.bb_transfers) as server:
        bots_up = time.monotonic() - t
        (replay / "replayed.log").unlink(missing_ok=True)  # the start-up's probe is /bin/true, not a replay

        def did() -> dict:
            return {"replayed": len(buildbarn_server.replayed(replay)), "worker_fetched": None,
                    "worker_from_server": None}

        groups = {name.replace("-", "_"): pid for name, pid in server.pids.items()}
        yield Cluster(server.url, groups, ("bb_storage", "bb_scheduler"), bots_up, did)


def one_case(project: str, mode: str, workers: int, rtt: float, a: argparse.Namespace, where: Path, line: str,
             env: dict[str, str], local: dict, replay: Path, tmp: Path) -> dict:
    shutil.rmtree(tmp, ignore_errors=True)  # a --reuse run's earlier case: its server's pid file would fool the start
    tmp.mkdir(parents=True)
    words = shlex.split(line)
    out = words[words.index("-o") + 1]
    started = time.time()
    load = os.getloadavg()[0]
    start_cluster = buildbarn_cluster if a.engine == "buildbarn" else buildgrid_cluster
    with ExitStack() as stack:
        cluster = stack.enter_context(start_cluster(workers, a, replay, tmp))
        url, net = stack.enter_context(proxy(cluster.url, rtt, a.rate_mbit, tmp))
        rtt_got = round_trip_ms(url)
        log = tmp / "link.jsonl"
        cache = cold_cache(env, tmp / "cache")
        (where / out).unlink(missing_ok=True)
        run_env = env | {"LTOWRAP_CACHE_DIR": str(cache), "LTOWRAP_LOG": str(log), "LTOWRAP_MEMO": "0",
                         "LTOWRAP_REMOTE": url, "LTOWRAP_REMOTE_MODE": "execute",
                         "LTOWRAP_REMOTE_LOCAL": "1" if mode == "hybrid" else "0",
                         "LTOWRAP_REMOTE_JOBS": str(a.jobs_per_worker * workers)}
        if a.client is not None:
            run_env["PYTHONPATH"] = str(a.client.resolve())
        argv = ["sh", "-c", line]  # redis's line prints its LINK banner first
        if a.profile:  # py-spy's samples of every Python process of the link, threads included
            argv = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "--threads", "--idle",
                    "--format", "raw", "--rate", "200", "-o", str(tmp / "profile.txt"), "--", *argv]
        # The cluster's CPU over the link alone, not over its start-up.
        before, busy_before = group_cpu(cluster.groups), machine_busy()
        profiled = cluster.groups[cluster.server[0]]
        with server_profile(profiled, tmp / "server-profile.txt") if a.profile_server else ExitStack():
            run = measure(argv, where, run_env, tmp / "link.out")
        after, busy_after = group_cpu(cluster.groups), machine_busy()
        cluster_cpu = {g: round(after[g] - before[g], 2) for g in cluster.groups if not g.startswith("bots")}
        if any(g.startswith("bots") for g in cluster.groups):
            cluster_cpu["bots"] = round(sum(after[g] - before[g] for g in cluster.groups if g.startswith("bots")), 2)
        record = record_of(log)
        legs = job_legs(cluster.url, record)
        did = cluster.workers_did()
    # the proxy's stats are in `net` once it has stopped (the ExitStack closed it)
    result = summarise(project, mode, workers, rtt, a, run, record, local, net, rtt_got, did["replayed"],
                       cluster.bots_up, started, load)
    executed = result["executed"] or 1
    server_cpu = sum(cluster_cpu[g] for g in cluster.server)
    # How busy the machine's cores were over the link, every process counted (others' too).
    busy = (busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1e-9)
    result |= {"engine": a.engine, "cluster_cpu": cluster_cpu, "machine_busy": round(busy, 3),
               "proxy_cpu_s": net.get("cpu_s"), "server_groups": list(cluster.server),
               "server_cpu": round(server_cpu, 2), "server_cpu_ms_per_job": round(1000 * server_cpu / executed, 1),
               "legs": legs, **did, "worker_cache": a.worker_cache or a.engine == "buildbarn",
               "tuning": dataclasses.asdict(tuning_of(a)) | {"name": a.tuning},
               "separate_cas": a.separate_cas or a.split, "split": a.split,
               "client": str(a.client) if a.client is not None else None,
               "cpu_by": (record.get("cpu") or {}).get("by") or {}}
    if a.engine == "buildgrid":  # the name earlier results have
        result["bgd_cpu_ms_per_job"] = result["server_cpu_ms_per_job"]
    return result


def job_legs(url: str, record: dict) -> dict[str, float]:
    """Where a remote job's time went, median over the link's executed jobs, from the client's log
    and the timestamps BuildGrid and the worker put in each ActionResult (read back from the
    action cache; one clock, one machine): `submit` the client's start of the job to the server
    queueing it (the Action built and uploaded, Execute sent), `queue` to a worker taking it,
    `worker` its fetch, compile and upload, `back` from the worker's end to the client's."""
    from ltowrap.remote.client import Client, Endpoint

    client = Client(Endpoint(url))
    legs: dict[str, list[float]] = {"submit": [], "queue": [], "worker": [], "back": []}
    try:
        for b in record["backends"]:
            if b["source"] != Source.REMOTE_EXECUTED or not b.get("action"):
                continue
            digest, size = b["action"].split("/")
            result = client.get_action_result((digest, int(size)))
            if result is None:
                continue
            m = result.execution_metadata
            queued, started, done = (m.queued_timestamp.ToNanoseconds() / 1e9,
                                     m.worker_start_timestamp.ToNanoseconds() / 1e9,
                                     m.worker_completed_timestamp.ToNanoseconds() / 1e9)
            for leg, seconds in (("submit", queued - b["start"]), ("queue", started - queued),
                                 ("worker", done - started), ("back", b["end"] - done)):
                legs[leg].append(seconds)
    finally:
        client.close()
    return {leg: round(statistics.median(v), 3) for leg, v in legs.items() if v}


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
    executed = [b for b in record["backends"] if b["source"] == Source.REMOTE_EXECUTED]
    wall = record["end"] - record["start"]
    cpu = record.get("cpu") or {}
    local_cpu = (local.get("cpu") or {}).get("self", 0.0)
    jobs = len(record["backends"])
    first, last = backend_span(record, Source.REMOTE_EXECUTED) if executed else (0.0, 0.0)
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
        ex = [b for b in fit["backends"] if b["source"] == Source.REMOTE_EXECUTED]
        span = max(b["end"] for b in ex) - min(b["start"] for b in ex)
        here = {b["module"]: b["end"] - b["start"] for b in local["backends"]}
        overhead = max(0.0, (span * fit["workers"] - sum(here[b["module"]] for b in ex)) / len(ex))
        slots = JOBS if r["mode"] == "hybrid" else 0
        r["projection"] = round(rest + projection.makespan([t / r["speed"] for t in times], slots, r["workers"],
                                                           overhead), 3)
        r["projection_fit"] = f"{fit['mode']} {fit['workers']} workers, overhead {overhead:.3f} s/job"
        r["projection_error"] = round((r["projection"] - r["wall"]) / r["wall"], 3)


def legs_cell(legs: dict[str, float]) -> str:
    return " / ".join(f"{legs[k]:.2f}" if k in legs else "—" for k in ("submit", "queue", "worker", "back"))


def server_cpu(r: dict) -> str:
    """The server's CPU over the link and per executed job; by process where it ran as several
    (the workers' side, BuildGrid's bots or bb_worker and bb_runner, is not the server's)."""
    cpu = r["cluster_cpu"]
    if r.get("engine", "buildgrid") == "buildbarn":
        return (f"{r['server_cpu']:.1f} ({r['server_cpu_ms_per_job']:.0f}) = storage {cpu['bb_storage']:.1f} + "
                f"scheduler {cpu['bb_scheduler']:.1f}; worker {cpu['bb_worker']:.1f} + runner {cpu['bb_runner']:.1f}")
    total = cpu["bgd"] + cpu.get("bgd_cas", 0) + cpu.get("bgd_bots", 0)
    parts = (f" = exec {cpu['bgd']:.1f} + bots {cpu['bgd_bots']:.1f} + CAS {cpu['bgd_cas']:.1f}" if r.get("split")
             else f" = exec {cpu['bgd']:.1f} + CAS {cpu['bgd_cas']:.1f}" if r.get("separate_cas") else "")
    return f"{total:.1f} ({r['bgd_cpu_ms_per_job']:.0f}){parts}"


def busy_cell(r: dict) -> str:
    busy = f"{100 * r['machine_busy']:.0f} %" if r.get("machine_busy") is not None else "—"
    return f"{busy}; {r['proxy_cpu_s']:.1f}" if r.get("proxy_cpu_s") is not None else busy


def polling(r: dict) -> str:
    if r.get("engine", "buildgrid") == "buildbarn":
        return f"Buildbarn, 1 bb_worker x {r['workers']} slots"
    t = r["tuning"]
    return (f"{t['name']} ({t['assigners']}){', proactive' if t.get('proactive_fetch') else ''}"
            f"{', split' if r.get('split') else ', CAS apart' if r.get('separate_cas') else ''}")


def table(results: list[dict], locals_: dict[str, dict]) -> str:
    lines = ["| link | mode | workers | RTT ms (measured) | wall s | ideal s | wall/ideal | local s | projection s "
             "(error) | executed / here (raced) | jobs/s | ltowrap CPU ms/job (over local) | uploaded MB "
             "(dedup MB) | retries | queued median s | job legs s: submit / queue / worker / back | server CPU s "
             "(ms/job) | worker cache | polling (assigners) | load (cores busy over the link; proxy CPU s) |",
             "|---|---|---:|---|---:|---:|---:|---:|---|---|---:|---|---|---:|---:|---|---|---|---|---:|"]
    for r in results:
        proj = f"{r['projection']:.2f} ({100 * r['projection_error']:+.0f} %)" if "projection" in r else "—"
        lines.append(
            f"| {r['project']} ({r['jobs']}) | {r['mode']} | {r['workers']} | {r['rtt_ms']:g} ({r['rtt_measured_ms']:.2f}) "
            f"| {r['wall']:.2f} | {r['ideal']:.2f} | {r['vs_ideal']:.2f}x | {r['local_wall']:.2f} | {proj} "
            f"| {r['executed']} / {r['here']} ({r['raced']}) | {r['jobs_per_s'] or 0:.1f} "
            f"| {r['cpu_ms_per_job'] or 0:.1f} ({r['cpu_ms_per_job_over_local'] or 0:+.1f}) "
            f"| {r['uploaded'] / 1e6:.1f} ({r['deduplicated'] / 1e6:.1f}) | {r['retries']} "
            f"| {r['queued_median'] if r['queued_median'] is not None else '—'} "
            f"| {legs_cell(r.get('legs') or {})} "
            f"| {server_cpu(r)} | {'on' if r['worker_cache'] else 'off'} "
            f"| {polling(r)} "
            f"| {r['load']:.1f} ({busy_cell(r)}) |")
    lines += ["", "ltowrap's own CPU by what it was doing (the log's cpu.by), ms an executed job, the largest first:", ""]
    for r in results:
        by = sorted((r.get("cpu_by") or {}).items(), key=lambda kv: -kv[1])
        jobs = r["executed"] or 1
        lines.append(f"- {r['project']} on {r['workers']}: "
                     + ", ".join(f"{name} {1000 * seconds / jobs:.2f}" for name, seconds in by if seconds >= 0.0005))
    lines += ["", "Local links (the replay's source, LTOWRAP_JOBS=2, empty cache):", ""]
    for name, rec in locals_.items():
        times = [b["end"] - b["start"] for b in rec["backends"]]
        lines.append(f"- {name}: {len(times)} backends, {rec['end'] - rec['start']:.2f} s, compiles {sum(times):.1f} s "
                     f"(longest {max(times):.2f} s), serial part {serial_part(rec):.2f} s, ltowrap CPU "
                     f"{(rec.get('cpu') or {}).get('self', 0):.2f} s")
    return "\n".join(lines)


def record_local(line: str, where: Path, env: dict[str, str], tmp: Path) -> tuple[dict, Path, bytes]:
    """The link run locally on an empty cache (only the build's option records): its log record,
    the replay directory made from it, and the binary it wrote."""
    words = shlex.split(line)
    out = words[words.index("-o") + 1]
    (where / out).unlink(missing_ok=True)
    log = tmp / "local.jsonl"
    log.unlink(missing_ok=True)
    cache = cold_cache(env, tmp / "local-cache")
    measure(["sh", "-c", line], where, env | {"LTOWRAP_CACHE_DIR": str(cache), "LTOWRAP_LOG": str(log),
                                             "LTOWRAP_MEMO": "0"}, tmp / "local.out")
    local = record_of(log)
    expected = (where / out).read_bytes()
    shutil.rmtree(tmp / "replay", ignore_errors=True)
    replay = reapi_server.replay_dir(local, cache, tmp / "replay")
    (tmp / "expected.bin").write_bytes(expected)
    return local, replay, expected


def prepare(name: str, a: argparse.Namespace, tmp: Path) -> tuple[Path, str, dict[str, str], dict, Path, bytes, str | None]:
    """A project built through ltowrap and its link run locally on an empty cache: (the directory
    the link runs in, the link line, ltowrap's environment, the local link's log record, the
    replay directory, the binary it wrote, and when it was prepared if reused from --keep)."""
    prepared = tmp / name / "prepared.json"
    if a.reuse and prepared.exists():
        # A --keep directory from an earlier run: its build, local link and replay as they were.
        saved = json.loads(prepared.read_text())
        where, env = Path(saved["where"]), saved["env"]
        # The link runs this checkout's ltowrap, not the one that prepared the directory.
        line = re.sub(r"[^\s;]*/ltowrap-clang(?=\s)", str(SCRIPTS / "ltowrap-clang"), saved["line"])
        if a.record_again:  # the build as it was, the local link recorded now
            local, replay, expected = record_local(line, where, env, tmp / name)
            return where, line, env, local, replay, expected, f"{saved['when']}, local link recorded again"
        return (where, line, env, record_of(tmp / name / "local.jsonl"), tmp / name / "replay",
                (tmp / name / "expected.bin").read_bytes(), saved["when"])
    (tmp / name).mkdir()
    where, line, env = prepare_project(name, tmp / name, a.modules)
    local, replay, expected = record_local(line, where, env, tmp / name)
    prepared.write_text(json.dumps({"where": str(where), "line": line, "env": env,
                                    "when": datetime.datetime.now().isoformat(timespec="minutes")}))
    return where, line, env, local, replay, expected, None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=["buildgrid", "buildbarn"], default="buildgrid",
                   help="the REAPI server: BuildGrid with replay bots (default), or Buildbarn with bb_runner "
                   "executing bench/bb_replay.c in clang's place")
    p.add_argument("--bb-transfers", type=int, default=64, help="buildbarn: the blobs bb_worker fetches and "
                   "uploads at once, for all its slots (a cluster of single-slot workers has this many per worker)")
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
    p.add_argument("--out", type=Path, default=BENCH / "out")
    p.add_argument("--profile", action="store_true", help="run each remote link under py-spy (pip install py-spy); "
                   "its samples in the case's directory, profile.txt (with --keep)")
    p.add_argument("--client", type=Path, help="run the remote links with the ltowrap package in this directory "
                   "(put first on PYTHONPATH), e.g. an export of an older commit: two clients side by side")
    p.add_argument("--keep", type=Path, help="work here and keep it (logs of the server, bots and links)")
    p.add_argument("--record-again", action="store_true", help="with --reuse: the build as it is, its local link "
                   "run and recorded again (on a quieter machine than the first time, say)")
    p.add_argument("--prepare-only", action="store_true", help="with --keep: build the projects and record their "
                   "local links, run no case (a later --reuse run takes them)")
    p.add_argument("--reuse", action="store_true", help="with --keep: a project already prepared there (its build, "
                   "local link and replay) is reused as it is, not built again; the table says so")
    p.add_argument("--worker-cache", action=argparse.BooleanOptionalAction, default=True,
                   help="each replay worker process keeps the blobs it fetched, by digest, and does not fetch them "
                   "again (what buildbox-casd's local CAS gives every BuildGrid worker); on by default")
    p.add_argument("--tuning", choices=["deployment", "test"], default="deployment",
                   help="how often the scheduler and the bots talk (tests/reapi_server.py's SchedulerTuning): "
                   "a deployment's keepalives and polls (default), or the tests' (a dead bot noticed in 4 s)")
    p.add_argument("--separate-cas", action=argparse.BooleanOptionalAction, default=None,
                   help="the CAS in a BuildGrid process of its own, the workers' blobs served there (default: "
                   "the --tuning's, on for deployment)")
    p.add_argument("--proactive-fetch", action=argparse.BooleanOptionalAction, default=None,
                   help="BuildGrid's proactive-fetch-full-queue (default: the --tuning's, on for deployment)")
    p.add_argument("--split", action=argparse.BooleanOptionalAction, default=False,
                   help="BuildGrid as three processes on one PostgreSQL: the CAS (and action cache), the clients' "
                   "Execution and Operations, the workers' Bots and assigners (implies --separate-cas)")
    p.add_argument("--assigners", type=int, default=1, help="BuildGrid's job assigner threads")
    p.add_argument("--profile-server", action="store_true", help="sample BuildGrid's process with py-spy during "
                   "each remote link (active samples, every thread): server-profile.txt in the case's directory")
    a = p.parse_args()
    if a.engine == "buildbarn" and a.profile_server:
        p.error("--profile-server samples BuildGrid's Python process: not with --engine buildbarn")
    if a.prepare_only and not a.keep:
        p.error("--prepare-only needs --keep")
    if a.separate_cas is None:
        a.separate_cas = a.tuning == "deployment"
    stamp = datetime.datetime.now().astimezone()
    load = os.getloadavg()
    results: list[dict] = []
    locals_: dict[str, dict] = {}
    reused: list[str] = []
    with ExitStack() as stack:
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            tmp = a.keep
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ltowrap-cluster-")))
        for name in a.project:
            where, line, env, local, replay, expected, when = prepare(name, a, tmp)
            if when is not None:
                reused.append(f"{name} from {when}")
            if a.prepare_only:
                continue
            words = shlex.split(line)
            out = words[words.index("-o") + 1]
            locals_[name] = local
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
    if a.prepare_only:
        return 0
    note = f"; reused from --keep: {', '.join(reused)}" if reused else ""
    write_results(a.out, stamp, "cluster", "Simulated cluster", load[0], table(results, locals_),
                  {"args": vars(a) | {"out": str(a.out), "keep": str(a.keep), "client": str(a.client) if a.client else None}, "locals": locals_, "results": results}, note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
