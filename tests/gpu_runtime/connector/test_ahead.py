"""Facts pinned ahead by a prefetch hint: held within bounds, taken by the load they name (its
preamble pinned then), released when they expire, dropped by a purge, never across tenants,
let go by a hint its load overtook; and a load that takes them injects the very bytes it would
have without the hint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from gpu_runtime.connector import ahead as ahead_module
from gpu_runtime.connector import plan
from gpu_runtime.connector.ahead import PinnedAhead
from gpu_runtime.connector.metadata import InjectionMetadata, LoadPiece, LoadRequest
from gpu_runtime.kernels import inject
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.rope import RopeRotator
from gpu_runtime.types import EncodingConfig, FactKey, TenantId
from tests.gpu_runtime.connector.test_fused_loader import BLOCK, BLOCKS, fact, worker
from tests.gpu_runtime.test_rope import table

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 0, 1)
A, B = TenantId("a"), TenantId("b")
HEADS, HEAD = 2, 16
SLAB = HEADS * HEAD * 2 * 4  # 4 token rows a slab


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pool_with(
    tmp_path: Path, tenant: TenantId, names: list[str]
) -> tuple[TieredKVPool, list[FactKey]]:
    pool = TieredKVPool.create(tmp_path, 64 * SLAB, 64 * SLAB, SLAB)
    keys = [FactKey.for_fact(tenant, name, 1, CFG) for name in names]
    for i, key in enumerate(keys):
        pool.put(tenant, key, fact(i, 3 + i, HEADS, HEAD, at=10 * i))
    return pool, keys


def test_a_hint_pins_its_facts_until_its_load_takes_them(tmp_path: Path) -> None:
    pool, keys = pool_with(tmp_path, A, ["pre", "x", "y", "z"])
    ahead = PinnedAhead(pool.acquire, pool.release)
    assert ahead.hint(A, keys[1:])
    assert pool.stats(A)["pinned"] == 3 and len(ahead) == 1
    assert not ahead.hint(A, keys[1:])  # the same facts are held once
    assert pool.stats(A)["pinned"] == 3

    taken = ahead.take(A, keys)  # the load: the preamble first, which no hint names
    assert taken is not None and set(taken.keys) == set(keys[1:])
    assert list(taken.found.keys) == taken.keys and len(ahead) == 0
    assert ahead.take(A, keys) is None  # taken once
    pool.release(A, taken.keys)  # the load's pins, once its reads are done
    assert pool.stats(A)["pinned"] == 0


def test_a_load_of_other_facts_or_of_another_tenant_takes_nothing(tmp_path: Path) -> None:
    pool, keys = pool_with(tmp_path, A, ["x", "y", "z"])
    ahead = PinnedAhead(pool.acquire, pool.release)
    assert ahead.hint(A, keys[:2])
    assert ahead.take(A, keys[1:]) is None  # not the hint's facts
    as_b = [FactKey.for_fact(B, k.fact_id, 1, CFG) for k in keys[:2]]
    assert ahead.take(B, as_b) is None
    assert not ahead.hint(B, keys[2:])  # a key of A in B's hint: refused, nothing pinned
    assert pool.stats(A)["pinned"] == 2


def test_held_pins_expire_and_are_bounded(tmp_path: Path) -> None:
    pool, keys = pool_with(tmp_path, A, ["x", "y", "z"])
    clock = Clock()
    ahead = PinnedAhead(pool.acquire, pool.release, hold_s=1.0, capacity=2, clock=clock)
    assert ahead.hint(A, keys[:1]) and ahead.hint(A, keys[1:2])
    assert not ahead.hint(A, keys[2:])  # over the bound: a prefetch only
    assert pool.stats(A)["pinned"] == 2
    clock.now = 0.5
    ahead.sweep()
    assert pool.stats(A)["pinned"] == 2
    clock.now = 1.5
    pool.reclaim()  # the pool sweeps them too, before it evicts or moves anything
    assert len(ahead) == 2  # (this ahead is not the pool's: sweep it by hand)
    ahead.sweep()
    assert pool.stats(A)["pinned"] == 0 and len(ahead) == 0
    assert ahead.take(A, keys[:1]) is None


def test_a_fact_not_in_memory_is_not_held(tmp_path: Path) -> None:
    pool, keys = pool_with(tmp_path, A, ["x"])
    ahead = PinnedAhead(pool.acquire, pool.release)
    missing = FactKey.for_fact(A, "never-stored", 1, CFG)
    assert not ahead.hint(A, [keys[0], missing])
    assert pool.stats(A)["pinned"] == 0 and len(ahead) == 0


def test_a_hint_naming_the_preamble_is_taken_whole(tmp_path: Path) -> None:
    pool, facts = pool_with(tmp_path, A, ["x", "y"])
    preamble = FactKey.preamble(A, (1, 2, 3), CFG)
    pool.put(A, preamble, fact(9, 3, HEADS, HEAD, at=0))
    ahead = PinnedAhead(pool.acquire, pool.release)
    assert ahead.hint(A, [preamble, *facts])  # as the API's chat sends it
    assert pool.stats(A)["pinned"] == 3

    taken = ahead.take(A, [preamble, *facts])  # nothing left for the load to pin
    assert taken is not None and taken.keys == [preamble, *facts]
    pool.release(A, taken.keys)
    assert pool.stats(A)["pinned"] == 0


def test_a_hint_whose_preamble_is_not_encoded_yet_holds_the_facts(tmp_path: Path) -> None:
    pool, facts = pool_with(tmp_path, A, ["x", "y"])
    preamble = FactKey.preamble(A, (1, 2, 3), CFG)  # its first request encodes it
    ahead = PinnedAhead(pool.acquire, pool.release)
    assert ahead.hint(A, [preamble, *facts])
    assert pool.stats(A)["pinned"] == 2

    taken = ahead.take(A, [preamble, *facts])  # the load pins the preamble itself
    assert taken is not None and taken.keys == facts
    pool.release(A, taken.keys)
    missing = FactKey.for_fact(A, "never-stored", 1, CFG)
    assert not ahead.hint(A, [missing, *facts])  # only a preamble may be left out
    assert pool.stats(A)["pinned"] == 0


class Overtaken:
    """The pool's ``acquire``, running ``meanwhile`` once while it pins: what the engine core's
    thread does while the hint listener's thread is still pinning (a hint races its request)."""

    def __init__(self, pool: TieredKVPool) -> None:
        self.pool = pool
        self.meanwhile: Callable[[], object] | None = None
        self.seen: list[object] = []

    def __call__(self, tenant: TenantId, keys: list[FactKey]) -> Any:
        found = self.pool.acquire(tenant, keys)
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            self.seen.append(meanwhile())
        return found


