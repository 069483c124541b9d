"""The noisy-neighbour benchmark (``inferscale bench fairness``): tenant A floods the API with N
concurrent users while tenant B sends one chat at a time; B's latency idle and under the flood,
A's served rate and 429s, and the platform's throughput, with the runtime's fair gate as
configured and with it opened as wide as the engine's batch (first come, first served), side by
side in one run.

Both tenants chat as the official OpenAI SDK does (streaming, ``max_retries=0`` so every 429 is
counted; a refused user waits the ``Retry-After`` it was given, as the SDK would). A's users run
in processes of their own (``flood.py``), so B's latency is not the load generator's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.serve.chats import Sample, http_client, parts_of
from bench.serve.flood import ChatSpec, FloodCounts, FloodProcesses, open_chat
from bench.serve.loop_lag import LoopLag
from bench.serve.serve import part_medians, summarize

FACTS = [
    "The user's locker code is 4417.", "The user's favourite colour is teal.",
    "The user lives in Lisbon.", "The user's dog is a greyhound named Bolt.",
    "The user works as a nurse on night shifts.", "The user's sister is called Ana.",
    "The user is allergic to peanuts.", "The user plays the cello on Sundays.",
]  # fmt: skip
QUIET_S = 2.0  # longer than the gate's memory of a recently active tenant (recent_s: 1 s)
QUESTIONS = ["What is my locker code?", "Where do I live?", "What is my dog's name?",
             "What do I do for work?", "What am I allergic to?"]  # fmt: skip


@dataclass
class Phase:
    name: str
    b_latency_ms: list[float] = field(default_factory=list)
    b_ttft_ms: list[float] = field(default_factory=list)
    b_samples: list[Sample] = field(default_factory=list)  # B's TTFTs with the API's parts
    a: FloodCounts = field(default_factory=FloodCounts)
    b_server_errors: int = 0
    b_limited: int = 0
    b_loop_lag_ms: list[float] = field(default_factory=list)  # the bench process's own lateness
    seconds: float = 0.0
    gate: dict[str, Any] = field(default_factory=dict)
    preempted: int = 0  # requests the gate took back (and resumed) during the phase

    def row(self) -> dict[str, Any]:
        served = self.a.served + len(self.b_latency_ms)
        return {
            "phase": self.name, "b_latency_ms": summarize(self.b_latency_ms),
            "b_ttft_ms": summarize(self.b_ttft_ms),
            "b_parts_median_ms": part_medians(self.b_samples),
            "b_loop_lag_ms": summarize(self.b_loop_lag_ms), "a_served": self.a.served,
            "a_429": self.a.limited, "a_retry_after_s": summarize(self.a.retry_after_s),
            "a_errors": self.a.errors, "b_429": self.b_limited,
            "5xx": self.a.server_errors + self.b_server_errors, "seconds": round(self.seconds, 2),
            "requests_per_s": served / self.seconds if self.seconds else 0.0,
            "preempted": self.preempted, "gate": self.gate,
        }  # fmt: skip


class FairnessBench:
    def __init__(self, api: str, admin_key: str, runtime: str, service_token: str,
                 max_tokens: int = 8, k: int = 5, mode: str = "kv") -> None:  # fmt: skip
        self.api, self.runtime = api.rstrip("/"), runtime.rstrip("/")
        self.admin = {"Authorization": f"Bearer {admin_key}"}
        self.service = {"Authorization": f"Bearer {service_token}"}
        self.spec = ChatSpec(self.api, tuple(QUESTIONS), max_tokens, k, mode)
        self.keys: dict[str, str] = {}

    def prepare(self, log: Any = print) -> None:
        """Tenants A and B, each with one user's facts stored and encoded (through Celery)."""
        http = httpx.Client(base_url=self.api, timeout=600)
        for name in ("A", "B"):
            created = http.post("/v1/tenants", json={"name": f"fair-{name}-{uuid.uuid4().hex[:6]}"},
                                headers=self.admin)  # fmt: skip
            created.raise_for_status()
            self.keys[name] = key = created.json()["api_key"]
            auth = {"Authorization": f"Bearer {key}"}
            jobs = []
            for fact in FACTS:
                added = http.post("/v1/memories", json={"user_id": "u", "text": fact}, headers=auth)
                added.raise_for_status()
                jobs.append(added.json().get("job_id"))
            for job in filter(None, jobs):
                self._wait(http, job, auth)
        log("prepared: tenants A and B, each with one user's facts encoded")

    @staticmethod
    def _wait(http: httpx.Client, job_id: str, auth: dict[str, str]) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = http.get(f"/v1/jobs/{job_id}", headers=auth).json()["status"]
            if status in ("succeeded", "failed"):
                return
            time.sleep(0.1)
        raise TimeoutError(f"job {job_id} did not finish")

    def gate(self, slots: int | None = None) -> dict[str, Any]:
        """The runtime's fair gate (resized first when ``slots`` is given)."""
        with httpx.Client(base_url=self.runtime, headers=self.service, timeout=30) as http:
            answer = http.put("/v1/fairness", json={"slots": slots}) if slots else http.get(
                "/v1/fairness")  # fmt: skip
            answer.raise_for_status()
            result: dict[str, Any] = answer.json()
            return result

    async def run(
        self,
        users: int,
        b_requests: int,
        wide_slots: int,
        slots: list[int] | None = None,
        flood_processes: int = 4,
    ) -> list[dict[str, Any]]:
        """Phases: B idle; the flood with the gate at each of ``slots`` (default: as the runtime
        is configured); the flood with the gate open (``wide_slots``). The gate is put back.
        A's ``users`` are dealt over ``flood_processes`` processes (``flood.py``)."""
        import openai

        b_sdk = openai.AsyncOpenAI(api_key=self.keys["B"], base_url=f"{self.api}/v1",
                                   max_retries=0, http_client=http_client())  # fmt: skip
        configured = int(self.gate()["slots"])
        flood = await asyncio.to_thread(
            FloodProcesses, self.spec, self.keys["A"], users, flood_processes
        )
        try:
            await self._chat(b_sdk, 0)  # warm-up: preambles, indexes, tokenizer (A's: flood.py)
            idle = Phase("idle")
            started = time.perf_counter()
            async with LoopLag() as lag:
                for i in range(b_requests):
                    await self._b(b_sdk, idle, i)
            idle.seconds, idle.b_loop_lag_ms = time.perf_counter() - started, lag.ms
            phases = [idle]
            try:
                for size in slots or [configured]:
                    self.gate(size)
                    name = f"flood, fair gate ({size} slots)"
                    phases.append(await self._flood(b_sdk, flood, name, b_requests))
                self.gate(wide_slots)
                wide = f"flood, gate open ({wide_slots} slots: first come, first served)"
                phases.append(await self._flood(b_sdk, flood, wide, b_requests))
            finally:
                self.gate(configured)
            return [phase.row() for phase in phases]
        finally:
            await b_sdk.close()
            flood.close()

    async def _chat(self, sdk: Any, index: int) -> tuple[float, Sample]:
        """The total latency in ms of one streamed chat, and its TTFT with the API's parts of it
        (where B's time goes under the flood: the API's laps, the hops, the runtime's share)."""
        sent = time.perf_counter()
        first: float | None = None
        extension: dict[str, Any] = {}
        async for chunk in await open_chat(sdk, self.spec, index):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
            extension = (chunk.model_extra or {}).get("inferscale", extension)
        done = time.perf_counter()
        ttft = ((first or done) - sent) * 1000
        return (done - sent) * 1000, Sample(ttft, parts_of(extension, ttft))

    async def _b(self, sdk: Any, phase: Phase, index: int) -> None:
        import openai

        try:
            latency, sample = await self._chat(sdk, index)
        except openai.RateLimitError:
            phase.b_limited += 1
            return
        except openai.InternalServerError:
            phase.b_server_errors += 1
            return
        phase.b_latency_ms.append(latency)
        phase.b_ttft_ms.append(sample.client_ttft_ms)
        phase.b_samples.append(sample)

    async def _flood(self, b_sdk: Any, flood: FloodProcesses, name: str, b_requests: int) -> Phase:
        phase = Phase(name)
        # Quiet first, so that A floods alone (the engine's whole batch) and B's arrival is the
        # moment contention begins: the transition the gate has to handle, in every phase.
        await asyncio.sleep(QUIET_S)
        preempted = _preempted(self.gate())
        started = time.perf_counter()
        flood.start()
        await asyncio.sleep(1.0)  # the flood is on before B's first request
        async with LoopLag() as lag:
            for i in range(b_requests):
                await self._b(b_sdk, phase, i)
        phase.b_loop_lag_ms = lag.ms
        phase.gate = self.gate()
        phase.preempted = _preempted(phase.gate) - preempted
        phase.a = await asyncio.to_thread(flood.stop)
        phase.seconds = time.perf_counter() - started
        return phase


