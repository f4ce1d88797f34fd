"""The two ways a stage can refuse to go on: the link is out of scope, or a tool failed."""

from __future__ import annotations


class Unsupported(Exception):
    """ltowrap cannot distribute this link; the reason is a short, countable phrase."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolFailed(Exception):
    """A tool that ltowrap ran on its own behalf failed (not the user's final command)."""

    def __init__(self, argv: list[str], returncode: int, output: str) -> None:
        super().__init__(f"{argv[0]} exited {returncode}")
        self.argv = argv
        self.returncode = returncode
        self.output = output
