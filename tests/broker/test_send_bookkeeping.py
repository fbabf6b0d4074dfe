"""A send whose bookkeeping fails after its entry is stored is still answered, and its
pending-send slot and publish-buffer bytes are given back (issue 7: a failure inside the
persistence callback leaked both, until every producer of the connection was paused)."""

from __future__ import annotations

from collections.abc import Callable

import pulsar

from .conftest import QUIET, ThreadedBroker


def test_failing_dedup_snapshot_neither_loses_the_receipt_nor_leaks_the_slot(
    make_broker: Callable[..., ThreadedBroker],
) -> None:
    broker = make_broker(
        brokerDeduplicationEnabled=True, brokerDeduplicationEntriesInterval=1,
        maxPendingPublishRequestsPerConnection=2,
    )
    service = broker.service
    assert service is not None

    def failing_snapshot(topic: object) -> None:
        raise OSError("metadata store unavailable (injected)")

    broker.call(setattr, service.dedup_snapshots, "save", failing_snapshot)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=QUIET)
    try:
        topic = "persistent://public/default/snapshot-fails"
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=5000)
        ids = [producer.send(b"%d" % i) for i in range(10)]  # more than the 2 pending allowed
        assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == 10
        assert broker.call(lambda: service.publish_buffer.bytes) == 0
        assert broker.call(lambda: sum(c.pending_sends for c in service.connections)) == 0
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(5000).data() for _ in range(10)] == [b"%d" % i for i in range(10)]
    finally:
        client.close()
        broker.call(delattr, service.dedup_snapshots, "save")  # let the broker stop cleanly
