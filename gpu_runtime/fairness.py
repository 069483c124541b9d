"""Fair admission to the engine: per-tenant queues in front of vLLM, served by virtual token
counters (Sheng et al., "Fairness in Serving Large Language Models", OSDI '24).

vLLM serves what it is given first come, first served; a tenant that sends forty requests at
once would fill the engine's batch and everyone else would queue behind its backlog, and each
step of that batch would be slow for all (on a CPU every sequence in a batch costs compute). So
while tenants contend (two or more with requests in flight, waiting, or seen within the last
``recent_s``), the runtime hands the engine at most ``slots`` requests at a time; a tenant alone
gets up to ``wide`` (the engine's own batch: work-conserving, one tenant's throughput is never
capped for nobody's sake). The request of a tenant with nothing in the engine and nothing
waiting goes straight in, even over the cap (max-min: one tenant's backlog never delays another
tenant's only request by a whole request's time). When no slot is free,
requests wait in their tenant's queue, and each freed slot goes to the waiting tenant that has
been served least: its counter, the tokens it was served (prefill and decode, weighted) divided
by its weight. A tenant that starts waiting is lifted to the smallest counter among tenants
already waiting, so idle time is never banked into a burst later.

Contention that begins while a tenant alone holds more than ``slots`` (admitted up to ``wide``)
would otherwise leave the newcomer in that tenant's whole batch until it drains (on a CPU, many
steps of a batch of forty). So the tenant's youngest preemptible requests over the cap are asked
to give their slots back (``Lease.yield_now``): the runtime stops each one in the engine and
resumes it from the tokens it has generated (vLLM's own recompute preemption, done at the gate),
first in its tenant's queue and charged nothing twice.

Pure bookkeeping on the event loop: no torch, no vLLM, unit-testable.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from gpu_runtime.types import TenantId

PREFILL_WEIGHT = 1.0  # a prompt token's cost to the counter
DECODE_WEIGHT = 2.0  # a generated token's: a step each, where prompt tokens share one


@dataclass(eq=False)
class Lease:
    """One admitted request's hold on an engine slot."""

    share: TenantShare
    preemptible: bool  # the runtime can stop it and resume it from its tokens
    admitted_at: float
    yield_now: bool = False  # asked to give the slot back (contention began; over the cap)


@dataclass
class TenantShare:
    """One tenant's side of the gate (what ``/metrics`` and the stats show)."""

    weight: float = 1.0
    counter: float = 0.0  # weighted tokens served / weight
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    running: int = 0
    admitted: int = 0
    queued: int = 0  # admissions that had to wait
    wait_s: float = 0.0  # their total wait
    prefill_tokens: int = 0
    decode_tokens: int = 0
    last_active: float = 0.0  # time.monotonic() of its last admission or finish
    leases: list[Lease] = field(default_factory=list)  # its requests in the engine
    preempted: int = 0  # requests that gave their slot back (and came again, resumed)


