"""Backend compiles through a real REAPI service on loopback: its cache, its workers.

Two cache directories stand for two machines. The server is BuildGrid 0.9.1 in its own
Python 3.13 venv (reapi_server.py; its workers are tests/reapi_worker.py) and, for the tests
that take the `engine` fixture, Buildbarn too (buildbarn_server.py, reapi_engines.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import (Toolchain, compile_lto, link_all, links_of, ltowrap_env, machine, many_modules, prepared, run,
                     stats_json, toolchain_line, wait_until, wrapper, write)
from needs import require_module
from reapi_engines import (engine_cache_server, engine_exec_server, engine_exec_server_runs,
                           engine_secure_cache_server, engine_unsteady_cache_server, worker_prefix)
from reapi_server import SecureServer, cache_server, exec_server, free_port

grpc = require_module("grpc")

from ltowrap import cache  # noqa: E402
from ltowrap.formats import bitcode, shardkey  # noqa: E402
from ltowrap.remote import action, protos  # noqa: E402
from ltowrap.remote.client import BYTESTREAM, MAX_ATTEMPTS, V2, Client, Endpoint, RemoteError, key_of  # noqa: E402


@pytest.fixture(scope="module")
def cache_url(engine, tmp_path_factory) -> str:
    """A cache-only server of each engine in turn (tests/reapi_engines.py)."""
    with engine_cache_server(engine, tmp_path_factory.mktemp(engine)) as url:
        yield url


@pytest.fixture(scope="module")
def secure_cache(engine, tmp_path_factory) -> SecureServer:
    """A cache server of each engine in turn behind TLS (self-signed certificate) that wants a
    JWT bearer token."""
    with engine_secure_cache_server(engine, tmp_path_factory.mktemp(f"{engine}-tls")) as server:
        yield server


def link(d: Path, env: dict, out: str = "prog") -> subprocess.CompletedProcess[str]:
    return run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", "-o", out,
                "main.o", "add.o", "mul.o", "twice.o"], d, env=env)


def counters(env: dict) -> dict:
    return stats_json(env)


def two_machines(project: Path, tmp_path: Path, tc: Toolchain, url: str, **extra: str) -> dict:
    """Machine a links and publishes; machine b, with its own empty cache, gets every backend
    from the remote cache and writes the same binary. Returns b's environment."""
    expected = prepared(project, tc)
    a = machine(tmp_path, "a", tc, url, **extra)
    first_link = link(project, a, "prog-a")
    first = counters(a)
    assert first["backend_misses"] == 4 and first["remote_misses"] == 4 and first["remote_uploads"] == 4
    assert first["remote_errors"] == 0 and "ltowrap:" not in first_link.stderr

    b = machine(tmp_path, "b", tc, url, **extra)
    done = link(project, b, "prog-b")
    second = counters(b)
    assert second["remote_hits"] == 4 and second["backend_misses"] == 0 and second["remote_errors"] == 0
    assert run([str(project / "prog-b")], project).stdout == expected
    # ltowrap's own CPU on the remote service's work has its heading (log.CpuLedger).
    assert "remote" in links_of(tmp_path / "b.log")[-1]["cpu"]["by"]
    assert (project / "prog-a").read_bytes() == (project / "prog-b").read_bytes()
    assert "ltowrap:" not in done.stderr
    return b


def builds_locally(project: Path, env: dict, expected: str, says: str) -> None:
    """The link succeeds, every backend compiled here and counted in remote_errors, with one
    warning (not one per job) that says why."""
    done = link(project, env)
    assert run([str(project / "prog")], project).stdout == expected
    c = counters(env)
    assert c["links_distributed"] == 1 and c["backend_misses"] == 4 and c["remote_errors"] == 4
    assert c["remote_hits"] == c["remote_executed"] == c["remote_uploads"] == 0
    assert done.stderr.count("ltowrap: remote") == 1 and says in done.stderr


def test_second_machine_gets_every_backend_from_the_remote_cache(project, tmp_path, tc, cache_url):
    b = two_machines(project, tmp_path, tc, cache_url)
    # The objects were backfilled into b's local cache: a relink asks the remote nothing
    # (memo off: the link memo would restore the relink before any backend).
    link(project, {**b, "LTOWRAP_MEMO": "0"}, "prog-b")
    assert counters(b)["backend_hits"] == 4 and counters(b)["remote_hits"] == 4


