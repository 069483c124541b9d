"""The fused injection kernel (run by Triton's interpreter on CPU) against the PyTorch path.

Two FlashAttention-layout caches receive the same loads, one through ``WorkerHalf``'s PyTorch
gather/rotate/scatter, one through ``FusedLoader``: values must be bit-identical, keys equal to
within one bf16 rounding on a GPU (the kernel may fuse multiply-adds; under the interpreter they
are bit-identical) and bit-identical where a fact is injected at its capture positions. Facts
come from both arenas of a tiered pool, so the host tier is read in place, and pins are released
afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_runtime.connector.metadata import InjectionMetadata, LoadPiece, LoadRequest
from gpu_runtime.connector.worker import WorkerHalf
from gpu_runtime.kernels import inject
from gpu_runtime.layouts import CacheGeometry, FlashLogicalLayout
from gpu_runtime.pool.budget import PoolBudget
from gpu_runtime.pool.entries import Tier
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import dequantize, quantize
from gpu_runtime.types import EncodingConfig, FactKey, TenantId
from tests.gpu_runtime.test_rope import table

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not inject.available(), reason="Triton is not installed"),
]

CFG = EncodingConfig("m", 0, 1)
T = TenantId("t")
LAYERS, BLOCKS, BLOCK = 3, 12, 4


def fact(seed: int, n: int, heads: int, head: int, at: int) -> FactKV:
    g = torch.Generator().manual_seed(seed)
    shape = (LAYERS, n, heads, head)
    keys, values = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    return FactKV.build(keys.bfloat16(), values.bfloat16(), torch.arange(at, at + n))


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # cuda: on the H200


def caches(heads: int, head: int, device: str) -> dict[str, torch.Tensor]:
    shape = (BLOCKS, heads, BLOCK, 2 * head)
    return {
        f"model.layers.{i}.self_attn.attn": torch.zeros(shape, dtype=torch.bfloat16, device=device)
        for i in range(LAYERS)
    }


def worker(
    pool: TieredKVPool, rot: RopeRotator, heads: int, head: int, fused: bool, device: str = "cpu"
) -> WorkerHalf:
    layout = FlashLogicalLayout(CacheGeometry(heads, head, BLOCK, torch.bfloat16))
    half = WorkerHalf(pool, rot, layout, fused=fused)
    half.register(caches(heads, head, device), "FLASH_ATTN")
    return half


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layer_hooks", [True, False])  # False: as in a replayed FULL CUDA graph
@pytest.mark.parametrize(
    ("heads", "head", "rotary", "neox"), [(2, 16, 16, True), (3, 16, 8, False), (2, 8, 8, True)]
)
def test_fused_matches_pytorch_path_across_tiers(
    tmp_path: Path, heads: int, head: int, rotary: int, neox: bool, device: str, layer_hooks: bool
) -> None:
    row = heads * head * 2
    slab = row * 4  # 4 token rows per slab: every fact spans several, non-contiguous slabs
    pool = TieredKVPool.create(tmp_path, 6 * slab, 64 * slab, slab)
    pool.bind_device(torch.device(device))  # on cuda the host arena is pinned, read in place
    rot = RopeRotator(table(512, rotary), head, rotary, neox)
    lengths = {"a": 5, "b": 3, "c": 7}
    facts = {name: fact(i, n, heads, head, at=100 + 10 * i) for i, (name, n) in
             enumerate(lengths.items())}  # fmt: skip
    keys = {name: FactKey.for_fact(T, name, 1, CFG) for name in facts}
    for name, kv in facts.items():
        pool.put(T, keys[name], kv)
    on_gpu = pool.stats(T)["gpu_entries"]
    assert 0 < on_gpu < len(facts)  # both arenas take part

    # "a" lands later in the prompt, "b" exactly where it was captured, "c" earlier (delta < 0)
    pieces = (
        LoadPiece(keys["b"], 0, 3, position=110),
        LoadPiece(keys["a"], 1, 4, position=300),
        LoadPiece(keys["c"], 0, 7, position=20),
    )
    # a shuffled block table: the 14 loaded tokens' slots scatter over non-adjacent blocks
    table_ = tuple(
        int(b) for b in torch.randperm(BLOCKS, generator=torch.Generator().manual_seed(7))
    )
    load = LoadRequest("r1", T, pieces, table_, BLOCK, start=5, end=19)

    slow = worker(pool, rot, heads, head, False, device)
    fast = worker(pool, rot, heads, head, True, device)
    assert slow.fused is None and fast.fused is not None
    fast.start_load(InjectionMetadata(loads=[load]), layer_hooks)
    for name in fast.layers if layer_hooks else []:  # as vLLM's attention layers do, in order
        fast.wait_layer(name)
    fast.finish_step()
    if device == "cuda":
        torch.cuda.synchronize()
    pool.demote(T, [], Tier.HOST)  # planning a demotion first reclaims finished readers' pins
    stats = pool.stats(T)
    assert stats["pinned"] == 0  # every pin was released
    assert stats["gpu_entries"] == on_gpu  # host-tier facts were read in place, not promoted
    slow.start_load(InjectionMetadata(loads=[load]))  # (promotes host-tier facts as it reads)

    exact = torch.from_numpy(load.slots()[:3])  # fact "b": no rotation at all
    for name in slow.layers:
        a, b = slow._kv[name].cpu(), fast._kv[name].cpu()
        d = head
        assert torch.equal(a[..., d:], b[..., d:])  # values, and untouched slots, bit-identical
        ka, kb = a[..., :d].float(), b[..., :d].float()
        assert torch.allclose(ka, kb, rtol=2**-7, atol=1e-3)
        if device == "cpu":  # the interpreter: PyTorch's operations and roundings, one by one
            assert torch.equal(ka, kb)
        layout = FlashLogicalLayout(CacheGeometry(heads, head, BLOCK, torch.bfloat16))
        assert torch.equal(layout.read(a, exact)[0], layout.read(b, exact)[0])
        assert b.abs().sum() > 0


def test_fused_loader_falls_back_when_a_fact_is_gone(tmp_path: Path) -> None:
    heads, head = 2, 16
    slab = heads * head * 2 * 4
    pool = TieredKVPool.create(tmp_path, 4 * slab, 8 * slab, slab)
    rot = RopeRotator(table(64, head), head, head, True)
    key = FactKey.for_fact(T, "gone", 1, CFG)
    fast = worker(pool, rot, heads, head, True)
    assert fast.fused is not None
    load = LoadRequest("r", T, (LoadPiece(key, 0, 2, position=0),), (0,), BLOCK, 0, 2)
    assert fast.fused.start([load]) is False  # the worker then raises MissingKVError itself


def test_a_kernel_that_cannot_compile_leaves_the_pytorch_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heads, head = 2, 16
    slab = heads * head * 2 * 4
    pool = TieredKVPool.create(tmp_path, 4 * slab, 8 * slab, slab)
    rot = RopeRotator(table(64, head), head, head, True)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no compiler for this GPU")

    monkeypatch.setattr(inject, "launch", broken)
    assert worker(pool, rot, heads, head, True).fused is None


def small_pool(tmp_path: Path, heads: int, head: int) -> tuple[TieredKVPool, RopeRotator]:
    """16 slabs a tier of 4 token rows each, and a rotator over 64 positions."""
    slab = heads * head * 2 * 4
    pool = TieredKVPool.create(tmp_path, 16 * slab, 16 * slab, slab)
    return pool, RopeRotator(table(64, head), head, head, True)


def test_a_gone_fact_fails_only_its_request_and_reports_its_blocks(tmp_path: Path) -> None:
    """The PyTorch path writes the pieces before the gone fact, reports the blocks from the gone
    fact's block on (vLLM recomputes them) and tells the scheduler half the fact is gone."""
    heads, head = 2, 16
    pool, rot = small_pool(tmp_path, heads, head)
    here, gone = FactKey.for_fact(T, "here", 1, CFG), FactKey.for_fact(T, "gone", 1, CFG)
    pool.put(T, here, fact(1, 5, heads, head, at=0))
    half = worker(pool, rot, heads, head, False)
    table_ = (7, 3, 9, 1)
    pieces = (LoadPiece(here, 0, 5, position=0), LoadPiece(gone, 0, 4, position=5))
    failing = LoadRequest("r1", T, pieces, table_, BLOCK, start=0, end=9)
    fine = LoadRequest("r2", T, pieces[:1], (2, 4), BLOCK, start=0, end=5)
    half.start_load(InjectionMetadata(loads=[failing, fine]))
    assert half.take_failed_blocks() == {3, 9}  # positions 4..8: blocks 1 and 2 of r1
    report = half.take_report()
    assert report is not None and report.dropped == [gone]
    assert report.failed_loads == {"r1": 4}  # vLLM recomputes r1 from its block 1
    layout = FlashLogicalLayout(CacheGeometry(heads, head, BLOCK, torch.bfloat16))
    for blocks in (table_, (2, 4)):  # the found fact was written for both requests
        slots = torch.tensor([blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(5)])
        values = layout.read(half._kv[half.layers[0]], slots)[1]
        assert torch.equal(values, fact(1, 5, heads, head, at=0).values[0])
    assert half.take_failed_blocks() == set() and half.take_report() is None


