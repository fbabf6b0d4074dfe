"""Which peers get ReachedEndOfTopic."""

from magnetar.protocol.peers import understands_reached_end_of_topic


def test_official_python_client_3_13_does_not_understand_end_of_topic() -> None:
    assert not understands_reached_end_of_topic("Pulsar-CPP-v4.2.0", 20)
    assert not understands_reached_end_of_topic("Pulsar-CPP-v3.5.1", 20)


def test_java_and_other_clients_do() -> None:
    assert understands_reached_end_of_topic("Pulsar-Java-v4.0.1", 21)
    assert understands_reached_end_of_topic("magnetar-0.1.0", 21)
    assert understands_reached_end_of_topic("Pulsar-CPP-v4.3.0", 21)


def test_protocol_versions_before_9_do_not() -> None:
    assert not understands_reached_end_of_topic("Pulsar-Java-v1.20", 8)
