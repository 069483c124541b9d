"""The dashboard's admin client against the real API: residency and latency data per tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dashboard.client import AdminClient
from tests.support import ADMIN_KEY, TenantHandle

pytestmark = pytest.mark.db


def test_overview_counts_facts_per_tenant(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    for text in ("The user likes jazz.", "The user owns a red bike."):
        api.post("/v1/memories", json={"user_id": "dash", "text": text}, headers=tenant.headers)
    client = AdminClient(admin_key=ADMIN_KEY, http=api)
    row = next(t for t in client.tenants() if t["tenant_id"] == tenant.id)
    assert row["users"] == 1 and row["facts"] == 2
    assert row["encodings_ready"] + row["encodings_waiting"] + row["encodings_failed"] == 2
    assert isinstance(client.requests(tenant.id), list)
    assert api.get("/v1/admin/overview", headers=tenant.headers).status_code == 403


def test_overview_counts_encodings_under_the_runtimes_current_config_only(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    """KV made under another config (an older w, say) is never served, so it is not 'ready'."""
    import dataclasses

    import numpy as np

    from backend.db.session import session_scope
    from backend.repositories.encodings import EncodingRepository
    from backend.repositories.memories import FactRepository, UserRepository
    from gpu_runtime.types import TenantId
    from tests.support import encoding_config

    tenant = make_tenant()
    typed = TenantId(tenant.id)
    with session_scope() as session:  # no encoding job: nothing else may encode it meanwhile
        user = UserRepository(session, typed).get_or_create("cfg")
        fact_id = (
            FactRepository(session, typed).add(user, "The user sails.", np.ones(384)).public_id
        )
    client = AdminClient(admin_key=ADMIN_KEY, http=api)
    current = encoding_config()
    older = dataclasses.replace(current, window=current.window + 1)

    def mark_ready(config: Any) -> dict[str, Any]:
        with session_scope() as session:
            [fact] = FactRepository(session, typed).many([fact_id])
            EncodingRepository(session, typed).ensure_pending(fact, config).status = "ready"
        return next(t for t in client.tenants() if t["tenant_id"] == tenant.id)

    row = mark_ready(older)
    assert (row["encodings_ready"], row["encodings_waiting"]) == (0, 1)
    row = mark_ready(current)
    assert (row["encodings_ready"], row["encodings_waiting"]) == (1, 0)


def test_memories_without_a_user_id_have_a_named_owner_in_the_browser(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    """Mem0's surface scopes a memory by an agent id alone; the browser lists its reserved
    owner marked as such, and its memories are readable through that entry."""
    from dashboard.views.memories import _name

    tenant = make_tenant()
    body = {"messages": [{"role": "user", "content": "Prefers short answers."}],
            "agent_id": "helper", "infer": False}  # fmt: skip
    added = api.post("/v3/memories/add/", json=body, headers=tenant.headers)
    assert added.status_code == 200, added.text
    api.post("/v1/memories", json={"user_id": "ann", "text": "Ann sails."}, headers=tenant.headers)
    client = AdminClient(admin_key=ADMIN_KEY, http=api)
    users = {u["user_id"]: u for u in client.users(tenant.id)}
    [scope] = [u for u in users.values() if u["scoped"]]
    assert not users["ann"]["scoped"] and _name(users["ann"]) == "ann"
    assert _name(scope) == "(no user id: agent, app or run memories)"
    memories = client.memories(tenant.id, scope["user_id"], None)
    assert [m["memory"] for m in memories] == ["Prefers short answers."]
