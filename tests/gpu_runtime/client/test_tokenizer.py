"""The client's torch-free tokenizer gives the ids the engine's own (transformers) tokenizer
gives, special tokens included: kv and prompt modes see the ids the backend composed."""

from __future__ import annotations

import pytest

from gpu_runtime.client.tokenizer import TextTokenizer
from gpu_runtime.config import RuntimeSettings

pytestmark = pytest.mark.engine  # needs the prepared SmolLM2 files

SAMPLES = [
    "<|im_start|>system\nYou are a helpful assistant.\nFacts about the user:\n",
    "- [1:56 pm on 8 May, 2023] Melanie painted a lake sunrise.\n",
    "<|im_end|>\n<|im_start|>user\nWhat is my dog's name? Ünïcödé ✓<|im_end|>\n",
    "  leading spaces and\ttabs\n\n",
]


def test_ids_match_the_engines_tokenizer() -> None:
    from transformers import AutoTokenizer

    path = RuntimeSettings().resolved_tokenizer_path
    ours = TextTokenizer((path / "tokenizer.json").read_text())
    theirs = AutoTokenizer.from_pretrained(path)
    for text in SAMPLES:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text
    assert ours.encode(SAMPLES[0])[0] == theirs.convert_tokens_to_ids("<|im_start|>")