COUNTING_LINK = """
import sys
from collections import Counter
from ltowrap import cachekey, entry
made = Counter()
shard_identity = cachekey.shard_identity
def counted(shard, *args, **kwargs):
    made[shard] += 1
    return shard_identity(shard, *args, **kwargs)
cachekey.shard_identity = counted
# argv: where the counts go, the ltowrap-clang entry (its directory has the ld.lld entry), the link.
counts, wrapper, link = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [wrapper]
try:
    entry.main([wrapper, *link])
finally:
    with open(counts, "w") as f:
        f.write(" ".join(str(n) for n in made.values()))
"""


def test_each_shard_is_parsed_once_for_its_key_and_its_remote_identity(project, tmp_path, tc22, cache_url):
    """The remote identity names the shard key the local key took: a cold link with a remote
    cache parses each shard once (a second parse doubled the serial time before a 401-module
    link's first remote job, bench/cluster.py)."""
    prepared(project, tc22)
    env = machine(tmp_path, "a", tc22, cache_url)
    counts = tmp_path / "counts"
    done = run([sys.executable, "-c", COUNTING_LINK, str(counts), wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld",
                "-O2", "-o", "prog", "main.o", "add.o", "mul.o", "twice.o"], project, env=env)
    assert "ltowrap:" not in done.stderr
    c = counters(env)
    assert c["links_distributed"] == 1 and c["remote_misses"] + c["remote_hits"] == 4  # the server is the module's
    assert counts.read_text().split() == ["1"] * 4


def test_server_down_builds_locally_and_counts_the_errors(project, tmp_path, tc):
    expected = prepared(project, tc)
    env = machine(tmp_path, "a", tc, f"grpc://127.0.0.1:{free_port()}", LTOWRAP_REMOTE_TIMEOUT="2")
    builds_locally(project, env, expected, "UNAVAILABLE")


def test_empty_remote_object_is_rejected_and_rebuilt(project, tmp_path, tc22, cache_url):
    tc = tc22
    expected = prepared(project, tc, flags=("-O1",))  # flags of their own: actions new to the shared server
    a = machine(tmp_path, "a", tc, cache_url)
    link(project, a)
    actions = [b["action"] for b in links_of(tmp_path / "a.log")[-1]["backends"]]
    assert len(actions) == 4
    client = Client(Endpoint(cache_url))
    empty = protos.ActionResult(exit_code=0)
    empty.output_files.add(path=action.OUTPUT, digest=protos.Digest(
        hash="e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", size_bytes=0))
    for name in actions:
        h, size = name.split("/")
        client.update_action_result((h, int(size)), empty)

    b = machine(tmp_path, "b", tc, cache_url)
    link(project, b)
    assert run([str(project / "prog")], project).stdout == expected
    c = counters(b)
    assert c["remote_errors"] == 4 and c["remote_hits"] == 0 and c["backend_misses"] == 4
    # b's good objects replaced the bad entries for everyone.
    for name in actions:
        h, size = name.split("/")
        result = client.get_action_result((h, int(size)))
        assert result.output_files[0].digest.size_bytes > 0
    client.close()


