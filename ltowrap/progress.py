"""One self-updating status line per link, only on a terminal (or when forced)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO


def wanted(setting: str, stream: TextIO = sys.stderr) -> bool:
    if setting in ("0", "1"):
        return setting == "1"
    return stream.isatty()


@dataclass(eq=False, repr=False)
class Progress:
    """The progress line of one link's backend compiles."""

    name: str
    total: int
    stream: TextIO = sys.stderr
    start: float = field(default_factory=time.time)
    shown: bool = False
    done: int = 0  # modules done so far
    cached: int = 0  # of which cached

    def one_more(self, cached: bool) -> None:
        """One more module done (cached or not): the line shows it."""
        self.done += 1
        self.cached += cached
        line = (f"ltowrap: {self.name}  {self.done}/{self.total} modules  ({self.cached} cached)  "
                f"{time.time() - self.start:.1f} s")
        self.stream.write("\r\033[K" + line)
        self.stream.flush()
        self.shown = True

    def finish(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def for_link(output: str, total: int, setting: str) -> Progress | None:
    return Progress(os.path.basename(output), total) if wanted(setting) and total else None
