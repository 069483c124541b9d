"""A rank's view of the durable store under tensor parallelism: whole facts on disk, each rank's
heads cut on load, the ranks' slices joined on rank 0 when written, at any TP degree."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.packed import PackedKVStore
from gpu_runtime.store.quant import quantize
from gpu_runtime.store.shards import HeadShard, ShardedDiskStore, ShardMismatchError, cut, join
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit
TENANT = TenantId("t-shards")


def _fact(heads: int = 6, fp8: bool = False, seed: int = 0) -> FactKV:
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(3, 5, heads, 8, generator=g)  # [layers, n_tokens, heads, head_dim]
    v = torch.randn(3, 5, heads, 8, generator=g)
    positions = torch.arange(7, 12)
    if not fp8:
        return FactKV.build(k.to(torch.bfloat16), v.to(torch.bfloat16), positions)
    (qk, ks), (qv, vs) = quantize(k), quantize(v)
    return FactKV.build(qk, qv, positions, ks, vs)


def _key(i: int) -> FactKey:
    return FactKey.for_fact(TENANT, f"f{i}", 1, EncodingConfig("m", 0, 1))


@pytest.mark.parametrize(
    ("size", "heads", "expected"),
    [(1, 6, [[0, 1, 2, 3, 4, 5]]), (3, 6, [[0, 1], [2, 3], [4, 5]]), (3, 3, [[0], [1], [2]]),
     (4, 2, [[0], [0], [1], [1]])],
)  # fmt: skip
def test_heads_split_as_vllm_splits_them(size: int, heads: int, expected: list[list[int]]) -> None:
    shards = [HeadShard(r, size, heads) for r in range(size)]
    assert [list(s.heads) for s in shards] == expected
    distinct = [list(h) for h in dict.fromkeys(tuple(h) for h in expected)]
    assert [list(shards[0].heads_of(r)) for r in shards[0].writers] == distinct


def test_heads_that_do_not_split_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot be split"):
        HeadShard(0, 4, 6)


@pytest.mark.parametrize("fp8", [False, True])
def test_slices_cut_and_joined_are_the_fact_bit_for_bit(fp8: bool) -> None:
    whole = _fact(fp8=fp8)
    shard = HeadShard(0, 3, 6)
    again = join([cut(whole, shard.heads_of(r)) for r in range(3)])
    assert again.checksum == whole.checksum and again.verify()
    assert not torch.equal(cut(whole, range(0, 2)).keys, cut(whole, range(2, 4)).keys)


class _Gloo:
    """The TP group's gather for ranks run as threads here: every rank hands in its bytes, rank
    0 gets them all in rank order (what ``torch.distributed.gather`` does over gloo)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.blobs: dict[int, torch.Tensor] = {}
        self.barrier = threading.Barrier(size)

    def exchange(self, rank: int):  # type: ignore[no-untyped-def]
        def gather(payload: torch.Tensor) -> list[torch.Tensor] | None:
            self.blobs[rank] = payload.clone()
            self.barrier.wait()
            out = [self.blobs[r] for r in range(self.size)] if rank == 0 else None
            self.barrier.wait()
            return out

        return gather


def _write_at_tp(root: Path, size: int, heads: int, facts: list[tuple[FactKey, FactKV]]) -> None:
    group = _Gloo(size)
    stores = [
        ShardedDiskStore(PackedKVStore(root), HeadShard(r, size, heads), group.exchange(r))
        for r in range(size)
    ]
    errors: list[BaseException] = []

    def write(r: int) -> None:
        try:
            stores[r].put_many([(k, cut(kv, stores[r].shard.heads)) for k, kv in facts])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


@pytest.mark.parametrize(("written_at", "read_at"), [(3, 1), (1, 3), (3, 3), (2, 6)])
@pytest.mark.parametrize("fp8", [False, True])
def test_a_fact_written_at_one_tp_degree_loads_at_another(
    tmp_path: Path, written_at: int, read_at: int, fp8: bool
) -> None:
    facts = [(_key(i), _fact(fp8=fp8, seed=i)) for i in range(3)]
    _write_at_tp(tmp_path, written_at, 6, facts)
    disk = PackedKVStore(tmp_path)
    for key, whole in facts:
        assert disk.get(key).checksum == whole.checksum  # type: ignore[union-attr]
        for rank in range(read_at):
            shard = HeadShard(rank, read_at, 6)
            view = ShardedDiskStore(PackedKVStore(tmp_path), shard, lambda b: None)
            got = view.get(key)
            assert got is not None
            assert got.checksum == cut(whole, shard.heads).checksum


def test_only_rank_zero_deletes_and_a_fact_of_other_heads_is_refused(tmp_path: Path) -> None:
    key = _key(0)
    PackedKVStore(tmp_path).put(key, _fact(heads=4))
    other = ShardedDiskStore(PackedKVStore(tmp_path), HeadShard(1, 2, 4), lambda b: None)
    assert other.delete_many(TENANT, [key]) == 1 and other.exists(key)
    with pytest.raises(ShardMismatchError, match="4 KV heads, the model has 6"):
        ShardedDiskStore(PackedKVStore(tmp_path), HeadShard(1, 3, 6), lambda b: None).get(key)
    first = ShardedDiskStore(PackedKVStore(tmp_path), HeadShard(0, 2, 4), lambda b: None)
    first.delete_many(TENANT, [key])
    assert not PackedKVStore(tmp_path).exists(key)
