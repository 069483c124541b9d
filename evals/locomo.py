"""``inferscale eval locomo``: LoCoMo QA over retrieved facts, injected (kv) or prefilled (prompt).

Per conversation, the facts are LoCoMo's session observations as the platform imports them
(``parse_locomo``: dated, each tied to its turn). They are embedded with MiniLM and indexed in
FAISS like one user's memories, and every question retrieves its top-k facts (best first; the
top-k for a smaller k is the prefix of the largest k's list, exact search), and the prompt
places them least to most relevant, as the platform's chat does. ``kv`` mode injects the facts'
stored KV, encoded after the w turns that precede each fact's turn (one FactKey per w, each fact
encoded once per w); ``hybrid`` mode injects the k - r least relevant and prefills the r most
relevant after them; ``prompt`` mode prefills the very same token ids (the composed prompt is
identical, only the mode differs). Decoding is greedy.

The question prompt follows the official LoCoMo RAG evaluation (``task_eval/evaluate_gpts.py``):
a short-phrase instruction, a date hint for temporal questions, and adversarial questions asked
as a choice between "Not mentioned in the conversation" and the adversarial answer (the order is
drawn per question from a seeded RNG; a bare "a"/"b" reply maps to that option's text). The first
non-empty line of the reply, less a leading "Answer:" label, is the prediction.

``--max-questions N`` keeps N questions per conversation, stratified over categories
(:func:`evals.dataset.select_questions`).
"""

from __future__ import annotations

import enum
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.locomo import ConversationMemories
from evals import scoring
from evals.dataset import (
    Conversation,
    Question,
    load_conversations,
    locomo_files,
    select_questions,
)
from evals.retrieval import Retrieval
from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import FactText, hybrid_injected
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

if TYPE_CHECKING:
    from backend.retrieval.embedder import Embedder

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


class FactOrder(enum.StrEnum):
    """Where the retrieved facts go in the prompt. The product's order puts the most relevant
    last, nearest the question (and, in hybrid mode, among the prefilled); the reversed order is
    a control: the same facts and tokens in another order, to measure how far the model's
    answer moves when nothing but the layout changes."""

    PRODUCT = "product"  # least to most relevant, as the API's chat composes
    REVERSED = "reversed"  # most to least relevant


def ordered(fact_ids: Sequence[int], order: FactOrder) -> list[int]:
    """The retrieved ids (best first) in the order the prompt places them."""
    return list(reversed(fact_ids)) if order is FactOrder.PRODUCT else list(fact_ids)


class Mode(enum.StrEnum):
    KV = "kv"
    HYBRID = "hybrid"  # the k - r least relevant facts injected, the r most relevant prefilled
    PROMPT = "prompt"


@dataclass(frozen=True)
class EvalSettings:
    files: tuple[Path, ...]
    ks: tuple[int, ...] = (5, 20, 50)
    windows: tuple[int, ...] = (0, 5, 20)
    modes: tuple[Mode, ...] = (Mode.KV, Mode.PROMPT)
    recomputes: tuple[int, ...] = (1, 2, 5, 10)  # hybrid: r (r = 0 is the kv config)
    recompute_budgets: tuple[int, ...] = ()  # hybrid: budgets in tokens (the API's setting)
    hybrid_ks: tuple[int, ...] = (20, 50)
    hybrid_windows: tuple[int, ...] = (5,)
    max_questions: int | None = None  # per conversation, stratified over categories
    categories: tuple[int, ...] = (1, 2, 3, 4, 5)
    max_tokens: int = 24
    progress_every: int = 10
    seed: int = 0
    concurrency: int = 1  # questions in flight at once (the runtime batches them)
    hits_file: Path | None = None  # retrieval results to read, or to write once computed
    keyword_weight: float = 0.5  # BM25's weight in the fused ranking, as the API serves (0: dense)
    memories: ConversationMemories = ConversationMemories.OBSERVATIONS  # what an import keeps
    fact_context: str | None = None  # what each fact is encoded after (None: the product's)
    fact_order: FactOrder = FactOrder.PRODUCT


@dataclass(frozen=True)
class RunConfig:
    mode: Mode
    k: int
    w: int | None  # None in prompt mode
    recompute: int = 0  # hybrid mode: facts prefilled after the injected ones
    recompute_tokens: int | None = None  # hybrid mode: instead, a budget in tokens for them

    @property
    def label(self) -> str:
        if self.mode is Mode.PROMPT:
            return f"prompt k={self.k}"
        if self.mode is Mode.HYBRID and self.recompute_tokens is not None:
            return f"hybrid w={self.w} b={self.recompute_tokens} k={self.k}"
        if self.mode is Mode.HYBRID:
            return f"hybrid w={self.w} r={self.recompute} k={self.k}"
        return f"kv w={self.w} k={self.k}"

    def injected(self, lengths: Sequence[int]) -> int:
        """How many of the retrieved facts (their token lengths, least relevant first) the
        memory segment covers: counted as the API's chat counts them."""
        if self.mode is Mode.PROMPT:
            return 0
        if self.mode is Mode.HYBRID:
            return hybrid_injected(lengths, self.recompute, self.recompute_tokens)
        return len(lengths)


