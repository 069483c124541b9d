"""FP8 fact KV through the connector's worker half: the fused kernel (Triton's interpreter on
CPU) against the PyTorch path (``FactCodec``), into 16-bit caches (dequantized) and into an e4m3
FlashAttention cache kept as bytes (rows copied as they are in place at the layer's scale,
otherwise rotated in float32 and re-quantized); and the FP8 analogue of Theorem 3 at the worker
level: KV captured from an FP8 cache and injected back at its capture positions is the same
bytes, whichever path injects it, from whichever tier."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_runtime.connector.codec import CacheFormat, FactCodec
from gpu_runtime.connector.metadata import (
    CapturePiece,
    CaptureRequest,
    InjectionMetadata,
    LoadPiece,
    LoadRequest,
)
from gpu_runtime.connector.worker import WorkerHalf
from gpu_runtime.kernels import inject
from gpu_runtime.layouts import CacheGeometry, FlashLogicalLayout
from gpu_runtime.pool.entries import Tier
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import FactDType, layer_scales, quantize, quantize_at
from gpu_runtime.types import EncodingConfig, FactKey, TenantId
from tests.gpu_runtime.test_rope import table

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not inject.available(), reason="Triton is not installed"),
]

CFG = EncodingConfig("m-facts_fp8_e4m3", 0, 1)
T = TenantId("t")
E4M3 = torch.float8_e4m3fn
LAYERS, BLOCKS, BLOCK, HEADS, HEAD = 3, 12, 4, 2, 16
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # cuda: on the H200
LAYER_K = torch.tensor([0.05, 0.02, 0.11])  # an FP8 cache's per-layer scales
LAYER_V = torch.tensor([0.03, 0.5, 0.07])


def randn(seed: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(LAYERS, n, HEADS, HEAD, generator=g) * 3  # [L, n, H, D]


def row_scaled(seed: int, n: int, at: int) -> FactKV:
    """Stored as FP8 e4m3 with scales of its own per token and head."""
    (k, ks), (v, vs) = quantize(randn(seed, n)), quantize(randn(seed + 100, n))
    return FactKV.build(k, v, torch.arange(at, at + n), ks, vs)


def layer_scaled(seed: int, n: int, at: int) -> FactKV:
    """As captured from the FP8 cache: its bytes, the layer's scale in every row."""
    ks, vs = layer_scales(LAYER_K, n, HEADS), layer_scales(LAYER_V, n, HEADS)
    k = quantize_at(randn(seed, n) * 0.05, ks, E4M3)
    v = quantize_at(randn(seed + 100, n) * 0.05, vs, E4M3)
    return FactKV.build(k, v, torch.arange(at, at + n), ks, vs)


def worker(pool: TieredKVPool, fp8_cache: bool, fused: bool, device: str) -> WorkerHalf:
    rot = RopeRotator(table(512, HEAD), HEAD, HEAD, True)
    if fp8_cache:
        cache = CacheFormat(E4M3, LAYER_K.to(device), LAYER_V.to(device))
        storage = torch.uint8  # vLLM allocates FP8 caches as bytes
    else:
        cache, storage = CacheFormat(torch.bfloat16), torch.bfloat16
    layout = FlashLogicalLayout(CacheGeometry(HEADS, HEAD, BLOCK, cache.dtype))
    codec = FactCodec(cache, FactDType.FP8_E4M3, rot)
    half = WorkerHalf(pool, rot, layout, fused=fused, codec=codec)
    shape = (BLOCKS, HEADS, BLOCK, 2 * HEAD)
    half.register(
        {f"model.layers.{i}.self_attn.attn": torch.zeros(shape, dtype=storage, device=device)
         for i in range(LAYERS)},
        "FLASH_ATTN",
    )  # fmt: skip
    return half


def load_into(half: WorkerHalf, load: LoadRequest, layer_hooks: bool) -> None:
    half.start_load(InjectionMetadata(loads=[load]), layer_hooks)
    for name in half.layers if layer_hooks and half.fused is not None else []:
        half.wait_layer(name)
    half.finish_step()
    if half.device.type == "cuda":
        torch.cuda.synchronize()


def bytes_of(half: WorkerHalf) -> list[torch.Tensor]:
    return [half._kv[name].cpu().view(torch.uint8) for name in half.layers]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fp8_cache", [False, True])
