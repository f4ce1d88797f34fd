"""Backend compiles forked from one clang a link, rather than each started anew.

Starting clang is mostly the dynamic loader's work: mapping libLLVM and libclang-cpp,
relocating them, running their static constructors. A link starts its backend clang once,
with ltowrap/_forkserver.c preloaded: that clang stops before its main and forks once a
job, each child going on into clang's main with the job's command line and environment.
What a child does from main on is what a clang started for the job does, so its object is
the same; what it skips is the loading.

A child is watched as a started compile is (local.Running): readable when it has ended (its
status pipe, written by the server once it reaped the child), stopped through its pidfd.
The server is used only for a dynamically linked ELF clang; a clang it cannot serve (not
ELF, static, the library not built, the server gone) is started as before, by posix_spawn.
`fork_server = false` starts every compile so.
"""

from __future__ import annotations

import array
import os
import select
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

FD_VARIABLE = "LTOWRAP_FORK_SERVER_FD"
# The server's own command line, after clang's path: the room a child's command line is
# written over, for ps and /proc/<pid>/cmdline (a longer one is cut short there, not in
# what clang's main gets). clang rejects the option, should the library fail to stop it.
ROOM = "--ltowrap-fork-server=" + "-" * (32 * 1024)
READY_TIMEOUT = 10.0  # seconds for the server to say it is ready; else clang is started per job


def library() -> str | None:
    """The built fork server (ltowrap/_forkserver*.so), or None if the install has none."""
    here = Path(__file__).resolve().parent.parent
    return next((str(p) for p in sorted(here.glob("_forkserver*.so"))), None)


