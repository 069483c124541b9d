"""Each process's connection pool is its share of the connections the API's processes may hold
together, so that several of them never reach Postgres's own limit (where it refuses everyone,
workers and migrations too, with "too many clients")."""

from __future__ import annotations

import pytest

from backend.core.config import Settings
from backend.db.session import get_engine, pool_limits

pytestmark = pytest.mark.unit


def _settings(workers: int, budget: int, size: int = 20, overflow: int = 30) -> Settings:
    return Settings.model_validate({
        "INFERSCALE_API_WORKERS": workers, "DATABASE_MAX_CONNECTIONS": budget,
        "DATABASE_POOL_SIZE": size, "DATABASE_POOL_OVERFLOW": overflow,
    })  # fmt: skip


@pytest.mark.parametrize(
    ("workers", "budget", "expected"),
    [
        (1, 80, (20, 30)),  # one process: as configured
        (2, 80, (20, 20)),  # the overflow cut first
        (4, 80, (20, 0)),
        (8, 80, (10, 0)),  # the pool itself cut
        (64, 80, (1, 0)),  # never below one connection
        (4, 400, (20, 30)),  # a server that allows more: as configured
    ],
)
def test_the_processes_pools_together_stay_within_the_budget(
    workers: int, budget: int, expected: tuple[int, int]
) -> None:
    size, overflow = pool_limits(_settings(workers, budget))
    assert (size, overflow) == expected
    assert workers * (size + overflow) <= max(budget, workers)


def test_the_engine_is_built_with_the_processes_share() -> None:
    from backend.core.config import get_settings

    size, overflow = pool_limits(get_settings())
    pool = get_engine().pool
    assert pool.size() == size  # type: ignore[attr-defined]
    assert pool._max_overflow == overflow  # type: ignore[attr-defined]