def _as_fp8(kv: FactKV) -> FactKV:
    keys, key_scales = quantize(kv.keys)  # [L, n, H, D] e4m3, [L, n, H] float32
    values, value_scales = quantize(kv.values)
    return FactKV.build(keys, values, kv.positions, key_scales, value_scales)


def test_facts_stored_in_two_formats_load_in_one_request(tmp_path: Path) -> None:
    """Native and FP8 facts in one request: the fused kernel reads one format, so the step takes
    the PyTorch path, which converts each run of pieces on its own. Runtimes never write such a
    mix (the fact dtype is part of every key), but a store written by hand can hold one (the
    TP=3 FP8 engine test's does), and before, the kernel's plan raised and the PyTorch path
    refused it: either way the engine died."""
    heads, head = 2, 16
    slab = heads * head * 2 * 4
    pool = TieredKVPool.create(tmp_path, 16 * slab, 64 * slab, slab)
    rot = RopeRotator(table(512, head), head, head, True)
    native, fp8 = fact(1, 3, heads, head, at=0), _as_fp8(fact(2, 4, heads, head, at=40))
    keys = [FactKey.for_fact(T, name, 1, CFG) for name in ("native", "fp8", "native-2")]
    for key, kv in zip(keys, (native, fp8, native), strict=True):
        pool.put(T, key, kv)
    pieces = (
        LoadPiece(keys[0], 0, 3, position=0),
        LoadPiece(keys[1], 0, 4, position=3),
        LoadPiece(keys[2], 0, 3, position=7),
    )
    load = LoadRequest("r", T, pieces, tuple(range(BLOCKS)), BLOCK, start=0, end=10)
    fast = worker(pool, rot, heads, head, True)
    assert fast.fused is not None
    assert fast.fused.start([load]) is False  # not a format the kernel reads: nothing done

    fast.start_load(InjectionMetadata(loads=[load]))
    fast.finish_step()
    assert fast.take_failed_blocks() == set()
    layout = FlashLogicalLayout(CacheGeometry(heads, head, BLOCK, torch.bfloat16))
    slots = torch.from_numpy(load.slots())
    assert fp8.value_scales is not None
    wanted_values = torch.cat(
        [native.values, dequantize(fp8.values, fp8.value_scales).bfloat16(), native.values], dim=1
    )  # [L, 10, H, D]: each fact's values as stored, the FP8 one dequantized
    for layer, name in enumerate(fast.layers):
        k, v = layout.read(fast._kv[name], slots)  # [10, H, D] each
        assert torch.equal(v, wanted_values[layer])
        assert torch.equal(k[:3], native.keys[layer])  # at its capture positions: as stored


