"""Starting processes: every tool ltowrap runs or becomes is started here, with the recursion guard.

A real tool that ltowrap runs gets GUARD in its environment, so that a shim it reaches
(a clang that finds our ld.lld on PATH, a second ltowrap install) passes straight through.
The one exception is the driver that must reach ltowrap's own ld.lld entry
(`exec_tool(..., guard=False)`).

Runs on the compile path: `subprocess` (slow to import) is loaded only by the
functions that capture output, never by exec_tool, spawn or wait.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import NoReturn

    from .errors import Reason

GUARD = "LTOWRAP_ACTIVE"


def tool_env(env: Mapping[str, str] | None = None, guard: bool = True) -> dict[str, str]:
    out = dict(os.environ if env is None else env)
    if guard:
        out[GUARD] = "1"
    return out


def guarded(env: Mapping[str, str] = os.environ) -> bool:
    """Were we started by ltowrap itself (so must pass through)?"""
    return bool(env.get(GUARD))


def exec_tool(argv: list[str], env: Mapping[str, str] | None = None, guard: bool = True) -> NoReturn:
    """Become the tool (never returns); a tool that cannot be started exits 127, as a shell would."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, tool_env(env, guard))
    except OSError as e:
        print(f"ltowrap: cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
        sys.exit(127)


class Child:
    """A started process; `pidfd` (Linux) becomes readable when it exits, for select()."""

    __slots__ = ("pid", "pidfd")

    def __init__(self, pid: int, pidfd: int = -1) -> None:
        self.pid = pid
        self.pidfd = pidfd

    def wait(self) -> int:
        """Its exit code; a death by signal N is 128 + N, as a shell reports it."""
        _, status = os.waitpid(self.pid, 0)
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return exit_code(status)

    def kill(self, sig: int) -> None:
        """Stop it and reap it (an already gone child is fine)."""
        try:
            self.send(sig)
        except OSError:
            pass
        try:
            self.wait()
        except OSError:
            pass

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)


def exit_code(status: int) -> int:
    """A wait status as an exit code; a death by signal N is 128 + N, as a shell reports it."""
    rc = os.waitstatus_to_exitcode(status)
    return rc if rc >= 0 else 128 - rc


def spawn(argv: list[str], output: int | None = None, watch: bool = False, keep_fds: tuple[int, ...] = (),
          sigmask: Iterable[int] | None = None, env: Mapping[str, str] | None = None) -> Child:
    """Start a guarded tool; its stdout and stderr go to the file open at `output` or stay ours.

    OSError if it cannot be started. `watch` opens a pidfd to wait on with select().
    `keep_fds` stay open in the tool (a dup2 onto itself clears close-on-exec), as the
    lock of the slot it runs in. `sigmask` is the tool's signal mask (default: ours). `env`
    is its whole environment, guarded already (tool_env: a caller starting many tools
    makes it once); by default, ours guarded.
    """
    actions = [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in keep_fds]
    if output is not None:
        actions += [(os.POSIX_SPAWN_DUP2, output, 1), (os.POSIX_SPAWN_DUP2, output, 2)]
    env = tool_env() if env is None else env
    if sigmask is None:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    else:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsigmask=sigmask)
    return Child(pid, os.pidfd_open(pid) if watch else -1)


def capture(argv: list[str], cwd: str | None = None, merge: bool = False, env: Mapping[str, str] | None = None,
            guard: bool = True) -> tuple[int, bytes, bytes]:
    """Run a tool to completion: (exit code, stdout, stderr); stderr is in stdout if `merge`.

    `env` (default: ours) and `guard` as exec_tool's. A tool that cannot be started gives 127
    and the reason on stderr.
    """
    import subprocess

    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                              cwd=cwd, env=tool_env(env, guard))
    except OSError as e:
        return 127, b"", f"cannot run {argv[0]}: {e.strerror}".encode()
    return done.returncode, done.stdout, done.stderr or b""


def run(argv: list[str], cwd: str | None = None, reason: Reason | None = None) -> bytes:
    """Run a tool ltowrap needs for itself: its merged output, or ToolFailed carrying it."""
    return run_apart(argv, cwd, reason, merge=True)[0]


def run_apart(argv: list[str], cwd: str | None = None, reason: Reason | None = None,
              merge: bool = False) -> tuple[bytes, bytes]:
    """Run a tool ltowrap needs for itself: (stdout, stderr), or ToolFailed carrying both."""
    rc, out, err = capture(argv, cwd, merge)
    if rc != 0:
        from .errors import Reason, ToolFailed

        raise ToolFailed(argv, rc, (out + err).decode("utf-8", "replace"), reason or Reason.TOOL_FAILED)
    return out, err
