"""Capacity and cost model of the tiered KV pool (docs/capacity.md); torch-free but ``check``."""
