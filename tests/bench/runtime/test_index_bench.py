"""``inferscale bench index`` in miniature: both implementations measured on the same scenario,
and the report written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.runtime.index import main, measure

pytestmark = pytest.mark.unit


def test_measures_the_heap_and_the_sort_side_by_side() -> None:
    row = measure(per_tier=200, k=5, repeats=3)
    for name in ("heap", "sort"):
        for action in ("prefetch", "admit"):
            timing = row[name][action]
            assert 0 < timing["p50_ms"] <= timing["max_ms"]
    assert row["prefetch_speedup"] > 0 and row["admit_speedup"] > 0


def test_writes_json_and_markdown(tmp_path: Path) -> None:
    assert main(["--sizes", "100,200", "--k", "4", "--repeats", "2", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "index.json").read_text())
    assert [r["facts_per_tier"] for r in rows] == [100, 200]
    assert len((tmp_path / "index.md").read_text().strip().splitlines()) == 2 + 2  # head, rows
