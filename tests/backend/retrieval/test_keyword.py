"""Keyword ranking (BM25 via bm25s), rank fusion, and the bounded per-user keyword cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.retrieval.index import FactIndex, IndexKey
from backend.retrieval.keyword import KeywordCache, KeywordIndex, fuse
from gpu_runtime.types import TenantId

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Doc:
    id: int
    text: str


TEXTS = [
    "Caroline adopted a golden retriever named Max",
    "Melanie went camping in the mountains",
    "On 8 May 2023 Caroline visited Porto",
    "the and of",  # stop words only
]


def test_ranking_finds_the_shared_rare_words_best_first() -> None:
    ranking = KeywordIndex(TEXTS).ranking("When was Caroline in Porto?")

    assert ranking[0] == 2  # Caroline and Porto
    assert set(ranking) == {0, 2}  # only texts sharing a word; never the stop words


def test_nothing_to_match_gives_an_empty_ranking() -> None:
    assert KeywordIndex([]).ranking("Porto") == []
    assert KeywordIndex(["the and of"]).ranking("Porto") == []
    assert KeywordIndex(TEXTS).ranking("the of") == []


def test_fusion_lifts_a_keyword_match_and_keeps_every_dense_item() -> None:
    dense = [0, 1, 2, 3, 4]
    assert fuse(dense, [4], 0.0) == dense
    assert fuse(dense, [], 0.5) == dense
    fused = fuse(dense, [4, 3], 1.0)
    assert sorted(fused) == dense
    assert fused.index(4) < dense.index(4)  # lifted
    assert fused[:3] == [4, 3, 0]  # at weight 1 both keyword matches beat the 1st dense alone


def test_the_cache_reloads_on_a_new_revision_and_stays_under_its_bytes() -> None:
    loads: list[str] = []

    def load(user: str) -> list[Doc]:
        loads.append(user)
        return [Doc(1, f"{user} lives in Porto"), Doc(2, f"{user} owns a boat")]

    cache = KeywordCache(max_bytes=1 << 30, weight=0.5)
    a, b, c = (IndexKey(TenantId("t"), u) for u in ("ann", "bob", "cyd"))
    docs, _, index = cache.get(a, 1, lambda: load("ann"))
    assert [docs[i].text for i in index.ranking("where is Porto")] == ["ann lives in Porto"]
    again, _, _ = cache.get(a, 1, lambda: load("ann"))
    assert loads == ["ann"] and again is docs  # the documents themselves, not a reload
    one = cache.held_bytes
    cache.max_bytes = int(one * 2.5)
    cache.get(a, 2, lambda: load("ann"))  # the user's memories changed
    assert loads == ["ann", "ann"]
    cache.get(b, 1, lambda: load("bob"))
    cache.get(c, 1, lambda: load("cyd"))  # over the budget: ann, least recent, goes
    assert cache.held_bytes <= cache.max_bytes
    cache.get(a, 2, lambda: load("ann"))
    assert loads[-1] == "ann" and len(loads) == 5


def test_dropping_a_tenant_from_the_dense_indexes_drops_its_keyword_indexes() -> None:
    index = FactIndex(384, use_gpu=False)
    index.keywords = KeywordCache(1 << 20, 0.5)
    mine, theirs = IndexKey(TenantId("gone"), "u"), IndexKey(TenantId("stays"), "u")
    for key in (mine, theirs):
        index.keywords.get(key, 1, lambda: [Doc(1, "secret boat name Zorba")])

    index.drop_tenant(TenantId("gone"))

    reloaded: list[IndexKey] = []

    def load(key: IndexKey) -> list[Doc]:
        reloaded.append(key)
        return [Doc(1, "x")]

    index.keywords.get(theirs, 1, lambda: load(theirs))
    index.keywords.get(mine, 1, lambda: load(mine))
    assert reloaded == [mine]  # only the dropped tenant's had to be loaded again


def test_importing_the_keyword_index_never_imports_jax(tmp_path: Path) -> None:
    """bm25s imports JAX at import time when installed (JAX then takes most of a GPU); the API
    must not. A stand-in ``jax`` package on the path records any import of it."""
    import subprocess
    import sys

    fake = tmp_path / "jax"
    fake.mkdir()
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (fake / "lax.py").write_text("def top_k(x, k):\n    return x[:k], list(range(k))\n")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import backend.retrieval.keyword as k; "
        "print(k.KeywordIndex(['porto greyhound', 'lisbon cat']).ranking('greyhound'))"
    )
    repo = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True, text=True, check=True, cwd=repo,
    )  # fmt: skip
    assert run.stdout.strip() == "[0]"
    assert not marker.exists(), "importing the keyword index imported jax"
    # The stand-in is importable: without the guard, bm25s would have imported it.
    control = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import bm25s",
         str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert control.returncode == 0 and marker.exists()
