"""`ltowrap`'s subcommands: statistics, cache maintenance, configuration, the shim directory, the
setup check, key dumps, verify, the trace and the report of a build, and DTLTO job files."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import __version__, stats
from .cache import Cache
from .cachedirs import OBJECTS, TMP
from .config import ROWS, ConfigError, Settings, load, parse_age, parse_size


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def stats_json(settings: Settings) -> dict:
    summed = stats.summary(settings.cache_dir)
    c = summed["counts"]
    out = {name: round(float(c.get(name, 0)), 3) if kind == "seconds" else int(c.get(name, 0))
           for name, kind, *_ in stats.COUNTERS if kind != "size"}
    total = out["backend_hits"] + out["backend_misses"]
    out["backend_hit_rate"] = round(out["backend_hits"] / total, 4) if total else None
    out["fallback_reasons"] = summed["reasons"]
    out["cache_bytes"] = stats.cache_bytes(summed)
    out["cache_entries"] = stats.cache_files(summed)
    out["max_size_bytes"] = settings.max_size
    out["zeroed_at"] = summed["zeroed_at"]
    out["cache_dir"] = settings.cache_dir
    return out


def cmd_stats(settings: Settings, a: argparse.Namespace) -> int:
    """Every counter of stats.COUNTERS, section by section, with what is derived from them."""
    if a.zero:
        stats.zero(settings.cache_dir)
        print("Statistics zeroed")
        return 0
    s = stats_json(settings)
    if a.json:
        print(json.dumps(s, indent=2, sort_keys=True))
        return 0
    zeroed = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["zeroed_at"])) if s["zeroed_at"] else "never"
    w = max(len(label) for _, _, _, label, _ in stats.COUNTERS) + 2
    lines = [f"{'Cache directory:':{w + 2}}{s['cache_dir']}", f"{'Stats zeroed:':{w + 2}}{zeroed}"]
    remote = bool(settings.remote) or any(s[name] for name, _, section, *_ in stats.COUNTERS if section == "Remote")
    section = ""
    for name, kind, where, label, _ in stats.COUNTERS:
        if kind == "size" or (where == "Remote" and not remote):
            continue
        if where != section:
            section = where
            lines.append(f"Remote ({settings.remote or 'not set now'}):" if where == "Remote" else f"{where}:")
            if where == "Cache":
                size = _human(s["max_size_bytes"]) if s["max_size_bytes"] else "unlimited"
                lines += [f"  {'Size:':{w}}{_human(s['cache_bytes'])} / {size}", f"  {'Files:':{w}}{s['cache_entries']}"]
        value = f"{s[name]:.1f} s" if kind == "seconds" else str(s[name])
        lines.append(f"  {label + ':':{w}}{value}")
        if name == "links_fallback":
            lines += [f"    {n:6d}  {stats.reason_text(reason)}"
                      for reason, n in sorted(s["fallback_reasons"].items(), key=lambda kv: -kv[1])]
        elif name == "backend_misses":
            rate = f"{100 * s['backend_hit_rate']:.1f} %" if s["backend_hit_rate"] is not None else "-"
            lines.append(f"  {'Hit rate:':{w}}{rate}")
    print("\n".join(lines))
    return 0


def _cache(settings: Settings) -> tuple[Cache, stats.Stats]:
    counters = stats.Stats()
    return Cache(settings.cache_dir, counters, settings.max_size), counters


def cmd_cache(settings: Settings, a: argparse.Namespace) -> int:
    cache, counters = _cache(settings)
    if a.action == "clear":
        cache.clear()
        stats.zero(settings.cache_dir, keep_size=False)
        print(f"Cleared {settings.cache_dir}")
        return 0
    if a.action == "trim":
        limit = parse_size(a.max_size) if a.max_size else settings.max_size
        removed = cache.trim(limit if limit else 1 << 62)
        print(f"Removed {removed} files")
    elif a.action == "evict":
        removed = cache.trim(0, older_than=parse_age(a.older_than))
        print(f"Removed {removed} files not used for {a.older_than}")
    stats.flush(settings.cache_dir, counters)
    return 0


def cmd_config(settings: Settings, a: argparse.Namespace) -> int:
    for key in ROWS:
        value = getattr(settings, key)
        if key == "remote_header" and value:  # a token: show whose header it is, not its value
            value = value.partition(":")[0] + ": (hidden)"
        print(f"({settings.origins[key]}) {key} = {value!r}")
    return 0


def shim_dir() -> str:
    """A directory of links to this install's entry scripts: clang, clang++, ld.lld, and the
    versioned names of every clang, clang++ and ld.lld on PATH now (clang-19, ld.lld-22, ...).

    A directory holds one set of names and is never changed once made (built aside, then
    renamed into place), so a version installed later gets a new directory the next time
    `ltowrap shims` runs, a removed one leaves no shim that finds nothing, and shells with
    different PATHs do not rewrite each other's shims in the middle of a build.
    """
    from .toolchain import SHIMMED, versioned_tools

    bindir = os.path.dirname(os.path.realpath(sys.argv[0]))
    names = [*SHIMMED, *versioned_tools()]
    key = hashlib.blake2b("\0".join([bindir, *names]).encode(), digest_size=8).hexdigest()
    parent = os.path.join(sys.prefix, "share", "ltowrap", "shims")
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError:
        from .config import default_cache_dir

        parent = os.path.join(default_cache_dir(), "shims")
        os.makedirs(parent, exist_ok=True)
    target = os.path.join(parent, key)
    if os.path.isdir(target):
        return target
    building = tempfile.mkdtemp(prefix=".new-", dir=parent)
    for name in names:
        entry = "ld.lld" if name.startswith("ld.lld") else "clang++" if name.startswith("clang++") else "clang"
        os.symlink(os.path.join(bindir, "ltowrap-" + entry), os.path.join(building, name))
    os.chmod(building, 0o755)
    try:
        os.rename(building, target)
    except OSError:  # another `ltowrap shims` made the same set first
        shutil.rmtree(building, ignore_errors=True)
        if not os.path.isdir(target):
            raise
    return target


def cmd_shims(settings: Settings, a: argparse.Namespace) -> int:
    print(shim_dir())
    return 0


def cmd_explain(settings: Settings, a: argparse.Namespace) -> int:
    """Show the key dumps (LTOWRAP_DEBUG=1 writes them) for the named module digests or all."""
    root = os.path.join(settings.cache_dir, OBJECTS)
    found = 0
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            if n.endswith(".key.txt"):
                with open(os.path.join(dirpath, n), encoding="utf-8", errors="replace") as f:
                    text = f.read().replace("\0", " ")  # argv fields are NUL-separated in the key
                if not a.module or any(m in text for m in a.module):
                    print(f"== {n[:-8]}\n{text}")
                    found += 1
    if not found:
        print("No key dumps found: run the link with LTOWRAP_DEBUG=1 first.", file=sys.stderr)
        return 1
    return 0


def cmd_verify(settings: Settings, a: argparse.Namespace) -> int:
    """Link the last N links of the log again, in their directories, with every cache hit
    checked (verify = 1): a hit that differs from the work done again is counted, said and
    replaced. Their outputs are written again, as a build would."""
    if not settings.log or not os.path.exists(settings.log):
        print("ltowrap verify: no log to take the links from (set LTOWRAP_LOG, and build)", file=sys.stderr)
        return 2
    with open(settings.log, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    todo = [r for r in records if r.get("tool", "").startswith("ld.lld") and r.get("decision") in ("distributed", "restored")]
    todo = todo[-a.last:] if a.last else todo
    if not todo:
        print("ltowrap verify: the log holds no distributed or restored link", file=sys.stderr)
        return 2
    entry = os.path.join(os.path.dirname(os.path.realpath(sys.argv[0])), "ltowrap-ld.lld")
    before = stats_json(settings)
    failed = 0
    for r in todo:
        env = {**os.environ, "LTOWRAP_VERIFY": "1", "LTOWRAP_REAL_LD": r["argv"][0]}
        done = subprocess.run([entry, *r["argv"][1:]], cwd=r["cwd"], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            failed += 1
            print(f"ltowrap verify: the link of {r['cwd']} exited {done.returncode}:\n{done.stderr}", file=sys.stderr)
    after = stats_json(settings)
    checks = after["verify_checks"] - before["verify_checks"]
    mismatches = after["verify_mismatches"] - before["verify_mismatches"]
    print(f"{len(todo)} links linked again: {checks} hits checked, {mismatches} differed"
          + (f", {failed} links failed" if failed else ""))
    return 1 if mismatches or failed else 0


def _chosen_links(settings: Settings, a: argparse.Namespace, command: str):  # -> list[report.Link] | None
    from . import report

    if not settings.log or not os.path.exists(settings.log):
        print(f"ltowrap {command}: no log to read (set LTOWRAP_LOG, and build)", file=sys.stderr)
        return None
    try:
        since = report.parse_since(a.since) if a.since else None
    except ValueError:
        print(f"ltowrap {command}: --since takes 10m, 2h, an ISO date and time or seconds since the epoch, "
              f"not {a.since!r}", file=sys.stderr)
        return None
    return report.links(report.read_log(settings.log), since, a.last)


def cmd_trace(settings: Settings, a: argparse.Namespace) -> int:
    from . import report

    chosen = _chosen_links(settings, a, "trace")
    if chosen is None:
        return 2
    text = json.dumps(report.trace_events(chosen))
    if a.output in (None, "-"):
        print(text)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"{len(chosen)} links traced into {a.output} (open it in https://ui.perfetto.dev or chrome://tracing)",
              file=sys.stderr)
    return 0


def cmd_report(settings: Settings, a: argparse.Namespace) -> int:
    from . import report

    chosen = _chosen_links(settings, a, "report")
    if chosen is None:
        return 2
    if a.html:
        with open(a.html, "w", encoding="utf-8") as f:
            f.write(report.html(chosen))
        print(f"{len(chosen)} links: {a.html}", file=sys.stderr)
        return 0
    print(report.text(chosen))
    return 0


def cmd_distribute(settings: Settings, a: argparse.Namespace) -> int:
    from . import distributor

    return distributor.run(a.job_file, settings)


def cmd_doctor(settings: Settings, a: argparse.Namespace) -> int:
    """Check the setup and say what to fix; exit 1 if something is broken."""
    from . import toolchain
    from .cache import Cache
    from .jobs import jobserver

    problems = 0

    def report(ok: bool, what: str, fix: str = "") -> None:
        nonlocal problems
        problems += not ok
        print(f"[{'ok' if ok else 'FAIL'}] {what}" + ("" if ok or not fix else f"\n       fix: {fix}"))

    try:
        clang = toolchain.find_tool("clang", settings.clang)[0]
        version = toolchain.version_text(clang).splitlines()[0]
        report(True, f"real clang: {clang} ({version})")
        ld = toolchain.sibling(clang, "ld.lld")
        report(os.access(ld, os.X_OK), f"ld.lld beside it: {ld}", "install the lld package of the same LLVM version (e.g. lld-22)")
    except (toolchain.ToolNotFound, OSError, IndexError) as e:
        report(False, f"real clang: {e}", "install clang (e.g. clang-22) or set LTOWRAP_CLANG")
    try:
        from .fsutil import make_dirs

        make_dirs(os.path.join(settings.cache_dir, TMP))
        probe = os.path.join(settings.cache_dir, TMP, f".doctor.{os.getpid()}")
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.unlink(probe)
        report(True, f"cache directory writable: {settings.cache_dir}")
    except OSError as e:
        report(False, f"cache directory {settings.cache_dir}: {e.strerror}", "set LTOWRAP_CACHE_DIR to a writable directory")
    try:
        js = jobserver.connect(os.environ.get("MAKEFLAGS", ""))
        report(True, "make jobserver: " + ("usable: backend compiles take its tokens" if js else
                                           "none (outside make, or make -j1)"))
        if js:
            js.close()
    except jobserver.Unusable as e:
        # Not a problem since the pool: said here once, not on every link (and under `verbose`).
        report(True, f"make jobserver: {e}; the machine's slot pool is used instead")
    report(*_pool_check(settings, Cache(settings.cache_dir, stats.Stats())))
    if settings.remote:
        for check in _remote_checks(settings):
            report(*check)
    if settings.disable:
        report(False, "ltowrap is disabled (disable / LTOWRAP_DISABLE)", "unset it to distribute links")
    print("No problems found." if not problems else f"{problems} problem(s) found.")
    return 1 if problems else 0


def _pool_check(settings: Settings, cache: Cache) -> tuple[bool, str, str]:
    """The machine's slot pool (slots.py): its size, where, how many are held now."""
    from .jobs import slots

    pool = slots.PoolGate(cache.locks, slots.pool_size(settings))
    try:
        busy = pool.in_use()
    except OSError as e:
        return False, f"slot pool in {cache.locks.path}: {e.strerror}", "set LTOWRAP_CACHE_DIR to a writable directory"
    finally:
        cache.close()
    return True, (f"slot pool: {pool.jobs} backend slots for every link without make's jobserver "
                  f"({busy} in use now, {cache.locks.path})"), ""


