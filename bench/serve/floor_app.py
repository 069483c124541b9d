"""A bare ASGI app for ``bench floors``: the same server (uvicorn, its defaults as the API and the
runtime run it) and framework (Starlette, under FastAPI), but no authentication, database,
validation or model. Each endpoint reads the request's body and streams at once what the real
one streams first, so a client's time to that first chunk is the floor of one HTTP hop.

    python -m uvicorn bench.serve.floor_app:app --port PORT
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


def sse_chunk(delta: dict[str, str], finish: str | None) -> str:
    """One chunk as OpenAI's chat completions stream it."""
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "chatcmpl-floor", "object": "chat.completion.chunk", "created": 0,
            "model": "floor", "choices": [choice]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n"


async def chat(request: Request) -> Response:
    """OpenAI's streamed chat: a first content token, the end, ``[DONE]``."""
    await request.body()

    async def events() -> AsyncIterator[str]:
        yield sse_chunk({"role": "assistant", "content": "x"}, None)
        yield sse_chunk({}, "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def generate(request: Request) -> Response:
    """The runtime's generate stream (one JSON event a line): a token, then the end."""
    await request.body()

    async def events() -> AsyncIterator[bytes]:
        yield b'{"event": "delta", "token_ids": [1]}\n'
        yield b'{"event": "done"}\n'

    return StreamingResponse(events(), media_type="application/x-ndjson")


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/generate", generate, methods=["POST"]),
        Route("/healthz", healthz),
    ]
)
