"""The peer report's TTFT table: kv against the prefix-cache floor, and old runs still render."""

from __future__ import annotations

from typing import Any

import pytest

from bench.runtime.peer import peer_table

pytestmark = pytest.mark.unit


def _result(sides: dict[str, float]) -> dict[str, Any]:
    ttft = [{"k": 50, "side": side, "ttft_ms": {"median": ms}} for side, ms in sides.items()]
    return {"peer": {"ttft": ttft, "throughput": []}}


def test_kv_is_set_against_free_kv() -> None:
    table = peer_table(_result({"runtime_prompt": 37.5, "runtime_kv": 21.4,
                                "runtime_free_kv": 20.9, "vllm_server": 34.1}))  # fmt: skip
    assert "| 50 | 37.50 | 34.10 | +3.40 | 21.40 | 20.90 | +0.50 |" in table


def test_a_run_without_free_kv_still_renders() -> None:
    table = peer_table(_result({"runtime_prompt": 37.5, "runtime_kv": 21.4, "vllm_server": 34.1}))
    assert "| 50 | 37.50 | 34.10 | +3.40 | 21.40 | - | - |" in table