def run_configs(settings: EvalSettings) -> list[RunConfig]:
    configs = []
    for k in settings.ks:
        if Mode.PROMPT in settings.modes:
            configs.append(RunConfig(Mode.PROMPT, k, None))
        if Mode.KV in settings.modes:
            configs += [RunConfig(Mode.KV, k, w) for w in settings.windows]
        if Mode.HYBRID in settings.modes and k in settings.hybrid_ks:
            configs += [
                RunConfig(Mode.HYBRID, k, w, r)
                for w in settings.hybrid_windows
                for r in settings.recomputes
                if 0 < r <= k
            ]
            configs += [
                RunConfig(Mode.HYBRID, k, w, recompute_tokens=budget)
                for w in settings.hybrid_windows
                for budget in settings.recompute_budgets
            ]
    return configs


def encoding_windows(settings: EvalSettings) -> list[int]:
    """Every w some config injects at."""
    return sorted({c.w for c in run_configs(settings) if c.w is not None})


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
    runtime: RuntimeClient,
    settings: EvalSettings,
    *,
    embedder: Embedder | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Answer every selected question under every config through a running runtime service;
    returns what eval.json holds (see ``report.summarize``)."""
    from evals.report import summarize

    started = time.perf_counter()
    if settings.fact_context is not None:
        runtime.composer().fact_context = settings.fact_context
    retrieval = Retrieval(settings.hits_file, embedder, settings.keyword_weight, settings.memories)
    tenant = TenantId(f"locomo-eval-{uuid.uuid4().hex[:8]}")
    configs = run_configs(settings)
    rows: list[dict[str, Any]] = []
    timing: dict[str, float] = {"encode_s": 0.0}
    files = locomo_files(settings.files)
    conversations = [c for path in files for c in load_conversations(path, settings.memories)]
    if len({c.sample for c in conversations}) < len(conversations):  # keys must not collide
        conversations = [replace(c, sample=f"{c.sample}#{i}") for i, c in enumerate(conversations)]
    for conv in conversations:
        questions = select_questions(conv.questions, settings.categories, settings.max_questions)
        if not questions or not conv.facts:
            continue
        hits = retrieval.top(conv, questions, max(settings.ks))
        log(f"{conv.sample}: {len(conv.facts)} facts, {len(questions)} questions")
        needed = sorted({fid for hit in hits for fid in hit})
        began = time.perf_counter()
        for w in encoding_windows(settings):
            _encode(runtime, tenant, conv, needed, w, log)
        timing["encode_s"] += time.perf_counter() - began
        for config in configs:
            began = time.perf_counter()
            asked = [
                _ask(runtime, tenant, conv, question, hit[: config.k], config, settings)
                for question, hit in zip(questions, hits, strict=True)
            ]
            done: list[float] = []
            with ThreadPoolExecutor(max(1, settings.concurrency)) as pool:
                for row in pool.map(lambda a: _answer(runtime, a, settings), asked):
                    rows.append(row)
                    done.append(row["f1"])
                    n = len(done)
                    if n % settings.progress_every == 0 or n == len(questions):
                        log(
                            f"  [{config.label}] {n}/{len(questions)} questions, "
                            f"mean F1 {sum(done) / n:.3f}, {time.perf_counter() - began:.0f} s"
                        )
            timing[config.label] = timing.get(config.label, 0.0) + time.perf_counter() - began
    retrieval.save()
    timing["total_s"] = time.perf_counter() - started
    model = runtime.model()
    meta = {
        "model": model.encoding_model,
        "dtype": model.dtype,
        "files": [str(p) for p in files],
        "memories": settings.memories.value,
        "fact_context": runtime.composer().fact_context,
        "keyword_weight": settings.keyword_weight,
        "ks": list(settings.ks),
        "windows": list(settings.windows),
        "modes": [m.value for m in settings.modes],
        "recomputes": list(settings.recomputes),
        "recompute_budgets": list(settings.recompute_budgets),
        "hybrid_ks": list(settings.hybrid_ks),
        "hybrid_windows": list(settings.hybrid_windows),
        "fact_order": (
            "least to most relevant (the most relevant last, nearest the question)"
            if settings.fact_order is FactOrder.PRODUCT
            else "most to least relevant (reversed: a control, not the product's order)"
        ),
        "concurrency": settings.concurrency,
        "max_questions": settings.max_questions,
        "categories": list(settings.categories),
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
        "timing": timing,
    }
    return summarize(rows, meta)


def _config(runtime: RuntimeClient, w: int) -> EncodingConfig:
    return EncodingConfig(runtime.model().encoding_model, w, 1)


def _fact_key(
    tenant: TenantId, conv: Conversation, fact: int, runtime: RuntimeClient, w: int
) -> FactKey:
    return FactKey.for_fact(tenant, f"{conv.sample}/{fact}", 1, _config(runtime, w))


def _encode(
    runtime: RuntimeClient,
    tenant: TenantId,
    conv: Conversation,
    facts: Sequence[int],
    w: int,
    log: Log,
) -> None:
    composer = runtime.composer()
    began = time.perf_counter()
    for start in range(0, len(facts), ENCODE_BATCH):
        items = [
            composer.encode_item(
                _fact_key(tenant, conv, i, runtime, w), conv.facts[i], conv.window(i, w), w
            )
            for i in facts[start : start + ENCODE_BATCH]
        ]
        result = runtime.encode(
            p.EncodeRequest(
                tenant=tenant.value,
                window=w,
                items=[
                    p.EncodeItemModel(token_ids=list(i.token_ids), capture=[p.span_model(i.span)])
                    for i in items
                ],
            )
        )
        if result.missing:
            raise RuntimeError(f"{len(result.missing)} facts were not stored")
    log(f"  encoded {len(facts)} facts at w={w} in {time.perf_counter() - began:.1f} s")


@dataclass(frozen=True)
class Asked:
    """One question's composed request under one config, ready to send."""

    conv: Conversation
    question: Question
    fact_ids: list[int]  # best first, as retrieved
    config: RunConfig
    options: dict[str, str] | None
    request: p.GenerateRequest
    prompt_tokens: int
    prefilled: int  # hybrid mode: the facts prefilled as text (r, or what fit the budget)


