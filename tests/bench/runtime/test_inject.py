"""``inferscale bench inject`` on a tiny shape (the kernel under Triton's interpreter): it runs
both tiers, counts the bytes it moves, and refuses to report a kernel that moved nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.runtime import inject as bench
from gpu_runtime.connector.fused import FusedLoader
from gpu_runtime.kernels import inject

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not inject.available(), reason="Triton is not installed"),
]

TINY = ["--ks", "2,3", "--tokens", "3", "--layers", "2", "--kv-heads", "2", "--head", "16"]


def test_both_tiers_are_measured_and_their_bytes_counted(tmp_path: Path) -> None:
    assert bench.main([*TINY, "--repeats", "1", "--out", str(tmp_path)]) == 0

    result = json.loads((tmp_path / "inject.json").read_text())
    cells = {(c["tier"], c["k"]): c for c in result["cells"]}
    assert set(cells) == {("gpu", 2), ("gpu", 3), ("host", 2), ("host", 3)}
    token_bytes = 2 * 2 * 2 * 16 * 2  # layers x (K, V) x heads x head x bf16
    for (_, k), cell in cells.items():
        assert cell["bytes_read"] == k * 3 * token_bytes
        assert cell["ms_p50"] > 0 and cell["gbs"] > 0
        assert 0 < cell["host_ms_p50"] <= cell["ms_p50"]  # the host's part of the same repeats
        assert cell["gpu_ms_p50"] is None  # no device to time on a CPU
    assert "| host | 3 |" in (tmp_path / "inject.md").read_text()


def test_a_kernel_that_moves_nothing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FusedLoader, "_run", lambda self, step, start, count: None)

    with pytest.raises(RuntimeError, match="does not hold the injected values"):
        bench.main([*TINY, "--repeats", "1", "--tiers", "gpu", "--out", str(tmp_path)])
