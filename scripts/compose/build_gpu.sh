#!/usr/bin/env bash
# make compose-gpu-build: `docker compose --profile gpu build` (the app image and the CUDA runtime
# image: vLLM 0.26 with its CUDA torch, FAISS for CUDA 12), then `import vllm, gpu_runtime` inside
# the runtime image. No GPU is needed to build; a Docker engine is (scripts/compose/docker.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/compose/docker.sh
trap engine_down EXIT
engine_up
base_images
compose=($(compose_binary) -p inferscale-gpu-build -f docker-compose.yml \
  -f scripts/compose/ci.override.yml --profile gpu)
started=$(date +%s)
timeout 5400 "${compose[@]}" build
say "built in $(( $(date +%s) - started ))s"
docker image ls --format '    {{.Repository}}:{{.Tag}}  {{.Size}}' | grep inferscale
timeout 600 docker run --rm --entrypoint python "inferscale/runtime-gpu:${INFERSCALE_IMAGE_TAG:-local}" -c \
  "import vllm, torch, faiss, gpu_runtime, gpu_runtime.engine; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'faiss', faiss.__version__)"
