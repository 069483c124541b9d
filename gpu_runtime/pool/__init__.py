"""Per-tenant KV pools: GPU -> pinned host DRAM -> disk.

The scheduler-side residency index (``gpu_runtime.pool.index``: its records in ``entries``, its
LRU order in ``lru``) and its slab allocator (``gpu_runtime.pool.slabs``) are pure Python with
no torch import, so the scheduler can decide where every fact's KV lives without touching
tensors; the worker applies the moves they report.
"""
