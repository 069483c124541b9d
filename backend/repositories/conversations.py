"""Conversations and their ordered turns, of one tenant."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func, select

from backend.core.locomo import TurnIn
from backend.db.models import Conversation, EndUser, Turn
from backend.repositories.base import TenantScoped


class ConversationRepository(TenantScoped):
    def create(self, user: EndUser, title: str, source: str) -> Conversation:
        conversation = Conversation(
            tenant_id=self.tenant_uuid, user_id=user.id, title=title, source=source
        )
        self.session.add(conversation)
        self.session.flush()
        return conversation

    def get(self, conversation_id: uuid.UUID) -> Conversation | None:
        return self.session.scalar(
            select(Conversation).where(
                Conversation.tenant_id == self.tenant_uuid, Conversation.id == conversation_id
            )
        )

    def add_turns(self, conversation: Conversation, turns: list[TurnIn]) -> list[Turn]:
        """Append turns in order."""
        start = (
            self.session.scalar(
                select(func.coalesce(func.max(Turn.seq), -1)).where(
                    Turn.conversation_id == conversation.id
                )
            )
            or -1
        ) + 1
        rows = [
            Turn(
                tenant_id=self.tenant_uuid,
                conversation_id=conversation.id,
                seq=start + i,
                speaker=turn.speaker,
                text=turn.text,
                session=turn.session,
                ref=turn.ref,
                spoken_at=turn.spoken_at,
            )
            for i, turn in enumerate(turns)
        ]
        self.session.add_all(rows)
        self.session.flush()
        return rows

    def turn(self, turn_id: int) -> Turn | None:
        return self.session.scalar(
            select(Turn).where(Turn.tenant_id == self.tenant_uuid, Turn.id == turn_id)
        )

    def preceding_turns(self, turn: Turn, window: int) -> list[Turn]:
        """The ``window`` turns before ``turn`` in its conversation, oldest first."""
        if window <= 0:
            return []
        rows = self.session.scalars(
            select(Turn)
            .where(
                Turn.tenant_id == self.tenant_uuid,
                Turn.conversation_id == turn.conversation_id,
                Turn.seq < turn.seq,
            )
            .order_by(Turn.seq.desc())
            .limit(window)
        )
        return list(reversed(list(rows)))

    def turn_count(self, conversation: Conversation) -> int:
        return int(
            self.session.scalar(
                select(func.count()).where(
                    Turn.tenant_id == self.tenant_uuid, Turn.conversation_id == conversation.id
                )
            )
            or 0
        )

    def turns(self, conversation: Conversation) -> list[Turn]:
        return list(
            self.session.scalars(
                select(Turn)
                .where(Turn.tenant_id == self.tenant_uuid, Turn.conversation_id == conversation.id)
                .order_by(Turn.seq)
            )
        )

    def ids_of_user(self, user: EndUser) -> list[uuid.UUID]:
        return list(
            self.session.scalars(
                select(Conversation.id).where(
                    Conversation.tenant_id == self.tenant_uuid, Conversation.user_id == user.id
                )
            )
        )

    def delete(self, conversation: Conversation) -> None:
        """The conversation and every turn of it (facts keep no link: ``source_turn_id`` is
        set to null by the database)."""
        self.session.execute(
            delete(Turn).where(
                Turn.tenant_id == self.tenant_uuid, Turn.conversation_id == conversation.id
            )
        )
        self.session.delete(conversation)
        self.session.flush()
