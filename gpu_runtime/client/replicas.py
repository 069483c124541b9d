"""Tenant-affinity routing over the runtime's replicas: rendezvous (HRW) hashing and health.

Every replica can serve every tenant (they share the durable KV store), but each tenant is served
by one replica at a time, so its facts stay resident in that replica's GPU and host tiers and its
prefix-cache blocks are reused. A tenant's replica is the healthy replica with the highest score
H(tenant, replica URL): every process that lists the same URLs (the API, every worker) picks the
same replica without talking to the others, the list's order does not matter, and when a replica
fails only its own tenants move, each to its next replica in the same order (which loads their KV
from the shared disk store instead of re-encoding); when it is back they return to it.

Health is each process's own view. A replica is down from the moment a call could not reach it or
was refused by an engine that is starting or dead, until a probe of its ``/readyz`` answers 200;
any call it answers puts it back up. Probes are lazy and never on a request's path: a routing
decision starts one in the background for each replica not heard from for ``probe_interval_s``,
at most one in flight per replica, so each process sends each replica at most one probe per
interval however busy it is (and none when it is idle).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from gpu_runtime.client.http import RuntimeClient, RuntimeClientError, RuntimeUnavailableError

T = TypeVar("T")

# Error codes of a replica that could not take a request at all (the request never ran there),
# so the next replica may: unreachable, engine starting, engine dead.
FAILOVER_CODES = frozenset({"unreachable", "not_ready", "engine_dead"})


def score(tenant: str, replica: str) -> int:
    digest = hashlib.blake2b(f"{tenant}\n{replica}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous(tenant: str, replicas: Sequence[str]) -> list[str]:
    """``replicas`` in the tenant's order of preference (highest score first)."""
    return sorted(replicas, key=lambda name: (-score(tenant, name), name))


def is_replica_failure(exc: RuntimeClientError) -> bool:
    """The replica could not take the request (not the request's fault): another one may."""
    return isinstance(exc, RuntimeUnavailableError) and exc.code in FAILOVER_CODES


@dataclass
class Replica:
    url: str
    client: RuntimeClient
    up: bool = True
    error: str = ""
    since: float = field(default_factory=time.time)  # wall clock of the last change
    heard: float = float("-inf")  # monotonic: the last probe or call that settled its health
    probing: bool = False

    def view(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "status": "ok" if self.up else "down",
            "error": self.error,
            "since": datetime.fromtimestamp(self.since, UTC).isoformat(),
            "runtime_id": self.client.runtime_id,
        }


class ReplicaSet:
    def __init__(
        self,
        clients: Sequence[RuntimeClient],
        *,
        probe_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        urls = [c.base_url for c in clients]
        if not urls:
            raise ValueError("at least one runtime replica is needed")
        if len(set(urls)) != len(urls):
            raise ValueError(f"a runtime replica is listed twice: {urls}")
        self.replicas = [Replica(c.base_url, c) for c in clients]
        self._by_url = {r.url: r for r in self.replicas}
        self._interval = probe_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._probes = ThreadPoolExecutor(len(urls), thread_name_prefix="inferscale-probe")

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    # ---- routing -------------------------------------------------------------------------
    def order(self, tenant: str) -> list[Replica]:
        """The tenant's replicas in rendezvous order, the healthy ones first (the others stay
        as a last resort: one may be back before its probe says so)."""
        self._probe_due()
        ranked = [self._by_url[url] for url in rendezvous(tenant, self.urls)]
        return [r for r in ranked if r.up] + [r for r in ranked if not r.up]

    def home(self, tenant: str) -> Replica:
        """The replica that serves the tenant now."""
        return self.order(tenant)[0]

    def any_order(self) -> list[Replica]:
        """For calls that name no tenant (the model, the tokenizer): in the configured order,
        the healthy replicas first."""
        self._probe_due()
        return [r for r in self.replicas if r.up] + [r for r in self.replicas if not r.up]

    def call(self, tenant: str | None, fn: Callable[[RuntimeClient], T]) -> T:
        """``fn`` on the tenant's replica (``None``: any); when a replica cannot take it, it is
        marked down and the next one in the tenant's order is tried."""
        failure: RuntimeClientError | None = None
        for replica in self.order(tenant) if tenant is not None else self.any_order():
            try:
                result = fn(replica.client)
            except RuntimeClientError as exc:
                if not is_replica_failure(exc):
                    raise
                self.failed(replica, exc)
                failure = exc
                continue
            self.answered(replica)
            return result
        assert failure is not None
        raise failure

    def broadcast(
        self, fn: Callable[[RuntimeClient], T], *, only_up: bool = False
    ) -> list[tuple[Replica, T | Exception]]:
        """``fn`` on every replica at once (``only_up``: those up now), down ones included;
        each one's answer or error, in the configured order."""
        targets = [r for r in self.replicas if r.up or not only_up]
        if len(targets) <= 1:
            calls = [(r, _attempt(fn, r.client)) for r in targets]
        else:
            with ThreadPoolExecutor(len(targets)) as pool:
                futures = [(r, pool.submit(_attempt, fn, r.client)) for r in targets]
                calls = [(r, f.result()) for r, f in futures]
        for replica, outcome in calls:
            if not isinstance(outcome, Exception):
                self.answered(replica)
            elif isinstance(outcome, RuntimeClientError) and is_replica_failure(outcome):
                self.failed(replica, outcome)
        return calls

    # ---- health --------------------------------------------------------------------------
    def answered(self, replica: Replica) -> None:
        self._settle(replica, True, "")

    def failed(self, replica: Replica, exc: RuntimeClientError) -> None:
        self._settle(replica, False, exc.message)

    def probe_all(self) -> None:
        """Probes every replica now and waits (operators' views, the API's readiness)."""
        for future in [self._probes.submit(self._probe, r, False) for r in self.replicas]:
            future.result()

    def views(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.view() for r in self.replicas]

    def close(self) -> None:
        self._probes.shutdown(wait=False, cancel_futures=True)
        for replica in self.replicas:
            replica.client.close()

    async def aclose(self) -> None:
        for replica in self.replicas:
            await replica.client.aclose()

    def _probe_due(self) -> None:
        now = self._clock()
        with self._lock:
            due = [r for r in self.replicas if not r.probing and now - r.heard >= self._interval]
            for replica in due:
                replica.probing = True
        for replica in due:
            self._probes.submit(self._probe, replica, True)

    def _probe(self, replica: Replica, claimed: bool) -> None:
        try:
            ready = replica.client.ready()
        except Exception:  # a probe reports, it never raises
            ready = False
        with self._lock:
            if claimed:
                replica.probing = False
        self._settle(replica, ready, "" if ready else "/readyz did not answer 200")

    def _settle(self, replica: Replica, up: bool, error: str) -> None:
        with self._lock:
            replica.heard = self._clock()
            if up != replica.up:
                replica.since = time.time()
            replica.up, replica.error = up, error


def _attempt(fn: Callable[[RuntimeClient], T], client: RuntimeClient) -> T | Exception:
    try:
        return fn(client)
    except Exception as exc:
        return exc


__all__ = ["FAILOVER_CODES", "Replica", "ReplicaSet", "is_replica_failure", "rendezvous", "score"]
