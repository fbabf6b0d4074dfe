"""GetTopicsOfNamespace with a client-supplied pattern runs in linear time (RE2), so a
pattern that makes a backtracking engine explode cannot stall the broker (issue 7)."""

from __future__ import annotations

import time

import pulsar

from magnetar.protocol import pb

from . import rawconsumer as rc
from .conftest import ThreadedBroker

T = pb.BaseCommand
Mode = pb.CommandGetTopicsOfNamespace


def topics_of_namespace(raw: rc.RawClient, pattern: str) -> pb.CommandGetTopicsOfNamespaceResponse:
    request_id = raw.next_request_id()
    raw.send("GET_TOPICS_OF_NAMESPACE", namespace="public/default", request_id=request_id,
             mode=Mode.PERSISTENT, topics_pattern=pattern)
    reply = rc.reply_to(raw, request_id, timeout=10)
    assert reply.type == T.GET_TOPICS_OF_NAMESPACE_RESPONSE, reply
    return reply.getTopicsOfNamespaceResponse


def test_catastrophic_pattern_is_answered_at_once(broker: ThreadedBroker, client: pulsar.Client) -> None:
    long_name = "persistent://public/default/" + "a" * 40
    client.create_producer(long_name).close()
    client.create_producer("persistent://public/default/aab").close()
    raw = rc.connected(broker.url)
    try:
        started = time.monotonic()
        # with a backtracking engine this pattern costs ~2**40 steps on the long name
        response = topics_of_namespace(raw, "persistent://public/default/(a+)+b")
        assert time.monotonic() - started < 10
        assert response.filtered
        assert list(response.topics) == ["persistent://public/default/aab"]
        assert raw.is_alive()
    finally:
        raw.close()


def test_pattern_re2_cannot_run_leaves_filtering_to_the_client(
    broker: ThreadedBroker, client: pulsar.Client
) -> None:
    client.create_producer("persistent://public/default/backref-x").close()
    raw = rc.connected(broker.url)
    try:
        response = topics_of_namespace(raw, r"persistent://public/default/(b)\1")
        assert not response.filtered
        assert "persistent://public/default/backref-x" in response.topics
    finally:
        raw.close()
