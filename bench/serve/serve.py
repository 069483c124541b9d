"""``inferscale bench serve``: TTFT as a tenant's app sees it, through the API.

N concurrent streaming clients of the official OpenAI SDK (its aiohttp transport), in the
bench's process or spread over client processes (``clients.py``), ask LoCoMo questions of one
user whose conversation was imported and encoded through the platform (real
Postgres, MiniLM + FAISS retrieval, the runtime). Per cell (users, k, mode):

* the client's TTFT (request sent -> first content token), the runtime's own TTFT, requests/s,
  failures;
* where the client's TTFT went, from the API's per-request timings: ``auth_db`` (arrival,
  authentication, tenant lookup), ``embed``, ``search`` (FAISS and the fact rows), ``compose``,
  ``commit``, ``api_runtime_hops`` (API -> runtime -> API around the runtime's TTFT), the
  runtime's ``engine_ttft``, and ``client_api_hops`` (the rest: client <-> API, SSE);
  beside them, where ``auth_db`` went (``auth_db_admitted``: arrival to the tenant let in,
  ``auth_db_admission_own``: the admission's own Redis and cache work,
  ``auth_db_retrieval_thread``: arrival to the retrieval's thread) and where ``search`` went
  (``search_user``, ``search_index``, ``search_keyword``, ``search_dense``, ``search_rows``,
  ``search_keys``: backend/services/memories.py and chat.py);
* ``/healthz`` latency, probed every 20 ms while the cell runs.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.serve import watchdog
from bench.serve.chats import (
    BENCH_USER,
    FIRST_CELL_QUESTION,
    Outcome,
    Sample,
    Workload,
    cell_questions,
    platform_chat,
    questions_from,
    run_users,
    sdks_for,
)
from bench.serve.clients import ClientProcesses
from bench.serve.host_cpu import CpuMeter
from bench.serve.loop_lag import LoopLag
from bench.serve.loop_probes import LoopProbes

PARTS = ("auth_db", "embed", "search", "compose", "commit", "api_runtime_hops", "engine_ttft",
         "client_api_hops")  # fmt: skip


@dataclass
class Cell:
    users: int
    k: int
    mode: str
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # failure kind -> count
    seconds: float = 0.0
    health_ms: list[float] = field(default_factory=list)
    cpu_cores: dict[str, float] = field(default_factory=dict)  # bench/serve/host_cpu.py
    busiest_process: dict[str, float] = field(default_factory=dict)  # cores, per group
    busiest_name: dict[str, str] = field(default_factory=dict)  # that process's name
    loop_lag_ms: list[float] = field(default_factory=list)  # the client's (bench/serve/loop_lag.py)
    server_loops: dict[str, dict[str, float]] = field(default_factory=dict)  # loop_probes.py


async def measure_cell(
    cell: Cell,
    cpu: CpuMeter,
    workload: Workload,
    drive: Callable[[], Awaitable[Outcome]],
    probes: LoopProbes | None = None,
    clients: ClientProcesses | None = None,
) -> None:
    """Run the cell's users (each does ``workload``): in this process (``drive``), or spread
    over ``clients``; record the outcome, the cell's wall time, the host's CPU by service
    meanwhile (bench/serve/host_cpu.py), the clients' loop lag (bench/serve/loop_lag.py) and
    the servers' (bench/serve/loop_probes.py)."""
    watchdog.progress()
    before = probes.snapshot() if probes is not None else None
    cpu.start()
    if clients is not None:
        shares, started = await asyncio.to_thread(clients.run, workload, cell.users)
        outcome = Outcome()
        for share in shares:
            outcome.add(share.outcome)
            cell.loop_lag_ms += share.loop_lag_ms
        cell.seconds = max(share.ended for share in shares) - started
    else:
        started = time.perf_counter()
        async with LoopLag() as lag:
            outcome = await drive()
        cell.seconds = time.perf_counter() - started
        cell.loop_lag_ms = lag.ms
    cell.cpu_cores = cpu.stop()
    cell.samples, cell.failures, cell.errors = outcome.samples, outcome.failures, outcome.errors
    cell.busiest_process, cell.busiest_name = cpu.busiest, cpu.busiest_name
    if probes is not None and before is not None:
        cell.server_loops = probes.cell(before, probes.snapshot())


def summarize(values: list[float]) -> dict[str, float]:
    """Median, p95 (nearest rank), min, max and count of a bench's samples."""
    if not values:
        return {"median": 0.0, "p95": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median": statistics.median(ordered), "p95": p95, "min": ordered[0],
            "max": ordered[-1], "n": len(ordered)}  # fmt: skip


