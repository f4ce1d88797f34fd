"""The HTML report of a real build (Debian lua5.4: the links lua and luac), opened in a browser.

`ltowrap report --html` is a page people open in a browser, so it is tested in one: Debian's
chromium, headless, loads the page from a file, dumps the DOM it built and takes a screenshot.
The test fails on any message the page writes to the console: the page has no script, so each
one is chromium reporting something wrong with it (an SVG attribute it cannot draw, say
`width="-1"` or `x="nan"`, or a script that should not be there). In the DOM: a heading per link,
and in that link's timeline the phases, the lookups, its lanes `lane 0` … `lane N-1` and one bar
per backend, titled by its module.

LTOWRAP_REPORT_SCREENSHOT=docs/report-lua.png makes the test copy its screenshot there: that is
how the README's picture is made (docs/figures.md has the command).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from needs import missing

from .lua import SCRIPTS, links, lua_src, lua_tree, make, wrapper_toolchain  # noqa: F401

pytestmark = pytest.mark.slow

WINDOW = (1400, 900)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Section:
    """A link's heading and what the SVG timeline under it says: its row labels and its bars' titles."""

    heading: str
    labels: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)


class _Dom(HTMLParser):
    """The sections of the dumped DOM, one per `h2.link`, each with the first SVG after it."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[Section] = []
        self._into: str | None = None  # 'heading', 'label' or 'title': the element whose text is read
        self._svgs_seen = 0  # SVGs since the last link heading: only the first is its timeline

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2" and ("class", "link") in attrs:
            self.sections.append(Section(""))
            self._into, self._svgs_seen = "heading", 0
        elif tag == "svg":
            self._svgs_seen += 1
        elif self.sections and self._svgs_seen == 1 and tag in ("text", "title"):
            self._into = "label" if tag == "text" else "title"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "text", "title"):
            self._into = None
        elif tag == "svg" and self._svgs_seen == 1:
            self._svgs_seen = 2  # the timeline is over

    def handle_data(self, data: str) -> None:
        if self._into == "heading":
            self.sections[-1].heading += data
        elif self._into == "label":
            self.sections[-1].labels.append(data)
        elif self._into == "title":
            self.sections[-1].titles.append(data)


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]  # chromium's CONSOLE lines from its stderr
    screenshot: Path


def find_chromium() -> str:
    browser = shutil.which("chromium")
    if browser is None:
        missing("chromium (Debian's, headless: the browser test of the HTML report)")
    return browser


def chromium(browser: str, page: Path, out: Path) -> Rendered:
    """The page loaded by headless chromium: the DOM after loading, the console's messages, a screenshot."""
    screenshot = out / "report.png"
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            f"--user-data-dir={out / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom",
            f"--screenshot={screenshot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}"
    # Every console message, whatever its level, comes out as ':INFO:CONSOLE' (chromium 156).
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(done.stdout, console, screenshot)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (IHDR, the first chunk)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_html_report_of_lua_in_chromium(lua_src: Path, tmp_path: Path) -> None:
    browser = find_chromium()  # before the build, so that a machine without it skips at once
    tc = wrapper_toolchain(tmp_path, 22)
    log = tmp_path / "ltowrap.log"
    make(lua_src, tc, log)
    page = tmp_path / "report.html"
    subprocess.run([str(SCRIPTS / "ltowrap"), "report", "--html", str(page)], env=tc.env | {"LTOWRAP_LOG": str(log)},
                   check=True, capture_output=True)

    shown = chromium(browser, page, tmp_path)
    assert shown.console == []
    dom = _Dom()
    dom.feed(shown.dom)
    records = links(log)
    assert sorted(s.heading.split(":")[0] for s in dom.sections) == sorted(records) == ["lua", "luac"]
    for section in dom.sections:
        record = records[section.heading.split(":")[0]]
        assert f"{len(record['backends'])} backends" in section.heading
        assert section.labels[:2] == ["phases", "lookups"], section.heading
        lanes = [label for label in section.labels if label.startswith("lane ")]
        assert lanes == [f"lane {i}" for i in range(len(lanes))] and lanes, section.heading
        # A backend's bar is titled "module: why (seconds)"; a phase's "name (seconds)".
        bars = sorted(m.group(1) for t in section.titles if (m := re.match(r"(.+?): ", t)))
        assert bars == sorted(b["module"] for b in record["backends"]), section.heading

    assert png_size(shown.screenshot) == WINDOW
    if target := os.environ.get("LTOWRAP_REPORT_SCREENSHOT"):
        shutil.copyfile(shown.screenshot, target)