def dynamic_elf(path: str) -> bool:
    """A 64-bit little-endian ELF executable with a program interpreter: one whose start goes
    through the dynamic loader and so through a preloaded library."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":
        return False
    phoff = int.from_bytes(head[32:40], "little")
    size, count = int.from_bytes(head[54:56], "little"), int.from_bytes(head[56:58], "little")
    PT_INTERP = 3
    for i in range(count):
        at = phoff + i * size
        if at + 4 > len(head):
            return False
        if int.from_bytes(head[at:at + 4], "little") == PT_INTERP:
            return True
    return False


class ServedChild(proc.Child):
    """A compile the server forked. `pidfd` is its status pipe (readable once it ended and was
    reaped, as a pidfd is once its process ends); `signals` is its pidfd, to stop it."""

    __slots__ = ("signals",)

    def __init__(self, pid: int, status: int, signals: int) -> None:
        super().__init__(pid, status)
        self.signals = signals

    def wait(self) -> int:
        """Its exit code, as proc.Child.wait gives it; 128 + SIGKILL if the server went away
        before it could say (the compile is then waited for, and counted as killed)."""
        try:
            data = b""
            while len(data) < 4:
                more = os.read(self.pidfd, 4 - len(data))
                if not more:
                    break
                data += more
        finally:
            os.close(self.pidfd)
            self.pidfd = -1
        if len(data) < 4:
            select.select([self.signals], [], [])
            rc = 128 + signal.SIGKILL
        else:
            rc = proc.exit_code(int.from_bytes(data, "little", signed=True))
        os.close(self.signals)
        self.signals = -1
        return rc

    def send(self, sig: int) -> None:
        signal.pidfd_send_signal(self.signals, sig)


@dataclass(eq=False, repr=False)
class Launched:
    """A fork server started: the clang it serves, and the socket it listens on. Until it says
    it is ready (`ready`), its clang loads while the link goes on."""

    clang: str
    env: Mapping[str, str]  # the jobs' environment (what the children get, whole)
    process: proc.Child
    sock: socket.socket

    def ready(self) -> Server | None:
        """The server, once it says it is ready (within READY_TIMEOUT); None if it did not."""
        self.sock.settimeout(READY_TIMEOUT)
        try:
            ready = self.sock.recv(16) == b"ready"
        except OSError:
            ready = False
        self.sock.settimeout(None)
        server = Server(self.clang, self.env, self.process, self.sock,
                        _strings([f"{k}={v}" for k, v in self.env.items()]))
        if not ready:
            server.close()
            return None
        return server

    def discard(self) -> None:
        """Stop a server never asked for (it may still be loading: nothing is waited for), and reap it."""
        self.sock.close()
        self.process.kill(signal.SIGKILL)

    def close(self) -> None:
        """End the server (its socket closed), and reap it."""
        self.sock.close()
        # It ends on that, unless it never came to serve (then it is stopped).
        ended, _, _ = select.select([self.process.pidfd], [], [], READY_TIMEOUT)
        if ended:
            self.process.wait()
        else:
            self.process.kill(signal.SIGTERM)


@dataclass(eq=False, repr=False)
class Server(Launched):
    """A running fork server, ready: it forks a compile a request."""

    env_block: bytes  # `env`, in the form of a request

    def spawn(self, argv: list[str], output: int, keep_fds: tuple[int, ...]) -> ServedChild | None:
        """Fork a compile of `argv` writing to `output`; None if the server is gone or could not fork."""
        status_read, status_write = os.pipe2(os.O_CLOEXEC)
        try:
            message = _strings(argv) + self.env_block
            self.sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                           array.array("i", (status_write, output, *keep_fds)))])
            data, ancillary, _, _ = self.sock.recvmsg(4, socket.CMSG_SPACE(4))
        except OSError:
            data, ancillary = b"", []
        finally:
            os.close(status_write)
        pidfd = next((array.array("i", d)[0] for level, kind, d in ancillary
                      if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS), -1)
        pid = int.from_bytes(data, "little", signed=True) if len(data) == 4 else 0
        if pid <= 0 or pidfd < 0:
            os.close(status_read)
            if pidfd >= 0:
                os.close(pidfd)
            return None
        return ServedChild(pid, status_read, pidfd)


def launch(clang: str, env: Mapping[str, str], sigmask: Iterable[int]) -> Launched | None:
    """Start a fork server for `clang`, with the jobs' environment `env` and signal mask,
    without waiting for it; None if this clang cannot be served (the library missing, not a
    dynamic ELF, or it could not be started)."""
    lib = library()
    if lib is None or not dynamic_elf(clang):
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    preload = f"{lib}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else lib
    quiet = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        process = proc.spawn([clang, ROOM], output=quiet, watch=True, keep_fds=(theirs.fileno(),), sigmask=sigmask,
                             env={**env, "LD_PRELOAD": preload, FD_VARIABLE: str(theirs.fileno())})
    except OSError:
        ours.close()
        return None
    finally:
        theirs.close()
        os.close(quiet)
    return Launched(clang, env, process, ours)


def start(clang: str, env: Mapping[str, str], sigmask: Iterable[int]) -> Server | None:
    """A fork server for `clang`, ready; None if this clang cannot be served (launch), or it did not say ready."""
    launched = launch(clang, env, sigmask)
    return launched.ready() if launched is not None else None


def _strings(items: list[str]) -> bytes:
    """The server's form of a list: its count, then each item, each ended by a NUL; encoded
    as os.fsencode encodes a name, in one go."""
    return "\0".join([str(len(items)), *items, ""]).encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


@dataclass(eq=False, repr=False)
class Forks:
    """How one run starts its compiles: from a fork server of the run's clang if it has one
    (started ahead, prestart, or at the first compile), else each by posix_spawn (proc.spawn)."""

    enabled: bool = True
    env: dict[str, str] = field(default_factory=proc.tool_env)  # the run's compiles' environment, made once
    server: Server | None = None
    launched: Launched | None = None  # started ahead, not yet heard from
    tried: bool = False  # a server was started, or found not to be possible, for this run
    forked: int = 0  # compiles the server forked

    def prestart(self, clang: str, env: Mapping[str, str], sigmask: Iterable[int]) -> None:
        """Start the server before the first compile needs it (the pipeline does, as the
        thin-link starts): its clang loads on another core meanwhile."""
        if self.enabled and not self.tried:
            self.tried = True
            self.launched = launch(clang, env, sigmask)

    def spawn(self, argv: list[str], output: int, keep_fds: tuple[int, ...], sigmask: set[int],
              env: Mapping[str, str]) -> proc.Child:
        server = self._server(argv[0], env, sigmask)
        if server is not None:
            child = server.spawn(argv, output, keep_fds)
            if child is not None:
                self.forked += 1
                return child
            self._drop()  # gone: the rest of the run starts its compiles itself
        return proc.spawn(argv, output=output, watch=True, keep_fds=keep_fds, sigmask=sigmask, env=env)

    def _server(self, clang: str, env: Mapping[str, str], sigmask: set[int]) -> Server | None:
        if not self.tried and self.enabled:
            self.prestart(clang, env, sigmask)
        if self.launched is not None:
            self.server, self.launched = self.launched.ready(), None
        server = self.server
        # The environment a server was started with is the jobs' own, whole: equal, or it is not used.
        return server if server is not None and server.clang == clang and (server.env is env or server.env == env) \
            else None

    def close(self) -> None:
        """The run is over: its server ends (a next run starts its own)."""
        self._drop()
        self.tried = False

    def _drop(self) -> None:
        if self.launched is not None:  # never asked for
            self.launched.discard()
            self.launched = None
        if self.server is not None:
            self.server.close()
            self.server = None
