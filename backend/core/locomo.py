"""The LoCoMo conversation format (the dataset's official JSON layout): parsed into turns and
the session observations stated about them, or refused with a message. Pure Python, no
database: the API's import, the ingestion job and the evaluation harness all read it here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from backend.errors import InvalidRequestError


@dataclass(frozen=True)
class TurnIn:
    speaker: str
    text: str
    session: str = ""
    ref: str = ""
    spoken_at: str = ""


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


class ConversationMemories(StrEnum):
    """What an import keeps as the user's memories.

    ``observations``: the facts stated about the turns (LoCoMo's session observations) when the
    import has them, else each turn. ``turns``: each turn, as said. ``both``: the observations
    and the turns they were taken from: the turns keep what no observation states (a fifth of
    LoCoMo's evidence turns have no observation tied to them; docs/accuracy.md, "Retrieval")."""

    OBSERVATIONS = "observations"
    TURNS = "turns"
    BOTH = "both"

    def keeps(self, has_observations: bool) -> tuple[bool, bool]:
        """(observations kept, turns kept) for an import with or without observations."""
        if not has_observations:
            return False, True
        return self is not ConversationMemories.TURNS, self is not ConversationMemories.OBSERVATIONS


# LoCoMo's session stamps read "1:56 pm on 8 May, 2023".
_SESSION_STAMP = re.compile(
    r"^\s*\d{1,2}:\d{2}\s*[ap]\.?m\.?\s+on\s+(\d{1,2}\s+[A-Za-z]+),?\s+(\d{4})\s*$",
    re.IGNORECASE,
)


def session_day(stamp: str) -> str:
    """The day a session stamp names, "8 May 2023" for "1:56 pm on 8 May, 2023"; a stamp in
    any other form as it is. A memory's time of day only misled the model: answering "when"
    questions it copied clock times ("12:33 am on") where the day was asked."""
    match = _SESSION_STAMP.match(stamp)
    return f"{match[1]} {match[2]}" if match else stamp.strip()


def observation_text(fact: str, stamp: str) -> str:
    """A session observation as a memory's text: the session's day first, as a sentence
    would say it, so "when" questions are answerable from the fact alone (measured against
    other forms in docs/accuracy.md, "How a memory's date is written")."""
    day = session_day(stamp)
    return f"On {day}, {fact}" if day else fact


def turn_memory_text(speaker: str, text: str, spoken_at: str = "") -> str:
    """A turn as a memory's text: dated like an observation, so "when" questions are
    answerable from it alone, and with its speaker, as said."""
    stamp = f"[{spoken_at}] " if spoken_at else ""
    return f"{stamp}{speaker}: {text}"


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
                observations.append(Observation(observation_text(str(fact[0]), when), str(refs[0])))
    title = str(data.get("sample_id", f"{conv['speaker_a']} & {conv['speaker_b']}"))
    return ParsedConversation(title, turns, observations)
