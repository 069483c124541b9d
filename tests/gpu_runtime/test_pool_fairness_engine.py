"""One tenant's traffic cannot push another tenant's resident KV out of the GPU tier: a runtime
with a small GPU pool (a few facts' worth), tenant A's facts resident, then tenant B encodes and
is served many more facts than the tier holds. A keeps every fact on the GPU tier (it holds less
than its fair share), B's growth displaces only B, and B never holds more than its quota."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import FactText
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import FactKey, TenantId
from tests.support import SERVICE_TOKEN, EngineHarness

pytestmark = pytest.mark.engine

SLAB = 1 << 16  # 64 KiB: a SmolLM2 fact of ~20 tokens takes 9 (bf16) to 18 (float32)
GPU_SLABS = 400
QUOTA_SLABS = 160


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHarness]:
    from gpu_runtime.client.http import RuntimeClient

    kv = tmp_path_factory.mktemp("fair-kv")
    env = {
        "INFERSCALE_KV_STORE_DIR": str(kv),
        "INFERSCALE_POOL_SLAB_BYTES": str(SLAB),
        "INFERSCALE_GPU_POOL_BYTES": str(GPU_SLABS * SLAB),
        "INFERSCALE_TENANT_GPU_QUOTA_BYTES": str(QUOTA_SLABS * SLAB),
    }
    server = RuntimeProcess(env, log=Path(kv).parent / "fair-runtime.log")
    server.start(timeout_s=900)
    try:
        yield EngineHarness(RuntimeClient(server.url, SERVICE_TOKEN), str(kv))
    finally:
        server.stop()


def _facts(tenant: TenantId, harness: EngineHarness, n: int) -> list[FactText]:
    config = harness.config(window=0)
    return [
        FactText(FactKey.for_fact(tenant, f"f{i}", 1, config),
                 f"Fact {i} of {tenant.value}: the user keeps item number {i} in drawer {i % 7}.")
        for i in range(n)
    ]  # fmt: skip


def _tiers(harness: EngineHarness, tenant: TenantId, facts: list[FactText]) -> list[str | None]:
    keys = [p.key_model(f.key) for f in facts]
    return harness.client.placement(p.KeysRequest(tenant=tenant.value, keys=keys))


def _gpu_bytes(harness: EngineHarness, tenant: TenantId) -> int:
    """The GPU tier's slabs the tenant holds, in bytes (what quotas and shares count)."""
    return int(harness.stats(tenant)["gpu_slab_bytes"])


def test_another_tenants_traffic_cannot_evict_a_tenant_below_its_share(
    small_pool: EngineHarness,
) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b = TenantId(f"a-{tag}"), TenantId(f"b-{tag}")
    config = small_pool.config(window=0)
    mine = _facts(a, small_pool, 3)
    small_pool.encode_facts(a, config, [(f.key, f.text) for f in mine])
    assert _tiers(small_pool, a, mine) == ["gpu"] * len(mine)
    held = _gpu_bytes(small_pool, a)
    assert 0 < held <= QUOTA_SLABS * SLAB

    theirs = _facts(b, small_pool, 40)  # far more than the GPU tier holds
    for start in range(0, len(theirs), 8):
        batch = theirs[start : start + 8]
        small_pool.encode_facts(b, config, [(f.key, f.text) for f in batch])
        served = small_pool.generate(
            b, small_pool.compose(b, config, batch, "Where is item 3?"), "kv", max_tokens=2
        )
        assert served.injected_tokens > 0  # B's requests load B's facts onto the GPU tier

    assert _tiers(small_pool, a, mine) == ["gpu"] * len(mine)  # A was not pushed out
    assert _gpu_bytes(small_pool, a) == held
    b_tiers = _tiers(small_pool, b, theirs)
    assert "gpu" in b_tiers and {"host", "disk"} & set(b_tiers)  # B displaced B
    assert _gpu_bytes(small_pool, b) <= QUOTA_SLABS * SLAB  # and stayed within its quota
