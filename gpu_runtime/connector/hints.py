"""Prefetch hints, from the runtime straight to each worker half, off the engine core's loop.

A hint ("these facts will be read soon: start moving them to the GPU tier") needs no ordering
with engine steps and no answer. Sent as a ``collective_rpc`` it would be a utility call the
engine core runs between steps, one per request; here each worker binds a ZMQ PULL socket of its
own (the LMCache precedent of a control socket owned by the connector), a thread applies what
arrives, and the runtime's PUSH never waits: a hint that cannot be queued is dropped.

Messages are JSON: ``{"tenant": str, "model": str, "rows": [[fact_id, fact_version, window,
encoding_version], ...]}``, one per model among a hint's keys: the tenant and model stated once,
as in a request's transfer parameters (``wire.py``). The listener builds the keys through the
process's ``FactKeys`` (``types.process_keys``), which the engine core's decoding shares. On
the engine core's host the listener's thread shares the GIL with the scheduler half and the
worker, and a hint arrives with its request: building 50 keys from dicts there (~0.2 ms)
competed with that request's own claim. Torch-free, vLLM-free.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from gpu_runtime.types import FactKey, TenantId, process_keys

logger = logging.getLogger(__name__)
Apply = Callable[[TenantId, list[FactKey]], None]  # (tenant, its keys) -> None


def hint_messages(tenant: TenantId, keys: Sequence[FactKey]) -> list[bytes]:
    """The hint for ``keys`` (all of ``tenant``), one message per model they are for."""
    by_model: dict[str, list[list[Any]]] = {}
    for key in keys:
        if key.tenant != tenant:
            raise ValueError(f"a key of {key.tenant.value!r} in a hint for {tenant.value!r}")
        row = [key.fact_id, key.fact_version, key.window, key.encoding_version]
        by_model.setdefault(key.model, []).append(row)
    return [
        json.dumps({"tenant": tenant.value, "model": model, "rows": rows},
                   separators=(",", ":")).encode()
        for model, rows in by_model.items()
    ]  # fmt: skip


class HintDecoder:
    """Messages back into keys: the process's own (``types.process_keys``), the same objects
    as the engine core's decoding of the request builds, so the load finds its hint's pinning
    by identity."""

    def __call__(self, message: bytes) -> tuple[TenantId, list[FactKey]]:
        body = json.loads(message)
        tenant, model = TenantId(str(body["tenant"])), str(body["model"])
        get = process_keys(model).get
        # As ``hint_messages`` wrote them (JSON keeps str and int); anything else is refused.
        return tenant, [
            get(tenant, str(f), int(fv), int(w), int(v)) for f, fv, w, v in body["rows"]
        ]


class HintListener:
    """In a worker: receives hints on a loopback port of its own and applies them in order."""

    def __init__(self, apply: Apply, host: str = "127.0.0.1") -> None:
        self._apply = apply
        self._decode = HintDecoder()
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
                    self._apply(*self._decode(socket.recv(zmq.NOBLOCK)))
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

    def send(self, tenant: TenantId, keys: Sequence[FactKey]) -> int:
        """Queues the hint for every worker; returns how many workers took all of it (a full
        queue drops what it cannot take)."""
        messages = hint_messages(tenant, keys)
        sent = 0
        for socket in self._sockets:
            try:
                for message in messages:
                    socket.send(message, zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                continue
        return sent

    def close(self) -> None:
        for socket in self._sockets:
            socket.close()
