#!/usr/bin/env bash
# On the GPU device, after the vLLM 0.26 bundle is installed (docs/benchmarks.md):
#   bash scripts/device/bench_models.sh PARTS MODEL...      e.g.  ttft,throughput,offload llama-3.1-8b
# One `inferscale bench` run per model shape (dummy weights); results under $OUT/<model>/.
# Extra bench options via BENCH_ARGS, e.g. BENCH_ARGS="--rounds 3".
set -uo pipefail
parts=$1
shift
for model in "$@"; do
  mkdir -p "$OUT/$model"
  python3 -m bench "$parts" --model ".device/models/$model" --load-format dummy \
    --tokenizer .device/tokenizer --repeats 10 --out "$OUT/$model" ${BENCH_ARGS:-} \
    > "$OUT/$model/bench.log" 2>&1
  echo "$model: exit $?"
  grep -E "^(ttft k=50|throughput users=100|offload)" "$OUT/$model/bench.log"
done
