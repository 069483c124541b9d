"""Platform processes for system tests: the API, a Celery worker or beat, as production runs
them (``python -m ...`` in the repository), each logging to a file."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from gpu_runtime.client.launch import free_port
from tests.databases import REPO


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT)  # fmt: skip


def api_args(port: int, log_level: str = "warning") -> list[str]:
    return ["uvicorn", "backend.main:app", "--port", str(port), "--log-level", log_level]


def worker_args(name: str) -> list[str]:
    return ["celery", "-A", "worker.celery_app", "worker", "--pool=solo", "--concurrency=1",
            "--queues=default,gpu", "--loglevel=info", f"--hostname={name}@%h"]  # fmt: skip


def wait_healthy(
    base: str,
    timeout_s: float = 120,
    path: str = "/healthz",
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Until ``base + path`` answers 200; with ``proc``, fails at once if it exits, with the end
    of ``log`` in the message."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None else ""
            raise RuntimeError(
                f"{base} exited with {proc.returncode} before it was healthy\n{tail}"
            )
        try:
            if httpx.get(f"{base}{path}", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{base} did not become healthy in {timeout_s} s")


@contextmanager
def served_in_thread(app: Any) -> Iterator[str]:
    """An ASGI app served by uvicorn in a thread of this process; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, timeout_s=30)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in directory.glob("*.log"))