def test_a_poisoned_remote_entry_is_caught_by_verify(project, tmp_path, tc22, cache_url):
    """A remote result that is a valid object, of another program: served as it is without
    verify (the poison reaches the program), compiled again and replaced with verify = 1."""
    tc = tc22
    expected = prepared(project, tc, flags=("-O3",))  # flags of their own: actions new to the shared server
    link(project, machine(tmp_path, "a", tc, cache_url))
    main = next(b["action"] for b in links_of(tmp_path / "a.log")[-1]["backends"] if b["module"] == "main.o")
    other = tmp_path / "other"  # the same program but twice() triples: main.o's object inlines it
    prepared(other, tc, flags=("-O3",))
    write(other / "twice.c", "int twice(int x) { return 3 * x; }\n")
    compile_lto(other, tc, "twice", flags=("-O3",))
    env = ltowrap_env(tc, LTOWRAP_CACHE_DIR=str(tmp_path / "other-cache"), LTOWRAP_DEBUG="1")
    run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", "-o", "prog", "main.o", "add.o", "mul.o",
         "twice.o"], other, env=env)
    poisoned = next(cache.decode(p.read_bytes()).payload for p in (tmp_path / "other-cache" / "o").rglob("*")
                    if p.is_file() and not p.name.endswith(".txt")
                    and "module: main.o\n" in Path(str(p) + ".key.txt").read_text(errors="replace"))
    client = Client(Endpoint(cache_url))
    blob = (hashlib.sha256(poisoned).hexdigest(), len(poisoned))
    client.upload({blob: poisoned})
    result = protos.ActionResult(exit_code=0)
    result.output_files.add(path=action.OUTPUT, digest=protos.Digest(hash=blob[0], size_bytes=blob[1]))
    h, size = main.split("/")
    client.update_action_result((h, int(size)), result)

    c = machine(tmp_path, "c", tc, cache_url, LTOWRAP_MEMO="0")
    link(project, c)
    assert run([str(project / "prog")], project).stdout != expected  # the poison reaches the program unchecked
    b = machine(tmp_path, "b", tc, cache_url, LTOWRAP_MEMO="0", LTOWRAP_VERIFY="1")
    link(project, b)
    assert run([str(project / "prog")], project).stdout == expected
    assert counters(b)["verify_mismatches"] == 1 and counters(b)["verify_checks"] == 4
    checked = {r["module"]: r["verified"] for r in links_of(tmp_path / "b.log")[-1]["backends"]}
    assert checked["main.o"].startswith("mismatch: remote cache") and checked["add.o"] == "same"
    result = client.get_action_result((h, int(size)))  # b's fresh object replaced the entry for everyone
    assert result.output_files[0].digest.hash != blob[0]
    client.close()


def test_tls_and_bearer_token_second_machine_gets_every_backend(project, tmp_path, tc22, secure_cache):
    two_machines(project, tmp_path, tc22, secure_cache.url, LTOWRAP_REMOTE_TLS_CA=str(secure_cache.ca),
                 LTOWRAP_REMOTE_HEADER=f"authorization: Bearer {secure_cache.token}")


@pytest.mark.parametrize("token", ["none", "wrong-secret"])
def test_missing_or_bad_token_builds_locally(project, tmp_path, tc22, secure_cache, token):
    expected = prepared(project, tc22)
    extra = {"LTOWRAP_REMOTE_TLS_CA": str(secure_cache.ca)}
    if token == "wrong-secret":  # well formed, unexpired, right audience: signed with another key
        extra["LTOWRAP_REMOTE_HEADER"] = f"authorization: Bearer {secure_cache.wrong_token}"
    builds_locally(project, machine(tmp_path, "a", tc22, secure_cache.url, **extra), expected, "UNAUTHENTICATED")


def test_tls_server_not_trusted_without_its_ca_builds_locally(project, tmp_path, tc22, secure_cache):
    """No remote_tls_ca: the system's roots do not trust the self-signed certificate."""
    expected = prepared(project, tc22)
    env = machine(tmp_path, "a", tc22, secure_cache.url,
                  LTOWRAP_REMOTE_HEADER=f"authorization: Bearer {secure_cache.token}")
    builds_locally(project, env, expected, "CERTIFICATE_VERIFY_FAILED")


def test_relocated_shard_compiles_to_the_same_object_elsewhere(project, tc):
    """The remote input root: module paths rewritten, compiled in another directory."""
    write(project / "a.c", "int helper(int);\nstatic int s = 3;\nint main(int c, char **v) { return helper(c) * 2 + s; }\n")
    write(project / "b.c", "int helper(int x) { return x + 41; }\n")
    for n in "ab":
        run([tc.clang, "-O2", "-flto=thin", "-c", f"{n}.c", "-o", f"{n}.o"], project)
    run([tc.lld, "--thinlto-index-only=list", "--thinlto-emit-imports-files", str(project / "a.o"),
         str(project / "b.o"), "-o", "out", "-e", "main"], project)
    shard = (project / "a.o.thinlto.bc").read_bytes()
    assert bitcode.module_paths(shard) == [str(project / "a.o"), str(project / "b.o")]
    moved = bitcode.relocate(shard, lambda p: "m/" + os.path.basename(p))
    assert bitcode.module_paths(moved) == ["m/a.o", "m/b.o"]
    assert shardkey.canonical(moved, os.path.basename) == shardkey.canonical(shard, os.path.basename)
    elsewhere = project / "root"
    (elsewhere / "m").mkdir(parents=True)
    for n in "ab":
        (elsewhere / "m" / f"{n}.o").write_bytes((project / f"{n}.o").read_bytes())
    (elsewhere / "index.bc").write_bytes(moved)
    run([tc.clang, "-O2", "-c", "-x", "ir", "m/a.o", "-fthinlto-index=index.bc", "-o", "out.o"], elsewhere)
    run([tc.clang, "-O2", "-c", "-x", "ir", str(project / "a.o"), f"-fthinlto-index={project / 'a.o.thinlto.bc'}",
         "-o", "local.o"], project)
    assert (elsewhere / "out.o").read_bytes() == (project / "local.o").read_bytes()


