"""OpenAI-compatible chat completion payloads, plus InferScale's ``memory`` extension."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class MemoryOptions(BaseModel):
    top_k: int = Field(5, ge=0, le=200)
    mode: Literal["kv", "prompt", "none"] = "kv"


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # unknown OpenAI fields are accepted and ignored

    model: str = "inferscale"
    messages: list[ChatMessage] = Field(min_length=1, max_length=500)
    user: str | None = Field(default=None, max_length=200)
    max_tokens: int | None = Field(default=None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stream: bool = False
    n: int = Field(1, ge=1, le=1)
    memory: MemoryOptions = Field(default_factory=MemoryOptions)
