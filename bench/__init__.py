"""Benchmarks, outside the product packages: ``runtime`` (through the runtime's HTTP API, and vLLM's
own server as a peer), ``serve`` (what a tenant's app sees, through the API), ``capacity`` (the
tiered pool's capacity model and its check). ``python -m bench`` or ``inferscale bench``."""
