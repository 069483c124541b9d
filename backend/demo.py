"""The platform demo: a tenant, a LoCoMo conversation imported and encoded by the worker, then
questions answered through the OpenAI SDK with memories injected as KV and as prompt text."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx

from backend.core.paths import locomo_dir

LOCOMO = locomo_dir() / "conv-30.json"
FALLBACK: dict[str, Any] = {
    "speaker_a": "Caroline",
    "speaker_b": "Melanie",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {
            "speaker": "Caroline",
            "dia_id": "D1:1",
            "text": "I went to an LGBTQ support group yesterday.",
        },
        {"speaker": "Melanie", "dia_id": "D1:2", "text": "That's great! I painted a lake sunrise."},
        {
            "speaker": "Caroline",
            "dia_id": "D1:3",
            "text": "My brother Tom just adopted a dog, Rex.",
        },
    ],
    "qa": [{"question": "What did Melanie paint?", "answer": "a lake sunrise", "category": 4}],
}


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _wait(http: httpx.Client, path: str, headers: dict[str, str], what: str) -> dict[str, Any]:
    started, last = time.monotonic(), ""
    while True:
        job: dict[str, Any] = http.get(path, headers=headers).json()
        line = f"    {what}: {job['status']} {job['progress_done']}/{job['progress_total']}"
        if line != last:
            print(line, flush=True)
            last = line
        if job["status"] in ("succeeded", "failed"):
            if job["status"] == "failed":
                raise SystemExit(f"{what} failed: {job['error']}")
            return job
        if time.monotonic() - started > 1800:
            raise SystemExit(f"{what} did not finish in 30 minutes")
        time.sleep(1)


def run(api: str, admin_key: str, questions: int = 3) -> None:
    import openai

    http = httpx.Client(base_url=api, timeout=600)
    for _ in range(120):
        try:
            if http.get("/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(1)
    else:
        raise SystemExit(f"the API at {api} did not become ready")
    admin = {"Authorization": f"Bearer {admin_key}"}
    tenant = http.post("/v1/tenants", json={"name": f"demo-{uuid.uuid4().hex[:6]}"}, headers=admin)
    tenant.raise_for_status()
    key = tenant.json()["api_key"]
    headers = {"Authorization": f"Bearer {key}"}
    _say(f"tenant {tenant.json()['name']} created (key {key[:12]}...)")

    sample: dict[str, Any] = json.loads(LOCOMO.read_text()) if LOCOMO.is_file() else FALLBACK
    imported = http.post(
        "/v1/conversations", json={"user_id": "demo-user", "locomo": sample}, headers=headers
    )
    imported.raise_for_status()
    _say(f"conversation imported: {imported.json()['turns']} turns; the worker extracts facts")
    ingest = _wait(http, f"/v1/jobs/{imported.json()['job_id']}", headers, "ingestion")
    facts = ingest["result"].get("fact_ids", [])
    _say(f"{len(facts)} facts; the worker encodes their KV (context window w, chunked RoPE)")
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        ready = sum(
            1
            for fid in facts[:: max(1, len(facts) // 20)]
            if any(e["status"] == "ready" for e in http.get(
                f"/v1/memories/{fid}/encodings", headers=headers).json())
        )  # fmt: skip
        sampled = len(facts[:: max(1, len(facts) // 20)])
        print(f"    encoded (sampled): {ready}/{sampled}", flush=True)
        if ready == sampled:
            break
        time.sleep(3)

    sdk = openai.OpenAI(api_key=key, base_url=f"{api}/v1")
    _say("warming up the API's engine (first use starts it)")
    for mode in ("kv", "prompt"):
        sdk.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Hello!"}],
            user="demo-user",
            max_tokens=4,
            extra_body={"memory": {"top_k": 10, "mode": mode}},
        )
    rows = []
    for qa in sample["qa"][:questions]:
        for mode in ("kv", "prompt"):
            reply = sdk.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": str(qa["question"])}],
                user="demo-user",
                max_tokens=32,
                temperature=0,
                extra_body={"memory": {"top_k": 10, "mode": mode}},
            )
            extra = reply.model_extra["inferscale"] if reply.model_extra else {}
            answer = (reply.choices[0].message.content or "").strip().replace("\n", " ")
            rows.append((qa["question"], mode, extra.get("ttft_ms") or 0.0, extra, answer))
            _say(f"[{mode:6}] {qa['question']}")
            print(f"    answer: {answer[:100]}")
            print(
                f"    expected: {qa.get('answer')} | TTFT {extra.get('ttft_ms', 0):.0f} ms, "
                f"{extra.get('injected_tokens', 0)} tokens injected as KV"
            )
    kv = [r[2] for r in rows if r[1] == "kv"]
    prompt = [r[2] for r in rows if r[1] == "prompt"]
    if kv and prompt:
        _say(
            f"mean TTFT at k=10: kv {sum(kv) / len(kv):.0f} ms vs prompt "
            f"{sum(prompt) / len(prompt):.0f} ms (SmolLM2 on this CPU; see docs for GPU numbers)"
        )
    _say("done: the dashboard (make dashboard) shows memories, cache residency and latency")
