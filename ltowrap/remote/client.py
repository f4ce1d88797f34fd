"""A REAPI v2 client: the CAS (batch and ByteStream), the action cache, and execution.

Only what ltowrap needs, spoken directly through grpc's generic calls with the messages of
protos.py. Every failure comes out as RemoteError; `unreachable` tells a service that is
down or too slow (stop asking it for this link) from one that refused one request.

A busy server is the normal case for a shared cache: every call here is safe to repeat
(reads, content-addressed writes, Execute of the same action digest), so an answer that
says "not now" (RESOURCE_EXHAUSTED, UNAVAILABLE, ABORTED; DEADLINE_EXCEEDED from the
server before our own deadline) is asked again after an exponential backoff with full
jitter, within remote_timeout, as Bazel, Buck2 and recc do. Pressure also halves the
requests this link keeps in flight (and each success adds them back, AIMD), so one link
does not keep a small server saturated.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
import grpc.experimental

from . import protos

if TYPE_CHECKING:
    from ..config import Settings

V2 = "/build.bazel.remote.execution.v2."
OPERATIONS = "/google.longrunning.Operations/"
BYTESTREAM = "/google.bytestream.ByteStream/"
# Requests larger than this go through ByteStream: 4 MiB is grpc's default message limit.
DEFAULT_BATCH_LIMIT = 4 << 20
BATCH_MARGIN = 64 << 10  # room for the request's own fields
CHUNK = 1 << 20
SHA256 = 1  # DigestFunction.Value: the only one ltowrap computes
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAUTHENTICATED,
               grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)

# Answers that mean "not now": asked again after a backoff.
RETRYABLE = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED,
             grpc.StatusCode.DEADLINE_EXCEEDED)
NOT_NOW = {c.value[0]: c for c in RETRYABLE}  # the same by google.rpc.Status code (batch and operation answers)
BACKOFF_FIRST = 0.05  # seconds: the first retry waits up to this, each next one up to twice as long
BACKOFF_MAX = 5.0
MAX_ATTEMPTS = 8  # with the backoff above: at most ~6 s of waiting, ~3 s on average

Key = tuple[str, int]  # a blob's (sha256 hex, size)


class RemoteError(Exception):
    def __init__(self, message: str, unreachable: bool = False, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.code = code  # the gRPC status the server answered with, when it did


def key_of(data: bytes) -> Key:
    return hashlib.sha256(data).hexdigest(), len(data)


def digest_message(key: Key):
    return protos.Digest(hash=key[0], size_bytes=key[1])


def _serialize(message) -> bytes:
    return message.SerializeToString()


@dataclass(frozen=True)
class _Calls:
    """The channel's multicallables, one per method, made once a client (each costs a lookup
    and an object a call otherwise)."""

    capabilities: grpc.UnaryUnaryMultiCallable
    find_missing: grpc.UnaryUnaryMultiCallable
    batch_update: grpc.UnaryUnaryMultiCallable
    batch_read: grpc.UnaryUnaryMultiCallable
    get_action_result: grpc.UnaryUnaryMultiCallable
    update_action_result: grpc.UnaryUnaryMultiCallable
    cancel_operation: grpc.UnaryUnaryMultiCallable
    execute: grpc.UnaryStreamMultiCallable
    wait_execution: grpc.UnaryStreamMultiCallable
    read: grpc.UnaryStreamMultiCallable
    write: grpc.StreamUnaryMultiCallable

    @classmethod
    def of(cls, channel: grpc.Channel) -> _Calls:
        def unary(method: str, response_type) -> grpc.UnaryUnaryMultiCallable:
            return channel.unary_unary(method, request_serializer=_serialize,
                                       response_deserializer=response_type.FromString)

        def stream(method: str, response_type) -> grpc.UnaryStreamMultiCallable:
            return channel.unary_stream(method, request_serializer=_serialize,
                                        response_deserializer=response_type.FromString)

        cas = V2 + "ContentAddressableStorage/"
        return cls(unary(V2 + "Capabilities/GetCapabilities", protos.ServerCapabilities),
                   unary(cas + "FindMissingBlobs", protos.FindMissingBlobsResponse),
                   unary(cas + "BatchUpdateBlobs", protos.BatchUpdateBlobsResponse),
                   unary(cas + "BatchReadBlobs", protos.BatchReadBlobsResponse),
                   unary(V2 + "ActionCache/GetActionResult", protos.ActionResult),
                   unary(V2 + "ActionCache/UpdateActionResult", protos.ActionResult),
                   unary(OPERATIONS + "CancelOperation", protos.Empty),
                   stream(V2 + "Execution/Execute", protos.Operation),
                   stream(V2 + "Execution/WaitExecution", protos.Operation),
                   stream(BYTESTREAM + "Read", protos.ReadResponse),
                   channel.stream_unary(BYTESTREAM + "Write", request_serializer=_serialize,
                                        response_deserializer=protos.WriteResponse.FromString))


@dataclass(frozen=True)
class Endpoint:
    url: str  # grpc://host:port or grpcs://host:port
    instance: str = ""
    header: str = ""  # 'name: value', sent with every request
    tls_ca: str = ""  # PEM file; the system's roots when empty
    timeout: float = 60.0  # one request
    exec_timeout: float = 600.0  # one execution, queueing included
    jobs: int = 16  # requests in flight at most (fewer while the server pushes back)
    attempts: int = MAX_ATTEMPTS  # tries of a call the server keeps answering "not now", within timeout

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoint:
        return cls(settings.remote, settings.remote_instance, settings.remote_header, settings.remote_tls_ca,
                   float(settings.remote_timeout), float(settings.remote_exec_timeout), settings.remote_jobs)


def _target(url: str) -> tuple[str, bool]:
    for scheme, secure in (("grpc://", False), ("grpcs://", True)):
        if url.startswith(scheme):
            return url[len(scheme) :].rstrip("/"), secure
    raise RemoteError(f"remote {url!r}: expected grpc://host:port or grpcs://host:port")


def _code(e: Exception) -> grpc.StatusCode | None:
    return e.code() if isinstance(e, (grpc.Call, _Refused)) else None


def _rpc_error(what: str, e: Exception, retries: int = 0) -> RemoteError:
    code = _code(e)
    detail = e.details() if isinstance(e, (grpc.Call, _Refused)) else str(e)
    name = code.name if code is not None else "UNKNOWN"
    after = f" (after {retries} retries)" if retries else ""
    return RemoteError(f"{what}: {name}: {detail}{after}", unreachable=code in UNREACHABLE, code=code)


def _raise_refused(responses) -> None:
    """Raise _Refused if a batch answer turned any blob away with a "not now" status."""
    for r in responses:
        if r.status.code in NOT_NOW:
            raise _Refused(NOT_NOW[r.status.code], f"{r.digest.hash}: {r.status.message}")


class _Refused(Exception):
    """A batch answer whose per-blob status says "not now": the whole (idempotent) batch is asked again."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self._code, self._message = code, message

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message


