"""A kv request's segment goes as rows (protocol revision 7) to a runtime that reads them and as
spans to one of an earlier revision, which refuses fields it does not know. Against a stand-in
runtime (a fake, named as such: an HTTP server that answers ``/v1/model`` with a given revision
and records each generate body); the real runtime reading both forms is in the engine tests."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpu_runtime.client import protocol as p
from gpu_runtime.client.http import RuntimeClient

pytestmark = pytest.mark.unit

ROWS = [("preamble:abc", 0, 0, 1, 0, 4), ("f1", 2, 0, 1, 4, 3)]
DONE = b'{"event":"done","finish_reason":"length"}\n'


def _model(revision: int) -> bytes:
    return p.ModelInfo(
        runtime_id="r", model="m", encoding_model="m", dtype="bfloat16", max_model_len=64,
        block_size=16, vocab_size=100, chat_template="", special_tokens={},
        tokenizer_sha256="", server_pid=1, worker_pids=[], workers=[],
        protocol_revision=revision,
    ).model_dump_json().encode()  # fmt: skip


@pytest.fixture
def stand_in(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    revision: int = request.param
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._send(_model(revision), "application/json")

        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self._send(DONE, "application/x-ndjson")

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


REQUEST = p.GenerateRequest(
    tenant="t", token_ids=list(range(10)), mode="kv",
    segment=p.SegmentModel(window=0, version=1, rows=ROWS),
)  # fmt: skip


@pytest.mark.parametrize(("stand_in", "form"), [(6, "spans"), (7, "rows")], indirect=["stand_in"])
def test_the_segment_goes_in_the_form_the_runtime_reads(
    stand_in: tuple[str, list[dict[str, Any]]], form: str
) -> None:
    url, bodies = stand_in
    client = RuntimeClient(url, "token")

    async def stream() -> None:
        async for _ in client.agenerate(REQUEST):
            pass
        await client.aclose()

    try:
        list(client.generate(REQUEST))  # before the client has read the runtime's revision
        client.model()
        list(client.generate(REQUEST))
        asyncio.run(stream())
    finally:
        client.close()
    segments = [body["segment"] for body in bodies]
    assert list(segments[0]) == ["window", "version", "spans"]  # unknown revision: spans
    for segment in segments[1:]:
        other = "spans" if form == "rows" else "rows"
        assert form in segment and other not in segment
        read = p.SegmentModel.model_validate(segment)
        assert read.span_rows() == [tuple(row) for row in ROWS]
