"""Enum arguments accept members, the official client's values and names as strings; a wrong
value raises a ValueError that names the argument and what it accepts (issue 7)."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client import CompressionType, ConsumerType, InitialPosition
from magnetar.client.enums import enum_argument
from magnetar.sync import Client
from tests.client.conftest import BrokerProcess


def test_names_official_values_and_members_are_accepted() -> None:
    assert enum_argument(CompressionType, "zstd", "compression_type") is CompressionType.ZSTD
    assert enum_argument(CompressionType, " LZ4 ", "compression_type") is CompressionType.LZ4
    assert enum_argument(CompressionType, pulsar.CompressionType.ZLib, "c") is CompressionType.ZLib
    assert enum_argument(ConsumerType, pulsar.ConsumerType.KeyShared, "c") is ConsumerType.KeyShared
    assert enum_argument(InitialPosition, InitialPosition.Earliest, "p") is InitialPosition.Earliest


@pytest.mark.parametrize("value", ["brotli", 9, 2.5, None, True])
def test_wrong_values_name_the_argument(value: object) -> None:
    with pytest.raises(ValueError, match=r"compression_type must be one of CompressionType\.NONE.*'ZSTD'"):
        enum_argument(CompressionType, value, "compression_type")


def test_string_arguments_through_the_client(
    broker: BrokerProcess, topic: str, official: pulsar.Client
) -> None:
    consumer = official.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    with Client(broker.url) as client:
        producer = client.create_producer(topic, compression_type="zstd", batching_enabled=True)
        producer.send(b"squeezed")
        with pytest.raises(ValueError, match="compression_type must be one of"):
            client.create_producer(topic, compression_type="brotli")
        with pytest.raises(ValueError, match="consumer_type must be one of"):
            client.subscribe(topic, "x", consumer_type="round-robin")
        mine = client.subscribe(topic, "mine", consumer_type="shared", initial_position="earliest")
        assert mine.receive(5000).data() == b"squeezed"
    assert consumer.receive(5000).data() == b"squeezed"


def test_a_request_that_cannot_be_encoded_fails_alone(
    broker: BrokerProcess, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A value out of the wire's range fails the call with a ValueError and leaves no
    pending request behind (nothing to fail later as "Future exception was never
    retrieved" when the connection closes); the consumer keeps working."""
    import gc

    with Client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        with pytest.raises(ValueError, match="out of range"):
            consumer.seek(2**70)  # a publish time beyond uint64
        producer = client.create_producer(topic)
        producer.send(b"still fine")
        assert consumer.receive(5000).data() == b"still fine"
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
