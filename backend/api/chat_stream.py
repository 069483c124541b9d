"""What every SSE chunk of one streamed chat completion repeats, rendered once.

A token's chunk differs from the next only in its text, so it is the JSON of a chunk with a
placeholder for the content, cut around it once per completion, and each token's JSON-escaped
text put between the two halves: the same bytes as ``json.dumps`` of the whole chunk (a test
holds it to that), without building and serialising a dict per token. Building the chunks was
13% of the API's CPU per chat (docs/benchmarks.md, "The API's CPU per chat")."""

from __future__ import annotations

import json
from typing import Any

from backend.api import openai_compat
from backend.api.schemas.chat import ChatCompletionRequest
from backend.runtime.client import EngineClient
from gpu_runtime.client import protocol as p

_PLACEHOLDER = "\x00content\x00"  # never a model's text: json.dumps escapes it as \u0000


def choice(delta: dict[str, Any], finish: str | None, logprobs: Any = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}


class ChatStream:
    """One completion's id, creation time and model, and its OpenAI streaming options."""

    def __init__(self, cid: str, created: int, model: str, body: ChatCompletionRequest) -> None:
        self.id, self.created, self.model = cid, created, model
        self.want_logprobs, self.top = body.logprobs, body.top_logprobs or 0
        self.usage_chunk = body.stream_options is not None and body.stream_options.include_usage
        template = self.chunk([choice({"content": _PLACEHOLDER}, None)])
        self._before, self._after = template.split(json.dumps(_PLACEHOLDER))

    def logprobs(self, engine: EngineClient, events: list[p.GenerateEvent]) -> Any:
        if not self.want_logprobs:
            return None
        ids = [t for e in events for t in e.token_ids]
        steps = [step for e in events for step in (e.logprobs or [])]
        content = openai_compat.logprobs_content(engine, ids, steps, self.top)
        return {"content": content, "refusal": None}

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": choices, **extra}  # fmt: skip
        return f"data: {json.dumps(body)}\n\n"

    def content_chunk(self, text: str) -> str:
        """``chunk([choice({"content": text}, None)])``, byte for byte."""
        return self._before + json.dumps(text) + self._after
