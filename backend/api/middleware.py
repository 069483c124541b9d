"""Plain ASGI middleware of the API: when each request arrived (chat timings count from it),
Prometheus request counts, the request body's size limit, and the last word on a bug's 500.
Not Starlette's ``BaseHTTPMiddleware``, which would relay every streamed SSE chunk through an
extra task and memory stream."""

from __future__ import annotations

import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.api.errors import error_body
from backend.api.metrics import HTTP_REQUESTS

logger = logging.getLogger(__name__)

ARRIVED = "inferscale_arrived"  # scope["state"] key: time.perf_counter() at arrival
# scope["state"] key: (started, done), time.perf_counter() around a tenant's admission
ADMITTED = "inferscale_admitted"


async def send_error(send: Send, status: int, code: str, message: str) -> None:
    """A whole JSON error response, straight on the ASGI channel (no app behind it)."""
    body = json.dumps(error_body(code, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})[ARRIVED] = time.perf_counter()

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                path = getattr(scope.get("route"), "path", "unmatched")
                HTTP_REQUESTS.labels(scope["method"], path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


class BodyLimit:
    """Refuses a request body over ``max_bytes`` with 413 before any handler parses it: by its
    Content-Length at once, or, for a chunked body, as soon as the bytes received pass it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)  # the server delivers exactly that many bytes
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        message = f"the request body is larger than {self.max_bytes} bytes"
        await send_error(send, 413, "payload_too_large", message)


class UnhandledErrors:
    """A bug's 500 is answered here, logged, and not re-raised: Starlette's last-resort handler
    re-raises after answering, and uvicorn then closes the connection, so the client's next
    request on that keep-alive connection failed with a reset."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            if started:  # mid-response: nothing to answer with; the stream ends here
                raise
            logger.exception("unhandled error on %s %s", scope["method"], scope["path"])
            await send_error(send, 500, "internal_error", "internal error")
