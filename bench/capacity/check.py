"""The measured check: the real ``TieredKVPool`` on the CPU under a seeded Zipf stream, against
``simulate.predict`` for the same workload and tier sizes.

Every fact is a tiny KV blob that fills exactly one slab, so tier sizes in slabs are tier sizes
in facts, as the model assumes. The users belong to ``tenants`` tenants (one: the users of one
tenant's app, the model's case; as many as users: every user its own tenant, where the pool's
per-tenant fair shares bind and it departs from a plain LRU). A request goes the
serving path: ``prefetch`` at retrieval (backend/services/chat.py), then ``acquire`` (the fused
loader, gpu_runtime/connector/fused.py), then ``release``; ``path="acquire"`` skips the
prefetch. Where each fact was when its request arrived is read from the pool's own index
(``placements``, which counts no use) before the request touches anything; the pool's hit
counters are reported too. The "disk" behind the pool is a dict: only residency is measured,
not disk speed. The first ``warmup`` share of requests fills the tiers and is not counted.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from bench.capacity.shapes import BF16, ModelShape, fact_bytes
from bench.capacity.simulate import Prediction, Workload, predict
from gpu_runtime.pool.entries import Tier
from gpu_runtime.pool.index import ResidencyIndex
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

TINY = ModelShape("tiny", 1, 1, 8)  # 2 tokens: 64 B of KV + 16 B of positions = one slab
TOKENS = 2
CONFIG = EncodingConfig("capacity-check", 0, 1)


class DictDisk:
    """The durable tier as a dict (``DurableKVStore``'s methods the pool calls)."""

    def __init__(self) -> None:
        self._facts: dict[FactKey, FactKV] = {}

    def put(self, key: FactKey, kv: FactKV) -> int:
        return self.put_many([(key, kv)])[0]

    def put_many(self, items: Iterable[tuple[FactKey, FactKV]]) -> list[int]:
        batch = list(items)
        self._facts.update(batch)
        return [0] * len(batch)

    def get(self, key: FactKey) -> FactKV | None:
        return self._facts.get(key)

    def exists(self, key: FactKey) -> bool:
        return key in self._facts

    def size(self, key: FactKey) -> int | None:
        return None if key not in self._facts else 1

    def delete(self, key: FactKey) -> bool:
        return self._facts.pop(key, None) is not None

    def delete_many(self, tenant: TenantId, keys: Iterable[FactKey]) -> int:
        return sum(self.delete(key) for key in keys)

    def delete_tenant(self, tenant: TenantId) -> None:
        for key in self.keys(tenant):
            del self._facts[key]

    def keys(self, tenant: TenantId) -> list[FactKey]:
        return sorted(k for k in self._facts if k.tenant == tenant)

    def usage(self, tenant: TenantId | None = None) -> dict[str, int]:
        return {"facts": len(self._facts)}


@dataclass(frozen=True)
class CheckResult:
    workload: dict[str, Any]
    tenants: int
    gpu_facts: int
    host_facts: int
    requests: int
    path: str
    measured: dict[str, float]  # shares, from the pool's index at request arrival
    pool_counters: dict[str, int]  # the index's own hit counters, counted requests only
    predicted: dict[str, Any]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_check(
    users: int = 300,
    facts: int = 20,
    k: int = 5,
    zipf: float = 1.0,
    gpu_share: float = 0.075,
    host_share: float = 0.2,
    requests: int = 3000,
    warmup: float = 0.25,
    path: str = "serving",
    seed: int = 0,
    tenants: int = 1,
) -> CheckResult:
    started = time.perf_counter()
    slab = fact_bytes(TINY, BF16, TOKENS)
    total = users * facts
    gpu_facts, host_facts = int(total * gpu_share), int(total * host_share)
    index = ResidencyIndex(gpu_facts * slab, host_facts * slab, slab)
    pool = TieredKVPool(index, DictDisk(), gpu_facts, host_facts)
    g = torch.Generator().manual_seed(seed)
    keys_, values = (torch.randn(1, TOKENS, 1, 8, generator=g).bfloat16() for _ in range(2))
    kv = FactKV.build(keys_, values, torch.arange(TOKENS))  # shared: only residency matters
    owners = [TenantId(f"tenant{u % tenants}") for u in range(users)]
    keys = [
        [FactKey.for_fact(t, f"u{u}-f{j}", 1, CONFIG) for j in range(facts)]
        for u, t in enumerate(owners)
    ]
    for tenant, own in zip(owners, keys, strict=True):
        pool.put_many(tenant, [(key, kv) for key in own])

    rng = random.Random(seed)
    weights = [r**-zipf for r in range(1, users + 1)]
    stream = rng.choices(range(users), weights=weights, k=requests)
    counted = {"gpu": 0, "host": 0, "disk": 0, "all_gpu": 0, "host_penalty": 0, "fallback": 0}
    skip = int(requests * warmup)
    before: dict[str, int] = {}
    for i, user in enumerate(stream):
        if i == skip:
            before = pool.stats()
        tenant, wanted = owners[user], rng.sample(keys[user], k)
        tiers = [p[0] if p else Tier.DISK for p in pool.index.placements(tenant, wanted)]
        if path == "serving":
            pool.prefetch(tenant, wanted)
        if pool.acquire(tenant, wanted) is None:
            raise RuntimeError("the pool could not pin a request's facts")
        pool.release(tenant, wanted)
        if i < skip:
            continue
        for tier in tiers:
            counted[tier.value] += 1
        worst = max(tiers, key=list(Tier).index)
        counted[{Tier.GPU: "all_gpu", Tier.HOST: "host_penalty", Tier.DISK: "fallback"}[worst]] += 1
    after = pool.stats()
    n = requests - skip
    measured = {f"{t}_fact_hit": counted[t] / (n * k) for t in ("gpu", "host", "disk")}
    measured |= {
        "requests_all_gpu": counted["all_gpu"] / n,
        "requests_host_penalty": counted["host_penalty"] / n,
        "requests_prompt_fallback": counted["fallback"] / n,
    }
    names = ("gpu_hits", "host_hits", "disk_hits", "misses", "gpu_evictions", "host_evictions")
    workload = Workload(users, zipf, facts, k)
    prediction: Prediction = predict(workload, gpu_facts, host_facts)
    return CheckResult(
        workload=asdict(workload),
        tenants=tenants,
        gpu_facts=gpu_facts,
        host_facts=host_facts,
        requests=n,
        path=path,
        measured=measured,
        pool_counters={name: after[name] - before.get(name, 0) for name in names},
        predicted=prediction.as_dict(),
        seconds=time.perf_counter() - started,
    )
