"""docker-compose.yml's CPU profile, running, driven from outside its containers as a user would
(``make compose-test`` builds and starts it, then runs this module; it is deselected from the
ordinary suite by its marker). The steps run in file order on one stack and build on each other:
the stack is healthy and private, the official Mem0 and OpenAI SDKs work through it, the
dashboard logs in with the generated key only, four faults are survived with nothing
acknowledged lost, and a deleted user leaves nothing in any table, index or KV file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import psutil
import pytest

pytestmark = pytest.mark.compose

ALICE_FACTS = [
    "I live in Lisbon and work as a night nurse.",
    "My dog is a beagle called Pepper.",
    "I am allergic to peanuts.",
    "My favourite band is Radiohead.",
]
BULK = 96  # facts in the job the worker dies in: six encode batches of 16


@dataclass
class Stack:
    compose: list[str]
    env: dict[str, str]
    api: str
    dashboard: str
    ports: list[int]
    shared: dict[str, Any] = field(default_factory=dict)  # what a step leaves the next ones

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        started = time.monotonic()
        done = subprocess.run([*self.compose, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
        if args[0] in ("stop", "start", "restart", "kill"):
            waited(f"compose {' '.join(args)}", started)
        if check and done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done.stdout

    def exec(self, service: str, *command: str, timeout: float = 120) -> str:
        return self.run("exec", "-T", service, *command, timeout=timeout)

    def services(self) -> dict[str, dict[str, Any]]:
        lines = self.run("ps", "--all", "--format", "json").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        return {row["Service"]: row for row in rows}

    def crash(self, service: str) -> None:
        """SIGKILL the container's init from the host: to Docker a crash (exit 137), which the
        restart policy answers; `docker kill` or `stop` would count as the operator's doing."""
        container = self.run("ps", "-q", service).strip()
        pid = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Pid}}", container], env=self.env,
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        os.kill(int(pid), signal.SIGKILL)

    def wait_healthy(self, service: str, timeout: float) -> None:
        started = time.monotonic()
        while time.monotonic() < started + timeout:
            row = self.services().get(service, {})
            if row.get("State") == "running" and row.get("Health") in ("healthy", ""):
                waited(f"{service} healthy", started)
                return
            time.sleep(2)
        raise AssertionError(f"{service} not healthy after {timeout:.0f} s: {row}")

    def psql(self, sql: str) -> str:
        return self.exec("postgres", "psql", "-U", "postgres", "-d", "inferscale", "-tAc", sql)

    def runtime_metric(self, name: str) -> float:
        """A counter of the runtime's /metrics (it is not published: read from inside)."""
        script = (
            "import urllib.request as u;"
            "t = open('/run/inferscale/secrets/INFERSCALE_SERVICE_TOKEN').read().strip();"
            "h = {'Authorization': 'Bearer ' + t};"
            "r = u.Request('http://127.0.0.1:8100/metrics', headers=h);"
            "print(u.urlopen(r, timeout=10).read().decode())"
        )
        text = self.exec("cpu-runtime", "python", "-c", script)
        values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
        assert values, f"{name} not in the runtime's metrics"
        return float(values[0])


@pytest.fixture(scope="module")
def stack() -> Stack:
    path = os.environ.get("INFERSCALE_COMPOSE_STACK")
    if not path:
        pytest.fail("this module drives a running compose stack: run it with `make compose-test`")
    with open(path) as f:
        return Stack(**json.load(f))


@pytest.fixture(scope="module")
def admin_key(stack: Stack) -> str:
    return stack.exec("api", "inferscale", "secrets", "show", "INFERSCALE_ADMIN_KEY").strip()


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.api, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def tenant(stack: Stack, http: httpx.Client, admin_key: str) -> dict[str, str]:
    created = http.post("/v1/tenants", json={"name": f"compose-{uuid.uuid4().hex[:8]}"},
                        headers={"Authorization": f"Bearer {admin_key}"})  # fmt: skip
    assert created.status_code == 201, created.text
    body: dict[str, str] = created.json()
    return {"key": body["api_key"], "id": body["id"]}