def _remote_checks(settings: Settings) -> list[tuple[bool, str, str]]:
    """Can the REAPI service be asked, what does it support, and (execute mode) does a probe
    action with the configured platform run? (ok, what, fix) for doctor."""
    where = f"remote {settings.remote} ({settings.remote_mode}"
    where += f", instance {settings.remote_instance!r})" if settings.remote_instance else ")"
    try:
        from .remote.client import Client, Endpoint, RemoteError
    except ImportError as e:
        return [(False, f"{where}: client not installed ({e})", "pip install 'ltowrap[remote]'")]
    try:
        client = Client(Endpoint.from_settings(settings))
    except (RemoteError, OSError) as e:
        return [(False, f"{where}: {e}", "check remote_tls_ca and remote_header")]
    try:
        try:
            caps = client.capabilities()
        except (RemoteError, OSError) as e:
            return [(False, f"{where}: {e}", "check the address, remote_tls_ca, remote_header and remote_instance")]
        cache, execution = caps.cache_capabilities, caps.execution_capabilities
        functions = ", ".join(_digest_function(f) for f in cache.digest_functions) or "SHA256 (unstated)"
        checks = [(True, f"{where}: answers: digest functions {functions}; batches up to "
                         f"{cache.max_batch_total_size_bytes or 'unlimited'} bytes (ltowrap sends {client.batch_limit}); "
                         f"action cache updates from clients: {'allowed' if client.can_update else 'refused'}; "
                         f"execution: {'enabled' if execution.exec_enabled else 'not offered'}", "")]
        if not client.can_update and settings.remote_mode == "cache":
            checks.append((True, "remote action cache is read-only for this client: hits are used, nothing is published",
                           ""))
        if settings.remote_mode == "execute":
            if not execution.exec_enabled:
                checks.append((False, f"{where}: the server does not execute actions",
                               "set remote_mode = cache, or use an execution server"))
            else:
                checks.append(_remote_probe(settings, client))
        return checks
    finally:
        client.close()


