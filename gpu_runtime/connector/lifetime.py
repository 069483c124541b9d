"""The engine core must not outlive the runtime that started it: a killed runtime would otherwise
leave it holding the model and the KV cache. The scheduler half starts this watch."""

from __future__ import annotations

import logging
import os
import threading
import time

logger = logging.getLogger(__name__)


def exit_with_parent(parent: int) -> None:
    """Exits this process (the engine core) once it is re-parented: ``parent`` died."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        logger.warning("runtime process %d is gone; the engine core exits", parent)
        os._exit(1)

    threading.Thread(target=watch, name="inferscale-parent-watch", daemon=True).start()
