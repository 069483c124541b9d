"""A chat whose stream never ends is given up after the cell's ``chat_timeout_s`` and counted
as failed, saying how far it got and under which request id, while the user's next chat still
runs: the official OpenAI SDK against a real server (uvicorn, Starlette) that stalls one
question's stream mid-way."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bench.serve.chats import Outcome, Workload, run_users, sdks_for
from bench.serve.floor_app import sse_chunk

SEEN_IDS: list[str] = []  # each chat's x-request-id, as the server received it


async def chat(request: Request) -> Response:
    question = (await request.json())["messages"][-1]["content"]
    SEEN_IDS.append(request.headers.get("x-request-id", ""))

    async def events() -> AsyncIterator[str]:
        yield sse_chunk({"role": "assistant", "content": "x"}, None)
        if question == "stall":
            await asyncio.Event().wait()  # the stream stops here and never ends
        yield sse_chunk({}, "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture
def server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    served = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not served.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert served.started
    yield f"http://127.0.0.1:{port}"
    served.should_exit = served.force_exit = True
    thread.join(timeout=10)


def test_a_stalled_stream_fails_after_the_timeout_and_the_next_chat_runs(server: str) -> None:
    workload = Workload(
        server, ("key",), ("stall", "answer"), max_tokens=4, mode="kv", k=0, per_user=2,
        chat_timeout_s=1.0,
    )  # fmt: skip

    async def cell() -> tuple[Outcome, float]:
        sdks = sdks_for(workload)
        began = time.perf_counter()
        try:
            return await run_users(workload, [0], sdks), time.perf_counter() - began
        finally:
            for sdk in sdks:
                await sdk.close()

    outcome, seconds = asyncio.run(cell())
    assert 1.0 <= seconds < 10.0
    assert outcome.failures == 1 and len(outcome.samples) == 1
    ((kind, count),) = outcome.errors.items()
    assert count == 1
    # It names the chat by the id the server had (the platform's logs name a stuck one so).
    assert kind.startswith("ChatStalled: not ended after 1 s (bench-kv-k0-0: first chunk at ")
    assert kind.endswith(", 1 with text)")
    assert SEEN_IDS == ["bench-kv-k0-0", "bench-kv-k0-1"]
