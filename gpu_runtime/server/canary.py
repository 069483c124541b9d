"""The fidelity canary: at start, does injected KV behave like prompt mode on the served model?

Start-up already verifies the cache layout and the RoPE tables, but nothing else checks that
facts encoded apart and injected re-rotated make the served model answer as it would with the
facts in its prompt (a peer's users found re-RoPE silently broken for some architectures). So
once the engine is up, a fixed probe goes through both modes, exactly as a chat does (the
client's composer, each fact encoded after nothing, re-rotated to its place): three facts, one
of them a code the question asks the model to copy. The canary fails when the first token's
top-5 logprobs of the two modes differ by more than ``threshold`` nats anywhere, or their greedy
tokens differ. The margin is measured (docs/accuracy.md, "The fidelity canary").

A failed canary is not a crash: the runtime keeps serving, kv and hybrid requests are
prefilled as prompt mode instead, and the verdict is in the log, ``/readyz`` and ``/v1/model``
(the API's readiness and the dashboard show it).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass

from gpu_runtime.client.composer import FactText, PromptComposer
from gpu_runtime.client.template import ChatTemplate
from gpu_runtime.client.tokenizer import TextTokenizer
from gpu_runtime.generation import Delta, EncodeJob, Generation, Mode, Sampling
from gpu_runtime.runtime import InjectionRuntime
from gpu_runtime.server.assets import TokenizerAssets
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

logger = logging.getLogger(__name__)

PROBE_FACTS = (
    "The user's dog is a beagle named Biscuit.",
    "The user's locker code is 4719.",
    "The user lives in Lisbon and works as a nurse.",
)
PROBE_QUERY = "What is my locker code? Answer with the code only."
TOP = 5


@dataclass(frozen=True)
class CanaryResult:
    passed: bool
    divergence_nats: float  # the largest first-token logprob difference (``divergence``)
    threshold: float
    prompt_token: int
    kv_token: int
    seconds: float
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def _first_token(runtime: InjectionRuntime, request: Generation) -> dict[int, float]:
    """The first generated token's top logprobs (token id -> logprob)."""
    async for event in runtime.generate(request):
        if isinstance(event, Delta) and event.logprobs:
            return dict(event.logprobs[0])
    raise RuntimeError("the probe produced no token")


async def run_canary(
    runtime: InjectionRuntime, assets: TokenizerAssets, threshold: float
) -> CanaryResult:
    started = time.perf_counter()
    composer = PromptComposer(
        TextTokenizer(assets.tokenizer_json).encode,
        ChatTemplate(assets.chat_template, assets.special_tokens),
    )
    tenant = TenantId(f"__canary__{uuid.uuid4().hex[:12]}")  # no API tenant id looks like it
    config = EncodingConfig(runtime.encoding_model, 0, 1)
    facts = [
        FactText(FactKey.for_fact(tenant, f"canary-{i}", 1, config), text)
        for i, text in enumerate(PROBE_FACTS)
    ]
    try:
        items = [composer.encode_item(f.key, f.text, [], 0) for f in facts]
        jobs = [EncodeJob(tuple(i.token_ids), (i.span,)) for i in items]
        _, missing = await runtime.encode(tenant, config, jobs)
        if missing:
            raise RuntimeError(f"{len(missing)} probe facts were not stored")
        prompt = composer.compose(tenant, config, facts, [], PROBE_QUERY, injected=len(facts))
        sampling = Sampling(max_tokens=1, logprobs=TOP, prefix_cache=False)
        tokens = tuple(prompt.token_ids)
        reference = await _first_token(
            runtime, Generation(tenant, tokens, Mode.PROMPT, None, sampling)
        )
        injected = await _first_token(
            runtime, Generation(tenant, tokens, Mode.KV, prompt.segment, sampling)
        )
    finally:
        await runtime.purge_tenant(tenant)
    wanted = max(reference, key=lambda t: reference[t])
    chosen = max(injected, key=lambda t: injected[t])
    gap = divergence(reference, injected)
    passed = gap <= threshold and chosen == wanted
    detail = (
        f"first-token top-{TOP} logprobs of kv and prompt mode differ by up to {gap:.3f} nats "
        f"(threshold {threshold}); greedy token {'agrees' if chosen == wanted else 'differs'}"
    )
    return CanaryResult(
        passed, gap, threshold, wanted, chosen, time.perf_counter() - started, detail
    )


def divergence(a: dict[int, float], b: dict[int, float]) -> float:
    """The largest logprob difference over both top-k sets. A token in one set only counts
    against the other side's k-th logprob (its own is at most that): a lower bound there."""
    floor_a, floor_b = min(a.values()), min(b.values())
    return max(abs(a.get(t, floor_a) - b.get(t, floor_b)) for t in set(a) | set(b))
