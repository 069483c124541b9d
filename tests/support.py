"""Plain helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.breaker import BreakerState, CircuitBreaker
from backend.core.paths import locomo_dir
from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import ComposedPrompt, EncodeItem, FactText, PromptComposer, Turn
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId

if TYPE_CHECKING:
    from gpu_runtime.store.fact_kv import FactKV

ADMIN_KEY = os.environ.get("INFERSCALE_ADMIN_KEY", "test-admin-key")
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SERVICE_TOKEN = "test-service-token-0123456789"


@dataclass(frozen=True)
class TenantHandle:
    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: tuple[int, ...]
    top_logprobs: tuple[dict[int, float], ...] = field(default=())
    cached_tokens: int = 0  # prompt tokens not computed: injected plus prefix-cache hits
    injected_tokens: int = 0


class EngineHarness:
    """What engine tests drive: the session's runtime service, through its own HTTP client
    (the one the backend uses), plus read access to the durable store it writes."""

    def __init__(self, client: RuntimeClient, kv_dir: str) -> None:
        from gpu_runtime.store.packed import PackedKVStore

        self.client = client
        self.model = client.model()
        self.composer: PromptComposer = client.composer()
        self.encoding_model = self.model.encoding_model
        self.block_size = self.model.block_size
        self.disk = PackedKVStore(Path(kv_dir), background_compaction=False)

    def config(self, window: int, version: int = 1) -> EncodingConfig:
        return EncodingConfig(self.encoding_model, window, version)

    def encode(
        self,
        tenant: TenantId,
        items: Sequence[tuple[Sequence[int], Sequence[Span]]],
        *,
        inject: Sequence[Span] = (),
        config: EncodingConfig | None = None,
    ) -> p.EncodeResult:
        """Prefill each (token ids, spans to keep); ``inject``: spans injected into every item."""
        segment = config or self.config(0)
        request = p.EncodeRequest(
            tenant=tenant.value,
            window=segment.window,
            version=segment.version,
            items=[
                p.EncodeItemModel(
                    token_ids=list(ids),
                    capture=[p.span_model(s) for s in spans],
                    inject=[p.span_model(s) for s in inject],
                )
                for ids, spans in items
            ],
        )
        return self.client.encode(request)

    def encode_facts(
        self, tenant: TenantId, config: EncodingConfig, facts: Sequence[tuple[FactKey, str]],
        turns: Sequence[Turn] = (),
    ) -> list[EncodeItem]:  # fmt: skip
        items = [self.composer.encode_item(k, t, turns, config.window) for k, t in facts]
        result = self.encode(tenant, [(i.token_ids, [i.span]) for i in items], config=config)
        assert not result.missing, result
        return items

    def run(
        self,
        tenant: TenantId,
        token_ids: Sequence[int],
        mode: str,
        segment: MemorySegment | None = None,
        *,
        max_tokens: int = 12,
        logprobs: int | None = 5,
        prefix_cache: bool = True,
    ) -> Completion:
        request = p.GenerateRequest(
            tenant=tenant.value,
            token_ids=list(token_ids),
            mode="kv" if mode == "kv" else "prompt",
            segment=p.segment_model(segment) if segment is not None else None,
            sampling=p.SamplingModel(
                max_tokens=max_tokens, logprobs=logprobs, prefix_cache=prefix_cache
            ),
        )
        events = list(self.client.generate(request))
        usage = events[-1].usage
        assert usage is not None
        return Completion(
            "".join(e.text for e in events),
            tuple(t for e in events for t in e.token_ids),
            tuple(dict(step) for e in events for step in (e.logprobs or [])),
            usage.cached_tokens,
            usage.injected_tokens,
        )

    def generate(
        self, tenant: TenantId, prompt: ComposedPrompt, mode: str, **kwargs: Any
    ) -> Completion:
        segment = prompt.segment if mode == "kv" else None
        return self.run(tenant, prompt.token_ids, mode, segment, **kwargs)

    def compose(
        self, tenant: TenantId, config: EncodingConfig, facts: Sequence[FactText], query: str
    ) -> ComposedPrompt:
        return self.composer.compose(tenant, config, facts, [], query)

    def stored(self, key: FactKey) -> FactKV | None:
        """The fact's KV as the runtime stored it, or ``None``."""
        return self.disk.get(key)

    def stats(self, tenant: TenantId | None = None) -> dict[str, Any]:
        return self.client.stats(tenant.value if tenant is not None else None).workers[0]

    def purge(self, tenant: TenantId, keys: Sequence[FactKey]) -> p.PurgeResult:
        return self.client.purge(
            p.PurgeRequest(tenant=tenant.value, keys=[p.key_model(k) for k in keys])
        )


def kv_disk() -> Any:
    """The durable store the session's runtime writes (``PackedKVStore``), opened from this
    process as another replica would: it follows the runtime's writes through the index."""
    from gpu_runtime.store.packed import PackedKVStore

    return PackedKVStore(Path(os.environ["INFERSCALE_KV_STORE_DIR"]), background_compaction=False)


def encoding_config() -> EncodingConfig:
    """The config the backend encodes under: its w and version, the runtime's model."""
    from backend.core.config import get_settings
    from backend.runtime.client import EngineClient

    return EngineClient(get_settings()).encoding_config()


def locomo_opening(target: Path, turns: int = 10, answerable_only: bool = False) -> Path:
    """The first turns of LoCoMo conv-30's session 1 and their facts, with its first questions or
    (``answerable_only``) every question whose evidence lies in those turns."""
    data = json.loads((locomo_dir() / "conv-30.json").read_text())

    def early(dia_id: str) -> bool:
        session, _, turn = dia_id.partition(":")
        return session == "D1" and turn.isdigit() and int(turn) <= turns

    kept = {k: v for k, v in data.items() if not k.startswith(("session_", "events_"))}
    kept["session_1_date_time"] = data["session_1_date_time"]
    kept["session_1"] = [t for t in data["session_1"] if early(t["dia_id"])]
    kept["session_1_observation"] = {
        s: [f for f in facts if early(f[1])] for s, facts in data["session_1_observation"].items()
    }
    kept["qa"] = (
        [q for q in data["qa"] if q["evidence"] and all(map(early, q["evidence"]))]
        if answerable_only
        else data["qa"][:4]
    )
    target.write_text(json.dumps(kept))
    return target


def breaker_state(breaker: CircuitBreaker) -> BreakerState:
    """A breaker's state read afresh (a call, so that type checkers do not carry an earlier
    assert on it over to the next)."""
    return breaker.state
