"""``inferscale eval compare``: two runs' rows paired by config and question."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.compare import compare, main

pytestmark = pytest.mark.unit


def row(label: str, qa: int, raw: str, first: int, top: dict[str, float], f1: float) -> dict:  # type: ignore[type-arg]
    return {"label": label, "sample": "conv-30", "qa_index": qa, "raw": raw, "first_token": first,
            "first_token_top": top, "f1": f1}  # fmt: skip


def run(rows: list[dict[str, Any]], pool: dict[str, int]) -> dict[str, Any]:
    return {"config": {"model": "m", "pool": pool}, "rows": rows}


def test_rows_pair_by_config_and_question() -> None:
    same, other = {"1": -0.1, "2": -2.5}, {"1": -2.5, "2": -0.1}
    pool = {"disk_facts": 2, "disk_bytes": 800}
    a = run([row("kv w=5 k=20", 0, "Paris", 1, same, 1.0),
             row("kv w=5 k=20", 1, "red", 1, same, 0.5),
             row("prompt k=20", 0, "Paris", 1, same, 1.0)], pool)  # fmt: skip
    b = run([row("kv w=5 k=20", 0, "Paris", 1, same, 1.0),
             row("kv w=5 k=20", 1, "blue", 2, other, 0.0),
             row("kv w=0 k=20", 0, "x", 1, same, 0.0)], pool)  # fmt: skip
    (kv,) = compare(a, b)  # only the label both runs have
    assert kv["label"] == "kv w=5 k=20" and kv["n"] == 2
    assert kv["identical_answers"] == 0.5 and kv["first_token_agreement"] == 0.5
    assert (
        kv["mean_first_token_kl"] > 0 and kv["max_first_token_kl"] == 2 * kv["mean_first_token_kl"]
    )
    assert kv["f1_a"] == 0.75 and kv["f1_b"] == 0.5


def test_command_writes_markdown_with_pool_bytes(tmp_path: Path) -> None:
    rows = [row("kv w=5 k=20", 0, "Paris", 1, {"1": -0.1}, 1.0)]
    for name, nbytes in (("a", 800), ("b", 400)):
        (tmp_path / f"{name}.json").write_text(
            json.dumps(run(rows, {"disk_facts": 2, "disk_bytes": nbytes}))
        )
    out = tmp_path / "cmp.md"
    assert (
        main(
            [
                str(tmp_path / "a.json"),
                str(tmp_path / "b.json"),
                "--names",
                "fp32,fp8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "| kv w=5 k=20 | 1 | 1.000 | 1.000 | 0.0000 |" in text
    pools = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| fp")}
    assert pools["| fp32"].endswith("| 400 |") and pools["| fp8"].endswith("| 200 |")  # per fact
