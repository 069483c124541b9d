"""Compose prompt token ids as [preamble][fact_1..fact_k][rest] plus the memory segment.

Callers order the facts least to most relevant, so the most relevant sit nearest the query; the
segment covers the preamble and the first facts (all of them in kv mode, the first k - r in
hybrid mode, where the r most relevant are prefilled as text after the injected ones).

The served model's own chat template renders the conversation (system prompt, history, query),
with a placeholder where the facts go inside the system message; the text before the placeholder
is the preamble, the text after it the rest. Every fact is tokenized on its own and placed in
between, so a fact's tokens are the same in every prompt (its KV can be reused anywhere) and
``prompt`` mode (Mem0-style: prefill everything) sees exactly the token ids ``kv`` mode injects.

Context-window encoding renders the same way: the fact's preceding turns go into the system
message before the facts header, and the fact follows the header.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_runtime.client.template import ChatTemplate, ChatTemplateError
from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId

# text -> token ids, without special tokens added (the template writes them out)
Encode = Callable[[str], Sequence[int]]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the facts about the user when relevant."
FACTS_HEADER = "Facts about the user:\n"
# What every fact is encoded after, past the header (never in a composed prompt). None by
# default: a line here made kv agree with prompt mode more often on the dev set, but a fact
# served first is then no longer its own prefill, and in hybrid mode that flipped an answer the
# API's test asks (docs/accuracy.md, "How a fact is written into the prompt"). Evaluations try
# lines (``inferscale eval locomo --fact-context``).
FACT_CONTEXT = ""
# Facts' token ids kept per composer (each ~30 tokens: ~1 KB a fact, ~32 MB when full): a
# retrieved fact is tokenized once, not on every chat that retrieves it (at k=50 that was most
# of composing). Keyed by tenant and text, so no tenant's chat is faster for another's facts.
FACT_TOKEN_CACHE = 32_768
# Preambles' token ids kept per composer, by system prompt: a tenant's app sends few distinct ones.
PREAMBLE_CACHE = 256


def fact_line(text: str) -> str:
    """A fact as the prompt writes it: one line, no list marker. With "- " before every fact,
    injected facts (each encoded as if first in the list) led the model to answer with another
    "- ..." line, a quarter of the dev set's kv answers (docs/accuracy.md, "How a fact is
    written into the prompt"); encoding version 2 on."""
    return f"{text.strip()}\n"


def hybrid_injected(lengths: Sequence[int], recompute: int, recompute_tokens: int | None) -> int:
    """Hybrid mode: how many of the facts (their token lengths, least to most relevant) are
    injected: all but the ``recompute`` most relevant, or, given ``recompute_tokens``, all but
    the most relevant that fit that budget together (a prefill costs tokens, not facts). The
    API's chat and the LoCoMo harness both count with this."""
    k = len(lengths)
    if recompute_tokens is None:
        return max(0, k - recompute)
    spent = prefilled = 0
    for length in reversed(lengths):  # most relevant first
        if spent + length > recompute_tokens:
            break
        spent += length
        prefilled += 1
    return k - prefilled


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


@dataclass(frozen=True)
class EncodeItem:
    """A fact to encode: ``token_ids`` = [window][fact], keep the KV of ``span`` only."""

    token_ids: tuple[int, ...]
    span: Span


