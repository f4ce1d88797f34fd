"""The rule for tests whose setup is missing: a visible skip locally, a failed run under CI=true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ltowrap_env

TESTS = Path(__file__).resolve().parent
PROBE = """
from needs import missing

def test_needs_a_tool():
    missing("the frobnicator 3", "apt-get install frobnicator")
"""


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_setup_skips_locally_and_fails_in_ci(tmp_path, ci):
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = ltowrap_env(CI=ci, PYTHONPATH=str(TESTS))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "test_probe.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "setup is missing the frobnicator 3 (apt-get install frobnicator)" in done.stdout, done.stdout
    if ci:
        assert done.returncode == 1 and "1 failed" in done.stdout
    else:
        assert done.returncode == 0 and "1 skipped" in done.stdout
