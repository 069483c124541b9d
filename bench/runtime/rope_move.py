"""Chunked RoPE's cost on a request's facts: ``RopeRotator.move`` against the two-pass form it
replaced (every row rotated forwards and backwards, then one picked), side by side in one
process, after checking the two agree bit for bit.

    python -m bench.runtime.rope_move --out runs/rope       # SmolLM2's shape, 20 facts

Shape: ``layers`` x (``facts`` x ``tokens``) rows of ``kv_heads`` x ``head`` float32 keys, as the
worker re-rotates them when a request's facts land at new positions (the PyTorch path: vLLM-CPU,
and CUDA without the fused kernel).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpu_runtime.rope import RopeRotator


def two_pass_move(
    rotator: RopeRotator, keys: torch.Tensor, source: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """The form before c0f8065: both directions for every row, concatenated, then selected."""
    delta = target - source
    cos, sin = rotator.cos_sin_cache.index_select(0, delta.abs()).chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [n, 1, rotary_dim / 2]
    half = rotator.rotary_dim // 2

    def turn(s: torch.Tensor) -> torch.Tensor:
        x1, x2 = keys[..., :half], keys[..., half : rotator.rotary_dim]  # (neox pairs)
        out = torch.cat((x1 * cos - x2 * s, x2 * cos + x1 * s), dim=-1)
        return torch.cat((out, keys[..., rotator.rotary_dim :]), dim=-1)

    forward, backward = turn(sin), turn(-sin)
    return torch.where((delta >= 0)[:, None, None], forward, backward)


def rope_table(positions: int, rotary_dim: int, base: float = 10000.0) -> torch.Tensor:
    inv = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()  # [positions, rotary_dim]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    rotator = RopeRotator(rope_table(8192, args.head), args.head, args.head, is_neox_style=True)
    n = args.facts * args.tokens
    keys = torch.randn(args.layers * n, args.kv_heads, args.head)  # [L*n, H, D]
    source = torch.randint(0, 2048, (n,)).repeat(args.layers)  # [L*n]: each layer alike
    target = torch.randint(0, 4096, (n,)).repeat(args.layers)
    forms: dict[str, Callable[[], torch.Tensor]] = {
        "one_buffer": lambda: rotator.move(keys, source, target),
        "two_pass": lambda: two_pass_move(rotator, keys, source, target),
    }
    if not torch.equal(
        forms["one_buffer"]().view(torch.int32), forms["two_pass"]().view(torch.int32)
    ):
        raise RuntimeError("the two forms disagree: refusing to time them")
    times: dict[str, list[float]] = {name: [] for name in forms}
    for i in range(args.warmup + args.repeats):
        for name, form in forms.items():  # alternating, so drift hits both alike
            started = time.perf_counter()
            form()
            if i >= args.warmup:
                times[name].append((time.perf_counter() - started) * 1000)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "shape": {
            "layers": args.layers,
            "rows_per_layer": n,
            "kv_heads": args.kv_heads,
            "head": args.head,
        },
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "ms_median": medians,
        "speedup": medians["two_pass"] / medians["one_buffer"],
        "bitwise_equal": True,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runtime.rope_move")
    parser.add_argument("--layers", type=int, default=30)  # SmolLM2-135M
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head", type=int, default=64)
    parser.add_argument("--facts", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=20, help="per fact (LoCoMo's: 19.3)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rope_move.json").write_text(json.dumps(result, indent=1))
    ms = result["ms_median"]
    print(
        f"one buffer {ms['one_buffer']:.2f} ms, two passes {ms['two_pass']:.2f} ms "
        f"({result['speedup']:.2f}x), bitwise equal; wrote {out}/rope_move.json"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
