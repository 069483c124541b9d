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


def test_a_text_stream_adds_up_to_the_decoded_continuation() -> None:
    """Token by token, multi-byte characters included (an emoji spans several byte tokens: the
    stream says nothing until the character is whole), special tokens skipped."""
    path = RuntimeSettings().resolved_tokenizer_path
    tokenizer = TextTokenizer((path / "tokenizer.json").read_text())
    prompt = tokenizer.encode("<|im_start|>assistant\n")
    answer = tokenizer.encode("Bolt the greyhound 🐕 lives in Porto, café ✓ 你好<|im_end|>")
    stream = tokenizer.stream(prompt)
    pieces = [stream.step([token]) for token in answer]
    assert "".join(pieces) == tokenizer.decode(answer)
    assert "".join(pieces).endswith("你好")  # <|im_end|> adds nothing
    assert "" in pieces[:-1]  # some token completed no character on its own
    whole = tokenizer.stream(prompt).step(answer)  # a burst of tokens at once: the same text
    assert whole == "".join(pieces)
