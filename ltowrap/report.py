"""What LTOWRAP_LOG says of a build, shown: a Chrome trace, a terminal report, an HTML page.

Everything here is read from the log's link records (log.py): each link's phases
(`spans`: the direct lane, the driver line, the memo's lookup, the plan, the thin-link,
the keys and cache lookups, the backends, the final link, the memo's store) and each
backend job (`backends`: module, size, where its object came from, start, end, and for a
compile here its lane among the link's compiles and its slot in the machine's pool).

- trace_events: Chrome Trace Event JSON (Perfetto, chrome://tracing). One process per link
  (a `phases` track, a track per compile lane, tracks for hits, waits, the remote queue
  and each remote worker, a counter of the compiles running) and one for the machine's
  slot pool (a track per slot, every link's compiles in it).
- text: the links, where their time went, each one's critical path (the compiles its
  end waited for, lane by lane) and the backend that bounded it (the longest on that
  path), the slowest modules, why each backend was compiled rather than a hit, and what
  the link would cost with every backend a hit.
- html: one self-contained page (inline SVG and CSS, no script): a timeline per link, the
  slowest modules, the backend hit rate over time.
"""

from __future__ import annotations

import html as _html
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from .config import parse_age
from .log import Phase, Source, phase_seconds, records

BUILD_GAP = 300.0  # seconds without a link that separate two builds (the last build: report's default)
MACHINE_PID = 1  # the trace's process for the machine's slot pool (no link runs as init)
HIT_COST = 0.002  # seconds a backend hit costs when a link has none to measure


