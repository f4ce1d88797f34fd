"""`ltowrap trace` and `ltowrap report` on real links, and the progress line on a real terminal."""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

from helpers import Toolchain, links, ltowrap_env, on_terminal, prepared, run, wrapper

from ltowrap import report

MODULES = ("main.o", "add.o", "mul.o", "twice.o")


def build(d: Path, tc: Toolchain, tmp_path: Path, **extra: str) -> None:
    """Two links of the four-module program, the second with its backends from the cache."""
    prepared(d, tc)
    env = ltowrap_env(tc, LTOWRAP_JOBS="2", LTOWRAP_MEMO="0", **extra)
    for out in ("prog", "again"):
        run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", *MODULES, "-o", out], d, env=env)
    assert [r["decision"] for r in links(tmp_path)] == ["distributed", "distributed"]


def ltowrap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([wrapper("ltowrap"), *args], capture_output=True, text=True, check=True)


def test_the_trace_is_valid_and_has_one_span_per_backend_within_the_slots(project, tmp_path, tc22):
    build(project, tc22, tmp_path)
    trace = json.loads(ltowrap("trace").stdout)["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    assert spans and all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in spans)
    assert all(isinstance(e["ts"], int) and e["dur"] > 0 for e in spans)
    records = links(tmp_path)
    for record in records:
        pid = record["pid"]
        backends = [e for e in spans if e["pid"] == pid and e["cat"] != "phase"]
        assert sorted(e["name"] for e in backends) == sorted(MODULES)  # one span per backend job
        phases = {e["name"] for e in spans if e["pid"] == pid and e["cat"] == "phase"}
        assert {"plan", "thin-link", "backends", "final link"} <= phases
        compiles = [(e["ts"], e["ts"] + e["dur"]) for e in backends if e["cat"] == "compiled"]
        edges = sorted([(s, 1) for s, _ in compiles] + [(e, -1) for _, e in compiles])
        running = peak = 0
        for _, step in edges:
            running += step
            peak = max(peak, running)
        assert peak <= record["jobs"] == 2  # never more compiles at once than the link's slots
    assert {e["name"] for e in trace if e["ph"] == "C"} == {"compiles running"}
    slots = [e for e in spans if e["pid"] == report.MACHINE_PID]
    assert len(slots) == 4 and {e["tid"] for e in slots} <= {0, 1}  # the first link's compiles, in the pool's 2 slots


def test_the_report_names_the_backend_that_bounded_each_link(project, tmp_path, tc22):
    """The bound of a link that compiled: the longest compile on the lane of the one that ended
    last, up to it (the lane's compiles ran one after another); else the last hit."""
    build(project, tc22, tmp_path)
    text = ltowrap("report").stdout
    for record in links(tmp_path):
        last = max(record["backends"], key=lambda b: b["end"])
        lane = [b for b in record["backends"] if last["source"] == "compiled" and b["source"] == "compiled"
                and b["lane"] == last["lane"] and b["end"] <= last["end"]]
        bound = max(lane, key=lambda b: b["end"] - b["start"]) if lane else last
        assert f"bounded by: {bound['module']} (" in text
    assert "2 links from" in text and "slowest modules (of 4 compiled)" in text
    assert "4  a hit: " in text and "was not in the cache" in text


def test_a_plain_build_is_reported_without_any_setting(project, tmp_path, tc22):
    """No LTOWRAP_LOG: the link log in the cache directory holds the build, as `ccache -s` needs
    nothing set, so `ltowrap report` and `trace` describe it."""
    prepared(project, tc22)
    env = ltowrap_env(tc22, LTOWRAP_LOG=None)
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", *MODULES, "-o", "prog"], project, env=env)
    assert not (tmp_path / "ltowrap.log").exists() and (tmp_path / "cache" / "links.jsonl").exists()
    text = subprocess.run([wrapper("ltowrap"), "report"], env=env, capture_output=True, text=True, check=True).stdout
    assert "1 link from" in text and "prog" in text, text
    off = subprocess.run([wrapper("ltowrap"), "report"], env={**env, "LTOWRAP_LOG": "off"}, capture_output=True,
                         text=True)
    assert off.returncode != 0 and "log = off" in off.stderr


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_html_report_stands_alone(project, tmp_path, tc22):
    build(project, tc22, tmp_path)
    page = tmp_path / "report.html"
    subprocess.run([wrapper("ltowrap"), "report", "--html", str(page)], check=True, capture_output=True)
    text = page.read_text()
    parser = _Page()
    parser.feed(text)
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "link" not in tags and "http://" not in text.replace("http://www.w3.org", "")
    assert tags.count("svg") == 2 + 1  # a timeline per link, and the hit rate
    assert [a.get("class") for t, a in parser.tags if t == "h2"].count("link") == 2
    assert tags.count("tr") == 1 + 4  # the slowest modules: the header and the first link's four compiles
    assert sum(t == "rect" for t in tags) >= 2 * 4  # every backend drawn


def test_links_of_the_last_build_since_and_last():
    def rec(start: float, end: float) -> dict:
        return {"tool": "ld.lld", "argv": ["ld.lld", "-o", f"p{start}"], "start": start, "end": end}

    records = [rec(0, 10), rec(15, 20), rec(1000, 1010), rec(1012, 1020), {"tool": "clang", "start": 1030}]
    assert [link.start for link in report.links(records)] == [1000, 1012]  # after a gap of BUILD_GAP s
    assert [link.start for link in report.links(records, last=3)] == [15, 1000, 1012]
    assert [link.start for link in report.links(records, since=12)] == [15, 1000, 1012]
    assert report.parse_since("10m", now=1000.0) == 400.0


def test_an_older_line_with_phases_and_no_spans_is_reported():
    """Lines written before the spans carry `phases` ({name: seconds}, by older names): the
    report reads them; a line with spans is read from its spans alone."""
    older = {"tool": "ld.lld", "argv": ["ld.lld", "-o", "prog"], "start": 100.0, "end": 104.0, "decision": "distributed",
             "phases": {"thinlink": 0.5, "backends": 3.0, "final_link": 0.25}, "backends": []}
    [link] = report.links([older])
    assert link.phases() == {"thin-link": 0.5, "backends": 3.0, "final link": 0.25}
    assert "  phases: thin-link 0.50 s, backends 3.00 s, final link 0.25 s" in report.text([link])
    assert link.with_every_hit() == 1.0  # the link less its backends
    newer = {**older, "spans": [["thin-link", 100.0, 100.25], ["backends", 100.25, 101.0], ["backends", 102.0, 103.0]]}
    assert report.links([newer])[0].phases() == {"thin-link": 0.25, "backends": 1.75}
    assert "own CPU" not in report.text([link])


def test_a_links_own_cpu_is_shown_by_what_it_was_doing():
    """The record's cpu.by (log.CpuLedger): the largest first, the tiny ones left out."""
    rec = {"tool": "ld.lld", "argv": ["ld.lld", "-o", "prog"], "start": 100.0, "end": 104.0, "decision": "distributed",
           "cpu": {"self": 0.25, "children": 9.0,
                   "by": {"start": 0.06, "keys: shard text": 0.12, "cache": 0.0702, "the rest": 0.004}},
           "backends": []}
    assert "  ltowrap's own CPU: 0.25 s (keys: shard text 0.12 s, cache 0.07 s, start 0.06 s)" \
        in report.text(report.links([rec]))


def test_the_progress_line_shows_on_a_terminal_only(project, tmp_path, tc22):
    prepared(project, tc22)
    argv = [wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", *MODULES, "-o", "prog"]
    env = ltowrap_env(tc22, LTOWRAP_MEMO="0")
    piped = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, check=True)
    assert piped.stderr == ""
    (project / "prog").unlink()
    env["LTOWRAP_CACHE_DIR"] = str(tmp_path / "cold")  # compiles again: the line has something to show
    rc, seen = on_terminal(argv, project, env, stdout=subprocess.DEVNULL)
    assert rc == 0
    text = seen.decode()
    assert "ltowrap: prog  4/4 modules  (0 cached)" in text
    assert text.endswith("\r\x1b[K")  # and the line is cleared when the link is done


def test_the_link_log_is_rotated_once_past_its_bound(tmp_path):
    from ltowrap import logfile

    path = str(tmp_path / "log" / "links.jsonl")  # its directory is made
    for n in range(5):
        logfile.append(path, (logfile.encode({"n": n, "argv": ["a b", "é\udcff"]}) + "\n").encode(), bound=60)
    kept = [json.loads(line)["n"] for line in logfile.lines(path)]
    assert kept == sorted(kept) and kept[-1] == 4 and 0 not in kept  # the oldest went with the second rotation
    assert json.loads(logfile.lines(path)[-1])["argv"] == ["a b", "é\udcff"]
