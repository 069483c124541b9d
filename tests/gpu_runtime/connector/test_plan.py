"""The fused loader's tables, planned in full and completed from a prefetch hint's template,
against a plain per-token oracle: the same rows for every load shape a step can carry (the
usual run of whole facts, a run starting inside the preamble or ending inside a fact, several
loads in a step, pieces out of order), and clear errors for loads that cannot be planned."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_runtime.connector import plan
from gpu_runtime.connector.metadata import LoadPiece, LoadRequest
from gpu_runtime.errors import LoadPlanError
from gpu_runtime.kernels import inject
from gpu_runtime.pool.arena import PinnedFacts
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 0, 1)
T = TenantId("t")
LAYERS, HEADS, HEAD, BLOCK = 2, 2, 8, 4
SLAB = HEADS * HEAD * 2 * 4  # 4 token rows a slab: facts span several slabs
MAX_POSITION = 4096


def pinned_facts(tmp_path: Path, lengths: list[int]) -> PinnedFacts:
    """Facts of ``lengths`` tokens, each captured at its own (gapped) positions, pinned in a
    real pool small enough that some sit on the host tier."""
    pool = TieredKVPool.create(tmp_path, 24 * SLAB, 256 * SLAB, SLAB)
    keys = [FactKey.for_fact(T, f"f{i}", 1, CFG) for i in range(len(lengths))]
    for i, (key, n) in enumerate(zip(keys, lengths, strict=True)):
        shape = (LAYERS, n, HEADS, HEAD)
        captured = torch.arange(n) * (1 + i % 2) + 37 * i  # not always consecutive
        kv = FactKV.build(torch.randn(shape).bfloat16(), torch.randn(shape).bfloat16(), captured)
        pool.put(T, key, kv)
    found = pool.acquire(T, keys)
    assert found is not None
    return found


def oracle(
    loads: list[LoadRequest], pinned: list[PinnedFacts]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tables token by token, in plain Python."""
    tokens: list[tuple[int, ...]] = []
    facts: list[tuple[int, ...]] = []
    slabs: list[int] = []
    for load, found in zip(loads, pinned, strict=True):
        row_of = {key: len(facts) + i for i, key in enumerate(found.keys)}
        at = load.start
        for piece in load.pieces:
            i = found.keys.index(piece.key)
            for step in range(piece.n):
                local = piece.src_offset + step
                captured = int(found.positions[int(found.position_rows[i]) + local])
                block = load.block_ids[at // load.block_size]
                slot = block * load.block_size + at % load.block_size
                tokens.append((row_of[piece.key], local, piece.position + step - captured, slot))
                at += 1
        for i in range(len(found.keys)):
            first = int(found.slab_rows[i]) + len(slabs)
            facts.append((int(found.arenas[i]), int(found.n_tokens[i]), first))
        slabs.extend(int(s) for s in found.slabs)
    return (
        np.array(tokens, np.int64).reshape(-1, plan.TOKEN_FIELDS),
        np.array(facts, np.int64).reshape(-1, plan.FACT_FIELDS),
        np.array(slabs, np.int64),
    )


def run_load(
    found: PinnedFacts, first: int, skip: int, count: int, at: int, cut: int = 0
) -> LoadRequest:
    """A load of facts ``first..first+count`` as one run at prompt position ``at``, its first
    ``skip`` tokens held by vLLM's prefix cache and its last ``cut`` left to a later step."""
    lengths = [int(n) for n in found.n_tokens[first : first + count]]
    pieces, position = [], at
    for j, n in enumerate(lengths):
        lo = skip if j == 0 else 0
        hi = n - cut if j == len(lengths) - 1 else n
        pieces.append(LoadPiece(found.keys[first + j], lo, hi - lo, position))
        position += hi - lo
    n_blocks = position // BLOCK + 1
    blocks = tuple(random.Random(at).sample(range(2 * n_blocks), n_blocks))  # scattered
    return LoadRequest(f"r{at}", T, tuple(pieces), blocks, BLOCK, at, position)


def as_the_kernel_reads(
    run: plan.RunTables, block_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run mode's tables as the kernel reads them (``kernels/inject.py``, ``RUN``), token by
    token in plain Python: the template's rows shifted, each token's slot off the blocks."""
    tokens = []
    for t, (fact, local, delta, _) in enumerate(run.tokens.tolist()):
        position = run.start + t
        block = int(run.blocks[position // block_size - run.first_block])
        tokens.append((fact, local, delta + run.shift, block * block_size + position % block_size))
    return np.array(tokens, np.int64).reshape(-1, plan.TOKEN_FIELDS), run.facts, run.slabs


def both_plans(loads: list[LoadRequest], pinned: list[PinnedFacts]) -> list[tuple[np.ndarray, ...]]:
    """The full plan, the plan completing the template, and (one load that is a run of it)
    the kernel's run mode."""
    templates = [plan.token_template(found) for found in pinned]
    plans: list[tuple[np.ndarray, ...]] = [
        plan.plan_tables(loads, pinned, [None] * len(loads), LAYERS, MAX_POSITION),
        plan.plan_tables(loads, pinned, templates, LAYERS, MAX_POSITION),
    ]
    if len(loads) == 1:
        run = plan.plan_run(loads[0], pinned[0], templates[0], LAYERS, MAX_POSITION)
        if run is not None:
            assert np.shares_memory(run.tokens, templates[0].rows)  # no per-token host work
            plans.append(as_the_kernel_reads(run, loads[0].block_size))
    return plans


def assert_tables_equal(
    got: tuple[np.ndarray, ...], want: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.int64 and a.shape == b.shape
        assert np.array_equal(a, b)


def test_the_plans_fields_are_the_kernels() -> None:
    assert (plan.TOKEN_FIELDS, plan.FACT_FIELDS) == (inject.TOKEN_FIELDS, inject.FACT_FIELDS)


@pytest.mark.parametrize(
    ("skip", "cut", "first"),
    [(0, 0, 0), (5, 0, 0), (0, 3, 0), (2, 1, 3), (0, 0, 4)],
    ids=["whole-run", "prefix-cached-start", "chunked-end", "both", "later-facts"],
)
def test_a_run_of_facts_is_planned_from_its_template_as_in_full(
    tmp_path: Path, skip: int, cut: int, first: int
) -> None:
    found = pinned_facts(tmp_path, [9, 6, 11, 7, 8, 5, 10])
    load = run_load(found, first, skip, 7 - first, at=13, cut=cut)
    template = plan.token_template(found)
    assert plan.rows_from_template(load, template, 0) is not None  # the fast path is taken
    want = oracle([load], [found])
    plans = both_plans([load], [found])
    assert len(plans) == 3  # and the kernel's run mode
    for got in plans:
        assert_tables_equal(got, want)


def test_run_mode_leaves_to_the_full_plan_what_it_cannot_check(tmp_path: Path) -> None:
    found = pinned_facts(tmp_path, [9, 6, 11])
    template = plan.token_template(found)
    load = run_load(found, 0, 0, 3, at=40)
    assert plan.plan_run(load, found, template, LAYERS, MAX_POSITION) is not None
    # a rotation past the RoPE table (the full plan raises), another model shape, blocks short
    assert plan.plan_run(load, found, template, LAYERS, 40) is None
    assert plan.plan_run(load, found, template, LAYERS + 1, MAX_POSITION) is None
    short = LoadRequest(load.req_id, T, load.pieces, load.block_ids[:-1], BLOCK, load.start,
                        load.end)  # fmt: skip
    assert plan.plan_run(short, found, template, LAYERS, MAX_POSITION) is None


def test_several_loads_in_one_step_offset_their_fact_and_slab_rows(tmp_path: Path) -> None:
    a = pinned_facts(tmp_path / "a", [9, 6, 11])
    b = pinned_facts(tmp_path / "b", [4, 12])
    loads = [run_load(a, 0, 2, 3, at=20), run_load(b, 0, 0, 2, at=0)]
    want = oracle(loads, [a, b])
    assert want[0][:, 0].max() == 4 and want[1][3, 2] == len(a.slabs)  # rows past the first's
    for got in both_plans(loads, [a, b]):
        assert_tables_equal(got, want)


def test_pieces_that_are_no_run_are_planned_in_full(tmp_path: Path) -> None:
    found = pinned_facts(tmp_path, [9, 6, 11, 7])
    k = found.keys
    shapes = {
        "out of order": (LoadPiece(k[2], 0, 11, 5), LoadPiece(k[0], 0, 9, 16)),
        "a gap in positions": (LoadPiece(k[0], 0, 9, 0), LoadPiece(k[1], 0, 6, 12)),
        "a fact skipped": (LoadPiece(k[0], 0, 9, 0), LoadPiece(k[2], 0, 11, 9)),
        "inside a fact": (LoadPiece(k[1], 1, 3, 0), LoadPiece(k[2], 0, 11, 3)),
    }
    template = plan.token_template(found)
    for name, pieces in shapes.items():
        end = sum(p.n for p in pieces)
        load = LoadRequest(name, T, pieces, tuple(range(12)), BLOCK, 0, end)
        assert plan.rows_from_template(load, template, 0) is None, name
        assert plan.plan_run(load, found, template, LAYERS, MAX_POSITION) is None, name
        want = oracle([load], [found])
        for got in both_plans([load], [found]):
            assert_tables_equal(got, want)


@pytest.mark.parametrize("seed", range(6))
def test_random_loads_match_the_oracle(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 14) for _ in range(rng.randint(1, 12))]
    found = pinned_facts(tmp_path, lengths)
    first = rng.randrange(len(lengths))
    count = rng.randint(1, len(lengths) - first)
    skip = rng.randrange(lengths[first])
    last = lengths[first + count - 1] - (skip if count == 1 else 0)
    load = run_load(found, first, skip, count, at=rng.randint(0, 200), cut=rng.randrange(last))
    if rng.random() < 0.5:  # shuffled: planned in full
        pieces = list(load.pieces)
        rng.shuffle(pieces)
        load = LoadRequest(load.req_id, T, tuple(pieces), load.block_ids, BLOCK, load.start,
                           load.end)  # fmt: skip
    want = oracle([load], [found])
    for got in both_plans([load], [found]):
        assert_tables_equal(got, want)


def test_loads_that_cannot_be_planned_say_why(tmp_path: Path) -> None:
    found = pinned_facts(tmp_path, [9, 6])
    short = run_load(found, 0, 0, 2, at=0)
    short = LoadRequest("short", T, short.pieces, short.block_ids, BLOCK, 0, short.end + 1)
    far = run_load(found, 0, 0, 2, at=MAX_POSITION + 100)
    for load, message in ((short, "do not cover"), (far, "beyond the RoPE table")):
        for templates in ([None], [plan.token_template(found)]):
            with pytest.raises(LoadPlanError, match=message):
                plan.plan_tables([load], [found], templates, LAYERS, MAX_POSITION)
    k = found.keys
    past = LoadRequest("past", T, (LoadPiece(k[0], 0, 11, 0), LoadPiece(k[1], 2, 4, 11)),
                       tuple(range(8)), BLOCK, 0, 15)  # fmt: skip
    for templates in ([None], [plan.token_template(found)]):  # fact 0 has 9 tokens, not 11
        with pytest.raises(LoadPlanError, match="past its fact's end"):
            plan.plan_tables([past], [found], templates, LAYERS, MAX_POSITION)
    with pytest.raises(LoadPlanError, match="another model shape"):
        plan.plan_tables([short], [found], [None], LAYERS + 1, MAX_POSITION)
