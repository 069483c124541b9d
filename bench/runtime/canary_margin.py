"""``inferscale bench canary``: the fidelity canary's margin, measured.

Starts a runtime per rotation fault (``INFERSCALE_FAULT_ROTATION_OFFSET``: injected keys rotated
that many positions off; 0 is the correct runtime) and records the canary's divergence from its
``/readyz``, so the threshold (``INFERSCALE_CANARY_MAX_DIVERGENCE_NATS``) is chosen between what
a correct runtime shows and what broken ones do.

    python -m bench canary --offsets 0,3,40,500 --out docs/results/canary/cpu.jsonl
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import httpx

from gpu_runtime.client.launch import RuntimeProcess


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench canary", description=__doc__)
    parser.add_argument("--offsets", default="0,3,40,500")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/canary.jsonl"))
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as out:
        for offset in (int(x) for x in args.offsets.split(",")):
            kv_dir = tempfile.mkdtemp(prefix="inferscale-canary-kv-")
            env = {"INFERSCALE_KV_STORE_DIR": kv_dir, "INFERSCALE_ENV": "test",
                   "INFERSCALE_FAULT_ROTATION_OFFSET": str(offset)}  # fmt: skip
            with RuntimeProcess(env, log=Path(f"{kv_dir}.log")) as runtime:
                fidelity = httpx.get(f"{runtime.url}/readyz").json()["fidelity"]
            row = {"offset": offset, **fidelity}
            out.write(json.dumps(row) + "\n")
            out.flush()
            canary = fidelity["canary"]
            print(f"offset {offset}: divergence {canary['divergence_nats']:.3f} nats, "
                  f"passed {canary['passed']}", flush=True)  # fmt: skip
    return 0
