"""Two probes of a serving process's own stalls, shared by the runtime and the API (torch-free):
how late its event loop wakes a task that sleeps, and how long its garbage collections stop it.
Neither shows in a profile of CPU time; both hold up every stream the process carries. Each
process feeds them into its own Prometheus histograms (``gpu_runtime/server/metrics.py``,
``backend/api/metrics.py``)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any, Protocol

LOOP_PROBE_S = 0.05
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
GC_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1)


class Observes(Protocol):
    def observe(self, amount: float, exemplar: Any = None) -> None: ...


class LabelledObserves(Protocol):
    def labels(self, *values: str) -> Observes: ...


async def watch_event_loop(lag: Observes) -> None:
    """Runs for the process's life: each 50 ms wake-up's delay past its due time, into ``lag``."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LOOP_PROBE_S
        await asyncio.sleep(LOOP_PROBE_S)
        lag.observe(max(0.0, loop.time() - due))


def freeze_start_up_heap() -> None:
    """Everything allocated so far out of the collector's full passes (``gc.freeze``, as vLLM's
    own server does once it has started): a serving process's imports and start-up state are
    hundreds of thousands of objects that live as long as it does."""
    gc.collect()
    gc.freeze()


class GcPauses:
    """Every garbage collection's pause, into a histogram labelled by generation."""

    def __init__(self, pauses: LabelledObserves) -> None:
        self.pauses = pauses
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.pauses.labels(str(info["generation"])).observe(time.perf_counter() - self._started)

    def install(self) -> None:
        """From now on (once per process, however often asked)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
