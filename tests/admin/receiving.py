"""Receiving an exact number of messages with the official client, without flaking on a
slow machine: each message is waited for (bounded), and only the "no more" check uses a
short wait, which a slow broker can only make weaker, never fail."""

from __future__ import annotations

import contextlib
import time

import pulsar


def take(consumers: list[pulsar.Consumer], n: int, timeout_s: float = 30.0,
         quiet_ms: int = 1000) -> list[list[pulsar.Message]]:
    """Exactly ``n`` messages from ``consumers`` together (per consumer, in order), then
    none more within ``quiet_ms``."""
    got: list[list[pulsar.Message]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while sum(len(g) for g in got) < n:
        assert time.monotonic() < deadline, f"{sum(len(g) for g in got)} of {n} messages came"
        for i, consumer in enumerate(consumers):
            with contextlib.suppress(pulsar.Timeout):
                got[i].append(consumer.receive(timeout_millis=100))
    for consumer in consumers:
        try:
            extra = consumer.receive(timeout_millis=quiet_ms)
        except pulsar.Timeout:
            continue
        raise AssertionError(f"more than {n} messages came (then {extra.data()!r})")
    return got
