"""The local cache: content-addressed bitcode modules, backend objects, thin-link records.

Layout under the cache directory (created 0700, files 0600; the names are cachedirs.py's):
    m/<pos>-<digest>.o  bitcode modules and archive members, named by link position and the xxh3-128 of their
                        bytes: the thin-link sees its modules under these paths
    o/<key>             backend objects                   entries (below), payload: the object
    t/<key>             thin-link records                 entries, data: the shards, imports, regular-LTO object
    l/<key>             link memo: manifests, direct      entries, data (linkmemo.py, linkdirect.py)
                        entries; whole links' outputs     entries, payload: the outputs, then stdout, stderr
    c/<key>             facts kept under what they depend entries, data: `clang --version` under the stat
                        on                                identity of the compiler's files (cachekey), lld's
                                                          facts, options a clang rejects, the facts of a link's
                                                          modules under the link (cachekey.facts_pack_key)
    d/<key>             the driver's link line            entries, data (driverline.py)
    r/xx/<digest>       per-module compile options (optrecords.py; the sh entry writes them too): not entries,
                        the arguments NUL-terminated; not trimmed by size
    stats/              counters (stats.py)
    locks/<host>/       this machine's backend slots (a file each) and claims on entries being made (bytes of
                        one file, `claims`: locks.py)
    tmp/                per-link working directories

An entry, in one grammar for every kind:
    entry   = payload meta u32le(len(meta)) xxh3-128(payload meta u32le(len(meta))) MAGIC
                                               MAGIC: 8 bytes, the checksum: 16
    meta    = marshal(dict)                    "key": the entry's own key, then what a kind with a raw
                                               payload says of it (o/: the compile's seconds or remote action; l/ results:
                                               the outputs' sizes)
    payload = bytes                            raw: o/, l/ results (Cache.put, Cache.get)
            | marshal(data)                    every other entry (Cache.put_data, Cache.get_data)
    data    = None | bool | int | float | str | bytes | list, tuple or dict of data
Structured payloads are marshalled, as the meta is: a built-in module, already loaded on
a restored link's path, and it carries bytes (a thin-link's shards) as they are. A payload
that does not decode, or whose data is not of its kind's shape, is a bad entry: removed,
counted (bad_entries), a miss.

The payload comes first, so an object entry is the object with a tail after it, and lld
reads it as the object (an ELF file's headers say where its parts are; what follows them
is never read). A backend's output becomes its entry where it lies, the tail appended and
the file linked into o/ (Cache.put_file), and a hit is linked into the link's work
directory (Cache.link_out): neither copies the object nor makes a file of its own.

An entry is written to a temp file and renamed into place, or linked into place whole,
so it is seen whole or not at all; its checksum is verified on every read (before the
meta is unmarshalled), and a bad entry is removed and counts as a miss. An entry of an
older ltowrap (its MAGIC at its start) is a plain miss. Hits refresh the file's mtime,
which is the LRU order used by eviction.

A restored link (linkdirect.py) reads entries, so this module imports nothing costly; the
locks module is loaded on first use.
"""

from __future__ import annotations

import marshal
import os
import time

import xxhash

from . import fsutil
from .cachedirs import CLEANUP_LOCK, DRIVER_LINES, GONE, LINKS, MODULES, OBJECTS, RECORDS, THINLINKS, TMP, TOOLCHAINS
from .stats import Stats, cache_bytes, summary

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from .locks import Claims, LockDir

    T = TypeVar("T")

# 3: structured payloads are marshalled data (the thin-link record was JSON with base64 shards).
# 4: the payload first, the meta and MAGIC after it (an object entry is the object, tail after).
MAGIC = b"LTOWRAP4"
OLD_MAGICS = (b"LTOWRAP1", b"LTOWRAP2", b"LTOWRAP3")  # at an older entry's start: a plain miss, not a bad entry
TAIL = 28  # the tail's fixed part: the meta's length, the checksum, MAGIC
KINDS = (OBJECTS, THINLINKS, MODULES, RECORDS, TOOLCHAINS, LINKS, DRIVER_LINES)
# Trimmed by size, least recently used first. Option records (r/) are left out: they are
# tiny, written by compiles, and losing one would change how its module is compiled.
SIZED_KINDS = (OBJECTS, THINLINKS, MODULES, TOOLCHAINS, LINKS, DRIVER_LINES)
# What a data payload's reader may raise on data of another shape: a bad entry, not a crash.
BAD_DATA = (ValueError, EOFError, TypeError, KeyError, IndexError)


