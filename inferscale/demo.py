"""The platform demo: a tenant, a LoCoMo conversation imported and encoded by the worker through
the runtime, then LoCoMo questions answered through the official OpenAI SDK with the memories
injected as KV and, side by side, pasted into the prompt."""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import httpx

from backend.core.paths import locomo_dir

CONVERSATION = "conv-30.json"
BAR = 30


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _bar(what: str, done: int, total: int, status: str) -> str:
    filled = BAR * done // total if total else 0
    return f"    {what:<10} [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} {status}"


def _follow(http: httpx.Client, job_id: str, headers: dict[str, str], what: str) -> Any:
    """A job's progress as a bar (redrawn in place on a terminal), until it ends."""
    started, last, tty = time.monotonic(), "", sys.stdout.isatty()
    while True:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=headers).json()
        line = _bar(what, job["progress_done"], job["progress_total"], job["status"])
        if line != last:
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
            last = line
        if job["status"] in ("succeeded", "failed"):
            if tty:
                print(flush=True)
            if job["status"] == "failed":
                raise SystemExit(f"{what} failed: {job['error']}")
            return job
        if time.monotonic() - started > 1800:
            raise SystemExit(f"{what} did not finish in 30 minutes")
        time.sleep(0.5)


def _wait_ready(http: httpx.Client, api: str) -> None:
    for _ in range(300):
        try:
            if http.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise SystemExit(f"the API at {api} did not become ready (see /readyz)")


MODES = ("hybrid", "kv", "prompt")  # the default first


def run(api: str, admin_key: str, questions: int = 3, dashboard: str | None = None) -> None:
    import openai

    http = httpx.Client(base_url=api, timeout=600)
    _wait_ready(http, api)
    admin = {"Authorization": f"Bearer {admin_key}"}
    tenant = http.post("/v1/tenants", json={"name": f"demo-{uuid.uuid4().hex[:6]}"}, headers=admin)
    tenant.raise_for_status()
    key = tenant.json()["api_key"]
    headers = {"Authorization": f"Bearer {key}"}
    _say(f"tenant {tenant.json()['name']} created (key {key[:12]}...)")

    sample: dict[str, Any] = json.loads((locomo_dir() / CONVERSATION).read_text())
    imported = http.post(
        "/v1/conversations", json={"user_id": "demo-user", "locomo": sample}, headers=headers
    )
    imported.raise_for_status()
    _say(f"LoCoMo {CONVERSATION}: {imported.json()['turns']} turns imported")
    ingest = _follow(http, imported.json()["job_id"], headers, "facts")
    facts = ingest["result"].get("fact_ids", [])
    _say(f"{len(facts)} facts; the runtime encodes their KV (context window w, chunked RoPE)")
    if ingest["result"].get("encode_job_id"):
        _follow(http, ingest["result"]["encode_job_id"], headers, "encoding")

    sdk = openai.OpenAI(api_key=key, base_url=f"{api}/v1")

    def ask(question: str, mode: str, max_tokens: int = 32) -> tuple[str, dict[str, Any]]:
        reply = sdk.chat.completions.create(
            model="inferscale", messages=[{"role": "user", "content": question}],
            user="demo-user", max_tokens=max_tokens, temperature=0,
            extra_body={"memory": {"top_k": 10, "mode": mode}},
        )  # fmt: skip
        extra = reply.model_extra["inferscale"] if reply.model_extra else {}
        return (reply.choices[0].message.content or "").strip().replace("\n", " "), extra

    _say("warming up: one chat per mode (the runtime encodes the preamble once)")
    for mode in MODES:
        ask("Hello!", mode, max_tokens=4)
    ttfts: dict[str, list[float]] = {mode: [] for mode in MODES}
    for qa in sample["qa"][:questions]:
        _say(f"Q: {qa['question']}   (expected: {qa.get('answer')})")
        print(f"    {'mode':<7}{'TTFT':>9}  {'as KV':>6}  answer", flush=True)
        for mode in MODES:
            answer, extra = ask(str(qa["question"]), mode)
            ttfts[mode].append(float(extra.get("ttft_ms") or 0.0))
            injected = int(extra.get("injected_tokens") or 0)
            print(f"    {mode:<7}{ttfts[mode][-1]:>6.0f} ms  {injected:>6}  {answer[:90]}")
            if mode == "kv" and not injected:
                raise SystemExit("kv mode injected nothing: see the runtime's log")
    if all(ttfts.values()):
        mean = {mode: sum(v) / len(v) for mode, v in ttfts.items()}
        _say(f"mean TTFT at k=10: kv {mean['kv']:.0f} ms, hybrid {mean['hybrid']:.0f} ms "
             f"(the default: the 2 most relevant facts prefilled), prompt {mean['prompt']:.0f} "
             f"ms ({mean['prompt'] / mean['kv']:.1f}x kv; this host and model: the 8B-shape "
             "GPU numbers are in docs/benchmarks.md)")  # fmt: skip
    if dashboard:
        _say(f"the dashboard: {dashboard} (memories, cache residency, latency)")
