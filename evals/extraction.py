"""``inferscale eval extraction``: what Mem0-style extraction (``infer=true``) keeps from LoCoMo
sessions on the served model, against the dataset's own observations.

Each session is one ``add``: the first speaker's turns as the user's messages, the second's as
the assistant's, through the platform's own extraction pass (``backend/jobs/extraction.py``:
its prompt, JSON schema and structured decoding). Its facts are compared with the session's
observations about the first speaker by MiniLM cosine ("The user" read as the speaker's name):
precision, the share of extracted facts that match some observation; recall, the share of
observations some extracted fact matches; at several cosine thresholds, since no threshold is
canonical. Also the issue's probe sentence (a Porto move and a greyhound named Bolt).

    python -m evals extraction --sessions 2 --out docs/results/extraction
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

THRESHOLDS = (0.5, 0.6, 0.7)
PROBE = "I moved to Porto last spring and I adopted a greyhound named Bolt."


def sessions(path: Path, limit: int) -> list[tuple[str, str, list[dict[str, str]], list[str]]]:
    """(sample, speaker, messages, observations about the speaker) of the first ``limit``."""
    data = json.loads(path.read_text())
    conv = data.get("conversation", data)  # the released file nests it; the repo's are flat
    first, found = conv["speaker_a"], []
    for n in range(1, limit + 1):
        turns = conv.get(f"session_{n}")
        if not turns:
            break
        messages = [{"role": "user" if t["speaker"] == first else "assistant",
                     "content": str(t["text"])} for t in turns]  # fmt: skip
        observed = data.get("observation", data).get(f"session_{n}_observation", {})
        gold = [str(item[0]) for item in observed.get(first, [])]
        found.append((str(data.get("sample_id", path.stem)), first, messages, gold))
    return found


def _matches(facts: list[str], gold: list[str]) -> dict[str, Any]:
    from backend.retrieval.embedder import get_embedder

    if not facts or not gold:
        return {"facts": len(facts), "gold": len(gold), "cosine": []}
    embedder = get_embedder()
    cosine = embedder.embed(facts) @ embedder.embed(gold).T  # [facts, gold]
    return {"facts": len(facts), "gold": len(gold), "cosine": cosine.tolist()}


def score(rows: list[dict[str, Any]], threshold: float) -> dict[str, float]:
    matched_facts = total_facts = matched_gold = total_gold = 0
    for row in rows:
        total_facts += row["facts"]
        total_gold += row["gold"]
        if row["cosine"]:
            cosine = np.asarray(row["cosine"])
            matched_facts += int((cosine.max(axis=1) >= threshold).sum())
            matched_gold += int((cosine.max(axis=0) >= threshold).sum())
    return {
        "precision": matched_facts / total_facts if total_facts else 0.0,
        "recall": matched_gold / total_gold if total_gold else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale eval extraction", description=__doc__)
    parser.add_argument("--files", nargs="+", help="LoCoMo files (default: the repo's)")
    parser.add_argument("--sessions", type=int, default=2, help="first sessions per conversation")
    parser.add_argument("--runtime-url", help="a running runtime (default: start one)")
    parser.add_argument("--out", type=Path, default=Path("runs/eval/extraction"))
    args = parser.parse_args(argv)

    from backend.core.config import get_settings
    from backend.core.paths import locomo_dir
    from backend.jobs.extraction import _generate
    from backend.runtime.client import EngineClient
    from backend.services import inference as inf
    from gpu_runtime.client.http import RuntimeClient
    from gpu_runtime.client.launch import RuntimeProcess
    from gpu_runtime.types import TenantId

    files = [Path(f) for f in args.files] if args.files else sorted(locomo_dir().glob("*.json"))
    settings = get_settings()
    server: RuntimeProcess | None = None
    started = time.perf_counter()
    try:
        url = args.runtime_url
        if url is None:
            kv = tempfile.mkdtemp(prefix="inferscale-extraction-kv-")
            server = RuntimeProcess({"INFERSCALE_KV_STORE_DIR": kv}, log=Path(f"{kv}.log"))
            url = server.start(timeout_s=900).url
        engine = EngineClient(settings, RuntimeClient(url, settings.service_token))
        model = engine.model().model
        tenant, categories = TenantId("extraction-eval"), list(inf.CATEGORIES)
        schema = inf.extraction_schema(categories)

        def extract(messages: list[dict[str, str]]) -> list[str]:
            output = _generate(engine, tenant, inf.EXTRACT_PROMPT,
                               inf.conversation_text(messages), schema)  # fmt: skip
            return [fact for fact, _ in inf.parse_facts(output or "", categories)]

        rows: list[dict[str, Any]] = []
        for path in files:
            for sample, speaker, messages, gold in sessions(path, args.sessions):
                facts = extract(messages)
                named = [re.sub(r"\bThe user\b|\bthe user\b", speaker, f) for f in facts]
                rows.append({"sample": sample, "speaker": speaker, "turns": len(messages),
                             "extracted": facts, "gold_texts": gold,
                             **_matches(named, gold)})  # fmt: skip
                print(f"{sample} {speaker}: {len(facts)} facts from {len(messages)} turns, "
                      f"{len(gold)} observations", flush=True)  # fmt: skip
        probe = extract([{"role": "user", "content": PROBE}])
    finally:
        if server is not None:
            server.stop()
    result = {
        "model": model,
        "sessions": len(rows),
        "empty_sessions": sum(1 for r in rows if not r["facts"]),
        "scores": {str(t): score(rows, t) for t in THRESHOLDS},
        "probe": {"text": PROBE, "facts": probe},
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "extraction.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0
