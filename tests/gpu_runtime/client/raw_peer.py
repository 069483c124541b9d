"""A raw TCP stand-in for the runtime (a fake, named as such): it reads each request and lets the
test answer on the socket byte for byte, as no real server would (a reset mid-stream, a whole
stream in one write)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def raw_peer(
    answer: Callable[[socket.socket], None], requests: list[bytes] | None = None
) -> Iterator[str]:
    """Serves until the block ends: every connection's request is read (and kept in
    ``requests`` where given), then ``answer(conn)`` writes what it wants and closes or resets
    the connection. Yields the base URL."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            received = conn.recv(65536)
            if requests is not None:
                requests.append(received)
            answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()
