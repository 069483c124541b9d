"""The encoding job against the session's runtime: concurrent jobs for the same fact (a
redelivery, beat's sweep, an import's own worker) write its KV once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from backend.db.models import EncodingStatus
from backend.db.session import session_scope
from backend.repositories.encodings import EncodingRepository
from backend.services.memories import MemoryService, fact_key
from gpu_runtime.types import FactKey, TenantId
from tests.support import TenantHandle, kv_disk

pytestmark = pytest.mark.engine


def test_concurrent_jobs_for_one_fact_encode_it_once(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    from backend.jobs.encoding import encode_facts

    resources = api.app.state.resources
    tenant = TenantId(make_tenant().id)
    with session_scope() as session:  # no job scheduled: only the calls below encode it
        service = MemoryService(resources.tenant_context(session, tenant))
        (fact,) = service.add("alice", ["The user's bike is a green Brompton."], encode=False)
        session.flush()
        public_id, row_id = str(fact.public_id), fact.id
        key = fact_key(tenant, fact, resources.engine.encoding_config())
    with ThreadPoolExecutor(4) as pool:
        counts = list(
            pool.map(lambda _: encode_facts(tenant.value, [public_id], None, resources.engine),
                     range(4))
        )  # fmt: skip
    assert sorted(counts) == [0, 0, 0, 1], "one job encoded it; the others found it stored"

    with session_scope() as session:
        (row,) = EncodingRepository(session, tenant).for_fact(row_id)
        assert row.status == EncodingStatus.READY
    stored_at = kv_disk().locate(key)
    assert stored_at is not None
    assert encode_facts(tenant.value, [public_id], None, resources.engine) == 0
    assert kv_disk().locate(key) == stored_at  # not written again


def test_kv_of_an_earlier_encoding_version_is_purged_once_the_new_one_is_ready(
    api: Any, make_tenant: Callable[[], TenantHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an encoding-version bump the facts are re-encoded under the new key; beat's sweep
    then purges the old version's KV and rows, but not before the new version is stored."""
    from backend.jobs.encoding import encode_facts, purge_superseded

    engine = api.app.state.resources.engine
    tenant = TenantId(make_tenant().id)
    with session_scope() as session:
        service = MemoryService(api.app.state.resources.tenant_context(session, tenant))
        (fact,) = service.add("alice", ["The user's locker code is 4471."], encode=False)
        session.flush()
        public_id, row_id = str(fact.public_id), fact.id
        old_key = fact_key(tenant, fact, engine.encoding_config())
    assert encode_facts(tenant.value, [public_id], None, engine) == 1

    bumped = engine.settings.model_copy(update={"encoding_version": old_key.encoding_version + 1})
    monkeypatch.setattr(engine, "settings", bumped)
    new_key = FactKey.for_fact(tenant, public_id, 1, engine.encoding_config())
    assert new_key != old_key

    def versions() -> list[tuple[int, str]]:  # this tenant's rows (the sweep covers every tenant)
        with session_scope() as session:
            rows = EncodingRepository(session, tenant).for_fact(row_id)
            return [(r.encoding_version, r.status) for r in rows]

    purge_superseded(engine=engine)  # the new version is not stored yet: the old one stays
    assert kv_disk().exists(old_key)
    assert versions() == [(old_key.encoding_version, "ready")]

    assert encode_facts(tenant.value, [public_id], None, engine) == 1
    assert purge_superseded(engine=engine) >= 1
    disk = kv_disk()
    assert not disk.exists(old_key) and disk.exists(new_key)
    assert engine.stored(tenant, [old_key, new_key]) == [False, True]
    assert versions() == [(new_key.encoding_version, "ready")]
    with session_scope() as session:  # nothing of this tenant's left to sweep
        assert EncodingRepository(session, tenant).superseded(engine.encoding_config()) == []
