"""What a test needs from the machine that dev/setup prepares, and what happens when it is missing.

Locally a missing piece (a toolchain, BuildGrid, PostgreSQL, a mount namespace) is a
visible skip that names it. In CI (CI=true, as .ci/run runs) it fails the run: dev/setup
was supposed to install it, so a skip there would be a green run that tested nothing.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(what: str, fix: str = "dev/setup installs it") -> NoReturn:
    """Skip (locally) or fail (CI=true) a test that cannot run because `what` is not on this machine."""
    message = f"setup is missing {what} ({fix})"
    if in_ci():
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_module(name: str) -> object:
    """pytest.importorskip, under the same rule."""
    try:
        return __import__(name)
    except ImportError as e:
        missing(f"the Python module {name} ({e})", "pip install '.[remote]'")
