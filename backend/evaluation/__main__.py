"""``python -m backend.evaluation`` (also ``inferscale eval``): quality evaluations.

    inferscale eval locomo --files ../shared/data/locomo/conv-30.json --ks 20 \\
        --windows 0,5,20 --max-questions 20 --out runs/eval/locomo

Starts one engine (vLLM with the InferScale connector) with a throwaway KV store, runs the
harness of :mod:`backend.evaluation.locomo` on it and writes eval.json, eval.md and a PNG.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="inferscale eval", description="LoCoMo QA F1 (kv vs prompt) with fidelity"
    )
    parser.add_argument("benchmark", choices=["locomo"])
    parser.add_argument("--files", nargs="+", help="LoCoMo files or folders (default: shared)")
    parser.add_argument("--ks", default="5,20,50", help="top-k retrieved facts per question")
    parser.add_argument("--windows", default="0,5,20", help="kv encoding windows w (turns)")
    parser.add_argument("--modes", default="kv,prompt")
    parser.add_argument(
        "--max-questions", type=int, help="per conversation, stratified over categories"
    )
    parser.add_argument("--categories", default="1,2,3,4,5")
    parser.add_argument("--max-tokens", type=int, default=24, help="new tokens per answer")
    parser.add_argument("--dtype", help="engine dtype (default: INFERSCALE_DTYPE or auto)")
    parser.add_argument("--progress-every", type=int, default=10, help="questions per line")
    parser.add_argument("--seed", type=int, default=0, help="adversarial option order")
    parser.add_argument("--out", type=Path, default=Path("runs/eval/locomo"))
    args = parser.parse_args(argv)

    from backend.core.paths import locomo_dir
    from backend.evaluation.locomo import EvalSettings, run_eval
    from backend.evaluation.report import to_markdown, write_outputs
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.runtime import InjectionRuntime, Mode
    from gpu_runtime.store.memory import PoolBudget

    files = [Path(p) for item in args.files or [str(locomo_dir())] for p in item.split(",") if p]
    settings = EvalSettings(
        files=tuple(files),
        ks=_ints(args.ks),
        windows=_ints(args.windows),
        modes=tuple(Mode(m.strip()) for m in args.modes.split(",") if m.strip()),
        max_questions=args.max_questions,
        categories=_ints(args.categories),
        max_tokens=args.max_tokens,
        progress_every=max(1, args.progress_every),
        seed=args.seed,
    )
    rt = RuntimeSettings(**({"dtype": args.dtype} if args.dtype else {}))
    disk_root = tempfile.mkdtemp(prefix="inferscale-eval-kv-")  # throwaway fact KV
    try:
        began = time.perf_counter()
        print(f"==> starting vLLM with {rt.model_name} ({rt.resolved_dtype})", flush=True)
        runtime = InjectionRuntime.start(
            rt,
            store_name="locomo-eval",
            disk_root=disk_root,
            pool=PoolBudget(rt.gpu_pool_bytes, rt.host_pool_bytes, rt.pool_slab_bytes),
        )
        startup = time.perf_counter() - began
        result = run_eval(runtime, settings, log=lambda line: print(line, flush=True))
        result["config"]["timing"]["engine_start_s"] = startup
        paths = write_outputs(result, args.out)
    finally:
        shutil.rmtree(disk_root, ignore_errors=True)
    print(to_markdown(result, with_notes=False))
    print("wrote " + ", ".join(str(p) for p in paths), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
