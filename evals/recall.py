"""``inferscale eval recall``: evidence recall@k of retrieval configurations on LoCoMo, no model.

For every question with evidence (category 5, adversarial, has none to find), the share of its
evidence turns among the facts retrieved: dense (MiniLM + exact inner product, what the
platform serves), keyword (BM25 over the fact text, ``bm25s``, English stop words), and the two
fused by reciprocal rank (RRF, k=60) with the keyword side weighted: the platform's own
ranking code (``backend/retrieval/keyword.py``). Each over the memories an import can keep
(``ConversationMemories``: the observations, the turns, or both). The ceiling is the recall
of all facts: an evidence turn that no fact is tied to cannot be retrieved by any configuration.

    python -m evals recall --ks 5,20,50 --out docs/results/retrieval
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backend.core.locomo import ConversationMemories
from evals.dataset import Conversation, Question, load_conversations, locomo_files

KEYWORD_WEIGHTS = (1.0, 0.5, 0.25)


def _recall(conv: Conversation, question: Question, ids: Sequence[int]) -> float:
    refs = {conv.fact_refs[i] for i in ids}
    return sum(e in refs for e in question.evidence) / len(question.evidence)


def rankings(conv: Conversation, questions: Sequence[Question]) -> list[dict[str, list[int]]]:
    """Per question, each configuration's full ranking of the conversation's facts (the
    platform's own code: ``backend/retrieval/keyword.py``)."""
    from backend.retrieval.embedder import get_embedder
    from backend.retrieval.keyword import KeywordIndex, fuse

    embedder = get_embedder()
    facts = embedder.embed(list(conv.facts))  # [n, 384]
    queries = embedder.embed([q.text for q in questions])  # [q, 384]
    dense = np.argsort(-(queries @ facts.T), axis=1, kind="stable")  # [q, n]
    keyword = KeywordIndex(list(conv.facts))
    out = []
    for row, question in enumerate(questions):
        d = [int(i) for i in dense[row]]
        matched = keyword.ranking(question.text)
        configs = {"dense": d, "bm25": matched + [i for i in d if i not in set(matched)]}
        for weight in KEYWORD_WEIGHTS:
            configs[f"hybrid-rrf-w{weight}"] = fuse(d, matched, weight)
        out.append(configs)
    return out


def _token_counter(path: Path | None) -> Callable[[Sequence[str]], int]:
    """Texts -> their tokens with the served model's tokenizer (0 when it is not on disk)."""
    from gpu_runtime.config import RuntimeSettings

    found = (path or RuntimeSettings().resolved_tokenizer_path) / "tokenizer.json"
    if not found.is_file():
        return lambda texts: 0
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(found))
    return lambda texts: sum(len(e.ids) for e in tokenizer.encode_batch(list(texts)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale eval recall", description=__doc__)
    parser.add_argument("--files", nargs="+", help="LoCoMo files or folders (default: the repo's)")
    parser.add_argument("--ks", default="5,20,50")
    parser.add_argument("--memories", default="observations,turns,both")
    parser.add_argument(
        "--tokenizer", type=Path, help="counts each kind's fact tokens (default: the served model)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/eval/recall"))
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    kinds = [ConversationMemories(m) for m in args.memories.split(",") if m]
    files = locomo_files([Path(f) for f in (args.files or ["data/locomo"])])
    started = time.perf_counter()
    got: dict[str, dict[str, list[float]]] = {}  # memories/config@k -> category -> recalls
    ceilings: dict[str, dict[str, list[float]]] = {}  # memories -> category -> recalls
    counter = _token_counter(args.tokenizer)
    sizes: dict[str, dict[str, int]] = {}  # memories -> facts, tokens (what they cost to keep)
    for path in files:
        for memories in kinds:
            for conv in load_conversations(path, memories):
                questions = [q for q in conv.questions if q.evidence and q.category != 5]
                everything = range(len(conv.facts))
                size = sizes.setdefault(memories.value, {"facts": 0, "tokens": 0})
                size["facts"] += len(conv.facts)
                size["tokens"] += counter(conv.facts)
                ceiling = ceilings.setdefault(memories.value, {})
                for q in questions:
                    ceiling.setdefault(str(q.category), []).append(_recall(conv, q, everything))
                for q, configs in zip(questions, rankings(conv, questions), strict=True):
                    for name, ids in configs.items():
                        for k in ks:
                            cell = got.setdefault(f"{memories.value}/{name}@{k}", {})
                            recall = _recall(conv, q, ids[:k])
                            cell.setdefault(str(q.category), []).append(recall)

    def summary(by_category: dict[str, list[float]]) -> dict[str, float | int]:
        every = [r for rs in by_category.values() for r in rs]
        row: dict[str, float | int] = {"all": float(np.mean(every)), "n": len(every)}
        row.update({f"cat{c}": float(np.mean(rs)) for c, rs in sorted(by_category.items())})
        return row

    result: dict[str, Any] = {
        "files": [str(f) for f in files],
        "ceiling": {memories: summary(cells) for memories, cells in ceilings.items()},
        "configs": {name: summary(cells) for name, cells in got.items()},
        "sizes": sizes,  # tokens: 0 when no tokenizer was found
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recall.json").write_text(json.dumps(result, indent=1) + "\n")
    cats = sorted({c for top in result["ceiling"].values() for c in top if c.startswith("cat")})
    lines = [
        "| memories | config | k | all | " + " | ".join(cats) + " |",
        "|---|---|---|---|" + "---|" * len(cats),
    ]
    for name, row in result["configs"].items():
        config, k = name.rsplit("@", 1)
        memories, config = config.split("/", 1)
        lines.append(f"| {memories} | {config} | {k} | {row['all']:.3f} | "
                     + " | ".join(f"{row[c]:.3f}" for c in cats) + " |")  # fmt: skip
    for memories, top in result["ceiling"].items():
        lines.append(f"| {memories} | all facts (ceiling) | - | {top['all']:.3f} | "
                     + " | ".join(f"{top[c]:.3f}" for c in cats) + " |")  # fmt: skip
    lines += ["", "| memories | facts | tokens |", "|---|---|---|"]
    lines += [f"| {m} | {n['facts']} | {n['tokens']} |" for m, n in sizes.items()]
    (args.out / "recall.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0
