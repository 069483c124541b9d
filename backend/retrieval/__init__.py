"""Retrieval for the memory platform: MiniLM embeddings and per-(tenant, end-user) FAISS indexes.

Each end-user's facts live in their own index so that a search can never return another tenant's
or another user's facts, whatever the scores say; the embedder and the index are kept apart so the
index can be tested without loading a model.
"""
