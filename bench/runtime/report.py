"""Markdown tables (always) and PNG plots (where matplotlib is installed) from bench JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def ttft_table(result: dict[str, Any]) -> str:
    """Per k: both modes and free KV (vLLM's prefix cache reusing the facts), each against its
    own k=0 cell; ``prompt / prompt(k=0)`` bounds the speed-up any injection could reach."""
    rows = result.get("ttft", [])
    ks = sorted({r["k"] for r in rows})
    by = {(r["k"], r["mode"]): r["ttft_ms"] for r in rows}
    lines = [
        "| k | prompt tokens | kv median (p95) ms | prompt median (p95) ms "
        "| prompt+prefix cache ms | prompt / kv | kv / kv(k=0) | prefix cache / its k=0 "
        "| prompt / prompt(k=0) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def relative(value: float, mode: str, unit: str = "") -> str:
        base = by.get((0, mode), {}).get("median")
        return f"{value / base:.2f}{unit}" if base else "-"

    for k in ks:
        kv, pr, pc = by.get((k, "kv")), by.get((k, "prompt")), by.get((k, "prompt_prefix_cache"))
        if not (kv and pr and pc):
            continue
        tokens = next(r["prompt_tokens"] for r in rows if r["k"] == k)
        lines.append(
            f"| {k} | {tokens} | {kv['median']:.2f} ({kv['p95']:.2f}) | {pr['median']:.2f} "
            f"({pr['p95']:.2f}) | {pc['median']:.2f} | {pr['median'] / kv['median']:.2f}x | "
            f"{relative(kv['median'], 'kv')} | {relative(pc['median'], 'prompt_prefix_cache')} | "
            f"{relative(pr['median'], 'prompt', 'x')} |"
        )
    return "\n".join(lines)


def throughput_table(result: dict[str, Any]) -> str:
    rows = result.get("throughput", [])
    users = sorted({r["users"] for r in rows})
    by = {(r["users"], r["mode"]): r for r in rows}
    lines = [
        "| users | kv req/s | prompt req/s | kv / prompt | kv TTFT p95 ms | prompt TTFT p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for n in users:
        kv, pr = by.get((n, "kv")), by.get((n, "prompt"))
        if not (kv and pr):
            continue
        lines.append(
            f"| {n} | {kv['requests_per_s']:.2f} | {pr['requests_per_s']:.2f} | "
            f"{kv['requests_per_s'] / pr['requests_per_s']:.2f}x | {kv['ttft_ms']['p95']:.1f} | "
            f"{pr['ttft_ms']['p95']:.1f} |"
        )
    return "\n".join(lines)


def hybrid_table(result: dict[str, Any]) -> str:
    """Per k: hybrid TTFT against r, relative to pure kv (r=0) and to prompt mode."""
    rows = result.get("hybrid", [])
    lines = [
        "| k | cell | injected tokens | TTFT median (p95) ms | / pure kv (r=0) | / prompt |",
        "|---|---|---|---|---|---|",
    ]
    for k in sorted({r["k"] for r in rows}):
        cells = [r for r in rows if r["k"] == k]
        pure = next((r for r in cells if r["recompute"] == 0), None)
        prompt = next((r for r in cells if r["mode"] == "prompt"), None)
        for r in cells:
            t = r["ttft_ms"]
            vs_kv = f"{t['median'] / pure['ttft_ms']['median']:.2f}x" if pure else "-"
            vs_pr = f"{t['median'] / prompt['ttft_ms']['median']:.2f}x" if prompt else "-"
            name = "prompt" if r["mode"] == "prompt" else f"hybrid r={r['recompute']}"
            lines.append(
                f"| {k} | {name} | {r['injected_tokens']} | {t['median']:.2f} ({t['p95']:.2f}) "
                f"| {vs_kv} | {vs_pr} |"
            )
    return "\n".join(lines)


def write_report(result: dict[str, Any], out: Path) -> None:
    head = (
        f"### {result['model']} ({result['load_format']} weights) on {result['device']}, "
        f"vLLM {result['vllm']}, through the runtime service's HTTP API\n\n"
        f"{result['facts_encoded']} LoCoMo facts "
        f"(mean {result['mean_fact_tokens']:.1f} tokens) encoded in {result['encode_s']} s.\n"
    )
    parts = [head]
    if "ttft" in result:
        parts += ["#### TTFT vs k\n", ttft_table(result), ""]
    if "hybrid" in result:
        parts += ["#### Hybrid injection: TTFT vs facts recomputed (r)\n", hybrid_table(result), ""]
    if "throughput" in result:
        parts += ["#### Throughput vs concurrent users\n", throughput_table(result), ""]
    if "offload" in result:
        o = result["offload"]
        prefetch = o.get("host_prefetch")
        parts += [
            "#### KV offload: facts on the GPU tier vs the pinned host tier (kv TTFT, ms)\n",
            "| k | facts on GPU | on host, read layer by layer | penalty "
            "| on host, prefetched at submission | penalty |",
            "|---|---|---|---|---|---|",
            f"| {o['k']} | {o['gpu']['median']:.2f} | {o['host']['median']:.2f} "
            f"| {o['penalty_ms']:+.2f} | "
            + (
                f"{prefetch['median']:.2f} | {o['prefetch_penalty_ms']:+.2f} |"
                if prefetch
                else "- | - |"
            ),
            "",
        ]
        if o.get("lead_penalty_ms"):
            parts += [
                "Prefetch hint sent ahead of the request (TTFT from the request, ms):\n",
                "| hint ahead | kv TTFT, facts on host | on GPU, the same hint ahead "
                "| penalty (host minus GPU, same lead) |",
                "|---|---|---|---|",
                f"| 0 ms (with the request) | {prefetch['median']:.2f} | {o['gpu']['median']:.2f} "
                f"| {o['prefetch_penalty_ms']:+.2f} |"
                if prefetch
                else "",
                *(
                    f"| {lead} ms | {o[f'host_hint_{lead}ms']['median']:.2f} "
                    f"| {o[f'gpu_hint_{lead}ms']['median']:.2f} | {penalty:+.2f} |"
                    for lead, penalty in o["lead_penalty_ms"].items()
                ),
                "",
            ]
    if "profile" in result:
        from bench.runtime.profile import profile_table

        parts += [
            "#### Where a request's TTFT goes (medians, ms)\n",
            profile_table(result["profile"]),
            "",
        ]
    if "peer" in result:
        from bench.runtime.peer import peer_table

        parts += [
            f"#### Against vLLM's own OpenAI server ({result['peer']['peer_model']})\n",
            peer_table(result),
            "",
        ]
    if "encode" in result:
        parts += [
            "#### Context-window encoding rate\n",
            "| w (turns) | facts | prefilled tokens / fact | facts/s |",
            "|---|---|---|---|",
            *(
                f"| {r['window']} | {r['facts']} | {r['prefill_tokens_per_fact']:.0f} "
                f"| {r['facts_per_s']:.1f} |"
                for r in result["encode"]
            ),
            "",
        ]
    (out / "bench.md").write_text("\n".join(parts) + "\n")
    _plots(result, out)


def _plots(result: dict[str, Any], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    if "ttft" in result:
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in ("kv", "prompt", "prompt_prefix_cache"):
            rows = sorted((r for r in result["ttft"] if r["mode"] == mode), key=lambda r: r["k"])
            ax.plot(
                [r["k"] for r in rows], [r["ttft_ms"]["median"] for r in rows], "o-", label=mode
            )
        ax.set(xlabel="facts k", ylabel="TTFT median (ms)", title=f"TTFT vs k: {result['model']}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "ttft.png", dpi=120)
        plt.close(fig)
    if "hybrid" in result:
        fig, ax = plt.subplots(figsize=(6, 4))
        for k in sorted({r["k"] for r in result["hybrid"]}):
            rows = [r for r in result["hybrid"] if r["k"] == k and r["mode"] == "hybrid"]
            line = ax.plot(
                [r["recompute"] for r in rows],
                [r["ttft_ms"]["median"] for r in rows],
                "o-",
                label=f"hybrid k={k}",
            )
            prompt = [r for r in result["hybrid"] if r["k"] == k and r["mode"] == "prompt"]
            if prompt:
                ax.axhline(prompt[0]["ttft_ms"]["median"], ls="--", color=line[0].get_color(),
                           label=f"prompt k={k}")  # fmt: skip
        ax.set(xlabel="facts recomputed r", ylabel="TTFT median (ms)",
               title=f"Hybrid TTFT vs r: {result['model']}")  # fmt: skip
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "hybrid_ttft.png", dpi=120)
        plt.close(fig)
    if "throughput" in result:
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in ("kv", "prompt"):
            rows = sorted(
                (r for r in result["throughput"] if r["mode"] == mode), key=lambda r: r["users"]
            )
            ax.plot(
                [r["users"] for r in rows], [r["requests_per_s"] for r in rows], "o-", label=mode
            )
        ax.set(
            xlabel="concurrent users", ylabel="requests/s", title=f"Throughput: {result['model']}"
        )
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=120)
        plt.close(fig)
