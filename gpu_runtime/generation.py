"""What the runtime is asked and answers, free of vLLM and torch: a generation (the prompt's token
ids, the mode, the memory segment to inject, the sampling) and its stream of deltas and finish;
an encode job. The server translates the wire models into these; ``engine.sampling_params``
translates ``Sampling`` for vLLM."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gpu_runtime.types import MemorySegment, Span, TenantId


class Mode(enum.StrEnum):
    KV = "kv"
    PROMPT = "prompt"


@dataclass(frozen=True)
class Structured:
    """The output constrained by vLLM's structured outputs (xgrammar): a JSON schema (its JSON
    text) or any JSON object; ``compact``: no whitespace between tokens."""

    json_schema: str | None = None
    json_object: bool = False
    compact: bool = False


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    logprobs: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    prefix_cache: bool = True  # False: shares no prefix-cache blocks with any other request
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    structured: Structured | None = None
    detokenize: bool = True  # False: token ids only, the client decodes (protocol revision 6)

    @property
    def resumable(self) -> bool:
        """Whether a request can be stopped and resumed from its tokens with the outcome of
        running on (the fair gate's preemption): not when its sampling depends on what it
        generated before (a seed's random stream, penalties over the output, a grammar's
        state, stop strings across the cut)."""
        return (
            self.seed is None
            and not self.stop
            and self.structured is None
            and self.presence_penalty == 0.0
            and self.frequency_penalty == 0.0
        )


@dataclass(frozen=True)
class Generation:
    tenant: TenantId
    token_ids: tuple[int, ...]
    mode: Mode
    segment: MemorySegment | None = None  # kv mode: the spans to inject
    sampling: Sampling = field(default_factory=Sampling)
    weight: float = 1.0  # the tenant's share of the engine under contention (fairness.py)


@dataclass(frozen=True)
class Delta:
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[tuple[tuple[int, float], ...], ...] | None  # per token: (id, logprob)


@dataclass(frozen=True)
class Finish:
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # not computed: injected plus vLLM's prefix-cache hits
    injected_tokens: int
    engine_ttft_ms: float | None
    # The engine core's connector hook totals (ms, cumulative) when they are timed (profiling)
    scheduler_trace_ms: dict[str, float] | None = None


@dataclass(frozen=True)
class EncodeJob:
    """Prefill ``token_ids`` (``inject`` injected first, if any) and store ``capture``."""

    token_ids: tuple[int, ...]
    capture: tuple[Span, ...]
    inject: tuple[Span, ...] = ()
