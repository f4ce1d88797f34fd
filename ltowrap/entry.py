"""What runs first for every compiler and linker invocation that reaches Python.

The sh entry (scripts/ltowrap-clang, also installed as ltowrap-clang++ and `ltowrap`)
decides plain and ThinLTO compiles itself, in the launcher form (`ltowrap clang ...`) too;
what comes here is a subcommand, a link, or a compile the sh entry leaves to Python. It
imports only small standard-library modules: a compile, a preprocess or a non-LTO link
costs one Python start and an exec. A compile that writes bitcode also records its
options (optrecords.py); only a link that may carry bitcode loads the pipeline.
"""

from __future__ import annotations

import os
import sys

from . import config, driverargs, proc, toolchain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

ENTRY_PREFIX = "ltowrap-"
# The `ltowrap` command: a subcommand, or a command to wrap (the launcher form).
LAUNCHER = "ltowrap"
SUBCOMMANDS = frozenset(["stats", "cache", "config", "shims", "explain", "doctor", "distribute", "verify", "trace",
                         "report"])


def tool_name(argv0: str) -> str:
    """ltowrap-clang++ -> clang++; a shim's own name (clang-22, ld.lld) is the tool's."""
    name = os.path.basename(argv0)
    return name[len(ENTRY_PREFIX) :] if name.startswith(ENTRY_PREFIX) else name


def launcher(argv: list[str]) -> NoReturn:
    """`ltowrap clang ...` / `ltowrap /usr/bin/clang-22 ...` / `ltowrap ld.lld ...`, as `ccache gcc ...`.

    This is what CMake's <LANG>_COMPILER_LAUNCHER and meson's CC="ltowrap clang" run. The
    sh entry (`ltowrap` is scripts/ltowrap-clang) decides plain and ThinLTO compiles itself
    and hands the rest over whole; only real subcommands load the CLI.
    """
    if len(argv) < 2 or not argv[1] or argv[1].startswith("-") or argv[1] in SUBCOMMANDS:
        from .cli import main as cli_main

        sys.exit(cli_main(argv[1:]))
    wrapped = argv[1]
    explicit = None
    if os.sep in wrapped and not toolchain.is_ltowrap(os.path.realpath(wrapped)):
        explicit = [wrapped]  # a named compiler: use exactly that one
    # `ltowrap ltowrap-clang ...` (wrapped twice) is the same as `ltowrap-clang ...`.
    main([tool_name(wrapped), *argv[2:]], explicit)


def main(argv: list[str] | None = None, explicit: list[str] | None = None) -> NoReturn:
    argv = sys.argv if argv is None else argv
    tool = tool_name(argv[0])
    if tool == LAUNCHER:
        launcher(argv)
    settings = config.load(strict=False)  # a bad setting must not break the build: pass through
    for problem in settings.problems:
        print(f"ltowrap: {problem}; passing through", file=sys.stderr)
    try:
        real = explicit or toolchain.find_tool(tool, settings.clang)
    except toolchain.ToolNotFound as e:
        print(f"ltowrap: {e}", file=sys.stderr)
        sys.exit(127)
    args = argv[1:]
    if settings.problems and not proc.guarded():
        _count("CONFIG_ERROR", settings.cache_dir)
    if proc.guarded() or settings.disable or settings.problems:
        proc.exec_tool(real + args)
    try:
        if toolchain.is_linker(tool):
            from .pipeline import run_linker

            # The clang entry names the driver of the link line it handed over (_driver).
            sys.exit(run_linker(real, args, settings=settings, driver=os.environ.get(toolchain.DRIVER) or None))
        _driver(real, args, settings)
    except Exception as e:  # a bug in ltowrap must not break the build
        print(f"ltowrap: internal error ({type(e).__name__}: {e}); running the command unchanged", file=sys.stderr)
        _count("INTERNAL_ERROR", settings.cache_dir)
        proc.exec_tool(real + args)


