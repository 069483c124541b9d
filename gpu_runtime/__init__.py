"""InferScale GPU runtime: vLLM engine, the KV-injection connector and per-tenant KV pools.

Importing this package must stay cheap and must never pull in Postgres, Celery or FastAPI:
the runtime runs in its own process next to the GPU. vLLM itself is imported lazily.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