class Entry:
    """A verified entry: its meta (a dict of plain values) and its payload, and the file it was
    read from (`path`, and `ino`: its device and inode) for Cache.link_out."""

    __slots__ = ("meta", "payload", "path", "ino")

    def __init__(self, meta: dict, payload: bytes, path: str = "", ino: tuple[int, int] | None = None) -> None:
        self.meta = meta
        self.payload = payload
        self.path = path
        self.ino = ino


def encode(meta: dict, payload: bytes) -> bytes:
    return payload + tail(meta, payload)


def tail(meta: dict, payload: bytes) -> bytes:
    """An entry's bytes after its payload: the meta, its length, the digest of everything
    before the digest, MAGIC. Written after the payload, it spares copying a payload (a
    thin-link's shards run to megabytes) into one buffer first, and an object already on
    disk becomes an entry by having it appended (Cache.put_file)."""
    m = marshal.dumps(meta)
    lead = m + len(m).to_bytes(4, "little")
    digest = xxhash.xxh3_128(payload)
    digest.update(lead)
    return lead + digest.digest() + MAGIC


def decode(blob: bytes) -> Entry | None:
    """The entry, or None if it is truncated, altered, or not an entry at all."""
    if len(blob) < TAIL or not blob.endswith(MAGIC):
        return None
    if xxhash.xxh3_128_digest(memoryview(blob)[:-24]) != blob[-24:-8]:
        return None
    n = int.from_bytes(blob[-TAIL:-24], "little")
    if n > len(blob) - TAIL:
        return None
    try:
        meta = marshal.loads(blob[-TAIL - n : -TAIL])
    except (ValueError, EOFError, TypeError):
        return None
    return Entry(meta if isinstance(meta, dict) else {}, blob[: -TAIL - n])


def encode_data(data: Any) -> bytes:
    """A structured payload (see the grammar above)."""
    return marshal.dumps(data)


def decode_data(payload: bytes) -> Any:
    """The data of a structured payload; raises one of BAD_DATA if it is not one."""
    return marshal.loads(payload)


def text_data(data: Any) -> str:
    """A reader for get_data: the data if it is a str (a TypeError for anything else)."""
    if not isinstance(data, str):
        raise TypeError(f"a str entry holds {type(data).__name__}")
    return data


