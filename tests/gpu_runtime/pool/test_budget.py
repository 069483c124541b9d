"""Slab sizes that hold a model's rows whole (the fused kernel reads each row from one slab)."""

from __future__ import annotations

import pytest

from gpu_runtime.pool.budget import SLAB_ALIGN, PoolBudget, whole_rows

DEFAULT = 1 << 18


@pytest.mark.parametrize(
    "rows",
    [
        (3 * 64 * 2, 0),  # SmolLM2 (3 KV heads of 64), bf16 facts: 384-byte rows
        (3 * 64 * 1, 3 * 4),  # SmolLM2, FP8 facts and their float32 scales
        (8 * 128 * 2, 0),  # Llama-3.1-8B, bf16
        (5 * 80 * 4, 0),  # an odd shape, float32
    ],
)
def test_a_slab_holds_whole_rows_of_every_size_and_stays_aligned(rows: tuple[int, int]) -> None:
    slab = whole_rows(DEFAULT, rows)
    assert slab <= DEFAULT and slab % SLAB_ALIGN == 0
    assert all(slab % row == 0 for row in rows if row)
    unit = max(row for row in rows)
    assert DEFAULT - slab < unit * SLAB_ALIGN  # the largest such size, not just any


def test_a_power_of_two_row_keeps_the_configured_slab() -> None:
    assert whole_rows(DEFAULT, (8 * 128 * 2, 0)) == DEFAULT


def test_a_smollm2_slab_is_682_rows() -> None:
    assert whole_rows(DEFAULT, (384, 0)) == 261_888  # 682 rows of 384; 768-byte units


def test_a_slab_smaller_than_one_unit_grows_to_it() -> None:
    assert whole_rows(100, (384, 0)) == 768


def test_the_budget_changes_only_its_slab() -> None:
    budget = PoolBudget(1 << 30, 1 << 31, DEFAULT, tenant_gpu_quota_bytes=1 << 20)
    fitted = budget.for_rows((384, 0))
    assert fitted == PoolBudget(1 << 30, 1 << 31, 261_888, tenant_gpu_quota_bytes=1 << 20)
