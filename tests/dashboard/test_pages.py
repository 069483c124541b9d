"""Every dashboard page in Streamlit's AppTest, against the real API (uvicorn): with data, in
its empty state (an API on a brand-new database), with the API down, and the login with a
wrong key, a right key, and none in production."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from gpu_runtime.client.launch import free_port
from tests.databases import REPO, create_database, drop_database, migrate
from tests.processes import api_args, spawn, wait_healthy
from tests.support import ADMIN, ADMIN_KEY, TenantHandle

pytestmark = pytest.mark.db

APP = str(REPO / "dashboard" / "streamlit_app.py")


def _page(module: str, base: str, key: str) -> None:
    """AppTest script: one page rendered with the admin client (arguments are pickled in)."""
    import importlib

    from dashboard.client import AdminClient

    importlib.import_module(f"dashboard.views.{module}").render(AdminClient(base, key))


def _run_page(module: str, base: str, key: str = ADMIN_KEY) -> AppTest:
    at = AppTest.from_function(_page, args=(module, base, key), default_timeout=60)
    return at.run()


def _text(at: AppTest) -> str:
    parts = [e.value for e in (*at.markdown, *at.header, *at.subheader, *at.caption)]
    parts += [str(e.value) for e in (*at.info, *at.error, *at.warning, *at.success)]
    parts += [f"{m.label}={m.value}" for m in at.metric]
    return "\n".join(str(p) for p in parts)


@pytest.fixture
def stack_with_data(
    served_api: str, make_tenant: Callable[[], TenantHandle], api: Any
) -> Iterator[str]:
    tenant = make_tenant()
    api.post("/v1/memories", json={"user_id": "u", "text": "The user likes green tea."},
             headers=tenant.headers)  # fmt: skip
    for k in (0, 1):
        api.post("/v1/chat/completions", headers=tenant.headers, json={
            "model": "inferscale", "user": "u", "max_tokens": 2,
            "memory": {"mode": "kv", "top_k": k},
            "messages": [{"role": "user", "content": "What do I like?"}]})  # fmt: skip
    yield served_api


@pytest.fixture(scope="module")
def empty_api() -> Iterator[str]:
    """The API as its own process on a brand-new database: no tenants, jobs or requests."""
    name = f"inferscale_dash_{uuid.uuid4().hex[:10]}"
    url = create_database(name)
    migrate(url)
    port = free_port()
    proc = spawn(api_args(port), {**os.environ, "DATABASE_URL": url},
                 REPO / f".pytest-dash-{port}.log")  # fmt: skip
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        (REPO / f".pytest-dash-{port}.log").unlink(missing_ok=True)
        drop_database(name)


def test_every_page_renders_its_charts_and_tables_with_data(stack_with_data: str) -> None:
    at = _run_page("overview", stack_with_data)
    assert not at.exception and not at.error, _text(at)
    assert {m.label for m in at.metric} >= {"database", "broker", "runtime", "tenants",
                                            "live facts", "encodings ready"}  # fmt: skip
    assert len(at.dataframe) == 3  # the runtime replicas, the pools' budgets and fill, tenants
    replicas, pools, tenants = (frame.value for frame in at.dataframe)
    assert list(replicas["replica"]) == [os.environ["INFERSCALE_RUNTIME_URL"]]
    assert list(replicas["status"]) == ["ok"] and replicas["tenants"].sum() == len(tenants)
    assert set(pools["replica"]) == set(replicas["replica"])
    assert set(tenants["replica"]) == set(replicas["replica"])

    at = _run_page("residency", stack_with_data)
    assert not at.exception and not at.error, _text(at)
    assert {m.label for m in at.metric} >= {"facts on gpu", "misses → prefill", "evictions"}
    (ranks,) = (frame.value for frame in at.dataframe)  # one row per worker rank
    assert list(ranks["rank"]) == [0] and list(ranks["replica"]) == [
        os.environ["INFERSCALE_RUNTIME_URL"]
    ]
    assert ranks["gpu facts"].sum() + ranks["host facts"].sum() > 0
    shown = {m.label: m.value for m in at.metric}
    for tier in ("gpu", "host", "disk"):  # the API's totals, the ranks' rows summed
        assert int(shown[f"facts on {tier}"]) == ranks[f"{tier} facts"].sum(), shown

    at = _run_page("latency", stack_with_data)
    assert not at.exception and not at.error, _text(at)
    assert "TTFT against the number of memories k" in _text(at)
    assert "Fairness per tenant" in _text(at)
    assert "Requests in flight by stage" in _text(at)
    # the p50/p95 table, the per-tenant one, requests in flight (charts: Vega specs)
    assert len(at.dataframe) == 3
    stages = at.dataframe[2].value  # the runtime is asked while the page renders: it shows
    runtime = stages[stages["process"] == f"runtime {os.environ['INFERSCALE_RUNTIME_URL']}"]
    assert "received" in set(runtime["stage"]) and (runtime["requests"] >= 1).all()

    at = _run_page("jobs", stack_with_data)
    assert not at.exception and not at.error, _text(at)
    assert {m.label for m in at.metric} == {"queued", "running", "succeeded", "failed"}
    assert len(at.dataframe) >= 1 and at.button[0].label == "Re-encode now"


def test_the_latency_page_sets_a_tenants_limits(stack_with_data: str, api: Any) -> None:
    tenants = api.get("/v1/tenants", params={"limit": 500}, headers=ADMIN).json()["items"]
    newest = tenants[-1]  # the fixture's
    at = _run_page("latency", stack_with_data)
    assert not at.exception and not at.error, _text(at)
    chooser = next(s for s in at.selectbox if s.label == "limits of")
    chooser.select(newest["name"]).run()
    at.text_input[0].input("abc")
    at.button[0].click().run()  # the form's submit
    assert at.error and "whole numbers" in at.error[0].value
    at.text_input[0].input("7")
    at.text_input[3].input("2.5")
    at.button[0].click().run()
    assert not at.error and at.success, _text(at)
    limits = api.get(f"/v1/tenants/{newest['id']}/limits", headers=ADMIN).json()
    assert limits["overrides"]["requests_per_minute"] == 7
    assert limits["overrides"]["fair_weight"] == 2.5


def test_memory_browser_lists_a_users_memories_and_their_history(
    stack_with_data: str, api: Any
) -> None:
    tenants = api.get("/v1/tenants", params={"limit": 500}, headers=ADMIN).json()["items"]
    at = _run_page("memories", stack_with_data)
    assert not at.exception and not at.error, _text(at)
    at.selectbox[0].select(tenants[-1]["name"]).run()  # the newest tenant: the fixture's
    assert not at.exception and not at.error, _text(at)
    assert str(at.selectbox[1].value).startswith("u (")
    assert len(at.dataframe) == 2  # the memories, the chosen one's history
    assert at.button and at.button[-1].label == "Delete memory" and at.button[-1].disabled


@pytest.mark.parametrize("page", ["latency", "jobs", "memories"])
def test_empty_state_says_so(empty_api: str, page: str) -> None:
    at = _run_page(page, empty_api)
    assert not at.exception and not at.error, _text(at)
    assert at.info and "yet" in at.info[0].value


def test_overview_without_tenants_says_so(empty_api: str) -> None:
    at = _run_page("overview", empty_api)
    assert not at.exception, _text(at)
    assert "No tenants yet" in _text(at)


def _app(monkeypatch: pytest.MonkeyPatch, api_url: str) -> AppTest:
    """The whole app as an operator opens it in production (no key from the environment)."""
    monkeypatch.setenv("INFERSCALE_API_URL", api_url)
    monkeypatch.setenv("INFERSCALE_ENV", "prod")
    return AppTest.from_file(APP, default_timeout=60).run()


def test_login_refuses_a_wrong_key_and_accepts_the_admin_key(
    served_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app(monkeypatch, served_api)
    assert not at.exception
    assert at.header[0].value == "Operator login"  # production: no key from the environment
    at.text_input[0].input("not-the-key")
    at.button[0].click()
    at.run()
    assert at.error and "refused" in at.error[0].value
    at.text_input[0].input(ADMIN_KEY)
    at.button[0].click()
    at.run()
    assert not at.exception and not at.error, _text(at)
    assert "Overview" in [h.value for h in at.header]


def test_api_down_is_a_message_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(monkeypatch, f"http://127.0.0.1:{free_port()}")
    at.text_input[0].input(ADMIN_KEY)
    at.button[0].click()
    at.run()
    assert not at.exception
    assert at.error and "unreachable" in at.error[0].value


def _guarded_page(module: str) -> None:
    """AppTest script: a logged-in operator on one page, as the app wraps it."""
    import importlib

    import streamlit as st

    from dashboard import session
    from dashboard.streamlit_app import guarded

    st.session_state[session.KEY] = "some-key"
    guarded(importlib.import_module(f"dashboard.views.{module}").render, False)()


@pytest.mark.parametrize("page", ["overview", "residency", "latency", "memories", "jobs"])
def test_api_going_down_is_a_message_on_every_page(
    page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERSCALE_API_URL", f"http://127.0.0.1:{free_port()}")
    at = AppTest.from_function(_guarded_page, args=(page,), default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.error and "unreachable" in at.error[0].value