@dataclass
class Link:
    """One link record of the log."""

    record: dict
    spans: list[tuple[str, float, float]] = field(init=False)
    backends: list[dict] = field(init=False)

    def __post_init__(self) -> None:
        self.spans = [(str(n), float(s), float(e)) for n, s, e in self.record.get("spans", [])]
        self.backends = list(self.record.get("backends", []))

    @property
    def start(self) -> float:
        return float(self.record["start"])

    @property
    def end(self) -> float:
        return float(self.record.get("end") or self.start)

    @property
    def name(self) -> str:
        argv = self.record.get("argv", [])
        out = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"), "")
        return os.path.basename(out) or self.record.get("tool", "link")

    @property
    def decision(self) -> str:
        return str(self.record.get("decision", ""))

    def compiled(self) -> list[dict]:
        return [b for b in self.backends if b["source"] in (Source.COMPILED, Source.REMOTE_EXECUTED)]

    def critical_path(self) -> list[dict]:
        """The backends the link's end waited for, in order: the one that ended last, and before
        it each compile that held its lane until it started (a lane runs one compile at a
        time: gaps between them are waits for a slot). A link that compiled nothing here: the
        backend that ended last."""
        here = [b for b in self.backends if b["source"] == Source.COMPILED]
        last = max(self.backends, key=lambda b: b["end"], default=None)
        if last is None or last["source"] != Source.COMPILED:
            return [last] if last is not None else []
        chain = [last]
        while True:
            before = [b for b in here if b.get("lane") == last.get("lane") and b["end"] <= chain[-1]["start"] + 1e-4
                      and b is not chain[-1]]
            if not before:
                return chain[::-1]
            chain.append(max(before, key=lambda b: b["end"]))

    def bound(self) -> dict | None:
        """The longest backend of the critical path: what most bounds the link."""
        return max(self.critical_path(), key=lambda b: b["end"] - b["start"], default=None)

    def phases(self) -> dict[str, float]:
        """Seconds per phase (log.phase_seconds: from the spans, or an older line's `phases`)."""
        return phase_seconds(self.record)

    def phase(self, name: str) -> float:
        return self.phases().get(name, 0.0)

    def with_every_hit(self) -> float:
        """What the link would have cost with every backend a hit: the link less its backends
        phase, plus its backends at what a hit costs (this link's hits, or HIT_COST each)."""
        hits = [b["end"] - b["start"] for b in self.backends if b["source"] == Source.CACHED and not b.get("waited")]
        each = sorted(hits)[len(hits) // 2] if hits else HIT_COST
        return self.end - self.start - self.phase(Phase.BACKENDS) + each * len(self.backends)


def read_log(path: str) -> list[dict]:
    """The log's records, oldest first (log.records)."""
    return records(path)


def links(records: Iterable[dict], since: float | None = None, last: int | None = None) -> list[Link]:
    """The link records (the distributor's too) since a time, or the last N, or the last build:
    the links since the last gap of BUILD_GAP seconds without one."""
    found = [Link(r) for r in records if r.get("tool", "").startswith(("ld.lld", "distributor"))]
    found.sort(key=lambda link: link.start)
    if since is not None:
        return [link for link in found if link.start >= since]
    if last is not None:
        return found[-last:] if last > 0 else found
    first = len(found)
    while first > 0 and (first == len(found) or found[first].start - found[first - 1].end <= BUILD_GAP):
        first -= 1
    return found[first:]


def parse_since(text: str, now: float | None = None) -> float:
    """'10m', '2h' (that long ago), an ISO date and time, or seconds since the epoch."""
    now = time.time() if now is None else now
    try:
        return now - parse_age(text)
    except ValueError:
        pass
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


# --- the trace ---------------------------------------------------------------------------------


def _lanes(spans: list[dict]) -> list[int]:
    """A track for each span (sorted by start) so that none overlaps another on its track: the
    first track free when it starts."""
    ends: list[float] = []  # when the last span of each track ends
    out = []
    for b in spans:
        lane = next((i for i, end in enumerate(ends) if end <= b["start"]), len(ends))
        if lane == len(ends):
            ends.append(b["end"])
        else:
            ends[lane] = b["end"]
        out.append(lane)
    return out


def trace_events(chosen: list[Link]) -> dict:
    """Chrome Trace Event JSON (the object form) of these links."""
    if not chosen:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    t0 = min(link.start for link in chosen)
    events: list[dict] = []

    def us(t: float) -> int:
        return round((t - t0) * 1e6)

    def span(name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict | None = None) -> None:
        events.append({"name": name, "cat": cat, "ph": "X", "ts": us(start), "dur": max(us(end) - us(start), 1),
                       "pid": pid, "tid": tid, "args": args or {}})

    def meta(pid: int, tid: int | None, kind: str, name: str, sort: int) -> None:
        events.append({"name": kind, "ph": "M", "pid": pid, **({"tid": tid} if tid is not None else {}),
                       "args": {"name": name}})
        events.append({"name": kind.replace("_name", "_sort_index"), "ph": "M", "pid": pid,
                       **({"tid": tid} if tid is not None else {}), "args": {"sort_index": sort}})

    pids: set[int] = set()
    slots: set[int] = set()
    for n, link in enumerate(chosen):
        pid = int(link.record.get("pid", 0))
        while pid in pids or pid == MACHINE_PID:
            pid += 1 << 22
        pids.add(pid)
        meta(pid, None, "process_name", f"{link.name} ({link.decision}, {link.end - link.start:.2f} s)", n + 1)
        meta(pid, 0, "thread_name", "phases", 0)
        for name, start, end in link.spans:
            span(name, "phase", pid, 0, start, end)
        tracks: dict[str, int] = {}
        groups: dict[str, list[dict]] = {}
        for b in link.backends:
            if b["source"] == Source.COMPILED:
                group = f"compile lane {b.get('lane') or 0}"
            elif b["source"] == Source.REMOTE_EXECUTED and b.get("worker"):
                group = f"remote worker {b['worker']}"
            elif b.get("waited"):
                group = "waited for another link"
            else:
                group = {Source.CACHED: "cache hits", Source.REMOTE_CACHED: "remote cache",
                         Source.REMOTE_EXECUTED: "remote workers"}.get(b["source"], b["source"])
            groups.setdefault(group, []).append(b)
        for group in sorted(groups, key=lambda g: (not g.startswith("compile"), g)):
            members = sorted(groups[group], key=lambda b: b["start"])
            sub = [0] * len(members) if group.startswith("compile") else _lanes(members)
            for b, lane in zip(members, sub):
                track = f"{group} {lane}" if lane else group
                if track not in tracks:
                    tracks[track] = len(tracks) + 1
                    meta(pid, tracks[track], "thread_name", track, tracks[track])
                args = {k: b[k] for k in ("source", "size", "key", "waited", "raced", "uncached", "verified",
                                          "remote_error", "action", "worker", "queued") if b.get(k) is not None}
                start = b["start"]
                if b.get("queued"):  # its time in the server's queue, on a track of its own
                    if "remote queue" not in tracks:
                        tracks["remote queue"] = len(tracks) + 1
                        meta(pid, tracks["remote queue"], "thread_name", "remote queue", tracks["remote queue"])
                    start = min(b["start"] + b["queued"], b["end"])
                    span(f"{b['module']} (queued)", "queued", pid, tracks["remote queue"], b["start"], start)
                span(b["module"], b["source"], pid, tracks[track], start, b["end"], args)
                if b.get("slot") is not None:
                    slots.add(int(b["slot"]))
                    span(f"{b['module']} ({link.name})", b["source"], MACHINE_PID, int(b["slot"]), b["start"], b["end"])
        running = sorted([(b["start"], 1) for b in link.compiled()] + [(b["end"], -1) for b in link.compiled()])
        count = 0
        for t, step in running:
            count += step
            events.append({"name": "compiles running", "ph": "C", "ts": us(t), "pid": pid, "args": {"compiles": count}})
    if slots:
        meta(MACHINE_PID, None, "process_name", "this machine's slot pool", 0)
        for slot in sorted(slots):
            meta(MACHINE_PID, slot, "thread_name", f"slot {slot}", slot)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# --- the terminal report -----------------------------------------------------------------------


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def why(b: dict) -> str:
    """Why a backend was compiled, or where its object came from, in one line."""
    if b.get("uncached"):
        return f"not cacheable: {b['uncached']}"
    if b.get("verified"):
        return f"a hit checked (verify): {b['verified']}"
    source = b["source"]
    if source == Source.COMPILED:
        remote = f"; the remote: {b['remote_error']}" if b.get("remote_error") else ""
        return f"compiled: its key was not in the cache{remote}"
    if b.get("waited"):
        return "another link was compiling it: waited, then a hit"
    return {Source.CACHED: "a hit", Source.REMOTE_CACHED: "a hit in the remote cache",
            Source.REMOTE_EXECUTED: "run on a remote worker"}.get(source, source)


def text(chosen: list[Link], slowest: int = 10) -> str:
    if not chosen:
        return "No links in the log for that span of time."
    start, end = min(link.start for link in chosen), max(link.end for link in chosen)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start))
    lines = [f"{len(chosen)} link{'' if len(chosen) == 1 else 's'} from {when}, {_s(end - start)}"]
    for link in chosen:
        hits = sum(b["source"] != Source.COMPILED for b in link.backends)
        lines.append(f"\n{link.name}: {link.decision}, {_s(link.end - link.start)}, {len(link.backends)} backends "
                     f"({len(link.backends) - hits} compiled here, {hits} from a cache or elsewhere)")
        # Each span in the order it ran; an older line without spans: its phases' totals.
        phases = [(n, e - s) for n, s, e in link.spans] if link.spans else list(link.phases().items())
        phases = [(n, d) for n, d in phases if d >= 0.0005]
        if phases:
            lines.append("  phases: " + ", ".join(f"{n} {_s(d)}" for n, d in phases))
        cpu = link.record.get("cpu") or {}
        if cpu.get("by"):  # ltowrap's own CPU by what it was doing (log.CpuLedger), the largest first
            shares = sorted(((n, float(s)) for n, s in cpu["by"].items() if float(s) >= 0.005), key=lambda p: -p[1])
            lines.append(f"  ltowrap's own CPU: {_s(float(cpu['self']))} ("
                         + ", ".join(f"{n} {_s(s)}" for n, s in shares) + ")")
        path = link.critical_path()
        bound = link.bound()
        if bound is not None:
            busy = sum(b["end"] - b["start"] for b in path)
            waits = path[-1]["end"] - path[0]["start"] - busy
            lines.append(f"  critical path: {len(path)} backends, {_s(busy)} of work"
                         + (f" and {_s(waits)} waiting for a slot" if waits >= 0.005 else "")
                         + f", ending at +{_s(path[-1]['end'] - link.start)}")
            lines.append(f"  bounded by: {bound['module']} ({why(bound) if bound['source'] != Source.COMPILED else 'compiled'}, "
                         f"{_s(bound['end'] - bound['start'])}, from +{_s(bound['start'] - link.start)} to "
                         f"+{_s(bound['end'] - link.start)})")
            lines.append(f"  with every backend a hit: about {_s(link.with_every_hit())}")
    compiled = sorted(((b, link) for link in chosen for b in link.compiled()), key=lambda p: p[0]["start"] - p[0]["end"])
    if compiled:
        lines.append(f"\nslowest modules (of {len(compiled)} compiled):")
        for b, link in compiled[:slowest]:
            lines.append(f"  {_s(b['end'] - b['start']):>8}  {b['module']}  {_size(b.get('size'))}  ({link.name})")
    lines.append("\nwhy each backend was compiled, or where its object came from (a key's inputs: LTOWRAP_DEBUG=1, "
                 "then `ltowrap explain MODULE`):")
    reasons: dict[str, list[str]] = {}
    for link in chosen:
        for b in link.backends:
            reasons.setdefault(why(b), []).append(b["module"])
    for reason, modules in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(modules[:3]) + (f", … ({len(modules)})" if len(modules) > 3 else "")
        lines.append(f"  {len(modules):5d}  {reason}: {shown}")
    return "\n".join(lines)


