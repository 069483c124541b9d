"""The API tier's memory: per-user retrieval indexes in a bounded LRU (``FactIndex(max_bytes)``).

* ``predict``: memory per process against users, and the index hit rate under Zipf access for a
  cache size (Che's approximation, as ``simulate.py`` uses for the KV pool, with one item per
  user: a request touches its user's whole index).
* ``check``: the real ``FactIndex`` replaying seeded Zipf traffic, its measured hit rate beside
  the prediction.
* ``miss_cost``: what a miss costs in a real API process's terms: fetching a user's embeddings
  from Postgres (``FactRepository.live_vectors``, the services' rebuild path) and rebuilding the
  index, against a warm search, for a user of ``facts`` facts (a scratch tenant, deleted after).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

from backend.retrieval import index as index_module
from backend.retrieval.index import FactIndex, IndexKey
from bench.capacity.simulate import che_time, fact_hit, user_classes
from gpu_runtime.types import TenantId

DIM = 384  # MiniLM


def per_user_bytes(facts: int, dim: int = DIM) -> int:
    return facts * (dim * 4 + index_module._PER_FACT_OVERHEAD) + index_module._PER_INDEX_OVERHEAD


def predict(users: int, zipf: float, facts: int, cache_bytes: int) -> dict[str, Any]:
    size = per_user_bytes(facts)
    capacity = cache_bytes // size
    q, n = user_classes(users, zipf)
    t = che_time(q, n, np.ones(1), float(capacity))
    return {
        "users": users, "zipf": zipf, "facts": facts, "cache_mib": cache_bytes / 2**20,
        "all_users_gib": users * size / 2**30, "users_held": int(min(capacity, users)),
        "hit_rate": round(fact_hit(q, n, np.ones(1), t), 4),
    }  # fmt: skip


def check(users: int, zipf: float, facts: int, cache_bytes: int, requests: int,
          seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """The real index under seeded Zipf traffic: a miss is a rebuild, as the services do."""
    rng = np.random.default_rng(seed)
    shares = np.arange(1, users + 1, dtype=np.float64) ** -zipf
    shares /= shares.sum()
    index = FactIndex(DIM, use_gpu=False, max_bytes=cache_bytes)
    tenant = TenantId("bench")
    vectors = rng.standard_normal((facts, DIM)).astype(np.float32)  # [facts, DIM]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = list(range(facts))
    for user in rng.choice(users, size=requests, p=shares):
        key = IndexKey(tenant, f"u{user}")
        if index.revision(key) is None:
            index.rebuild(key, ids, vectors, 1)
        index.search(key, vectors[0], 5)
    stats = index.stats()
    return {
        "measured_hit_rate": round(stats["hits"] / requests, 4),
        "predicted_hit_rate": predict(users, zipf, facts, cache_bytes)["hit_rate"],
        "held_mib": round(stats["bytes"] / 2**20, 2), "evictions": stats["evictions"],
        "users": users, "zipf": zipf, "facts": facts, "requests": requests,
        "cache_mib": cache_bytes / 2**20,
    }  # fmt: skip


def miss_cost(facts: int, searches: int = 30) -> dict[str, Any]:
    """Median ms of a warm search and of a miss (fetch from Postgres + rebuild), same user."""
    from backend.db.models import EndUser, Fact, Tenant
    from backend.db.session import session_scope
    from backend.repositories.memories import FactRepository, vector_bytes
    from backend.repositories.tenants import TenantRepository

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((facts, DIM)).astype(np.float32)  # [facts, DIM]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with session_scope() as session:
        tenant = Tenant(name=f"bench-index-{uuid.uuid4().hex[:8]}")
        session.add(tenant)
        session.flush()
        user = EndUser(tenant_id=tenant.id, external_id="u", memory_revision=1)
        session.add(user)
        session.flush()
        session.add_all(Fact(tenant_id=tenant.id, user_id=user.id, text=f"fact {i}",
                             embedding=vector_bytes(vectors[i])) for i in range(facts))  # fmt: skip
        tenant_id, user_id = tenant.id, user.id
    index = FactIndex(DIM, use_gpu=False)
    key = IndexKey(TenantId(str(tenant_id)), "u")
    warm: list[float] = []
    cold: list[float] = []
    try:
        for i in range(searches + 3):
            for timings, dropped in ((cold, True), (warm, False)):
                if dropped:
                    index.drop_user(key)
                started = time.perf_counter()
                with session_scope() as session:
                    if index.revision(key) is None:
                        row = session.get(EndUser, user_id)
                        assert row is not None
                        ids, found = FactRepository(session, key.tenant).live_vectors(row)
                        index.rebuild(key, ids, found, 1)
                    index.search(key, vectors[i % facts], 5)
                if i >= 3:  # the first few warm the connection pool and caches
                    timings.append((time.perf_counter() - started) * 1000)
    finally:
        with session_scope() as session:
            doomed = TenantRepository(session).get(tenant_id)
            if doomed is not None:
                TenantRepository(session).delete(doomed)
    return {"facts": facts, "warm_search_ms": round(float(np.median(warm)), 3),
            "miss_ms": round(float(np.median(cold)), 3), "searches": searches}  # fmt: skip
