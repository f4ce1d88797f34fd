"""remote/action.py writes each job's Directory, Command and Action messages by hand: every
byte must be what protobuf's deterministic serialization of the same message gives, or each
action's digest (and the identity, every machine's remote cache key) would change."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from helpers import Toolchain, many_modules, run, write
from needs import require_module

require_module("grpc")

from ltowrap.cachekey import digest_bytes  # noqa: E402
from ltowrap.formats import bitcode  # noqa: E402
from ltowrap.remote import action, protos  # noqa: E402
from ltowrap.remote.client import key_of  # noqa: E402
from ltowrap.stages.backend import Job  # noqa: E402
from ltowrap.stages.plan import Module  # noqa: E402


def _message(message) -> tuple[tuple[str, int], bytes]:
    data = message.SerializeToString(deterministic=True)
    return key_of(data), data


def _digest(key):
    return protos.Digest(hash=key[0], size_bytes=key[1])


def _platform(platform: dict[str, str]):
    properties = protos.Platform()
    for name, value in sorted(platform.items()):
        properties.properties.add(name=name, value=value)
    return properties


def reference(job: Job, argv_for, digest_of, platform: dict[str, str], timeout: int, identity: str,
              toolchain: str = "", compiler: str = "") -> action.BackendAction:
    """The actions as protobuf builds them, message by message (the layout action.py documents)."""
    names: dict[str, str] = {}
    paths = bitcode.module_paths(job.shard)
    ranks = {p: r for r, p in enumerate(sorted(set(paths), key=lambda p: p.encode("utf-8", "surrogateescape")))}

    def rename(path: str) -> str:
        if path not in names:
            names[path] = f"m/{ranks.get(path, len(ranks) + len(names)):06d}-{digest_of(path)}.o"
        return names[path]

    shard = bitcode.relocate(job.shard, rename)
    for path in (job.module.path, *job.imports):
        rename(path)
    blobs = {}
    modules = protos.Directory()
    for path, name in sorted(names.items(), key=lambda item: item[1]):
        data = Path(path).read_bytes()
        blobs[key_of(data)] = data
        modules.files.add(name=os.path.basename(name), digest=_digest(key_of(data)))
    modules_key, modules_data = _message(modules)
    blobs[key_of(shard)] = shard
    root = protos.Directory()
    root.files.add(name="index.thinlto.bc", digest=_digest(key_of(shard)))
    root.directories.add(name="m", digest=_digest(modules_key))
    root_key, root_data = _message(root)
    arguments = argv_for(names[job.module.path], "index.thinlto.bc", "out.o")
    if compiler:
        arguments[0] = compiler
    command = protos.Command(arguments=arguments, output_files=["out.o"], output_paths=["out.o"],
                             platform=_platform(platform))
    if toolchain:
        command.environment_variables.add(name="LTOWRAP_TOOLCHAIN", value=toolchain)
    command_key, command_data = _message(command)
    run_action = protos.Action(command_digest=_digest(command_key), input_root_digest=_digest(root_key),
                               platform=_platform(platform))
    run_action.timeout.seconds = timeout
    action_key, action_data = _message(run_action)
    blobs.update({modules_key: modules_data, root_key: root_data, command_key: command_data, action_key: action_data})
    empty_key, empty = _message(protos.Directory())
    id_command_key, id_command = _message(protos.Command(arguments=["ltowrap-backend-key", identity],
                                                         output_files=["out.o"], platform=_platform(platform)))
    id_key, id_action = _message(protos.Action(command_digest=_digest(id_command_key),
                                               input_root_digest=_digest(empty_key), platform=_platform(platform)))
    small = {empty_key: empty, id_command_key: id_command, id_key: id_action}
    blobs.update(small)
    return action.BackendAction(action_key, blobs, id_key, tuple(small))


@pytest.fixture
def shards(project: Path, tc22: Toolchain) -> dict[str, bytes]:
    """Three modules, a.o importing from b.o (and so naming it), c.o alone: each one's shard."""
    write(project / "a.c", "int helper(int);\nint main(int c, char **v) { return helper(c) * 2; }\n")
    write(project / "b.c", "int helper(int x) { return x + 41; }\n")
    write(project / "c.c", "int unused(int x) { return x * 3; }\n")
    for n in "abc":
        run([tc22.clang, "-O2", "-flto=thin", "-c", f"{n}.c", "-o", f"{n}.o"], project)
    run([tc22.lld, "--thinlto-index-only=list", *(str(project / f"{n}.o") for n in "abc"), "-o", "out", "-e", "main"],
        project)
    return {n: (project / f"{n}.o.thinlto.bc").read_bytes() for n in "abc"}