class FairGate:
    def __init__(self, slots: int, wide: int | None = None, recent_s: float = 1.0) -> None:
        if slots < 1:
            raise ValueError("the engine needs at least one slot")
        self.slots = slots
        self.wide = max(wide or slots, slots)
        self.recent_s = recent_s
        self.running = 0
        self.tenants: dict[TenantId, TenantShare] = {}

    @property
    def contended(self) -> bool:
        """Two or more tenants with work now, or within ``recent_s`` (a tenant that sends one
        request at a time is between requests only for a moment)."""
        now = time.monotonic()
        active = 0
        for s in self.tenants.values():
            if s.running or s.waiting or now - s.last_active < self.recent_s:
                active += 1
                if active > 1:
                    return True
        return False

    @property
    def cap(self) -> int:
        return self.slots if self.contended else self.wide

    def share(self, tenant: TenantId) -> TenantShare:
        share = self.tenants.get(tenant)
        if share is None:
            share = self.tenants[tenant] = TenantShare()
        return share

    def set_weight(self, tenant: TenantId, weight: float) -> None:
        if weight <= 0:
            raise ValueError("a tenant's weight must be positive")
        self.share(tenant).weight = weight

    @property
    def waiting(self) -> int:
        return sum(len(s.waiting) for s in self.tenants.values())

    def resize(self, slots: int) -> None:
        """An operator's change of the engine's share of requests, live: waiting requests
        take the new slots at once (least-served first)."""
        if slots < 1:
            raise ValueError("the engine needs at least one slot")
        self.slots = slots
        self.wide = max(self.wide, slots)
        self._fill()
        self._preempt()

    @asynccontextmanager
    async def slot(
        self,
        tenant: TenantId,
        prompt_tokens: int,
        weight: float | None = None,
        *,
        preemptible: bool = False,
        resumed: bool = False,
    ) -> AsyncIterator[Lease]:
        """Holds one engine slot for ``tenant`` while the body runs; the prompt is charged on
        admission, generated tokens through ``charge_decode``. ``weight``: the tenant's share
        as its request says (the API sends the tenant's own), else as last set.
        ``preemptible``: the caller honours ``Lease.yield_now``; ``resumed``: a request that
        gave its slot back comes again (first in its tenant's queue, its prompt not charged)."""
        if weight is not None:
            self.set_weight(tenant, weight)
        share = self.share(tenant)
        if resumed:
            share.preempted += 1
        idle_tenant = share.running == 0 and not share.waiting
        if (self.running < self.cap and not self.waiting) or idle_tenant:
            self.running += 1
        else:
            await self._wait(tenant, share, first=resumed)
        lease = Lease(share, preemptible, time.monotonic())
        share.running += 1
        share.leases.append(lease)
        share.last_active = lease.admitted_at
        if not resumed:
            share.admitted += 1
            self._charge(share, prompt_tokens * PREFILL_WEIGHT)
            share.prefill_tokens += prompt_tokens
        self._preempt()
        try:
            yield lease
        finally:
            share.running -= 1
            share.leases.remove(lease)
            share.last_active = time.monotonic()
            self._release()

    def charge_decode(self, lease: Lease, tokens: int) -> None:
        lease.share.decode_tokens += tokens
        self._charge(lease.share, tokens * DECODE_WEIGHT)

    def _preempt(self) -> None:
        """While tenants contend, none holds more than ``slots``: a tenant over it (admitted
        when it was alone) has its youngest preemptible requests over it give their slots
        back."""
        if not self.contended:
            return
        for share in self.tenants.values():
            staying = [lease for lease in share.leases if not lease.yield_now]
            over = len(staying) - self.slots
            movable = sorted(
                (lease for lease in staying if lease.preemptible),
                key=lambda lease: lease.admitted_at,
                reverse=True,
            )
            for lease in movable[: max(over, 0)]:
                lease.yield_now = True

    async def _wait(self, tenant: TenantId, share: TenantShare, first: bool = False) -> None:
        if not share.waiting:  # starts waiting: lifted to the least-served waiting tenant
            floor = [s.counter for s in self.tenants.values() if s.waiting]
            if floor:
                share.counter = max(share.counter, min(floor))
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if first:
            share.waiting.appendleft(ticket)
        else:
            share.waiting.append(ticket)
        queued = time.perf_counter()
        try:
            await ticket  # the slot was handed over with the ticket (``running`` counts it)
        except asyncio.CancelledError:
            if ticket in share.waiting:
                share.waiting.remove(ticket)
            elif ticket.done() and not ticket.cancelled():
                self._release()  # handed a slot as the caller went away: pass it on
            raise
        share.queued += 1
        share.wait_s += time.perf_counter() - queued

    def _release(self) -> None:
        """A slot frees: it goes to the least-served waiting tenant, and so do any more the cap
        now allows (contention over: up to ``wide``); over the cap, it goes away."""
        self.running -= 1
        self._fill()

    def _fill(self) -> None:
        while self.waiting and self.running < self.cap:
            self.running += 1
            least = min((s for s in self.tenants.values() if s.waiting), key=lambda s: s.counter)
            least.waiting.popleft().set_result(None)

    @staticmethod
    def _charge(share: TenantShare, cost: float) -> None:
        share.counter += cost / share.weight

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {
            tenant.value: {
                "weight": s.weight,
                "counter": round(s.counter, 1),
                "running": s.running,
                "waiting": len(s.waiting),
                "admitted": s.admitted,
                "queued": s.queued,
                "queue_wait_s": round(s.wait_s, 3),
                "preempted": s.preempted,
                "prefill_tokens": s.prefill_tokens,
                "decode_tokens": s.decode_tokens,
            }
            for tenant, s in self.tenants.items()
        }
