"""The chunked-RoPE microbench on a tiny shape: it times both forms and refuses to time forms
that disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.runtime import rope_move
from gpu_runtime.rope import RopeRotator

pytestmark = pytest.mark.unit

TINY = ["--layers", "2", "--kv-heads", "2", "--head", "16", "--facts", "3", "--tokens", "4",
        "--repeats", "2", "--warmup", "1"]  # fmt: skip


def test_both_forms_are_timed_and_agree(tmp_path: Path) -> None:
    assert rope_move.main([*TINY, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "rope_move.json").read_text())
    assert result["bitwise_equal"] and result["shape"]["rows_per_layer"] == 12
    assert set(result["ms_median"]) == {"one_buffer", "two_pass"}
    assert all(ms > 0 for ms in result["ms_median"].values())


def test_forms_that_disagree_are_not_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    move = RopeRotator.move

    def off_by_a_bit(self: RopeRotator, *args: torch.Tensor) -> torch.Tensor:
        return move(self, *args) * (1 + 1e-6)

    monkeypatch.setattr(RopeRotator, "move", off_by_a_bit)
    with pytest.raises(RuntimeError, match="disagree"):
        rope_move.main([*TINY, "--out", str(tmp_path)])
