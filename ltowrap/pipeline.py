"""The order of the stages of a distributed link, from the ld.lld command on.

argv -> LinkCommand (cmdline) -> LinkPlan (plan) -> thin-link jobs (thinlink)
     -> native objects (executor: cache or backend compile) -> final link (finallink)

A driver link (`clang ... -o prog`) has stages before these, which entry._driver orders:
the direct lane (linkdirect: restored from the driver's command alone), then the
driver's link line (driverline), then run_linker here, called with what they found
(the direct lane, their spans, the driver). The link memo's lookup and store (linkmemo)
are ordered here.

Whatever goes wrong inside ltowrap ends in the original command (RunOriginal), run
unchanged, with one `ltowrap:` line saying why, and a counted reason (errors.Reason).
Errors of the user's own link are the linker's to report.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from dataclasses import dataclass

from . import cachekey, config, fsutil, linkdirect, linkmemo, log, proc, terminal, toolchain
from .cache import MODULES
from .errors import Reason, ToolFailed, Unsupported
from .jobs import jobrun
from .linkline import cmdline

TYPE_CHECKING = False
if TYPE_CHECKING:  # the stages are imported past the link memo (_link)
    from collections.abc import Sequence

    from .stages.diagnostics import Printed
    from .stages.plan import LinkPlan, Module

# errno values that mean "this cache cannot be written", as opposed to a problem with an input.
CACHE_UNUSABLE = frozenset([errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR])


@dataclass(frozen=True)
class RunOriginal:
    """The link was not made here: the original command runs instead, unchanged."""

    reason: Reason  # NO_BITCODE: nothing to distribute (a passthrough); else why it fell back (counted, said)


def run_linker(real: list[str], args: list[str], original: list[str] | None = None,
               settings: config.Settings | None = None, direct: linkdirect.Lane | None = None,
               spans: Sequence[tuple[str, float, float]] = (), driver: str | None = None) -> int:
    """Distribute the ld.lld command `real + args`; on fallback run `original` (default: the same).

    `original` is the user's driver command when the clang entry found the link line
    itself: falling back to it reports errors exactly as the driver would. `direct` is that
    driver link's direct lane, which the link memo fills; `spans`, what the entry did first
    (the direct lane's lookup, the driver line), for the log. `driver` is the clang driver
    that gave the link line when it is not the backend clang: the two must be one release.
    """
    fallback = original or real + args
    if settings is None:
        try:
            settings = config.load()
        except config.ConfigError as e:
            print(f"ltowrap: {e}; running the link unchanged", file=sys.stderr)
            from . import stats

            stats.fallback_now(config.load(strict=False).cache_dir, Reason.CONFIG_ERROR)
            proc.exec_tool(fallback)
    record = log.Record(tool=os.path.basename(real[0]), argv=real + args, start=spans[0][1] if spans else time.time())
    for name, start, end in spans:
        record.span(name, start, end)
    with jobrun.job_run(settings, record) as run:
        rc = _attempt(run, real, args, direct, driver)
        run.cpu.now(log.Cpu.REST)
    if isinstance(rc, RunOriginal):
        proc.exec_tool(fallback)
    return rc


def _attempt(run: jobrun.JobRun, real: list[str], args: list[str], direct: linkdirect.Lane | None,
             driver: str | None) -> int | RunOriginal:
    """The distributed link's exit code, or RunOriginal when the original command must run instead."""
    try:
        try:
            rc = _distribute(run, real, args, direct, driver)
        except OSError as e:
            if e.errno not in CACHE_UNUSABLE:
                raise
            # A read-only, full or foreign cache must not cost the user the distributed link.
            print(f"ltowrap: cache {run.settings.cache_dir} unusable ({e.strerror}); linking without it",
                  file=sys.stderr)
            with run.without_cache():
                rc = _distribute(run, real, args, None, driver)
    except Unsupported as e:
        if e.reason is Reason.SMALL_LINK:  # run as lld's in-process ThinLTO: counted, and logged (_distribute)
            run.stats.add("links_small")
            return RunOriginal(e.reason)
        if e.reason is Reason.NO_BITCODE:
            run.stats.add("links_passthrough")
            return RunOriginal(e.reason)
        return _fall_back(run, e.reason, str(e))
    except ToolFailed as e:
        return _fall_back(run, e.reason, f"{e.reason.text} ({os.path.basename(e.argv[0])} exited {e.returncode})",
                          e.output)
    except OSError as e:
        where = f" '{e.filename}'" if e.filename else ""
        return _fall_back(run, Reason.FILE_ERROR, f"file error: {e.strerror or e}{where}")
    except Exception as e:  # never turn a working build into a failing one
        return _fall_back(run, Reason.INTERNAL_ERROR, f"internal error: {type(e).__name__}: {e}")
    if run.record.decision == log.Decision.RESTORED:  # by the link memo
        return rc
    run.record.decision = log.Decision.DISTRIBUTED
    run.stats.add("links_distributed")
    return rc


def _fall_back(run: jobrun.JobRun, reason: Reason, message: str, output: str = "") -> RunOriginal:
    run.record.decision, run.record.reason, run.record.detail = log.Decision.FALLBACK, reason.value, message
    run.record.output = output or None
    run.stats.fallback(reason)
    print(f"ltowrap: {message}; running the link unchanged", file=sys.stderr)
    if output and run.settings.verbose:
        print(output, file=sys.stderr)
    return RunOriginal(reason)


def _gate_options(run: jobrun.JobRun, ld: str, gated: list[tuple[str, str]]) -> None:
    """Unsupported(LINKER_OPTION) if the link names an option of a feature this ld.lld does not
    take (cmdline.Line.gated): the link runs unchanged and lld says so itself, rather than fail halfway."""
    if not gated:
        return
    facts = run.linker_facts(ld)
    for feature, option in gated:
        if feature not in facts.takes:
            raise Unsupported(Reason.LINKER_OPTION, f"{option}: {facts.version or ld} does not take it")


def _same_release(run: jobrun.JobRun, ld: str, clang: str, driver: str | None) -> jobrun.LinkerFacts:
    """The linker's facts, or Unsupported(MIXED_TOOLCHAIN) when ld.lld, the backend clang and
    the driver that gave the link line (`driver`, when it is not that clang) are not all one
    LLVM release: in-process ThinLTO compiles with lld's own LLVM, and ltowrap does not pick
    another for the user."""
    facts = run.linker_facts(ld)
    lld_release = facts.release
    clang_release = toolchain.release(cachekey.compiler_version(run.compiler_identity(clang)))
    fix = "(LTOWRAP_CLANG names the backend clang; ld.lld comes from the driver's LLVM or --ld-path)"
    if not lld_release or lld_release != clang_release:
        raise Unsupported(Reason.MIXED_TOOLCHAIN, f"ld.lld {lld_release or '(release unknown)'} ({ld}) with clang "
                          f"{clang_release or '(release unknown)'} ({clang}) for the backends {fix}")
    if driver and os.path.realpath(driver) != os.path.realpath(clang):
        driver_release = toolchain.release(cachekey.compiler_version(run.compiler_identity(driver)))
        if driver_release != clang_release:
            raise Unsupported(Reason.MIXED_TOOLCHAIN, f"a clang {driver_release or '(release unknown)'} driver "
                              f"({driver}) with clang {clang_release} ({clang}) for the backends {fix}")
    return facts


def _distribute(run: jobrun.JobRun, real: list[str], args: list[str], direct: linkdirect.Lane | None,
                driver: str | None) -> int:
    cwd = os.getcwd()
    t = time.time()
    run.cpu.now(log.Phase.MEMO_LOOKUP)
    line = cmdline.expand(args, cwd)
    _gate_options(run, real[0], line.gated())
    command = cmdline.parse_line(line, cwd)
    _small_link(run, command)
    memo = linkmemo.prepare(run, real, args, command, cwd, direct)
    restored = memo is not None and memo.restore()
    run.record.span(log.Phase.MEMO_LOOKUP, t, time.time())
    if restored:
        run.record.decision = log.Decision.RESTORED
        return 0
    workdir = run.cache.new_workdir()
    try:
        return _link(run, real, command, workdir, cwd, memo, driver)
    finally:
        if not run.settings.keep:
            fsutil.remove_tree(workdir)


def _small_link(run: jobrun.JobRun, command: cmdline.LinkCommand) -> None:
    """Unsupported(SMALL_LINK) if the link has at most small_link bitcode modules, counted from its
    inputs as lld reads them: a link that reaches ltowrap's ld.lld without the clang entry's count
    (Kbuild's `ld.lld -r`, a build that calls the linker itself) is routed as the driver's would be.

    A bitcode archive, a FatLTO link, and an input that is none of bitcode, an archive or ELF (a
    linker script, which may name more inputs) make a link not small: the plan reads them.
    """
    limit = run.settings.small_link
    if limit <= 0 or command.fat_lto_objects:
        return
    from .formats.archive import has_bitcode_member
    from .magic import ELF, is_archive, is_bitcode, read_head

    modules = 0
    for arg in command.inputs():
        assert arg.input is not None
        head = read_head(arg.input)
        if is_bitcode(head):
            modules += 1
        elif is_archive(head):
            if has_bitcode_member(arg.input):
                return
        elif not head.startswith(ELF):
            return
        if modules > limit:
            return
    if modules:
        run.record.modules = modules
        run.record.decision, run.record.reason = log.Decision.IN_PROCESS, Reason.SMALL_LINK.value
        run.record.detail = (f"{modules} bitcode module{'s' if modules != 1 else ''}, small_link = {limit}: "
                             "nothing to import or spread")
        raise Unsupported(Reason.SMALL_LINK, run.record.detail)


def _link(run: jobrun.JobRun, real: list[str], command: cmdline.LinkCommand, workdir: str, cwd: str,
          memo: linkmemo.Memo | None, driver: str | None) -> int:
    # Imported here, past the link memo: a restored link needs none of the stages (tens of ms).
    with run.cpu.charge(log.Cpu.IMPORTS):
        from .stages import diagnostics, finallink, plan, thinlink
        from .stages.backend import LinkBackend, split_dwarf

    t = time.time()
    run.cpu.now(log.Phase.PLAN)
    clang = toolchain.backend_clang(real[0], run.settings.clang)
    facts = _same_release(run, real[0], clang, driver)
    link_plan = plan.build(command, run.cache, facts.major)
    run.record.modules = len(link_plan.modules)
    run.record.span(log.Phase.PLAN, t, time.time())
    # The thin-link sees every module under its store path: the backend keys take the shards'
    # canonical text (shardkey.py), which does not depend on those paths.
    store_prefix = os.path.join(run.cache.root, MODULES) + "/"
    scripts = link_plan.scripts
    thin_files = [*link_plan.other_inputs, *command.read_files, *scripts.found, *scripts.absent]
    thin_key = None if scripts.unknown else cachekey.thinlink_key(
        cachekey.linker_identity(real[0]), cwd, link_plan.tokens(lambda m: [m.path]),
        [(m.path, m.digest) for m in link_plan.modules], thin_files)

    t0 = time.time()
    run.cpu.now(log.Phase.THIN_LINK)
    run.prestart_backends(clang)
    digest_of = cachekey.file_digests({m.path: m.digest for m in link_plan.modules}, run.cache,
                                      cachekey.facts_pack_key(cwd, command.output))
    with thinlink.thin_link(link_plan, real, run.cache, workdir, store_prefix, thin_key, thin_files,
                            facts.takes, verify=config.pick(run.settings.verify)) as result:
        run.record.thinlink_uncached = scripts.unknown or result.uncached or None
        t1 = time.time()
        run.cpu.now(log.Phase.BACKENDS)
        run.record.thinlink_cached = result.cached
        jobs = split_dwarf(result.jobs, result.regular_modules, command)
        with run.executor(LinkBackend(clang, command, run.settings.sections), clang, digest_of, command.output, len(result.jobs)) as executor:
            executor.run(jobs, {m.path: m.size for m in link_plan.modules})
        thinlink.store(run.cache, result, executor.shard_identities(), digest_of)
        with run.cpu.charge(log.Cpu.SIDE_INPUTS):
            digest_of.keep()
    printed = _backend_diagnostics(executor.printed(), link_plan, real[0], command, facts.major)
    backend_reads, uncached = executor.read_files(), executor.uncached()
    t2 = time.time()
    run.cpu.now(log.Phase.FINAL_LINK)
    if printed.errors:  # a warning under --fatal-warnings: in-process lld stops after LTO, and so does this link
        sys.stdout.buffer.write(printed.stdout.encode("utf-8", "surrogateescape"))
        sys.stderr.buffer.write(_coloured(printed.stderr.encode("utf-8", "surrogateescape"), real[0], command))
        for name, start, end in ((log.Phase.THIN_LINK, t0, t1), (log.Phase.BACKENDS, t1, t2)):
            run.record.span(name, start, end)
        return 1
    finallink.write_side_outputs(jobs, command.lto.remarks_file)
    extractions = finallink.extraction_object(result, workdir)
    final = finallink.argv(link_plan, result, real, extractions) + (memo.final_link_args(workdir) if memo else [])
    rc, out, err = finallink.run(final, link_plan, result, workdir)
    if rc == 0:  # the depfile and map it wrote name the inputs, as in-process lld's do (before the memo stores them)
        finallink.name_outputs(final, link_plan, result, workdir, run.cache.root)
    out, err = printed.stdout.encode("utf-8", "surrogateescape") + out, diagnostics.joined(printed, err)
    t3 = time.time()
    for name, start, end in ((log.Phase.THIN_LINK, t0, t1), (log.Phase.BACKENDS, t1, t2),
                             (log.Phase.FINAL_LINK, t2, t3)):
        run.record.span(name, start, end)
    if rc != 0 and not finallink.user_error(err, link_plan, toolchain.sibling(clang, "llvm-nm")):
        # Not plainly the user's own error: their command decides, as without ltowrap. What the
        # linker said goes into the log (and, with verbose, to stderr), to tell why.
        raise ToolFailed(final, rc, err.decode("utf-8", "replace"), Reason.FINAL_LINK_FAILED)
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(_coloured(err, real[0], command))
    if memo is not None and rc == 0:
        run.cpu.now(log.Phase.MEMO_STORE)
        run.record.unmemoised = memo.store(link_plan, workdir, out, err, backend_reads, uncached)
        run.record.verified = memo.verified
        run.record.span(log.Phase.MEMO_STORE, t3, time.time())
    return rc


def _backend_diagnostics(printed: list[tuple[Module, str]], link_plan: LinkPlan, ld: str,
                         command: cmdline.LinkCommand, lld_major: int) -> Printed:
    """What the backends printed, as in-process lld would print it (stages/diagnostics.py)."""
    from .stages import diagnostics

    names: dict[str, str] = {}
    for m in link_plan.modules:
        names.setdefault(m.digest, m.lld_id)
    policy = diagnostics.Policy(os.path.basename(ld).removesuffix(".exe"), command.fatal_warnings,
                                command.no_warnings, command.error_limit, lld_major)
    return diagnostics.render([(m.lld_id, text) for m, text in printed], names, policy)


def _coloured(err: bytes, ld: str, command: cmdline.LinkCommand) -> bytes:
    """What the link prints on stderr, coloured as lld colours it on a terminal (terminal.py):
    the final link's own output is captured, so lld leaves it plain."""
    if err and terminal.lld_wants(t for a in command.args for t in a.tokens):
        return terminal.lld(err, os.path.basename(ld).removesuffix(".exe"))
    return err
