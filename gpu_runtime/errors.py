"""Errors raised by the GPU runtime; callers map them (the backend maps them to HTTP)."""


class RuntimeErrorBase(Exception):
    """Base class of every error the GPU runtime raises on purpose."""


class ModelAssetError(RuntimeErrorBase):
    """The model weights could not be found or prepared."""


class UnsupportedLayoutError(RuntimeErrorBase):
    """vLLM's KV cache uses a backend or layout this runtime has not been verified against."""


class EngineError(RuntimeErrorBase):
    """The engine could not start or answer."""
