"""EngineLoop's own logic: batching submissions, streaming, and idle housekeeping.

The engine here is a stand-in that emits ``n`` outputs per request, one per step (named as such:
the loop's behaviour, not vLLM's, is under test; the real engine is exercised by the engine
tests and the bench harness tests)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from gpu_runtime.serving import EngineLoop, EngineLoopError

pytestmark = pytest.mark.unit


@dataclass
class _Output:
    request_id: str
    step: int
    finished: bool


class _StandInEngine:
    """Steps every admitted request once per ``step``; a request asks for ``params`` steps."""

    def __init__(self) -> None:
        self.left: dict[str, int] = {}
        self.steps = 0
        self.busy_during_idle: list[int] = []

    def add_request(self, request_id: str, prompt: Any, params: int) -> None:
        if params < 0:
            raise ValueError("bad request")
        self.left[request_id] = params

    def step(self) -> list[_Output]:
        self.steps += 1
        out = []
        for rid in list(self.left):
            self.left[rid] -= 1
            out.append(_Output(rid, self.steps, self.left[rid] == 0))
            if not self.left[rid]:
                del self.left[rid]
        return out


class _LLM:
    def __init__(self) -> None:
        self.llm_engine = _StandInEngine()


def test_idle_work_runs_once_per_drain_never_with_requests_in_flight() -> None:
    llm = _LLM()
    calls: list[int] = []
    done = threading.Event()

    def idle() -> None:
        llm.llm_engine.busy_during_idle.append(len(llm.llm_engine.left))
        calls.append(llm.llm_engine.steps)
        done.set()

    loop = EngineLoop(llm, idle=idle)
    time.sleep(0.05)
    assert calls == []  # nothing ran yet: no idle work before the first request
    outputs = loop.run_all(["a", "b"], [3, 1])
    assert [o.finished for o in outputs] == [True, True]
    assert done.wait(5)
    assert calls == [3]  # once, after the third (last) step
    assert llm.llm_engine.busy_during_idle == [0]
    done.clear()
    assert [o.step for o in loop.stream("c", 2)] == [4, 5]
    assert done.wait(5)
    assert calls == [3, 5]


def test_failing_idle_work_does_not_stop_the_loop() -> None:
    def idle() -> None:
        raise RuntimeError("housekeeping broke")

    loop = EngineLoop(_LLM(), idle=idle)
    assert loop.run_all(["a"], [1])[0].finished
    time.sleep(0.05)
    assert loop.run_all(["b"], [2])[0].finished  # still serving


def test_a_bad_request_fails_alone() -> None:
    loop = EngineLoop(_LLM())
    with pytest.raises(EngineLoopError, match="bad request"):
        list(loop.stream("x", -1))
    assert [o.finished for o in loop.stream("y", 2)] == [False, True]
