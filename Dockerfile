# One image for the API, the worker and the dashboard (CPU build of the runtime).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends build-essential make postgresql-client \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY requirements ./requirements
COPY scripts ./scripts
COPY backend ./backend
COPY worker ./worker
COPY gpu_runtime ./gpu_runtime
COPY dashboard ./dashboard
COPY migrations ./migrations
COPY alembic.ini Makefile ./
RUN bash scripts/setup.sh
ENV PATH=/app/.venv/bin:$PATH HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_NUM_OF_RESERVED_CPU=1
