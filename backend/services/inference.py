"""``infer=true``: facts extracted from a conversation by the served model, then reconciled with
the scope's similar memories, as Mem0 does: each new fact is added, or updates, deletes or leaves
(NONE) an existing memory. Both model calls are constrained by a JSON schema (the runtime's
structured outputs), so what the model writes always parses, even from a 135M model; the
schemas also bound its length, so ``max_tokens`` never cuts a document in half.

The model names existing memories by small integers, never their ids (a model that invents an
id names nothing). Every decision is applied through ``MemoryService`` (history, index,
encoding, purges) and written to the fact's history, NONE included.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from backend.db.models import Fact
from backend.errors import AppError
from backend.repositories.scoped import OwnedFact
from backend.services.context import TenantContext
from backend.services.mem0 import Mem0Service, Scope
from gpu_runtime.client import protocol as p

Event = Literal["ADD", "UPDATE", "DELETE", "NONE"]
MAX_FACTS = 8
FACT_CHARS = 200
FACT_MIN_CHARS = 16
SIMILAR_PER_FACT = 5
MAX_TOKENS = 1024  # above what either schema allows the model to write
# Mem0's default categories.
CATEGORIES = (
    "personal_details",
    "family",
    "professional_details",
    "sports",
    "travel",
    "food",
    "music",
    "health",
    "technology",
    "hobbies",
    "fashion",
    "entertainment",
    "milestones",
    "user_preferences",
    "misc",
)

EXTRACT_PROMPT = """You extract facts worth remembering about the user from a conversation.
Write each fact as one short, self-contained sentence in the third person ("The user ...").
Keep names, places, dates and preferences. Leave out greetings, questions and small talk.
If nothing is worth remembering, return an empty list."""
# No worked example: the 135M default model copied one verbatim into every session's facts
# (docs/accuracy.md, "Extraction").

RECONCILE_PROMPT = """You maintain a memory of facts about a user. You get the current memories
(each with an id) and newly learned facts. For each new fact decide one event:
ADD: it is new; give it a new id.
UPDATE: it changes or refines a current memory; give that memory's id and the merged text.
DELETE: it contradicts a current memory; give that memory's id.
NONE: a current memory already says it; give that memory's id."""


class InferenceError(AppError):
    status_code, code = 503, "inference_failed"


@dataclass(frozen=True)
class Decision:
    event: Event
    text: str
    target: int | None  # the index of an existing memory (UPDATE, DELETE, NONE)


@dataclass
class InferenceRequest:
    messages: list[dict[str, str]]
    metadata: dict[str, Any] = field(default_factory=dict)
    custom_instructions: str | None = None
    agent_custom_instructions: str | None = None
    includes: str | None = None
    excludes: str | None = None
    custom_categories: list[str] = field(default_factory=list)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> InferenceRequest:
        known = {k: v for k, v in payload.items() if k in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in known.items() if v is not None})

    def categories(self) -> list[str]:
        return self.custom_categories or list(CATEGORIES)

    def instructions(self, agent_only: bool) -> str:
        extra = [
            self.agent_custom_instructions if agent_only else None,
            self.custom_instructions,
            f"Include facts about: {self.includes}" if self.includes else None,
            f"Do not include facts about: {self.excludes}" if self.excludes else None,
        ]
        return "\n".join(line for line in extra if line)


