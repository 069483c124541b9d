"""Access-skew model: per-tier hit rates and TTFT of the tiered pool, by Che's approximation.

Workload: ``users`` users with Zipf(``zipf``) request shares; each owns ``facts`` facts; a
request touches ``k`` distinct facts of its user, uniformly or Zipf(``fact_zipf``)-weighted
without replacement (inclusion probability ``pi_j`` of the user's j-th fact, ``sum pi_j = k``).
A fact's access rate per request is ``lam = q_u * pi_j``.

Tiers: an LRU of ``C`` facts holds fact i with probability ``1 - exp(-lam_i T)``, where the
characteristic time ``T`` solves ``sum_i (1 - exp(-lam_i T)) = C`` (Che). The GPU tier is an
LRU of ``C_gpu``; GPU + host together an LRU of ``C_gpu + C_host`` (host holds what GPU
evicts), so host hits = hit(C_gpu + C_host) - hit(C_gpu); disk holds every fact.

A request is not independent facts: a user's facts are warm together. Given ``m`` requests of
the user inside the window ``T`` (Poisson(q_u T)), a fact was touched with probability
``1 - (1 - pi_j)^m``; a request finds all its facts resident with probability
``prod_j (1 - (1 - pi_j)^m)^pi_j`` (a geometric mean over which facts it asks for, exact for
uniform draws up to the facts' dependence inside one request), averaged over ``m``.

1.7e8 facts are never enumerated: users are grouped into classes (the hottest individually,
then geometric rank bins of near-equal popularity) and facts into the F within-user ranks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# TTFT inputs (ms), H200, Llama-3.1-8B shape: kv and prompt at k=20/50 from docs/accuracy.md
# ("Hybrid's cost on the H200", r=0 and prompt columns); host-tier penalty +3 ms at k=50 with
# the prefetch at submission (docs/benchmarks.md, "Offload (issue 5)": +2.8 to +4.0 ms).
KV_TTFT_MS = {20: 19.42, 50: 21.44}
PROMPT_TTFT_MS = {20: 22.39, 50: 37.56}
HOST_PENALTY_MS_AT_50 = 3.0
LOCOMO_FACTS_PER_USER = 170  # parameter; LoCoMo-like, about 170 facts a conversation
EXACT_USERS = 2000  # hottest users kept as their own class
BIN_RATIO = 1.005  # then geometric rank bins: popularity varies < 0.5% inside a bin
POISSON_TERMS = 1200  # m = 0 .. POISSON_TERMS - 1 requests of a user inside the window


@dataclass(frozen=True)
class Workload:
    users: int
    zipf: float = 1.0
    facts: int = LOCOMO_FACTS_PER_USER
    k: int = 20
    fact_zipf: float = 0.0  # 0: a request's facts are uniform among its user's
    seed: int = 0  # for the Monte Carlo inclusion probabilities when fact_zipf > 0


@dataclass(frozen=True)
class Prediction:
    gpu_fact_hit: float
    host_fact_hit: float
    disk_fact_hit: float
    requests_all_gpu: float
    requests_host_penalty: float  # every fact in memory, some on host
    requests_prompt_fallback: float  # some fact only on disk
    ttft_mean_ms: float
    ttft_p50_ms: float
    ttft_p90_ms: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def user_classes(users: int, zipf: float) -> tuple[np.ndarray, np.ndarray]:
    """(request share per user in the class, users in the class); shares sum to 1 over users."""
    weights = np.arange(1, users + 1, dtype=np.float64) ** -zipf
    weights /= weights.sum()
    exact = min(users, EXACT_USERS)
    edges = [exact]
    while edges[-1] < users:
        edges.append(min(users, max(edges[-1] + 1, int(edges[-1] * BIN_RATIO))))
    starts = np.arange(exact).tolist() + edges[:-1]
    sums = np.add.reduceat(weights, starts)
    counts = np.diff(np.asarray([*starts, users]))
    return sums / counts, counts.astype(np.float64)


def inclusion(w: Workload, samples: int = 20000) -> np.ndarray:
    """``pi_j`` [F]: probability that a request includes its user's j-th fact (sum: k)."""
    if w.fact_zipf == 0:
        return np.full(w.facts, w.k / w.facts)
    rng = np.random.default_rng(w.seed)
    logw = -w.fact_zipf * np.log(np.arange(1, w.facts + 1))
    keys = logw + rng.gumbel(size=(samples, w.facts))  # Gumbel top-k: weighted, no replacement
    chosen = np.argpartition(-keys, w.k - 1, axis=1)[:, : w.k]
    return np.bincount(chosen.ravel(), minlength=w.facts) / samples