# --- the HTML page -------------------------------------------------------------------------------

_COLOURS = {Source.COMPILED: "#d9822b", Source.CACHED: "#3a9e5c", Source.REMOTE_CACHED: "#2b7bb9",
            Source.REMOTE_EXECUTED: "#7a5cc7"}
# Phases, in the order a link runs them. The executor's own (keys and cache lookups, remote lookup)
# fall inside `backends`: they get a row of their own.
_PHASES = {Phase.DIRECT_LANE: "#b0b6c0", Phase.DRIVER_LINE: "#8a8f98", Phase.MEMO_LOOKUP: "#c7b26a",
           Phase.PLAN: "#6f8fa6", Phase.THIN_LINK: "#4d6a8a", Phase.BACKENDS: "#d8c9b0", Phase.FINAL_LINK: "#6a7b4d",
           Phase.MEMO_STORE: "#a88f6a"}
_INNER_PHASES = {Phase.KEYS: "#9c6ab0", Phase.REMOTE_LOOKUP: "#5c8fc7"}
_STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #eee}
td.n{text-align:right;font-variant-numeric:tabular-nums}.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}svg text{font:11px system-ui,sans-serif}"""


def _timeline(link: Link, width: int = 960) -> str:
    """An SVG timeline of one link: its phases on the first row, then one row per track."""
    total = max(link.end - link.start, 1e-3)
    rows: list[tuple[str, list[tuple[float, float, str, str]]]] = [
        ("phases", [(s, e, n, _PHASES.get(n, "#999")) for n, s, e in link.spans if n not in _INNER_PHASES]),
        ("lookups", [(s, e, n, _INNER_PHASES[n]) for n, s, e in link.spans if n in _INNER_PHASES])]
    lanes: dict[str, list[tuple[float, float, str, str]]] = {}
    members = sorted(link.backends, key=lambda b: b["start"])
    for b, lane in zip(members, _lanes(members)):
        colour = _COLOURS.get(b["source"], "#999")
        lanes.setdefault(f"lane {lane}", []).append((b["start"], b["end"], f"{b['module']}: {why(b)}", colour))
    rows += sorted(lanes.items(), key=lambda kv: int(kv[0].split()[1]))
    left, row_h = 70, 16
    height = row_h * len(rows) + 22
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for i, (label, spans) in enumerate(rows):
        y = i * row_h
        parts.append(f'<text x="0" y="{y + 12}">{_html.escape(label)}</text>')
        for s, e, title, colour in spans:
            x = left + (s - link.start) / total * (width - left)
            w = max((e - s) / total * (width - left), 1)
            parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" fill="{colour}">'
                         f'<title>{_html.escape(title)} ({e - s:.3f} s)</title></rect>')
    for k in range(5):
        x = left + k / 4 * (width - left)
        anchor = ("start", "middle", "middle", "middle", "end")[k]
        parts.append(f'<text x="{x:.1f}" y="{height - 4}" text-anchor="{anchor}">{total * k / 4:.2f} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _hit_rate_chart(chosen: list[Link], width: int = 960, height: int = 160) -> str:
    """The share of each link's backends that were hits, at the time the link ended."""
    points = sorted((link.end, sum(b["source"] != Source.COMPILED for b in link.backends) / len(link.backends))
                    for link in chosen if link.backends)
    if not points:
        return "<p>No backends in these links.</p>"
    t0, t1 = points[0][0], max(points[-1][0], points[0][0] + 1e-3)
    xy = [(40 + (t - t0) / (t1 - t0) * (width - 60), 10 + (1 - rate) * (height - 30)) for t, rate in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#3a9e5c"><title>{100 * r:.0f} %</title></circle>'
                   for (x, y), (_, r) in zip(xy, points))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">'
            f'<text x="0" y="14">100 %</text><text x="0" y="{height - 18}">0 %</text>'
            f'<polyline points="{path}" fill="none" stroke="#3a9e5c" stroke-width="2"/>{dots}'
            f'<text x="40" y="{height - 2}">{time.strftime("%H:%M:%S", time.localtime(t0))}</text>'
            f'<text x="{width - 20}" y="{height - 2}" text-anchor="end">'
            f'{time.strftime("%H:%M:%S", time.localtime(t1))}</text></svg>')


