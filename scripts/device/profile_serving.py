"""Where a request's time goes (device diagnostics, not a benchmark of record).

1. Steady state, after warm-up: TTFT medians of kv/prompt cells at k=0 and k=50 with the
   connector hooks timed.
1b. Phases (``--parts phases``): single requests stepped from this thread, round-robin over
   kv/prompt/prefix-cache cells, with vLLM's own stages wrapped in wall-clock timers (input
   processing, schedule, execute, sample, update, output) plus the forward's GPU time
   (CUDA events) and our hooks, as medians per cell: where a kv request's extra time goes.
2. The engine stepped directly from this thread (no EngineLoop hand-off) under torch.profiler
   (CPU + CUDA) for kv k=0 and kv k=50 requests: operator tables and a chrome trace.
3. 100 concurrent users, kv and prompt: time inside ``engine.step`` vs outside it, and a
   cProfile of the engine thread's steps.

    python scripts/device/profile_serving.py --model .device/models/llama-3.1-8b \\
        --load-format dummy --tokenizer .device/tokenizer --locomo .device/locomo --out $OUT/prof
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _direct_ttft(w: Any, mode: str, k: int) -> float:
    """One request added to and stepped on the engine from this thread; TTFT in ms."""
    from gpu_runtime.bench.measure import bench_request

    prompt, params, keys = bench_request(w, mode, list(range(k)), f"k{k}")
    engine = w.llm.llm_engine
    started = time.perf_counter()
    if keys and w.store is not None:
        w.store.prefetch(w.tenant, keys)
    rid = f"direct-{time.perf_counter_ns()}"
    engine.add_request(rid, prompt, w.sampling(1, params))
    while True:
        for out in engine.step():
            if out.request_id == rid and out.finished:
                return (time.perf_counter() - started) * 1000


def _steady(w: Any, repeats: int) -> dict[str, Any]:
    from gpu_runtime.bench.measure import summary, ttft_vs_k
    from gpu_runtime.connector import timing

    ttft_vs_k(w, [0, 50], repeats=3, warmup=2)  # compile, graphs, caches
    timing.reset()
    rows = ttft_vs_k(w, [0, 50], repeats=repeats, warmup=0)
    hooks = timing.snapshot()
    cells = [(m, k) for m in ("kv", "prompt") for k in (0, 50)]
    direct: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    for _ in range(repeats):
        for mode, k in direct:
            direct[(mode, k)].append(_direct_ttft(w, mode, k))
    return {
        "loop_ttft": {f"{r['mode']}{r['k']}": r["ttft_ms"] for r in rows},
        "direct_ttft": {f"{m}{k}": summary(v) for (m, k), v in direct.items()},
        "hooks_us": {h: round(v["mean_us"], 1) for h, v in hooks.items()},
    }


class _Phases:
    """Wall-clock time per labelled vLLM stage, summed per request (stages may nest)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.gpu_events: list[tuple[Any, Any]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            print(f"phases: no {label} ({type(owner).__name__}.{name})", flush=True)
            return

        def run(*args: Any, __f: Callable[..., Any] = original, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return __f(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started

        setattr(owner, name, run)

    def wrap_gpu(self, owner: Any, name: str) -> None:
        """CUDA events around ``owner.name``: the GPU time of what it enqueues."""
        import torch

        original = getattr(owner, name, None)
        if original is None:
            print(f"phases: no GPU timing ({type(owner).__module__}.{name})", flush=True)
            return

        def run(*args: Any, **kwargs: Any) -> Any:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                return original(*args, **kwargs)
            finally:
                end.record()
                self.gpu_events.append((start, end))

        setattr(owner, name, run)

    def take(self) -> dict[str, float]:
        """This request's ms per stage (GPU forward included), then reset."""
        out = {label: s * 1000 for label, s in self.seconds.items()}
        if self.gpu_events:
            out["gpu_execute"] = sum(a.elapsed_time(b) for a, b in self.gpu_events)
        self.seconds.clear()
        self.gpu_events.clear()
        return out


def _phases(w: Any, repeats: int) -> dict[str, Any]:
    """Per cell and stage, the median ms of single requests stepped from this thread."""
    from gpu_runtime.bench.measure import summary
    from gpu_runtime.connector import timing

    engine = w.llm.llm_engine
    core = engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    phases = _Phases()
    stages = [
        (engine, "add_request", "add_request"),
        (engine.input_processor, "process_inputs", "add.process_inputs"),
        (engine.output_processor, "add_request", "add.output_state"),
        (engine.engine_core, "add_request", "add.core"),
        (engine, "step", "step"),
        (core.scheduler, "schedule", "step.schedule"),
        (core.model_executor, "execute_model", "step.execute_model"),
        (core.model_executor, "sample_tokens", "step.sample_tokens"),
        (core.scheduler, "update_from_output", "step.update_from_output"),
        (engine.output_processor, "process_outputs", "step.process_outputs"),
        (runner, "add_requests", "exec.v2.add_requests"),
        (runner, "update_requests", "exec.v2.update_requests"),
        (runner, "prepare_inputs", "exec.v2.prepare_inputs"),
        (runner, "prepare_attn", "exec.v2.prepare_attn"),
        (runner, "sample", "sample.v2.sample"),
        (runner, "postprocess_sampled", "sample.v2.postprocess"),
        (runner, "_update_states", "exec.update_states"),
        (runner, "_prepare_inputs", "exec.prepare_inputs"),
        (runner, "_build_attention_metadata", "exec.attention_metadata"),
        (runner, "_model_forward", "exec.model_forward_cpu"),
        (runner, "_sample", "sample.sample"),
        (runner, "_bookkeeping_sync", "sample.bookkeeping_sync"),
    ]
    from gpu_runtime.connector import fused, scheduler
    from gpu_runtime.pool.tensors import TieredKVPool

    stages += [  # our own code inside the hooks (on the classes: every instance)
        (scheduler.SchedulerHalf, "num_new_matched_tokens", "ours.claimable"),
        (scheduler.SchedulerHalf, "build", "ours.build_meta"),
        (TieredKVPool, "prefetch", "ours.prefetch"),
        (TieredKVPool, "acquire", "ours.acquire"),
        (TieredKVPool, "release", "ours.release"),
        (fused.FusedLoader, "release_completed", "ours.release_completed"),
        (fused.FusedLoader, "_plan", "ours.plan"),
        (fused.FusedLoader, "_upload", "ours.plan.upload"),
        (fused.inject, "launch", "ours.kernel_launch"),
    ]
    for owner, name, label in stages:
        phases.wrap(owner, name, label)
    import torch

    if torch.cuda.is_available():
        phases.wrap_gpu(runner, "execute_model")  # loads + forward, enqueued
    cells = [("kv", 0), ("kv", 50), ("prompt_prefix_cache", 50), ("prompt", 0), ("prompt", 50)]
    per_cell: dict[str, dict[str, list[float]]] = {f"{m}{k}": defaultdict(list) for m, k in cells}
    for i in range(3 + repeats):
        for mode, k in cells:
            timing.reset()
            phases.take()
            ttft = _direct_ttft(w, mode, k)
            if i < 3:
                continue
            row = phases.take()
            row["ttft"] = ttft
            for hook, stats in timing.snapshot().items():
                row[f"hook.{hook}"] = stats["total_ms"]
            for label, ms in row.items():
                per_cell[f"{mode}{k}"][label].append(ms)
    return {
        cell: {label: round(summary(v)["median"], 3) for label, v in sorted(rows.items())}
        for cell, rows in per_cell.items()
    }


def _torch_profile(w: Any, out: Path) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    text = []
    cells = {"kv50": ("kv", 50), "kv0": ("kv", 0), "prompt50": ("prompt", 50)}
    for cell, (mode, k) in cells.items():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                _direct_ttft(w, mode, k)
            torch.cuda.synchronize()
        averages = prof.key_averages()
        text.append(f"==== {cell}: 5 requests, by self CPU time ====")
        text.append(averages.table(sort_by="self_cpu_time_total", row_limit=45))
        text.append(f"==== {cell}: by device time ====")
        text.append(averages.table(sort_by="self_cuda_time_total", row_limit=25))
        if cell == "kv50":
            prof.export_chrome_trace(str(out / "trace_kv50.json"))
    return "\n".join(text)


def _under_load(w: Any, users: int, k: int, max_tokens: int) -> tuple[dict[str, Any], str]:
    from gpu_runtime.bench.measure import bench_request, concurrently

    engine = w.loop._engine
    original = engine.step
    report: dict[str, Any] = {}
    text = []
    for mode in ("kv", "prompt"):
        prof = cProfile.Profile()
        inside: list[float] = []

        def step(prof: cProfile.Profile = prof, inside: list[float] = inside) -> Any:
            t = time.perf_counter()
            prof.enable()
            try:
                return original()
            finally:
                prof.disable()
                inside.append(time.perf_counter() - t)

        requests = []
        for u in range(users):
            fact_ids = sorted({(u * 7 + j) % len(w.facts) for j in range(k)})
            requests.append(bench_request(w, mode, fact_ids, f"u{u}"))
        engine.step = step
        started = time.perf_counter()
        _, ttfts = concurrently(w, requests, max_tokens)
        elapsed = time.perf_counter() - started
        engine.step = original
        report[mode] = {
            "elapsed_s": elapsed,
            "steps": len(inside),
            "inside_step_s": sum(inside),
            "step_ms_median": statistics.median(inside) * 1000,
            "ttft_ms_median": statistics.median(ttfts),
        }
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf).sort_stats("tottime")
        stats.print_stats(35)
        stats.sort_stats("cumulative").print_stats(35)
        title = f"==== {mode}, {users} users, k={k}, {max_tokens} tokens ===="
        text.append(f"{title}\n{buf.getvalue()}")
    return report, "\n".join(text)


def main() -> None:
    os.environ["INFERSCALE_TRACE_CONNECTOR"] = "1"
    from gpu_runtime.bench.session import add_engine_options, open_session

    parser = argparse.ArgumentParser()
    add_engine_options(parser)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--out", required=True)
    parser.add_argument("--parts", default="steady,phases,torch,load")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    session = open_session(args, 300)
    w = session.workload
    result: dict[str, Any] = dict(session.header)
    if "steady" in parts:
        result["steady"] = _steady(w, args.repeats)
        print(json.dumps(result["steady"], indent=1), flush=True)
    if "torch" in parts:
        (out / "torch_profile.txt").write_text(_torch_profile(w, out))
    if "load" in parts:
        _under_load(w, 10, 50, 32)  # warm the batched shapes
        load_report, load_text = _under_load(w, args.users, 50, 32)
        result["under_load"] = load_report
        print(json.dumps(load_report, indent=1), flush=True)
        (out / "cprofile_load.txt").write_text(load_text)
    if "phases" in parts:  # last: it wraps vLLM's methods for good
        result["phases_ms"] = _phases(w, args.repeats)
        print(json.dumps(result["phases_ms"], indent=1), flush=True)
    (out / "profile.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
