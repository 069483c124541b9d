"""The runtime's NDJSON generate stream read back into events, a burst at a time.

Why bursts: the API writes one SSE chunk per event it gets, and at a hundred open streams on a
GPU host that per-token write was the API's largest CPU cost (docs/benchmarks.md, "The API's CPU
per chat"). When the API falls behind, several of a stream's lines are already in the socket's
buffer; ``EventReader.feed`` hands back all of them at once, with consecutive deltas merged into
one event (tokens, text and logprobs in order). A client that keeps up still gets every token as
soon as it arrives: nothing waits for a burst to form.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from gpu_runtime.client import protocol as p
from gpu_runtime.client.errors import RuntimeStreamError


def parse_event(line: str) -> p.GenerateEvent | None:
    """One NDJSON line; ``None`` for a blank one. An ``error`` line is raised."""
    if not line.strip():
        return None
    body = json.loads(line)
    if body.get("event") == "delta":  # one per token: the runtime is trusted, skip validation
        logprobs = body.get("logprobs")
        return p.GenerateEvent.model_construct(
            event="delta",
            token_ids=body["token_ids"],
            text=body.get("text", ""),
            logprobs=[[tuple(pair) for pair in step] for step in logprobs] if logprobs else None,
        )
    event = p.GenerateEvent.model_validate(body)
    if event.event == "error":
        raise RuntimeStreamError(event.message or "the generation failed", event.code or "error")
    return event


def merge_deltas(deltas: list[p.GenerateEvent]) -> p.GenerateEvent:
    """Consecutive deltas as one: their tokens, text and per-token logprobs, in order."""
    if len(deltas) == 1:
        return deltas[0]
    with_logprobs = any(d.logprobs for d in deltas)
    return p.GenerateEvent.model_construct(
        event="delta",
        token_ids=[t for d in deltas for t in d.token_ids],
        text="".join(d.text for d in deltas),
        logprobs=[s for d in deltas for s in (d.logprobs or [])] if with_logprobs else None,
    )


class EventReader:
    """NDJSON to events; a stream must end with ``done`` (an ``error`` line is raised)."""

    def __init__(self) -> None:
        self.done = False
        self._partial = b""  # a line cut by the transport, kept until its newline arrives

    def read(self, line: str) -> p.GenerateEvent | None:
        event = parse_event(line)
        if event is not None:
            self.done = event.event != "delta"
        return event

    def feed(self, data: bytes) -> list[p.GenerateEvent]:
        """The events of every whole line in ``data`` (and in what earlier calls left over),
        consecutive deltas merged into one."""
        *lines, self._partial = (self._partial + data).split(b"\n")
        events: list[p.GenerateEvent] = []
        deltas: list[p.GenerateEvent] = []
        for line in lines:
            event = self.read(line.decode())
            if event is None:
                continue
            if event.event == "delta":
                deltas.append(event)
                continue
            if deltas:
                events.append(merge_deltas(deltas))
                deltas = []
            events.append(event)
        if deltas:
            events.append(merge_deltas(deltas))
        return events

    def finish(self) -> list[p.GenerateEvent]:
        """The stream ended: the events of a last line without its newline, if any."""
        events = self.feed(b"\n") if self._partial.strip() else []
        if not self.done:
            raise RuntimeStreamError("the runtime's stream ended early", "unreachable")
        return events


def read_events(lines: Iterator[str]) -> Iterator[p.GenerateEvent]:
    """Line by line (the sync client: worker jobs, which need no bursts)."""
    reader = EventReader()
    for line in lines:
        if (event := reader.read(line)) is not None:
            yield event
    yield from reader.finish()
