"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a running
stack with data: the operator logs in, every page renders its charts and tables (asserted on
the DOM), and deleting a memory in the browser removes it from the API's search. Screenshots of
every page go to ``$INFERSCALE_SCREENSHOTS`` (docs/dashboard/ was made so)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_runtime.client.launch import free_port
from tests.databases import REPO
from tests.processes import wait_healthy
from tests.support import ADMIN_KEY, TenantHandle

pytestmark = pytest.mark.db

# page title in the sidebar -> what its DOM must hold (Streamlit test ids)
PAGES = {
    "Overview": {"stMetric": 4, "stDataFrame": 3, "stVegaLiteChart": 1},
    "Cache residency": {"stMetric": 5, "stDataFrame": 1, "stVegaLiteChart": 2},
    "Latency": {"stDataFrame": 1, "stVegaLiteChart": 5},
    "Memory browser": {"stDataFrame": 2},
    "Jobs": {"stMetric": 4, "stDataFrame": 1},
}


@pytest.fixture
def dashboard(served_api: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "INFERSCALE_API_URL": served_api, "INFERSCALE_ENV": "prod"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "streamlit_app.py"),
         "--server.headless=true", f"--server.port={port}", "--browser.gatherUsageStats=false"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, path="/_stcore/health")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def data(api: Any, make_tenant: Callable[[], TenantHandle]) -> dict[str, Any]:
    tenant = make_tenant()
    name = next(t["name"] for t in api.get("/v1/tenants", params={"limit": 500},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()["items"]
                if t["id"] == tenant.id)  # fmt: skip
    marker = f"zq{uuid.uuid4().hex[:8]}"
    text = f"The user's locker is number {marker}."
    doomed = api.post("/v1/memories", headers=tenant.headers,
                      json={"user_id": "browser-user", "text": text}).json()  # fmt: skip
    api.post("/v1/memories", headers=tenant.headers,
             json={"user_id": "browser-user", "text": "The user likes green tea."})  # fmt: skip
    for k in (0, 1, 2):
        api.post("/v1/chat/completions", headers=tenant.headers, json={
            "model": "inferscale", "user": "browser-user", "max_tokens": 2,
            "memory": {"mode": "kv", "top_k": k},
            "messages": [{"role": "user", "content": "Which locker is mine?"}]})  # fmt: skip
    return {"tenant": tenant, "name": name, "marker": marker,
            "memory": doomed["results"][0]["id"]}  # fmt: skip


def _chromium() -> str:
    path = shutil.which("chromium")
    assert path, "no chromium: `make test` installs Debian's (INFERSCALE_NEED_BROWSER=1)"
    return path


def _choose(page: Any, label: str, option: str) -> None:
    """Pick an option of a selectbox by typing it: with many tenants the dropdown renders only
    the options in view."""
    page.get_by_role("combobox", name=label, exact=True).click()
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).wait_for(timeout=60_000)
    page.keyboard.press("Enter")


def test_operator_sees_every_page_and_deletes_a_memory_in_a_real_browser(
    dashboard: str, data: dict[str, Any], api: Any
) -> None:
    from playwright.sync_api import expect, sync_playwright

    shots = (
        Path(os.environ["INFERSCALE_SCREENSHOTS"])
        if "INFERSCALE_SCREENSHOTS" in os.environ
        else None
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(dashboard)
        page.get_by_label("Admin key").fill("wrong-key")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_text("The API refused this key")).to_be_visible(timeout=60_000)
        if shots:
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "login.png"))
        page.get_by_label("Admin key").fill(ADMIN_KEY)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible(timeout=60_000)

        for title, needs in PAGES.items():
            page.get_by_role("link", name=title).click()
            heading = "Chat latency" if title == "Latency" else title
            expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=60_000)
            if title == "Memory browser":
                _choose(page, "tenant", data["name"])
                user = page.get_by_role("combobox", name="user")
                expect(user).to_have_value("browser-user (2 memories)", timeout=60_000)
            for test_id, count in needs.items():
                found = page.get_by_test_id(test_id)
                expect(found.nth(count - 1)).to_be_visible(timeout=60_000)
            assert page.get_by_test_id("stException").count() == 0, title
            if shots:
                shots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shots / f"{title.lower().replace(' ', '-')}.png"),
                                full_page=True)  # fmt: skip

        # Delete the marked memory through the browser.
        page.get_by_role("link", name="Memory browser").click()
        _choose(page, "tenant", data["name"])
        page.get_by_label("search this user's memories").fill(data["marker"])
        page.keyboard.press("Enter")
        # The results table is a canvas grid (its cells are not visible DOM); the memory picker
        # below it is, and it lists the search's results.
        label = f"The user's locker is number {data['marker']}. · {data['memory'][:8]}"
        _choose(page, "memory", label)
        expect(page.get_by_role("combobox", name="memory")).to_have_value(label, timeout=60_000)
        page.get_by_text("I want to delete this memory everywhere").click()
        page.get_by_role("button", name="Delete memory").click()
        expect(page.get_by_text("purged everywhere")).to_be_visible(timeout=60_000)

        # Every page has its own URL: a deep link asks for the key, then shows that page.
        fresh = browser.new_page()
        fresh.goto(f"{dashboard}/overview")
        fresh.get_by_label("Admin key").fill(ADMIN_KEY)
        fresh.get_by_role("button", name="Log in").click()
        expect(fresh.get_by_role("heading", name="Overview")).to_be_visible(timeout=60_000)
        assert fresh.get_by_text("Page not found").count() == 0
        browser.close()

    query = {"user_id": "browser-user", "query": f"locker {data['marker']}"}
    search = api.post("/v1/memories/search", headers=data["tenant"].headers, json=query)
    assert data["memory"] not in {m["id"] for m in search.json()["results"]}
    assert api.get(f"/v1/memories/{data['memory']}",
                   headers=data["tenant"].headers).status_code == 404  # fmt: skip
