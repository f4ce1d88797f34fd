"""lld's DTLTO with ltowrap-distributor sharing backends through a real REAPI cache (BuildGrid,
Buildbarn: the `engine` fixture).

lld names archive members with per-link temporary paths; the remote action lays each
module out by content (remote/action.py), so a second machine still finds every job.
"""

from __future__ import annotations

import os
import shutil

import pytest

from helpers import dtlto_build, log_lines, stats_json
from needs import require_module
from reapi_engines import engine_cache_server

require_module("grpc")


@pytest.mark.slow
def test_second_machine_gets_dtlto_jobs_from_the_remote_cache(project, tmp_path, tc22, monkeypatch, engine):
    with engine_cache_server(engine, tmp_path / engine) as url:
        monkeypatch.setenv("LTOWRAP_REMOTE", url)
        dtlto_build(project, tc22)
        first = stats_json()
        assert first["remote_misses"] == 3 and first["remote_uploads"] == 3 and first["backend_misses"] == 3

        monkeypatch.setenv("LTOWRAP_CACHE_DIR", str(tmp_path / "second-machine"))
        (project / "prog").unlink()
        shutil.rmtree(project / "objs", ignore_errors=True)
        dtlto_build(project, tc22)
        second = stats_json()
        assert second["remote_hits"] == 3 and second["backend_misses"] == 0 and second["remote_errors"] == 0
        runs = [r for r in log_lines(tmp_path) if r["tool"] == "distributor"]
        assert all(b["source"] == "remote cache" for b in runs[-1]["backends"])
    assert os.popen(str(project / "prog")).read() == "130\n"
