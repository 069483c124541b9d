"""``inferscale eval locomo``: LoCoMo QA over retrieved facts, injected (kv) or prefilled (prompt).

Per conversation, the facts are LoCoMo's session observations as the platform imports them
(``parse_locomo``: dated, each tied to its turn). They are embedded with MiniLM and indexed in
FAISS like one user's memories, and every question retrieves its top-k facts (best first; the
top-k for a smaller k is the prefix of the largest k's list, exact search). ``kv`` mode injects
the facts' stored KV, encoded after the w turns that precede each fact's turn (one FactKey per w,
each fact encoded once per w); ``prompt`` mode prefills the very same token ids (the composed
prompt is identical, only the mode differs). Decoding is greedy.

The question prompt follows the official LoCoMo RAG evaluation (``task_eval/evaluate_gpts.py``):
a short-phrase instruction, a date hint for temporal questions, and adversarial questions asked
as a choice between "Not mentioned in the conversation" and the adversarial answer (the order is
drawn per question from a seeded RNG; a bare "a"/"b" reply maps to that option's text). The first
non-empty line of the reply, less a leading "Answer:" label, is the prediction.

``--max-questions N`` keeps N questions per conversation, stratified over categories
(:func:`backend.evaluation.dataset.select_questions`).
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.evaluation import scoring
from backend.evaluation.dataset import (
    Conversation,
    Question,
    load_conversations,
    locomo_files,
    select_questions,
)
from gpu_runtime.composer import FactText
from gpu_runtime.runtime import FactToEncode, Mode
from gpu_runtime.types import FactKey, TenantId

if TYPE_CHECKING:
    from backend.retrieval.embedder import Embedder
    from gpu_runtime.runtime import InjectionRuntime

QA_PROMPT = (
    "Based on the facts above, write an answer in the form of a short phrase for the following "
    "question. Answer with exact words from the facts whenever possible.\n\n"
    "Question: {question} Short answer:"
)
QA_PROMPT_ADVERSARIAL = (
    "Based on the facts above, answer the following question.\n\n"
    "Question: {question} Select the correct answer: (a) {a} (b) {b}. Short answer:"
)
TEMPORAL_HINT = " Use the dates of the facts to answer with an approximate date."
NO_CHOICE_HINT = ' If the facts do not say, answer "Not mentioned".'
NOT_MENTIONED = "Not mentioned in the conversation"
ENCODE_BATCH = 16
TOP_LOGPROBS = 20
_LABEL = re.compile(r"^(short answer|answer)\s*:\s*", re.IGNORECASE)

Log = Callable[[str], None]


@dataclass(frozen=True)
class EvalSettings:
    files: tuple[Path, ...]
    ks: tuple[int, ...] = (5, 20, 50)
    windows: tuple[int, ...] = (0, 5, 20)
    modes: tuple[Mode, ...] = (Mode.KV, Mode.PROMPT)
    max_questions: int | None = None  # per conversation, stratified over categories
    categories: tuple[int, ...] = (1, 2, 3, 4, 5)
    max_tokens: int = 24
    progress_every: int = 10
    seed: int = 0


@dataclass(frozen=True)
class RunConfig:
    mode: Mode
    k: int
    w: int | None  # None in prompt mode

    @property
    def label(self) -> str:
        return f"kv w={self.w} k={self.k}" if self.mode is Mode.KV else f"prompt k={self.k}"


def run_configs(settings: EvalSettings) -> list[RunConfig]:
    configs = []
    for k in settings.ks:
        if Mode.PROMPT in settings.modes:
            configs.append(RunConfig(Mode.PROMPT, k, None))
        if Mode.KV in settings.modes:
            configs += [RunConfig(Mode.KV, k, w) for w in settings.windows]
    return configs


# ---- prompts -------------------------------------------------------------------------------


def build_query(question: Question, seed: int = 0) -> tuple[str, dict[str, str] | None]:
    """The user message, and for adversarial questions the (a)/(b) options."""
    if question.category == 5 and question.gold:
        pair = (NOT_MENTIONED, question.gold)
        if random.Random(f"{seed}:{question.sample}:{question.index}").random() >= 0.5:
            pair = (question.gold, NOT_MENTIONED)
        options = {"a": pair[0], "b": pair[1]}
        return QA_PROMPT_ADVERSARIAL.format(question=question.text, **options), options
    hint = {2: TEMPORAL_HINT, 5: NO_CHOICE_HINT}.get(question.category, "")
    return QA_PROMPT.format(question=question.text + hint), None


def extract_answer(text: str, options: dict[str, str] | None) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    answer = _LABEL.sub("", lines[0]).strip() if lines else ""
    return scoring.resolve_choice(answer, options) if options else answer


# ---- running ---------------------------------------------------------------------------------


def run_eval(
    runtime: InjectionRuntime,
    settings: EvalSettings,
    *,
    embedder: Embedder | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Answer every selected question under every config on an already started runtime;
    returns what eval.json holds (see ``report.summarize``)."""
    from backend.evaluation.report import summarize
    from backend.retrieval.embedder import get_embedder
    from backend.retrieval.index import FactIndex, IndexKey

    started = time.perf_counter()
    embedder = embedder or get_embedder()
    tenant = TenantId(f"locomo-eval-{uuid.uuid4().hex[:8]}")
    index = FactIndex(embedder.dim, use_gpu=False)
    configs = run_configs(settings)
    rows: list[dict[str, Any]] = []
    timing: dict[str, float] = {"encode_s": 0.0}
    files = locomo_files(settings.files)
    conversations = [c for path in files for c in load_conversations(path)]
    if len({c.sample for c in conversations}) < len(conversations):  # keys must not collide
        conversations = [replace(c, sample=f"{c.sample}#{i}") for i, c in enumerate(conversations)]
    for conv in conversations:
        questions = select_questions(conv.questions, settings.categories, settings.max_questions)
        if not questions or not conv.facts:
            continue
        key = IndexKey(tenant, conv.sample)
        index.rebuild(key, range(len(conv.facts)), embedder.embed(conv.facts), revision=0)
        vectors = embedder.embed([q.text for q in questions])
        top = max(settings.ks)
        hits = [[fid for fid, _ in index.search(key, v, top)] for v in vectors]
        log(f"{conv.sample}: {len(conv.facts)} facts, {len(questions)} questions")
        if Mode.KV in settings.modes:
            needed = sorted({fid for hit in hits for fid in hit})
            began = time.perf_counter()
            for w in settings.windows:
                _encode(runtime, tenant, conv, needed, w, log)
            timing["encode_s"] += time.perf_counter() - began
        for config in configs:
            began = time.perf_counter()
            for n, (question, hit) in enumerate(zip(questions, hits, strict=True), 1):
                rows.append(
                    _answer(runtime, tenant, conv, question, hit[: config.k], config, settings)
                )
                if n % settings.progress_every == 0 or n == len(questions):
                    done = [r["f1"] for r in rows[-n:]]
                    log(
                        f"  [{config.label}] {n}/{len(questions)} questions, "
                        f"mean F1 {sum(done) / n:.3f}, {time.perf_counter() - began:.0f} s"
                    )
            timing[config.label] = timing.get(config.label, 0.0) + time.perf_counter() - began
    timing["total_s"] = time.perf_counter() - started
    meta = {
        "model": runtime.model_name,
        "dtype": _engine_dtype(runtime),
        "files": [str(p) for p in files],
        "ks": list(settings.ks),
        "windows": list(settings.windows),
        "modes": [m.value for m in settings.modes],
        "max_questions": settings.max_questions,
        "categories": list(settings.categories),
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
        "timing": timing,
    }
    return summarize(rows, meta)


