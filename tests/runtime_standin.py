"""A stand-in runtime for tests of the clients' replica policy (routing, health, purges across
replicas): an HTTP server in a thread that answers the internal API's probe, stats and purge
routes the way the runtime does, and can be told to refuse (503), fail (500), reject (400) or
hang. It is a fake of the runtime, named as such: the engine-level behaviour of the same policy
is tests/system/test_replicas.py, against two real runtimes."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from gpu_runtime.client.launch import free_port


class StandInRuntime:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.mode = "ok"  # "ok" | "starting" (503 not_ready) | "error" (500) | "reject" | "hang"
        self.hang_s = 3.0
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> StandInRuntime:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                standin._answer(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                standin._answer(self, json.loads(self.rfile.read(length) or b"{}"))

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> StandInRuntime:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        path = handler.path.split("?")[0]
        self.hits[path] += 1
        if body is not None:
            self.bodies.append({"path": path, **body})
        if self.mode == "hang":
            time.sleep(self.hang_s)
        status, payload = self._route(path)
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.send_header("X-InferScale-Runtime", f"standin-{self.port}")
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/readyz":
            ready = self.mode not in ("starting", "hang")
            return (200 if ready else 503), {"ready": ready}
        if self.mode == "starting":
            return 503, {"error": {"code": "not_ready", "message": "the engine is starting"}}
        if self.mode == "error":
            return 500, {"error": {"code": "internal_error", "message": "boom"}}
        if self.mode == "reject":
            return 400, {"error": {"code": "invalid_request", "message": "refused"}}
        if path == "/v1/purge":
            return 200, {"purged": 0, "epoch": 1}
        if path == "/v1/stats":
            return 200, {"tenant": None, "workers": [{"entries": 0}], "epoch": 0}
        return 404, {"error": {"code": "not_found", "message": path}}
