"""Tenant-affinity routing over runtime replicas: rendezvous order (stable, spread, minimal
movement), failover to the next replica, health from calls and lazy probes. The replicas here are
stand-ins (tests/runtime_standin.py) or addresses where nothing listens; two real runtimes are
tests/system/test_replicas.py."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from gpu_runtime.client.http import RuntimeClient, RuntimeUnavailableError
from gpu_runtime.client.launch import free_port
from gpu_runtime.client.replicas import ReplicaSet, rendezvous
from tests.runtime_standin import StandInRuntime

pytestmark = pytest.mark.unit

TENANTS = [str(uuid.UUID(int=i * 7919 + 1)) for i in range(3000)]


def test_a_tenants_order_depends_on_the_replicas_not_on_how_they_are_listed() -> None:
    urls = ["http://a:8100", "http://b:8100", "http://c:8100"]
    for tenant in TENANTS[:200]:
        order = rendezvous(tenant, urls)
        assert sorted(order) == sorted(urls)
        assert rendezvous(tenant, list(reversed(urls))) == order
        assert rendezvous(tenant, urls[1:] + urls[:1]) == order


@pytest.mark.parametrize("n", [2, 3, 4])
def test_tenants_spread_evenly(n: int) -> None:
    urls = [f"http://runtime-{i}:8100" for i in range(n)]
    homes = Counter(rendezvous(t, urls)[0] for t in TENANTS)
    assert set(homes) == set(urls)
    for count in homes.values():  # 3000 tenants: a fair share within 15 %
        assert abs(count - len(TENANTS) / n) < 0.15 * len(TENANTS) / n, homes


def test_losing_a_replica_moves_only_its_tenants_each_to_its_next_choice() -> None:
    urls = ["http://a:8100", "http://b:8100", "http://c:8100"]
    survivors = ["http://a:8100", "http://b:8100"]
    moved = 0
    for tenant in TENANTS:
        before = rendezvous(tenant, urls)
        after = rendezvous(tenant, survivors)[0]
        if before[0] == "http://c:8100":
            assert after == before[1]
            moved += 1
        else:
            assert after == before[0]
    assert 0 < moved < len(TENANTS) / 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def standins() -> Iterator[list[StandInRuntime]]:
    servers = [StandInRuntime().start(), StandInRuntime().start()]
    yield servers
    for server in servers:
        server.stop()


def _set(urls: list[str], clock: Clock, timeout_s: float = 5.0) -> ReplicaSet:
    clients = [RuntimeClient(url, "token", timeout_s=timeout_s) for url in urls]
    return ReplicaSet(clients, probe_interval_s=5.0, clock=clock)


def _wait_probes(replicas: ReplicaSet) -> None:
    deadline = time.monotonic() + 10
    while any(r.probing for r in replicas.replicas) and time.monotonic() < deadline:
        time.sleep(0.01)


def _tenant_homed_on(url: str, urls: list[str]) -> str:
    return next(t for t in TENANTS if rendezvous(t, urls)[0] == url)


def test_a_tenant_whose_replica_is_gone_fails_over_and_returns_when_it_is_back() -> None:
    clock = Clock()
    port = free_port()
    gone = f"http://127.0.0.1:{port}"  # nothing listens here (yet)
    with StandInRuntime() as other:
        urls = [gone, other.url]
        replicas = _set(urls, clock)
        tenant = _tenant_homed_on(gone, urls)
        replicas.order(tenant)  # the first routing decision probes both, in the background
        _wait_probes(replicas)
        assert [view["status"] for view in replicas.views()] == ["down", "ok"]
        replicas.replicas[0].up = True  # as if the probe had not run: the call finds out

        answer = replicas.call(tenant, lambda client: client.stats(None))
        assert answer.workers == [{"entries": 0}]  # served by the other replica
        assert other.hits["/v1/stats"] == 1
        assert [r.url for r in replicas.order(tenant)] == [other.url, gone]
        assert replicas.views()[0]["status"] == "down" and replicas.views()[0]["error"]

        with StandInRuntime(port) as back:
            assert replicas.home(tenant).url == other.url  # no probe before the interval
            clock.now += 5.0
            replicas.order(tenant)  # due: a probe starts in the background
            _wait_probes(replicas)
            assert back.hits["/readyz"] == 1
            assert replicas.home(tenant).url == gone  # back home
            replicas.call(tenant, lambda client: client.stats(None))
            assert back.hits["/v1/stats"] == 1


def test_probes_are_lazy_single_flight_and_one_per_interval(
    standins: list[StandInRuntime],
) -> None:
    clock = Clock()
    replicas = _set([s.url for s in standins], clock)
    for tenant in TENANTS[:500]:
        replicas.order(tenant)
    _wait_probes(replicas)
    assert [s.hits["/readyz"] for s in standins] == [1, 1]
    clock.now += 4.9
    for tenant in TENANTS[:500]:
        replicas.order(tenant)
    _wait_probes(replicas)
    assert [s.hits["/readyz"] for s in standins] == [1, 1]
    clock.now += 0.2
    for tenant in TENANTS[:500]:
        replicas.order(tenant)
    _wait_probes(replicas)
    assert [s.hits["/readyz"] for s in standins] == [2, 2]


def test_a_starting_engine_is_passed_over_and_a_failing_request_is_not_retried(
    standins: list[StandInRuntime],
) -> None:
    clock = Clock()
    urls = [s.url for s in standins]
    replicas = _set(urls, clock)
    tenant = _tenant_homed_on(urls[0], urls)
    replicas.order(tenant)
    _wait_probes(replicas)

    standins[0].mode = "starting"  # 503 not_ready: the request never ran there
    replicas.call(tenant, lambda client: client.stats(None))
    assert standins[1].hits["/v1/stats"] == 1
    assert replicas.home(tenant).url == urls[1]

    standins[0].mode = standins[1].mode = "error"  # 500: the request's own failure
    replicas.answered(replicas.replicas[0])
    with pytest.raises(RuntimeUnavailableError) as failed:
        replicas.call(tenant, lambda client: client.stats(None))
    assert failed.value.code == "internal_error"
    assert standins[1].hits["/v1/stats"] == 1  # not retried elsewhere
    assert all(view["status"] == "ok" for view in replicas.views())


def test_every_replica_down_raises_the_last_failure() -> None:
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    replicas = _set(urls, Clock())
    with pytest.raises(RuntimeUnavailableError):
        replicas.call(TENANTS[0], lambda client: client.stats(None))
    assert [view["status"] for view in replicas.views()] == ["down", "down"]


def test_listing_a_replica_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        _set(["http://a:1", "http://a:1"], Clock())
