"""The runtime process exits non-zero with a one-line reason whenever it cannot serve, so that a
supervisor (compose's restart policy, systemd) restarts it and never takes a crash for a clean
stop: settings it refuses, an engine that does not start, an engine that dies later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gpu_runtime.client.launch import RuntimeProcess, free_port

REPO = Path(__file__).resolve().parents[2]


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_runtime", "serve", "--port", str(free_port()), *args],
        env={**os.environ, **env}, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip


def _reason(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("gpu_runtime:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.unit
def test_a_placeholder_token_on_a_reachable_address_is_refused_before_anything_starts() -> None:
    proc = _serve({"INFERSCALE_SERVICE_TOKEN": "dev-service-token"}, "--host", "0.0.0.0")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "placeholder INFERSCALE_SERVICE_TOKEN" in _reason(stderr)


@pytest.mark.unit
def test_settings_it_refuses_are_named_in_one_line() -> None:
    proc = _serve({"INFERSCALE_MAX_NUM_SEQS": "lots"}, "--host", "127.0.0.1")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert _reason(stderr).startswith("gpu_runtime: cannot start: invalid settings: max_num_seqs")


@pytest.mark.engine
def test_an_engine_that_cannot_start_is_an_error_exit() -> None:
    # vLLM refuses a context longer than the model's while building the engine (after the
    # server is up): a failure of the engine, not of the settings.
    proc = _serve({"INFERSCALE_MAX_MODEL_LEN": "1000000"}, "--host", "127.0.0.1")
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-3000:]
    reason = _reason(stderr)
    assert reason.startswith("gpu_runtime: the engine did not start:") and "max_model_len" in reason


@pytest.mark.engine
def test_an_engine_that_dies_after_start_takes_the_process_down_with_an_error(
    tmp_path: Path,
) -> None:
    runtime = RuntimeProcess({"INFERSCALE_KV_STORE_DIR": str(tmp_path / "kv")},
                             log=tmp_path / "runtime.log", cwd=REPO)  # fmt: skip
    runtime.start(timeout_s=600)
    try:
        server = psutil.Process(runtime.pid)
        cores = [p for p in server.children() if "EngineCore" in " ".join(p.cmdline()) + p.name()]
        assert cores, [(p.pid, p.name(), p.cmdline()) for p in server.children()]
        os.kill(cores[0].pid, signal.SIGKILL)
        assert runtime.proc is not None
        code = runtime.proc.wait(timeout=120)
    finally:
        runtime.stop()
    log = (tmp_path / "runtime.log").read_text()
    assert code == 1, log[-3000:]
    assert "gpu_runtime: the engine died" in log
