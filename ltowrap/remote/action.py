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

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    """Input files read once per link however many actions share them (imports)."""

    read: Callable[[str], bytes]
    seen: dict[str, tuple[Key, bytes]]

    def get(self, path: str) -> tuple[Key, bytes]:
        if path not in self.seen:
            data = self.read(path)
            self.seen[path] = (key_of(data), data)
        return self.seen[path]


def _serialized(message) -> tuple[Key, bytes]:
    data = message.SerializeToString(deterministic=True)
    return key_of(data), data


def _platform(platform: dict[str, str]) -> Any:  # a protos.Platform
    properties = protos.Platform()
    for name, value in sorted(platform.items()):
        properties.properties.add(name=name, value=value)
    return properties


def _identity(identity: str, platform: dict[str, str]) -> tuple[Key, dict[Key, bytes]]:
    """The identity Action of the key `identity` (cachekey.remote_key) and its blobs. Never run, so
    its Command keeps the output_files it has always had: every cache entry stays where it was."""
    root_key, root_data = _serialized(protos.Directory())
    command = protos.Command(arguments=[IDENTITY_TOOL, identity], output_files=[OUTPUT], platform=_platform(platform))
    command_key, command_data = _serialized(command)
    action = protos.Action(command_digest=digest_message(command_key), input_root_digest=digest_message(root_key),
                           platform=_platform(platform))
    action_key, action_data = _serialized(action)
    return action_key, {root_key: root_data, command_key: command_data, action_key: action_data}


def build(job: Job, argv_for: Callable[[str, str, str], list[str]], digest_of: Callable[[str], str], files: Files,
          platform: dict[str, str], timeout_seconds: int, identity: str, toolchain: str = "",
          compiler: str = "") -> BackendAction:
    """The actions for `job`; argv_for(module, shard, output) spells its compile command.

    identity: what it is cached under (cachekey.remote_key); platform: the properties as
    the user configured them; toolchain: goes into the Command as LTOWRAP_TOOLCHAIN (part of
    the key, not a platform property); compiler: clang's path on the workers, in place of
    this machine's."""
    names: dict[str, str] = {}  # module path in the shard -> path in the input root
    strtab = bitcode.Strtab.of(job.shard)
    ranks = {p: r for r, p in enumerate(sorted(set(strtab.paths), key=lambda p: p.encode("utf-8", "surrogateescape")))}

    def rename(path: str) -> str:
        if path not in names:
            # The rank first: the relocated paths sort as the shard's own did.
            rank = ranks.get(path, len(ranks) + len(names))
            names[path] = f"{MODULES}/{rank:06d}-{digest_of(path)}.o"
        return names[path]

    shard = strtab.relocate(rename)
    for path in (job.module.path, *job.imports):
        rename(path)
    blobs: dict[Key, bytes] = {}
    modules = protos.Directory()
    for path, name in sorted(names.items(), key=lambda item: item[1]):
        key, data = files.get(path)
        blobs[key] = data
        modules.files.add(name=os.path.basename(name), digest=digest_message(key))
    modules_key, modules_data = _serialized(modules)
    shard_key = key_of(shard)
    blobs[shard_key] = shard
    root = protos.Directory()
    root.files.add(name=SHARD, digest=digest_message(shard_key))
    root.directories.add(name=MODULES, digest=digest_message(modules_key))
    root_key, root_data = _serialized(root)

    properties = _platform(platform)
    arguments = argv_for(names[job.module.path], SHARD, OUTPUT)
    if compiler:
        arguments[0] = compiler
    # output_paths for servers of REAPI 2.1 on (Buildbarn reads only it), output_files for 2.0
    # ones (the spec lets a client give both; a 2.1 server ignores output_files then).
    command = protos.Command(arguments=arguments, output_files=[OUTPUT], output_paths=[OUTPUT], platform=properties)
    if toolchain:
        command.environment_variables.add(name=TOOLCHAIN_VARIABLE, value=toolchain)
    command_key, command_data = _serialized(command)
    action = protos.Action(command_digest=digest_message(command_key), input_root_digest=digest_message(root_key),
                           platform=properties)
    action.timeout.seconds = timeout_seconds
    action_key, action_data = _serialized(action)
    blobs.update({modules_key: modules_data, root_key: root_data, command_key: command_data, action_key: action_data})
    identity_key, small = _identity(identity, platform)
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
