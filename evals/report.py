"""What ``inferscale eval locomo`` reports: F1 per category, fidelity, eval.json / .md / .png.

F1 is the official LoCoMo score (:mod:`evals.scoring`) averaged over questions, per
category and overall (a micro average over all questions, as the official summary does).

Fidelity compares each kv config with prompt mode at the same k, question by question: the share
of generated answers that are identical strings, the share whose first token is the same, and the
mean first-token KL(prompt || kv), and the paired bootstrap 95% confidence interval of the F1
difference (resampling questions, 2,000 draws, seeded). Hybrid configs are compared the same way.
Only the top-20 logprobs of each side are known, so the KL is
an estimate over the union U of the two top-20 sets: a token that one side did not list is given,
on that side, the smallest logprob that side did list (an upper bound: it did not make the list),
then each side is renormalised over U. Probability mass outside U is ignored. The estimate is 0
for identical distributions and grows as the heads of the two distributions part.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evals.scoring import CATEGORY_NAMES

PLOT_K = 20
BOOTSTRAP_DRAWS = 2000


def read_run(path: Path) -> dict[str, Any]:
    """A run's eval.json, or its gzipped copy as committed under docs/results."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    data: dict[str, Any] = json.loads(raw)
    return data


def emit(text: str, out: Path | None) -> None:
    """A command's Markdown: printed, and written to ``out`` when given."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)


def paired_bootstrap_ci(
    deltas: list[float], draws: int = BOOTSTRAP_DRAWS, seed: int = 0
) -> tuple[float, float] | None:
    """95% CI of the mean of paired differences, resampling the pairs with replacement."""
    if not deltas:
        return None
    import numpy as np

    values = np.asarray(deltas, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(draws, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def first_token_kl(p: Mapping[str, float], q: Mapping[str, float]) -> float | None:
    """KL(P || Q) over the union of two top-n logprob dicts (token id -> logprob); see above."""
    if not p or not q:
        return None
    union = sorted(set(p) | set(q))
    p_floor, q_floor = min(p.values()), min(q.values())
    lp = [max(p.get(t, p_floor), -1e4) for t in union]
    lq = [max(q.get(t, q_floor), -1e4) for t in union]
    p_norm, q_norm = _logsumexp(lp), _logsumexp(lq)
    return max(
        0.0,
        sum(
            math.exp(a - p_norm) * ((a - p_norm) - (b - q_norm))
            for a, b in zip(lp, lq, strict=True)
        ),
    )


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _per_category(rows: list[dict[str, Any]], field: str) -> dict[str, float | None]:
    out = {
        CATEGORY_NAMES[c]: _mean(r[field] for r in rows if r["category"] == c)
        for c in CATEGORY_NAMES
    }
    out["overall"] = _mean(r[field] for r in rows)
    return out


def summarize(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """eval.json: config, F1 per run config, fidelity per kv config, and every row."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    runs = []
    for label in labels:
        group = [r for r in rows if r["label"] == label]
        first = group[0]
        runs.append(
            {
                "label": label,
                "mode": first["mode"],
                "k": first["k"],
                "w": first["w"],
                "recompute": first.get("recompute", 0),
                "recompute_tokens": first.get("recompute_tokens"),
                "mean_prefilled": _mean(r.get("prefilled") for r in group),
                "n": len(group),
                "f1": _per_category(group, "f1"),
                "evidence_recall": _mean(r["evidence_recall"] for r in group),
                "mean_seconds": _mean(r["seconds"] for r in group),
                "mean_prompt_tokens": _mean(r.get("prompt_tokens") for r in group),
                "mean_injected_tokens": _mean(r.get("injected_tokens") for r in group),
            }
        )
    prompt = {(r["k"], r["sample"], r["qa_index"]): r for r in rows if r["mode"] == "prompt"}
    fidelity = []
    for label in labels:
        pairs = []
        for r in rows:
            if r["label"] == label and r["mode"] != "prompt":
                reference = prompt.get((r["k"], r["sample"], r["qa_index"]))
                if reference is not None:
                    pairs.append(_compare(reference, r))
        if pairs:
            k, w = pairs[0]["k"], pairs[0]["w"]
            ci = paired_bootstrap_ci([pair["f1_delta"] for pair in pairs])
            fidelity.append(
                {
                    "label": label,
                    "mode": pairs[0]["mode"],
                    "k": k,
                    "w": w,
                    "recompute": pairs[0]["recompute"],
                    "recompute_tokens": pairs[0]["recompute_tokens"],
                    "n": len(pairs),
                    "f1_delta_ci95": None if ci is None else list(ci),
                    "identical_answers": _per_category(pairs, "identical"),
                    "first_token_agreement": _per_category(pairs, "first_token_same"),
                    "mean_first_token_kl": _per_category(pairs, "kl"),
                    "f1_delta_vs_prompt": _per_category(pairs, "f1_delta"),
                }
            )
    counts: dict[str, int] = {}
    if runs:
        first_label = labels[0]
        for r in rows:
            if r["label"] == first_label:
                name = CATEGORY_NAMES[r["category"]]
                counts[name] = counts.get(name, 0) + 1
    return {
        "config": {**meta, "questions_per_category": counts},
        "runs": runs,
        "fidelity": fidelity,
        "rows": rows,
    }