def _ask(
    runtime: RuntimeClient,
    tenant: TenantId,
    conv: Conversation,
    question: Question,
    fact_ids: list[int],
    config: RunConfig,
    settings: EvalSettings,
) -> Asked:
    """Compose (in the caller's thread: the tokenizer is not shared across threads). Facts go
    least to most relevant in every mode, as the platform's chat composes them (unless the run
    asks for the reversed order)."""
    w = config.w or 0
    placed = ordered(fact_ids, settings.fact_order)
    facts = [FactText(_fact_key(tenant, conv, i, runtime, w), conv.facts[i]) for i in placed]
    query, options = build_query(question, settings.seed)
    composer = runtime.composer()
    injected = config.injected([composer.fact_length(tenant, f.text) for f in facts])
    prompt = composer.compose(tenant, _config(runtime, w), facts, [], query, injected=injected)
    injecting = config.mode is not Mode.PROMPT
    request = p.GenerateRequest(
        tenant=tenant.value,
        token_ids=list(prompt.token_ids),
        mode="kv" if injecting else "prompt",
        segment=p.segment_model(prompt.segment) if injecting else None,
        sampling=p.SamplingModel(max_tokens=settings.max_tokens, logprobs=TOP_LOGPROBS),
    )
    return Asked(
        conv, question, fact_ids, config, options, request, len(prompt.token_ids),
        len(facts) - injected if config.mode is Mode.HYBRID else 0,
    )  # fmt: skip


def _answer(runtime: RuntimeClient, asked: Asked, settings: EvalSettings) -> dict[str, Any]:
    conv, question, config, fact_ids = asked.conv, asked.question, asked.config, asked.fact_ids
    began = time.perf_counter()
    events = list(runtime.generate(asked.request))
    seconds = time.perf_counter() - began
    text = "".join(e.text for e in events)
    token_ids = [t for e in events for t in e.token_ids]
    steps = [step for e in events for step in (e.logprobs or [])]
    usage = events[-1].usage
    prediction = extract_answer(text, asked.options)
    first = dict(steps[0]) if steps else {}
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
        "recompute": config.recompute,
        "recompute_tokens": config.recompute_tokens,
        "prefilled": asked.prefilled,
        "label": config.label,
        "retrieved": fact_ids,
        "evidence_recall": recall,
        "raw": text,
        "prediction": prediction,
        "f1": scoring.score(prediction, question.gold, question.category),
        "first_token": token_ids[0] if token_ids else None,
        "first_token_top": {str(t): lp for t, lp in best},
        "prompt_tokens": asked.prompt_tokens,
        "cached_tokens": usage.cached_tokens if usage is not None else 0,
        "injected_tokens": usage.injected_tokens if usage is not None else 0,
        "engine_ttft_ms": events[-1].engine_ttft_ms,
        "seconds": round(seconds, 4),
    }
