"""A chat's retrieved facts as plain rows: the same tenant-scoped, live-only answer as the
full entities, on real Postgres."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from backend.db.session import session_scope
from backend.repositories.memories import FactRepository, UserRepository
from backend.repositories.tenants import TenantRepository
from gpu_runtime.types import TenantId

pytestmark = pytest.mark.db


def test_briefs_are_the_tenants_live_facts_in_the_order_asked(migrated_database: str) -> None:
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    with session_scope() as session:
        tenants = [
            TenantId(str(TenantRepository(session).create(f"briefs-{uuid.uuid4().hex[:6]}").id))
            for _ in range(2)
        ]
        ours, theirs = (FactRepository(session, t) for t in tenants)
        user = UserRepository(session, tenants[0]).get_or_create("ivy")
        other = UserRepository(session, tenants[1]).get_or_create("ivy")
        one, two, three = (ours.add(user, text, vector) for text in ("one", "two", "three"))
        foreign = theirs.add(other, "another tenant's", vector)
        ours.soft_delete(two)
        session.flush()

        briefs = ours.briefs_by_row([three.id, foreign.id, two.id, one.id])

        assert [(b.id, b.text) for b in briefs] == [(three.id, "three"), (one.id, "one")]
        full = ours.many_by_row([three.id, one.id])
        assert [(b.public_id, b.version, b.user_id) for b in briefs] == [
            (f.public_id, f.version, f.user_id) for f in full
        ]
        assert ours.briefs_by_row([]) == []
        session.rollback()
