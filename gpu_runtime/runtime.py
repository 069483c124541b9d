"""InjectionRuntime: the engine, its KV store and the composer behind one tenant-typed API.

This is the interface the backend and the worker call (in-process for now; a service process
later wraps the same class). ``kv`` mode injects stored KV, ``prompt`` mode prefills the same
token ids (Mem0-style), ``none`` answers without memories.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpu_runtime.composer import ComposedPrompt, FactText, PromptComposer, Turn
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.connector.wire import encode_params
from gpu_runtime.engine import build_injection_llm
from gpu_runtime.errors import RuntimeErrorBase
from gpu_runtime.serving import EngineLoop
from gpu_runtime.store.base import KVStore
from gpu_runtime.store.memory import PoolBudget, store_named
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId, cache_salt

if TYPE_CHECKING:
    from vllm import LLM


class EncodingError(RuntimeErrorBase):
    """The engine ran but a fact's KV did not reach the store."""


DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the facts about the user when relevant."


class Mode(enum.StrEnum):
    KV = "kv"
    PROMPT = "prompt"
    NONE = "none"


@dataclass(frozen=True)
class FactToEncode:
    key: FactKey
    text: str
    window: tuple[Turn, ...] = ()  # turns preceding the fact, oldest first; the last w are used


@dataclass(frozen=True)
class StreamEvent:
    """Incremental output: the text and token ids produced since the previous event."""

    text: str
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    num_cached_tokens: int


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: tuple[int, ...]
    top_logprobs: tuple[dict[int, float], ...] = field(default=())
    num_cached_tokens: int = 0  # prompt tokens vLLM did not compute (prefix cache + injected)