@pytest.fixture(scope="module")
def auth(tenant: dict[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant['key']}"}


@pytest.fixture(scope="module")
def mem0(stack: Stack, tenant: dict[str, str]) -> Any:
    os.environ["MEM0_TELEMETRY"] = "False"
    from mem0 import MemoryClient

    return MemoryClient(api_key=tenant["key"], host=stack.api)


@pytest.fixture(scope="module")
def chat(stack: Stack, tenant: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=tenant["key"], max_retries=0,
                         timeout=300)  # fmt: skip


def ask(client: openai.OpenAI, user: str, mode: str, question: str = "Where do I live?",
        max_tokens: int = 16) -> dict[str, Any]:  # fmt: skip
    answer = client.chat.completions.create(
        model="inferscale", user=user, max_tokens=max_tokens, temperature=0,
        messages=[{"role": "user", "content": question}],
        extra_body={"memory": {"mode": mode, "top_k": 5}},
    )  # fmt: skip
    meta: dict[str, Any] = (answer.model_extra or {})["inferscale"]
    return {"text": answer.choices[0].message.content or "", **meta}


def waited(what: str, started: float) -> None:
    """Said as it happens (pytest runs with -s): where a fault test's minutes go."""
    print(f"    [{time.monotonic() - started:5.1f} s] {what}", file=sys.stderr, flush=True)


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    started = time.monotonic()
    last: Any = None
    while time.monotonic() < started + timeout:
        try:
            if result := check():
                waited(what, started)
                return result
        except Exception as exc:  # not yet: the service is restarting
            last = exc
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def encoded(http: httpx.Client, auth: dict[str, str], memory_ids: list[str]) -> bool:
    for memory_id in memory_ids:
        rows = http.get(f"/v1/memories/{memory_id}/encodings", headers=auth).json()
        if [r["status"] for r in rows] != ["ready"]:
            return False
    return True


# ---- 1. up, healthy, private -------------------------------------------------------------
def test_every_service_is_healthy_and_published_on_loopback_only(stack: Stack) -> None:
    services = stack.services()
    for name in ("postgres", "redis", "cpu-runtime", "api", "worker", "beat", "dashboard"):
        assert services[name]["State"] == "running", services[name]
        assert services[name]["Health"] == "healthy", services[name]
    for name in ("secrets", "migrate"):  # one-shots that finished
        assert services[name]["State"] == "exited" and services[name]["ExitCode"] == 0
    published = {p["PublishedPort"]: p["URL"] for row in services.values()
                 for p in row.get("Publishers") or [] if p.get("PublishedPort")}  # fmt: skip
    assert sorted(published) == sorted(stack.ports), published  # the API and the dashboard
    assert set(published.values()) == {"127.0.0.1"}
    assert httpx.get(f"{stack.api}/readyz", timeout=30).status_code == 200
    # From any other address of this host (what another host would reach) nothing answers.
    addresses = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                 if a.family == socket.AF_INET and not a.address.startswith("127.")]  # fmt: skip
    assert addresses, "this host has no address but loopback"
    for address in addresses:
        for port in stack.ports:
            with socket.socket() as probe:
                probe.settimeout(3)
                assert probe.connect_ex((address, port)) != 0, f"{address}:{port} answers"


def test_the_placeholder_admin_key_is_refused_and_the_generated_one_works(
    stack: Stack, http: httpx.Client, admin_key: str
) -> None:
    assert len(admin_key) >= 32 and admin_key != "dev-admin-key"
    for placeholder in ("dev-admin-key", "changeme", "test-admin-key"):
        refused = http.get("/v1/admin/status", headers={"Authorization": f"Bearer {placeholder}"})
        assert refused.status_code == 401, refused.text
    status = http.get("/v1/admin/status", headers={"Authorization": f"Bearer {admin_key}"})
    assert status.status_code == 200, status.text
    # The service token the runtime requires was generated too: the platform reaches it.
    assert status.json()["runtime"]["status"] == "ok", status.json()


