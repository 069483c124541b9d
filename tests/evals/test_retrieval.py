"""The evaluation's retrieval travels as a file: computed once (MiniLM + FAISS), written, and read
back elsewhere giving the very same facts in the same order without embedding anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.dataset import load_conversations
from evals.retrieval import Retrieval
from tests.support import locomo_opening

pytestmark = pytest.mark.unit


def test_hits_are_written_and_read_back_unchanged(tmp_path: Path) -> None:
    (conv,) = load_conversations(locomo_opening(tmp_path / "c.json", turns=12))
    questions = conv.questions[:3]
    path = tmp_path / "hits.json"

    first = Retrieval(path)
    hits = first.top(conv, questions, 4)
    first.save()
    assert first.computed and path.is_file()
    assert all(len(ids) == 4 and len(set(ids)) == 4 for ids in hits)
    assert all(0 <= i < len(conv.facts) for ids in hits for i in ids)

    again = Retrieval(path)
    assert again.top(conv, questions, 4) == hits
    assert again.top(conv, questions, 2) == [ids[:2] for ids in hits]  # a smaller k: a prefix
    assert not again.computed  # nothing was embedded

    stored = json.loads(path.read_text())
    expected = {str(q.index): ids for q, ids in zip(questions, hits, strict=True)}
    assert stored[conv.sample] == expected


def test_a_file_without_a_conversation_falls_back_to_searching(tmp_path: Path) -> None:
    (conv,) = load_conversations(locomo_opening(tmp_path / "c.json", turns=12))
    path = tmp_path / "hits.json"
    path.write_text(json.dumps({"another-sample": {"0": [1, 2]}}))
    retrieval = Retrieval(path)
    assert len(retrieval.top(conv, conv.questions[:2], 3)[0]) == 3
    assert retrieval.computed


def test_fused_hits_are_the_platforms_ranking_and_name_their_weight(tmp_path: Path) -> None:
    """With a keyword weight the harness ranks as the API does (the platform's fuse over the
    whole dense ranking); the file records the weight and refuses to be read with another."""
    from backend.retrieval.keyword import KeywordIndex, fuse

    (conv,) = load_conversations(locomo_opening(tmp_path / "c.json", turns=12))
    questions = conv.questions[:3]
    dense = Retrieval().top(conv, questions, len(conv.facts))
    path = tmp_path / "fused.json"
    fused = Retrieval(path, keyword_weight=0.5)
    got = fused.top(conv, questions, 4)
    fused.save()
    keywords = KeywordIndex(list(conv.facts))
    for question, ranking, ids in zip(questions, dense, got, strict=True):
        assert ids == fuse(ranking, keywords.ranking(question.text), 0.5)[:4]
    assert json.loads(path.read_text())["_keyword_weight"] == 0.5
    assert Retrieval(path, keyword_weight=0.5).top(conv, questions, 4) == got
    with pytest.raises(ValueError, match=r"keyword weight 0\.5"):
        Retrieval(path, keyword_weight=0.0)
