"""Benchmarks of what a tenant's app sees: requests through the API (``inferscale bench serve``)."""
