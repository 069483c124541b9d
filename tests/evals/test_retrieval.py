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


def test_a_file_ranked_over_other_texts_of_the_facts_is_refused(tmp_path: Path) -> None:
    """An import that writes the facts otherwise (e.g. their dates) ranks them otherwise: a
    hits file keeps a digest of the texts it ranked and is not paired with other texts."""
    import dataclasses

    (conv,) = load_conversations(locomo_opening(tmp_path / "c.json", turns=12))
    path = tmp_path / "hits.json"
    first = Retrieval(path)
    hits = first.top(conv, conv.questions[:2], 3)
    first.save()
    assert Retrieval(path).top(conv, conv.questions[:2], 3) == hits  # the same texts: read
    reworded = dataclasses.replace(conv, facts=tuple(f"Then, {f}" for f in conv.facts))
    with pytest.raises(ValueError, match="other texts"):
        Retrieval(path).top(reworded, conv.questions[:2], 3)


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


def test_the_memories_are_what_the_import_keeps_and_the_file_names_them(tmp_path: Path) -> None:
    """Facts over the observations, the turns or both, as ``ConversationService.ingest`` keeps
    them (the same text function); a hits file ranked over one kind refuses another."""
    from backend.core.locomo import ConversationMemories as M
    from backend.core.locomo import parse_locomo, turn_memory_text

    source = locomo_opening(tmp_path / "c.json", turns=12)
    parsed = parse_locomo(json.loads(source.read_text()))
    (observed,) = load_conversations(source, M.OBSERVATIONS)
    (said,) = load_conversations(source, M.TURNS)
    (both,) = load_conversations(source, M.BOTH)
    spoken = [t for t in parsed.turns if t.text]
    assert observed.facts == tuple(o.text for o in parsed.observations)
    assert said.facts == tuple(turn_memory_text(t.speaker, t.text, t.spoken_at) for t in spoken)
    assert said.fact_refs == tuple(t.ref for t in spoken)
    assert both.facts == observed.facts + said.facts
    assert both.fact_refs == observed.fact_refs + said.fact_refs
    # a turn's window is the turns before it, as an observation's is its turn's
    assert [said.window(i, 2)[-1:] for i in (1, 2)] == [said.turns[0:1], said.turns[1:2]]

    path = tmp_path / "both.json"
    ranked = Retrieval(path, keyword_weight=0.5, memories=M.BOTH)
    got = ranked.top(both, both.questions[:2], 5)
    ranked.save()
    assert json.loads(path.read_text())["_memories"] == "both"
    assert (
        Retrieval(path, keyword_weight=0.5, memories=M.BOTH).top(both, both.questions[:2], 5) == got
    )
    with pytest.raises(ValueError, match="over the both memories"):
        Retrieval(path, keyword_weight=0.5)


def test_the_hits_command_writes_every_questions_top_k(tmp_path: Path) -> None:
    from evals.retrieval import main

    source = locomo_opening(tmp_path / "c.json", turns=12)
    out = tmp_path / "hits.json"
    assert main(["--files", str(source), "--k", "3", "--memories", "turns", "--out", str(out)]) == 0
    (conv,) = load_conversations(source)
    written = json.loads(out.read_text())
    assert written["_memories"] == "turns" and "_keyword_weight" in written
    assert sorted(written[conv.sample]) == sorted(str(q.index) for q in conv.questions)
    assert all(len(ids) == 3 for ids in written[conv.sample].values())
