"""The encoding job's claim on real Postgres: bounded both ways, so neither a claimant nor a
holder that stopped answering can keep a batch's rows (and a tenant delete behind them)
forever."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
from psycopg import errors
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from backend.db.models import Fact
from backend.db.session import session_scope
from backend.repositories.encodings import EncodingRepository
from backend.repositories.memories import FactRepository, UserRepository
from backend.repositories.tenants import TenantRepository
from gpu_runtime.types import EncodingConfig, TenantId

# Without the bounds the first test would wait on its own holder: fail in a minute, not hang.
pytestmark = [pytest.mark.db, pytest.mark.timeout(60)]

CONFIG = EncodingConfig("test-model", 0)


def _pending_fact() -> tuple[TenantId, int]:
    """A tenant with one fact and its pending encoding row, committed."""
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    with session_scope() as session:
        tenant = TenantId(str(TenantRepository(session).create(f"claim-{uuid.uuid4().hex[:6]}").id))
        user = UserRepository(session, tenant).get_or_create("ada")
        fact = FactRepository(session, tenant).add(user, "The user rows at dawn.", vector)
        session.flush()
        EncodingRepository(session, tenant).ensure_pending(fact, CONFIG)
        return tenant, fact.id


def _fact(session: Session, tenant: TenantId, row_id: int) -> Fact:
    (fact,) = FactRepository(session, tenant).many_by_row([row_id])
    return fact


def test_a_claimant_waits_no_longer_than_its_bound(migrated_database: str) -> None:
    tenant, row_id = _pending_fact()
    with session_scope() as holder:
        held = EncodingRepository(holder, tenant).claim([_fact(holder, tenant, row_id)], CONFIG, 30)
        assert list(held) == [row_id]
        started = time.monotonic()
        with pytest.raises(OperationalError) as refused, session_scope() as waiter:
            fact = _fact(waiter, tenant, row_id)
            EncodingRepository(waiter, tenant).claim([fact], CONFIG, 0.3)
        assert isinstance(refused.value.orig, errors.LockNotAvailable)
        assert time.monotonic() - started < 10  # refused, not left waiting for the holder


def test_a_holder_idle_past_its_bound_loses_the_rows(migrated_database: str) -> None:
    """A worker frozen mid-batch: Postgres ends its session and the next claimant gets the rows
    at once; the frozen one's commit fails, so it marks nothing."""
    tenant, row_id = _pending_fact()
    with pytest.raises(DBAPIError), session_scope() as frozen:
        EncodingRepository(frozen, tenant).claim([_fact(frozen, tenant, row_id)], CONFIG, 0.5)
        time.sleep(2.0)  # idle in its transaction, as during a hung encode call
        with session_scope() as next_one:
            started = time.monotonic()
            fact = _fact(next_one, tenant, row_id)
            claimed = EncodingRepository(next_one, tenant).claim([fact], CONFIG, 5)
            assert list(claimed) == [row_id]
            assert time.monotonic() - started < 3
