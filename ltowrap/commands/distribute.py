"""`ltowrap distribute`: run an lld DTLTO job file, as ltowrap-distributor does."""

from __future__ import annotations

import argparse

from ..config import Settings


def run(settings: Settings, a: argparse.Namespace) -> int:
    from .. import distributor

    return distributor.run(a.job_file, settings)