# ---- 2. the SDKs --------------------------------------------------------------------------
def test_memories_added_through_the_official_mem0_sdk_are_encoded(
    stack: Stack, mem0: Any, http: httpx.Client, auth: dict[str, str]
) -> None:
    added = mem0.add([{"role": "user", "content": fact} for fact in ALICE_FACTS],
                     user_id="alice", infer=False)  # fmt: skip
    assert added["status"] == "SUCCEEDED" and len(added["results"]) == len(ALICE_FACTS), added
    marker = f"zq{uuid.uuid4().hex[:10]}"
    doomed = mem0.add([{"role": "user", "content": f"My locker code is {marker}."},
                       {"role": "user", "content": f"My bank PIN hint is {marker}-pin."}],
                      user_id="bob", infer=False)  # fmt: skip
    ids = [r["id"] for r in added["results"]]
    bob = [r["id"] for r in doomed["results"]]
    wait_for("every memory encoded", lambda: encoded(http, auth, ids + bob), timeout=180)
    hits = mem0.search("Where does the user live?", filters={"user_id": "alice"}, top_k=2)
    assert "Lisbon" in hits["results"][0]["memory"], hits
    stack.shared.update(alice=ids, bob=bob, marker=marker)


@pytest.mark.parametrize("mode", ["hybrid", "kv", "prompt"])
def test_chat_through_the_official_openai_sdk(stack: Stack, chat: openai.OpenAI, mode: str) -> None:
    answer = ask(chat, "alice", mode)
    assert set(answer["memories"]) <= set(stack.shared["alice"]) and answer["memories"]
    if mode == "prompt":
        assert answer["injected_tokens"] == 0
    else:  # the facts' KV came from the pools, not from a prefill
        assert answer["injected_tokens"] > 0, answer
    stack.shared.setdefault("injected", {})[mode] = answer["injected_tokens"]
    streamed = chat.chat.completions.create(
        model="inferscale", user="alice", max_tokens=8, temperature=0, stream=True,
        messages=[{"role": "user", "content": "Which dog do I have?"}],
        extra_body={"memory": {"mode": mode}},
    )  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices).strip()


def test_the_dashboard_answers_and_logs_in_with_the_generated_key_only(
    stack: Stack, admin_key: str
) -> None:
    assert httpx.get(f"{stack.dashboard}/_stcore/health", timeout=30).text == "ok"
    from playwright.sync_api import expect, sync_playwright

    from tests.dashboard.test_browser import _chromium

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(stack.dashboard)
        # Reachable beyond loopback inside its container: no automatic login, the key is asked.
        page.get_by_label("Admin key").fill("dev-admin-key")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_text("The API refused this key")).to_be_visible(timeout=60_000)
        page.get_by_label("Admin key").fill(admin_key)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible(timeout=60_000)
        expect(page.get_by_test_id("stMetric").first).to_be_visible(timeout=60_000)
        assert page.get_by_test_id("stException").count() == 0
        browser.close()


