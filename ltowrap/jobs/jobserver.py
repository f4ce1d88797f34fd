"""A GNU make jobserver client: borrow a token for every backend compile beyond the first (slots.JobserverGate).

make passes the jobserver in MAKEFLAGS as --jobserver-auth=fifo:PATH (make >= 4.4) or
--jobserver-auth=R,W (a pipe; also --jobserver-fds=R,W in older makes); the last one
wins. Every job has one implicit slot; each further concurrent job must read one byte
from the jobserver and write the same byte back when done, whatever happens.

Reads are non-blocking on a file description of our own (the fifo opened anew, or the
pipe reopened through /proc/self/fd), so we never change the flags make's other
children share, and a wait for a token can be multiplexed with waits for our children.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field


@dataclass(eq=False, repr=False)
class Jobserver:
    """A make jobserver's pipe: the tokens this process holds from it."""

    read_fd: int
    write_fd: int
    held: list[bytes] = field(default_factory=list)
    owns_write_fd: bool = False

    def try_acquire(self) -> bool:
        # A SIGTERM raises (jobrun.Terminated) wherever Python is: between the read and the
        # append it would lose the token for the whole build. Held back until it is recorded.
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            try:
                token = os.read(self.read_fd, 1)
            except (BlockingIOError, InterruptedError):
                return False
            if not token:
                return False
            self.held.append(token)
            return True
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    def release(self) -> None:
        if self.held:
            token = self.held.pop()
            while True:
                try:
                    os.write(self.write_fd, token)
                    return
                except InterruptedError:
                    continue

    def release_all(self) -> None:
        while self.held:
            self.release()

    def close(self) -> None:
        self.release_all()
        os.close(self.read_fd)
        if self.owns_write_fd:
            os.close(self.write_fd)


def auth(makeflags: str) -> str | None:
    """The last --jobserver-auth= (or --jobserver-fds=) value in MAKEFLAGS."""
    found = None
    for word in makeflags.split():
        for prefix in ("--jobserver-auth=", "--jobserver-fds="):
            if word.startswith(prefix):
                found = word[len(prefix) :]
    return found


class Unusable(Exception):
    pass


def connect(makeflags: str) -> Jobserver | None:
    """The jobserver named in MAKEFLAGS; None if there is none; Unusable if it cannot be used."""
    value = auth(makeflags)
    if value is None:
        return None
    try:
        if value.startswith("fifo:"):
            path = value[len("fifo:") :]
            r = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            w = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            return Jobserver(r, w, owns_write_fd=True)
        r_s, _, w_s = value.partition(",")
        r_fd, w_fd = int(r_s), int(w_s)
        if r_fd < 0 or w_fd < 0:
            raise Unusable("make passed no jobserver to this command (-j1 or a recipe without '+')")
        for fd in (r_fd, w_fd):
            os.fstat(fd)
        r = os.open(f"/proc/self/fd/{r_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return Jobserver(r, w_fd)
    except (OSError, ValueError) as e:
        raise Unusable(f"make's jobserver ({value}) is not open in this recipe (mark it with '+' to share it)") from e


def default_jobs(setting: int) -> int:
    return setting if setting > 0 else len(os.sched_getaffinity(0))


def _make_process() -> str | None:
    """'<pid>-<start time>' of the nearest `make` among our ancestors, or None."""
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if comm in ("make", "gmake"):
            return f"{pid}-{fields[19]}"
        pid = int(fields[1])
        if pid <= 1:
            return None
    return None


def first_warning(marker_dir: str | None) -> bool:
    """Is this the first report of an unusable jobserver in this make run? (A marker named after make, in marker_dir.)"""
    make = _make_process()
    if marker_dir is None or make is None:
        return True
    try:
        fd = os.open(os.path.join(marker_dir, f"jobserver-warned-{make}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError:
        return True
    os.close(fd)
    return True