def test_smollm2s_rows_take_the_fused_path_once_slabs_hold_them_whole(tmp_path: Path) -> None:
    """3 KV heads of 64 (SmolLM2): a bf16 row is 384 bytes. The default 256 KiB slab does not
    hold a whole number of them, so the kernel was refused; the slab the connector now sizes
    for the model's rows (``PoolBudget.for_rows``) takes the fused path."""
    heads, head = 3, 64
    rot = RopeRotator(table(512, head), head, head, True)
    default = PoolBudget(1 << 22, 1 << 22, 1 << 18)
    for budget, fused in ((default, False), (default.for_rows((heads * head * 2, 0)), True)):
        root = tmp_path / str(budget.slab_bytes)
        pool = TieredKVPool.create(root, budget.gpu_bytes, budget.host_bytes, budget.slab_bytes)
        assert (worker(pool, rot, heads, head, fused=True).fused is not None) is fused


def test_a_fact_shorter_than_its_load_is_recomputed_not_read_past(tmp_path: Path) -> None:
    """A piece past its stored fact's end would read other slabs (another fact's, another
    tenant's): the fused loader leaves such a load to the PyTorch path, which has vLLM
    recompute from that fact on."""
    heads, head = 2, 16
    pool, rot = small_pool(tmp_path, heads, head)
    short, other = FactKey.for_fact(T, "short", 1, CFG), FactKey.for_fact(T, "other", 1, CFG)
    pool.put(T, short, fact(0, 3, heads, head, at=0))
    pool.put(T, other, fact(1, 8, heads, head, at=0))
    half = worker(pool, rot, heads, head, True)
    assert half.fused is not None
    pieces = (LoadPiece(short, 0, 5, position=0),)  # 5 claimed, 3 stored
    load = LoadRequest("r", T, pieces, (0, 1), BLOCK, 0, 5)
    assert half.fused.start([load]) is False
    assert half.fused.plans == {"declined": 1}
    assert pool.stats(T)["pinned"] == 0
    half.start_load(InjectionMetadata(loads=[load]))
    assert half._report.failed_loads == {"r": 0}  # recomputed from the short fact's block
