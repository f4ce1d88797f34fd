"""The simulated cluster of bench/cluster.py, small: replay workers (tests/reapi_worker.py --replay)
answering a real link through a real BuildGrid on loopback, and the Buildbarn replay
(bench/cluster.py --engine buildbarn: a real bb_worker whose bb_runner runs bench/bb_replay.c
where the actions name clang).

A local cold link records each backend's compile time and object; 16 replay bots in one
process then serve the same link in execute mode: each fetches its job's inputs from the
CAS, waits the recorded time (20 times faster) and uploads the recorded object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import link_all, links_of, ltowrap_env, machine, many_modules, run, stats_json, toolchain_line
from needs import require_module
from buildbarn_server import bb_exec_server, replay_runner, replayed
from reapi_engines import engine_or_missing
from reapi_server import exec_server, replay_dir

require_module("grpc")

BOTS = 16


@contextmanager
def server_beside(tmp_path: Path, tc) -> Iterator:
    """An execution server without workers, started in the background (PostgreSQL and BuildGrid
    take seconds to come up): yields a function that waits for it."""
    cm = exec_server(tmp_path / "bgd", workers=0, toolchains=[toolchain_line(tc)])
    with ThreadPoolExecutor(1) as pool:
        up = pool.submit(cm.__enter__)
        try:
            yield up.result
        finally:
            up.result()
            cm.__exit__(None, None, None)


def local_link(project: Path, tmp_path: Path, tc, objects: list[str]) -> dict:
    """A cold local link of objects into prog-local; its log record."""
    local = ltowrap_env(tc, LTOWRAP_CACHE_DIR=str(tmp_path / "local"), LTOWRAP_LOG=str(tmp_path / "local.log"))
    link_all(project, local, objects, "prog-local")
    return links_of(tmp_path / "local.log")[-1]


def test_sixteen_replay_workers_run_every_job_of_a_30_module_link_once(project, tmp_path, tc22, buildgrid):
    with server_beside(tmp_path, tc22) as started:
        objects = many_modules(project, tc22, 29)
        assert len(objects) == 30
        record = local_link(project, tmp_path, tc22, objects)
        assert record["backend_compiles"] == 30
        replay = replay_dir(record, tmp_path / "local", tmp_path / "replay")
        digests = {b["digest"] for b in record["backends"]}
        assert len(digests) == 30

        server = started()
        server.start_worker(replay=replay, speed=20, bots=BOTS)
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0",
                      LTOWRAP_REMOTE_JOBS=str(BOTS), LTOWRAP_MEMO="0")
        done = link_all(project, env, objects, "prog")
        worker_log = server.worker_log(0)
    assert "ltowrap:" not in done.stderr, done.stderr
    remote = links_of(tmp_path / "a.log")[-1]
    assert sorted(b["module"] for b in remote["backends"]) == sorted(objects), "a job made twice or not at all"
    assert {b["source"] for b in remote["backends"]} == {"remote"}, [b for b in remote["backends"]
                                                                    if b["source"] != "remote"]
    assert remote["remote_executed"] == 30 and remote["backend_compiles"] == 0
    # The jobs go out as their keys are made, a few at a time (remoteside.ASK_AT_ONCE): the first
    # before the last key, not after every key and every lookup.
    last_key = next(end for name, _, end in remote["spans"] if name == "keys and cache lookups")
    assert min(b["start"] for b in remote["backends"]) < last_key
    # Each module's job was replayed by a bot exactly once (none twice, none left out).
    replayed = re.findall(r" replayed ([0-9a-f]+): (\d+) bytes fetched", worker_log)
    assert sorted(d for d, _ in replayed) == sorted(digests), worker_log[-3000:]
    assert all(int(n) > 0 for _, n in replayed)  # the inputs came from the CAS
    assert len({b["worker"] for b in remote["backends"]}) > 1  # the jobs were spread over the bots
    c = stats_json(env)
    assert c["remote_executed"] == 30 and c["remote_errors"] == 0 and c["backend_misses"] == 0
    # The replayed objects are the local run's, so the binary is the local build's, byte for byte.
    assert (project / "prog").read_bytes() == (project / "prog-local").read_bytes()
    assert run([str(project / "prog")], project).stdout == run([str(project / "prog-local")], project).stdout
    times = json.loads((replay / "times.json").read_text())
    assert set(times) == digests


@pytest.mark.slow
def test_a_module_the_replay_does_not_know_fails_its_action_and_compiles_here(project, tmp_path, tc22, buildgrid):
    """A replay directory without one module's record: that action fails on the worker (as a
    compile error would), and the job is compiled here, counted as a remote error."""
    with server_beside(tmp_path, tc22) as started:
        objects = many_modules(project, tc22, 3)
        record = local_link(project, tmp_path, tc22, objects)
        replay = replay_dir(record, tmp_path / "local", tmp_path / "replay")
        times = json.loads((replay / "times.json").read_text())
        gone = next(b for b in record["backends"] if b["module"] == "m0.o")["digest"]
        del times[gone]
        (replay / "times.json").write_text(json.dumps(times))
        server = started()
        server.start_worker(replay=replay, speed=20, bots=2)
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0",
                      LTOWRAP_MEMO="0")
        link_all(project, env, objects, "prog")
    remote = {b["module"]: b for b in links_of(tmp_path / "a.log")[-1]["backends"]}
    assert remote["m0.o"]["source"] == "compiled" and "exited 1" in remote["m0.o"]["remote_error"]
    assert all(b["source"] == "remote" for m, b in remote.items() if m != "m0.o")
    assert (project / "prog").read_bytes() == (project / "prog-local").read_bytes()


def test_buildbarn_replay_runs_every_job_once_in_clangs_place_and_the_binary_is_the_local_one(project, tmp_path,
                                                                                              tc22):
    """bench/cluster.py --engine buildbarn, small: bb_runner in a mount namespace where clang's
    path is bench/bb_replay.c. The client's actions are unchanged (argv[0] is clang's path); each
    job's inputs go through bb_worker's real fetch, its recorded object through the real upload."""
    engine_or_missing("buildbarn")
    objects = many_modules(project, tc22, 11)
    record = local_link(project, tmp_path, tc22, objects)
    replay = replay_dir(record, tmp_path / "local", tmp_path / "replay")
    digests = {b["digest"] for b in record["backends"]}
    wrap = replay_runner(replay, 20, Path(tc22.clang), Path(tc22.clang), tmp_path / "bb-replay")
    with bb_exec_server(tmp_path / "bb", concurrency=8, runner_wrap=wrap) as server:
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0",
                      LTOWRAP_REMOTE_JOBS="8", LTOWRAP_MEMO="0")
        done = link_all(project, env, objects, "prog")
    assert "ltowrap:" not in done.stderr, done.stderr
    remote = links_of(tmp_path / "a.log")[-1]
    assert {b["source"] for b in remote["backends"]} == {"remote"}, [b for b in remote["backends"]
                                                                    if b["source"] != "remote"]
    # Each module's job was replayed exactly once, by the program in clang's place.
    assert sorted(replayed(replay)) == sorted(digests)
    # Outside the runner's namespace clang is still clang.
    assert run([tc22.clang, "--version"], project).stdout.startswith(("clang", "Ubuntu clang", "Debian clang"))
    assert (project / "prog").read_bytes() == (project / "prog-local").read_bytes()
