"""Schemathesis against the real API: every operation of the OpenAPI document, fuzzed with a
tenant key and with the admin key, never answers 5xx, and every answer's status and body are
the ones the document declares.

The API runs as its own uvicorn process on a throw-away database (the admin run deletes and
rotates tenants), with a Redis database no worker consumes, serving chats from the session's
runtime. The one thing held back from the fuzzer is generation length: ``max_tokens`` is cut to
4, so a fuzzed chat costs a CPU decode of 4 tokens, not 4096; every other field is fuzzed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from gpu_runtime.client.launch import RuntimeProcess, free_port
from tests.databases import REPO, create_database, drop_database, migrate
from tests.processes import api_args, spawn, wait_healthy
from tests.redis_dbs import spare_redis_url
from tests.support import ADMIN_KEY

pytestmark = [pytest.mark.db, pytest.mark.engine]

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
EXAMPLES = int(os.environ.get("INFERSCALE_FUZZ_EXAMPLES", "30"))  # per operation and key


@pytest.fixture(scope="module")
def fuzzed_api(runtime_server: RuntimeProcess) -> Iterator[dict[str, str]]:
    name = f"inferscale_fuzz_{uuid.uuid4().hex[:10]}"
    url = create_database(name)
    migrate(url)
    port = free_port()
    broker = spare_redis_url(1)
    env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": broker}
    server = spawn(api_args(port, "warning"), env, REPO / f".pytest-fuzz-{port}.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        created = httpx.post(f"{base}/v1/tenants", json={"name": "fuzzed"}, headers=admin)
        created.raise_for_status()
        auth = created.json()["api_key"]
        # A memory to find, update and delete, and a conversation, so ids exist to hit.
        httpx.post(f"{base}/v1/memories", json={"user_id": "u", "text": "The user likes tea."},
                   headers={"Authorization": f"Bearer {auth}"}).raise_for_status()  # fmt: skip
        yield {"base": base, "tenant": auth, "admin": ADMIN_KEY}
    finally:
        server.terminate()
        server.wait(timeout=30)
        (REPO / f".pytest-fuzz-{port}.log").unlink(missing_ok=True)
        drop_database(name)


def _clamped(case: Any) -> Any:
    if case.path == "/v1/chat/completions" and isinstance(case.body, dict):
        for field in ("max_tokens", "max_completion_tokens"):
            if isinstance(case.body.get(field), int):
                case.body[field] = min(case.body[field], 4)
        case.body.setdefault("max_tokens", 4)
    return case


def _fuzz(fuzzed_api: dict[str, str], key: str, mode: GenerationMode) -> list[str]:
    """Every operation, ``EXAMPLES`` cases each; returns one line per failing operation."""
    schema = schemathesis.openapi.from_url(f"{fuzzed_api['base']}/openapi.json")
    headers = {"Authorization": f"Bearer {fuzzed_api[key]}"}
    failures: list[str] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation the loader could not read is a failure
            failures.append(f"unreadable operation: {result.err()}")
            continue
        operation = result.ok()

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def run(case: Any) -> None:
            _clamped(case).call_and_validate(
                base_url=fuzzed_api["base"], headers=headers, checks=CHECKS, timeout=120
            )

        try:
            run()
        except Unsatisfiable:  # negative mode, an operation without inputs: none can be invalid
            continue
        except Exception as exc:  # a check failed: hypothesis re-raises the shrunk case
            failures.append(f"{operation.label}: {exc}"[:2000])
    return failures


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("key", ["tenant", "admin"])
def test_no_5xx_and_every_answer_as_documented(
    fuzzed_api: dict[str, str], key: str, mode: GenerationMode
) -> None:
    failures = _fuzz(fuzzed_api, key, mode)
    assert not failures, "\n\n".join(failures)
