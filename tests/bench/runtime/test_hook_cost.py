"""The connector's per-request Python microbench (``bench/runtime/hook_cost.py``) runs its
paths over a real pool, durable index and catalog, warm and cold, so it cannot rot. No speed is
asserted."""

from __future__ import annotations

import pytest

from bench.runtime.hook_cost import measure

pytestmark = pytest.mark.unit


def test_every_path_is_timed_warm_and_cold() -> None:
    paths = measure(k=5, repeats=3)
    assert set(paths) == {
        "front_spans", "front_rows", "decode", "claim", "acquire_release", "take",
        "take_distinct", "plan", "plan_ahead", "plan_run",
    }  # fmt: skip
    for row in paths.values():
        assert row["warm_us"] > 0 and row["cold_us"] > 0