def html(chosen: list[Link], slowest: int = 10) -> str:
    e = _html.escape
    legend = "".join(f'<span><i style="background:{c}"></i>{e(k)}</span>'
                     for k, c in {**_COLOURS, **_PHASES, **_INNER_PHASES}.items())
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>ltowrap report</title>',
             f"<style>{_STYLE}</style></head><body>", "<h1>ltowrap report</h1>",
             f"<pre>{e(text(chosen, slowest).split(chr(10), 1)[0])}</pre>", f'<div class="legend">{legend}</div>']
    for link in chosen:
        parts.append(f'<h2 class="link">{e(link.name)}: {e(link.decision)}, {link.end - link.start:.2f} s, '
                     f"{len(link.backends)} backends</h2>")
        parts.append(_timeline(link))
    compiled = sorted(((b, link) for link in chosen for b in link.compiled()), key=lambda p: p[0]["start"] - p[0]["end"])
    parts.append('<h2>Slowest modules</h2><table class="slowest"><tr><th>seconds</th><th>module</th><th>size</th>'
                 "<th>link</th></tr>")
    for b, link in compiled[:slowest]:
        parts.append(f'<tr><td class="n">{b["end"] - b["start"]:.2f}</td><td>{e(b["module"])}</td>'
                     f'<td class="n">{_size(b.get("size"))}</td><td>{e(link.name)}</td></tr>')
    parts.append("</table><h2>Backend hit rate over time</h2>")
    parts.append(_hit_rate_chart(chosen))
    parts.append("</body></html>")
    return "\n".join(parts)
