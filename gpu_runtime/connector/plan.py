"""The fused loader's tables for one step's loads: what every injected token reads and where it
goes (torch-free: NumPy on the host, uploaded by ``fused.FusedLoader``).

Per token (``TOKEN_FIELDS``): the fact's row in the fact table, the token within the stored fact,
the position change its key is rotated by, the cache slot it is written to. Per fact
(``FACT_FIELDS``): its arena (0 GPU, 1 host), its stored tokens, where its slab ids start in the
slab table. This runs on the engine core's thread for every step with loads, so it makes a few
whole-step NumPy calls and no Python loop over tokens.

Most of it need not wait for the load. A kv request's loaded tokens are one run of its facts'
tokens, in the order its prefetch hint named them (the preamble, then the facts), at consecutive
prompt positions; only where the run starts (vLLM's prefix cache may hold the preamble's first
blocks), where it lands and the cache slots are the load's own. So the hint's thread, which pins
the facts ahead (``ahead.py``), also makes their ``TokenTemplate``, and the load checks its
pieces against it in one Python pass and fills in the rest with a handful of NumPy calls. A
load that is not such a run, or whose facts were pinned without a hint, is planned in full.
Both costs at k=50, cold and warm: ``python -m bench.runtime.hook_cost`` (``plan``,
``plan_ahead``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpu_runtime.connector import timing
from gpu_runtime.connector.metadata import LoadRequest
from gpu_runtime.errors import LoadPlanError, ShortFactError
from gpu_runtime.kernels import FACT_FIELDS as FACT_FIELDS  # the layout the kernel reads
from gpu_runtime.kernels import TOKEN_FIELDS as TOKEN_FIELDS

if TYPE_CHECKING:
    from gpu_runtime.pool.arena import PinnedFacts
    from gpu_runtime.types import FactKey


@dataclass(frozen=True)
class TokenTemplate:
    """A pinning's facts as one run of tokens, in the pinning's order, planned ahead: every token
    row but for where the run lands in a prompt."""

    keys: tuple[FactKey, ...]
    index: dict[FactKey, int]  # key -> its row in ``keys``
    starts: tuple[int, ...]  # [F + 1] where each fact's tokens start in the run; then its end
    rows: np.ndarray  # [N, TOKEN_FIELDS]: fact row, token in the fact, t - captured position, 0
    facts: np.ndarray  # [F, FACT_FIELDS]: the fact table, its slab rows from 0
    deltas: tuple[int, int]  # the least and the greatest of ``rows[:, 2]``


@dataclass(frozen=True)
class RunTables:
    """One load that is a run of its hint's template, for the kernel's run mode: the template's
    rows as they are (a view: no per-token work on the host), which the kernel shifts and places
    itself. Token ``t`` of the load reads ``tokens[t]``, its key is rotated by ``tokens[t, 2] +
    shift`` and it goes to prompt position ``start + t``, whose cache slot the kernel reads off
    ``blocks`` (the request's block ids from ``first_block`` on)."""

    tokens: np.ndarray  # [n, TOKEN_FIELDS] the template's rows for the load's tokens (a view)
    facts: np.ndarray  # [F, FACT_FIELDS]
    slabs: np.ndarray  # [S]
    blocks: np.ndarray  # [B] int64: the blocks the load's positions lie in
    shift: int  # prompt position - run index (plus a test's rotation fault), every token
    start: int  # the load's first prompt position
    first_block: int  # start // block_size


def token_template(found: PinnedFacts) -> TokenTemplate:
    """``found``'s facts whole, in order, as one run (made off the engine core's thread)."""
    n = found.n_tokens  # [F]
    total = int(n.sum())
    first = np.cumsum(n) - n  # [F] each fact's first token in the run
    fact = np.repeat(np.arange(len(n)), n)  # [N] fact of each token
    run = np.arange(total)  # [N]
    rows = np.zeros((total, TOKEN_FIELDS), dtype=np.int64)
    rows[:, 0] = fact
    rows[:, 1] = run - first[fact]
    rows[:, 2] = run - found.positions[found.position_rows[fact] + rows[:, 1]]
    deltas = (int(rows[:, 2].min()), int(rows[:, 2].max())) if total else (0, 0)
    return TokenTemplate(
        keys=found.keys,
        index={key: i for i, key in enumerate(found.keys)},
        starts=(*first.tolist(), total),
        rows=rows,
        facts=_fact_rows(found, 0),
        deltas=deltas,
    )


def plan_run(
    load: LoadRequest,
    found: PinnedFacts,
    template: TokenTemplate,
    n_layers: int,
    max_position: int,
) -> RunTables | None:
    """The kernel's run mode for a step's one load, when it is a run of ``template`` (made
    ahead from ``found``, its facts pinned); ``None`` when it is not, or when anything would
    need the full plan's checks (which then say what is wrong)."""
    if found.n_layers != {n_layers}:
        return None
    placed = _place(load, template)
    if placed is None:
        return None
    begin, shift = placed
    low, high = template.deltas
    if max(high + shift, -(low + shift)) >= max_position:
        return None
    first_block, last_block = load.start // load.block_size, (load.end - 1) // load.block_size
    if last_block >= len(load.block_ids):
        return None
    return RunTables(
        tokens=template.rows[begin : begin + load.end - load.start],
        facts=template.facts,
        slabs=found.slabs,
        blocks=np.array(load.block_ids[first_block : last_block + 1], dtype=np.int64),
        shift=shift,
        start=load.start,
        first_block=first_block,
    )


def plan_tables(
    loads: Sequence[LoadRequest],
    pinned: Sequence[PinnedFacts],
    templates: Sequence[TokenTemplate | None],
    n_layers: int,
    max_position: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``tokens`` [n, TOKEN_FIELDS], ``facts`` [F, FACT_FIELDS] and ``slabs`` [S], all int64, for
    ``loads`` whose facts ``pinned`` says where they are, and ``templates`` says as a run where
    one was made ahead (each list one item per load, in order)."""
    token_rows: list[np.ndarray] = []
    fact_rows: list[np.ndarray] = []
    slab_tables: list[np.ndarray] = []
    n_facts = n_slabs = 0
    for load, found, template in zip(loads, pinned, templates, strict=True):
        if found.n_layers != {n_layers}:
            raise LoadPlanError(f"facts of {load.req_id} were encoded for another model shape")
        rows = None
        if template is not None:
            with timing.section("load_plan_ahead"):
                rows = rows_from_template(load, template, n_facts)
        token_rows.append(_token_rows(load, found, n_facts) if rows is None else rows)
        if template is None:
            fact_rows.append(_fact_rows(found, n_slabs))
        elif n_slabs:  # a later load of the step: its slab rows follow the earlier loads'
            fact_rows.append(template.facts + np.array([0, 0, n_slabs]))
        else:
            fact_rows.append(template.facts)
        slab_tables.append(found.slabs)
        n_facts += len(found.keys)
        n_slabs += len(found.slabs)
    if not token_rows:
        empty = np.empty(0, np.int64)
        return empty.reshape(0, TOKEN_FIELDS), empty.reshape(0, FACT_FIELDS), empty
    tokens = token_rows[0] if len(token_rows) == 1 else np.concatenate(token_rows)
    if len(tokens) and max(int(tokens[:, 2].max()), -int(tokens[:, 2].min())) >= max_position:
        raise LoadPlanError("a position change is beyond the RoPE table")
    facts = fact_rows[0] if len(fact_rows) == 1 else np.concatenate(fact_rows)
    slabs = slab_tables[0] if len(slab_tables) == 1 else np.concatenate(slab_tables)
    return tokens, facts, slabs


def _token_rows(load: LoadRequest, found: PinnedFacts, first_fact: int) -> np.ndarray:
    """[n, TOKEN_FIELDS] for any load; its facts' rows start at ``first_fact``."""
    pieces, keys = load.pieces, found.keys
    if len(pieces) == len(keys) and all(p.key == k for p, k in zip(pieces, keys, strict=True)):
        fact = np.arange(len(keys))  # [P] one piece a fact, in order: the usual load
    else:
        index = {key: i for i, key in enumerate(keys)}
        fact = np.fromiter((index[p.key] for p in pieces), np.int64, len(pieces))  # [P]
    columns = list(zip(*pieces, strict=True))[1:] if pieces else [(), (), ()]
    src, count, dst = np.array(columns, np.int64).reshape(3, -1)  # each [P]
    total = int(count.sum())
    if total != load.end - load.start:
        raise LoadPlanError("load pieces do not cover the claimed slots")
    if (src + count > found.n_tokens[fact]).any():
        raise ShortFactError(f"a piece of {load.req_id} reads past its fact's end")
    piece = np.repeat(np.arange(len(count)), count)  # [n] piece of each token
    local = src[piece] + np.arange(total) - (np.cumsum(count) - count)[piece]  # [n] in its fact
    stored = found.positions[found.position_rows[fact][piece] + local]  # [n] captured at
    rows = np.empty((total, TOKEN_FIELDS), dtype=np.int64)
    rows[:, 0] = (first_fact + fact)[piece]
    rows[:, 1] = local
    rows[:, 2] = (dst - src)[piece] + local - stored
    rows[:, 3] = load.slots()
    return rows


def rows_from_template(
    load: LoadRequest, template: TokenTemplate, first_fact: int
) -> np.ndarray | None:
    """[n, TOKEN_FIELDS] for a load whose pieces are one run of ``template``'s tokens at
    consecutive positions; ``None`` if they are not."""
    placed = _place(load, template)
    if placed is None:
        return None
    begin, shift = placed
    rows = template.rows[begin : begin + load.end - load.start].copy()  # [n, TOKEN_FIELDS]
    rows[:, 2] += shift
    if first_fact:
        rows[:, 0] += first_fact
    rows[:, 3] = load.slots()
    return rows


def _place(load: LoadRequest, template: TokenTemplate) -> tuple[int, int] | None:
    """Where a load lies in ``template``'s run, if its pieces are one run of it at consecutive
    positions: its first token's index in the run, and prompt position - run index."""
    pieces, keys, starts = load.pieces, template.keys, template.starts
    j0 = template.index.get(pieces[0].key) if pieces else None
    if j0 is None or j0 + len(pieces) > len(keys):
        return None
    begin = t = starts[j0] + pieces[0].src_offset  # the load's first token in the run
    shift = pieces[0].position - begin  # prompt position - run index, for every token
    for j, (key, src_offset, n, position) in enumerate(pieces, j0):  # (unpacked: per fact)
        if (
            starts[j] + src_offset != t  # not where the last piece ended
            or position - t != shift  # not where the last piece's tokens ended
            or t + n > starts[j + 1]  # past its fact's end (the full plan says so)
            # the key: by identity first (one object per key in the process: process_keys)
            or (key is not keys[j] and key != keys[j])
        ):
            return None
        t += n
    if t - begin != load.end - load.start:
        return None  # the full plan says what is wrong
    return begin, shift


def _fact_rows(found: PinnedFacts, first_slab: int) -> np.ndarray:
    """[F, FACT_FIELDS]: arena, stored tokens, first row in the slab table."""
    rows = np.empty((len(found.keys), FACT_FIELDS), dtype=np.int64)
    rows[:, 0] = found.arenas
    rows[:, 1] = found.n_tokens
    rows[:, 2] = found.slab_rows
    if first_slab:
        rows[:, 2] += first_slab
    return rows
