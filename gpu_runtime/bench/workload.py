"""Benchmark workload: real LoCoMo facts (their text and token lengths), encoded once.

Works with the real SmolLM2 (tokenizer included) or with a real-architecture model directory and
dummy weights (no tokenizer): then LoCoMo text is tokenized with SmolLM2's tokenizer when it is
prepared, and ids are folded into the model's vocabulary (lengths are what timing depends on).
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_runtime.connector.wire import encode_params
from gpu_runtime.serving import EngineLoop
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId, cache_salt

SYSTEM = "<|im_start|>system\nYou are a helpful assistant. Facts about the user:\n"


def locomo_facts(folder: Path, limit: int) -> list[str]:
    facts: list[str] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        conv = data.get("conversation", data)
        for key, value in conv.items():
            if key.endswith("_observation"):
                facts += [f"- {f[0]}\n" for per_speaker in value.values() for f in per_speaker]
    if not facts:
        raise FileNotFoundError(f"no LoCoMo observations under {folder}")
    return facts[:limit]


def locomo_windows(folder: Path, limit: int, window: int) -> list[tuple[list[str], str]]:
    """(the ``window`` turns before a fact's evidence turn, the fact) for LoCoMo observations."""
    samples: list[tuple[list[str], str]] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        conv = data.get("conversation", data)
        turns: list[str] = []
        where: dict[str, int] = {}
        numbers = sorted(
            int(k.split("_")[1]) for k, v in conv.items()
            if k.startswith("session_") and k.count("_") == 1 and isinstance(v, list)
        )  # fmt: skip
        for number in numbers:
            for turn in conv[f"session_{number}"]:
                where[str(turn.get("dia_id"))] = len(turns)
                turns.append(f"{turn.get('speaker')}: {turn.get('text', '')}\n")
        for number in numbers:
            for per_speaker in (conv.get(f"session_{number}_observation") or {}).values():
                for text, evidence, *_ in per_speaker:
                    ref = evidence[0] if isinstance(evidence, list) and evidence else evidence
                    end = where.get(str(ref), 0)
                    samples.append((turns[max(0, end - window) : end], f"- {text}\n"))
    return samples[:limit]


@dataclass
class Workload:
    llm: Any
    loop: EngineLoop
    tenant: TenantId
    config: EncodingConfig
    preamble: list[int]
    facts: list[list[int]]  # token ids per fact
    keys: list[FactKey]
    preamble_key: FactKey
    vocab: int
    rng: random.Random
    store: Any = None  # the engine's KV store: kv requests prefetch through it, as served

    @classmethod
    def build(
        cls,
        llm: Any,
        texts: list[str],
        tokenize: Any,
        seed: int = 0,
        loop: EngineLoop | None = None,
        store: Any = None,
    ) -> Workload:
        """``loop``: the engine's existing loop, if it has one (one loop may step an engine)."""
        vocab = int(llm.llm_engine.vllm_config.model_config.get_vocab_size())

        def ids(text: str) -> list[int]:
            return [t % vocab for t in tokenize(text)]

        tenant = TenantId(f"bench-{uuid.uuid4().hex[:6]}")
        config = EncodingConfig("bench", 0, 1)
        preamble = ids(SYSTEM)
        facts = [ids(t) for t in texts]
        keys = [FactKey.for_fact(tenant, f"f{i}", 1, config) for i in range(len(facts))]
        pre_key = FactKey.preamble(tenant, tuple(preamble), config)
        reclaim = store.reclaim if store is not None else None  # pins released while idle
        loop = loop or EngineLoop(llm, idle=reclaim)
        return cls(
            llm, loop, tenant, config, preamble, facts, keys, pre_key, vocab, random.Random(seed),
            store,
        )  # fmt: skip

    def sampling(self, max_tokens: int, params: dict[str, Any] | None) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            temperature=0.0,
            max_tokens=max_tokens,
            ignore_eos=True,
            detokenize=False,
            extra_args={"kv_transfer_params": params} if params else None,
        )

    def encode_all(self, batch: int = 64) -> None:
        """Each fact after the preamble (w=0), captured; the preamble itself at position 0."""
        from vllm.inputs import TokensPrompt

        salt = cache_salt(self.tenant, "encode")
        jobs: list[tuple[list[int], tuple[Span, ...]]] = [
            (self.preamble, (Span(self.preamble_key, 0, len(self.preamble)),))
        ]
        for key, fact in zip(self.keys, self.facts, strict=True):
            jobs.append((self.preamble + fact, (Span(key, len(self.preamble), len(fact)),)))
        for start in range(0, len(jobs), batch):
            chunk = jobs[start : start + batch]
            self.loop.run_all(
                [TokensPrompt(prompt_token_ids=p, cache_salt=salt) for p, _ in chunk],
                [
                    self.sampling(1, encode_params(self.tenant, self.config, capture=c))
                    for _, c in chunk
                ],
            )

    def query(self, n: int = 24) -> list[int]:
        return [self.rng.randrange(100, self.vocab - 100) for _ in range(n)]

    def prompt(self, fact_ids: list[int], query: list[int]) -> tuple[list[int], tuple[Span, ...]]:
        ids = list(self.preamble)
        spans = [Span(self.preamble_key, 0, len(ids))]
        for i in fact_ids:
            spans.append(Span(self.keys[i], len(ids), len(self.facts[i])))
            ids += self.facts[i]
        return ids + query, tuple(spans)
