"""Client.read's group reads: blobs several threads want at the same time go in one
BatchReadBlobs, against a stand-in for the server's answers (no server: the channel is never
used)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from needs import require_module

require_module("grpc")

import grpc  # noqa: E402

from ltowrap.remote import client as remote  # noqa: E402
from ltowrap.remote import protos  # noqa: E402
from ltowrap.remote.client import Client, Endpoint, RemoteError, key_of  # noqa: E402

BLOBS = [bytes([i]) * (1000 + i) for i in range(6)]


class Server:
    """BatchReadBlobs as a server answers it; each request's keys are kept. The first request
    waits for `gate`, so that the threads that come meanwhile are seen to wait for a group."""

    def __init__(self, refuse_above: int | None = None, lose: bytes | None = None) -> None:
        self.requests: list[list[str]] = []
        self.gate = threading.Event()
        self.refuse_above = refuse_above  # blobs a request may hold before it is refused as too large
        self.lose = lose
        self.blobs = {key_of(b)[0]: b for b in BLOBS}

    def __call__(self, request, timeout=None, metadata=None):
        self.requests.append([d.hash for d in request.digests])
        if len(self.requests) == 1:
            self.gate.wait(30)
        if self.refuse_above is not None and len(request.digests) > self.refuse_above:
            raise remote._Refused(grpc.StatusCode.INVALID_ARGUMENT, "larger than the message limit")
        response = protos.BatchReadBlobsResponse()
        for d in request.digests:
            data = self.blobs[d.hash]
            if data == self.lose:
                response.responses.add(digest=d, status={"code": 5, "message": "lost"})
            else:
                response.responses.add(digest=d, data=data)
        return response


def _client(server: Server) -> Client:
    client = Client(Endpoint("grpc://127.0.0.1:1"))
    client._calls = dataclasses.replace(client._calls, batch_read=server)
    return client


def _read_all(client: Client, server: Server) -> dict[bytes, bytes | str]:
    """One thread reads BLOBS[0]; while its request waits, the others ask for theirs; then
    the server answers. What each thread got (its bytes, or its error)."""
    got: dict[bytes, bytes | str] = {}

    def read(blob: bytes) -> None:
        try:
            got[blob] = client.read(key_of(blob))
        except RemoteError as e:
            got[blob] = str(e)

    threads = [threading.Thread(target=read, args=(BLOBS[0],))]
    threads[0].start()
    while not server.requests:
        time.sleep(0.001)
    threads += [threading.Thread(target=read, args=(b,)) for b in BLOBS[1:]]
    for t in threads[1:]:
        t.start()
    while len(client._wanted) < len(BLOBS) - 1:  # all waiting for the next group
        time.sleep(0.001)
    server.gate.set()
    for t in threads:
        t.join(30)
    client.close()
    return got


def test_blobs_wanted_while_a_read_is_under_way_come_in_one_request():
    server = Server()
    got = _read_all(_client(server), server)
    assert got == {b: b for b in BLOBS}
    assert [len(r) for r in server.requests] == [1, len(BLOBS) - 1]


def test_a_group_refused_as_too_large_is_read_one_by_one_and_the_next_groups_are_smaller():
    server = Server(refuse_above=2)
    client = _client(server)
    got = _read_all(client, server)
    assert got == {b: b for b in BLOBS}
    assert [len(r) for r in server.requests] == [1, len(BLOBS) - 1] + [1] * (len(BLOBS) - 1)
    assert client._group_limit < sum(len(b) for b in BLOBS[1:])


@pytest.mark.parametrize("lost", [BLOBS[0], BLOBS[3]])
def test_a_blob_the_answer_lacks_fails_its_read_alone(lost):
    server = Server(lose=lost)
    got = _read_all(_client(server), server)
    assert "not found" in str(got[lost])
    assert all(got[b] == b for b in BLOBS if b != lost)