def overtaken(
    tmp_path: Path, names: list[str]
) -> tuple[TieredKVPool, list[FactKey], Overtaken, PinnedAhead]:
    pool, keys = pool_with(tmp_path, A, names)
    acquire = Overtaken(pool)
    return pool, keys, acquire, PinnedAhead(acquire, pool.release)


@pytest.mark.parametrize("named", ["all", "facts"])  # the API's hint names the preamble too
def test_a_hint_its_load_overtook_lets_go_of_its_pins(tmp_path: Path, named: str) -> None:
    pool, keys, acquire, ahead = overtaken(tmp_path, ["pre", "x", "y"])
    acquire.meanwhile = lambda: ahead.take(A, keys)  # the load: the preamble and the facts
    assert not ahead.hint(A, keys if named == "all" else keys[1:])
    assert acquire.seen == [None]  # the load found nothing to take, and pinned on its own
    # Nobody would take this hint's pins: held, they would keep the facts from eviction and
    # from a demotion for a second, and take one of the bound's places.
    assert pool.stats(A)["pinned"] == 0 and len(ahead) == 0
    assert ahead.hint(A, keys)  # the next request's hint is held as before
    taken = ahead.take(A, keys)
    assert taken is not None and taken.keys == keys
    pool.release(A, taken.keys)
    assert pool.stats(A)["pinned"] == 0


def test_a_load_of_other_facts_leaves_a_hint_being_pinned_alone(tmp_path: Path) -> None:
    pool, keys, acquire, ahead = overtaken(tmp_path, ["x", "y", "z"])
    acquire.meanwhile = lambda: ahead.take(A, keys[1:])  # another request's load
    assert ahead.hint(A, keys[:2])
    assert acquire.seen == [None]
    assert pool.stats(A)["pinned"] == 2 and len(ahead) == 1


def test_a_purge_while_a_hint_pins_leaves_nothing_pinned(tmp_path: Path) -> None:
    pool, keys, acquire, ahead = overtaken(tmp_path, ["x", "y"])
    acquire.meanwhile = lambda: ahead.drop(A)
    assert not ahead.hint(A, keys)
    assert pool.stats(A)["pinned"] == 0 and len(ahead) == 0


def test_a_hint_that_fails_is_not_left_pending_nor_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool, keys = pool_with(tmp_path, A, ["x", "y"])

    def broken(*args: object) -> Any:
        raise RuntimeError("the pool failed")

    ahead = PinnedAhead(broken, pool.release)
    with pytest.raises(RuntimeError):
        ahead.hint(A, keys)
    ahead._acquire = pool.acquire
    with monkeypatch.context() as patch:  # pinned, then planning the facts' tokens failed
        patch.setattr(ahead_module, "token_template", broken)
        with pytest.raises(RuntimeError):
            ahead.hint(A, keys)
    assert pool.stats(A)["pinned"] == 0  # what it pinned is released
    assert ahead.hint(A, keys) and len(ahead) == 1  # and the slot is free again


needs_triton = pytest.mark.skipif(not inject.available(), reason="Triton is not installed")


RUN = "run"  # the preamble from its 2nd token, then both facts whole: one run of the template
SPLIT = "split"  # the second fact from its 2nd token: no run, planned in full
FACTS = "facts"  # both facts whole (the preamble from vLLM's prefix cache): a run at an offset


