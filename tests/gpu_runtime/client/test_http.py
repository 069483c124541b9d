"""The runtime client's generate calls against a peer that dies: before it answers (a pooled
connection to a runtime that was killed) it is unavailable, so the API says 503 "unavailable"
and may try another replica; once it has answered, the stream broke. (The compose test's killed
runtime answered "engine_error" when the API's next chat reused a connection and was reset.)"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator

import pytest

from gpu_runtime.client import protocol as p
from gpu_runtime.client.http import RuntimeClient, RuntimeStreamError, RuntimeUnavailableError
from tests.gpu_runtime.client.raw_peer import raw_peer

pytestmark = pytest.mark.unit

REQUEST = p.GenerateRequest(tenant="t", token_ids=[1, 2, 3], mode="prompt")
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n"
        b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
LINE = b'{"event":"delta","token_ids":[7],"text":"x"}\n'


def _reset(conn: socket.socket) -> None:
    """Close with an RST, as a peer whose process was killed does to a live connection."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


@pytest.fixture(params=["before", "after"])
def dying_peer(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A server that reads the request, then resets the connection before answering, or after
    the headers and one line of the stream."""

    def answer(conn: socket.socket) -> None:
        if request.param == "after":
            conn.sendall(HEAD + f"{len(LINE):x}\r\n".encode() + LINE + b"\r\n")
        _reset(conn)

    with raw_peer(answer) as url:
        yield url, request.param


def test_a_peer_that_dies_before_answering_is_unavailable_after_it_a_broken_stream(
    dying_peer: tuple[str, str],
) -> None:
    url, when = dying_peer
    expected = RuntimeUnavailableError if when == "before" else RuntimeStreamError
    client = RuntimeClient(url, "token", timeout_s=10)

    async def stream() -> list[p.GenerateEvent]:
        try:
            return [event async for event in client.agenerate(REQUEST)]
        finally:
            await client.aclose()

    with pytest.raises(expected) as raised:
        asyncio.run(stream())
    assert raised.value.code == "unreachable"
    if when == "before":
        assert not isinstance(raised.value, RuntimeStreamError)
    with pytest.raises(expected):
        list(RuntimeClient(url, "token", timeout_s=10).generate(REQUEST))


def test_the_callers_request_id_reaches_the_runtime_in_its_header() -> None:
    """The API's id of a chat goes with its generate request, so the runtime tracks (and logs a
    stuck one) under the same name (gpu_runtime/client/inflight.py)."""
    requests: list[bytes] = []

    done = b'{"event":"done","finish_reason":"stop"}\n'

    def answer(conn: socket.socket) -> None:
        body = LINE + done
        conn.sendall(HEAD + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        conn.close()

    async def stream(url: str, request_id: str | None) -> list[p.GenerateEvent]:
        client = RuntimeClient(url, "token", timeout_s=10)
        try:
            return [event async for event in client.agenerate(REQUEST, request_id)]
        finally:
            await client.aclose()

    with raw_peer(answer, requests) as url:
        named = asyncio.run(stream(url, "chat-7f3a"))
        unnamed = asyncio.run(stream(url, None))
    assert [e.event for e in named] == ["delta", "done"] == [e.event for e in unnamed]
    heads = [r.split(b"\r\n\r\n")[0].lower() for r in requests]
    assert b"\r\nx-request-id: chat-7f3a" in heads[0]
    assert b"x-request-id" not in heads[1]