def _preempted(gate: dict[str, Any]) -> int:
    return int(sum(t.get("preempted", 0) for t in gate.get("tenants", {}).values()))


def markdown(result: dict[str, Any]) -> str:
    rows = result["phases"]
    idle = rows[0]["b_latency_ms"]["median"] or 1.0
    idle95 = rows[0]["b_latency_ms"]["p95"] or 1.0
    lines = [
        f"### Noisy neighbour: {result['model']} on {result['device']}",
        "",
        f"Tenant A: {result['users']} concurrent users flooding; tenant B: one chat at a time "
        f"({result['b_requests']} a phase); k={result['k']}, {result['mode']}, "
        f"{result['max_tokens']} tokens, streamed.",
        "",
        "| phase | B latency p50 (p95) ms | B p50 / idle | B p95 / idle | B TTFT p50 ms | "
        "A served | A 429s | A preempted | 5xx | req/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = r["b_latency_ms"]
        lines.append(
            f"| {r['phase']} | {b['median']:.1f} ({b['p95']:.1f}) | {b['median'] / idle:.2f}x | "
            f"{b['p95'] / idle95:.2f}x | {r['b_ttft_ms']['median']:.1f} | {r['a_served']} | "
            f"{r['a_429']} | {r.get('preempted', 0)} | {r['5xx']} | {r['requests_per_s']:.2f} |"
        )
    lines += _parts_table(rows)
    open_rate = rows[-1]["requests_per_s"]
    if len(rows) >= 3 and open_rate:
        lines.append("")
        for r in rows[1:-1]:
            ratio = r["requests_per_s"] / open_rate
            lines.append(f"* Throughput under the flood, {r['phase']} / open gate: {ratio:.2f}x.")
    return "\n".join(lines) + "\n"


# B's TTFT in the order a chat spends it: the API's laps, its hop to the runtime and back, the
# runtime's own share (its queue at the fair gate included), and the client's hop to the API.
PARTS = ("auth_db", "embed", "search", "compose", "commit", "api_runtime_hops", "engine_ttft",
         "client_api_hops")  # fmt: skip


def _parts_table(rows: list[dict[str, Any]]) -> list[str]:
    """Where B's TTFT went in each phase (medians of each part, so they need not add up)."""
    if not any(r.get("b_parts_median_ms") for r in rows):
        return []
    lines = ["", "Where B's TTFT went (p50 ms of each part, from the API's per-request timings):",
             "", "| phase | TTFT | " + " | ".join(PARTS) + " | B's loop late p95 |",
             "|---|---|" + "---|" * (len(PARTS) + 1)]  # fmt: skip
    for r in rows:
        parts = r.get("b_parts_median_ms") or {}
        cells = " | ".join(f"{parts[n]:.1f}" if n in parts else "" for n in PARTS)
        late = r.get("b_loop_lag_ms", {}).get("p95")
        lines.append(f"| {r['phase']} | {r['b_ttft_ms']['median']:.1f} | {cells} | "
                     f"{'' if late is None else f'{late:.1f}'} |")  # fmt: skip
    lines += [f"* {r['phase']}: A's other failures: {r['a_errors']}" for r in rows
              if r.get("a_errors")]  # fmt: skip
    return lines
