"""Conversation import: turns are stored at once; facts and their KV follow as a job."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from backend.api.deps import IdempotencyKeyDep, TenantContextDep, commit
from backend.api.idempotency import run_idempotent
from backend.api.schemas.common import AUTHED, error_responses
from backend.api.schemas.conversations import ConversationImport, ConversationOut
from backend.api.schemas.memories import Deleted
from backend.core.locomo import ParsedConversation, TurnIn, parse_locomo
from backend.repositories.conversations import ConversationRepository
from backend.services.conversations import ConversationService

router = APIRouter(
    prefix="/v1/conversations", tags=["conversations"], responses=error_responses(*AUTHED)
)


@router.post("", status_code=202, response_model=ConversationOut, responses=error_responses(409))
def import_conversation(
    body: ConversationImport, ctx: TenantContextDep, idempotency_key: IdempotencyKeyDep = None
) -> JSONResponse:
    if body.locomo is not None:
        parsed = parse_locomo(body.locomo)
        if body.title:
            parsed = ParsedConversation(body.title, parsed.turns, parsed.observations)
    else:
        turns = [TurnIn(t.speaker, t.text, t.session, "", t.timestamp) for t in body.turns or []]
        parsed = ParsedConversation(body.title, turns, [])

    def action() -> ConversationOut:
        conversation, job = ConversationService(ctx).import_(body.user_id, parsed, body.memories)
        return ConversationOut(
            id=conversation.id, title=conversation.title, turns=len(parsed.turns), job_id=job.id
        )

    return run_idempotent(
        ctx.session, ctx.tenant.value, idempotency_key, body, action, status_code=202
    )


@router.get("/{conversation_id}", response_model=ConversationOut, responses=error_responses(404))
def get_conversation(conversation_id: uuid.UUID, ctx: TenantContextDep) -> ConversationOut:
    conversation = ConversationService(ctx).get(conversation_id)
    turns = ConversationRepository(ctx.session, ctx.tenant).turn_count(conversation)
    return ConversationOut(id=conversation.id, title=conversation.title, turns=turns)


@router.delete("/{conversation_id}", response_model=Deleted, responses=error_responses(404))
def delete_conversation(conversation_id: uuid.UUID, ctx: TenantContextDep) -> Deleted:
    """The conversation, its turns and the memories taken from it (their KV purged from every
    tier before this returns); ``deleted`` counts those memories."""
    deleted = ConversationService(ctx).delete(conversation_id)
    commit(ctx.session)
    return Deleted(deleted=deleted)
