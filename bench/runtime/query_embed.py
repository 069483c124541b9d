"""The runtime's query embedder: one forward pass eagerly against its CUDA-graph replay.

    python -m bench.runtime.query_embed [--out FILE]

Per batch size (a 12-word LoCoMo-style question, repeated), the median over 200 calls of
``TorchMiniLM.encode`` (tokenising, the pass, the vectors back on the CPU), after a warm-up, with
the two models alternating call by call. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from gpu_runtime.query_embedder import TorchMiniLM, bundled_model_dir

QUESTION = "What did Caroline do at the LGBTQ support group she went to last week?"
BATCHES = (1, 8, 64)
CALLS = 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runtime.query_embed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    device = torch.device("cuda")
    eager = TorchMiniLM(bundled_model_dir(), device)
    graphed = TorchMiniLM(bundled_model_dir(), device)
    captured = time.perf_counter()
    graphed.capture_graphs()
    capture_s = time.perf_counter() - captured
    rows = []
    for batch in BATCHES:
        texts = [QUESTION] * batch
        times: dict[str, list[float]] = {"eager": [], "graphs": []}
        for _ in range(10):
            eager.encode(texts), graphed.encode(texts)
        for _ in range(CALLS):
            for name, model in (("eager", eager), ("graphs", graphed)):
                started = time.perf_counter()
                model.encode(texts)
                times[name].append((time.perf_counter() - started) * 1000)
        row = {"batch": batch, **{f"{n}_ms_p50": statistics.median(t) for n, t in times.items()}}
        row["speedup"] = row["eager_ms_p50"] / row["graphs_ms_p50"]
        rows.append(row)
        print(json.dumps(row))
    result = {"device": torch.cuda.get_device_name(), "capture_s": capture_s, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
