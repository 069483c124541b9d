"""``inferscale eval margins``: first-token agreement split by prompt mode's own margin."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from evals.margins import BUCKETS, bucket, by_margin, main, margin

pytestmark = pytest.mark.unit


def row(mode: str, qa: int, first: int, top: dict[str, float], k: int = 5) -> dict[str, Any]:
    label = f"prompt k={k}" if mode == "prompt" else f"{mode} w=0 k={k}"
    return {"label": label, "mode": mode, "k": k, "sample": "conv-30", "qa_index": qa,
            "first_token": first, "first_token_top": top}  # fmt: skip


def test_a_margin_is_top_one_minus_top_two_and_falls_in_one_bucket() -> None:
    assert margin({"1": -0.2, "2": -0.7, "3": -3.0}) == pytest.approx(0.5)
    assert margin({"1": -0.2}) is None
    assert [bucket(m) for m in (0.0, 0.25, 0.49, 1.0, 2.0, 9.0)] == [
        BUCKETS[0], BUCKETS[1], BUCKETS[1], BUCKETS[3], BUCKETS[4], BUCKETS[4]
    ]  # fmt: skip


def test_agreement_is_counted_against_prompt_mode_at_the_same_k_per_margin() -> None:
    tied, sure = {"1": -0.70, "2": -0.71}, {"1": -0.05, "2": -4.0}
    rows = [
        row("prompt", 0, 1, tied), row("kv", 0, 2, {}),  # parted at a near tie
        row("prompt", 1, 1, sure), row("kv", 1, 1, {}),  # agreed where prompt mode was sure
        row("prompt", 2, 1, sure), row("kv", 2, 3, {}),  # parted where it was sure
        row("kv", 3, 1, {}),  # no prompt row for this question: left out
        row("prompt", 0, 7, sure, k=20), row("kv", 0, 7, {}, k=20),  # another k, another config
    ]  # fmt: skip
    summaries = {s["label"]: s for s in by_margin(rows)}
    kv = summaries["kv w=0 k=5"]
    assert kv["n"] == 3 and kv["agreement"] == pytest.approx(1 / 3)
    assert kv["buckets"][BUCKETS[0]] == {"n": 1, "agreement": 0.0}
    assert kv["buckets"][BUCKETS[-1]] == {"n": 2, "agreement": 0.5}
    assert kv["buckets"][BUCKETS[2]] == {"n": 0, "agreement": None}
    assert summaries["kv w=0 k=20"]["agreement"] == 1.0


def test_the_cli_reads_a_gzipped_run_and_writes_the_table(tmp_path: Path) -> None:
    run = {"rows": [row("prompt", 0, 1, {"1": -0.1, "2": -3.0}), row("kv", 0, 1, {})]}
    path = tmp_path / "eval.json.gz"
    path.write_bytes(gzip.compress(json.dumps(run).encode()))
    assert main([str(path), "--out", str(tmp_path / "margins.md")]) == 0
    table = (tmp_path / "margins.md").read_text()
    assert "| kv w=0 k=5 | 1 | 1.000 |" in table and "1, 1.000" in table
