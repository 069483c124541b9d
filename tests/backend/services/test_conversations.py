"""What a conversation import keeps as memories (observations, turns or both), against the
session's Postgres: the facts' texts, their source turns, the job's total, and a rerun adding
nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select

from backend.core.locomo import ConversationMemories, Observation, ParsedConversation, TurnIn
from backend.db.models import Fact, Job, Turn
from backend.db.session import session_scope
from backend.resources import process_resources
from backend.services.conversations import ConversationService
from gpu_runtime.types import TenantId
from tests.support import TenantHandle

pytestmark = pytest.mark.engine

WHEN = "1:56 pm on 8 May, 2023"
TALK = ParsedConversation(
    "talk",
    [
        TurnIn("Caroline", "I went to a support group yesterday.", "session_1", "D1:1", WHEN),
        TurnIn("Melanie", "That sounds brave. How was it?", "session_1", "D1:2", WHEN),
        TurnIn("Caroline", "", "session_1", "D1:3", WHEN),  # a photo alone: states nothing
        TurnIn("Caroline", "I'm adopting a greyhound named Bolt.", "session_1", "D1:4", WHEN),
    ],
    [
        Observation("On 8 May 2023, Caroline attended an LGBTQ support group.", "D1:1"),
        Observation("On 8 May 2023, Caroline is adopting a greyhound named Bolt.", "D1:4"),
    ],
)
OBSERVED = [(TALK.observations[0].text, "D1:1"), (TALK.observations[1].text, "D1:4")]
SAID = [
    (f"[{WHEN}] Caroline: I went to a support group yesterday.", "D1:1"),
    (f"[{WHEN}] Melanie: That sounds brave. How was it?", "D1:2"),
    (f"[{WHEN}] Caroline: I'm adopting a greyhound named Bolt.", "D1:4"),
]


def _import(
    api: Any, tenant: TenantHandle, parsed: ParsedConversation, memories: ConversationMemories
) -> tuple[list[tuple[str, str]], int]:
    """Imports and ingests (twice: the second adds nothing); the facts (text, source turn's
    ref) and the ingestion job's total."""
    engine = api.app.state.resources.engine
    with session_scope() as session:
        ctx = replace(process_resources().tenant_context(session, TenantId(tenant.id), engine),
                      enqueue=lambda task, kwargs: None)  # fmt: skip
        conversation, job = ConversationService(ctx).import_("u", parsed, memories)
        session.flush()
        observations = [(str(t), str(r)) for t, r in job.payload["observations"]]
        assert job.payload["memories"] == memories.value
        total, conversation_id = job.progress_total, conversation.id
    for attempt in range(2):
        with session_scope() as session:
            ctx = replace(process_resources().tenant_context(session, TenantId(tenant.id), engine),
                          enqueue=lambda task, kwargs: None)  # fmt: skip
            created, _ = ConversationService(ctx).ingest(conversation_id, observations, memories)
            assert (len(created) > 0) == (attempt == 0), "a rerun creates nothing"
    with session_scope() as session:
        rows = session.execute(
            select(Fact.text, Turn.ref)
            .join(Turn, Turn.id == Fact.source_turn_id)
            .where(Fact.tenant_id == uuid.UUID(tenant.id))
            .order_by(Fact.id)
        ).all()
    return [(text, ref) for text, ref in rows], total


@pytest.mark.parametrize(
    ("memories", "expected"),
    [
        (ConversationMemories.OBSERVATIONS, OBSERVED),
        (ConversationMemories.TURNS, SAID),
        (ConversationMemories.BOTH, OBSERVED + SAID),
    ],
)
def test_an_import_keeps_the_memories_it_was_asked_for(
    api: Any,
    make_tenant: Callable[[], TenantHandle],
    memories: ConversationMemories,
    expected: list[tuple[str, str]],
) -> None:
    facts, total = _import(api, make_tenant(), TALK, memories)
    assert facts == expected
    assert total >= len(expected)


def test_an_import_without_observations_keeps_its_turns_whatever_was_asked(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    plain = ParsedConversation("plain", TALK.turns, [])
    for memories in ConversationMemories:
        facts, _ = _import(api, make_tenant(), plain, memories)
        assert facts == SAID, memories


def test_the_api_refuses_an_unknown_choice_and_records_a_known_one(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    body = {"user_id": "u", "turns": [{"speaker": "Ann", "text": "I like tea."}]}
    refused = api.post(
        "/v1/conversations", json={**body, "memories": "everything"}, headers=tenant.headers
    )
    assert refused.status_code == 422, refused.text
    assert "memories" in refused.text
    accepted = api.post("/v1/conversations", json={**body, "memories": "both"},
                        headers=tenant.headers)  # fmt: skip
    assert accepted.status_code == 202, accepted.text
    with session_scope() as session:
        job = session.get(Job, uuid.UUID(accepted.json()["job_id"]))
        assert job is not None and job.payload["memories"] == "both"
