"""How background work is named (``tasks``), sent (``broker``, ``outbox``) and tracked
(``progress``); below the services, which schedule work through it."""
