"""Conversations: import (plain turns or LoCoMo JSON), then facts per turn, then encoding."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from backend.db.models import Conversation, Job
from backend.errors import InvalidRequestError, NotFoundError
from backend.repositories.conversations import ConversationRepository, TurnIn
from backend.repositories.encodings import JobRepository
from backend.repositories.memories import FactRepository, UserRepository
from backend.services import outbox
from backend.services.context import TenantContext
from backend.services.memories import MemoryService

INGEST_TASK = "inferscale.ingest_conversation"


@dataclass(frozen=True)
class Observation:
    """A fact stated about a turn (LoCoMo's session observations), tied to it by ``ref``."""

    text: str
    ref: str


@dataclass(frozen=True)
class ParsedConversation:
    title: str
    turns: list[TurnIn]
    observations: list[Observation]


# Column sizes of what a conversation writes (backend.db.models).
_LIMITS = {"speaker": 200, "session": 64, "ref": 64, "spoken_at": 64}


def parse_locomo(data: dict[str, Any]) -> ParsedConversation:
    """A LoCoMo document, or a 422 saying what does not fit the layout (never a 500)."""
    try:
        parsed = _parse_locomo(data)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidRequestError(
            f"not a LoCoMo conversation: {type(exc).__name__} {exc} (see data/locomo/README.md)"
        ) from None
    for number, turn in enumerate(parsed.turns):
        for name, limit in _LIMITS.items():
            if len(getattr(turn, name)) > limit:
                raise InvalidRequestError(
                    f"locomo turn {number}: {name} is over {limit} characters"
                )
    if not parsed.title.strip() or len(parsed.title) > 300:
        raise InvalidRequestError("locomo: the title (sample_id) must be 1 to 300 characters")
    return parsed


def _parse_locomo(data: dict[str, Any]) -> ParsedConversation:
    """The official LoCoMo layout (``conversation`` nested or at top level): sessions
    ``session_<n>`` of turns {speaker, dia_id, text} with ``session_<n>_date_time``, and optional
    ``session_<n>_observation`` {speaker: [[fact, dia_id], ...]}."""
    conv = data.get("conversation", data)
    if not isinstance(conv, dict) or "speaker_a" not in conv:
        raise InvalidRequestError("not a LoCoMo conversation: speaker_a / session_<n> missing")
    sessions = sorted(
        (int(k.split("_")[1]), v)
        for k, v in conv.items()
        if k.startswith("session_") and k.count("_") == 1 and isinstance(v, list)
    )
    if not sessions:
        raise InvalidRequestError("LoCoMo conversation has no sessions")
    turns, observations = [], []
    for number, items in sessions:
        when = str(conv.get(f"session_{number}_date_time", ""))
        for item in items:
            text = str(item.get("text", "")).strip()
            if item.get("blip_caption"):
                text = f"{text} [shares a photo: {item['blip_caption']}]".strip()
            turns.append(
                TurnIn(str(item["speaker"]), text, f"session_{number}", str(item["dia_id"]), when)
            )
        for facts in (conv.get(f"session_{number}_observation") or {}).values():
            for fact in facts:
                refs = fact[1] if isinstance(fact[1], list) else [fact[1]]
                # The session date makes "when" questions answerable from the fact alone.
                text = f"({when}) {fact[0]}" if when else str(fact[0])
                observations.append(Observation(text, str(refs[0])))
    title = str(data.get("sample_id", f"{conv['speaker_a']} & {conv['speaker_b']}"))
    return ParsedConversation(title, turns, observations)


class ConversationService:
    def __init__(self, ctx: TenantContext) -> None:
        self.ctx = ctx
        self.conversations = ConversationRepository(ctx.session, ctx.tenant)
        self.users = UserRepository(ctx.session, ctx.tenant)

    def import_(
        self, user_external_id: str, parsed: ParsedConversation
    ) -> tuple[Conversation, Job]:
        if not parsed.turns:
            raise InvalidRequestError("a conversation needs at least one turn")
        user = self.users.get_or_create(user_external_id)
        conversation = self.conversations.create(user, parsed.title, "import")
        self.conversations.add_turns(conversation, parsed.turns)
        job = JobRepository(self.ctx.session, self.conversations.tenant_uuid).create(
            "ingest_conversation",
            {
                "conversation_id": str(conversation.id),
                "observations": [[o.text, o.ref] for o in parsed.observations],
            },
            total=len(parsed.observations) or len(parsed.turns),
        )
        payload: dict[str, object] = {
            "tenant_id": self.ctx.tenant.value,
            "conversation_id": str(conversation.id),
            "job_id": str(job.id),
        }
        outbox.schedule(self.ctx.session, job, INGEST_TASK, payload, self.ctx.enqueue)
        return conversation, job

    def get(self, conversation_id: uuid.UUID) -> Conversation:
        conversation = self.conversations.get(conversation_id)
        if conversation is None:
            raise NotFoundError(f"conversation {conversation_id} not found")
        return conversation

    def delete(self, conversation_id: uuid.UUID) -> int:
        """The conversation, its turns and the memories taken from it, with their KV on every
        tier (the memories' texts came from these turns, and their KV was encoded after them);
        an ingestion job not yet run keeps no texts either. Returns the memories deleted."""
        conversation = self.get(conversation_id)
        facts = FactRepository(self.ctx.session, self.ctx.tenant)
        memories = MemoryService(self.ctx)
        taken = facts.live_from_conversation(conversation.id)
        for fact in taken:
            memories.delete_fact(fact)
        JobRepository(self.ctx.session, self.conversations.tenant_uuid).close_ingestion(
            conversation.id
        )
        self.conversations.delete(conversation)
        return len(taken)

    def ingest(
        self, conversation_id: uuid.UUID, observations: list[tuple[str, str]]
    ) -> tuple[list[str], uuid.UUID | None]:
        """Facts per turn (or per observation, tied to its turn); idempotent: turns that already
        have facts are skipped, so a redelivered job adds nothing. Returns the new fact ids and
        the job that encodes them."""
        conversation = self.get(conversation_id)
        turns = self.conversations.turns(conversation)
        facts = FactRepository(self.ctx.session, self.ctx.tenant)
        covered = facts.source_turns(conversation.id)
        by_ref = {t.ref: t for t in turns if t.ref}
        texts: list[str] = []
        sources: list[int | None] = []
        if observations:
            for text, ref in observations:
                turn = by_ref.get(ref)
                if turn is not None and turn.id not in covered:
                    texts.append(text)
                    sources.append(turn.id)
        else:
            for turn in turns:
                if turn.id not in covered and turn.text:
                    stamp = f"[{turn.spoken_at}] " if turn.spoken_at else ""
                    texts.append(f"{stamp}{turn.speaker}: {turn.text}")
                    sources.append(turn.id)
        if not texts:
            return [], None
        user = self.users.by_id(conversation.user_id)
        assert user is not None
        service = MemoryService(self.ctx)
        created = service.add(
            user.external_id,
            texts,
            {"conversation_id": str(conversation.id)},
            sources,
            encode=True,
        )
        return [str(f.public_id) for f in created], service.last_job_id