class PromptComposer:
    def __init__(
        self, encode: Encode, template: ChatTemplate, system_prompt: str = DEFAULT_SYSTEM_PROMPT
    ) -> None:
        self._encode = encode
        self.template = template
        self.system_prompt = system_prompt
        self.fact_context = FACT_CONTEXT  # an evaluation may try another ("" for none)
        # Never in anyone's text: the template output is split where it appears.
        self._marker = f"<<inferscale-facts-{uuid.uuid4().hex}>>"
        self._tenant_fact_tokens = functools.lru_cache(maxsize=FACT_TOKEN_CACHE)(
            lambda _tenant, text: self.fact_tokens(text)
        )
        self._preambles = functools.lru_cache(maxsize=PREAMBLE_CACHE)(self.preamble_tokens)

    def tokens(self, text: str) -> tuple[int, ...]:
        return tuple(self._encode(text))

    def fact_tokens(self, text: str) -> tuple[int, ...]:
        return self.tokens(fact_line(text))

    def fact_length(self, tenant: TenantId, text: str) -> int:
        """Tokens the fact takes in a composed prompt (the tenant's cached tokenization)."""
        return len(self._tenant_fact_tokens(tenant.value, text))

    def _split(self, system: str, messages: Sequence[tuple[str, str]]) -> tuple[str, str]:
        """The rendered conversation before and after the facts' place in the system message."""
        rendered = self.template.render(
            [{"role": "system", "content": system + FACTS_HEADER + self._marker}]
            + [{"role": role, "content": content} for role, content in messages],
            add_generation_prompt=True,
        )
        if rendered.count(self._marker) != 1:
            raise ChatTemplateError("the chat template must render the system message verbatim")
        head, tail = rendered.split(self._marker)
        return head, tail

    def preamble_tokens(self, system: str | None = None) -> tuple[int, ...]:
        head, _ = self._split(f"{system or self.system_prompt}\n", [("user", "?")])
        return self.tokens(head)

    def preamble_key(
        self, tenant: TenantId, config: EncodingConfig, system: str | None = None
    ) -> FactKey:
        """The key of the preamble ``compose`` gives this system prompt, known before the facts
        are composed: the chat's prefetch hint names it, so the runtime pins it ahead with them."""
        return FactKey.preamble(tenant, self._preambles(system), config)

    @staticmethod
    def last_turns(turns: Sequence[Turn], window: int) -> Sequence[Turn]:
        """The ``window`` turns right before a fact (all of them if it has fewer)."""
        return turns[max(0, len(turns) - window) :] if window > 0 else ()

    def window_tokens(self, turns: Sequence[Turn]) -> tuple[int, ...]:
        """Context a fact is encoded after: its preceding turns, the facts header, then
        ``fact_context``."""
        lines = "".join(f"{t.speaker}: {t.text.strip()}\n" for t in turns)
        conversation = f"Conversation:\n{lines}" if turns else ""
        head, _ = self._split(f"{self.system_prompt}\n{conversation}", [("user", "?")])
        return self.tokens(head) + (self.tokens(self.fact_context) if self.fact_context else ())

    def encode_item(
        self, key: FactKey, text: str, turns: Sequence[Turn], window: int
    ) -> EncodeItem:
        """[the last ``window`` turns][fact], capturing the fact's tokens."""
        prefix = self.window_tokens(self.last_turns(turns, window))
        fact = self.fact_tokens(text)
        return EncodeItem(prefix + fact, Span(key, len(prefix), len(fact)))

    def compose(
        self,
        tenant: TenantId,
        config: EncodingConfig,
        facts: Sequence[FactText],
        history: Sequence[tuple[str, str]],
        query: str,
        system: str | None = None,
        injected: int | None = None,
    ) -> ComposedPrompt:
        """``history``: (role, content) chat messages before ``query`` (role user/assistant);
        ``system`` replaces the default system prompt (its preamble KV is keyed by its tokens).

        ``injected``: how many of ``facts``, from the first, the memory segment covers (all by
        default). The others follow them as text and are prefilled, attending to every injected
        fact as in prompt mode (hybrid injection). The token ids never depend on it."""
        count = len(facts) if injected is None else injected
        if not 0 <= count <= len(facts):
            raise ValueError(f"injected={injected} outside 0..{len(facts)} facts")
        head, tail = self._split(f"{system or self.system_prompt}\n", [*history, ("user", query)])
        preamble = self.tokens(head)
        ids = list(preamble)
        spans = [Span(FactKey.preamble(tenant, preamble, config), 0, len(preamble))]
        for i, fact in enumerate(facts):
            tokens: tuple[int, ...] = self._tenant_fact_tokens(tenant.value, fact.text)
            if i < count:
                spans.append(Span(fact.key, len(ids), len(tokens)))
            ids.extend(tokens)
        ids.extend(self.tokens(tail))
        return ComposedPrompt(tuple(ids), MemorySegment(tenant, config, tuple(spans)))
