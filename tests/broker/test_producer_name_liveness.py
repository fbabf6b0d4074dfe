"""A producer name held by a connection whose peer went silent (a replicator cut off by the
network, before the broker's keep-alive noticed): a new connection asking for the name gets
it once the old one fails the liveness check (a Ping unanswered within
``connectionLivenessCheckTimeoutMillis``), as in Pulsar; a holder that answers keeps it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pulsar

from magnetar.protocol import pb
from tests.broker.conftest import QUIET
from tests.broker.rawclient import RawClient

T = pb.BaseCommand


def _topic() -> str:
    return f"persistent://public/default/named-{uuid.uuid4().hex[:10]}"


def test_a_silent_holder_loses_the_name_a_live_one_keeps_it(make_broker: Callable[..., Any]) -> None:
    broker = make_broker(connectionLivenessCheckTimeoutMillis=1000)
    topic = _topic()
    with RawClient.for_url(broker.url, timeout=30) as silent, \
            RawClient.for_url(broker.url, timeout=30) as newcomer:
        silent.connect()
        assert silent.create_producer(topic, producer_name="pulsar.repl.X").type == T.PRODUCER_SUCCESS
        # from now on ``silent`` reads nothing and answers no Ping
        newcomer.connect()
        answer = newcomer.create_producer(topic, producer_name="pulsar.repl.X")
        assert answer.type == T.PRODUCER_SUCCESS, answer
        assert silent.wait_closed(30)

    held = _topic()
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        client.create_producer(held, producer_name="kept")
        with RawClient.for_url(broker.url, timeout=30) as other:
            other.connect()
            answer = other.create_producer(held, producer_name="kept")
            assert answer.type == T.ERROR, answer
            assert answer.error.error == pb.ProducerBusy, answer
    finally:
        client.close()
