"""`ltowrap config`: each setting, its value and where it came from."""

from __future__ import annotations

import argparse

from ..config import ROWS, Settings


def run(settings: Settings, a: argparse.Namespace) -> int:
    for key in ROWS:
        value = getattr(settings, key)
        if key == "remote_header" and value:  # a token: show whose header it is, not its value
            value = value.partition(":")[0] + ": (hidden)"
        print(f"({settings.origins[key]}) {key} = {value!r}")
    return 0