def _count(reason: str, cache_dir: str) -> None:
    """Count a command run unchanged (errors.Reason's member of that name); never fails."""
    try:
        from . import stats
        from .errors import Reason

        stats.fallback_now(cache_dir, Reason[reason])
    except Exception:  # noqa: BLE001 - the command runs whatever happens here
        pass


def _seen(args: list[str]) -> list[str]:
    """The arguments as clang will see them: @response files expanded (CMake, long commands)."""
    if not driverargs.has_response_file(args):
        return args
    from .errors import Unsupported
    from .rsp import expand_response_files

    try:
        return expand_response_files(args)
    except Unsupported:
        return args  # clang will report it


def _driver(real: list[str], args: list[str], settings: config.Settings) -> NoReturn:
    lto_thin = settings.lto == "thin"
    seen = _seen(args)
    if not driverargs.is_link(seen):
        if lto_thin and "-c" in seen and driverargs.compiles_sources(seen) and not driverargs.wants_lto(seen):
            args, seen = ["-flto=thin", *args], ["-flto=thin", *seen]
        if "-c" in seen and driverargs.wants_lto(seen):
            from .optrecords import compile_and_record

            sys.exit(compile_and_record(real + args, seen, settings.cache_dir))
        proc.exec_tool(real + args)
    if lto_thin and not driverargs.wants_lto(seen):
        args, seen = ["-flto=thin", *args], ["-flto=thin", *seen]
    route = _lld_route(real, seen, settings)
    if route is None:
        proc.exec_tool(real + args)
    ld_entry, real_ld = route
    in_process = [*args, "-fuse-ld=lld", f"--ld-path={real_ld}"]
    modules = _small_link(seen, settings)
    if modules is not None:
        _link_in_process(real + in_process, modules, settings)
    env = dict(os.environ)
    env[toolchain.REAL_LD] = real_ld
    env.pop(toolchain.DRIVER, None)
    clang_var = config.ROWS["clang"].env
    this_driver = os.path.realpath(real[0])
    env.setdefault(clang_var, this_driver)
    # A backend clang other than this driver: the link must check they are one release (pipeline).
    driver = this_driver if os.path.realpath(env[clang_var]) != this_driver else None
    with_lld = in_process
    from .linkdirect import lane

    import time

    t0 = time.time()
    direct = lane(real, with_lld, real_ld, settings)
    if direct is not None and direct.restore(settings):
        sys.exit(0)
    t1 = time.time()
    from .linkline.driverline import linker_command

    line = linker_command(real, with_lld, real_ld, settings.cache_dir)
    if line is not None:
        # The driver's whole job is this one link: run it here, sparing a second Python start.
        from .pipeline import run_linker

        if direct is not None:
            direct.driver_line(line.checks)
        os.environ.update(env)
        os.environ.pop(toolchain.DRIVER, None)  # the driver goes to run_linker itself
        from .log import Phase

        spans = [(Phase.DIRECT_LANE, t0, t1), (Phase.DRIVER_LINE, t1, time.time())]
        rc = run_linker(line.argv[:1], line.argv[1:], original=real + with_lld, direct=direct, spans=spans,
                        driver=driver)
        if rc != 0:  # what the driver says after its linker failed, as it would have run it
            from . import terminal

            print(terminal.driver_error(_driver_name(real[0], seen), f"linker command failed with exit code {rc} "
                                        "(use -v to see invocation)", terminal.driver_wants(seen)), file=sys.stderr)
        sys.exit(rc)
    # Unguarded: the driver must reach our ld.lld entry, which runs the real tools guarded; the
    # driver, when it is not the backend clang, in its environment (another process: main reads it).
    if driver is not None:
        env[toolchain.DRIVER] = driver
    proc.exec_tool(real + [*args, "-fuse-ld=lld", f"--ld-path={ld_entry}"], env, guard=False)


