"""Errors raised by the GPU runtime; its server maps them to HTTP in one place."""


class RuntimeErrorBase(Exception):
    """Base class of every error the GPU runtime raises on purpose."""


class TenantMismatchError(RuntimeErrorBase, ValueError):
    """A key of one tenant was used under another tenant's name."""


class ModelAssetError(RuntimeErrorBase):
    """The model weights could not be found or prepared."""


class UnsupportedLayoutError(RuntimeErrorBase):
    """vLLM's KV cache uses a backend or layout this runtime has not been verified against."""


class EngineError(RuntimeErrorBase):
    """The engine could not start or answer."""


class InvalidRequestError(RuntimeErrorBase):
    """A request the runtime cannot serve as stated (the message says why)."""


class PromptTooLongError(InvalidRequestError):
    """The prompt and the tokens asked for do not fit the model's context."""


class EncodingError(RuntimeErrorBase):
    """The engine ran but a fact's KV did not reach the store."""


class LoadPlanError(RuntimeErrorBase, ValueError):
    """A step's loads cannot be planned for this model (facts of another shape, or a position
    change beyond the RoPE table)."""


class ShortFactError(LoadPlanError):
    """A load reads past its stored fact's end (the PyTorch path then has vLLM recompute)."""
