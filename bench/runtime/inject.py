"""``inferscale bench inject``: the fused injection kernel's bandwidth against the memory bound.

    inferscale bench inject --out DIR [--ks 10,50,100] [--tokens 20] [--layers 32] [--kv-heads 8]
                            [--head 128] [--repeats 20] [--peak-gbs 4800]

k facts of ``--tokens`` tokens each (Llama-3.1-8B's KV shape by default: 32 layers, 8 KV heads
of 128; 20 tokens is a LoCoMo fact) are stored in a ``TieredKVPool``, all on its GPU tier, or all
on its host tier (pinned memory, read in place over PCIe by the kernel). Each repeat injects the
k facts at positions other than their capture's (every key re-rotated) into a FlashAttention
bf16 cache through the worker half's fused loader, layer by layer as vLLM's attention layers
ask, timed from ``start_load`` to the device synchronised after ``finish_step``: the median of
``--repeats`` after a warm-up. Bytes moved: the facts' K and V rows read from the pool (the same
are written into the cache); GB/s = bytes read / time, and its share of ``--peak-gbs`` (the
H200's HBM: 4.8 TB/s). Each cell also splits a repeat into the host's part (pinning, planning,
uploading, launching) and, on CUDA, the device's part alone (CUDA events, with the stream held
busy until the host has launched everything), so a slow figure says which side is slow. On a
CPU the kernel runs under Triton's interpreter, so the figures there say only that the bench
runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from gpu_runtime.connector.metadata import InjectionMetadata, LoadPiece, LoadRequest
from gpu_runtime.connector.worker import WorkerHalf
from gpu_runtime.kernels import inject
from gpu_runtime.layouts import CacheGeometry, FlashLogicalLayout
from gpu_runtime.pool.entries import Tier
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

TENANT = TenantId("bench-inject")
BLOCK = 16
PREAMBLE = 32  # prompt positions before the first fact
TIERS = ("gpu", "host")
HOLD_CYCLES = 10_000_000  # ~5 ms of GPU clock: longer than the host's part of any cell


@dataclass(frozen=True)
class Shape:
    layers: int
    kv_heads: int
    head: int
    tokens: int  # per fact

    @property
    def token_bytes(self) -> int:
        """One token's K and V over every layer, in bf16."""
        return self.layers * 2 * self.kv_heads * self.head * 2


@dataclass(frozen=True)
class Cell:
    tier: str
    k: int
    bytes_read: int
    ms_p50: float
    ms_min: float
    gbs: float  # bytes read / p50
    share_of_peak: float
    # Of each repeat: the host's part (``start_load`` to ``finish_step`` returning: pinning,
    # planning, uploading, launching) and the device's (CUDA events on the compute stream,
    # the first reached only after the host has launched everything: the kernels alone, and
    # for the host tier the PCIe reads). None on a CPU.
    host_ms_p50: float | None = None
    gpu_ms_p50: float | None = None
    gpu_gbs: float | None = None  # bytes read / the device's p50


def cos_sin(max_pos: int, rotary_dim: int, base: float = 500000.0) -> torch.Tensor:
    """[max_pos, rotary_dim] float32: cos then sin, as vLLM's rotary embedding caches them."""
    inv = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()


def _fact(shape: Shape, seed: int) -> FactKV:
    g = torch.Generator().manual_seed(seed)
    dims = (shape.layers, shape.tokens, shape.kv_heads, shape.head)  # [L, n, H, D]
    keys, values = torch.randn(*dims, generator=g), torch.randn(*dims, generator=g)
    return FactKV.build(keys.bfloat16(), values.bfloat16(), torch.arange(shape.tokens))