def _job(project: Path, name: str, shard: bytes, imports: tuple[str, ...]) -> Job:
    path = str(project / f"{name}.o")
    data = Path(path).read_bytes()
    return Job(Module(digest_bytes(data), path, f"{name}.o", len(data)), shard, path + ".thinlto.bc",
               imports, str(project / f"{name}.native.o"))


def _argv(module: str, shard: str, output: str) -> list[str]:
    return ["/usr/bin/clang", "-O2", "", "-c", "-x", "ir", module, f"-fthinlto-index={shard}", "-o", output]


@pytest.mark.parametrize("platform,toolchain,compiler,timeout", [
    ({}, "", "", 600),
    ({"OSFamily": "linux", "container-image": "docker://x@sha256:1", "ISA": "x86-64"}, "Debian clang 22.1 é",
     "/opt/llvm/bin/clang", 3 << 20),
    ({"pool": ""}, "clang", "", 0),
])
def test_hand_written_messages_are_protobufs_own_bytes(project, shards, platform, toolchain, compiler, timeout):
    digests = {str(project / f"{n}.o"): digest_bytes((project / f"{n}.o").read_bytes()) for n in "abc"}
    b, c = str(project / "b.o"), str(project / "c.o")
    jobs = [_job(project, "a", shards["a"], (b,)), _job(project, "b", shards["b"], ()),
            _job(project, "c", shards["c"], ()),
            # an import the shard does not name: ranked after the shard's own paths
            _job(project, "a", shards["a"], (b, c)),
            _job(project, "a", shards["a"], (c, b, c))]  # that one twice: ranked once
    assert len(bitcode.module_paths(shards["a"])) == 2
    builder = action.Actions(digests.__getitem__, action.Files(lambda p: Path(p).read_bytes()), platform, timeout,
                             toolchain, compiler)
    for n, job in enumerate(jobs):
        identity = f"backend-key-{n}" * (n + 1) * 40  # long enough for a two-byte length
        got = builder.build(job, _argv, identity)
        want = reference(job, _argv, digests.__getitem__, platform, timeout, identity, toolchain, compiler)
        assert got.blobs == want.blobs
        assert (got.key, got.identity, got.small) == (want.key, want.identity, want.small)
        assert list(got.blobs) == list(want.blobs)  # the same blobs in the same order, for the same batches


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 1 << 14, (1 << 31) + 5, 1 << 40])
def test_digest_field_is_protobufs(size):
    key = ("ab" * 32, size)
    assert action._digest(key) == protos.Digest(hash=key[0], size_bytes=size).SerializeToString(deterministic=True)
    node = protos.FileNode(name="x" * size if 0 < size < 1000 else "y", digest=_digest(key))  # names are never empty
    assert action._field(1, node.name.encode()) + action._field(2, action._digest(key)) == node.SerializeToString(
        deterministic=True)


@pytest.mark.parametrize("name", ["000001-" + "f" * 32 + ".o", "n" * 60, "n" * 200, "é" * 70])
def test_file_node_is_protobufs(name):
    key = ("cd" * 32, 12345)
    node = protos.Directory()
    node.files.add(name=name, digest=_digest(key))
    assert action._file_node(name, action._field(2, action._digest(key))) == node.SerializeToString(deterministic=True)


