"""What runs first for every compiler and linker invocation.

It runs for every compile of a build, so it imports only small standard-library modules:
a compile, a preprocess or a non-LTO link costs one Python start and an exec (the
scripts in scripts/ import nothing else). A compile that writes bitcode also records
its options (records.py); only a link that may carry bitcode loads the pipeline.
"""

from __future__ import annotations

import os
import sys

from . import driverargs, toolchain

ENTRY_PREFIX = "ltowrap-"


def tool_name(argv0: str) -> str:
    """ltowrap-clang++ -> clang++; a shim's own name (clang-22, ld.lld) is the tool's."""
    name = os.path.basename(argv0)
    return name[len(ENTRY_PREFIX) :] if name.startswith(ENTRY_PREFIX) else name


# `ltowrap <subcommand>`; anything else after `ltowrap` is a command to wrap (launcher form).
SUBCOMMANDS = frozenset(["stats", "cache", "config", "shims", "explain", "doctor", "distribute"])


def launcher() -> None:
    """`ltowrap clang ...` / `ltowrap /usr/bin/clang-22 ...` / `ltowrap ld.lld ...`, as `ccache gcc ...`.

    This is what CMake's <LANG>_COMPILER_LAUNCHER and meson's CC="ltowrap clang" run, so it
    stays on the lean path; only real subcommands load the CLI.
    """
    argv = sys.argv
    if len(argv) < 2 or argv[1].startswith("-") or argv[1] in SUBCOMMANDS:
        from .cli import main as cli_main

        sys.exit(cli_main(argv[1:]))
    wrapped = argv[1]
    explicit = None
    if os.sep in wrapped and not toolchain.is_ltowrap(os.path.realpath(wrapped)):
        explicit = [wrapped]  # a named compiler: use exactly that one
    # `ltowrap ltowrap-clang ...` (wrapped twice) is the same as `ltowrap-clang ...`.
    main([tool_name(wrapped), *argv[2:]], explicit)


