"""Two probes of a serving process's own stalls, shared by the runtime and the API (torch-free):
how late its event loop wakes a task that sleeps, and how long its garbage collections stop it.
Neither shows in a profile of CPU time; both hold up every stream the process carries. Each
process feeds them into its own Prometheus histograms (``gpu_runtime/server/metrics.py``,
``backend/api/metrics.py``); the loop probe also moves the collections' pauses into theirs
(``GcPauses`` says why it cannot itself)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

LOOP_PROBE_S = 0.05
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
GC_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1)
GC_PENDING_MAX = 10_000  # pauses kept between two flushes (the oldest dropped beyond)


class Observes(Protocol):
    def observe(self, amount: float, exemplar: Any = None) -> None: ...


class LabelledObserves(Protocol):
    def labels(self, *values: str) -> Observes: ...


async def watch_event_loop(lag: Observes, each_wake: Callable[[], None] | None = None) -> None:
    """Runs for the process's life: each 50 ms wake-up's delay past its due time, into ``lag``;
    then ``each_wake`` (``GcPauses.flush``)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LOOP_PROBE_S
        await asyncio.sleep(LOOP_PROBE_S)
        lag.observe(max(0.0, loop.time() - due))
        if each_wake is not None:
            each_wake()


def freeze_start_up_heap() -> None:
    """Everything allocated so far out of the collector's full passes (``gc.freeze``, as vLLM's
    own server does once it has started): a serving process's imports and start-up state are
    hundreds of thousands of objects that live as long as it does."""
    gc.collect()
    gc.freeze()


class GcPauses:
    """Every garbage collection's pause, into a histogram labelled by generation.

    The collector's callback never touches a metric: it queues the pause, and ``flush`` (the
    loop probe's, each 50 ms, and a scrape's) observes it. prometheus_client guards its values
    with a lock that is not reentrant (one for the whole process in multiprocess mode, the API's),
    and a collection runs in whatever thread allocates, at any bytecode boundary on Python 3.12,
    including inside another metric's update with that lock held: the callback's own update
    then waited for the lock forever. It froze one of eight API processes, event loop and
    in-flight watcher included, in run 26 (docs/benchmarks.md); ``test_process_probes`` shows
    it on the old code. A deque's append and popleft take no lock."""

    def __init__(self, pauses: LabelledObserves) -> None:
        self.pauses = pauses
        self._started = 0.0
        self._pending: deque[tuple[int, float]] = deque(maxlen=GC_PENDING_MAX)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self._pending.append((info["generation"], time.perf_counter() - self._started))

    def flush(self) -> None:
        """The pauses queued since the last flush, into the histogram (never from a callback of
        the collector)."""
        while True:
            try:
                generation, seconds = self._pending.popleft()
            except IndexError:
                return
            self.pauses.labels(str(generation)).observe(seconds)

    def install(self) -> None:
        """From now on (once per process, however often asked)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
