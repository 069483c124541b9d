"""Benchmarks through the runtime service's HTTP API (``inferscale bench``), and of its parts
alone: the durable store (``bench store``), the residency index (``bench index``)."""
