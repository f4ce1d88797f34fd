"""Every cache-key recipe, on top of tagged hashing.

In a cache, an ingredient forgotten in one recipe is a wrong hit, so every key is built
here and nowhere else:
- backend_key: one backend compile (the objects in o/);
- thinlink_key: one thin-link (its shards, in t/);
- shard_identity: what a backend key takes of an index shard (its canonical text, shardkey.py);
- link_memo_key / link_result_key: a whole link (the link memo, linkmemo.py);
- driver_line_key: the clang driver's link line (driverline.py);
- compiler_identity / linker_identity: which tools produced an entry;
- remote_toolchain: what pins the toolchain in a remote Action's Command and in remote_key;
- remote_key: what the remote identity Action names (remote/action.py builds it), the
  backend key's fields less the machine's own.
(A module's option record is found by optrecords.record_key, which the sh entry computes too.)

Every field goes in behind its own tag and length, so fields cannot run together. With
debug on, the hasher also keeps a readable list of what went in, which is how a user
explains a miss (`ltowrap explain`, LTOWRAP_DEBUG=1): diff two dumps.
"""

from __future__ import annotations

import os

import xxhash

from . import toolchain
from .fsutil import read_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:  # a restored link (linkdirect.py) imports this module: nothing costly at its top
    from collections.abc import Callable, Iterable

    from .cache import Cache
    from .formats.modulefacts import Facts

# Bump when a recipe or an entry's layout changes, or when a fix changes what a link makes (13:
# an archive's members in their order in the final link, a module's -fno-function-sections no
# longer undoing the link's): old entries, memoised links among them, then simply miss.
FORMAT_VERSION = "ltowrap-cache-13"
# What a thin-link entry holds (thinlink.py). 2: the regular-LTO object, which entries of 1
# lacked for split LTO units (their hits lost the vtables of -fwhole-program-vtables links).
# 3: imports lists name modules by their place in the entry's table of them.
THINLINK_FORMAT = "3"
MISSING = "missing"  # the digest of a file that is not there


def digest_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def file_digest(path: str) -> str:
    """The digest of a file's contents, or MISSING."""
    try:
        return digest_bytes(read_bytes(path))
    except OSError:
        return MISSING


class ModuleDigests:
    """Modules named by content, memoised per path: called, the digest of a file's bytes
    (seeded with digests already known); facts(path), what ltowrap reads of the module's
    bitcode (formats/modulefacts.py: its interface, inline assembly, triple and flags,
    producer), read once per module version: memoised by digest here and, with a cache,
    kept there for the link's next run (keep: one c/ entry a link, under `pack`, its
    facts_pack_key). Every thin-link after an edit needs the interfaces of most modules,
    and every backend the inline assembly of what it imports. The entry is one file a link,
    not one a module: a cold link would make a file for each of its modules, and a file's
    creation costs as much as reading a module's facts anew, wherever creating a file is
    dear. A module's facts depend on its bytes alone, so an entry of another link's, or of
    modules since edited, gives no wrong facts: they are found by digest, or read anew.
    (A plain class: a restored link imports this module, and no dataclasses with it.)"""

    def __init__(self, known: dict[str, str] | None = None, cache: Cache | None = None, pack: str | None = None) -> None:
        self.known = dict(known or {})  # by path: the digests given (called)
        self.interfaces: dict[str, str] = {}  # by path: the interfaces given (interface)
        self.cache = cache if pack else None  # facts are kept only under a link's key
        self.pack = pack or ""
        self.read: dict[str, Facts] = {}  # by module digest
        self._kept: dict[str, object] | None = None  # by module digest: the entry's records (read when first needed)
        self._new = False  # facts were read from bitcode: keep() writes the entry anew

    def __call__(self, path: str) -> str:
        if path not in self.known:
            self.known[path] = digest_bytes(read_bytes(path))
        return self.known[path]

    def facts(self, path: str) -> Facts:
        """The module's facts; OSError if it cannot be read (unreadable bitcode gives facts
        that say why: Facts.problem)."""
        digest = self(path)
        found = self.read.get(digest)
        if found is None:
            from .formats import modulefacts

            found = self._from_entry(digest)
            if found is None:
                found = modulefacts.read(read_bytes(path), digest_bytes)
                self._new = True
            self.read[digest] = found
        return found

    def _from_entry(self, digest: str) -> Facts | None:
        if self.cache is None:
            return None
        if self._kept is None:
            from .cache import TOOLCHAINS

            self._kept = self.cache.get_data(TOOLCHAINS, self.pack, _records) or {}
        record = self._kept.get(digest)
        if record is None:
            return None
        from .formats.modulefacts import Facts

        try:
            return Facts.from_data(record)
        except (TypeError, ValueError):  # a record of another shape: read anew, and the entry written again
            return None

    def keep(self) -> None:
        """Keep the facts this run has for the link's next run, if it read any from bitcode."""
        if self._new and self.cache is not None:
            from .cache import TOOLCHAINS

            self.cache.put_data(TOOLCHAINS, self.pack, {d: f.to_data() for d, f in self.read.items()})
            self._new = False

    def interface(self, path: str) -> str:
        """The digest of what a backend that imports only declarations from the module reads
        of it (interface.module_interface); BadBitcode if its bitcode cannot be read."""
        facts = self.facts(path)
        if facts.problem:
            from .formats.bitcode import BadBitcode

            raise BadBitcode(facts.problem)
        self.interfaces[path] = facts.interface
        return facts.interface

    def sample_profiled(self, path: str) -> bool:
        """Whether the module may carry a sample profile's summary (shardkey.has_sample_profile):
        only then does its backend read the link's block count (LLVM 13-16's shards)."""
        return self.facts(path).sample_profile


