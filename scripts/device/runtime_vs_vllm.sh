#!/usr/bin/env bash
# On the GPU device (bundle installed): our runtime service against vLLM's own OpenAI server,
# same model shape, same GPU, both over HTTP from one client, in one run.
#   bash scripts/device/runtime_vs_vllm.sh llama-3.1-8b        # results under $OUT/<model>/
# vLLM's server and our runtime share the GPU (0.42 and 0.45 of its memory); requests alternate,
# so they never run at once. Extra bench options via BENCH_ARGS.
set -uo pipefail
model=$1
dir=.device/models/$model
out=$OUT/$model
mkdir -p "$out"
python3 -m vllm.entrypoints.openai.api_server --model "$dir" --tokenizer .device/tokenizer \
  --skip-tokenizer-init --load-format dummy --port 8011 --max-model-len 4096 \
  --gpu-memory-utilization 0.42 > "$out/peer.log" 2>&1 &
peer=$!
python3 -m bench ttft,throughput,peer --model "$dir" --load-format dummy \
  --tokenizer .device/tokenizer --gpu-memory-utilization 0.45 --peer-url http://127.0.0.1:8011 \
  --repeats 10 --ks 0,50,100 --peer-ks 0,50 --users 1,10,100 --rounds 2 --out "$out" \
  ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
echo "$model: exit $?"
kill $peer 2>/dev/null
grep -E "^(ttft|throughput|peer)" "$out/bench.log"
