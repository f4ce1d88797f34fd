"""`ltowrap`'s subcommands: the parser and the dispatch. Each subcommand is a module of
commands/ (`ltowrap doctor` is commands/doctor.py), with a `run(settings, args)`."""

from __future__ import annotations

import argparse
import signal
import sys

from . import __version__
from .commands import cache, config, distribute, doctor, explain, report, shims, stats, trace, verify
from .config import ConfigError, load
from .stats import COUNTERS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ltowrap",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Distributed ThinLTO for unchanged builds.\n\n"
        "Use ltowrap-clang / ltowrap-clang++ as CC / CXX, put `ltowrap shims` first on PATH, or\n"
        "prefix a command as with ccache: `ltowrap clang ...`, `ltowrap ld.lld ...` (CMake's\n"
        "CMAKE_<LANG>_COMPILER_LAUNCHER / _LINKER_LAUNCHER, meson's CC='ltowrap clang').",
    )
    p.add_argument("--version", action="version", version=f"ltowrap {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    counters = "\n".join(f"  {name}: {text}" for name, kind, _, _, text in COUNTERS if kind != "size")
    s = sub.add_parser("stats", help="show cache statistics", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Counters summed over every ltowrap process since the last --zero:\n" + counters)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--zero", action="store_true", help="reset the counters")
    s.set_defaults(func=stats.run)
    c = sub.add_parser("cache", help="cache maintenance")
    c.add_argument("action", choices=["clear", "trim", "evict"],
                   help="clear: remove everything; trim: evict LRU files down to --max-size; evict: remove files unused for --older-than")
    c.add_argument("--max-size", help="size like 500M, 5G, 5GiB (trim)")
    c.add_argument("--older-than", default="30d", help="age like 30d, 12h (evict)")
    c.set_defaults(func=cache.run)
    sub.add_parser("config", help="show each setting, its value and where it came from").set_defaults(func=config.run)
    sub.add_parser("shims", help="print the directory of clang/clang++/ld.lld shims to put first on PATH").set_defaults(func=shims.run)
    d = sub.add_parser("distribute", help="run an lld DTLTO job file (what ltowrap-distributor does)")
    d.add_argument("job_file", help="the JSON file lld passes to its distributor")
    d.set_defaults(func=distribute.run)
    sub.add_parser("doctor", help="check the setup (real clang/lld, cache, jobserver) and say what to fix").set_defaults(func=doctor.run)
    v = sub.add_parser("verify", help="link the last links of the log again, checking every cache hit against "
                       "the work done again (from the link log)")
    v.add_argument("--last", type=int, default=10, help="how many of the last links (0: all of them; default 10)")
    v.set_defaults(func=verify.run)
    for name, what in (("trace", "write the links of the log as a Chrome trace (Perfetto, chrome://tracing)"),
                       ("report", "where the links of the last build spent their time, and why backends were compiled")):
        t = sub.add_parser(name, help=what + "; the last build by default (from the link log)")
        span = t.add_mutually_exclusive_group()
        span.add_argument("--since", help="links since then: 10m, 2h, an ISO date and time")
        span.add_argument("--last", type=int, help="the last N links (0: every link of the log)")
        if name == "trace":
            t.add_argument("-o", "--output", help="the JSON file to write (default: stdout)")
            t.set_defaults(func=trace.run)
        else:
            t.add_argument("--html", metavar="FILE", help="write one self-contained HTML page instead")
            t.set_defaults(func=report.run)
    e = sub.add_parser("explain", help="show what was hashed for backend compiles (after LTOWRAP_DEBUG=1)")
    e.add_argument("module", nargs="*", help="only dumps mentioning these module names")
    e.set_defaults(func=explain.run)
    return p


def main(argv: list[str] | None = None) -> int:
    # In a pipe whose reader has gone (`ltowrap stats | head -3`), end as coreutils do: killed
    # by SIGPIPE, quietly. Python ignores SIGPIPE and raises BrokenPipeError instead, whose
    # traceback (or "Exception ignored ... BrokenPipeError" at shutdown) lands on stderr.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    try:
        settings = load()
    except ConfigError as e:
        print(f"ltowrap: {e}", file=sys.stderr)
        return 2
    return args.func(settings, args)


if __name__ == "__main__":
    sys.exit(main())
