"""Start a runtime service process (``python -m gpu_runtime serve``) and wait until it is ready.

For command-line tools and tests that need a runtime of their own (the evaluation harness, the
test suite). The process leads its own process group, so ``stop`` ends it together with the
engine core and workers it started, whatever state it is in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RuntimeProcess:
    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        port: int | None = None,
        log: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {}), "INFERSCALE_RUNTIME_PORT": str(self.port)}
        self.log = log
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 300.0) -> RuntimeProcess:
        self.spawn()
        self.wait_ready(timeout_s)
        return self

    def spawn(self) -> None:
        """Starts the process and returns at once (``wait_ready`` waits for its engine)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_runtime", "serve", "--host", "127.0.0.1"],
            env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"the runtime exited with {self.proc.returncode} (log: {self.log})"
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(1.0)
        raise TimeoutError(f"the runtime was not ready within {timeout_s:.0f} s (log: {self.log})")

    def kill(self, *, group: bool = True) -> None:
        """SIGKILL, as a crash or an OOM kill does: to the whole group, or (``group=False``) to
        the server process alone, whose engine core must then exit by itself."""
        if group:
            self._signal(signal.SIGKILL)
        elif self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self._reap(30)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)
        if not self._reap(30):
            self.kill()

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def _reap(self, timeout_s: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        # The group may outlive its leader for a moment (the engine core shutting down).
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.2)
        return False

    def __enter__(self) -> RuntimeProcess:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
