"""A backend job -> two REAPI Actions: the one that runs, and the identity it is cached under.

The one that runs has an input root that reproduces the paths its index shard records,
whatever the machine's cache directory or lld's temporary names: each module the shard
names is laid out as `m/<rank>-<xxh3 of its bytes>.o` (rank: its place in the sorted
order of the shard's module paths, the order the backend imports modules in), the shard
itself is rewritten to record those paths (bitcode.relocate), and the compile reads
`index.thinlto.bc` and writes `out.o`.

    input root/
        index.thinlto.bc      the job's shard, relocated
        m/<rank>-<digest>.o   the module, and every module it imports

That shard still holds lld's value numbering, which follows the paths each machine's
thin-link saw, so its digest is not shared by machines. The action cache is asked and
filled under the identity Action instead: a Command that only names the key
(cachekey.remote_key: the shard's canonical text, the module, the options, the
toolchain), with an empty input root. It is never executed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..formats import bitcode
from ..stages.backend import Job
from . import protos
from .client import Key, digest_message, key_of

SHARD = "index.thinlto.bc"
OUTPUT = "out.o"
MODULES = "m"
TOOLCHAIN_VARIABLE = "LTOWRAP_TOOLCHAIN"


IDENTITY_TOOL = "ltowrap-backend-key"


@dataclass(frozen=True)
class BackendAction:
    key: Key  # of the Action message that runs the compile (execute mode)
    blobs: dict[Key, bytes]  # every blob it needs: Action, Command, directories, inputs
    identity: Key  # of the identity Action: the remote cache key every machine shares
    small: tuple[Key, ...]  # the identity's Action, Command and directory: what a cache entry carries

    @property
    def name(self) -> str:
        return f"{self.identity[0]}/{self.identity[1]}"


@dataclass
class Files:
    """Input files read once per link however many actions share them (imports): each its
    key, its bytes and its digest as a FileNode's field."""

    read: Callable[[str], bytes]
    seen: dict[str, tuple[Key, bytes, bytes]] = field(default_factory=dict)

    def get(self, path: str) -> tuple[Key, bytes, bytes]:
        if path not in self.seen:
            data = self.read(path)
            key = key_of(data)
            self.seen[path] = (key, data, _field(2, _digest(key)))
        return self.seen[path]


# The messages every job's actions build are written here field by field, as protobuf's
# deterministic serialization writes them (fields in number order, proto3 defaults left out):
# a job then costs a few byte strings joined, and what the link's jobs share (the platform,
# the Command's outputs and environment, the Action's timeout) is serialized once, by
# protobuf, in Actions. test_remote_action checks every byte against protobuf's own.

