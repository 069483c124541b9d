"""Che's approximation against a brute-force LRU, and the measured check of the real pool."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from bench.capacity.simulate import (
    Workload,
    all_resident,
    che_time,
    fact_hit,
    inclusion,
    predict,
    user_classes,
)

pytestmark = pytest.mark.unit


def brute_lru(w: Workload, capacity: int, requests: int, seed: int = 0) -> tuple[float, float]:
    """(fact hit rate, share of requests with every fact resident) of one LRU of facts."""
    rng = random.Random(seed)
    weights = [r**-w.zipf for r in range(1, w.users + 1)]
    lru: OrderedDict[tuple[int, int], None] = OrderedDict()
    hits = accesses = whole = 0
    warm = requests // 5
    for i, user in enumerate(rng.choices(range(w.users), weights=weights, k=requests)):
        found = 0
        for f in rng.sample(range(w.facts), w.k):
            key = (user, f)
            if key in lru:
                lru.move_to_end(key)
                found += 1
            else:
                lru[key] = None
                if len(lru) > capacity:
                    lru.popitem(last=False)
        if i >= warm:
            hits, accesses, whole = hits + found, accesses + w.k, whole + (found == w.k)
    return hits / accesses, whole / (requests - warm)


@pytest.mark.parametrize("zipf", [0.8, 1.0])
@pytest.mark.parametrize("capacity", [100, 400])
def test_che_matches_a_brute_force_lru(zipf: float, capacity: int) -> None:
    w = Workload(users=200, zipf=zipf, facts=10, k=3)
    q, n = user_classes(w.users, w.zipf)
    pi = inclusion(w)
    t = che_time(q, n, pi, capacity)
    hit, whole = brute_lru(w, capacity, 40000)
    assert abs(fact_hit(q, n, pi, t) - hit) < 0.03
    assert abs(float((q * n * all_resident(q, pi, t)).sum()) - whole) < 0.03


def test_user_classes_keep_every_user_and_the_total_share() -> None:
    q, n = user_classes(10**6, 1.0)
    assert n.sum() == 10**6 and abs(float((q * n).sum()) - 1) < 1e-9
    assert len(q) < 5000  # grouped, so 1e6 users x 170 facts runs in seconds


def test_zipf_within_a_user_keeps_k_facts_a_request() -> None:
    pi = inclusion(Workload(users=10, facts=170, k=20, fact_zipf=1.0))
    assert abs(pi.sum() - 20) < 1e-9 and pi[0] > pi[-1] and pi.max() <= 1


def test_more_memory_never_hurts_and_everything_fits_means_no_fallback() -> None:
    w = Workload(users=1000, zipf=1.0, facts=50, k=10)
    small, big = predict(w, 1000, 5000), predict(w, 5000, 20000)
    assert big.gpu_fact_hit > small.gpu_fact_hit
    assert big.requests_prompt_fallback < small.requests_prompt_fallback
    everything = predict(w, 50000, 0)
    assert everything.requests_prompt_fallback == 0 and everything.ttft_p50_ms < 20
    parts = (small.requests_all_gpu, small.requests_host_penalty, small.requests_prompt_fallback)
    assert abs(sum(parts) - 1) < 1e-9


def test_the_real_pool_agrees_with_the_prediction() -> None:
    from bench.capacity.check import run_check

    r = run_check(users=120, facts=10, k=3, requests=2000)
    for name in ("gpu_fact_hit", "host_fact_hit", "disk_fact_hit"):
        assert abs(r.measured[name] - r.predicted[name]) < 0.06, name
    assert (
        abs(r.measured["requests_prompt_fallback"] - r.predicted["requests_prompt_fallback"]) < 0.1
    )
    # The prefetch brought every fact of every request to the GPU tier before it was loaded.
    assert r.pool_counters["gpu_hits"] == r.requests * 3
    assert r.pool_counters["host_hits"] == r.pool_counters["disk_hits"] == 0