class ServeBench:
    def __init__(
        self, api: str, admin_key: str, max_tokens: int = 16, warmup: int = 1,
        cpu: CpuMeter | None = None, probes: LoopProbes | None = None,
        clients: ClientProcesses | None = None,
    ) -> None:  # fmt: skip
        self.api = api.rstrip("/")
        self.clients = clients  # users spread over client processes (cells of 2+ users)
        self.cpu = cpu or CpuMeter()
        self.probes = probes
        self.warmup = warmup  # concurrent warm-up chats per tenant and mode
        self.admin = {"Authorization": f"Bearer {admin_key}"}
        self.max_tokens = max_tokens
        self.keys: list[str] = []  # user u chats as tenant u % len(keys)
        self.questions: list[str] = []
        self.imports: list[dict[str, float]] = []  # each tenant's import: upload -> KV ready

    # ---- set-up (synchronous: once) ---------------------------------------------------------
    def prepare(self, conversation: Path, log: Any = print, tenants: int = 1) -> None:
        """``tenants`` tenants (runtime replicas serve tenants, not users: spread the users over
        several to spread them over replicas), each with the conversation imported for its user
        and every fact encoded."""
        for _ in range(tenants):
            self._prepare_tenant(conversation, log)

    def facts(self) -> list[str]:
        """The texts of the (first tenant's) user's memories, as the platform stored them."""
        http = httpx.Client(base_url=self.api, timeout=60)
        auth = {"Authorization": f"Bearer {self.keys[0]}"}
        texts: list[str] = []
        while True:
            page = http.get("/v1/memories", headers=auth, params={
                "user_id": BENCH_USER, "offset": len(texts), "limit": 500}).json()  # fmt: skip
            texts += [m["memory"] for m in page["items"]]
            if len(texts) >= page["total"] or not page["items"]:
                return texts

    def _prepare_tenant(self, conversation: Path, log: Any) -> None:
        http = httpx.Client(base_url=self.api, timeout=600)
        created = http.post("/v1/tenants", json={"name": f"bench-{uuid.uuid4().hex[:6]}"},
                            headers=self.admin)  # fmt: skip
        created.raise_for_status()
        self.keys.append(created.json()["api_key"])
        auth = {"Authorization": f"Bearer {self.keys[-1]}"}
        sample = json.loads(conversation.read_text())
        self.questions = questions_from(conversation)
        started = time.perf_counter()
        imported = http.post("/v1/conversations", headers=auth,
                             json={"user_id": BENCH_USER, "locomo": sample})  # fmt: skip
        imported.raise_for_status()
        ingest = self._wait(http, imported.json()["job_id"], auth)
        ingested = time.perf_counter()
        encode_job = ingest["result"].get("encode_job_id")
        if encode_job:
            self._wait(http, encode_job, auth)
        ready = time.perf_counter()
        facts = len(ingest["result"].get("fact_ids", []))
        self.imports.append({
            "facts": facts, "upload_to_ingested_s": ingested - started,
            "ingested_to_kv_ready_s": ready - ingested, "upload_to_kv_ready_s": ready - started,
            "facts_per_s": facts / (ready - started) if ready > started else 0.0,
        })  # fmt: skip
        log(f"prepared: {facts} facts imported, extracted and encoded through Celery in "
            f"{ready - started:.1f} s ({facts / (ready - started):.1f} facts/s, upload to every "
            f"fact's KV ready)")  # fmt: skip

    @staticmethod
    def _wait(http: httpx.Client, job_id: str, auth: dict[str, str]) -> Any:
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            job = http.get(f"/v1/jobs/{job_id}", headers=auth).json()
            if job["status"] == "succeeded":
                return job
            if job["status"] == "failed":
                raise RuntimeError(f"job {job_id} failed: {job['error']}")
            time.sleep(0.05)
        raise TimeoutError(f"job {job_id} did not finish")

    # ---- measuring --------------------------------------------------------------------------
    def workload(self, mode: str, k: int, per_user: int, first: int = 0) -> Workload:
        return Workload(
            self.api, tuple(self.keys), tuple(self.questions), self.max_tokens, mode, k, per_user,
            first=first,
        )  # fmt: skip

    async def run(
        self, users: list[int], ks: list[int], modes: list[str], per_user: int,
        first_question: int = FIRST_CELL_QUESTION,
    ) -> list[Cell]:  # fmt: skip
        if self.warmup > FIRST_CELL_QUESTION:
            raise ValueError(f"at most {FIRST_CELL_QUESTION} warm-up chats")
        sdks = sdks_for(self.workload(modes[0], 0, per_user))
        firsts = cell_questions(users, ks, per_user, first_question)
        try:
            async with httpx.AsyncClient(base_url=self.api, timeout=30) as probe:
                await self.warm_up(sdks, modes, max(ks))
                cells = []
                for n in users:
                    for k in ks:
                        for mode in modes:
                            cells.append(await self._cell(
                                sdks, probe, n, k, mode, per_user, firsts[(n, k)]
                            ))  # fmt: skip
                return cells
        finally:
            for sdk in sdks:
                await sdk.close()
            if self.clients is not None:
                self.clients.close()

    async def warm_up(self, sdks: list[Any], modes: list[str], k: int) -> None:
        """Steady state before the first cell: ``warmup`` concurrent chats per tenant and mode,
        at the largest k, over the questions the cells ask first, so that every API process
        (the kernel spreads connections over them) has its user's index, the preamble's KV and
        the facts' token ids before anything is timed. One chat per mode reached one process of
        four: the first cell then paid the others' first use (in run 9 on the H200 kv's compose
        was 3.8 ms at 1 user against 1.1 in the hybrid cell after it, 50 facts' tokenization)."""
        watchdog.progress()
        for sdk in sdks:
            for mode in modes:
                workload = self.workload(mode, max(k, 1), 1)
                await asyncio.gather(*(
                    platform_chat(sdk, workload, i) for i in range(self.warmup)
                ))  # fmt: skip

    async def _cell(
        self, sdks: list[Any], probe: httpx.AsyncClient, n: int, k: int, mode: str, per_user: int,
        first: int,
    ) -> Cell:  # fmt: skip
        cell = Cell(n, k, mode)
        workload = self.workload(mode, k, per_user, first)
        running = True

        async def health() -> None:
            while running:
                started = time.perf_counter()
                response = await probe.get("/healthz")
                if response.status_code == 200:
                    cell.health_ms.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(0.02)

        print(f"serve users={n} k={k} {mode} started", flush=True)  # a profiler's cue
        prober = asyncio.ensure_future(health())
        clients = self.clients if n > 1 else None  # one user needs no more than one process
        await measure_cell(
            cell, self.cpu, workload, lambda: run_users(workload, list(range(n)), sdks),
            self.probes, clients,
        )  # fmt: skip
        running = False
        await prober
        ttft = summarize([s.client_ttft_ms for s in cell.samples])
        chunks = summarize([float(s.content_chunks) for s in cell.samples])
        print(
            f"serve users={n:<3} k={k:<3} {mode:<6} client TTFT p50 {ttft['median']:.1f} ms, "
            f"{len(cell.samples) / cell.seconds:.2f} req/s, {cell.failures} failed, "
            f"{chunks['median']:.0f} text chunks per chat",
            flush=True,
        )
        return cell