@pytest.mark.parametrize("layer_hooks", [True, False])
def test_fused_matches_pytorch_path_with_fp8_facts(
    tmp_path: Path, device: str, fp8_cache: bool, layer_hooks: bool
) -> None:
    row = HEADS * HEAD  # one e4m3 row; its scales take 4 * HEADS bytes
    slab = row * 4  # facts span several, non-contiguous slabs, scales included
    pool = TieredKVPool.create(tmp_path, 12 * slab, 64 * slab, slab)
    pool.bind_device(torch.device(device))
    facts = {
        "a": layer_scaled(1, 5, at=100),  # moves later: re-rotated, re-quantized
        "b": layer_scaled(2, 3, at=110),  # in place at the layer's scale: its bytes
        "c": row_scaled(3, 7, at=120),  # scales of its own: dequantized / re-quantized
        "d": row_scaled(4, 4, at=2),  # in place, own scales
    }
    keys = {name: FactKey.for_fact(T, name, 1, CFG) for name in facts}
    for name, kv in facts.items():
        pool.put(T, keys[name], kv)
    on_gpu = pool.stats(T)["gpu_entries"]
    assert 0 < on_gpu < len(facts)  # both arenas take part
    pieces = (
        LoadPiece(keys["d"], 0, 4, position=2),
        LoadPiece(keys["b"], 0, 3, position=110),
        LoadPiece(keys["a"], 1, 4, position=300),
        LoadPiece(keys["c"], 0, 7, position=20),  # earlier than captured: delta < 0
    )
    table_ = tuple(
        int(b) for b in torch.randperm(BLOCKS, generator=torch.Generator().manual_seed(7))
    )
    load = LoadRequest("r1", T, pieces, table_, BLOCK, start=2, end=20)

    slow = worker(pool, fp8_cache, False, device)
    fast = worker(pool, fp8_cache, True, device)
    assert slow.fused is None and fast.fused is not None
    assert fast.fused.shape.scaled and fast.fused.shape.stored_dtype == E4M3
    load_into(fast, load, layer_hooks)
    pool.demote(T, [], Tier.HOST)  # reclaims the finished readers' pins
    assert pool.stats(T)["pinned"] == 0 and pool.stats(T)["gpu_entries"] == on_gpu
    load_into(slow, load, True)

    slots = torch.from_numpy(load.slots())
    in_place = torch.cat([slots[:4], slots[4:7]])  # "d" and "b"
    moved = slots[7:]
    layout = slow.layout
    for index, (a, b) in enumerate(zip(bytes_of(slow), bytes_of(fast), strict=True)):
        d = HEAD * (1 if fp8_cache else 2)  # bytes of one head's K in a token's row
        assert torch.equal(a[..., d:], b[..., d:])  # values, and untouched slots: same bytes
        assert b[..., d:].any()
        typed_a = a.view(torch.bfloat16) if not fp8_cache else a
        typed_b = b.view(torch.bfloat16) if not fp8_cache else b
        ka, _ = layout.read(typed_a, in_place)
        kb, _ = layout.read(typed_b, in_place)
        assert torch.equal(ka.view(torch.uint8), kb.view(torch.uint8))  # bit-exact in place
        ma, _ = layout.read(typed_a, moved)
        mb, _ = layout.read(typed_b, moved)
        wa, wb = ma.float(), mb.float()
        if device == "cpu":  # the interpreter does what PyTorch does, operation for operation
            assert torch.equal(wa, wb)
        else:  # a GPU may fuse multiply-adds: one rounding step apart at most
            step = 2.0**-3 if fp8_cache else 2.0**-7
            assert torch.allclose(wa, wb, rtol=step, atol=1e-6)
        if fp8_cache:  # the fact captured at the layer's scale, in place: its own bytes
            b_bytes = facts["b"].keys[index].view(torch.uint8)
            assert torch.equal(layout.read(a, slots[4:7])[0].view(torch.uint8), b_bytes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("tier", ["gpu", "host", "disk"])
def test_fp8_cache_capture_then_inject_in_place_is_bitwise(
    tmp_path: Path, device: str, fused: bool, tier: str
) -> None:
    """Theorem 3's FP8 analogue at the worker: what a prefill left in an e4m3 cache, captured
    and stored (GPU slabs, pinned host slabs or disk), is injected into scrubbed blocks of
    another request at the same positions as the very same bytes."""
    slab = HEADS * HEAD * 4
    pool = TieredKVPool.create(tmp_path, 64 * slab, 64 * slab, slab)
    pool.bind_device(torch.device(device))
    source = worker(pool, True, False, device)
    n, at = 9, 5  # positions 5..13: unaligned to the 4-token blocks
    prefilled = layer_scaled(11, n, at=at)  # what the forward wrote, at the layer's scales
    blocks = (6, 2, 9, 4)
    slots = [blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(at, at + n)]
    for layer, name in enumerate(source.layers):
        source.layout.write(
            source._kv[name], torch.tensor(slots), prefilled.keys[layer], prefilled.values[layer]
        )
    key = FactKey.for_fact(T, "captured", 1, CFG)
    piece = CapturePiece(key, 0, n, n, at, tuple(slots))
    source.capture([CaptureRequest("prefill", T, (piece,))])
    source.finish_step()
    report = source.take_report()
    assert report is not None and report.stored == [key]
    stored = pool.get(T, key)
    assert stored is not None and stored.scaled
    assert torch.equal(stored.keys.cpu().view(torch.uint8), prefilled.keys.view(torch.uint8))
    if tier != "gpu":
        pool.demote(T, [key], Tier(tier))
        assert pool.index.lookup(T, key).tier is Tier(tier)  # type: ignore[union-attr]

    target = worker(pool, True, fused, device)
    assert (target.fused is not None) == fused
    other = (3, 10, 7, 1)  # another request's blocks, scrubbed first
    load = LoadRequest("r2", T, (LoadPiece(key, 0, n, position=at),), other, BLOCK, at, at + n,
                       scrub_blocks=other)  # fmt: skip
    load_into(target, load, True)
    injected = torch.from_numpy(load.slots())
    for layer, name in enumerate(target.layers):
        k, v = target.layout.read(target._kv[name], injected)
        assert torch.equal(k.cpu().view(torch.uint8), prefilled.keys[layer].view(torch.uint8))
        assert torch.equal(v.cpu().view(torch.uint8), prefilled.values[layer].view(torch.uint8))
        scrubbed = target._kv[name].cpu().view(torch.uint8)[other[0], :, 0]  # position 0
        assert bool((scrubbed == 0x7E).all())  # e4m3 448: the scrub, left where nothing went
