"""Official LoCoMo scoring, hand-checked, plus the harness's pure helpers (no engine)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from evals import scoring
from evals.dataset import Question, select_questions
from evals.locomo import NOT_MENTIONED, build_query, extract_answer
from evals.report import first_token_kl, summarize

pytestmark = pytest.mark.unit

# Outputs of nltk 3.9.1's PorterStemmer() (default NLTK_EXTENSIONS mode), which the official
# scorer uses; they cover the irregular forms, the -ies/-ied, y->i and short-word extensions.
NLTK_STEMS = [
    ("caresses", "caress"), ("ponies", "poni"), ("dies", "die"), ("died", "die"),
    ("spied", "spi"), ("flies", "fli"), ("cats", "cat"), ("agreed", "agre"), ("feed", "feed"),
    ("hopping", "hop"), ("falling", "fall"), ("hissing", "hiss"), ("filing", "file"),
    ("happy", "happi"), ("enjoy", "enjoy"), ("sky", "sky"), ("skies", "sky"), ("dying", "die"),
    ("generalization", "gener"), ("relational", "relat"), ("conditional", "condit"),
    ("hopefulness", "hope"), ("electrical", "electr"), ("adjustable", "adjust"),
    ("adoption", "adopt"), ("geology", "geolog"), ("generously", "gener"),
    ("controlling", "control"), ("roll", "roll"), ("is", "is"), ("his", "hi"), ("as", "as"),
    ("dancing", "danc"), ("dance", "danc"), ("painting", "paint"), ("paints", "paint"),
]  # fmt: skip


@pytest.mark.parametrize(("word", "stem"), NLTK_STEMS)
def test_porter_stem_matches_nltk(word: str, stem: str) -> None:
    assert scoring.porter_stem(word) == stem


def test_normalize_drops_case_punctuation_articles_and_commas() -> None:
    assert scoring.normalize_answer("The Cat, and a  Dog!") == "cat dog"
    assert scoring.normalize_answer("An apple-pie; THE end.") == "applepie end"
    assert scoring.normalize_answer("Theatre and band") == "theatre band"  # whole words only


def test_token_f1_hand_checked() -> None:
    # jon lost hi job | he lost hi job: 3 shared of 4 and 4 -> P = R = 3/4
    assert scoring.f1_score("Jon lost his job", "He lost his job") == pytest.approx(0.75)
    # stemming: dancing ~ dance; articles and punctuation do not count
    assert scoring.f1_score("Dancing!", "the dance") == 1.0
    # 1 shared of 3 predicted and 1 gold: P = 1/3, R = 1 -> F1 = 0.5
    assert scoring.f1_score("by dancing daily", "dancing") == pytest.approx(0.5)
    assert scoring.f1_score("", "Rome") == 0.0
    assert scoring.f1_score("Paris", "Rome") == 0.0


def test_multi_hop_partial_f1() -> None:
    # gold parts Rome (no prediction part matches) and Paris (exact): (0 + 1) / 2
    assert scoring.score("Paris", "Rome, Paris", 1) == pytest.approx(0.5)
    # Rome exact; Paris against "Paris and London" -> "paris london": P 1/2, R 1 -> 2/3
    assert scoring.score("Rome, Paris and London", "Rome, Paris", 1) == pytest.approx(5 / 6)
    # other categories never split: commas are simply dropped by normalisation
    assert scoring.score("Paris", "Rome, Paris", 4) == pytest.approx(2 / 3)


def test_open_domain_keeps_gold_before_semicolon() -> None:
    gold = "Likely yes; since she collects classic children's books"
    assert scoring.score("likely yes", gold, 3) == 1.0
    assert scoring.score("likely yes", gold, 4) < 0.5  # the rationale counts elsewhere


def test_adversarial_scores_abstention_only() -> None:
    assert scoring.score("(a) Not mentioned in the conversation", "Contemporary", 5) == 1.0
    assert scoring.score("NO INFORMATION AVAILABLE.", "Contemporary", 5) == 1.0
    assert scoring.score("Contemporary", "Contemporary", 5) == 0.0
    assert scoring.score("It is not stated", "Contemporary", 5) == 0.0


def test_unknown_category_is_refused() -> None:
    with pytest.raises(ValueError):
        scoring.score("x", "x", 6)


def test_choice_letters_map_to_option_text() -> None:
    options = {"a": NOT_MENTIONED, "b": "Contemporary"}
    assert scoring.resolve_choice(" A ", options) == NOT_MENTIONED
    assert scoring.resolve_choice("(b)", options) == "Contemporary"
    assert scoring.resolve_choice("Contemporary art", options) == "contemporary art"


def test_adversarial_query_offers_not_mentioned_and_is_deterministic() -> None:
    question = Question("conv", 7, "What is Jon's favorite painting?", "Contemporary", 5)
    query, options = build_query(question, seed=0)
    assert options is not None and set(options.values()) == {NOT_MENTIONED, "Contemporary"}
    assert f"(a) {options['a']} (b) {options['b']}" in query
    assert build_query(question, seed=0) == (query, options)
    plain, none = build_query(Question("conv", 1, "When did Jon move?", "2019", 2))
    assert none is None and "approximate date" in plain and "Short answer:" in plain


def test_extract_answer_takes_first_line_without_label() -> None:
    assert extract_answer("Short answer: Rome\nBecause ...", None) == "Rome"
    assert extract_answer("\n  Paris  \n", None) == "Paris"
    assert extract_answer("", None) == ""
    assert extract_answer("b", {"a": "x", "b": NOT_MENTIONED}) == NOT_MENTIONED


def test_select_questions_is_stratified_round_robin() -> None:
    qs = [Question("c", i, f"q{i}", "a", cat) for i, cat in enumerate([4, 4, 4, 4, 2, 2, 5, 1])]
    chosen = select_questions(qs, [1, 2, 3, 4, 5], 6)
    # turns: 1, 2, 4, 5, then 2, 4 (category 1 and 5 are exhausted)
    assert [q.index for q in chosen] == [0, 1, 4, 5, 6, 7]
    assert [q.category for q in select_questions(qs, [4], None)] == [4, 4, 4, 4]
    assert len(select_questions(qs, [1, 2, 3, 4, 5], 100)) == len(qs)


def test_first_token_kl() -> None:
    same = {"1": math.log(0.7), "2": math.log(0.2)}
    assert first_token_kl(same, same) == pytest.approx(0.0, abs=1e-12)
    p = {"1": math.log(0.5), "2": math.log(0.5)}
    q = {"1": math.log(0.9), "2": math.log(0.1)}
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert first_token_kl(p, q) == pytest.approx(expected)
    # union {1, 2, 3}: token 2 gets p's smallest listed prob (0.5), token 3 gets q's (0.1);
    # each side is then renormalised over the union
    p3 = {"1": math.log(0.5), "3": math.log(0.5)}
    pn = [0.5 / 1.5, 0.5 / 1.5, 0.5 / 1.5]
    qn = [0.9 / 1.1, 0.1 / 1.1, 0.1 / 1.1]
    expected = sum(a * math.log(a / b) for a, b in zip(pn, qn, strict=True))
    assert first_token_kl(p3, q) == pytest.approx(expected)
    assert first_token_kl({}, q) is None


def _row(
    label: str, mode: str, w: int | None, qa: int, cat: int, f1: float, raw: str
) -> dict[str, Any]:
    return {
        "label": label, "mode": mode, "k": 5, "w": w, "sample": "c", "qa_index": qa,
        "category": cat, "f1": f1, "raw": raw, "first_token": 1 if raw else 2,
        "first_token_top": {"1": -0.1, "2": -2.5}, "evidence_recall": 1.0, "seconds": 0.1,
    }  # fmt: skip


def test_summarize_f1_per_category_and_fidelity() -> None:
    rows = [
        _row("prompt k=5", "prompt", None, 0, 1, 0.5, "Rome"),
        _row("prompt k=5", "prompt", None, 1, 5, 1.0, "Not mentioned"),
        _row("kv w=0 k=5", "kv", 0, 0, 1, 0.25, "Rome, Paris"),
        _row("kv w=0 k=5", "kv", 0, 1, 5, 1.0, "Not mentioned"),
    ]
    result = summarize(rows, {"model": "m"})
    runs = {run["label"]: run for run in result["runs"]}
    assert runs["prompt k=5"]["f1"]["multi-hop"] == 0.5
    assert runs["prompt k=5"]["f1"]["overall"] == 0.75
    assert runs["kv w=0 k=5"]["f1"]["temporal"] is None
    (fidelity,) = result["fidelity"]
    assert fidelity["label"] == "kv w=0 k=5" and fidelity["n"] == 2
    assert fidelity["identical_answers"]["overall"] == 0.5
    assert fidelity["first_token_agreement"]["overall"] == 1.0
    assert fidelity["mean_first_token_kl"]["overall"] == pytest.approx(0.0)
    assert fidelity["f1_delta_vs_prompt"]["overall"] == pytest.approx(-0.125)
    assert result["config"]["questions_per_category"] == {"multi-hop": 1, "adversarial": 1}
