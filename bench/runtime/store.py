"""``inferscale bench store``: facts/s written and read by the packed store and by the previous
file-per-fact store, on the same facts, side by side in one run (no engine needed).

Facts have real LoCoMo token counts (the observations, tokenized by the served model's
tokenizer) and real model shapes: SmolLM2-135M (30 layers x 3 KV heads x 64 dims) and
Llama-3.1-8B (32 x 8 x 128), bf16 KV. For each shape and store, in alternating order per round:
writes one fact per call (each durable before the next), writes in batches (an engine step's
captures), answers "is it stored" from a fresh process's view (the catalog after a restart),
reads every fact back in random order from a fresh store object (page cache warm, and cold:
the files' pages dropped with ``posix_fadvise``), and deletes everything.

    python -m bench store --out runs/store
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from bench.runtime.files_store import FilePerFactKVStore
from bench.runtime.workload import locomo_facts
from gpu_runtime.store.base import DurableKVStore
from gpu_runtime.store.disk.paths import DiskLayout
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.packed import PackedKVStore
from gpu_runtime.types import EncodingConfig, FactKey, TenantId


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int

    @property
    def bytes_per_token(self) -> int:  # K and V, bf16
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


SHAPES = {
    "smollm2-135m": Shape("SmolLM2-135M", 30, 3, 64),
    "llama-3.1-8b": Shape("Llama-3.1-8B", 32, 8, 128),
}


def _packed(root: Path, verify: bool = False) -> DurableKVStore:
    return PackedKVStore(root, background_compaction=False, verify_checksum=verify)


STORES: dict[str, Callable[[Path], DurableKVStore]] = {
    "file-per-fact": FilePerFactKVStore,
    "packed": _packed,
}


def fact_lengths(count: int, locomo: Path, tokenizer_json: Path) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    texts = locomo_facts(locomo, count)
    return [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]


def build_facts(shape: Shape, lengths: list[int], seed: int) -> list[tuple[FactKey, FactKV]]:
    g = torch.Generator().manual_seed(seed)
    tenant, config = TenantId("bench-store"), EncodingConfig(shape.name, 0, 1)
    facts = []
    for i, n in enumerate(lengths):
        dims = (shape.layers, n, shape.kv_heads, shape.head_dim)  # [L, n, H, D]
        k = torch.randn(dims, generator=g).bfloat16()
        v = torch.randn(dims, generator=g).bfloat16()
        key = FactKey.for_fact(tenant, f"f{i}", 1, config)
        facts.append((key, FactKV.build(k, v, torch.arange(n))))
    return facts


def drop_page_cache(root: Path) -> None:
    """Asks the kernel to forget the files' (clean, synced) pages: the next read is a disk read."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _rate(count: int, work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return count / (time.perf_counter() - started)


def measure(
    name: str, facts: list[tuple[FactKey, FactKV]], root: Path, batch: int, seed: int
) -> dict[str, float]:
    """One round of one store: rates in facts/s, plus files and bytes on disk."""
    make = STORES[name]
    keys = [key for key, _ in facts]
    chunks = [facts[i : i + batch] for i in range(0, len(facts), batch)]
    out: dict[str, float] = {}

    store = make(root / "one")
    out["write_one"] = _rate(len(facts), lambda: [store.put(key, kv) for key, kv in facts])
    shutil.rmtree(root / "one")

    folder = root / "batched"
    store = make(folder)
    out["write_batch"] = _rate(len(facts), lambda: [store.put_many(chunk) for chunk in chunks])
    out["disk_bytes"] = store.usage(keys[0].tenant)["disk_segment_bytes"]
    out["files"] = sum(1 for p in folder.rglob("*") if p.is_file())

    # What the engine core's catalog asks after a restart, from a process that never read KV.
    ask = StoredFacts(folder).contains if name == "packed" else DiskLayout(folder).exists
    out["exists"] = _rate(len(keys), lambda: _expect(all(map(ask, keys)), "exists"))

    order = random.Random(seed).sample(keys, len(keys))
    readers = [("read_warm", False, False), ("read_cold", True, False)]
    if name == "packed":  # the same sha256 over the tensors the file store verifies
        readers.append(("read_cold_sha256", True, True))
    for label, cold, verify in readers:
        if cold:
            drop_page_cache(folder)
        reader = _packed(folder, verify) if name == "packed" else make(folder)
        out[label] = _rate(len(keys), partial(_read_all, reader, order))

    store = make(folder)
    out["delete"] = _rate(len(keys), lambda: _delete_all(store, order, batch))
    shutil.rmtree(folder)
    return out


