"""Compose prompt token ids as [preamble][fact_1..fact_k][history][query] plus its memory segment.

Every piece is tokenized on its own and concatenated, so that a fact's tokens are the same in
every prompt (its KV can then be reused) and ``prompt`` mode (Mem0-style: prefill everything) sees
exactly the token ids that ``kv`` mode injects. The markup is ChatML, SmolLM2's template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId

# text -> token ids, without special tokens added (the markup is written out explicitly)
Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class Turn:
    speaker: str
    text: str


@dataclass(frozen=True)
class FactText:
    key: FactKey
    text: str


@dataclass(frozen=True)
class ComposedPrompt:
    token_ids: tuple[int, ...]
    segment: MemorySegment  # preamble + facts, positions within token_ids


class PromptComposer:
    def __init__(self, encode: Encode, system_prompt: str) -> None:
        self._encode = encode
        self.system_prompt = system_prompt

    def tokens(self, text: str) -> tuple[int, ...]:
        return tuple(self._encode(text))

    def fact_tokens(self, text: str) -> tuple[int, ...]:
        return self.tokens(f"- {text.strip()}\n")

    def preamble_tokens(self, system: str | None = None) -> tuple[int, ...]:
        prompt = system or self.system_prompt
        return self.tokens(f"<|im_start|>system\n{prompt}\nFacts about the user:\n")

    @staticmethod
    def last_turns(turns: Sequence[Turn], window: int) -> Sequence[Turn]:
        """The ``window`` turns right before a fact (all of them if it has fewer)."""
        return turns[max(0, len(turns) - window) :] if window > 0 else ()

    def window_tokens(self, turns: Sequence[Turn]) -> tuple[int, ...]:
        """Context a fact is encoded after: its preceding turns, then the facts header."""
        lines = "".join(f"{t.speaker}: {t.text.strip()}\n" for t in turns)
        conversation = f"Conversation:\n{lines}" if turns else ""
        return self.tokens(
            f"<|im_start|>system\n{self.system_prompt}\n{conversation}Facts about the user:\n"
        )

    def compose(
        self,
        tenant: TenantId,
        config: EncodingConfig,
        facts: Sequence[FactText],
        history: Sequence[tuple[str, str]],
        query: str,
        system: str | None = None,
    ) -> ComposedPrompt:
        """``history``: (role, content) chat messages before ``query`` (role user/assistant);
        ``system`` replaces the default system prompt (its preamble KV is keyed by its tokens)."""
        preamble = self.preamble_tokens(system)
        ids = list(preamble)
        spans = [Span(FactKey.preamble(tenant, preamble, config), 0, len(preamble))]
        for fact in facts:
            tokens = self.fact_tokens(fact.text)
            spans.append(Span(fact.key, len(ids), len(tokens)))
            ids.extend(tokens)
        tail = "<|im_end|>\n"
        for role, content in history:
            tail += f"<|im_start|>{role}\n{content}<|im_end|>\n"
        tail += f"<|im_start|>user\n{query}<|im_end|>\n<|im_start|>assistant\n"
        ids.extend(self.tokens(tail))
        return ComposedPrompt(tuple(ids), MemorySegment(tenant, config, tuple(spans)))
