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


def test_kv_storage_formats_are_part_of_the_encoding_identity() -> None:
    """Facts never cross dtypes: each cache dtype and fact format is an identity of its own (a
    backend seeing a new one re-encodes), and the defaults leave existing identities alone."""
    base = RuntimeSettings(dtype="bfloat16")
    fp8_facts = RuntimeSettings(dtype="bfloat16", fact_kv_dtype="fp8_e4m3")
    fp8_cache = RuntimeSettings(dtype="bfloat16", kv_cache_dtype="fp8")
    both = RuntimeSettings(dtype="float32", kv_cache_dtype="fp8", fact_kv_dtype="fp8_e4m3")
    name = base.resolved_model_path.name
    assert base.model_name == name
    assert fp8_facts.model_name == f"{name}-facts_fp8_e4m3"
    assert fp8_cache.model_name == f"{name}-kv_fp8"
    assert both.model_name == f"{name}-float32-kv_fp8-facts_fp8_e4m3"
    assert len({s.model_name for s in (base, fp8_facts, fp8_cache, both)}) == 4


def test_kv_dtypes_reach_vllm_and_the_connector(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_runtime.connector.options import ConnectorOptions
    from gpu_runtime.engine import connector_options, engine_arguments

    monkeypatch.setattr("gpu_runtime.engine.is_prepared", lambda path: True)
    settings = RuntimeSettings(dtype="float32", kv_cache_dtype="fp8_e4m3", fact_kv_dtype="fp8_e4m3")
    options = connector_options(settings)
    args = engine_arguments(settings, options)
    assert args["kv_cache_dtype"] == "fp8_e4m3"
    extra = args["kv_transfer_config"]["kv_connector_extra_config"]
    assert ConnectorOptions.from_extra_config(extra).fact_kv_dtype == "fp8_e4m3"


def test_unknown_kv_dtypes_are_refused() -> None:
    with pytest.raises(ValueError, match="fact_kv_dtype"):
        RuntimeSettings(fact_kv_dtype="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        RuntimeSettings(kv_cache_dtype="fp4")


def test_facts_are_fp8_by_default_on_cuda_over_a_16_bit_cache_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The measured default (docs/accuracy.md, "FP8 facts by default on CUDA"): FP8 facts on a
    GPU's bf16/fp16 cache; as captured on CPUs, over an FP8 cache, or when asked for."""
    from gpu_runtime.engine import connector_options

    def facts(on_gpu: bool, **given: str) -> tuple[str, str, str]:
        monkeypatch.setattr("gpu_runtime.config.cuda_available", lambda: on_gpu)
        settings = RuntimeSettings(**given)  # type: ignore[arg-type]
        name = settings.model_name.removeprefix(settings.resolved_model_path.name)
        return settings.resolved_fact_kv_dtype, connector_options(settings).fact_kv_dtype, name

    assert facts(True, dtype="bfloat16") == ("fp8_e4m3", "fp8_e4m3", "-facts_fp8_e4m3")
    assert facts(True, dtype="float16")[0] == "fp8_e4m3"
    assert facts(True, dtype="bfloat16", fact_kv_dtype="native") == ("native", "auto", "")
    assert facts(True, dtype="bfloat16", kv_cache_dtype="fp8")[0] == "native"
    assert facts(True, dtype="float32")[0] == "native"
    assert facts(False, dtype="bfloat16") == ("native", "auto", "")
    assert facts(False, dtype="float32", fact_kv_dtype="fp8_e4m3")[0] == "fp8_e4m3"


def test_asking_for_cuda_never_poisons_the_engine_cores_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's default check (cudaGetDeviceCount) marks every later fork unable to use CUDA,
    and vLLM forks its engine core: the check must go through NVML. Simulated here as a CUDA
    build with one device that NVML sees and a runtime check that must not be reached."""
    import torch

    def poisons_fork() -> int:
        raise AssertionError("cudaGetDeviceCount called: vLLM's forked engine core would fail")

    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 1)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", poisons_fork, raising=False)

    assert config.cuda_available() is True
