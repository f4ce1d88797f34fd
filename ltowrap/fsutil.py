"""Files that are only ever seen whole: atomic writes, private directories, advisory locks.

Standard library only, and only its cheapest modules: the compile path writes option
records through it, and a restored link (linkdirect.py) counts its hit through it.
"""

from __future__ import annotations

import errno
import fcntl
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dirs(path: str) -> None:
    """Like os.makedirs, but every directory it creates is private, not just the last one."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        make_dirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from None


def temp_dir(prefix: str, parent: str | None = None) -> str:
    """A new private directory under `parent` (tempfile.mkdtemp).

    tempfile and shutil are imported here, when used: with the `re` they pull in, their
    import is milliseconds that a link the memo restores must not pay.
    """
    import tempfile

    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def remove_tree(path: str) -> None:
    """Remove a directory and what it holds, as far as possible (shutil.rmtree, errors ignored)."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def atomic_write(path: str, data: bytes | tuple[bytes, ...], mode: int = FILE_MODE, create_dirs: bool = True) -> None:
    """Write beside `path` and rename over it: readers see the old file or the new one, whole.
    `data` is the file's bytes, or its parts in order.

    `mode` goes through the umask, as for any new file. Missing directories are created
    (private) unless `create_dirs` is off (a user's output: its directory is theirs to make).

    The temp file is created with O_EXCL | O_NOFOLLOW, so a symlink planted in the cache
    cannot redirect the write; rename replaces a planted symlink rather than following it.
    """
    tmp = _temp_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

    def write() -> None:
        try:
            fd = os.open(tmp, flags, mode)
        except FileNotFoundError:
            if not create_dirs:
                raise
            make_dirs(os.path.dirname(path))
            fd = os.open(tmp, flags, mode)
        try:
            for part in (data,) if isinstance(data, bytes) else data:
                write_all(fd, part)
        finally:
            os.close(fd)

    _into_place(tmp, path, write)


def link_into(src: str, dest: str) -> int | None:
    """Give the file at `src` the name `dest` too (a hard link; `src` itself if it is a
    symlink), replacing what is there whole, as atomic_write does; returns the size of what
    it replaced, None if nothing was there. Missing directories are created (private).
    OSError where the file system cannot link (EXDEV, EPERM, ...)."""
    try:
        try:
            os.link(src, dest, follow_symlinks=False)
        except FileNotFoundError:
            make_dirs(os.path.dirname(dest))
            os.link(src, dest, follow_symlinks=False)
        return None
    except FileExistsError:
        pass
    try:
        replaced: int | None = os.lstat(dest).st_size
    except OSError:
        replaced = None
    tmp = _temp_name(dest)
    _into_place(tmp, dest, lambda: os.link(src, tmp, follow_symlinks=False))
    return replaced


def _temp_name(path: str) -> str:
    """A name for a temp file beside `path`, in its directory, that no other writer picks."""
    return f"{path[: path.rfind('/') + 1]}.tmp.{os.getpid()}.{os.urandom(6).hex()}"


def _into_place(tmp: str, path: str, make: Callable[[], None]) -> None:
    """Make the temp file `tmp` (`make`), then rename it over `path`. The temp file is removed
    if either fails, or a signal (KeyboardInterrupt) comes in between: it is never left behind."""
    try:
        make()
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a write to a regular file is short only when it is
    interrupted or the disk fills up; the next write then raises)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_all(fd: int, size: int | None = None) -> bytes:
    """What is left to read from `fd`, to its end: a regular file in one read of its size
    (`size`, if the caller has it from its own fstat; the Python file objects' buffering
    and terminal checks cost four more system calls a file, on the backends' path)."""
    if size is None:
        size = os.fstat(fd).st_size
    data = os.read(fd, size + 1)
    if len(data) <= size < 1 << 30:  # short: at the end (one read moves at most 2 GiB; a pipe's size is 0)
        return data
    chunks = [data]
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_bytes(path: str) -> bytes:
    return _read(path, os.O_RDONLY | os.O_CLOEXEC)


def read_nofollow(path: str) -> bytes:
    """The file's bytes; OSError (ELOOP) if `path` is a symlink."""
    return _read(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _read(path: str, flags: int) -> bytes:
    fd = os.open(path, flags)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


class locked:
    """flock() a lock file for a `with` block, which gets False (without waiting) if
    `blocking` is off and the lock is taken, else True.

    A class rather than a contextlib generator: contextlib costs a few ms to import.
    """

    def __init__(self, path: str, blocking: bool = True) -> None:
        self.path = path
        self.blocking = blocking
        self.fd = -1

    def __enter__(self) -> bool:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if self.blocking else fcntl.LOCK_NB))
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES) and not self.blocking:
                return False
            os.close(self.fd)
            raise
        except BaseException:
            os.close(self.fd)
            raise
        return True

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