def _owner_pid(name: str) -> int | None:
    """The process in 'link-<pid>-…' (a work directory) or 'jobserver-warned-<pid>-<start>' (a marker)."""
    parts = name.split("-")
    if parts[0] == "link" and len(parts) >= 3 and parts[1].isdigit():
        return int(parts[1])
    if name.startswith("jobserver-warned-") and len(parts) == 4 and parts[2].isdigit():
        return int(parts[2])
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Cache:
    def __init__(self, root: str, stats: Stats, max_size: int = 0) -> None:
        self.root = root
        self.stats = stats
        self._kind_dirs: dict[str, str] = {}  # kind -> its directory, with the separator after it (path)
        self.max_size = max_size
        self.stored = False
        self.write_error: str | None = None
        self._locks: LockDir | None = None
        self._claims: Claims | None = None

    def verified(self, same: bool, what: str) -> bool:
        """A hit checked against the work done again (`verify`): counted, and a mismatch said,
        as the fresh result replaces the entry. `what`: the entry, as the line names it."""
        self.stats.add("verify_checks")
        if not same:
            self.stats.add("verify_mismatches")
            import sys

            print(f"ltowrap: verify: {what} differs from a fresh run; replaced", file=sys.stderr)
        return same

    @property
    def locks(self) -> LockDir:
        """This machine's slots and claims (opened on first use)."""
        if self._locks is None:
            from .locks import LockDir, directory

            self._locks = LockDir(directory(self.root))
        return self._locks

    @property
    def claims(self) -> Claims:
        if self._claims is None:
            from .locks import Claims

            self._claims = Claims(self.locks)
        return self._claims

    def close(self) -> None:
        """Let go of the slots and claims this process holds, if it opened them."""
        if self._claims is not None:
            self._claims.close()
        if self._locks is not None:
            self._locks.close()

    def path(self, kind: str, key: str, suffix: str = "") -> str:
        """Where the entry of this kind and key is: every kind is one flat directory. A cold
        link makes an entry or two a module; spread over 256 subdirectories each, a new
        cache's first link made a directory for almost every entry, and a directory costs
        its creation and then its first file's block besides the entry's own inode (each
        link's shard directory mirrors m/ too). An entry of the older, fanned-out layout
        (o/xx/<key>) is not found, so it is a plain miss: it is trimmed as it ages (files(),
        trim() walk every level), and no entry of that layout can be read as one of this."""
        where = self._kind_dirs.get(kind)
        if where is None:  # os.path.join's result, made once a kind: a link asks a few times a job
            where = self._kind_dirs[kind] = os.path.join(self.root, kind, "")
        return where + key + suffix

    def tmp_dir(self) -> str:
        d = os.path.join(self.root, TMP)
        fsutil.make_dirs(d)
        return d

    def new_workdir(self) -> str:
        """A private per-link directory, named after this process so a dead one can be found."""
        return fsutil.temp_dir(f"link-{os.getpid()}-", self.tmp_dir())

    def remove_stale_workdirs(self) -> int:
        """Remove what killed or finished processes left in tmp/ (work directories, markers) and their claims."""
        from .locks import sweep

        removed = sweep(self.locks.path)
        tmp = os.path.join(self.root, TMP)
        try:
            names = os.listdir(tmp)
        except OSError:
            return 0
        for name in names:
            pid = _owner_pid(name)
            if pid is None or _alive(pid):
                continue
            path = os.path.join(tmp, name)
            if os.path.isdir(path):
                fsutil.remove_tree(path)
            else:
                os.unlink(path)
            removed += 1
        return removed

    def get(self, kind: str, key: str) -> Entry | None:
        path = self.path(kind, key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            blob = fsutil.read_all(fd, st.st_size)
        except OSError:
            return None
        finally:
            os.close(fd)
        entry = decode(blob)
        # The key is stored inside the entry, so a valid entry copied under another key is caught.
        if entry is None or entry.meta.get("key") != key:
            if not blob.startswith(OLD_MAGICS):
                self._drop_bad(path, len(blob))
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        entry.path, entry.ino = path, (st.st_dev, st.st_ino)
        return entry

    def link_out(self, entry: Entry, dest: str) -> bool:
        """Put the entry's file at `dest` (a new name in the link's work directory) as a hard
        link, which lld reads as the payload (an object's tail is never read). False if it
        cannot be linked (another file system, no hard links there) or the file at its path is
        no longer the one that was read and verified (replaced or removed since): the caller
        writes the payload instead."""
        if entry.ino is None:
            return False
        try:
            fsutil.link_into(entry.path, dest)  # over what a compile stopped before its end left there
            st = os.lstat(dest)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) == entry.ino:
            return True
        try:
            os.unlink(dest)
        except OSError:
            pass
        return False

    def put(self, kind: str, key: str, meta: dict, payload: bytes) -> bool:
        """Store a raw payload (an object, a link's outputs); structured data goes through put_data."""
        meta = {**meta, "key": key}
        return self._write(self.path(kind, key), (payload, tail(meta, payload)))

    def put_file(self, kind: str, key: str, meta: dict, payload: bytes, path: str) -> bool:
        """Store the raw payload that the file at `path` holds (a backend's output, just read
        back) by making that file the entry: its tail appended, and the file linked into the
        cache. The file is the entry's bytes after it, which lld reads as the payload alone.
        Where it cannot be linked (another file system, no hard links there), the entry is
        written as put() writes it; where it cannot be appended to, too (`path` is left as it
        was or with a part of the tail, which is never read either)."""
        meta = {**meta, "key": key}
        end = tail(meta, payload)
        dest = self.path(kind, key)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                if os.fstat(fd).st_size != len(payload):
                    raise OSError(f"{path} is no longer what was read")
                fsutil.write_all(fd, end)
                os.fchmod(fd, fsutil.FILE_MODE)
            finally:
                os.close(fd)
            replaced = fsutil.link_into(path, dest)
        except OSError:
            return self._write(dest, (payload, end))
        self._added(len(payload) + len(end), replaced)
        return True

    def get_data(self, kind: str, key: str, read: Callable[[Any], T | None]) -> T | None:
        """The entry's data as `read` makes it, or None on a miss. `read` raises one of BAD_DATA
        for data of another shape (a bad entry: removed and counted) and returns None for an
        entry that does not fit this use (a plain miss)."""
        entry = self.get(kind, key)
        if entry is None:
            return None
        try:
            return read(decode_data(entry.payload))
        except BAD_DATA:
            path = self.path(kind, key)
            try:
                size = os.lstat(path).st_size
            except OSError:
                size = 0
            self._drop_bad(path, size)
            return None

    def put_data(self, kind: str, key: str, data: object, meta: dict | None = None) -> bool:
        """Store a structured payload (marshal's plain values only: see the grammar above)."""
        return self.put(kind, key, meta or {}, encode_data(data))

    def store_module(self, name: str, data: bytes, suffix: str = ".o") -> tuple[str, bool]:
        """The store path of a module's bytes, written (atomically) unless already there, and
        whether it was written (new to the store: the executor starts its compile before its
        key, plan.Module.new).

        A file already there is compared byte for byte, not trusted for its name or size:
        a damaged copy would otherwise be compiled, and its object cached under the good
        module's key.
        """
        path = self.path(MODULES, name, suffix)
        absent = False
        try:
            if fsutil.read_nofollow(path) == data:
                os.utime(path)
                return path, False
            self.stats.add("bad_entries")
        except FileNotFoundError:
            absent = True  # nothing there to replace: _write need not look again
        except OSError:
            pass
        # Raised as it came (ENOSPC, EROFS, ...): the link cannot go on without its module,
        # and the pipeline tells a cache it cannot write from a bad input by the errno.
        self._write(path, data, raise_error=True, absent=absent)
        return path, True

    def _write(self, path: str, blob: bytes | tuple[bytes, ...], raise_error: bool = False,
               absent: bool = False) -> bool:
        """Write an entry (atomically) and count it; `absent`: the caller just found nothing at
        `path` (else what is there is counted as replaced)."""
        replaced = None
        if not absent:
            try:
                replaced = os.lstat(path).st_size  # an entry written anew (a memo's manifests): its bytes go
            except OSError:
                pass
        try:
            fsutil.atomic_write(path, blob)
        except OSError as e:
            self.stats.add("cache_write_errors")
            self.write_error = e.strerror or str(e)
            if raise_error:
                raise
            return False
        self._added(len(blob) if isinstance(blob, bytes) else sum(map(len, blob)), replaced)
        return True

    def _added(self, size: int, replaced: int | None) -> None:
        """Count an entry written, of `size` bytes, and the one of `replaced` bytes it replaced."""
        self.stats.add("bytes_added", size)
        self.stats.add("files_added")
        if replaced is not None:
            self.stats.add("bytes_removed", replaced)
            self.stats.add("files_removed")
        self.stored = True

    def _drop_bad(self, path: str, size: int) -> None:
        """A bad entry: counted and removed (the next lookup misses and the entry is made again)."""
        self.stats.add("bad_entries")
        self._remove(path, size)

    def _remove(self, path: str, size: int) -> None:
        try:
            os.unlink(path)
        except OSError:
            return
        self.stats.add("bytes_removed", size)
        self.stats.add("files_removed")

    # --- maintenance ---

    def files(self, kinds: tuple[str, ...] = SIZED_KINDS) -> list[tuple[float, int, str]]:
        """(mtime, size, path) of every cache file of these kinds, oldest first."""
        out = []
        for kind in kinds:
            top = os.path.join(self.root, kind)
            for dirpath, _, names in os.walk(top):
                for n in names:
                    p = os.path.join(dirpath, n)
                    try:
                        st = os.lstat(p)
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, p))
        out.sort()
        return out

    def maybe_cleanup(self, pending: Stats | None = None) -> None:
        """After storing: if the cache is over max_size, trim it, unless another process is."""
        if not self.max_size or not self.stored:
            return
        summed = summary(self.root)
        extra = (pending.counts.get("bytes_added", 0) - pending.counts.get("bytes_removed", 0)) if pending else 0
        if cache_bytes(summed) + extra <= self.max_size:
            return
        self.trim(int(self.max_size * 0.9), blocking=False, counted=int(cache_bytes(summed) + extra))

    def trim(self, target: int, blocking: bool = True, counted: int | None = None, older_than: float | None = None) -> int:
        """Evict least recently used files down to `target` bytes; returns files removed."""
        fsutil.make_dirs(self.root)
        with fsutil.locked(os.path.join(self.root, CLEANUP_LOCK), blocking=blocking) as got:
            if not got:
                return 0
            self.remove_stale_workdirs()
            files = self.files(KINDS if older_than is not None else SIZED_KINDS)
            total = sum(size for _, size, _ in files)
            if counted is None:
                counted = cache_bytes(summary(self.root))
            # Re-anchor the size counters on what is really there.
            self.stats.add("bytes_added", total - counted)
            removed = 0
            cutoff = time.time() - older_than if older_than is not None else None
            for mtime, size, path in files:
                if cutoff is None and total <= target:
                    break
                if cutoff is not None and mtime >= cutoff:
                    break
                self._remove(path, size)
                total -= size
                removed += 1
            self.stats.add("cleanups")
            self.stats.add("files_evicted", removed)
            return removed

    def clear(self) -> None:
        with fsutil.locked(os.path.join(self.root, CLEANUP_LOCK)):
            for kind in (*KINDS, *GONE):
                fsutil.remove_tree(os.path.join(self.root, kind))
