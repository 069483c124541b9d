"""A tiny run of the store benchmark, through its command line, so it cannot rot (no speed is
asserted here: the ratios live in docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.runtime.cli import main

pytestmark = pytest.mark.unit


def test_the_store_benchmark_measures_both_stores_on_the_same_facts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["store", "--facts", "6", "--tokens", "3", "--batch", "4", "--repeats", "1"]
    assert main([*args, "--shapes", "smollm2-135m", "--dir", str(tmp_path), "--out", str(out)]) == 0
    result = json.loads((out / "store.json").read_text())
    (row,) = result["shapes"]
    assert row["facts"] == 6 and row["tokens_mean"] == 3
    files, packed = row["stores"]["file-per-fact"], row["stores"]["packed"]
    for rates in (files, packed):
        assert all(rates[k] > 0 for k in ("write_one", "write_batch", "read_cold", "delete"))
    assert files["files"] == 6 and packed["files"] < 6  # a file per fact vs segments + index
    assert packed["read_cold_sha256"] > 0 and "read_cold_sha256" not in files
    assert "| packed / file |" in (out / "store.md").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the stores' files are removed
