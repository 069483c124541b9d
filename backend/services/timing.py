"""Where a chat's time went: laps that add up to its time to first token (``Stopwatch``), and
named splits inside a lap (``Splits``), measured apart so they never change the laps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Stopwatch:
    """Laps in ms since the previous lap (the first from ``started``)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = started if started is not None else time.perf_counter()
        self._last = self.started
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + (now - self._last) * 1000
        self._last = now


class Splits:
    """Durations in ms by name, summed over repeats: what a lap's time was spent on."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - started) * 1000
