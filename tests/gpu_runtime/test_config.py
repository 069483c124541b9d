"""RuntimeSettings: the engine dtype and the encoding identity that follows from it."""

from __future__ import annotations

import pytest

from gpu_runtime import config
from gpu_runtime.config import RuntimeSettings

pytestmark = pytest.mark.unit


def test_explicit_dtype_is_kept_and_bf16_names_stay_plain() -> None:
    settings = RuntimeSettings(dtype="bfloat16")
    assert settings.resolved_dtype == "bfloat16"
    assert settings.model_name == settings.resolved_model_path.name


def test_other_dtypes_get_their_own_encoding_identity() -> None:
    settings = RuntimeSettings(dtype="float32")
    assert settings.model_name == f"{settings.resolved_model_path.name}-float32"


@pytest.mark.parametrize(("bf16_units", "expected"), [(True, "bfloat16"), (False, "float32")])
def test_auto_picks_bf16_only_where_the_cpu_has_bf16_units(
    monkeypatch: pytest.MonkeyPatch, bf16_units: bool, expected: str
) -> None:
    monkeypatch.setattr(config, "_cpu_has_bf16", lambda: bf16_units)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert RuntimeSettings(dtype="auto").resolved_dtype == expected
