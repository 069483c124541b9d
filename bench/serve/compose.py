"""What composing a chat's prompt costs in the API at k facts: with the composer's per-tenant
fact-token cache warm (every chat after a fact's first) and cold (every fact tokenized again,
as before the cache), SmolLM2's tokenizer and chat template as the runtime serves them.

    python -m bench.serve.compose [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time

from tokenizers import Tokenizer

from gpu_runtime.client.composer import FactText, PromptComposer
from gpu_runtime.client.template import ChatTemplate
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

TENANT, CONFIG = TenantId("bench"), EncodingConfig("m", 0, 1)


def composer() -> PromptComposer:
    model = RuntimeSettings().resolved_model_path
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    template = ChatTemplate((model / "chat_template.jinja").read_text(),
                            {"bos_token": "", "eos_token": "<|im_end|>"})  # fmt: skip
    return PromptComposer(lambda t: tokenizer.encode(t, add_special_tokens=False).ids, template)


def measure(k: int, calls: int = 200) -> dict[str, float]:
    facts = [FactText(FactKey(TENANT, str(i), 1, "m", 0, 1),
                      f"Caroline went to a support group on {i} May 2023 and felt accepted.")
             for i in range(k)]  # fmt: skip
    warm = composer()
    for _ in range(5):
        warm.compose(TENANT, CONFIG, facts, [], "What did Caroline do?")
    started = time.perf_counter()
    for _ in range(calls):
        warm.compose(TENANT, CONFIG, facts, [], "What did Caroline do?")
    warm_ms = (time.perf_counter() - started) / calls * 1000
    cold = composer()
    started = time.perf_counter()
    for _ in range(calls):
        cold._tenant_fact_tokens.cache_clear()  # every fact tokenized again
        cold.compose(TENANT, CONFIG, facts, [], "What did Caroline do?")
    cold_ms = (time.perf_counter() - started) / calls * 1000
    return {"cached_ms": round(warm_ms, 3), "uncached_ms": round(cold_ms, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = {str(k): measure(k) for k in (5, 20, 50, 100)}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"compose_per_k": result}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
