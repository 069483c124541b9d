"""Prefetch hints: compact messages, keys decoded once per model, a real ZMQ push to a listener."""

from __future__ import annotations

import threading

import pytest

from gpu_runtime.connector.hints import HintDecoder, HintListener, HintSender, hint_messages
from gpu_runtime.types import FactKey, TenantId

A, B = TenantId("tenant-a"), TenantId("tenant-b")


def key(tenant: TenantId, fact: str, model: str = "m", window: int = 0) -> FactKey:
    return FactKey(tenant, fact, 3, model, window, 2)


def test_a_hint_decodes_to_the_keys_it_named_each_built_once() -> None:
    keys = [key(A, "f1"), key(A, "f2", window=5)]
    decode = HintDecoder()
    [message] = hint_messages(A, keys)
    tenant, first = decode(message)
    assert tenant == A and first == keys
    _, again = decode(message)
    assert all(a is b for a, b in zip(first, again, strict=True))  # reused, not rebuilt


def test_a_hint_over_two_models_is_two_messages() -> None:
    keys = [key(A, "f1", "m1"), key(A, "f2", "m2"), key(A, "f3", "m1")]
    decode = HintDecoder()
    decoded = [k for message in hint_messages(A, keys) for k in decode(message)[1]]
    assert sorted(decoded, key=lambda k: k.fact_id) == keys


def test_a_key_of_another_tenant_is_never_hinted() -> None:
    with pytest.raises(ValueError, match="tenant-b"):
        hint_messages(A, [key(A, "f1"), key(B, "f2")])


def test_a_decoded_key_is_the_tenant_of_its_message() -> None:
    decode = HintDecoder()
    _, [a] = decode(hint_messages(A, [key(A, "same")])[0])
    _, [b] = decode(hint_messages(B, [key(B, "same")])[0])
    assert a.tenant == A and b.tenant == B and a != b


def test_the_listener_applies_what_the_sender_pushes_and_survives_a_bad_hint() -> None:
    got: list[tuple[TenantId, list[FactKey]]] = []
    arrived = threading.Event()

    def apply(tenant: TenantId, keys: list[FactKey]) -> None:
        got.append((tenant, keys))
        arrived.set()

    listener = HintListener(apply)
    sender = HintSender([listener.address])
    try:
        for socket in sender._sockets:  # not JSON: logged and dropped, the thread goes on
            socket.send(b"{not json")
        keys = [key(A, "f1"), key(A, "f2")]
        assert sender.send(A, keys) == 1
        assert arrived.wait(timeout=10)
        assert got == [(A, keys)]
    finally:
        sender.close()
        listener.close()