def _digest_function(value: int) -> str:
    names = {1: "SHA256", 2: "SHA1", 3: "MD5", 4: "VSO", 5: "SHA384", 6: "SHA512", 7: "MURMUR3", 8: "SHA256TREE",
             9: "BLAKE3"}
    return names.get(value, str(value))


def _remote_probe(settings: Settings, client) -> tuple[bool, str, str]:  # type: ignore[no-untyped-def]
    """Run `<remote compiler> --version` on a worker with the configured platform properties."""
    from . import toolchain
    from .config import platform_properties
    from .remote import action
    from .remote.client import RemoteError

    platform = platform_properties(settings)
    shown = ",".join(f"{k}={v}" for k, v in sorted(platform.items()))
    try:
        compiler = settings.remote_compiler or toolchain.find_tool("clang", settings.clang)[0]
    except toolchain.ToolNotFound as e:
        return False, f"remote probe: {e}", "set remote_compiler to clang's path on the workers"
    a = action.probe([compiler, "--version"], platform, int(settings.remote_exec_timeout))
    try:
        client.upload({k: a.blobs[k] for k in client.find_missing(a.blobs)})
        result = client.execute(a.key).result
        out = result.stdout_raw or (client.read((result.stdout_digest.hash, result.stdout_digest.size_bytes))
                                    if result.stdout_digest.size_bytes else b"")
    except RemoteError as e:
        return False, f"remote probe ({shown}): {compiler} --version did not run: {e}", \
            "check remote_platform against the properties your workers advertise, and remote_exec_timeout"
    first = out.decode("utf-8", "replace").strip().splitlines()[:1]
    if result.exit_code != 0:
        return False, f"remote probe ({shown}): {compiler} --version exited {result.exit_code} on the worker", \
            "set remote_compiler to clang's path on the workers"
    return True, f"remote probe ({shown}): {compiler} --version ran on a worker: {first[0] if first else '(no output)'}", ""


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
    counters = "\n".join(f"  {name}: {text}" for name, kind, _, _, text in stats.COUNTERS if kind != "size")
    s = sub.add_parser("stats", help="show cache statistics", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Counters summed over every ltowrap process since the last --zero:\n" + counters)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--zero", action="store_true", help="reset the counters")
    s.set_defaults(func=cmd_stats)
    c = sub.add_parser("cache", help="cache maintenance")
    c.add_argument("action", choices=["clear", "trim", "evict"],
                   help="clear: remove everything; trim: evict LRU files down to --max-size; evict: remove files unused for --older-than")
    c.add_argument("--max-size", help="size like 500M, 5G, 5GiB (trim)")
    c.add_argument("--older-than", default="30d", help="age like 30d, 12h (evict)")
    c.set_defaults(func=cmd_cache)
    sub.add_parser("config", help="show each setting, its value and where it came from").set_defaults(func=cmd_config)
    sub.add_parser("shims", help="print the directory of clang/clang++/ld.lld shims to put first on PATH").set_defaults(func=cmd_shims)
    d = sub.add_parser("distribute", help="run an lld DTLTO job file (what ltowrap-distributor does)")
    d.add_argument("job_file", help="the JSON file lld passes to its distributor")
    d.set_defaults(func=cmd_distribute)
    sub.add_parser("doctor", help="check the setup (real clang/lld, cache, jobserver) and say what to fix").set_defaults(func=cmd_doctor)
    v = sub.add_parser("verify", help="link the last links of the log again, checking every cache hit against "
                       "the work done again (LTOWRAP_LOG must be set)")
    v.add_argument("--last", type=int, default=10, help="how many of the last links (0: all of them; default 10)")
    v.set_defaults(func=cmd_verify)
    for name, what in (("trace", "write the links of the log as a Chrome trace (Perfetto, chrome://tracing)"),
                       ("report", "where the links of the last build spent their time, and why backends were compiled")):
        t = sub.add_parser(name, help=what + "; the last build by default (LTOWRAP_LOG must be set)")
        span = t.add_mutually_exclusive_group()
        span.add_argument("--since", help="links since then: 10m, 2h, an ISO date and time")
        span.add_argument("--last", type=int, help="the last N links (0: every link of the log)")
        if name == "trace":
            t.add_argument("-o", "--output", help="the JSON file to write (default: stdout)")
            t.set_defaults(func=cmd_trace)
        else:
            t.add_argument("--html", metavar="FILE", help="write one self-contained HTML page instead")
            t.set_defaults(func=cmd_report)
    e = sub.add_parser("explain", help="show what was hashed for backend compiles (after LTOWRAP_DEBUG=1)")
    e.add_argument("module", nargs="*", help="only dumps mentioning these module names")
    e.set_defaults(func=cmd_explain)
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
