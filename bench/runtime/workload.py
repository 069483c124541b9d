"""Benchmark workload: real LoCoMo facts (their text and token lengths), encoded once into the
runtime under one tenant.

With dummy weights the runtime serves a real tokenizer (``INFERSCALE_TOKENIZER_PATH``); ids are
folded into the model's vocabulary (lengths are what timing depends on).
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import fact_line
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId

SYSTEM = "<|im_start|>system\nYou are a helpful assistant. Facts about the user:\n"


def locomo_facts(folder: Path, limit: int) -> list[str]:
    facts: list[str] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        conv = data.get("conversation", data)
        for key, value in conv.items():
            if key.endswith("_observation"):
                facts += [fact_line(f[0]) for per_speaker in value.values() for f in per_speaker]
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
                    samples.append((turns[max(0, end - window) : end], fact_line(text)))
    return samples[:limit]


@dataclass
class Workload:
    client: RuntimeClient
    tenant: TenantId
    config: EncodingConfig
    preamble: list[int]
    facts: list[list[int]]  # token ids per fact
    keys: list[FactKey]
    preamble_key: FactKey
    vocab: int
    rng: random.Random

    @classmethod
    def build(cls, client: RuntimeClient, texts: list[str], seed: int = 0) -> Workload:
        model = client.model()
        tokens = client.composer().tokens
        vocab = model.vocab_size
        tenant = TenantId(f"bench-{uuid.uuid4().hex[:6]}")
        config = EncodingConfig(model.encoding_model, 0, 1)
        preamble = [t % vocab for t in tokens(SYSTEM)]
        facts = [[t % vocab for t in tokens(text)] for text in texts]
        keys = [FactKey.for_fact(tenant, f"f{i}", 1, config) for i in range(len(facts))]
        pre_key = FactKey.preamble(tenant, tuple(preamble), config)
        return cls(
            client, tenant, config, preamble, facts, keys, pre_key, vocab, random.Random(seed)
        )

    def ids(self, text: str) -> list[int]:
        return [t % self.vocab for t in self.client.composer().tokens(text)]

    def encode_all(self, batch: int = 64) -> None:
        """Each fact after the preamble (w=0), captured; the preamble itself at position 0."""
        jobs: list[tuple[list[int], Span]] = [
            (self.preamble, Span(self.preamble_key, 0, len(self.preamble)))
        ]
        for key, fact in zip(self.keys, self.facts, strict=True):
            jobs.append((self.preamble + fact, Span(key, len(self.preamble), len(fact))))
        for start in range(0, len(jobs), batch):
            chunk = jobs[start : start + batch]
            result = self.client.encode(
                p.EncodeRequest(
                    tenant=self.tenant.value,
                    window=0,
                    items=[
                        p.EncodeItemModel(token_ids=ids, capture=[p.span_model(span)])
                        for ids, span in chunk
                    ],
                )
            )
            if result.missing:
                raise RuntimeError(f"{len(result.missing)} facts were not stored")

    def query(self, n: int = 24) -> list[int]:
        return [self.rng.randrange(100, self.vocab - 100) for _ in range(n)]

    def prompt(self, fact_ids: list[int], query: list[int]) -> tuple[list[int], tuple[Span, ...]]:
        ids = list(self.preamble)
        spans = [Span(self.preamble_key, 0, len(ids))]
        for i in fact_ids:
            spans.append(Span(self.keys[i], len(ids), len(self.facts[i])))
            ids += self.facts[i]
        return ids + query, tuple(spans)

    def keys_request(self, keys: list[FactKey]) -> p.KeysRequest:
        return p.KeysRequest(tenant=self.tenant.value, keys=[p.key_model(k) for k in keys])