def _compare(reference: dict[str, Any], kv: dict[str, Any]) -> dict[str, Any]:
    ref_top, kv_top = reference["first_token_top"], kv["first_token_top"]
    firsts = (reference["first_token"], kv["first_token"])
    same_first = None if None in firsts else firsts[0] == firsts[1]
    return {
        "category": kv["category"],
        "mode": kv["mode"],
        "k": kv["k"],
        "w": kv["w"],
        "recompute": kv.get("recompute", 0),
        "recompute_tokens": kv.get("recompute_tokens"),
        "identical": float(reference["raw"] == kv["raw"]),
        "first_token_same": None if same_first is None else float(same_first),
        "kl": first_token_kl(ref_top, kv_top),
        "f1_delta": kv["f1"] - reference["f1"],
    }


# ---- rendering -------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _columns() -> list[str]:
    return [f"{name} ({c})" for c, name in CATEGORY_NAMES.items()] + ["overall"]


def to_markdown(result: dict[str, Any], with_notes: bool = True) -> str:
    config = result["config"]
    counts = config.get("questions_per_category", {})
    timing = config.get("timing", {})
    lines = [
        f"# LoCoMo QA: kv injection vs prompt ({config.get('model', '?')}, "
        f"{config.get('dtype', '?')})",
        "",
        f"- files: {', '.join(Path(f).name for f in config.get('files', []))}",
        "- questions per category: "
        + ", ".join(f"{name} {counts.get(name, 0)}" for name in CATEGORY_NAMES.values()),
        f"- ks {config.get('ks')}, windows {config.get('windows')}, modes {config.get('modes')}, "
        f"max questions per conversation {config.get('max_questions')}, "
        f"max new tokens {config.get('max_tokens')} (greedy)",
        f"- memories: {_MEMORIES[config.get('memories', 'observations')]}, ranked by MiniLM + "
        f"exact FAISS fused with BM25 at keyword weight {config.get('keyword_weight', '?')}",
        *(
            [f"- each fact encoded after the facts header and {config['fact_context']!r}"]
            if "fact_context" in config
            else []
        ),
        *([f"- facts placed {config['fact_order']}"] if "fact_order" in config else []),
        f"- wall time {_fmt(timing.get('total_s'), 0)} s "
        f"(fact encoding {_fmt(timing.get('encode_s'), 0)} s)",
        "",
        "## F1 per category (official LoCoMo scoring)",
        "",
        "| config | n | "
        + " | ".join(_columns())
        + " | evidence recall | facts prefilled | s / question |",
        "|---|---:|" + "---:|" * (len(_columns()) + 3),
    ]
    for run in result["runs"]:
        f1 = run["f1"]
        cells = [_fmt(f1.get(name)) for name in [*CATEGORY_NAMES.values(), "overall"]]
        lines.append(
            f"| {run['label']} | {run['n']} | " + " | ".join(cells)
            + f" | {_fmt(run['evidence_recall'])} | {_fmt(run.get('mean_prefilled'), 1)}"
            + f" | {_fmt(run['mean_seconds'], 2)} |"
        )  # fmt: skip
    if result["fidelity"]:
        lines += [
            "",
            "## Fidelity of kv and hybrid vs prompt at the same k",
            "",
            "| config | n | identical answers | first-token agreement | mean first-token KL "
            "| F1 - prompt F1 | paired bootstrap 95% CI |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for fid in result["fidelity"]:
            ci = fid.get("f1_delta_ci95")
            lines.append(
                f"| {fid['label']} | {fid['n']} | {_fmt(fid['identical_answers']['overall'])} | "
                f"{_fmt(fid['first_token_agreement']['overall'])} | "
                f"{_fmt(fid['mean_first_token_kl']['overall'], 4)} | "
                f"{_fmt(fid['f1_delta_vs_prompt']['overall'])} | "
                + (f"[{ci[0]:+.3f}, {ci[1]:+.3f}] |" if ci else "- |")
            )
    if with_notes:
        lines += ["", "## Notes", "", *_NOTES]
    return "\n".join(lines) + "\n"


_MEMORIES = {
    "observations": "the conversation's session observations (dated)",
    "turns": "the conversation's turns (dated, with their speaker)",
    "both": "the session observations and the turns (dated)",
}

_NOTES = [
    "- Scoring: snap-research/locomo `task_eval/evaluation.py` rules — token F1 on normalised, "
    "Porter-stemmed answers; multi-hop (1) averages per-gold-part best F1 over ','-split parts; "
    "open-domain (3) gold keeps what precedes ';'; adversarial (5) scores 1 when the answer "
    "contains 'not mentioned' or 'no information available'.",
    "- Facts: the memories an import keeps (above), retrieved per question; evidence recall = "
    "share of a question's evidence turns that some retrieved fact is tied to.",
    "- Fidelity: kv answers against prompt answers to the same question with the same retrieved "
    "facts and identical prompt token ids. First-token KL(prompt || kv) is estimated from each "
    "side's top-20 logprobs over the union of the two sets (a token missing on one side gets that "
    "side's smallest listed logprob; both sides renormalised over the union).",
]


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars: F1 per category for every config at k=20 (else the largest k)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted({run["k"] for run in result["runs"]})
    if not ks:
        return None
    k = PLOT_K if PLOT_K in ks else ks[-1]
    runs = [run for run in result["runs"] if run["k"] == k]
    names = [*CATEGORY_NAMES.values(), "overall"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        values = [run["f1"].get(name) or 0.0 for name in names]
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, values, width, label=run["label"])
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("F1 (official LoCoMo scoring)")
    ax.set_title(f"LoCoMo F1 per category at k={k} ({result['config'].get('model', '')})")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(result: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "eval.json", out / "eval.md"
    json_path.write_text(json.dumps(result, indent=1) + "\n")
    md_path.write_text(to_markdown(result))
    written = [json_path, md_path]
    for png in (plot(result, out / "f1_by_category.png"), plot_recompute(result, out)):
        if png is not None:
            written.append(png)
    return written


def plot_recompute(result: dict[str, Any], out: Path) -> Path | None:
    """F1 - prompt F1 (with its 95% CI) against r, one line per (k, w) of the hybrid runs; the
    pure kv config of that (k, w) is r = 0."""
    fidelity = [  # (budget configs prefill a varying count: their rows are in the tables)
        f
        for f in result["fidelity"]
        if f.get("f1_delta_ci95") and f.get("recompute_tokens") is None
    ]
    hybrid = {(f["k"], f["w"]) for f in fidelity if f.get("mode") == "hybrid"}
    if not hybrid:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, w in sorted(hybrid):
        points = sorted(
            ((f.get("recompute", 0) if f.get("mode") == "hybrid" else 0), f)
            for f in fidelity
            if f["k"] == k and f["w"] == w and f.get("mode") in ("hybrid", "kv")
        )  # fmt: skip
        rs = [r for r, _ in points]
        mid = [f["f1_delta_vs_prompt"]["overall"] for _, f in points]
        low = [m - f["f1_delta_ci95"][0] for m, (_, f) in zip(mid, points, strict=True)]
        high = [f["f1_delta_ci95"][1] - m for m, (_, f) in zip(mid, points, strict=True)]
        ax.errorbar(rs, mid, yerr=[low, high], fmt="o-", capsize=3, label=f"k={k}, w={w}")
    ax.axhline(0, color="gray", lw=0.8)
    ax.axhline(-0.01, color="gray", lw=0.8, ls="--", label="-1 point")
    ax.set(xlabel="facts recomputed r (0 = pure kv)", ylabel="F1 - prompt F1 (95% CI)",
           title=f"Hybrid injection: F1 vs r ({result['config'].get('model', '')})")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "f1_vs_recompute.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
