"""``python -m evals`` (also ``inferscale eval``): quality evaluations.

    inferscale eval locomo --files data/locomo/conv-30.json --ks 20 \\
        --windows 0,5,20 --max-questions 20 --out runs/eval/locomo

    inferscale eval compare runs/a/eval.json runs/b/eval.json --names fp32,fp8

    inferscale eval margins docs/results/locomo-h200/eval.json.gz   # evals/margins.py

    inferscale eval recall --ks 5,20,50 --out docs/results/retrieval   # evals/recall.py

    inferscale eval hits --memories both --k 50 --out docs/results/locomo/hits-fused-both.json

Runs the harness of :mod:`evals.locomo` through a runtime service: the one at
``--runtime-url`` (``INFERSCALE_SERVICE_TOKEN`` its token), or one it starts for the run with a
throwaway KV store. Writes eval.json, eval.md and a PNG.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from backend.core.locomo import ConversationMemories


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["extraction"]:  # infer=true's extraction against LoCoMo's observations
        from evals.extraction import main as extraction

        return extraction(given[1:])
    if given[:1] == ["recall"]:  # retrieval configurations' evidence recall, no model
        from evals.recall import main as recall

        return recall(given[1:])
    if given[:1] == ["hits"]:  # retrieval written once, for a run on a machine without MiniLM
        from evals.retrieval import main as hits

        return hits(given[1:])
    if given[:1] == ["margins"]:  # first-token agreement by prompt mode's own margin
        from evals.margins import main as margins

        return margins(given[1:])
    if given[:1] == ["compare"]:  # two runs' eval.json side by side
        from evals.compare import main as compare

        return compare(given[1:])
    parser = argparse.ArgumentParser(
        prog="inferscale eval", description="LoCoMo QA F1 (kv vs prompt) with fidelity"
    )
    parser.add_argument("benchmark", choices=["locomo"])
    parser.add_argument("--files", nargs="+", help="LoCoMo files or folders (default: the repo's)")
    parser.add_argument("--ks", default="5,20,50", help="top-k retrieved facts per question")
    parser.add_argument("--windows", default="0,5,20", help="kv encoding windows w (turns)")
    parser.add_argument("--modes", default="kv,prompt", help="some of kv, hybrid, prompt")
    parser.add_argument("--recompute", default="1,2,5,10", help="hybrid: facts prefilled, r")
    parser.add_argument(
        "--recompute-tokens",
        default="",
        help="hybrid: budgets in tokens for the facts prefilled (the API's recompute_tokens)",
    )
    parser.add_argument("--hybrid-ks", default="20,50", help="hybrid: the ks it runs at")
    parser.add_argument("--hybrid-windows", default="5", help="hybrid: the windows it runs at")
    parser.add_argument(
        "--concurrency", type=int, default=8, help="questions in flight (the runtime batches)"
    )
    parser.add_argument(
        "--max-questions", type=int, help="per conversation, stratified over categories"
    )
    parser.add_argument("--categories", default="1,2,3,4,5")
    parser.add_argument("--max-tokens", type=int, default=24, help="new tokens per answer")
    parser.add_argument("--dtype", help="engine dtype (default: INFERSCALE_DTYPE or auto)")
    parser.add_argument("--kv-cache-dtype", help="vLLM's cache dtype (INFERSCALE_KV_CACHE_DTYPE)")
    parser.add_argument(
        "--fact-kv-dtype", help="fact storage: auto, native or fp8_e4m3 (INFERSCALE_FACT_KV_DTYPE)"
    )
    parser.add_argument("--runtime-url", help="a running runtime (default: start one)")
    parser.add_argument("--progress-every", type=int, default=10, help="questions per line")
    parser.add_argument("--seed", type=int, default=0, help="adversarial option order")
    parser.add_argument("--hits", type=Path, help="retrieval file: read if it exists, else written")
    parser.add_argument(
        "--keyword-weight",
        type=float,
        help="BM25's weight in the fused ranking (default: the API's; 0 = dense only)",
    )
    parser.add_argument(
        "--memories",
        choices=[m.value for m in ConversationMemories],
        default=ConversationMemories.OBSERVATIONS.value,
        help="what the import keeps as memories (the API's ConversationImport.memories)",
    )
    parser.add_argument(
        "--fact-context",
        help="what each fact is encoded after, past the facts header (default: the product's "
        "FACT_CONTEXT; '' for nothing)",
    )
    parser.add_argument(
        "--fact-order",
        choices=["product", "reversed"],
        default="product",
        help="product: least to most relevant, as the API composes; reversed: most relevant "
        "first (a control: the same facts, only their order changed)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/eval/locomo"))
    args = parser.parse_args(given)

    from backend.core.config import Settings
    from backend.core.paths import locomo_dir
    from evals.locomo import EvalSettings, FactOrder, Mode, run_eval
    from evals.report import to_markdown, write_outputs
    from gpu_runtime.client.http import RuntimeClient
    from gpu_runtime.client.launch import RuntimeProcess
    from gpu_runtime.config import RuntimeSettings

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
        recomputes=_ints(args.recompute),
        recompute_budgets=_ints(args.recompute_tokens),
        hybrid_ks=_ints(args.hybrid_ks),
        hybrid_windows=_ints(args.hybrid_windows),
        concurrency=args.concurrency,
        hits_file=args.hits,
        keyword_weight=(
            Settings().retrieval_keyword_weight
            if args.keyword_weight is None
            else args.keyword_weight
        ),
        memories=ConversationMemories(args.memories),
        fact_context=None if args.fact_context is None else args.fact_context.replace("\\n", "\n"),
        fact_order=FactOrder(args.fact_order),
    )
    token = RuntimeSettings().service_token
    disk_root = tempfile.mkdtemp(prefix="inferscale-eval-kv-")  # throwaway fact KV
    server: RuntimeProcess | None = None
    try:
        began = time.perf_counter()
        url = args.runtime_url
        if url is None:
            env = {"INFERSCALE_KV_STORE_DIR": disk_root}
            for name, value in (
                ("INFERSCALE_DTYPE", args.dtype),
                ("INFERSCALE_KV_CACHE_DTYPE", args.kv_cache_dtype),
                ("INFERSCALE_FACT_KV_DTYPE", args.fact_kv_dtype),
            ):
                if value:
                    env[name] = value
            print("==> starting a runtime service for the run", flush=True)
            server = RuntimeProcess(env, log=Path(disk_root) / "runtime.log").start()
            url = server.url
        startup = time.perf_counter() - began
        client = RuntimeClient(url, token)
        result = run_eval(client, settings, log=lambda line: print(line, flush=True))
        result["config"]["timing"]["engine_start_s"] = startup
        # What the run left in the pool: facts and bytes per tier, as the runtime counts them.
        result["config"]["pool"] = client.stats().workers[0]
        paths = write_outputs(result, args.out)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(disk_root, ignore_errors=True)
    print(to_markdown(result, with_notes=False))
    print("wrote " + ", ".join(str(p) for p in paths), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
