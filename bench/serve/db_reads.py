"""What loading a chat's retrieved facts costs the API, on the configured Postgres: the full
ORM entities (what the memory search API returns) against the plain rows a chat needs
(``FactRepository.briefs_by_row``), for k facts of one user, called alternately. The tenant it
creates is rolled back.

    python -m bench.serve.db_reads [--ks 5,20,50,100] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
import uuid
from collections.abc import Callable

import numpy as np

from backend.db.session import session_factory
from backend.repositories.memories import FactRepository, UserRepository
from backend.repositories.tenants import TenantRepository
from gpu_runtime.types import TenantId


def _paired(a: Callable[[], object], b: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median ms of ``a`` and of ``b``, called alternately (a load that comes and goes on the
    host hits both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(calls):
        for fn, out in ((a, times[0]), (b, times[1])):
            started = time.perf_counter()
            fn()
            out.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def fact_rows(ks: list[int], calls: int = 300) -> dict[str, dict[str, float]]:
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    results: dict[str, dict[str, float]] = {}
    with session_factory()() as session:
        tenant = TenantId(str(TenantRepository(session).create(f"bench-{uuid.uuid4().hex}").id))
        facts = FactRepository(session, tenant)
        user = UserRepository(session, tenant).get_or_create("bench-user")
        text = "Caroline went to a LGBTQ support group on 7 May 2023 and felt accepted there."
        ids = [facts.add(user, f"{text} ({i})", vector).id for i in range(max(ks))]
        session.flush()

        def entities(rows: list[int]) -> None:
            facts.many_by_row(rows)
            session.expunge_all()  # as a request's session would start: nothing in its map

        for k in ks:
            rows = ids[:k]
            full, brief = _paired(
                functools.partial(entities, rows),
                functools.partial(facts.briefs_by_row, rows),
                calls,
            )
            results[str(k)] = {"entities_ms": full, "briefs_ms": brief}
        session.rollback()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", default="5,20,50,100")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = fact_rows([int(k) for k in args.ks.split(",")])
    print(json.dumps(results, indent=1))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