def part_medians(samples: list[Sample]) -> dict[str, float]:
    """Each part's median over the samples that have it (a split is there only when its step
    ran: the search's when the chat searched)."""
    names = dict.fromkeys(name for s in samples for name in s.parts)
    return {n: statistics.median([s.parts[n] for s in samples if n in s.parts]) for n in names}


def to_rows(cells: list[Cell]) -> list[dict[str, Any]]:
    rows = []
    for c in cells:
        done = len(c.samples)
        rows.append({
            "users": c.users, "k": c.k, "mode": c.mode, "requests": done + c.failures,
            "failures": c.failures, "errors": c.errors,
            "requests_per_s": done / c.seconds if c.seconds else 0.0,
            "client_ttft_ms": summarize([s.client_ttft_ms for s in c.samples]),
            "parts_median_ms": part_medians(c.samples),
            "healthz_ms": summarize(c.health_ms),
            "query_embedded_on": dict(Counter(str(s.query_embedded_on) for s in c.samples)),
            "content_chunks_per_chat": summarize([float(s.content_chunks) for s in c.samples]),
            "cpu_cores": c.cpu_cores,
            "busiest_process_cores": c.busiest_process,
            "busiest_process_name": c.busiest_name,
            "client_loop_lag_ms": summarize(c.loop_lag_ms),
            "server_loops": c.server_loops,
        })  # fmt: skip
    return rows