class Pressure:
    """How hard this link may push the server: requests in flight (AIMD) and the retries so far.

    Shared by the session's threads. A "not now" answer halves the limit, once per burst:
    the answers to requests sent before the last cut do not cut it again. Each success adds
    1/limit, so the limit climbs back by about one per round of requests.
    """

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self.limit = float(self.most)
        self.in_flight = 0
        self.retries = 0
        self.lowest = self.most  # the lowest limit this link came down to
        self.gone = threading.Event()  # the service is unreachable: every retry loop stops
        self._cut_at = 0  # the ticket of the last request sent before the limit was last cut
        self._started = 0  # tickets given out
        self._ready = threading.Condition()

    def acquire(self) -> int:
        """Wait for room under the limit; the request's ticket, for release."""
        with self._ready:
            while self.in_flight >= int(self.limit) and not self.gone.is_set():
                self._ready.wait(0.5)
            self.in_flight += 1
            self._started += 1
            return self._started

    def release(self, ticket: int, pushed_back: bool) -> None:
        with self._ready:
            self.in_flight -= 1
            if pushed_back:
                if ticket > self._cut_at:  # sent after the last cut: new news about the server
                    self.limit = max(1.0, self.limit / 2)
                    self.lowest = min(self.lowest, int(self.limit))
                    self._cut_at = self._started
            else:
                self.limit = min(float(self.most), self.limit + 1 / self.limit)
            self._ready.notify_all()

    def retried(self) -> None:
        with self._ready:
            self.retries += 1


QUEUED, EXECUTING = 2, 3  # ExecutionStage values


