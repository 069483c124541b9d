#!/usr/bin/env bash
# On the GPU device: the 100-user kv throughput cell, with py-spy sampling the bench client, the
# runtime server and the engine core while it runs. Results and raw profiles under $OUT/prof.
#   bash scripts/device/profile_throughput.sh .device/models/llama-3.1-8b
set -uo pipefail
model=$1
out=$OUT/prof
mkdir -p "$out"
python3 -m bench throughput --model "$model" --load-format dummy \
  --tokenizer .device/tokenizer --users 100 --throughput-k 50 --max-tokens 32 --rounds 6 \
  --out "$out" > "$out/bench.log" 2>&1 &
bench=$!
until grep -q "POST /v1/generate" "$out/runtime.log" 2>/dev/null || ! kill -0 $bench 2>/dev/null; do sleep 0.5; done
server=$(pgrep -f "gpu_runtime serve" | head -1)
core=$(pgrep -f "VLLM::EngineCore" | head -1)
client=$(pgrep -f "m bench throughput" | head -1)
for who in client server core; do
  pid=${!who}
  timeout 20 py-spy record --pid "$pid" --duration 8 --rate 200 --format raw --nonblocking \
    -o "$out/$who.txt" > /dev/null 2>&1 &
done
top -b -n 3 -d 2 | head -30 > "$out/top.txt"
wait
grep "^throughput" "$out/bench.log"
for who in client server core; do
  echo "== $who: top frames (self samples)"
  awk '{n=$NF; $NF=""; split($0, f, ";"); leaf=f[length(f)]; s[leaf]+=n} END {for (k in s) print s[k], k}' \
    "$out/$who.txt" 2>/dev/null | sort -rn | head -12
done