def _read_all(store: DurableKVStore, keys: list[FactKey]) -> None:
    for key in keys:
        _expect(store.get(key) is not None, "read")


def _delete_all(store: DurableKVStore, keys: list[FactKey], batch: int) -> None:
    for i in range(0, len(keys), batch):
        part = keys[i : i + batch]
        _expect(store.delete_many(part[0].tenant, part) == len(part), "delete")


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"store benchmark: a {what} found nothing; the measurement is void")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gpu_runtime.config import RuntimeSettings

    model_dir = RuntimeSettings().resolved_tokenizer_path
    tokenizer = Path(args.tokenizer) if args.tokenizer else model_dir
    repo_locomo = Path(__file__).resolve().parents[2] / "data" / "locomo"
    locomo = Path(args.locomo) if args.locomo else repo_locomo
    if args.tokens:
        lengths = [args.tokens] * args.facts
    else:
        lengths = fact_lengths(args.facts, locomo, tokenizer / "tokenizer.json")
    result: dict[str, Any] = {"batch": args.batch, "repeats": args.repeats, "shapes": []}
    work = Path(tempfile.mkdtemp(prefix="inferscale-bench-store-", dir=args.dir))
    try:
        for shape_name in args.shapes.split(","):
            shape = SHAPES[shape_name]
            facts = build_facts(shape, lengths, seed=0)
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in STORES}
            for r in range(args.repeats):  # alternating order: neither store always goes first
                for name in list(STORES) if r % 2 == 0 else list(reversed(STORES)):
                    rounds[name].append(measure(name, facts, work / name, args.batch, seed=r))
            medians = {
                name: {k: statistics.median(row[k] for row in rows) for k in rows[0]}
                for name, rows in rounds.items()
            }
            result["shapes"].append(
                {
                    "shape": shape.name,
                    "facts": len(facts),
                    "tokens_mean": statistics.mean(lengths),
                    "fact_kib_mean": statistics.mean(kv.nbytes for _, kv in facts) / 1024,
                    "stores": medians,
                }
            )
            del facts
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


COLUMNS = [
    ("write_one", "write, 1 per call"), ("write_batch", "write, batches"),
    ("read_warm", "read (page cache)"), ("read_cold", "read (cold)"),
    ("read_cold_sha256", "read (cold) + sha256"), ("exists", "stored? (fresh view)"),
    ("delete", "delete"),
]  # fmt: skip


def table(result: dict[str, Any]) -> str:
    head = " | ".join(label for _, label in COLUMNS)
    lines = [
        f"| shape (facts, mean tokens, KiB) | store | {head} | files | MiB on disk |",
        "|---" * (len(COLUMNS) + 4) + "|",
    ]
    for row in result["shapes"]:
        what = (
            f"{row['shape']} ({row['facts']}, {row['tokens_mean']:.1f}, {row['fact_kib_mean']:.0f})"
        )
        stores = row["stores"]
        for name, values in stores.items():
            cells = [f"{values[k]:,.0f}" if k in values else "-" for k, _ in COLUMNS]
            lines.append(
                f"| {what} | {name} | {' | '.join(cells)} | {values['files']:.0f} | "
                f"{values['disk_bytes'] / 2**20:.1f} |"
            )
        base, packed = stores["file-per-fact"], stores["packed"]
        ratios = [f"{packed[k] / base[k]:.2f}x" if k in base else "-" for k, _ in COLUMNS]
        lines.append(f"| {what} | packed / file | {' | '.join(ratios)} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench store")
    parser.add_argument("--facts", type=int, default=300, help="LoCoMo facts per shape")
    parser.add_argument("--shapes", default="smollm2-135m,llama-3.1-8b")
    parser.add_argument("--batch", type=int, default=16, help="facts per batched write/delete")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--dir", help="where the stores write (default: the temp directory)")
    parser.add_argument("--tokens", type=int, help="every fact this long (no tokenizer needed)")
    parser.add_argument("--tokenizer", help="directory with tokenizer.json (default: the model's)")
    parser.add_argument("--locomo", help="LoCoMo folder (default: the repository's data)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "store.json").write_text(json.dumps(result, indent=1))
    (out / "store.md").write_text(table(result) + "\n")
    print(table(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
