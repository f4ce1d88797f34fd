"""lua5.4 built with its backend compiles on a real REAPI cluster: BuildGrid, PostgreSQL, two workers.

The server and workers come from tests/reapi_server.py (BuildGrid 0.9.1 in its own Python
3.13 venv; the workers are tests/reapi_worker.py, speaking the Bots API).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from needs import require_module
from reapi_server import buildgrid_or_missing, cache_server, exec_server

from .test_lua import (CFLAGS, lua_src, lua_tree, make, makefile_objects, run_lua, stats,  # noqa: F401
                       wrapper_toolchain)

pytestmark = pytest.mark.slow
require_module("grpc")


@pytest.fixture(autouse=True)
def buildgrid() -> None:
    buildgrid_or_missing()


CLANG = Path("/usr/lib/llvm-22/bin/clang")


def toolchain_line(clang: Path) -> str:
    return subprocess.run([clang, "--version"], check=True, capture_output=True, text=True).stdout.splitlines()[0].strip()


def backend_jobs(tree: Path) -> int:
    """Backend compiles of a cold build: lua uses every module, luac its own, the core and lauxlib."""
    core, lib = makefile_objects(tree, "CORE_O"), makefile_objects(tree, "LIB_O")
    return (1 + len(core) + len(lib)) + (1 + len(core) + 1)


def remote_toolchain(tmp_path: Path, url: str):
    tc = wrapper_toolchain(tmp_path, 22)
    tc.env.update(LTOWRAP_REMOTE=url, LTOWRAP_REMOTE_MODE="execute")
    return tc


def test_lua_backends_on_two_workers(lua_src: Path, tmp_path: Path) -> None:
    with exec_server(tmp_path / "bgd", workers=2, toolchains=[toolchain_line(CLANG)]) as server:
        tc = remote_toolchain(tmp_path, server.url)
        make(lua_src, tc, tmp_path / "ltowrap.log")
        run_lua(lua_src, tmp_path)
        s = stats(tc)
        # luac's modules are lua's too: the server answers those from its action cache.
        assert s["links_distributed"] == 2 and s["backend_misses"] == 0 and s["remote_errors"] == 0
        assert s["remote_executed"] + s["remote_hits"] + s["backend_hits"] == backend_jobs(lua_src)
        ran = [server.worker_log(i).count(" done: status=0 exit=0") for i in range(2)]
        assert all(ran), f"every worker should have run jobs: {ran}"


def test_worker_killed_mid_job_still_builds(lua_src: Path, tmp_path: Path) -> None:
    with exec_server(tmp_path / "bgd", workers=2, toolchains=[toolchain_line(CLANG)]) as server:
        tc = remote_toolchain(tmp_path, server.url)
        log = tmp_path / "ltowrap.log"
        argv = ["make", "-C", "src", "-j2", "linux", f"CC={tc.cc}", f"CFLAGS={CFLAGS}"]
        build = subprocess.Popen(argv, cwd=lua_src, env=tc.env | {"LTOWRAP_LOG": str(log)},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        killed = None  # the lease worker 0 held when it died
        deadline = time.monotonic() + 300
        while build.poll() is None and time.monotonic() < deadline:
            text = server.worker_log(0)
            leases = [line.split("lease ", 1)[1].split()[0] for line in text.splitlines() if " lease " in line]
            if leases and f"lease {leases[-1]} done" not in text:
                server.kill_worker(0)
                killed = leases[-1]
                break
            time.sleep(0.01)
        out, _ = build.communicate(timeout=600)
        assert build.returncode == 0, out
        assert killed is not None, "worker 0 never took a job"
        run_lua(lua_src, tmp_path)
        s = stats(tc)
        assert s["links_distributed"] == 2 and s["backend_failures"] == 0
        # The server gave the dead worker's job to the other one (BuildGrid re-queues a job
        # whose bot stops beating, under the same lease id): nothing was compiled here.
        assert f"lease {killed} done: status=0 exit=0" in server.worker_log(1), killed
        assert s["backend_misses"] == 0 and s["remote_errors"] == 0
        assert s["remote_executed"] + s["remote_hits"] + s["backend_hits"] == backend_jobs(lua_src)


def test_another_machine_gets_every_lua_backend_from_the_remote_cache(lua_tree: Path, lua_src: Path,
                                                                      tmp_path: Path) -> None:
    """Another cache directory and another checkout path: every backend of lua and luac is a remote hit.

    The second machine's thin-link sees other module paths (its own cache directory), so
    lld may number the values in its shards otherwise; the action cache is asked under
    the identity Action (cachekey.remote_key, the shard's canonical text), which does not
    depend on that.
    """
    with cache_server(tmp_path / "bgd") as url:
        first = wrapper_toolchain(tmp_path / "a", 22)
        first.env.update(LTOWRAP_REMOTE=url)
        make(lua_src, first, tmp_path / "a.log")
        s = stats(first)  # each backend compiled once, by one of the two links, and uploaded
        assert s["remote_uploads"] == s["backend_misses"] == backend_jobs(lua_src) - s["backend_hits"]

        other = Path(shutil.copytree(lua_tree, tmp_path / "elsewhere" / "lua5.4", symlinks=True))
        second = wrapper_toolchain(tmp_path / "b-machine", 22)
        second.env.update(LTOWRAP_REMOTE=url)
        make(other, second, tmp_path / "b.log")
        run_lua(other, tmp_path)
        s = stats(second)
        # Backends both links need are fetched by one of them, the other taking it from the local cache.
        assert s["remote_hits"] + s["backend_hits"] == backend_jobs(lua_src)
        assert s["backend_misses"] == 0 and s["remote_errors"] == 0
        for binary in ("lua", "luac"):
            assert (other / "src" / binary).read_bytes() == (lua_src / "src" / binary).read_bytes(), binary
