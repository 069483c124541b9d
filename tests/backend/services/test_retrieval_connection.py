"""A chat's retrieval holds no database connection while it waits for the query's embedding
(the runtime's on a GPU host, 12-127 ms on the CPU box under a flood): its read session hands
the connection back first, so waiting chats never empty the pool a process shares. A session
that writes keeps its transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy.orm import Session

from backend.db.session import read_session_factory, session_scope
from backend.resources import process_resources
from backend.services.memories import MemoryService
from gpu_runtime.types import TenantId
from tests.support import TenantHandle

pytestmark = pytest.mark.engine

FACTS = ["The user's bike is a green Brompton.", "The user's locker code is 4471."]


def _tenant_with_facts(api: Any, make_tenant: Callable[[], TenantHandle]) -> TenantId:
    tenant = TenantId(make_tenant().id)
    with session_scope() as session:
        ctx = process_resources().tenant_context(session, tenant, api.app.state.resources.engine)
        MemoryService(replace(ctx, enqueue=lambda task, kwargs: None)).add(
            "alice", FACTS, encode=False
        )
    return tenant


def _search_in(
    api: Any, tenant: TenantId, sessions: Callable[[], AbstractContextManager[Session]]
) -> tuple[list[bool], list[str]]:
    """Searches alice's facts in a session from ``sessions``: whether it held a transaction
    (and with it a connection) when the query's vector was asked for, and the hits' texts."""
    waiting: list[bool] = []
    with sessions() as session:
        ctx = process_resources().tenant_context(session, tenant, api.app.state.resources.engine)
        service = MemoryService(ctx)
        vector: npt.NDArray[np.float32] = service.ctx.embedder.embed([FACTS[0]])[0]

        def vector_of() -> npt.NDArray[np.float32]:
            waiting.append(session.in_transaction())
            return vector

        hits = service.briefs_when_ready("alice", vector_of, 2, "green bike")
        texts = [hit.fact.text for hit in hits]
    return waiting, texts


@contextmanager
def _read_session() -> Iterator[Session]:
    with read_session_factory()() as session:
        yield session


@pytest.mark.parametrize(
    ("sessions", "held"),
    [
        (_read_session, False),  # a chat's: the connection back to the pool first
        (session_scope, True),  # one that may write keeps its transaction (atomic writes)
    ],
)
def test_the_embedding_wait_holds_a_connection_only_in_a_session_that_writes(
    api: Any,
    make_tenant: Callable[[], TenantHandle],
    sessions: Callable[[], AbstractContextManager[Session]],
    held: bool,
) -> None:
    tenant = _tenant_with_facts(api, make_tenant)
    waiting, texts = _search_in(api, tenant, sessions)
    assert waiting == [held]  # in a transaction, so holding its connection, while waiting
    assert texts[0] == FACTS[0]  # and the search finds what it found before
