"""A tiny REAPI client for the harness smoke tests, run with the BuildGrid venv's Python.

The project venv has no grpcio, so tests/test_reapi_harness.py runs this as a
subprocess and reads the JSON it prints on stdout.

    python reapi_probe.py capabilities --url URL [--instance NAME]
    python reapi_probe.py cache-roundtrip --url URL [--instance NAME]
    python reapi_probe.py execute --url URL [--instance NAME] [--input DIR] [--cwd REL]
        [--output REL ...] [--platform K=V ...] [--env K=V ...] [--dest DIR] -- ARGV...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import grpc

from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.rpc import code_pb2
from reapi_worker import Cas, digest_of, dkey


def channel(url: str) -> grpc.Channel:
    return grpc.insecure_channel(url.removeprefix("grpc://"))


def capabilities(args: argparse.Namespace) -> dict[str, object]:
    caps = re_grpc.CapabilitiesStub(channel(args.url)).GetCapabilities(
        re_pb2.GetCapabilitiesRequest(instance_name=args.instance), timeout=10
    )
    return {"exec_enabled": caps.execution_capabilities.exec_enabled,
            "max_batch_total_size_bytes": caps.cache_capabilities.max_batch_total_size_bytes}


def cache_roundtrip(args: argparse.Namespace) -> dict[str, object]:
    ch = channel(args.url)
    cas = Cas(ch, args.instance)
    ac = re_grpc.ActionCacheStub(ch)
    blob = f"hello {time.time()}".encode()
    d = digest_of(blob)
    missing_before = len(cas.cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(instance_name=args.instance, blob_digests=[d])).missing_blob_digests)
    cas.upload({dkey(d): blob})
    missing_after = len(cas.cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(instance_name=args.instance, blob_digests=[d])).missing_blob_digests)
    action_digest = digest_of(b"action " + blob)
    result = re_pb2.ActionResult(exit_code=0, output_files=[re_pb2.OutputFile(path="out.o", digest=d)])
    ac.UpdateActionResult(re_pb2.UpdateActionResultRequest(
        instance_name=args.instance, action_digest=action_digest, action_result=result))
    got = ac.GetActionResult(re_pb2.GetActionResultRequest(
        instance_name=args.instance, action_digest=action_digest))
    try:
        ac.GetActionResult(re_pb2.GetActionResultRequest(
            instance_name=args.instance, action_digest=digest_of(b"never stored")))
        miss = "found"
    except grpc.RpcError as e:
        miss = e.code().name
    return {
        "missing_before": missing_before,
        "missing_after": missing_after,
        "read_back": cas.read(d) == blob,
        "ac_hit": got.output_files[0].digest.hash == d.hash,
        "ac_miss": miss,
    }


def upload_tree(path: Path | None, blobs: dict[tuple[str, int], bytes]) -> re_pb2.Digest:
    """Merkle tree of a local directory (or an empty root); blobs collects what to upload."""
    directory = re_pb2.Directory()
    if path is not None:
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.is_dir():
                directory.directories.add(name=entry.name, digest=upload_tree(Path(entry.path), blobs))
            else:
                data = Path(entry.path).read_bytes()
                d = digest_of(data)
                blobs[dkey(d)] = data
                directory.files.add(name=entry.name, digest=d, is_executable=os.access(entry.path, os.X_OK))
    data = directory.SerializeToString(deterministic=True)
    d = digest_of(data)
    blobs[dkey(d)] = data
    return d


def execute(args: argparse.Namespace) -> dict[str, object]:
    ch = channel(args.url)
    cas = Cas(ch, args.instance)
    blobs: dict[tuple[str, int], bytes] = {}
    root = upload_tree(args.input, blobs)
    platform = re_pb2.Platform(properties=sorted(
        (re_pb2.Platform.Property(name=k, value=v) for k, v in (p.split("=", 1) for p in args.platform)),
        key=lambda p: (p.name, p.value)))
    command = re_pb2.Command(
        arguments=args.argv,
        environment_variables=sorted(
            (re_pb2.Command.EnvironmentVariable(name=k, value=v) for k, v in (e.split("=", 1) for e in args.env)),
            key=lambda e: e.name),
        output_paths=sorted(args.output),
        working_directory=args.cwd,
        platform=platform,
    )
    cmd_data = command.SerializeToString(deterministic=True)
    cmd_digest = digest_of(cmd_data)
    blobs[dkey(cmd_digest)] = cmd_data
    action = re_pb2.Action(command_digest=cmd_digest, input_root_digest=root,
                           do_not_cache=args.no_cache, platform=platform)
    act_data = action.SerializeToString(deterministic=True)
    act_digest = digest_of(act_data)
    blobs[dkey(act_digest)] = act_data
    cas.upload(blobs)

    t0 = time.monotonic()
    response = re_pb2.ExecuteResponse()
    last = None
    for op in re_grpc.ExecutionStub(ch).Execute(
        re_pb2.ExecuteRequest(instance_name=args.instance, action_digest=act_digest,
                              skip_cache_lookup=args.no_cache), timeout=args.timeout):
        last = op
        if op.done:
            break
    assert last is not None and last.done, "Execute stream ended before the operation was done"
    if last.HasField("error"):
        return {"error": {"code": last.error.code, "message": last.error.message}}
    last.response.Unpack(response)
    elapsed = time.monotonic() - t0
    result = response.result
    outputs: dict[str, str] = {}
    for f in result.output_files:
        data = cas.read(f.digest)
        outputs[f.path] = data.decode(errors="replace")
        if args.dest is not None:
            (args.dest / f.path).parent.mkdir(parents=True, exist_ok=True)
            (args.dest / f.path).write_bytes(data)
    stdout = result.stdout_raw or (cas.read(result.stdout_digest) if result.HasField("stdout_digest") else b"")
    stderr = result.stderr_raw or (cas.read(result.stderr_digest) if result.HasField("stderr_digest") else b"")
    return {
        "status": code_pb2.Code.Name(response.status.code),
        "status_message": response.status.message,
        "cached": response.cached_result,
        "exit_code": result.exit_code,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
        "outputs": outputs,
        "worker": result.execution_metadata.worker,
        "seconds": round(elapsed, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("capabilities", "cache-roundtrip", "execute"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--instance", default="")
        if name == "execute":
            p.add_argument("--input", type=Path, default=None)
            p.add_argument("--cwd", default="")
            p.add_argument("--output", action="append", default=[])
            p.add_argument("--platform", action="append", default=[])
            p.add_argument("--env", action="append", default=[])
            p.add_argument("--dest", type=Path, default=None)
            p.add_argument("--no-cache", action="store_true")
            p.add_argument("--timeout", type=float, default=120)
            p.add_argument("argv", nargs="+")
    args = ap.parse_args()
    fn = {"capabilities": capabilities, "cache-roundtrip": cache_roundtrip, "execute": execute}[args.cmd]
    try:
        out = fn(args)
    except grpc.RpcError as e:
        out = {"rpc_error": e.code().name, "details": e.details()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