def test_local_link_path_never_imports_grpc():
    code = ("import sys, ltowrap.pipeline, ltowrap.distributor, ltowrap.entry; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_execute_mode_runs_backends_on_workers(project, tmp_path, tc22, engine):
    expected = prepared(project, tc22)
    with engine_exec_server(engine, tmp_path / engine, toolchain_line(tc22)) as url:
        env = machine(tmp_path, "a", tc22, url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0")
        link(project, env)
        assert run([str(project / "prog")], project).stdout == expected
        c = counters(env)
        assert c["remote_executed"] == 4 and c["backend_misses"] == 0 and c["remote_errors"] == 0
        # The log says on which worker each ran and how long it queued first; the trace shows both.
        backends = links_of(tmp_path / "a.log")[-1]["backends"]
        assert all(b["worker"].startswith(worker_prefix(engine)) and b["queued"] >= 0 for b in backends)
        trace = subprocess.run([wrapper("ltowrap"), "trace"], env=env, capture_output=True, text=True, check=True)
        tracks = {e["args"]["name"] for e in json.loads(trace.stdout)["traceEvents"] if e["name"] == "thread_name"}
        assert {f"remote worker {b['worker']}" for b in backends} <= tracks and "remote queue" in tracks
        # Another machine: the server answers from its action cache, nothing runs again.
        b = machine(tmp_path, "b", tc22, url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0")
        link(project, b, "prog-b")
        assert counters(b)["remote_hits"] == 4 and counters(b)["remote_executed"] == 0
        assert (project / "prog-b").read_bytes() == (project / "prog").read_bytes()
    # Built through the workers, the binary is the one a local link writes.
    local = machine(tmp_path, "local", tc22, "", LTOWRAP_MEMO="0")
    link(project, local, "prog-local")
    assert (project / "prog-local").read_bytes() == (project / "prog").read_bytes()


def test_doctor_checks_the_remote(tmp_path, cache_url):
    def doctor(url: str, mode: str = "cache") -> str:
        env = ltowrap_env(LTOWRAP_REMOTE=url, LTOWRAP_REMOTE_MODE=mode, LTOWRAP_REMOTE_TIMEOUT="2")
        return run([wrapper("ltowrap"), "doctor"], tmp_path, env=env, check=False).stdout

    said = doctor(cache_url)
    # BuildGrid takes SHA-256 only; Buildbarn lists eight functions, SHA256 among them.
    assert re.search(rf"\[ok\] remote {re.escape(cache_url)} \(cache\): answers: digest functions [A-Z0-9, ]*\bSHA256\b",
                     said), said
    assert "action cache updates from clients: allowed; execution: not offered" in said
    assert "[FAIL]" in doctor(cache_url, "execute") and "does not execute actions" in doctor(cache_url, "execute")
    assert "[FAIL] remote grpc://127.0.0.1:" in doctor(f"grpc://127.0.0.1:{free_port()}")


def test_large_blobs_go_through_bytestream(cache_url):
    """Blobs above the batch limit are written and read with ByteStream; small ones in batches."""
    from ltowrap.remote.client import key_of

    client = Client(Endpoint(cache_url))
    client.capabilities()
    large = os.urandom(client.batch_limit + 12345)
    small = b"small blob"
    # Under the batch limit, but more than Buildbarn's BatchReadBlobs answers (its
    # maximumMessageSizeBytes, 2 MiB here as in its reference deployment, which its
    # capabilities do not state): read through ByteStream after the batch is refused.
    medium = os.urandom(3 << 20)
    blobs = {key_of(large): large, key_of(small): small, key_of(medium): medium}
    assert client.find_missing(blobs) == set(blobs)
    client.upload(blobs)
    assert client.find_missing(blobs) == set()
    assert client.read(key_of(large)) == large and client.read(key_of(small)) == small
    assert client.read(key_of(medium)) == medium
    client.close()


@pytest.mark.slow
def test_remote_timeout_compiles_locally(project, tmp_path, tc22, engine):
    """A job no worker can take (its toolchain is advertised nowhere) times out and runs here."""
    expected = prepared(project, tc22)
    with engine_exec_server_runs(engine, tmp_path / engine, "another clang") as server:
        # The toolchain is a platform property here because the user lists it.
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_EXEC_TIMEOUT="2",
                      LTOWRAP_REMOTE_LOCAL="0",
                      LTOWRAP_REMOTE_PLATFORM=f"OSFamily=linux,ltowrap-toolchain={toolchain_line(tc22)}")
        builds_locally(project, env, expected, "remote_exec_timeout")


@pytest.mark.slow
def test_named_instance_and_stats_report(project, tmp_path, tc22, buildgrid):
    """remote_instance reaches the server; a wrong one is an error, and `ltowrap stats` shows both."""
    with cache_server(tmp_path / "bgd", instance="main") as url:
        two_machines(project, tmp_path, tc22, url, LTOWRAP_REMOTE_INSTANCE="main")
        wrong = machine(tmp_path, "c", tc22, url, LTOWRAP_REMOTE_INSTANCE="other")
        done = link(project, wrong, "prog-c")
        assert counters(wrong)["remote_errors"] == 4 and "ltowrap: remote" in done.stderr
    report = run([wrapper("ltowrap"), "stats"], tmp_path, env=machine(tmp_path, "b", tc22, url)).stdout
    assert f"Remote ({url}):" in report and re.search(r"\n  Hits \(action cache\): +4\n", report)


@pytest.mark.slow
def test_execute_mode_two_links_at_once_send_each_action_once(project, tmp_path, tc22, buildgrid):
    """Two identical links on one machine: a job one of them is having executed is not sent
    again by the other, which waits for its object in the local cache."""
    expected = prepared(project, tc22)
    with exec_server(tmp_path / "bgd", workers=2, toolchains=[toolchain_line(tc22)]) as server:
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0")
        argv = [wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", "-O2", "main.o", "add.o", "mul.o", "twice.o"]
        procs = [subprocess.Popen([*argv, "-o", f"prog-{i}"], cwd=project, env=env, stderr=subprocess.PIPE, text=True)
                 for i in (1, 2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0 and "ltowrap:" not in err, err
    c = counters(env)
    assert c["remote_executed"] == 4, "an action was executed twice"
    assert c["backend_misses"] == 0 and c["remote_errors"] == 0
    # Each of the other link's four came from the first's: waited for, or from the remote cache.
    assert c["backend_hits"] + c["remote_hits"] == 4
    for i in (1, 2):
        assert run([str(project / f"prog-{i}")], project).stdout == expected


class HeldSlot:
    """Takes a server's only RPC slot (maximum-concurrent-rpcs: 1) with a ByteStream write
    whose last chunk waits for release(): until then the server refuses every other
    request with RESOURCE_EXHAUSTED, as a busy shared server does."""

    def __init__(self, url: str) -> None:
        self.client = Client(Endpoint(url))
        self._release = threading.Event()
        data = b"x"
        name = f"uploads/held/blobs/{key_of(data)[0]}/1"

        def chunks():
            yield protos.WriteRequest(resource_name=name, write_offset=0, data=data)
            self._release.wait()
            yield protos.WriteRequest(write_offset=1, finish_write=True)

        write = self.client.channel.stream_unary(BYTESTREAM + "Write",
                                                 request_serializer=lambda m: m.SerializeToString(),
                                                 response_deserializer=protos.WriteResponse.FromString)
        self.failed: list[BaseException] = []

        def hold() -> None:
            try:
                write(chunks(), timeout=120)
            except grpc.RpcError as e:
                self.failed.append(e)

        probe = self.client.channel.unary_unary(V2 + "Capabilities/GetCapabilities",
                                                request_serializer=lambda m: m.SerializeToString(),
                                                response_deserializer=protos.ServerCapabilities.FromString)
        self._thread = threading.Thread(target=hold)
        self._thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self._thread.is_alive():  # the write itself was refused (a probe had the slot): again
                self._thread = threading.Thread(target=hold)
                self._thread.start()
            time.sleep(0.05)
            try:
                probe(protos.GetCapabilitiesRequest(), timeout=10)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    return  # only the write can hold the slot: it is held
        raise AssertionError(f"the held write never filled the server: {self.failed}")

    def release(self) -> None:
        self._release.set()
        self._thread.join()
        self.client.close()


def test_busy_server_answers_are_retried_with_fewer_requests_in_flight(buildgrid, tmp_path):
    """A server at its concurrent-RPC limit answers RESOURCE_EXHAUSTED: each lookup is asked again
    with backoff, the requests in flight come down to one while it pushes back and go up again
    after, every retry is counted, a refusal that outlasts remote_timeout is an error, and a
    client given more attempts (Endpoint.attempts) goes on asking past the default's."""
    with cache_server(tmp_path / "bgd", threads=5, max_rpcs=1) as url:
        held = HeldSlot(url)
        impatient = Client(Endpoint(url, timeout=1.0))
        with pytest.raises(RemoteError, match="GetActionResult: RESOURCE_EXHAUSTED") as refused:
            impatient.get_action_result(key_of(b"no such action"))
        assert not refused.value.unreachable and impatient.pressure.retries > 0
        impatient.close()

        # Room for more refusals than the default 8 attempts (about 3 s of backoff): a lookup
        # that used them up before the release would fail, as it should, and how soon the
        # release comes is this machine's load, not the client's.
        client = Client(Endpoint(url, timeout=120.0, jobs=8, attempts=100))
        answers: list[object] = []
        lookups = [threading.Thread(target=lambda i=i: answers.append(client.get_action_result(key_of(b"%d" % i))))
                   for i in range(8)]
        for t in lookups:
            t.start()
        wait_until(lambda: client.pressure.lowest == 1, 120, "the requests in flight down to one")
        # Held until the lookups were refused more than the default attempts allow (on average
        # over the 8, so at least one of them was): the case a loaded machine reaches by chance.
        # Lookups that gave up end the wait too: the answers below say which.
        wait_until(lambda: client.pressure.retries > 8 * (MAX_ATTEMPTS - 1) or not all(t.is_alive() for t in lookups),
                   120, "the default attempts used up")
        held.release()
        for t in lookups:
            t.join()
        assert answers == [None] * 8  # every lookup was answered (a miss), none failed
        assert client.pressure.retries >= 8 and client.pressure.limit > 1
        client.close()


def test_busy_server_second_machine_gets_every_backend(project, tmp_path, tc22, engine):
    """A server that says "not now" often (one request at a time on BuildGrid, connections
    dropped every half second on Buildbarn): both machines are refused or cut off, and still
    every backend is published by the first and served to the second."""
    with engine_unsteady_cache_server(engine, tmp_path / engine) as url:
        b = two_machines(project, tmp_path, tc22, url)
    records = links_of(tmp_path / "a.log") + links_of(tmp_path / "b.log")
    assert counters(b)["remote_retries"] == sum(r.get("remote_retries", 0) for r in links_of(tmp_path / "b.log"))
    assert all("remote_down" not in r for r in records)
    if engine == "buildbarn":  # the relay cuts each link's first connection by its bytes: each link retried
        assert all(r.get("remote_retries", 0) > 0 for r in records), records


@pytest.mark.slow
def test_platform_and_worker_compiler_reach_the_action(project, tmp_path, tc22, buildgrid):
    """remote_platform's properties, exactly, are the Action's platform; remote_compiler is the
    Command's argv[0]; the toolchain is in the Command (the key), not the platform; only the
    worker that advertises the listed property runs the jobs."""
    expected = prepared(project, tc22)
    worker_clang = tmp_path / "worker-image" / "bin" / "clang"  # where the workers' image keeps clang
    worker_clang.parent.mkdir(parents=True)
    worker_clang.symlink_to(os.path.realpath(tc22.clang))
    image = "docker://registry.example/llvm:22"
    with exec_server(tmp_path / "bgd", workers=0, match_keys=("container-image",)) as server:
        server.start_worker()  # another pool: no image property
        server.start_worker(extra=(("container-image", image),))
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0",
                      LTOWRAP_REMOTE_PLATFORM=f"OSFamily=linux, container-image={image}",
                      LTOWRAP_REMOTE_COMPILER=str(worker_clang))
        done = link(project, env)
        assert run([str(project / "prog")], project).stdout == expected and "ltowrap:" not in done.stderr
        c = counters(env)
        assert c["remote_executed"] == 4 and c["backend_misses"] == 0 and c["remote_errors"] == 0
        assert [server.worker_log(i).count(" done: status=0 exit=0") for i in range(2)] == [0, 4]
        client = Client(Endpoint(server.url))

        def read_action(name: str) -> tuple[protos.Action, protos.Command]:
            h, size = name.split("/")
            a = protos.Action.FromString(client.read((h, int(size))))
            command = protos.Command.FromString(client.read((a.command_digest.hash, a.command_digest.size_bytes)))
            assert [(p.name, p.value) for p in a.platform.properties] == [("OSFamily", "linux"),
                                                                           ("container-image", image)]
            assert command.platform == a.platform
            return a, command

        # What ran on the worker (its log names each lease's Action) ...
        ran = re.findall(r" action (\S+)", server.worker_log(1))
        assert len(ran) == 4
        for name in ran:
            _, command = read_action(name)
            assert command.arguments[0] == str(worker_clang)
            assert [(v.name, v.value) for v in command.environment_variables] == [
                (action.TOOLCHAIN_VARIABLE, toolchain_line(tc22))]
        # ... and the identity each result is cached under (the log's action): same platform.
        for b in links_of(tmp_path / "a.log")[-1]["backends"]:
            _, command = read_action(b["action"])
            assert command.arguments[0] == action.IDENTITY_TOOL
        client.close()


@pytest.mark.slow
def test_doctor_runs_a_probe_action_with_the_configured_platform(tmp_path, tc22, buildgrid):
    """execute mode: doctor runs clang --version on a worker with remote_platform's properties,
    and says so when no worker has them."""
    image = "docker://registry.example/llvm:22"
    with exec_server(tmp_path / "bgd", workers=0, match_keys=("container-image",)) as server:
        server.start_worker(extra=(("container-image", image),))

        def doctor(platform: str) -> str:
            env = ltowrap_env(tc22, LTOWRAP_REMOTE=server.url, LTOWRAP_REMOTE_MODE="execute",
                              LTOWRAP_REMOTE_PLATFORM=platform, LTOWRAP_REMOTE_EXEC_TIMEOUT="5",
                              LTOWRAP_CACHE_DIR=str(tmp_path / "cache"))
            return run([wrapper("ltowrap"), "doctor"], tmp_path, env=env, check=False).stdout

        said = doctor(f"OSFamily=linux,container-image={image}")
        assert "execution: enabled" in said
        assert (f"[ok] remote probe (OSFamily=linux,container-image={image}): {tc22.clang} --version ran on a worker: "
                f"{toolchain_line(tc22)}") in said
        said = doctor("OSFamily=linux,container-image=docker://elsewhere")
        assert "[FAIL] remote probe (OSFamily=linux,container-image=docker://elsewhere)" in said
        assert server.worker_log(0).count(" done: status=0 exit=0") == 1


@pytest.mark.slow
def test_hybrid_execute_mode_splits_the_jobs_between_local_slots_and_workers(project, tmp_path, tc22, engine):
    """execute mode with the local slots on (the default): each job is made once, by one side,
    the split is in the link's log line and in the stats, and the binary is a local build's."""
    objects = many_modules(project, tc22, 24)
    local = ltowrap_env(tc22, LTOWRAP_CACHE_DIR=str(tmp_path / "local"))
    link_all(project, local, objects, "prog-local")
    with engine_exec_server_runs(engine, tmp_path / engine, toolchain_line(tc22)) as server:
        # One local slot and two executions in flight: both sides have work to take.
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_JOBS="1",
                      LTOWRAP_REMOTE_JOBS="2")
        done = link_all(project, env, objects, "prog")
        ran = server.runs()
    assert "ltowrap:" not in done.stderr
    assert (project / "prog").read_bytes() == (project / "prog-local").read_bytes()
    assert run([str(project / "prog")], project).stdout == run([str(project / "prog-local")], project).stdout
    record = links_of(tmp_path / "a.log")[-1]
    backends = record["backends"]
    assert sorted(b["module"] for b in backends) == sorted(objects), "a job made twice or not at all"
    here = [b for b in backends if b["source"] == "compiled"]
    remote = [b for b in backends if b["source"] == "remote"]
    assert len(here) + len(remote) == len(objects)
    n, m = len(here), len(remote)
    # Taken from the queue by the local slot, not only raced at the end: both sides worked at once.
    assert any(not b.get("raced") for b in here) and m > 0, f"the split: {n} here, {m} on the workers"
    assert record["remote_local"] == n and record["remote_executed"] == m
    assert record["backend_compiles"] == n
    # A worker ran each of its jobs once; a run beyond those can only be a straggler the
    # local side raced and won while the worker finished it anyway (its answer unused).
    lost_races = sum(1 for b in here if b.get("raced"))
    assert ran is None or m <= ran <= m + lost_races, (ran, m, lost_races)
    c = counters(env)
    assert c["remote_local"] == n and c["remote_executed"] == m and c["backend_misses"] == n
    assert c["remote_errors"] == 0 and c["backend_failures"] == 0
    assert c["remote_raced"] == record.get("remote_raced", 0)
    report = run([wrapper("ltowrap"), "stats"], tmp_path, env=env).stdout
    assert re.search(rf"\n  Executed on workers: +{m}\n", report) and re.search(rf"\n  Compiled here beside them: +{n}\n", report)


@pytest.mark.slow
def test_hybrid_races_a_straggler_first_result_wins_the_other_is_cancelled(project, tmp_path, tc22, engine):
    """The workers' compiler stalls: once the queue is empty the local slot runs the job it
    holds too, the local object is used, and the remote operation is dropped."""
    objects = many_modules(project, tc22, 3)
    pids = tmp_path / "stalled.pids"
    stall = write(tmp_path / "stall", f"#!/bin/sh\necho $$ >> {pids}\nexec /bin/sleep 300\n")
    stall.chmod(0o755)  # far longer than the local compiles: only a race ends the link sooner
    with engine_exec_server_runs(engine, tmp_path / engine, toolchain_line(tc22)) as server:
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_JOBS="1",
                      LTOWRAP_REMOTE_JOBS="1", LTOWRAP_REMOTE_COMPILER=str(stall))
        done = link_all(project, env, objects, "prog")
        record = links_of(tmp_path / "a.log")[-1]
        raced = [b for b in record["backends"] if b.get("raced")]
        assert len(raced) == 1 and raced[0]["source"] == "compiled", record["backends"]
        assert record["remote_raced"] == 1 and record["remote_local"] == len(objects)
        assert record.get("remote_executed", 0) == 0
        if engine == "buildgrid":
            # Its worker hears of the cancel at its next heartbeat and kills the compile.
            # Buildbarn's does a minute after the link left, when its scheduler drops an
            # operation no one waits for (docs/remote.md): not waited for here. A cancel that
            # came before a worker took the operation leaves no compile to kill.
            def stalled() -> list[str]:
                return [p for p in (pids.read_text().split() if pids.exists() else []) if Path(f"/proc/{p}").exists()]

            wait_until(lambda: not stalled(), 120, "the stalled compile killed")
        assert server.runs() in (0, None)
    assert "ltowrap:" not in done.stderr
    c = counters(env)
    assert c["remote_raced"] == 1 and c["remote_local"] == len(objects) and c["remote_executed"] == 0
    assert c["remote_errors"] == 0 and c["backend_misses"] == len(objects)


@pytest.mark.slow
def test_execute_mode_with_a_read_only_action_cache_uses_the_result_and_publishes_nothing(project, tmp_path, tc22,
                                                                                          buildgrid):
    """A server whose action cache refuses clients' updates (update_enabled false): the executed
    objects are used, and nothing is put under the identity Actions (nor tried)."""
    expected = prepared(project, tc22)
    with exec_server(tmp_path / "bgd", workers=2, toolchains=[toolchain_line(tc22)], client_updates=False) as server:
        env = machine(tmp_path, "a", tc22, server.url, LTOWRAP_REMOTE_MODE="execute", LTOWRAP_REMOTE_LOCAL="0")
        done = link(project, env)
        assert run([str(project / "prog")], project).stdout == expected and "ltowrap:" not in done.stderr
        c = counters(env)
        assert c["remote_executed"] == 4 and c["backend_misses"] == 0 and c["remote_errors"] == 0
        assert c["remote_uploads"] == c["remote_upload_errors"] == 0
        client = Client(Endpoint(server.url))
        assert client.capabilities().cache_capabilities.action_cache_update_capabilities.update_enabled is False
        for b in links_of(tmp_path / "a.log")[-1]["backends"]:
            h, size = b["action"].split("/")
            assert client.get_action_result((h, int(size))) is None, b["module"]
        client.close()
        assert "Updating cache not allowed" not in (tmp_path / "bgd" / "bgd-exec.log").read_text(errors="replace")