def measure(
    shape: Shape, k: int, tier: str, device: torch.device, repeats: int, peak_gbs: float
) -> Cell:
    """One cell: k facts on ``tier`` injected ``repeats`` times (after one warm-up)."""
    fact_bytes = shape.token_bytes * shape.tokens
    slab = shape.kv_heads * shape.head * 2 * BLOCK  # 16 token rows of one layer's K or V
    stored = 2 * k * fact_bytes  # generous: slabs round each fact up
    with tempfile.TemporaryDirectory() as disk:
        pool = TieredKVPool.create(Path(disk), stored, stored, slab)
        pool.bind_device(device)
        config = EncodingConfig("bench", 0, 1)
        keys = [FactKey.for_fact(TENANT, f"f{i}", 1, config) for i in range(k)]
        facts = [_fact(shape, i) for i in range(k)]
        pool.put_many(TENANT, list(zip(keys, facts, strict=True)))
        if tier == "host":
            pool.demote(TENANT, keys, Tier.HOST)
        on_gpu = pool.stats(TENANT)["gpu_entries"]
        if on_gpu != (k if tier == "gpu" else 0):
            raise RuntimeError(f"{on_gpu} of {k} facts on the GPU tier, for the {tier} cell")
        end = PREAMBLE + k * shape.tokens
        blocks = end // BLOCK + 1
        rotator = RopeRotator(cos_sin(end + 1, shape.head), shape.head, shape.head, True)
        layout = FlashLogicalLayout(
            CacheGeometry(shape.kv_heads, shape.head, BLOCK, torch.bfloat16)
        )
        half = WorkerHalf(pool, rotator, layout, fused=True)
        cache_shape = (blocks, shape.kv_heads, BLOCK, 2 * shape.head)  # [blocks, H, B, 2D]
        caches = {f"model.layers.{i}.self_attn.attn": torch.zeros(cache_shape,
                  dtype=torch.bfloat16, device=device) for i in range(shape.layers)}  # fmt: skip
        half.register(caches, "FLASH_ATTN")
        if half.fused is None:
            raise RuntimeError("the fused loader is not available here (Triton?)")
        pieces = tuple(
            LoadPiece(key, 0, shape.tokens, PREAMBLE + i * shape.tokens)
            for i, key in enumerate(keys)
        )
        load = LoadRequest("bench", TENANT, pieces, tuple(range(blocks)), BLOCK, PREAMBLE, end)
        meta = InjectionMetadata(loads=[load])
        times: list[float] = []
        host_times: list[float] = []
        for repeat in range(repeats + 1):  # the first one compiles and warms up
            total, host = _inject_once(half, meta, device)
            if repeat:
                times.append(total)
                host_times.append(host)
            pool.reclaim()  # the finished reads' pins
        gpu_times: list[float] = []
        for _ in range(repeats if device.type == "cuda" else 0):
            gpu_times.append(_device_part(half, meta, device))
            pool.reclaim()
        if pool.stats(TENANT)["gpu_entries"] != on_gpu:
            raise RuntimeError("host-tier facts were promoted: they must be read in place")
        # A kernel that moved nothing would time well: the last layer must hold the last
        # fact's values (not rotated) at its slots.
        last = torch.from_numpy(load.slots()[-shape.tokens :])
        _, values = layout.read(caches[half.layers[-1]], last.to(device))  # [n, H, D]
        if not torch.equal(values.cpu(), facts[-1].values[-1]):
            raise RuntimeError("the cache does not hold the injected values")
    read = k * fact_bytes
    p50 = statistics.median(times)
    gbs = read / (p50 / 1000) / 1e9
    gpu = statistics.median(gpu_times) if gpu_times else None
    return Cell(
        tier, k, read, p50, min(times), gbs, gbs / peak_gbs, statistics.median(host_times), gpu,
        read / (gpu / 1000) / 1e9 if gpu else None,
    )  # fmt: skip


def _inject_once(
    half: WorkerHalf, meta: InjectionMetadata, device: torch.device
) -> tuple[float, float]:
    """One injection as a step runs it: (ms to the device synchronised, ms of the host's part,
    ``start_load`` to ``finish_step`` returning: pinning, planning, uploading, launching)."""
    started = time.perf_counter()
    _inject_once_issued(half, meta)
    issued = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) * 1000, (issued - started) * 1000


def _device_part(half: WorkerHalf, meta: InjectionMetadata, device: torch.device) -> float:
    """ms of the device's work alone for one injection: the stream is held busy first, so
    the host has planned and launched every load before the first event is reached (the
    kernels, and for the host tier the PCIe reads; none of the host's time)."""
    torch.cuda.synchronize(device)
    begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))  # type: ignore[no-untyped-call]
    torch.cuda._sleep(HOLD_CYCLES)  # type: ignore[no-untyped-call]
    begin.record()
    _inject_once_issued(half, meta)
    held = not begin.query()  # type: ignore[no-untyped-call]
    end.record()
    torch.cuda.synchronize(device)
    if not held:
        raise RuntimeError("the hold ended before the host had launched the loads")
    return float(begin.elapsed_time(end))


def _inject_once_issued(half: WorkerHalf, meta: InjectionMetadata) -> None:
    half.start_load(meta)
    for name in half.layers:  # as vLLM's attention layers ask, in order
        half.wait_layer(name)
    half.finish_step()


def markdown(result: dict[str, object], cells: list[Cell]) -> str:
    lines = [
        f"### Fused injection on {result['device']} ({result['shape']})",
        "",
        "| tier | k | MB read | p50 ms (min) | GB/s | share of the memory bound "
        "| host part p50 ms | device part p50 ms | GB/s on the device |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for c in cells:
        lines.append(
            f"| {c.tier} | {c.k} | {c.bytes_read / 1e6:.1f} | {c.ms_p50:.3f} ({c.ms_min:.3f}) "
            f"| {c.gbs:.1f} | {c.share_of_peak:.1%} | {ms(c.host_ms_p50)} | {ms(c.gpu_ms_p50)} "
            f"| {ms(c.gpu_gbs, 1)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench inject")
    parser.add_argument("--ks", default="10,50,100")
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--tiers", default=",".join(TIERS))
    parser.add_argument("--peak-gbs", type=float, default=4800.0, help="HBM bandwidth (H200)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not inject.available():
        raise SystemExit("the fused kernel needs Triton")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = Shape(args.layers, args.kv_heads, args.head, args.tokens)
    cells = [
        measure(shape, k, tier, device, args.repeats, args.peak_gbs)
        for tier in args.tiers.split(",")
        for k in (int(x) for x in args.ks.split(","))
    ]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (interpreter)"
    result: dict[str, object] = {
        "device": name, "shape": asdict(shape), "peak_gbs": args.peak_gbs,
        "repeats": args.repeats, "cells": [asdict(c) for c in cells],
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "inject.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "inject.md").write_text(markdown(result, cells))
    print(markdown(result, cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
