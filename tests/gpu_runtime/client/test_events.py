"""The generate stream read a burst at a time: lines cut anywhere by the transport are put back
together, consecutive deltas come back as one event with every token, text and logprob in
order, and a stream still must end with ``done``."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest

from gpu_runtime.client import protocol as p
from gpu_runtime.client.errors import RuntimeStreamError
from gpu_runtime.client.events import EventReader
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.generation import Delta
from gpu_runtime.server.routes import delta_line
from tests.gpu_runtime.client.raw_peer import raw_peer

pytestmark = pytest.mark.unit

DELTAS = [
    Delta((17,), "Hé", (((17, -0.5), (3, -1.0)),)),
    Delta((1, 2), 'llo "wörld"\n', (((1, -0.1),), ((2, -0.2),))),
    Delta((5,), "!", (((5, -0.25), (9, -1.5)),)),
]
DONE = json.dumps({"event": "done", "finish_reason": "stop"}) + "\n"
STREAM = ("".join(delta_line(d) for d in DELTAS) + DONE).encode()


def _tokens(events: list[p.GenerateEvent]) -> tuple[list[int], str, list[object]]:
    deltas = [e for e in events if e.event == "delta"]
    return (
        [t for e in deltas for t in e.token_ids],
        "".join(e.text for e in deltas),
        [[list(pair) for pair in step] for e in deltas for step in (e.logprobs or [])],
    )


EXPECTED = (
    [17, 1, 2, 5],
    "Hé" + 'llo "wörld"\n' + "!",
    [[[17, -0.5], [3, -1.0]], [[1, -0.1]], [[2, -0.2]], [[5, -0.25], [9, -1.5]]],
)


def test_a_burst_comes_back_as_one_delta_and_the_done() -> None:
    reader = EventReader()
    events = reader.feed(STREAM) + reader.finish()
    assert [e.event for e in events] == ["delta", "done"]
    assert _tokens(events) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 7, 40])
def test_lines_cut_anywhere_even_inside_a_character_read_the_same(size: int) -> None:
    reader = EventReader()
    events: list[p.GenerateEvent] = []
    for start in range(0, len(STREAM), size):
        events += reader.feed(STREAM[start : start + size])
    events += reader.finish()
    assert events[-1].event == "done" and events[-1].finish_reason == "stop"
    assert _tokens(events) == EXPECTED
    if size == 1:  # one byte at a time: each delta arrives alone, nothing is held back
        assert [e.event for e in events] == ["delta"] * len(DELTAS) + ["done"]


def test_a_last_line_without_its_newline_counts_and_an_early_end_is_an_error() -> None:
    reader = EventReader()
    events = reader.feed(STREAM.rstrip(b"\n")) + reader.finish()
    assert events[-1].event == "done"
    cut = EventReader()
    assert _tokens(cut.feed(STREAM[: STREAM.index(DONE.encode())]))[0] == EXPECTED[0]
    with pytest.raises(RuntimeStreamError, match="ended early"):
        cut.finish()


def test_an_error_line_raises_even_after_deltas_in_the_same_burst() -> None:
    error = b'{"event":"error","code":"engine_dead","message":"boom"}\n'
    with pytest.raises(RuntimeStreamError, match="boom"):
        EventReader().feed(delta_line(DELTAS[0]).encode() + error)


@pytest.fixture
def bursting_peer() -> Iterator[str]:
    """A runtime stand-in that answers a generate call with the whole stream in one write, as
    a busy runtime's lines pile up in the API's socket buffer."""

    def answer(conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n"
        conn.sendall(head + f"content-length: {len(STREAM)}\r\n\r\n".encode() + STREAM)
        conn.close()

    with raw_peer(answer) as url:
        yield url


def test_the_async_client_hands_a_buffered_burst_over_at_once(bursting_peer: str) -> None:
    client = RuntimeClient(bursting_peer, "token", timeout_s=10)
    request = p.GenerateRequest(tenant="t", token_ids=[1, 2, 3], mode="prompt")

    async def stream() -> list[p.GenerateEvent]:
        try:
            return [event async for event in client.agenerate(request)]
        finally:
            await client.aclose()

    events = asyncio.run(stream())
    assert [e.event for e in events] == ["delta", "done"]
    assert _tokens(events) == EXPECTED