def _small_link(args: list[str], settings: config.Settings) -> int | None:
    """The number of bitcode modules of this driver link if it is small (settings.small_link), else None.

    Counted from the command alone: each bitcode file named, each source it compiles with
    -flto. A bitcode archive (named, or found by -l in -L directories and LIBRARY_PATH)
    makes a link not small. Bitcode the count does not see (-Wl, inputs, the driver's own
    library directories) only makes a link look smaller: in-process lld links it, as
    without ltowrap, which is always sound.
    """
    limit = settings.small_link
    if limit <= 0:
        return None
    lto = driverargs.wants_lto(args)
    from .magic import is_archive, is_bitcode, read_head

    modules = 0
    lang = None
    for opt, value, is_input in driverargs.walk(args):
        if opt == "-x":
            lang = None if value == "none" else value
        if not is_input or opt == "-":
            continue
        if driverargs.is_source(opt, lang):
            modules += lto
            continue
        head = read_head(opt)
        if is_bitcode(head):
            modules += 1
        elif is_archive(head) and _has_bitcode([opt]):
            return None
        if modules > limit:
            return None
    if _has_bitcode(driverargs.library_archives(args, os.environ.get("LIBRARY_PATH", ""))):
        return None
    return modules or None  # none seen: the link line decides (bitcode from the driver's libraries, or none)


def _link_in_process(command: list[str], modules: int, settings: config.Settings) -> NoReturn:
    """Run a small link unchanged (lld's in-process ThinLTO, no cache of lld's): counted, and logged."""
    from . import stats

    stats.tally(settings.cache_dir, "links_small")  # as the sh entry counts the small links it runs
    if settings.log:
        from . import log
        from .errors import Reason

        record = log.Record(tool=os.path.basename(command[0]), argv=command, decision=log.Decision.IN_PROCESS,
                            reason=Reason.SMALL_LINK.value, modules=modules,
                            detail=f"{modules} bitcode module{'s' if modules != 1 else ''}, small_link = "
                                   f"{settings.small_link}: nothing to import or spread")
        record.end = record.start
        log.append(settings.log, record)
    proc.exec_tool(command)


def _driver_name(clang: str, args: list[str]) -> str:
    """The name the clang driver gives itself in its messages: the stem of the path it was run
    as from release 19 on (or with -no-canonical-prefixes), of that path with its symlinks
    resolved before."""
    release = toolchain.release(toolchain.version_text(clang))
    canonical = "-no-canonical-prefixes" not in args and release and int(release.split(".")[0]) < 19
    return os.path.splitext(os.path.basename(os.path.realpath(clang) if canonical else clang))[0]


def _lld_route(real: list[str], args: list[str], settings: config.Settings) -> tuple[str, str] | None:
    """(our ld.lld entry, the real ld.lld) if this driver link should reach ltowrap's linker."""
    fuse, ld_path = driverargs.linker_choice(args)
    uses_lld = fuse == "lld" or fuse.endswith("ld.lld") or os.path.basename(ld_path).startswith("ld.lld")
    if not driverargs.wants_lto(args):
        # No -flto: only bitcode among the inputs makes it a ThinLTO link. lld also takes it
        # from archives that -l finds; another linker cannot link bitcode without -flto.
        candidates = driverargs.inputs(args)
        if uses_lld:
            candidates += driverargs.library_archives(args, os.environ.get("LIBRARY_PATH", ""))
        if not _has_bitcode(candidates):
            return None
    if not uses_lld and not settings.use_lld:
        return None
    real_ld = ld_path if ld_path and os.path.basename(ld_path).startswith("ld.lld") else ""
    if not real_ld or toolchain.is_ltowrap(os.path.realpath(real_ld)):
        real_ld = toolchain.sibling(real[0], "ld.lld")
    ld_entry = os.path.join(os.path.dirname(os.path.realpath(sys.argv[0])), ENTRY_PREFIX + "ld.lld")
    if not os.access(ld_entry, os.X_OK) or not os.access(real_ld, os.X_OK):
        return None
    return ld_entry, real_ld


def _has_bitcode(paths: list[str]) -> bool:
    from .magic import is_archive, is_bitcode, read_head

    for p in paths:
        head = read_head(p)
        if is_bitcode(head):
            return True
        if is_archive(head):
            from .formats.archive import has_bitcode_member

            if has_bitcode_member(p):
                return True
    return False