class InjectionRuntime:
    def __init__(self, llm: LLM, store: KVStore, composer: PromptComposer, model_name: str) -> None:
        self.llm = llm
        self.loop = EngineLoop(llm, idle=store.reclaim)
        self._epochs: dict[TenantId, int] = {}
        self.store = store
        self.composer = composer
        self.model_name = model_name

    @classmethod
    def start(
        cls,
        settings: RuntimeSettings,
        *,
        store_name: str = "default",
        disk_root: str | None = None,
        pool: PoolBudget | None = None,
        scrub_blocks: bool = False,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        engine_args: dict[str, Any] | None = None,
    ) -> InjectionRuntime:
        store = store_named(store_name, disk_root, pool)  # before the engine: this process decides
        llm = build_injection_llm(
            settings,
            store_name=store_name,
            disk_root=disk_root,
            pool=pool,
            scrub_blocks=scrub_blocks,
            extra_engine_args=engine_args,
        )
        tokenizer = llm.get_tokenizer()
        composer = PromptComposer(
            lambda text: list(tokenizer.encode(text, add_special_tokens=False)), system_prompt
        )
        return cls(llm, store, composer, settings.model_name)

    def config(self, window: int, version: int = 1) -> EncodingConfig:
        return EncodingConfig(self.model_name, window, version)

    # ---- encoding ------------------------------------------------------------------------
    def encode(
        self, tenant: TenantId, config: EncodingConfig, facts: Sequence[FactToEncode]
    ) -> list[FactKey]:
        """Context-window encoding, all facts batched in one engine call: prefill
        [last w turns][fact] and keep only the fact's KV (keys un-rotated)."""
        prompts, params = [], []
        for fact in facts:
            if fact.key.tenant != tenant or fact.key.config != config:
                raise ValueError(f"{fact.key} does not belong to {tenant} under {config}")
            turns = self.composer.last_turns(fact.window, config.window)
            window = self.composer.window_tokens(turns)
            tokens = self.composer.fact_tokens(fact.text)
            prompts.append(window + tokens)
            params.append(
                encode_params(tenant, config, capture=(Span(fact.key, len(window), len(tokens)),))
            )
        salt = cache_salt(tenant, "encode|" + config.fingerprint())
        self._run(prompts, params, salt, max_tokens=1)
        missing = [f.key for f in facts if not self.store.contains_all(tenant, [f.key])]
        if missing:
            raise EncodingError(f"{len(missing)} of {len(facts)} facts were not captured")
        return [fact.key for fact in facts]

    def ensure_preamble(self, tenant: TenantId, prompt: ComposedPrompt) -> FactKey:
        """The preamble sits at position 0 with nothing before it: its KV is exact."""
        config = prompt.segment.config
        first = prompt.segment.spans[0]
        tokens = prompt.token_ids[: first.n_tokens]
        key = first.key
        if self.store.get(tenant, key) is None:
            params = encode_params(tenant, config, capture=(Span(key, 0, len(tokens)),))
            salt = cache_salt(tenant, "encode|" + config.fingerprint())
            self._run([tokens], [params], salt, max_tokens=1)
        return key

    # ---- serving -------------------------------------------------------------------------
    def compose(
        self,
        tenant: TenantId,
        config: EncodingConfig,
        facts: Sequence[FactText],
        query: str,
        history: Sequence[tuple[str, str]] = (),
        system: str | None = None,
    ) -> ComposedPrompt:
        return self.composer.compose(tenant, config, facts, history, query, system)

    def _request(self, tenant: TenantId, prompt: ComposedPrompt, mode: Mode) -> tuple[Any, str]:
        """(kv_transfer_params or None, cache salt) for a composed prompt in ``mode``."""
        if prompt.segment.tenant != tenant:
            raise ValueError("prompt composed for another tenant")
        config = prompt.segment.config
        if mode is Mode.KV:
            self.ensure_preamble(tenant, prompt)
            # Host-tier facts start their copy to the GPU tier now, overlapping admission,
            # scheduling and input preparation instead of the forward.
            self.store.prefetch(tenant, [span.key for span in prompt.segment.spans])
            params = encode_params(tenant, config, inject=prompt.segment.spans)
            return params, cache_salt(tenant, f"{config.fingerprint()}|{self._epoch(tenant)}")
        return None, cache_salt(tenant, f"prompt|{self._epoch(tenant)}")

    def _epoch(self, tenant: TenantId) -> str:
        return f"e{self._epochs.get(tenant, 0)}"

    def generate(
        self,
        tenant: TenantId,
        prompt: ComposedPrompt,
        mode: Mode,
        *,
        max_tokens: int = 64,
        logprobs: int | None = None,
    ) -> Completion:
        params, salt = self._request(tenant, prompt, mode)
        return self._run([prompt.token_ids], [params], salt, max_tokens, logprobs)[0]

    def stream(
        self,
        tenant: TenantId,
        prompt: ComposedPrompt,
        mode: Mode,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Iterator[StreamEvent]:
        """Tokens as the engine produces them (the first event marks time to first token)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params, salt = self._request(tenant, prompt, mode)
        sampling = SamplingParams(
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            max_tokens=max_tokens,
            extra_args={"kv_transfer_params": params} if params else None,
        )
        request = TokensPrompt(prompt_token_ids=list(prompt.token_ids), cache_salt=salt)
        sent_text, sent_tokens = 0, 0
        for output in self.loop.stream(request, sampling):
            best = output.outputs[0]
            yield StreamEvent(
                best.text[sent_text:],
                tuple(best.token_ids[sent_tokens:]),
                bool(output.finished),
                best.finish_reason,
                len(prompt.token_ids),
                int(output.num_cached_tokens or 0),
            )
            sent_text, sent_tokens = len(best.text), len(best.token_ids)

    def purge(self, tenant: TenantId, keys: Sequence[FactKey]) -> None:
        """Delete facts' KV from every tier and make the tenant's prefix-cache blocks, which may
        hold them, unreachable: serving salts carry a per-tenant epoch that this bumps."""
        for key in keys:
            self.store.delete(tenant, key)
        self.invalidate_prefix_cache(tenant)

    def invalidate_prefix_cache(self, tenant: TenantId) -> None:
        self._epochs[tenant] = self._epochs.get(tenant, 0) + 1

    def _run(
        self,
        prompts: Sequence[tuple[int, ...]],
        params: Sequence[dict[str, Any] | None],
        salt: str,
        max_tokens: int,
        logprobs: int | None = None,
    ) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sampling = [
            SamplingParams(
                temperature=0.0,
                max_tokens=max_tokens,
                logprobs=logprobs,
                extra_args={"kv_transfer_params": p} if p else None,
            )
            for p in params
        ]
        inputs: list[Any] = [
            TokensPrompt(prompt_token_ids=list(t), cache_salt=salt) for t in prompts
        ]
        outputs = self.loop.run_all(inputs, sampling)
        return [_completion(o) for o in outputs]

    def chat_messages(self, messages: Sequence[tuple[str, str]], max_tokens: int = 64) -> str:
        """A plain chat (no memories) rendered with the model's own chat template."""
        tokenizer = self.llm.get_tokenizer()
        conversation: list[Any] = [{"role": r, "content": c} for r, c in messages]
        text = tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=False
        )
        token_ids = tuple(tokenizer.encode(str(text), add_special_tokens=False))
        return self._run([token_ids], [None], "plain-chat", max_tokens)[0].text


def _completion(output: Any) -> Completion:
    best = output.outputs[0]
    top = tuple({tid: lp.logprob for tid, lp in step.items()} for step in (best.logprobs or []))
    return Completion(best.text, tuple(best.token_ids), top, int(output.num_cached_tokens or 0))