def main(argv: list[str] | None = None, explicit: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    tool = tool_name(argv[0])
    env = os.environ
    passthrough = bool(env.get(toolchain.GUARD)) or env.get("LTOWRAP_DISABLE", "").lower() in ("1", "true", "yes", "on")
    try:
        from . import config

        resolved = config.resolve(env) if os.path.exists(config.config_path(env)) else None
    except Exception as e:  # a broken config file must not break the build
        print(f"ltowrap: {e}; passing through", file=sys.stderr)
        resolved, passthrough = None, True
    if resolved is not None:
        passthrough = passthrough or bool(resolved["disable"][0])
    clang_conf = str(resolved["clang"][0]) if resolved else ""
    try:
        real = explicit or toolchain.find_tool(tool, env, clang_conf)
    except toolchain.ToolNotFound as e:
        print(f"ltowrap: {e}", file=sys.stderr)
        sys.exit(127)
    args = argv[1:]
    if passthrough:
        exec_real(real, args, env)
    try:
        if tool.startswith("ld.lld") or tool == "ld":
            from .pipeline import run_linker

            sys.exit(run_linker(real, args))
        _driver(real, args, env, resolved)
    except Exception as e:  # a bug in ltowrap must not break the build
        print(f"ltowrap: internal error ({type(e).__name__}: {e}); running the command unchanged", file=sys.stderr)
        exec_real(real, args, env)


def exec_real(real: list[str], args: list[str], env: os._Environ[str] | dict[str, str] = os.environ,
              guard: bool = True) -> None:
    """Become the real tool (never returns). `guard` makes shims it reaches pass through."""
    env = dict(env)
    if guard:
        env[toolchain.GUARD] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(real[0], real + args, env)
    except OSError as e:
        print(f"ltowrap: cannot run {real[0]}: {e.strerror}", file=sys.stderr)
        sys.exit(127)


def _setting(resolved: dict | None, env: os._Environ[str], key: str) -> str:
    raw = env.get(f"LTOWRAP_{key.upper()}")
    if raw:
        return raw
    return str(resolved[key][0]) if resolved else ""


def _seen(args: list[str]) -> list[str]:
    """The arguments as clang will see them: @response files expanded (CMake, long commands)."""
    if not any(a.startswith("@") for a in args):
        return args
    from .errors import Unsupported
    from .rsp import expand_response_files

    try:
        return expand_response_files(args)
    except Unsupported:
        return args  # clang will report it


def _driver(real: list[str], args: list[str], env: os._Environ[str], resolved: dict | None) -> None:
    lto_thin = _setting(resolved, env, "lto").lower() == "thin"
    seen = _seen(args)
    if not driverargs.is_link(seen):
        if lto_thin and "-c" in seen and driverargs.compiles_sources(seen) and not driverargs.wants_lto(seen):
            args, seen = ["-flto=thin", *args], ["-flto=thin", *seen]
        if "-c" in seen and driverargs.wants_lto(seen):
            from .records import compile_and_record

            sys.exit(compile_and_record(real, args, seen, env, resolved))
        exec_real(real, args, env)
    if lto_thin and not driverargs.wants_lto(seen):
        args, seen = ["-flto=thin", *args], ["-flto=thin", *seen]
    route = _lld_route(real, seen, env, resolved)
    if route is None:
        exec_real(real, args, env)
    ld_entry, real_ld = route
    env = dict(env)
    env[toolchain.REAL_LD] = real_ld
    env.setdefault("LTOWRAP_CLANG", os.path.realpath(real[0]))
    with_lld = [*args, "-fuse-ld=lld", f"--ld-path={real_ld}"]
    linker = _linker_command(real, with_lld, real_ld)
    if linker is not None:
        # The driver's whole job is this one link: run it here, sparing a second Python start.
        from .pipeline import run_linker

        os.environ.update(env)
        sys.exit(run_linker(linker[:1], linker[1:], original=real + with_lld))
    # No guard: the driver must reach our ld.lld entry, which runs the real tools guarded.
    exec_real(real, [*args, "-fuse-ld=lld", f"--ld-path={ld_entry}"], env, guard=False)


def _linker_command(real: list[str], args: list[str], real_ld: str) -> list[str] | None:
    """The ld.lld command the driver would run (from `clang -###`), if that is all it would run.

    -### prints one line per job, each argument in double quotes with `"`, `\\` and `$`
    escaped by a backslash. Anything else (a compile job too, a driver error) is None,
    and the driver is run for real instead.
    """
    import subprocess

    done = subprocess.run([*real, "-###", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode != 0:
        return None
    jobs = [line for line in done.stderr.decode("utf-8", "surrogateescape").splitlines() if line.startswith(' "')]
    if len(jobs) != 1:
        return None
    argv = _unquote_job(jobs[0])
    return argv if argv and argv[0] == real_ld else None


def _unquote_job(line: str) -> list[str]:
    out = []
    i = line.find('"')
    while i >= 0:
        arg: list[str] = []
        i += 1
        while i < len(line) and line[i] != '"':
            if line[i] == "\\" and i + 1 < len(line):
                i += 1
            arg.append(line[i])
            i += 1
        out.append("".join(arg))
        i = line.find('"', i + 1)
    return out


def _lld_route(real: list[str], args: list[str], env: os._Environ[str], resolved: dict | None) -> tuple[str, str] | None:
    """(our ld.lld entry, the real ld.lld) if this driver link should reach ltowrap's linker."""
    fuse, ld_path = driverargs.linker_choice(args)
    uses_lld = fuse == "lld" or fuse.endswith("ld.lld") or os.path.basename(ld_path).startswith("ld.lld")
    if not uses_lld:
        use_lld = _setting(resolved, env, "use_lld").lower() not in ("0", "false", "no", "off")
        if not use_lld or not (driverargs.wants_lto(args) or _has_bitcode(driverargs.inputs(args))):
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
            from .archive import has_bitcode_member

            if has_bitcode_member(p):
                return True
    return False
