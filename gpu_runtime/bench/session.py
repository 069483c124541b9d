"""A benchmark session: the engine with the InferScale connector, its pool and the LoCoMo workload,
started from command-line options shared by ``inferscale bench`` and the device profiler."""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_runtime.bench.workload import Workload, locomo_facts


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model directory (default: the prepared SmolLM2)")
    parser.add_argument("--load-format", default="auto", help="'dummy' for real-shape timing")
    parser.add_argument("--tokenizer", help="tokenizer directory for LoCoMo text (dummy models)")
    parser.add_argument("--locomo", help="LoCoMo folder (default ../shared/data/locomo)")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument("--gpu-pool-gib", type=float, default=4.0, help="KV pool GPU tier")
    parser.add_argument("--host-pool-gib", type=float, default=4.0, help="KV pool host tier")
    parser.add_argument(
        "--cudagraph-mode",
        help="vLLM CUDA graph mode (default: vLLM's, FULL_AND_PIECEWISE); FULL replays whole "
        "graphs for prefills too, captured up to --max-capture-tokens",
    )
    parser.add_argument("--max-capture-tokens", type=int, help="largest CUDA graph batch")


@dataclass
class Session:
    llm: Any
    workload: Workload
    pool: Any  # the connector's TieredKVPool
    locomo: Path
    tokenize: Any  # text -> token ids (before folding into the model's vocabulary)
    header: dict[str, Any]  # what every report states about the run


def open_session(args: argparse.Namespace, facts: int) -> Session:
    """Starts the engine and encodes ``facts`` LoCoMo observations (w=0) into its pool."""
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.engine import build_injection_llm
    from gpu_runtime.store.memory import PoolBudget, store_named

    settings = RuntimeSettings(max_model_len=args.max_model_len, enforce_eager=args.enforce_eager)
    engine_args: dict[str, Any] = {"load_format": args.load_format, "max_num_seqs": 256}
    if args.load_format == "dummy":
        engine_args["skip_tokenizer_init"] = True
    graphs = {
        "cudagraph_mode": args.cudagraph_mode,
        "max_cudagraph_capture_size": args.max_capture_tokens,
    }
    if any(graphs.values()):
        engine_args["compilation_config"] = {k: v for k, v in graphs.items() if v}
    budget = PoolBudget(int(args.gpu_pool_gib * 2**30), int(args.host_pool_gib * 2**30), 1 << 20)
    disk_root = tempfile.mkdtemp(prefix="inferscale-bench-kv-")
    pool = store_named("bench", disk_root, budget)
    started = time.perf_counter()
    llm = build_injection_llm(
        settings,
        store_name="bench",
        disk_root=disk_root,
        pool=budget,
        model=args.model,
        extra_engine_args=engine_args,
    )
    startup = time.perf_counter() - started
    locomo = (
        Path(args.locomo)
        if args.locomo
        else Path(__file__).resolve().parents[3] / "shared/data/locomo"
    )
    tokenize = _tokenizer(llm, args.tokenizer)
    workload = Workload.build(llm, locomo_facts(locomo, facts), tokenize, store=pool)
    t0 = time.perf_counter()
    workload.encode_all()
    encode_s = time.perf_counter() - t0
    config = llm.llm_engine.vllm_config
    header: dict[str, Any] = {
        "model": Path(args.model).name if args.model else settings.model_name,
        "load_format": args.load_format,
        "device": _device(),
        "vllm": _vllm_version(),
        "block_size": int(config.cache_config.block_size),
        "cudagraph_mode": str(config.compilation_config.cudagraph_mode),
        "engine_start_s": round(startup, 1),
        "facts_encoded": len(workload.facts),
        "encode_s": round(encode_s, 2),
        "mean_fact_tokens": sum(map(len, workload.facts)) / len(workload.facts),
    }
    return Session(llm, workload, pool, locomo, tokenize, header)


def _tokenizer(llm: Any, path: str | None) -> Any:
    if path:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        return lambda text: tok.encode(text, add_special_tokens=False)
    tok = llm.get_tokenizer()
    return lambda text: tok.encode(text, add_special_tokens=False)


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return str(torch.cuda.get_device_name())
    return f"CPU {platform.processor() or platform.machine()} x{torch.get_num_threads()} threads"


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)
