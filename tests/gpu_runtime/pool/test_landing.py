"""Landings: a reader of many promoted facts waits on one event, the latest recorded of theirs,
and forgets them once it has landed. The events are a stand-in for CUDA events on one stream
(no GPU here): they complete in the order recorded, which ``Stream`` enforces."""

from __future__ import annotations

import pytest

from gpu_runtime.pool.landing import Landings
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

T = TenantId("t")
KEYS = [FactKey.for_fact(T, f"f{i}", 1, EncodingConfig("m", 0, 1)) for i in range(5)]


class Stream:
    """A stand-in for one CUDA stream: its events complete in record order, up to ``done``."""

    def __init__(self) -> None:
        self.recorded = 0
        self.done = 0
        self.queries = 0

    def event(self) -> StreamEvent:
        self.recorded += 1
        return StreamEvent(self, self.recorded)


class StreamEvent:
    def __init__(self, stream: Stream, order: int) -> None:
        self.stream, self.order = stream, order

    def query(self) -> bool:
        self.stream.queries += 1
        return self.order <= self.stream.done


def test_a_reader_waits_on_the_latest_of_its_facts_copies_only() -> None:
    stream, landings = Stream(), Landings[StreamEvent]()
    events = {}
    for key in KEYS:
        events[key] = stream.event()
        landings.record(key, events[key])
    assert landings.wait_for(KEYS[:3]) is events[KEYS[2]]  # not the three of them
    assert landings.wait_for(reversed(KEYS[:2])) is events[KEYS[1]]  # order of record, not asking
    assert stream.queries == 2 and len(landings) == 5  # one query a reader

    stream.done = 3  # the first three copies landed
    assert landings.wait_for(KEYS[:3]) is None  # nothing to wait for: forgotten
    assert len(landings) == 2
    assert landings.wait_for(KEYS[:3]) is None and stream.queries == 3  # no query: none left
    assert landings.wait_for(KEYS) is events[KEYS[4]]


def test_a_fact_promoted_again_waits_on_its_new_copy() -> None:
    stream, landings = Stream(), Landings[StreamEvent]()
    landings.record(KEYS[0], stream.event())
    landings.record(KEYS[1], stream.event())
    again = stream.event()
    landings.record(KEYS[0], again)  # demoted and promoted again before its first copy was seen
    stream.done = 2
    assert landings.wait_for([KEYS[0]]) is again
    landings.sweep()  # the second record of KEYS[0] is last in order: KEYS[1] is forgotten only
    assert len(landings) == 1 and landings.pop(KEYS[0]) is again and not landings


def test_sweep_forgets_the_landed_oldest_first_and_stops_at_the_first_in_flight() -> None:
    stream, landings = Stream(), Landings[StreamEvent]()
    for key in KEYS:
        landings.record(key, stream.event())
    stream.done = 2
    landings.sweep()
    assert len(landings) == 3 and stream.queries == 3  # two landed, the third stopped it
    assert landings.pop(KEYS[0]) is None and landings.pop(KEYS[2]) is not None
