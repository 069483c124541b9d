"""Prefetch hints, from the runtime straight to each worker half, off the engine core's loop.

A hint ("these facts will be read soon: start moving them to the GPU tier") needs no ordering
with engine steps and no answer. Sent as a ``collective_rpc`` it would be a utility call the
engine core runs between steps, one per request; here each worker binds a ZMQ PULL socket of its
own (the LMCache precedent of a control socket owned by the connector), a thread applies what
arrives, and the runtime's PUSH never waits: a hint that cannot be queued is dropped.

Messages are JSON: ``{"tenant": str, "keys": [FactKey wire dicts]}``. Torch-free, vLLM-free.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

logger = logging.getLogger(__name__)
Apply = Callable[[str, list[dict[str, Any]]], None]  # (tenant, wire keys) -> None


class HintListener:
    """In a worker: receives hints on a loopback port of its own and applies them in order."""

    def __init__(self, apply: Apply, host: str = "127.0.0.1") -> None:
        self._apply = apply
        self._host = host
        self.address = ""
        self._bound = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inferscale-hints", daemon=True)
        self._thread.start()
        self._bound.wait(timeout=10)  # the socket lives in the listener's own thread
        if not self.address:
            raise RuntimeError("the prefetch hint socket did not bind")

    def _run(self) -> None:
        socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PULL)
        socket.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://{self._host}:{socket.bind_to_random_port(f'tcp://{self._host}')}"
        self._bound.set()
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        try:
            while not self._stopped.is_set():
                if not dict(poller.poll(timeout=200)):
                    continue
                try:
                    message = json.loads(socket.recv(zmq.NOBLOCK))
                    self._apply(str(message["tenant"]), list(message["keys"]))
                except zmq.Again:
                    continue
                except Exception:  # a hint: a bad one is logged and dropped, never fatal
                    logger.exception("prefetch hint dropped")
        finally:
            socket.close()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)


class HintSender:
    """In the runtime: one PUSH socket per worker; ``send`` never blocks."""

    def __init__(self, addresses: list[str], queue: int = 4096) -> None:
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._sockets = []
        for address in addresses:
            socket = context.socket(zmq.PUSH)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.SNDHWM, queue)
            socket.connect(address)
            self._sockets.append(socket)

    def send(self, tenant: str, keys: list[dict[str, Any]]) -> int:
        """Queues the hint for every worker; returns how many took it (full queues drop it)."""
        payload = json.dumps({"tenant": tenant, "keys": keys}).encode()
        sent = 0
        for socket in self._sockets:
            try:
                socket.send(payload, zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                continue
        return sent

    def close(self) -> None:
        for socket in self._sockets:
            socket.close()