def _records(data: object) -> dict[str, object]:
    """A facts entry's data (ModuleDigests.keep); TypeError for anything else (a bad entry)."""
    if not isinstance(data, dict):
        raise TypeError("not a module facts entry")
    return data


def facts_pack_key(cwd: str, output: str) -> str:
    """The c/ key of the module facts one link keeps for its next run (ModuleDigests.keep):
    the link is named by its output and the directory it runs in."""
    from .formats import modulefacts

    return digest_bytes(f"module facts\0{FORMAT_VERSION}\0{modulefacts.FORMAT}\0{cwd}\0{output}".encode())


def rejected_options_key(compiler: str, options: Iterable[str]) -> str:
    """The c/ key of which of a module's recorded options this clang rejects (toolchain.rejected_options)."""
    return digest_bytes("\0".join(["clang rejects", compiler, *options]).encode())


def file_digests(known: dict[str, str] | None = None, cache: Cache | None = None, pack: str | None = None) -> ModuleDigests:
    """A memoised path -> digest of the file's bytes, seeded with digests already known;
    module facts also kept in `cache`, under `pack` (facts_pack_key)."""
    return ModuleDigests(known, cache, pack)


class Hasher:
    def __init__(self, debug: bool = False) -> None:
        self._h = xxhash.xxh3_128()
        self.dump: list[str] | None = [] if debug else None
        self.field("version", FORMAT_VERSION)

    def field(self, tag: str, value: str | bytes) -> None:
        data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        self._h.update(f"\0{tag}\0{len(data)}\0".encode())
        self._h.update(data)
        if self.dump is not None:
            shown = value if isinstance(value, str) else f"<{len(data)} bytes, xxh3 {digest_bytes(data)}>"
            self.dump.append(f"{tag}: {shown}")

    def file(self, tag: str, path: str, read: dict[str, str | None] | None = None) -> None:
        """A file by its contents (the path too: a missing file is a field of its own). `read`,
        if given, holds the digests of the files read so far (None: missing), so that a file
        named twice is read once."""
        if read is not None and path in read:
            digest = read[path]
        else:
            try:
                digest = digest_bytes(read_bytes(path))
            except OSError:
                digest = None
            if read is not None:
                read[path] = digest
        if digest is None:
            self.field("missing", path)
        else:
            self.field(tag, path + "\0" + digest)

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def copy(self) -> Hasher:
        """A hasher holding what this one took in (and its dump), to go on from: the fields
        every key of a run starts with are hashed once (backend_prefix), then copied per key."""
        other = Hasher.__new__(Hasher)
        other._h = self._h.copy()
        other.dump = None if self.dump is None else list(self.dump)
        return other