def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes or a message)."""
    size = len(payload)
    if number < 16 and size < 0x80:  # its tag and length one byte each, as most of a job's fields are
        return bytes((number << 3 | 2, size)) + payload
    return _varint(number << 3 | 2) + _varint(size) + payload


def _digest(key: Key) -> bytes:
    """A Digest message: hash (1), size_bytes (2, a varint; left out when 0)."""
    return _field(1, key[0].encode("ascii")) + (b"\x10" + _varint(key[1]) if key[1] else b"")


def _file_node(name: str, digest: bytes) -> bytes:
    """A Directory's files (1) entry: a FileNode of name (1) and `digest` (its field 2, Files.get).
    The names Actions.build gives are short enough for both lengths to be one-byte varints:
    those are written directly."""
    encoded = name.encode("utf-8")
    size = 2 + len(encoded) + len(digest)
    if size < 0x80:
        return bytes((0x0A, size, 0x0A, len(encoded))) + encoded + digest
    return _field(1, _field(1, encoded) + digest)


def _arguments(arguments: list[str]) -> bytes:
    """Command.arguments (1): each one, empty ones too (a repeated field keeps every element)."""
    return b"".join(_field(1, a.encode("utf-8")) for a in arguments)


def _action(command: Key, root: Key, tail: bytes) -> bytes:
    """An Action: command_digest (1), input_root_digest (2), then `tail` (its fields numbered above 2)."""
    return _field(1, _digest(command)) + _field(2, _digest(root)) + tail


def _serialized(message) -> tuple[Key, bytes]:
    data = message.SerializeToString(deterministic=True)
    return key_of(data), data


def _platform(platform: dict[str, str]) -> Any:  # a protos.Platform
    properties = protos.Platform()
    for name, value in sorted(platform.items()):
        properties.properties.add(name=name, value=value)
    return properties


class _Module(NamedTuple):
    """What every input root of a link holds of one module: what follows the rank in its name
    (its digest), its blob, its digest as a FileNode's field (Files.get), and that FileNode as
    what comes before the rank and what follows it (head None when its size takes more than
    one byte: _file_node writes those)."""

    suffix: str
    key: Key
    data: bytes
    digest: bytes
    head: bytes | None
    tail: bytes


@dataclass
class Actions:
    """Builds the actions of one link's jobs; what they all share is made once, here.

    platform: the properties as the user configured them; timeout_seconds: each Action's
    timeout; toolchain: goes into the Command as LTOWRAP_TOOLCHAIN (part of the key, not a
    platform property); compiler: clang's path on the workers, in place of this machine's.
    """

    digest_of: Callable[[str], str]
    files: Files
    platform: dict[str, str]
    timeout_seconds: int
    toolchain: str = ""
    compiler: str = ""

    def __post_init__(self) -> None:
        properties = _platform(self.platform)
        # The fields after arguments (1) of each job's Command, and after the two digests (1, 2)
        # of its Action: the same for every job of the link.
        command = protos.Command(output_files=[OUTPUT], output_paths=[OUTPUT], platform=properties)
        if self.toolchain:
            command.environment_variables.add(name=TOOLCHAIN_VARIABLE, value=self.toolchain)
        self._command_tail = command.SerializeToString(deterministic=True)
        action = protos.Action(platform=properties)
        action.timeout.seconds = self.timeout_seconds
        self._action_tail = action.SerializeToString(deterministic=True)
        # The identity Action is never run, so its Command keeps the output_files it has always
        # had (every cache entry stays where it was), and it has no timeout.
        self._identity_command_tail = protos.Command(output_files=[OUTPUT], platform=properties).SerializeToString(
            deterministic=True)
        self._identity_action_tail = protos.Action(platform=properties).SerializeToString(deterministic=True)
        self._empty = key_of(b"")  # the identity's input root: an empty Directory
        self._modules: dict[str, _Module] = {}  # module path -> Actions._module
        self._rank_names: list[str] = []  # Actions._ranks: 'm/000000', ...
        self._rank_bytes: list[bytes] = []  # the same ranks' digits, as a FileNode's name starts: b'000000', ...

    def _module(self, path: str) -> _Module:
        """What every input root holds of the module at `path`, made once a link (_Module)."""
        suffix = f"-{self.digest_of(path)}.o"
        key, data, digest = self.files.get(path)
        encoded = f"{0:06d}{suffix}".encode("utf-8")  # its name, the rank apart: six digits in every job
        size = 2 + len(encoded) + len(digest)
        made = _Module(suffix, key, data, digest, None, b"")
        if size < 0x80:
            made = _Module(suffix, key, data, digest, bytes((0x0A, size, 0x0A, len(encoded))), encoded[6:] + digest)
        self._modules[path] = made
        return made

    def _ranks(self, n: int) -> tuple[list[str], list[bytes]]:
        """'m/000000', 'm/000001', ...: the start of the names of a shard's first n modules, and
        their digits as bytes, made once a link."""
        made, digits = self._rank_names, self._rank_bytes
        while len(made) < n:
            digits.append(f"{len(made):06d}".encode())
            made.append(f"{MODULES}/{len(made):06d}")
        return made, digits

    def _identity(self, identity: str) -> tuple[Key, dict[Key, bytes]]:
        """The identity Action of the key `identity` (cachekey.remote_key) and its blobs: root, Command, Action."""
        command = _arguments([IDENTITY_TOOL, identity]) + self._identity_command_tail
        command_key = key_of(command)
        action = _action(command_key, self._empty, self._identity_action_tail)
        action_key = key_of(action)
        return action_key, {self._empty: b"", command_key: command, action_key: action}

    def build(self, job: Job, argv_for: Callable[[str, str, str], list[str]], identity: str) -> BackendAction:
        """The actions for `job`; argv_for(module, shard, output) spells its compile command,
        identity is what it is cached under (cachekey.remote_key)."""
        strtab = bitcode.Strtab.of(job.shard)
        named = set(strtab.paths)
        paths = sorted(named)
        if not "".join(paths).isascii():  # else code point order is already the bytes' order
            paths.sort(key=lambda p: p.encode("utf-8", "surrogateescape"))
        # The module and its imports the shard does not name go after those it does.
        others = [p for p in (job.module.path, *job.imports) if p not in named]
        if len(others) > 1:  # each once
            others = list(dict.fromkeys(others))
        known, module = self._modules, self._module
        blobs: dict[Key, bytes] = {}
        names: dict[str, str] = {}
        entries = []
        # Each path the shard names as m/<rank>-<digest>.o, the rank first: the relocated paths
        # sort as the shard's own did. While every rank has six digits (below a million), the
        # names sort as their numbers, so they come in order, and a module's FileNode is the
        # same bytes in every job but for the rank (_Module.head and tail).
        ranks, digits = self._ranks(len(paths))
        skip = len(MODULES) + 1
        for rank, digit, path in zip(ranks, digits, paths):
            suffix, key, data, digest, head, tail = known.get(path) or module(path)
            names[path] = rank + suffix
            blobs[key] = data
            entries.append(head + digit + tail if head is not None else _file_node(rank[skip:] + suffix, digest))
        shard = strtab.relocate(names.__getitem__)
        for path in others:
            suffix, key, data, digest, head, tail = known.get(path) or module(path)
            number = f"{len(paths) + len(names):06d}"
            names[path] = f"{MODULES}/{number}{suffix}"
            blobs[key] = data
            entries.append(head + number.encode() + tail if head is not None else _file_node(number + suffix, digest))
        if 2 * len(names) > 10**6:  # ranks of seven digits: the entries go in their names' order
            entries = [_file_node(name[skip:], known[path].digest)
                       for path, name in sorted(names.items(), key=lambda item: item[1])]
        modules = b"".join(entries)
        modules_key = key_of(modules)
        shard_key = key_of(shard)
        blobs[shard_key] = shard
        # The root: files (1) the shard, directories (2) the modules.
        root = (_field(1, _field(1, SHARD.encode()) + _field(2, _digest(shard_key)))
                + _field(2, _field(1, MODULES.encode()) + _field(2, _digest(modules_key))))
        root_key = key_of(root)

        arguments = argv_for(names[job.module.path], SHARD, OUTPUT)
        if self.compiler:
            arguments[0] = self.compiler
        # output_paths for servers of REAPI 2.1 on (Buildbarn reads only it), output_files for 2.0
        # ones (the spec lets a client give both; a 2.1 server ignores output_files then).
        command = _arguments(arguments) + self._command_tail
        command_key = key_of(command)
        action = _action(command_key, root_key, self._action_tail)
        action_key = key_of(action)
        blobs.update({modules_key: modules, root_key: root, command_key: command, action_key: action})
        identity_key, small = self._identity(identity)
        blobs.update(small)
        return BackendAction(action_key, blobs, identity_key, tuple(small))


def probe(argv: list[str], platform: dict[str, str], timeout_seconds: int) -> BackendAction:
    """An action that runs argv (e.g. clang --version) in an empty root, never cached: doctor's
    check that a worker with these platform properties exists and can run the compiler."""
    properties = _platform(platform)
    command_key, command_data = _serialized(protos.Command(arguments=argv, platform=properties))
    root_key, root_data = _serialized(protos.Directory())
    action = protos.Action(command_digest=digest_message(command_key), input_root_digest=digest_message(root_key),
                           platform=properties, do_not_cache=True)
    action.timeout.seconds = timeout_seconds
    action_key, action_data = _serialized(action)
    blobs = {command_key: command_data, root_key: root_data, action_key: action_data}
    return BackendAction(action_key, blobs, action_key, tuple(blobs))
