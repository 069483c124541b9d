"""A purge must reach every runtime replica that may hold the tenant's facts, or the delete is
refused (503, nothing deleted): only an address where nothing runs counts as holding nothing.
Stand-in runtimes (tests/runtime_standin.py) play the replicas' failures; the real purge on two
runtimes is tests/system/test_replicas.py. Also: the settings that list the replicas."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from backend.core.config import Settings
from backend.errors import BadRequestError, UnavailableError
from backend.runtime.client import EngineClient
from gpu_runtime.client import protocol as p
from gpu_runtime.client.launch import free_port
from gpu_runtime.types import FactKey, TenantId
from tests.runtime_standin import StandInRuntime

pytestmark = pytest.mark.unit

TENANT = TenantId(str(uuid.uuid4()))
KEY = FactKey(TENANT, str(uuid.uuid4()), 1, "m", 5, 1)


@pytest.fixture
def pair() -> Iterator[tuple[StandInRuntime, StandInRuntime]]:
    a, b = StandInRuntime().start(), StandInRuntime().start()
    yield a, b
    a.stop()
    b.stop()


def _engine(*urls: str) -> EngineClient:
    return EngineClient(Settings(runtime_urls=",".join(urls), runtime_timeout_s=1.0))


def _purges(standin: StandInRuntime) -> list[p.PurgeRequest]:
    """The purges as a runtime reads them (the client leaves fields at their default out)."""
    bodies = [b for b in standin.bodies if b["path"] == "/v1/purge"]
    return [p.PurgeRequest.model_validate({k: v for k, v in b.items() if k != "path"})
            for b in bodies]  # fmt: skip


def test_a_purge_reaches_every_replica(pair: tuple[StandInRuntime, StandInRuntime]) -> None:
    a, b = pair
    engine = _engine(a.url, b.url)
    engine.purge(TENANT, [KEY])
    engine.purge_tenant(TENANT)
    for standin in pair:
        sent = _purges(standin)
        assert [s.tenant for s in sent] == [TENANT.value, TENANT.value]
        assert [s.all for s in sent] == [False, True]


def test_a_replica_where_nothing_runs_holds_nothing(
    pair: tuple[StandInRuntime, StandInRuntime],
) -> None:
    a, _ = pair
    nothing = f"http://127.0.0.1:{free_port()}"
    engine = _engine(a.url, nothing)
    engine.purge(TENANT, [KEY])
    assert len(_purges(a)) == 1
    assert [v["status"] for v in engine.replicas.views()] == ["ok", "down"]


@pytest.mark.parametrize("mode", ["hang", "starting", "error"])
def test_a_running_replica_that_does_not_confirm_refuses_the_delete(
    pair: tuple[StandInRuntime, StandInRuntime], mode: str
) -> None:
    a, b = pair
    b.mode, b.hang_s = mode, 3.0  # the client gives up after 1 s
    with pytest.raises(UnavailableError) as refused:
        _engine(a.url, b.url).purge(TENANT, [KEY])
    assert b.url in refused.value.message and "nothing was deleted" in refused.value.message
    assert len(_purges(a)) == 1  # a purged: live facts fall back to prefill until re-encoded


def test_no_replica_running_refuses_the_delete() -> None:
    engine = _engine(*(f"http://127.0.0.1:{free_port()}" for _ in range(2)))
    with pytest.raises(UnavailableError, match="no runtime replica is running"):
        engine.purge_tenant(TENANT)


def test_a_purge_a_replica_rejects_is_a_bad_request(
    pair: tuple[StandInRuntime, StandInRuntime],
) -> None:
    a, b = pair
    b.mode = "reject"
    with pytest.raises(BadRequestError):
        _engine(a.url, b.url).purge(TENANT, [KEY])


def test_settings_list_the_replicas_or_fall_back_to_the_one_runtime_url() -> None:
    one = Settings(runtime_url="http://r:8100/", runtime_urls="")
    assert one.runtime_replica_urls == ("http://r:8100",)
    two = Settings(runtime_urls=" http://a:8100/ , http://b:8100,")
    assert two.runtime_replica_urls == ("http://a:8100", "http://b:8100")
    with pytest.raises(ValueError, match="twice"):
        Settings(runtime_urls="http://a:8100,http://a:8100/")
    with pytest.raises(ValueError, match="http"):
        Settings(runtime_urls="a:8100")