# --- the tools -----------------------------------------------------------------------------------


def compiler_identity(clang: str, cache: Cache) -> str:
    """`clang --version`, the stat identity of the compiler's binaries and the contents of its
    config files (toolchain.compiler_files).

    Running clang costs a process start, so the answer is kept in the cache (c/) under the stat
    identity of those files and of their directories, and made again only when one of them
    changes. (A directory's change alone, another tool installed beside clang, gives the
    same identity again.)
    """
    from .cache import TOOLCHAINS, text_data

    key = digest_bytes(stamp(toolchain.compiler_files(clang)).encode())
    identity = cache.get_data(TOOLCHAINS, key, text_data)
    if identity is not None:
        return identity
    configs = "".join(f"config {p} {file_digest(p)}\n" for p in toolchain.compiler_configs(clang))
    identity = f"{stamp(toolchain.compiler_binaries(clang))}\0{configs}\0{toolchain.version_text(clang)}"
    cache.put_data(TOOLCHAINS, key, identity)
    return identity


def compiler_version(identity: str) -> str:
    """The `clang --version` text inside a compiler identity."""
    return identity.rsplit("\0", 1)[-1]


def linker_identity(ld: str) -> str:
    return stamp([os.path.realpath(ld)])


def linker_facts(ld: str, cache: Cache) -> dict:
    """toolchain.lld_facts (its release, the features it takes), kept in the cache (c/) under
    the stat identity of lld's file: six lld starts once per installed lld."""
    from .cache import TOOLCHAINS

    key = digest_bytes(f"lld facts\0{linker_identity(ld)}".encode())
    facts = cache.get_data(TOOLCHAINS, key, _lld_facts)
    if facts is not None:
        return facts
    facts = toolchain.lld_facts(ld)  # as named: lld picks its flavour by its name (ld.lld -> lld)
    if facts["release"]:  # an lld that could not be run is asked again next time
        cache.put_data(TOOLCHAINS, key, facts)
    return facts


def _lld_facts(data: dict) -> dict:
    """toolchain.lld_facts' dict, as kept (KeyError, TypeError for another shape)."""
    return {"release": str(data["release"]), "version": str(data["version"]), "takes": [str(f) for f in data["takes"]]}


def remote_toolchain(identity: str) -> str:
    """What pins the toolchain in a remote Action (and so in its key): clang's version line.

    It goes into the Command (an environment variable), not the platform: a worker pool
    is chosen by the properties the user lists (remote_platform), and no worker
    advertises a toolchain of ltowrap's naming."""
    lines = compiler_version(identity).strip().splitlines()
    return lines[0] if lines else "unknown"


# --- the recipes -----------------------------------------------------------------------------------


def shard_canonical(shard: bytes, digest_of: Callable[[str], str], module: str | None = None) -> str | None:
    """The shard's canonical text (shardkey.canonical: value ids as GUIDs, module paths as
    the digests of the modules' bytes, in path order, or of their interfaces where only
    declarations are imported and digest_of is a ModuleDigests; `module` is the compile's
    own), or None when the shard or a module it names cannot be read."""
    return _shard_text(shard, digest_of, module, None)


def _shard_text(shard: bytes, digest_of: Callable[[str], str], module: str | None,
                digest: Callable[[bytes], str] | None) -> str | None:
    """shard_canonical; with digest, the digest of the text's bytes instead (shardkey.canonical_digest)."""
    from .formats import bitcode, shardkey  # for backend keys only: the link memo's and driver line's paths skip them

    digests = digest_of if isinstance(digest_of, ModuleDigests) else None
    try:
        if digests is None:
            return shardkey.canonical(shard, digest_of, module) if digest is None \
                else shardkey.canonical_digest(shard, digest, digest_of, module)
        if digest is None:
            return shardkey.canonical(shard, digests, module, digests.interface, digests.sample_profiled,
                                      (digests.known, digests.interfaces))
        return shardkey.canonical_digest(shard, digest, digests, module, digests.interface, digests.sample_profiled,
                                         (digests.known, digests.interfaces))
    except (bitcode.BadBitcode, OSError):
        return None


