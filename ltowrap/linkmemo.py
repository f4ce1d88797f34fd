"""The link memo: a whole distributed link, restored from the cache when nothing it read changed.

Keyed like ccache's direct mode, in two steps (both entries under l/, verified, counted
toward max_size and evicted like every other entry):
1. The fixed key (cachekey.link_memo_key), known before the link reads anything: the final
   ld.lld argv, the working directory, the linker's and the compiler's identity, where
   each `-l` resolved, the settings that change the output. Its entry lists up to
   MAX_MANIFESTS manifests, newest first: each every file one past link read, with the
   xxh3 of its contents.
2. A manifest whose files all hash the same again (read again: mtimes are not trusted)
   names the result entry (cachekey.link_result_key): the link's outputs and what it printed.

The files a link read are lld's own list (`--dependency-file` of the final link: crt files,
libraries found through -L, linker scripts and what they pull in, version scripts), the
inputs and option files of the command line (the bitcode only the thin-link saw), the
members of thin archives, and each module's compile-options record (they choose its
backend's options). The thin-link reads nothing else: it runs the same command line with
the modules in the store, and every file it reads by name the final link reads too.
ltowrap's own files (the cache, the link's work directory) are left out: they are made
from those.

Only links whose every output is known are memoised: `-o`, `-Map` and `--dependency-file`
(lldopts' `writes=stored` rows, stored as finallink.name_outputs rewrote them); a link that writes anything else is distributed every time, counted
(link_unmemoised), so no output is ever left stale. A file changed while the link ran
makes it unmemoised too: its manifest could name contents the link never saw.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import cachekey, config, fsutil, toolchain
from .cache import LINKS, Cache
from .formats import depfile
from .jobs.jobrun import JobRun
from .linkdirect import Lane, result_layout, write_outputs
from .linkline.cmdline import LinkCommand
from .magic import THIN_ARCHIVE, read_head

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .stages.plan import LinkPlan

MAX_MANIFESTS = 8  # per fixed key: a few variants of one link (an edited file and back)
DEPFILE = "final.d"


def outputs(command: LinkCommand) -> tuple[str, ...] | None:
    """Every file the link writes, or None when it writes one the memo does not store (lldopts'
    `writes=stored`) or one that must not be the same twice (`varies`: --build-id=uuid, where a
    restored copy would repeat the id), or split DWARF or optimization records (the backend cache
    restores those files)."""
    if command.varies or command.lto.dwo_dir or command.lto.remarks_file:
        return None
    files = [command.output]
    for option, value in command.written:
        if not option.stored or not value:
            return None
        files.append(value)
    if "-" in files or len(set(files)) != len(files):  # stdout, or one file written twice
        return None
    return tuple(files)


def _fs_now(directory: str) -> int:
    """The filesystem's clock (ns): what a file changed from now on will have as its mtime, or more."""
    path = os.path.join(directory, f"clock-{os.getpid()}-{os.urandom(6).hex()}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, fsutil.FILE_MODE)
    try:
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        os.unlink(path)


@dataclass(eq=False, repr=False)
class Memo:
    """A link's entry in the link memo: its key, and what a lookup or a store needs of the link."""

    cache: Cache
    key: str
    command: LinkCommand
    outputs: tuple[str, ...] | None  # None: the link writes a file the memo does not model
    argv: list[str]  # the ld.lld command
    direct: Lane | None = None  # the driver link's direct lane, written beside each stored or restored link
    started_ns: int = 0
    verify: bool = False  # a hit is not restored but linked again, and the outputs compared (store)
    expected: str = ""  # verify: the digest of the hit's outputs and what it printed
    verified: str | None = None  # verify: 'same', or both digests

    def restore(self) -> bool:
        """Write the memoised outputs and replay what the link printed; False on a miss."""
        if self.outputs is None:
            return False
        stats = self.cache.stats
        digests: dict[str, str] = {}  # each file read once, however many manifests name it

        def digest_of(path: str) -> str:
            if path not in digests:
                digests[path] = cachekey.file_digest(path)
            return digests[path]

        for files in self._manifests():
            if all(digest_of(path) == d for path, d in files):
                result_key = cachekey.link_result_key(self.key, files)
                result = self.cache.get(LINKS, result_key)
                if result is not None and self.verify:
                    self.expected = cachekey.digest_bytes(result.payload)
                    break
                if result is not None and self._write(result.meta, result.payload):
                    stats.add("link_hits")
                    self._store_direct(files, result_key)
                    return True
        self.started_ns = _fs_now(self.cache.tmp_dir())
        return False

    def final_link_args(self, workdir: str) -> list[str]:
        """What the final link needs added for the memo: lld's list of the files it read.

        Misses are counted here, by links that really get this far (not links with no bitcode).
        """
        if self.outputs is None:
            self.cache.stats.add("link_unmemoised")
            return []
        self.cache.stats.add("link_misses")
        return [f"--dependency-file={os.path.join(workdir, DEPFILE)}"]

    def store(self, plan: LinkPlan, workdir: str, out: bytes, err: bytes, backend_reads: list[str],
              uncached: list[str]) -> str | None:
        """Memoise a successful link; every file it read must be unchanged since it started.
        `backend_reads`: the files its backends read besides modules (sideinputs.py);
        `uncached`: why some backend was not cached. Returns why the link was not memoised."""
        if self.outputs is None:
            if self.command.lto.dwo_dir:
                return "it writes split DWARF (-plugin-opt=dwo_dir=), which the memo does not restore"
            if self.command.lto.remarks_file:
                return "it writes optimization records (--opt-remarks-filename), which the memo does not restore"
            return "it writes a file the memo does not model"
        if uncached:
            return self._unmemoised(f"a backend compile is not cached ({uncached[0]})")
        if plan.scripts.unknown:
            return self._unmemoised(f"what a linker script reads cannot be told ({plan.scripts.unknown})")
        files = self._read_files(plan, workdir, backend_reads)
        if files is None:
            return self._unmemoised("lld listed no files, or one changed while the link ran")
        blobs = []
        for path in self.outputs:
            try:
                blobs.append(fsutil.read_bytes(path))
            except OSError:
                return self._unmemoised(f"cannot read its output {path}")
        meta = {"outputs": [[p, len(b)] for p, b in zip(self.outputs, blobs)], "out": len(out), "err": len(err)}
        result_key = cachekey.link_result_key(self.key, files)
        payload = b"".join(blobs) + out + err
        if self.expected:
            self._check(payload)
        if not self.cache.put(LINKS, result_key, meta, payload):
            return None
        self._store_direct(files, result_key)
        manifests = [files, *(m for m in self._manifests() if m != files)][:MAX_MANIFESTS]
        self.cache.put_data(LINKS, self.key, manifests)
        return None

    def _check(self, payload: bytes) -> None:
        """A verified hit, linked again: the same outputs, or a mismatch (counted and logged; the
        fresh outputs are in place and replace the entry)."""
        fresh = cachekey.digest_bytes(payload)
        same = self.cache.verified(fresh == self.expected, f"the link memo's entry for {self.command.output}")
        self.verified = "same" if same else f"mismatch: memo {self.expected}, linked {fresh}"

    def _unmemoised(self, why: str) -> str:
        self.cache.stats.add("link_unmemoised")
        return why

    def _store_direct(self, files: list[tuple[str, str]], result_key: str) -> None:
        if self.direct is not None:
            absent = [p for a in self.command.args for p in a.searched]
            self.direct.store(self.cache, self.argv, absent, files, result_key, self.command.relocatable)

    def _manifests(self) -> list[list[tuple[str, str]]]:
        """The fixed key's manifests, newest first. (A bad entry is removed where restore
        reads it first, so store, reading again, does not count it twice.)"""
        return self.cache.get_data(LINKS, self.key, lambda data: [[(str(p), str(d)) for p, d in m] for m in data]) or []

    def _read_files(self, plan: LinkPlan, workdir: str, backend_reads: list[str]) -> list[tuple[str, str]] | None:
        """Every file the link read, with its digest; None if lld's list is missing or a file
        changed after the link started."""
        from . import optrecords  # a store, after a whole link: not on the restore path
        from .formats import archive

        listed = depfile.read(os.path.join(workdir, DEPFILE))
        if listed is None:
            return None
        ours = tuple(os.path.abspath(d) + os.sep for d in (self.cache.root, workdir))
        names = {p for p in listed if not os.path.abspath(p).startswith(ours)}
        cmd = self.command
        names.update(a.input for a in cmd.inputs() if a.input is not None)
        names.update(cmd.read_files)
        names.update(backend_reads)
        names.update(plan.scripts.found)
        names.update(plan.scripts.absent)  # MISSING in the manifest: one that appears is a miss
        for path in list(names):
            if path not in plan.read and read_head(path).startswith(THIN_ARCHIVE):
                names.update(m.path for m in archive.read_members(path) if m.path)
        files = []
        for path in sorted(names):
            try:
                st = os.stat(path)
            except OSError:
                files.append((path, cachekey.MISSING))
                continue
            if max(st.st_mtime_ns, st.st_ctime_ns) >= self.started_ns:
                return None
            # An input the plan read whole has not changed since (its times say so): those bytes.
            files.append((path, plan.read.get(path) or cachekey.file_digest(path)))
        # Option records are touched on every use (optrecords.load), so their times say nothing;
        # a compile replaces one whole (atomic rename), and its contents are what counts.
        kept = {optrecords.record_path(self.cache.root, m.record_key) for m in plan.modules if m.record_key}
        return files + sorted((path, cachekey.file_digest(path)) for path in kept)

    def _write(self, meta: dict, payload: bytes) -> bool:
        """Write the outputs and replay the output; False if the entry does not fit this link."""
        layout = result_layout(meta, len(payload))
        if layout is None or tuple(p for p, _ in layout[0]) != self.outputs:
            self.cache.stats.add("bad_entries")
            return False
        return write_outputs(layout[0], self.command.relocatable, payload, layout[1], self.argv)


def prepare(run: JobRun, real: list[str], args: list[str], command: LinkCommand, cwd: str,
            direct: Lane | None = None) -> Memo | None:
    """The memo of this link (with no outputs when it writes a file the memo does not model), or None when off."""
    if not run.settings.memo:
        return None
    outs = outputs(command)
    if outs is None:
        return Memo(run.cache, "", command, None, real + args)
    clang = toolchain.backend_clang(real[0], run.settings.clang)
    settings = dict(config.output_values(run.settings)) | {"clang": clang}  # the clang it resolves to
    key = cachekey.link_memo_key(
        cachekey.linker_identity(real[0]), run.compiler_identity(clang),
        toolchain.env_values(toolchain.BACKEND_ENV + toolchain.LINKER_ENV), cwd, real + args,
        [a.input or "" for a in command.args], list(settings.items()))
    verify = direct.verifying if direct is not None else config.pick(run.settings.verify)
    return Memo(run.cache, key, command, outs, real + args, direct, verify=verify)
