"""The official LoCoMo QA scoring, as in snap-research/locomo ``task_eval/evaluation.py``.

``eval_question_answering`` there scores one prediction per question by its ``category``:

* 1 multi-hop: the gold answer is split on ``,``; each part takes its best token F1 over the
  prediction's ``,``-separated parts, and the parts' scores are averaged (partial credit).
* 2 temporal, 3 open-domain, 4 single-hop: plain token F1; category 3 gold answers keep only
  what precedes the first ``;`` (the rest is the annotators' rationale).
* 5 adversarial: 1 when the prediction contains "no information available" or "not mentioned"
  (case-insensitive), else 0; the adversarial answer itself is never compared.

Token F1 normalises both strings (drop commas, lowercase, drop ASCII punctuation, drop the words
a/an/the/and, collapse whitespace), Porter-stems every token and counts the shared multiset.

The category numbers are not named in the paper or the repository's README; the mapping above is
the one the repository's scoring code implies (category 1 is the only one scored as a list of
sub-answers, category 2 questions get "Use DATE of CONVERSATION" in ``evaluate_gpts.py``, and
its summary prints categories in the order 4, 1, 2, 3, 5 = the paper's single-hop, multi-hop,
temporal, open-domain, adversarial), and the one the maintainers' issue #29 documents. The counts
in the released locomo10.json agree: 282 / 321 / 96 / 841 / 446 questions for 1..5.

The official code stems with ``nltk.stem.PorterStemmer()``, whose default mode is
``NLTK_EXTENSIONS``. nltk is not a dependency here, so that variant of Porter's algorithm (the
published algorithm plus NLTK's irregular forms, short-word, ``-ies``/``-ied``, ``y``->``i``,
``alli``, ``fulli`` and ``logi`` rules) is reimplemented below, rule for rule.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL_MARKERS = ("no information available", "not mentioned")
_PUNCTUATION = frozenset(string.punctuation)
_STOPWORDS = re.compile(r"\b(a|an|the|and)\b")

# ---- Porter stemmer, nltk's default NLTK_EXTENSIONS mode ------------------------------------

_VOWELS = frozenset("aeiou")
_IRREGULAR = {
    "skies": "sky", "sky": "sky", "dying": "die", "lying": "lie", "tying": "tie",
    "news": "news", "innings": "inning", "inning": "inning", "outings": "outing",
    "outing": "outing", "cannings": "canning", "canning": "canning", "howe": "howe",
    "proceed": "proceed", "exceed": "exceed", "succeed": "succeed",
}  # fmt: skip
Condition = Callable[[str], bool] | None
Rule = tuple[str, str, Condition]
DOUBLE = "*d"  # the rule "(*d) -> single letter" matches any double consonant ending


def _consonant(word: str, i: int) -> bool:
    """Porter's consonant: not a vowel, and a ``y`` only after a vowel (or word-initially)."""
    if word[i] in _VOWELS:
        return False
    if word[i] == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC){m}[V]."""
    pattern = "".join("c" if _consonant(stem, i) else "v" for i in range(len(stem)))
    return pattern.count("vc")


def _positive(stem: str) -> bool:
    return _measure(stem) > 0


def _above_one(stem: str) -> bool:
    return _measure(stem) > 1


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """*o: ends consonant-vowel-consonant, the last not w/x/y; NLTK adds two-letter vowel-cons."""
    n = len(word)
    if n >= 3:
        return (
            _consonant(word, n - 3)
            and not _consonant(word, n - 2)
            and _consonant(word, n - 1)
            and word[-1] not in "wxy"
        )
    return n == 2 and not _consonant(word, 0) and _consonant(word, 1)


def _apply(word: str, rules: list[Rule]) -> str:
    """The first rule whose suffix matches decides: replaced if its condition holds, else the
    word is returned unchanged (later rules are not tried)."""
    for suffix, replacement, condition in rules:
        if suffix == DOUBLE:
            if not _double_consonant(word):
                continue
            stem = word[:-2]
        elif word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
        else:
            continue
        return stem + replacement if condition is None or condition(stem) else word
    return word


def _step1a(word: str) -> str:
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    return _apply(word, [("sses", "ss", None), ("ies", "i", None), ("ss", "ss", None),
                         ("s", "", None)])  # fmt: skip


def _step1b(word: str) -> str:
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        return word[:-1] if _positive(word[:-3]) else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            stem = word[: -len(suffix)]
            break
    else:
        return word
    return _apply(
        stem,
        [
            ("at", "ate", None),
            ("bl", "ble", None),
            ("iz", "ize", None),
            (DOUBLE, stem[-1], lambda _: stem[-1] not in "lsz"),
            ("", "e", lambda s: _measure(s) == 1 and _cvc(s)),
        ],
    )


def _step1c(word: str) -> str:
    return _apply(word, [("y", "i", lambda s: len(s) > 1 and _consonant(s, len(s) - 1))])


_STEP2: list[Rule] = [
    (suffix, replacement, _positive)
    for suffix, replacement in [
        ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"),
        ("izer", "ize"), ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"),
        ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"), ("ator", "ate"),
        ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"),
        ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"), ("fulli", "ful"),
    ]
]  # fmt: skip


def _step2(word: str) -> str:
    if word.endswith("alli") and _positive(word[:-4]):
        return _step2(word[:-4] + "al")
    # 'logi' -> 'log' keeps the 'l' with the stem for the measure (geo-logi like archaeo-logi)
    return _apply(word, [*_STEP2, ("logi", "log", lambda _: _positive(word[:-3]))])


_STEP3: list[Rule] = [
    ("icate", "ic", _positive), ("ative", "", _positive), ("alize", "al", _positive),
    ("iciti", "ic", _positive), ("ical", "ic", _positive), ("ful", "", _positive),
    ("ness", "", _positive),
]  # fmt: skip
_STEP4: list[Rule] = [
    *[(s, "", _above_one) for s in ("al", "ance", "ence", "er", "ic", "able", "ible", "ant",
                                    "ement", "ment", "ent")],
    ("ion", "", lambda s: _above_one(s) and s[-1] in "st"),
    *[(s, "", _above_one) for s in ("ou", "ism", "ate", "iti", "ous", "ive", "ize")],
]  # fmt: skip


def _step5(word: str) -> str:
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    return _apply(word, [("ll", "l", lambda _: _above_one(word[:-1]))])


def porter_stem(word: str) -> str:
    """``nltk.stem.PorterStemmer().stem(word)`` (mode NLTK_EXTENSIONS)."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    lowered = word.lower()
    if len(word) <= 2:
        return lowered
    stem = _step1c(_step1b(_step1a(lowered)))
    return _step5(_apply(_apply(_step2(stem), _STEP3), _STEP4))


