"""The durable store's on-disk format, torch-free: per tenant, append-only segment files of
checksummed, self-describing extents and an index log (records, the followed index, segments,
recovery, compaction), and the read-only view every process keeps of it (``StoredFacts``).
Tensors never appear here: ``gpu_runtime.store.packed`` turns a fact's KV into an extent."""
