"""How much of a chat's ``search`` part FAISS itself takes: exact inner-product search (the
index the API keeps per user) over n MiniLM-wide unit vectors, k=50, on this host's CPU.

    python -m bench.serve.faiss_search [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import faiss
import numpy as np


def measure(n: int, k: int = 50, dim: int = 384, calls: int = 1000) -> float:
    """Microseconds per single-query search over ``n`` random unit vectors."""
    rng = np.random.default_rng(0)
    vectors = rng.random((n, dim), dtype=np.float32)  # [n, dim]
    faiss.normalize_L2(vectors)
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    query = vectors[:1].copy()  # [1, dim]
    for _ in range(10):
        index.search(query, min(k, n))
    started = time.perf_counter()
    for _ in range(calls):
        index.search(query, min(k, n))
    return (time.perf_counter() - started) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = {str(n): round(measure(n), 1) for n in (169, 1_000, 10_000, 100_000)}
    print(json.dumps({"search_us_k50": result}))
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"search_us_k50": result, "threads": faiss.omp_get_max_threads()}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
