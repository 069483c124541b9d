"""``python -m bench`` (also ``inferscale bench``): TTFT, throughput, offload, encode
rate, and vLLM's own server as a peer, kv vs prompt, through the runtime service's HTTP API.

    python -m bench --out runs/cpu                      # SmolLM2 on vLLM-CPU
    python -m bench ttft,throughput --model .device/models/llama-3.1-8b \\
        --load-format dummy --tokenizer .device/tokenizer --out $OUT/llama   # real shapes, GPU
    python -m bench peer --peer-url http://127.0.0.1:8011 ...  # vs `vllm serve`
    python -m bench store --out runs/store  # the durable store alone, no engine
    python -m bench index --out runs/index  # the residency index alone

Without ``--runtime-url`` a runtime is started for the run (``python -m gpu_runtime serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

PARTS = ("ttft", "hybrid", "throughput", "offload", "encode", "peer", "profile")


def _parts(value: str) -> list[str]:
    """``all`` (every part but ``peer`` and ``profile``) or a comma-separated subset of
    ``PARTS`` (``profile`` times the connector's hooks, which costs the other parts a little)."""
    wanted = (
        [p for p in PARTS if p not in ("peer", "profile")]
        if value == "all"
        else [p for p in value.split(",") if p]
    )
    unknown = [p for p in wanted if p not in PARTS]
    if unknown or not wanted:
        raise argparse.ArgumentTypeError(f"choose 'all' or some of {', '.join(PARTS)}")
    return wanted


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


async def _run(args: argparse.Namespace, session: Any) -> dict[str, Any]:
    from bench.runtime.encode import encode_rate
    from bench.runtime.hybrid import ttft_vs_recompute
    from bench.runtime.measure import offload, throughput, ttft_vs_k
    from bench.runtime.peer import peer
    from bench.runtime.workload import locomo_windows

    workload = session.workload
    result: dict[str, Any] = dict(session.header)
    try:
        if "ttft" in args.what:
            result["ttft"] = await ttft_vs_k(workload, _ints(args.ks), args.repeats)
        if "hybrid" in args.what:
            result["hybrid"] = await ttft_vs_recompute(
                workload, _ints(args.hybrid_ks), _ints(args.recompute), args.repeats
            )
        if "throughput" in args.what:
            result["throughput"] = await throughput(
                workload, _ints(args.users), args.throughput_k, args.max_tokens, args.rounds
            )
        if "offload" in args.what:
            leads = tuple(_ints(args.hint_leads))
            result["offload"] = await offload(
                workload, args.offload_k, args.repeats, hint_leads_ms=leads
            )
        if "profile" in args.what:
            from bench.runtime.profile import profile

            result["profile"] = await profile(workload, args.profile_k, args.repeats)
        if "peer" in args.what:
            if not args.peer_url:
                raise SystemExit("peer needs --peer-url (a `vllm serve` of the same model shape)")
            result["peer"] = await peer(
                workload, args.peer_url, _ints(args.peer_ks), args.repeats,
                _ints(args.users), args.throughput_k, args.max_tokens, args.rounds,
            )  # fmt: skip
        if "encode" in args.what:
            samples = {}
            for window in _ints(args.windows):
                pairs = locomo_windows(session.locomo, args.encode_facts, window)
                samples[window] = [
                    ([t for turn in turns for t in workload.ids(turn)], workload.ids(fact))
                    for turns, fact in pairs
                ]
            result["encode"] = encode_rate(workload, samples)
    finally:
        await workload.client.aclose()
    return result


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["store"]:  # its own parser, no engine
        from bench.runtime.store import main as store

        return store(given[1:])
    if given[:1] == ["index"]:  # the residency index's bookkeeping alone
        from bench.runtime.index import main as index

        return index(given[1:])
    from bench.runtime.session import add_engine_options

    parser = argparse.ArgumentParser(prog="inferscale bench")
    parser.add_argument(
        "what", nargs="?", default="all", type=_parts, help="all, or e.g. ttft,throughput,peer"
    )
    add_engine_options(parser)
    parser.add_argument("--ks", default="0,5,10,20,50,100")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--hybrid-ks", default="20,50", help="hybrid: k of each TTFT cell")
    parser.add_argument("--recompute", default="0,1,2,5,10", help="hybrid: facts prefilled, r")
    parser.add_argument("--users", default="1,10,50,100")
    parser.add_argument("--throughput-k", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="throughput: rounds per cell")
    parser.add_argument("--offload-k", type=int, default=50)
    parser.add_argument(
        "--hint-leads", default="5,10,20", help="offload: prefetch hint sent this many ms ahead"
    )
    parser.add_argument("--profile-k", type=int, default=50, help="profile: facts per request")
    parser.add_argument("--windows", default="0,5,20", help="encode: context windows w")
    parser.add_argument("--encode-facts", type=int, default=200, help="encode: facts per w")
    parser.add_argument("--peer-url", help="peer: vLLM's OpenAI server to compare against")
    parser.add_argument("--peer-ks", default="0,50", help="peer: TTFT cells")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from bench.runtime.report import write_report
    from bench.runtime.session import open_session

    ks = _ints(args.ks) + _ints(args.peer_ks) + _ints(args.hybrid_ks)
    session = open_session(args, max(*ks, args.throughput_k * 2, 300))
    try:
        result = asyncio.run(_run(args, session))
    finally:
        session.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    write_report(result, out)
    print(f"wrote {out}/bench.json and {out}/bench.md", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