class RecordingClient:
    """A client.Client that keeps the CAS and action cache in memory and records every request
    that would go to the server: what a link's session asks of it, call by call."""

    def __init__(self) -> None:
        from ltowrap.remote.client import Endpoint, Pressure

        self.endpoint = Endpoint("grpc://recording", exec_timeout=600)
        self.pressure = Pressure(16)
        self.can_update = True
        self.uploaded = 0
        self.cas: dict = {}
        self.calls: list[tuple[str, list]] = []  # (request, the blob keys it carried)
        self.lock = threading.Lock()

    def _call(self, what: str, keys) -> None:
        with self.lock:
            self.calls.append((what, list(keys)))

    def capabilities(self) -> None:
        self._call("GetCapabilities", [])

    def get_action_result(self, key):
        self._call("GetActionResult", [key])

    def find_missing(self, keys):
        keys = list(keys)
        if keys:  # as Client.find_missing: nothing to look for, no request
            self._call("FindMissingBlobs", keys)
        return {k for k in keys if k not in self.cas}

    def upload(self, blobs) -> None:
        if blobs:  # as Client.upload: nothing to store, no request
            self._call("BatchUpdateBlobs", blobs)
            self.cas.update(blobs)

    def execute(self, key, running=None):
        self._call("Execute", [key])
        obj = b"\x7fELF object of " + key[0].encode()
        self.cas[key_of(obj)] = obj
        result = protos.ActionResult(exit_code=0)
        result.output_files.add(path=action.OUTPUT, digest=_digest(key_of(obj)))
        return protos.ExecuteResponse(result=result)

    def read(self, key):
        self._call("BatchReadBlobs", [key])
        return self.cas[key]

    def update_action_result(self, key, result) -> None:
        self._call("UpdateActionResult", [key])

    def close(self) -> None:
        pass


def test_an_executed_job_sends_its_identity_blobs_once_with_its_inputs(project, shards):
    """The inputs of the jobs asked together go in one FindMissingBlobs and one BatchUpdateBlobs,
    the identity Action's blobs with them; sharing an executed result then sends no blob again,
    only UpdateActionResult."""
    from ltowrap.remote.session import Session, Work
    from ltowrap.stats import Stats

    client = RecordingClient()
    digests = {str(project / f"{n}.o"): digest_bytes((project / f"{n}.o").read_bytes()) for n in "abc"}
    session = Session(client, "execute", {"OSFamily": "linux"}, Stats(), digests.__getitem__, jobs=4, toolchain="clang")
    b = str(project / "b.o")
    work = [Work(_job(project, "a", shards["a"], (b,)), _argv), Work(_job(project, "b", shards["b"], ()), _argv),
            Work(_job(project, "c", shards["c"], ()), _argv)]
    replies = session.answers(session.ask(work))
    assert [r.served for r in replies] == [None] * 3 and not any(r.error for r in replies)
    session.prepare(work)
    woken = threading.Event()
    executions = [session.send(w, woken.set) for w in work]
    taken = [session.taken(e) for e in executions]  # taken() waits for each answer
    assert all(r.served is not None and r.served.executed for r in taken), [r.error for r in taken]
    session.close()

    asked = [what for what, _ in client.calls]
    assert asked.count("FindMissingBlobs") == 1 and asked.count("BatchUpdateBlobs") == 1
    assert asked.count("Execute") == asked.count("UpdateActionResult") == asked.count("GetActionResult") == 3
    sent = next(keys for what, keys in client.calls if what == "BatchUpdateBlobs")
    for w in work:
        a = session.actions[w.job.output]
        assert set(a.blobs) <= set(sent)  # inputs, the Action that runs, the identity's Action, Command and root
        assert set(a.small) <= set(sent)
    assert len(sent) == len(set(sent))


def test_a_job_compiled_here_publishes_its_object_and_identity(project, shards):
    """Cache mode: nothing was uploaded before, so publishing sends the object with the identity's blobs."""
    from ltowrap.remote.session import Session, Work
    from ltowrap.stats import Stats

    client = RecordingClient()
    digests = {str(project / f"{n}.o"): digest_bytes((project / f"{n}.o").read_bytes()) for n in "abc"}
    session = Session(client, "cache", {}, Stats(), digests.__getitem__, jobs=2)
    work = [Work(_job(project, "c", shards["c"], ()), _argv)]
    session.answers(session.ask(work))
    session.publish(work[0].job, b"\x7fELF here", "")
    session.close()
    sent = [keys for what, keys in client.calls if what == "BatchUpdateBlobs"]
    a = session.actions[work[0].job.output]
    assert len(sent) == 1 and set(sent[0]) == {key_of(b"\x7fELF here"), *a.small}
    assert [what for what, _ in client.calls][-1] == "UpdateActionResult"


