#!/usr/bin/env bash
# On the GPU device, once scripts/device/platform.sh has installed the platform:
#   bash scripts/device/platform_bench.sh serve     # what a tenant's app sees, against the peer
#   bash scripts/device/platform_bench.sh smollm2   # real SmolLM2 weights: a LoCoMo import
#                                                   # through Celery, hybrid vs prompt answers
#   bash scripts/device/platform_bench.sh exactness # Theorem 3 with real SmolLM2 weights: CI's
#                                                   # own engine tests, run on the GPU (before serve)
#   bash scripts/device/platform_bench.sh locomo    # real SmolLM2 bf16: the dev set (all 1,347
#                                                   # questions) at k = 5, 20, 50 in kv (w=0), hybrid
#                                                   # and prompt modes, over the API's fused retrieval
#   bash scripts/device/platform_bench.sh locomo-fp8 # the same with FP8 facts, compared question
#                                                   # by question with the committed bf16 run
#   bash scripts/device/platform_bench.sh locomo-budget # hybrid with a prefill budget in tokens
#                                                   # (100, 200, 400) beside r=2 and prompt mode,
#                                                   # the dev set at k = 5, 20, 50 (issue 28)
#   bash scripts/device/platform_bench.sh locomo-memories # the dev set over the observations and
#                                                   # the turns (an import's memories=both), kv,
#                                                   # hybrid (400-token budget) and prompt, compared
#                                                   # question by question with the budget run
#   bash scripts/device/platform_bench.sh locomo-day # the dev set with each observation written
#                                                   # "On <session day>, ..." (kv, hybrid at 400
#                                                   # tokens, prompt), compared with the runs before
#   bash scripts/device/platform_bench.sh locomo-line # the dev set with each fact one plain line
#                                                   # (no "- "), kv, hybrid, prompt at k = 5..50,
#                                                   # compared with locomo-day
#   bash scripts/device/platform_bench.sh locomo-order # kv and prompt, prompt again, prompt with
#                                                   # the facts reversed, prompt in float32: the
#                                                   # model's own sensitivity beside kv's agreement
#   bash scripts/device/platform_bench.sh runtime-peer # after serve: the runtime's own API against
#                                                   # the peer, TTFT k = 0/50 (free KV too) and 100
#                                                   # users' requests/s (issue 29's table)
#   bash scripts/device/platform_bench.sh fairness  # the noisy-neighbour benchmark (issue 27) on the
#                                                   # GPU: A floods with 40 users, B one at a time
#   bash scripts/device/platform_bench.sh embedder  # the runtime's query embedder: its CUDA graphs
#                                                   # against the eager pass (test), and timed
#   bash scripts/device/platform_bench.sh inject    # the fused injection kernel's GB/s against
#                                                   # the HBM bound, GPU and host tiers (issue 29)
#   bash scripts/device/platform_bench.sh profile   # where one request's TTFT goes through the
#                                                   # runtime (HTTP, the connector's hooks, the
#                                                   # engine) at k = 0 and 50, and the host tier with
#                                                   # the prefetch hint 0, 5, 10, 20 ms ahead (issue 29)
#   bash scripts/device/platform_bench.sh faiss     # FAISS's GPU build: the index tests on the
#                                                   # GPU, CPU vs GPU search times (after the four
#                                                   # scripts/device/faiss_gpu carries)
# serve: the Llama-3.1-8B shape with dummy weights (SmolLM2's vocabulary: the same tokenizer
# streams text through both stacks); the platform (Postgres, Redis, migrations, the runtime, the
# API with 4 workers, a Celery worker and beat) and vLLM's own OpenAI server beside it (0.42 of
# the GPU each; requests alternate, they never run at once); then `inferscale bench serve` at
# 1 user (20 requests a cell) and 100 users (PER_USER each, 5), k = 0, 20, 50, 100, hybrid/kv/prompt and
# the peer; then the runtime's own encode rate. Results under $OUT. A subset: KS=50 MODES=kv,hybrid
# ENCODE=0 (the runtime's encode rate skipped); FLOORS=0 (`bench floors` skipped); SERVE_USERS=1 or 100 (one of the two runs);
# API_WORKERS=N API processes (4: run 4 found the API the bound at 100 users). Each cell also
# says which service kept the host's CPUs busy (--pid-dir: the daemons' pid files).
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck disable=SC1091
source /opt/platform/env.sh
model=/opt/platform/models/llama-3.1-8b-smolvocab
# TAG=name: this run's results apart from another of the same mode (an A/B in back-to-back calls)
res=/opt/platform/results/${1:-none}${TAG:+-$TAG}   # everything, returned as one tarball
mkdir -p "$res"
bench=(python3 -m bench serve --api http://127.0.0.1:8000 --ks "${KS:-0,20,50,100}"
       --modes "${MODES:-hybrid,kv,prompt}" --max-tokens 16
       --pid-dir /opt/platform --runtime-url http://127.0.0.1:8100  # CPU by service, loops
       --stall-s 240)  # a stalled warm-up or cell fails with its stacks within the call
