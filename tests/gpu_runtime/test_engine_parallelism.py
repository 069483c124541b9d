"""Tensor or pipeline parallelism is refused at start-up until the pool is rank-sharded: every
rank would write its own head shard to the fact's one file and another rank would inject it
(docs/architecture.md, "Tensor parallelism"). One engine per GPU, as replicas, is the way out."""

from __future__ import annotations

import pytest

from gpu_runtime.config import RuntimeSettings
from gpu_runtime.engine import connector_options, engine_arguments, refuse_model_parallelism
from gpu_runtime.errors import EngineError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_more_than_one_rank_per_engine_is_refused_with_the_way_out(name: str) -> None:
    settings = RuntimeSettings(engine_args={name: 2})
    with pytest.raises(EngineError, match=f"{name}=2 .*INFERSCALE_RUNTIME_URLS"):
        engine_arguments(settings, connector_options(settings))


def test_one_rank_is_what_the_runtime_runs() -> None:
    refuse_model_parallelism({})
    refuse_model_parallelism({"tensor_parallel_size": 1, "pipeline_parallel_size": 1})