def shard_identity(shard: bytes, digest_of: Callable[[str], str], module: str | None = None) -> str:
    """What the backend key takes of an index shard: the digest of its canonical text
    (shard_canonical's UTF-8 bytes, surrogates escaped), or of its raw bytes (paths, numbering
    and all) when it cannot be read. The text itself is not made: only its digest."""
    found = _shard_text(shard, digest_of, module, digest_bytes)
    if found is None:
        return "raw:" + digest_bytes(shard)
    return "shardkey:" + found


def backend_prefix(compiler: str, env: Iterable[tuple[str, str]], debug: bool = False) -> Hasher:
    """backend_key's first fields, the same for every compile of a run (the version, the
    compiler and the environment it reads): made once a run, the prefix of each of its keys."""
    h = Hasher(debug)
    h.field("compiler", compiler)
    for name, value in env:
        h.field(f"env:{name}", value)
    return h


def backend_key(prefix: Hasher, argv: list[str], module_digest: str, shard: str,
                side: Iterable[tuple[str, str]]) -> tuple[str, list[str] | None]:
    """The key of one backend compile, and (debug) the dump of what went in; `prefix` is
    backend_prefix's (left as it is: each key goes on from a copy):
    - the cache format version (Hasher);
    - the compiler: its --version text, the identity of its files and its config files'
      contents (compiler_identity), and the environment variables it reads
      (toolchain.BACKEND_ENV);
    - the backend argv with the module, shard and output paths as placeholders (this includes
      the module's recorded compile options);
    - the module's bytes (by digest) and the shard (shard_identity): what it means, not how
      lld spelled it, so the same for a clean rebuild, another directory, another cache,
      inputs in another order or under other names, or lld's own temporary names under
      DTLTO; it names, by content, every module the compile imports;
    - what else the compile reads (sideinputs.py: files its options name, files the inline
      assembly of its modules reads, the host CPU for -march=native), each as (tag, value).
    """
    h = prefix.copy()
    h.field("argv", "\0".join(argv[1:]))
    h.field("module", module_digest)
    h.field("shard", shard)
    for tag, value in side:
        h.field(tag, value)
    return h.hexdigest(), h.dump


def remote_key(platform: dict[str, str], toolchain: str, argv: list[str], module_digest: str, shard: str) -> str:
    """The key every machine shares for one backend compile (the remote identity Action,
    remote/action.py): backend_key's fields less the machine's own. The toolchain is
    named by its version line (remote_toolchain), not by the stat identity of its files,
    and the workers by the user's platform properties; a compile that reads other files
    does not go remote.
    """
    h = Hasher()
    h.field("platform", "\0".join(f"{k}={v}" for k, v in sorted(platform.items())))
    h.field("toolchain", toolchain)
    h.field("argv", "\0".join(argv[1:]))
    h.field("module", module_digest)
    h.field("shard", shard)
    return h.hexdigest()


def thinlink_key(linker: str, cwd: str, argv: list[str], modules: Iterable[tuple[str, str]],
                 files: Iterable[str]) -> str:
    """The key of one thin-link:
    - the linker's identity (linker_identity) and the working directory (relative paths
      resolve against it);
    - the link line as the thin-link sees it (module paths in the store);
    - each module's path and the digest of its bytes (store paths name positions);
    - the contents of every other input and of every file an option names (scripts,
      version scripts, symbol lists).
    """
    h = Hasher()
    h.field("thinlink", THINLINK_FORMAT)
    h.field("ld", linker)
    h.field("cwd", cwd)
    h.field("argv", "\0".join(argv))
    for path, digest in modules:
        h.field("module", f"{path}\0{digest}")
    read: dict[str, str | None] = {}  # a link names a library more than once (libgcc.a)
    for path in files:
        h.file("file", path, read)
    return h.hexdigest()


