"""The job pipeline and the work it runs, in one home.

* ``pipeline/``: how work is named, recorded and sent, with no business logic: the task contract
  (``tasks``: names, queues, beat's schedule), the send-only Celery app (``broker``), the outbox
  that sends a job's task once its transaction commits (``outbox``), and job progress with its
  heartbeat (``progress``). The services schedule work through it.
* The use cases the worker runs, as plain functions taking ids: ``encoding`` (encode and
  re-encode facts), ``extraction`` (Mem0's ``infer=true`` add), ``ingestion`` (a conversation's
  facts). They call the services; ``worker.tasks`` binds each task name to one of them.
"""
