"""Keys and plain value types shared by every part of the runtime (all frozen, all hashable)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

PREAMBLE_PREFIX = "preamble:"


@dataclass(frozen=True, order=True)
class TenantId:
    """A tenant; a distinct type so that no pool, index or key can be built without one."""

    value: str

    def __post_init__(self) -> None:
        if not self.value:
            raise ValueError("tenant id must be non-empty")


@dataclass(frozen=True)
class EncodingConfig:
    """What a fact's KV was made with; KV made under another config is never served."""

    model: str
    window: int  # w: preceding conversation turns the fact was encoded after
    version: int = 1  # bumped when the encoding procedure changes

    def fingerprint(self) -> str:
        return f"{self.model}|w={self.window}|v={self.version}"


@dataclass(frozen=True, order=True)
class FactKey:
    """One encoded fact of one tenant, at one fact version, under one encoding config."""

    tenant: TenantId
    fact_id: str
    fact_version: int
    model: str
    window: int
    encoding_version: int = 1
    # Keys are hashed many times per request (index, pool, packings): hash once.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        fields = (self.tenant.value, self.fact_id, self.fact_version, self.model, self.window)
        object.__setattr__(self, "_hash", hash((*fields, self.encoding_version)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # Hand-written (the dataclass's builds two tuples and compares TenantIds through their
        # own __eq__): dict lookups by key run per fact of every request.
        if self is other:
            return True
        if other.__class__ is not FactKey:
            return NotImplemented
        assert isinstance(other, FactKey)
        return (
            self._hash == other._hash
            and self.fact_id == other.fact_id
            and self.tenant.value == other.tenant.value
            and self.fact_version == other.fact_version
            and self.model == other.model
            and self.window == other.window
            and self.encoding_version == other.encoding_version
        )

    def __reduce__(self) -> tuple[type[FactKey], tuple[Any, ...]]:
        # Rebuilt through __init__: string hashes differ between processes.
        fields = (self.tenant, self.fact_id, self.fact_version, self.model, self.window)
        return (FactKey, (*fields, self.encoding_version))

    @classmethod
    def for_fact(
        cls, tenant: TenantId, fact_id: str, fact_version: int, config: EncodingConfig
    ) -> FactKey:
        return cls(tenant, fact_id, fact_version, config.model, config.window, config.version)

    @classmethod
    def preamble(
        cls, tenant: TenantId, token_ids: tuple[int, ...], config: EncodingConfig
    ) -> FactKey:
        """The tokens before the first fact (system prompt): encoded at position 0, so exact."""
        digest = hashlib.sha256(repr(token_ids).encode()).hexdigest()[:24]
        return cls(tenant, PREAMBLE_PREFIX + digest, 0, config.model, 0, config.version)

    @property
    def is_preamble(self) -> bool:
        return self.fact_id.startswith(PREAMBLE_PREFIX)

    @property
    def config(self) -> EncodingConfig:
        return EncodingConfig(self.model, self.window, self.encoding_version)

    def to_wire(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant.value,
            "fact_id": self.fact_id,
            "fact_version": self.fact_version,
            "model": self.model,
            "window": self.window,
            "encoding_version": self.encoding_version,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> FactKey:
        return cls(
            TenantId(str(data["tenant"])),
            str(data["fact_id"]),
            int(data["fact_version"]),
            str(data["model"]),
            int(data["window"]),
            int(data["encoding_version"]),
        )


class FactKeys:
    """The runtime's keys, built once and reused: every chat names about a hundred (its
    generate request's spans, its prefetch hint's keys), and building each as a frozen dataclass
    was the largest cost left on the runtime's event loop at 100 users (0.09 of a core in run
    12's profile, docs/benchmarks.md). Looked up by every field, the tenant's included, so a key
    is only ever handed back for its own tenant; forgotten all at once past ``capacity``."""

    def __init__(self, model: str, capacity: int = 1 << 16) -> None:
        self.model = model
        self.capacity = capacity
        self._keys: dict[tuple[str, str, int, int, int], FactKey] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def get(
        self, tenant: TenantId, fact_id: str, fact_version: int, window: int, encoding_version: int
    ) -> FactKey:
        wanted = (tenant.value, fact_id, fact_version, window, encoding_version)
        key = self._keys.get(wanted)
        if key is None:
            if len(self._keys) >= self.capacity:
                self._keys.clear()
            key = FactKey(tenant, fact_id, fact_version, self.model, window, encoding_version)
            self._keys[wanted] = key
        return key

    def spans(self, tenant: TenantId, rows: Iterable[SpanRow]) -> tuple[Span, ...]:
        """``rows`` as spans of ``tenant``'s keys (each row one span, in order): ``get`` for
        each, inlined, as this runs per fact of every kv request in the runtime and the engine
        core."""
        name, known, out = tenant.value, self._keys, []
        for fact_id, fact_version, window, encoding_version, start, n_tokens in rows:
            key = known.get((name, fact_id, fact_version, window, encoding_version))
            if key is None:
                key = self.get(tenant, fact_id, fact_version, window, encoding_version)
            out.append(Span(key, start, n_tokens))
        return tuple(out)


_PROCESS_KEYS: dict[str, FactKeys] = {}


def process_keys(model: str) -> FactKeys:
    """This process's keys for ``model``, shared by whatever decodes keys off a wire in it (the
    engine core's transfer parameters, the worker's prefetch hints). One object per key: sets
    and dicts of keys then compare them by identity, not through ``FactKey.__eq__`` (a hint's
    pinning is found again by the set of its keys, per fact of every load)."""
    keys = _PROCESS_KEYS.get(model)
    return keys if keys is not None else _PROCESS_KEYS.setdefault(model, FactKeys(model))


# A span as the wire carries it (the runtime's protocol from revision 7, and the engine core's
# transfer parameters): fact_id, fact_version, window, encoding_version, start, n_tokens.
SpanRow = tuple[str, int, int, int, int, int]


class Span(NamedTuple):
    """``n_tokens`` tokens of ``key`` placed at prompt positions ``[start, start + n_tokens)``.
    A named tuple: the engine core decodes one per fact of every request (a frozen dataclass's
    ``__init__`` cost a microsecond each)."""

    key: FactKey
    start: int
    n_tokens: int

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    def row(self) -> SpanRow:
        """As the wire carries it (``SpanRow``): the key's tenant and model are the request's."""
        k = self.key
        return (k.fact_id, k.fact_version, k.window, k.encoding_version, self.start, self.n_tokens)


@dataclass(frozen=True)
class MemorySegment:
    """The ordered KV pieces a request wants injected: all of one tenant, one config."""

    tenant: TenantId
    config: EncodingConfig
    spans: tuple[Span, ...] = field(default_factory=tuple)
    # The spans as the request named them (``from_rows``), sent on to the engine core as they
    # are (``wire.segment_params``); ``None`` when built from spans.
    rows: Sequence[SpanRow] | None = field(default=None, init=False, compare=False, repr=False)

    @classmethod
    def from_rows(
        cls, tenant: TenantId, config: EncodingConfig, rows: Sequence[SpanRow], keys: FactKeys
    ) -> MemorySegment:
        """The segment a generate request names, its keys from ``keys`` (the runtime's, for
        ``config``'s model). It keeps ``rows``: the engine core reads the same rows, so the
        runtime need not rebuild them from the keys (per fact of every kv request)."""
        if keys.model != config.model:
            raise ValueError(f"keys for {keys.model!r} in a segment for {config.model!r}")
        segment = cls(tenant, config, keys.spans(tenant, rows))
        object.__setattr__(segment, "rows", rows)
        return segment

    @classmethod
    def trusted(
        cls, tenant: TenantId, config: EncodingConfig, spans: tuple[Span, ...]
    ) -> MemorySegment:
        """Without the checks: for spans already validated in this form (the engine core's
        decoding of what the runtime validated and wrote, once per kv request)."""
        segment = object.__new__(cls)
        for name, value in (("tenant", tenant), ("config", config), ("spans", spans)):
            object.__setattr__(segment, name, value)
        object.__setattr__(segment, "rows", None)
        return segment

    def __post_init__(self) -> None:
        previous_end = 0
        tenant = self.tenant.value  # compared as strings: this runs per fact of every request
        for span in self.spans:
            if span.key.tenant.value != tenant:
                raise ValueError("a memory segment may only hold its own tenant's facts")
            if span.n_tokens <= 0 or span.start < previous_end:
                raise ValueError("segment spans must be non-empty, ordered and disjoint")
            previous_end = span.end

    @property
    def end(self) -> int:
        return self.spans[-1].end if self.spans else 0

    def layout_digest(self) -> str:
        """Where the spans lie, hashed. A prefix-cache block's KV depends on which of its
        positions were injected and which computed, and two requests can carry the same tokens
        with different layouts (kv mode injects every fact; hybrid mode leaves the most relevant
        to be prefilled): their salts differ by this, so they never share blocks."""
        layout = ",".join(f"{s.start}+{s.n_tokens}" for s in self.spans)
        return hashlib.sha256(layout.encode()).hexdigest()[:16]


def cache_salt(tenant: TenantId, purpose: str) -> str:
    """Salt for vLLM's prefix cache; derived here, never accepted from a client.

    ``purpose`` is the encoding fingerprint for injected runs and ``"prompt"`` for plain runs:
    blocks holding injected KV must never be reused by a run that expects prefilled KV, nor
    across tenants.
    """
    return hashlib.sha256(f"inferscale|{tenant.value}|{purpose}".encode()).hexdigest()
