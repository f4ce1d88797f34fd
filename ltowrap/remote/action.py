"""A backend job -> a REAPI Action whose input root reproduces the paths its index shard records.

The input root is the same on every machine, whatever its cache directory or lld's
temporary names: each module the shard names is laid out as `m/<xxh3 of its bytes>.o`,
the shard itself is rewritten to record those paths (bitcode.relocate), and the compile
reads `index.thinlto.bc` and writes `out.o`. The action digest is then a function of the
contents, the compiler and its options only, so it serves as the cache key shared by
every machine.

    input root/
        index.thinlto.bc      the job's shard, relocated
        m/<digest>.o          the module, and every module it imports
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .. import bitcode
from ..backend import Job
from . import protos
from .client import Key, digest, key_of

SHARD = "index.thinlto.bc"
OUTPUT = "out.o"
MODULES = "m"
TOOLCHAIN_VARIABLE = "LTOWRAP_TOOLCHAIN"


@dataclass(frozen=True)
class BackendAction:
    key: Key  # of the Action message: the remote cache key
    blobs: dict[Key, bytes]  # every blob it needs: Action, Command, directories, inputs
    small: tuple[Key, ...]  # Action, Command and directories: what a cache entry should carry

    @property
    def name(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"


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


def build(job: Job, argv_for: Callable[[str, str, str], list[str]], digest_of: Callable[[str], str], files: Files,
          platform: dict[str, str], timeout_seconds: int, toolchain: str = "", compiler: str = "") -> BackendAction:
    """The action for `job`; argv_for(module, shard, output) spells its compile command.

    platform: the properties as the user configured them; toolchain: goes into the Command
    as LTOWRAP_TOOLCHAIN (part of the key, not a platform property); compiler: clang's path
    on the workers, in place of this machine's."""
    names: dict[str, str] = {}  # module path in the shard -> path in the input root

    def rename(path: str) -> str:
        if path not in names:
            name = f"{MODULES}/{digest_of(path)}.o"
            n = 1
            while name in names.values():  # two paths, same bytes: two names, two module IDs
                n += 1
                name = f"{MODULES}/{digest_of(path)}-{n}.o"
            names[path] = name
        return names[path]

    shard = bitcode.relocate(job.shard, rename)
    for path in (job.module.path, *job.imports):
        rename(path)
    blobs: dict[Key, bytes] = {}
    modules = protos.Directory()
    for path, name in sorted(names.items(), key=lambda item: item[1]):
        key, data = files.get(path)
        blobs[key] = data
        modules.files.add(name=os.path.basename(name), digest=digest(key))
    modules_key, modules_data = _serialized(modules)
    shard_key = key_of(shard)
    blobs[shard_key] = shard
    root = protos.Directory()
    root.files.add(name=SHARD, digest=digest(shard_key))
    root.directories.add(name=MODULES, digest=digest(modules_key))
    root_key, root_data = _serialized(root)

    properties = protos.Platform()
    for name, value in sorted(platform.items()):
        properties.properties.add(name=name, value=value)
    arguments = argv_for(names[job.module.path], SHARD, OUTPUT)
    if compiler:
        arguments[0] = compiler
    command = protos.Command(arguments=arguments, output_files=[OUTPUT], platform=properties)
    if toolchain:
        command.environment_variables.add(name=TOOLCHAIN_VARIABLE, value=toolchain)
    command_key, command_data = _serialized(command)
    action = protos.Action(command_digest=digest(command_key), input_root_digest=digest(root_key), platform=properties)
    action.timeout.seconds = timeout_seconds
    action_key, action_data = _serialized(action)
    small = {modules_key: modules_data, root_key: root_data, command_key: command_data, action_key: action_data}
    blobs.update(small)
    return BackendAction(action_key, blobs, tuple(small))


def probe(argv: list[str], platform: dict[str, str], timeout_seconds: int) -> BackendAction:
    """An action that runs argv (e.g. clang --version) in an empty root, never cached: doctor's
    check that a worker with these platform properties exists and can run the compiler."""
    properties = protos.Platform()
    for name, value in sorted(platform.items()):
        properties.properties.add(name=name, value=value)
    command_key, command_data = _serialized(protos.Command(arguments=argv, platform=properties))
    root_key, root_data = _serialized(protos.Directory())
    action = protos.Action(command_digest=digest(command_key), input_root_digest=digest(root_key), platform=properties,
                           do_not_cache=True)
    action.timeout.seconds = timeout_seconds
    action_key, action_data = _serialized(action)
    blobs = {command_key: command_data, root_key: root_data, action_key: action_data}
    return BackendAction(action_key, blobs, tuple(blobs))
