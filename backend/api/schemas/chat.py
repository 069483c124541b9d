"""OpenAI-compatible chat completion payloads, plus InferScale's ``memory`` extension."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.api.schemas.text import JsonDoc, Text
from backend.services.chat import ChatRun

# Far beyond any context; the prompt's token count against the context is the real limit.
MESSAGE_MAX_CHARS = 200_000


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: (
        Annotated[Text, Field(max_length=MESSAGE_MAX_CHARS)]
        | Annotated[list[JsonDoc], Field(max_length=100)]  # content parts
    )

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class MemoryOptions(BaseModel):
    top_k: int | None = Field(
        None,
        ge=0,
        le=200,
        description="how many of the user's memories are retrieved (default: the server's "
        "INFERSCALE_TOP_K, or INFERSCALE_TOP_K_GPU when its runtime serves on a GPU)",
    )
    mode: Literal["kv", "hybrid", "prompt", "none"] = Field(
        "hybrid",
        description="hybrid (the default): the least relevant retrieved facts' stored KV is "
        "injected and the `recompute` most relevant are prefilled as text after them; kv: every "
        "fact injected (the fastest); prompt: all pasted into the prompt; none: no memories "
        "(docs/accuracy.md)",
    )
    recompute: int | None = Field(
        None,
        ge=0,
        le=200,
        description="hybrid mode: how many of the most relevant facts are prefilled "
        "(default: the server's INFERSCALE_HYBRID_RECOMPUTE)",
    )
    recompute_tokens: int | None = Field(
        None,
        ge=0,
        le=32768,
        description="hybrid mode, instead of `recompute`: prefill the most relevant facts while "
        "their tokens fit this budget (default: the server's INFERSCALE_HYBRID_RECOMPUTE_TOKENS "
        "when set and `recompute` is not given)",
    )


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: Text = Field(min_length=1, max_length=64)
    description: Text | None = Field(default=None, max_length=2000)
    schema_: JsonDoc = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a 'json_schema' object")
        return self


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


StopText = Annotated[Text, Field(min_length=1, max_length=200)]


class ChatCompletionRequest(BaseModel):
    """OpenAI's fields are honoured or refused with a 400 that says so (``tools`` other than
    with ``tool_choice: "none"``, ``n`` > 1); fields OpenAI added that we do not know of are
    accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    model: Text = Field("inferscale", max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=500)
    user: Text | None = Field(default=None, max_length=200)
    max_tokens: int | None = Field(default=None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stream: bool = False
    n: int = Field(1, ge=1, le=128)  # above 1 refused with a 400 (one choice per request)
    stop: StopText | Annotated[list[StopText], Field(max_length=4)] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    stream_options: StreamOptions | None = None
    tools: Annotated[list[JsonDoc], Field(max_length=128)] | None = None
    tool_choice: Annotated[Text, Field(max_length=64)] | JsonDoc | None = None
    functions: Annotated[list[JsonDoc], Field(max_length=128)] | None = None  # OpenAI's legacy

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def structured(self) -> dict[str, Any] | None:
        """The runtime's ``sampling.structured`` for ``response_format``, if any."""
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"json_object": True}
        assert fmt.json_schema is not None
        return {"json_schema": fmt.json_schema.schema_}

    memory: MemoryOptions = Field(default_factory=MemoryOptions)


def inferscale_extension(run: ChatRun) -> dict[str, Any]:
    """The answer's ``inferscale`` field: the memories used, how they were served, timings."""
    return {
        "mode": run.request.mode.value,
        "memories": run.memories,
        "injected_tokens": run.injected_tokens,
        "cached_tokens": run.cached_tokens,
        "ttft_ms": run.ttft_ms,
        "engine_ttft_ms": run.engine_ttft_ms,
        "timings_ms": {name: round(ms, 3) for name, ms in run.timings_ms.items()},
        "query_embedded_on": run.query_embedded_on.value if run.query_embedded_on else None,
    }


def usage_of(run: ChatRun) -> dict[str, int]:
    """OpenAI's ``usage``."""
    return {
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "total_tokens": run.prompt_tokens + run.completion_tokens,
    }
