"""``inferscale bench serve`` output: JSON, a markdown table and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.serve.chats import DETAILS
from bench.serve.serve import PARTS


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"### Through the API: {result['model']} on {result['device']}\n",
        "| users | k | mode | client TTFT p50 (p95) ms | runtime TTFT p50 ms | API adds p50 ms "
        "| req/s | failed | /healthz p95 (max) ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i in result.get("imports") or []:
        took, rate = i["upload_to_kv_ready_s"], i["facts_per_s"]
        lines.insert(1, f"Import through the API (Celery extraction and encoding): {i['facts']} "
                        f"facts, upload to every fact's KV ready in {took:.1f} s "
                        f"({rate:.1f} facts/s).\n")  # fmt: skip
    ours = [r for r in result["cells"] if r["mode"] != "peer"]
    peer = [r for r in result["cells"] if r["mode"] == "peer"]
    for r in ours:
        parts, ttft = r["parts_median_ms"], r["client_ttft_ms"]
        engine = parts.get("engine_ttft", 0.0)
        lines.append(
            f"| {r['users']} | {r['k']} | {r['mode']} | {ttft['median']:.1f} ({ttft['p95']:.1f}) "
            f"| {engine:.1f} | {ttft['median'] - engine:.1f} | {r['requests_per_s']:.2f} "
            f"| {r['failures']} | {r['healthz_ms']['p95']:.1f} ({r['healthz_ms']['max']:.1f}) |"
        )
    failed = [r for r in result["cells"] if r.get("errors")]
    if failed:  # a stalled chat says how far it got (``chats.ChatStalled``)
        lines += ["", "Failures by kind:", ""]
        lines += [f"* {r['users']} users, k={r['k']}, {r['mode']}: {kind} ({n}x)"
                  for r in failed for kind, n in r["errors"].items()]  # fmt: skip
    lines += ["", "Where the client's TTFT went (medians, ms):", "",
              "| users | k | mode | " + " | ".join(PARTS) + " | query embedded on |",
              "|---|---|---|" + "---|" * (len(PARTS) + 1)]  # fmt: skip
    for r in ours:
        parts = r["parts_median_ms"]
        values = " | ".join(f"{parts.get(p, 0.0):.1f}" for p in PARTS)
        lines.append(f"| {r['users']} | {r['k']} | {r['mode']} | {values} | {_where(r)} |")
    lines += _details_table(ours)
    if peer:
        lines += _peer_tables(ours, peer)
    lines += _cpu_table(result["cells"])
    lines += _loops_table(result["cells"])
    return "\n".join(lines) + "\n"


def _details_table(cells: list[dict[str, Any]]) -> list[str]:
    """Where the auth_db and search parts went, from the API's splits (medians, ms)."""
    names = sorted({n for c in cells for n in c["parts_median_ms"] if n.startswith(DETAILS)})
    if not names:
        return []
    lines = ["", "Where auth_db and search went (the API's splits; medians, ms):", "",
             "| users | k | mode | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]  # fmt: skip
    for r in cells:
        parts = r["parts_median_ms"]
        values = " | ".join(f"{parts[n]:.2f}" if n in parts else "-" for n in names)
        lines.append(f"| {r['users']} | {r['k']} | {r['mode']} | {values} |")
    return lines


def _loops_table(cells: list[dict[str, Any]]) -> list[str]:
    """How late the API's and the runtime's event loops woke during each cell, from their own
    probes (bench/serve/loop_probes.py): the mean delay and the share of wake-ups later than
    10 and 50 ms."""
    rows = [c for c in cells if any(v.get("n") for v in (c.get("server_loops") or {}).values())]
    if not rows:
        return []
    title = ("How late the servers' event loops woke (their probes, every 50 ms): mean ms, "
             "% of wake-ups later than 10 ms / 50 ms:")  # fmt: skip
    lines = [
        "",
        title,
        "",
        "| users | k | mode | API loops | runtime loop |",
        "|---|---|---|---|---|",
    ]
    for c in rows:
        loops = c["server_loops"]
        lines.append(f"| {c['users']} | {c['k']} | {c['mode']} | "
                     f"{_late(loops.get('api'))} | {_late(loops.get('runtime'))} |")  # fmt: skip
    return lines


def _late(loop: dict[str, float] | None) -> str:
    if not loop or not loop.get("n"):
        return "-"
    return f"{loop['mean_ms']:.1f} ms, {loop['late_10ms_pct']:.0f}% / {loop['late_50ms_pct']:.0f}%"


def _cpu_table(cells: list[dict[str, Any]]) -> list[str]:
    """Cores each service kept busy during each cell (bench/serve/host_cpu.py), its busiest
    process's in brackets, text chunks per chat (fewer than tokens when bursts merged) and how
    late the bench client's own event loop ran (bench/serve/loop_lag.py)."""
    measured = [c for c in cells if c.get("cpu_cores")]
    if not measured:
        return []
    groups = sorted({g for c in measured for g in c["cpu_cores"]} - {"host busy", "host"})
    title = ("Cores busy during each cell, by service (its busiest process and its name in "
             "brackets; bench/serve/host_cpu.py):")  # fmt: skip
    head = (f"| users | k | mode | {' | '.join(groups)} | host busy (of) | text chunks per chat "
            "| client loop lag p50 (p95) ms |")  # fmt: skip
    lines = ["", title, "", head, "|---|---|---|" + "---|" * (len(groups) + 3)]
    for c in measured:
        cores = c["cpu_cores"]
        values = " | ".join(_service(c, g) for g in groups)
        chunks = (c.get("content_chunks_per_chat") or {}).get("median")
        lines.append(
            f"| {c['users']} | {c['k']} | {c['mode']} | {values} "
            f"| {cores['host busy']:.2f} ({cores['host']:.0f}) "
            f"| {'-' if chunks is None or c['mode'] == 'peer' else f'{chunks:.0f}'} "
            f"| {_lag(c)} |"
        )
    return lines


def _service(cell: dict[str, Any], group: str) -> str:
    """e.g. "1.62 (0.84 VLLM::EngineCor)": the group's cores, its busiest process's and name."""
    busiest = (cell.get("busiest_process_cores") or {}).get(group, 0.0)
    name = (cell.get("busiest_process_name") or {}).get(group)
    inner = f"{busiest:.2f} {name}" if name else f"{busiest:.2f}"
    return f"{cell['cpu_cores'].get(group, 0.0):.2f} ({inner})"


def _lag(cell: dict[str, Any]) -> str:
    lag = cell.get("client_loop_lag_ms") or {}
    return f"{lag['median']:.1f} ({lag['p95']:.1f})" if lag.get("n") else "-"


def _where(row: dict[str, Any]) -> str:
    """Where the cell's queries were embedded, e.g. "runtime 20" or "api 3, runtime 17"."""
    counts = {k: v for k, v in (row.get("query_embedded_on") or {}).items() if k != "None"}
    return ", ".join(f"{where} {n}" for where, n in sorted(counts.items())) or "-"


def _peer_tables(ours: list[dict[str, Any]], peer: list[dict[str, Any]]) -> list[str]:
    """The peer's cells and its parts, and each mode's TTFT and req/s against it, cell by cell."""
    lines = ["", "The peer (Mem0 + vLLM's OpenAI server, facts in the prompt), medians in ms:", "",
             "| users | k | client TTFT p50 (p95) | search | compose | server | req/s | failed |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in peer:
        p, t = r["parts_median_ms"], r["client_ttft_ms"]
        lines.append(
            f"| {r['users']} | {r['k']} | {t['median']:.1f} ({t['p95']:.1f}) "
            f"| {p.get('search', 0):.1f} | {p.get('compose', 0):.2f} | {p.get('server', 0):.1f} "
            f"| {r['requests_per_s']:.2f} | {r['failures']} |"
        )
    modes = sorted({r["mode"] for r in ours})
    lines += ["", "Against the peer (peer TTFT / ours; ours req/s / peer's):", "",
              "| users | k | " + " | ".join(f"{m} TTFT x | {m} req/s x" for m in modes) + " |",
              "|---|---|" + "---|---|" * len(modes)]  # fmt: skip
    for r in peer:
        cells = []
        for mode in modes:
            mine = next((o for o in ours if (o["users"], o["k"], o["mode"]) ==
                         (r["users"], r["k"], mode)), None)  # fmt: skip
            if mine is None or not mine["client_ttft_ms"]["median"]:
                cells += ["-", "-"]
                continue
            speed = r["client_ttft_ms"]["median"] / mine["client_ttft_ms"]["median"]
            rate = mine["requests_per_s"] / r["requests_per_s"] if r["requests_per_s"] else 0.0
            cells += [f"{speed:.2f}", f"{rate:.2f}"]
        lines.append(f"| {r['users']} | {r['k']} | " + " | ".join(cells) + " |")
    return lines


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
    cells = [c for c in result["cells"] if c["mode"] != "peer"]
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
