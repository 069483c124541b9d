"""LoCoMo conversations as the evaluation reads them: facts, turns, questions.

A LoCoMo file holds one sample (the shared ``conv-*.json``) or a list of them (the released
``locomo10.json``). Facts are the memories exactly as the platform's import keeps them
(``parse_locomo`` and ``ConversationMemories``): the session observations, prefixed with the
session date and tied to the dia_id of their turn, and/or the turns themselves; a question's
gold answer is ``answer``, or ``adversarial_answer`` for category 5.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.locomo import ConversationMemories
from gpu_runtime.client.composer import Turn


@dataclass(frozen=True)
class Question:
    sample: str
    index: int  # position in the file's ``qa`` list
    text: str
    gold: str  # the answer; for category 5 the adversarial answer ("" when absent)
    category: int
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Conversation:
    sample: str
    path: str
    facts: tuple[str, ...]
    fact_refs: tuple[str, ...]  # the dia_id each fact is tied to
    fact_turns: tuple[int | None, ...]  # index of that turn in ``turns`` (None: not found)
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]

    def window(self, fact: int, w: int) -> tuple[Turn, ...]:
        """The (at most) w turns before the fact's turn, oldest first."""
        position = self.fact_turns[fact]
        if position is None or w <= 0:
            return ()
        return self.turns[max(0, position - w) : position]


def locomo_files(paths: Iterable[Path]) -> list[Path]:
    """Files as given, folders expanded to their ``*.json``."""
    found: list[Path] = []
    for path in paths:
        found += sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not found:
        raise FileNotFoundError("no LoCoMo files found")
    return found


def load_conversations(
    path: Path, memories: ConversationMemories = ConversationMemories.OBSERVATIONS
) -> list[Conversation]:
    """One LoCoMo sample per file, or a list of them (like the released locomo10.json)."""
    data = json.loads(path.read_text())
    samples = data if isinstance(data, list) else [data]
    return [
        _conversation(s, path, path.stem if len(samples) == 1 else f"{path.stem}[{i}]", memories)
        for i, s in enumerate(samples)
    ]


def _conversation(
    data: dict[str, Any], path: Path, fallback: str, memories: ConversationMemories
) -> Conversation:
    from backend.core.locomo import parse_locomo, turn_memory_text

    parsed = parse_locomo(data)
    sample = str(data.get("sample_id") or fallback)
    position = {t.ref: i for i, t in enumerate(parsed.turns)}
    keep_observations, keep_turns = memories.keeps(bool(parsed.observations))
    facts: list[str] = []
    fact_refs: list[str] = []
    fact_turns: list[int | None] = []
    for observation in parsed.observations if keep_observations else []:
        # a ref may list several dia_ids: the first known
        refs = [r for r in _dia_ids(observation.ref) if r in position]
        facts.append(observation.text)
        fact_refs.append(observation.ref)
        fact_turns.append(position[refs[0]] if refs else None)
    for i, turn in enumerate(parsed.turns if keep_turns else []):
        if turn.text:  # as the ingestion job: an empty turn states nothing
            facts.append(turn_memory_text(turn.speaker, turn.text, turn.spoken_at))
            fact_refs.append(turn.ref)
            fact_turns.append(i)
    questions = []
    for index, qa in enumerate(data.get("qa", [])):
        category = int(qa["category"])
        gold = qa.get("adversarial_answer", qa.get("answer")) if category == 5 else qa.get("answer")
        if gold is None and category != 5:
            continue
        # an evidence entry may list several dia_ids ("D8:6; D9:17")
        evidence = tuple(e for item in qa.get("evidence", []) for e in _dia_ids(str(item)))
        questions.append(
            Question(sample, index, str(qa["question"]), str(gold or ""), category, evidence)
        )
    return Conversation(
        sample,
        str(path),
        tuple(facts),
        tuple(fact_refs),
        tuple(fact_turns),
        tuple(Turn(t.speaker, t.text) for t in parsed.turns),
        tuple(questions),
    )


def _dia_ids(text: str) -> list[str]:
    return [part for part in re.split(r"[,;\s]+", text) if part]


def select_questions(
    questions: Sequence[Question], categories: Sequence[int], limit: int | None
) -> list[Question]:
    """The questions of ``categories``; with a ``limit``, stratified: the categories take turns
    (in category order), each giving its next question in file order, until ``limit`` are
    chosen. Returned in file order."""
    pool = [q for q in questions if q.category in categories]
    if limit is None or limit >= len(pool):
        return pool
    queues = {c: [q for q in pool if q.category == c] for c in sorted({q.category for q in pool})}
    chosen: list[Question] = []
    while len(chosen) < limit:
        for queue in queues.values():
            if queue and len(chosen) < limit:
                chosen.append(queue.pop(0))
    return sorted(chosen, key=lambda q: q.index)
