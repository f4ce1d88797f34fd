"""Smoke tests of the REAPI test harness (tests/reapi_server.py, tests/reapi_worker.py).

The client side is tests/reapi_probe.py run in the BuildGrid venv: the project venv
has no grpcio. Without that venv (no Python 3.13) they skip locally and fail under CI=true.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import alive, wait_until
from needs import missing
from reapi_server import buildgrid_or_missing, cache_server, exec_server, run_probe

CLANG = "/usr/bin/clang-22"


@pytest.fixture(scope="module")
def bgd() -> Path:
    """The BuildGrid venv's Python, which runs the probe (the project venv has no grpcio)."""
    return buildgrid_or_missing()


def _pids_alive(pids: list[int]) -> list[int]:
    # A zombie no one reaped yet is gone for our purposes.
    return [pid for pid in pids if alive(pid)]


@pytest.mark.slow  # each starts a server; tests/test_remote.py uses one in the quick loop
@pytest.mark.parametrize("instance", ["", "main"])
def test_cache_server_roundtrip(tmp_path: Path, instance: str, bgd: Path) -> None:
    with cache_server(tmp_path, instance=instance) as url:
        assert url.startswith("grpc://127.0.0.1:")
        caps = run_probe(bgd, "capabilities", "--url", url, "--instance", instance)
        assert caps["exec_enabled"] is False
        out = run_probe(bgd, "cache-roundtrip", "--url", url, "--instance", instance)
    assert out == {"missing_before": 1, "missing_after": 0, "read_back": True, "ac_hit": True,
                   "ac_miss": "NOT_FOUND"}


@pytest.mark.slow
def test_cache_server_rejects_other_instance(tmp_path: Path, bgd: Path) -> None:
    with cache_server(tmp_path, instance="main") as url:
        out = run_probe(bgd, "capabilities", "--url", url, "--instance", "")
    assert out["rpc_error"] == "INVALID_ARGUMENT"


@pytest.mark.slow
def test_exec_server_runs_clang_remotely(tmp_path: Path, bgd: Path) -> None:
    if not Path(CLANG).exists():
        missing(CLANG, "dev/setup installs clang-22")
    src = tmp_path / "in" / "src"
    src.mkdir(parents=True)
    (src / "hello.c").write_text('#include "hello.h"\nint hello(void) { return ANSWER; }\n')
    (src / "hello.h").write_text("#define ANSWER 42\n")
    platform = ["--platform", "OSFamily=linux", "--platform", "ltowrap-toolchain=clang-22-test"]
    with exec_server(tmp_path / "srv", workers=2, toolchains=["clang-22-test"]) as srv:
        pids = [srv.postgres.proc.pid] + srv.worker_pids  # type: ignore[union-attr]
        out = run_probe(bgd, "execute", "--url", srv.url, "--input", str(tmp_path / "in"), "--cwd", "src",
                        "--output", "out/hello.o", "--env", "PATH=/usr/bin:/bin", "--dest", str(tmp_path / "got"),
                        *platform, "--", CLANG, "-c", "hello.c", "-o", "out/hello.o")
        assert out["status"] == "OK" and out["exit_code"] == 0, out
        assert "out/hello.o" in out["outputs"]
        symbols = subprocess.run(["/usr/bin/llvm-nm-22", str(tmp_path / "got" / "out/hello.o")],
                                 capture_output=True, text=True, check=True).stdout
        assert "T hello" in symbols
        # The scheduler put the result in the action cache: the same Action is a hit now.
        again = run_probe(bgd, "execute", "--url", srv.url, "--input", str(tmp_path / "in"), "--cwd", "src",
                          "--output", "out/hello.o", "--env", "PATH=/usr/bin:/bin", *platform,
                          "--", CLANG, "-c", "hello.c", "-o", "out/hello.o")
        assert again["cached"] is True and again["outputs"] == out["outputs"]

        out = run_probe(bgd, "execute", "--url", srv.url, "--output", "out.txt", *platform, "--",
                        "/bin/sh", "-c", "echo hi > out.txt; echo to-stdout; echo to-stderr >&2; exit 3")
        assert (out["exit_code"], out["outputs"], out["stdout"], out["stderr"]) == (
            3, {"out.txt": "hi\n"}, "to-stdout\n", "to-stderr\n")
        out = run_probe(bgd, "execute", "--url", srv.url, "--output", "out.txt", *platform, "--",
                        "/bin/sh", "-c", "echo hi > out.txt; echo to-stdout; echo to-stderr >&2; exit 3")
        assert out["cached"] is False  # failures are not cached

        # A toolchain no worker advertises is accepted but never runs; an unknown key is refused.
        out = run_probe(bgd, "execute", "--url", srv.url, "--timeout", "2",
                        "--platform", "ltowrap-toolchain=other", "--", "/bin/true")
        assert out["rpc_error"] == "DEADLINE_EXCEEDED"
        out = run_probe(bgd, "execute", "--url", srv.url, "--platform", "colour=blue", "--", "/bin/true")
        assert out["rpc_error"] == "FAILED_PRECONDITION"
    assert _pids_alive(pids) == []


@pytest.mark.slow
def test_exec_server_named_instance_wildcard_toolchain(tmp_path: Path, bgd: Path) -> None:
    with exec_server(tmp_path, workers=1, instance="main") as srv:
        out = run_probe(bgd, "execute", "--url", srv.url, "--instance", "main", "--output", "o",
                        "--platform", "OSFamily=linux", "--platform", "ltowrap-toolchain=anything",
                        "--", "/bin/sh", "-c", "echo named > o")
    assert out["outputs"] == {"o": "named\n"}, out


@pytest.mark.slow
def test_killed_worker_job_is_requeued(tmp_path: Path, bgd: Path) -> None:
    with exec_server(tmp_path, workers=2) as srv:
        result: dict[str, object] = {}

        def run() -> None:
            result.update(run_probe(bgd, "execute", "--url", srv.url, "--output", "out", "--no-cache",
                                    "--", "/bin/sh", "-c", "sleep 3; echo done > out"))

        t = threading.Thread(target=run)
        t.start()
        # Wait for a worker to take the lease, then SIGKILL it mid-job.
        victim = wait_until(lambda: [i for i in range(2) if "lease " in srv.worker_log(i)], 30, "a worker taking the job",
                            every=0.05)[0]
        killed_at = time.monotonic()
        srv.kill_worker(victim)
        t.join(timeout=60)
        assert not t.is_alive()
        survivor = 1 - victim
        assert result.get("outputs") == {"out": "done\n"}, result
        assert result["worker"] == f"test-worker-{survivor}-{os.getpid()}"
        print(f"job finished {time.monotonic() - killed_at:.1f} s after the kill")
        pids = [srv.postgres.proc.pid] + srv.worker_pids  # type: ignore[union-attr]
    assert _pids_alive(pids) == []
