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
from gpu_runtime.types import TenantId
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
