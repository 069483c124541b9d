"""OpenAI's chat API as its SDK sends it: which model names are served, which parameters are
refused (clearly, with a 400, rather than silently ignored), and logprobs in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backend.api.schemas.chat import ChatCompletionRequest
from backend.core.config import Settings
from backend.errors import BadRequestError, ModelNotFoundError
from backend.runtime.client import EngineClient
from gpu_runtime.client import protocol as p


def model_ids(engine: EngineClient, settings: Settings) -> list[str]:
    """The served model's own name first, then the configured aliases."""
    return list(dict.fromkeys([engine.model().model, *settings.model_alias_list]))


def served_model(engine: EngineClient, settings: Settings, asked: str) -> str:
    """The served model's name if ``asked`` names it, else OpenAI's 404 ``model_not_found``."""
    served = engine.model().model
    if asked in model_ids(engine, settings):
        return served
    raise ModelNotFoundError(
        f"The model '{asked}' does not exist; this server serves '{served}' "
        f"(GET /v1/models lists the names it answers to)"
    )


def refuse_unsupported(body: ChatCompletionRequest) -> None:
    """Parameters the runtime cannot honour are refused, never ignored."""
    if body.n > 1:
        raise BadRequestError("n > 1 is not supported: send one request per choice")
    calls_tools = bool(body.tools or body.functions) and body.tool_choice != "none"
    if calls_tools:
        raise BadRequestError(
            "tools (function calling) are not supported by this server; send the request "
            "without 'tools', or with tool_choice 'none'"
        )
    if body.top_logprobs is not None and not body.logprobs:
        raise BadRequestError("top_logprobs needs logprobs: true")
    if body.stream_options is not None and not body.stream:
        raise BadRequestError("stream_options is only allowed when stream is true")


def sampling(body: ChatCompletionRequest) -> p.SamplingModel:
    structured = body.structured()
    return p.SamplingModel(
        max_tokens=body.max_completion_tokens or body.max_tokens or 128,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=body.stop_list(),
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        structured=p.StructuredModel(**structured) if structured is not None else None,
    )


def _entry(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def logprobs_content(
    engine: EngineClient,
    token_ids: Sequence[int],
    logprobs: Sequence[Sequence[tuple[int, float]]] | None,
    top: int,
) -> list[dict[str, Any]]:
    """OpenAI's ``logprobs.content`` for generated tokens: each token with its logprob and its
    ``top`` most likely alternatives (the runtime sends the sampled token and the top ones)."""
    if not logprobs:
        return []
    steps = list(zip(token_ids, logprobs, strict=False))
    ranked = [sorted(pairs, key=lambda pair: -pair[1])[:top] for _, pairs in steps]
    ids = [tid for tid, _ in steps] + [tid for best in ranked for tid, _ in best]
    texts = dict(zip(ids, engine.token_texts(ids), strict=True))
    content = []
    for (tid, pairs), best in zip(steps, ranked, strict=True):
        # vLLM always sends the sampled token's own logprob; the fallback is never reached.
        own = dict(pairs).get(tid, min((lp for _, lp in pairs), default=0.0))
        entry = _entry(texts[tid], own)
        entry["top_logprobs"] = [_entry(texts[i], lp) for i, lp in best]
        content.append(entry)
    return content
