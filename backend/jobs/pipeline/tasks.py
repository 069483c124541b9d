"""The task contract between the processes that send work (the API, beat, the worker itself) and
the worker that runs it: each task's name, its queue, and beat's schedule. A task takes ids only;
``worker.tasks`` binds each name to a use case of ``backend.jobs``."""

from __future__ import annotations

import enum
from typing import Any


class TaskName(enum.StrEnum):
    PING = "inferscale.ping"
    ENCODE_FACTS = "inferscale.encode_facts"
    INGEST_CONVERSATION = "inferscale.ingest_conversation"
    EXTRACT_MEMORIES = "inferscale.extract_memories"
    RELAY_OUTBOX = "inferscale.relay_outbox"
    REENCODE_STALE = "inferscale.reencode_stale"
    PURGE_SUPERSEDED = "inferscale.purge_superseded"


class Queue(enum.StrEnum):
    DEFAULT = "default"
    GPU = "gpu"  # tasks that need the runtime run on workers next to a GPU


GPU_TASKS = frozenset({TaskName.ENCODE_FACTS, TaskName.EXTRACT_MEMORIES})
RELAY_EVERY_S = 15.0  # beat sends the outbox's relay (and the stalled-job recovery) this often
REENCODE_EVERY_S = 600.0  # and the re-encoding sweep this often
PURGE_SUPERSEDED_EVERY_S = 3600.0  # and the sweep of KV an earlier config wrote this often


def queue_for(task: str) -> Queue:
    return Queue.GPU if task in GPU_TASKS else Queue.DEFAULT


def beat_schedule() -> dict[str, dict[str, Any]]:
    return {
        "reencode-stale": {"task": str(TaskName.REENCODE_STALE), "schedule": REENCODE_EVERY_S},
        "purge-superseded": {
            "task": str(TaskName.PURGE_SUPERSEDED),
            "schedule": PURGE_SUPERSEDED_EVERY_S,
        },
        "relay-outbox": {"task": str(TaskName.RELAY_OUTBOX), "schedule": RELAY_EVERY_S},
    }
