"""InferScaleConnector: vLLM V1 KV connector that injects stored fact KV into the paged cache.

``metadata`` (plain dataclasses) is all the two halves exchange; ``scheduler`` and ``worker`` hold
the logic; ``vllm_connector`` is the only module that imports vLLM internals.
"""