def extraction_schema(categories: list[str]) -> dict[str, Any]:
    fact = {
        "type": "object",
        "additionalProperties": False,
        "required": ["fact", "category"],
        "properties": {
            # A sentence, not a name or "The user" alone (what the small default model wrote)
            "fact": {"type": "string", "minLength": FACT_MIN_CHARS, "maxLength": FACT_CHARS},
            "category": {"enum": categories},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["facts"],
        "properties": {"facts": {"type": "array", "maxItems": MAX_FACTS, "items": fact}},
    }


def reconcile_schema(existing: int, facts: int) -> dict[str, Any]:
    ids = [str(i) for i in range(existing + facts)]
    item = {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "event", "text"],
        "properties": {
            "id": {"enum": ids},
            "event": {"enum": ["ADD", "UPDATE", "DELETE", "NONE"]},
            "text": {"type": "string", "maxLength": FACT_CHARS},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["memory"],
        "properties": {"memory": {"type": "array", "maxItems": existing + facts, "items": item}},
    }


def sampling(schema: dict[str, Any]) -> p.SamplingModel:
    structured = p.StructuredModel(json_schema=schema, compact=True)
    return p.SamplingModel(max_tokens=MAX_TOKENS, temperature=0.0, structured=structured)


def conversation_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(
        f"{m['role']}: {m['content'].strip()}"
        for m in messages
        if m.get("role") in ("user", "assistant") and m.get("content")
    )


def reconcile_input(existing: list[str], facts: list[str]) -> str:
    current = "".join(f"{i}: {text}\n" for i, text in enumerate(existing))
    new = "".join(f"{len(existing) + j}: {text}\n" for j, text in enumerate(facts))
    return f"Current memories:\n{current}\nNew facts:\n{new}"


def parse_facts(output: str, categories: list[str]) -> list[tuple[str, str]]:
    """(fact, category) pairs of the extraction's JSON (duplicates dropped)."""
    facts: dict[str, str] = {}
    for item in _document(output, "facts"):
        text = str(item.get("fact", "")).strip()
        category = str(item.get("category", ""))
        if text and text not in facts:
            facts[text] = category if category in categories else "misc"
    return list(facts.items())


def parse_decisions(output: str, existing: int) -> list[Decision]:
    """The reconciliation's decisions; ids beyond the existing memories are new facts (ADD)."""
    decisions = []
    for item in _document(output, "memory"):
        event, text = str(item.get("event", "")), str(item.get("text", "")).strip()
        index = int(item["id"]) if str(item.get("id", "")).isdigit() else -1
        known = 0 <= index < existing
        if event == "ADD" or (event == "UPDATE" and not known):
            if text:
                decisions.append(Decision("ADD", text, None))
        elif event in ("UPDATE", "DELETE", "NONE") and known:
            decisions.append(Decision(event, text, index))  # type: ignore[arg-type]
    return decisions


def _document(output: str, key: str) -> list[dict[str, Any]]:
    try:
        items = json.loads(output)[key]
    except (ValueError, KeyError, TypeError) as exc:
        raise InferenceError(f"the model's output is not the schema's JSON: {exc}") from exc
    return [item for item in items if isinstance(item, dict)]


def similar_memories(ctx: TenantContext, scope: Scope, facts: list[str]) -> list[OwnedFact]:
    """The scope's memories most like any of ``facts``, each once."""
    service = Mem0Service(ctx)
    found: dict[uuid.UUID, OwnedFact] = {}
    for fact in facts:
        for owned, _ in service.search(fact, scope.as_filter(), SIMILAR_PER_FACT, 0.0):
            found.setdefault(owned.fact.public_id, owned)
    return list(found.values())


def apply(
    ctx: TenantContext,
    scope: Scope,
    metadata: dict[str, Any],
    decisions: list[Decision],
    existing: list[Fact | None],
    categories: dict[str, str],
) -> list[dict[str, Any]]:
    """Carries out the decisions (in the caller's transaction); returns Mem0's event results.
    ``existing``: the memories the decisions name by index (None: gone since they were read)."""
    service = Mem0Service(ctx)
    results: list[dict[str, Any]] = []
    touched: set[int] = set()
    for decision in decisions:
        if decision.event == "ADD":
            category = categories.get(decision.text)
            fact_scope = scope.fact_scope((category,) if category else ())
            (fact,) = service.memories.add(scope.owner, [decision.text], metadata, scope=fact_scope)
            results.append(
                {"id": str(fact.public_id), "event": "ADD", "data": {"memory": fact.text}}
            )
            continue
        assert decision.target is not None
        target = existing[decision.target]
        if target is None or decision.target in touched:  # one decision per memory: the first
            continue
        touched.add(decision.target)
        memory_id, old = target.public_id, target.text
        if decision.event == "UPDATE" and decision.text and decision.text != old:
            service.memories.update(memory_id, decision.text, None)
            data = {"memory": decision.text, "previous_memory": old}
        elif decision.event == "DELETE":
            service.memories.delete(memory_id)
            data = {"memory": old}
        else:  # NONE, or an UPDATE that changes nothing
            service.memories.facts.note_unchanged(target)
            data = {"memory": old}
        event = (
            "NONE"
            if decision.event == "UPDATE" and "previous_memory" not in data
            else decision.event
        )
        results.append({"id": str(memory_id), "event": event, "data": data})
    return results
