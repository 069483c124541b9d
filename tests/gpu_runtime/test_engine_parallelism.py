"""Tensor parallelism is served (each rank pools its heads' slices, ``store/shards.py``); pipeline
parallelism is refused at start-up with the way out, since a rank would hold only some layers."""

from __future__ import annotations

import pytest

from gpu_runtime.config import RuntimeSettings
from gpu_runtime.engine import (
    connector_options,
    cpu_rank_binding,
    engine_arguments,
    refuse_pipeline_parallelism,
)
from gpu_runtime.errors import EngineError

pytestmark = pytest.mark.unit


def test_pipeline_parallelism_is_refused_with_the_way_out() -> None:
    settings = RuntimeSettings(engine_args={"pipeline_parallel_size": 2})
    with pytest.raises(EngineError, match=r"pipeline_parallel_size=2 .*TENSOR_PARALLEL_SIZE"):
        engine_arguments(settings, connector_options(settings))


def test_tensor_parallelism_reaches_the_engine() -> None:
    refuse_pipeline_parallelism({"tensor_parallel_size": 3, "pipeline_parallel_size": 1})
    settings = RuntimeSettings(tensor_parallel_size=3)
    assert engine_arguments(settings, connector_options(settings))["tensor_parallel_size"] == 3


def test_cpu_ranks_are_bound_round_robin_over_the_allowed_cores() -> None:
    assert cpu_rank_binding(3, [0, 1]) == "0|1|0"
    assert cpu_rank_binding(2, [4, 5, 6]) == "4|5"