# ---- 3. faults ----------------------------------------------------------------------------
def test_runtime_killed_mid_chat_answers_503_then_serves_its_kv_from_the_volume(
    stack: Stack, chat: openai.OpenAI
) -> None:
    jobs_before = stack.psql("select count(*) from jobs")
    encodings_before = stack.psql("select count(*), max(updated_at) from fact_encodings")
    first_token = threading.Event()
    outcome: dict[str, Any] = {}

    def long_answer() -> None:
        try:
            stream = chat.chat.completions.create(
                model="inferscale", user="alice", max_tokens=400, temperature=0, stream=True,
                messages=[{"role": "user", "content": "Tell me a long story about my dog."}],
                extra_body={"memory": {"mode": "kv"}},
            )  # fmt: skip
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    first_token.set()
            outcome["finished"] = True
        except openai.APIError as exc:
            outcome["error"] = exc
        finally:
            first_token.set()

    reader = threading.Thread(target=long_answer)
    reader.start()
    assert first_token.wait(120), "no first token"
    stack.crash("cpu-runtime")
    reader.join(120)
    assert "error" in outcome, f"the broken stream ended silently: {outcome}"

    # While the runtime is down or starting, a chat is refused with a clear 503.
    with pytest.raises(openai.APIStatusError) as refused:
        ask(chat, "alice", "kv")
    assert refused.value.status_code == 503, refused.value
    assert refused.value.code == "unavailable", refused.value.body

    # The restart policy brings it back; the KV comes from the volume, nothing is re-encoded.
    again = wait_for("a chat after the runtime's restart", lambda: ask(chat, "alice", "kv"),
                     timeout=420, every=3)  # fmt: skip
    assert again["injected_tokens"] == stack.shared["injected"]["kv"], again
    assert stack.runtime_metric("inferscale_runtime_encoded_facts_total") == 0
    assert stack.psql("select count(*) from jobs") == jobs_before
    assert stack.psql("select count(*), max(updated_at) from fact_encodings") == encodings_before
    stack.wait_healthy("cpu-runtime", timeout=120)


def test_worker_killed_mid_job_its_job_completes_exactly_once_after_the_restart(
    stack: Stack, mem0: Any, http: httpx.Client, auth: dict[str, str]
) -> None:
    facts = [{"role": "user", "content": f"Box {i} in my attic holds {i * 7 % 13} old letters."}
             for i in range(BULK)]  # fmt: skip
    added = mem0.add(facts, user_id="carol", infer=False)
    assert len(added["results"]) == BULK
    job_id = added["event_id"]

    def progress() -> dict[str, Any]:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=auth).json()
        return job

    wait_for("the encode job's first batch", lambda: progress()["progress_done"] >= 16,
             timeout=300, every=0.2)  # fmt: skip
    stack.crash("worker")
    done_before = progress()["progress_done"]
    assert 0 < done_before < BULK, done_before

    finished = wait_for("the job after the worker's restart",
                        lambda: (job := progress())["status"] in ("succeeded", "failed") and job,
                        timeout=400, every=2)  # fmt: skip
    assert finished["status"] == "succeeded", finished
    # Exactly once: the heir redid at most the batch in flight, every fact has one encoding.
    assert finished["result"]["encoded"] <= BULK - done_before + 16, finished
    recovered = stack.psql(f"select payload->>'recovered' from jobs where id = '{job_id}'")
    assert recovered.strip() == "1"  # its heartbeat stopped, the outbox sent it again
    ids = [r["id"] for r in added["results"]]
    assert encoded(http, auth, ids)
    page = mem0.get_all(filters={"user_id": "carol"}, page=1, page_size=200)
    assert page["count"] == BULK  # nothing added twice
    stack.wait_healthy("worker", timeout=120)


def test_postgres_stopped_for_a_few_seconds_gives_503s_then_the_api_recovers(
    stack: Stack, http: httpx.Client, auth: dict[str, str], chat: openai.OpenAI
) -> None:
    stack.run("stop", "--timeout", "10", "postgres")
    try:
        listing = http.get("/v1/memories", params={"user_id": "alice"}, headers=auth)
        assert listing.status_code == 503, listing.text
        assert listing.json()["error"]["code"] == "database_unavailable"
        with pytest.raises(openai.APIStatusError) as refused:
            ask(chat, "alice", "kv")
        assert refused.value.status_code == 503
        assert http.get("/readyz").status_code == 503
        time.sleep(5)
    finally:
        stack.run("start", "postgres")
    stack.wait_healthy("postgres", timeout=120)
    wait_for("the API serving from the database again", lambda: http.get(
        "/v1/memories", params={"user_id": "alice"}, headers=auth).status_code == 200,
        timeout=60)  # fmt: skip
    assert ask(chat, "alice", "kv")["injected_tokens"] > 0
    for service in ("api", "worker", "beat"):
        stack.wait_healthy(service, timeout=180)


