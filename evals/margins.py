"""``inferscale eval margins eval.json[.gz]``: where kv's first token parts from prompt mode's.

For each injected config (kv, hybrid) of a LoCoMo run, its first-token agreement with prompt
mode at the same k, split by how sure prompt mode itself was: the margin between its top two
first-token logprobs. A small model is often nearly undecided (SmolLM2-135M: a third of the dev
set's questions within 0.5 nats), and there any perturbation of the logits, injected KV's
included, flips the greedy token; where prompt mode is sure, a flip means kv changed what the
model knows. So the overall agreement says as much about the model as about injection.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evals.report import emit, read_run

EDGES = (0.25, 0.5, 1.0, 2.0)  # nats: the buckets' upper edges (the last bucket is open)
BUCKETS = [f"[{lo:g}, {hi:g})" for lo, hi in zip((0.0, *EDGES), EDGES, strict=False)]
BUCKETS.append(f">= {EDGES[-1]:g}")


def bucket(margin: float) -> str:
    """The bucket of a margin in nats."""
    for edge, name in zip(EDGES, BUCKETS, strict=False):
        if margin < edge:
            return name
    return BUCKETS[-1]


def margin(top: dict[str, float]) -> float | None:
    """Top-1 minus top-2 logprob of a first token's top list (``None`` with fewer than two)."""
    best = sorted(top.values(), reverse=True)[:2]
    return best[0] - best[1] if len(best) == 2 else None


def by_margin(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per injected config: questions and agreement overall and per margin bucket of prompt
    mode at the same k (questions without a prompt row or a top list are left out)."""
    rows = list(rows)
    prompt = {(r["sample"], r["qa_index"], r["k"]): r for r in rows if r["mode"] == "prompt"}
    counts: dict[str, dict[str, list[int]]] = {}
    for row in rows:
        reference = prompt.get((row["sample"], row["qa_index"], row["k"]))
        if row["mode"] == "prompt" or reference is None:
            continue
        gap = margin(reference.get("first_token_top") or {})
        if gap is None:
            continue
        cells = counts.setdefault(row["label"], {b: [0, 0] for b in BUCKETS})
        cell = cells[bucket(gap)]
        cell[0] += row["first_token"] == reference["first_token"]
        cell[1] += 1
    out = []
    for label, cells in counts.items():
        agreed, n = sum(c[0] for c in cells.values()), sum(c[1] for c in cells.values())
        out.append({
            "label": label, "n": n, "agreement": agreed / n,
            "buckets": {b: {"n": c[1], "agreement": c[0] / c[1] if c[1] else None}
                        for b, c in cells.items()},
        })  # fmt: skip
    return out


def to_markdown(summaries: list[dict[str, Any]]) -> str:
    head = "| config | n | first-token agreement | " + " | ".join(
        f"margin {b}: n, agreement" for b in BUCKETS
    )
    lines = [head + " |", "|---|---:|---:|" + "---:|" * len(BUCKETS)]
    for s in summaries:
        cells = []
        for b in BUCKETS:
            cell = s["buckets"][b]
            share = "-" if cell["agreement"] is None else f"{cell['agreement']:.3f}"
            cells.append(f"{cell['n']}, {share}")
        row = f"| {s['label']} | {s['n']} | {s['agreement']:.3f} | "
        lines.append(row + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale eval margins", description=__doc__)
    parser.add_argument("run", type=Path, help="a LoCoMo run's eval.json (or eval.json.gz)")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    emit(to_markdown(by_margin(read_run(args.run)["rows"])), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