[ "${PEER:-1}" = 1 ] && bench+=(--peer-url http://127.0.0.1:8011 --peer-model peer)
# CLIENTS=N (default 4): each cell's users spread over N client processes, the peer's too
# (bench/serve/clients.py). One process driving 100 streams bounded every 100-user cell before
# run 14 (docs/benchmarks.md); CLIENTS=1 repeats those runs' client. On an H100, the peer's
# client processes each load Mem0's embedder on the GPU: PEER_GPU_SHARE=0.34 leaves them room.
bench+=(--client-processes "${CLIENTS:-4}")

# PYSPY=S (serve): py-spy records S seconds of the runtime (its engine core too) and the bench
# client, from 2 s into the first 100-user cell; raw stacks, read by `python -m
# bench.serve.stacks`. --nonblocking: the processes are sampled, never paused. PYSPY_API=1: one
# of the API's processes too (not all: with 8 py-spy fell 80 s behind in run 11).
pyspy_cell() {  # pyspy_cell BENCH_LOG BENCH_PID
  local spy=/opt/vsite/bin/py-spy opts=(record --nonblocking --threads -r 100 -d "$PYSPY" -f raw)
  for _ in $(seq 1200); do
    grep -q "users=100 .* started" "$1" && break
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.5
  done
  sleep 2
  "$spy" "${opts[@]}" --subprocesses -o "$res/pyspy-runtime.txt" -p "$(cat /opt/platform/runtime.pid)" \
    >"$res/pyspy-runtime.log" 2>&1 &
  "$spy" "${opts[@]}" -o "$res/pyspy-client.txt" -p "$2" >"$res/pyspy-client.log" 2>&1 &
  if [ "${PYSPY_API:-0}" = 1 ]; then  # one API process of the several (all: too many for py-spy)
    local worker
    worker=$(pgrep -P "$(cat /opt/platform/api.pid)" -f spawn_main | head -1)
    [ -n "$worker" ] && "$spy" "${opts[@]}" -o "$res/pyspy-api.txt" -p "$worker" >"$res/pyspy-api.log" 2>&1 &
  fi
  wait
}
case ${1:-} in
  serve)
    bash scripts/device/platform.sh up "$model" "${API_WORKERS:-4}" || exit 1
    if [ "${PEER:-1}" = 1 ]; then  # PEER=0: the platform alone (a profile needs no peer)
      bash scripts/device/platform.sh peer "$model"
      for _ in $(seq 300); do curl -sf http://127.0.0.1:8011/health >/dev/null && break; sleep 1; done
      curl -sf http://127.0.0.1:8011/health >/dev/null || { tail -30 /opt/platform/logs/peer.log; exit 1; }
    fi
    gc_pauses() {  # the runtime's garbage collections so far (the run's are after - before)
      curl -s -H "Authorization: Bearer $INFERSCALE_SERVICE_TOKEN" http://127.0.0.1:8100/metrics \
        | grep gc_pause >"$res/runtime-gc-$1.txt" || true
    }
    gc_pauses before
    # SERVE_USERS=1 or 100: one of the two runs (the platform and the peer stay up between
    # back-to-back device calls, so the two can go in separate calls, each within its limit).
    if [[ ",${SERVE_USERS:-1,100}," == *",1,"* ]]; then
      # Its whole output kept (run 17 lost a failed run's to the call's 12,000-character tail).
      "${bench[@]}" --users 1 --requests-per-user 20 --out "$res/serve-1user" >"$res/serve-1user.log" 2>&1 \
        || echo "!! the 1-user run failed ($?): serve-1user.log"
      grep -v "spaCy\|Hybrid (BM25)" "$res/serve-1user.log" | tail -60
    fi
    if [[ ",${SERVE_USERS:-1,100}," == *",100,"* ]]; then
      log=$res/serve-100users.log
      # Questions of their own (the 1-user cells ask from 64 on): no prompt is asked twice.
      "${bench[@]}" --users 100 --requests-per-user "${PER_USER:-5}" --first-question 300 \
        --out "$res/serve-100users" >"$log" 2>&1 &
      pid=$!
      [ -n "${PYSPY:-}" ] && { pyspy_cell "$log" "$pid" & }
      wait "$pid"; wait
      grep -v "spaCy\|Hybrid (BM25)" "$log"
    fi
    gc_pauses after
    # Requests in flight by stage, and any reported stuck (gpu_runtime/client/inflight.py): a
    # run that stalled says where its chats stopped (the logs have each stuck one's stack).
    { curl -s -H "Authorization: Bearer $INFERSCALE_SERVICE_TOKEN" http://127.0.0.1:8100/v1/stats \
        | python3 -c 'import json, sys; print("runtime in_flight", json.load(sys.stdin)["in_flight"])'
      curl -s -H "Authorization: Bearer $INFERSCALE_SERVICE_TOKEN" http://127.0.0.1:8100/metrics \
        | grep -E "in_flight|stuck_requests|stage_oldest" | grep -v "^#"
      curl -s http://127.0.0.1:8000/metrics | grep -E "in_flight|stuck_requests" | grep -v "^#"
    } >"$res/inflight-after.txt" 2>&1
    cat "$res/inflight-after.txt"
    grep -h -A12 "stuck in" /opt/platform/logs/*.log | head -80
    # A stalled chat, or one the API still holds: every API process's and the runtime's stacks,
    # dumped from outside. A process whose event loop is itself stuck cannot log (run 26: an API
    # process deadlocked in its metrics; only py-spy saw it).
    if grep -q "ChatStalled" "$res"/serve-*.log 2>/dev/null \
        || grep -E '^inferscale_api_requests_in_flight' "$res/inflight-after.txt" | grep -vq ' 0.0$'; then
      for pid in $(pgrep -P "$(cat /opt/platform/api.pid)" -f spawn_main) $(cat /opt/platform/runtime.pid); do
        timeout 20 /opt/vsite/bin/py-spy dump --locals -p "$pid" >"$res/pyspy-dump-$pid.txt" 2>&1
      done
      grep -l "MmapedValue\|acquire" "$res"/pyspy-dump-*.txt 2>/dev/null | sed 's/^/!! a thread waits on a lock: /'
    fi
    # What the chat's two hops and its Postgres and Redis round trips cost alone on this host.
    [ "${FLOORS:-1}" = 1 ] && python3 -m bench floors --rounds 300 --out "$res/floors" | tail -8
    [ "${ENCODE:-1}" = 1 ] && python3 -m bench encode --runtime-url http://127.0.0.1:8100 --windows 0 --encode-facts 169 \
      --out "$res/runtime-encode" 2>&1 | tail -3
    ;;
  smollm2)
    bash scripts/device/platform.sh runtime /opt/platform/home/models/SmolLM2-135M-Instruct || exit 1
    python3 -m inferscale.cli demo-platform --api http://127.0.0.1:8000 --questions 6 2>&1 \
      | tee "$res/smollm2-demo.log" | tail -60
    ;;
  exactness)
    # The CI's exactness tests, unchanged, against a runtime on this GPU serving the real SmolLM2
    # (dequantized from the Q4_1 GGUF by `platform.sh receive-gguf`; INFERSCALE_HOME finds it):
    # injected vs prefix-cache-reused KV bitwise, cache bits equal, GPU and host tiers, a
    # purged fact recomputed, and the negative control (zeros injected change the output).
    bash scripts/device/platform.sh databases || exit 1  # the suite's conftest needs Redis
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.3 python3 -m pytest -p no:cacheprovider -q -rA \
      --timeout=500 tests/gpu_runtime/test_injection_exactness.py \
      tests/gpu_runtime/test_chunked_rope_engine.py 2>&1 | tee "$res/exactness.log" | tail -40
    ls /tmp/inferscale-test-runtime-*.log >/dev/null 2>&1 && cp /tmp/inferscale-test-runtime-*.log "$res/"
    # Run it before `serve`: whatever the tests' runtimes left on the GPU goes (once, their
    # leftovers kept vLLM's own server from starting beside the platform).
    nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9
    ;;
  locomo)
    # Retrieval travels as docs/results/locomo/hits-fused.json (computed on the CPU with the
    # API's fused ranking, keyword weight 0.5), so every mode answers over the same facts.
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 python3 -m evals locomo --files data/locomo \
      --hits docs/results/locomo/hits-fused.json --keyword-weight 0.5 --concurrency 64 \
      --max-tokens 24 --dtype bfloat16 --ks "${KS:-5,20,50}" --windows 0 --modes kv,hybrid,prompt \
      --recompute 2 --hybrid-ks "${KS:-5,20,50}" --hybrid-windows 0 --fact-kv-dtype native --out "$res/locomo" \
      > "$res/locomo.log" 2>&1 || echo "eval exit $?"
    tail -45 "$res/locomo.log"
    ;;
  locomo-fp8)
    # Issue 28's FP8 decision: the same dev-set run with FP8 (e4m3) facts over the bf16 cache,
    # then question by question against the committed bf16 run (docs/results/locomo-h200/).
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 python3 -m evals locomo --files data/locomo \
      --hits docs/results/locomo/hits-fused.json --keyword-weight 0.5 --concurrency 64 \
      --max-tokens 24 --dtype bfloat16 --ks "${KS:-5,20,50}" --windows 0 --modes kv,hybrid,prompt \
      --recompute 2 --hybrid-ks "${KS:-5,20,50}" --hybrid-windows 0 --fact-kv-dtype fp8_e4m3 \
      --out "$res/locomo" > "$res/locomo.log" 2>&1 || echo "eval exit $?"
    gzip -dc docs/results/locomo-h200/eval.json.gz > /tmp/bf16-eval.json
    python3 -m evals compare /tmp/bf16-eval.json "$res/locomo/eval.json" \
      --names "bf16 facts,fp8 facts" --out "$res/compare.md"
    ;;
  locomo-budget)
    # Issue 28's recompute budget: the most relevant facts prefilled while they fit BUDGETS
    # tokens (the API's memory.recompute_tokens, counted by the same function), paired with
    # prompt mode and the r=2 default over the same retrieved facts.
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 python3 -m evals locomo --files data/locomo \
      --hits docs/results/locomo/hits-fused.json --keyword-weight 0.5 --concurrency 64 \
      --max-tokens 24 --dtype bfloat16 --ks "${KS:-5,20,50}" --windows 0 --modes hybrid,prompt \
      --recompute 2 --recompute-tokens "${BUDGETS:-100,200,400}" --hybrid-ks "${KS:-5,20,50}" \
      --hybrid-windows 0 --fact-kv-dtype native --out "$res/locomo" > "$res/locomo.log" 2>&1 \
      || echo "eval exit $?"
    tail -40 "$res/locomo.log"
    ;;
  locomo-memories)
    # Issue 28's retrieval: every question ranked over the observations and the turns
    # (docs/results/locomo/hits-fused-both.json, `python -m evals hits --memories both`), then
    # paired with the observations-only budget run (docs/results/locomo-h200-budget/). Hybrid at
    # the GPU's default budget only (400 tokens; r=0 runs no count), so that one call holds it;
    # 3.4x the facts of an observations run: a pool that keeps them all on the GPU.
    bash scripts/device/platform.sh stop  # whatever serve left on the GPU
    INFERSCALE_GPU_POOL_BYTES=$((12 << 30)) INFERSCALE_HOST_POOL_BYTES=$((8 << 30)) \
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 python3 -m evals locomo --files data/locomo \
      --hits docs/results/locomo/hits-fused-both.json --memories both --keyword-weight 0.5 \
      --concurrency 64 --max-tokens 24 --dtype bfloat16 --ks "${KS:-5,20,50}" --windows 0 \
      --modes kv,hybrid,prompt --recompute 0 --recompute-tokens 400 --hybrid-ks "${KS:-5,20,50}" \
      --hybrid-windows 0 --fact-kv-dtype native --out "$res/locomo" > "$res/locomo.log" 2>&1 \
      || echo "eval exit $?"
    gzip -dc docs/results/locomo-h200-budget/eval.json.gz > /tmp/observations-eval.json
    python3 -m evals compare /tmp/observations-eval.json "$res/locomo/eval.json" \
      --names "observations,observations and turns" --out "$res/compare.md"
    tail -40 "$res/locomo.log"
    ;;
  locomo-day)
    # Issue 28's fact rendering: observations written "On 8 May 2023, ..." (the session's day,
    # backend/core/locomo.py) instead of "(1:56 pm on 8 May, 2023) ...", ranked anew
    # (docs/results/locomo/hits-fused.json), kv, hybrid at the GPU's default budget (400 tokens)
    # and prompt; then question by question against the budget run, written the old way
    # (docs/results/locomo-h200-budget/: prompt and hybrid), and the f3e1d12 run (kv).
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 python3 -m evals locomo --files data/locomo \
      --hits docs/results/locomo/hits-fused.json --keyword-weight 0.5 --concurrency 64 \
      --max-tokens 24 --dtype bfloat16 --ks "${KS:-5,20,50}" --windows 0 --modes kv,hybrid,prompt \
      --recompute 0 --recompute-tokens 400 --hybrid-ks "${KS:-5,20,50}" --hybrid-windows 0 \
      --fact-kv-dtype native --out "$res/locomo" > "$res/locomo.log" 2>&1 || echo "eval exit $?"
    gzip -dc docs/results/locomo-h200-budget/eval.json.gz > /tmp/budget-eval.json
    gzip -dc docs/results/locomo-h200/eval.json.gz > /tmp/f3e1d12-eval.json
    python3 -m evals compare /tmp/budget-eval.json "$res/locomo/eval.json" \
      --names "clock stamp,session day" --out "$res/compare-budget.md"
    python3 -m evals compare /tmp/f3e1d12-eval.json "$res/locomo/eval.json" \
      --names "clock stamp,session day" --out "$res/compare-kv.md"
    python3 -m evals margins "$res/locomo/eval.json" --out "$res/margins.md" || true
    tail -40 "$res/locomo.log"
    ;;
  locomo-line)
    # Issue 28's fact rendering, second step: each fact one plain line (encoding version 2, no
    # "- " before it: gpu_runtime/client/composer.py fact_line), kv, hybrid at the GPU's default
    # budget and prompt at k = 5, 10, 20, 30, 50 (the API's default top_k on a GPU is chosen from
    # this curve); then question by question against the locomo-day run (facts after "- ").
    # FACT_CONTEXT=text: each fact also encoded after that line, past the header (the product
    # encodes after none; '' is that).
    INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 python3 -m evals locomo --files data/locomo \
      ${FACT_CONTEXT+--fact-context "$FACT_CONTEXT"} \
      --hits docs/results/locomo/hits-fused.json --keyword-weight 0.5 --concurrency 64 \
      --max-tokens 24 --dtype bfloat16 --ks "${KS:-5,10,20,30,50}" --windows 0 --modes kv,hybrid,prompt \
      --recompute 0 --recompute-tokens 400 --hybrid-ks "${KS:-5,10,20,30,50}" --hybrid-windows 0 \
      --fact-kv-dtype native --out "$res/locomo" > "$res/locomo.log" 2>&1 || echo "eval exit $?"
    gzip -dc docs/results/locomo-h100-day/eval.json.gz > /tmp/day-eval.json
    python3 -m evals compare /tmp/day-eval.json "$res/locomo/eval.json" \
      --names "after a dash,plain line" --out "$res/compare-day.md"
    python3 -m evals margins "$res/locomo/eval.json" --out "$res/margins.md" || true
    tail -60 "$res/locomo.log"
    ;;
  locomo-order)
    # Issue 28's first-token agreement against the model's own sensitivity: the dev set in kv
    # and prompt mode (the product's order), prompt mode again (run-to-run noise), and prompt
    # mode with the same facts in the reversed order (most relevant first: nothing but the
    # layout changed), prompt mode in float32 (nothing but the arithmetic changed), each with a
    # runtime of its own; then each pair question by question.
    # PARTS: which of the four runs (a b c d) this call makes, the comparisons of those it has.
    eval=(python3 -m evals locomo --files data/locomo --hits docs/results/locomo/hits-fused.json
          --keyword-weight 0.5 --concurrency 64 --max-tokens 24 --dtype bfloat16
          --ks "${KS:-5,20,50}" --windows 0 --fact-kv-dtype native)
    for part in ${PARTS:-a b c}; do
      case $part in
        a) args=(--modes kv,prompt) ;;
        b) args=(--modes prompt) ;;
        c) args=(--modes prompt --fact-order reversed) ;;
        d) args=(--modes prompt --dtype float32) ;;
      esac
      INFERSCALE_GPU_MEMORY_UTILIZATION=0.5 "${eval[@]}" "${args[@]}" --out "$res/locomo-$part" \
        > "$res/locomo-$part.log" 2>&1 || echo "eval $part exit $?"
      tail -5 "$res/locomo-$part.log"
    done
    [ -f "$res/locomo-a/eval.json" ] && [ -f "$res/locomo-b/eval.json" ] && python3 -m evals \
      compare "$res/locomo-a/eval.json" "$res/locomo-b/eval.json" --names "first,again" \
      --out "$res/compare-again.md" && cat "$res/compare-again.md"
    [ -f "$res/locomo-a/eval.json" ] && [ -f "$res/locomo-c/eval.json" ] && python3 -m evals \
      compare "$res/locomo-a/eval.json" "$res/locomo-c/eval.json" --names "product order,reversed" \
      --out "$res/compare-reversed.md" && cat "$res/compare-reversed.md"
    [ -f "$res/locomo-a/eval.json" ] && [ -f "$res/locomo-d/eval.json" ] && python3 -m evals \
      compare "$res/locomo-a/eval.json" "$res/locomo-d/eval.json" --names "bfloat16,float32" \
      --out "$res/compare-float32.md" && cat "$res/compare-float32.md"
    [ -f "$res/locomo-a/eval.json" ] && python3 -m evals margins "$res/locomo-a/eval.json" \
      --out "$res/margins.md"
    ;;
  runtime-peer)
    # Issue 29's table through the runtime's own HTTP API (no tenant API): TTFT at k = 0 and 50
    # in prompt, kv and free-KV modes and the peer, then 100 streaming users at k=50 (32 tokens),
    # kv against vLLM's server fed the same facts as text. After `serve`: its peer stays up (the
    # same server as the tenant-API run), the platform's runtime gives its share of the GPU back.
    for s in beat worker api runtime; do kill -- -"$(cat /opt/platform/$s.pid 2>/dev/null)" 2>/dev/null; done
    sleep 5
    bash scripts/device/platform.sh peer "$model"
    # Wait for the peer to hold its memory before the bench starts a runtime: started together,
    # the runtime's profiling counted the loading peer against it and it kept 52,496 tokens of
    # KV cache instead of 173,296 (run 20's first call: 3.56x where the next three gave 5.0-5.4x).
    for _ in $(seq 300); do curl -sf http://127.0.0.1:8011/health >/dev/null && break; sleep 1; done
    curl -sf http://127.0.0.1:8011/health >/dev/null || { tail -30 /opt/platform/logs/peer.log; exit 1; }
    # PARTS=offload,peer: the host tier with the hint 0, 5, 10, 20 ms ahead on the same runtime
    # first, so that every row of issue 29's table comes from one command in one run.
    python3 -m bench "${PARTS:-peer}" --model "$model" --load-format dummy \
      --tokenizer /opt/platform/tokenizer --gpu-memory-utilization 0.45 --peer-url http://127.0.0.1:8011 \
      --offload-k 50 --hint-leads 5,10,20 \
      --repeats "${REPEATS:-10}" --ks 0,50 --peer-ks 0,50 --users "${USERS:-100}" --rounds 2 --out "$res/runtime-peer" \
      > "$res/runtime-peer.log" 2>&1 || echo "bench exit $?"
    grep -E "^(ttft|throughput|peer|offload)|x " "$res/runtime-peer.log" | tail -40
    ;;
  fairness)
    # The 8B shape's platform; fair-gate sizes up to what a GPU batches almost for free.
    bash scripts/device/platform.sh up "$model" "${API_WORKERS:-4}" || exit 1
    python3 -m bench fairness --api http://127.0.0.1:8000 --runtime http://127.0.0.1:8100 \
      --users "${USERS:-40}" --b-requests 30 --slots "${SLOTS:-4,16,64}" --out "$res/fairness" \
      2>&1 | tail -40
    ;;
  inject)
    python3 -m bench inject --out "$res/inject" 2>&1 | tail -12
    ;;
  profile)
    # The runtime alone (started by the bench, hooks timed); no API, no peer.
    # PROFILE_PARTS=profile: the per-step profile alone (no host-tier offload cells). REPEATS=N
    # requests a cell (20).
    python3 -m bench "${PROFILE_PARTS:-profile,offload}" --model "$model" --load-format dummy --tokenizer /opt/platform/tokenizer \
      --profile-k 50 --offload-k 50 --hint-leads 5,10,20 --repeats "${REPEATS:-20}" --out "$res/profile" 2>&1 | tail -14
    ;;
  embedder)
    bash scripts/device/platform.sh databases || exit 1  # the suite's conftest needs Redis
    python3 -m pytest -p no:cacheprovider -q -rA --timeout=300 tests/gpu_runtime/test_query_embedder.py \
      -k "graph or loop" 2>&1 | tee "$res/embedder-tests.log" | tail -8
    python3 -m bench.runtime.query_embed --out "$res/query-embed.json"
    ;;
  faiss)
    # PyPI's faiss-gpu-cu12 1.9.0.0 (received by scripts/device/faiss_gpu/receive.sh) with its
    # CUDA 12 runtime, NumPy 1.26 and cuBLAS 12 forwarded to the image's cuBLAS 13 (stage.sh says
    # why); the platform's faiss-cpu and NumPy 2 are shadowed for this step only.
    stage=/root/stage/faiss site=/tmp/faiss-gpu && rm -rf $site && mkdir -p $site
    (cd $stage && cat faiss_gpu_cu12-*.whl.part-* > /tmp/faiss.whl && sed "s|  .*|  /tmp/faiss.whl|" \
      faiss_gpu_cu12-*.sha256 | sha256sum -c) || exit 1
    python3 -m zipfile -e /tmp/faiss.whl $site && python3 -m zipfile -e $stage/numpy-*.whl $site \
      && python3 -m zipfile -e $stage/scipy-*.whl $site  # (bm25s needs SciPy; the image's is NumPy 2 only)
    # (its preloader would look the CUDA 12 libraries up as pip packages, and 1.9.0.0 ignores its
    # own opt-out variable: an empty list leaves them to the loader's path, which finds them)
    echo '[]' > $site/faiss/PRELOAD_SHARED_LIBRARIES.json
    INFERSCALE_CUBLAS13=$(find / -name 'libcublas.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)
    export INFERSCALE_CUBLAS13 LD_LIBRARY_PATH=$stage/lib:$(dirname "$INFERSCALE_CUBLAS13")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PYTHONPATH=$site:$PYTHONPATH _FAISS_WHEEL_DISABLE_CUDA_PRELOAD=1
    python3 -c "import faiss; print(faiss.__file__, 'GPUs:', faiss.get_num_gpus())" 2>&1 | tee "$res/faiss-tests.log"
    python3 -m pytest -p no:cacheprovider -q -rA --timeout=300 tests/backend/retrieval/test_index.py \
      2>&1 | tee -a "$res/faiss-tests.log" | tail -25
    python3 -m bench.serve.faiss_search --out "$res/faiss-search-h200.json"
    ;;
  *) sed -n "2,44p" "$0"; exit 2 ;;
esac
cp /opt/platform/logs/*.log "$res/" 2>/dev/null || true
cat "$res"/serve-*/serve.md 2>/dev/null
tar -C "$res" -czf "$OUT/${1}${TAG:+-$TAG}.tar.gz" .
