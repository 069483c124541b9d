"""A benchmark session: the runtime service (the one at ``--runtime-url``, or one started for
the run from the engine options) and the LoCoMo workload encoded into it. Every measurement is
what a client of the runtime sees, over its HTTP API."""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runtime.workload import Workload, locomo_facts
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.client.launch import RuntimeProcess


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime-url", help="a running runtime (default: start one for the run)")
    parser.add_argument("--model", help="model directory (default: the prepared SmolLM2)")
    parser.add_argument("--load-format", default="auto", help="'dummy' for real-shape timing")
    parser.add_argument("--tokenizer", help="tokenizer directory (dummy-weight models)")
    parser.add_argument("--locomo", help="LoCoMo folder (default: the repository's data)")
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
    parser.add_argument("--gpu-memory-utilization", type=float, help="e.g. 0.45 beside a peer")
    parser.add_argument("--kv-cache-dtype", help="vLLM's cache dtype, e.g. fp8 (CUDA only)")
    parser.add_argument("--fact-kv-dtype", help="fact storage: auto, native or fp8_e4m3")


def runtime_env(args: argparse.Namespace, kv_dir: str) -> dict[str, str]:
    """The ``INFERSCALE_*`` settings of a runtime started for this run."""
    env = {
        "INFERSCALE_KV_STORE_DIR": kv_dir,
        "INFERSCALE_LOAD_FORMAT": args.load_format,
        "INFERSCALE_MAX_MODEL_LEN": str(args.max_model_len),
        "INFERSCALE_GPU_POOL_BYTES": str(int(args.gpu_pool_gib * 2**30)),
        "INFERSCALE_HOST_POOL_BYTES": str(int(args.host_pool_gib * 2**30)),
        "INFERSCALE_POOL_SLAB_BYTES": str(1 << 20),
    }
    if args.model:
        env["INFERSCALE_MODEL_PATH"] = str(Path(args.model).resolve())
    if args.tokenizer:
        env["INFERSCALE_TOKENIZER_PATH"] = str(Path(args.tokenizer).resolve())
    if args.enforce_eager:
        env["INFERSCALE_ENFORCE_EAGER"] = "true"
    if getattr(args, "gpu_memory_utilization", None):
        env["INFERSCALE_GPU_MEMORY_UTILIZATION"] = str(args.gpu_memory_utilization)
    if getattr(args, "kv_cache_dtype", None):
        env["INFERSCALE_KV_CACHE_DTYPE"] = args.kv_cache_dtype
    if getattr(args, "fact_kv_dtype", None):
        env["INFERSCALE_FACT_KV_DTYPE"] = args.fact_kv_dtype
    if "profile" in getattr(args, "what", ()):
        env["INFERSCALE_TRACE_CONNECTOR"] = "1"  # the connector's hooks timed (profile)
    engine: dict[str, Any] = {}
    if args.load_format == "dummy":  # random weights: token ids only, no text to detokenize
        engine["skip_tokenizer_init"] = True
    graphs = {
        "cudagraph_mode": args.cudagraph_mode,
        "max_cudagraph_capture_size": args.max_capture_tokens,
    }
    if any(graphs.values()):
        engine["compilation_config"] = {k: v for k, v in graphs.items() if v}
    if engine:
        env["INFERSCALE_ENGINE_ARGS"] = json.dumps(engine)
    return env


@dataclass
class Session:
    client: RuntimeClient
    workload: Workload
    locomo: Path
    header: dict[str, Any]  # what every report states about the run
    server: RuntimeProcess | None

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def open_session(args: argparse.Namespace, facts: int) -> Session:
    """Reaches (or starts) the runtime and encodes ``facts`` LoCoMo observations (w=0)."""
    from gpu_runtime.config import RuntimeSettings

    started = time.perf_counter()
    server = None
    url = args.runtime_url
    if url is None:
        kv_dir = tempfile.mkdtemp(prefix="inferscale-bench-kv-")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        log = Path(args.out) / "runtime.log"
        print(f"starting a runtime for the run (log {log})", flush=True)
        server = RuntimeProcess(runtime_env(args, kv_dir), log=log).start(timeout_s=900)
        url = server.url
    startup = time.perf_counter() - started
    client = RuntimeClient(url, RuntimeSettings().service_token, timeout_s=600)
    locomo = Path(args.locomo) if args.locomo else _repo_locomo()
    workload = Workload.build(client, locomo_facts(locomo, facts))
    t0 = time.perf_counter()
    workload.encode_all()
    encode_s = time.perf_counter() - t0
    model = client.model()
    header: dict[str, Any] = {
        "model": model.model,
        "load_format": args.load_format,
        "device": _device(model.workers),
        "vllm": model.workers[0].get("vllm", "?") if model.workers else "?",
        "block_size": model.block_size,
        "runtime_start_s": round(startup, 1),
        "facts_encoded": len(workload.facts),
        "encode_s": round(encode_s, 2),
        "mean_fact_tokens": sum(map(len, workload.facts)) / len(workload.facts),
        "client_host": platform.node(),
    }
    return Session(client, workload, locomo, header, server)


def _repo_locomo() -> Path:
    """The repository's LoCoMo data (``INFERSCALE_LOCOMO_DIR`` points elsewhere)."""
    configured = os.environ.get("INFERSCALE_LOCOMO_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "data/locomo"


def _device(workers: list[dict[str, Any]]) -> str:
    return str(workers[0].get("device_name", workers[0].get("device"))) if workers else "?"
