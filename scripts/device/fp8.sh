#!/usr/bin/env bash
# On the GPU device (vLLM 0.26 bundle installed, see docs/benchmarks.md): FP8 fact KV end to end.
# Not run yet (no device time in the session that wrote it); each part is one device call:
#   bash scripts/device/fp8.sh theorem3 llama-3.1-8b   # Theorem 3 against vLLM's own FP8 reuse
#   bash scripts/device/fp8.sh bench llama-3.1-8b      # TTFT and the host-tier penalty, k=50
#   bash scripts/device/fp8.sh kernel                  # the fused kernel compiled, vs PyTorch
# theorem3: three runtimes over the same dummy-weight shape, one JSON line per case and setting
#   (--kv-cache-dtype fp8: top5_logprobs_bitwise_reused_vs_injected must be true, from the GPU
#   tier and from the host tier; bf16 cache with fp8_e4m3 facts: fidelity, the logprob gap).
# bench: `inferscale bench ttft,offload` with bf16 facts and with fp8_e4m3 facts on a bf16
#   cache, and with both fp8, same pools: TTFT vs k, and the host-tier penalty at k=50 (facts
#   read in place over PCIe: half the bytes should cut the penalty roughly in half).
set -uo pipefail
part=${1:?theorem3|bench|kernel}
model=${2:-llama-3.1-8b}
mkdir -p "$OUT/fp8"
case "$part" in
  theorem3)
    for setting in "auto native" "fp8 native" "fp8 fp8_e4m3" "auto fp8_e4m3"; do
      set -- $setting
      python3 scripts/device/theorem3.py --model ".device/models/$model" \
        --tokenizer .device/tokenizer --kv-cache-dtype "$1" --fact-kv-dtype "$2" \
        --out "$OUT/fp8/theorem3-$model.jsonl" > "$OUT/fp8/theorem3-$model-$1-$2.log" 2>&1
      echo "cache=$1 facts=$2: exit $?"
    done
    grep -o '"case": "[^"]*"\|"top5_logprobs_bitwise_reused_vs_injected": [a-z]*\|"max_abs_logprob_diff_normal_vs_injected": [0-9.e-]*\|"kv_cache_dtype": "[^"]*"\|"fact_kv_dtype": "[^"]*"' \
      "$OUT/fp8/theorem3-$model.jsonl" | paste -d' ' - - - - - ;;
  bench)
    for setting in "auto native" "auto fp8_e4m3" "fp8 fp8_e4m3"; do
      set -- $setting
      out="$OUT/fp8/bench-$model-cache_$1-facts_$2"
      mkdir -p "$out"
      python3 -m bench ttft,offload --model ".device/models/$model" \
        --load-format dummy --tokenizer .device/tokenizer --repeats 20 --ks 0,20,50,100 \
        --offload-k 50 --kv-cache-dtype "$1" --fact-kv-dtype "$2" --out "$out" \
        > "$out/bench.log" 2>&1
      echo "cache=$1 facts=$2: exit $?"
      grep -E "^(ttft k=50|offload)" "$out/bench.log"
    done ;;
  kernel)
    python3 -m pytest -q -p no:cacheprovider tests/gpu_runtime/connector/test_fused_fp8.py \
      tests/gpu_runtime/connector/test_fused_loader.py tests/gpu_runtime/store/test_quant.py \
      2>&1 | tail -20 ;;
  *) echo "usage: $0 theorem3|bench|kernel [model]" >&2; exit 2 ;;
esac
