"""The evaluation's retrieval: each question's top facts (best first), ranked as the platform
ranks a user's memories: MiniLM + exact FAISS, fused with BM25 over the fact text by the
platform's own code (``backend/retrieval/keyword.py``) at the keyword weight the API serves
(``INFERSCALE_RETRIEVAL_KEYWORD_WEIGHT``; 0 is dense only).

Retrieval is deterministic, so it can run once here and travel as a file (``--hits``): a run on
another machine (the GPU host) then answers the very same questions over the very same facts in
the same order, without the embedding model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.locomo import ConversationMemories
from evals.dataset import Conversation, Question

if TYPE_CHECKING:
    from backend.retrieval.embedder import Embedder

# conversation sample -> question index -> fact ids, best first
Hits = dict[str, dict[int, list[int]]]
# A hits file names the keyword weight it was ranked with under this key (none: dense only).
WEIGHT_KEY = "_keyword_weight"
# ... and the memories it ranked under this one (none: the observations).
MEMORIES_KEY = "_memories"
# ... and, per conversation, a digest of the facts' texts it ranked: a file ranked over the facts
# as an earlier import wrote them (e.g. dated otherwise) is refused, not paired with new texts.
FACTS_KEY = "_facts"


def facts_digest(facts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


class Retrieval:
    def __init__(
        self,
        path: Path | None = None,
        embedder: Embedder | None = None,
        keyword_weight: float = 0.0,
        memories: ConversationMemories = ConversationMemories.OBSERVATIONS,
    ) -> None:
        """``path``: a hits file to read (if it exists) and to write what is computed; it must
        have been ranked with ``keyword_weight`` over the same ``memories``."""
        self.path = path
        self._embedder = embedder
        self.keyword_weight = keyword_weight
        self.memories = memories
        self.hits: Hits = {}
        self.digests: dict[str, str] = {}
        if path is not None and path.is_file():
            raw = json.loads(path.read_text())
            written = float(raw.pop(WEIGHT_KEY, 0.0))
            if written != keyword_weight:
                raise ValueError(
                    f"{path} was ranked with keyword weight {written}, not {keyword_weight}"
                )
            over = raw.pop(MEMORIES_KEY, ConversationMemories.OBSERVATIONS.value)
            if over != memories.value:
                raise ValueError(f"{path} was ranked over the {over} memories, not {memories}")
            self.digests = dict(raw.pop(FACTS_KEY, {}))
            self.hits = {s: {int(q): ids for q, ids in qs.items()} for s, qs in raw.items()}
        self.computed = False

    def top(self, conv: Conversation, questions: Sequence[Question], k: int) -> list[list[int]]:
        """Each question's top ``k`` fact ids, from the file when it holds them."""
        digest = facts_digest(conv.facts)
        if self.digests.setdefault(conv.sample, digest) != digest:
            raise ValueError(
                f"{self.path} ranked other texts of {conv.sample}'s facts than these (an "
                "import that writes them otherwise): rank them again (`inferscale eval hits`)"
            )
        known = self.hits.get(conv.sample, {})
        if all(len(known.get(q.index, [])) >= min(k, len(conv.facts)) for q in questions):
            return [known[q.index][:k] for q in questions]
        found = self._search(conv, questions, k)
        self.hits.setdefault(conv.sample, {}).update(
            {q.index: ids for q, ids in zip(questions, found, strict=True)}
        )
        self.computed = True
        return found

    def save(self) -> None:
        if self.path is not None and self.computed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            out: dict[str, object] = {**self.hits, FACTS_KEY: self.digests}
            if self.keyword_weight:
                out[WEIGHT_KEY] = self.keyword_weight
            if self.memories is not ConversationMemories.OBSERVATIONS:
                out[MEMORIES_KEY] = self.memories.value
            self.path.write_text(json.dumps(out, sort_keys=True) + "\n")

    def _search(self, conv: Conversation, questions: Sequence[Question], k: int) -> list[list[int]]:
        from backend.retrieval.embedder import get_embedder
        from backend.retrieval.index import FactIndex, IndexKey
        from backend.retrieval.keyword import KeywordIndex, fuse
        from gpu_runtime.types import TenantId

        embedder = self._embedder = self._embedder or get_embedder()
        index = FactIndex(embedder.dim, use_gpu=False)
        key = IndexKey(TenantId("locomo-eval"), conv.sample)
        index.rebuild(key, range(len(conv.facts)), embedder.embed(conv.facts), revision=0)
        vectors = embedder.embed([q.text for q in questions])
        if not self.keyword_weight:
            return [[fid for fid, _ in index.search(key, v, k)] for v in vectors]
        # As the API: the dense side is the whole ranking, fused, then cut to k.
        keywords = KeywordIndex(list(conv.facts))
        return [
            fuse(
                [fid for fid, _ in index.search(key, v, len(conv.facts))],
                keywords.ranking(q.text),
                self.keyword_weight,
            )[:k]
            for q, v in zip(questions, vectors, strict=True)
        ]


def main(argv: list[str] | None = None) -> int:
    """``inferscale eval hits``: every question's top-k facts written to a hits file, on this
    machine, for a run elsewhere (``--hits``) that has no embedding model."""
    import argparse

    from backend.core.config import Settings
    from backend.core.paths import locomo_dir
    from evals.dataset import load_conversations, locomo_files

    parser = argparse.ArgumentParser(prog="inferscale eval hits", description=main.__doc__)
    parser.add_argument("--files", nargs="+", help="LoCoMo files or folders (default: the repo's)")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--keyword-weight", type=float, help="default: the API's")
    parser.add_argument("--memories", choices=[m.value for m in ConversationMemories],
                        default=ConversationMemories.OBSERVATIONS.value)  # fmt: skip
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    weight = (
        Settings().retrieval_keyword_weight if args.keyword_weight is None else args.keyword_weight
    )
    memories = ConversationMemories(args.memories)
    retrieval = Retrieval(args.out, keyword_weight=weight, memories=memories)
    for path in locomo_files([Path(f) for f in args.files or [str(locomo_dir())]]):
        for conv in load_conversations(path, memories):
            if conv.questions and conv.facts:
                retrieval.top(conv, conv.questions, args.k)
                print(f"{conv.sample}: {len(conv.facts)} facts, {len(conv.questions)} questions")
    retrieval.save()
    print(f"wrote {args.out}")
    return 0
