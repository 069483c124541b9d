"""The runtime's fair gate: per-tenant queues in front of the engine, least-served first."""

from __future__ import annotations

import asyncio

import pytest

from gpu_runtime.fairness import FairGate, Lease
from gpu_runtime.types import TenantId

pytestmark = pytest.mark.unit

A, B = TenantId("tenant-a"), TenantId("tenant-b")


async def _serve(gate: FairGate, tenant: TenantId, order: list[str], hold: asyncio.Event,
                 tokens: int = 10) -> None:  # fmt: skip
    async with gate.slot(tenant, prompt_tokens=tokens) as lease:
        order.append(tenant.value)
        await hold.wait()
        gate.charge_decode(lease, tokens)


def test_an_idle_gate_admits_at_once_up_to_its_slots() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=3), asyncio.Event()
        order: list[str] = []
        tasks = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(5)]
        await asyncio.sleep(0)
        assert order == ["tenant-a"] * 3  # work-conserving: one tenant gets every slot
        assert gate.running == 3 and gate.waiting == 2
        hold.set()
        await asyncio.gather(*tasks)
        assert gate.running == 0 and gate.waiting == 0
        assert gate.snapshot()["tenant-a"]["admitted"] == 5

    asyncio.run(run())


def test_a_light_tenant_overtakes_a_flooding_tenants_backlog() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=2), asyncio.Event()
        order: list[str] = []
        flood = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(20)]
        await asyncio.sleep(0)
        light = asyncio.create_task(_serve(gate, B, order, hold))
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(*flood, light)
        # B arrived after A's 20 and had nothing in the engine: it goes in at once, over
        # the slots, instead of waiting for one of A's to finish.
        assert order.index("tenant-b") == 2
        assert gate.snapshot()["tenant-b"]["queued"] == 0

    asyncio.run(run())


def test_shares_follow_weights_under_contention() -> None:
    async def run() -> None:
        gate = FairGate(slots=1)
        order: list[str] = []
        gate.set_weight(A, 3.0)
        hold = asyncio.Event()
        tasks = [asyncio.create_task(_serve(gate, t, order, hold)) for t in (A, B) * 40]
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(*tasks)
        first = order[:40]
        # Weight 3 against 1: about three of A's requests for each of B's while both wait.
        assert 2.5 <= first.count("tenant-a") / max(1, first.count("tenant-b")) <= 3.5

    asyncio.run(run())


def test_a_tenant_cannot_bank_idle_time() -> None:
    """B served nothing for a long time; when it starts waiting it is lifted to the least
    counter among waiting tenants, so it alternates with A instead of taking every slot."""

    async def run() -> None:
        gate = FairGate(slots=1)
        order: list[str] = []
        gate.share(A).counter = 1_000_000.0
        hold = asyncio.Event()
        blocker = asyncio.create_task(_serve(gate, A, order, hold))
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(_serve(gate, t, order, hold)) for t in (A, B) * 10]
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(blocker, *waiting)
        assert "tenant-a" in order[1:6]

    asyncio.run(run())


def test_a_waiter_that_goes_away_leaves_no_slot_behind() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=1), asyncio.Event()
        order: list[str] = []
        first = asyncio.create_task(_serve(gate, A, order, hold))
        await asyncio.sleep(0)
        gone = asyncio.create_task(_serve(gate, B, order, hold))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        hold.set()
        await first
        assert gate.running == 0 and gate.waiting == 0
        again = asyncio.Event()
        again.set()
        await _serve(gate, B, order, again)
        assert gate.running == 0

    asyncio.run(run())


def test_at_least_one_slot_and_positive_weights() -> None:
    with pytest.raises(ValueError):
        FairGate(slots=0)
    with pytest.raises(ValueError):
        FairGate(slots=1).set_weight(A, 0)


def test_resizing_the_gate_admits_waiters_at_once_or_drains_to_the_new_size() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=1), asyncio.Event()
        order: list[str] = []
        tasks = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(4)]
        await asyncio.sleep(0)
        assert gate.running == 1 and gate.waiting == 3
        gate.resize(3)
        await asyncio.sleep(0)
        assert gate.running == 3 and gate.waiting == 1 and len(order) == 3
        gate.resize(1)  # smaller: the running finish, the freed slots are not handed on
        hold.set()
        await asyncio.gather(*tasks)
        assert gate.running == 0 and len(order) == 4

    asyncio.run(run())


def test_a_requests_weight_sets_its_tenants_share() -> None:
    async def run() -> None:
        gate = FairGate(slots=1)
        async with gate.slot(B, prompt_tokens=100, weight=4.0) as lease:
            assert lease.share.weight == 4.0
        assert gate.share(B).counter == 25.0  # 100 prompt tokens at weight 4

    asyncio.run(run())


def test_a_second_request_of_the_light_tenant_goes_first_with_the_next_free_slot() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=2), asyncio.Event()
        order: list[str] = []
        flood = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(20)]
        await asyncio.sleep(0)
        light = [asyncio.create_task(_serve(gate, B, order, hold)) for _ in range(2)]
        await asyncio.sleep(0)
        assert order == ["tenant-a", "tenant-a", "tenant-b"]  # B's first: over the slots
        hold.set()
        await asyncio.gather(*flood, *light)
        # B's second waited, and took the first slot freed after the over-slot one drained.
        assert order.index("tenant-b", 3) <= 4
        assert gate.snapshot()["tenant-b"]["queued"] == 1

    asyncio.run(run())