def test_modules_rank_by_their_paths_bytes(project, shards):
    """A path that is not UTF-8 (surrogate-escaped) ranks by its bytes, as lld orders them: b'\\xff'
    after U+E000's b'\\xee\\x80\\x80', where their code points sort the other way."""
    odd, private = str(project / "m\udcff.o"), str(project / "m\ue000.o")
    renamed = {str(project / "a.o"): odd, str(project / "b.o"): private}
    shard = bitcode.relocate(shards["a"], renamed.__getitem__)
    for old, new in renamed.items():
        Path(new).write_bytes(Path(old).read_bytes())
    data = Path(odd).read_bytes()
    job = Job(Module(digest_bytes(data), odd, "m.o", len(data)), shard, odd + ".thinlto.bc", (private,),
              odd + ".native")
    digests = {p: digest_bytes(Path(p).read_bytes()) for p in renamed.values()}
    builder = action.Actions(digests.__getitem__, action.Files(lambda p: Path(p).read_bytes()), {}, 60)
    got = builder.build(job, _argv, "key")
    want = reference(job, _argv, digests.__getitem__, {}, 60, "key")
    assert got.blobs == want.blobs and got.key == want.key
    assert bitcode.module_paths(got.blobs[_root_file(got, "index.thinlto.bc")]) == [
        f"m/000001-{digests[odd]}.o", f"m/000000-{digests[private]}.o"]


def _root_file(a: action.BackendAction, name: str):
    root = protos.Action.FromString(a.blobs[a.key]).input_root_digest
    directory = protos.Directory.FromString(a.blobs[(root.hash, root.size_bytes)])
    digest = next(f.digest for f in directory.files if f.name == name)
    return digest.hash, digest.size_bytes


def _relocated_field_by_field(shard: bytes, rename) -> bytes:
    """bitcode.relocate's bytes as LLVM's bitstream spells them, one field at a time through
    bitcode._Writer: each record's abbreviation id, then its operands in order (a blob's length,
    then its bytes between 32-bit boundaries; a hash's count, then its words)."""
    strtab = bitcode.StrtabPython.of(shard)
    block = strtab.strtab.block
    w = bitcode._Writer()
    abbreviated = block.width >= 3
    if abbreviated:
        w.abbrev(bitcode._ENTRY_ABBREV, block.width)
        w.abbrev(bitcode._HASH_ABBREV, block.width)
    paths = iter(strtab.paths)
    for values in strtab.records:
        if values[0] == bitcode.MST_CODE_ENTRY and len(values) >= 2:
            path = rename(next(paths)).encode("utf-8", "surrogateescape")
            if abbreviated:
                w.fixed(4, block.width)
                w.vbr(values[1], 6)
                w.blob(path)
                continue
            values = [*values[:2], *path]
        elif abbreviated and values[0] == bitcode.MST_CODE_HASH and len(values) > 1 and max(values[1:]) >> 32 == 0:
            w.fixed(5, block.width)
            w.vbr(len(values) - 1, 6)
            for v in values[1:]:
                w.fixed(v, 32)
            continue
        w.fixed(3, block.width)
        w.vbr(values[0], 6)
        w.vbr(len(values) - 1, 6)
        for v in values[1:]:
            w.vbr(v, 6)
    w.fixed(0, block.width)
    body = w.data()
    delta = len(body) // 4 - (block.end - block.start) // 32
    out = bytearray(strtab.stream[: block.start // 8] + body + strtab.stream[block.end // 8 :])
    for around in (*strtab.parents, block):
        at = around.length_at // 8
        out[at : at + 4] = (int.from_bytes(out[at : at + 4], "little") + delta).to_bytes(4, "little")
    return bytes(out)


@pytest.fixture
def main_shard(project: Path, tc22: Toolchain) -> bytes:
    """The shard of a main that imports 40 modules: module ids of one and two VBR6 chunks."""
    objects = many_modules(project, tc22, 40)
    run([tc22.lld, "--thinlto-index-only", *objects, "-o", "out", "-e", "main"], project)
    shard = (project / "main.o.thinlto.bc").read_bytes()
    assert len(bitcode.module_paths(shard)) == 41
    return shard


def test_relocate_writes_what_the_fields_one_by_one_write(shards, main_shard):
    """relocate packs a block's records into whole words between two paths: the bytes (so every
    action digest) are those of writing each field on its own; paths of one, two and three VBR6
    chunks of length."""
    for name in ("m/000001-" + "f" * 32 + ".o", "x", "é" * 20, "n" * 2000):
        def rename(path: str) -> str:
            return f"{name}{len(path)}"

        for shard in (*shards.values(), main_shard):
            assert bitcode.relocate(shard, rename) == _relocated_field_by_field(shard, rename), name
