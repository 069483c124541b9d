"""``inferscale bench serve`` output: JSON, a markdown table and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.serve.serve import PARTS


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"### Through the API: {result['model']} on {result['device']}\n",
        "| users | k | mode | client TTFT p50 (p95) ms | runtime TTFT p50 ms | API adds p50 ms "
        "| req/s | failed | /healthz p95 (max) ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["cells"]:
        parts, ttft = r["parts_median_ms"], r["client_ttft_ms"]
        engine = parts.get("engine_ttft", 0.0)
        lines.append(
            f"| {r['users']} | {r['k']} | {r['mode']} | {ttft['median']:.1f} ({ttft['p95']:.1f}) "
            f"| {engine:.1f} | {ttft['median'] - engine:.1f} | {r['requests_per_s']:.2f} "
            f"| {r['failures']} | {r['healthz_ms']['p95']:.1f} ({r['healthz_ms']['max']:.1f}) |"
        )
    lines += ["", "Where the client's TTFT went (medians, ms):", "",
              "| users | k | mode | " + " | ".join(PARTS) + " |",
              "|---|---|---|" + "---|" * len(PARTS)]  # fmt: skip
    for r in result["cells"]:
        parts = r["parts_median_ms"]
        values = " | ".join(f"{parts.get(p, 0.0):.1f}" for p in PARTS)
        lines.append(f"| {r['users']} | {r['k']} | {r['mode']} | {values} |")
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "serve.json", out / "serve.md"]
    paths[0].write_text(json.dumps(result, indent=1))
    paths[1].write_text(markdown(result))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    cells = result["cells"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for mode in sorted({c["mode"] for c in cells}):
        for k in sorted({c["k"] for c in cells}):
            row = sorted((c for c in cells if c["mode"] == mode and c["k"] == k),
                         key=lambda c: c["users"])  # fmt: skip
            left.plot([c["users"] for c in row], [c["client_ttft_ms"]["median"] for c in row],
                      "o-", label=f"{mode} k={k}")  # fmt: skip
    left.set(xlabel="concurrent users", ylabel="client TTFT p50 (ms)", title="TTFT via the API")
    left.legend(fontsize=7)
    single = [c for c in cells if c["users"] == min(x["users"] for x in cells)]
    bottom = [0.0] * len(single)
    for part in PARTS:
        heights = [c["parts_median_ms"].get(part, 0.0) for c in single]
        right.bar(range(len(single)), heights, bottom=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    right.set_xticks(range(len(single)), [f"{c['mode']}\nk={c['k']}" for c in single], fontsize=7)
    right.set(ylabel="ms (medians)", title=f"where TTFT goes at {single[0]['users']} user(s)")
    right.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "serve.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths
