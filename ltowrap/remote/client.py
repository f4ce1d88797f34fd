"""A REAPI v2 client: the CAS (batch and ByteStream), the action cache, and execution.

Only what ltowrap needs, spoken directly through grpc's generic calls with the messages of
protos.py. Every failure comes out as RemoteError; `unreachable` tells a service that is
down or too slow (stop asking it for this link) from one that refused one request.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from . import protos

if TYPE_CHECKING:
    from ..config import Settings

V2 = "/build.bazel.remote.execution.v2."
BYTESTREAM = "/google.bytestream.ByteStream/"
# Requests larger than this go through ByteStream: 4 MiB is grpc's default message limit.
DEFAULT_BATCH_LIMIT = 4 << 20
BATCH_MARGIN = 64 << 10  # room for the request's own fields
CHUNK = 1 << 20
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAUTHENTICATED,
               grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)

Key = tuple[str, int]  # a blob's (sha256 hex, size)


class RemoteError(Exception):
    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def key_of(data: bytes) -> Key:
    return hashlib.sha256(data).hexdigest(), len(data)


def digest(key: Key):
    return protos.Digest(hash=key[0], size_bytes=key[1])


@dataclass(frozen=True)
class Endpoint:
    url: str  # grpc://host:port or grpcs://host:port
    instance: str = ""
    header: str = ""  # 'name: value', sent with every request
    tls_ca: str = ""  # PEM file; the system's roots when empty
    timeout: float = 60.0  # one request
    exec_timeout: float = 600.0  # one execution, queueing included

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoint:
        return cls(settings.remote, settings.remote_instance, settings.remote_header, settings.remote_tls_ca,
                   float(settings.remote_timeout), float(settings.remote_exec_timeout))


def _target(url: str) -> tuple[str, bool]:
    for scheme, secure in (("grpc://", False), ("grpcs://", True)):
        if url.startswith(scheme):
            return url[len(scheme) :].rstrip("/"), secure
    raise RemoteError(f"remote {url!r}: expected grpc://host:port or grpcs://host:port")


def _rpc_error(what: str, e: grpc.RpcError) -> RemoteError:
    code = e.code() if isinstance(e, grpc.Call) else None
    detail = e.details() if isinstance(e, grpc.Call) else str(e)
    name = code.name if code is not None else "UNKNOWN"
    return RemoteError(f"{what}: {name}: {detail}", unreachable=code in UNREACHABLE)


class Client:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        target, secure = _target(endpoint.url)
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        if secure:
            ca = None
            if endpoint.tls_ca:
                with open(endpoint.tls_ca, "rb") as f:
                    ca = f.read()
            self.channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca), options)
        else:
            self.channel = grpc.insecure_channel(target, options)
        self.metadata: tuple[tuple[str, str], ...] = ()
        if endpoint.header:
            name, sep, value = endpoint.header.partition(":")
            if not sep or not name.strip():
                raise RemoteError(f"remote_header {endpoint.header!r}: expected 'name: value'")
            self.metadata = ((name.strip().lower(), value.strip()),)
        self.batch_limit = DEFAULT_BATCH_LIMIT

    def close(self) -> None:
        self.channel.close()

    def _unary(self, method: str, request, response_type, what: str, timeout: float | None = None):
        call = self.channel.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response_type.FromString)
        try:
            return call(request, timeout=timeout or self.endpoint.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise _rpc_error(what, e) from None

    def capabilities(self):
        """Ask the server what it supports; the first request of a link, so it also says whether it is up."""
        caps = self._unary(V2 + "Capabilities/GetCapabilities",
                           protos.GetCapabilitiesRequest(instance_name=self.endpoint.instance),
                           protos.ServerCapabilities, "GetCapabilities")
        limit = caps.cache_capabilities.max_batch_total_size_bytes
        self.batch_limit = min(limit, DEFAULT_BATCH_LIMIT) if limit > 0 else DEFAULT_BATCH_LIMIT
        return caps

    # --- CAS -----------------------------------------------------------------------------

    def find_missing(self, keys: Iterable[Key]) -> set[Key]:
        wanted = list(dict.fromkeys(keys))
        missing: set[Key] = set()
        for i in range(0, len(wanted), 2000):
            request = protos.FindMissingBlobsRequest(instance_name=self.endpoint.instance,
                                                     blob_digests=[digest(k) for k in wanted[i : i + 2000]])
            response = self._unary(V2 + "ContentAddressableStorage/FindMissingBlobs", request,
                                   protos.FindMissingBlobsResponse, "FindMissingBlobs")
            missing.update((d.hash, d.size_bytes) for d in response.missing_blob_digests)
        return missing

    def upload(self, blobs: dict[Key, bytes]) -> None:
        """Store blobs: small ones in batches, large ones through ByteStream."""
        limit = self.batch_limit - BATCH_MARGIN
        batch: list[tuple[Key, bytes]] = []
        size = 0
        for key, data in blobs.items():
            if len(data) > limit:
                self._write(key, data)
                continue
            if size + len(data) > limit:
                self._batch_update(batch)
                batch, size = [], 0
            batch.append((key, data))
            size += len(data)
        if batch:
            self._batch_update(batch)

    def _batch_update(self, batch: list[tuple[Key, bytes]]) -> None:
        request = protos.BatchUpdateBlobsRequest(instance_name=self.endpoint.instance)
        for key, data in batch:
            request.requests.add(digest=digest(key), data=data)
        response = self._unary(V2 + "ContentAddressableStorage/BatchUpdateBlobs", request,
                               protos.BatchUpdateBlobsResponse, "BatchUpdateBlobs")
        for r in response.responses:
            if r.status.code != 0:
                raise RemoteError(f"BatchUpdateBlobs: {r.digest.hash}: code {r.status.code}: {r.status.message}")

    def _resource(self, key: Key, upload: bool) -> str:
        parts = [self.endpoint.instance] if self.endpoint.instance else []
        if upload:
            parts += ["uploads", str(uuid.uuid4())]
        return "/".join([*parts, "blobs", key[0], str(key[1])])

    def _write(self, key: Key, data: bytes) -> None:
        name = self._resource(key, upload=True)

        def chunks() -> Iterator:
            for offset in range(0, max(len(data), 1), CHUNK):
                piece = data[offset : offset + CHUNK]
                yield protos.WriteRequest(resource_name=name if offset == 0 else "", write_offset=offset,
                                          finish_write=offset + len(piece) >= len(data), data=piece)

        call = self.channel.stream_unary(BYTESTREAM + "Write", request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=protos.WriteResponse.FromString)
        try:
            response = call(chunks(), timeout=self.endpoint.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise _rpc_error("ByteStream.Write", e) from None
        if response.committed_size not in (len(data), -1):
            raise RemoteError(f"ByteStream.Write: committed {response.committed_size} of {len(data)} bytes")

    def read(self, key: Key) -> bytes:
        """A blob's bytes, checked against its digest."""
        if key[1] == 0:
            return b""
        if key[1] <= self.batch_limit - BATCH_MARGIN:
            request = protos.BatchReadBlobsRequest(instance_name=self.endpoint.instance, digests=[digest(key)])
            response = self._unary(V2 + "ContentAddressableStorage/BatchReadBlobs", request,
                                   protos.BatchReadBlobsResponse, "BatchReadBlobs")
            found = [r for r in response.responses if r.digest.hash == key[0]]
            if not found or found[0].status.code != 0:
                raise RemoteError(f"BatchReadBlobs: {key[0]}/{key[1]} not found")
            data = found[0].data
        else:
            data = self._read_stream(key)
        if key_of(data) != key:
            raise RemoteError(f"blob {key[0]}/{key[1]} came back with other contents")
        return data

    def _read_stream(self, key: Key) -> bytes:
        call = self.channel.unary_stream(BYTESTREAM + "Read", request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=protos.ReadResponse.FromString)
        try:
            return b"".join(r.data for r in call(protos.ReadRequest(resource_name=self._resource(key, upload=False)),
                                                 timeout=self.endpoint.timeout, metadata=self.metadata))
        except grpc.RpcError as e:
            raise _rpc_error("ByteStream.Read", e) from None

    # --- action cache and execution ------------------------------------------------------

    def get_action_result(self, action: Key):
        """The cached result, or None when the action cache has none."""
        request = protos.GetActionResultRequest(instance_name=self.endpoint.instance, action_digest=digest(action),
                                                inline_stderr=True)
        call = self.channel.unary_unary(V2 + "ActionCache/GetActionResult",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=protos.ActionResult.FromString)
        try:
            return call(request, timeout=self.endpoint.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise _rpc_error("GetActionResult", e) from None

    def update_action_result(self, action: Key, result) -> None:
        request = protos.UpdateActionResultRequest(instance_name=self.endpoint.instance, action_digest=digest(action),
                                                   action_result=result)
        self._unary(V2 + "ActionCache/UpdateActionResult", request, protos.ActionResult, "UpdateActionResult")

    def execute(self, action: Key):
        """Run the action (or take the server's cached result) and wait for it: an ExecuteResponse.

        The operation stream may break while the action is queued or running (a server
        restart, a proxy's idle timeout); WaitExecution picks the same operation up again.
        """
        deadline = time.monotonic() + self.endpoint.exec_timeout
        execute = self.channel.unary_stream(V2 + "Execution/Execute", request_serializer=lambda m: m.SerializeToString(),
                                            response_deserializer=protos.Operation.FromString)
        wait = self.channel.unary_stream(V2 + "Execution/WaitExecution",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=protos.Operation.FromString)
        name = ""
        too_slow = RemoteError(f"Execute: no result within remote_exec_timeout ({self.endpoint.exec_timeout:g} s)",
                               unreachable=True)
        for attempt in range(5):
            left = deadline - time.monotonic()
            if left <= 0:
                raise too_slow
            if name:
                stream = wait(protos.WaitExecutionRequest(name=name), timeout=left, metadata=self.metadata)
            else:
                stream = execute(protos.ExecuteRequest(instance_name=self.endpoint.instance, action_digest=digest(action)),
                                 timeout=left, metadata=self.metadata)
            try:
                for op in stream:
                    name = op.name or name
                    if op.done:
                        return _response(op)
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise too_slow from None
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not name:
                    time.sleep(0.2 * 2**attempt)  # the server is busy: ask again, as Bazel does
                    continue
                if not name or code != grpc.StatusCode.UNAVAILABLE:
                    raise _rpc_error("Execute" if not name else "WaitExecution", e) from None
        raise RemoteError("Execute: the server kept refusing or dropping the operation")


def _response(op):
    if op.HasField("error"):
        raise RemoteError(f"Execute: operation failed: code {op.error.code}: {op.error.message}")
    response = protos.ExecuteResponse()
    if not op.response.Unpack(response):
        raise RemoteError(f"Execute: unexpected response type {op.response.type_url}")
    if response.status.code != 0:
        raise RemoteError(f"Execute: code {response.status.code}: {response.status.message}")
    return response