class Running:
    """What another thread sees of an execute() under way: the stage the server last reported
    (ExecuteOperationMetadata; None before its first answer), and a cancel.

    cancel() cancels the operation stream and has the server asked to drop the operation
    (CancelOperation, which REAPI does not require: a server that refuses it just runs the
    action to no one). `moved` is called (from the executing thread) when the stage changes;
    without it no one reads the stage (jobs may wait in the server's queue: Session.room does
    not look), and the answers' metadata is not parsed for it.
    """

    def __init__(self, moved: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._stream = None
        self._moved = moved
        self.cancelled = False
        self.stage: int | None = None
        self.sent = time.monotonic()
        self.dispatched: float | None = None  # seconds from sent to leaving the server's queue

    def reported(self, op) -> None:
        if self._moved is None:
            return
        metadata = protos.ExecuteOperationMetadata()
        if not op.metadata.Unpack(metadata) or metadata.stage == self.stage:
            return
        self.stage = metadata.stage
        if self.dispatched is None and not self.queued:
            self.dispatched = time.monotonic() - self.sent
        self._moved()

    def waiting(self, grace: float) -> bool:
        """Queued for longer than `grace` seconds: waiting for a worker, not only being dispatched."""
        return self.queued and time.monotonic() - self.sent > grace

    @property
    def queued(self) -> bool:
        """Not known to have left the server's queue (stage UNKNOWN says nothing: not queued)."""
        return self.stage is None or 0 < self.stage < EXECUTING

    def watch(self, stream) -> None:
        """The stream execute() now reads (cancelled at once if the cancel came first)."""
        with self._lock:
            self._stream = stream
            if not self.cancelled:
                return
        stream.cancel()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            stream = self._stream
        if stream is not None:
            stream.cancel()


CANCELLED = "cancelled: the job was done elsewhere first"


class Client:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        target, secure = _target(endpoint.url)
        # Each stream (Execute, WaitExecution, ByteStream.Read) is read on the thread that
        # asked for it, as a unary call is: the default has a channel thread take every
        # message and hand it over through a condition the reader polls ten times a second,
        # which cost more CPU per execution than the rest of its requests together.
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                   (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)]
        if secure:
            ca = None
            if endpoint.tls_ca:
                with open(endpoint.tls_ca, "rb") as f:
                    ca = f.read()
            self.channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca), options)
        else:
            self.channel = grpc.insecure_channel(target, options)
        self._calls = _Calls.of(self.channel)
        self.metadata: tuple[tuple[str, str], ...] = ()
        if endpoint.header:
            name, sep, value = endpoint.header.partition(":")
            if not sep or not name.strip():
                raise RemoteError(f"remote_header {endpoint.header!r}: expected 'name: value'")
            self.metadata = ((name.strip().lower(), value.strip()),)
        self.batch_limit = DEFAULT_BATCH_LIMIT
        # Blobs up to this size are read in batches. Buildbarn answers a BatchReadBlobs only up
        # to its maximumMessageSizeBytes (2 MiB in its reference deployment), which it does not
        # advertise: a larger read it refuses lowers this, and goes through ByteStream.
        self.batch_read_limit = DEFAULT_BATCH_LIMIT - BATCH_MARGIN
        self.can_update = True  # the action cache takes results from clients (capabilities says)
        self.pressure = Pressure(endpoint.jobs)
        self._random = random.Random()
        self.uploaded = 0  # bytes of the blobs sent to the CAS
        self._counting = threading.Lock()
        # Group reads (_read_together): the blobs waited for, whether a thread is reading a
        # group now, and what a group may hold together (lowered when one is refused as too large).
        self._grouping = threading.Lock()
        self._wanted: list[_Wanted] = []
        self._reading = False
        self._group_limit = DEFAULT_BATCH_LIMIT

    def close(self) -> None:
        self.channel.close()

    def _backoff(self, attempt: int) -> float:
        return self._random.uniform(0, min(BACKOFF_MAX, BACKOFF_FIRST * 2**attempt))

    def _retrying(self, what: str, attempt_call, attempts: int | None = None):
        """attempt_call(seconds left) until it answers, asked again on "not now" within remote_timeout,
        `attempts` times at most (default: the endpoint's)."""
        deadline = time.monotonic() + self.endpoint.timeout
        attempts = attempts or self.endpoint.attempts
        for attempt in range(attempts):
            left = deadline - time.monotonic()
            ticket = self.pressure.acquire()
            pushed_back = False
            try:
                return attempt_call(max(left, 0.001))
            except (grpc.RpcError, _Refused) as e:
                pushed_back = _code(e) in RETRYABLE
                pause = self._backoff(attempt)
                last = (attempt + 1 == attempts or not pushed_back or self.pressure.gone.is_set()
                        or time.monotonic() + pause >= deadline)
                if last:
                    error = _rpc_error(what, e, attempt)
                    if error.unreachable:
                        self.pressure.gone.set()
                    raise error from None
            finally:
                self.pressure.release(ticket, pushed_back)
            self.pressure.retried()
            time.sleep(pause)
        raise AssertionError("unreachable: the last attempt raises")

    def _unary(self, call: grpc.UnaryUnaryMultiCallable, request, what: str, attempts: int | None = None,
               batch: bool = False):
        """One call, retried; `batch`: a refusal in one of its per-blob answers retries the whole call."""

        def attempt(left: float):
            response = call(request, timeout=left, metadata=self.metadata)
            if batch:
                _raise_refused(response.responses)
            return response

        return self._retrying(what, attempt, attempts)

    def capabilities(self):
        """Ask the server what it supports; the first request of a link, so it also says whether it is up."""
        # Few attempts: a refused connection here is most often a server that is not there,
        # and every link would wait out the whole backoff.
        caps = self._unary(self._calls.capabilities, protos.GetCapabilitiesRequest(instance_name=self.endpoint.instance),
                           "GetCapabilities", attempts=3)
        cache = caps.cache_capabilities
        limit = cache.max_batch_total_size_bytes
        self.batch_limit = min(limit, DEFAULT_BATCH_LIMIT) if limit > 0 else DEFAULT_BATCH_LIMIT
        self.batch_read_limit = min(self.batch_read_limit, self.batch_limit - BATCH_MARGIN)
        # Servers from before digest_functions existed leave it empty: they speak SHA-256.
        if cache.digest_functions and SHA256 not in cache.digest_functions:
            raise RemoteError(f"the server does not take SHA-256 digests (it takes {list(cache.digest_functions)})",
                              unreachable=True)
        self.can_update = cache.action_cache_update_capabilities.update_enabled
        return caps

    # --- CAS -----------------------------------------------------------------------------

    def find_missing(self, keys: Iterable[Key]) -> set[Key]:
        wanted = list(dict.fromkeys(keys))
        missing: set[Key] = set()
        for i in range(0, len(wanted), 2000):
            request = protos.FindMissingBlobsRequest(instance_name=self.endpoint.instance,
                                                     blob_digests=[digest_message(k) for k in wanted[i : i + 2000]])
            response = self._unary(self._calls.find_missing, request, "FindMissingBlobs")
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
            request.requests.add(digest=digest_message(key), data=data)
        response = self._unary(self._calls.batch_update, request, "BatchUpdateBlobs", batch=True)
        for r in response.responses:
            if r.status.code != 0:
                raise RemoteError(f"BatchUpdateBlobs: {r.digest.hash}: code {r.status.code}: {r.status.message}")
        self._sent(sum(len(data) for _, data in batch))

    def _sent(self, size: int) -> None:
        with self._counting:
            self.uploaded += size

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

        call = self._calls.write
        # Written again from the start on a retry: the blob is content-addressed.
        response = self._retrying("ByteStream.Write", lambda left: call(chunks(), timeout=left, metadata=self.metadata))
        if response.committed_size not in (len(data), -1):
            raise RemoteError(f"ByteStream.Write: committed {response.committed_size} of {len(data)} bytes")
        self._sent(len(data))

    def read(self, key: Key) -> bytes:
        """A blob's bytes, checked against its digest."""
        if key[1] == 0:
            return b""
        data = self._read_together(key) if key[1] <= self.batch_read_limit else None
        if data is None:
            data = self._read_stream(key)
        if key_of(data) != key:
            raise RemoteError(f"blob {key[0]}/{key[1]} came back with other contents")
        return data

    def _read_together(self, key: Key) -> bytes | None:
        """The blob through BatchReadBlobs, in one request with the other blobs that threads
        want at the same time (objects of executions that land together); None if the server
        refused it as too large for a batch.

        The first thread to want a blob while no read is under way reads for every thread
        waiting then (a group: _Wanted); those that come while it reads wait, and the first of
        them reads for the next group. So a read alone costs one request as before, and under
        load one request serves several."""
        me = _Wanted(key)
        with self._grouping:
            self._wanted.append(me)
            me.lead = not self._reading
            self._reading = True
        while not me.done:
            if not me.lead:
                me.ready.wait()
            if me.lead:
                me.lead = False
                self._read_group()
        if me.error is not None:
            raise me.error
        return me.data

    def _read_group(self) -> None:
        """Read the waiting blobs at the front, up to the batch limit together (the leader's own
        is the first), then wake their threads and hand the lead to the next one waiting."""
        with self._grouping:
            limit = min(self.batch_read_limit, self._group_limit)
            group: list[_Wanted] = []
            size = 0
            while self._wanted and (not group or size + self._wanted[0].key[1] <= limit):
                group.append(self._wanted.pop(0))
                size += group[-1].key[1]
        try:
            self._fill(group, size)
        finally:
            with self._grouping:
                for w in group:
                    w.done = True
                    w.ready.set()
                if self._wanted:
                    self._wanted[0].lead = True
                    self._wanted[0].ready.set()
                else:
                    self._reading = False

    def _fill(self, group: list[_Wanted], size: int) -> None:
        """Each blob of the group, or the error that stands for it."""
        if len(group) > 1:
            try:
                found = self._batch_read([w.key for w in group])
            except RemoteError as e:
                if e.code != grpc.StatusCode.INVALID_ARGUMENT:
                    for w in group:
                        w.error = e
                    return
                # Refused as too large together (Buildbarn's message limit): later groups stay
                # below this one, and these are read one by one, as alone.
                self._group_limit = min(self._group_limit, size - 1)
            else:
                for w in group:
                    try:
                        w.data = _found(found, w.key)
                    except RemoteError as e:
                        w.error = e
                return
        for w in group:
            try:
                w.data = self._read_batch(w.key)
            except RemoteError as e:
                w.error = e

    def _batch_read(self, keys: list[Key]) -> dict[str, Any]:
        """BatchReadBlobs of these keys: each answer by its hash."""
        request = protos.BatchReadBlobsRequest(instance_name=self.endpoint.instance,
                                               digests=[digest_message(k) for k in keys])
        response = self._unary(self._calls.batch_read, request, "BatchReadBlobs", batch=True)
        return {r.digest.hash: r for r in response.responses}

    def _read_batch(self, key: Key) -> bytes | None:
        """The blob alone through BatchReadBlobs; None if the server refused it as too large for a batch."""
        try:
            found = self._batch_read([key])
        except RemoteError as e:
            if e.code != grpc.StatusCode.INVALID_ARGUMENT or key[1] <= 64 << 10:
                raise
            with self._counting:
                self.batch_read_limit = min(self.batch_read_limit, key[1] - 1)
            return None
        return _found(found, key)

    def _read_stream(self, key: Key) -> bytes:
        call = self._calls.read
        request = protos.ReadRequest(resource_name=self._resource(key, upload=False))
        # Read again from the start on a retry: a partial read is thrown away.
        return self._retrying("ByteStream.Read", lambda left: b"".join(
            r.data for r in call(request, timeout=left, metadata=self.metadata)))

    # --- action cache and execution ------------------------------------------------------

    def get_action_result(self, action: Key):
        """The cached result, or None when the action cache has none."""
        request = protos.GetActionResultRequest(instance_name=self.endpoint.instance, action_digest=digest_message(action),
                                                inline_stderr=True)
        call = self._calls.get_action_result

        def attempt(left: float):
            try:
                return call(request, timeout=left, metadata=self.metadata)
            except grpc.RpcError as e:
                if _code(e) == grpc.StatusCode.NOT_FOUND:
                    return None
                raise

        return self._retrying("GetActionResult", attempt)

    def update_action_result(self, action: Key, result) -> None:
        request = protos.UpdateActionResultRequest(instance_name=self.endpoint.instance, action_digest=digest_message(action),
                                                   action_result=result)
        self._unary(self._calls.update_action_result, request, "UpdateActionResult")

    def cancel_operation(self, name: str) -> None:
        """Ask the server to drop an operation no one waits for any more; one try, errors ignored."""
        try:
            self._calls.cancel_operation(protos.CancelOperationRequest(name=name),
                                         timeout=min(5.0, self.endpoint.timeout), metadata=self.metadata)
        except grpc.RpcError:
            pass

    def execute(self, action: Key, running: Running | None = None):
        """Run the action (or take the server's cached result) and wait for it: an ExecuteResponse.

        Execute is safe to repeat (the same action digest: the server merges it with the
        one it runs, or answers from its cache). The operation stream may break while the
        action is queued or running (a server restart, a proxy's idle timeout):
        WaitExecution picks the same operation up again, and an operation the server has
        forgotten (NOT_FOUND) is executed again. A "not now" answer is retried with the
        same backoff as every other call; a server not heard from for remote_timeout, or
        no result within remote_exec_timeout, means "compile here". `running` shows the
        stage to another thread, and stops the wait from there (RemoteError CANCELLED),
        dropping the operation on the server.
        """
        handle = running or Running()
        deadline = time.monotonic() + self.endpoint.exec_timeout
        execute, wait = self._calls.execute, self._calls.wait_execution
        name = ""
        too_slow = RemoteError(f"Execute: no result within remote_exec_timeout ({self.endpoint.exec_timeout:g} s)",
                               unreachable=True)
        heard = time.monotonic()  # the last answer from the server: it is given remote_timeout to answer again
        refusals = 0  # "not now" answers since the last progress
        while True:
            left = deadline - time.monotonic()
            if handle.cancelled:
                if name:
                    self.cancel_operation(name)
                raise RemoteError(CANCELLED)
            if left <= 0:
                raise too_slow
            what = "WaitExecution" if name else "Execute"
            pushed_back = False
            ticket = self.pressure.acquire()
            opened = time.monotonic()
            try:
                if name:
                    stream = wait(protos.WaitExecutionRequest(name=name), timeout=left, metadata=self.metadata)
                else:
                    stream = execute(protos.ExecuteRequest(instance_name=self.endpoint.instance,
                                                           action_digest=digest_message(action)),
                                     timeout=left, metadata=self.metadata)
                handle.watch(stream)
                for op in stream:
                    heard, refusals = time.monotonic(), 0
                    name = op.name or name
                    handle.reported(op)
                    if op.done:
                        response = _response(op)
                        if response.status.code not in NOT_NOW:
                            return _checked(response)
                        # The server gave up on it for now (queue full, bot lost): send it again.
                        pushed_back, name = True, ""
                        error: Exception = _Refused(NOT_NOW[response.status.code], response.status.message)
                        break
                else:
                    error = _Refused(grpc.StatusCode.UNAVAILABLE, "the operation stream ended before the result")
                    pushed_back = True
            except grpc.RpcError as e:
                code = _code(e)
                if handle.cancelled:
                    pushed_back = False
                    continue  # the loop's top drops the operation
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() >= deadline:
                    raise too_slow from None
                if code == grpc.StatusCode.NOT_FOUND and name:
                    name = ""  # the server forgot the operation (a restart): execute it again
                    pushed_back = True
                elif code in RETRYABLE:
                    pushed_back = True
                else:
                    raise _rpc_error(what, e) from None
                error = e
            finally:
                self.pressure.release(ticket, pushed_back)
            if time.monotonic() - opened > 1.0:
                # A stream that stayed open a while was live: it broke (a restart, a proxy's
                # idle timeout), the server was not refusing.
                heard, refusals = time.monotonic(), 0
            refusals += 1
            pause = self._backoff(min(refusals, MAX_ATTEMPTS))
            if (refusals >= MAX_ATTEMPTS * 2 or self.pressure.gone.is_set()
                    or time.monotonic() + pause - heard >= self.endpoint.timeout):
                failed = _rpc_error(what, error, refusals - 1)
                if failed.unreachable:
                    self.pressure.gone.set()
                raise failed
            self.pressure.retried()
            time.sleep(pause)


@dataclass
class _Wanted:
    """A blob a thread waits for in a group read (Client._read_together): its bytes or the error
    in its place once `done`; `lead`: woken to read the next group, not with its blob."""

    key: Key
    ready: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    lead: bool = False
    data: bytes | None = None
    error: RemoteError | None = None


def _found(found: dict[str, Any], key: Key) -> bytes:
    """The blob's bytes from a BatchReadBlobs answer (_batch_read); RemoteError if it has none."""
    r = found.get(key[0])
    if r is None or r.status.code != 0:
        raise RemoteError(f"BatchReadBlobs: {key[0]}/{key[1]} not found")
    return r.data


def _response(op):
    """The ExecuteResponse of a finished operation (its status unchecked: _checked)."""
    if op.HasField("error"):
        if op.error.code in NOT_NOW:
            return protos.ExecuteResponse(status=op.error)
        raise RemoteError(f"Execute: operation failed: code {op.error.code}: {op.error.message}")
    response = protos.ExecuteResponse()
    if not op.response.Unpack(response):
        raise RemoteError(f"Execute: unexpected response type {op.response.type_url}")
    return response


def _checked(response):
    if response.status.code != 0:
        raise RemoteError(f"Execute: code {response.status.code}: {response.status.message}")
    return response