# ---- scoring ---------------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_STOPWORDS.sub(" ", text).split())


def _tokens(text: str) -> list[str]:
    return [porter_stem(w) for w in normalize_answer(text).split()]


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 between stemmed, normalised strings (0 when nothing is shared)."""
    predicted, expected = _tokens(prediction), _tokens(gold)
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, gold: str) -> float:
    """Multi-hop: mean over gold parts of the best F1 against any prediction part."""
    predictions = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(f1_score(p, g) for p in predictions) for g in golds) / len(golds)


def is_abstention(prediction: str) -> bool:
    lowered = prediction.lower()
    return any(marker in lowered for marker in ADVERSARIAL_MARKERS)


def score(prediction: str, gold: str, category: int) -> float:
    """One question's score under the official per-category rule."""
    if category == 5:
        return 1.0 if is_abstention(prediction) else 0.0
    if category == 1:
        return multi_answer_f1(prediction, gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category in (2, 3, 4):
        return f1_score(prediction, gold)
    raise ValueError(f"unknown LoCoMo category {category!r}")


def resolve_choice(prediction: str, options: Mapping[str, str]) -> str:
    """Adversarial questions are asked as a choice "(a) ... (b) ..."; like the official
    ``get_cat_5_answer``, a bare "a"/"(a)" reply is replaced by the option's text."""
    reply = prediction.strip().lower()
    if len(reply) == 1:
        return options["a"] if "a" in reply else options["b"]
    if len(reply) == 3:
        return options["a"] if "(a)" in reply else options["b"]
    return reply
