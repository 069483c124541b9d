"""Which questions a serve bench's cells ask: each cell its own, the same for the platform's
modes and the peer, the bench user's conversation's first and then the others'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.serve.chats import FIRST_CELL_QUESTION, Workload, cell_questions, questions_from

pytestmark = pytest.mark.unit


def test_no_two_cells_ask_the_same_questions() -> None:
    firsts = cell_questions([1, 100], [0, 50], per_user=8)
    assert firsts == {(1, 0): 64, (1, 50): 72, (100, 0): 80, (100, 50): 880}
    asked = {}
    for (n, k), first in firsts.items():
        w = Workload("", (), tuple(str(i) for i in range(2000)), 1, "kv", k, 8, first=first)
        asked[(n, k)] = {w.question(u * 8 + r) for u in range(n) for r in range(8)}
    assert sum(len(q) for q in asked.values()) == len(set().union(*asked.values())) == 1616
    assert min(int(q) for q in set().union(*asked.values())) == FIRST_CELL_QUESTION
    # another invocation against the same servers starts where it is told to
    assert cell_questions([100], [50], 8, start=300) == {(100, 50): 300}


def test_the_users_conversation_comes_first_then_every_others_once(tmp_path: Path) -> None:
    def conversation(name: str, questions: list[str]) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"qa": [{"question": q} for q in questions]}))
        return path

    conversation("a", ["a1", "shared"])
    user = conversation("b", ["b1", "b2"])
    conversation("c", ["c1", "shared"])
    assert questions_from(user) == ["b1", "b2", "a1", "shared", "c1"]
