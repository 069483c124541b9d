"""Conversations: import (plain turns or LoCoMo JSON), then facts per turn, then encoding."""

from __future__ import annotations

import uuid

from backend.core.locomo import ConversationMemories, ParsedConversation, turn_memory_text
from backend.db.models import Conversation, Job, JobKind
from backend.errors import InvalidRequestError, NotFoundError
from backend.jobs.pipeline import outbox
from backend.jobs.pipeline.tasks import TaskName
from backend.repositories.conversations import ConversationRepository
from backend.repositories.jobs import JobRepository
from backend.repositories.memories import FactRepository, UserRepository
from backend.services.context import TenantContext
from backend.services.memories import MemoryService


class ConversationService:
    def __init__(self, ctx: TenantContext) -> None:
        self.ctx = ctx
        self.conversations = ConversationRepository(ctx.session, ctx.tenant)
        self.users = UserRepository(ctx.session, ctx.tenant)

    def import_(
        self,
        user_external_id: str,
        parsed: ParsedConversation,
        memories: ConversationMemories = ConversationMemories.OBSERVATIONS,
    ) -> tuple[Conversation, Job]:
        if not parsed.turns:
            raise InvalidRequestError("a conversation needs at least one turn")
        user = self.users.get_or_create(user_external_id)
        conversation = self.conversations.create(user, parsed.title, "import")
        self.conversations.add_turns(conversation, parsed.turns)
        observations, turns = memories.keeps(bool(parsed.observations))
        kept = parsed.observations if observations else []  # no text the job will not keep
        job = JobRepository(self.ctx.session, self.conversations.tenant_uuid).create(
            JobKind.INGEST_CONVERSATION,
            {
                "conversation_id": str(conversation.id),
                "observations": [[o.text, o.ref] for o in kept],
                "memories": memories.value,
            },
            total=len(kept) + len(parsed.turns) * turns,
        )
        payload: dict[str, object] = {
            "tenant_id": self.ctx.tenant.value,
            "conversation_id": str(conversation.id),
            "job_id": str(job.id),
        }
        outbox.schedule(
            self.ctx.session, job, TaskName.INGEST_CONVERSATION, payload, self.ctx.enqueue
        )
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
        self,
        conversation_id: uuid.UUID,
        observations: list[tuple[str, str]],
        memories: ConversationMemories = ConversationMemories.OBSERVATIONS,
    ) -> tuple[list[str], uuid.UUID | None]:
        """Facts per observation (tied to its turn) and/or per turn, as ``memories`` says;
        idempotent: turns that already have facts are skipped (a run creates all of its facts
        in one transaction), so a redelivered job adds nothing. Returns the new fact ids and
        the job that encodes them."""
        conversation = self.get(conversation_id)
        turns = self.conversations.turns(conversation)
        facts = FactRepository(self.ctx.session, self.ctx.tenant)
        covered = facts.source_turns(conversation.id)
        by_ref = {t.ref: t for t in turns if t.ref}
        keep_observations, keep_turns = memories.keeps(bool(observations))
        texts: list[str] = []
        sources: list[int | None] = []
        for text, ref in observations if keep_observations else []:
            turn = by_ref.get(ref)
            if turn is not None and turn.id not in covered:
                texts.append(text)
                sources.append(turn.id)
        for turn in turns if keep_turns else []:
            if turn.id not in covered and turn.text:
                texts.append(turn_memory_text(turn.speaker, turn.text, turn.spoken_at))
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
