"""The official client's TableView (``client.create_table_view``) over a topic written in
transactions: an open transaction's keyed messages are not in the view, a committed one's
are (its later value of a key replacing the earlier), an aborted one's never are."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pulsar

from magnetar import sync
from tests.transactions.conftest import TxnBroker

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # a bounded poll of the view's state


def test_table_view_shows_committed_transactions_only(txn_broker: TxnBroker) -> None:
    topic = f"persistent://public/default/txn-view-{uuid.uuid4().hex[:8]}"
    official = pulsar.Client(txn_broker.url, operation_timeout_seconds=30, logger=QUIET)
    with sync.Client(txn_broker.url, enable_transaction=True) as client:
        producer = client.create_producer(topic)
        producer.send(b"a0", partition_key="a")
        committed = client.new_transaction(timeout_ms=120_000)
        producer.send(b"b-txn", partition_key="b", txn=committed)
        producer.send(b"a-txn", partition_key="a", txn=committed)
        aborted = client.new_transaction(timeout_ms=120_000)
        producer.send(b"c-aborted", partition_key="c", txn=aborted)
        producer.send(b"a-aborted", partition_key="a", txn=aborted)
        try:
            view = official.create_table_view(topic)
            # both open: only the message before them is in the view
            assert view.get("a") == b"a0"
            assert view.get("b") is None and view.get("c") is None
            committed.commit()
            # (the view takes the two messages one at a time: wait for both)
            wait_until(lambda: (view.get("b"), view.get("a")) == (b"b-txn", b"a-txn"), 30,
                       "the committed messages")
            assert view.get("c") is None  # the other transaction is still open
            aborted.abort()
            producer.send(b"d-after", partition_key="d")
            wait_until(lambda: view.get("d") == b"d-after", 30, "the message after the abort")
            # the aborted transaction's messages, before d-after, were skipped
            assert view.get("c") is None
            assert view.get("a") == b"a-txn"
            # a view made now reads the same from the start
            fresh = official.create_table_view(topic)
            assert {k: fresh.get(k) for k in "abcd"} == {
                "a": b"a-txn", "b": b"b-txn", "c": None, "d": b"d-after"}
            fresh.close()
            view.close()
        finally:
            official.close()
