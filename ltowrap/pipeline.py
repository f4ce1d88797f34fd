"""The one module that knows the order of the stages of a distributed link.

argv -> LinkCommand (cmdline) -> LinkPlan (plan) -> thin-link jobs (thinlink)
     -> native objects (executor: cache or backend compile) -> final link (finallink)

Whatever goes wrong inside ltowrap ends in the original command, run unchanged, with
one `ltowrap:` line saying why, and a counted reason. Errors of the user's own link
are the linker's to report.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from . import cmdline, finallink, jobserver, log, plan, progress, remote, stats, thinlink, toolchain
from .cache import TOOLCHAINS, Cache
from .cachekey import digest_bytes, file_digests
from .config import ConfigError
from .backend import LinkBackend
from .entry import exec_real
from .errors import ToolFailed, Unsupported
from .executor import Executor
from .settings import Settings, load


# errno values that mean "this cache cannot be written", as opposed to a problem with an input.
CACHE_UNUSABLE = frozenset([errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR])


class _Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every finally block runs."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated()


class _Fallback(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def run_linker(real: list[str], args: list[str], original: list[str] | None = None) -> int:
    """Distribute the ld.lld command `real + args`; on fallback run `original` (default: the same).

    `original` is the user's driver command when the clang entry found the link line
    itself: falling back to it reports errors exactly as the driver would.
    """
    fallback = original or real + args
    record: dict = {
        "tool": os.path.basename(real[0]), "cwd": os.getcwd(), "argv": real + args, "decision": "passthrough",
        "reason": None, "modules": 0, "backend_compiles": 0, "backend_hits": 0, "thinlink_cached": False,
        "phases": {}, "backends": [], "pid": os.getpid(), "start": time.time(),
    }
    try:
        settings = load()
    except ConfigError as e:
        print(f"ltowrap: {e}; running the link unchanged", file=sys.stderr)
        exec_real(fallback[:1], fallback[1:])
    counters = stats.Stats()
    cache = Cache(settings.cache_dir, counters, settings.max_size)
    rc: int | None = None
    signal.signal(signal.SIGTERM, _terminated)
    try:
        try:
            rc = _in_workdir(cache, settings, lambda wd: _distribute(real, args, settings, cache, wd, record))
        except OSError as e:
            if e.errno not in CACHE_UNUSABLE:
                raise
            # A read-only, full or foreign cache must not cost the user the distributed link.
            print(f"ltowrap: cache {settings.cache_dir} unusable ({e.strerror}); linking without it", file=sys.stderr)
            counters.add("cache_write_errors")
            with tempfile.TemporaryDirectory(prefix="ltowrap-nocache-") as root:
                scratch = Cache(root, stats.Stats(), 0)
                rc = _in_workdir(scratch, settings, lambda wd: _distribute(real, args, settings, scratch, wd, record))
        record["decision"] = "distributed"
        counters.add("links_distributed")
    except Unsupported as e:
        if e.reason == "no bitcode":
            counters.add("links_passthrough")
        else:
            _fallback_note(record, counters, e.reason)
    except _Fallback as e:
        _fallback_note(record, counters, e.reason, e.detail)
    except ToolFailed as e:
        _fallback_note(record, counters, f"{os.path.basename(e.argv[0])} failed", e.output)
    except OSError as e:
        _fallback_note(record, counters, f"file error: {e.strerror or e}" + (f" '{e.filename}'" if e.filename else ""))
    except Exception as e:  # never turn a working build into a failing one
        _fallback_note(record, counters, f"internal error: {type(e).__name__}: {e}")
    except (KeyboardInterrupt, _Terminated) as e:
        # Children are stopped, tokens returned and the work directory removed by now
        # (finally blocks); die of the same signal, as the linker would have.
        sig = signal.SIGTERM if isinstance(e, _Terminated) else signal.SIGINT
        record.update(decision="interrupted", reason=signal.Signals(sig).name, end=time.time())
        stats.flush(settings.cache_dir, counters)
        if settings.log:
            log.append(settings.log, record)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        raise
    record["end"] = time.time()
    try:
        if rc is not None:
            cache.maybe_cleanup(counters)
    except OSError:
        pass
    stats.flush(settings.cache_dir, counters)
    if settings.log:
        log.append(settings.log, record)
    if rc is None:
        exec_real(fallback[:1], fallback[1:])
    return rc


def _in_workdir(cache: Cache, settings: Settings, body: Callable[[str], int]) -> int:
    """Run body(workdir) in a fresh per-link directory, removed afterwards unless keep is set."""
    workdir = cache.new_workdir()
    try:
        return body(workdir)
    finally:
        if not settings.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _fallback_note(record: dict, counters: stats.Stats, reason: str, detail: str = "") -> None:
    record["decision"] = "fallback"
    record["reason"] = reason
    counters.fallback(reason)
    print(f"ltowrap: {reason}; running the link unchanged", file=sys.stderr)
    if detail and os.environ.get("LTOWRAP_VERBOSE"):
        print(detail, file=sys.stderr)


def compiler_identity(clang: str, cache: Cache) -> str:
    """`clang --version` and the identity of the files that make up the compiler.

    Running clang costs ~30 ms, so the answer is kept in the cache under the stat
    identity of the driver and of the LLVM libraries beside it, and asked again only
    when one of them changes.
    """
    real = os.path.realpath(clang)
    libdir = os.path.join(os.path.dirname(os.path.dirname(real)), "lib")
    try:
        libs = sorted(n for n in os.listdir(libdir) if n.startswith(("libLLVM", "libclang-cpp")) and ".so" in n)
    except OSError:
        libs = []
    files = [real, *(os.path.join(libdir, n) for n in libs)]
    stamp = "\0".join(f"{f}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}" for f in files if (st := _stat(f)))
    key = digest_bytes(stamp.encode())
    entry = cache.get(TOOLCHAINS, key)
    if entry is not None:
        return entry.payload.decode()
    done = subprocess.run([clang, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    identity = f"{stamp}\0{done.stdout.decode(errors='replace')}"
    cache.put(TOOLCHAINS, key, {}, identity.encode())
    return identity


def llvm_major(identity: str) -> int:
    """The major version in a compiler identity's `clang version N.x` (0 if not found).

    The thin-link's lld is the one beside this clang (toolchain.sibling), so it is the same.
    """
    marker = "clang version "
    i = identity.find(marker)
    digits = identity[i + len(marker) :].split(".", 1)[0] if i >= 0 else ""
    return int(digits) if digits.isdigit() else 0


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _backend_clang(real_ld: str, settings: Settings) -> str:
    clang = os.environ.get("LTOWRAP_CLANG") or settings.clang or toolchain.sibling(real_ld, "clang")
    if not os.access(clang, os.X_OK):
        raise Unsupported(f"no clang beside {real_ld} for backend compiles")
    return clang


def _distribute(real: list[str], args: list[str], settings: Settings, cache: Cache, workdir: str, record: dict) -> int:
    cwd = os.getcwd()
    command = cmdline.parse(args, cwd)
    # The view is named for the output's file name only, so another checkout of the same
    # project (or a clean rebuild) sees its modules under the very same paths.
    link = digest_bytes(os.path.basename(command.output).encode())
    with cache.view(link, os.path.join(workdir, "view")) as view:
        return _link(real, settings, cache, workdir, record, command, view, cwd)


def _link(real: list[str], settings: Settings, cache: Cache, workdir: str, record: dict, command: cmdline.LinkCommand,
          view: str, cwd: str) -> int:
    link_plan = plan.build(command, cache, view)
    record["modules"] = len(link_plan.modules)
    clang = _backend_clang(real[0], settings)
    store_prefix = view + "/"
    ld_st = os.stat(real[0])
    thin_key = thinlink.key(link_plan, real, f"{os.path.realpath(real[0])}\0{ld_st.st_size}\0{ld_st.st_mtime_ns}", cwd)

    t0 = time.time()
    digest_of = file_digests({m.path: m.digest for m in link_plan.modules})
    identity = compiler_identity(clang, cache)
    result = thinlink.run(link_plan, real, cache, workdir, store_prefix, thin_key, digest_of, llvm_major(identity))
    t1 = time.time()
    record["thinlink_cached"] = result.cached
    js, jobs = jobserver.from_environment(settings.jobs, cache.tmp_dir())
    bar = progress.for_link(command.output, len(result.jobs), settings.progress)
    executor = Executor(LinkBackend(clang, command), identity, cache, jobs, digest_of,
                        per_module_options=settings.backend_opts == "module", debug=settings.debug,
                        jobserver=js, progress=bar, remote=remote.connect(settings, cache.stats, identity, digest_of))
    try:
        executor.run(list(result.jobs), {m.path: m.size for m in link_plan.modules})
    finally:
        if js is not None:
            js.close()
        if bar is not None:
            bar.finish()
        if executor.remote is not None:
            executor.remote.close()
    t2 = time.time()
    final = finallink.argv(link_plan, result, real)
    rc, out, err = finallink.run(final, result, workdir)
    t3 = time.time()
    record["phases"] = {"thinlink": round(t1 - t0, 4), "backends": round(t2 - t1, 4), "final_link": round(t3 - t2, 4)}
    record.update(executor.log_fields())
    if rc != 0 and not finallink.user_error(err, link_plan, toolchain.sibling(clang, "llvm-nm")):
        # Not plainly the user's own error: their command decides, as without ltowrap.
        raise _Fallback("final link failed")
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(err)
    return rc