def test_a_tenant_alone_gets_the_whole_batch_and_contention_brings_the_cap() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=2, wide=6, recent_s=60), asyncio.Event()
        order: list[str] = []
        flood = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(10)]
        await asyncio.sleep(0)
        assert gate.running == 6 and not gate.contended  # alone: the engine's whole batch
        light = [asyncio.create_task(_serve(gate, B, order, hold)) for _ in range(3)]
        await asyncio.sleep(0)
        assert gate.contended
        assert order.count("tenant-b") == 1  # its first goes in at once, the rest wait
        assert gate.running == 7  # nothing new for A: over the cap of 2 until it drains
        hold.set()
        await asyncio.gather(*flood, *light)
        assert gate.running == 0 and gate.waiting == 0

    asyncio.run(run())


def test_when_contention_ends_the_waiting_take_the_whole_batch_again() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=1, wide=4, recent_s=0.0), asyncio.Event()
        order: list[str] = []
        b_hold = asyncio.Event()
        light = asyncio.create_task(_serve(gate, B, order, b_hold))
        await asyncio.sleep(0)
        flood = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(6)]
        await asyncio.sleep(0)
        assert order.count("tenant-a") == 1  # A's first (an idle tenant's); the cap is 1
        b_hold.set()
        await light  # B done and not recent (recent_s=0): A alone, up to 4 at once
        await asyncio.sleep(0)
        assert gate.running == 4
        hold.set()
        await asyncio.gather(*flood)

    asyncio.run(run())


async def _resumable(gate: FairGate, tenant: TenantId, order: list[str], hold: asyncio.Event,
                     leases: list[Lease]) -> None:  # fmt: skip
    """What the runtime does with a preemptible request: it gives its slot back when asked and
    comes again, resumed, until it finishes in a slot it keeps."""
    resumed = False
    while True:
        async with gate.slot(tenant, 10, preemptible=True, resumed=resumed) as lease:
            leases.append(lease)
            order.append(f"{tenant.value}{'-resumed' if resumed else ''}")
            while not hold.is_set() and not lease.yield_now:
                await asyncio.sleep(0.001)
            if not lease.yield_now:
                return
        resumed = True


def test_contention_takes_back_the_slots_a_tenant_alone_held_over_the_cap() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=2, wide=6, recent_s=60), asyncio.Event()
        order: list[str] = []
        leases: list[Lease] = []
        flood = [asyncio.create_task(_resumable(gate, A, order, hold, leases)) for _ in range(6)]
        await asyncio.sleep(0.01)
        assert gate.running == 6  # alone: the whole batch
        first_six = list(leases)
        b_hold = asyncio.Event()
        light = asyncio.create_task(_serve(gate, B, order, b_hold))
        await asyncio.sleep(0.01)
        # B went straight in; A's four youngest gave their slots back and wait first in line
        assert [lease.yield_now for lease in first_six] == [False] * 2 + [True] * 4
        assert gate.share(A).running == 2 and gate.share(A).preempted == 4
        assert len(gate.share(A).waiting) == 4 and gate.running == 3
        b_hold.set()
        await light
        hold.set()
        await asyncio.gather(*flood)
        a = gate.snapshot()["tenant-a"]
        assert a["admitted"] == 6 and a["prefill_tokens"] == 60  # resumed: charged nothing twice
        assert order.count("tenant-a-resumed") == 4 and gate.running == 0

    asyncio.run(run())


def test_requests_that_cannot_be_resumed_keep_their_slots() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=1, wide=4, recent_s=60), asyncio.Event()
        order: list[str] = []
        flood = [asyncio.create_task(_serve(gate, A, order, hold)) for _ in range(4)]
        await asyncio.sleep(0)
        light = asyncio.create_task(_serve(gate, B, order, hold))
        await asyncio.sleep(0)
        assert gate.share(A).preempted == 0 and gate.running == 5  # they drain instead
        hold.set()
        await asyncio.gather(*flood, light)

    asyncio.run(run())


def test_a_resumed_request_goes_before_its_tenants_other_waiting_requests() -> None:
    async def run() -> None:
        gate, hold = FairGate(slots=1, wide=2, recent_s=60), asyncio.Event()
        order: list[str] = []
        leases: list[Lease] = []
        flood = [asyncio.create_task(_resumable(gate, A, order, hold, leases)) for _ in range(2)]
        await asyncio.sleep(0.01)
        queued = asyncio.create_task(_serve(gate, A, order, hold))  # waits: 2 of 2 taken
        await asyncio.sleep(0.01)
        b_hold = asyncio.Event()
        light = asyncio.create_task(_serve(gate, B, order, b_hold))
        await asyncio.sleep(0.01)
        assert gate.share(A).preempted == 1
        b_hold.set()
        await light
        hold.set()
        await asyncio.gather(*flood, queued)
        assert order.index("tenant-a-resumed") < len(order) - 1  # before the queued one
        assert order[-1] == "tenant-a"

    asyncio.run(run())
