"""Which turns a fact is encoded after (context-window encoding)."""

from __future__ import annotations

import pytest

from gpu_runtime.composer import PromptComposer, Turn

pytestmark = pytest.mark.unit

TURNS = [Turn("A" if i % 2 else "B", f"turn {i}") for i in range(7)]


@pytest.mark.parametrize(
    ("turns", "window", "expected"),
    [
        (7, 5, [2, 3, 4, 5, 6]),
        (3, 5, [0, 1, 2]),  # fewer turns than w: all of them, none dropped
        (4, 5, [0, 1, 2, 3]),
        (7, 0, []),
        (0, 5, []),
    ],
)
def test_last_turns_keeps_the_window_before_the_fact(
    turns: int, window: int, expected: list[int]
) -> None:
    chosen = PromptComposer.last_turns(TURNS[:turns], window)
    assert [t.text for t in chosen] == [f"turn {i}" for i in expected]