def ltowrap_identity() -> str:
    """ltowrap's own version and the stat identity of its package's `__init__.py`, which every
    install writes anew: a restored link is what this ltowrap would link, not an older one."""
    from . import __file__ as init, __version__

    return f"{__version__}\0{stamp([init])}"


def link_memo_key(linker: str, compiler: str, env: Iterable[tuple[str, str]], cwd: str, argv: list[str],
                  resolved: Iterable[str], settings: Iterable[tuple[str, str]]) -> str:
    """The fixed part of a link memo key, known before the link reads anything:
    - the linker's identity (linker_identity) and the compiler's (compiler_identity): they
      make the thin-link, the backends and the final link; and the environment variables
      they read (toolchain.BACKEND_ENV, LINKER_ENV);
    - the working directory (relative paths and the dependency file's names resolve against it);
    - the final ld.lld argv, as the driver gave it;
    - where each input resolved (`-lfoo` -> the file lld's search found): a library that
      appears earlier in the search path changes the link without changing any file read;
    - every ltowrap setting that changes the output, and ltowrap's own identity.
    The files the link read are the manifest's (link_result_key).
    """
    h = Hasher()
    h.field("memo", "link")
    h.field("ltowrap", ltowrap_identity())
    h.field("ld", linker)
    h.field("compiler", compiler)
    for name, value in env:
        h.field(f"env:{name}", value)
    h.field("cwd", cwd)
    h.field("argv", "\0".join(argv))
    for path in resolved:
        h.field("resolved", path)
    for name, value in settings:
        h.field(f"setting:{name}", value)
    return h.hexdigest()


def link_direct_key(driver_argv: list[str], cwd: str, env: Iterable[tuple[str, str]], tools: str,
                    settings: Iterable[tuple[str, str]]) -> str:
    """The key of a driver link's direct entry (linkdirect.py), known from the driver's
    command alone, before the driver line, the parse or any file the link reads:
    - the driver's argv and working directory, and the environment variables the driver, the
      backends and lld read (with driver_line_key's, they choose the final ld.lld argv);
    - the stat identity of the driver's files, of the real ld.lld and of the backend clang's
      files (in link_memo_key by linker_identity and compiler_identity);
    - every ltowrap setting that changes the output, and ltowrap's identity (as in link_memo_key).
    What the link memo's own keys take from files on disk (the driver line's crt files and
    directories, where each -l resolves, every file the link read) the entry holds, and a
    lookup checks again."""
    h = Hasher()
    h.field("memo", "direct")
    h.field("ltowrap", ltowrap_identity())
    h.field("argv", "\0".join(driver_argv))
    h.field("cwd", cwd)
    for name, value in env:
        h.field(f"env:{name}", value)
    h.field("tools", tools)
    for name, value in settings:
        h.field(f"setting:{name}", value)
    return h.hexdigest()


def link_result_key(memo_key: str, files: Iterable[tuple[str, str]]) -> str:
    """The key of one memoised link's outputs: its fixed key and every file it read, with the
    digest of its contents ("missing" for a file that was not there)."""
    h = Hasher()
    h.field("memo", "result")
    h.field("fixed", memo_key)
    for path, digest in files:
        h.field("read", f"{path}\0{digest}")
    return h.hexdigest()


def stamp(paths: Iterable[str]) -> str:
    """The stat identity of files and directories ("missing" for one that is not there)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(f"{path}:missing")
            continue
        out.append(f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
    return "\0".join(out)


def driver_line_key(driver: str, argv: list[str], cwd: str, env: Iterable[tuple[str, str]]) -> str:
    """The key of a driver's link line (`clang -###`): the driver's identity (its files' stat
    identity), its argv, the working directory and the environment variables it reads. The
    files and directories the line names are checked by their stat identity on every use
    (driverline.py), so a libc or gcc upgrade misses."""
    h = Hasher()
    h.field("driver", driver)
    h.field("argv", "\0".join(argv))
    h.field("cwd", cwd)
    for name, value in env:
        h.field(f"env:{name}", value)
    return h.hexdigest()