def che_time(q: np.ndarray, n: np.ndarray, pi: np.ndarray, capacity: float) -> float:
    """Characteristic time (in requests) of an LRU holding ``capacity`` facts; inf if all fit."""
    if capacity >= n.sum() * len(pi):
        return math.inf
    if capacity <= 0:
        return 0.0
    lam = np.outer(q, pi)  # [classes, F]

    def occupancy(t: float) -> float:
        return float((n[:, None] * -np.expm1(-lam * t)).sum())

    lo, hi = 0.0, 1.0
    while occupancy(hi) < capacity:
        lo, hi = hi, hi * 2
    for _ in range(80):  # bisection to ~1e-12 relative: monotone in t
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if occupancy(mid) < capacity else (lo, mid)
    return (lo + hi) / 2


def fact_hit(q: np.ndarray, n: np.ndarray, pi: np.ndarray, t: float) -> float:
    """Share of fact accesses that find the fact resident in an LRU of characteristic time t."""
    if math.isinf(t):
        return 1.0
    lam = np.outer(q, pi)
    return float((n[:, None] * lam * -np.expm1(-lam * t)).sum() / (n[:, None] * lam).sum())


def all_resident(q: np.ndarray, pi: np.ndarray, t: float) -> np.ndarray:
    """[classes]: probability that a request of the class finds all its facts resident."""
    if math.isinf(t):
        return np.ones_like(q)
    m = np.arange(POISSON_TERMS, dtype=np.float64)
    with np.errstate(divide="ignore"):
        per_m = np.exp(
            (pi[None, :] * np.log(-np.expm1(np.log1p(-pi)[None, :] * m[:, None]))).sum(1)
        )
    mu = np.minimum(q * t, POISSON_TERMS / 2)  # beyond: every fact is warm (per_m ~ 1)
    with np.errstate(divide="ignore"):
        logpmf = -mu[:, None] + m[None, :] * np.log(mu)[:, None]
    logpmf -= np.array([math.lgamma(x + 1) for x in m])[None, :]
    return np.asarray((np.exp(logpmf) * per_m[None, :]).sum(1))


def ttft_ms(table: dict[int, float], k: int) -> float:
    """Linear in k through the two measured points (extrapolated outside them)."""
    (k0, v0), (k1, v1) = sorted(table.items())
    return v0 + (v1 - v0) * (k - k0) / (k1 - k0)


def predict(
    w: Workload,
    gpu_facts: float,
    host_facts: float,
    kv_ms: dict[int, float] = KV_TTFT_MS,
    prompt_ms: dict[int, float] = PROMPT_TTFT_MS,
    host_penalty_ms_at_50: float = HOST_PENALTY_MS_AT_50,
) -> Prediction:
    q, n = user_classes(w.users, w.zipf)
    pi = inclusion(w)
    t_gpu = che_time(q, n, pi, gpu_facts)
    t_mem = che_time(q, n, pi, gpu_facts + host_facts)
    gpu, mem = fact_hit(q, n, pi, t_gpu), fact_hit(q, n, pi, t_mem)
    share = q * n  # request share of each class
    all_gpu = float((share * all_resident(q, pi, t_gpu)).sum())
    all_mem = float((share * all_resident(q, pi, t_mem)).sum())
    kv = ttft_ms(kv_ms, w.k)
    host = kv + host_penalty_ms_at_50 * w.k / 50  # PCIe-bound: bytes scale with k
    prompt = ttft_ms(prompt_ms, w.k)
    mix = sorted([(kv, all_gpu), (host, all_mem - all_gpu), (prompt, 1 - all_mem)])

    def quantile(p: float) -> float:
        seen = 0.0
        for value, weight in mix:
            seen += weight
            if seen >= p:
                return value
        return mix[-1][0]

    return Prediction(
        gpu_fact_hit=gpu,
        host_fact_hit=mem - gpu,
        disk_fact_hit=1 - mem,
        requests_all_gpu=all_gpu,
        requests_host_penalty=all_mem - all_gpu,
        requests_prompt_fallback=1 - all_mem,
        ttft_mean_ms=sum(v * p for v, p in mix),
        ttft_p50_ms=quantile(0.5),
        ttft_p90_ms=quantile(0.9),
    )
