"""Fail fast on a dependency that is down: a circuit breaker, one per dependency and process.

Redis holds the API's rate limits, the API-key cache's generation and the job queues, and a
chat or a write touches it two to four times. Every one of those paths already degrades when
Redis fails (limits let the request in, keys are read from Postgres, a job stays in the outbox),
but each found out by waiting for its own connect timeout: with Redis's address dropping
packets, a chat waited 4 s and a memory write 10 s, and the API's threads with them (measured
on the CPU box, docs/reliability.md). With the breaker, the first call that fails opens it and
every call after that takes the fallback at once; a background thread probes the dependency
every ``retry_after_s`` and closes the breaker as soon as a probe succeeds, so no request ever
waits for the probe. Torch-free and thread-safe; the probe is a parameter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from functools import lru_cache

logger = logging.getLogger(__name__)


class BreakerState(StrEnum):
    CLOSED = "closed"  # calls go through
    OPEN = "open"  # calls fail fast; the prober retries in the background


class DependencyDown(Exception):
    """Raised instead of calling a dependency whose breaker is open (callers take the same
    fallback as for the dependency's own connection errors)."""


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        retry_after_s: float,
        probe: Callable[[], object],
    ) -> None:
        self.name = name
        self.retry_after_s = retry_after_s
        self._probe = probe
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._prober: threading.Thread | None = None
        self.opened = 0  # times it opened (an outage's count, for logs and tests)

    @property
    def state(self) -> BreakerState:
        return self._state

    @contextmanager
    def guard(self, failures: tuple[type[BaseException], ...]) -> Iterator[None]:
        """Runs the block if the breaker is closed, else raises ``DependencyDown``. An exception
        of ``failures`` raised by the block (the dependency unreachable) opens the breaker."""
        if self._state is BreakerState.OPEN:
            raise DependencyDown(
                f"{self.name} is unreachable (probed every {self.retry_after_s:g} s)"
            )
        try:
            yield
        except failures as exc:
            self.trip(exc)
            raise

    def trip(self, cause: BaseException) -> None:
        """The dependency failed: fail fast from now on, until a probe succeeds."""
        with self._lock:
            if self._state is BreakerState.OPEN:
                return
            self._state = BreakerState.OPEN
            self._opened_at = time.monotonic()
            self.opened += 1
            logger.warning(
                "%s unreachable (%s): its callers take their fallbacks at once; probing every %g s",
                self.name, cause, self.retry_after_s,
            )  # fmt: skip
            if self._prober is None or not self._prober.is_alive():
                self._prober = threading.Thread(
                    target=self._probe_until_back, name=f"breaker-{self.name}", daemon=True
                )
                self._prober.start()

    def probe_once(self) -> bool:
        """One probe (the prober's loop; tests call it directly): closes the breaker if the
        dependency answers."""
        try:
            self._probe()
        except Exception as exc:
            logger.debug("%s still unreachable: %s", self.name, exc)
            return False
        with self._lock:
            if self._state is BreakerState.OPEN:
                logger.warning(
                    "%s reachable again after %.1f s", self.name, time.monotonic() - self._opened_at
                )
            self._state = BreakerState.CLOSED
        return True

    def _probe_until_back(self) -> None:
        while self._state is BreakerState.OPEN:
            time.sleep(self.retry_after_s)
            if self.probe_once():
                return


@lru_cache
def redis_breaker(redis_url: str, retry_after_s: float) -> CircuitBreaker:
    """This process's breaker for the Redis at ``redis_url`` (rate limits, the key cache's
    generation and the broker's sends share one server, so one outage)."""
    import redis

    def ping() -> None:
        client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()

    return CircuitBreaker("Redis", retry_after_s, ping)


def redis_failures() -> tuple[type[BaseException], ...]:
    """What says Redis is unreachable (not a command's own error: Redis answered that)."""
    import redis

    return (redis.ConnectionError, redis.TimeoutError)
