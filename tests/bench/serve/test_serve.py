"""A tiny ``inferscale bench serve`` against a running stack (API over HTTP, Celery worker,
runtime), so the harness cannot rot. No speed is asserted here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench.serve.clients import ClientProcesses
from bench.serve.report import write
from bench.serve.serve import PARTS, ServeBench, to_rows
from tests.support import ADMIN_KEY, locomo_opening

pytestmark = pytest.mark.broker


def test_serve_bench_measures_ttft_parts_and_health(
    served_api: str, celery_worker_process: Any, tmp_path: Path
) -> None:
    # Cells of 2 users run in two client processes (bench/serve/clients.py), of 1 in this one.
    bench = ServeBench(served_api, ADMIN_KEY, max_tokens=4, clients=ClientProcesses(2))
    bench.prepare(locomo_opening(tmp_path / "opening.json"), log=lambda _: None, tenants=2)
    assert len(bench.keys) == 2  # users alternate between two tenants
    cells = asyncio.run(bench.run([1, 2], [0, 2], ["kv", "prompt"], per_user=1))
    rows = to_rows(cells)
    assert {(r["users"], r["k"], r["mode"]) for r in rows} == {
        (u, k, m) for u in (1, 2) for k in (0, 2) for m in ("kv", "prompt")
    }
    for r in rows:
        assert r["failures"] == 0 and r["requests"] == r["users"]
        parts = r["parts_median_ms"]
        assert set(PARTS) <= set(parts) and parts["engine_ttft"] > 0
        # Where auth_db went: arrival -> let in -> the retrieval's thread, inside the lap (each
        # sample's order holds for the medians too).
        admitted, thread = parts["auth_db_admitted"], parts["auth_db_retrieval_thread"]
        assert 0 < parts["auth_db_admission_own"] <= admitted <= thread <= parts["auth_db"]
        splits = {n for n in parts if n.startswith("search_")}
        if r["k"] == 0:
            assert not splits  # no search, no splits of it
        else:  # each split sits inside the search lap
            assert splits == {f"search_{n}" for n in ("user", "index", "keyword", "dense",
                                                       "rows", "keys")}  # fmt: skip
            assert all(0 <= parts[n] <= parts["search"] for n in splits)
        assert r["client_ttft_ms"]["median"] >= parts["engine_ttft"]  # the runtime's is a part
        assert r["k"] == 0 or parts["search"] > 0
        assert r["healthz_ms"]["n"] > 0  # /healthz was probed while the cell ran
        assert 1 <= r["content_chunks_per_chat"]["median"] <= 4  # 4 tokens, merged or not
        cores = r["cpu_cores"]  # the client at least worked; no process is busier than the host
        assert cores["bench client"] > 0 and cores["host busy"] <= cores["host"]
        assert r["client_loop_lag_ms"]["n"] > 0  # the clients' loops were probed too
        where = r["query_embedded_on"]  # k=0 searches nothing; else each query says where
        assert (
            where == {"None": r["users"]}
            if r["k"] == 0
            else (set(where) <= {"runtime", "api"} and sum(where.values()) == r["users"])
        )
    paths = write({"model": "m", "device": "cpu", "cells": rows}, tmp_path / "out")
    assert {p.name for p in paths} >= {"serve.json", "serve.md"}
    assert "API adds" in (tmp_path / "out" / "serve.md").read_text()
    assert "Cores busy during each cell" in (tmp_path / "out" / "serve.md").read_text()