def _inject(
    tmp_path: Path,
    hinted: str,
    shape: str = SPLIT,
    spies: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
) -> tuple[list[torch.Tensor], TieredKVPool, int]:
    """A load of a preamble (3 tokens) and two facts (4 and 5) through the fused loader
    (Triton's interpreter), ``hinted`` first: nothing (""), the two facts ("facts") or all three
    ("all", as the API's hint names them); the caches after it, the pool and the hints held."""
    pool, keys = pool_with(tmp_path, A, ["pre", "x", "y"])
    rot = RopeRotator(table(256, HEAD), HEAD, HEAD, True)
    half = worker(pool, rot, HEADS, HEAD, True)
    assert half.fused is not None
    hint = {"": [], "facts": keys[1:], "all": keys}[hinted]
    if hint:
        half.prefetch(A, hint)  # as the hint listener's thread does
        assert pool.stats(A)["pinned"] == len(hint)
    blocks = tuple(reversed(range(BLOCKS)))  # a slot is never its position
    pieces: tuple[LoadPiece, ...]
    if shape == RUN:
        pieces = (LoadPiece(keys[0], 1, 2, 1), LoadPiece(keys[1], 0, 4, 3),
                  LoadPiece(keys[2], 0, 5, 7))  # fmt: skip
        load = LoadRequest("r", A, pieces, blocks, BLOCK, 1, 12)
    elif shape == FACTS:
        pieces = (LoadPiece(keys[1], 0, 4, 3), LoadPiece(keys[2], 0, 5, 7))
        load = LoadRequest("r", A, pieces, blocks, BLOCK, 3, 12)
    else:
        pieces = (LoadPiece(keys[0], 0, 3, 0), LoadPiece(keys[1], 0, 4, 3),
                  LoadPiece(keys[2], 1, 4, 7))  # fmt: skip
        load = LoadRequest("r", A, pieces, blocks, BLOCK, 0, 11)
    with pytest.MonkeyPatch.context() as patch:
        if spies is not None:  # (after the worker's warm-up, which launches every mode)
            patch.setattr(plan, "rows_from_template", spies[0])
            patch.setattr(inject, "launch", spies[1])
        half.start_load(InjectionMetadata(loads=[load]))
        half.finish_step()
    return [half._kv[name].clone() for name in half.layers], pool, len(half.fused.ahead)


@needs_triton
@pytest.mark.parametrize(
    ("hinted", "shape", "mode"),
    [
        ("facts", SPLIT, "full"),  # the hint left the preamble for the load to pin: no template
        ("facts", RUN, "full"),
        ("all", SPLIT, "template tried"),  # a template, but the load is no run of it
        ("all", RUN, "run"),  # the kernel's run mode, from the prompt's second position
        ("facts", FACTS, "run"),  # the same at an offset: every delta shifted by 3
    ],
)
def test_a_load_that_takes_a_hint_injects_what_it_would_without_one(
    tmp_path: Path, hinted: str, shape: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    complete, launch = plan.rows_from_template, inject.launch

    def spied_rows(*args: Any) -> Any:
        seen.append("template tried")
        return complete(*args)

    def spied_launch(*args: Any) -> None:
        seen.append("run" if args[-1] is not None else "full")
        launch(*args)

    with_hint, pool, held = _inject(tmp_path / "hinted", hinted, shape, (spied_rows, spied_launch))
    # Only a hint naming every fact of the load gives it a template, and only a run uses it
    # (one launch for every layer: the facts are on the GPU tier).
    assert seen == {"template tried": ["template tried", "full"]}.get(mode, [mode])
    seen.clear()
    without, _, _ = _inject(tmp_path / "plain", "", shape, (spied_rows, spied_launch))
    assert seen == ["full"]
    assert held == 0  # the load took the hint's pins
    assert pool.stats(A)["pinned"] == 0  # and released them (with the preamble's)
    for a, b in zip(with_hint, without, strict=True):
        assert a.abs().sum() > 0 and torch.equal(a, b)


@needs_triton
def test_a_purge_releases_what_hints_hold(tmp_path: Path) -> None:
    pool, keys = pool_with(tmp_path, A, ["x", "y"])
    other = [FactKey.for_fact(B, "x", 1, CFG)]  # the same fact id, another tenant's
    pool.put(B, other[0], fact(9, 3, HEADS, HEAD, at=0))
    rot = RopeRotator(table(64, HEAD), HEAD, HEAD, True)
    half = worker(pool, rot, HEADS, HEAD, True)
    assert half.fused is not None
    half.prefetch(A, keys)
    half.prefetch(B, other)
    assert pool.stats(A)["pinned"] == 2 and pool.stats(B)["pinned"] == 1
    half.purge(A, keys[:1])
    assert pool.stats(A)["pinned"] == 0 and pool.stats(A)["gpu_entries"] == 1
    assert pool.stats(B)["pinned"] == 1  # another tenant's hint is untouched
    half.purge_tenant(B)
    assert pool.stats(B)["pinned"] == 0 and len(half.fused.ahead) == 0
