"""``python -m bench.serve.db_reads`` runs (no speed asserted) and leaves nothing behind."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from backend.db.models import Fact
from backend.db.session import session_scope
from bench.serve.db_reads import fact_rows

pytestmark = pytest.mark.db


def test_it_times_both_loads_and_rolls_its_tenant_back(migrated_database: str) -> None:
    with session_scope() as session:
        before = session.scalar(select(func.count()).select_from(Fact))
    results = fact_rows([1, 3], calls=3)
    assert set(results) == {"1", "3"}
    assert all(r["entities_ms"] > 0 and r["briefs_ms"] > 0 for r in results.values())
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Fact)) == before
