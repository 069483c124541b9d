"""Benchmarks of the runtime: TTFT vs k and throughput vs users, kv vs prompt injection."""