def _engine_dtype(runtime: InjectionRuntime) -> str:
    try:
        return str(runtime.llm.llm_engine.vllm_config.model_config.dtype).removeprefix("torch.")
    except AttributeError:
        return "?"


def _fact_key(
    tenant: TenantId, conv: Conversation, fact: int, runtime: InjectionRuntime, w: int
) -> FactKey:
    return FactKey.for_fact(tenant, f"{conv.sample}/{fact}", 1, runtime.config(w))


def _encode(
    runtime: InjectionRuntime,
    tenant: TenantId,
    conv: Conversation,
    facts: Sequence[int],
    w: int,
    log: Log,
) -> None:
    config = runtime.config(w)
    began = time.perf_counter()
    for start in range(0, len(facts), ENCODE_BATCH):
        batch = [
            FactToEncode(_fact_key(tenant, conv, i, runtime, w), conv.facts[i], conv.window(i, w))
            for i in facts[start : start + ENCODE_BATCH]
        ]
        runtime.encode(tenant, config, batch)
    log(f"  encoded {len(facts)} facts at w={w} in {time.perf_counter() - began:.1f} s")


def _answer(
    runtime: InjectionRuntime,
    tenant: TenantId,
    conv: Conversation,
    question: Question,
    fact_ids: list[int],
    config: RunConfig,
    settings: EvalSettings,
) -> dict[str, Any]:
    w = config.w or 0
    facts = [FactText(_fact_key(tenant, conv, i, runtime, w), conv.facts[i]) for i in fact_ids]
    query, options = build_query(question, settings.seed)
    prompt = runtime.compose(tenant, runtime.config(w), facts, query)
    began = time.perf_counter()
    completion = runtime.generate(
        tenant, prompt, config.mode, max_tokens=settings.max_tokens, logprobs=TOP_LOGPROBS
    )
    seconds = time.perf_counter() - began
    prediction = extract_answer(completion.text, options)
    first = completion.top_logprobs[0] if completion.top_logprobs else {}
    best = sorted(first.items(), key=lambda item: -item[1])[:TOP_LOGPROBS]
    retrieved_refs = {conv.fact_refs[i] for i in fact_ids}
    recall = (
        sum(e in retrieved_refs for e in question.evidence) / len(question.evidence)
        if question.evidence
        else None
    )
    return {
        "sample": conv.sample,
        "qa_index": question.index,
        "category": question.category,
        "question": question.text,
        "gold": question.gold,
        "mode": config.mode.value,
        "k": config.k,
        "w": config.w,
        "label": config.label,
        "retrieved": fact_ids,
        "evidence_recall": recall,
        "raw": completion.text,
        "prediction": prediction,
        "f1": scoring.score(prediction, question.gold, question.category),
        "first_token": completion.token_ids[0] if completion.token_ids else None,
        "first_token_top": {str(t): lp for t, lp in best},
        "prompt_tokens": len(prompt.token_ids),
        "cached_tokens": completion.num_cached_tokens,
        "seconds": round(seconds, 4),
    }
