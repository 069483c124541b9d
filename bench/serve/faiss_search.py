"""How much of a chat's ``search`` part FAISS itself takes: exact inner-product search (the
index the API keeps per user) over n MiniLM-wide unit vectors, k=50, on this host's CPU and,
where FAISS has a GPU build and sees a GPU, on the GPU (the API's GPU mirror).

    python -m bench.serve.faiss_search [--out FILE]

Two shapes per size: one user's query alone (what a chat does) and 100 queries in one call (the
most that batching many users' searches could gain, were their facts in one index).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import faiss
import numpy as np

SIZES = (169, 1_000, 10_000, 100_000)
BATCH = 100


def _timed(index: Any, queries: np.ndarray, k: int, calls: int) -> float:
    """Microseconds per ``index.search(queries, k)`` call, after a warm-up."""
    for _ in range(10):
        index.search(queries, k)
    started = time.perf_counter()
    for _ in range(calls):
        index.search(queries, k)
    return (time.perf_counter() - started) / calls * 1e6


def measure(n: int, gpu: Any = None, k: int = 50, dim: int = 384) -> dict[str, float]:
    """Microseconds per search over ``n`` random unit vectors: one query, and BATCH queries."""
    rng = np.random.default_rng(0)
    vectors = rng.random((n, dim), dtype=np.float32)  # [n, dim]
    faiss.normalize_L2(vectors)
    index: Any = faiss.IndexFlatIP(dim)
    index.add(vectors)
    if gpu is not None:
        index = faiss.index_cpu_to_gpu(gpu, 0, index)
    k = min(k, n)
    return {
        "one_query_us": round(_timed(index, vectors[:1].copy(), k, 1000), 1),  # [1, dim]
        f"batch{BATCH}_us": round(_timed(index, vectors[:BATCH].copy(), k, 100), 1),  # [B, dim]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "threads": faiss.omp_get_max_threads(),
        "cpu": {str(n): measure(n) for n in SIZES},
    }
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        resources = faiss.StandardGpuResources()
        result["gpu"] = {str(n): measure(n, resources) for n in SIZES}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
