"""``inferscale eval compare A/eval.json B/eval.json``: two runs of one evaluation side by side.

For runs that differ in one runtime setting (e.g. fact KV stored as the cache dtype in A and as
FP8 in B, ``--fact-kv-dtype``), question by question under the same config label: the share of
identical answers, of identical first tokens, the mean first-token KL(A || B) (estimated over
the two top-20 lists, as ``report.first_token_kl``), both F1s and the paired bootstrap 95% CI
of F1 B - A; then what each run left in the runtime's pool (facts and bytes per tier).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evals.report import emit, first_token_kl, paired_bootstrap_ci, read_run

POOL_FIELDS = ("gpu_entries", "gpu_bytes", "host_entries", "host_bytes", "disk_facts", "disk_bytes")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One summary per config label both runs have, over the questions both answered."""
    rows_b = {(r["label"], r["sample"], r["qa_index"]): r for r in b["rows"]}
    by_label: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for row in a["rows"]:
        other = rows_b.get((row["label"], row["sample"], row["qa_index"]))
        if other is not None:
            by_label.setdefault(row["label"], []).append((row, other))
    out = []
    for label, pairs in by_label.items():
        kls = [first_token_kl(x["first_token_top"], y["first_token_top"]) for x, y in pairs]
        deltas = [y["f1"] - x["f1"] for x, y in pairs]
        ci = paired_bootstrap_ci(deltas)
        out.append(
            {
                "label": label,
                "n": len(pairs),
                "identical_answers": _mean([float(x["raw"] == y["raw"]) for x, y in pairs]),
                "first_token_agreement": _mean(
                    [float(x["first_token"] == y["first_token"]) for x, y in pairs]
                ),
                "mean_first_token_kl": _mean([k for k in kls if k is not None]),
                "max_first_token_kl": max((k for k in kls if k is not None), default=None),
                "f1_a": _mean([x["f1"] for x, _ in pairs]),
                "f1_b": _mean([y["f1"] for _, y in pairs]),
                "f1_delta_ci95": None if ci is None else list(ci),
            }
        )
    return out


def to_markdown(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str]) -> str:
    lines = [
        f"A = {names[0]} ({a['config'].get('model')}), B = {names[1]} ({b['config'].get('model')})",
        "",
        "| config | n | identical answers | first-token agreement | mean first-token KL(A‖B) "
        "| max KL | F1 A | F1 B | F1 B - A (95% CI) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in compare(a, b):
        ci = s["f1_delta_ci95"]
        delta = _fmt((s["f1_b"] or 0) - (s["f1_a"] or 0))
        lines.append(
            f"| {s['label']} | {s['n']} | {_fmt(s['identical_answers'])} | "
            f"{_fmt(s['first_token_agreement'])} | {_fmt(s['mean_first_token_kl'], 4)} | "
            f"{_fmt(s['max_first_token_kl'], 4)} | {_fmt(s['f1_a'])} | {_fmt(s['f1_b'])} | "
            f"{delta} ({_fmt(ci[0]) if ci else '-'}, {_fmt(ci[1]) if ci else '-'}) |"
        )
    lines += ["", "| run | " + " | ".join(POOL_FIELDS) + " | bytes per stored fact |"]
    lines.append("|---|" + "---:|" * (len(POOL_FIELDS) + 1))
    for name, run in zip(names, (a, b), strict=True):
        pool = run["config"].get("pool") or {}
        facts = pool.get("disk_facts") or 0
        per_fact = _fmt(pool["disk_bytes"] / facts, 0) if facts else "-"
        cells = " | ".join(str(pool.get(f, "-")) for f in POOL_FIELDS)
        lines.append(f"| {name} | {cells} | {per_fact} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale eval compare", description=__doc__)
    parser.add_argument("a", type=Path, help="eval.json (or .json.gz) of run A (the reference)")
    parser.add_argument("b", type=Path, help="eval.json (or .json.gz) of run B")
    parser.add_argument("--names", default="A,B", help="what to call the runs, e.g. fp32,fp8")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    a, b = (read_run(path) for path in (args.a, args.b))
    first, _, second = args.names.partition(",")
    emit(to_markdown(a, b, (first, second or "B")), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
