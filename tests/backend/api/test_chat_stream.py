"""A token's SSE chunk from the completion's template is the same bytes as the chunk built and
serialised whole, for any text a model can stream (quotes, backslashes, newlines, non-ASCII,
control characters, the template's own placeholder character)."""

from __future__ import annotations

import json

import pytest

from backend.api.chat_stream import ChatStream, choice
from backend.api.schemas.chat import ChatCompletionRequest

pytestmark = pytest.mark.unit

TEXTS = ["", "x", ' quote " and \\ back', "line\nbreak\ttab", "ünïcödé €", "\x00", "😀", "}]}"]


@pytest.mark.parametrize("model", ["SmolLM2-135M-Instruct", 'od"d ü model'])
def test_a_content_chunk_from_the_template_is_the_whole_chunk_byte_for_byte(model: str) -> None:
    body = ChatCompletionRequest(model=model, messages=[{"role": "user", "content": "hi"}])
    stream = ChatStream("chatcmpl-1", 1_700_000_000, model, body)
    for text in TEXTS:
        whole = stream.chunk([choice({"content": text}, None)])
        assert stream.content_chunk(text) == whole
        parsed = json.loads(whole.removeprefix("data: "))
        assert parsed["choices"][0]["delta"]["content"] == text and parsed["model"] == model
