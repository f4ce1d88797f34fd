"""`ltowrap doctor`: check the setup (the real clang and lld, the cache, the jobserver, the slot
pool, the remote service) and say what to fix."""

from __future__ import annotations

import argparse
import os

from .. import stats
from ..cache import Cache
from ..cachedirs import TMP
from ..config import Settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..remote.client import Client


def run(settings: Settings, a: argparse.Namespace) -> int:
    """Check the setup and say what to fix; exit 1 if something is broken."""
    from .. import toolchain
    from ..jobs import jobserver

    problems = 0

    def report(ok: bool, what: str, fix: str = "") -> None:
        nonlocal problems
        problems += not ok
        print(f"[{'ok' if ok else 'FAIL'}] {what}" + ("" if ok or not fix else f"\n       fix: {fix}"))

    clang = None
    try:
        clang = toolchain.find_tool("clang", settings.clang)[0]
        version = toolchain.version_text(clang).splitlines()[0]
        report(True, f"real clang: {clang} ({version})")
        ld = toolchain.sibling(clang, "ld.lld")
        report(os.access(ld, os.X_OK), f"ld.lld beside it: {ld}", "install the lld package of the same LLVM version (e.g. lld-22)")
    except (toolchain.ToolNotFound, OSError, IndexError) as e:
        report(False, f"real clang: {e}", "install clang (e.g. clang-22) or set LTOWRAP_CLANG")
    try:
        from ..fsutil import make_dirs

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
    report(True, _reader_line())
    if clang is not None:
        report(True, _fork_server_line(settings, clang))
    if settings.remote:
        for check in _remote_checks(settings):
            report(*check)
    if settings.disable:
        report(False, "ltowrap is disabled (disable / LTOWRAP_DISABLE)", "unset it to distribute links")
    print("No problems found." if not problems else f"{problems} problem(s) found.")
    return 1 if problems else 0


def _pool_check(settings: Settings, cache: Cache) -> tuple[bool, str, str]:
    """The machine's slot pool (slots.py): its size, where, how many are held now."""
    from ..jobs import slots

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
        from ..remote.client import Client, Endpoint, RemoteError
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


def _remote_probe(settings: Settings, client: Client) -> tuple[bool, str, str]:
    """Run `<remote compiler> --version` on a worker with the configured platform properties."""
    from .. import toolchain
    from ..config import platform_properties
    from ..remote import action
    from ..remote.client import RemoteError

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


def _fork_server_line(settings: Settings, clang: str) -> str:
    """Whether backend clangs are forked from one clang a link (jobs/forkserver.py): tried for
    real. Without it they start anew: slower, never wrong."""
    from .. import proc
    from ..jobs import forkserver

    anew = "each backend clang starts anew"
    if not settings.fork_server:
        return f"fork server: off (fork_server): {anew}"
    if forkserver.library() is None:
        return f"fork server: not built (no C compiler at install time?): {anew}"
    server = forkserver.start(clang, proc.tool_env(), ())
    if server is None:
        return f"fork server: {clang} cannot serve as one (not a dynamically linked program?): {anew}"
    server.close()
    return f"fork server: ready: backend clangs are forked from one {clang} a link"


def _reader_line() -> str:
    """Which bitcode reader runs. The Python one is slower, never wrong: it gives the same keys."""
    from ..formats import bitcode

    if bitcode.implementation() == "compiled":
        return "bitcode reader: compiled (ltowrap._bitcode)"
    why = "turned off by LTOWRAP_NATIVE=0" if os.environ.get("LTOWRAP_NATIVE") == "0" else \
        "not built (no C compiler at install time?): reinstall with one to make cold links faster"
    return f"bitcode reader: Python, {why}"