def test_redis_restarted_the_outbox_delivers_what_was_written_meanwhile(
    stack: Stack, mem0: Any, http: httpx.Client, auth: dict[str, str], chat: openai.OpenAI
) -> None:
    stack.run("stop", "--timeout", "10", "redis")
    try:
        writing = time.monotonic()
        added = mem0.add([{"role": "user", "content": "I moved my piano to the garage."}],
                         user_id="alice", infer=False)  # fmt: skip
        waited("a memory written with Redis stopped, answered", writing)
        assert added["status"] == "SUCCEEDED", added  # acknowledged with the broker down
        memory_id, job_id = added["results"][0]["id"], added["event_id"]
        undispatched = stack.psql(f"select dispatched_at is null from jobs where id = '{job_id}'")
        assert undispatched.strip() == "t"  # the job waits in the outbox
        # The API's Redis breaker is open now (in the process that answered): what follows
        # takes the fallbacks without waiting for Redis again. Chats go on, limits unchecked.
        # (With several API processes each finds out once; the stack runs one.)
        writing = time.monotonic()
        again = mem0.add([{"role": "user", "content": "My piano is a 1920s Bechstein."}],
                         user_id="alice", infer=False)  # fmt: skip
        waited("a second memory written with Redis stopped, answered", writing)
        asking = time.monotonic()
        answered = ask(chat, "alice", "kv")
        waited("a chat with Redis stopped, answered", asking)
        # Answered from alice's memories. (Not injected: the two written just now are among
        # them and not encoded yet, and a request's facts are injected all or none.)
        assert answered["text"] and len(answered["memories"]) == 5
    finally:
        stack.run("start", "redis")
    stack.wait_healthy("redis", timeout=60)
    written = [memory_id, again["results"][0]["id"]]
    wait_for("the memories written while Redis was down, encoded", lambda: encoded(
        http, auth, written), timeout=240, every=2)  # fmt: skip
    sent = stack.psql(f"select dispatched_at is not null from jobs where id = '{job_id}'")
    assert sent.strip() == "t"
    stack.shared["alice"].extend(written)
    for service in ("worker", "beat"):
        stack.wait_healthy(service, timeout=180)


# ---- 4. nothing acknowledged lost; a deleted user leaves nothing --------------------------
def test_nothing_acknowledged_was_lost(
    stack: Stack, mem0: Any, http: httpx.Client, auth: dict[str, str]
) -> None:
    alice = mem0.get_all(filters={"user_id": "alice"}, page=1, page_size=100)
    assert {m["id"] for m in alice["results"]} == set(stack.shared["alice"])
    assert encoded(http, auth, stack.shared["alice"])


def test_deleting_a_user_leaves_nothing_in_rows_index_or_kv_files(
    stack: Stack, mem0: Any, chat: openai.OpenAI
) -> None:
    marker, bob = stack.shared["marker"], stack.shared["bob"]
    rows = f"select count(*) from facts f where f::text like '%{marker}%'"
    segments = ["sh", "-c", "grep -rlaF -e {} -e {} /kv --include='seg-*.seg' || true".format(*bob)]
    assert int(stack.psql(rows)) == 2
    assert stack.exec("cpu-runtime", *segments).strip()  # the probe finds the extents first
    assert set(ask(chat, "bob", "kv", "What is my locker code?")["memories"]) <= set(bob)

    mem0.delete_all(user_id="bob")

    tables = stack.psql("select tablename from pg_tables where schemaname = 'public'").split()
    for table in tables:  # every row of every table, as text
        found = stack.psql(f"select count(*) from \"{table}\" t where t::text like '%{marker}%'")
        assert int(found) == 0, table
    assert mem0.search(marker, filters={"user_id": "bob"})["results"] == []
    assert stack.exec("cpu-runtime", *segments).strip() == ""  # no extent of it in any file
    assert ask(chat, "bob", "kv", "What is my locker code?")["memories"] == []
