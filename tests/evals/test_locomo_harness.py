"""A tiny ``inferscale eval locomo`` run on the session's runtime: the harness end to end.

The input is real LoCoMo data cut down to its first 12 turns (5 facts) and the questions whose
evidence lies there; 3 of them (stratified: one temporal, one single-hop, one adversarial),
k=3, kv at w=0 and w=2, hybrid at w=2 with r=1 and r=3 and with token budgets of 0 and 10,000
(nothing fits, everything fits), and prompt mode, 6 new tokens each,
two questions in flight (about a minute on 2 CPU cores). This checks the harness and its
outputs, not answer quality or speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.locomo import EvalSettings, Mode, run_eval
from evals.report import write_outputs
from evals.scoring import CATEGORY_NAMES
from tests.support import EngineHarness, locomo_opening

pytestmark = pytest.mark.engine


def test_tiny_locomo_run_writes_scored_reports(runtime: EngineHarness, tmp_path: Path) -> None:
    path = locomo_opening(tmp_path / "conv-30-opening.json", turns=12, answerable_only=True)
    settings = EvalSettings(
        files=(path,),
        ks=(3,),
        windows=(0, 2),
        modes=(Mode.KV, Mode.HYBRID, Mode.PROMPT),
        recomputes=(1, 3),
        recompute_budgets=(0, 10_000),
        hybrid_ks=(3,),
        hybrid_windows=(2,),
        max_questions=3,
        max_tokens=6,
        progress_every=2,
        concurrency=2,
    )
    lines: list[str] = []
    result = run_eval(runtime.client, settings, log=lines.append)
    written = write_outputs(result, tmp_path / "out")

    assert {p.name for p in written} == {
        "eval.json", "eval.md", "f1_by_category.png", "f1_vs_recompute.png"
    }  # fmt: skip
    assert all(p.stat().st_size > 0 for p in written)
    assert json.loads((tmp_path / "out" / "eval.json").read_text())["runs"] == result["runs"]
    markdown = (tmp_path / "out" / "eval.md").read_text()
    assert "kv w=2 k=3" in markdown and "Fidelity" in markdown
    assert any("3/3 questions" in line for line in lines)

    rows: list[dict[str, Any]] = result["rows"]
    hybrids = ("hybrid w=2 r=1 k=3", "hybrid w=2 r=3 k=3")
    budgets = ("hybrid w=2 b=0 k=3", "hybrid w=2 b=10000 k=3")
    labels = {"prompt k=3", "kv w=0 k=3", "kv w=2 k=3", *hybrids, *budgets}
    assert {r["label"] for r in rows} == labels
    assert len(rows) == 7 * 3
    assert all(0.0 <= r["f1"] <= 1.0 for r in rows)
    assert all(r["first_token_top"] for r in rows)
    for run in result["runs"]:
        assert run["n"] == 3
        assert all(v is None or 0.0 <= v <= 1.0 for v in run["f1"].values())
    assert sum(result["config"]["questions_per_category"].values()) == 3
    assert set(result["config"]["questions_per_category"]) <= set(CATEGORY_NAMES.values())

    by_question: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_question.setdefault(r["qa_index"], {})[r["label"]] = r
    for same in by_question.values():
        prompt, kv0, kv2 = same["prompt k=3"], same["kv w=0 k=3"], same["kv w=2 k=3"]
        # the same retrieved facts and the very same prompt token ids; only the mode differs
        assert prompt["retrieved"] == kv0["retrieved"] == kv2["retrieved"]
        assert 1 <= len(prompt["retrieved"]) <= 3
        assert prompt["prompt_tokens"] == kv0["prompt_tokens"] == kv2["prompt_tokens"]
        assert kv0["cached_tokens"] > 0  # the facts' KV was injected, not computed
        # hybrid: the same prompt; r=1 injects all facts but the most relevant, r=3 nothing
        # (every retrieved fact prefilled: the preamble alone runs as prompt mode)
        r1, r3 = same[hybrids[0]], same[hybrids[1]]
        assert r1["prompt_tokens"] == r3["prompt_tokens"] == prompt["prompt_tokens"]
        assert kv2["injected_tokens"] > r1["injected_tokens"] > r3["injected_tokens"] == 0
        # a budget no fact fits prefills none (kv's split: the same request as kv w=2, so
        # vLLM's prefix cache may serve it); one every fact fits prefills all (r=3's split)
        none_fit, all_fit = same[budgets[0]], same[budgets[1]]
        assert (none_fit["prefilled"], all_fit["prefilled"]) == (0, len(prompt["retrieved"]))
        assert none_fit["prompt_tokens"] == all_fit["prompt_tokens"] == prompt["prompt_tokens"]
        assert all_fit["injected_tokens"] == 0 and r1["prefilled"] == 1
        assert prompt["injected_tokens"] == 0

    fidelity = {f["label"]: f for f in result["fidelity"]}
    assert set(fidelity) == {"kv w=0 k=3", "kv w=2 k=3", *hybrids, *budgets}
    assert fidelity[budgets[1]]["recompute_tokens"] == 10_000
    assert "| hybrid w=2 b=10000 k=3 |" in markdown
    for fid in fidelity.values():
        assert fid["n"] == 3
        low, high = fid["f1_delta_ci95"]
        assert low <= fid["f1_delta_vs_prompt"]["overall"] <= high
        assert 0.0 <= fid["identical_answers"]["overall"] <= 1.0
        assert 0.0 <= fid["first_token_agreement"]["overall"] <= 1.0
        assert fid["mean_first_token_kl"]["overall"] >= 0.0
