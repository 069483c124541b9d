# Two targets on one base:
#   app: the API, the Celery worker and beat, the dashboard, migrations and the CPU runtime
#        (vLLM-CPU 0.32, torch 2.13 CPU);
#   gpu: the runtime on CUDA (vLLM with its CUDA torch, the project's `gpu` extra).
# Layers go from what changes least to what changes most: system libraries, Python
# dependencies, the default model, then the code; a code change rebuilds only the last layers.
# The product packages and the `inferscale` command only: the tools (bench/, evals/) stay out.
FROM python:3.11-slim AS base
# libnuma1: vLLM-CPU's _C extension links it (without it the engine dies at import);
# libgomp1: OpenMP for torch and FAISS.
RUN apt-get update && apt-get install -y --no-install-recommends libnuma1 libgomp1 \
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
    INFERSCALE_HOME=/var/lib/inferscale INFERSCALE_KV_STORE_DIR=/kv \
    INFERSCALE_MODEL_PATH=/opt/models/SmolLM2-135M-Instruct
# One unprivileged user for every process; the volumes' mount points are its own, so fresh
# named volumes (KV, secrets) take that ownership.
RUN python -m venv /opt/venv \
    && useradd --system --uid 10001 --create-home --home-dir /home/inferscale inferscale \
    && mkdir -p /var/lib/inferscale /kv /run/inferscale/secrets \
    && chown inferscale: /var/lib/inferscale /kv /run/inferscale/secrets
WORKDIR /app

FROM base AS app
COPY pyproject.toml ./
COPY requirements ./requirements
COPY scripts/docker-deps.sh ./scripts/
RUN bash scripts/docker-deps.sh cpu
COPY gpu_runtime/__init__.py gpu_runtime/errors.py gpu_runtime/model_assets.py ./gpu_runtime/
RUN python -c "import pathlib, gpu_runtime.model_assets as m; \
    m.prepare_smollm2(pathlib.Path('$INFERSCALE_MODEL_PATH'))" && rm -rf gpu_runtime
COPY README.md alembic.ini ./
COPY .streamlit ./.streamlit
COPY migrations ./migrations
COPY data ./data
COPY gpu_runtime ./gpu_runtime
COPY backend ./backend
COPY worker ./worker
COPY dashboard ./dashboard
COPY inferscale ./inferscale
RUN pip install -q --no-deps --no-build-isolation -e . && python -m compileall -q backend worker \
    gpu_runtime dashboard inferscale >/dev/null
# vLLM-CPU sizing for small hosts (the compose file may override)
ENV VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_NUM_OF_RESERVED_CPU=1
USER inferscale

FROM base AS gpu
COPY pyproject.toml ./
COPY scripts/docker-deps.sh ./scripts/
RUN bash scripts/docker-deps.sh gpu
COPY gpu_runtime/__init__.py gpu_runtime/errors.py gpu_runtime/model_assets.py ./gpu_runtime/
RUN python -c "import pathlib, gpu_runtime.model_assets as m; \
    m.prepare_smollm2(pathlib.Path('$INFERSCALE_MODEL_PATH'))" && rm -rf gpu_runtime
COPY README.md ./
COPY gpu_runtime ./gpu_runtime
COPY backend ./backend
COPY worker ./worker
COPY dashboard ./dashboard
COPY inferscale ./inferscale
RUN pip install -q --no-deps --no-build-isolation -e .
ENV VLLM_USE_FLASHINFER_SAMPLER=0
USER inferscale
