"""The participant side of transactions seen from the admin API: transaction buffer and
pending-ack stats (Pulsar's /admin/v3/transactions paths), the participant metrics, and
compaction never keeping a message of an open or aborted transaction."""

from __future__ import annotations

import uuid

import pulsar

from magnetar.protocol import pb
from magnetar.testing import StandaloneBroker
from tests.admin.conftest import Api, wait_until
from tests.broker import txnraw
from tests.broker.rawconsumer import connected, flow, message, subscribe

V3 = "/admin/v3/transactions"


def test_buffer_and_pending_ack_stats_and_metrics(broker: StandaloneBroker, api: Api) -> None:
    short = f"txn-admin-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{short}"
    raw = connected(broker.service_url)
    try:
        txn, acking = txnraw.begin(raw, topic), txnraw.begin(raw, topic, "s")
        t_most, t_least = txn
        a_most, a_least = acking
        txnraw.producer(raw, topic)
        assert subscribe(raw, topic, "s", 3, pb.CommandSubscribe.Shared, earliest=True).type \
            == pb.BaseCommand.SUCCESS
        first = txnraw.send_ok(raw, 1, 0, b"m0").message_id
        opened = txnraw.send_ok(raw, 1, 1, b"t0", txn).message_id
        stats = api.ok("GET", f"{V3}/transactionBufferStats/public/default/{short}")
        assert stats["ongoingTxnSize"] == 1
        assert stats["maxReadPosition"] == f"{first.ledgerId}:{first.entryId}"
        one = api.ok("GET", f"{V3}/transactionInBufferStats/public/default/{short}/{t_most}/{t_least}")
        assert one == {"startPosition": f"{opened.ledgerId}:{opened.entryId}", "aborted": False}
        flow(raw, 3, 10)
        assert message(raw, 3, timeout=15) is not None
        assert not txnraw.ack(raw, 3, [(first.ledgerId, first.entryId)], acking).HasField("error")
        acks = api.ok("GET", f"{V3}/pendingAckStats/public/default/{short}/s")
        assert acks["ongoingTxnSize"] == 1 and acks["state"] == "Ready"
        held = api.ok("GET", f"{V3}/transactionInPendingAckStats/public/default/{short}/s/{a_most}/{a_least}")
        assert held["individualAckPositions"] == [f"{first.ledgerId}:{first.entryId}"]
        txnraw.end_ok(raw, txn)
        txnraw.end_ok(raw, acking, commit=False)
        stats = api.ok("GET", f"{V3}/transactionBufferStats/public/default/{short}")
        assert stats["ongoingTxnSize"] == 0 and stats["committedTxnCount"] == 1
        acks = api.ok("GET", f"{V3}/pendingAckStats/public/default/{short}/s")
        assert acks["ongoingTxnSize"] == 0 and acks["abortedTxnCount"] == 1
        status, _ = api.get(f"{V3}/pendingAckStats/public/default/{short}/nosuch")
        assert status == 404
        status, text = api.get("/metrics")
        assert status == 200
        assert "pulsar_txn_tb_committed_total" in text and "pulsar_txn_tp_aborted_count_total" in text
    finally:
        raw.close()


def test_compaction_leaves_out_open_and_aborted_transactions(
        broker: StandaloneBroker, api: Api, client: pulsar.Client) -> None:
    short = f"txn-compact-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{short}"
    path = f"/admin/v2/persistent/public/default/{short}"
    raw = connected(broker.service_url)
    try:
        aborted, still_open = txnraw.begin(raw, topic), txnraw.begin(raw, topic)
        txnraw.producer(raw, topic)
        txnraw.send_ok(raw, 1, 0, b"k1-v1", key="k1")
        txnraw.send_ok(raw, 1, 1, b"k1-aborted", aborted, key="k1")
        txnraw.send_ok(raw, 1, 2, b"k2-v1", key="k2")
        txnraw.end_ok(raw, aborted, commit=False)
        txnraw.send_ok(raw, 1, 3, b"k2-open", still_open, key="k2")
        txnraw.send_ok(raw, 1, 4, b"k1-later", key="k1")  # after the open one: waits
        api.ok("PUT", f"{path}/compaction")
        wait_until(lambda: api.ok("GET", f"{path}/compaction")["status"] == "SUCCESS", 30,
                   "compaction")
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        seen = []
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=10_000)
            seen.append((msg.partition_key(), msg.data()))
        reader.close()
        assert seen == [("k1", b"k1-v1"), ("k2", b"k2-v1")]
    finally:
        raw.close()
