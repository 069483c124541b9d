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


def _throughput_row(ceilings: dict[str, float] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "users": 100, "k": 50, "runtime_kv_requests_per_s": 150.0,
        "vllm_server_requests_per_s": 60.0, "ratio": 2.5,
    }  # fmt: skip
    if ceilings is not None:
        row["ceilings"] = {
            side: {"requests_per_s": rate, "over_peer": rate / 60.0, "ttft_ms": {"median": 40.0}}
            for side, rate in ceilings.items()
        }
    return row


def test_the_ceilings_are_set_against_the_peer() -> None:
    rows = [_throughput_row({"runtime_no_facts": 210.0, "runtime_free_kv": 180.0})]
    table = peer_table({"peer": {"ttft": [], "throughput": rows}})
    assert "| 100 | 50 | 150.0 | 60.0 | 2.50x |" in table
    assert "| 100 | runtime_no_facts | 210.0 | 3.50x | 40.0 |" in table
    assert "| 100 | runtime_free_kv | 180.0 | 3.00x | 40.0 |" in table


def test_a_run_without_ceilings_renders_no_ceiling_table() -> None:
    table = peer_table({"peer": {"ttft": [], "throughput": [_throughput_row(None)]}})
    assert "| 100 | 50 | 150.0 | 60.0 | 2.50x |" in table
    assert "Ceilings" not in table
