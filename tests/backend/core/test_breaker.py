"""The circuit breaker (``backend/core/breaker.py``): a failure of the listed kinds opens it, an
open breaker refuses without running the call, and a probe that succeeds closes it, from the
background prober too. The dependency here is a flag the test flips (the breaker is the thing
under test); the Redis paths that use it run against real sockets in
tests/backend/services/test_redis_outage.py."""

from __future__ import annotations

import threading
import time

import pytest

from backend.core.breaker import BreakerState, CircuitBreaker, DependencyDown
from tests.support import breaker_state as state


class Dependency:
    def __init__(self) -> None:
        self.up = False
        self.probes = 0

    def ping(self) -> None:
        self.probes += 1
        if not self.up:
            raise ConnectionError("down")


def test_a_listed_failure_opens_it_and_then_nothing_is_called() -> None:
    breaker = CircuitBreaker("dep", 60, Dependency().ping)
    with pytest.raises(ConnectionError), breaker.guard((ConnectionError,)):
        raise ConnectionError("refused")
    assert state(breaker) is BreakerState.OPEN and breaker.opened == 1
    ran = []
    refused = pytest.raises(DependencyDown, match="dep is unreachable")
    with refused, breaker.guard((ConnectionError,)):
        ran.append(1)
    assert ran == []


def test_other_errors_mean_the_dependency_answered() -> None:
    breaker = CircuitBreaker("dep", 60, Dependency().ping)
    with pytest.raises(ValueError), breaker.guard((ConnectionError,)):
        raise ValueError("a command's own error")
    assert state(breaker) is BreakerState.CLOSED
    with breaker.guard((ConnectionError,)):
        pass


def test_a_probe_closes_it_only_once_the_dependency_answers() -> None:
    dependency = Dependency()
    breaker = CircuitBreaker("dep", 60, dependency.ping)
    breaker.trip(ConnectionError("refused"))
    assert not breaker.probe_once()
    assert state(breaker) is BreakerState.OPEN
    dependency.up = True
    assert breaker.probe_once()
    assert state(breaker) is BreakerState.CLOSED
    with breaker.guard((ConnectionError,)):
        pass


def test_the_background_prober_closes_it_and_one_outage_opens_it_once() -> None:
    dependency = Dependency()
    breaker = CircuitBreaker("background", 0.02, dependency.ping)
    for _ in range(3):  # concurrent callers failing together: one outage
        breaker.trip(ConnectionError("refused"))
    assert breaker.opened == 1
    deadline = time.monotonic() + 10
    while dependency.probes < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dependency.probes >= 3 and state(breaker) is BreakerState.OPEN  # still down
    dependency.up = True
    while state(breaker) is BreakerState.OPEN and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state(breaker) is BreakerState.CLOSED
    while _probers("background") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _probers("background")  # the prober stopped once it was back
    probes = dependency.probes
    time.sleep(0.1)
    assert dependency.probes == probes


def _probers(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"breaker-{name}"]
