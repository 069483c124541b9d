"""Hybrid injection's split: a count of facts, or a budget in tokens for the most relevant."""

from __future__ import annotations

import dataclasses

import pytest

from backend.services.chat import ChatRequest, MemoryMode, for_device, injected_count

pytestmark = pytest.mark.unit

LENGTHS = [12, 30, 9, 20]  # least to most relevant


def _request(mode: MemoryMode, recompute: int = 0, tokens: int | None = None) -> ChatRequest:
    return ChatRequest([("user", "q")], "u", mode, recompute=recompute, recompute_tokens=tokens)


def test_kv_injects_all_and_prompt_none() -> None:
    assert injected_count(_request(MemoryMode.KV, recompute=2, tokens=0), LENGTHS) == 4
    assert injected_count(_request(MemoryMode.PROMPT), LENGTHS) == 0
    assert injected_count(_request(MemoryMode.NONE), LENGTHS) == 0


def test_a_count_prefills_the_most_relevant() -> None:
    assert injected_count(_request(MemoryMode.HYBRID, recompute=2), LENGTHS) == 2
    assert injected_count(_request(MemoryMode.HYBRID, recompute=9), LENGTHS) == 0


@pytest.mark.parametrize(
    ("budget", "injected"),
    [(0, 4), (19, 4), (20, 3), (28, 3), (29, 2), (58, 2), (59, 1), (71, 0), (10_000, 0)],
)
def test_a_token_budget_prefills_the_most_relevant_that_fit(budget: int, injected: int) -> None:
    assert injected_count(_request(MemoryMode.HYBRID, tokens=budget), LENGTHS) == injected


def test_the_budget_stops_at_the_first_fact_that_does_not_fit() -> None:
    # 20 fits, then 9 would fit a budget of 30 but 30 (the next) does not: relevance order holds
    assert injected_count(_request(MemoryMode.HYBRID, tokens=30), LENGTHS) == 2


def test_on_a_gpu_the_default_is_the_gpu_budget_and_on_a_cpu_the_count() -> None:
    default = ChatRequest([("user", "q")], "u", MemoryMode.HYBRID, recompute=2,
                          gpu_recompute_tokens=19)  # fmt: skip
    assert injected_count(for_device(default, on_gpu=True), LENGTHS) == 4  # 20 > 19: none fits
    assert injected_count(for_device(default, on_gpu=False), LENGTHS) == 2  # r = 2
    wide = dataclasses.replace(default, gpu_recompute_tokens=71)
    assert injected_count(for_device(wide, on_gpu=True), LENGTHS) == 0  # all fit
    assert injected_count(for_device(wide, on_gpu=False), LENGTHS) == 2
    chosen = dataclasses.replace(default, gpu_recompute_tokens=None)  # the chat said r or a budget
    assert for_device(chosen, on_gpu=True) == chosen


def test_on_a_gpu_the_default_top_k_is_the_gpus() -> None:
    default = ChatRequest([("user", "q")], "u", MemoryMode.HYBRID, top_k=5, gpu_top_k=50)
    assert for_device(default, on_gpu=True).top_k == 50
    assert for_device(default, on_gpu=False).top_k == 5
    chosen = dataclasses.replace(default, top_k=7, gpu_top_k=None)  # the chat said its top_k
    assert for_device(chosen, on_gpu=True) == chosen
